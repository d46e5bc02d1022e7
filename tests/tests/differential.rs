//! Differential test of matching: the same seeded command streams go through
//! the sequencer and through the naive reference book of
//! `tests::reference`, written from DESIGN §2 alone. After every command the
//! two must agree on the trades (maker order, count and Up-scale price, in
//! order), on the book refusals (SELF_TRADE and POST_ONLY_CROSS), on what
//! cancels take off, and on the full books, every level of both sides.
//! The ticker events are checked against the reference too: a command
//! that changes a market's top of book or last price sends one whose top
//! is the reference book's, and a command that changes neither sends none;
//! each maker's order event shows what the reference left of it.
//!
//! The stream is `SimConfig::book_only()`: a few rich accounts with one big
//! key each and one series of one-minute windows, so nearly every order
//! reaches the book, levels hold several orders, and larger orders sweep
//! several levels. Orders refused for reasons outside the book (buying power
//! of a sell, say) are not given to the reference, which knows only books.
//!
//! Environment:
//! - `UPDOWN_DIFF_SEEDS=n` runs seeds 1..=n (default 20);
//! - `UPDOWN_DIFF_SEED=s` runs only seed s;
//! - `UPDOWN_DIFF_COMMANDS=n` commands per seed (default 20,000).
//!
//! A failure names the seed and the command index that reproduce it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use sequencer::event::{Phase, Top};
use sequencer::types::{MarketId, OrderId, OrderStatus, Outcome, PriceCents};
use sequencer::{Command, ErrorCode, Event, Reply, State};
use tests::reference::{RefNewOrder, RefRefusal, RefTrade, Reference};
use tests::sim::{Driver, SimConfig};

/// What one seed compared, so the test can prove it compared something.
#[derive(Clone, Copy, Debug, Default)]
struct Compared {
    orders: u64,
    trades: u64,
    self_trades: u64,
    post_only_crosses: u64,
    multi_level_sweeps: u64,
    multi_order_levels: u64,
    cancels: u64,
    cancel_all: u64,
    close_cancels: u64,
    deepest_book: usize,
    tickers: u64,
    maker_updates: u64,
}

impl Compared {
    fn add(&mut self, o: &Compared) {
        self.orders += o.orders;
        self.trades += o.trades;
        self.self_trades += o.self_trades;
        self.post_only_crosses += o.post_only_crosses;
        self.multi_level_sweeps += o.multi_level_sweeps;
        self.multi_order_levels += o.multi_order_levels;
        self.cancels += o.cancels;
        self.cancel_all += o.cancel_all;
        self.close_cancels += o.close_cancels;
        self.deepest_book = self.deepest_book.max(o.deepest_book);
        self.tickers += o.tickers;
        self.maker_updates += o.maker_updates;
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}"))
    })
}

/// The trades of one command as the sequencer made them: each trade's maker
/// order (from the maker fill that precedes it), count and Up-scale price.
fn sequencer_trades(events: &[Event]) -> Vec<RefTrade> {
    let mut maker: Option<OrderId> = None;
    let mut trades = Vec::new();
    for event in events {
        match event {
            Event::Fill(fill) if !fill.is_taker => maker = Some(fill.order),
            Event::Trade(trade) => trades.push(RefTrade {
                maker: maker.take().expect("a maker fill precedes every trade"),
                count: trade.count,
                up_price: trade.up_price,
            }),
            _ => {}
        }
    }
    trades
}

/// Orders this command cancelled, by the order events it emitted.
fn cancelled_in(events: &[Event], market: Option<MarketId>) -> BTreeSet<OrderId> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Order(o)
                if o.status == OrderStatus::Canceled && market.is_none_or(|m| o.market == m) =>
            {
                Some(o.id)
            }
            _ => None,
        })
        .collect()
}

/// Levels of one side, best first, as (price, contracts).
type Levels = Vec<(PriceCents, u64)>;

/// Both sides of a market's book in the sequencer.
fn levels(state: &State, market: MarketId) -> (Levels, Levels) {
    let book = &state.markets[market as usize].book;
    (
        book.side(Outcome::Up).top(usize::MAX).collect(),
        book.side(Outcome::Down).top(usize::MAX).collect(),
    )
}

/// The top of book a reference book gives, on the Up scale (an Up ask is a
/// Down bid: DESIGN §2), with the last trade price.
fn reference_top(up: &Levels, down: &Levels, last_price: Option<PriceCents>) -> Top {
    let (up_bid, up_bid_size) = up.first().map_or((None, 0), |&(p, n)| (Some(p), n));
    let (up_ask, up_ask_size) = down.first().map_or((None, 0), |&(p, n)| (Some(100 - p), n));
    Top {
        up_bid,
        up_bid_size,
        up_ask,
        up_ask_size,
        last_price,
    }
}

/// Compares one command's effect on the book with the reference's;
/// `tops` holds each market's top as of the previous command.
fn compare_command(
    state: &State,
    command: &Command,
    reply: &Reply,
    events: &[Event],
    reference: &mut Reference,
    tops: &mut BTreeMap<MarketId, Top>,
    seen: &mut Compared,
) -> Result<(), String> {
    // The last trade of this command, per market: (market, Up price).
    let mut traded: Option<(MarketId, PriceCents)> = None;
    // Windows that closed during this command (time moves before the command
    // itself acts) cancel everything resting in them.
    for event in events {
        if let Event::Lifecycle {
            market,
            phase: Phase::Closed,
            ..
        } = event
        {
            let gone: BTreeSet<OrderId> = reference.close(*market).iter().map(|o| o.id).collect();
            let cancelled = cancelled_in(events, Some(*market));
            if gone != cancelled {
                return Err(format!(
                    "window {market} closed: reference cancels {gone:?}, sequencer {cancelled:?}"
                ));
            }
            seen.close_cancels += gone.len() as u64;
        }
    }
    match (command, reply) {
        (
            Command::PlaceOrder { order: new, .. },
            Reply::Order {
                order,
                created: true,
            },
        ) => {
            let placed = RefNewOrder {
                id: order.id,
                account: order.account,
                outcome: new.outcome,
                action: new.action,
                price: new.price,
                count: new.count,
                time_in_force: new.time_in_force,
                post_only: new.post_only,
            };
            let result = reference.place(new.market, &placed).map_err(|r| {
                format!(
                    "the sequencer accepted order {} that the reference refuses: {r:?}",
                    order.id
                )
            })?;
            let actual = sequencer_trades(events);
            if actual != result.trades {
                return Err(format!(
                    "order {} {new:?}: the sequencer traded {actual:?}, the reference {:?}",
                    order.id, result.trades
                ));
            }
            let rested = if order.status == OrderStatus::Resting {
                order.remaining()
            } else {
                0
            };
            if order.filled != result.filled() || rested != result.rested {
                return Err(format!(
                    "order {order:?}: the reference filled {} and rested {}",
                    result.filled(),
                    result.rested
                ));
            }
            // Each maker's last order event says what the reference left
            // of it: still resting with its remainder, or executed.
            let makers: BTreeSet<OrderId> = actual.iter().map(|t| t.maker).collect();
            for maker in makers {
                let update = events.iter().rev().find_map(|e| match e {
                    Event::Order(o) if o.id == maker => Some(*o),
                    _ => None,
                });
                let Some(update) = update else {
                    return Err(format!("maker {maker} traded with no order event"));
                };
                let count = state
                    .order(maker)
                    .map(|o| o.count)
                    .ok_or_else(|| format!("maker {maker} is not in the state"))?;
                let left = reference.remaining(maker).unwrap_or(0);
                let status = if left > 0 {
                    OrderStatus::Resting
                } else {
                    OrderStatus::Executed
                };
                if (update.status, count - update.filled) != (status, left) {
                    return Err(format!(
                        "maker {maker}: order event {update:?}, the reference leaves {left} ({status:?})"
                    ));
                }
                seen.maker_updates += 1;
            }
            seen.orders += 1;
            seen.trades += actual.len() as u64;
            traded = result.trades.last().map(|t| (new.market, t.up_price));
            let prices: BTreeSet<PriceCents> = actual.iter().map(|t| t.up_price).collect();
            if prices.len() >= 2 {
                seen.multi_level_sweeps += 1;
            }
            if actual.len() > prices.len() {
                seen.multi_order_levels += 1;
            }
        }
        (Command::PlaceOrder { key, order: new }, Reply::Rejected(reject))
            if matches!(reject.code, ErrorCode::SelfTrade | ErrorCode::PostOnlyCross) =>
        {
            let account = state
                .key(*key)
                .expect("an order that reached the book has a key")
                .account;
            let probe = RefNewOrder {
                id: state.orders.len() as OrderId + 1,
                account,
                outcome: new.outcome,
                action: new.action,
                price: new.price,
                count: new.count,
                time_in_force: new.time_in_force,
                post_only: new.post_only,
            };
            let expected = match reject.code {
                ErrorCode::SelfTrade => RefRefusal::SelfTrade,
                _ => RefRefusal::PostOnlyCross,
            };
            match reference.place(new.market, &probe) {
                Err(refusal) if refusal == expected => {}
                other => {
                    return Err(format!(
                        "the sequencer refused {new:?} with {reject}, the reference: {other:?}"
                    ))
                }
            }
            match expected {
                RefRefusal::SelfTrade => seen.self_trades += 1,
                RefRefusal::PostOnlyCross => seen.post_only_crosses += 1,
            }
        }
        (Command::CancelOrder { order_id, .. }, Reply::Order { order, .. }) => {
            let took = cancelled_in(events, None).contains(order_id);
            let was_resting = reference.cancel(*order_id).is_some();
            if took != was_resting || (was_resting && order.status != OrderStatus::Canceled) {
                return Err(format!("cancel of {order_id}: resting in the reference {was_resting}, answered {order:?}"));
            }
            seen.cancels += u64::from(took);
        }
        (
            Command::CancelAll {
                key,
                market,
                series,
            },
            Reply::Canceled { order_ids },
        ) => {
            let account = state
                .key(*key)
                .expect("cancel-all that succeeded has a key")
                .account;
            let keep = |m: MarketId| {
                let market_row = &state.markets[m as usize];
                market.as_deref().is_none_or(|t| market_row.ticker == t)
                    && series
                        .as_deref()
                        .is_none_or(|s| state.series[market_row.series as usize].config.ticker == s)
            };
            let expected = reference.resting_of(account, keep);
            if *order_ids != expected {
                return Err(format!(
                    "cancel-all cancelled {order_ids:?}, the reference expects {expected:?}"
                ));
            }
            for id in order_ids {
                reference.cancel(*id);
            }
            seen.cancel_all += order_ids.len() as u64;
        }
        _ => {}
    }
    // The full books must agree, every level of both sides.
    let markets: BTreeSet<MarketId> = reference
        .books
        .keys()
        .copied()
        .chain(state.active_markets.iter().copied())
        .collect();
    for market in markets {
        let (up, down) = levels(state, market);
        let book = reference.book(market);
        seen.deepest_book = seen.deepest_book.max(book.orders.len());
        let (ref_up, ref_down) = (book.levels(Outcome::Up), book.levels(Outcome::Down));
        if up != ref_up || down != ref_down {
            return Err(format!(
                "market {market}: sequencer book up {up:?} down {down:?}, reference up {ref_up:?} down {ref_down:?}"
            ));
        }
        // The ticker: sent with the reference's top when the top or the
        // last price changed, never otherwise.
        let before = tops.get(&market).copied().unwrap_or_default();
        let last_price = match traded {
            Some((m, price)) if m == market => Some(price),
            _ => before.last_price,
        };
        let want = reference_top(&ref_up, &ref_down, last_price);
        let sent = events.iter().rev().find_map(|e| match e {
            Event::Ticker { market: m, top } if *m == market => Some(*top),
            _ => None,
        });
        match sent {
            Some(top) if top != want => {
                return Err(format!(
                    "market {market}: ticker {top:?}, the reference's top {want:?}"
                ))
            }
            Some(top) if want == before => {
                return Err(format!(
                    "market {market}: ticker {top:?} sent, but the top was already that"
                ))
            }
            Some(_) => seen.tickers += 1,
            None if want != before => {
                return Err(format!(
                    "market {market}: the top went from {before:?} to {want:?} with no ticker"
                ))
            }
            None => {}
        }
        tops.insert(market, want);
    }
    Ok(())
}

/// Runs one seed; on a mismatch, the error names the seed and command.
fn run_seed(seed: u64, commands: u64) -> Result<Compared, String> {
    let mut driver = Driver::new(seed, SimConfig::book_only());
    let mut reference = Reference::default();
    let mut tops = BTreeMap::new();
    let mut seen = Compared::default();
    for index in 0..commands {
        let (stamped, reply) = driver.step();
        compare_command(&driver.state, &stamped.command, &reply, &driver.events, &mut reference, &mut tops, &mut seen).map_err(
            |e| {
                format!(
                    "differential seed {seed} failed at command index {index} (seq {}): {e}\ncommand: {stamped:?}\n\
                     reproduce: UPDOWN_DIFF_SEED={seed} UPDOWN_DIFF_COMMANDS={} cargo test -p tests --release --test differential",
                    stamped.seq,
                    index + 1
                )
            },
        )?;
    }
    Ok(seen)
}

#[test]
fn sequencer_matches_the_reference_book() {
    let commands = env_u64("UPDOWN_DIFF_COMMANDS").unwrap_or(20_000);
    let seeds: Vec<u64> = match env_u64("UPDOWN_DIFF_SEED") {
        Some(seed) => vec![seed],
        None => (1..=env_u64("UPDOWN_DIFF_SEEDS").unwrap_or(20)).collect(),
    };
    let started = Instant::now();
    // Two workers, one per core; each takes every other seed.
    let results: Vec<Result<Compared, String>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|w| {
                let mine: Vec<u64> = seeds.iter().copied().skip(w).step_by(2).collect();
                scope.spawn(move || {
                    mine.into_iter()
                        .map(|s| run_seed(s, commands))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a worker panicked"))
            .collect()
    });
    let mut total = Compared::default();
    for result in results {
        match result {
            Ok(seen) => total.add(&seen),
            Err(message) => panic!("{message}"),
        }
    }
    println!(
        "{} seeds x {commands} commands in {:?}: {total:?}",
        seeds.len(),
        started.elapsed()
    );
    // The comparison must have compared something of every kind.
    let n = seeds.len() as u64;
    assert!(
        total.orders >= 2_000 * n * commands / 20_000,
        "few orders reached the book: {total:?}"
    );
    assert!(
        total.trades >= 500 * n * commands / 20_000,
        "few trades: {total:?}"
    );
    assert!(
        total.multi_level_sweeps > 0,
        "no order swept two levels: {total:?}"
    );
    assert!(
        total.multi_order_levels > 0,
        "no order met two orders at one level: {total:?}"
    );
    assert!(
        total.self_trades > 0 && total.post_only_crosses > 0,
        "a book refusal was never compared: {total:?}"
    );
    assert!(
        total.cancels > 0 && total.cancel_all > 0 && total.close_cancels > 0,
        "a kind of cancel was never compared: {total:?}"
    );
    assert!(total.deepest_book >= 10, "books stayed shallow: {total:?}");
    assert!(
        total.tickers >= total.trades / 2,
        "few tickers compared: {total:?}"
    );
    assert!(
        total.maker_updates >= total.trades / 2,
        "few makers' order events compared: {total:?}"
    );
}
