//! The REST benchmark run: start both servers, find each one's maximum rate
//! in interleaved closed-loop rounds, then measure each one's latency at
//! half its maximum rate in interleaved open-loop rounds, check that every
//! order was accepted and that the venue holds every one, and print the
//! figures, the ratio and whether the aims of the issue are met.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway::config::DurabilityPolicy;

use crate::engines::BenchError;
use crate::rest::cpu::{current_tid, CpuTimes, Role};
use crate::rest::load::{closed_loop, open_loop, LoadOutcome, Target};
use crate::rest::servers::{Bare, BatchStats, Venue};

/// Aims of the issue.
pub const AIM_VENUE_OVER_BARE: f64 = 0.8;
pub const AIM_P99_NS: u64 = 1_000_000;

/// Settings of a run, from the environment (see the README).
#[derive(Clone, Debug)]
pub struct RestConfig {
    /// Keep-alive connections of the load generator, per server, each with
    /// one request in flight.
    pub connections: usize,
    /// Interleaved rounds of each kind of phase.
    pub rounds: usize,
    /// Measured length of each phase.
    pub measure: Duration,
    /// Unmeasured lead-in of each phase.
    pub warmup: Duration,
    /// Traders (accounts with one key each) the connections take turns with.
    pub traders: usize,
    /// Threads of the load generator's runtime (1: a current-thread runtime).
    pub client_threads: usize,
    /// Open-loop rate; `None`: half of each server's best closed-loop rate.
    pub rate: Option<f64>,
    /// Where the venue's data directory goes (a temporary folder inside it).
    pub dir: PathBuf,
    /// The venue's journal durability: group commit, as the issue asks,
    /// unless `UPDOWN_BENCH_REST_DURABILITY` says otherwise (experiments).
    pub durability: DurabilityPolicy,
}

/// Default keep-alive connections per server (see `RestConfig::from_env`).
pub const CONNECTIONS: usize = 256;

impl RestConfig {
    /// Reads `UPDOWN_BENCH_REST_SECONDS`, `UPDOWN_BENCH_REST_WARMUP`,
    /// `UPDOWN_BENCH_REST_CONNECTIONS`, `UPDOWN_BENCH_REST_ROUNDS`,
    /// `UPDOWN_BENCH_REST_TRADERS`, `UPDOWN_BENCH_REST_CLIENT_THREADS`,
    /// `UPDOWN_BENCH_REST_RATE`, `UPDOWN_BENCH_REST_DURABILITY` and
    /// `UPDOWN_BENCH_DIR`.
    pub fn from_env() -> Result<Self, String> {
        fn var<T: std::str::FromStr>(name: &str) -> Result<Option<T>, String> {
            match std::env::var(name) {
                Ok(text) => text
                    .trim()
                    .replace('_', "")
                    .parse()
                    .map(Some)
                    .map_err(|_| format!("{name}={text} is not a number")),
                Err(_) => Ok(None),
            }
        }
        let seconds: f64 = var("UPDOWN_BENCH_REST_SECONDS")?.unwrap_or(5.0);
        let warmup: f64 =
            var("UPDOWN_BENCH_REST_WARMUP")?.unwrap_or((seconds / 5.0).clamp(0.2, 1.0));
        if !(seconds > 0.0 && seconds < 3600.0 && (0.0..3600.0).contains(&warmup)) {
            return Err("seconds must be positive and the warm-up not negative".into());
        }
        let config = Self {
            // Enough requests in flight to saturate the venue: each of its
            // answers waits for a group-commit sync (about 1 ms here), so by
            // Little's law 60,000 a second need 60 or more in flight. With
            // 64, the venue's closed loop measured its latency, not its
            // capacity (0.64x the bare handler on this machine's disk, 0.91x
            // with 256 in the same hour); the bare handler, answering in
            // about 0.1 ms, reaches its one core at either count.
            connections: var("UPDOWN_BENCH_REST_CONNECTIONS")?.unwrap_or(CONNECTIONS),
            rounds: var("UPDOWN_BENCH_REST_ROUNDS")?.unwrap_or(3),
            measure: Duration::from_secs_f64(seconds),
            warmup: Duration::from_secs_f64(warmup),
            traders: var("UPDOWN_BENCH_REST_TRADERS")?.unwrap_or(8),
            client_threads: var("UPDOWN_BENCH_REST_CLIENT_THREADS")?.unwrap_or(1),
            rate: var("UPDOWN_BENCH_REST_RATE")?,
            dir: std::env::var_os("UPDOWN_BENCH_DIR")
                .map_or_else(std::env::temp_dir, PathBuf::from),
            durability: match std::env::var("UPDOWN_BENCH_REST_DURABILITY") {
                Ok(text) => serde_json::from_value(serde_json::Value::String(text.trim().into()))
                    .map_err(|_| {
                        format!(
                            "UPDOWN_BENCH_REST_DURABILITY={text} is not always, group_commit, interval or never"
                        )
                    })?,
                Err(_) => DurabilityPolicy::GroupCommit,
            },
        };
        if config.connections == 0
            || config.rounds == 0
            || config.traders == 0
            || config.client_threads == 0
            || config.rate.is_some_and(|r| r.is_nan() || r < 1.0)
        {
            return Err(
                "connections, rounds, traders, client threads and the rate must be positive".into(),
            );
        }
        Ok(config)
    }

    /// The smoke configuration: short phases, one round, few connections.
    pub fn smoke(seconds: f64) -> Self {
        Self {
            connections: 8,
            rounds: 1,
            measure: Duration::from_secs_f64(seconds),
            warmup: Duration::from_secs_f64((seconds / 5.0).clamp(0.05, 1.0)),
            traders: 3,
            client_threads: 1,
            rate: None,
            dir: std::env::temp_dir(),
            durability: DurabilityPolicy::GroupCommit,
        }
    }
}

/// The two servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    Bare,
    Venue,
}

impl ServerKind {
    pub const ALL: [ServerKind; 2] = [Self::Bare, Self::Venue];

    pub fn name(self) -> &'static str {
        match self {
            Self::Bare => "bare axum handler",
            Self::Venue => "venue (gateway + sequencer + journal)",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Self::Bare => "bare",
            Self::Venue => "venue",
        }
    }
}

/// One load phase against one server.
pub struct Phase {
    pub kind: ServerKind,
    pub round: usize,
    pub outcome: LoadOutcome,
    /// Venue only: the sequencer's batches during the phase.
    pub batches: Option<BatchStats>,
    /// CPU time of each kind of thread during the phase, warm-up included.
    pub cpu: CpuTimes,
    /// Wall time of the whole phase, warm-up included.
    pub wall: Duration,
}

impl Phase {
    /// Microseconds of CPU per request spent by threads of `role`.
    pub fn cpu_per_request_us(&self, role: Role) -> f64 {
        self.cpu.get(role) as f64 / 1e3 / self.outcome.sent.max(1) as f64
    }

    /// Cores kept busy on average by threads of `role`.
    pub fn cores(&self, role: Role) -> f64 {
        self.cpu.get(role) as f64 / 1e9 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// The whole result.
pub struct RestReport {
    pub config: RestConfig,
    /// Closed-loop phases, in the order they ran.
    pub closed: Vec<Phase>,
    /// Open-loop phases, in the order they ran.
    pub open: Vec<Phase>,
    /// Orders resting at the venue at the end, per the admin API.
    pub venue_resting: u64,
    /// Batches of events the venue's websocket publisher could not take.
    pub lost_batches: u64,
}

impl RestReport {
    fn phases(&self, kind: ServerKind) -> impl Iterator<Item = &Phase> {
        self.closed
            .iter()
            .chain(&self.open)
            .filter(move |p| p.kind == kind)
    }

    /// Requests sent to a server over the whole run (warm-ups included).
    pub fn sent(&self, kind: ServerKind) -> u64 {
        self.phases(kind).map(|p| p.outcome.sent).sum()
    }

    /// Of those, answered 201.
    pub fn created(&self, kind: ServerKind) -> u64 {
        self.phases(kind).map(|p| p.outcome.created).sum()
    }

    /// Best closed-loop rate of a server.
    pub fn best_rate(&self, kind: ServerKind) -> f64 {
        self.closed
            .iter()
            .filter(|p| p.kind == kind)
            .map(|p| p.outcome.rate())
            .fold(0.0, f64::max)
    }

    /// The open-loop round with the lowest p99 (the best of the rounds).
    pub fn best_latency(&self, kind: ServerKind) -> Option<&Phase> {
        self.open
            .iter()
            .filter(|p| p.kind == kind)
            .min_by_key(|p| p.outcome.latency.value_at_quantile(0.99))
    }

    /// Venue over bare, best rates.
    pub fn ratio(&self) -> f64 {
        self.best_rate(ServerKind::Venue) / self.best_rate(ServerKind::Bare).max(1e-9)
    }
}

/// Runs the whole benchmark, writing progress and the tables to `out`.
pub fn run(config: &RestConfig, out: &mut dyn Write) -> Result<RestReport, BenchError> {
    let started = Instant::now();
    let client = if config.client_threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.client_threads)
            .thread_name("load")
            .enable_all()
            .build()?
    };
    let root = tempfile::Builder::new()
        .prefix("updown-bench-rest-")
        .tempdir_in(&config.dir)?;
    let venue = Venue::start(root.path(), config.durability, config.traders, &client)?;
    let bare = Bare::start()?;
    writeln!(
        out,
        "updown REST order entry benchmark: {} keep-alive connections per server, {} round(s) of {:.1} s (+{:.1} s warm-up) per phase, {} trader(s), load generator on {} thread(s)",
        config.connections,
        config.rounds,
        config.measure.as_secs_f64(),
        config.warmup.as_secs_f64(),
        config.traders,
        config.client_threads,
    )?;
    writeln!(out, "load average before: {}", load_average())?;
    writeln!(
        out,
        "venue at {} (data in {}, durability {:?}, 1 gateway worker); bare handler at {} (1 worker); markets {}",
        venue.server.addr,
        root.path().display(),
        config.durability,
        bare.addr(),
        venue.markets.join(", ")
    )?;
    let keys = Arc::new(venue.keys.clone());
    let markets = Arc::new(venue.markets.clone());
    let target = |kind: ServerKind| Target {
        addr: match kind {
            ServerKind::Bare => bare.addr(),
            ServerKind::Venue => venue.server.addr,
        },
        keys: keys.clone(),
        markets: markets.clone(),
    };
    // The thread that runs a current-thread client runtime: this one.
    let tid = current_tid().filter(|_| config.client_threads == 1);
    // Every phase gets its own number: it is part of every client_order_id.
    let mut phase_no = 0u32;
    // Interleaved, and the first server of each round alternates, so that a
    // slow spell of this shared machine hits both alike.
    let order = |round: usize| {
        if round.is_multiple_of(2) {
            ServerKind::ALL
        } else {
            [ServerKind::Venue, ServerKind::Bare]
        }
    };

    let mut closed = Vec::new();
    for round in 0..config.rounds {
        write!(out, "closed loop, round {}:", round + 1)?;
        for kind in order(round) {
            phase_no += 1;
            let before = (venue.batches(), CpuTimes::now(tid), Instant::now());
            let outcome = client.block_on(closed_loop(
                &target(kind),
                config.connections,
                phase_no,
                config.warmup,
                config.measure,
            ))?;
            let phase = phase(kind, round, outcome, before, (venue.batches(), tid));
            write!(out, " {} {:.0} req/s", kind.short(), phase.outcome.rate())?;
            if let Some(b) = phase.batches {
                write!(
                    out,
                    " ({:.1} jobs, {:.0} µs per sequencer batch; {:.1} jobs, {:.0} µs per journal sync)",
                    b.jobs_per_batch(),
                    b.us_per_batch(),
                    b.jobs_per_sync(),
                    b.us_per_sync()
                )?;
            }
            write!(out, ";")?;
            out.flush()?;
            closed.push(phase);
        }
        writeln!(out)?;
    }
    let best = |kind: ServerKind| {
        closed
            .iter()
            .filter(|p| p.kind == kind)
            .map(|p| p.outcome.rate())
            .fold(0.0, f64::max)
    };
    let rate = |kind: ServerKind| config.rate.unwrap_or_else(|| (best(kind) / 2.0).max(1.0));

    let mut open = Vec::new();
    for round in 0..config.rounds {
        write!(out, "open loop, round {}:", round + 1)?;
        for kind in order(round) {
            phase_no += 1;
            let before = (venue.batches(), CpuTimes::now(tid), Instant::now());
            let outcome = client.block_on(open_loop(
                &target(kind),
                config.connections,
                phase_no,
                rate(kind),
                config.warmup,
                config.measure,
            ))?;
            let phase = phase(kind, round, outcome, before, (venue.batches(), tid));
            let l = &phase.outcome.latency;
            write!(
                out,
                " {} at {:.0}/s p50 {} p99 {} p99.9 {};",
                kind.short(),
                rate(kind),
                time(l.value_at_quantile(0.5)),
                time(l.value_at_quantile(0.99)),
                time(l.value_at_quantile(0.999)),
            )?;
            out.flush()?;
            open.push(phase);
        }
        writeln!(out)?;
    }

    let venue_resting = venue.resting_orders(&client)?;
    let report = RestReport {
        config: config.clone(),
        closed,
        open,
        venue_resting,
        lost_batches: venue.lost_batches(),
    };
    print_tables(&report, out)?;
    drop(bare);
    venue.server.stop();
    writeln!(
        out,
        "load average after: {} (other jobs on these 2 cores move every figure)",
        load_average()
    )?;
    writeln!(out, "total time {:.1} s", started.elapsed().as_secs_f64())?;
    Ok(report)
}

/// A finished phase: `before` is (the sequencer's batches, CPU times,
/// start), `after` the batches now and the client's thread id.
fn phase(
    kind: ServerKind,
    round: usize,
    outcome: LoadOutcome,
    before: (BatchStats, CpuTimes, Instant),
    after: (BatchStats, Option<u32>),
) -> Phase {
    let (batches, cpu, started) = before;
    let (batches_now, tid) = after;
    Phase {
        kind,
        round,
        outcome,
        batches: (kind == ServerKind::Venue).then(|| batches_now.since(&batches)),
        cpu: CpuTimes::now(tid).since(&cpu),
        wall: started.elapsed(),
    }
}

/// Where the CPU went: per request, by kind of thread, in each server's
/// best closed-loop phase and in its best open-loop phase.
fn print_cpu(report: &RestReport, out: &mut dyn Write) -> std::io::Result<()> {
    if report.closed.iter().all(|p| p.cpu.0.is_empty()) {
        return Ok(());
    }
    writeln!(out)?;
    let names: Vec<&str> = Role::ALL.iter().map(|r| r.name()).collect();
    writeln!(
        out,
        "| CPU µs per request (cores busy) | {} |",
        names.join(" | ")
    )?;
    writeln!(out, "| - |{}", " -: |".repeat(names.len()))?;
    for kind in ServerKind::ALL {
        let best_closed = report
            .closed
            .iter()
            .filter(|p| p.kind == kind)
            .max_by(|a, b| a.outcome.rate().total_cmp(&b.outcome.rate()));
        let phases = [
            ("closed loop", best_closed),
            ("open loop", report.best_latency(kind)),
        ];
        for (name, phase) in phases {
            let Some(p) = phase else { continue };
            let cells: Vec<String> = Role::ALL
                .iter()
                .map(|&role| {
                    // Threads of the other server sit idle: leave them out.
                    if p.cores(role) < 0.005 {
                        "-".to_string()
                    } else {
                        format!("{:.1} ({:.2})", p.cpu_per_request_us(role), p.cores(role))
                    }
                })
                .collect();
            writeln!(out, "| {}, {name} | {} |", kind.short(), cells.join(" | "))?;
        }
    }
    Ok(())
}

/// The 1-, 5- and 15-minute load averages, where `/proc` has them.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Mean jobs and microseconds per sequencer batch, then per journal sync,
/// or `-`.
fn batch_cell(phase: &Phase) -> String {
    phase.batches.map_or("-".into(), |b| {
        format!(
            "{:.1} / {:.0}; {:.1} / {:.0}",
            b.jobs_per_batch(),
            b.us_per_batch(),
            b.jobs_per_sync(),
            b.us_per_sync()
        )
    })
}

/// Formats nanoseconds as µs or ms.
fn time(ns: u64) -> String {
    if ns < 1_000_000 {
        format!("{:.0} µs", ns as f64 / 1e3)
    } else {
        format!("{:.2} ms", ns as f64 / 1e6)
    }
}

fn print_tables(report: &RestReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "| server, closed loop | best req/s | every round (req/s) | p50 / p99 | sequencer batch: jobs / µs; journal sync: jobs / µs |"
    )?;
    writeln!(out, "| - | -: | - | -: | -: |")?;
    for kind in ServerKind::ALL {
        let phases: Vec<&Phase> = report.closed.iter().filter(|p| p.kind == kind).collect();
        let rounds: Vec<String> = phases
            .iter()
            .map(|p| format!("{:.0}", p.outcome.rate()))
            .collect();
        let best = phases
            .iter()
            .max_by(|a, b| a.outcome.rate().total_cmp(&b.outcome.rate()));
        let (latency, batch) = match best {
            Some(p) => (
                format!(
                    "{} / {}",
                    time(p.outcome.latency.value_at_quantile(0.5)),
                    time(p.outcome.latency.value_at_quantile(0.99))
                ),
                batch_cell(p),
            ),
            None => ("-".into(), "-".into()),
        };
        writeln!(
            out,
            "| {} | **{:.0}** | {} | {latency} | {batch} |",
            kind.name(),
            report.best_rate(kind),
            rounds.join(" / "),
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "| server, open loop at half its best rate | rate | p50 | p99 | p99.9 | max | p99 every round | pacer lag p99 | sequencer batch: jobs / µs; journal sync: jobs / µs |"
    )?;
    writeln!(out, "| - | -: | -: | -: | -: | -: | - | -: | -: |")?;
    for kind in ServerKind::ALL {
        let Some(best) = report.best_latency(kind) else {
            continue;
        };
        let o = &best.outcome;
        let rounds: Vec<String> = report
            .open
            .iter()
            .filter(|p| p.kind == kind)
            .map(|p| time(p.outcome.latency.value_at_quantile(0.99)))
            .collect();
        writeln!(
            out,
            "| {} | {:.0}/s (got {:.0}) | {} | **{}** | {} | {} | {} | {} | {} |",
            kind.name(),
            o.target_rate.unwrap_or(0.0),
            o.rate(),
            time(o.latency.value_at_quantile(0.5)),
            time(o.latency.value_at_quantile(0.99)),
            time(o.latency.value_at_quantile(0.999)),
            time(o.latency.max()),
            rounds.join(" / "),
            o.pacer_lag
                .as_ref()
                .map_or("-".into(), |h| time(h.value_at_quantile(0.99))),
            batch_cell(best),
        )?;
    }
    print_cpu(report, out)?;
    writeln!(out)?;
    let ratio = report.ratio();
    let per_round: Vec<String> = (0..report.config.rounds)
        .filter_map(|round| {
            let rate = |kind| {
                report
                    .closed
                    .iter()
                    .find(|p| p.kind == kind && p.round == round)
                    .map(|p| p.outcome.rate())
            };
            Some(format!(
                "{:.2}",
                rate(ServerKind::Venue)? / rate(ServerKind::Bare)?.max(1e-9)
            ))
        })
        .collect();
    writeln!(
        out,
        "venue / bare, best rates: {ratio:.2}  (within each round: {})",
        per_round.join(" / ")
    )?;
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    writeln!(out, "aims:")?;
    writeln!(
        out,
        "  venue >= {AIM_VENUE_OVER_BARE}x the bare handler's rate:   {ratio:.2}x -> {}",
        verdict(ratio >= AIM_VENUE_OVER_BARE)
    )?;
    for kind in ServerKind::ALL {
        if let Some(p) = report.best_latency(kind) {
            let p99 = p.outcome.latency.value_at_quantile(0.99);
            writeln!(
                out,
                "  {} p99 <= 1 ms at half its max rate: {} -> {}{}",
                kind.short(),
                time(p99),
                verdict(p99 <= AIM_P99_NS),
                if kind == ServerKind::Bare {
                    " (reference)"
                } else {
                    ""
                }
            )?;
        }
    }
    for kind in ServerKind::ALL {
        let (sent, created) = (report.sent(kind), report.created(kind));
        let refusal = report
            .phases(kind)
            .find_map(|p| p.outcome.first_refusal.as_deref());
        writeln!(
            out,
            "{}: {created} of {sent} requests answered 201: {}{}",
            kind.short(),
            if created == sent { "yes" } else { "NO" },
            refusal.map_or(String::new(), |r| format!(" (first refusal: {r})"))
        )?;
    }
    writeln!(
        out,
        "venue holds every order it accepted ({} resting): {}",
        report.venue_resting,
        if report.venue_resting == report.created(ServerKind::Venue) {
            "yes"
        } else {
            "NO"
        }
    )?;
    writeln!(
        out,
        "event batches the websocket publisher could not take: {}",
        report.lost_batches
    )?;
    Ok(())
}
