//! Seeded simulations of the whole venue with every check after every
//! command (see `tests::sim` for the generator and `tests::checks` for the
//! checks).
//!
//! In CI (`cargo test -p tests --release --test simulation`):
//! - `simulation_ci` runs seeds 1, 2 and 3 with 100,000 commands each, the
//!   state invariants and the event checks after every command, and asserts
//!   that the streams exercised what they should (fills, burned pairs,
//!   settlements both ways, every refusal code, idempotent retries...);
//! - `same_seed_same_hashes` shows the run is deterministic, and that the
//!   recorded commands replay to the same state.
//!
//! Long mode, to run millions of commands (both honour the variables below):
//!   UPDOWN_SIM_SEEDS=100..108 UPDOWN_SIM_COMMANDS=2000000 \
//!     cargo test -p tests --release --test simulation -- --ignored long_simulation --nocapture
//! `long_simulation` defaults to seeds 100..104 with 1,000,000 commands each
//! and runs the full state invariants every 1,000 commands, because they
//! scan every order ever placed and so cost grows with the run; the event
//! checks still run after every command. `UPDOWN_SIM_CHECK_EVERY=1` checks
//! the invariants after every command at any length (quadratic time).
//!
//! Variables (all optional):
//! - `UPDOWN_SIM_SEED=s`: run only seed s (to reproduce a failure);
//! - `UPDOWN_SIM_SEEDS`: `n` for seeds 1..=n, `a..b` for a range (b
//!   excluded), or a list `4,9,12`;
//! - `UPDOWN_SIM_COMMANDS=n`: commands per seed;
//! - `UPDOWN_SIM_CHECK_EVERY=n`: run the state invariants every n commands;
//! - `UPDOWN_SIM_THREADS=n`: seeds run on n threads (default one per seed).
//!
//! A failure prints the seed, the command index and the command, and the
//! line that reruns exactly that seed up to that command.

use std::time::Instant;

use sequencer::command::Stamped;
use sequencer::{ErrorCode, Event, State};
use tests::harness::{Venue, WINDOW_MS};
use tests::sim::{run_driver, run_with, Coverage, Driver, RunOptions, SimConfig, SimOutcome};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}"))
    })
}

/// Seeds from `UPDOWN_SIM_SEED` / `UPDOWN_SIM_SEEDS`, or the defaults.
fn seeds(default: std::ops::Range<u64>) -> Vec<u64> {
    if let Some(seed) = env_u64("UPDOWN_SIM_SEED") {
        return vec![seed];
    }
    let Ok(text) = std::env::var("UPDOWN_SIM_SEEDS") else {
        return default.collect();
    };
    fn bad(text: &str) -> ! {
        panic!("UPDOWN_SIM_SEEDS must be n, a..b or a,b,c, not {text:?}")
    }
    if let Some((a, b)) = text.split_once("..") {
        let (a, b) = (a.trim().parse::<u64>(), b.trim().parse::<u64>());
        return match (a, b) {
            (Ok(a), Ok(b)) => (a..b).collect(),
            _ => bad(&text),
        };
    }
    if text.contains(',') {
        return text
            .split(',')
            .map(|s| s.trim().parse().unwrap_or_else(|_| bad(&text)))
            .collect();
    }
    match text.trim().parse::<u64>() {
        Ok(n) => (1..=n).collect(),
        Err(_) => bad(&text),
    }
}

/// Runs the seeds on parallel threads and returns their outcomes in seed
/// order; panics with the first failure. Threads default to one per seed
/// (at most 8; `UPDOWN_SIM_THREADS` overrides): seeds cost about the same,
/// so three seeds on two cores finish in 1.5 seed-times, not 2.
fn run_seeds(seeds: &[u64], commands: u64, options: RunOptions) -> Vec<SimOutcome> {
    run_seeds_with(seeds, commands, SimConfig::default(), options)
}

fn run_seeds_with(
    seeds: &[u64],
    commands: u64,
    config: SimConfig,
    options: RunOptions,
) -> Vec<SimOutcome> {
    let threads = env_u64("UPDOWN_SIM_THREADS")
        .unwrap_or(seeds.len().min(8) as u64)
        .max(1) as usize;
    let results = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|w| {
                let mine: Vec<u64> = seeds.iter().copied().skip(w).step_by(threads).collect();
                let config = config.clone();
                scope.spawn(move || {
                    mine.into_iter()
                        .map(|seed| {
                            let started = Instant::now();
                            let outcome = run_with(seed, commands, config.clone(), options);
                            if let Ok(o) = &outcome {
                                println!(
                                    "seed {seed}: {commands} commands in {:.1?}, {} events, {} orders ({} live), {} markets, {:.1} simulated hours, state {:016x} events {:016x}",
                                    started.elapsed(),
                                    o.events_total,
                                    o.state.orders.total(),
                                    o.state.orders.len(),
                                    o.state.markets.len(),
                                    (o.state.now_ms - tests::sim::SIM_T0) as f64 / 3_600_000.0,
                                    o.state_hash,
                                    o.event_hash
                                );
                            }
                            outcome
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a simulation worker panicked"))
            .collect::<Vec<_>>()
    });
    let mut outcomes = Vec::with_capacity(results.len());
    for result in results {
        match result {
            Ok(outcome) => outcomes.push(outcome),
            Err(failure) => panic!("{failure}"),
        }
    }
    outcomes.sort_by_key(|o| o.seed);
    outcomes
}

/// Asserts that the streams were not degenerate: per 100,000 commands,
/// enough of everything that the checks had something to check.
fn assert_coverage(coverage: &Coverage, commands: u64) {
    let per = |n: u64| (n * commands).div_ceil(100_000);
    let at_least = |what: &str, have: u64, want: u64| {
        assert!(
            have >= per(want),
            "coverage: {what} = {have}, want at least {} over {commands} commands\n{coverage}",
            per(want)
        );
    };
    at_least("accepted orders", coverage.orders_accepted, 10_000);
    at_least("orders resting after entry", coverage.orders_rested, 5_000);
    at_least("fills", coverage.fills, 5_000);
    at_least(
        "contracts burned by sell-sell trades",
        coverage.burned_pairs,
        100,
    );
    at_least(
        "orders that swept two or more levels",
        coverage.multi_level_sweeps,
        100,
    );
    at_least(
        "orders that met two orders at one level",
        coverage.multi_order_levels,
        50,
    );
    at_least("markets settled up", coverage.settled_up, 50);
    at_least("markets settled down", coverage.settled_down, 50);
    at_least(
        "idempotent retries that returned the order",
        coverage.idempotent_retries,
        100,
    );
    at_least("cancels that took an order off", coverage.cancels, 100);
    at_least(
        "cancels of finished orders",
        coverage.cancels_of_finished,
        20,
    );
    at_least(
        "orders cancelled by cancel-all",
        coverage.cancel_all_orders,
        20,
    );
    at_least(
        "orders cancelled when their window closed",
        coverage.close_cancels,
        100,
    );
    for code in [
        ErrorCode::BadRequest,
        ErrorCode::InsufficientBalance,
        ErrorCode::LimitExceeded,
        ErrorCode::MarketNotOpen,
        ErrorCode::PostOnlyCross,
        ErrorCode::SelfTrade,
        ErrorCode::IdempotencyConflict,
        ErrorCode::Forbidden,
        ErrorCode::Unauthorized,
        ErrorCode::TradingPaused,
    ] {
        at_least(
            &format!("orders refused with {}", code.as_str()),
            coverage.refused("place_order", code),
            10,
        );
    }
    at_least(
        "cancels refused with ORDER_NOT_FOUND",
        coverage.refused("cancel_order", ErrorCode::OrderNotFound),
        10,
    );
    at_least(
        "sixth keys refused with LIMIT_EXCEEDED",
        coverage.refused("issue_key", ErrorCode::LimitExceeded),
        5,
    );
    at_least(
        "prints refused with BAD_REQUEST",
        coverage.refused("price", ErrorCode::BadRequest),
        10,
    );
    at_least(
        "withdrawals over buying power",
        coverage.refused("withdraw", ErrorCode::InsufficientBalance),
        5,
    );
}

#[test]
fn simulation_ci() {
    let seeds = seeds(1..4);
    let commands = env_u64("UPDOWN_SIM_COMMANDS").unwrap_or(100_000);
    let check_every = env_u64("UPDOWN_SIM_CHECK_EVERY").unwrap_or(1);
    let started = Instant::now();
    let outcomes = run_seeds(
        &seeds,
        commands,
        RunOptions {
            check_every,
            ..RunOptions::default()
        },
    );
    let mut coverage = Coverage::default();
    for outcome in &outcomes {
        coverage.merge(&outcome.coverage);
    }
    println!(
        "{} seeds x {commands} commands in {:.1?}\n{coverage}",
        seeds.len(),
        started.elapsed()
    );
    // A short rerun of one seed (to reproduce a failure) need not cover all.
    if commands >= 100_000 {
        assert_coverage(&coverage, commands * seeds.len() as u64);
    }
}

/// The same mix with a 20-second history tail: ended orders, fills and
/// settled markets' books and trades leave the live state all through the
/// run, under every invariant and event check after every command, and a
/// replay of the recorded commands evicts the same way (same hashes).
#[test]
fn simulation_with_a_short_history_tail() {
    let seeds = seeds(21..23);
    let commands = env_u64("UPDOWN_SIM_COMMANDS").unwrap_or(60_000);
    let config = SimConfig {
        history_tail_ms: Some(20_000),
        ..SimConfig::default()
    };
    let options = RunOptions {
        record: true,
        ..RunOptions::default()
    };
    let outcomes = run_seeds_with(&seeds, commands, config, options);
    for (seed, outcome) in seeds.iter().zip(&outcomes) {
        let state = &outcome.state;
        assert!(
            state.orders.len() * 4 < state.orders.total() as usize,
            "seed {seed}: {} of {} orders still live",
            state.orders.len(),
            state.orders.total()
        );
        assert!(state.fills.len() * 4 < state.fills.total() as usize);
        assert!(state.markets.iter().filter(|m| m.history).count() > 10);
        assert!(
            outcome.coverage.cancels_from_history > 0,
            "seed {seed}: no cancel met an order in the history store"
        );
        let again = replay(&outcome.stamped);
        assert_eq!(
            (again.state_hash(), again.event_hash),
            (outcome.state_hash, outcome.event_hash),
            "seed {seed}: the replay evicted differently"
        );
    }
}

#[test]
#[ignore = "long mode: millions of commands; see the top of this file"]
fn long_simulation() {
    let seeds = seeds(100..104);
    let commands = env_u64("UPDOWN_SIM_COMMANDS").unwrap_or(1_000_000);
    let check_every = env_u64("UPDOWN_SIM_CHECK_EVERY").unwrap_or(1_000);
    let started = Instant::now();
    let outcomes = run_seeds(
        &seeds,
        commands,
        RunOptions {
            check_every,
            ..RunOptions::default()
        },
    );
    let mut coverage = Coverage::default();
    for outcome in &outcomes {
        coverage.merge(&outcome.coverage);
    }
    println!(
        "{} seeds x {commands} commands in {:.1?}\n{coverage}",
        seeds.len(),
        started.elapsed()
    );
    if commands >= 100_000 {
        assert_coverage(&coverage, commands * seeds.len() as u64);
    }
}

/// Replays recorded commands into a fresh state.
fn replay(commands: &[Stamped]) -> State {
    let mut state = State::default();
    let mut events = Vec::new();
    for stamped in commands {
        events.clear();
        state.apply(stamped, &mut events);
    }
    state
}

#[test]
fn same_seed_same_hashes() {
    let commands = 30_000;
    // The hashes alone are compared here; the checks run in simulation_ci.
    let fast = RunOptions {
        check_every: 0,
        check_events: false,
        ..RunOptions::default()
    };
    let first = run_with(
        7,
        commands,
        SimConfig::default(),
        RunOptions {
            record: true,
            ..fast
        },
    )
    .unwrap_or_else(|f| panic!("{f}"));
    let again = run_with(7, commands, SimConfig::default(), fast).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(
        first.state_hash, again.state_hash,
        "seed 7 gave two state hashes"
    );
    assert_eq!(
        first.event_hash, again.event_hash,
        "seed 7 gave two event hashes"
    );
    assert_eq!(first.state, again.state);
    // The commands as recorded rebuild the same state: what a replay of a
    // journal of this stream must do.
    assert_eq!(first.stamped.len() as u64, commands);
    let replayed = replay(&first.stamped);
    assert_eq!(replayed.state_hash(), first.state_hash);
    assert_eq!(replayed.event_hash, first.event_hash);
    // Another seed is another stream.
    let other = run_with(8, commands, SimConfig::default(), fast).unwrap_or_else(|f| panic!("{f}"));
    assert_ne!(
        first.state_hash, other.state_hash,
        "seeds 7 and 8 gave the same state hash"
    );
    assert_ne!(
        first.event_hash, other.event_hash,
        "seeds 7 and 8 gave the same event hash"
    );
    // The book-only stream is deterministic too.
    let a = run_with(7, 10_000, SimConfig::book_only(), fast).unwrap_or_else(|f| panic!("{f}"));
    let b = run_with(7, 10_000, SimConfig::book_only(), fast).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!((a.state_hash, a.event_hash), (b.state_hash, b.event_hash));
}

#[test]
fn a_failure_names_its_seed_and_command() {
    // A broken ledger: the money invariant fails after the first command.
    let mut driver = Driver::new(42, SimConfig::default());
    driver.state.ledger.deposits = 1;
    let failure = run_driver(driver, 100, RunOptions::default())
        .err()
        .expect("the check must fail");
    let text = failure.to_string();
    assert_eq!((failure.seed, failure.index), (42, 0));
    for needed in [
        "seed 42",
        "index 0",
        "money not conserved",
        "UPDOWN_SIM_SEED=42",
        "Configure",
    ] {
        assert!(text.contains(needed), "{needed:?} missing from {text}");
    }
    // A panic inside the sequencer is caught and reported the same way: a
    // state that believes it has seen seq 10 refuses seq 1. The default hook
    // would print that expected panic in the log of a passing run, so this
    // test's thread (libtest names it after the test) is kept quiet.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name() != Some("a_failure_names_its_seed_and_command") {
            default_hook(info);
        }
    }));
    let mut driver = Driver::new(43, SimConfig::default());
    driver.state.last_seq = 10;
    let failure = run_driver(driver, 100, RunOptions::default())
        .err()
        .expect("the sequencer must panic");
    assert_eq!((failure.seed, failure.index), (43, 0));
    assert!(
        failure.message.starts_with("panic: seq 1 after 10"),
        "{failure}"
    );
}

#[test]
fn ticker_follows_the_book_when_a_window_closes() {
    // SPEC (Channels): the ticker channel sends the top of book "when they
    // change". Closing a window cancels its resting orders; the emptied book
    // must reach ticker subscribers too (this once went missing).
    let mut venue = Venue::new();
    let trader = venue.trader(1_000_000);
    venue
        .place(trader, "buy up 0.55 x10")
        .expect("the order rests");
    venue.advance(WINDOW_MS);
    let deltas = venue
        .events
        .iter()
        .filter(|e| matches!(e, Event::BookDelta { .. }))
        .count();
    let tickers = venue
        .events
        .iter()
        .filter(|e| matches!(e, Event::Ticker { .. }))
        .count();
    assert_eq!(deltas, 1, "the close takes the resting order off the book");
    assert!(
        tickers > 0,
        "the close emptied the book (up bid 0.55 x10 -> none) but sent no ticker event"
    );
    // The same, checked over a whole simulated stream.
    let options = RunOptions {
        tickers_after_close: true,
        ..RunOptions::default()
    };
    if let Err(failure) = run_with(1, 20_000, SimConfig::default(), options) {
        panic!("no ticker at close: {failure}");
    }
}

#[test]
fn book_only_stream_passes_every_check() {
    // The differential test's stream, with the checks of this file too.
    let outcome = run_with(11, 20_000, SimConfig::book_only(), RunOptions::default())
        .unwrap_or_else(|f| panic!("{f}"));
    assert!(outcome.coverage.fills > 5_000, "{}", outcome.coverage);
}
