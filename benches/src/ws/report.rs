//! The websocket fan-out run: start the venue and the bare server once;
//! for each subscriber count connect that many clients to each, then in
//! interleaved rounds drive each side at its maximum rate (a bounded
//! window of events in flight) and at a fixed event rate; check that every
//! client got every message in order; print the figures, the CPU split and
//! whether the aims of the issue are met.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway::config::DurabilityPolicy;
use hdrhistogram::Histogram;
use tokio::sync::Semaphore;

use crate::engines::BenchError;
use crate::ws::bare::{self, Bare};
use crate::ws::client::{self, histogram, wait_until, Board, Stamps};
use crate::ws::cpu::{CpuTimes, ROLES};
use crate::ws::venue::{Venue, QUIET};

/// Aims of the issue.
pub const AIM_VENUE_OVER_BARE: f64 = 0.8;
pub const AIM_P99_NS: u64 = 5_000_000;
/// The subscriber count the latency aim is about.
pub const AIM_P99_SUBSCRIBERS: usize = 1_000;
/// How long a phase waits for its last messages to arrive.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections opened at once while a subscriber set connects.
const CONNECTING_AT_ONCE: usize = 64;

/// The servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Venue,
    Bare,
    /// The bare server with coalesced writes (an experiment; not run
    /// unless asked for).
    Coalesced,
}

impl Side {
    pub const ALL: [Side; 3] = [Side::Venue, Side::Bare, Side::Coalesced];

    pub fn name(self) -> &'static str {
        match self {
            Side::Venue => "venue",
            Side::Bare => "bare fastwebsockets",
            Side::Coalesced => "bare, coalesced writes",
        }
    }

    fn parse(text: &str) -> Option<Side> {
        match text.trim() {
            "venue" => Some(Side::Venue),
            "bare" => Some(Side::Bare),
            "coalesced" => Some(Side::Coalesced),
            _ => None,
        }
    }
}

/// How a phase drives its side.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    /// As fast as the slowest client takes it: at most `window` events
    /// sent and not yet received by every client.
    Max { window: u64 },
    /// A fixed number of events per second, whatever the clients do.
    Rate(f64),
}

/// Settings of a run, from the environment (see the README).
#[derive(Clone, Debug)]
pub struct WsConfig {
    /// Subscriber counts, run one after the other.
    pub subscribers: Vec<usize>,
    /// Interleaved rounds per subscriber count.
    pub rounds: usize,
    /// Length of each maximum-rate phase.
    pub measure: Duration,
    /// Length of each fixed-rate phase.
    pub latency_measure: Duration,
    /// Unmeasured maximum-rate lead-in of each side per subscriber count.
    pub warmup: Duration,
    /// Events per second of the fixed-rate phases.
    pub rate: f64,
    /// Events in flight in the maximum-rate phases.
    pub window: u64,
    /// Threads of the clients' runtime.
    pub client_threads: usize,
    /// Worker threads of the venue's gateway and of the bare server.
    pub workers: usize,
    /// Where the venue's data directory goes (a temporary folder inside it).
    pub dir: PathBuf,
    /// The venue's journal durability.
    pub durability: DurabilityPolicy,
    /// The sides to run, in this order within a round (the order turns
    /// every round).
    pub sides: Vec<Side>,
}

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

impl WsConfig {
    /// The full run's defaults.
    pub fn full() -> Self {
        Self {
            subscribers: vec![1, 100, 1000],
            rounds: 3,
            measure: Duration::from_secs(3),
            latency_measure: Duration::from_secs(3),
            warmup: Duration::from_millis(500),
            rate: 100.0,
            window: 256,
            client_threads: 1,
            workers: 1,
            dir: std::env::temp_dir(),
            durability: DurabilityPolicy::Never,
            sides: vec![Side::Venue, Side::Bare],
        }
    }

    /// The smoke run: short phases, one round, 1 and 40 subscribers (40
    /// needs three source addresses).
    pub fn smoke() -> Self {
        Self {
            subscribers: vec![1, 40],
            rounds: 1,
            measure: Duration::from_millis(300),
            latency_measure: Duration::from_millis(300),
            warmup: Duration::from_millis(100),
            rate: 500.0,
            ..Self::full()
        }
    }

    /// `UPDOWN_BENCH_WS_SMOKE=1` starts from the smoke run; then
    /// `UPDOWN_BENCH_WS_SUBSCRIBERS` (comma-separated), `_ROUNDS`,
    /// `_SECONDS`, `_LATENCY_SECONDS`, `_WARMUP`, `_RATE`, `_WINDOW`,
    /// `_CLIENT_THREADS`, `_WORKERS`, `_DURABILITY`, `_SIDES` (a list of venue, bare
    /// and coalesced; default venue,bare) and
    /// `UPDOWN_BENCH_DIR` override it.
    pub fn from_env() -> Result<Self, String> {
        let smoke = std::env::var("UPDOWN_BENCH_WS_SMOKE").is_ok_and(|v| v != "0" && !v.is_empty());
        let mut c = if smoke { Self::smoke() } else { Self::full() };
        if let Ok(text) = std::env::var("UPDOWN_BENCH_WS_SUBSCRIBERS") {
            c.subscribers = text
                .split(',')
                .map(|n| n.trim().replace('_', "").parse::<usize>())
                .collect::<Result<_, _>>()
                .map_err(|_| {
                    format!("UPDOWN_BENCH_WS_SUBSCRIBERS={text} is not a list of counts")
                })?;
        }
        if let Some(v) = var("UPDOWN_BENCH_WS_ROUNDS")? {
            c.rounds = v;
        }
        let secs = |v: f64| Duration::from_secs_f64(v.clamp(0.0, 3600.0));
        if let Some(v) = var("UPDOWN_BENCH_WS_SECONDS")? {
            c.measure = secs(v);
        }
        if let Some(v) = var("UPDOWN_BENCH_WS_LATENCY_SECONDS")? {
            c.latency_measure = secs(v);
        }
        if let Some(v) = var("UPDOWN_BENCH_WS_WARMUP")? {
            c.warmup = secs(v);
        }
        if let Some(v) = var("UPDOWN_BENCH_WS_RATE")? {
            c.rate = v;
        }
        if let Some(v) = var("UPDOWN_BENCH_WS_WINDOW")? {
            c.window = v;
        }
        if let Some(v) = var("UPDOWN_BENCH_WS_CLIENT_THREADS")? {
            c.client_threads = v;
        }
        if let Some(v) = var("UPDOWN_BENCH_WS_WORKERS")? {
            c.workers = v;
        }
        if let Some(dir) = std::env::var_os("UPDOWN_BENCH_DIR") {
            c.dir = dir.into();
        }
        if let Ok(text) = std::env::var("UPDOWN_BENCH_WS_DURABILITY") {
            c.durability = serde_json::from_value(serde_json::Value::String(text.trim().into()))
                .map_err(|_| {
                    format!("UPDOWN_BENCH_WS_DURABILITY={text} is not always, group_commit, interval or never")
                })?;
        }
        if let Ok(text) = std::env::var("UPDOWN_BENCH_WS_SIDES") {
            let sides: Option<Vec<Side>> = text.split(',').map(Side::parse).collect();
            c.sides = Side::ALL
                .into_iter()
                .filter(|s| sides.as_ref().is_some_and(|list| list.contains(s)))
                .collect();
            if sides.is_none() || c.sides.is_empty() {
                return Err(format!(
                    "UPDOWN_BENCH_WS_SIDES={text} is not a list of venue, bare and coalesced"
                ));
            }
        }
        if c.subscribers.is_empty()
            || c.subscribers.contains(&0)
            || c.rounds == 0
            || c.window == 0
            || c.client_threads == 0
            || c.workers == 0
            || c.rate.is_nan()
            || c.rate < 1.0
        {
            return Err(
                "subscribers, rounds, the window, client threads, workers and the rate must be positive"
                    .into(),
            );
        }
        if c.window as usize > client::RING / 4 {
            return Err(format!("the window is at most {}", client::RING / 4));
        }
        Ok(c)
    }
}

/// One measured phase.
pub struct Phase {
    pub side: Side,
    pub subscribers: usize,
    pub load: Load,
    pub round: usize,
    /// Events sent.
    pub events: u64,
    /// Data messages received by all clients.
    pub received: u64,
    /// Messages missing (seq gaps) and frames that were not the expected
    /// change.
    pub gaps: u64,
    pub bad: u64,
    /// Messages the server dropped on a full connection queue.
    pub dropped: u64,
    /// Whether every client received the last event before the timeout.
    pub drained: bool,
    /// From the first send to the last client's last message.
    pub elapsed: Duration,
    pub latency: Histogram<u64>,
    pub cpu: CpuTimes,
}

impl Phase {
    pub fn expected(&self) -> u64 {
        self.events * self.subscribers as u64
    }

    /// Messages delivered per second, across all clients.
    pub fn rate(&self) -> f64 {
        self.received as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn is_max(&self) -> bool {
        matches!(self.load, Load::Max { .. })
    }
}

/// A whole run.
pub struct WsReport {
    pub phases: Vec<Phase>,
    /// Batches the venue's publisher could not take.
    pub lost_batches: u64,
    /// The first thing a client found wrong, if any.
    pub first_error: Option<String>,
    pub ticker: String,
    pub sides: Vec<Side>,
}

/// A running server.
enum Server {
    Venue(Box<Venue>),
    Bare(Bare),
}

impl Server {
    fn send(&mut self, g: u64, stamps: &Stamps) -> Result<(), BenchError> {
        match self {
            Server::Venue(v) => v.send(g, stamps),
            Server::Bare(b) => {
                b.send(g, stamps);
                Ok(())
            }
        }
    }

    fn dropped(&self) -> u64 {
        match self {
            Server::Venue(v) => v.dropped(),
            Server::Bare(b) => b.dropped,
        }
    }

    fn settle(&mut self) -> Result<(), BenchError> {
        match self {
            Server::Venue(v) => v.settle(),
            Server::Bare(_) => Ok(()),
        }
    }
}

/// One side: its server, its clients of the current subscriber count, and
/// the next event it sends.
struct Runner {
    side: Side,
    server: Server,
    stamps: Arc<Stamps>,
    next: u64,
    subs: Option<Subscribers>,
}

impl Runner {
    /// Connects `n` subscribers (closing the previous ones).
    fn connect(
        &mut self,
        rt: &tokio::runtime::Runtime,
        n: usize,
        address: &mut usize,
    ) -> Result<(), BenchError> {
        self.disconnect();
        let board = Arc::new(Board::new(self.stamps.clone(), self.next, n));
        match &mut self.server {
            Server::Venue(v) => {
                let ticker = Some(v.ticker.clone());
                self.subs = Some(connect_all(
                    rt,
                    v.server.addr,
                    "/v1/ws",
                    ticker,
                    board,
                    address,
                )?);
            }
            Server::Bare(b) => {
                self.subs = Some(connect_all(rt, b.addr(), bare::PATH, None, board, address)?);
                if !wait_until(Duration::from_secs(10), || b.pending() >= n) {
                    return Err(
                        format!("only {} of {n} bare connections upgraded", b.pending()).into(),
                    );
                }
                b.attach(self.next);
            }
        }
        Ok(())
    }

    /// Closes the subscribers; returns the first error one of them saw.
    fn disconnect(&mut self) -> Option<String> {
        let error = self.subs.take().and_then(|subs| {
            let error = subs.board.first_error();
            subs.close();
            error
        });
        if let Server::Bare(b) = &mut self.server {
            b.detach();
        }
        error
    }
}

/// One side's clients at one subscriber count.
struct Subscribers {
    board: Arc<Board>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Runs one phase: sends from event `*next` on, waits for every client to
/// have the last one, and collects what they saw.
fn phase(
    runner: &mut Runner,
    load: Load,
    duration: Duration,
    round: usize,
) -> Result<Phase, BenchError> {
    let board = runner.subs.as_ref().ok_or("no subscribers")?.board.clone();
    let target = &mut runner.server;
    let next = &mut runner.next;
    let cpu_before = CpuTimes::now();
    let dropped_before = target.dropped();
    let received_before = board.sum(|c| &c.received);
    let gaps_before = board.sum(|c| &c.gaps);
    let bad_before = board.sum(|c| &c.bad);
    board.take_latency();
    let first = *next;
    let start = Instant::now();
    match load {
        Load::Max { window } => {
            while start.elapsed() < duration {
                if *next - board.min_next().min(*next) >= window {
                    std::thread::sleep(Duration::from_micros(20));
                    continue;
                }
                target.send(*next, &board.stamps)?;
                *next += 1;
            }
        }
        Load::Rate(rate) => {
            let total = (duration.as_secs_f64() * rate).round().max(1.0) as u64;
            for i in 0..total {
                let due = start + Duration::from_secs_f64(i as f64 / rate);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                if *next - board.min_next().min(*next) >= (client::RING / 2) as u64 {
                    return Err("the clients fell half a stamps ring behind".into());
                }
                target.send(*next, &board.stamps)?;
                *next += 1;
            }
        }
    }
    let last = *next;
    let all_ended = || {
        board
            .clients
            .iter()
            .all(|c| c.ended.load(Ordering::Acquire) == 1)
    };
    let drained = wait_until(DRAIN_TIMEOUT, || board.min_next() >= last || all_ended())
        && board.min_next() >= last;
    let elapsed = start.elapsed();
    target.settle()?;
    let cpu = CpuTimes::now().since(&cpu_before);
    Ok(Phase {
        side: runner.side,
        subscribers: board.clients.len(),
        load,
        round,
        events: last - first,
        received: board.sum(|c| &c.received) - received_before,
        gaps: board.sum(|c| &c.gaps) - gaps_before,
        bad: board.sum(|c| &c.bad) - bad_before,
        dropped: target.dropped() - dropped_before,
        drained,
        elapsed,
        latency: board.take_latency(),
        cpu,
    })
}

/// Connects `n` clients to `addr` (`path`), from fresh source addresses
/// starting at client number `*address`; on the venue each subscribes.
/// Returns once every one is ready.
fn connect_all(
    rt: &tokio::runtime::Runtime,
    addr: std::net::SocketAddr,
    path: &'static str,
    ticker: Option<String>,
    board: Arc<Board>,
    address: &mut usize,
) -> Result<Subscribers, BenchError> {
    let n = board.clients.len();
    let ready = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(CONNECTING_AT_ONCE));
    let mut tasks = Vec::with_capacity(n);
    for index in 0..n {
        let source = client::source_address(*address);
        *address += 1;
        let (board, ready, failed, gate, ticker) = (
            board.clone(),
            ready.clone(),
            failed.clone(),
            gate.clone(),
            ticker.clone(),
        );
        tasks.push(rt.spawn(async move {
            let setup = async {
                let _permit = gate.acquire().await?;
                let mut ws = client::connect(addr, source, path).await?;
                if let Some(ticker) = &ticker {
                    client::subscribe(&mut ws, ticker).await?;
                }
                Ok::<_, BenchError>(ws)
            };
            match setup.await {
                Ok(ws) => {
                    ready.fetch_add(1, Ordering::AcqRel);
                    client::receive(ws, board, index).await;
                }
                Err(e) => {
                    let mut first = board.first_error.lock().expect("error lock");
                    first.get_or_insert_with(|| format!("client {index} from {source}: {e}"));
                    failed.fetch_add(1, Ordering::AcqRel);
                }
            }
        }));
    }
    let done = wait_until(Duration::from_secs(60), || {
        ready.load(Ordering::Acquire) + failed.load(Ordering::Acquire) == n
    });
    if !done || failed.load(Ordering::Acquire) > 0 {
        for t in &tasks {
            t.abort();
        }
        return Err(format!(
            "{} of {n} clients of {path} failed to connect: {}",
            n - ready.load(Ordering::Acquire),
            board.first_error().unwrap_or_default()
        )
        .into());
    }
    Ok(Subscribers { board, tasks })
}

impl Subscribers {
    fn close(self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Runs the benchmark and prints its figures to `out`.
pub fn run(config: &WsConfig, out: &mut (dyn Write + Send)) -> Result<WsReport, BenchError> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("ws-driver".into())
            .spawn_scoped(scope, || run_inner(config, out))?
            .join()
            .map_err(|_| -> BenchError { "the driver thread panicked".into() })?
    })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn run_inner(config: &WsConfig, out: &mut (dyn Write + Send)) -> Result<WsReport, BenchError> {
    let started = Instant::now();
    let data = tempfile::Builder::new()
        .prefix("updown-ws-bench-")
        .tempdir_in(&config.dir)?;
    let base = Instant::now();
    let mut runners = Vec::new();
    for &side in &config.sides {
        let server = match side {
            Side::Venue => Server::Venue(Box::new(Venue::start(
                data.path(),
                config.durability,
                config.workers,
            )?)),
            Side::Bare => Server::Bare(Bare::start(
                gateway::ws::QUEUE_CAPACITY_DEFAULT,
                false,
                config.workers,
            )?),
            Side::Coalesced => Server::Bare(Bare::start(
                gateway::ws::QUEUE_CAPACITY_DEFAULT,
                true,
                config.workers,
            )?),
        };
        runners.push(Runner {
            side,
            server,
            stamps: Arc::new(Stamps::new(base)),
            next: 0,
            subs: None,
        });
    }
    let clients = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.client_threads)
        .thread_name("ws-clients")
        .enable_all()
        .build()?;
    let mut address = 0usize;
    let ticker = runners
        .iter()
        .find_map(|r| match &r.server {
            Server::Venue(v) => Some(v.ticker.clone()),
            Server::Bare(_) => None,
        })
        .unwrap_or_else(|| bare::TICKER.to_string());
    writeln!(
        out,
        "websocket fan-out: subscribers {:?}, {} round(s), max-rate phases of {:.1} s (window {} events), \
         fixed-rate phases of {:.1} s at {} events/s, warm-up {:.1} s, {} client thread(s), {} server worker(s), durability {:?}, market {ticker}",
        config.subscribers,
        config.rounds,
        config.measure.as_secs_f64(),
        config.window,
        config.latency_measure.as_secs_f64(),
        config.rate,
        config.warmup.as_secs_f64(),
        config.client_threads,
        config.workers,
        config.durability,
    )?;
    let mut phases = Vec::new();
    let mut first_error = None;
    let mut loads = vec![loadavg()];
    for &n in &config.subscribers {
        for runner in &mut runners {
            runner.connect(&clients, n, &mut address)?;
        }
        writeln!(
            out,
            "{n} subscriber(s) connected ({:.1} s into the run, load average {})",
            started.elapsed().as_secs_f64(),
            loadavg()
        )?;
        let max = Load::Max {
            window: config.window,
        };
        let rate = Load::Rate(config.rate);
        // Warm-up, then interleaved rounds: maximum rate, then fixed rate,
        // each side in turn, the order turned every round.
        for round in 0..=config.rounds {
            let plan: &[(Load, Duration)] = if round == 0 {
                &[(max, config.warmup)]
            } else {
                &[(max, config.measure), (rate, config.latency_measure)]
            };
            for &(load, duration) in plan {
                let count = runners.len();
                for i in 0..count {
                    let runner = &mut runners[(i + round) % count];
                    let p = phase(runner, load, duration, round)?;
                    if round > 0 {
                        print_phase(&p, out)?;
                        phases.push(p);
                    }
                    std::thread::sleep(QUIET);
                }
            }
        }
        for runner in &mut runners {
            let error = runner.disconnect();
            first_error = first_error.or(error);
        }
        loads.push(loadavg());
        std::thread::sleep(3 * QUIET);
    }
    let lost_batches = runners
        .iter()
        .map(|r| match &r.server {
            Server::Venue(v) => v.lost_batches(),
            Server::Bare(_) => 0,
        })
        .sum();
    let report = WsReport {
        phases,
        lost_batches,
        first_error,
        ticker,
        sides: config.sides.clone(),
    };
    print_tables(config, &report, out)?;
    writeln!(
        out,
        "total time {:.1} s; load average (1, 5, 15 min) at the start and after each subscriber count: {}",
        started.elapsed().as_secs_f64(),
        loads.join(" / ")
    )?;
    drop(clients);
    for runner in runners {
        match runner.server {
            Server::Venue(v) => v.server.stop(),
            Server::Bare(b) => drop(b),
        }
    }
    Ok(report)
}

/// Formats nanoseconds as µs or ms.
fn time(ns: u64) -> String {
    if ns < 1_000_000 {
        format!("{:.0} µs", ns as f64 / 1e3)
    } else {
        format!("{:.2} ms", ns as f64 / 1e6)
    }
}

fn rate_text(per_second: f64) -> String {
    if per_second >= 1e6 {
        format!("{:.2} M", per_second / 1e6)
    } else {
        format!("{:.0} k", per_second / 1e3)
    }
}

fn load_text(load: Load) -> String {
    match load {
        Load::Max { window } => format!("max (window {window})"),
        Load::Rate(r) => format!("{r} ev/s"),
    }
}

fn print_phase(p: &Phase, out: &mut dyn Write) -> std::io::Result<()> {
    let lat = &p.latency;
    writeln!(
        out,
        "  round {} {:>4} subs {:<19} {:<16} events {:>8} msgs {:>9}/{:<9} {:>8} msg/s  p50 {:>9} p99 {:>9} p99.9 {:>9}  cpu {:.2} cores{}",
        p.round,
        p.subscribers,
        p.side.name(),
        load_text(p.load),
        p.events,
        p.received,
        p.expected(),
        rate_text(p.rate()),
        time(lat.value_at_quantile(0.5)),
        time(lat.value_at_quantile(0.99)),
        time(lat.value_at_quantile(0.999)),
        p.cpu.total() as f64 / p.elapsed.as_secs_f64() / 1e9,
        if p.gaps + p.bad + p.dropped > 0 || !p.drained {
            format!(
                "  LOST {} gaps {} bad {} dropped {} drained {}",
                p.expected() - p.received.min(p.expected()),
                p.gaps,
                p.bad,
                p.dropped,
                p.drained
            )
        } else {
            String::new()
        }
    )
}

impl WsReport {
    fn of(&self, side: Side, n: usize, max: bool) -> Vec<&Phase> {
        self.phases
            .iter()
            .filter(|p| p.side == side && p.subscribers == n && p.is_max() == max)
            .collect()
    }

    /// The best maximum-rate figure of a side at `n` subscribers.
    pub fn best_rate(&self, side: Side, n: usize) -> Option<f64> {
        self.of(side, n, true)
            .iter()
            .map(|p| p.rate())
            .max_by(|a, b| a.total_cmp(b))
    }

    /// CPU time of the whole process per delivered message at maximum
    /// rate, all rounds (ns): steadier than wall time on a shared machine.
    pub fn cpu_per_message(&self, side: Side, n: usize) -> Option<f64> {
        let phases = self.of(side, n, true);
        let received: u64 = phases.iter().map(|p| p.received).sum();
        (received > 0)
            .then(|| phases.iter().map(|p| p.cpu.total()).sum::<u64>() as f64 / received as f64)
    }

    /// The fixed-rate latencies of a side at `n` subscribers, all rounds.
    pub fn latency(&self, side: Side, n: usize) -> Option<Histogram<u64>> {
        let phases = self.of(side, n, false);
        if phases.is_empty() {
            return None;
        }
        let mut h = histogram();
        for p in phases {
            h.add(&p.latency).expect("same bounds");
        }
        Some(h)
    }

    /// Messages lost in all phases (should be none).
    pub fn lost(&self) -> u64 {
        self.phases
            .iter()
            .map(|p| p.expected().saturating_sub(p.received) + p.bad)
            .sum()
    }
}

fn print_tables(config: &WsConfig, r: &WsReport, out: &mut dyn Write) -> std::io::Result<()> {
    let sides = &r.sides;
    let show = |x: Option<f64>| x.map_or("-".into(), rate_text);
    let ratio = |n: usize, over: Side| match (r.best_rate(Side::Venue, n), r.best_rate(over, n)) {
        (Some(v), Some(b)) => Some(v / b),
        _ => None,
    };
    writeln!(out)?;
    writeln!(
        out,
        "Throughput: messages delivered per second across all clients, best of {} round(s)",
        config.rounds
    )?;
    writeln!(out)?;
    let names: Vec<String> = sides
        .iter()
        .map(|s| format!("{} msg/s", s.name()))
        .collect();
    writeln!(
        out,
        "| subscribers | {} | venue / bare | each round (venue / bare) | venue / bare by CPU per message | venue events/s |",
        names.join(" | ")
    )?;
    writeln!(
        out,
        "| -: |{} -: | - | -: | -: |",
        " -: |".repeat(sides.len())
    )?;
    for &n in &config.subscribers {
        let cells: Vec<String> = sides.iter().map(|&s| show(r.best_rate(s, n))).collect();
        let rounds: Vec<String> = r
            .of(Side::Venue, n, true)
            .iter()
            .zip(r.of(Side::Bare, n, true))
            .map(|(v, b)| format!("{:.2}", v.rate() / b.rate()))
            .collect();
        let by_cpu = match (
            r.cpu_per_message(Side::Venue, n),
            r.cpu_per_message(Side::Bare, n),
        ) {
            (Some(v), Some(b)) => format!("{:.2}", b / v),
            _ => "-".into(),
        };
        writeln!(
            out,
            "| {n} | {} | {} | {} | {by_cpu} | {} |",
            cells.join(" | "),
            ratio(n, Side::Bare).map_or("-".into(), |x| format!("**{x:.2}**")),
            rounds.join(" / "),
            r.best_rate(Side::Venue, n)
                .map_or("-".into(), |v| format!("{:.0}", v / n as f64)),
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "Event-to-client latency at {} events/s (from the driver's stamp to the whole frame at the client; all rounds merged, then each round's p99)",
        config.rate
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "| subscribers | side | msg/s | messages | p50 | p99 | p99.9 | max | p99 each round |"
    )?;
    writeln!(out, "| -: | - | -: | -: | -: | -: | -: | -: | - |")?;
    for &n in &config.subscribers {
        for &side in sides {
            let Some(h) = r.latency(side, n) else {
                continue;
            };
            let rounds: Vec<String> = r
                .of(side, n, false)
                .iter()
                .map(|p| time(p.latency.value_at_quantile(0.99)))
                .collect();
            writeln!(
                out,
                "| {n} | {} | {} | {} | {} | {} | {} | {} | {} |",
                side.name(),
                rate_text(config.rate * n as f64),
                h.len(),
                time(h.value_at_quantile(0.5)),
                time(h.value_at_quantile(0.99)),
                time(h.value_at_quantile(0.999)),
                time(h.max()),
                rounds.join(" / "),
            )?;
        }
    }
    let roles: Vec<&str> = ROLES.to_vec();
    for max in [true, false] {
        writeln!(out)?;
        if max {
            writeln!(
            out,
            "CPU per delivered message at maximum rate (ns, all rounds; threads by role; cores = CPU time / wall time)"
        )?;
        } else {
            writeln!(
            out,
            "CPU per delivered message at {} events/s (ns, all rounds; threads by role; cores = CPU time / wall time)",
            config.rate
        )?;
        }
        writeln!(out)?;
        writeln!(
            out,
            "| subscribers | side | {} | total | cores |",
            roles.join(" | ")
        )?;
        writeln!(out, "| -: | - |{} -: | -: |", " -: |".repeat(roles.len()))?;
        for &n in &config.subscribers {
            for &side in sides {
                let phases = r.of(side, n, max);
                if phases.is_empty() {
                    continue;
                }
                let received: u64 = phases.iter().map(|p| p.received).sum::<u64>().max(1);
                let wall: f64 = phases.iter().map(|p| p.elapsed.as_secs_f64()).sum();
                let per = |role: &str| {
                    phases.iter().map(|p| p.cpu.get(role)).sum::<u64>() as f64 / received as f64
                };
                let cells: Vec<String> = roles
                    .iter()
                    .map(|role| format!("{:.0}", per(role)))
                    .collect();
                let total: u64 = phases.iter().map(|p| p.cpu.total()).sum();
                writeln!(
                    out,
                    "| {n} | {} | {} | {:.0} | {:.2} |",
                    side.name(),
                    cells.join(" | "),
                    total as f64 / received as f64,
                    total as f64 / 1e9 / wall.max(1e-9),
                )?;
            }
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "Checks: {} message(s) lost or wrong over all phases; venue publisher lost {} batch(es){}",
        r.lost(),
        r.lost_batches,
        r.first_error
            .as_ref()
            .map_or(String::new(), |e| format!("; first client error: {e}"))
    )?;
    writeln!(out)?;
    writeln!(out, "| aim | measured | met? |")?;
    writeln!(out, "| - | - | - |")?;
    for &n in &config.subscribers {
        if let Some(x) = ratio(n, Side::Bare) {
            writeln!(
                out,
                "| venue at least {AIM_VENUE_OVER_BARE}x the bare broadcast, {n} subscriber(s) | {x:.2}x | {} |",
                if x >= AIM_VENUE_OVER_BARE { "yes" } else { "**no**" }
            )?;
        }
    }
    let aim_n = config
        .subscribers
        .iter()
        .copied()
        .find(|&n| n == AIM_P99_SUBSCRIBERS)
        .or_else(|| config.subscribers.iter().copied().max());
    if let Some(n) = aim_n {
        if let Some(h) = r.latency(Side::Venue, n) {
            let p99 = h.value_at_quantile(0.99);
            writeln!(
                out,
                "| venue p99 at most 5 ms, {n} subscribers, {} events/s | {} | {} |",
                config.rate,
                time(p99),
                if p99 <= AIM_P99_NS { "yes" } else { "**no**" }
            )?;
        }
        if let Some(h) = r.latency(Side::Bare, n) {
            let p99 = h.value_at_quantile(0.99);
            writeln!(
                out,
                "| (reference) bare p99 at most 5 ms, {n} subscribers, {} events/s | {} | {} |",
                config.rate,
                time(p99),
                if p99 <= AIM_P99_NS { "yes" } else { "no" }
            )?;
        }
    }
    Ok(())
}
