//! The engines under test, each driven over the same pre-generated flow:
//! the sequencer core alone, the core behind the journal (through
//! `replay::Node`, the driver the gateway uses), the `lobster` crate, and
//! replay of a journal.
//!
//! Every engine is fed in batches of `batch` commands, the way the gateway's
//! sequencer thread drains its rings: commands one after the other, then the
//! end-of-batch work (group commit, handing the events to the publisher).

use std::error::Error;
use std::path::Path;
use std::time::Duration;

use hdrhistogram::Histogram;
use journal::{Durability, JournalConfig};
use lobster::{OrderBook, OrderEvent, OrderType};
use replay::{Node, NodeConfig, Until};
use sequencer::hash::stable_hash;
use sequencer::{Event, Stamped, State};

use crate::clock::{self, ThreadCpu};
use crate::flow::{Flow, Label, LobsterOp, T0};

/// Errors of the journal and replay engines.
pub type BenchError = Box<dyn Error + Send + Sync>;

/// Per-command latency, and the latency of each end-of-batch step.
pub struct Latencies {
    /// Nanoseconds spent on each command.
    pub command: Histogram<u64>,
    /// The same, split by what the command is ([`Label::index`]).
    pub by_label: Vec<Histogram<u64>>,
    /// Nanoseconds spent on each end of batch (the group commit's msync).
    pub batch: Histogram<u64>,
}

impl Default for Latencies {
    fn default() -> Self {
        // 1 ns to one hour at 3 significant digits; `saturating_record`
        // clamps anything outside instead of failing.
        let histogram =
            || Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds");
        Self {
            command: histogram(),
            by_label: Label::ALL.iter().map(|_| histogram()).collect(),
            batch: histogram(),
        }
    }
}

/// How the sequencer's state ended, to check that engines agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    pub last_seq: u64,
    /// The running hash over every event emitted.
    pub event_hash: u64,
    pub events_total: u64,
    /// Stable hash of the whole state; `None` when not computed (it takes
    /// about as long as the run itself on a large state).
    pub state_hash: Option<u64>,
}

impl Fingerprint {
    fn of(state: &State, full: bool) -> Self {
        Self {
            last_seq: state.last_seq,
            event_hash: state.event_hash,
            events_total: state.events_total,
            state_hash: full.then(|| stable_hash(state)),
        }
    }
}

/// What one run of one engine did.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Commands processed in the timed part.
    pub commands: u64,
    /// Wall time of the timed part.
    pub elapsed: Duration,
    /// What the thread that drove the timed part spent on it (for replay,
    /// the thread that applies; decoding runs beside it).
    pub cpu: Option<ThreadCpu>,
    /// Commands the venue refused (the flow is built to have none).
    pub rejected: u64,
    /// Contracts traded.
    pub contracts: u64,
    /// End state, for the engines built on the sequencer.
    pub fingerprint: Option<Fingerprint>,
}

impl Outcome {
    /// Commands per second.
    pub fn rate(&self) -> f64 {
        self.commands as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Commands per second of the driving thread's user time: the rate
    /// with the kernel's share (page faults) and other tenants' time
    /// taken out. Steadier than `rate` on a shared machine; not an aim.
    pub fn user_rate(&self) -> Option<f64> {
        self.cpu
            .map(|cpu| self.commands as f64 / cpu.user.as_secs_f64().max(1e-9))
    }
}

/// One step of an engine; `drive` feeds it.
trait Engine<T> {
    fn step(&mut self, item: &T);
    fn end_batch(&mut self) {}
    /// Called with the next item before `step` of the current one, as the
    /// venue's drivers do (`State::prefetch`): a cache hint, no effect.
    fn ahead(&mut self, _next: &T) {}
}

/// Feeds `items` to `engine` in batches and returns the wall time. With
/// `latencies`, each command and each end of batch is timed on its own,
/// and each command's time also goes to the histogram of its label;
/// without, nothing but the whole loop is (so the throughput figures carry
/// no timer overhead).
fn drive<T, E: Engine<T>>(
    engine: &mut E,
    items: &[T],
    labels: &[Label],
    batch: usize,
    latencies: Option<&mut Latencies>,
) -> (Duration, Option<ThreadCpu>) {
    assert_eq!(items.len(), labels.len(), "one label per command");
    clock::calibrate();
    let ((), elapsed, cpu) = clock::timed(|| match latencies {
        None => {
            for (c, chunk) in items.chunks(batch).enumerate() {
                for (i, item) in chunk.iter().enumerate() {
                    if let Some(next) = items.get(c * batch + i + 1) {
                        engine.ahead(next);
                    }
                    engine.step(item);
                }
                engine.end_batch();
            }
        }
        Some(latencies) => {
            for (c, (chunk, chunk_labels)) in
                items.chunks(batch).zip(labels.chunks(batch)).enumerate()
            {
                for (i, (item, label)) in chunk.iter().zip(chunk_labels).enumerate() {
                    let t = clock::ticks();
                    if let Some(next) = items.get(c * batch + i + 1) {
                        engine.ahead(next);
                    }
                    engine.step(item);
                    let ns = clock::nanos_between(t, clock::ticks());
                    latencies.command.saturating_record(ns);
                    latencies.by_label[label.index()].saturating_record(ns);
                }
                let t = clock::ticks();
                engine.end_batch();
                latencies
                    .batch
                    .saturating_record(clock::nanos_between(t, clock::ticks()));
            }
        }
    });
    (elapsed, cpu)
}

/// Contracts traded in a state, summed over its markets' trades.
fn contracts(state: &State) -> u64 {
    state
        .markets
        .iter()
        .flat_map(|m| &m.trades)
        .map(|t| u64::from(t.count))
        .sum()
}

// ----- the core alone -------------------------------------------------------

struct Core {
    state: State,
    events: Vec<Event>,
    rejected: u64,
}

impl Engine<Stamped> for Core {
    #[inline]
    fn ahead(&mut self, next: &Stamped) {
        self.state.prefetch(&next.command);
    }
    #[inline]
    fn step(&mut self, stamped: &Stamped) {
        if self.state.apply(stamped, &mut self.events).is_rejected() {
            self.rejected += 1;
        }
    }
    fn end_batch(&mut self) {
        // The publisher would take the batch's events here.
        self.events.clear();
    }
}

/// `State::apply` over the body, after the setup (untimed), no journal.
pub fn run_core(
    flow: &Flow,
    batch: usize,
    latencies: Option<&mut Latencies>,
    full_hash: bool,
) -> Outcome {
    let mut core = Core {
        state: State::default(),
        events: Vec::with_capacity(64 * batch),
        rejected: 0,
    };
    for stamped in &flow.setup {
        core.step(stamped);
    }
    core.end_batch();
    let (elapsed, cpu) = drive(&mut core, &flow.body, &flow.labels, batch, latencies);
    Outcome {
        commands: flow.body.len() as u64,
        elapsed,
        cpu,
        rejected: core.rejected,
        contracts: contracts(&core.state),
        fingerprint: Some(Fingerprint::of(&core.state, full_hash)),
    }
}

// ----- the core behind the journal -----------------------------------------

struct Journaled {
    node: Node,
    rejected: u64,
}

impl Engine<Stamped> for Journaled {
    #[inline]
    fn ahead(&mut self, next: &Stamped) {
        self.node.state().prefetch(&next.command);
    }
    #[inline]
    fn step(&mut self, stamped: &Stamped) {
        // `Node::submit` takes the command by value and stamps it itself
        // (with the same seq, since both count from the same setup); the
        // clone is the copy a command makes out of the gateway's ring.
        let (_, reply) = self
            .node
            .submit(stamped.ts_ms, stamped.command.clone())
            .expect("journal append");
        if reply.is_rejected() {
            self.rejected += 1;
        }
    }
    fn end_batch(&mut self) {
        // Group commit: one flush for the batch (a no-op under `Never`),
        // then the replies and events may leave.
        self.node.commit().expect("journal commit");
        self.node.drain_events().for_each(drop);
    }
}

/// How a journaled run writes its journal.
#[derive(Clone, Copy, Debug)]
pub struct JournalRun {
    pub durability: Durability,
    pub segment_bytes: u64,
    /// Body commands to run (a prefix of the body): a group-committed run
    /// waits for the disk once per batch and would take minutes over the
    /// whole body.
    pub commands: usize,
}

/// The core behind the journal in `dir` (which must not exist or be empty),
/// through `replay::Node`: encode, append, apply per command, `commit` per
/// batch. The node writes the venue configuration and this build's rules
/// itself when it creates the journal, so the setup after them goes
/// through `submit` (untimed).
pub fn run_journaled(
    flow: &Flow,
    dir: &Path,
    run: JournalRun,
    batch: usize,
    latencies: Option<&mut Latencies>,
    full_hash: bool,
) -> Result<Outcome, BenchError> {
    let JournalRun {
        durability,
        segment_bytes,
        commands,
    } = run;
    assert!(
        matches!(&flow.setup[0].command, sequencer::Command::Configure(c) if *c == flow.venue)
            && matches!(
                flow.setup[1].command,
                sequencer::Command::SetRules { version } if version == sequencer::limits::RULES_CURRENT
            ),
        "the setup starts with the venue configuration and the rules, which the node writes itself"
    );
    let body = &flow.body[..commands.min(flow.body.len())];
    let config = NodeConfig {
        journal: JournalConfig {
            dir: dir.to_path_buf(),
            segment_bytes,
            durability,
            truncate_on_corruption: false,
            keep_through: 0,
        },
        snapshot_dir: None,
        venue: flow.venue.clone(),
        history_dir: None,
    };
    let (node, _) = Node::open(config, T0)?;
    let mut engine = Journaled { node, rejected: 0 };
    for stamped in &flow.setup[2..] {
        engine.step(stamped);
    }
    engine.end_batch();
    let (elapsed, cpu) = drive(
        &mut engine,
        body,
        &flow.labels[..body.len()],
        batch,
        latencies,
    );
    let state = engine.node.state();
    let outcome = Outcome {
        commands: body.len() as u64,
        elapsed,
        cpu,
        rejected: engine.rejected,
        contracts: contracts(state),
        fingerprint: Some(Fingerprint::of(state, full_hash)),
    };
    // Dropping the node leaves the records in the page cache, where replay
    // reads them; nothing more is flushed.
    Ok(outcome)
}

/// Bytes the journal of `flow` takes: the exact record sizes plus the
/// segment header, rounded up to whole 4 KiB pages. A segment this large
/// holds the whole run, so the `Never` run never rolls a segment (a roll
/// flushes the whole segment, whatever the policy).
pub fn journal_bytes(flow: &Flow) -> u64 {
    let records: usize = flow
        .setup
        .iter()
        .chain(&flow.body)
        .map(|s| journal::format::record_len(replay::codec::encode(s).len()))
        .sum();
    let bytes = (records
        + journal::format::SEGMENT_HEADER_LEN
        + 2 * journal::format::RECORD_HEADER_LEN) as u64;
    bytes.div_ceil(journal::SEGMENT_SIZE_UNIT) * journal::SEGMENT_SIZE_UNIT
}

// ----- replay ------------------------------------------------------------------

/// `replay::replay` over the journal in `dir`: read, check, decode and apply
/// every record. The count includes the setup's few hundred commands.
pub fn run_replay(dir: &Path, full_hash: bool) -> Result<Outcome, BenchError> {
    let (replayed, elapsed, cpu) = clock::timed(|| replay::replay(dir, None, Until::End));
    let replayed = replayed?;
    Ok(Outcome {
        commands: replayed.applied,
        elapsed,
        cpu,
        rejected: 0,
        contracts: contracts(&replayed.state),
        fingerprint: Some(Fingerprint::of(&replayed.state, full_hash)),
    })
}

// ----- lobster -------------------------------------------------------------------

struct Lobster {
    books: Vec<OrderBook>,
    contracts: u64,
}

impl Engine<LobsterOp> for Lobster {
    #[inline]
    fn step(&mut self, op: &LobsterOp) {
        let LobsterOp::Order { book, order, ioc } = *op else {
            return;
        };
        let book = &mut self.books[usize::from(book)];
        let (filled, done) = match book.execute(order) {
            OrderEvent::Filled { filled_qty, .. } => (filled_qty, true),
            OrderEvent::PartiallyFilled { filled_qty, .. } => (filled_qty, false),
            _ => (0, false),
        };
        self.contracts += filled;
        if ioc && !done {
            // lobster has no IOC: cancel what rested.
            if let OrderType::Limit { id, .. } = order {
                book.execute(OrderType::Cancel { id });
            }
        }
    }
}

/// The `lobster` crate over the flow's twin operations, one book per market.
pub fn run_lobster(flow: &Flow, batch: usize, latencies: Option<&mut Latencies>) -> Outcome {
    // An arena preallocated for a few thousand orders (a book here holds
    // at most about 1,200 at once; lobster never frees the slots of filled
    // orders, so it grows past that by itself), and statistics off.
    let books = (0..flow.books)
        .map(|_| OrderBook::new(4_096, 16, false))
        .collect();
    let mut engine = Lobster {
        books,
        contracts: 0,
    };
    let (elapsed, cpu) = drive(&mut engine, &flow.lobster, &flow.labels, batch, latencies);
    Outcome {
        commands: flow.lobster.len() as u64,
        elapsed,
        cpu,
        rejected: 0,
        contracts: engine.contracts,
        fingerprint: None,
    }
}
