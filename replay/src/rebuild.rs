//! Replay: the state as of any seq or time, rebuilt by feeding the journal
//! through the same sequencer code, starting from the newest valid snapshot
//! that is not past the target.

use std::path::{Path, PathBuf};

use journal::{JournalError, Reader};
use sequencer::{Event, State};

use crate::codec::{decode, DecodeError};
use crate::snapshot;

/// How far to replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// Every record.
    End,
    /// Up to and including this seq.
    Seq(u64),
    /// Every command stamped at or before this time (epoch ms).
    TimeMs(u64),
}

impl Until {
    fn admits(self, seq: u64, ts_ms: u64) -> bool {
        match self {
            Until::End => true,
            Until::Seq(last) => seq <= last,
            Until::TimeMs(t) => ts_ms <= t,
        }
    }
}

/// Why a replay stopped short.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("the journal starts at seq {first} but the state needs seq {expected} next (no snapshot covers the gap)")]
    Gap { expected: u64, first: u64 },
}

/// The rebuilt state and how it was reached.
pub struct ReplayOutcome {
    pub state: State,
    /// Seq of the snapshot replay started from, if any.
    pub from_snapshot: Option<u64>,
    /// Commands applied from the journal.
    pub applied: u64,
    /// Snapshots that were damaged and skipped, as sentences.
    pub skipped_snapshots: Vec<String>,
}

/// Replays `journal_dir`, starting from the newest valid snapshot in
/// `snapshot_dir` (if given) that is not past `until`.
pub fn replay(
    journal_dir: &Path,
    snapshot_dir: Option<&Path>,
    until: Until,
) -> Result<ReplayOutcome, ReplayError> {
    replay_with(journal_dir, snapshot_dir, until, |_, _| {})
}

/// Like [`replay`], calling `observe` with each applied seq and its events
/// (for tools that compare event streams or show progress).
pub fn replay_with(
    journal_dir: &Path,
    snapshot_dir: Option<&Path>,
    until: Until,
    mut observe: impl FnMut(u64, &[Event]),
) -> Result<ReplayOutcome, ReplayError> {
    let (start, skipped) = start_state(snapshot_dir, until);
    let from_snapshot = start.as_ref().map(|s| s.last_seq);
    let mut state = start.unwrap_or_default();
    let mut reader = Reader::open(journal_dir)?;
    reader.seek(state.last_seq + 1)?;
    let mut events = Vec::with_capacity(64);
    let mut applied = 0;
    // Stop before reading a record past the target seq, so damage after it
    // does not stand in the way of any moment before it.
    while state.last_seq < until_seq(until) {
        let Some(record) = reader.next()? else { break };
        if record.seq != state.last_seq + 1 {
            return Err(ReplayError::Gap {
                expected: state.last_seq + 1,
                first: record.seq,
            });
        }
        let stamped = decode(record.seq, record.payload)?;
        if !until.admits(stamped.seq, stamped.ts_ms) {
            break;
        }
        events.clear();
        state.apply(&stamped, &mut events);
        observe(stamped.seq, &events);
        applied += 1;
    }
    Ok(ReplayOutcome {
        state,
        from_snapshot,
        applied,
        skipped_snapshots: skipped.iter().map(ToString::to_string).collect(),
    })
}

/// The last seq a target can include.
fn until_seq(until: Until) -> u64 {
    match until {
        Until::Seq(last) => last,
        Until::End | Until::TimeMs(_) => u64::MAX,
    }
}

fn start_state(
    snapshot_dir: Option<&Path>,
    until: Until,
) -> (Option<State>, Vec<snapshot::SnapshotError>) {
    let Some(dir) = snapshot_dir else {
        return (None, Vec::new());
    };
    match until {
        Until::End => snapshot::newest(dir, u64::MAX),
        Until::Seq(seq) => snapshot::newest(dir, seq),
        Until::TimeMs(t) => {
            // Snapshots are named by seq; the newest whose time is not past t.
            let mut skipped = Vec::new();
            for (_, path) in snapshot::list(dir) {
                match snapshot::load(&path) {
                    Ok(state) if state.now_ms <= t => return (Some(state), skipped),
                    Ok(_) => {}
                    Err(e) => skipped.push(e),
                }
            }
            (None, skipped)
        }
    }
}

/// The default snapshot folder beside a journal folder.
pub fn default_snapshot_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("snapshots")
}
