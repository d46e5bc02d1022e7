//! The replay benchmark (`cargo run --release -p benches --bin replay`):
//! how fast a large journal replays, and how long the state as of any seq
//! takes with snapshots, against the aims of the load-generator issue
//! (replay at least 5 M commands/s; any seq of a 10 M-command journal in
//! under 1 s).
//!
//! - [`corpus`] makes the journal once with the seeded simulation and
//!   caches it (journal, snapshots, checkpoints of the event hash);
//! - [`measure`] times full replays, snapshot loads and random seqs;
//! - [`run`] prints the report, in markdown, with the aims and, when the
//!   journal is smaller than the aim's 10 M commands, an extrapolation.
//!
//! Settings come from the environment; see `benches/README.md`.

pub mod corpus;
pub mod measure;

use std::fmt::Write as _;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use measure::spread;

/// The settings of one run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Commands in the journal (the last seq).
    pub commands: u64,
    /// A snapshot every this many commands (0: none).
    pub snapshot_every: u64,
    pub seed: u64,
    /// Accounts the simulation opens.
    pub accounts: u32,
    /// Random seqs timed with the snapshots.
    pub samples: usize,
    /// Full replays timed (best kept).
    pub rounds: u32,
    /// Where corpora are cached.
    pub root: PathBuf,
    /// The journal size the aim speaks of, for the extrapolation.
    pub aim_commands: u64,
}

fn var<T: std::str::FromStr>(name: &str, default: T) -> Result<T, String> {
    match std::env::var(name) {
        Ok(text) => text
            .replace('_', "")
            .parse()
            .map_err(|_| format!("{name}={text:?} is not a number")),
        Err(_) => Ok(default),
    }
}

impl Config {
    pub fn from_env() -> Result<Self, String> {
        let root = match std::env::var_os("UPDOWN_REPLAY_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("target")
                .join("replay-bench"),
        };
        let config = Config {
            commands: var("UPDOWN_REPLAY_COMMANDS", 10_000_000)?,
            snapshot_every: var("UPDOWN_REPLAY_SNAPSHOT_EVERY", 1_000_000)?,
            seed: var("UPDOWN_REPLAY_SEED", 1)?,
            accounts: var("UPDOWN_REPLAY_ACCOUNTS", 100)?,
            samples: var("UPDOWN_REPLAY_SAMPLES", 10)?,
            rounds: var("UPDOWN_REPLAY_ROUNDS", 2)?,
            root,
            aim_commands: 10_000_000,
        };
        if config.commands < 1_000 {
            return Err("UPDOWN_REPLAY_COMMANDS must be at least 1000".into());
        }
        Ok(config)
    }
}

/// What one run measured.
pub struct Outcome {
    pub report: String,
    /// Best full replay rate, commands per second.
    pub best_rate: f64,
    /// Slowest state-at-a-seq of the samples.
    pub worst_seq: Duration,
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        format!("{:.0} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// Generates (or finds) the corpus, measures, and returns the report.
pub fn run(config: &Config, log: &mut dyn io::Write) -> io::Result<Outcome> {
    let corpus = corpus::corpus(config, log)?;
    writeln!(log, "replay: {} full replays", config.rounds)?;
    let mut full = Vec::new();
    for round in 0..config.rounds.max(1) {
        let one = measure::full_replay(&corpus)?;
        writeln!(
            log,
            "replay: round {}: {} commands in {} ({:.2} M/s)",
            round + 1,
            one.commands,
            secs(one.elapsed),
            one.rate() / 1e6
        )?;
        full.push(one);
    }
    writeln!(log, "replay: loading every snapshot")?;
    let loads = measure::snapshot_loads(&corpus)?;
    writeln!(log, "replay: the state at {} random seqs", config.samples)?;
    let samples = measure::samples(&corpus, config.samples, config.seed ^ 0x5eed)?;

    let best_rate = full.iter().map(|f| f.rate()).fold(0.0, f64::max);
    let random: Vec<&measure::Sample> = samples.iter().take(config.samples).collect();
    let worst_seq = random.iter().map(|s| s.total).max().unwrap_or_default();
    let journal_bytes = corpus::Corpus::bytes_in(&corpus.journal_dir());
    let snapshot_bytes: u64 = loads.iter().map(|l| l.bytes).sum();

    let mut r = String::new();
    let _ = writeln!(r, "### Corpus\n");
    let _ = writeln!(
        r,
        "{} commands from the seeded simulation (seed {}, {} accounts, its full mix: orders near the touch, cancels, \
         bad commands, operator chaos, window turnover) through `replay::Node`, a snapshot every {} commands.\n",
        corpus.commands, config.seed, config.accounts, config.snapshot_every
    );
    let _ = writeln!(r, "| what | figure |\n| - | -: |");
    let _ = writeln!(
        r,
        "| generation (sim + node + snapshots){} | {} ({:.0} k commands/s) |",
        if corpus.fresh { "" } else { ", earlier run" },
        secs(corpus.generation),
        corpus.commands as f64 / corpus.generation.as_secs_f64().max(1e-9) / 1e3
    );
    let _ = writeln!(
        r,
        "| journal on disk (segments preallocated, 256 MiB each) | {:.0} MiB |",
        mib(journal_bytes)
    );
    let _ = writeln!(
        r,
        "| snapshots | {} files, {:.0} MiB in all |",
        loads.len(),
        mib(snapshot_bytes)
    );
    let _ = writeln!(
        r,
        "| orders / fills in the final state | {} / {} |",
        corpus.orders, corpus.fills
    );
    // A snapshot that failed at generation may have been written since
    // (`updown snapshot --until-seq`, format 2 has no size cap).
    let failed: Vec<u64> = corpus
        .failed_snapshots
        .iter()
        .copied()
        .filter(|seq| {
            !corpus
                .snapshot_dir()
                .join(replay::snapshot::file_name(*seq))
                .exists()
        })
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(
            r,
            "| snapshots that could not be written (format 1: one archive over 2 GiB, past rkyv's 32-bit relative pointers) | at seq {:?} |",
            failed
        );
    }
    let _ = writeln!(r, "\n### (a) Full replay, no snapshot\n");
    let _ = writeln!(
        r,
        "| round | commands | time | M commands/s |\n| -: | -: | -: | -: |"
    );
    for (i, f) in full.iter().enumerate() {
        let _ = writeln!(
            r,
            "| {} | {} | {} | {:.2} |",
            i + 1,
            f.commands,
            secs(f.elapsed),
            f.rate() / 1e6
        );
    }
    let _ = writeln!(r, "\n### (b) Snapshots, each loaded on its own\n");
    let _ = writeln!(
        r,
        "| seq | size | bytes per command | orders held | load (read, CRC, check, decode) | MiB/s | the file read alone |\n| -: | -: | -: | -: | -: | -: | -: |"
    );
    for l in &loads {
        let _ = writeln!(
            r,
            "| {} | {:.1} MiB | {:.0} | {} | {} | {:.0} | {} |",
            l.seq,
            mib(l.bytes),
            l.bytes as f64 / l.seq as f64,
            l.orders,
            secs(l.load),
            mib(l.bytes) / l.load.as_secs_f64().max(1e-9),
            secs(l.read)
        );
    }
    let _ = writeln!(
        r,
        "\n### (c) The state at random seqs, with the snapshots\n"
    );
    let _ = writeln!(
        r,
        "| seq | from snapshot | tail commands | snapshot load | tail replay | total |\n| -: | -: | -: | -: | -: | -: |"
    );
    for s in &samples {
        let _ = writeln!(
            r,
            "| {}{} | {} | {} | {} | {} | {} |",
            s.seq,
            if s.checked_hash {
                " (checkpoint: hash checked)"
            } else {
                ""
            },
            s.from_snapshot.map_or("-".into(), |seq| seq.to_string()),
            s.applied,
            secs(s.load),
            secs(s.tail()),
            secs(s.total)
        );
    }
    let (min, median, max) = spread(random.iter().map(|s| s.total).collect());
    let (lmin, lmed, lmax) = spread(random.iter().map(|s| s.load).collect());
    let (tmin, tmed, tmax) = spread(random.iter().map(|s| s.tail()).collect());
    let _ = writeln!(
        r,
        "\nOver the {} random seqs: total min {} / median {} / max {}; snapshot load {} / {} / {}; tail {} / {} / {}.",
        random.len(),
        secs(min),
        secs(median),
        secs(max),
        secs(lmin),
        secs(lmed),
        secs(lmax),
        secs(tmin),
        secs(tmed),
        secs(tmax)
    );

    // The worst seq of a journal of the aim's size: just before a snapshot,
    // so the previous snapshot is loaded and K - 1 commands replayed.
    let aim = config.aim_commands;
    let k = if config.snapshot_every == 0 {
        aim
    } else {
        config.snapshot_every.min(aim)
    };
    let (load_per_byte, bytes_per_command) = match loads.last() {
        Some(l) => (
            l.load.as_secs_f64() / l.bytes.max(1) as f64,
            l.bytes as f64 / l.seq.max(1) as f64,
        ),
        None => (0.0, 0.0),
    };
    let worst_aim =
        (aim - k) as f64 * bytes_per_command * load_per_byte + (k - 1) as f64 / best_rate.max(1.0);
    let _ = writeln!(r, "\n### Against the aims\n");
    let _ = writeln!(r, "| aim | measured | met? |\n| - | - | - |");
    let _ = writeln!(
        r,
        "| replay at least 5 M commands/s | {:.2} M/s (best of {}) | {} |",
        best_rate / 1e6,
        full.len(),
        if best_rate >= 5e6 {
            "yes".to_string()
        } else {
            format!("**no** ({:.1}x short)", 5e6 / best_rate.max(1.0))
        }
    );
    let _ = writeln!(
        r,
        "| the state at any seq of a 10 M-command journal in under 1 s | {} at worst of {} random seqs of this {}-command journal; {} predicted for the worst seq of a 10 M journal (snapshot at {} loaded at this run's bytes per command and load speed, then {} commands replayed) | {} |",
        secs(worst_seq),
        random.len(),
        corpus.commands,
        secs(Duration::from_secs_f64(worst_aim)),
        aim - k,
        k - 1,
        if worst_aim < 1.0 && worst_seq < Duration::from_secs(1) {
            "yes".to_string()
        } else {
            format!(
                "**no** ({:.1}x over)",
                worst_aim.max(worst_seq.as_secs_f64())
            )
        }
    );
    Ok(Outcome {
        report: r,
        best_rate,
        worst_seq,
    })
}
