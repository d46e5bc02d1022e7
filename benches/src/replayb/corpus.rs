//! The journal under test: made once by the seeded simulation
//! (`tests::sim::Sim`) through `replay::Node` (stamp, journal, apply, the
//! live driver), with a snapshot every K commands, and kept in a cache
//! folder named after its settings so that later runs only measure.
//!
//! Beside the journal and the snapshots the folder holds `corpus.txt`
//! (written last, so a half-made corpus is never taken for a whole one):
//! how long generation took, the sizes, and checkpoints of the running
//! event hash every 100,000 commands to check replays against.

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use journal::{Durability, JournalConfig};
use replay::{Node, NodeConfig};
use sequencer::VenueConfig;
use tests::sim::{Sim, SimConfig, SIM_T0};

use super::Config;

/// Checkpoints of the running event hash are kept this often.
pub const CHECKPOINT_EVERY: u64 = 100_000;

/// A generated journal and what is known about it.
#[derive(Clone, Debug)]
pub struct Corpus {
    pub dir: PathBuf,
    /// Last seq of the journal (the node's configure command included).
    pub commands: u64,
    pub generation: Duration,
    /// The state as generation left it.
    pub event_hash: u64,
    pub events_total: u64,
    pub orders: u64,
    pub fills: u64,
    /// (seq, event_hash, events_total) every [`CHECKPOINT_EVERY`] commands.
    pub checkpoints: Vec<(u64, u64, u64)>,
    /// Seqs whose snapshot could not be written (the write panicked: see
    /// [`write_snapshot`]).
    pub failed_snapshots: Vec<u64>,
    /// Whether this run made it (false: found in the cache).
    pub fresh: bool,
}

impl Corpus {
    pub fn journal_dir(&self) -> PathBuf {
        self.dir.join("journal")
    }
    pub fn snapshot_dir(&self) -> PathBuf {
        self.dir.join("snapshots")
    }
    fn meta_path(dir: &Path) -> PathBuf {
        dir.join("corpus.txt")
    }

    /// Bytes of every file in a folder.
    pub fn bytes_in(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter_map(|e| e.metadata().ok())
                    .filter(|m| m.is_file())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    }

    fn write_meta(&self) -> io::Result<()> {
        let mut text = String::new();
        let _ = writeln!(text, "commands {}", self.commands);
        let _ = writeln!(text, "generation_ms {}", self.generation.as_millis());
        let _ = writeln!(text, "event_hash {}", self.event_hash);
        let _ = writeln!(text, "events_total {}", self.events_total);
        let _ = writeln!(text, "orders {}", self.orders);
        let _ = writeln!(text, "fills {}", self.fills);
        for (seq, hash, total) in &self.checkpoints {
            let _ = writeln!(text, "checkpoint {seq} {hash} {total}");
        }
        for seq in &self.failed_snapshots {
            let _ = writeln!(text, "snapshot_failed {seq}");
        }
        std::fs::write(Self::meta_path(&self.dir), text)
    }

    fn read_meta(dir: &Path) -> Option<Corpus> {
        let text = std::fs::read_to_string(Self::meta_path(dir)).ok()?;
        let mut corpus = Corpus {
            dir: dir.to_path_buf(),
            commands: 0,
            generation: Duration::ZERO,
            event_hash: 0,
            events_total: 0,
            orders: 0,
            fills: 0,
            checkpoints: Vec::new(),
            failed_snapshots: Vec::new(),
            fresh: false,
        };
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let name = words.next()?;
            let numbers: Vec<u64> = words.filter_map(|w| w.parse().ok()).collect();
            match (name, numbers.as_slice()) {
                ("commands", [n]) => corpus.commands = *n,
                ("generation_ms", [n]) => corpus.generation = Duration::from_millis(*n),
                ("event_hash", [n]) => corpus.event_hash = *n,
                ("events_total", [n]) => corpus.events_total = *n,
                ("orders", [n]) => corpus.orders = *n,
                ("fills", [n]) => corpus.fills = *n,
                ("checkpoint", [seq, hash, total]) => {
                    corpus.checkpoints.push((*seq, *hash, *total))
                }
                ("snapshot_failed", [seq]) => corpus.failed_snapshots.push(*seq),
                _ => return None,
            }
        }
        (corpus.commands > 0).then_some(corpus)
    }
}

/// Resident memory of this process, in MiB (for progress lines).
pub fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The simulation's mix for the corpus: the full mix of the simulation
/// tests (bad commands, operator chaos, retries) over more accounts.
pub fn sim_config(accounts: u32) -> SimConfig {
    SimConfig {
        accounts,
        ..SimConfig::default()
    }
}

/// Writes a snapshot, surviving a panic of the encoder (format-1 snapshots
/// were one rkyv archive, capped at 2 GiB by the workspace's 32-bit
/// relative pointers, about 9.3 M commands of this mix; format 2 splits the
/// history into sections and `snapshot::write` reports any failure as an
/// error). The run goes on without that snapshot, and the report says so.
fn write_snapshot(node: &mut Node) -> Result<bool, replay::NodeError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| node.snapshot())) {
        Ok(result) => result.map(|_| true),
        Err(_) => Ok(false),
    }
}

/// The cached corpus for `config`, made now if it is not there.
pub fn corpus(config: &Config, log: &mut dyn io::Write) -> io::Result<Corpus> {
    let dir = config.root.join(format!(
        "sim-seed{}-acc{}-n{}-k{}",
        config.seed, config.accounts, config.commands, config.snapshot_every
    ));
    if let Some(found) = Corpus::read_meta(&dir) {
        writeln!(
            log,
            "corpus: {} commands found in {} (generated in {:.1} s earlier)",
            found.commands,
            dir.display(),
            found.generation.as_secs_f64()
        )?;
        return Ok(found);
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    writeln!(
        log,
        "corpus: generating {} commands (seed {}, {} accounts, a snapshot every {}) into {}",
        config.commands,
        config.seed,
        config.accounts,
        config.snapshot_every,
        dir.display()
    )?;
    let node_config = NodeConfig {
        journal: JournalConfig {
            dir: dir.join("journal"),
            segment_bytes: 256 << 20,
            durability: Durability::Never,
            truncate_on_corruption: false,
            keep_through: 0,
        },
        snapshot_dir: Some(dir.join("snapshots")),
        venue: VenueConfig::default(),
        history_dir: None,
    };
    let failed = |e: replay::NodeError| io::Error::other(e.to_string());
    let start = Instant::now();
    let (mut node, _) = Node::open(node_config, SIM_T0).map_err(failed)?;
    let mut sim = Sim::new(config.seed, sim_config(config.accounts));
    let mut checkpoints = Vec::new();
    let mut failed_snapshots = Vec::new();
    let mut snapshot_time = Duration::ZERO;
    let mut last_report = Instant::now();
    while node.state().last_seq < config.commands {
        let (ts, command) = sim.next(node.state());
        let (seq, _) = node.submit(ts, command).map_err(failed)?;
        node.drain_events();
        if seq % 1024 == 0 {
            node.commit().map_err(failed)?;
        }
        if seq % CHECKPOINT_EVERY == 0 {
            let state = node.state();
            checkpoints.push((seq, state.event_hash, state.events_total));
        }
        if config.snapshot_every > 0 && seq % config.snapshot_every == 0 {
            let t = Instant::now();
            if !write_snapshot(&mut node).map_err(failed)? {
                writeln!(
                    log,
                    "corpus: the snapshot at seq {seq} could not be written (the encoder panicked)"
                )?;
                failed_snapshots.push(seq);
            }
            snapshot_time += t.elapsed();
        }
        if last_report.elapsed() > Duration::from_secs(15) {
            last_report = Instant::now();
            let secs = start.elapsed().as_secs_f64();
            writeln!(
                log,
                "corpus: {seq} commands in {secs:.0} s ({:.0} k/s, {:.0} s of it snapshots), rss {:.0} MiB",
                seq as f64 / secs / 1e3,
                snapshot_time.as_secs_f64(),
                rss_mib()
            )?;
        }
    }
    node.commit().map_err(failed)?;
    node.sync().map_err(failed)?;
    let generation = start.elapsed();
    let state = node.state();
    let corpus = Corpus {
        dir,
        commands: state.last_seq,
        generation,
        event_hash: state.event_hash,
        events_total: state.events_total,
        orders: state.orders.len() as u64,
        fills: state.fills.len() as u64,
        checkpoints,
        failed_snapshots,
        fresh: true,
    };
    corpus.write_meta()?;
    writeln!(
        log,
        "corpus: {} commands generated in {:.1} s ({:.0} k/s; snapshots {:.1} s of it), rss {:.0} MiB",
        corpus.commands,
        generation.as_secs_f64(),
        corpus.commands as f64 / generation.as_secs_f64() / 1e3,
        snapshot_time.as_secs_f64(),
        rss_mib()
    )?;
    Ok(corpus)
}
