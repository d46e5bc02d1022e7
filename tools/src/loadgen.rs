//! `updown loadgen`: drives a running venue through REST and the websocket
//! with traffic from many accounts at a fixed arrival rate.
//!
//! Open loop: request `i` is due at `t0 + i / rate` whatever happened to
//! the requests before it, and its latency is measured from that due time,
//! not from when a connection was free to send it. A venue that stalls
//! therefore shows the stall in every request that waited behind it
//! (no coordinated omission). A dispatcher thread releases requests on the
//! schedule; a pool of keep-alive connections sends them.
//!
//! - [`traffic`] decides what request `i` is (the order mix, accounts, keys);
//! - [`http`] is the keep-alive HTTP/1.1 client;
//! - [`ws`] runs the websocket subscribers;
//! - [`report`] prints percentiles and writes the `.hgrm` and SVG files.
//!
//! Setup uses the admin endpoint found in `--data-dir` (as `updown admin`
//! does) to create `--accounts` funded accounts with one trading key each.

mod report;
mod traffic;
mod ws;

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Args;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::admin;
use report::{new_histogram, summary_json};
use tools::http::Conn;
use traffic::{Kind, Mix, Traffic};

#[derive(Args)]
pub struct LoadgenArgs {
    /// The venue's REST address.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    target: String,
    /// Data directory of the running server: the admin address and token
    /// are read from it to create the accounts and keys.
    #[arg(long, default_value = "updown-data")]
    data_dir: PathBuf,
    /// Accounts to create, one trading key each. Requests go round-robin
    /// over them, so each key sends rate/accounts requests a second: keep
    /// that under the per-key limit of new orders (10/s by default).
    #[arg(long, default_value_t = 50)]
    accounts: u32,
    /// Requests per second, on a fixed schedule (open loop).
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// Seconds of scheduled requests.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Websocket clients, each on orderbook_delta of every open series and
    /// on one account's fill channel.
    #[arg(long, default_value_t = 2)]
    ws_subscribers: usize,
    /// Keep-alive HTTP connections in the pool.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Write the latency distribution of all requests here (HdrHistogram's
    /// percentile text, in ms, as wrk2 prints it).
    #[arg(long, value_name = "FILE")]
    hgrm: Option<PathBuf>,
    /// Write a percentile plot of every request kind here (SVG).
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Print the results as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Also report percentiles and counts every this many seconds.
    #[arg(long, value_name = "SECONDS")]
    interval: Option<f64>,
    /// Record this process's memory (VmRSS, RssAnon, RssFile from
    /// /proc/PID/status) with every interval: the server's pid in a soak.
    #[arg(long, value_name = "PID")]
    watch_pid: Option<u32>,
    /// Share of requests that cancel a resting order of their account.
    #[arg(long, default_value_t = 0.38)]
    cancel_share: f64,
    /// Share of requests that are immediate-or-cancel orders through the touch.
    #[arg(long, default_value_t = 0.12)]
    cross_share: f64,
    /// Largest order, in contracts.
    #[arg(long, default_value_t = 5)]
    max_count: u32,
    /// Only trade these series (repeatable; default: every open market).
    #[arg(long = "series", value_name = "TICKER")]
    series: Vec<String>,
    /// Cash of each new account, in dollars.
    #[arg(long, default_value = "100000.00")]
    cash: String,
    /// The venue's per-key limit of new orders a second, for the check of
    /// --accounts against --rate.
    #[arg(long, default_value_t = 10.0)]
    per_key_rate: f64,
    /// Seconds to wait after the schedule for requests still in flight.
    #[arg(long, default_value_t = 10.0)]
    drain: f64,
    /// Seed of the order flow.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Counters and histograms of the run, shared by the connections.
struct Stats {
    /// Latency from the due time, per kind and overall.
    kinds: Vec<Histogram<u64>>,
    /// Requests still queued (never sent) when the drain ended.
    never_sent: Histogram<u64>,
    all: Histogram<u64>,
    /// Latency from the moment the request was written.
    service: Histogram<u64>,
    /// Since the last interval report.
    window: Histogram<u64>,
    window_ok: u64,
    window_errors: u64,
    ok: [u64; 3],
    errors: BTreeMap<String, u64>,
    completed: u64,
    skipped: u64,
    rested: u64,
    crossed_and_traded: u64,
}

impl Stats {
    /// A request's latency from its due time: overall and in this
    /// interval, and for its kind when known; a request still queued at
    /// the end was never drawn, so it has none and goes in `never_sent`.
    fn record(&mut self, kind: Option<Kind>, latency_us: u64) {
        match kind {
            Some(kind) => self.kinds[kind.index()].saturating_record(latency_us),
            None => self.never_sent.saturating_record(latency_us),
        };
        self.all.saturating_record(latency_us);
        self.window.saturating_record(latency_us);
    }

    fn new() -> Self {
        Self {
            kinds: Kind::ALL.iter().map(|_| new_histogram()).collect(),
            never_sent: new_histogram(),
            all: new_histogram(),
            service: new_histogram(),
            window: new_histogram(),
            window_ok: 0,
            window_errors: 0,
            ok: [0; 3],
            errors: BTreeMap::new(),
            completed: 0,
            skipped: 0,
            rested: 0,
            crossed_and_traded: 0,
        }
    }

    fn error(&mut self, what: String) {
        *self.errors.entry(what).or_insert(0) += 1;
        self.window_errors += 1;
    }
}

struct Shared {
    target: SocketAddr,
    traffic: Mutex<Traffic>,
    stats: Mutex<Stats>,
    sent: AtomicU64,
    done: AtomicBool,
    /// Wakes the interval reporter when the run ends.
    finished: tokio::sync::Notify,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn resolve(target: &str) -> Result<SocketAddr> {
    let Some(rest) = target.strip_prefix("http://") else {
        bail!("--target must be http://HOST:PORT, not {target:?}");
    };
    let host = rest.trim_end_matches('/');
    let host = host.strip_suffix("/v1").unwrap_or(host);
    let with_port = if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:80")
    };
    with_port
        .to_socket_addrs()
        .with_context(|| format!("resolving {with_port}"))?
        .next()
        .with_context(|| format!("{with_port} has no address"))
}

/// An open market: ticker, series, close time.
struct OpenMarket {
    ticker: String,
    series: String,
    close_ts_ms: u64,
}

async fn open_markets(conn: &mut Conn) -> Result<Vec<OpenMarket>> {
    let status = conn
        .request("GET", "/v1/markets?status=open&limit=1000", None, b"")
        .await?;
    if status != 200 {
        bail!(
            "GET /v1/markets answered {status}: {}",
            String::from_utf8_lossy(conn.body())
        );
    }
    let body: Value = serde_json::from_slice(conn.body()).context("markets are not JSON")?;
    Ok(body["markets"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|m| {
                    Some(OpenMarket {
                        ticker: m["ticker"].as_str()?.to_string(),
                        series: m["series_ticker"].as_str()?.to_string(),
                        close_ts_ms: m["close_ts_ms"].as_u64()?,
                    })
                })
                .collect()
        })
        .unwrap_or_default())
}

/// The market list is read again at least this often.
const REFRESH_MS: u64 = 1_000;

/// How often the list is read while a chosen series waits for its next
/// window, and how long after a close the first such read comes.
const ROLL_POLL_MS: u64 = 50;

/// How long after a close the list is read every [`ROLL_POLL_MS`] for the
/// series' next window. The venue opens a window at its symbol's first
/// print after the open (DESIGN §2), within a second with the price
/// simulator; a feed that has stopped is not polled for longer.
const ROLL_WAIT_MAX_MS: u64 = 2_000;

/// Whether the run trades `name`: every series when none was chosen.
fn chosen(series: &[String], name: &str) -> bool {
    series.is_empty() || series.iter().any(|s| s == name)
}

/// The markets to trade at `now_ms`: open, of the chosen series, taking
/// orders (not in their close margin); with their close, for the traffic
/// to stop at the margin by itself between two reads of the list.
fn tradable(markets: &[OpenMarket], series: &[String], now_ms: u64) -> Vec<(String, u64)> {
    markets
        .iter()
        .filter(|m| chosen(series, &m.series))
        .filter(|m| traffic::takes_orders(m.close_ts_ms, now_ms))
        .map(|m| (m.ticker.clone(), m.close_ts_ms))
        .collect()
}

/// When the refresher reads the market list next. It knows each chosen
/// series' latest close; from that close until the series' next window is
/// listed open (the venue opens it at the first print after the open, so
/// up to a second later), it reads the list every [`ROLL_POLL_MS`].
/// Reading it every second only, a window roll stopped the orders for up
/// to a second more than the close margin.
#[derive(Default)]
struct Refresh {
    /// Chosen series -> the latest close of its markets seen open.
    last_close: BTreeMap<String, u64>,
}

impl Refresh {
    /// Takes a list read at `now_ms`; returns the wait, in ms, before the
    /// next read.
    fn wait_after(&mut self, markets: &[OpenMarket], series: &[String], now_ms: u64) -> u64 {
        for m in markets.iter().filter(|m| chosen(series, &m.series)) {
            let close = self.last_close.entry(m.series.clone()).or_insert(0);
            *close = (*close).max(m.close_ts_ms);
        }
        let mut wait = REFRESH_MS;
        for &close in self.last_close.values() {
            if close > now_ms {
                // Its last market is still open (the traffic stops its
                // orders at the margin by itself): wake just after it closes.
                wait = wait.min(close + ROLL_POLL_MS - now_ms);
            } else if now_ms - close < ROLL_WAIT_MAX_MS {
                // Closed, and no later window of the series is open yet.
                wait = wait.min(ROLL_POLL_MS);
            }
        }
        wait.max(1)
    }
}

/// Creates the accounts (funded, terms accepted, trading allowed) and one
/// read+trade key each, on a few threads; returns the keys.
fn create_accounts(client: &admin::Client, n: u32, cash: &str) -> Result<Vec<String>> {
    let threads = n.clamp(1, 8);
    let next = AtomicU64::new(0);
    let keys: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::with_capacity(n as usize));
    let made = AtomicU64::new(0);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= u64::from(n) {
                            return Ok(());
                        }
                        let account = client.post("/admin/accounts", json!({ "cash": cash }))?;
                        let id = account["account_id"].as_u64().context("no account id")?;
                        client.post(
                            &format!("/admin/accounts/{id}/flags"),
                            json!({ "terms_accepted": true, "trading_allowed": true }),
                        )?;
                        let key = client.post(
                            "/admin/keys",
                            json!({
                                "account": id,
                                "scopes": "read,trade",
                                "name": format!("loadgen-{i}"),
                                "max_order_usd": 1000,
                                "max_daily_usd": 100_000_000,
                            }),
                        )?;
                        let secret = key["key"]
                            .as_str()
                            .with_context(|| format!("no key issued: {key}"))?;
                        keys.lock().expect("keys").push((i, secret.to_string()));
                        let done = made.fetch_add(1, Ordering::Relaxed) + 1;
                        if done.is_multiple_of(200) {
                            eprintln!("loadgen: {done}/{n} accounts");
                        }
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("setup thread")?;
        }
        Ok::<_, anyhow::Error>(())
    })?;
    let mut keys = keys.into_inner().expect("keys");
    keys.sort();
    Ok(keys.into_iter().map(|(_, k)| k).collect())
}

/// Memory of a process from /proc/PID/status, in kB.
fn memory_kb(pid: u32) -> Option<BTreeMap<&'static str, u64>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let mut out = BTreeMap::new();
    for (field, name) in [
        ("VmRSS:", "rss_kb"),
        ("RssAnon:", "rss_anon_kb"),
        ("RssFile:", "rss_file_kb"),
        ("RssShmem:", "rss_shmem_kb"),
        ("VmHWM:", "hwm_kb"),
    ] {
        if let Some(line) = text.lines().find(|l| l.starts_with(field)) {
            if let Some(kb) = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()) {
                out.insert(name, kb);
            }
        }
    }
    Some(out)
}

/// A worker's request in flight: its due time, and its kind once drawn.
type InFlight = Arc<std::sync::Mutex<Option<(Instant, Option<Kind>)>>>;

/// Sends request `i`, due at `due`, on `conn` (connecting if needed); its
/// kind goes into `slot` once drawn, for the count of requests unanswered
/// at the end.
async fn one_request(
    shared: &Shared,
    conn: &mut Option<Conn>,
    i: u64,
    due: Instant,
    slot: &InFlight,
) {
    let request = shared.traffic.lock().expect("traffic").next(i, now_ms());
    let Some(request) = request else {
        shared.stats.lock().expect("stats").skipped += 1;
        return;
    };
    *slot.lock().expect("slot") = Some((due, Some(request.kind)));
    shared.sent.fetch_add(1, Ordering::Relaxed);
    if conn.is_none() {
        match Conn::connect(shared.target).await {
            Ok(c) => *conn = Some(c),
            Err(e) => {
                let latency = due.elapsed().as_micros() as u64;
                let mut stats = shared.stats.lock().expect("stats");
                stats.error(format!("connect: {}", e.kind()));
                stats.completed += 1;
                stats.record(Some(request.kind), latency);
                return;
            }
        }
    }
    let c = conn.as_mut().expect("connected");
    let written = Instant::now();
    let result = c
        .request(
            request.method,
            &request.path,
            Some(&request.key),
            &request.body,
        )
        .await;
    let latency = due.elapsed().as_micros() as u64;
    let service = written.elapsed().as_micros() as u64;
    let kind = request.kind;
    let mut rested = None;
    let mut traded = false;
    let outcome = match result {
        Ok(status) => {
            let body: Value = serde_json::from_slice(c.body()).unwrap_or(Value::Null);
            let closing = c.closing();
            if closing {
                *conn = None;
            }
            if status == 200 || status == 201 {
                let order = &body["order"];
                if kind == Kind::Rest && order["status"] == "resting" {
                    rested = order["order_id"].as_str().and_then(|id| id.parse().ok());
                }
                if kind == Kind::Cross && order["fill_count"].as_str().is_some_and(|f| f != "0") {
                    traded = true;
                }
                Ok(())
            } else {
                Err(format!(
                    "{} {} {}",
                    kind.name(),
                    status,
                    body["code"].as_str().unwrap_or("-")
                ))
            }
        }
        Err(e) => {
            *conn = None;
            Err(format!("{} io: {e}", kind.name()))
        }
    };
    if let (Some(order_id), Some(market)) = (rested, request.market.clone()) {
        shared
            .traffic
            .lock()
            .expect("traffic")
            .rested(request.account, market, order_id);
    }
    let mut stats = shared.stats.lock().expect("stats");
    stats.completed += 1;
    stats.record(Some(kind), latency);
    stats.service.saturating_record(service);
    match outcome {
        Ok(()) => {
            stats.ok[kind.index()] += 1;
            stats.window_ok += 1;
            stats.rested += u64::from(rested.is_some());
            stats.crossed_and_traded += u64::from(traded);
        }
        Err(what) => stats.error(what),
    }
}

/// One interval record: counts, percentiles, and the watched memory.
fn interval_record(shared: &Shared, t: f64, span: f64, pid: Option<u32>) -> Value {
    let mut stats = shared.stats.lock().expect("stats");
    let window = std::mem::replace(&mut stats.window, new_histogram());
    let (ok, errors) = (stats.window_ok, stats.window_errors);
    stats.window_ok = 0;
    stats.window_errors = 0;
    let completed = stats.completed;
    let orders = stats.ok[Kind::Rest.index()] + stats.ok[Kind::Cross.index()];
    let cancels = stats.ok[Kind::Cancel.index()];
    drop(stats);
    let (markets, resting) = {
        let traffic = shared.traffic.lock().expect("traffic");
        (traffic.market_count(), traffic.resting_total())
    };
    let mut record = json!({
        "t_s": (t * 10.0).round() / 10.0,
        "completed": completed,
        "orders_placed": orders,
        "cancels": cancels,
        "ok": ok,
        "errors": errors,
        "rate": ((ok + errors) as f64 / span).round(),
        "latency": summary_json(&window),
        "markets": markets,
        "resting_orders": resting,
    });
    if let Some(memory) = pid.and_then(memory_kb) {
        for (name, kb) in memory {
            record[name] = json!(kb);
        }
    }
    record
}

fn interval_line(record: &Value) -> String {
    let us = |name: &str| {
        record["latency"][name]
            .as_u64()
            .map_or("-".to_string(), report::human_us)
    };
    let mut line = format!(
        "[{:>6.1}s] {:>6} req/s  ok {:>7}  err {:>4}  p50 {:>9}  p99 {:>9}  p99.9 {:>9}  max {:>9}",
        record["t_s"].as_f64().unwrap_or(0.0),
        record["rate"],
        record["ok"],
        record["errors"],
        us("p50_us"),
        us("p99_us"),
        us("p99_9_us"),
        us("max_us"),
    );
    if let Some(kb) = record["rss_kb"].as_u64() {
        line += &format!(
            "  rss {:.1} MiB (anon {:.1})",
            kb as f64 / 1024.0,
            record["rss_anon_kb"].as_u64().unwrap_or(0) as f64 / 1024.0
        );
    }
    line
}

/// The timed part: schedule, connections, market refresh, intervals.
async fn drive(
    shared: Arc<Shared>,
    args: &LoadgenArgs,
    total: u64,
) -> Result<(Duration, Vec<Value>, u64)> {
    // The market list changes as windows close and open.
    let refresher = {
        let shared = shared.clone();
        let series = args.series.clone();
        tokio::spawn(async move {
            let mut conn: Option<Conn> = None;
            // At once: the list read before the set-up may be stale.
            let mut wait = 0;
            let mut refresh = Refresh::default();
            while !shared.done.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(wait)).await;
                wait = REFRESH_MS;
                if conn.is_none() {
                    conn = Conn::connect(shared.target).await.ok();
                }
                let Some(c) = conn.as_mut() else { continue };
                match open_markets(c).await {
                    Ok(markets) => {
                        let now = now_ms();
                        let open: Vec<String> = markets.iter().map(|m| m.ticker.clone()).collect();
                        shared
                            .traffic
                            .lock()
                            .expect("traffic")
                            .set_markets(&tradable(&markets, &series, now), &open);
                        wait = refresh.wait_after(&markets, &series, now);
                    }
                    // Soon again: a read missed near a roll delays the
                    // next window's first orders.
                    Err(_) => {
                        conn = None;
                        wait = ROLL_POLL_MS;
                    }
                }
            }
        })
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<(u64, Instant)>();
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let t0 = Instant::now() + Duration::from_millis(100);
    let rate = args.rate;
    // The dispatcher: a plain thread, because std's sleep is precise to
    // tens of microseconds where tokio's timer rounds to milliseconds.
    let dispatcher = std::thread::Builder::new()
        .name("dispatch".into())
        .spawn(move || {
            for i in 0..total {
                let due = t0 + Duration::from_secs_f64(i as f64 / rate);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                if tx.send((i, due)).is_err() {
                    break;
                }
            }
        })
        .context("starting the dispatcher")?;
    let mut workers = Vec::with_capacity(args.connections);
    // Each worker's request in flight (its due time), so that one still
    // unanswered when the drain ends is counted, not forgotten.
    let mut in_flight = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        let shared = shared.clone();
        let rx = rx.clone();
        let slot: InFlight = Arc::new(std::sync::Mutex::new(None));
        in_flight.push(slot.clone());
        workers.push(tokio::spawn(async move {
            let mut conn = None;
            loop {
                let next = rx.lock().await.recv().await;
                let Some((i, due)) = next else { break };
                *slot.lock().expect("slot") = Some((due, None));
                one_request(&shared, &mut conn, i, due, &slot).await;
                *slot.lock().expect("slot") = None;
            }
        }));
    }
    let reporter = args.interval.filter(|s| *s > 0.0).map(|span| {
        let shared = shared.clone();
        let pid = args.watch_pid;
        let quiet = args.json;
        tokio::spawn(async move {
            let mut records = Vec::new();
            let start = t0;
            let mut next = start + Duration::from_secs_f64(span);
            let mut last = start;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(next.into()) => {}
                    _ = shared.finished.notified() => {}
                }
                let now = Instant::now();
                let finished = shared.done.load(Ordering::Relaxed);
                let record = interval_record(
                    &shared,
                    now.duration_since(start).as_secs_f64(),
                    now.duration_since(last).as_secs_f64(),
                    pid,
                );
                if !quiet {
                    eprintln!("{}", interval_line(&record));
                }
                records.push(record);
                last = now;
                if finished {
                    return records;
                }
                next += Duration::from_secs_f64(span);
            }
        })
    });
    let schedule_end = t0 + Duration::from_secs_f64(total as f64 / rate);
    let aborts: Vec<_> = workers.iter().map(|w| w.abort_handle()).collect();
    let drained = tokio::time::timeout_at(
        (schedule_end + Duration::from_secs_f64(args.drain.max(0.0))).into(),
        async {
            for worker in workers {
                let _ = worker.await;
            }
        },
    )
    .await
    .is_ok();
    let elapsed = t0.elapsed();
    if !drained {
        for abort in aborts {
            abort.abort();
        }
    }
    let _ = dispatcher.join();
    // Requests unanswered at the end (in flight, or still queued behind a
    // stalled venue) waited at least until now: they go into the latency
    // figures at that, so a stall is never left out (coordinated omission).
    let end = Instant::now();
    let mut late: Vec<(Instant, Option<Kind>)> = in_flight
        .iter()
        .filter_map(|slot| slot.lock().expect("slot").take())
        .collect();
    {
        let mut queued = rx.lock().await;
        while let Ok((_, due)) = queued.try_recv() {
            late.push((due, None));
        }
    }
    {
        let mut stats = shared.stats.lock().expect("stats");
        for (due, kind) in &late {
            let waited = end.saturating_duration_since(*due).as_micros() as u64;
            stats.record(*kind, waited);
        }
    }
    shared.done.store(true, Ordering::Relaxed);
    // The last, possibly shorter, interval is reported at once.
    shared.finished.notify_one();
    let intervals = match reporter {
        Some(r) => r.await.unwrap_or_default(),
        None => Vec::new(),
    };
    refresher.abort();
    Ok((elapsed, intervals, late.len() as u64))
}

/// Longest run and report interval the load generator takes, in seconds.
const WEEK_SECS: f64 = 7.0 * 86_400.0;

pub fn run(args: LoadgenArgs) -> Result<()> {
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !positive(args.rate) || !positive(args.duration) {
        bail!("--rate and --duration must be positive");
    }
    if args.duration > WEEK_SECS {
        bail!("--duration must be at most {WEEK_SECS} seconds (a week)");
    }
    if args.interval.is_some_and(|s| !positive(s) || s > WEEK_SECS) {
        bail!("--interval must be a positive number of seconds, at most a week");
    }
    if !(args.drain.is_finite() && (0.0..=3600.0).contains(&args.drain)) {
        bail!("--drain must be 0 to 3600 seconds");
    }
    if !positive(args.per_key_rate) {
        bail!("--per-key-rate must be positive");
    }
    if args.accounts == 0 {
        bail!("--accounts must be at least 1");
    }
    let needed = (args.rate / args.per_key_rate).ceil() as u32;
    if args.accounts < needed {
        bail!(
            "{} requests/s over {} accounts is {:.1}/s per key, over the venue's {} new orders/s per key: use --accounts {needed} or more",
            args.rate,
            args.accounts,
            args.rate / f64::from(args.accounts),
            args.per_key_rate
        );
    }
    if !(0.0..=1.0).contains(&(args.cancel_share + args.cross_share)) {
        bail!("--cancel-share plus --cross-share must be between 0 and 1");
    }
    if args.connections == 0 {
        bail!("--connections must be at least 1");
    }
    if args.max_count == 0 {
        bail!("--max-count must be at least 1 contract");
    }
    if let Some(pid) = args.watch_pid {
        if !Path::new(&format!("/proc/{pid}/status")).exists() {
            bail!("--watch-pid {pid}: no such process to record the memory of");
        }
    }
    if let Some(plot) = &args.plot {
        let svg = plot
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
        if !svg {
            bail!(
                "--plot writes an SVG image: name a .svg file ({} is not one)",
                plot.display()
            );
        }
    }
    // The output files are opened now: a path that cannot be written fails
    // before the run, not after it (its results would be lost). Opened
    // without truncating, so a run that fails leaves an earlier file as it
    // was, and one it made is removed again.
    let mut made = Vec::new();
    for path in args.hgrm.iter().chain(&args.plot) {
        let existed = path.exists();
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("cannot write {}", path.display()));
        if !existed && opened.is_ok() {
            made.push(path.clone());
        }
        if let Err(e) = opened {
            remove_made(&made);
            return Err(e);
        }
    }
    let result = run_checked(&args);
    if result.is_err() {
        remove_made(&made);
    }
    result
}

/// Removes the output files a failed run made (best effort: the run's own
/// error is the one reported).
fn remove_made(made: &[PathBuf]) {
    for path in made {
        let _ = std::fs::remove_file(path);
    }
}

/// The run itself, once [`run`] has checked the options and the output paths.
fn run_checked(args: &LoadgenArgs) -> Result<()> {
    let target = resolve(&args.target)?;
    let total = (args.rate * args.duration).round() as u64;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;

    // 1. Markets to trade (waiting a little for a fresh venue to open some).
    let deadline = Instant::now() + Duration::from_secs(30);
    let (markets, open) = runtime.block_on(async {
        let mut conn = Conn::connect(target)
            .await
            .with_context(|| format!("connecting to {target}"))?;
        loop {
            let markets = open_markets(&mut conn).await?;
            let ok = tradable(&markets, &args.series, now_ms());
            if !ok.is_empty() || Instant::now() > deadline {
                let series: Vec<String> = markets
                    .iter()
                    .map(|m| m.series.clone())
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .filter(|s| chosen(&args.series, s))
                    .collect();
                let open: Vec<String> = markets.into_iter().map(|m| m.ticker).collect();
                return Ok::<_, anyhow::Error>(((ok, series), open));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })?;
    let (tickers, series) = markets;
    if tickers.is_empty() {
        bail!("no open market to trade at {target} (after 30 s)");
    }

    // 2. Accounts and keys.
    let setup = Instant::now();
    let client = admin::Client::from_data_dir(&args.data_dir)?;
    let keys = create_accounts(&client, args.accounts, &args.cash)?;
    let setup_s = setup.elapsed().as_secs_f64();
    if !args.json {
        eprintln!(
            "loadgen: {} accounts and keys in {setup_s:.1} s; {} markets open in {} series",
            keys.len(),
            tickers.len(),
            series.len()
        );
    }

    // 3. Websocket subscribers.
    let subscribers = ws::Subscribers::start(target, args.ws_subscribers, series.clone(), &keys)?;

    // 4. The timed run.
    let tag = format!("lg{:x}", now_ms() % 0xffff_ffff);
    let mix = Mix {
        cancel: args.cancel_share,
        cross: args.cross_share,
        max_count: args.max_count.clamp(1, 10_000),
        tag,
    };
    let mut flow = Traffic::new(args.seed, mix, keys);
    flow.set_markets(&tickers, &open);
    let shared = Arc::new(Shared {
        target,
        traffic: Mutex::new(flow),
        stats: Mutex::new(Stats::new()),
        sent: AtomicU64::new(0),
        done: AtomicBool::new(false),
        finished: tokio::sync::Notify::new(),
    });
    if !args.json {
        eprintln!(
            "loadgen: {total} requests at {} /s for {} s over {} connections, {} websocket subscribers",
            args.rate,
            args.duration,
            args.connections,
            args.ws_subscribers
        );
    }
    let (elapsed, intervals, unfinished) = runtime.block_on(drive(shared.clone(), args, total))?;
    let ws = subscribers.finish();
    drop(runtime);

    // 5. Report.
    let stats = shared.stats.lock().expect("stats");
    let sent = shared.sent.load(Ordering::Relaxed);
    let ok: u64 = stats.ok.iter().sum();
    let errors: u64 = stats.errors.values().sum();
    if let Some(path) = &args.hgrm {
        report::write_hgrm(path, &stats.all)?;
    }
    if let Some(path) = &args.plot {
        let mut series: Vec<(&str, &Histogram<u64>)> = vec![("all requests", &stats.all)];
        for kind in Kind::ALL {
            series.push((kind.name(), &stats.kinds[kind.index()]));
        }
        if !stats.never_sent.is_empty() {
            series.push(("never sent", &stats.never_sent));
        }
        report::write_svg(
            path,
            &format!(
                "updown loadgen: {} req/s for {} s, {} accounts (latency from the due time)",
                args.rate, args.duration, args.accounts
            ),
            &series,
        )?;
    }
    let mut latency = serde_json::Map::new();
    latency.insert("all".into(), summary_json(&stats.all));
    for kind in Kind::ALL {
        latency.insert(kind.name().into(), summary_json(&stats.kinds[kind.index()]));
    }
    latency.insert("never_sent".into(), summary_json(&stats.never_sent));
    let empty = new_histogram();
    let ws_delay = ws.delay.as_ref().unwrap_or(&empty);
    let result = json!({
        "target": args.target,
        "rate": args.rate,
        "duration_s": args.duration,
        "accounts": args.accounts,
        "connections": args.connections,
        "setup_s": (setup_s * 10.0).round() / 10.0,
        "scheduled": total,
        "sent": sent,
        "completed": stats.completed,
        "ok": ok,
        "ok_by_kind": Kind::ALL.iter().map(|k| (k.name().to_string(), json!(stats.ok[k.index()]))).collect::<serde_json::Map<_, _>>(),
        "errors": errors,
        "errors_by_kind": stats.errors,
        "skipped_no_market": stats.skipped,
        "unfinished": unfinished,
        "elapsed_s": (elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
        "achieved_rate": (stats.completed as f64 / elapsed.as_secs_f64().max(1e-9) * 10.0).round() / 10.0,
        "orders_rested": stats.rested,
        "crossing_orders_that_traded": stats.crossed_and_traded,
        "latency": latency,
        "service_time": summary_json(&stats.service),
        "ws": {
            "subscribers": args.ws_subscribers,
            "connected": ws.connected,
            "messages": ws.messages,
            "data_messages": ws.data_messages(),
            "gaps": ws.gaps,
            "errors": ws.errors,
            "delivery_delay": summary_json(ws_delay),
        },
        "intervals": intervals,
        "hgrm": args.hgrm.as_ref().map(|p| p.display().to_string()),
        "plot": args.plot.as_ref().map(|p| p.display().to_string()),
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
        return Ok(());
    }
    println!(
        "{} of {} scheduled requests sent in {:.2} s; {} answered ({:.1}/s): {} ok, {} errors; {} unfinished, {} skipped (no market)",
        sent,
        total,
        elapsed.as_secs_f64(),
        stats.completed,
        result["achieved_rate"].as_f64().unwrap_or(0.0),
        ok,
        errors,
        unfinished,
        stats.skipped
    );
    println!("latency from each request's due time (coordinated omission corrected):");
    if unfinished > 0 {
        println!(
            "  ({unfinished} requests unanswered at the end count at the time they had waited by then: those in flight in their kind's row, those never sent in \"(never sent)\"; all of them in \"all\")"
        );
    }
    println!("{}", report::table_header());
    println!("{}", report::table_row("all", &stats.all));
    for kind in Kind::ALL {
        println!(
            "{}",
            report::table_row(kind.name(), &stats.kinds[kind.index()])
        );
    }
    if !stats.never_sent.is_empty() {
        println!("{}", report::table_row("(never sent)", &stats.never_sent));
    }
    println!("{}", report::table_row("(service time)", &stats.service));
    if !stats.errors.is_empty() {
        println!("errors:");
        for (what, n) in &stats.errors {
            println!("  {n:>8}  {what}");
        }
    }
    println!(
        "orders: {} rested, {} crossing orders traded",
        stats.rested, stats.crossed_and_traded
    );
    println!(
        "websocket: {}/{} subscribers connected, {} data messages {:?}, {} missed (seq gaps), delivery from the send time p50 {} ms p99 {} ms (whole milliseconds: the send stamp's resolution)",
        ws.connected,
        args.ws_subscribers,
        ws.data_messages(),
        ws.messages,
        ws.gaps,
        ws_delay.value_at_percentile(50.0) / 1000,
        ws_delay.value_at_percentile(99.0) / 1000,
    );
    for e in &ws.errors {
        println!("  websocket error: {e}");
    }
    if let Some(path) = &args.hgrm {
        println!("wrote {}", path.display());
    }
    if let Some(path) = &args.plot {
        println!("wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn market(ticker: &str, series: &str, close_ts_ms: u64) -> OpenMarket {
        OpenMarket {
            ticker: ticker.to_string(),
            series: series.to_string(),
            close_ts_ms,
        }
    }

    const CLOSE: u64 = 1_800_000_060_000;

    #[test]
    fn a_market_is_traded_until_half_a_second_before_its_close() {
        let list = [
            market("a-1", "a", CLOSE),
            market("b-1", "b", CLOSE + 30_000),
        ];
        let a = ("a-1".to_string(), CLOSE);
        let b = ("b-1".to_string(), CLOSE + 30_000);
        assert_eq!(tradable(&list, &[], CLOSE - 501), [a.clone(), b.clone()]);
        assert_eq!(tradable(&list, &[], CLOSE - 500), [b]);
        assert_eq!(tradable(&list, &["a".into()], CLOSE - 500), []);
        assert_eq!(tradable(&list, &["a".into()], CLOSE - 10_000), [a]);
    }

    #[test]
    fn the_list_is_read_just_after_a_close_and_often_until_the_next_window_opens() {
        let all: Vec<String> = vec![];
        let mut r = Refresh::default();
        let one = [market("a-1", "a", CLOSE)];
        // Far from the close: every second.
        assert_eq!(r.wait_after(&one, &all, CLOSE - 30_000), 1_000);
        // Just after the close, to the millisecond.
        assert_eq!(r.wait_after(&one, &all, CLOSE - 1_200), 1_000);
        assert_eq!(r.wait_after(&one, &all, CLOSE - 950), 1_000);
        assert_eq!(r.wait_after(&one, &all, CLOSE - 949), 999);
        assert_eq!(r.wait_after(&one, &all, CLOSE - 500), 550);
        assert_eq!(r.wait_after(&one, &all, CLOSE - 1), 51);
        // Closed (listed or not), the next window not open yet: every
        // 50 ms, for two seconds after the close...
        assert_eq!(r.wait_after(&one, &all, CLOSE + 50), 50);
        assert_eq!(r.wait_after(&[], &all, CLOSE + 100), 50);
        assert_eq!(r.wait_after(&[], &all, CLOSE + 1_999), 50);
        // ...then every second (a feed that stopped).
        assert_eq!(r.wait_after(&[], &all, CLOSE + 2_000), 1_000);
        // Once the next window is open, back to its own close.
        let next = [market("a-2", "a", CLOSE + 60_000)];
        assert_eq!(r.wait_after(&next, &all, CLOSE + 400), 1_000);
        assert_eq!(r.wait_after(&next, &all, CLOSE + 59_500), 550);

        // Only the chosen series count.
        let mut r = Refresh::default();
        let two = [
            market("b-1", "b", CLOSE),
            market("a-2", "a", CLOSE + 60_000),
        ];
        assert_eq!(r.wait_after(&two, &["a".into()], CLOSE - 500), 1_000);
        assert_eq!(r.wait_after(&[], &["a".into()], CLOSE + 100), 1_000);
        let mut r = Refresh::default();
        assert_eq!(r.wait_after(&two, &all, CLOSE - 500), 550);
        // One series waiting for its window is enough to read often.
        assert_eq!(r.wait_after(&two[1..], &all, CLOSE + 100), 50);
    }
}
