//! `State::apply`: one command in, one reply and its events out. Every rule
//! of SPEC.md and DESIGN.md §2-4 lives here, once. Checks run before any
//! change, so a rejected command leaves the state exactly as it was.

use std::hash::Hasher;

use crate::auth::{check_key, KeyRefusal};
use crate::book::NIL;
use crate::calendar::market_ticker;
use crate::command::{AccountFlag, Command, NewKey, NewOrder, SeriesConfig, Stamped, VenueConfig};
use crate::event::{Event, OrderUpdate, Phase, Top};
use crate::fees::{fee_cents, max_fee_per_contract};
use crate::hash::StableHasher;
use crate::limits::*;
use crate::reply::{ErrorCode, Reject, Reply};
use crate::state::{
    position_key, Account, Fill, Key, Market, Order, Pause, Position, Series, State, Trade,
};
use crate::types::{
    flip, price_in_range, AccountId, Action, Cents, KeyIdx, KeyLimits, MarketId, MarketStatus,
    OrderId, OrderStatus, Outcome, PriceCents, TimeInForce,
};
use crate::validate::{is_key_id, is_market_ticker, is_series_ticker, is_symbol};
use crate::wire::dollars;

/// What a dry run of matching found, before anything changes.
struct DryRun {
    crosses: bool,
    self_trade: bool,
    would_fill: u32,
    /// What those fills cost the order (a buy) or bring it (a sell), each
    /// at the order's own price of its trade: the resting order's price.
    fill_cents: Cents,
    /// The part of `fill_cents` of a buy filled against resting buys of the
    /// other outcome: new pairs, which grow the market's collateral by that
    /// much more than the resting buys they use up. A fill against a
    /// resting sell only passes contracts on. 0 for a sell.
    mint_cents: Cents,
}

/// Which permission a command needs.
#[derive(Clone, Copy)]
enum Need {
    /// A valid key, whatever its scopes (GET /account: a key sees itself).
    Any,
    Read,
    Trade,
}

impl State {
    /// Applies one stamped command. Events are appended to `events` in the
    /// order the changes happened; the reply is for the caller.
    pub fn apply(&mut self, stamped: &Stamped, events: &mut Vec<Event>) -> Reply {
        assert!(
            stamped.seq > self.last_seq,
            "seq {} after {}: the input must stamp in order",
            stamped.seq,
            self.last_seq
        );
        let first_event = events.len();
        self.last_seq = stamped.seq;
        // Time never goes backwards inside the venue, whatever the stamp says.
        self.now_ms = self.now_ms.max(stamped.ts_ms.min(TS_MS_MAX));
        self.advance_time(events);
        self.evict_if_due(events);
        let reply = self.dispatch(&stamped.command, events);
        let mut hasher = StableHasher::resume(self.event_hash);
        for event in &events[first_event..] {
            event.digest(&mut hasher);
        }
        self.event_hash = hasher.finish();
        self.events_total += (events.len() - first_event) as u64;
        reply
    }

    /// Starts loading the memory `command` will first touch that is most
    /// likely out of cache: a new order's slot in the idempotency index, a
    /// cancelled order's record. Drivers call it for the next command before
    /// they apply the current one, so that the miss overlaps that work.
    /// A hint: it changes nothing, and skipping it changes no answer.
    #[inline]
    pub fn prefetch(&self, command: &Command) {
        match command {
            Command::PlaceOrder { key, order } => {
                self.prefetch_client_order(*key, order);
            }
            Command::CancelOrder { order_id, .. } => {
                if let Some(order) = self.order(*order_id) {
                    crate::hint::prefetch(order);
                }
            }
            _ => {}
        }
    }

    /// Starts loading the idempotency slot of a new order through `key`;
    /// says the slot's hash (`None` for a key that does not exist).
    #[inline]
    fn prefetch_client_order(&self, key: KeyIdx, new: &NewOrder) -> Option<u64> {
        let hash = new.client_order_id.index_hash(self.key(key)?.account);
        self.client_orders.prefetch(hash);
        Some(hash)
    }

    fn dispatch(&mut self, command: &Command, events: &mut Vec<Event>) -> Reply {
        match command {
            Command::Tick => Reply::Ok,
            Command::Price {
                symbol,
                price_e8,
                t_ms,
            } => self.price(symbol, *price_e8, *t_ms, events),
            Command::Configure(config) => self.configure(config),
            Command::SetRetention { tail_ms } => self.set_retention(*tail_ms),
            Command::SetRules { version } => self.set_rules(*version, events),
            Command::CreateSeries(config) => self.create_series(config, events),
            Command::CreateAccount => self.create_account(),
            Command::Deposit { account, cents } => self.deposit(*account, *cents, events),
            Command::Withdraw { account, cents } => self.withdraw(*account, *cents, events),
            Command::SetAccountFlag {
                account,
                flag,
                value,
            } => self.set_flag(*account, *flag, *value, events),
            Command::SetAccountRiskCap { account, cents } => self.set_risk_cap(*account, *cents),
            Command::IssueKey(new_key) => self.issue_key(new_key, events),
            Command::RevokeKey { key_id } => self.revoke_key(key_id, events),
            Command::SetKeyLimits { key_id, limits } => self.set_key_limits(key_id, limits, events),
            Command::PauseTrading { until_ts_ms } => self.pause_trading(*until_ts_ms, events),
            Command::ResumeTrading => {
                self.pause = None;
                events.push(Event::Trading {
                    paused: false,
                    until_ts_ms: None,
                });
                Reply::Ok
            }
            Command::PlaceOrder { key, order } => self.place_order(*key, order, events),
            Command::CancelOrder { key, order_id } => self.cancel_order(*key, *order_id, events),
            Command::CancelAll {
                key,
                market,
                series,
            } => self.cancel_all(*key, market.as_deref(), series.as_deref(), events),
        }
    }

    // ----- authentication -------------------------------------------------

    /// The key behind a command, if it may act and has the permission.
    fn authorize(&self, idx: KeyIdx, need: Need) -> Result<&Key, Reject> {
        let unauthorized = |r: KeyRefusal| Reject::new(ErrorCode::Unauthorized, r.message());
        let key = self
            .key(idx)
            .ok_or_else(|| unauthorized(KeyRefusal::Invalid))?;
        let suspended = self.account(key.account).is_none_or(|a| a.suspended);
        check_key(key, suspended, self.now_ms, self.config.environment, None)
            .map_err(unauthorized)?;
        let (allowed, name) = match need {
            Need::Any => (true, ""),
            Need::Read => (key.scopes.read, "read"),
            Need::Trade => (key.scopes.trade, "trade"),
        };
        if !allowed {
            return Err(Reject::new(
                ErrorCode::Forbidden,
                format!("This API key lacks the {name} permission."),
            ));
        }
        Ok(key)
    }

    /// Read access for queries; public so the query layer shares the rule.
    pub fn authorize_read(&self, idx: KeyIdx) -> Result<&Key, Reject> {
        self.authorize(idx, Need::Read)
    }

    /// A valid key, whatever its scopes (GET /account).
    pub fn authorize_any(&self, idx: KeyIdx) -> Result<&Key, Reject> {
        self.authorize(idx, Need::Any)
    }

    // ----- time and prices --------------------------------------------------

    /// Lists, opens and closes windows that are due at `now_ms`.
    fn advance_time(&mut self, events: &mut Vec<Event>) {
        if self.now_ms < self.next_due_ts_ms {
            return;
        }
        for series in 0..self.series.len() {
            self.list_windows(series as u32, events);
        }
        let mut i = 0;
        while i < self.active_markets.len() {
            let id = self.active_markets[i];
            self.step_market(id, events);
            if self.markets[id as usize].status == MarketStatus::Settled {
                self.active_markets.remove(i);
            } else {
                i += 1;
            }
        }
        self.next_due_ts_ms = self.compute_next_due();
    }

    /// The earliest time a listing, opening or closing falls due.
    fn compute_next_due(&self) -> u64 {
        let listing = self.series.iter().map(|s| {
            s.next_open_ts_ms
                .saturating_sub(u64::from(s.config.list_ahead) * s.config.window_ms)
        });
        let markets = self.active_markets.iter().filter_map(|&id| {
            let m = &self.markets[id as usize];
            match m.status {
                MarketStatus::Scheduled if self.now_ms < m.open_ts_ms => Some(m.open_ts_ms),
                // Due to open but waiting for its first print: close time.
                MarketStatus::Scheduled | MarketStatus::Open => Some(m.close_ts_ms),
                _ => None,
            }
        });
        listing.chain(markets).min().unwrap_or(u64::MAX)
    }

    fn list_windows(&mut self, series_id: u32, events: &mut Vec<Event>) {
        let now = self.now_ms;
        let s = &mut self.series[series_id as usize];
        let window = s.config.window_ms;
        // Windows that closed while the venue was not running are skipped.
        let current = now / window * window;
        s.next_open_ts_ms = s.next_open_ts_ms.max(current);
        let horizon = now.saturating_add(u64::from(s.config.list_ahead) * window);
        while s.next_open_ts_ms <= horizon {
            let open = s.next_open_ts_ms;
            let close = open + window;
            s.next_open_ts_ms = close;
            let ticker = market_ticker(&s.config.ticker, open, close);
            let id = self.markets.len() as MarketId;
            s.markets.push(id);
            events.push(Event::MarketListed {
                market: id,
                ticker: ticker.clone(),
                series: s.config.ticker.clone(),
            });
            self.market_ids.insert(ticker.clone(), id);
            self.markets.push(Market {
                id,
                series: series_id,
                ticker,
                open_ts_ms: open,
                close_ts_ms: close,
                status: MarketStatus::Scheduled,
                price_to_beat_e8: None,
                settlement_price_e8: None,
                result: None,
                settled_ts_ms: None,
                book: Default::default(),
                last_price: None,
                pairs: 0,
                open_interest: [0; 2],
                resting_buy_notional: 0,
                trades: Vec::new(),
                history: false,
            });
            self.active_markets.push(id);
        }
    }

    /// Moves one market along its lifecycle as far as time and prints allow.
    fn step_market(&mut self, id: MarketId, events: &mut Vec<Event>) {
        let now = self.now_ms;
        let (status, open_ts, close_ts) = {
            let m = &self.markets[id as usize];
            (m.status, m.open_ts_ms, m.close_ts_ms)
        };
        let symbol = self
            .series_of(&self.markets[id as usize])
            .config
            .symbol
            .clone();
        let prints = self.prices.get(&symbol);
        if status == MarketStatus::Scheduled && now >= open_ts && now < close_ts {
            // DESIGN §2: the last print at or before the open. It is final
            // only once a print after the open has arrived (a symbol's prints
            // never go back in time; a feed's print of just before the open
            // may reach the sequencer after it), so the window waits for
            // one. With no print at or before the open it opens on that
            // first print after (a late open, documented).
            // (Rules 0: at the first command after the open, on what the
            // state held then.)
            let beat = prints.and_then(|p| {
                if self.rules >= 1 {
                    p.first_after(open_ts)
                        .map(|after| p.last_at_or_before(open_ts).unwrap_or(after))
                } else {
                    p.last_at_or_before(open_ts)
                        .or_else(|| p.first_after(open_ts))
                }
            });
            if let Some(beat) = beat {
                let m = &mut self.markets[id as usize];
                m.status = MarketStatus::Open;
                m.price_to_beat_e8 = Some(beat);
                events.push(Event::Lifecycle {
                    market: id,
                    phase: Phase::Open {
                        price_to_beat_e8: Some(beat),
                    },
                    ts_ms: now,
                });
            }
        }
        let status = self.markets[id as usize].status;
        if matches!(status, MarketStatus::Scheduled | MarketStatus::Open) && now >= close_ts {
            self.close_market(id, events);
        }
        if self.markets[id as usize].status == MarketStatus::Closed {
            let settle = self
                .prices
                .get(&symbol)
                .and_then(|p| p.first_at_or_after(close_ts));
            if let Some(price) = settle {
                self.settle_market(id, price, events);
            }
        }
    }

    fn close_market(&mut self, id: MarketId, events: &mut Vec<Event>) {
        let top_before = self.top(id);
        let resting = self.resting_orders_of_market(id);
        self.cancel_resting_levels(&resting, events);
        // The emptied book is a change of top of book for ticker subscribers.
        self.emit_ticker_if_changed(id, top_before, events);
        let m = &mut self.markets[id as usize];
        debug_assert_eq!(m.book.resting_orders(), 0);
        m.book.release_checksum_cache();
        m.status = MarketStatus::Closed;
        events.push(Event::Lifecycle {
            market: id,
            phase: Phase::Closed,
            ts_ms: self.now_ms,
        });
    }

    /// Orders resting in a market, oldest level first on each side.
    fn resting_orders_of_market(&self, id: MarketId) -> Vec<OrderId> {
        let book = &self.markets[id as usize].book;
        let mut out = Vec::with_capacity(book.resting_orders() as usize);
        for outcome in [Outcome::Up, Outcome::Down] {
            let prices: Vec<PriceCents> =
                book.side(outcome).top(usize::MAX).map(|(p, _)| p).collect();
            for price in prices {
                let mut node = book.head(outcome, price);
                while node != NIL {
                    out.push(book.node(node).order);
                    node = book.next(node);
                }
            }
        }
        out
    }

    fn settle_market(&mut self, id: MarketId, settlement: i64, events: &mut Vec<Event>) {
        let now = self.now_ms;
        let (beat, pairs) = {
            let m = &self.markets[id as usize];
            (m.price_to_beat_e8, m.pairs)
        };
        let result = beat.map(|beat| {
            if settlement >= beat {
                Outcome::Up
            } else {
                Outcome::Down
            }
        });
        let mut paid: Cents = 0;
        for account in &mut self.accounts {
            for outcome in [Outcome::Up, Outcome::Down] {
                let Some(position) = account.positions.remove(&position_key(id, outcome)) else {
                    continue;
                };
                debug_assert_eq!(position.committed, 0, "no sell rests after the close");
                account.position_cost -= position.cost;
                if result == Some(outcome) {
                    let payout = position.count as Cents * PAYOUT_CENTS;
                    account.cash += payout;
                    paid += payout;
                }
                events.push(Event::Position {
                    account: account.id,
                    market: id,
                    outcome,
                    count: 0,
                    cost: 0,
                });
                events.push(Event::Balance {
                    account: account.id,
                    cash: account.cash,
                    held: account.held,
                });
            }
        }
        // Every pair minted pays exactly one winning contract.
        assert!(
            result.is_none() || paid == pairs as Cents * PAYOUT_CENTS,
            "payout equals collateral"
        );
        self.ledger.payouts += paid;
        let m = &mut self.markets[id as usize];
        m.pairs = 0;
        m.open_interest = [0; 2];
        m.status = MarketStatus::Settled;
        m.settlement_price_e8 = Some(settlement);
        m.result = result;
        m.settled_ts_ms = Some(now);
        self.retention.settled.push_back(id);
        events.push(Event::Lifecycle {
            market: id,
            phase: Phase::Settled {
                result,
                settlement_price_e8: Some(settlement),
            },
            ts_ms: now,
        });
    }

    fn set_rules(&mut self, version: u32, events: &mut Vec<Event>) -> Reply {
        if version > RULES_CURRENT {
            return Reply::reject(
                ErrorCode::BadRequest,
                format!(
                    "rules version {version} is newer than this build's ({RULES_CURRENT}): replay this journal with a newer build"
                ),
            );
        }
        if version < self.rules {
            return Reply::reject(
                ErrorCode::BadRequest,
                format!(
                    "rules version {version} is older than the venue's ({})",
                    self.rules
                ),
            );
        }
        let before = std::mem::replace(&mut self.rules, version);
        // Rules 2: a suspended account has nothing resting. Accounts
        // suspended under older rules kept their orders; they go now.
        if before < 2 && version >= 2 {
            let suspended: Vec<AccountId> = self
                .accounts
                .iter()
                .filter(|a| a.suspended && !a.resting.is_empty())
                .map(|a| a.id)
                .collect();
            for account in suspended {
                self.cancel_all_of(account, events);
            }
        }
        Reply::Ok
    }

    fn price(&mut self, symbol: &str, price_e8: i64, t_ms: u64, events: &mut Vec<Event>) -> Reply {
        if !is_symbol(symbol) {
            return Reply::reject(
                ErrorCode::BadRequest,
                "symbol must be upper case, such as AAPL or X:BTCUSD",
            );
        }
        if price_e8 <= 0 {
            return Reply::reject(ErrorCode::BadRequest, "price must be positive");
        }
        if t_ms > TS_MS_MAX {
            return Reply::reject(ErrorCode::BadRequest, "t_ms is out of range");
        }
        if self.rules >= 1 && t_ms > self.now_ms.saturating_add(PRINT_AHEAD_MS_MAX) {
            return Reply::reject(
                ErrorCode::BadRequest,
                format!(
                    "t_ms is more than {} seconds ahead of the exchange's clock",
                    PRINT_AHEAD_MS_MAX / 1000
                ),
            );
        }
        let prints = self.prices.entry(symbol.to_string()).or_default();
        if prints.latest().is_some_and(|(last, _)| t_ms < last) {
            return Reply::reject(
                ErrorCode::BadRequest,
                "t_ms is before the symbol's last print",
            );
        }
        prints.prints.push((t_ms, price_e8));
        if prints.prints.len() > 2 * PRICE_HISTORY_PER_SYMBOL_MAX {
            prints.prints.drain(..PRICE_HISTORY_PER_SYMBOL_MAX);
        }
        events.push(Event::Price {
            symbol: symbol.to_string(),
            price_e8,
            t_ms,
        });
        // Markets waiting for a first print or a settlement print may move.
        let waiting: Vec<MarketId> = self
            .active_markets
            .iter()
            .copied()
            .filter(|&id| {
                let m = &self.markets[id as usize];
                let due = match m.status {
                    MarketStatus::Scheduled => self.now_ms >= m.open_ts_ms,
                    MarketStatus::Closed => true,
                    _ => false,
                };
                due && self.series[m.series as usize].config.symbol == symbol
            })
            .collect();
        for id in waiting {
            self.step_market(id, events);
        }
        self.active_markets
            .retain(|&id| self.markets[id as usize].status != MarketStatus::Settled);
        self.next_due_ts_ms = self.compute_next_due();
        Reply::Ok
    }

    // ----- operator commands ----------------------------------------------

    fn configure(&mut self, config: &VenueConfig) -> Reply {
        if !(1..=MONEY_CENTS_MAX).contains(&config.account_risk_cap_cents) {
            return Reply::reject(
                ErrorCode::BadRequest,
                "account_risk_cap must be positive and at most $10,000,000,000",
            );
        }
        self.config = config.clone();
        Reply::Ok
    }

    fn create_series(&mut self, config: &SeriesConfig, events: &mut Vec<Event>) -> Reply {
        if let Err(reject) = check_series(config) {
            return reject.into();
        }
        if self.series_ids.contains_key(&config.ticker) {
            return Reply::reject(
                ErrorCode::BadRequest,
                format!("series {} already exists", config.ticker),
            );
        }
        let id = self.series.len() as u32;
        self.series_ids.insert(config.ticker.clone(), id);
        self.series.push(Series {
            id,
            config: config.clone(),
            next_open_ts_ms: 0,
            markets: Vec::new(),
        });
        self.next_due_ts_ms = 0;
        self.advance_time(events);
        Reply::Ok
    }

    fn create_account(&mut self) -> Reply {
        let id = self.accounts.len() as AccountId + 1;
        self.accounts.push(Account {
            id,
            cash: 0,
            held: 0,
            position_cost: 0,
            terms_accepted: false,
            trading_allowed: false,
            suspended: false,
            risk_cap: None,
            positions: Default::default(),
            orders: Default::default(),
            fills: Default::default(),
            last_evicted_fill: 0,
            resting: Vec::new(),
            created_ts_ms: self.now_ms,
        });
        Reply::AccountCreated { account: id }
    }

    fn known_account(&self, id: AccountId) -> Result<&Account, Reject> {
        self.account(id)
            .ok_or_else(|| Reject::new(ErrorCode::NotFound, format!("account {id} does not exist")))
    }

    fn deposit(&mut self, id: AccountId, cents: Cents, events: &mut Vec<Event>) -> Reply {
        if let Err(reject) = self.known_account(id) {
            return reject.into();
        }
        if let Err(reject) = check_amount(cents) {
            return reject.into();
        }
        let account = self.account_mut(id).expect("checked");
        if account.cash + cents > MONEY_CENTS_MAX {
            return Reply::reject(
                ErrorCode::LimitExceeded,
                "the account would hold more than $10,000,000,000",
            );
        }
        account.cash += cents;
        let (cash, held) = (account.cash, account.held);
        self.ledger.deposits += cents;
        events.push(Event::Balance {
            account: id,
            cash,
            held,
        });
        Reply::Ok
    }

    fn withdraw(&mut self, id: AccountId, cents: Cents, events: &mut Vec<Event>) -> Reply {
        let account = match self.known_account(id) {
            Ok(a) => a,
            Err(reject) => return reject.into(),
        };
        if let Err(reject) = check_amount(cents) {
            return reject.into();
        }
        if cents > account.buying_power() {
            return Reply::reject(
                ErrorCode::InsufficientBalance,
                format!(
                    "withdrawal of ${} exceeds buying power of ${}",
                    dollars(cents),
                    dollars(account.buying_power())
                ),
            );
        }
        let account = self.account_mut(id).expect("checked");
        account.cash -= cents;
        let (cash, held) = (account.cash, account.held);
        self.ledger.withdrawals += cents;
        events.push(Event::Balance {
            account: id,
            cash,
            held,
        });
        Reply::Ok
    }

    fn set_flag(
        &mut self,
        id: AccountId,
        flag: AccountFlag,
        value: bool,
        events: &mut Vec<Event>,
    ) -> Reply {
        let Some(account) = self.account_mut(id) else {
            return Reply::reject(ErrorCode::NotFound, format!("account {id} does not exist"));
        };
        match flag {
            AccountFlag::TermsAccepted => account.terms_accepted = value,
            AccountFlag::TradingAllowed => account.trading_allowed = value,
            AccountFlag::Suspended => account.suspended = value,
        }
        events.push(Event::Account {
            account: id,
            terms_accepted: account.terms_accepted,
            trading_allowed: account.trading_allowed,
            suspended: account.suspended,
        });
        // Rules 2: a suspended account cannot cancel (its keys get 401), so
        // nothing of it may go on trading: its resting orders are cancelled
        // and their holds released. (Rules 1 left them on the book, where
        // they still filled.)
        if flag == AccountFlag::Suspended && value && self.rules >= 2 {
            self.cancel_all_of(id, events);
        }
        Reply::Ok
    }

    fn set_risk_cap(&mut self, id: AccountId, cents: Option<Cents>) -> Reply {
        if cents.is_some_and(|c| !(1..=MONEY_CENTS_MAX).contains(&c)) {
            return Reply::reject(
                ErrorCode::BadRequest,
                "risk cap must be positive and at most $10,000,000,000",
            );
        }
        let Some(account) = self.account_mut(id) else {
            return Reply::reject(ErrorCode::NotFound, format!("account {id} does not exist"));
        };
        account.risk_cap = cents;
        Reply::Ok
    }

    fn issue_key(&mut self, new: &NewKey, events: &mut Vec<Event>) -> Reply {
        if let Err(reject) = self.known_account(new.account) {
            return reject.into();
        }
        if let Err(reject) = check_new_key(new) {
            return reject.into();
        }
        if self.key_ids.contains_key(&new.key_id) {
            return Reply::reject(
                ErrorCode::BadRequest,
                format!("key_id {} is already taken", new.key_id),
            );
        }
        if self.active_keys(new.account) >= KEYS_ACTIVE_PER_ACCOUNT_MAX {
            return Reply::reject(
                ErrorCode::LimitExceeded,
                format!(
                    "account {} already has {KEYS_ACTIVE_PER_ACCOUNT_MAX} active keys",
                    new.account
                ),
            );
        }
        let idx = self.keys.len() as KeyIdx;
        let key = Key {
            idx,
            key_id: new.key_id.clone(),
            fingerprint: new.fingerprint,
            account: new.account,
            name: new.name.clone(),
            environment: new.environment,
            scopes: new.scopes,
            limits: effective_limits(&new.limits, new.scopes.trade),
            ip_allowlist: new.ip_allowlist.clone(),
            created_ts_ms: self.now_ms,
            expires_ts_ms: new
                .expires_days
                .map(|d| self.now_ms + u64::from(d) * DAY_MS),
            revoked_ts_ms: None,
            day: self.now_ms / DAY_MS,
            day_used_cents: 0,
            resting_orders: 0,
            resting_by_market: Default::default(),
        };
        self.key_ids.insert(key.key_id.clone(), idx);
        events.push(Event::Key(Box::new(key.clone())));
        self.keys.push(key);
        Reply::KeyIssued { key: idx }
    }

    fn key_idx(&self, key_id: &str) -> Result<KeyIdx, Reject> {
        self.key_ids
            .get(key_id)
            .copied()
            .ok_or_else(|| Reject::new(ErrorCode::NotFound, format!("key {key_id} does not exist")))
    }

    fn revoke_key(&mut self, key_id: &str, events: &mut Vec<Event>) -> Reply {
        let idx = match self.key_idx(key_id) {
            Ok(idx) => idx,
            Err(reject) => return reject.into(),
        };
        let now = self.now_ms;
        let key = &mut self.keys[idx as usize];
        if key.revoked_ts_ms.is_none() {
            key.revoked_ts_ms = Some(now);
            events.push(Event::Key(Box::new(key.clone())));
        }
        Reply::Ok
    }

    fn set_key_limits(
        &mut self,
        key_id: &str,
        limits: &KeyLimits,
        events: &mut Vec<Event>,
    ) -> Reply {
        let idx = match self.key_idx(key_id) {
            Ok(idx) => idx,
            Err(reject) => return reject.into(),
        };
        if let Err(reject) = check_limits_shape(limits) {
            return reject.into();
        }
        let key = &mut self.keys[idx as usize];
        key.limits = effective_limits(limits, key.scopes.trade);
        events.push(Event::Key(Box::new(key.clone())));
        Reply::Ok
    }

    fn pause_trading(&mut self, until: Option<u64>, events: &mut Vec<Event>) -> Reply {
        match until {
            Some(u) if u > TS_MS_MAX => {
                return Reply::reject(
                    ErrorCode::BadRequest,
                    format!("until is past the largest time, {TS_MS_MAX} epoch ms"),
                )
            }
            // Epoch seconds of any time since 1973 are below this.
            Some(u) if u <= self.now_ms && u < 100_000_000_000 => {
                return Reply::reject(
                    ErrorCode::BadRequest,
                    "until must be a time in the future, in epoch milliseconds (this looks like seconds)",
                )
            }
            Some(u) if u <= self.now_ms => {
                return Reply::reject(ErrorCode::BadRequest, "until must be a time in the future")
            }
            _ => {}
        }
        self.pause = Some(Pause {
            since_ts_ms: self.now_ms,
            until_ts_ms: until,
        });
        events.push(Event::Trading {
            paused: true,
            until_ts_ms: until,
        });
        Reply::Ok
    }

    // ----- order entry --------------------------------------------------------

    fn place_order(&mut self, key_idx: KeyIdx, new: &NewOrder, events: &mut Vec<Event>) -> Reply {
        // The idempotency lookup below is most likely a cache miss: start it
        // now, so that the checks run while it loads. `check_order` changes
        // nothing, so running it before the lookup (and dropping its result
        // when the id is known) answers exactly what checking after would.
        // (A driver that calls `prefetch` ahead has started it already.)
        let hash = self.prefetch_client_order(key_idx, new);
        if let Err(reject) = check_new_order(new) {
            return reject.into();
        }
        let key = match self.authorize(key_idx, Need::Trade) {
            Ok(key) => key,
            Err(reject) => return reject.into(),
        };
        let account_id = key.account;
        // The key exists (it was authorized), so its slot's hash is known.
        let hash = hash.unwrap_or_else(|| new.client_order_id.index_hash(account_id));
        let checked = self.check_order(key_idx, new);
        if let Some(existing) = self.order_by_client_hash(account_id, &new.client_order_id, hash) {
            let order = *self.order(existing).expect("indexed orders exist");
            return if same_order(&order, new) {
                Reply::Order {
                    order,
                    created: false,
                }
            } else {
                Reply::reject(
                    ErrorCode::IdempotencyConflict,
                    format!(
                        "client_order_id {} was already used for a different order",
                        new.client_order_id.as_str()
                    ),
                )
            };
        }
        match checked {
            Ok(dry) => self.execute_order(key_idx, new, hash, dry, events),
            Err(reject) => reject.into(),
        }
    }

    /// Every precondition of a new order, in the order of precedence.
    fn check_order(&self, key_idx: KeyIdx, new: &NewOrder) -> Result<DryRun, Reject> {
        let key = &self.keys[key_idx as usize];
        let account = self.account(key.account).expect("keys belong to accounts");
        if self.is_paused() {
            let until = self.pause.and_then(|p| p.until_ts_ms);
            let message = match until {
                Some(until) => {
                    format!("Trading is paused until {until} (epoch ms). Cancels still work.")
                }
                None => "Trading is paused until further notice. Cancels still work.".to_string(),
            };
            return Err(Reject::new(ErrorCode::TradingPaused, message));
        }
        if key.environment == crate::types::Environment::Test && !self.config.practice_book_open {
            return Err(Reject::new(
                ErrorCode::Forbidden,
                "Test keys cannot place orders yet: the practice book is not open.",
            ));
        }
        if new.action == Action::Buy {
            // SPEC: the message says which is missing; both when both are.
            let missing = match (account.terms_accepted, account.trading_allowed) {
                (true, true) => None,
                (false, true) => Some("accepted the current Terms of Service"),
                (true, false) => Some("allowed trading on its wallet"),
                (false, false) => {
                    Some("accepted the current Terms of Service nor allowed trading on its wallet")
                }
            };
            if let Some(missing) = missing {
                return Err(Reject::new(
                    ErrorCode::Forbidden,
                    format!("The account has not {missing}."),
                ));
            }
        }
        let market = self
            .market(new.market)
            .filter(|m| m.status == MarketStatus::Open)
            .ok_or_else(|| {
                let why = match self.market(new.market).map(|m| m.status) {
                    Some(MarketStatus::Scheduled) => "is not trading yet",
                    Some(MarketStatus::Closed | MarketStatus::Settled) => "is closed",
                    _ => "is not on the order book",
                };
                let name = self.market(new.market).map_or("", |m| m.ticker.as_str());
                Reject::new(
                    ErrorCode::MarketNotOpen,
                    format!("Market {name} {why}.").replace("  ", " "),
                )
            })?;
        let series = self.series_of(market);
        let dry = self.dry_run(market, new, account.id);
        // Cash a buy holds: the account cap and the buying power check it.
        let hold = order_hold(new, series);
        self.check_limits(key, account, market, series, new, &dry, hold)?;
        self.check_balance(account, new, hold)?;
        // SPEC: post_only applies to good_till_canceled only.
        if new.post_only && new.time_in_force == TimeInForce::GoodTillCanceled && dry.crosses {
            return Err(Reject::new(
                ErrorCode::PostOnlyCross,
                "The post_only order would have traded at once.",
            ));
        }
        if dry.self_trade {
            return Err(Reject::new(
                ErrorCode::SelfTrade,
                "The order would trade against the account's own resting order.",
            ));
        }
        Ok(dry)
    }

    #[allow(clippy::too_many_arguments)]
    fn check_limits(
        &self,
        key: &Key,
        account: &Account,
        market: &Market,
        series: &Series,
        new: &NewOrder,
        dry: &DryRun,
        hold: Cents,
    ) -> Result<(), Reject> {
        let exceeded = |message: String| Err(Reject::new(ErrorCode::LimitExceeded, message));
        let notional = self.order_dollars(new, dry);
        if let Some(allowed) = &key.limits.series {
            if !allowed.contains(&series.config.ticker) {
                return exceeded(format!(
                    "Key limit: this key may not trade series {}.",
                    series.config.ticker
                ));
            }
        }
        if let Some(max) = key.limits.max_order_cents {
            if notional as u64 > max {
                let at = if notional == Cents::from(new.count) * Cents::from(new.price) {
                    ""
                } else {
                    " at the prices it would fill at"
                };
                return exceeded(format!(
                    "Key limit: the order is ${}{at}, over this key's max order of ${}.",
                    dollars(notional),
                    dollars(max as Cents)
                ));
            }
        }
        if let Some(max) = key.limits.max_daily_cents {
            let used = if key.day == self.now_ms / DAY_MS {
                key.day_used_cents
            } else {
                0
            };
            if used + notional as u64 > max {
                return exceeded(format!(
                    "Key limit: the order would take this key past its max per day of ${} (${} used today).",
                    dollars(max as Cents),
                    dollars(used as Cents)
                ));
            }
        }
        let rests =
            new.time_in_force == TimeInForce::GoodTillCanceled && dry.would_fill < new.count;
        if let Some(max) = key.limits.max_open_orders {
            if rests && key.resting_in(market.id) >= max {
                return exceeded(format!(
                    "Key limit: this key already has {max} resting orders in market {}, its max open orders per market.",
                    market.ticker
                ));
            }
        }
        if new.action == Action::Buy {
            let cap = self.risk_cap(account);
            if account.at_risk() + hold > cap {
                return exceeded(format!(
                    "Account limit: the order would take the amount at risk to ${}, over the account's cap of ${}.",
                    dollars(account.at_risk() + hold),
                    dollars(cap)
                ));
            }
            let added = if self.rules >= 2 {
                let resting = if rests { new.count - dry.would_fill } else { 0 };
                dry.mint_cents + Cents::from(resting) * Cents::from(new.price)
            } else {
                notional
            };
            let exposure = market.collateral() + market.resting_buy_notional + added;
            if exposure > series.config.market_cap_cents {
                return exceeded(format!(
                    "Market limit: the order would take market {} past its cap of ${} for all users.",
                    market.ticker,
                    dollars(series.config.market_cap_cents)
                ));
            }
        }
        Ok(())
    }

    /// An order's dollars for the key's max order and max per day: the most
    /// it can trade for. A buy never pays more than its limit. A sell fills
    /// at once at the resting buyers' prices, which may be far above its
    /// limit, and later only at its limit (rules 2, the eleventh session).
    /// Rules before 2 took `count x limit` for a sell too, which let a sell
    /// priced at 0.01 into bids at 0.90 trade 90 times the key's max order.
    fn order_dollars(&self, new: &NewOrder, dry: &DryRun) -> Cents {
        let at_limit = Cents::from(new.count) * Cents::from(new.price);
        if self.rules < 2 || new.action == Action::Buy {
            return at_limit;
        }
        dry.fill_cents + Cents::from(new.count - dry.would_fill) * Cents::from(new.price)
    }

    /// Buying power for a buy's `hold`, contracts held for a sell.
    fn check_balance(&self, account: &Account, new: &NewOrder, hold: Cents) -> Result<(), Reject> {
        match new.action {
            Action::Buy => {
                if hold > account.buying_power() {
                    return Err(Reject::new(
                        ErrorCode::InsufficientBalance,
                        format!(
                            "The order needs ${} of buying power (price plus the most its fees can cost); the account has ${}.",
                            dollars(hold),
                            dollars(account.buying_power())
                        ),
                    ));
                }
            }
            Action::Sell => {
                let position = account
                    .positions
                    .get(&position_key(new.market, new.outcome))
                    .copied()
                    .unwrap_or_default();
                let free = position.count - position.committed;
                if u64::from(new.count) > free {
                    return Err(Reject::new(
                        ErrorCode::InsufficientBalance,
                        format!(
                            "The order sells {} {} contracts; the account holds {} not already offered.",
                            new.count,
                            new.outcome.as_str(),
                            free
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Walks what the order would match without changing anything.
    fn dry_run(&self, market: &Market, new: &NewOrder, account: AccountId) -> DryRun {
        let (side, price) = book_place(new);
        let opposite = market.book.side(side.other());
        let mut dry = DryRun {
            crosses: false,
            self_trade: false,
            would_fill: 0,
            fill_cents: 0,
            mint_cents: 0,
        };
        let mut need = new.count;
        let mut level = opposite.best();
        while let Some(best) = level {
            if need == 0 || u16::from(price) + u16::from(best) < 100 {
                break;
            }
            dry.crosses = true;
            let mut node = market.book.head(side.other(), best);
            while node != NIL && need > 0 {
                let n = market.book.node(node);
                if n.account == account {
                    dry.self_trade = true;
                    return dry;
                }
                let take = need.min(n.remaining);
                need -= take;
                dry.would_fill += take;
                let cents = Cents::from(take)
                    * Cents::from(own_price(new.outcome, up_price(side.other(), best)));
                dry.fill_cents += cents;
                if new.action == Action::Buy
                    && self.rules >= 2
                    && self.order(n.order).is_some_and(|o| o.action == Action::Buy)
                {
                    dry.mint_cents += cents;
                }
                node = market.book.next(node);
            }
            level = opposite.next_below(best);
        }
        dry
    }

    /// Places a checked order: holds, bookkeeping, matching, resting.
    /// `client_hash` is its idempotency slot's hash
    /// (`client_order_id.index_hash(account)`), computed once per order.
    fn execute_order(
        &mut self,
        key_idx: KeyIdx,
        new: &NewOrder,
        client_hash: u64,
        dry: DryRun,
        events: &mut Vec<Event>,
    ) -> Reply {
        let now = self.now_ms;
        let market_id = new.market;
        let series = &self.series[self.markets[market_id as usize].series as usize].config;
        let (taker_bps, maker_bps) = (series.taker_fee_bps, series.maker_fee_bps);
        let account_id = self.keys[key_idx as usize].account;
        let id = self.orders.next_id();
        let max_fee = match new.action {
            Action::Buy => max_fee_per_contract(new.price, taker_bps, maker_bps),
            Action::Sell => 0,
        };
        let mut order = Order {
            id,
            account: account_id,
            key: key_idx,
            market: market_id,
            outcome: new.outcome,
            action: new.action,
            price: new.price,
            time_in_force: new.time_in_force,
            post_only: new.post_only,
            status: OrderStatus::Resting,
            count: new.count,
            filled: 0,
            fill_cost: 0,
            fees: 0,
            created_ts_ms: now,
            updated_ts_ms: now,
            client_order_id: new.client_order_id,
            hold: 0,
            max_fee_per_contract: max_fee,
            node: NIL,
            account_slot: 0,
        };
        order.hold = order.hold_formula();
        // The ticker: trades can change anything at the top of the book, so
        // an order that trades compares the whole top before and after; one
        // that trades nothing changes it only by resting (see
        // `emit_ticker_for_level`).
        let top_before = (dry.would_fill > 0).then(|| self.top(market_id));
        let (rest_side, rest_price) = book_place(new);
        let best_before = self.markets[market_id as usize].book.side(rest_side).best();
        let order_dollars = self.order_dollars(new, &dry);
        // Commit cash or contracts for the whole order; fills and the end of
        // the order release them.
        let account = self.account_mut(account_id).expect("key's account");
        account.held += order.hold;
        account.orders.push_back(id);
        if new.action == Action::Sell {
            let position = account
                .positions
                .entry(position_key(market_id, new.outcome))
                .or_default();
            position.committed += u64::from(new.count);
        }
        let key = &mut self.keys[key_idx as usize];
        let today = now / DAY_MS;
        if key.day != today {
            key.day = today;
            key.day_used_cents = 0;
        }
        key.day_used_cents += order_dollars as u64;
        self.client_orders.insert(client_hash, id);
        self.orders.push(order);

        self.match_order(id, dry.would_fill, (taker_bps, maker_bps), events);

        let order = &self.orders[id];
        if order.remaining() > 0 {
            match order.time_in_force {
                TimeInForce::GoodTillCanceled => self.rest(id, events),
                TimeInForce::ImmediateOrCancel => {
                    self.orders[id].status = OrderStatus::Canceled;
                    self.release_remainder(id);
                }
            }
        }
        let order = &self.orders[id];
        debug_assert_eq!(order.hold, order.hold_formula());
        let rested = order.is_resting();
        events.push(Event::Order(OrderUpdate::of(order)));
        self.emit_account(account_id, market_id, new.outcome, events);
        match top_before {
            Some(before) => self.emit_ticker_if_changed(market_id, before, events),
            None if rested => {
                self.emit_ticker_for_level(market_id, rest_price, best_before, events);
            }
            None => {}
        }
        // Copied once, into the reply.
        Reply::Order {
            order: self.orders[id],
            created: true,
        }
    }

    /// Matches an incoming order against the other side, best level first,
    /// oldest order first, at the resting order's price.
    fn match_order(
        &mut self,
        id: OrderId,
        expected_fill: u32,
        rates: (u32, u32),
        events: &mut Vec<Event>,
    ) {
        let taker = &self.orders[id];
        let (side, price) = taker.book_place();
        let opposite = side.other();
        let (taker_market, taker_account, taker_remaining) =
            (taker.market, taker.account, taker.remaining());
        let mut left = taker_remaining;
        while left > 0 {
            let book = &self.markets[taker_market as usize].book;
            let Some(best) = book.side(opposite).best() else {
                break;
            };
            if u16::from(price) + u16::from(best) < 100 {
                break;
            }
            let mut level_delta: i64 = 0;
            while left > 0 {
                let book = &self.markets[taker_market as usize].book;
                let node_index = book.head(opposite, best);
                if node_index == NIL {
                    break;
                }
                let node = *book.node(node_index);
                assert_ne!(
                    node.account, taker_account,
                    "the dry run refused self-trades"
                );
                let qty = left.min(node.remaining);
                left -= qty;
                level_delta -= i64::from(qty);
                let up_price = up_price(opposite, best);
                let market = &mut self.markets[taker_market as usize];
                let maker_left = market.book.reduce(opposite, best, node_index, qty);
                self.trade(id, node.order, qty, up_price, rates, events);
                if maker_left == 0 {
                    self.unrest(node.order);
                }
                let maker = &self.orders[node.order];
                let (account, market, outcome) = (maker.account, maker.market, maker.outcome);
                events.push(Event::Order(OrderUpdate::of(maker)));
                self.emit_account(account, market, outcome, events);
            }
            let checksum = self.markets[taker_market as usize].book.checksum_cached();
            events.push(Event::BookDelta {
                market: taker_market,
                outcome: opposite,
                price: best,
                delta: level_delta,
                checksum,
            });
        }
        assert_eq!(
            taker_remaining - left,
            expected_fill,
            "matching fills what the dry run found"
        );
    }

    /// One trade between the taker and a maker: money, contracts, fees,
    /// collateral, fills and the public trade.
    fn trade(
        &mut self,
        taker: OrderId,
        maker: OrderId,
        qty: u32,
        up_price: PriceCents,
        rates: (u32, u32),
        events: &mut Vec<Event>,
    ) {
        let trade_id = self.trades_total + 1;
        self.trades_total = trade_id;
        let taker_order = &self.orders[taker];
        let (market, taker_outcome, taker_action) =
            (taker_order.market, taker_order.outcome, taker_order.action);
        let maker_action = self.orders[maker].action;
        match (taker_action, maker_action) {
            (Action::Buy, Action::Buy) => self.markets[market as usize].pairs += u64::from(qty),
            (Action::Sell, Action::Sell) => self.markets[market as usize].pairs -= u64::from(qty),
            _ => {}
        }
        self.apply_fill(maker, qty, up_price, rates.1, false, trade_id, events);
        self.apply_fill(taker, qty, up_price, rates.0, true, trade_id, events);
        let trade = Trade {
            trade_id,
            market,
            up_price,
            count: qty,
            taker_outcome,
            taker_action,
            ts_ms: self.now_ms,
        };
        let m = &mut self.markets[market as usize];
        m.last_price = Some(up_price);
        m.trades.push(trade);
        events.push(Event::Trade(trade));
    }

    /// Applies one side of a trade to its order, account and position.
    #[allow(clippy::too_many_arguments)]
    fn apply_fill(
        &mut self,
        id: OrderId,
        qty: u32,
        up_price: PriceCents,
        rate_bps: u32,
        is_taker: bool,
        trade_id: u64,
        events: &mut Vec<Event>,
    ) {
        let now = self.now_ms;
        let fill_id = self.fills.next_id();
        let order = &mut self.orders[id];
        let own_price = own_price(order.outcome, up_price);
        debug_assert!(match order.action {
            Action::Buy => own_price <= order.price,
            Action::Sell => own_price >= order.price,
        });
        let gross = Cents::from(qty) * Cents::from(own_price);
        let fee = fee_cents(rate_bps, qty, up_price);
        let release = match order.action {
            Action::Buy => {
                Cents::from(qty) * (Cents::from(order.price) + order.max_fee_per_contract)
            }
            Action::Sell => 0,
        };
        order.filled += qty;
        order.fill_cost += gross;
        order.fees += fee;
        order.hold -= release;
        order.updated_ts_ms = now;
        if order.filled == order.count {
            order.status = OrderStatus::Executed;
        }
        let (account_id, market, outcome, action, limit) = (
            order.account,
            order.market,
            order.outcome,
            order.action,
            order.price,
        );
        let m = &mut self.markets[market as usize];
        let account = &mut self.accounts[account_id as usize - 1];
        let position = account
            .positions
            .entry(position_key(market, outcome))
            .or_default();
        match action {
            Action::Buy => {
                account.cash -= gross + fee;
                account.held -= release;
                position.count += u64::from(qty);
                position.cost += gross;
                account.position_cost += gross;
                m.open_interest[outcome.index()] += u64::from(qty);
                if !is_taker {
                    m.resting_buy_notional -= Cents::from(qty) * Cents::from(limit);
                }
            }
            Action::Sell => {
                account.cash += gross - fee;
                let before = position.count;
                position.count -= u64::from(qty);
                position.committed -= u64::from(qty);
                let removed = if position.count == 0 {
                    position.cost
                } else {
                    position.cost * Cents::from(qty) / before as Cents
                };
                position.cost -= removed;
                account.position_cost -= removed;
                m.open_interest[outcome.index()] -= u64::from(qty);
            }
        }
        if position.count == 0 && position.committed == 0 {
            account.positions.remove(&position_key(market, outcome));
        }
        account.fills.push_back(fill_id);
        self.ledger.fees += fee;
        let fill = Fill {
            id: fill_id,
            order: id,
            account: account_id,
            market,
            outcome,
            action,
            price: own_price,
            count: qty,
            cost: gross,
            fee,
            is_taker,
            trade_id,
            ts_ms: now,
        };
        self.fills.push(fill);
        events.push(Event::Fill(fill));
    }

    /// Puts what remains of a new order on the book.
    fn rest(&mut self, id: OrderId, events: &mut Vec<Event>) {
        let order = &self.orders[id];
        let (side, price) = order.book_place();
        let (market_id, account, key, action, limit, remaining) = (
            order.market,
            order.account,
            order.key,
            order.action,
            order.price,
            order.remaining(),
        );
        let market = &mut self.markets[market_id as usize];
        let node = market.book.push(side, price, id, account, remaining);
        if action == Action::Buy {
            market.resting_buy_notional += Cents::from(remaining) * Cents::from(limit);
        }
        let checksum = market.book.checksum_cached();
        events.push(Event::BookDelta {
            market: market_id,
            outcome: side,
            price,
            delta: i64::from(remaining),
            checksum,
        });
        self.orders[id].node = node;
        let key = &mut self.keys[key as usize];
        key.resting_orders += 1;
        *key.resting_by_market.entry(market_id).or_default() += 1;
        let resting = &mut self.accounts[account as usize - 1].resting;
        self.orders[id].account_slot = resting.len() as u32;
        resting.push(id);
    }

    /// Bookkeeping when a resting order leaves the book fully filled.
    fn unrest(&mut self, id: OrderId) {
        let order = &mut self.orders[id];
        order.node = NIL;
        let (key, account, market) = (order.key, order.account, order.market);
        let slot = order.account_slot as usize;
        let key = &mut self.keys[key as usize];
        key.resting_orders -= 1;
        if let Some(n) = key.resting_by_market.get_mut(&market) {
            *n -= 1;
            if *n == 0 {
                key.resting_by_market.remove(&market);
            }
        }
        let resting = &mut self.accounts[account as usize - 1].resting;
        resting.swap_remove(slot);
        if let Some(&moved) = resting.get(slot) {
            self.orders[moved].account_slot = slot as u32;
        }
    }

    /// Releases the cash or contracts an order still commits and gives back
    /// the key's daily notional for the part that will never trade.
    fn release_remainder(&mut self, id: OrderId) {
        let order = &mut self.orders[id];
        let remaining = order.remaining();
        let hold = order.hold;
        order.hold = 0;
        order.updated_ts_ms = self.now_ms;
        let account = &mut self.accounts[order.account as usize - 1];
        account.held -= hold;
        if order.action == Action::Sell {
            let key = position_key(order.market, order.outcome);
            if let Some(position) = account.positions.get_mut(&key) {
                position.committed -= u64::from(remaining);
                if position.count == 0 && position.committed == 0 {
                    account.positions.remove(&key);
                }
            }
        }
        let key = &mut self.keys[order.key as usize];
        if key.day == order.created_ts_ms / DAY_MS {
            key.day_used_cents = key
                .day_used_cents
                .saturating_sub(u64::from(remaining) * u64::from(order.price));
        }
    }

    /// Takes a resting order off the book and cancels it.
    fn cancel_resting(&mut self, id: OrderId, events: &mut Vec<Event>) {
        self.cancel_resting_levels(&[id], events);
    }

    /// Takes resting orders off the book and cancels them. The orders of one
    /// level that follow each other in `ids` leave the book together, with
    /// one book delta for the level (SPEC: one `orderbook_delta` per changed
    /// level, as matching does), then each order's own events.
    fn cancel_resting_levels(&mut self, ids: &[OrderId], events: &mut Vec<Event>) {
        let mut rest = ids;
        while let Some(&first) = rest.first() {
            let level = self.level_of(first);
            let run = rest[1..]
                .iter()
                .position(|&id| self.level_of(id) != level)
                .map_or(rest.len(), |others| others + 1);
            let (market_id, side, price) = level;
            // As in matching: a level holds up to u64 contracts, more than
            // a u32 sum of its orders could count.
            let mut delta: i64 = 0;
            for &id in &rest[..run] {
                let order = &self.orders[id];
                assert!(order.is_resting() && order.node != NIL);
                let (action, limit, node) = (order.action, order.price, order.node);
                debug_assert_eq!(
                    self.markets[market_id as usize].book.node(node).remaining,
                    order.remaining()
                );
                let market = &mut self.markets[market_id as usize];
                let taken = market.book.remove(side, price, node);
                if action == Action::Buy {
                    market.resting_buy_notional -= Cents::from(taken) * Cents::from(limit);
                }
                delta -= i64::from(taken);
            }
            let checksum = self.markets[market_id as usize].book.checksum_cached();
            events.push(Event::BookDelta {
                market: market_id,
                outcome: side,
                price,
                delta,
                checksum,
            });
            for &id in &rest[..run] {
                self.unrest(id);
                self.orders[id].status = OrderStatus::Canceled;
                self.release_remainder(id);
                let order = &self.orders[id];
                let (account, outcome) = (order.account, order.outcome);
                events.push(Event::Order(OrderUpdate::of(order)));
                self.emit_account(account, market_id, outcome, events);
            }
            rest = &rest[run..];
        }
    }

    /// Where a resting order sits: its market, book side and price there.
    fn level_of(&self, id: OrderId) -> (MarketId, Outcome, PriceCents) {
        let order = &self.orders[id];
        let (side, price) = order.book_place();
        (order.market, side, price)
    }

    fn cancel_order(
        &mut self,
        key_idx: KeyIdx,
        order_id: OrderId,
        events: &mut Vec<Event>,
    ) -> Reply {
        let account = match self.authorize(key_idx, Need::Trade) {
            Ok(key) => key.account,
            Err(reject) => return reject.into(),
        };
        if self.orders.evicted(order_id) {
            // Ended before the tail: nothing to cancel, the answer is the
            // order as it stands, from the history store (as a read of it).
            return Reply::OrderInHistory { order_id, account };
        }
        let Some(order) = self.order(order_id).filter(|o| o.account == account) else {
            return crate::query::order_not_found(order_id).into();
        };
        if !order.is_resting() {
            // DESIGN §5: a retried cancel is always safe; the order as it stands.
            return Reply::Order {
                order: *order,
                created: false,
            };
        }
        let (market, side, price) = self.level_of(order_id);
        let best_before = self.markets[market as usize].book.side(side).best();
        self.cancel_resting(order_id, events);
        self.emit_ticker_for_level(market, price, best_before, events);
        Reply::Order {
            order: self.orders[order_id],
            created: false,
        }
    }

    fn cancel_all(
        &mut self,
        key_idx: KeyIdx,
        market: Option<&str>,
        series: Option<&str>,
        events: &mut Vec<Event>,
    ) -> Reply {
        let account_id = match self.authorize(key_idx, Need::Trade) {
            Ok(key) => key.account,
            Err(reject) => return reject.into(),
        };
        if market.is_some_and(|m| !is_market_ticker(m)) {
            return Reply::reject(
                ErrorCode::BadRequest,
                "market_ticker does not match the market ticker pattern",
            );
        }
        if series.is_some_and(|s| !is_series_ticker(s)) {
            return Reply::reject(
                ErrorCode::BadRequest,
                "series_ticker does not match the series ticker pattern",
            );
        }
        let account = self.account(account_id).expect("key's account");
        let mut resting = account.resting.clone();
        resting.sort_unstable(); // oldest first
        resting.retain(|&id| {
            let m = &self.markets[self.orders[id].market as usize];
            market.is_none_or(|t| m.ticker == t)
                && series.is_none_or(|s| self.series[m.series as usize].config.ticker == s)
        });
        self.cancel_many(&resting, events);
        Reply::Canceled { order_ids: resting }
    }

    /// Cancels every resting order of an account (rules 2: it was suspended).
    fn cancel_all_of(&mut self, account: AccountId, events: &mut Vec<Event>) {
        let Some(account) = self.account(account) else {
            return;
        };
        let mut resting = account.resting.clone();
        resting.sort_unstable(); // oldest first
        self.cancel_many(&resting, events);
    }

    /// Cancels resting orders, given oldest first: level by level (oldest
    /// first within a level), one market at a time, so that each changed
    /// level has one book delta and each market one ticker change.
    fn cancel_many(&mut self, resting: &[OrderId], events: &mut Vec<Event>) {
        let mut by_level: Vec<_> = resting.iter().map(|&id| (self.level_of(id), id)).collect();
        by_level.sort_by_key(|&(level, _)| level);
        for run in by_level.chunk_by(|a, b| a.0 .0 == b.0 .0) {
            let market = run[0].0 .0;
            let ids: Vec<OrderId> = run.iter().map(|&(_, id)| id).collect();
            let top_before = self.top(market);
            self.cancel_resting_levels(&ids, events);
            self.emit_ticker_if_changed(market, top_before, events);
        }
    }

    // ----- events ---------------------------------------------------------------

    /// Top of book on the Up scale and the last trade price.
    pub fn top(&self, market: MarketId) -> Top {
        let m = &self.markets[market as usize];
        let up = m.book.side(Outcome::Up);
        let down = m.book.side(Outcome::Down);
        let up_bid = up.best();
        let down_bid = down.best();
        Top {
            up_bid,
            up_bid_size: up_bid.map_or(0, |p| up.level(p).total),
            up_ask: down_bid.map(flip),
            up_ask_size: down_bid.map_or(0, |p| down.level(p).total),
            last_price: m.last_price,
        }
    }

    fn emit_ticker_if_changed(&self, market: MarketId, before: Top, events: &mut Vec<Event>) {
        let top = self.top(market);
        if top != before {
            events.push(Event::Ticker { market, top });
        }
    }

    /// The ticker after a change of one level's contracts, at `price` on a
    /// side whose best bid was `best_before`, and of nothing else (no
    /// trade): the top changed exactly when the level was at or above that
    /// best (a new best, or the best's size). Below it, neither the top nor
    /// the last price moved. What `emit_ticker_if_changed` would emit, without
    /// reading the top twice.
    fn emit_ticker_for_level(
        &self,
        market: MarketId,
        price: PriceCents,
        best_before: Option<PriceCents>,
        events: &mut Vec<Event>,
    ) {
        if best_before.is_none_or(|best| price >= best) {
            events.push(Event::Ticker {
                market,
                top: self.top(market),
            });
        }
    }

    fn emit_account(
        &self,
        account: AccountId,
        market: MarketId,
        outcome: Outcome,
        events: &mut Vec<Event>,
    ) {
        let a = &self.accounts[account as usize - 1];
        let position = a
            .positions
            .get(&position_key(market, outcome))
            .copied()
            .unwrap_or(Position::default());
        events.push(Event::Position {
            account,
            market,
            outcome,
            count: position.count,
            cost: position.cost,
        });
        events.push(Event::Balance {
            account,
            cash: a.cash,
            held: a.held,
        });
    }
}

/// The Up price of a trade with a resting order at `level` on `side` of
/// the book: resting orders trade at their own price.
fn up_price(side: Outcome, level: PriceCents) -> PriceCents {
    if side == Outcome::Up {
        level
    } else {
        flip(level)
    }
}

/// What one contract of `outcome` changes hands at in a trade at `up_price`.
fn own_price(outcome: Outcome, up_price: PriceCents) -> PriceCents {
    if outcome == Outcome::Up {
        up_price
    } else {
        flip(up_price)
    }
}

/// The side and side-scale price an order rests at.
fn book_place(new: &NewOrder) -> (Outcome, PriceCents) {
    let side = new.action.book_side(new.outcome);
    match new.action {
        Action::Buy => (side, new.price),
        Action::Sell => (side, flip(new.price)),
    }
}

/// Cash a buy holds when it is placed: count x (price + max fee).
fn order_hold(new: &NewOrder, series: &Series) -> Cents {
    match new.action {
        Action::Buy => {
            Cents::from(new.count)
                * (Cents::from(new.price)
                    + max_fee_per_contract(
                        new.price,
                        series.config.taker_fee_bps,
                        series.config.maker_fee_bps,
                    ))
        }
        Action::Sell => 0,
    }
}

/// A deposit's or withdrawal's amount (the admin API checks a new
/// account's opening cash with it before creating the account).
pub fn check_amount(cents: Cents) -> Result<(), Reject> {
    if (1..=MONEY_CENTS_MAX).contains(&cents) {
        Ok(())
    } else {
        Err(Reject::new(
            ErrorCode::BadRequest,
            "amount must be positive and at most $10,000,000,000",
        ))
    }
}

/// SPEC idempotency: "the same order" is every field the client sent.
fn same_order(order: &Order, new: &NewOrder) -> bool {
    order.market == new.market
        && order.outcome == new.outcome
        && order.action == new.action
        && order.price == new.price
        && order.count == new.count
        && order.time_in_force == new.time_in_force
        && order.post_only == new.post_only
}

/// Field checks of a new order, each naming its field.
fn check_new_order(new: &NewOrder) -> Result<(), Reject> {
    if !price_in_range(new.price) {
        return Err(Reject::bad_request(crate::validate::PRICE_REFUSAL));
    }
    if !(ORDER_COUNT_MIN..=ORDER_COUNT_MAX).contains(&new.count) {
        return Err(Reject::bad_request(crate::validate::count_refusal()));
    }
    if !new.client_order_id.is_valid() {
        return Err(Reject::bad_request(
            crate::validate::CLIENT_ORDER_ID_REFUSAL,
        ));
    }
    Ok(())
}

/// A series' settings as `CreateSeries` accepts them; the server checks
/// its configuration with it before it journals anything.
pub fn check_series(config: &SeriesConfig) -> Result<(), Reject> {
    let bad = |m: &str| Err(Reject::bad_request(m));
    if !is_series_ticker(&config.ticker) {
        return bad("series ticker must match ^[a-z0-9][a-z0-9-]{0,63}$");
    }
    if !is_symbol(&config.symbol) {
        return bad("symbol must be upper case, such as AAPL or X:BTCUSD");
    }
    if !(SERIES_WINDOW_MS_MIN..=SERIES_WINDOW_MS_MAX).contains(&config.window_ms)
        || !config.window_ms.is_multiple_of(60_000)
    {
        return bad("window must be whole minutes, from 1 minute to 99 days");
    }
    if config.list_ahead > SERIES_LIST_AHEAD_MAX {
        return bad("list_ahead must be at most 96 windows");
    }
    if config.taker_fee_bps > FEE_BPS_MAX || config.maker_fee_bps > FEE_BPS_MAX {
        return bad("fee rates must be 0 to 1");
    }
    if !(1..=MONEY_CENTS_MAX).contains(&config.market_cap_cents) {
        return bad("market cap must be positive and at most $10,000,000,000");
    }
    Ok(())
}

fn check_limits_shape(limits: &KeyLimits) -> Result<(), Reject> {
    let positive = |v: Option<u64>| v.is_none_or(|v| v > 0 && v <= MONEY_CENTS_MAX as u64);
    if !positive(limits.max_order_cents) {
        return Err(Reject::bad_request(
            "max_order_usd must be positive and at most $10,000,000,000",
        ));
    }
    if !positive(limits.max_daily_cents) {
        return Err(Reject::bad_request(
            "max_daily_usd must be positive and at most $10,000,000,000",
        ));
    }
    if limits.max_open_orders == Some(0) {
        return Err(Reject::bad_request("max_open_orders must be positive"));
    }
    if let Some(series) = &limits.series {
        if series.is_empty() || series.len() > 100 || !series.iter().all(|s| is_series_ticker(s)) {
            return Err(Reject::bad_request(
                "series must be 1 to 100 series tickers",
            ));
        }
    }
    Ok(())
}

fn check_new_key(new: &NewKey) -> Result<(), Reject> {
    if !is_key_id(&new.key_id) {
        return Err(Reject::bad_request("key_id must match ^[a-z0-9]{1,32}$"));
    }
    if new.name.chars().count() > KEY_NAME_LEN_MAX || new.name.chars().any(char::is_control) {
        return Err(Reject::bad_request(
            "name must be at most 64 printable characters",
        ));
    }
    if !new.scopes.read && !new.scopes.trade {
        return Err(Reject::bad_request("scopes must include read or trade"));
    }
    if new
        .expires_days
        .is_some_and(|d| !(KEY_EXPIRY_DAYS_MIN..=KEY_EXPIRY_DAYS_MAX).contains(&d))
    {
        return Err(Reject::bad_request("expiry must be 1 to 365 days"));
    }
    if new.ip_allowlist.len() > KEY_IP_ALLOWLIST_MAX {
        return Err(Reject::bad_request(
            "the IP allowlist holds at most 10 addresses",
        ));
    }
    if let Some(bad) = new
        .ip_allowlist
        .iter()
        .find(|a| a.parse::<core::net::IpAddr>().is_err())
    {
        return Err(Reject::bad_request(format!("{bad:?} is not an IP address")));
    }
    check_limits_shape(&new.limits)
}

/// A trade key without its own max order or max per day gets the spec's
/// defaults, $20 and $500, each on its own.
fn effective_limits(limits: &KeyLimits, trade: bool) -> KeyLimits {
    let mut limits = limits.clone();
    if trade {
        limits
            .max_order_cents
            .get_or_insert(KEY_DEFAULT_MAX_ORDER_CENTS);
        limits
            .max_daily_cents
            .get_or_insert(KEY_DEFAULT_MAX_DAILY_CENTS);
    }
    limits
}
