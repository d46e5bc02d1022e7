//! The timings: (a) a full replay of the journal from its first record,
//! (b) every snapshot loaded on its own, (c) the state as of random seqs
//! with the snapshots, split into the snapshot load and the journal tail
//! replayed after it. Every replay is checked against the corpus (last seq,
//! running event hash, event count).

use std::io;
use std::time::{Duration, Instant};

use replay::{replay, replay_with, snapshot, Until};

use super::corpus::Corpus;
use benches::rng::SplitMix64;

fn failed(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// One full replay, from seq 1 with no snapshot.
pub struct FullReplay {
    pub commands: u64,
    pub elapsed: Duration,
}

impl FullReplay {
    pub fn rate(&self) -> f64 {
        self.commands as f64 / self.elapsed.as_secs_f64()
    }
}

pub fn full_replay(corpus: &Corpus) -> io::Result<FullReplay> {
    let start = Instant::now();
    let outcome = replay(&corpus.journal_dir(), None, Until::End).map_err(failed)?;
    let elapsed = start.elapsed();
    let state = &outcome.state;
    if state.last_seq != corpus.commands
        || state.event_hash != corpus.event_hash
        || state.events_total != corpus.events_total
    {
        return Err(io::Error::other(format!(
            "the replay ended at seq {} with event hash {:x} ({} events), generation at {} with {:x} ({})",
            state.last_seq,
            state.event_hash,
            state.events_total,
            corpus.commands,
            corpus.event_hash,
            corpus.events_total
        )));
    }
    Ok(FullReplay {
        commands: outcome.applied,
        elapsed,
    })
}

/// One snapshot file, loaded and checked on its own.
pub struct SnapshotLoad {
    pub seq: u64,
    pub bytes: u64,
    pub load: Duration,
    /// Reading the file alone (`fs::read`, page cache warm from the load).
    pub read: Duration,
    pub orders: u64,
}

pub fn snapshot_loads(corpus: &Corpus) -> io::Result<Vec<SnapshotLoad>> {
    let mut loads = Vec::new();
    let mut files = snapshot::list(&corpus.snapshot_dir());
    files.reverse();
    for (seq, path) in files {
        let bytes = std::fs::metadata(&path)?.len();
        let start = Instant::now();
        let state = snapshot::load(&path).map_err(failed)?;
        let load = start.elapsed();
        let orders = state.orders.len() as u64;
        drop(state);
        let start = Instant::now();
        let raw = std::fs::read(&path)?;
        let read = start.elapsed();
        drop(raw);
        loads.push(SnapshotLoad {
            seq,
            bytes,
            load,
            read,
            orders,
        });
    }
    Ok(loads)
}

/// The state as of one seq, with the snapshots.
pub struct Sample {
    pub seq: u64,
    pub from_snapshot: Option<u64>,
    /// Commands replayed from the journal after the snapshot.
    pub applied: u64,
    /// Until the first command of the tail was applied: the snapshot read,
    /// checked and decoded, and the journal opened at the next seq.
    pub load: Duration,
    /// The whole call of `replay::replay`.
    pub total: Duration,
    /// Checked against a generation checkpoint (not only the last seq).
    pub checked_hash: bool,
}

impl Sample {
    pub fn tail(&self) -> Duration {
        self.total.saturating_sub(self.load)
    }
}

/// `count` seqs drawn uniformly from the journal by `seed`, plus one
/// checkpoint seq whose event hash is known; each replayed with the
/// snapshot folder and timed.
pub fn samples(corpus: &Corpus, count: usize, seed: u64) -> io::Result<Vec<Sample>> {
    let mut rng = SplitMix64::new(seed);
    let mut seqs: Vec<u64> = (0..count).map(|_| 1 + rng.below(corpus.commands)).collect();
    if !corpus.checkpoints.is_empty() {
        let pick = rng.below(corpus.checkpoints.len() as u64) as usize;
        seqs.push(corpus.checkpoints[pick].0);
    }
    let mut out = Vec::with_capacity(seqs.len());
    let snapshots = corpus.snapshot_dir();
    for seq in seqs {
        let start = Instant::now();
        let mut first: Option<Instant> = None;
        let outcome = replay_with(
            &corpus.journal_dir(),
            Some(&snapshots),
            Until::Seq(seq),
            |_, _| {
                first.get_or_insert_with(Instant::now);
            },
        )
        .map_err(failed)?;
        let total = start.elapsed();
        let load = first.map_or(total, |f| f.duration_since(start));
        if outcome.state.last_seq != seq {
            return Err(io::Error::other(format!(
                "asked for seq {seq}, got {}",
                outcome.state.last_seq
            )));
        }
        let mut checked_hash = false;
        if let Some((_, hash, events)) = corpus.checkpoints.iter().find(|c| c.0 == seq) {
            if outcome.state.event_hash != *hash || outcome.state.events_total != *events {
                return Err(io::Error::other(format!(
                    "the state at seq {seq} from the snapshots differs from generation"
                )));
            }
            checked_hash = true;
        }
        out.push(Sample {
            seq,
            from_snapshot: outcome.from_snapshot,
            applied: outcome.applied,
            load,
            total,
            checked_hash,
        });
    }
    Ok(out)
}

/// Min, median and max.
pub fn spread(mut values: Vec<Duration>) -> (Duration, Duration, Duration) {
    if values.is_empty() {
        return (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    }
    values.sort();
    let n = values.len();
    let median = if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2
    };
    (values[0], median, values[n - 1])
}
