//! The sequencer thread, the queue into it, and the commit stage after it.
//!
//! Pipeline (one place, numbered as it runs):
//! 1. gateway tasks push a [`Job`] into a bounded lock-free queue;
//! 2. the sequencer thread drains up to `BATCH_MAX` jobs at once;
//! 3. it authenticates each against the key registry and applies the rate
//!    limit (both here, so revocation and limits take effect at once);
//! 4. it stamps, journals and applies each write through `replay::Node`,
//!    and answers each read from the state at its place in the batch;
//! 5. it closes the batch: the journal hands back a `SyncPoint` (what must
//!    reach the disk under the policy), the event sink prepares the
//!    batch's events for the publisher, and the batch goes to the commit
//!    thread; the sequencer takes the next batch at once;
//! 6. the commit thread (`journal-sync`) takes every batch waiting, syncs
//!    the journal once for all of them (group commit, pipelined: the disk
//!    works on batch N while the sequencer applies N+1), then, batch by
//!    batch and in order, hands the events to the publisher and sends the
//!    answers.
//!
//! So no answer and no event leaves before its command is durable under the
//! policy, answers leave in the order the sequencer made them, and a read
//! never reveals a write that is not yet durable.
//! A failed journal write or sync stops the node: every later write answers 503.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use journal::SyncPoint;
use replay::Node;
use sequencer::auth::{check_key, KeyRefusal};
use sequencer::types::{Environment, KeyIdx};
use sequencer::{Command, ErrorCode, Event, Reply, State};
use subtle::ConstantTimeEq;
use tokio::sync::oneshot;

use crate::bell::{self, BellReceiver, BellSender};
use crate::error::ApiError;
use crate::metrics::Metrics;

/// Jobs drained and committed together.
pub const BATCH_MAX: usize = 256;

/// A successful answer: status and JSON body.
pub type Answer = Result<(StatusCode, serde_json::Value), ApiError>;

/// The body of a write's answer as the sequencer leaves it: JSON made
/// there, or an order record with its market's ticker, which the gateway
/// thread writes as `{"order": Order}`. A write's `finish` copies out of
/// the state what the answer needs and leaves the serializing to the
/// gateway, off the one thread every command goes through. The order is
/// held inline, not in a box: the sequencer thread allocates nothing for
/// it.
pub enum AnswerBody {
    Ready(serde_json::Value),
    Order {
        ticker: Arc<str>,
        order: sequencer::state::Order,
    },
    /// An order that left the live state (`Reply::OrderInHistory`), to be
    /// read from the history store once it holds what its writer had been
    /// sent when the sequencer answered (`sent`), shown only to `account`.
    OrderInHistory {
        order_id: u64,
        account: sequencer::types::AccountId,
        sent: u64,
    },
}

/// What the sequencer sends back for a write.
pub type Finished = Result<(StatusCode, AnswerBody), ApiError>;

/// A write's two steps on the sequencer thread: `build` makes the command
/// from the state and the caller's key, `finish` turns the reply into the
/// answer, with the state right after the command. Each runs once.
///
/// They take `&mut self`, not `self`, so that the one box they travel in is
/// not freed on the sequencer thread: it goes back to the gateway thread
/// with the answer (`Written`) and is freed there, by the thread that
/// allocated it. glibc's `free` of gateway blocks was a tenth of the
/// sequencer thread's time when each write came as two boxed closures.
pub trait WriteSteps: Send {
    fn build(&mut self, state: &State, key: Option<KeyIdx>) -> Result<Command, ApiError>;
    fn finish(&mut self, state: &State, reply: Reply) -> Finished;
}

/// `WriteSteps` from two closures, each taken out when it runs.
struct Steps<B, F> {
    build: Option<B>,
    finish: Option<F>,
}

impl<B, F> WriteSteps for Steps<B, F>
where
    B: FnOnce(&State, Option<KeyIdx>) -> Result<Command, ApiError> + Send,
    F: FnOnce(&State, Reply) -> Finished + Send,
{
    fn build(&mut self, state: &State, key: Option<KeyIdx>) -> Result<Command, ApiError> {
        match self.build.take() {
            Some(build) => build(state, key),
            None => Err(step_twice()),
        }
    }

    fn finish(&mut self, state: &State, reply: Reply) -> Finished {
        match self.finish.take() {
            Some(finish) => finish(state, reply),
            None => Err(step_twice()),
        }
    }
}

/// A step run a second time: a bug of the sequencer loop, answered as one.
fn step_twice() -> ApiError {
    tracing::error!("a write step ran twice");
    ApiError::new(ErrorCode::InternalError, "Internal error.")
}

/// A write's answer and the box its steps came in, dropped by the caller.
type Written = (Finished, Box<dyn WriteSteps>);
/// A read of the state, given the caller's key or the refusal of it;
/// returns the delivery of its answer, held until the batch is committed.
pub type ReadFn = Box<dyn FnOnce(&State, Result<Option<KeyIdx>, ApiError>) -> Deliver + Send>;
/// Sends a read's answer to the caller waiting for it; `false` when its
/// batch did not become durable (a journal sync failed): the state it was
/// read from may hold writes that are lost, so the caller gets a 503.
pub type Deliver = Box<dyn FnOnce(bool) + Send>;

/// Who is calling, as the gateway saw it: the key id, the SHA-256 of the
/// secret (never the secret), and the address.
#[derive(Clone, Debug)]
pub struct Caller {
    pub key_id: crate::auth::KeyIdText,
    pub fingerprint: [u8; 32],
    pub ip: IpAddr,
    /// Whether this request counts against the new-order rate limit.
    pub rate_limited: bool,
    /// The secret was proven before, on a connection that stays open, and
    /// is checked again only for revocation, expiry and suspension: the
    /// address lockout, which stops keys being tested, neither refuses nor
    /// counts it. Another client's wrong keys from the same address must
    /// not cut a trader's open websocket.
    pub proven: bool,
}

/// The shortest wait for an operator's or the start-up's command.
const INTERNAL_TIMEOUT: Duration = Duration::from_secs(30);

/// The answer to a read whose batch did not become durable.
fn not_durable() -> ApiError {
    ApiError::unavailable(
        "The exchange's journal could not be made durable; it answers nothing until it is restarted.",
    )
}

/// What a write asks for, which decides the words of a 503 telling the
/// caller that it may or may not have happened: a place is retried safely
/// with its client_order_id; a cancel has none, and is safe to repeat (an
/// order canceled once is not canceled twice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteKind {
    Place,
    Cancel,
}

impl WriteKind {
    /// The queue to the sequencer stayed full.
    fn busy(self) -> &'static str {
        match self {
            WriteKind::Place => "The exchange is busy; retry with the same client_order_id.",
            WriteKind::Cancel => "The exchange is busy; retry the cancel.",
        }
    }

    /// The sequencer has stopped taking work.
    fn shutting_down(self) -> &'static str {
        match self {
            WriteKind::Place => {
                "The exchange is shutting down; retry with the same client_order_id."
            }
            WriteKind::Cancel => "The exchange is shutting down; retry the cancel later.",
        }
    }

    /// No answer within the gateway's timeout.
    fn late(self) -> &'static str {
        match self {
            WriteKind::Place => {
                "The order could not be confirmed in time; retry with the same client_order_id."
            }
            WriteKind::Cancel => {
                "The cancel could not be confirmed in time; retry it (a cancel is safe to repeat)."
            }
        }
    }

    /// Applied, but its batch could not be made durable.
    fn unconfirmed(self) -> &'static str {
        match self {
            WriteKind::Place => {
                "The order could not be confirmed; retry with the same client_order_id."
            }
            WriteKind::Cancel => {
                "The cancel could not be confirmed; retry it later (a cancel is safe to repeat)."
            }
        }
    }

    /// The journal refused the append: nothing was applied.
    fn unrecorded(self) -> &'static str {
        match self {
            WriteKind::Place => {
                "The exchange cannot record orders right now; retry with the same client_order_id."
            }
            WriteKind::Cancel => "The exchange cannot record changes right now; retry later.",
        }
    }
}

/// One unit of work for the sequencer thread.
pub enum Job {
    Write {
        kind: WriteKind,
        caller: Option<Caller>,
        steps: Box<dyn WriteSteps>,
        reply: oneshot::Sender<Written>,
    },
    Read {
        caller: Option<Caller>,
        read: ReadFn,
        /// Gone once nobody waits for the answer (the client left, or its
        /// wait timed out with a 503): the read is then skipped.
        waiting: Weak<()>,
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
    tx: BellSender<Job>,
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
                        return Err(ApiError::unavailable(match &back {
                            Job::Write { kind, .. } => kind.busy(),
                            _ => "The exchange is busy; retry.",
                        }));
                    }
                    job = back;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(TrySendError::Disconnected(job)) => {
                    return Err(ApiError::unavailable(match job {
                        Job::Write { kind, .. } => kind.shutting_down(),
                        _ => "The exchange is shutting down; retry later.",
                    }))
                }
            }
        }
    }

    async fn wait<T>(
        &self,
        rx: oneshot::Receiver<T>,
        timeout: Duration,
        late: &str,
    ) -> Result<T, ApiError> {
        // A timeout of 0 gives up at once, whatever the sequencer does with
        // the job (tokio's timer would still wait for its next tick): the
        // tests of retries after a 503 rely on it.
        let answer = if timeout.is_zero() {
            None
        } else {
            tokio::time::timeout(timeout, rx).await.ok()
        };
        match answer {
            Some(Ok(value)) => Ok(value),
            _ => Err(ApiError::unavailable(late)),
        }
    }

    /// Runs a write and waits for its answer: `build` makes the command
    /// from the state and the caller's key, `finish` the answer from its
    /// reply (see `WriteSteps`).
    pub async fn write(
        &self,
        kind: WriteKind,
        caller: Option<Caller>,
        build: impl FnOnce(&State, Option<KeyIdx>) -> Result<Command, ApiError> + Send + 'static,
        finish: impl FnOnce(&State, Reply) -> Finished + Send + 'static,
    ) -> Finished {
        let (reply, rx) = oneshot::channel();
        let steps = Box::new(Steps {
            build: Some(build),
            finish: Some(finish),
        });
        self.push(Job::Write {
            kind,
            caller,
            steps,
            reply,
        })
        .await?;
        let (answer, steps) = self.wait(rx, self.timeout, kind.late()).await?;
        drop(steps);
        answer
    }

    /// Runs a read on the sequencer thread and waits for what it returns:
    /// an answer, or what the gateway needs to finish one elsewhere.
    pub async fn read<T: Send + 'static>(
        &self,
        caller: Option<Caller>,
        read: impl FnOnce(&State, Option<KeyIdx>) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let (reply, rx) = oneshot::channel();
        let read: ReadFn = Box::new(move |state, key| {
            let answer = key.and_then(|key| read(state, key));
            Box::new(move |durable| {
                let answer = if durable { answer } else { Err(not_durable()) };
                let _ = reply.send(answer);
            })
        });
        // Dropped with this future: when the wait times out, or the
        // client goes away and the handler is dropped.
        let waiting = Arc::new(());
        self.push(Job::Read {
            caller,
            read,
            waiting: Arc::downgrade(&waiting),
        })
        .await?;
        self.wait(
            rx,
            self.timeout,
            "The exchange is busy and did not answer in time; retry.",
        )
        .await?
    }

    /// Submits a command from inside the venue (an operator's, the
    /// start-up's) and waits for its reply: at least `INTERNAL_TIMEOUT`, since
    /// such a command has no client_order_id and a retry of one that was
    /// applied after all would apply it twice (a deposit, an account).
    pub async fn internal(&self, command: Command) -> Result<Reply, ApiError> {
        let (reply, rx) = oneshot::channel();
        self.push(Job::Internal {
            command,
            reply: Some(reply),
        })
        .await?;
        self.wait(
            rx,
            self.timeout.max(INTERNAL_TIMEOUT),
            "The command was not confirmed in time and may still be applied: check the state before sending it again.",
        )
        .await
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
    /// Snapshots kept (`replay::snapshot::prune`; 0 keeps every one).
    pub snapshots_keep: u32,
    pub request_timeout: Duration,
    pub queue_capacity: usize,
    /// Shortest time between the starts of two journal syncs.
    pub sync_spacing: Duration,
}

/// The failed-attempt lockout, as the sequencer thread sees it: it records
/// every failure and checks the address again before testing a key, so
/// that requests queued before a lockout began (sent all at once) test no
/// more keys than the lockout allows.
pub type FailureSink = Arc<crate::auth::Lockout>;

/// Hands one batch's events to the publisher; runs on the commit thread
/// once the batch is durable.
pub type Delivery = Box<dyn FnOnce() + Send>;

/// Events of each batch go here (the websocket publisher). Called on the
/// sequencer thread with the state right after the batch; it prepares what
/// to publish (clones, a picture) and returns the delivery, which the commit
/// thread runs after the batch's sync.
pub type EventSink = Box<dyn FnMut(&State, &[Event]) -> Option<Delivery> + Send>;

/// Batches applied but not yet durable; the sequencer waits when this many
/// are in flight (the disk is the bottleneck then, and batches grow).
const COMMIT_PIPELINE: usize = 8;

/// A token bucket per key for new orders: it holds up to `burst` orders
/// and refills `rate` a second.
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// A full bucket.
    fn full(burst: u32, now: Instant) -> Self {
        Self {
            tokens: f64::from(burst.max(1)),
            last: now,
        }
    }

    /// Takes one order at `now`, or says in how many whole seconds one
    /// will be there (the Retry-After, at least 1).
    fn take(&mut self, now: Instant, rate: u32, burst: u32) -> Result<(), u64> {
        let rate = f64::from(rate.max(1));
        let burst = f64::from(burst.max(1));
        self.tokens = (self.tokens + now.saturating_duration_since(self.last).as_secs_f64() * rate)
            .min(burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        // Under one token: a positive wait, so at least 1 s once rounded up.
        Err(((1.0 - self.tokens) / rate).ceil() as u64)
    }
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
    /// Starts the sequencer thread, and the snapshot and journal-sync
    /// threads it hands work to, over an opened node. A thread the system
    /// will not start is an error here, not a sequencer that dies later
    /// behind a server that goes on answering 503.
    pub fn start(
        node: Node,
        settings: EngineSettings,
        metrics: Arc<Metrics>,
        failures: FailureSink,
        events: EventSink,
    ) -> std::io::Result<Engine> {
        let (tx, rx) = bell::bounded(settings.queue_capacity);
        let stop = Arc::new(AtomicBool::new(false));
        let submitter = Submitter {
            tx,
            timeout: settings.request_timeout,
            metrics: metrics.clone(),
        };
        let sync_failed: Arc<OnceLock<String>> = Arc::new(OnceLock::new());
        let snapshot_busy = Arc::new(AtomicBool::new(false));
        let (snapshots, snapshot_rx) = crossbeam_channel::bounded::<replay::SnapshotJob>(1);
        let snapshotter = {
            let (failed, busy) = (sync_failed.clone(), snapshot_busy.clone());
            let keep = settings.snapshots_keep as usize;
            std::thread::Builder::new()
                .name("snapshot".into())
                .spawn(move || snapshot_loop(snapshot_rx, failed, busy, keep))?
        };
        // (Should a later thread not start, the senders dropped with the
        // failed closure end these two.)
        let (commit_tx, commit_rx) = bell::bounded::<Closed>(COMMIT_PIPELINE);
        let committer = {
            let failed = sync_failed.clone();
            let (metrics, sync_spacing) = (metrics.clone(), settings.sync_spacing);
            std::thread::Builder::new()
                .name("journal-sync".into())
                .spawn(move || commit_loop(commit_rx, failed, metrics, sync_spacing))?
        };
        let helpers = Helpers {
            sync_failed,
            snapshot_busy,
            snapshots,
            snapshotter,
            commit_tx,
            committer,
        };
        let thread_stop = stop.clone();
        let handle = std::thread::Builder::new()
            .name("sequencer".into())
            .spawn(move || {
                run(
                    node,
                    rx,
                    settings,
                    metrics,
                    failures,
                    events,
                    thread_stop,
                    helpers,
                )
            })?;
        Ok(Engine {
            submitter,
            stop,
            handle: Some(handle),
        })
    }

    /// Whether the sequencer thread has ended without being asked to (it
    /// panicked): the venue can take no command again.
    pub fn died(&self) -> bool {
        !self.stop.load(Ordering::SeqCst) && self.handle.as_ref().is_some_and(|h| h.is_finished())
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
    /// The snapshot writer thread's queue, and whether it is writing one.
    snapshots: Sender<replay::SnapshotJob>,
    snapshot_busy: Arc<AtomicBool>,
    /// The journal's own syncs already added to the metrics.
    journal_synced: journal::SyncCount,
    /// Whether the journal's next segment could not be built ahead, as
    /// last reported.
    next_segment_failed: bool,
    /// Whether the snapshots' disk had room for one, as last reported.
    snapshot_room: bool,
    /// Bytes free on a file system (`journal::free_bytes`; tests replace it).
    free_space: fn(&std::path::Path) -> Option<u64>,
}

/// The threads the sequencer hands work to, and what it shares with them.
struct Helpers {
    /// The first failure of a journal sync (or snapshot), once there is one.
    sync_failed: Arc<OnceLock<String>>,
    snapshot_busy: Arc<AtomicBool>,
    snapshots: Sender<replay::SnapshotJob>,
    snapshotter: std::thread::JoinHandle<()>,
    commit_tx: bell::BellSender<Closed>,
    committer: std::thread::JoinHandle<()>,
}

#[allow(clippy::too_many_arguments)]
fn run(
    node: Node,
    rx: BellReceiver<Job>,
    settings: EngineSettings,
    metrics: Arc<Metrics>,
    failures: FailureSink,
    mut events: EventSink,
    stop: Arc<AtomicBool>,
    helpers: Helpers,
) -> Node {
    // The state's tables grow on this thread: their new pages are faulted
    // in by the allocator's populator, not by the commands (`crate::alloc`).
    crate::alloc::populate_ahead_on_this_thread();
    let Helpers {
        sync_failed,
        snapshot_busy,
        snapshots,
        snapshotter,
        commit_tx,
        committer,
    } = helpers;
    // Where the journal left off: a clock behind it does not stamp
    // commands before it (the node would stamp them there anyway).
    let last_ts = node.state().now_ms;
    let mut this = Loop {
        node,
        settings,
        metrics: metrics.clone(),
        failures,
        buckets: HashMap::new(),
        last_ts,
        snapshot_seq: 0,
        snapshots,
        snapshot_busy: snapshot_busy.clone(),
        journal_synced: journal::SyncCount::default(),
        next_segment_failed: false,
        snapshot_room: true,
        free_space: journal::free_bytes,
    };
    let mut batch: Vec<Job> = Vec::with_capacity(BATCH_MAX);
    let mut synced_after_failure = false;
    // The publisher's first picture of the state, before any new command.
    if let Some(delivery) = events(this.node.state(), &[]) {
        delivery();
    }
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
        if let Some(why) = sync_failed.get() {
            if !this.node.is_stopped() {
                tracing::error!(error = %why, "journal sync failed; refusing writes from now on");
                this.node.fail(why.clone());
            }
        }
        let started = Instant::now();
        let jobs = batch.len();
        this.tick_if_due();
        let mut answers = Vec::with_capacity(jobs);
        for job in batch.drain(..) {
            answers.push(this.handle(job));
        }
        let was_stopped = this.node.is_stopped();
        let (point, confirmed) = match this.node.commit_deferred() {
            Ok(point) => (point, true),
            Err(e) => {
                if !was_stopped {
                    tracing::error!(error = %e, "journal commit failed; refusing writes from now on");
                }
                // The state holds what was appended before the failure (in
                // this batch, never synced): make it durable once, or no
                // read may be answered from that state again.
                if !synced_after_failure {
                    synced_after_failure = true;
                    if let Err(e) = this.node.sync_appended() {
                        tracing::error!(error = %e, "journal sync after a failure failed; answering nothing from now on");
                        let _ = sync_failed.set(e.to_string());
                    }
                }
                (None, false)
            }
        };
        let delivery = if this.node.events().is_empty() {
            None
        } else {
            let delivery = events(this.node.state(), this.node.events());
            this.node.drain_events();
            delivery
        };
        // Before the answers can leave: a client that reads the metric
        // after its answer sees the syncs that answer waited for.
        this.count_journal_syncs();
        let closed = Closed {
            point,
            confirmed,
            delivery,
            answers,
            closed_at: Instant::now(),
        };
        if commit_tx.send(closed).is_err() {
            tracing::error!("the journal sync thread is gone; stopping");
            break;
        }
        if this.node.is_stopped() {
            this.metrics.journal_failed.store(1, Ordering::Relaxed);
        }
        this.metrics.record_batch(
            jobs as u64,
            started.elapsed(),
            rx.len() as u64,
            this.node.state().last_seq,
        );
        this.maybe_snapshot();
        this.watch_next_segment();
        if stop.load(Ordering::SeqCst) && rx.is_empty() {
            break;
        }
    }
    drop(commit_tx);
    if committer.join().is_err() {
        tracing::error!("the journal sync thread panicked");
    }
    let keep = this.settings.snapshots_keep as usize;
    let Loop {
        mut node,
        snapshots,
        ..
    } = this;
    drop(snapshots);
    if snapshotter.join().is_err() {
        tracing::error!("the snapshot thread panicked");
    }
    if let Some(why) = sync_failed.get() {
        node.fail(why.clone());
    }
    if let Err(e) = node.sync() {
        tracing::error!(error = %e, "journal sync at shutdown failed");
    }
    if node.is_stopped() {
        metrics.journal_failed.store(1, Ordering::Relaxed);
    }
    match node.snapshot() {
        Ok(Some(path)) => prune_snapshots(&path, keep),
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "snapshot at shutdown failed"),
    }
    node
}

/// The snapshot thread: writes each job, reports a failed journal sync as
/// the commit thread does.
fn snapshot_loop(
    rx: Receiver<replay::SnapshotJob>,
    failed: Arc<OnceLock<String>>,
    busy: Arc<AtomicBool>,
    keep: usize,
) {
    for job in rx {
        let seq = job.seq();
        match job.write() {
            Ok(path) => {
                tracing::info!(seq, path = %path.display(), "snapshot written");
                prune_snapshots(&path, keep);
            }
            Err(replay::NodeError::Journal(e)) => {
                tracing::error!(error = %e, "journal sync before a snapshot failed");
                let _ = failed.set(e.to_string());
            }
            Err(e) => tracing::warn!(seq, error = %e, "snapshot failed"),
        }
        busy.store(false, Ordering::Release);
    }
}

/// After the snapshot at `newest` was written: the older ones beyond the
/// newest `keep` go (`snapshots_keep`).
fn prune_snapshots(newest: &std::path::Path, keep: usize) {
    if let Some(dir) = newest.parent() {
        let removed = replay::snapshot::prune(dir, keep);
        if removed > 0 {
            tracing::info!(removed, keep, "older snapshots removed");
        }
    }
}

/// A batch the sequencer is done with, waiting for the disk.
struct Closed {
    /// What must be durable before anything of this batch leaves.
    point: Option<SyncPoint>,
    /// False when the journal refused the commit: the writes answer 503.
    confirmed: bool,
    delivery: Option<Delivery>,
    answers: Vec<Pending>,
    closed_at: Instant,
}

/// Batches waiting together share one sync.
const COMMIT_MAX: usize = 64;

/// The commit stage: sync, then publish and answer, in the sequencer's order.
fn commit_loop(
    rx: BellReceiver<Closed>,
    failed: Arc<OnceLock<String>>,
    metrics: Arc<Metrics>,
    sync_spacing: Duration,
) {
    let mut ready: Vec<Closed> = Vec::with_capacity(COMMIT_MAX);
    let mut last_sync = Instant::now() - sync_spacing;
    while let Ok(first) = rx.recv() {
        ready.push(first);
        // Under load, syncs come at most every `sync_spacing`: the batches
        // that close meanwhile share the next one. Each fdatasync costs the
        // machine some 20 µs of CPU; at tens of thousands of requests a
        // second, one sync per two or three requests took a third of a core.
        // When syncs are rarer than that, nothing waits.
        let since = last_sync.elapsed();
        if since < sync_spacing {
            std::thread::sleep(sync_spacing - since);
        }
        while ready.len() < COMMIT_MAX {
            match rx.try_recv() {
                Ok(closed) => ready.push(closed),
                Err(_) => break,
            }
        }
        last_sync = Instant::now();
        // Once a sync failed nothing later is confirmed: its writes may sit
        // after the lost range.
        let mut durable = failed.get().is_none();
        if durable {
            let points: Vec<&SyncPoint> = ready.iter().filter_map(|c| c.point.as_ref()).collect();
            for (i, point) in points.iter().enumerate() {
                // Syncing a segment's last point covers its earlier ones.
                if points
                    .get(i + 1)
                    .is_some_and(|next| next.same_segment(point))
                {
                    continue;
                }
                let started = Instant::now();
                let synced = point.sync();
                metrics
                    .journal_sync_us
                    .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                if let Err(e) = synced {
                    tracing::error!(error = %e, seq = point.seq(), "journal sync failed");
                    metrics.journal_failed.store(1, Ordering::Relaxed);
                    let _ = failed.set(e.to_string());
                    durable = false;
                    break;
                }
                metrics.journal_syncs.fetch_add(1, Ordering::Relaxed);
            }
        }
        let mut oldest = None;
        for closed in ready.drain(..) {
            let committed = durable && closed.confirmed;
            if committed {
                if let Some(delivery) = closed.delivery {
                    delivery();
                }
            }
            for pending in closed.answers {
                pending.send(committed, durable);
            }
            oldest.get_or_insert(closed.closed_at);
        }
        if let Some(oldest) = oldest {
            metrics.record_commit(oldest.elapsed());
        }
    }
}

/// An answer held until the batch is committed.
enum Pending {
    /// A write's answer: 503 instead when the batch was not made durable.
    Write {
        kind: WriteKind,
        reply: oneshot::Sender<Written>,
        answer: Finished,
        wrote: bool,
        /// Sent back with the answer, to be freed on the gateway thread.
        steps: Box<dyn WriteSteps>,
    },
    Read(Deliver),
    Internal {
        reply: Option<oneshot::Sender<Reply>>,
        answer: Reply,
    },
}

impl Pending {
    /// `committed`: the batch's writes are durable and confirmed; `durable`:
    /// no journal sync has failed, so the state the batch's reads saw holds
    /// nothing that may be lost (a refused append applies nothing, and
    /// reads go on after it).
    fn send(self, committed: bool, durable: bool) {
        match self {
            Pending::Write {
                kind,
                reply,
                answer,
                wrote,
                steps,
            } => {
                let answer = if wrote && !committed {
                    Err(ApiError::unavailable(kind.unconfirmed()))
                } else {
                    answer
                };
                let _ = reply.send((answer, steps));
            }
            Pending::Read(deliver) => deliver(durable),
            Pending::Internal { reply, answer } => {
                if let Some(reply) = reply {
                    // Applied, but its journal sync failed: the operator is
                    // not told it took effect (it may be lost at restart).
                    let answer = if committed || answer.is_rejected() {
                        answer
                    } else {
                        Reply::reject(
                            ErrorCode::ExchangeUnavailable,
                            "The command was applied but could not be made durable (the journal failed); it may be lost at restart.",
                        )
                    };
                    let _ = reply.send(answer);
                }
            }
        }
    }
}

impl Loop {
    /// Reports, once and as soon as it is known, that the journal's next
    /// segment could not be built ahead (and once more when it could after
    /// all): the roll that needs it would stop the journal, and the
    /// operator has until then to free space.
    fn watch_next_segment(&mut self) {
        let problem = self.node.next_segment_problem();
        let failed = problem.is_some();
        if failed != self.next_segment_failed {
            match problem {
                Some(why) => tracing::error!(
                    error = %why,
                    "the journal's next segment could not be built ahead: the journal stops at the roll that needs it unless this is mended (free disk space); trying again every second"
                ),
                None => tracing::info!("the journal's next segment is built after all"),
            }
            self.next_segment_failed = failed;
            self.metrics
                .journal_next_segment_failed
                .store(u64::from(failed), Ordering::Relaxed);
        }
    }

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

    /// Every `snapshot_every` commands a snapshot job is taken (a forked
    /// child writing the state as it is, `replay::Node::snapshot_job`) and
    /// handed to the snapshot thread, which waits for it, syncs the journal
    /// up to its seq and publishes it: the sequencer pays for the fork and
    /// the copy-on-write faults of the child's lifetime, never for the
    /// encoding or the disk. While one is being written the next waits.
    fn maybe_snapshot(&mut self) {
        let every = self.settings.snapshot_every;
        let seq = self.node.state().last_seq;
        if every == 0
            || seq < self.snapshot_seq + every
            || self.snapshot_busy.load(Ordering::Acquire)
        {
            return;
        }
        self.snapshot_seq = seq;
        if !self.room_for_a_snapshot() {
            return;
        }
        match self.node.snapshot_job() {
            Ok(Some(job)) => {
                self.snapshot_busy.store(true, Ordering::Release);
                if self.snapshots.try_send(job).is_err() {
                    self.snapshot_busy.store(false, Ordering::Release);
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "snapshot failed"),
        }
    }

    /// Whether the snapshots' file system has room for one more, by the
    /// size of the newest with a quarter to spare. A snapshot written on a
    /// full disk takes every free block before it fails, which the history
    /// store writing at that moment would meet (and stop for good): it is
    /// skipped instead, once said, until there is room.
    fn room_for_a_snapshot(&mut self) -> bool {
        let Some(dir) = self.node.snapshot_dir() else {
            return true;
        };
        let needed = replay::snapshot::list(dir)
            .first()
            .and_then(|(_, path)| std::fs::metadata(path).ok())
            .map_or(0, |m| m.len().saturating_add(m.len() / 4));
        let free = (self.free_space)(dir);
        let room = free.is_none_or(|free| free >= needed);
        if room != self.snapshot_room {
            self.snapshot_room = room;
            if room {
                tracing::info!("room for snapshots again");
            } else {
                tracing::warn!(
                    free = free.unwrap_or(0),
                    needed,
                    "snapshots skipped: their disk has no room for one (the last one's size and a quarter); free space to have them again"
                );
            }
        }
        room
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
            // Nobody waits for it any more: a flood of reads that timed out
            // must not keep the sequencer from live requests for minutes
            // after its clients left.
            Job::Read { waiting, .. } if waiting.strong_count() == 0 => {
                self.metrics.abandoned_reads.fetch_add(1, Ordering::Relaxed);
                Pending::Read(Box::new(|_| {}))
            }
            Job::Read { caller, read, .. } => {
                let key = self.authenticate(caller.as_ref());
                Pending::Read(read(self.node.state(), key))
            }
            Job::Write {
                kind,
                caller,
                mut steps,
                reply,
            } => {
                let answer = self.write(kind, caller.as_ref(), &mut *steps);
                let wrote = answer.is_ok();
                Pending::Write {
                    kind,
                    reply,
                    answer,
                    wrote,
                    steps,
                }
            }
        }
    }

    fn write(
        &mut self,
        kind: WriteKind,
        caller: Option<&Caller>,
        steps: &mut dyn WriteSteps,
    ) -> Finished {
        let key = self.authenticate(caller)?;
        let command = steps.build(self.node.state(), key)?;
        if let (Some(caller), Some(key)) = (caller, key) {
            if caller.rate_limited && !self.is_retry(&command) {
                self.rate_limit(key)?;
            }
        }
        let was_stopped = self.node.is_stopped();
        let ts = self.stamp();
        match self.node.submit(ts, command) {
            Ok((_, reply)) => steps.finish(self.node.state(), reply),
            Err(e) => {
                // Said once, when it happens: every later write meets the
                // stopped journal too.
                if !was_stopped {
                    tracing::error!(error = %e, "journal append failed");
                }
                Err(ApiError::unavailable(kind.unrecorded()))
            }
        }
    }

    /// Finds the key and checks its secret, state and address.
    fn authenticate(&self, caller: Option<&Caller>) -> Result<Option<KeyIdx>, ApiError> {
        let Some(caller) = caller else {
            return Ok(None);
        };
        let state = self.node.state();
        if !caller.proven {
            self.failures.check(caller.ip)?;
        }
        let refuse = |refusal: KeyRefusal| {
            if matches!(refusal, KeyRefusal::Invalid)
                && !caller.proven
                && self.failures.fail(caller.ip)
            {
                self.metrics.lockouts.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(ip = %caller.ip, "address locked out after failed authentications");
            }
            Err(ApiError::new(ErrorCode::Unauthorized, refusal.message()))
        };
        let Some(key) = state.key_by_id(caller.key_id.as_str()) else {
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

    /// Adds the syncs the journal made itself since the last batch (each
    /// append under `always`, due commits under `interval`, rolls) to
    /// those of the commit stage, so the metric counts every sync.
    fn count_journal_syncs(&mut self) {
        let now = self.node.journal_syncs();
        let before = std::mem::replace(&mut self.journal_synced, now);
        if now != before {
            self.metrics
                .journal_syncs
                .fetch_add(now.syncs - before.syncs, Ordering::Relaxed);
            self.metrics
                .journal_sync_us
                .fetch_add(now.micros - before.micros, Ordering::Relaxed);
        }
    }

    /// An order whose client_order_id its account has used already: a
    /// retry, answered with the order placed (or 409), never a new order,
    /// so the new-order rate limit does not apply (SPEC: the same
    /// client_order_id "returns the order already placed").
    fn is_retry(&self, command: &Command) -> bool {
        let Command::PlaceOrder { key, order } = command else {
            return false;
        };
        let state = self.node.state();
        state.key(*key).is_some_and(|k| {
            state
                .order_by_client_id(k.account, &order.client_order_id)
                .is_some()
        })
    }

    fn rate_limit(&mut self, key: KeyIdx) -> Result<(), ApiError> {
        let (rate, burst) = (self.settings.orders_per_second, self.settings.orders_burst);
        let now = Instant::now();
        let bucket = self
            .buckets
            .entry(key)
            .or_insert_with(|| Bucket::full(burst, now));
        let Err(wait) = bucket.take(now, rate, burst) else {
            return Ok(());
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A sequencer loop on a fresh journal in `dir`, not running.
    fn test_loop(dir: &std::path::Path) -> Loop {
        test_loop_with(journal::JournalConfig::new(dir.join("journal")), None)
    }

    /// A sequencer loop on a fresh journal made with `journal`, its
    /// snapshots in `snapshot_dir`, not running.
    fn test_loop_with(
        journal: journal::JournalConfig,
        snapshot_dir: Option<std::path::PathBuf>,
    ) -> Loop {
        let config = replay::NodeConfig {
            journal,
            snapshot_dir,
            venue: sequencer::VenueConfig::default(),
            history_dir: None,
        };
        let (node, _) = Node::open(config, now_ms()).unwrap();
        let (snapshots, _snapshot_rx) = crossbeam_channel::bounded(1);
        Loop {
            node,
            settings: EngineSettings {
                environment: Environment::Test,
                orders_per_second: 10,
                orders_burst: 20,
                snapshot_every: 0,
                snapshots_keep: 10,
                request_timeout: Duration::from_secs(2),
                queue_capacity: 16,
                sync_spacing: Duration::from_micros(200),
            },
            metrics: Arc::new(Metrics::default()),
            failures: Arc::new(crate::auth::Lockout::new(3, Duration::from_secs(60))),
            buckets: HashMap::new(),
            last_ts: 0,
            snapshot_seq: 0,
            snapshots,
            snapshot_busy: Arc::new(AtomicBool::new(false)),
            journal_synced: journal::SyncCount::default(),
            next_segment_failed: false,
            snapshot_room: true,
            free_space: journal::free_bytes,
        }
    }

    /// What each 503 of a write says, by what was asked: a place is retried
    /// with its client_order_id; a cancel is safe to repeat; a read is just
    /// retried. The busy and shutting-down answers on a real queue, full
    /// and then gone; the unconfirmed one from a batch whose commit failed
    /// (the late and unrecorded ones have end-to-end tests: e2e's retry
    /// after a 503, and faults' full disk).
    #[test]
    fn each_kind_of_request_is_told_how_to_retry_when_the_exchange_cannot_answer() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let refused = |submitter: &Submitter, kind: Option<WriteKind>| -> ApiError {
            let answer = runtime.block_on(async {
                match kind {
                    Some(kind) => submitter
                        .write(
                            kind,
                            None,
                            |_, _| Ok(Command::Tick),
                            |_, _| unreachable!("never run"),
                        )
                        .await
                        .map(|_| ()),
                    None => submitter.read(None, |_, _| Ok(())).await,
                }
            });
            let error = answer.expect_err("refused");
            assert_eq!(error.code, ErrorCode::ExchangeUnavailable);
            error
        };
        // A queue of one.
        let (tx, rx) = bell::bounded(1);
        let submitter = Submitter {
            tx,
            timeout: Duration::from_millis(5),
            metrics: Arc::new(Metrics::default()),
        };
        let full = Job::Internal {
            command: Command::Tick,
            reply: None,
        };
        assert!(submitter.tx.try_send(full).is_ok(), "the queue takes one");
        let busy = [
            (
                Some(WriteKind::Place),
                "The exchange is busy; retry with the same client_order_id.",
            ),
            (
                Some(WriteKind::Cancel),
                "The exchange is busy; retry the cancel.",
            ),
            (None, "The exchange is busy; retry."),
        ];
        for (kind, said) in busy {
            assert_eq!(refused(&submitter, kind).message, said, "{kind:?}");
        }
        drop(rx);
        let gone = [
            (
                Some(WriteKind::Place),
                "The exchange is shutting down; retry with the same client_order_id.",
            ),
            (
                Some(WriteKind::Cancel),
                "The exchange is shutting down; retry the cancel later.",
            ),
            (None, "The exchange is shutting down; retry later."),
        ];
        for (kind, said) in gone {
            assert_eq!(refused(&submitter, kind).message, said, "{kind:?}");
        }

        // Applied and answered, but the batch's commit failed: the answer
        // is replaced; a write that wrote nothing keeps its own.
        let unconfirmed = |kind: WriteKind, wrote: bool, committed: bool| -> Finished {
            let (reply, rx) = oneshot::channel();
            let steps: Box<dyn WriteSteps> = Box::new(Steps {
                build: Some(|_: &State, _: Option<KeyIdx>| Ok(Command::Tick)),
                finish: Some(|_: &State, _: Reply| -> Finished { unreachable!("never run") }),
            });
            Pending::Write {
                kind,
                reply,
                answer: Ok((StatusCode::OK, AnswerBody::Ready(serde_json::Value::Null))),
                wrote,
                steps,
            }
            .send(committed, committed);
            rx.blocking_recv().expect("answered").0
        };
        let message = |answer: Finished| match answer {
            Err(error) => error.message,
            Ok((status, _)) => panic!("answered {status}, not 503"),
        };
        assert_eq!(
            message(unconfirmed(WriteKind::Place, true, false)),
            "The order could not be confirmed; retry with the same client_order_id."
        );
        assert_eq!(
            message(unconfirmed(WriteKind::Cancel, true, false)),
            "The cancel could not be confirmed; retry it later (a cancel is safe to repeat)."
        );
        assert!(unconfirmed(WriteKind::Cancel, false, false).is_ok());
        assert!(unconfirmed(WriteKind::Place, true, true).is_ok());
    }

    /// SPEC: 10 new orders a second per key, bursts of 20, and a 429 says
    /// when to come back. The bucket at exact times: 20 at once, the 21st
    /// refused for 1 s (a token is 100 ms away), one more every 100 ms,
    /// ten (not twenty) a second later, never more than twenty.
    #[test]
    fn the_order_bucket_holds_twenty_and_refills_ten_a_second() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut b = Bucket::full(20, t0);
        for i in 0..20 {
            assert_eq!(b.take(t0, 10, 20), Ok(()), "order {i} of the burst");
        }
        assert_eq!(b.take(t0, 10, 20), Err(1), "the 21st at once");
        assert_eq!(b.take(ms(99), 10, 20), Err(1), "99 ms on, no whole token");
        assert_eq!(b.take(ms(100), 10, 20), Ok(()), "one token per 100 ms");
        assert_eq!(b.take(ms(100), 10, 20), Err(1));
        // A second on: ten more, and only ten.
        let placed = (0..20)
            .take_while(|_| b.take(ms(1_100), 10, 20).is_ok())
            .count();
        assert_eq!(placed, 10, "refilled at 10 a second");
        // Idle for a minute: full again, at twenty.
        let placed = (0..40)
            .take_while(|_| b.take(ms(61_100), 10, 20).is_ok())
            .count();
        assert_eq!(placed, 20, "the bucket holds at most twenty");
        // A slow rate: the wait is the time to the next whole token.
        let mut slow = Bucket::full(1, t0);
        assert_eq!(slow.take(t0, 1, 1), Ok(()));
        assert_eq!(slow.take(ms(250), 1, 1), Err(1));
        let mut slower = Bucket::full(1, t0);
        assert_eq!(slower.take(t0, 1, 1), Ok(()));
        // Rates below one a second are not configurable; the bucket
        // treats 0 as 1 rather than never refilling.
        assert_eq!(slower.take(ms(1_000), 0, 0), Ok(()));
    }

    /// The 429 of the loop: RATE_LIMITED after the burst, the limits in
    /// the message, Retry-After 1, counted on the metric; each key has its
    /// own bucket.
    #[test]
    fn the_loop_refuses_the_twenty_first_new_order_of_a_key() {
        let dir = tempfile::tempdir().unwrap();
        let mut this = test_loop(dir.path());
        let (k1, k2): (KeyIdx, KeyIdx) = (0, 1);
        for _ in 0..20 {
            this.rate_limit(k1).unwrap();
        }
        let refused = this.rate_limit(k1).unwrap_err();
        assert_eq!(refused.code, ErrorCode::RateLimited);
        assert_eq!(
            refused.message,
            "Too many new orders: at most 10 per second per key, bursts of 20."
        );
        assert_eq!(refused.retry_after_secs, Some(1));
        assert_eq!(this.metrics.rate_limited.load(Ordering::Relaxed), 1);
        for _ in 0..20 {
            this.rate_limit(k2).expect("another key's own burst");
        }
    }

    /// A periodic snapshot is skipped while its disk has less room than
    /// the newest one's size and a quarter, and taken again once there is.
    #[test]
    fn a_snapshot_is_skipped_while_its_disk_has_no_room() {
        let dir = tempfile::tempdir().unwrap();
        let mut this = test_loop_with(
            journal::JournalConfig::new(dir.path().join("journal")),
            Some(dir.path().join("snapshots")),
        );
        let written = this.node.snapshot().unwrap().unwrap();
        let size = std::fs::metadata(&written).unwrap().len();
        this.settings.snapshot_every = 1;
        let (jobs, taken) = crossbeam_channel::bounded(1);
        this.snapshots = jobs;
        let tick = |this: &mut Loop| {
            let command = Command::CancelOrder {
                key: 9,
                order_id: 1,
            };
            this.node.submit(now_ms(), command).unwrap();
            this.maybe_snapshot();
        };
        this.free_space = |_| Some(1);
        tick(&mut this);
        assert!(!this.snapshot_room);
        assert!(taken.try_recv().is_err(), "no job taken");
        assert!(size > 1);
        this.free_space = |_| Some(u64::MAX);
        tick(&mut this);
        assert!(this.snapshot_room);
        let job = taken.try_recv().expect("a job taken");
        drop(job);
    }

    /// A next journal segment that cannot be built ahead shows on the
    /// metric before the roll that needs it, and leaves it once built.
    #[test]
    fn a_next_segment_that_cannot_be_built_shows_on_the_metric() {
        let dir = tempfile::tempdir().unwrap();
        let journal_dir = dir.path().join("journal");
        let mut config = journal::JournalConfig::new(&journal_dir);
        config.segment_bytes = 64 * 1024;
        let mut this = test_loop_with(config, None);
        let failed = |this: &Loop| {
            this.metrics
                .journal_next_segment_failed
                .load(Ordering::Relaxed)
        };
        let watch_until = |this: &mut Loop, want: u64| {
            let deadline = Instant::now() + Duration::from_secs(30);
            while failed(this) != want && Instant::now() < deadline {
                this.watch_next_segment();
                std::thread::sleep(Duration::from_millis(10));
            }
            failed(this)
        };
        assert_eq!(watch_until(&mut this, 0), 0);
        // The temporary name of segment 2 taken: its build fails once
        // segment 1 is in use.
        let blocker = journal_dir.join(format!("{:020}.seg.tmp", 2));
        std::fs::create_dir(&blocker).unwrap();
        while !journal::segment_path(&journal_dir, 1).exists() {
            let command = Command::CancelOrder {
                key: 9,
                order_id: 1,
            };
            this.node.submit(now_ms(), command).unwrap();
            this.node.drain_events();
        }
        this.node.commit().unwrap();
        assert_eq!(watch_until(&mut this, 1), 1, "reported before the roll");
        std::fs::remove_dir(&blocker).unwrap();
        assert_eq!(watch_until(&mut this, 0), 0, "cleared once built");
    }

    /// A read nobody waits for any more is skipped (its closure never runs)
    /// and counted; one still awaited runs.
    #[test]
    fn a_read_nobody_waits_for_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let mut this = test_loop(dir.path());
        let ran = Arc::new(AtomicBool::new(false));
        let read = |ran: Arc<AtomicBool>| -> ReadFn {
            Box::new(move |_, _| {
                ran.store(true, Ordering::Relaxed);
                Box::new(|_| {})
            })
        };
        let waiting = Arc::new(());
        let gone = Arc::downgrade(&Arc::new(()));
        this.handle(Job::Read {
            caller: None,
            read: read(ran.clone()),
            waiting: gone,
        });
        assert!(!ran.load(Ordering::Relaxed));
        assert_eq!(this.metrics.abandoned_reads.load(Ordering::Relaxed), 1);
        this.handle(Job::Read {
            caller: None,
            read: read(ran.clone()),
            waiting: Arc::downgrade(&waiting),
        });
        assert!(ran.load(Ordering::Relaxed));
        assert_eq!(this.metrics.abandoned_reads.load(Ordering::Relaxed), 1);
    }

    /// Wrong keys queued before the lockout began (sent all at once, each
    /// past the gateway's check) are refused by the sequencer's own check
    /// once the lockout starts: no more keys are tested than it allows.
    #[test]
    fn queued_wrong_keys_test_no_more_keys_than_the_lockout_allows() {
        let dir = tempfile::tempdir().unwrap();
        let this = test_loop(dir.path());
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let codes: Vec<StatusCode> = (0..10)
            .map(|i| {
                let caller = Caller {
                    key_id: crate::auth::KeyIdText::new(&format!("nosuchkey{i}")).unwrap(),
                    fingerprint: [0; 32],
                    ip,
                    rate_limited: false,
                    proven: false,
                };
                this.authenticate(Some(&caller)).unwrap_err().status()
            })
            .collect();
        let tested = codes
            .iter()
            .filter(|&&c| c == StatusCode::UNAUTHORIZED)
            .count();
        assert_eq!(tested, 3, "{codes:?}");
        assert!(codes[3..]
            .iter()
            .all(|&c| c == StatusCode::TOO_MANY_REQUESTS));
        assert_eq!(this.metrics.lockouts.load(Ordering::Relaxed), 1);
    }

    /// A write's steps each run once with what the sequencer gives them; a
    /// second run is refused as an internal error, never a panic.
    #[test]
    fn write_steps_run_once_each() {
        let state = State::default();
        let mut steps: Box<dyn WriteSteps> = Box::new(Steps {
            build: Some(|_: &State, key: Option<KeyIdx>| {
                assert_eq!(key, Some(7));
                Ok(Command::Tick)
            }),
            finish: Some(|_: &State, reply: Reply| {
                assert!(reply.is_rejected());
                Ok((
                    StatusCode::ACCEPTED,
                    AnswerBody::Ready(serde_json::json!({})),
                ))
            }),
        });
        assert!(matches!(steps.build(&state, Some(7)), Ok(Command::Tick)));
        let reply = Reply::reject(ErrorCode::MarketNotOpen, "closed");
        let answer = steps.finish(&state, reply.clone());
        assert!(matches!(answer, Ok((StatusCode::ACCEPTED, _))));
        let again = steps.build(&state, Some(7)).unwrap_err();
        assert_eq!(again.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let again = steps.finish(&state, reply);
        assert!(matches!(again, Err(e) if e.status() == StatusCode::INTERNAL_SERVER_ERROR));
    }
}
