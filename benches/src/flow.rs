//! The order flow every engine is fed: generated once from a seed, before
//! anything is timed, as stamped commands for the sequencer and as the
//! equivalent operations for the `lobster` reference matcher.
//!
//! # What the flow looks like
//!
//! - Four series (`btc-1m`, `eth-1m`, `sol-1m`, `aapl-1m`) of one-minute
//!   windows, each with its current window open: four live books.
//! - 64 traders, each an account with a large deposit, terms accepted,
//!   trading allowed, and one read+trade key whose limits never bind.
//! - The body (the timed part) is, per command, on a market drawn uniformly:
//!   about 35 % cancels of a resting order (half of them among the newest
//!   quotes of the book), 45 % passive good-till-canceled buys 1-6 cents
//!   behind a drifting fair value, 8 % crossing immediate-or-cancel buys,
//!   5 % crossing good-till-canceled buys, and 7 % sells of contracts the
//!   trader holds (half resting, half crossing IOC). A book deeper than
//!   1,200 orders only cancels; one shallower than 100 only adds quotes.
//!   One underlying print per symbol and simulated second is mixed in, as
//!   the price feed would.
//! - Time: the body is stamped from `T0 + 1 ms` to `T0 + 58 s`, inside the
//!   first one-minute window, so no market opens, closes or settles during
//!   a run (a window transition would cancel every resting order at once
//!   and is a different benchmark). Spread over 58 s, two million commands
//!   arrive at about 34,000 a second, roughly what the gateway can feed.
//!
//! The generator drives a real [`State`] as it goes (untimed), so that every
//! command it writes is one the venue accepts: cancels name orders that
//! rest at that point, sells sell contracts held, and no order would trade
//! against its own account (the venue refuses that whole with SELF_TRADE,
//! while `lobster` has no such rule; avoiding it keeps the two matchers'
//! work identical, which [`Flow::contracts`] lets a test check).
//!
//! # Mapping to `lobster`'s single book
//!
//! Our book has two bid sides, `up` and `down` (DESIGN §2); `lobster` has
//! one book of bids and asks. On the Up scale:
//!
//! | ours            | lobster           |
//! | --------------- | ----------------- |
//! | buy up @ p      | bid @ p           |
//! | sell up @ p     | ask @ p           |
//! | buy down @ q    | ask @ 100 - q     |
//! | sell down @ q   | bid @ 100 - q     |
//!
//! A down bid at `q` is exactly an up ask at `100 - q`, the crossing rule
//! `x + y >= 100` becomes `bid >= ask`, and both trade at the resting
//! order's price with price-time priority, so the same flow gives the same
//! fills in both. `lobster` has no immediate-or-cancel: an IOC is a limit
//! order followed, when something of it rests, by a cancel of its id (two
//! calls, counted as the one command it stands for). Underlying prints have
//! no counterpart and are a no-op for `lobster` (about 4 per 34,000
//! commands).

use lobster::{OrderType, Side};
use sequencer::book::NIL;
use sequencer::command::{AccountFlag, NewKey, NewOrder, SeriesConfig, Stamped, VenueConfig};
use sequencer::hash::stable_hash;
use sequencer::limits::MONEY_CENTS_MAX;
use sequencer::state::position_key;
use sequencer::types::{
    AccountId, Action, ClientOrderId, Environment, KeyIdx, KeyLimits, MarketId, MarketStatus,
    OrderId, OrderStatus, Outcome, PriceCents, Scopes, TimeInForce,
};
use sequencer::{Command, Event, Reply, State};

use crate::rng::SplitMix64;

/// 2026-11-21 21:00:00 UTC, a minute boundary: the open of the window traded.
pub const T0: u64 = 1_795_294_800_000;
/// Window length of every series.
pub const WINDOW_MS: u64 = 60_000;
/// The body's stamps run from `T0 + 1` to `T0 + SPAN_MS`, inside the window.
pub const SPAN_MS: u64 = 58_000;

/// Series ticker, underlying symbol and its starting price in whole units.
const SERIES: [(&str, &str, i64); 4] = [
    ("btc-1m", "X:BTCUSD", 97_000),
    ("eth-1m", "X:ETHUSD", 3_100),
    ("sol-1m", "X:SOLUSD", 140),
    ("aapl-1m", "AAPL", 230),
];

/// A book deeper than this only sees cancels.
const MAX_DEPTH: u32 = 1_200;
/// A book shallower than this only sees new quotes.
const MIN_DEPTH: u32 = 100;
/// Cash each trader deposits: $1 billion, so balance never refuses an order.
const DEPOSIT_CENTS: i64 = 100_000_000_000;

/// How to generate a flow.
#[derive(Clone, Debug)]
pub struct FlowConfig {
    /// Commands in the timed body.
    pub commands: usize,
    /// Seed of the generator; the same seed gives the same flow.
    pub seed: u64,
    /// Accounts trading, one key each.
    pub traders: u32,
}

impl Default for FlowConfig {
    fn default() -> Self {
        Self {
            commands: 2_000_000,
            seed: 0x00c0_ffee_5eed,
            traders: 64,
        }
    }
}

/// One operation for the `lobster` reference matcher.
#[derive(Clone, Copy, Debug)]
pub enum LobsterOp {
    /// A limit order or a cancel on book `book`; an `ioc` limit order is
    /// cancelled right after if part of it rests.
    Order {
        book: u8,
        order: OrderType,
        ioc: bool,
    },
    /// A command with no `lobster` counterpart (an underlying print).
    Skip,
}

/// What a body command is, as the generator meant it (an order meant to
/// rest may still trade when the fair value moved; one meant to cross may
/// find nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label {
    /// A good-till-canceled buy 1-6 cents behind the fair value.
    PassiveBuy,
    /// An immediate-or-cancel buy priced through the touch.
    CrossingIocBuy,
    /// A good-till-canceled buy priced through the touch.
    CrossingGtcBuy,
    /// A good-till-canceled sell above the fair value.
    RestingSell,
    /// An immediate-or-cancel sell priced through the touch.
    CrossingSell,
    /// A cancel of a resting order.
    Cancel,
    /// An underlying print.
    Print,
}

impl Label {
    pub const ALL: [Label; 7] = [
        Self::PassiveBuy,
        Self::CrossingIocBuy,
        Self::CrossingGtcBuy,
        Self::RestingSell,
        Self::CrossingSell,
        Self::Cancel,
        Self::Print,
    ];

    /// Index in [`Label::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::PassiveBuy => "passive GTC buy",
            Self::CrossingIocBuy => "crossing IOC buy",
            Self::CrossingGtcBuy => "crossing GTC buy",
            Self::RestingSell => "resting GTC sell",
            Self::CrossingSell => "crossing IOC sell",
            Self::Cancel => "cancel",
            Self::Print => "underlying print",
        }
    }
}

/// What the body is made of, counted by the generator.
#[derive(Clone, Debug, Default)]
pub struct Mix {
    /// Body commands per [`Label`], by [`Label::index`].
    pub counts: [u64; 7],
    /// Trades (maker-taker pairs) and contracts they moved.
    pub trades: u64,
    pub contracts: u64,
    /// Events the body emitted.
    pub events: u64,
    /// Sum over order-entry commands of the resting orders on the
    /// command's book, for the average depth.
    pub depth_sum: u64,
}

impl Mix {
    /// A description for the report.
    pub fn describe(&self, commands: usize) -> String {
        let n = commands.max(1) as f64;
        let shares: Vec<String> = Label::ALL
            .iter()
            .map(|l| {
                format!(
                    "{} {:.1}%",
                    l.name(),
                    100.0 * self.counts[l.index()] as f64 / n
                )
            })
            .collect();
        let entries = n - self.counts[Label::Print.index()] as f64;
        format!(
            "{}; {} trades ({} contracts); {:.1} events per command; average depth {:.0} orders per book",
            shares.join(", "),
            self.trades,
            self.contracts,
            self.events as f64 / n,
            self.depth_sum as f64 / entries.max(1.0),
        )
    }
}

/// A pre-generated order flow.
pub struct Flow {
    /// The venue configuration, also the first command of `setup`.
    pub venue: VenueConfig,
    /// Configure, prints, series, accounts, deposits, flags and keys; applied
    /// before the clock starts. Seqs `1..=setup.len()`.
    pub setup: Vec<Stamped>,
    /// The timed commands, seqs following the setup's.
    pub body: Vec<Stamped>,
    /// One `lobster` operation per body command, same order.
    pub lobster: Vec<LobsterOp>,
    /// What each body command is, same order.
    pub labels: Vec<Label>,
    /// Number of books (open markets); `lobster` needs one book each.
    pub books: usize,
    pub mix: Mix,
    /// Contracts traded in the body, as the generator's own state saw it.
    pub contracts: u64,
    /// The generator's state at the end: every engine built on the
    /// sequencer must reach exactly this.
    pub event_hash: u64,
    pub state_hash: u64,
    /// The running event hash after each body command, to check runs over a
    /// prefix of the body (the group-commit run).
    pub event_hash_after: Vec<u64>,
}

/// One account and its key.
struct Trader {
    account: AccountId,
    key: KeyIdx,
    next_client_id: u64,
}

/// One open market as the generator tracks it.
struct Market {
    id: MarketId,
    symbol: &'static str,
    /// Fair value in cents on the Up scale; quotes sit around it.
    fair: i32,
    /// The underlying's price times 10^8, a random walk.
    underlying_e8: i64,
    /// Orders placed here that rested when placed; stale entries (filled
    /// since) are dropped when drawn.
    resting: Vec<OrderId>,
}

/// What kind of command the body gets next.
#[derive(Clone, Copy)]
enum Kind {
    Cancel,
    Passive,
    CrossIoc,
    CrossGtc,
    Sell,
}

struct Generator {
    rng: SplitMix64,
    state: State,
    events: Vec<Event>,
    seq: u64,
    now: u64,
    traders: Vec<Trader>,
    markets: Vec<Market>,
    mix: Mix,
    /// What the command being drawn is.
    label: Label,
}

/// Generates the flow of `config`. Takes about a second per million commands.
pub fn generate(config: &FlowConfig) -> Flow {
    assert!(
        config.traders >= 2,
        "self-trade avoidance needs at least two traders"
    );
    let venue = VenueConfig {
        environment: Environment::Test,
        practice_book_open: true,
        account_risk_cap_cents: MONEY_CENTS_MAX,
    };
    let mut g = Generator {
        rng: SplitMix64::new(config.seed),
        state: State::default(),
        events: Vec::with_capacity(256),
        seq: 0,
        now: T0,
        traders: Vec::new(),
        markets: Vec::new(),
        mix: Mix::default(),
        label: Label::Print,
    };
    let setup = g.setup(&venue, config.traders);
    let mut body = Vec::with_capacity(config.commands);
    let mut lobster = Vec::with_capacity(config.commands);
    let mut event_hash_after = Vec::with_capacity(config.commands);
    let mut labels = Vec::with_capacity(config.commands);
    let events_before = g.state.events_total;
    let mut second = T0 / 1000;
    while body.len() < config.commands {
        g.now = T0 + 1 + body.len() as u64 * SPAN_MS / config.commands as u64;
        if g.now / 1000 != second {
            // The price feed: one print per symbol and second.
            second = g.now / 1000;
            for m in 0..g.markets.len() {
                if body.len() == config.commands {
                    break;
                }
                let command = g.print(m);
                body.push(g.apply(command));
                lobster.push(LobsterOp::Skip);
                labels.push(Label::Print);
                event_hash_after.push(g.state.event_hash);
            }
            continue;
        }
        let (command, op) = g.next_command();
        body.push(g.apply(command));
        lobster.push(g.finish_op(op));
        labels.push(g.label);
        event_hash_after.push(g.state.event_hash);
    }
    let contracts = g
        .state
        .markets
        .iter()
        .flat_map(|m| &m.trades)
        .map(|t| u64::from(t.count))
        .sum();
    g.mix.trades = g.state.trades_total;
    g.mix.contracts = contracts;
    g.mix.events = g.state.events_total - events_before;
    for label in &labels {
        g.mix.counts[label.index()] += 1;
    }
    Flow {
        venue,
        setup,
        body,
        lobster,
        labels,
        books: g.markets.len(),
        mix: g.mix,
        contracts,
        event_hash: g.state.event_hash,
        state_hash: stable_hash(&g.state),
        event_hash_after,
    }
}

/// A `lobster` operation waiting for the id the venue gives the order.
enum PendingOp {
    Limit {
        book: u8,
        side: Side,
        qty: u32,
        price: PriceCents,
        ioc: bool,
    },
    Cancel {
        book: u8,
        id: OrderId,
    },
}

impl Generator {
    /// Stamps and applies a command; it must be accepted.
    fn apply(&mut self, command: Command) -> Stamped {
        self.seq += 1;
        let stamped = Stamped {
            seq: self.seq,
            ts_ms: self.now,
            command,
        };
        self.events.clear();
        let reply = self.state.apply(&stamped, &mut self.events);
        if let Some(reject) = reply.rejection() {
            panic!("the generator wrote a command the venue refuses: {stamped:?}: {reject:?}");
        }
        if let Reply::Order {
            order,
            created: true,
        } = reply
        {
            if order.status == OrderStatus::Resting {
                let m = self.market_index(order.market);
                self.markets[m].resting.push(order.id);
            }
        }
        stamped
    }

    fn market_index(&self, id: MarketId) -> usize {
        self.markets
            .iter()
            .position(|m| m.id == id)
            .expect("a traded market")
    }

    /// The venue, its series with their first window open, and the traders.
    fn setup(&mut self, venue: &VenueConfig, traders: u32) -> Vec<Stamped> {
        let mut setup = vec![
            self.apply(Command::Configure(venue.clone())),
            self.apply(Command::SetRules {
                version: sequencer::limits::RULES_CURRENT,
            }),
        ];
        for (ticker, symbol, units) in SERIES {
            // A print at the window's open gives it its price to beat; one
            // 1 ms after the open (within a feed's allowed lead on the
            // venue's clock) makes it final, so the window opens at once.
            let price_e8 = units * 100_000_000;
            setup.push(self.apply(Command::Price {
                symbol: symbol.into(),
                price_e8,
                t_ms: T0,
            }));
            setup.push(self.apply(Command::CreateSeries(SeriesConfig {
                ticker: ticker.into(),
                symbol: symbol.into(),
                window_ms: WINDOW_MS,
                list_ahead: 1,
                taker_fee_bps: 700,
                maker_fee_bps: 0,
                market_cap_cents: MONEY_CENTS_MAX,
            })));
            setup.push(self.apply(Command::Price {
                symbol: symbol.into(),
                price_e8,
                t_ms: T0 + 1,
            }));
            let series = self
                .state
                .series_by_ticker(ticker)
                .expect("series just created");
            let id = series.markets[0];
            assert_eq!(
                self.state.markets[id as usize].status,
                MarketStatus::Open,
                "window open at T0"
            );
            self.markets.push(Market {
                id,
                symbol,
                fair: 50,
                underlying_e8: price_e8,
                resting: Vec::new(),
            });
        }
        for n in 0..traders {
            let account = self.state.accounts.len() as AccountId + 1;
            setup.push(self.apply(Command::CreateAccount));
            setup.push(self.apply(Command::Deposit {
                account,
                cents: DEPOSIT_CENTS,
            }));
            for flag in [AccountFlag::TermsAccepted, AccountFlag::TradingAllowed] {
                setup.push(self.apply(Command::SetAccountFlag {
                    account,
                    flag,
                    value: true,
                }));
            }
            let key = self.state.keys.len() as KeyIdx;
            setup.push(self.apply(Command::IssueKey(NewKey {
                account,
                key_id: format!("bench{n}"),
                fingerprint: [n as u8; 32],
                name: format!("bench trader {n}"),
                environment: Environment::Test,
                scopes: Scopes {
                    read: true,
                    trade: true,
                },
                limits: KeyLimits {
                    max_order_cents: Some(MONEY_CENTS_MAX as u64),
                    max_daily_cents: Some(MONEY_CENTS_MAX as u64),
                    max_open_orders: None,
                    series: None,
                },
                ip_allowlist: Vec::new(),
                expires_days: None,
            })));
            self.traders.push(Trader {
                account,
                key,
                next_client_id: 0,
            });
        }
        setup
    }

    /// An underlying print for market `m`'s symbol: a small random walk.
    fn print(&mut self, m: usize) -> Command {
        let market = &mut self.markets[m];
        let step = market.underlying_e8 / 2_000; // 0.05 %
        let delta = self.rng.below(3) as i64 - 1;
        market.underlying_e8 = (market.underlying_e8 + delta * step).max(1);
        Command::Price {
            symbol: market.symbol.into(),
            price_e8: market.underlying_e8,
            t_ms: self.now,
        }
    }

    /// Draws the next order-entry command and its pending `lobster` twin.
    fn next_command(&mut self) -> (Command, PendingOp) {
        let m = self.rng.below(self.markets.len() as u64) as usize;
        if self.rng.below(32) == 0 {
            let step = if self.rng.below(2) == 0 { -1 } else { 1 };
            self.markets[m].fair = (self.markets[m].fair + step).clamp(10, 90);
        }
        let depth = self.state.markets[self.markets[m].id as usize]
            .book
            .resting_orders();
        self.mix.depth_sum += u64::from(depth);
        let roll = self.rng.below(100);
        let kind = if depth > MAX_DEPTH {
            Kind::Cancel
        } else if depth < MIN_DEPTH {
            Kind::Passive
        } else {
            match roll {
                0..35 => Kind::Cancel,
                35..80 => Kind::Passive,
                80..88 => Kind::CrossIoc,
                88..93 => Kind::CrossGtc,
                _ => Kind::Sell,
            }
        };
        if let Kind::Cancel = kind {
            if let Some(pair) = self.cancel(m) {
                return pair;
            }
        }
        if let Kind::Sell = kind {
            if let Some(pair) = self.sell(m) {
                return pair;
            }
        }
        let crossing = matches!(kind, Kind::CrossIoc | Kind::CrossGtc);
        self.buy(m, kind, crossing)
    }

    /// A cancel of an order resting on market `m`, by its owner's key.
    fn cancel(&mut self, m: usize) -> Option<(Command, PendingOp)> {
        loop {
            let resting = &self.markets[m].resting;
            if resting.is_empty() {
                return None;
            }
            let len = resting.len() as u64;
            // Market makers mostly pull their latest quotes; the rest of the
            // cancels reach anywhere in the book.
            let i = if self.rng.below(2) == 0 {
                len - 1 - self.rng.below(len.min(16))
            } else {
                self.rng.below(len)
            };
            let id = self.markets[m].resting.swap_remove(i as usize);
            let order = self.state.order(id).expect("generated orders exist");
            if order.is_resting() {
                self.label = Label::Cancel;
                return Some((
                    Command::CancelOrder {
                        key: order.key,
                        order_id: id,
                    },
                    PendingOp::Cancel { book: m as u8, id },
                ));
            }
        }
    }

    /// A sell of contracts some trader holds in market `m`, resting (GTC,
    /// just above fair) or crossing (IOC, into the bids).
    fn sell(&mut self, m: usize) -> Option<(Command, PendingOp)> {
        let market_id = self.markets[m].id;
        for _ in 0..4 {
            let t = self.rng.below(self.traders.len() as u64) as usize;
            let outcome = if self.rng.below(2) == 0 {
                Outcome::Up
            } else {
                Outcome::Down
            };
            let account = &self.state.accounts[self.traders[t].account as usize - 1];
            let Some(position) = account.positions.get(&position_key(market_id, outcome)) else {
                continue;
            };
            let free = position.count - position.committed;
            if free == 0 {
                continue;
            }
            let count = free.min(1 + self.rng.below(20)) as u32;
            let fair = own_scale(self.markets[m].fair, outcome);
            let crossing = self.rng.below(2) == 0;
            let price = if crossing {
                fair - 2 - self.rng.below(3) as i32
            } else {
                fair + 1 + self.offset()
            };
            let tif = if crossing {
                TimeInForce::ImmediateOrCancel
            } else {
                TimeInForce::GoodTillCanceled
            };
            let order = self.new_order(
                t,
                market_id,
                outcome,
                Action::Sell,
                clamp_price(price),
                count,
                tif,
            );
            if self.self_trade(&order, self.traders[t].account) {
                continue;
            }
            self.label = if crossing {
                Label::CrossingSell
            } else {
                Label::RestingSell
            };
            return Some(self.place(m, t, order));
        }
        None
    }

    /// A buy on market `m`: passive (GTC, 1-6 cents behind fair) or crossing.
    fn buy(&mut self, m: usize, kind: Kind, crossing: bool) -> (Command, PendingOp) {
        let market_id = self.markets[m].id;
        let outcome = if self.rng.below(2) == 0 {
            Outcome::Up
        } else {
            Outcome::Down
        };
        let fair = own_scale(self.markets[m].fair, outcome);
        let (price, count, tif) = if crossing {
            let tif = match kind {
                Kind::CrossIoc => TimeInForce::ImmediateOrCancel,
                _ => TimeInForce::GoodTillCanceled,
            };
            (
                fair + 1 + self.rng.below(4) as i32,
                1 + self.rng.below(40) as u32,
                tif,
            )
        } else {
            // Mostly small quotes, now and then a large one.
            let count = if self.rng.percent(80) {
                1 + self.rng.below(20)
            } else {
                1 + self.rng.below(200)
            };
            (
                fair - 1 - self.offset(),
                count as u32,
                TimeInForce::GoodTillCanceled,
            )
        };
        self.label = match (crossing, tif) {
            (false, _) => Label::PassiveBuy,
            (true, TimeInForce::ImmediateOrCancel) => Label::CrossingIocBuy,
            (true, TimeInForce::GoodTillCanceled) => Label::CrossingGtcBuy,
        };
        // Any trader whose own quotes the order would not reach. Should a
        // large order reach every trader's quotes, one contract reaches a
        // single resting order, so some trader can always send that.
        let first = self.rng.below(self.traders.len() as u64) as usize;
        for count in [count, 1] {
            for k in 0..self.traders.len() {
                let t = (first + k) % self.traders.len();
                let order = self.new_order(
                    t,
                    market_id,
                    outcome,
                    Action::Buy,
                    clamp_price(price),
                    count,
                    tif,
                );
                if !self.self_trade(&order, self.traders[t].account) {
                    return self.place(m, t, order);
                }
            }
        }
        unreachable!(
            "with two traders or more, one of them has nothing resting that one contract reaches"
        )
    }

    /// Distance behind the touch of a passive quote: 0 to 5 cents, mostly small.
    fn offset(&mut self) -> i32 {
        self.rng.below(6).min(self.rng.below(6)) as i32
    }

    #[allow(clippy::too_many_arguments)]
    fn new_order(
        &mut self,
        t: usize,
        market: MarketId,
        outcome: Outcome,
        action: Action,
        price: PriceCents,
        count: u32,
        time_in_force: TimeInForce,
    ) -> NewOrder {
        let trader = &mut self.traders[t];
        trader.next_client_id += 1;
        let client_order_id = ClientOrderId::new(&format!("b{}", trader.next_client_id))
            .expect("a valid client order id");
        NewOrder {
            market,
            outcome,
            action,
            price,
            count,
            time_in_force,
            post_only: false,
            client_order_id,
        }
    }

    /// True when `order` would trade against a resting order of `account`
    /// (the venue's dry run, read from the book's public API).
    fn self_trade(&self, order: &NewOrder, account: AccountId) -> bool {
        let book = &self.state.markets[order.market as usize].book;
        let (side, price) = match order.action {
            Action::Buy => (order.outcome, order.price),
            Action::Sell => (order.outcome.other(), 100 - order.price),
        };
        let opposite = side.other();
        let mut need = order.count;
        let mut level = book.side(opposite).best();
        while let Some(best) = level {
            if need == 0 || u16::from(price) + u16::from(best) < 100 {
                break;
            }
            let mut node = book.head(opposite, best);
            while node != NIL && need > 0 {
                let n = book.node(node);
                if n.account == account {
                    return true;
                }
                need -= need.min(n.remaining);
                node = book.next(node);
            }
            level = book.side(opposite).next_below(best);
        }
        false
    }

    /// The command placing `order` through trader `t`'s key, and its twin.
    fn place(&mut self, m: usize, t: usize, order: NewOrder) -> (Command, PendingOp) {
        // DESIGN §2 on the Up scale: buy up and sell down are bids, the
        // other two asks; a down price q is the up price 100 - q.
        let up_price = match order.outcome {
            Outcome::Up => order.price,
            Outcome::Down => 100 - order.price,
        };
        let side = match (order.outcome, order.action) {
            (Outcome::Up, Action::Buy) | (Outcome::Down, Action::Sell) => Side::Bid,
            _ => Side::Ask,
        };
        let pending = PendingOp::Limit {
            book: m as u8,
            side,
            qty: order.count,
            price: up_price,
            ioc: order.time_in_force == TimeInForce::ImmediateOrCancel,
        };
        (
            Command::PlaceOrder {
                key: self.traders[t].key,
                order,
            },
            pending,
        )
    }

    /// Completes the `lobster` operation once the venue has numbered the order.
    fn finish_op(&self, op: PendingOp) -> LobsterOp {
        match op {
            PendingOp::Limit {
                book,
                side,
                qty,
                price,
                ioc,
            } => {
                // The order just placed is the newest one.
                let id = self.state.orders.len() as OrderId;
                let order = OrderType::Limit {
                    id: u128::from(id),
                    side,
                    qty: u64::from(qty),
                    price: u64::from(price),
                };
                LobsterOp::Order { book, order, ioc }
            }
            PendingOp::Cancel { book, id } => LobsterOp::Order {
                book,
                order: OrderType::Cancel { id: u128::from(id) },
                ioc: false,
            },
        }
    }
}

/// A fair value on the Up scale, seen on `outcome`'s own scale.
fn own_scale(up_fair: i32, outcome: Outcome) -> i32 {
    match outcome {
        Outcome::Up => up_fair,
        Outcome::Down => 100 - up_fair,
    }
}

/// Keeps a price on the 1..=99 cent grid.
fn clamp_price(price: i32) -> PriceCents {
    price.clamp(1, 99) as PriceCents
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_flow() {
        let config = FlowConfig {
            commands: 3_000,
            ..FlowConfig::default()
        };
        let a = generate(&config);
        let b = generate(&config);
        assert_eq!(a.body, b.body);
        assert_eq!(a.state_hash, b.state_hash);
        assert_eq!(a.body.len(), 3_000);
        assert_eq!(a.lobster.len(), 3_000);
        assert_eq!(a.labels.len(), 3_000);
        let count = |l: Label| a.mix.counts[l.index()];
        assert!(
            count(Label::Cancel) > 500 && count(Label::PassiveBuy) > 500 && a.mix.trades > 100,
            "{:?}",
            a.mix
        );
        assert!(
            count(Label::CrossingSell) > 0
                && count(Label::RestingSell) > 0
                && count(Label::Print) > 0
        );
    }
}
