//! A seeded generator of realistic command streams, and a driver that runs
//! them through the sequencer with every check after every command.
//!
//! The generator reads the state it drives (open markets, the touch of each
//! book, what each account holds, which keys exist) so that most commands
//! are the ones a real venue sees: orders near the touch of open markets,
//! sells of contracts held, cancels of resting orders, prints and ticks that
//! open, close and settle windows. A configurable share is deliberately bad
//! (wrong values, wrong keys, closed markets, conflicting retries), and a
//! configurable share is operator "chaos" (flags, keys, limits, pauses) so
//! that every refusal code of the spec is reached.
//!
//! Everything is a pure function of the seed: the same seed gives the same
//! stream, and so the same state hash and event hash, on every machine.
//!
//! Reuse for replay tests and benchmarks:
//! - `Driver::new(seed, config)` then `driver.step()` applies one command and
//!   returns the stamped command and its reply (events in `driver.events`);
//! - `run(seed, commands, config, check_every)` runs a whole stream with all
//!   checks and panics with the seed and command index on any failure;
//! - `run_with(.., RunOptions { record: true, .. })` also returns the stamped
//!   commands, to write a journal or to time `State::apply` alone.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use sequencer::command::{AccountFlag, NewKey, NewOrder, SeriesConfig, Stamped, VenueConfig};
use sequencer::limits::MONEY_CENTS_MAX;
use sequencer::state::{position_parts, Key, Market};
use sequencer::types::{
    AccountId, Action, ClientOrderId, Environment, KeyLimits, MarketId, MarketStatus, OrderStatus,
    Outcome, PriceCents, Scopes, TimeInForce,
};
use sequencer::{Command, ErrorCode, Event, Reply, State};

use crate::checks::{check_reply, Digest, EventChecker};
use crate::rng::Rng;

/// Whole dollars in cents.
const fn usd(dollars: u64) -> u64 {
    dollars * 100
}

/// Where simulated time starts: 2026-11-21 21:00:00 UTC, three hours before
/// a UTC midnight so that key day limits roll over early in a run.
pub const SIM_T0: u64 = 1_795_294_800_000;

/// Max order of the keys that ordinary traders use: large enough that their
/// ordinary orders pass, small enough that a 10,000-contract order does not.
const BIG_KEY_MAX_ORDER_CENTS: u64 = usd(2_000);
/// Max per day of those keys.
const BIG_KEY_MAX_DAILY_CENTS: u64 = usd(50_000_000);

/// The series a simulation can list: ticker stem, symbol, first price in
/// whole units of the underlying.
const CATALOG: [(&str, &str, i64); 4] = [
    ("btc", "X:BTCUSD", 97_000),
    ("eth", "X:ETHUSD", 3_500),
    ("aapl", "AAPL", 230),
    ("sol", "X:SOLUSD", 180),
];

/// What kind of stream to generate.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Accounts created at the start (chaos may add up to as many again).
    pub accounts: u32,
    /// Series listed over the run, 1 to 4; with chaos the last one is
    /// created in the middle of the run rather than at the start.
    pub series: u32,
    /// Share of deliberately bad commands: bad values, bad keys, closed
    /// markets, prints out of order, unknown ids.
    pub invalid_ratio: f64,
    /// Share of operator commands that get in the traders' way: account
    /// flags, keys issued with odd limits, revocations, pauses, small caps.
    pub chaos_ratio: f64,
    /// Share of order entries that resend an earlier client_order_id.
    pub retry_ratio: f64,
    /// Share of order entries that sell.
    pub sell_ratio: f64,
    /// Accounts, keys and markets get limits far above what is traded, so
    /// that only the book (and buying power of sells) refuses orders.
    pub generous: bool,
    /// A history tail to set at the start (`None`: the default 24 hours,
    /// which a run never reaches), so that eviction runs under the checks.
    pub history_tail_ms: Option<u64>,
}

impl Default for SimConfig {
    /// The full mix: every command kind and every refusal code.
    fn default() -> Self {
        Self {
            accounts: 10,
            series: 4,
            invalid_ratio: 0.05,
            chaos_ratio: 0.03,
            retry_ratio: 0.03,
            sell_ratio: 0.35,
            generous: false,
            history_tail_ms: None,
        }
    }
}

impl SimConfig {
    /// A stream for comparing books: a few rich accounts with one big key
    /// each, one series, no chaos and no bad values, so nearly every order
    /// reaches the book.
    pub fn book_only() -> Self {
        Self {
            accounts: 5,
            series: 1,
            invalid_ratio: 0.0,
            chaos_ratio: 0.0,
            retry_ratio: 0.02,
            sell_ratio: 0.35,
            generous: true,
            history_tail_ms: None,
        }
    }
}

/// Per-symbol random walk of the underlying.
#[derive(Clone, Debug)]
struct Walk {
    symbol: String,
    price_e8: i64,
    /// `t_ms` of the last print sent (prints must not go back in time).
    last_t_ms: u64,
}

/// The generator. It expects to drive a fresh `State` from seq 1: the first
/// commands configure the venue, list series and create accounts and keys.
pub struct Sim {
    rng: Rng,
    config: SimConfig,
    now: u64,
    queue: VecDeque<Command>,
    series: Vec<SeriesConfig>,
    series_created: usize,
    walks: Vec<Walk>,
    next_key: u32,
    next_client: u64,
    bad_client_ids: Vec<ClientOrderId>,
}

impl Sim {
    /// A generator whose whole stream is fixed by `seed` and `config`.
    pub fn new(seed: u64, config: SimConfig) -> Self {
        let mut rng = Rng::new(seed);
        let now = SIM_T0 + rng.below(60_000);
        let count = config.series.clamp(1, CATALOG.len() as u32) as usize;
        let mut series = Vec::with_capacity(count);
        let mut walks = Vec::with_capacity(count);
        for (i, &(stem, symbol, units)) in CATALOG.iter().take(count).enumerate() {
            // The first series always has one-minute windows so that windows
            // turn over often; the others vary per seed.
            let minutes = if i == 0 {
                1
            } else {
                *rng.pick(&[1u64, 2, 3, 5])
            };
            let maker_fee_bps = match i {
                // One series always charges makers, so maker fees and the
                // larger of the two rates in holds are exercised.
                1 => *rng.pick(&[100u32, 200, 300]),
                _ => *rng.pick(&[0u32, 0, 0, 100]),
            };
            let market_cap_cents = if config.generous {
                MONEY_CENTS_MAX
            } else if i == 3 {
                // A small market cap, so the market limit refuses orders.
                usd(3_000) as i64
            } else {
                usd(1_000_000) as i64
            };
            let list_ahead = rng.range(1, 3) as u32;
            let taker_fee_bps = *rng.pick(&[700u32, 700, 500, 1000]);
            // One series charges makers more than takers, so holds by the
            // larger rate are the maker's there (the draws stay as they
            // were, so other seeds' flows do not move).
            let maker_fee_bps = if i == 2 {
                taker_fee_bps + 500
            } else {
                maker_fee_bps
            };
            series.push(SeriesConfig {
                ticker: format!("{stem}-{minutes}m"),
                symbol: symbol.to_string(),
                window_ms: minutes * 60_000,
                list_ahead,
                taker_fee_bps,
                maker_fee_bps,
                market_cap_cents,
            });
            walks.push(Walk {
                symbol: symbol.to_string(),
                price_e8: units * 100_000_000,
                last_t_ms: 0,
            });
        }
        let bad_client_ids = tampered_client_order_ids();
        let mut sim = Self {
            rng,
            config,
            now,
            queue: VecDeque::new(),
            series,
            series_created: 0,
            walks,
            next_key: 0,
            next_client: 0,
            bad_client_ids,
        };
        sim.bootstrap();
        sim
    }

    /// The simulated time of the next command.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The series this seed lists (created or still to be created).
    pub fn series(&self) -> &[SeriesConfig] {
        &self.series
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Queues the opening commands: venue, prints, series, accounts, keys.
    fn bootstrap(&mut self) {
        let generous = self.config.generous;
        let cap = if generous {
            MONEY_CENTS_MAX
        } else {
            VenueConfig::default().account_risk_cap_cents
        };
        self.queue.push_back(Command::Configure(VenueConfig {
            environment: Environment::Test,
            practice_book_open: true,
            account_risk_cap_cents: cap,
        }));
        self.queue.push_back(Command::SetRules {
            version: sequencer::limits::RULES_CURRENT,
        });
        if let Some(tail_ms) = self.config.history_tail_ms {
            self.queue.push_back(Command::SetRetention { tail_ms });
        }
        // With chaos the last series is created later, mid-run.
        let initial = if self.config.chaos_ratio > 0.0 && self.series.len() > 1 {
            self.series.len() - 1
        } else {
            self.series.len()
        };
        for i in 0..initial {
            let print = self.print(i, self.now);
            self.queue.push_back(print);
            self.queue
                .push_back(Command::CreateSeries(self.series[i].clone()));
        }
        self.series_created = initial;
        for account in 1..=self.config.accounts {
            self.queue.push_back(Command::CreateAccount);
            let cents = if generous {
                usd(100_000_000) as i64
            } else {
                self.rng.range(usd(5_000), usd(50_000)) as i64
            };
            self.queue.push_back(Command::Deposit { account, cents });
            for flag in [AccountFlag::TermsAccepted, AccountFlag::TradingAllowed] {
                self.queue.push_back(Command::SetAccountFlag {
                    account,
                    flag,
                    value: true,
                });
            }
            let limits = if generous {
                KeyLimits {
                    max_order_cents: Some(MONEY_CENTS_MAX as u64),
                    max_daily_cents: Some(MONEY_CENTS_MAX as u64),
                    max_open_orders: None,
                    series: None,
                }
            } else {
                big_limits()
            };
            let key = self.new_key(
                account,
                Scopes {
                    read: true,
                    trade: true,
                },
                limits,
            );
            self.queue.push_back(Command::IssueKey(key));
            if !generous {
                // A second key of another kind on some accounts, so the
                // spec's default limits and small limits are met early.
                let extra = match account % 3 {
                    0 => Some(KeyLimits::default()),
                    1 => Some(self.small_limits()),
                    _ => None,
                };
                if let Some(limits) = extra {
                    let key = self.new_key(
                        account,
                        Scopes {
                            read: true,
                            trade: true,
                        },
                        limits,
                    );
                    self.queue.push_back(Command::IssueKey(key));
                }
                if account % 4 == 0 {
                    let key = self.new_key(
                        account,
                        Scopes {
                            read: true,
                            trade: false,
                        },
                        KeyLimits::default(),
                    );
                    self.queue.push_back(Command::IssueKey(key));
                }
            }
        }
    }

    /// The next command and the time to stamp it with.
    pub fn next(&mut self, state: &State) -> (u64, Command) {
        if let Some(command) = self.queue.pop_front() {
            return (self.now, command);
        }
        let command = self.random_command(state);
        (self.now, command)
    }

    fn random_command(&mut self, state: &State) -> Command {
        // The operator ends a pause, timed or not, after a while.
        if state.pause.is_some() && self.rng.chance(0.03) {
            return Command::ResumeTrading;
        }
        let chaos = (self.config.chaos_ratio * 1000.0).round() as u64;
        let money = if self.config.generous { 0 } else { 30 };
        let weights = [
            550,   // place order
            90,    // cancel order
            20,    // cancel all
            120,   // tick
            100,   // price
            money, // deposit or withdraw
            chaos, // operator chaos
        ];
        match self.rng.weighted(&weights) {
            0 => self.place_order(state),
            1 => self.cancel_order(state),
            2 => self.cancel_all(state),
            3 => self.tick(),
            4 => self.price_command(),
            5 => self.money(state),
            _ => self.chaos(state),
        }
    }

    // ----- time and prices ---------------------------------------------------

    fn tick(&mut self) -> Command {
        let chaos = self.config.chaos_ratio > 0.0;
        let roll = self.rng.below(10_000);
        let advance = if chaos && roll < 3 {
            // A long outage: windows are skipped, keys expire, days turn.
            self.rng.range(6 * 3_600_000, 30 * 3_600_000)
        } else if chaos && roll < 100 {
            self.rng.range(120_000, 1_200_000)
        } else if roll < 300 {
            self.rng.range(5_000, 90_000)
        } else if roll < 800 {
            // To the next minute boundary exactly: windows open and close at
            // the very millisecond, and prints "now" fall on the boundary.
            60_000 - self.now % 60_000
        } else {
            // Mostly a timer's tick: a busy venue sees hundreds of commands
            // in a one-minute window.
            self.rng.range(0, 3_000)
        };
        self.now += advance;
        Command::Tick
    }

    /// A valid print of series `i`'s symbol at `t_ms`, one step of the walk.
    fn print(&mut self, i: usize, t_ms: u64) -> Command {
        let walk = &mut self.walks[i];
        // Steps of up to 0.15 %; a flat print now and then so that a
        // settlement equal to the price to beat (result up) happens too.
        let step_bps = if self.rng.chance(0.1) {
            0
        } else {
            self.rng.range_i64(-15, 15)
        };
        walk.price_e8 = (walk.price_e8 + walk.price_e8 / 10_000 * step_bps).max(1);
        walk.last_t_ms = walk.last_t_ms.max(t_ms);
        Command::Price {
            symbol: walk.symbol.clone(),
            price_e8: walk.price_e8,
            t_ms: walk.last_t_ms,
        }
    }

    fn price_command(&mut self) -> Command {
        let i = self.rng.below(self.series_created.max(1) as u64) as usize;
        if self.rng.chance(self.config.invalid_ratio * 2.0) {
            let walk = &self.walks[i];
            return match self.rng.below(3) {
                // A print older than the symbol's last one.
                0 if walk.last_t_ms > 0 => Command::Price {
                    symbol: walk.symbol.clone(),
                    price_e8: walk.price_e8,
                    t_ms: walk.last_t_ms - self.rng.range(1, 1_000),
                },
                1 => Command::Price {
                    symbol: walk.symbol.to_lowercase(),
                    price_e8: walk.price_e8,
                    t_ms: self.now,
                },
                _ => Command::Price {
                    symbol: walk.symbol.clone(),
                    price_e8: -self.rng.range_i64(0, 5),
                    t_ms: self.now,
                },
            };
        }
        // Mostly printed now; sometimes a little behind now (feed latency);
        // sometimes exactly on the last minute boundary, which is some
        // window's open and another's close, to test "at or before the open"
        // and "at or after the close". Never before the symbol's last print.
        let t_ms = match self.rng.weighted(&[75, 17, 8]) {
            0 => self.now,
            1 => self.now.saturating_sub(self.rng.range(1, 2_000)),
            _ => self.now / 60_000 * 60_000,
        };
        self.print(i, t_ms)
    }

    // ----- order entry ----------------------------------------------------------

    /// Keys an ordinary client would use: trade scope, active, on this
    /// environment, account not suspended.
    fn usable_keys<'s>(&self, state: &'s State) -> Vec<&'s Key> {
        state
            .keys
            .iter()
            .filter(|k| {
                k.scopes.trade
                    && k.is_active(state.now_ms)
                    && k.environment == state.config.environment
                    && state.account(k.account).is_some_and(|a| !a.suspended)
            })
            .collect()
    }

    /// A key index for an order or a cancel: mostly a usable key (and among
    /// those mostly one with generous limits), sometimes any key at all, or
    /// an index no key has.
    fn order_key(&mut self, state: &State, bad: bool) -> u32 {
        let usable = self.usable_keys(state);
        if bad || usable.is_empty() {
            return if self.rng.chance(0.3) || state.keys.is_empty() {
                state.keys.len() as u32 + self.rng.below(5) as u32
            } else {
                self.rng.below(state.keys.len() as u64) as u32
            };
        }
        let big: Vec<&&Key> = usable
            .iter()
            .filter(|k| {
                k.limits
                    .max_order_cents
                    .is_some_and(|m| m >= BIG_KEY_MAX_ORDER_CENTS)
            })
            .collect();
        if !big.is_empty() && self.rng.chance(0.85) {
            self.rng.pick(&big).idx
        } else {
            self.rng.pick(&usable).idx
        }
    }

    fn open_markets<'s>(&self, state: &'s State) -> Vec<&'s Market> {
        state
            .active_markets
            .iter()
            .map(|&id| &state.markets[id as usize])
            .filter(|m| m.status == MarketStatus::Open)
            .collect()
    }

    /// A market id that is not open: scheduled, closed, settled, or none.
    fn closed_market(&mut self, state: &State) -> MarketId {
        let not_open: Vec<MarketId> = state
            .markets
            .iter()
            .filter(|m| m.status != MarketStatus::Open)
            .map(|m| m.id)
            .collect();
        if not_open.is_empty() || self.rng.chance(0.2) {
            state.markets.len() as MarketId + self.rng.below(10) as MarketId
        } else {
            // Prefer the newest ones: scheduled and recently closed windows.
            let from = not_open.len().saturating_sub(20);
            *self.rng.pick(&not_open[from..])
        }
    }

    fn client_order_id(&mut self) -> ClientOrderId {
        self.next_client += 1;
        let n = self.next_client;
        let text = match self.rng.below(20) {
            0 => format!("sim.{n}_a:b-c"),
            1 => format!("{n:0>64}"),
            2 => format!("X-{n}"),
            _ => format!("o{n}"),
        };
        ClientOrderId::new(&text).expect("generated ids match the pattern")
    }

    fn order_count(&mut self) -> u32 {
        match self.rng.weighted(&[40, 45, 13, 1, 1]) {
            0 => self.rng.range(1, 10) as u32,
            1 => self.rng.range(11, 50) as u32,
            2 => self.rng.range(51, 300) as u32,
            3 => self.rng.range(1_000, 5_000) as u32,
            _ => 10_000,
        }
    }

    fn place_order(&mut self, state: &State) -> Command {
        if self.rng.chance(self.config.retry_ratio) {
            if let Some(command) = self.retry(state) {
                return command;
            }
        }
        let bad = self.rng.chance(self.config.invalid_ratio);
        // Which defect a deliberately bad order carries.
        let defect = if bad { self.rng.below(5) } else { u64::MAX };
        let key = self.order_key(state, defect == 0);
        let account = state.key(key).map(|k| k.account);
        let open = self.open_markets(state);
        let mut sell = self.rng.chance(self.config.sell_ratio);

        // Sells mostly offer contracts the account holds and has not offered.
        let mut held: Option<(MarketId, Outcome, u64)> = None;
        if sell && self.rng.chance(0.85) {
            if let Some(a) = account.and_then(|a| state.account(a)) {
                let free: Vec<(MarketId, Outcome, u64)> = a
                    .positions
                    .iter()
                    .map(|(&k, p)| (position_parts(k), p.count - p.committed))
                    .filter(|&((m, _), f)| {
                        f > 0 && state.markets[m as usize].status == MarketStatus::Open
                    })
                    .map(|((m, o), f)| (m, o, f))
                    .collect();
                if !free.is_empty() {
                    held = Some(*self.rng.pick(&free));
                }
            }
            // A trader with nothing to sell mostly buys instead.
            if held.is_none() && self.rng.chance(0.85) {
                sell = false;
            }
        }
        let market = if defect == 1 || open.is_empty() {
            self.closed_market(state)
        } else if let Some((m, _, _)) = held {
            m
        } else {
            self.rng.pick(&open).id
        };
        let outcome = match held {
            Some((_, o, _)) => o,
            None => *self.rng.pick(&[Outcome::Up, Outcome::Down]),
        };
        let action = if sell { Action::Sell } else { Action::Buy };
        let mut count = match held {
            // Mostly within what is free; sometimes more (refused).
            Some((_, _, free)) if self.rng.chance(0.9) => self.rng.range(1, free.min(300)) as u32,
            Some((_, _, free)) => (free + self.rng.range(1, 10)).min(10_000) as u32,
            None => self.order_count(),
        };
        let price = self.near_touch(state.market(market), action, outcome);
        let time_in_force = if self.rng.chance(0.25) {
            TimeInForce::ImmediateOrCancel
        } else {
            TimeInForce::GoodTillCanceled
        };
        let post_only = self.rng.chance(0.1);
        let mut order = NewOrder {
            market,
            outcome,
            action,
            price,
            count,
            time_in_force,
            post_only,
            client_order_id: self.client_order_id(),
        };
        match defect {
            2 => order.price = *self.rng.pick(&[0u8, 100, 101, 255]),
            3 => {
                count = *self.rng.pick(&[0u32, 10_001, 50_000, u32::MAX]);
                order.count = count;
            }
            4 => order.client_order_id = *self.rng.pick(&self.bad_client_ids),
            _ => {}
        }
        Command::PlaceOrder { key, order }
    }

    /// An own-scale price near the touch of the book. An order resting on
    /// side S at x trades with the other side's best y when x + y >= 100, so
    /// x = 100 - y is the touch; offsets below rest at or behind it, offsets
    /// above cross, and a rare sweep reaches several levels.
    fn near_touch(
        &mut self,
        market: Option<&Market>,
        action: Action,
        outcome: Outcome,
    ) -> PriceCents {
        let side = action.book_side(outcome);
        let touch: i64 = match market {
            Some(m) => match m.book.side(side.other()).best() {
                Some(best) => 100 - i64::from(best),
                None => {
                    // An empty other side: quote around the last trade.
                    let fair = i64::from(m.last_price.unwrap_or(50));
                    let fair = if side == Outcome::Up {
                        fair
                    } else {
                        100 - fair
                    };
                    fair + 1
                }
            },
            None => 50,
        };
        let offset = match self.rng.weighted(&[55, 35, 10]) {
            0 => self.rng.range_i64(-6, -1),
            1 => self.rng.range_i64(0, 2),
            _ => self.rng.range_i64(3, 15),
        };
        let x = (touch + offset).clamp(1, 99) as PriceCents;
        match action {
            Action::Buy => x,
            Action::Sell => 100 - x,
        }
    }

    /// Resends an earlier order of the same account, as it was (an
    /// idempotent retry) or changed (a conflict).
    fn retry(&mut self, state: &State) -> Option<Command> {
        let key = self.order_key(state, false);
        let account = state.account(state.key(key)?.account)?;
        let from = account.orders.len().saturating_sub(50);
        let recent: Vec<u64> = account.orders.range(from..).copied().collect();
        if recent.is_empty() {
            return None;
        }
        let &id = self.rng.pick(&recent);
        let old = state.order(id)?;
        let mut order = NewOrder {
            market: old.market,
            outcome: old.outcome,
            action: old.action,
            price: old.price,
            count: old.count,
            time_in_force: old.time_in_force,
            post_only: old.post_only,
            client_order_id: old.client_order_id,
        };
        if self.rng.chance(0.4) {
            match self.rng.below(3) {
                0 => {
                    order.count = if order.count < 10_000 {
                        order.count + 1
                    } else {
                        order.count - 1
                    }
                }
                1 => {
                    order.price = if order.price < 99 {
                        order.price + 1
                    } else {
                        order.price - 1
                    }
                }
                _ => order.outcome = order.outcome.other(),
            }
        }
        Some(Command::PlaceOrder { key, order })
    }

    fn cancel_order(&mut self, state: &State) -> Command {
        let bad = self.rng.chance(self.config.invalid_ratio);
        let bad_key = bad && self.rng.chance(0.5);
        let key = self.order_key(state, bad_key);
        let own: Vec<u64> = state
            .key(key)
            .and_then(|k| state.account(k.account))
            .map(|a| {
                a.orders
                    .range(a.orders.len().saturating_sub(40)..)
                    .copied()
                    .collect()
            })
            .unwrap_or_default();
        let resting: Vec<u64> = own
            .iter()
            .copied()
            .filter(|&id| state.order(id).is_some_and(|o| o.is_resting()))
            .collect();
        let order_id = match self.rng.weighted(&[75, 10, 8, 7]) {
            0 if !resting.is_empty() => *self.rng.pick(&resting),
            // An own order that may have finished already.
            1 if !own.is_empty() => *self.rng.pick(&own),
            // Somebody's order: ORDER_NOT_FOUND unless it is our own.
            2 if !state.orders.is_empty() => self.rng.range(1, state.orders.len() as u64),
            // An id no order has.
            _ => {
                if self.rng.chance(0.2) {
                    0
                } else {
                    state.orders.len() as u64 + self.rng.range(1, 1_000)
                }
            }
        };
        Command::CancelOrder { key, order_id }
    }

    fn cancel_all(&mut self, state: &State) -> Command {
        let bad = self.rng.chance(self.config.invalid_ratio);
        let bad_key = bad && self.rng.chance(0.5);
        let key = self.order_key(state, bad_key);
        let active: Vec<MarketId> = state.active_markets.clone();
        let series: Vec<String> = state
            .series
            .iter()
            .map(|s| s.config.ticker.clone())
            .collect();
        let market_filter = |sim: &mut Self| -> Option<String> {
            (!active.is_empty()).then(|| {
                state.markets[*sim.rng.pick(&active) as usize]
                    .ticker
                    .clone()
            })
        };
        let series_filter = |sim: &mut Self| -> Option<String> {
            (!series.is_empty()).then(|| sim.rng.pick(&series).clone())
        };
        let (market, series) = if bad && self.rng.chance(0.8) {
            match self.rng.below(4) {
                0 => (Some("Not A Ticker".to_string()), None),
                1 => (Some(String::new()), None),
                2 => (None, Some("-bad".to_string())),
                // Valid patterns of markets and series that do not exist.
                _ => (
                    Some("zzz-261121-2100-2101".to_string()),
                    Some("zzz".to_string()),
                ),
            }
        } else {
            match self.rng.weighted(&[45, 30, 20, 5]) {
                0 => (None, None),
                1 => (market_filter(self), None),
                2 => (None, series_filter(self)),
                _ => (market_filter(self), series_filter(self)),
            }
        };
        Command::CancelAll {
            key,
            market,
            series,
        }
    }

    // ----- money and operator commands ------------------------------------------

    fn random_account(&mut self, state: &State) -> AccountId {
        if state.accounts.is_empty() || self.rng.chance(self.config.invalid_ratio * 0.5) {
            // An account that does not exist.
            return if self.rng.chance(0.5) {
                0
            } else {
                state.accounts.len() as AccountId + 1
            };
        }
        self.rng.range(1, state.accounts.len() as u64) as AccountId
    }

    fn money(&mut self, state: &State) -> Command {
        if self.rng.chance(0.35) {
            let account = self.random_account(state);
            let power = state
                .account(account)
                .map_or(0, |a| a.buying_power())
                .max(0) as u64;
            // Up to one and a half times buying power: sometimes too much.
            let cents = self.rng.range(1, power * 3 / 2 + 1) as i64;
            return Command::Withdraw { account, cents };
        }
        // Top up the poorer of two accounts, so that cash does not run dry.
        let (a, b) = (self.random_account(state), self.random_account(state));
        let power = |id: AccountId| state.account(id).map_or(i64::MAX, |a| a.buying_power());
        let account = if power(a) <= power(b) { a } else { b };
        let cents = if self.rng.chance(self.config.invalid_ratio) {
            *self.rng.pick(&[0i64, -100, MONEY_CENTS_MAX + 1])
        } else {
            self.rng.range(usd(100), usd(10_000)) as i64
        };
        Command::Deposit { account, cents }
    }

    fn new_key(&mut self, account: AccountId, scopes: Scopes, limits: KeyLimits) -> NewKey {
        self.next_key += 1;
        let n = self.next_key;
        let mut fingerprint = [0u8; 32];
        for chunk in fingerprint.chunks_mut(8) {
            chunk.copy_from_slice(&self.rng.next_u64().to_le_bytes());
        }
        NewKey {
            account,
            key_id: format!("k{n}"),
            fingerprint,
            name: format!("sim key {n}"),
            environment: Environment::Test,
            scopes,
            limits,
            ip_allowlist: Vec::new(),
            expires_days: None,
        }
    }

    /// Small key limits: $5 per order, 3 resting orders per market, one series.
    fn small_limits(&mut self) -> KeyLimits {
        let series = self.series[self.rng.below(self.series_created.max(1) as u64) as usize]
            .ticker
            .clone();
        KeyLimits {
            max_order_cents: Some(usd(5)),
            max_daily_cents: Some(*self.rng.pick(&[usd(50), usd(500)])),
            max_open_orders: Some(3),
            series: Some(vec![series]),
        }
    }

    fn chaos(&mut self, state: &State) -> Command {
        match self.rng.weighted(&[10, 20, 8, 10, 3, 5, 3, 3, 2]) {
            0 => self.account_flag(state),
            1 => self.issue_key(state),
            2 => {
                let key_id = if state.keys.is_empty() || self.rng.chance(0.1) {
                    "nosuchkey".to_string()
                } else {
                    self.rng.pick(&state.keys).key_id.clone()
                };
                Command::RevokeKey { key_id }
            }
            3 => self.set_key_limits(state),
            4 => {
                let until_ts_ms = match self.rng.below(10) {
                    0..=5 => Some(self.now + self.rng.range(5_000, 120_000)),
                    6..=8 => None,
                    // A pause that ends before it starts.
                    _ => Some(self.now.saturating_sub(self.rng.below(1_000))),
                };
                Command::PauseTrading { until_ts_ms }
            }
            5 => {
                let account = self.random_account(state);
                let cents = if self.rng.chance(0.6) {
                    None
                } else {
                    Some(self.rng.range(usd(50), usd(2_000)) as i64)
                };
                Command::SetAccountRiskCap { account, cents }
            }
            6 if state.accounts.len() < 2 * self.config.accounts as usize => {
                // A new customer: mostly funded and onboarded at once,
                // sometimes left without the flags that let it buy.
                let account = state.accounts.len() as AccountId + 1;
                self.queue.push_back(Command::Deposit {
                    account,
                    cents: self.rng.range(usd(1_000), usd(20_000)) as i64,
                });
                if self.rng.chance(0.7) {
                    for flag in [AccountFlag::TermsAccepted, AccountFlag::TradingAllowed] {
                        self.queue.push_back(Command::SetAccountFlag {
                            account,
                            flag,
                            value: true,
                        });
                    }
                }
                Command::CreateAccount
            }
            7 => {
                if self.series_created < self.series.len() {
                    let i = self.series_created;
                    self.series_created += 1;
                    // The series' first print follows at once.
                    let print = self.print(i, self.now);
                    self.queue.push_back(print);
                    Command::CreateSeries(self.series[i].clone())
                } else {
                    // A duplicate or a malformed series: BAD_REQUEST.
                    let mut config = self.series[0].clone();
                    if self.rng.chance(0.5) {
                        config.ticker = "Bad Ticker".into();
                    }
                    Command::CreateSeries(config)
                }
            }
            _ => {
                // The venue configuration again, or a malformed one.
                let mut config = state.config.clone();
                if self.rng.chance(0.5) {
                    config.account_risk_cap_cents = 0;
                }
                Command::Configure(config)
            }
        }
    }

    /// Bars an account from trading (terms, wallet, suspension) or, more
    /// often, lifts such a bar, so that only a few accounts are barred at a
    /// time and most orders get past the account checks.
    fn account_flag(&mut self, state: &State) -> Command {
        let barred: Vec<(AccountId, AccountFlag, bool)> = state
            .accounts
            .iter()
            .filter_map(|a| {
                if a.suspended {
                    Some((a.id, AccountFlag::Suspended, false))
                } else if !a.terms_accepted {
                    Some((a.id, AccountFlag::TermsAccepted, true))
                } else if !a.trading_allowed {
                    Some((a.id, AccountFlag::TradingAllowed, true))
                } else {
                    None
                }
            })
            .collect();
        if !barred.is_empty() && self.rng.chance(0.6) {
            let &(account, flag, value) = self.rng.pick(&barred);
            return Command::SetAccountFlag {
                account,
                flag,
                value,
            };
        }
        let account = self.random_account(state);
        let flag = *self.rng.pick(&[
            AccountFlag::TermsAccepted,
            AccountFlag::TradingAllowed,
            AccountFlag::Suspended,
        ]);
        let value = flag == AccountFlag::Suspended;
        Command::SetAccountFlag {
            account,
            flag,
            value,
        }
    }

    fn issue_key(&mut self, state: &State) -> Command {
        let account = self.random_account(state);
        let trade = Scopes {
            read: true,
            trade: true,
        };
        let kind = self.rng.weighted(&[35, 10, 10, 10, 8, 4, 5, 4, 3, 3, 2, 5]);
        let limits = match kind {
            0 => big_limits(),
            2 => self.small_limits(),
            11 => KeyLimits {
                max_order_cents: Some(usd(100)),
                max_daily_cents: Some(usd(50)),
                ..big_limits()
            },
            _ => KeyLimits::default(),
        };
        let scopes = if kind == 3 {
            Scopes {
                read: true,
                trade: false,
            }
        } else {
            trade
        };
        let mut key = self.new_key(account, scopes, limits);
        match kind {
            4 => key.expires_days = Some(1),
            5 => key.environment = Environment::Live,
            6 => key.ip_allowlist = vec!["127.0.0.1".into(), "::1".into()],
            7 => key.expires_days = Some(*self.rng.pick(&[0u32, 366, 10_000])),
            8 => key.ip_allowlist = (0..11).map(|i| format!("10.0.0.{i}")).collect(),
            9 => {
                key.key_id = if state.keys.is_empty() || self.rng.chance(0.5) {
                    "Bad_Id".into()
                } else {
                    self.rng.pick(&state.keys).key_id.clone()
                }
            }
            10 => key.ip_allowlist = vec!["not-an-ip".into()],
            _ => {}
        }
        Command::IssueKey(key)
    }

    fn set_key_limits(&mut self, state: &State) -> Command {
        if state.keys.is_empty() || self.rng.chance(0.05) {
            return Command::SetKeyLimits {
                key_id: "nosuchkey".into(),
                limits: big_limits(),
            };
        }
        let key_id = self.rng.pick(&state.keys).key_id.clone();
        let limits = match self.rng.weighted(&[40, 30, 15, 15]) {
            0 => big_limits(),
            1 => self.small_limits(),
            2 => KeyLimits::default(),
            _ => match self.rng.below(4) {
                0 => KeyLimits {
                    max_order_cents: Some(0),
                    ..KeyLimits::default()
                },
                1 => KeyLimits {
                    max_open_orders: Some(0),
                    ..KeyLimits::default()
                },
                2 => KeyLimits {
                    series: Some(Vec::new()),
                    ..KeyLimits::default()
                },
                _ => KeyLimits {
                    series: Some(vec!["BAD".into()]),
                    ..KeyLimits::default()
                },
            },
        };
        Command::SetKeyLimits { key_id, limits }
    }
}

/// Limits of an ordinary trader's key.
fn big_limits() -> KeyLimits {
    KeyLimits {
        max_order_cents: Some(BIG_KEY_MAX_ORDER_CENTS),
        max_daily_cents: Some(BIG_KEY_MAX_DAILY_CENTS),
        max_open_orders: None,
        series: None,
    }
}

/// client_order_ids that break the pattern. `ClientOrderId::new` refuses to
/// make them, so they are made the way a tampered journal would carry them:
/// a valid id is archived with rkyv, its bytes are altered, and it is read
/// back. The sequencer must refuse them with BAD_REQUEST, not trust them.
pub fn tampered_client_order_ids() -> Vec<ClientOrderId> {
    let marker = "Tq7Zx9";
    let valid = ClientOrderId::new(marker).expect("valid id");
    let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&valid).expect("archive a client_order_id");
    let at = bytes
        .windows(marker.len())
        .position(|w| w == marker.as_bytes())
        .expect("the id's bytes are archived as-is");
    let mut out = Vec::new();
    // A space, a slash, a byte that is not UTF-8, and a NUL inside the id.
    for bad in [b' ', b'/', 0xff, 0] {
        let mut altered = rkyv::util::AlignedVec::<16>::new();
        altered.extend_from_slice(&bytes);
        altered[at + 2] = bad;
        let id =
            rkyv::from_bytes::<ClientOrderId, rkyv::rancor::Error>(&altered).expect("read back");
        assert!(
            !id.is_valid(),
            "the altered id {id:?} must break the pattern"
        );
        out.push(id);
    }
    out
}

// ----- the driver -------------------------------------------------------------

/// A generator and the state it drives.
pub struct Driver {
    pub seed: u64,
    pub sim: Sim,
    pub state: State,
    /// Events of the last command.
    pub events: Vec<Event>,
    /// Seq of the last command (0 before any).
    pub seq: u64,
}

impl Driver {
    /// A fresh venue and generator.
    pub fn new(seed: u64, config: SimConfig) -> Self {
        Self {
            seed,
            sim: Sim::new(seed, config),
            state: State::default(),
            events: Vec::new(),
            seq: 0,
        }
    }

    /// Generates the next command, stamped with the next seq.
    pub fn next_command(&mut self) -> Stamped {
        let (ts_ms, command) = self.sim.next(&self.state);
        Stamped {
            seq: self.seq + 1,
            ts_ms,
            command,
        }
    }

    /// Applies a command; its events replace `self.events`.
    pub fn apply(&mut self, stamped: &Stamped) -> Reply {
        self.seq = stamped.seq;
        self.events.clear();
        self.state.apply(stamped, &mut self.events)
    }

    /// Generates and applies one command.
    pub fn step(&mut self) -> (Stamped, Reply) {
        let stamped = self.next_command();
        let reply = self.apply(&stamped);
        (stamped, reply)
    }
}

/// How `run_with` runs a stream.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Run `State::check_invariants` after every this many commands (1 =
    /// every command, 0 = only at the end).
    pub check_every: u64,
    /// Follow the event stream with an `EventChecker` and compare its books
    /// with the state's after every command.
    pub check_events: bool,
    /// Keep the stamped commands in the outcome.
    pub record: bool,
    /// Also require the ticker of a closed market to match its emptied book
    /// (off by default: the sequencer sends no ticker at close, see
    /// `ticker_follows_the_book_when_a_window_closes` in tests/simulation.rs).
    pub tickers_after_close: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            check_every: 1,
            check_events: true,
            record: false,
            tickers_after_close: true,
        }
    }
}

/// What a stream did: hashes to compare runs, the final state, the commands
/// if recorded, and counts of what was exercised.
pub struct SimOutcome {
    pub seed: u64,
    pub commands: u64,
    pub state_hash: u64,
    pub event_hash: u64,
    pub events_total: u64,
    pub state: State,
    pub stamped: Vec<Stamped>,
    pub coverage: Coverage,
}

/// A failed run: enough to reproduce it.
#[derive(Clone, Debug)]
pub struct SimFailure {
    pub seed: u64,
    /// 0-based index of the command that failed (its seq is index + 1).
    pub index: u64,
    pub command: Option<Box<Stamped>>,
    pub message: String,
}

impl fmt::Display for SimFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "simulation seed {} failed at command index {} (seq {}): {}",
            self.seed,
            self.index,
            self.index + 1,
            self.message
        )?;
        if let Some(command) = &self.command {
            writeln!(f, "command: {command:?}")?;
        }
        write!(
            f,
            "reproduce: UPDOWN_SIM_SEED={} UPDOWN_SIM_COMMANDS={} cargo test -p tests --release --test simulation simulation_ci -- --nocapture",
            self.seed,
            self.index + 1
        )
    }
}

/// Runs `commands` commands of seed `seed` with the event checks after every
/// command and the state invariants every `check_every` commands. Panics
/// with the seed and the command index on the first failure.
pub fn run(seed: u64, commands: u64, config: SimConfig, check_every: u64) -> SimOutcome {
    let options = RunOptions {
        check_every,
        ..RunOptions::default()
    };
    run_with(seed, commands, config, options).unwrap_or_else(|failure| panic!("{failure}"))
}

/// Runs a stream; returns the first failure, including a panic inside the
/// sequencer, with the seed and command index that reproduce it.
pub fn run_with(
    seed: u64,
    commands: u64,
    config: SimConfig,
    options: RunOptions,
) -> Result<SimOutcome, SimFailure> {
    run_driver(Driver::new(seed, config), commands, options)
}

/// Runs `commands` more commands of a driver with the checks of `options`.
/// The event checks expect to have seen every event, so the driver should
/// be fresh (tests may tamper with its state first to see a check fail).
pub fn run_driver(
    mut driver: Driver,
    commands: u64,
    options: RunOptions,
) -> Result<SimOutcome, SimFailure> {
    let seed = driver.seed;
    let mut checker = EventChecker::new();
    checker.tickers_after_close = options.tickers_after_close;
    let mut coverage = Coverage::default();
    let mut stamped_all = Vec::new();
    // The command under way, kept outside the closure so that a panic in
    // the sequencer can still be reported with the command that caused it.
    let mut current: Option<Box<Stamped>> = None;
    let result = catch_unwind(AssertUnwindSafe(|| -> Result<(), String> {
        for _ in 0..commands {
            let before = Digest::of(&driver.state);
            let stamped = driver.next_command();
            current = Some(Box::new(stamped.clone()));
            let reply = driver.apply(&stamped);
            // A refused command that moved no time-driven transition (no
            // events) must leave the state as it was.
            if reply.rejection().is_some()
                && driver.events.is_empty()
                && Digest::of(&driver.state) != before
            {
                return Err(format!("the refused command changed the state: {reply:?}"));
            }
            coverage.record(&stamped.command, &reply, &driver.events);
            check_reply(&driver.state, &stamped.command, &reply, &driver.events)?;
            if options.check_events {
                checker.observe(&driver.state, &driver.events)?;
                checker.compare_books(&driver.state)?;
                checker.compare_private(&driver.state, &driver.events)?;
            }
            if options.check_every > 0 && stamped.seq.is_multiple_of(options.check_every) {
                driver.state.check_invariants()?;
            }
            if options.record {
                stamped_all.push(stamped);
            }
        }
        driver.state.check_invariants()
    }));
    let failure = |message: String| SimFailure {
        seed,
        // The seq of the command that failed, less one (seq starts at 1).
        index: current.as_ref().map_or(0, |c| c.seq - 1),
        command: current.clone(),
        message,
    };
    match result {
        Ok(Ok(())) => {}
        Ok(Err(message)) => return Err(failure(message)),
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".to_string());
            return Err(failure(format!("panic: {message}")));
        }
    }
    // The per-command checks walk only resting orders; at the end, every
    // order ever placed is checked once.
    if let Err(message) = driver.state.check_all_orders() {
        return Err(failure(format!("final check: {message}")));
    }
    coverage.book_deltas = checker.deltas;
    Ok(SimOutcome {
        seed,
        commands: driver.seq,
        state_hash: driver.state.state_hash(),
        event_hash: driver.state.event_hash,
        events_total: driver.state.events_total,
        state: driver.state,
        stamped: stamped_all,
        coverage,
    })
}

// ----- coverage ---------------------------------------------------------------

/// Counts of what a run exercised, so a test can assert that the stream was
/// not degenerate (no fills, no settlements, a refusal code never reached).
#[derive(Clone, Debug, Default)]
pub struct Coverage {
    /// Commands by kind name.
    pub commands: BTreeMap<&'static str, u64>,
    /// Refusals by (command kind name, code).
    pub refusals: BTreeMap<(&'static str, &'static str), u64>,
    pub orders_accepted: u64,
    pub orders_rested: u64,
    pub orders_executed: u64,
    pub idempotent_retries: u64,
    pub fills: u64,
    pub trades: u64,
    pub minted_pairs: u64,
    pub burned_pairs: u64,
    /// Orders that traded at two or more prices.
    pub multi_level_sweeps: u64,
    /// Orders that traded with two or more resting orders at one price.
    pub multi_order_levels: u64,
    pub cancels: u64,
    /// Cancels of orders that had already finished (answered as they stand).
    pub cancels_of_finished: u64,
    /// Cancels of orders that had left for the history store (answered
    /// from there by the gateway).
    pub cancels_from_history: u64,
    pub cancel_all_orders: u64,
    /// Resting orders cancelled because their window closed.
    pub close_cancels: u64,
    pub markets_opened: u64,
    pub settled_up: u64,
    pub settled_down: u64,
    pub settled_without_result: u64,
    pub book_deltas: u64,
}

impl Coverage {
    /// Counts one command, its reply and its events.
    pub fn record(&mut self, command: &Command, reply: &Reply, events: &[Event]) {
        let kind = Command::kind_name(command.kind());
        *self.commands.entry(kind).or_default() += 1;
        match reply {
            Reply::Rejected(reject) => {
                *self
                    .refusals
                    .entry((kind, reject.code.as_str()))
                    .or_default() += 1
            }
            Reply::Order { order, created } => match command {
                Command::PlaceOrder { .. } if *created => {
                    self.orders_accepted += 1;
                    match order.status {
                        OrderStatus::Resting => self.orders_rested += 1,
                        OrderStatus::Executed => self.orders_executed += 1,
                        OrderStatus::Canceled => {}
                    }
                }
                Command::PlaceOrder { .. } => self.idempotent_retries += 1,
                Command::CancelOrder { order_id, .. } => {
                    // Only a cancel that took a resting order off emits it.
                    let took = events
                        .iter()
                        .any(|e| matches!(e, Event::Order(o) if o.id == *order_id));
                    if took {
                        self.cancels += 1;
                    } else {
                        self.cancels_of_finished += 1;
                    }
                }
                _ => {}
            },
            Reply::Canceled { order_ids } => self.cancel_all_orders += order_ids.len() as u64,
            Reply::OrderInHistory { .. } => self.cancels_from_history += 1,
            _ => {}
        }
        let closed: BTreeSet<MarketId> = events
            .iter()
            .filter_map(|e| match e {
                Event::Lifecycle {
                    market,
                    phase: sequencer::event::Phase::Closed,
                    ..
                } => Some(*market),
                _ => None,
            })
            .collect();
        let mut maker: Option<Action> = None;
        let mut prices: BTreeMap<PriceCents, u32> = BTreeMap::new();
        for event in events {
            match event {
                Event::Fill(fill) => {
                    self.fills += 1;
                    if !fill.is_taker {
                        maker = Some(fill.action);
                    } else {
                        match (maker, fill.action) {
                            (Some(Action::Buy), Action::Buy) => {
                                self.minted_pairs += u64::from(fill.count)
                            }
                            (Some(Action::Sell), Action::Sell) => {
                                self.burned_pairs += u64::from(fill.count)
                            }
                            _ => {}
                        }
                    }
                }
                Event::Trade(trade) => {
                    self.trades += 1;
                    *prices.entry(trade.up_price).or_default() += 1;
                }
                Event::Order(order)
                    if order.status == OrderStatus::Canceled && closed.contains(&order.market) =>
                {
                    self.close_cancels += 1
                }
                Event::Lifecycle { phase, .. } => match phase {
                    sequencer::event::Phase::Open { .. } => self.markets_opened += 1,
                    sequencer::event::Phase::Settled { result, .. } => match result {
                        Some(Outcome::Up) => self.settled_up += 1,
                        Some(Outcome::Down) => self.settled_down += 1,
                        None => self.settled_without_result += 1,
                    },
                    sequencer::event::Phase::Closed => {}
                },
                _ => {}
            }
        }
        if matches!(command, Command::PlaceOrder { .. }) {
            if prices.len() >= 2 {
                self.multi_level_sweeps += 1;
            }
            if prices.values().any(|&n| n >= 2) {
                self.multi_order_levels += 1;
            }
        }
    }

    /// Refusals of one code to one command kind (kind as `Command::kind_name`).
    pub fn refused(&self, kind: &str, code: ErrorCode) -> u64 {
        self.refusals
            .iter()
            .filter(|((k, c), _)| *k == kind && *c == code.as_str())
            .map(|(_, n)| n)
            .sum()
    }

    /// Adds another run's counts.
    pub fn merge(&mut self, other: &Coverage) {
        for (k, n) in &other.commands {
            *self.commands.entry(k).or_default() += n;
        }
        for (k, n) in &other.refusals {
            *self.refusals.entry(*k).or_default() += n;
        }
        self.orders_accepted += other.orders_accepted;
        self.orders_rested += other.orders_rested;
        self.orders_executed += other.orders_executed;
        self.idempotent_retries += other.idempotent_retries;
        self.fills += other.fills;
        self.trades += other.trades;
        self.minted_pairs += other.minted_pairs;
        self.burned_pairs += other.burned_pairs;
        self.multi_level_sweeps += other.multi_level_sweeps;
        self.multi_order_levels += other.multi_order_levels;
        self.cancels += other.cancels;
        self.cancels_of_finished += other.cancels_of_finished;
        self.cancels_from_history += other.cancels_from_history;
        self.cancel_all_orders += other.cancel_all_orders;
        self.close_cancels += other.close_cancels;
        self.markets_opened += other.markets_opened;
        self.settled_up += other.settled_up;
        self.settled_down += other.settled_down;
        self.settled_without_result += other.settled_without_result;
        self.book_deltas += other.book_deltas;
    }
}

impl fmt::Display for Coverage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "commands: {:?}", self.commands)?;
        writeln!(
            f,
            "orders accepted {} (rested {}, executed at once {}), idempotent retries {}",
            self.orders_accepted, self.orders_rested, self.orders_executed, self.idempotent_retries
        )?;
        writeln!(
            f,
            "fills {}, trades {}, contracts minted {} burned {}, multi-level sweeps {}, multi-order levels {}",
            self.fills, self.trades, self.minted_pairs, self.burned_pairs, self.multi_level_sweeps, self.multi_order_levels
        )?;
        writeln!(
            f,
            "cancels {} (of finished orders {}, of orders in the history store {}), cancel-all orders {}, cancelled at close {}, book deltas {}",
            self.cancels, self.cancels_of_finished, self.cancels_from_history, self.cancel_all_orders, self.close_cancels, self.book_deltas
        )?;
        writeln!(
            f,
            "markets opened {}, settled up {}, down {}, without result {}",
            self.markets_opened, self.settled_up, self.settled_down, self.settled_without_result
        )?;
        write!(f, "refusals: {:?}", self.refusals)
    }
}
