//! Prometheus metrics: request counts and latencies, sequencer queue depth,
//! batch sizes and journal position, and the websocket publisher's
//! counters. Plain atomics and one mutex-guarded histogram per route,
//! rendered as text on `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::ws::Hub;

/// What one route answered, and how fast.
struct RouteStats {
    statuses: BTreeMap<u16, u64>,
    latency_us: Histogram<u64>,
    /// Every request's latency added up, for the summary's `_sum`.
    latency_sum_us: u64,
}

impl RouteStats {
    fn new() -> RouteStats {
        RouteStats {
            statuses: BTreeMap::new(),
            latency_us: Histogram::new_with_bounds(1, 60_000_000, 2).expect("histogram bounds"),
            latency_sum_us: 0,
        }
    }
}

/// Counters and histograms of one server.
pub struct Metrics {
    /// Per route and method: answers by status and the latency histogram.
    /// One lock, and no allocation once a route and method were seen.
    routes: Mutex<BTreeMap<String, BTreeMap<String, RouteStats>>>,
    /// Connections the listener refused before any request was read:
    /// over the cap of one address (429), over the cap in all (503).
    pub connections_refused_address: AtomicU64,
    pub connections_refused_total: AtomicU64,
    pub batches: AtomicU64,
    pub jobs: AtomicU64,
    pub queue_depth: AtomicU64,
    pub last_seq: AtomicU64,
    pub batch_busy_us: AtomicU64,
    pub rate_limited: AtomicU64,
    pub lockouts: AtomicU64,
    /// Reads skipped because nobody waited for them any more.
    pub abandoned_reads: AtomicU64,
    pub journal_lag_ms: AtomicU64,
    /// The same in microseconds (under normal load the lag is well under a
    /// millisecond, where the `_ms` gauge reads 0).
    pub journal_lag_us: AtomicU64,
    pub journal_syncs: AtomicU64,
    pub journal_sync_us: AtomicU64,
    /// 1 once the journal has failed (a full disk, an I/O error): the
    /// venue answers reads and refuses every write until a restart.
    pub journal_failed: AtomicU64,
    /// 1 while the journal's next segment could not be built ahead (a
    /// full disk, most often): the roll that needs it will fail the same
    /// way, and stop the journal, unless the cause goes first.
    pub journal_next_segment_failed: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            routes: Mutex::new(BTreeMap::new()),
            connections_refused_address: AtomicU64::new(0),
            connections_refused_total: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            jobs: AtomicU64::new(0),
            queue_depth: AtomicU64::new(0),
            last_seq: AtomicU64::new(0),
            batch_busy_us: AtomicU64::new(0),
            rate_limited: AtomicU64::new(0),
            lockouts: AtomicU64::new(0),
            abandoned_reads: AtomicU64::new(0),
            journal_lag_ms: AtomicU64::new(0),
            journal_lag_us: AtomicU64::new(0),
            journal_syncs: AtomicU64::new(0),
            journal_sync_us: AtomicU64::new(0),
            journal_failed: AtomicU64::new(0),
            journal_next_segment_failed: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    /// One HTTP request done.
    pub fn record_request(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        let Ok(mut routes) = self.routes.lock() else {
            return;
        };
        let methods = match routes.get_mut(route) {
            Some(methods) => methods,
            None => routes.entry(route.to_string()).or_default(),
        };
        let stats = match methods.get_mut(method) {
            Some(stats) => stats,
            None => methods
                .entry(method.to_string())
                .or_insert_with(RouteStats::new),
        };
        *stats.statuses.entry(status).or_default() += 1;
        let us = elapsed.as_micros() as u64;
        stats.latency_us.saturating_record(us);
        stats.latency_sum_us = stats.latency_sum_us.saturating_add(us);
    }

    /// One sequencer batch done.
    pub fn record_batch(&self, jobs: u64, busy: Duration, queue_depth: u64, last_seq: u64) {
        // A wake-up with no job (a tick falling due, a timeout) is not a
        // batch: jobs / batches is the batch size.
        if jobs > 0 {
            self.batches.fetch_add(1, Ordering::Relaxed);
            self.jobs.fetch_add(jobs, Ordering::Relaxed);
            self.batch_busy_us
                .fetch_add(busy.as_micros() as u64, Ordering::Relaxed);
        }
        self.queue_depth.store(queue_depth, Ordering::Relaxed);
        self.last_seq.store(last_seq, Ordering::Relaxed);
    }

    /// Batches made durable and answered; `lag` is how long the oldest of
    /// them waited after the sequencer closed it.
    pub fn record_commit(&self, lag: Duration) {
        self.journal_lag_ms
            .store(lag.as_millis() as u64, Ordering::Relaxed);
        self.journal_lag_us
            .store(lag.as_micros() as u64, Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Ok(routes) = self.routes.lock() {
            let each = || {
                routes.iter().flat_map(|(route, methods)| {
                    methods
                        .iter()
                        .map(move |(method, stats)| (route, method, stats))
                })
            };
            let _ = writeln!(out, "# TYPE updown_http_requests_total counter");
            for (route, method, stats) in each() {
                for (status, n) in &stats.statuses {
                    let _ = writeln!(
                        out,
                        "updown_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {n}"
                    );
                }
            }
            // Quantiles over the process's life; rates of `_sum` and
            // `_count` give the mean over any window.
            let _ = writeln!(out, "# TYPE updown_http_latency_us summary");
            for (route, method, stats) in each() {
                let h = &stats.latency_us;
                let labels = format!("method=\"{method}\",route=\"{route}\"");
                for q in [0.5, 0.99, 0.999] {
                    let _ = writeln!(
                        out,
                        "updown_http_latency_us{{{labels},quantile=\"{q}\"}} {}",
                        h.value_at_quantile(q)
                    );
                }
                let _ = writeln!(
                    out,
                    "updown_http_latency_us_sum{{{labels}}} {}",
                    stats.latency_sum_us
                );
                let _ = writeln!(out, "updown_http_latency_us_count{{{labels}}} {}", h.len());
            }
        }
        let _ = writeln!(out, "# TYPE updown_http_connections_refused_total counter");
        for (cap, n) in [
            ("address", &self.connections_refused_address),
            ("total", &self.connections_refused_total),
        ] {
            let _ = writeln!(
                out,
                "updown_http_connections_refused_total{{cap=\"{cap}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
        let gauges = [
            (
                "updown_sequencer_batches_total",
                "counter",
                self.batches.load(Ordering::Relaxed),
            ),
            (
                "updown_sequencer_jobs_total",
                "counter",
                self.jobs.load(Ordering::Relaxed),
            ),
            (
                "updown_sequencer_queue_depth",
                "gauge",
                self.queue_depth.load(Ordering::Relaxed),
            ),
            (
                "updown_sequencer_busy_us_total",
                "counter",
                self.batch_busy_us.load(Ordering::Relaxed),
            ),
            (
                "updown_journal_last_seq",
                "gauge",
                self.last_seq.load(Ordering::Relaxed),
            ),
            (
                "updown_journal_commit_lag_ms",
                "gauge",
                self.journal_lag_ms.load(Ordering::Relaxed),
            ),
            (
                "updown_journal_commit_lag_us",
                "gauge",
                self.journal_lag_us.load(Ordering::Relaxed),
            ),
            (
                "updown_journal_syncs_total",
                "counter",
                self.journal_syncs.load(Ordering::Relaxed),
            ),
            (
                "updown_journal_sync_us_total",
                "counter",
                self.journal_sync_us.load(Ordering::Relaxed),
            ),
            (
                "updown_journal_failed",
                "gauge",
                self.journal_failed.load(Ordering::Relaxed),
            ),
            (
                "updown_journal_next_segment_failed",
                "gauge",
                self.journal_next_segment_failed.load(Ordering::Relaxed),
            ),
            (
                "updown_rate_limited_total",
                "counter",
                self.rate_limited.load(Ordering::Relaxed),
            ),
            (
                "updown_auth_lockouts_total",
                "counter",
                self.lockouts.load(Ordering::Relaxed),
            ),
            (
                "updown_sequencer_abandoned_reads_total",
                "counter",
                self.abandoned_reads.load(Ordering::Relaxed),
            ),
        ];
        for (name, kind, value) in gauges {
            let _ = writeln!(out, "# TYPE {name} {kind}\n{name} {value}");
        }
        out
    }
}

/// The websocket's counters, appended to [`Metrics::render`]'s text:
/// messages handed to connection queues, messages dropped because a queue
/// was full (each a seq gap a client sees), batches of events the publisher
/// could not take (each a resynchronization), and open connections.
pub fn render_ws(out: &mut String, hub: &Hub) {
    let stats = &hub.stats;
    let lines = [
        (
            "updown_ws_messages_sent_total",
            "counter",
            stats.sent.load(Ordering::Relaxed),
        ),
        (
            "updown_ws_messages_dropped_total",
            "counter",
            stats.dropped.load(Ordering::Relaxed),
        ),
        (
            "updown_ws_lost_batches_total",
            "counter",
            stats.lost_batches.load(Ordering::Relaxed),
        ),
        (
            "updown_ws_connections",
            "gauge",
            u64::from(hub.connections()),
        ),
    ];
    for (name, kind, value) in lines {
        let _ = writeln!(out, "# TYPE {name} {kind}\n{name} {value}");
    }
}

#[cfg(test)]
mod batch_tests {
    use super::*;

    /// A wake-up with no job is not a batch, so jobs / batches is the batch
    /// size; the gauges move either way.
    #[test]
    fn empty_wake_ups_are_not_batches() {
        let m = Metrics::default();
        m.record_batch(3, Duration::from_micros(10), 0, 5);
        m.record_batch(0, Duration::from_micros(2), 1, 6);
        assert_eq!(m.batches.load(Ordering::Relaxed), 1);
        assert_eq!(m.jobs.load(Ordering::Relaxed), 3);
        assert_eq!(m.last_seq.load(Ordering::Relaxed), 6);
        assert_eq!(m.queue_depth.load(Ordering::Relaxed), 1);
    }
}
