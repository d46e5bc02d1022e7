//! The load: `connections` keep-alive connections, one task each on the
//! client's runtime, posting order bodies to one server.
//!
//! - [`closed_loop`]: every connection sends its next order as soon as the
//!   last one is answered; the rate of answers is the server's maximum.
//! - [`open_loop`]: a pacer task schedules orders at fixed intervals (a
//!   fixed rate) and hands them round-robin to the connections; latency is
//!   measured from the *scheduled* send time, so a request that waits behind
//!   a slow one on its connection counts its wait (no coordinated omission).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::sync::mpsc;

use tools::http::Conn;

/// The path both servers serve.
pub const ORDERS_PATH: &str = "/v1/portfolio/orders";

/// Where the orders go and who sends them.
#[derive(Clone)]
pub struct Target {
    pub addr: SocketAddr,
    /// Bearer keys; connection `i` uses `keys[i % keys.len()]`.
    pub keys: Arc<Vec<String>>,
    /// Open markets the orders are spread over.
    pub markets: Arc<Vec<String>>,
}

/// Latency histogram in nanoseconds, 1 ns to 1 minute at 3 significant
/// digits; `saturating_record` clamps anything outside.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

/// What one load phase did.
pub struct LoadOutcome {
    /// Requests sent (warm-up included); each was answered.
    pub sent: u64,
    /// Of those, answered 201 Created.
    pub created: u64,
    /// The first answer that was not 201, as status and body.
    pub first_refusal: Option<String>,
    /// Answers counted in the measured window.
    pub measured: u64,
    /// Length of the measured window (open loop: until the last answer, if
    /// that came after the window's end).
    pub window: Duration,
    /// Latency of each measured request, ns (closed loop: from its send;
    /// open loop: from its scheduled send time).
    pub latency: Histogram<u64>,
    /// Open loop: the rate asked for, and how late the pacer task handed
    /// out each request, ns (the generator's own timing error; it is inside
    /// every latency sample too).
    pub target_rate: Option<f64>,
    pub pacer_lag: Option<Histogram<u64>>,
}

impl LoadOutcome {
    /// Answers per second in the measured window.
    pub fn rate(&self) -> f64 {
        self.measured as f64 / self.window.as_secs_f64().max(1e-9)
    }

    /// Requests not answered 201.
    pub fn refused(&self) -> u64 {
        self.sent - self.created
    }
}

/// What one connection task counted.
struct Tally {
    sent: u64,
    created: u64,
    first_refusal: Option<String>,
    measured: u64,
    last_done: Option<Instant>,
    latency: Histogram<u64>,
}

impl Tally {
    fn new() -> Self {
        Self {
            sent: 0,
            created: 0,
            first_refusal: None,
            measured: 0,
            last_done: None,
            latency: histogram(),
        }
    }

    fn answer(&mut self, conn: &Conn, status: u16) {
        self.sent += 1;
        if status == 201 {
            self.created += 1;
        } else if self.first_refusal.is_none() {
            self.first_refusal = Some(format!("{status} {}", String::from_utf8_lossy(conn.body())));
        }
    }
}

/// Writes the order body of request `n` of connection `conn` in `phase`:
/// a good-till-canceled buy of one contract at 1 to 49 cents, up or down,
/// on one of the markets. An up bid at p and a down bid at q cross only
/// when p + q >= 100, so none of these ever trades: every order rests, the
/// books never run away, and no order can trade with its own account. The
/// client_order_id is unique over the whole run.
pub fn order_body(out: &mut Vec<u8>, markets: &[String], phase: u32, conn: usize, n: u64) {
    use std::io::Write as _;
    // Markets in turn, both outcomes on each, prices spread over 49 levels.
    let slot = (n as usize).wrapping_add(conn);
    let market = &markets[slot % markets.len()];
    let outcome = if (slot / markets.len()).is_multiple_of(2) {
        "up"
    } else {
        "down"
    };
    let cents = 1 + n.wrapping_mul(7).wrapping_add(conn as u64 * 13) % 49;
    out.clear();
    let _ = write!(
        out,
        r#"{{"market_ticker":"{market}","outcome":"{outcome}","action":"buy","price":"0.{cents:02}","count":"1","time_in_force":"good_till_canceled","client_order_id":"p{phase}c{conn}n{n}"}}"#
    );
}

async fn connect_all(target: &Target, connections: usize) -> io::Result<Vec<Conn>> {
    let mut conns = Vec::with_capacity(connections);
    for _ in 0..connections {
        conns.push(Conn::connect(target.addr).await?);
    }
    Ok(conns)
}

fn merge(tallies: Vec<Tally>) -> (Tally, Option<Instant>) {
    let mut all = Tally::new();
    let mut last = None;
    for t in tallies {
        all.sent += t.sent;
        all.created += t.created;
        all.measured += t.measured;
        all.first_refusal = all.first_refusal.or(t.first_refusal);
        all.latency.add(&t.latency).expect("same bounds");
        last = last.max(t.last_done);
    }
    (all, last)
}

async fn join(tasks: Vec<tokio::task::JoinHandle<io::Result<Tally>>>) -> io::Result<Vec<Tally>> {
    let mut tallies = Vec::with_capacity(tasks.len());
    for task in tasks {
        tallies.push(task.await.map_err(io::Error::other)??);
    }
    Ok(tallies)
}

/// Every connection sends, waits for the answer, sends again, from now for
/// `warmup + measure`; answers that arrive within the last `measure` count.
pub async fn closed_loop(
    target: &Target,
    connections: usize,
    phase: u32,
    warmup: Duration,
    measure: Duration,
) -> io::Result<LoadOutcome> {
    let conns = connect_all(target, connections).await?;
    let start = Instant::now() + warmup;
    let end = start + measure;
    let mut tasks = Vec::with_capacity(connections);
    for (index, mut conn) in conns.into_iter().enumerate() {
        let target = target.clone();
        tasks.push(tokio::spawn(async move {
            let key = &target.keys[index % target.keys.len()];
            let mut tally = Tally::new();
            let mut body = Vec::with_capacity(256);
            for n in 0.. {
                let sent = Instant::now();
                if sent >= end {
                    break;
                }
                order_body(&mut body, &target.markets, phase, index, n);
                let status = conn.request("POST", ORDERS_PATH, Some(key), &body).await?;
                let done = Instant::now();
                tally.answer(&conn, status);
                if done >= start && done < end {
                    tally.measured += 1;
                    tally
                        .latency
                        .saturating_record(done.duration_since(sent).as_nanos() as u64);
                }
            }
            Ok(tally)
        }));
    }
    let (all, _) = merge(join(tasks).await?);
    Ok(LoadOutcome {
        sent: all.sent,
        created: all.created,
        first_refusal: all.first_refusal,
        measured: all.measured,
        window: measure,
        latency: all.latency,
        target_rate: None,
        pacer_lag: None,
    })
}

/// Requests scheduled at `rate` a second for `warmup + measure`, handed
/// round-robin to the connections by a pacer task; requests scheduled in
/// the last `measure` are measured from their scheduled time to their
/// answer.
pub async fn open_loop(
    target: &Target,
    connections: usize,
    phase: u32,
    rate: f64,
    warmup: Duration,
    measure: Duration,
) -> io::Result<LoadOutcome> {
    let conns = connect_all(target, connections).await?;
    let mut senders = Vec::with_capacity(connections);
    let mut tasks = Vec::with_capacity(connections);
    // A little head start, so that the first requests are not late because
    // the tasks were still being spawned.
    let t0 = Instant::now() + Duration::from_millis(5);
    let start = t0 + warmup;
    for (index, mut conn) in conns.into_iter().enumerate() {
        let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, u64)>();
        senders.push(tx);
        let target = target.clone();
        tasks.push(tokio::spawn(async move {
            let key = &target.keys[index % target.keys.len()];
            let mut tally = Tally::new();
            let mut body = Vec::with_capacity(256);
            while let Some((scheduled, n)) = rx.recv().await {
                order_body(&mut body, &target.markets, phase, index, n);
                let status = conn.request("POST", ORDERS_PATH, Some(key), &body).await?;
                let done = Instant::now();
                tally.answer(&conn, status);
                if scheduled >= start {
                    tally.measured += 1;
                    tally.last_done = Some(done);
                    tally.latency.saturating_record(
                        done.saturating_duration_since(scheduled).as_nanos() as u64,
                    );
                }
            }
            Ok(tally)
        }));
    }
    let total = ((warmup + measure).as_secs_f64() * rate) as u64;
    let interval = Duration::from_secs_f64(1.0 / rate);
    let pacer = tokio::spawn(pace(senders, t0, interval, total));
    let tallies = join(tasks).await?;
    let lag = pacer.await.map_err(io::Error::other)??;
    let (all, last_done) = merge(tallies);
    let window = last_done.map_or(measure, |last| {
        measure.max(last.saturating_duration_since(start))
    });
    Ok(LoadOutcome {
        sent: all.sent,
        created: all.created,
        first_refusal: all.first_refusal,
        measured: all.measured,
        window,
        latency: all.latency,
        target_rate: Some(rate),
        pacer_lag: Some(lag),
    })
}

/// The pacer: request `i` is due at `t0 + i * interval` and goes to
/// connection `i % connections` (each connection sees `rate / connections`);
/// a request whose connection is still busy waits in its queue, and that
/// wait is part of its latency. It runs on the client's runtime, next to the
/// connections, and waits on a [`Timer`]: tokio's own timer has a 1 ms
/// resolution, which would add up to 1 ms to every sample.
async fn pace(
    senders: Vec<mpsc::UnboundedSender<(Instant, u64)>>,
    t0: Instant,
    interval: Duration,
    total: u64,
) -> io::Result<Histogram<u64>> {
    let timer = Timer::new()?;
    let mut lag = histogram();
    let connections = senders.len() as u64;
    for i in 0..total {
        let due = t0 + interval.mul_f64(i as f64);
        if due > Instant::now() {
            timer.sleep_until(due).await?;
        } else if i % 256 == 255 {
            // Behind schedule: let the connections run now and then.
            tokio::task::yield_now().await;
        }
        lag.saturating_record(Instant::now().saturating_duration_since(due).as_nanos() as u64);
        let conn = (i % connections) as usize;
        if senders[conn].send((due, i / connections)).is_err() {
            break;
        }
    }
    Ok(lag)
}

/// A precise one-shot timer for the runtime: a Linux `timerfd` (a
/// high-resolution timer, no timer slack) registered with the runtime's
/// reactor, so waiting on it costs no thread; elsewhere, tokio's sleep.
struct Timer {
    #[cfg(target_os = "linux")]
    fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
}

impl Timer {
    #[cfg(target_os = "linux")]
    fn new() -> io::Result<Self> {
        use std::os::fd::FromRawFd;
        // SAFETY: timerfd_create takes two integers and returns a new
        // descriptor (or -1), which the OwnedFd then owns alone.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else holds.
        let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // SAFETY: an OwnedFd keeps its descriptor open, and the same, until
        // it is dropped with the AsyncFd.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(owned, tokio::io::Interest::READABLE)
        }
        .map_err(io::Error::from)?;
        Ok(Self { fd })
    }

    #[cfg(not(target_os = "linux"))]
    fn new() -> io::Result<Self> {
        Ok(Self {})
    }

    #[cfg(target_os = "linux")]
    async fn sleep_until(&self, deadline: Instant) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: left.as_secs() as libc::time_t,
                tv_nsec: left.subsec_nanos() as libc::c_long,
            },
        };
        let fd = self.fd.get_ref().as_raw_fd();
        // SAFETY: `spec` is a valid itimerspec; a null old value is allowed.
        if unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) } < 0 {
            return Err(io::Error::last_os_error());
        }
        loop {
            let mut guard = self.fd.readable().await?;
            let read = guard.try_io(|fd| {
                let mut expirations = [0u8; 8];
                // SAFETY: reads at most 8 bytes into an 8-byte buffer.
                let n = unsafe {
                    libc::read(fd.get_ref().as_raw_fd(), expirations.as_mut_ptr().cast(), 8)
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(())
                }
            });
            match read {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    #[cfg(not(target_os = "linux"))]
    async fn sleep_until(&self, deadline: Instant) -> io::Result<()> {
        tokio::time::sleep_until(deadline.into()).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_bodies_parse_never_cross_and_cover_both_outcomes_everywhere() {
        let markets: Vec<String> = ["a", "b", "c", "d"]
            .iter()
            .map(|s| format!("rb-{s}-261121-0000-0000d1"))
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        let mut ids = std::collections::BTreeSet::new();
        let mut body = Vec::new();
        for conn in 0..5 {
            for n in 0..400 {
                order_body(&mut body, &markets, 3, conn, n);
                let order = gateway::api::parse::order_body(&body).expect("a valid body");
                assert!(order.price <= 49, "never crosses: {}", order.price);
                seen.insert((order.market_ticker, order.outcome.as_str()));
                assert!(ids.insert(order.client_order_id.as_str().to_string()));
            }
        }
        assert_eq!(seen.len(), markets.len() * 2);
    }
}
