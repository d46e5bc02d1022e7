//! The live driver: stamp, journal, then apply. A command reaches the state
//! only after it is in the journal, so replaying the journal always rebuilds
//! exactly the state that answered the callers.

use std::path::PathBuf;

use journal::{Journal, JournalConfig, JournalError, Recovery};
use rkyv::util::AlignedVec;
use sequencer::{Command, Event, Reply, Stamped, State, VenueConfig};

use crate::codec;
use crate::rebuild::{replay, ReplayError, Until};
use crate::snapshot;

/// Where the node keeps its files and how it starts a new venue.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub journal: JournalConfig,
    /// Snapshots folder; `None` for no snapshots.
    pub snapshot_dir: Option<PathBuf>,
    /// Written as the first command of a new journal.
    pub venue: VenueConfig,
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
}

/// What opening found.
#[derive(Debug)]
pub struct OpenReport {
    pub recovery: Recovery,
    pub from_snapshot: Option<u64>,
    pub replayed: u64,
    pub skipped_snapshots: Vec<String>,
}

/// The state and its journal, driven by one thread.
pub struct Node {
    state: State,
    journal: Journal,
    buffer: AlignedVec,
    events: Vec<Event>,
    snapshot_dir: Option<PathBuf>,
    failed: Option<String>,
}

impl Node {
    /// Opens the journal (cutting a torn tail), rebuilds the state from the
    /// newest snapshot and the journal, and on a new journal writes the
    /// venue configuration as its first command at `now_ms`.
    pub fn open(config: NodeConfig, now_ms: u64) -> Result<(Node, OpenReport), NodeError> {
        let journal_dir = config.journal.dir.clone();
        let (journal, recovery) = Journal::open(config.journal)?;
        // A snapshot past the journal's end (the journal was cut back after
        // damage) describes commands that are no longer recorded: never
        // start from one.
        let journal_end = recovery.last_seq.unwrap_or(0);
        let outcome = replay(
            &journal_dir,
            config.snapshot_dir.as_deref(),
            Until::Seq(journal_end),
        )?;
        let report = OpenReport {
            recovery,
            from_snapshot: outcome.from_snapshot,
            replayed: outcome.applied,
            skipped_snapshots: outcome.skipped_snapshots,
        };
        let mut node = Node {
            state: outcome.state,
            journal,
            buffer: AlignedVec::with_capacity(4096),
            events: Vec::with_capacity(256),
            snapshot_dir: config.snapshot_dir,
            failed: None,
        };
        if node.state.last_seq == 0 {
            node.submit(now_ms, Command::Configure(config.venue))?;
            node.commit()?;
            node.events.clear();
        }
        Ok((node, report))
    }

    /// Stamps a command with the next seq and `ts_ms`, appends it to the
    /// journal, applies it and returns its seq and reply. Its events are
    /// appended to [`Node::events`]. Durability comes with [`Node::commit`].
    pub fn submit(&mut self, ts_ms: u64, command: Command) -> Result<(u64, Reply), NodeError> {
        if let Some(why) = &self.failed {
            return Err(NodeError::Stopped(why.clone()));
        }
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
        let reply = self.state.apply(&stamped, &mut self.events);
        Ok((seq, reply))
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

    /// True once a journal write failed; the node then refuses commands.
    pub fn is_stopped(&self) -> bool {
        self.failed.is_some()
    }

    /// Writes a snapshot of the current state (after syncing the journal,
    /// so a snapshot never runs ahead of what is durable).
    pub fn snapshot(&mut self) -> Result<Option<PathBuf>, NodeError> {
        let Some(dir) = self.snapshot_dir.clone() else {
            return Ok(None);
        };
        self.journal.sync()?;
        Ok(Some(snapshot::write(&dir, &self.state)?))
    }
}
