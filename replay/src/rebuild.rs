//! Replay: the state as of any seq or time, rebuilt by feeding the journal
//! through the same sequencer code, starting from the newest valid snapshot
//! that is not past the target.

use std::path::{Path, PathBuf};

use journal::{JournalError, Reader};
use sequencer::{Event, Stamped, State};

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
    #[error("seq {seq} moves the venue to business rules version {version}, newer than this build's ({current}): replay this journal with a newer build")]
    NewerRules {
        seq: u64,
        version: u32,
        current: u32,
    },
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
    /// The checksum of the journal record at `state.last_seq` (what a
    /// snapshot of this state names to be tied to this journal), when
    /// known: from the last record applied, or from the snapshot.
    pub last_record_crc: Option<u32>,
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

/// Like [`replay`], calling `observe` with each applied command and its
/// events (for tools that compare journals or show progress).
pub fn replay_with(
    journal_dir: &Path,
    snapshot_dir: Option<&Path>,
    until: Until,
    observe: impl FnMut(&Stamped, &[Event]),
) -> Result<ReplayOutcome, ReplayError> {
    replay_bounded(journal_dir, snapshot_dir, u64::MAX, until, observe)
}

/// Like [`replay_with`], starting from no snapshot past `snapshot_max`
/// (the node's history store holds what was evicted only that far).
pub(crate) fn replay_bounded(
    journal_dir: &Path,
    snapshot_dir: Option<&Path>,
    snapshot_max: u64,
    until: Until,
    mut observe: impl FnMut(&Stamped, &[Event]),
) -> Result<ReplayOutcome, ReplayError> {
    let (start, skipped) = start_state(journal_dir, snapshot_dir, snapshot_max, until);
    let from_snapshot = start.as_ref().map(|(s, _)| s.last_seq);
    let (mut state, mut last_record_crc) = start.unwrap_or_default();
    let mut reader = Reader::open(journal_dir)?;
    let first = state.last_seq + 1;
    reader.seek(first)?;
    let mut events = Vec::with_capacity(64);
    let mut applied = 0;
    // Two stages on two threads: this one applies, a reader thread reads,
    // checks and decodes the records ahead of it, in chunks. Chunks come in
    // journal order and the first error ends the stream, so the state is
    // the same as one thread reading and applying in turn.
    let outcome = std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Chunk, ReplayError>>(DECODED_CHUNKS);
        scope.spawn(move || decode_ahead(reader, first, until, tx));
        for chunk in rx {
            let Chunk {
                commands: chunk,
                last_crc,
            } = chunk?;
            for (i, stamped) in chunk.iter().enumerate() {
                if let Some(next) = chunk.get(i + 1) {
                    state.prefetch(&next.command);
                }
                known_rules(stamped)?;
                events.clear();
                state.apply(stamped, &mut events);
                observe(stamped, &events);
                applied += 1;
            }
            last_record_crc = Some(last_crc);
        }
        Ok::<(), ReplayError>(())
    });
    outcome?;
    Ok(ReplayOutcome {
        state,
        from_snapshot,
        applied,
        skipped_snapshots: skipped.iter().map(ToString::to_string).collect(),
        last_record_crc,
    })
}

/// Decoded commands in journal order, and the checksum of the record of
/// the last one.
struct Chunk {
    commands: Vec<Stamped>,
    last_crc: u32,
}

/// Refuses a command that moves the venue to rules this build does not
/// know: going on under older ones would rebuild a state, replies and
/// events the journal never described. Every reader that applies commands
/// (replay, a node's open, the journal tools) stops here.
pub fn known_rules(stamped: &Stamped) -> Result<(), ReplayError> {
    match stamped.command {
        sequencer::Command::SetRules { version } if version > sequencer::limits::RULES_CURRENT => {
            Err(ReplayError::NewerRules {
                seq: stamped.seq,
                version,
                current: sequencer::limits::RULES_CURRENT,
            })
        }
        _ => Ok(()),
    }
}

/// Decoded commands handed over at a time, and chunks in flight.
const DECODED_CHUNK: usize = 1024;
const DECODED_CHUNKS: usize = 4;

/// The reader stage of [`replay_with`]: the records from `first` on that
/// `until` admits, decoded, in chunks; an error (damage, a gap, a record
/// that does not decode) is sent last. It stops before reading a record
/// past the target seq, so damage after it does not stand in the way of
/// any moment before it; and it stops when the applier hangs up.
fn decode_ahead(
    mut reader: Reader,
    first: u64,
    until: Until,
    tx: std::sync::mpsc::SyncSender<Result<Chunk, ReplayError>>,
) {
    let last = until_seq(until);
    let mut next = first;
    let mut chunk = Vec::with_capacity(DECODED_CHUNK);
    let mut last_crc = 0;
    let failure = loop {
        if next > last {
            break None;
        }
        let record = match reader.next() {
            Ok(Some(record)) => record,
            Ok(None) => break None,
            Err(e) => break Some(ReplayError::from(e)),
        };
        if record.seq != next {
            break Some(ReplayError::Gap {
                expected: next,
                first: record.seq,
            });
        }
        let stamped = match decode(record.seq, record.payload) {
            Ok(stamped) => stamped,
            Err(e) => break Some(e.into()),
        };
        if !until.admits(stamped.seq, stamped.ts_ms) {
            break None;
        }
        next += 1;
        last_crc = record.crc;
        chunk.push(stamped);
        if chunk.len() == DECODED_CHUNK {
            let full = std::mem::replace(&mut chunk, Vec::with_capacity(DECODED_CHUNK));
            let full = Chunk {
                commands: full,
                last_crc,
            };
            if tx.send(Ok(full)).is_err() {
                return;
            }
        }
    };
    if !chunk.is_empty()
        && tx
            .send(Ok(Chunk {
                commands: chunk,
                last_crc,
            }))
            .is_err()
    {
        return;
    }
    if let Some(e) = failure {
        let _ = tx.send(Err(e));
    }
}

/// The last seq a target can include.
fn until_seq(until: Until) -> u64 {
    match until {
        Until::Seq(last) => last,
        Until::End | Until::TimeMs(_) => u64::MAX,
    }
}

/// The snapshot to start from (with the checksum it names), and the ones
/// passed over.
type Start = (Option<(State, Option<u32>)>, Vec<snapshot::SnapshotError>);

fn start_state(
    journal_dir: &Path,
    snapshot_dir: Option<&Path>,
    snapshot_max: u64,
    until: Until,
) -> Start {
    let Some(dir) = snapshot_dir else {
        return (None, Vec::new());
    };
    match until {
        Until::End => snapshot::newest(dir, snapshot_max, journal_dir),
        Until::Seq(seq) => snapshot::newest(dir, seq.min(snapshot_max), journal_dir),
        Until::TimeMs(t) => {
            // Snapshots are named by seq; the newest whose time is not past t.
            let mut skipped = Vec::new();
            for (_, path) in snapshot::list(dir)
                .into_iter()
                .filter(|(seq, _)| *seq <= snapshot_max)
            {
                match snapshot::load_for(&path, journal_dir) {
                    Ok(found) if found.0.now_ms <= t => return (Some(found), skipped),
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
