//! The live driver: stamp, journal, then apply. A command reaches the state
//! only after it is in the journal, so replaying the journal always rebuilds
//! exactly the state that answered the callers.

use std::path::PathBuf;
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use journal::{Journal, JournalConfig, JournalError, Recovery, SyncPoint};
use rkyv::util::AlignedVec;
use sequencer::limits::RULES_CURRENT;
use sequencer::{Command, Event, Reply, Stamped, State, VenueConfig};

use crate::codec;
use crate::history::History;
use crate::rebuild::{replay_bounded, ReplayError, Until};
use crate::snapshot;

/// Where the node keeps its files and how it starts a new venue.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub journal: JournalConfig,
    /// Snapshots folder; `None` for no snapshots.
    pub snapshot_dir: Option<PathBuf>,
    /// Written as the first command of a new journal.
    pub venue: VenueConfig,
    /// History store folder; `None` drops what leaves the live state
    /// (tests and benchmarks that never read past the history tail).
    pub history_dir: Option<PathBuf>,
}

/// Failures of the node: the journal could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Replay(#[from] ReplayError),
    #[error(transparent)]
    Snapshot(#[from] snapshot::SnapshotError),
    #[error("the journal failed earlier ({0}); the node accepts no more commands")]
    Stopped(String),
    #[error("history store {path}: {source}")]
    History {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "snapshot {} holds seq {seq} but the journal ends at seq {journal_end}: acknowledged commands are missing \
         from the journal (a lost segment or tail); refusing to start. Opened with truncation allowed, the node \
         continues from the journal as it is and sets the snapshots past its end aside as .stale",
        path.display()
    )]
    SnapshotAhead {
        path: PathBuf,
        seq: u64,
        journal_end: u64,
    },
}

/// What opening found.
#[derive(Debug)]
pub struct OpenReport {
    pub recovery: Recovery,
    pub from_snapshot: Option<u64>,
    pub replayed: u64,
    pub skipped_snapshots: Vec<String>,
    /// Snapshots past the end of a journal that was cut back, renamed to
    /// `.stale` so they are never used again.
    pub stale_snapshots: Vec<PathBuf>,
    /// A journal of older business rules moved to this build's at open:
    /// (from, to, the seq of the `SetRules` journaled). `None` for a new
    /// journal, whose first commands set them.
    pub rules_moved: Option<(u32, u32, u64)>,
}

/// Snapshots are written only after the journal is synced, so one past the
/// journal's end proves that acknowledged commands were lost from the
/// journal. Refuse, or (when truncation is allowed) set them aside.
fn snapshots_past(
    dir: &std::path::Path,
    journal_end: u64,
    truncate: bool,
) -> Result<Vec<PathBuf>, NodeError> {
    let mut set_aside = Vec::new();
    for (seq, path) in snapshot::list(dir)
        .into_iter()
        .filter(|(seq, _)| *seq > journal_end)
    {
        if !truncate {
            return Err(NodeError::SnapshotAhead {
                path,
                seq,
                journal_end,
            });
        }
        let stale = path.with_extension("snap.stale");
        std::fs::rename(&path, &stale).map_err(|error| {
            NodeError::Snapshot(snapshot::SnapshotError::Io {
                path: path.clone(),
                error,
            })
        })?;
        set_aside.push(stale);
    }
    if !set_aside.is_empty() {
        // The renames must survive a power loss: a snapshot back under its
        // name, past a journal that has since grown past its seq again,
        // would be taken for the state at that seq.
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|error| {
                NodeError::Snapshot(snapshot::SnapshotError::Io {
                    path: dir.to_path_buf(),
                    error,
                })
            })?;
    }
    Ok(set_aside)
}

/// Batches of evictions in flight to the history writer.
const HISTORY_QUEUE: usize = 4096;
/// How long a snapshot waits for the history writer before giving up.
const HISTORY_WAIT: Duration = Duration::from_secs(60);

/// The history writer: a thread that stores what leaves the live state,
/// off the sequencer thread, in seq order.
struct HistoryFeed {
    store: Arc<History>,
    tx: Option<SyncSender<(u64, Vec<Event>)>>,
    worker: Option<JoinHandle<()>>,
}

impl HistoryFeed {
    fn start(store: Arc<History>) -> std::io::Result<HistoryFeed> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(u64, Vec<Event>)>(HISTORY_QUEUE);
        let writer = store.clone();
        let worker = std::thread::Builder::new()
            .name("history".into())
            .spawn(move || {
                for (seq, events) in rx {
                    if let Err(e) = writer.store_events(&events) {
                        // The journal stays whole; the store is rebuilt
                        // from it at the next start (no snapshot past the
                        // last sync is used). Until then reads past the
                        // tail and snapshots refuse.
                        tracing::error!(
                            error = %e,
                            "history store: writes stop here until a restart (reads past the history tail answer 503; the store is rebuilt from the journal at the next start)"
                        );
                        writer.fail();
                        return;
                    }
                    writer.mark_written(seq);
                }
            })
            ?;
        Ok(HistoryFeed {
            store,
            tx: Some(tx),
            worker: Some(worker),
        })
    }

    /// Hands what the store keeps among `events` (of command `seq`) to the
    /// writer.
    fn send(&self, seq: u64, events: &[Event]) {
        let evicted: Vec<Event> = events
            .iter()
            .filter(|e| History::keeps(e))
            .cloned()
            .collect();
        if evicted.is_empty() {
            return;
        }
        if let Some(tx) = &self.tx {
            if tx.send((seq, evicted)).is_ok() {
                self.store.mark_sent(seq);
            } else {
                self.store.fail();
            }
        }
    }

    /// Waits for everything sent so far, then makes it durable as of `seq`.
    fn sync(&self, seq: u64) -> Result<(), NodeError> {
        sync_history(&self.store, self.store.sent(), seq)
    }
}

/// Waits until the history writer has written the evictions handed to it
/// up to `sent`, then makes the store durable as of `seq` (before a
/// snapshot at `seq` may exist).
fn sync_history(store: &History, sent: u64, seq: u64) -> Result<(), NodeError> {
    let err = |source| NodeError::History {
        path: store.dir().to_path_buf(),
        source,
    };
    if !store.wait_written(sent, HISTORY_WAIT) {
        return Err(err(std::io::Error::other(if store.failed() {
            format!(
                "the history writer did not reach seq {sent}: it could not write (the cause is in the error logged before it; a full disk, most often)"
            )
        } else {
            format!("the history writer did not reach seq {sent}")
        })));
    }
    store.sync(seq).map_err(err)
}

impl Drop for HistoryFeed {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

/// The state and its journal, driven by one thread.
pub struct Node {
    state: State,
    journal: Journal,
    buffer: AlignedVec,
    events: Vec<Event>,
    snapshot_dir: Option<PathBuf>,
    failed: Option<String>,
    history: Option<HistoryFeed>,
    /// The seq the node opened at and the checksum of the journal record
    /// there, as the replay knew it (from the record, or from the snapshot
    /// it started from).
    tie_at_open: Option<(u64, u32)>,
}

impl Node {
    /// Opens the journal (cutting a torn tail), rebuilds the state from the
    /// newest snapshot and the journal, and on a new journal writes the
    /// venue configuration as its first command at `now_ms`.
    pub fn open(mut config: NodeConfig, now_ms: u64) -> Result<(Node, OpenReport), NodeError> {
        let journal_dir = config.journal.dir.clone();
        let truncate = config.journal.truncate_on_corruption;
        // What the newest snapshot holds was acknowledged: the journal may
        // not cut it away as a torn tail (it refuses, changing nothing).
        if let Some((newest, _)) = config
            .snapshot_dir
            .as_deref()
            .and_then(|d| snapshot::list(d).into_iter().next())
        {
            config.journal.keep_through = config.journal.keep_through.max(newest);
        }
        let (journal, recovery) = Journal::open(config.journal)?;
        // A snapshot past the journal's end (the journal was cut back after
        // damage) describes commands that are no longer recorded: never
        // start from one.
        let journal_end = recovery.end_seq();
        let set_aside = match &config.snapshot_dir {
            Some(dir) => {
                // Snapshots a writer left half-written (killed with the
                // venue): this node holds the journal's lock, so no writer
                // of its snapshots is alive.
                snapshot::remove_temporaries(dir);
                snapshots_past(dir, journal_end, truncate)?
            }
            None => Vec::new(),
        };
        // A snapshot holds the live state only: it may start the node only
        // if the history store holds everything evicted before it.
        let history = match &config.history_dir {
            Some(dir) => {
                let history = |source| NodeError::History {
                    path: dir.clone(),
                    source,
                };
                // A damaged store is written anew by a replay from seq 1,
                // which a journal whose first segments were removed
                // cannot give: then it is kept as it is.
                let rebuildable = recovery.first_seq.is_none_or(|first| first == 1);
                let store = History::open_with(dir, rebuildable, journal_end).map_err(history)?;
                Some(HistoryFeed::start(Arc::new(store)).map_err(history)?)
            }
            None => None,
        };
        let snapshot_max = history.as_ref().map_or(u64::MAX, |f| f.store.synced());
        let outcome = replay_bounded(
            &journal_dir,
            config.snapshot_dir.as_deref(),
            snapshot_max,
            Until::Seq(journal_end),
            |stamped, events| {
                if let Some(feed) = &history {
                    feed.send(stamped.seq, events);
                }
            },
        )?;
        // Only a journal with no record left can end past the state: no
        // snapshot reached the seq before its next record, and appending
        // after the state would reuse seqs of removed segments.
        if outcome.state.last_seq < journal_end {
            return Err(NodeError::Replay(ReplayError::Gap {
                expected: outcome.state.last_seq + 1,
                first: journal_end + 1,
            }));
        }
        if let Some(feed) = &history {
            feed.sync(outcome.state.last_seq)?;
        }
        // Snapshots past what the history store holds were not looked at
        // by the replay; one of another journal among them is named all
        // the same (a later start, the store further on, would meet it).
        let mut skipped_snapshots = outcome.skipped_snapshots;
        if let Some(dir) = &config.snapshot_dir {
            for (_, path) in snapshot::list(dir)
                .into_iter()
                .filter(|(seq, _)| *seq > snapshot_max && *seq <= journal_end)
            {
                if let Err(e @ snapshot::SnapshotError::OtherJournal { .. }) =
                    snapshot::check_tie(&path, &journal_dir)
                {
                    skipped_snapshots.push(e.to_string());
                }
            }
        }
        let mut report = OpenReport {
            recovery,
            from_snapshot: outcome.from_snapshot,
            replayed: outcome.applied,
            skipped_snapshots,
            stale_snapshots: set_aside,
            rules_moved: None,
        };
        let mut node = Node {
            tie_at_open: outcome
                .last_record_crc
                .map(|crc| (outcome.state.last_seq, crc)),
            state: outcome.state,
            journal,
            buffer: AlignedVec::with_capacity(4096),
            events: Vec::with_capacity(256),
            snapshot_dir: config.snapshot_dir,
            failed: None,
            history,
        };
        let new_journal = node.state.last_seq == 0;
        if new_journal {
            node.submit(now_ms, Command::Configure(config.venue))?;
            node.commit()?;
            node.events.clear();
        }
        // This build's business rules apply from here on; what the journal
        // holds before stays under the rules it was written with.
        let rules = node.state.rules;
        if rules < RULES_CURRENT {
            let (seq, _) = node.submit(
                now_ms,
                Command::SetRules {
                    version: RULES_CURRENT,
                },
            )?;
            node.commit()?;
            node.events.clear();
            if !new_journal {
                report.rules_moved = Some((rules, RULES_CURRENT, seq));
            }
        }
        Ok((node, report))
    }

    /// Stamps a command with the next seq and `ts_ms`, appends it to the
    /// journal, applies it and returns its seq and reply. Its events are
    /// appended to [`Node::events`]. Durability comes with [`Node::commit`].
    ///
    /// A stamp never goes back: `ts_ms` before the state's time (a clock
    /// stepped back since the journal's last record, or a data directory
    /// moved to a host whose clock is behind) is stamped at the state's
    /// time, so the journal's times stay in order for every reader that
    /// looks a moment up by time.
    pub fn submit(&mut self, ts_ms: u64, command: Command) -> Result<(u64, Reply), NodeError> {
        if let Some(why) = &self.failed {
            return Err(NodeError::Stopped(why.clone()));
        }
        let ts_ms = ts_ms.max(self.state.now_ms);
        let seq = self.state.last_seq + 1;
        let stamped = Stamped {
            seq,
            ts_ms,
            command,
        };
        let buffer = std::mem::take(&mut self.buffer);
        self.buffer = codec::encode_into(&stamped, buffer);
        if let Err(e) = self
            .journal
            .append(seq, stamped.command.kind(), &self.buffer)
        {
            self.failed = Some(e.to_string());
            return Err(e.into());
        }
        let first = self.events.len();
        let reply = self.state.apply(&stamped, &mut self.events);
        if let Some(feed) = &self.history {
            feed.send(seq, &self.events[first..]);
        }
        Ok((seq, reply))
    }

    /// Why the journal's next segment could not be built ahead, while that
    /// holds (see [`journal::Journal::next_segment_problem`]).
    pub fn next_segment_problem(&mut self) -> Option<&str> {
        self.journal.next_segment_problem()
    }

    /// Syncs the journal made itself (see [`journal::Journal::syncs`]).
    pub fn journal_syncs(&self) -> journal::SyncCount {
        self.journal.syncs()
    }

    /// Makes everything submitted so far durable under the journal's policy.
    /// Replies must not leave before this returns `Ok`.
    pub fn commit(&mut self) -> Result<(), NodeError> {
        if let Some(why) = &self.failed {
            return Err(NodeError::Stopped(why.clone()));
        }
        self.journal.commit().map_err(|e| {
            self.failed = Some(e.to_string());
            NodeError::from(e)
        })
    }

    /// The pipelined form of [`Node::commit`]: when the policy wants a flush,
    /// the records submitted so far come back as a [`SyncPoint`] for another
    /// thread to make durable while this one goes on. Replies of the
    /// commands before the point must not leave before its `sync` returns
    /// `Ok`; when it fails, call [`Node::fail`].
    pub fn commit_deferred(&mut self) -> Result<Option<SyncPoint>, NodeError> {
        if let Some(why) = &self.failed {
            return Err(NodeError::Stopped(why.clone()));
        }
        self.journal.commit_deferred().map_err(|e| {
            self.failed = Some(e.to_string());
            NodeError::from(e)
        })
    }

    /// Stops the node after a deferred sync failed: every later command is
    /// refused, as after a failed append or commit.
    pub fn fail(&mut self, why: String) {
        self.journal.poison();
        if self.failed.is_none() {
            self.failed = Some(why);
        }
    }

    /// After a failure stopped the node: makes durable what was appended
    /// before it (`Journal::sync_appended`).
    pub fn sync_appended(&mut self) -> Result<(), NodeError> {
        Ok(self.journal.sync_appended()?)
    }

    /// Forces everything to disk now (shutdown).
    pub fn sync(&mut self) -> Result<(), NodeError> {
        Ok(self.journal.sync()?)
    }

    /// The state as of the last submitted command.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// Events of the commands submitted since the last drain.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Takes the pending events.
    pub fn drain_events(&mut self) -> std::vec::Drain<'_, Event> {
        self.events.drain(..)
    }

    /// The history store, when the node keeps one: reads past the history
    /// tail go there, after `History::wait_written(History::sent())` as
    /// read on this thread.
    pub fn history(&self) -> Option<Arc<History>> {
        self.history.as_ref().map(|h| h.store.clone())
    }

    /// True once a journal write failed; the node then refuses commands.
    pub fn is_stopped(&self) -> bool {
        self.failed.is_some()
    }

    /// A snapshot to finish on another thread: the state as it is now, and
    /// the journal point that must be durable before the snapshot may
    /// exist. `None` without a snapshot folder.
    ///
    /// On Linux the state is not copied: a child process forked here
    /// writes it from the copy-on-write image it was born with, under the
    /// snapshot's temporary name, while this process goes on (a fork of a
    /// state of a million orders takes about 2 ms; copying it took 70-550
    /// ms of this thread). [`SnapshotJob::write`] waits for the child and
    /// publishes the file. Where forking fails, or elsewhere, the state is
    /// copied and written by the thread that calls `write`. The child is
    /// killed if the thread calling this ends before the job is written
    /// (Linux's parent-death signal follows the forking thread): call it
    /// on a thread that outlives the job, as the sequencer's does.
    pub fn snapshot_job(&mut self) -> Result<Option<SnapshotJob>, NodeError> {
        let Some(dir) = self.snapshot_dir.clone() else {
            return Ok(None);
        };
        if let Some(why) = &self.failed {
            return Err(NodeError::Stopped(why.clone()));
        }
        let point = self.journal.sync_point()?;
        let seq = self.state.last_seq;
        let tie = self.journal_tie();
        let taken = match fork_writer(&dir, &mut self.state, tie) {
            Some(pid) => Taken::Forked(ForkedWriter {
                pid,
                temporary: snapshot::temporary_path(&dir, seq),
                reaped: false,
            }),
            None => Taken::Copy(Box::new(self.state.clone()), tie),
        };
        Ok(Some(SnapshotJob {
            dir,
            seq,
            taken,
            point,
            history: self
                .history
                .as_ref()
                .map(|h| (h.store.clone(), h.store.sent())),
        }))
    }

    /// Where the node writes its snapshots, if anywhere.
    pub fn snapshot_dir(&self) -> Option<&std::path::Path> {
        self.snapshot_dir.as_deref()
    }

    /// The checksum of the journal record at the state's seq, which a
    /// snapshot of the state names (see [`snapshot::load_for`]).
    fn journal_tie(&self) -> Option<u32> {
        let seq = self.state.last_seq;
        if self.journal.last_seq() != Some(seq) {
            return None;
        }
        // A journal that holds no record (its segments before were
        // removed) goes on from the state it opened with: the record that
        // state followed is the one its snapshot named.
        self.journal.last_record_crc().or(self
            .tie_at_open
            .filter(|(at, _)| *at == seq)
            .map(|(_, crc)| crc))
    }

    /// Writes a snapshot of the current state (after syncing the journal,
    /// so a snapshot never runs ahead of what is durable).
    pub fn snapshot(&mut self) -> Result<Option<PathBuf>, NodeError> {
        let Some(dir) = self.snapshot_dir.clone() else {
            return Ok(None);
        };
        self.journal.sync()?;
        if let Some(feed) = &self.history {
            feed.sync(self.state.last_seq)?;
        }
        let tie = self.journal_tie();
        Ok(Some(snapshot::write(&dir, &mut self.state, tie)?))
    }
}

/// A snapshot taken by [`Node::snapshot_job`], written by [`SnapshotJob::write`].
pub struct SnapshotJob {
    dir: PathBuf,
    seq: u64,
    taken: Taken,
    point: Option<SyncPoint>,
    /// The history store and the evictions it must hold first.
    history: Option<(Arc<History>, u64)>,
}

/// How the state of a snapshot was taken.
enum Taken {
    /// A copy, written by `SnapshotJob::write`, and its journal record's
    /// checksum.
    Copy(Box<State>, Option<u32>),
    /// A child process writing it.
    Forked(ForkedWriter),
}

/// A forked snapshot writer not yet waited for. Dropped before
/// `SnapshotJob::write` waited for it (the job was never handed to the
/// snapshot thread), it is killed and reaped, and its file removed: no
/// zombie, no half-written file.
struct ForkedWriter {
    pid: libc::pid_t,
    temporary: PathBuf,
    reaped: bool,
}

impl ForkedWriter {
    /// Waits for the writer; its file is kept only if it succeeded.
    fn wait(mut self) -> Result<PathBuf, String> {
        self.reaped = true;
        match wait_writer(self.pid, WRITER_MAX) {
            Ok(()) => Ok(std::mem::take(&mut self.temporary)),
            Err(why) => {
                let _ = std::fs::remove_file(&self.temporary);
                Err(why)
            }
        }
    }
}

impl Drop for ForkedWriter {
    fn drop(&mut self) {
        if !self.reaped {
            // SAFETY: `pid` is our child, not yet reaped, so not reused.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            let _ = wait_writer(self.pid, WRITER_MAX);
            let _ = std::fs::remove_file(&self.temporary);
        }
    }
}

impl SnapshotJob {
    /// The seq the snapshot holds.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Writes the snapshot (checksummed, under a temporary name), or waits
    /// for the child writing it; syncs the journal up to the snapshot's seq
    /// and the history store; then renames the file into place. A snapshot
    /// therefore never exists before what it holds is durable.
    pub fn write(self) -> Result<PathBuf, NodeError> {
        let SnapshotJob {
            dir,
            seq,
            taken,
            point,
            history,
        } = self;
        let temporary = match taken {
            Taken::Copy(mut state, tie) => {
                snapshot::write_temporary(&dir, &mut state, tie, snapshot::SECTION_ITEMS)?
            }
            Taken::Forked(writer) => writer.wait().map_err(|reason| {
                NodeError::Snapshot(snapshot::SnapshotError::Writer { seq, reason })
            })?,
        };
        let published = (|| {
            if let Some(point) = &point {
                point.sync()?;
            }
            if let Some((store, sent)) = &history {
                sync_history(store, *sent, seq)?;
            }
            Ok(snapshot::publish(&dir, &temporary, seq)?)
        })();
        if published.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        published
    }
}

/// Forks a child that writes `state` as a snapshot under its temporary
/// name in `dir` and exits (0 when written and synced); returns its pid,
/// or `None` when there is no fork (not Linux, or the kernel refused).
#[cfg(target_os = "linux")]
fn fork_writer(dir: &std::path::Path, state: &mut State, tie: Option<u32>) -> Option<libc::pid_t> {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    quiet_in_writer();
    // SAFETY: the child runs only `child_write` and then `_exit`: no
    // return into the caller, no unwinding out of it, no thread of the
    // parent's needed. It takes no lock another thread may have held at
    // the fork: glibc's allocator is ready for use in a forked child, the
    // child writes no log, and a panic in it prints nothing (the hook
    // installed by `quiet_in_writer` returns at once there). The parent
    // only gets a pid.
    match unsafe { libc::fork() } {
        -1 => None,
        0 => child_write(parent, dir, state, tie),
        pid => Some(pid),
    }
}

#[cfg(not(target_os = "linux"))]
fn fork_writer(_: &std::path::Path, _: &mut State, _: Option<u32>) -> Option<i32> {
    None
}

/// Set in a forked snapshot writer: its panics print nothing.
#[cfg(target_os = "linux")]
static IN_WRITER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Installs, once and in the parent, a panic hook that stays silent in a
/// forked writer (a thread of the parent may have held stderr's lock at
/// the fork; the exit code says what happened) and otherwise calls the
/// hook it replaced. Installing it in the child instead would take the
/// hook's lock, which a parent thread panicking at the fork would hold.
#[cfg(target_os = "linux")]
fn quiet_in_writer() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_WRITER.load(std::sync::atomic::Ordering::Relaxed) {
                previous(info);
            }
        }));
    });
}

/// The forked snapshot writer: dies with the thread that forked it (the
/// sequencer's, which outlives every snapshot job; it must not hold the
/// journal's lock, the listening sockets or a half-written file past the
/// venue), closes every file it inherited, writes, exits. The
/// out-of-memory killer picks it first.
#[cfg(target_os = "linux")]
fn child_write(
    parent: libc::pid_t,
    dir: &std::path::Path,
    state: &mut State,
    tie: Option<u32>,
) -> ! {
    IN_WRITER.store(true, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: plain system calls on this process; `_exit` ends it without
    // running the parent's atexit handlers or destructors.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() != parent {
            libc::_exit(3);
        }
        // Every descriptor past stderr: the journal's lock among them
        // (one by one before Linux 5.9).
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
            let max = libc::sysconf(libc::_SC_OPEN_MAX).clamp(1024, 1 << 20) as libc::c_int;
            for fd in 3..max {
                libc::close(fd);
            }
        }
        let adj = b"1000";
        let fd = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY);
        if fd >= 0 {
            libc::write(fd, adj.as_ptr().cast(), adj.len());
            libc::close(fd);
        }
    }
    let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        snapshot::write_temporary(dir, state, tie, snapshot::SECTION_ITEMS)
    }));
    // The system's error number rides in the exit code, for the parent to
    // name the cause (a full disk, a directory it may not write).
    let code = match written {
        Ok(Ok(_)) => 0,
        Ok(Err(snapshot::SnapshotError::Io { error, .. })) => error
            .raw_os_error()
            .filter(|n| (1..=WRITER_ERRNO_MAX).contains(n))
            .map_or(1, |n| WRITER_ERRNO_BASE + n),
        Ok(Err(_)) => 1,
        Err(_) => 2,
    };
    // SAFETY: see above.
    unsafe { libc::_exit(code) }
}

/// A forked writer's exit code for the system error `n` (up to
/// `WRITER_ERRNO_MAX`) is `WRITER_ERRNO_BASE + n`.
const WRITER_ERRNO_BASE: i32 = 10;
const WRITER_ERRNO_MAX: i32 = 200;

/// Longest a forked writer may take before it is killed (a snapshot of
/// gigabytes takes seconds; a writer stuck for good must not hold up the
/// next snapshots and the shutdown for ever).
const WRITER_MAX: Duration = Duration::from_secs(600);

/// Waits for a forked writer, killing it once it has taken longer than
/// `limit`; `Err` says how it ended when not with 0.
fn wait_writer(pid: libc::pid_t, limit: Duration) -> Result<(), String> {
    let mut status = 0;
    let started = std::time::Instant::now();
    let mut killed = false;
    loop {
        // SAFETY: `pid` is a child of this process not waited for yet.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if rc == pid {
            break;
        }
        if rc == -1 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(format!("waiting for the writer process {pid}: {e}"));
            }
        }
        if !killed && started.elapsed() > limit {
            // SAFETY: `pid` is our child, not yet reaped, so not reused.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if killed {
        return Err(format!(
            "the writer process took more than {} s and was killed",
            limit.as_secs_f64()
        ));
    }
    if libc::WIFEXITED(status) {
        match libc::WEXITSTATUS(status) {
            0 => Ok(()),
            1 => Err("the writer process could not write or sync the file".into()),
            2 => Err("the writer process failed while encoding".into()),
            code if (WRITER_ERRNO_BASE + 1..=WRITER_ERRNO_BASE + WRITER_ERRNO_MAX)
                .contains(&code) =>
            {
                Err(format!(
                    "the writer process could not write or sync the file: {}",
                    std::io::Error::from_raw_os_error(code - WRITER_ERRNO_BASE)
                ))
            }
            code => Err(format!("the writer process exited with {code}")),
        }
    } else if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        Err(format!(
            "the writer process was killed by signal {signal}{}",
            if signal == libc::SIGKILL {
                " (the out-of-memory killer takes it first, or an operator)"
            } else {
                ""
            }
        ))
    } else {
        Err(format!("the writer process ended with status {status}"))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod writer_tests {
    use super::*;

    /// A child that only sleeps, then exits with `code`: what a writer
    /// stuck in its write looks like from the parent.
    fn child(sleep_secs: u32, code: i32) -> libc::pid_t {
        // SAFETY: the child calls only `sleep` and `_exit`, both safe after
        // a fork from a threaded process.
        match unsafe { libc::fork() } {
            -1 => panic!("fork: {}", std::io::Error::last_os_error()),
            0 => unsafe {
                libc::sleep(sleep_secs);
                libc::_exit(code)
            },
            pid => pid,
        }
    }

    /// True once `pid` is no child of this process to wait for: reaped.
    fn reaped(pid: libc::pid_t) -> bool {
        let mut status = 0;
        // SAFETY: waitpid on a pid of ours, or one already reaped (ECHILD).
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD)
    }

    #[test]
    fn a_writer_past_its_time_is_killed_reaped_and_reported() {
        let pid = child(60, 0);
        let started = std::time::Instant::now();
        let why = wait_writer(pid, Duration::from_millis(100)).unwrap_err();
        assert!(why.contains("took more than 0.1 s and was killed"), "{why}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "it did not wait for the sleep"
        );
        assert!(reaped(pid), "no zombie is left");
    }

    #[test]
    fn a_writer_s_exit_says_what_went_wrong() {
        assert_eq!(wait_writer(child(0, 0), WRITER_MAX), Ok(()));
        let why = wait_writer(child(0, 1), WRITER_MAX).unwrap_err();
        assert_eq!(why, "the writer process could not write or sync the file");
        let why = wait_writer(child(0, 2), WRITER_MAX).unwrap_err();
        assert_eq!(why, "the writer process failed while encoding");
        // Codes just outside the range of system errors are named as
        // they are.
        for code in [
            7,
            WRITER_ERRNO_BASE,
            WRITER_ERRNO_BASE + WRITER_ERRNO_MAX + 1,
        ] {
            let why = wait_writer(child(0, code), WRITER_MAX).unwrap_err();
            assert_eq!(why, format!("the writer process exited with {code}"));
        }
        // A system error rides in the code, and is named.
        let why = wait_writer(child(0, WRITER_ERRNO_BASE + libc::ENOSPC), WRITER_MAX).unwrap_err();
        assert_eq!(
            why,
            format!(
                "the writer process could not write or sync the file: {}",
                std::io::Error::from_raw_os_error(libc::ENOSPC)
            )
        );
        let pid = child(60, 0);
        // SAFETY: our child, not reaped yet.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let why = wait_writer(pid, WRITER_MAX).unwrap_err();
        assert_eq!(
            why,
            format!(
                "the writer process was killed by signal {} (the out-of-memory killer takes it first, or an operator)",
                libc::SIGKILL
            )
        );
    }

    #[test]
    fn a_writer_never_waited_for_is_killed_and_its_file_removed() {
        let dir = tempfile::tempdir().unwrap();
        let temporary = snapshot::temporary_path(dir.path(), 7);
        std::fs::write(&temporary, b"half written").unwrap();
        let pid = child(60, 0);
        drop(ForkedWriter {
            pid,
            temporary: temporary.clone(),
            reaped: false,
        });
        assert!(reaped(pid), "the writer is killed and reaped");
        assert!(!temporary.exists(), "its half-written file is removed");
    }

    /// A process that cannot be waited for (no child of this one: here
    /// this very process) is an error at once, not a wait for ever.
    #[test]
    fn a_writer_that_cannot_be_waited_for_is_an_error() {
        let pid = std::process::id() as libc::pid_t;
        let why = wait_writer(pid, WRITER_MAX).unwrap_err();
        assert!(
            why.starts_with(&format!("waiting for the writer process {pid}: ")),
            "{why}"
        );
    }

    /// A forked writer offers itself to the out-of-memory killer first:
    /// its `oom_score_adj` is 1000 (read once it has exited, before it is
    /// reaped), and it writes its file.
    #[test]
    fn a_forked_writer_is_the_out_of_memory_killer_s_first_pick() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = State {
            last_seq: 5,
            ..State::default()
        };
        let pid = fork_writer(dir.path(), &mut state, None).expect("a fork");
        // SAFETY: waits for our child to exit without reaping it.
        let rc = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        let adj = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap();
        assert_eq!(adj.trim(), "1000");
        assert_eq!(wait_writer(pid, WRITER_MAX), Ok(()));
        assert!(reaped(pid));
        assert!(snapshot::temporary_path(dir.path(), 5).exists());
    }
}
