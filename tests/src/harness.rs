//! A small driver for readable scenarios: a venue with one open market,
//! traders with keys, and orders written as text such as
//! `"buy up 0.55 x10 ioc post_only id=c1"`.

use sequencer::command::{AccountFlag, NewKey, NewOrder, SeriesConfig, Stamped, VenueConfig};
use sequencer::state::Order;
use sequencer::types::{
    AccountId, Action, ClientOrderId, Environment, KeyIdx, KeyLimits, MarketId, Outcome, Scopes,
    TimeInForce,
};
use sequencer::{Command, ErrorCode, Event, Reject, Reply, State};

/// The default series of a scenario: one-minute windows on X:BTCUSD.
pub const SERIES: &str = "btc-1m";
/// Its underlying.
pub const SYMBOL: &str = "X:BTCUSD";
/// 2026-11-21 21:00:00 UTC, a minute boundary.
pub const T0: u64 = 1_795_294_800_000;
/// Window length of the default series.
pub const WINDOW_MS: u64 = 60_000;

/// A venue under test.
pub struct Venue {
    pub state: State,
    pub events: Vec<Event>,
    pub seq: u64,
    pub now: u64,
    next_key: u32,
    next_client_id: u32,
    /// Check every invariant after every command.
    pub check: bool,
    /// Every command applied, as stamped (for journal and replay tests).
    pub log: Vec<Stamped>,
}

/// A trader: an account and one read+trade key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trader {
    pub account: AccountId,
    pub key: KeyIdx,
}

impl Default for Venue {
    fn default() -> Self {
        Self::new()
    }
}

impl Venue {
    /// A venue at `T0` with the default series listed and its first window
    /// open on a price of 100.
    pub fn new() -> Self {
        Self::with_series(Self::default_series())
    }

    /// The series of [`Venue::new`].
    pub fn default_series() -> SeriesConfig {
        SeriesConfig {
            ticker: SERIES.into(),
            symbol: SYMBOL.into(),
            window_ms: WINDOW_MS,
            list_ahead: 2,
            taker_fee_bps: 700,
            maker_fee_bps: 0,
            market_cap_cents: 1_000_000_00,
        }
    }

    /// A venue at `T0` with one series.
    pub fn with_series(series: SeriesConfig) -> Self {
        Self::with_series_under(sequencer::limits::RULES_CURRENT, series)
    }

    /// A venue at `T0` with one series, under business rules `rules` (those
    /// of a journal an older build wrote; 0: before rules were versioned).
    pub fn with_series_under(rules: u32, series: SeriesConfig) -> Self {
        let mut venue = Self::unversioned();
        if rules > 0 {
            venue.ok(Command::SetRules { version: rules });
        }
        venue.ok(Command::Configure(VenueConfig::default()));
        venue.ok(Command::Price {
            symbol: series.symbol.clone(),
            price_e8: 100 * 100_000_000,
            t_ms: T0,
        });
        venue.ok(Command::CreateSeries(series.clone()));
        // The window opens once a print after its open has arrived (the
        // last print at or before the open is final only then): one 1 ms
        // later, within the feed's allowed lead on the venue's clock.
        venue.ok(Command::Price {
            symbol: series.symbol,
            price_e8: 100 * 100_000_000,
            t_ms: T0 + 1,
        });
        venue
    }

    /// A venue with nothing in it but this build's business rules, at `T0`.
    pub fn empty() -> Self {
        let mut venue = Self::unversioned();
        venue.ok(Command::SetRules {
            version: sequencer::limits::RULES_CURRENT,
        });
        venue
    }

    /// A venue with nothing in it at `T0`, under the rules of journals
    /// written before rules were versioned (version 0) until a `SetRules`.
    pub fn unversioned() -> Self {
        Self {
            state: State::default(),
            events: Vec::new(),
            seq: 0,
            now: T0,
            next_key: 0,
            next_client_id: 0,
            check: true,
            log: Vec::new(),
        }
    }

    /// Applies a command at the current time and returns its reply; the
    /// events of this command replace `self.events`.
    pub fn run(&mut self, command: Command) -> Reply {
        self.seq += 1;
        self.events.clear();
        let stamped = Stamped {
            seq: self.seq,
            ts_ms: self.now,
            command,
        };
        let reply = self.state.apply(&stamped, &mut self.events);
        self.log.push(stamped.clone());
        if self.check {
            if let Err(broken) = self.state.check_invariants() {
                panic!("after {stamped:?}: {broken}");
            }
        }
        reply
    }

    /// Runs a command that must succeed.
    pub fn ok(&mut self, command: Command) -> Reply {
        let reply = self.run(command.clone());
        assert!(
            reply.rejection().is_none(),
            "{command:?} was refused: {reply:?}"
        );
        reply
    }

    /// Moves the clock forward and sends a tick.
    pub fn advance(&mut self, ms: u64) {
        self.now += ms;
        self.ok(Command::Tick);
    }

    /// An underlying print at the current time.
    pub fn print(&mut self, price: i64) {
        self.ok(Self::print_of(SYMBOL, price, self.now));
    }

    /// The command printing `symbol` at `dollars`, stamped `t_ms` (which
    /// may differ from the venue's clock, as a feed's does).
    pub fn print_of(symbol: &str, dollars: i64, t_ms: u64) -> Command {
        Command::Price {
            symbol: symbol.into(),
            price_e8: dollars * 100_000_000,
            t_ms,
        }
    }

    /// A funded account with terms accepted and trading allowed, and a key.
    pub fn trader(&mut self, cents: i64) -> Trader {
        self.trader_with(cents, big_limits())
    }

    /// `trader`, its read and trade key bound by `limits`.
    pub fn trader_with(&mut self, cents: i64, limits: KeyLimits) -> Trader {
        let account = self.account(cents);
        let key = self.key(
            account,
            Scopes {
                read: true,
                trade: true,
            },
            limits,
        );
        Trader { account, key }
    }

    /// A funded account able to trade, with no key yet.
    pub fn account(&mut self, cents: i64) -> AccountId {
        let Reply::AccountCreated { account } = self.ok(Command::CreateAccount) else {
            unreachable!()
        };
        if cents > 0 {
            self.ok(Command::Deposit { account, cents });
        }
        self.ok(Command::SetAccountFlag {
            account,
            flag: AccountFlag::TermsAccepted,
            value: true,
        });
        self.ok(Command::SetAccountFlag {
            account,
            flag: AccountFlag::TradingAllowed,
            value: true,
        });
        account
    }

    /// Issues a key on the test environment.
    pub fn key(&mut self, account: AccountId, scopes: Scopes, limits: KeyLimits) -> KeyIdx {
        let new_key = self.new_key(account, scopes, limits);
        let reply = self.run(Command::IssueKey(new_key));
        let Reply::KeyIssued { key } = reply else {
            panic!("key refused: {reply:?}")
        };
        key
    }

    /// A key request with a fresh key id.
    pub fn new_key(&mut self, account: AccountId, scopes: Scopes, limits: KeyLimits) -> NewKey {
        self.next_key += 1;
        NewKey {
            account,
            key_id: format!("k{}", self.next_key),
            fingerprint: [self.next_key as u8; 32],
            name: format!("key {}", self.next_key),
            environment: Environment::Test,
            scopes,
            limits,
            ip_allowlist: Vec::new(),
            expires_days: None,
        }
    }

    /// The market that is open now in the default series.
    pub fn market(&self) -> MarketId {
        self.open_market(SERIES)
    }

    /// The open market of a series.
    pub fn open_market(&self, series: &str) -> MarketId {
        let s = self.state.series_by_ticker(series).expect("series exists");
        *s.markets
            .iter()
            .find(|&&m| {
                self.state.markets[m as usize].status == sequencer::types::MarketStatus::Open
            })
            .expect("an open market")
    }

    /// Parses an order text on the open market; a fresh client_order_id
    /// unless the text gives `id=...`.
    pub fn order(&mut self, text: &str) -> NewOrder {
        let market = self.market();
        self.order_on(market, text)
    }

    /// Parses an order text on a given market.
    pub fn order_on(&mut self, market: MarketId, text: &str) -> NewOrder {
        self.next_client_id += 1;
        parse_order(market, text, &format!("c{}", self.next_client_id))
    }

    /// Places an order from text.
    pub fn place(&mut self, trader: Trader, text: &str) -> Result<Order, Reject> {
        let order = self.order(text);
        self.place_order(trader, order)
    }

    /// Places a prepared order.
    pub fn place_order(&mut self, trader: Trader, order: NewOrder) -> Result<Order, Reject> {
        match self.run(Command::PlaceOrder {
            key: trader.key,
            order,
        }) {
            Reply::Order { order, .. } => Ok(order),
            Reply::Rejected(reject) => Err(reject),
            other => panic!("unexpected reply {other:?}"),
        }
    }

    /// Places an order that must be refused with `code`; returns the message.
    pub fn refused(&mut self, trader: Trader, text: &str, code: ErrorCode) -> String {
        match self.place(trader, text) {
            Err(reject) => {
                assert_eq!(reject.code, code, "{text}: {}", reject.message);
                reject.message
            }
            Ok(order) => panic!("{text} was accepted: {order:?}"),
        }
    }

    /// Cancels an order.
    pub fn cancel(&mut self, trader: Trader, order: u64) -> Result<Order, Reject> {
        match self.run(Command::CancelOrder {
            key: trader.key,
            order_id: order,
        }) {
            Reply::Order { order, .. } => Ok(order),
            Reply::Rejected(reject) => Err(reject),
            other => panic!("unexpected reply {other:?}"),
        }
    }

    /// Buying power of a trader, in cents.
    pub fn buying_power(&self, trader: Trader) -> i64 {
        self.state
            .account(trader.account)
            .expect("account")
            .buying_power()
    }

    /// Cash of a trader, in cents.
    pub fn cash(&self, trader: Trader) -> i64 {
        self.state.account(trader.account).expect("account").cash
    }

    /// Contracts of an outcome held in the open market.
    pub fn position(&self, trader: Trader, outcome: Outcome) -> u64 {
        let key = sequencer::state::position_key(self.market(), outcome);
        self.state
            .account(trader.account)
            .expect("account")
            .positions
            .get(&key)
            .map_or(0, |p| p.count)
    }

    /// The lifecycle steps `market` published in the events on record, in
    /// order.
    pub fn phases(&self, market: MarketId) -> Vec<sequencer::event::Phase> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Lifecycle {
                    market: m, phase, ..
                } if *m == market => Some(*phase),
                _ => None,
            })
            .collect()
    }

    /// The open market's book as `up:p:c,...|down:p:c,...` (the checksum text).
    pub fn book(&self) -> String {
        let market = &self.state.markets[self.market() as usize];
        let mut buf = [0u8; 512];
        let len = market.book.checksum_text(&mut buf);
        String::from_utf8_lossy(&buf[..len]).into_owned()
    }
}

/// Limits large enough not to get in a scenario's way.
pub fn big_limits() -> KeyLimits {
    KeyLimits {
        max_order_cents: Some(1_000_000_00),
        max_daily_cents: Some(1_000_000_000_00),
        max_open_orders: None,
        series: None,
    }
}

/// Parses `"buy up 0.55 x10 [ioc|gtc] [post_only] [id=...]"`.
pub fn parse_order(market: MarketId, text: &str, default_id: &str) -> NewOrder {
    let words: Vec<&str> = text.split_whitespace().collect();
    assert!(
        words.len() >= 4,
        "order text needs action, outcome, price and count: {text}"
    );
    let action = Action::parse(words[0]).expect("buy or sell");
    let outcome = Outcome::parse(words[1]).expect("up or down");
    let price = sequencer::validate::parse_price(words[2])
        .unwrap_or_else(|| words[2].parse::<u8>().expect("price such as 0.55"));
    let count = words[3]
        .trim_start_matches('x')
        .parse()
        .expect("count such as x10");
    let mut order = NewOrder {
        market,
        outcome,
        action,
        price,
        count,
        time_in_force: TimeInForce::GoodTillCanceled,
        post_only: false,
        client_order_id: ClientOrderId::new(default_id).expect("valid id"),
    };
    for word in &words[4..] {
        match *word {
            "ioc" => order.time_in_force = TimeInForce::ImmediateOrCancel,
            "gtc" => order.time_in_force = TimeInForce::GoodTillCanceled,
            "post_only" => order.post_only = true,
            w if w.starts_with("id=") => {
                order.client_order_id = ClientOrderId::new(&w[3..]).expect("valid id")
            }
            other => panic!("unknown word {other} in {text}"),
        }
    }
    order
}
