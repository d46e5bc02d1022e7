//! The sequencer thread and the queue into it.
//!
//! Pipeline (one place, numbered as it runs):
//! 1. gateway tasks push a [`Job`] into a bounded lock-free queue;
//! 2. the sequencer thread drains up to `BATCH_MAX` jobs at once;
//! 3. it authenticates each against the key registry and applies the rate
//!    limit (both here, so revocation and limits take effect at once);
//! 4. it stamps, journals and applies each write through `replay::Node`,
//!    and answers each read from the state at its place in the batch;
//! 5. it commits the journal once for the batch (group commit);
//! 6. only then it hands the batch's events to the publisher and sends the
//!    answers.
//!
//! A failed journal write stops the node: every later write answers 503.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use replay::Node;
use sequencer::auth::{check_key, KeyRefusal};
use sequencer::types::{Environment, KeyIdx};
use sequencer::{Command, ErrorCode, Event, Reply, State};
use subtle::ConstantTimeEq;
use tokio::sync::oneshot;

use crate::error::ApiError;
use crate::metrics::Metrics;

/// Jobs drained and committed together.
pub const BATCH_MAX: usize = 256;

/// A successful answer: status and JSON body.
pub type Answer = Result<(StatusCode, serde_json::Value), ApiError>;
/// Builds the command from the state and the caller's key.
pub type BuildFn = Box<dyn FnOnce(&State, Option<KeyIdx>) -> Result<Command, ApiError> + Send>;
/// Turns the reply into the answer, with the state right after the command.
pub type FinishFn = Box<dyn FnOnce(&State, Reply) -> Answer + Send>;
/// A read of the state.
pub type ReadFn = Box<dyn FnOnce(&State, Option<KeyIdx>) -> Answer + Send>;

/// Who is calling, as the gateway saw it: the key id, the SHA-256 of the
/// secret (never the secret), and the address.
#[derive(Clone, Debug)]
pub struct Caller {
    pub key_id: String,
    pub fingerprint: [u8; 32],
    pub ip: IpAddr,
    /// Whether this request counts against the new-order rate limit.
    pub rate_limited: bool,
}

/// One unit of work for the sequencer thread.
pub enum Job {
    Write {
        caller: Option<Caller>,
        build: BuildFn,
        finish: FinishFn,
        reply: oneshot::Sender<Answer>,
    },
    Read {
        caller: Option<Caller>,
        read: ReadFn,
        reply: oneshot::Sender<Answer>,
    },
    /// A command from inside the venue (price feed, operator); answered with
    /// the reply as is.
    Internal {
        command: Command,
        reply: Option<oneshot::Sender<Reply>>,
    },
}

/// The gateway's handle on the queue.
#[derive(Clone)]
pub struct Submitter {
    tx: Sender<Job>,
    timeout: Duration,
    pub metrics: Arc<Metrics>,
}

impl Submitter {
    /// Queues a job; 503 when the sequencer cannot take it in time.
    pub async fn push(&self, mut job: Job) -> Result<(), ApiError> {
        let deadline = Instant::now() + self.timeout;
        loop {
            match self.tx.try_send(job) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Full(back)) => {
                    if Instant::now() >= deadline {
                        return Err(ApiError::unavailable(
                            "The exchange is busy; retry with the same client_order_id.",
                        ));
                    }
                    job = back;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(TrySendError::Disconnected(_)) => {
                    return Err(ApiError::unavailable(
                        "The exchange is shutting down; retry with the same client_order_id.",
                    ))
                }
            }
        }
    }

    async fn wait<T>(&self, rx: oneshot::Receiver<T>) -> Result<T, ApiError> {
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(value)) => Ok(value),
            _ => Err(ApiError::unavailable(
                "The order could not be confirmed in time; retry with the same client_order_id.",
            )),
        }
    }

    /// Runs a write and waits for its answer.
    pub async fn write(&self, caller: Option<Caller>, build: BuildFn, finish: FinishFn) -> Answer {
        let (reply, rx) = oneshot::channel();
        self.push(Job::Write {
            caller,
            build,
            finish,
            reply,
        })
        .await?;
        self.wait(rx).await?
    }

    /// Runs a read and waits for its answer.
    pub async fn read(&self, caller: Option<Caller>, read: ReadFn) -> Answer {
        let (reply, rx) = oneshot::channel();
        self.push(Job::Read {
            caller,
            read,
            reply,
        })
        .await?;
        self.wait(rx).await?
    }

    /// Submits a command from inside the venue and waits for its reply.
    pub async fn internal(&self, command: Command) -> Result<Reply, ApiError> {
        let (reply, rx) = oneshot::channel();
        self.push(Job::Internal {
            command,
            reply: Some(reply),
        })
        .await?;
        self.wait(rx).await
    }

    /// Submits without waiting, from a plain thread (the price feed).
    pub fn internal_nowait(&self, command: Command) -> bool {
        self.tx
            .try_send(Job::Internal {
                command,
                reply: None,
            })
            .is_ok()
    }

    /// Jobs waiting in the queue.
    pub fn queue_depth(&self) -> usize {
        self.tx.len()
    }
}

/// Settings of the sequencer thread.
#[derive(Clone, Debug)]
pub struct EngineSettings {
    pub environment: Environment,
    pub orders_per_second: u32,
    pub orders_burst: u32,
    pub snapshot_every: u64,
    pub request_timeout: Duration,
    pub queue_capacity: usize,
}

/// Failed authentications reported back to the gateway for its lockout.
pub type FailureSink = Arc<dyn Fn(IpAddr) + Send + Sync>;

/// Events of each batch go here (the websocket publisher).
pub type EventSink = Box<dyn FnMut(&State, &[Event]) + Send>;

/// A token bucket per key for new orders.
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// The running sequencer thread.
pub struct Engine {
    pub submitter: Submitter,
    pub stop: Arc<AtomicBool>,
    pub handle: Option<std::thread::JoinHandle<Node>>,
}

/// Wall-clock epoch milliseconds; the one clock of the venue, read only by
/// the sequencer thread to stamp commands.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Engine {
    /// Starts the sequencer thread over an opened node.
    pub fn start(
        node: Node,
        settings: EngineSettings,
        metrics: Arc<Metrics>,
        failures: FailureSink,
        events: EventSink,
    ) -> Engine {
        let (tx, rx) = crossbeam_channel::bounded(settings.queue_capacity);
        let stop = Arc::new(AtomicBool::new(false));
        let submitter = Submitter {
            tx,
            timeout: settings.request_timeout,
            metrics: metrics.clone(),
        };
        let thread_stop = stop.clone();
        let handle = std::thread::Builder::new()
            .name("sequencer".into())
            .spawn(move || run(node, rx, settings, metrics, failures, events, thread_stop))
            .expect("spawn the sequencer thread");
        Engine {
            submitter,
            stop,
            handle: Some(handle),
        }
    }

    /// Stops taking new work, finishes what is queued, syncs the journal and
    /// returns the node.
    pub fn shutdown(&mut self) -> Option<Node> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.take().and_then(|h| h.join().ok())
    }
}

struct Loop {
    node: Node,
    settings: EngineSettings,
    metrics: Arc<Metrics>,
    failures: FailureSink,
    buckets: HashMap<KeyIdx, Bucket>,
    last_ts: u64,
    snapshot_seq: u64,
}

fn run(
    node: Node,
    rx: Receiver<Job>,
    settings: EngineSettings,
    metrics: Arc<Metrics>,
    failures: FailureSink,
    mut events: EventSink,
    stop: Arc<AtomicBool>,
) -> Node {
    let mut this = Loop {
        node,
        settings,
        metrics,
        failures,
        buckets: HashMap::new(),
        last_ts: 0,
        snapshot_seq: 0,
    };
    let mut batch: Vec<Job> = Vec::with_capacity(BATCH_MAX);
    let mut answers: Vec<Pending> = Vec::with_capacity(BATCH_MAX);
    // The publisher's first picture of the state, before any new command.
    events(this.node.state(), &[]);
    loop {
        let wait = this.until_due();
        match rx.recv_timeout(wait) {
            Ok(job) => batch.push(job),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        while batch.len() < BATCH_MAX {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let started = Instant::now();
        let jobs = batch.len();
        this.tick_if_due();
        for job in batch.drain(..) {
            answers.push(this.handle(job));
        }
        let committed = this.node.commit();
        if let Err(e) = &committed {
            tracing::error!(error = %e, "journal commit failed; refusing writes from now on");
        }
        // The publisher gets the batch before its callers get their answers,
        // so a client that subscribes right after its answer sees its own
        // change in the snapshot.
        if !this.node.events().is_empty() {
            events(this.node.state(), this.node.events());
            this.node.drain_events();
        }
        for pending in answers.drain(..) {
            pending.send(committed.is_ok());
        }
        this.metrics.record_batch(
            jobs as u64,
            started.elapsed(),
            rx.len() as u64,
            this.node.state().last_seq,
        );
        this.maybe_snapshot();
        if stop.load(Ordering::SeqCst) && rx.is_empty() {
            break;
        }
    }
    if let Err(e) = this.node.sync() {
        tracing::error!(error = %e, "journal sync at shutdown failed");
    }
    if let Err(e) = this.node.snapshot() {
        tracing::warn!(error = %e, "snapshot at shutdown failed");
    }
    this.node
}

/// An answer held until the batch is committed.
enum Pending {
    Http {
        reply: oneshot::Sender<Answer>,
        answer: Answer,
        wrote: bool,
    },
    Internal {
        reply: Option<oneshot::Sender<Reply>>,
        answer: Reply,
    },
}

impl Pending {
    fn send(self, committed: bool) {
        match self {
            Pending::Http {
                reply,
                answer,
                wrote,
            } => {
                let answer = if wrote && !committed {
                    Err(ApiError::unavailable(
                        "The order could not be confirmed; retry with the same client_order_id.",
                    ))
                } else {
                    answer
                };
                let _ = reply.send(answer);
            }
            Pending::Internal { reply, answer } => {
                if let Some(reply) = reply {
                    let _ = reply.send(answer);
                }
            }
        }
    }
}

impl Loop {
    /// The stamp for the next command: wall time, never going backwards.
    fn stamp(&mut self) -> u64 {
        self.last_ts = self.last_ts.max(now_ms());
        self.last_ts
    }

    fn until_due(&self) -> Duration {
        let due = self.node.state().next_due_ts_ms;
        let ms = due.saturating_sub(now_ms()).clamp(1, 100);
        Duration::from_millis(ms)
    }

    /// Windows open, close and settle on time even when nobody trades.
    fn tick_if_due(&mut self) {
        if now_ms() >= self.node.state().next_due_ts_ms && !self.node.is_stopped() {
            let ts = self.stamp();
            if let Err(e) = self.node.submit(ts, Command::Tick) {
                tracing::error!(error = %e, "journal append of a tick failed");
            }
        }
    }

    fn maybe_snapshot(&mut self) {
        let every = self.settings.snapshot_every;
        let seq = self.node.state().last_seq;
        if every > 0 && seq >= self.snapshot_seq + every {
            self.snapshot_seq = seq;
            match self.node.snapshot() {
                Ok(Some(path)) => tracing::info!(path = %path.display(), "snapshot written"),
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "snapshot failed"),
            }
        }
    }

    fn handle(&mut self, job: Job) -> Pending {
        match job {
            Job::Internal { command, reply } => {
                let ts = self.stamp();
                let answer = match self.node.submit(ts, command) {
                    Ok((_, reply)) => reply,
                    Err(e) => Reply::reject(ErrorCode::ExchangeUnavailable, e.to_string()),
                };
                Pending::Internal { reply, answer }
            }
            Job::Read {
                caller,
                read,
                reply,
            } => {
                let answer = match self.authenticate(caller.as_ref()) {
                    Ok(key) => read(self.node.state(), key),
                    Err(e) => Err(e),
                };
                Pending::Http {
                    reply,
                    answer,
                    wrote: false,
                }
            }
            Job::Write {
                caller,
                build,
                finish,
                reply,
            } => {
                let answer = self.write(caller.as_ref(), build, finish);
                let wrote = answer.is_ok();
                Pending::Http {
                    reply,
                    answer,
                    wrote,
                }
            }
        }
    }

    fn write(&mut self, caller: Option<&Caller>, build: BuildFn, finish: FinishFn) -> Answer {
        let key = self.authenticate(caller)?;
        if let (Some(caller), Some(key)) = (caller, key) {
            if caller.rate_limited {
                self.rate_limit(key)?;
            }
        }
        let command = build(self.node.state(), key)?;
        let ts = self.stamp();
        match self.node.submit(ts, command) {
            Ok((_, reply)) => finish(self.node.state(), reply),
            Err(e) => {
                tracing::error!(error = %e, "journal append failed");
                Err(ApiError::unavailable("The exchange cannot record orders right now; retry with the same client_order_id."))
            }
        }
    }

    /// Finds the key and checks its secret, state and address.
    fn authenticate(&self, caller: Option<&Caller>) -> Result<Option<KeyIdx>, ApiError> {
        let Some(caller) = caller else {
            return Ok(None);
        };
        let state = self.node.state();
        let refuse = |refusal: KeyRefusal| {
            if matches!(refusal, KeyRefusal::Invalid) {
                (self.failures)(caller.ip);
            }
            Err(ApiError::new(ErrorCode::Unauthorized, refusal.message()))
        };
        let Some(key) = state.key_by_id(&caller.key_id) else {
            return refuse(KeyRefusal::Invalid);
        };
        if !bool::from(key.fingerprint.ct_eq(&caller.fingerprint)) {
            return refuse(KeyRefusal::Invalid);
        }
        let suspended = state.account(key.account).is_none_or(|a| a.suspended);
        match check_key(
            key,
            suspended,
            now_ms().max(state.now_ms),
            self.settings.environment,
            Some(caller.ip),
        ) {
            Ok(()) => Ok(Some(key.idx)),
            Err(refusal) => refuse(refusal),
        }
    }

    fn rate_limit(&mut self, key: KeyIdx) -> Result<(), ApiError> {
        let rate = f64::from(self.settings.orders_per_second.max(1));
        let burst = f64::from(self.settings.orders_burst.max(1));
        let now = Instant::now();
        let bucket = self.buckets.entry(key).or_insert(Bucket {
            tokens: burst,
            last: now,
        });
        bucket.tokens =
            (bucket.tokens + now.duration_since(bucket.last).as_secs_f64() * rate).min(burst);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let wait = ((1.0 - bucket.tokens) / rate).ceil() as u64;
        self.metrics.rate_limited.fetch_add(1, Ordering::Relaxed);
        Err(ApiError::rate_limited(
            format!(
                "Too many new orders: at most {} per second per key, bursts of {}.",
                self.settings.orders_per_second, self.settings.orders_burst
            ),
            wait,
        ))
    }
}
