//! The benchmark run: generate the flow, time every engine side by side in
//! interleaved rounds, time each command in a separate pass, and print the
//! figures, the ratios and whether the aims of the issue are met.

use std::io::Write;
use std::path::PathBuf;

use journal::Durability;

use crate::engines::{
    journal_bytes, run_core, run_journaled, run_lobster, run_replay, BenchError, JournalRun,
    Latencies, Outcome,
};
use crate::flow::{generate, FlowConfig, Label};

/// Aims of the issue, checked on the best-of-rounds figures.
pub const AIM_CORE_RATE: f64 = 6_000_000.0;
pub const AIM_CORE_OVER_LOBSTER: f64 = 3.0;
pub const AIM_JOURNAL_OVER_CORE: f64 = 0.5;
pub const AIM_REPLAY_RATE: f64 = 5_000_000.0;

/// Settings of a run, from the environment (see the README).
#[derive(Clone, Debug)]
pub struct BenchConfig {
    pub flow: FlowConfig,
    /// Interleaved throughput rounds; the best of each engine is kept.
    pub rounds: usize,
    /// Commands per batch (per group commit).
    pub batch: usize,
    /// Body commands of the group-commit runs (a prefix of the body).
    pub group_commands: usize,
    /// Where the journals are written (a temporary folder inside it).
    pub dir: PathBuf,
    /// Also hash the whole state after each engine's first round (slow on
    /// large runs; the running event hash is always compared).
    pub full_hash: bool,
}

impl BenchConfig {
    /// Reads `UPDOWN_BENCH_COMMANDS`, `UPDOWN_BENCH_ROUNDS`, `UPDOWN_BENCH_SEED`,
    /// `UPDOWN_BENCH_BATCH`, `UPDOWN_BENCH_GROUP_COMMANDS`, `UPDOWN_BENCH_DIR`
    /// and `UPDOWN_BENCH_FULL_HASH`.
    pub fn from_env() -> Result<Self, String> {
        fn var<T: std::str::FromStr>(name: &str, default: T) -> Result<T, String> {
            match std::env::var(name) {
                Ok(text) => text
                    .trim()
                    .replace('_', "")
                    .parse()
                    .map_err(|_| format!("{name}={text} is not a number")),
                Err(_) => Ok(default),
            }
        }
        let defaults = FlowConfig::default();
        let commands: usize = var("UPDOWN_BENCH_COMMANDS", defaults.commands)?;
        let config = Self {
            flow: FlowConfig {
                commands,
                seed: var("UPDOWN_BENCH_SEED", defaults.seed)?,
                ..defaults
            },
            rounds: var("UPDOWN_BENCH_ROUNDS", 3)?,
            batch: var("UPDOWN_BENCH_BATCH", 64)?,
            group_commands: var("UPDOWN_BENCH_GROUP_COMMANDS", 100_000)?,
            dir: std::env::var_os("UPDOWN_BENCH_DIR")
                .map_or_else(std::env::temp_dir, PathBuf::from),
            // Hashing a state of two million orders takes seconds;
            // small runs check it by default.
            full_hash: var("UPDOWN_BENCH_FULL_HASH", u8::from(commands <= 200_000))? != 0,
        };
        if config.flow.commands == 0
            || config.rounds == 0
            || config.batch == 0
            || config.group_commands == 0
        {
            return Err("commands, rounds, batch and group commands must be positive".into());
        }
        Ok(config)
    }

    /// The smoke configuration: a small flow, one round.
    pub fn smoke(commands: usize) -> Self {
        Self {
            flow: FlowConfig {
                commands,
                ..FlowConfig::default()
            },
            rounds: 1,
            batch: 64,
            group_commands: commands,
            dir: std::env::temp_dir(),
            full_hash: true,
        }
    }
}

/// The engines, in the order they run within a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    Core,
    Lobster,
    JournalNever,
    Replay,
    GroupCommit,
}

impl EngineKind {
    pub const ALL: [EngineKind; 5] = [
        Self::Core,
        Self::Lobster,
        Self::JournalNever,
        Self::Replay,
        Self::GroupCommit,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Core => "core: State::apply",
            Self::Lobster => "lobster 0.7 (reference)",
            Self::JournalNever => "core + journal (Never)",
            Self::Replay => "replay of that journal",
            Self::GroupCommit => "core + journal (GroupCommit)",
        }
    }
}

/// Everything measured for one engine.
pub struct EngineFigures {
    pub kind: EngineKind,
    /// One throughput run per round.
    pub runs: Vec<Outcome>,
    /// The latency pass (none for replay, a single library call).
    pub latency: Option<(Outcome, Latencies)>,
}

impl EngineFigures {
    /// Best rate over the rounds.
    pub fn best(&self) -> f64 {
        self.runs.iter().map(Outcome::rate).fold(0.0, f64::max)
    }

    /// Best rate by the driving thread's user time over the rounds.
    pub fn best_user(&self) -> Option<f64> {
        self.runs
            .iter()
            .map(Outcome::user_rate)
            .try_fold(0.0, |best, rate| rate.map(|r| f64::max(best, r)))
    }
}

/// The whole result.
pub struct Report {
    pub config: BenchConfig,
    pub setup_commands: usize,
    pub flow_contracts: u64,
    pub flow_event_hash: u64,
    pub flow_state_hash: u64,
    /// The flow's running event hash after each body command.
    pub flow_event_hash_after: Vec<u64>,
    pub engines: Vec<EngineFigures>,
}

impl Report {
    pub fn engine(&self, kind: EngineKind) -> &EngineFigures {
        self.engines
            .iter()
            .find(|e| e.kind == kind)
            .expect("every engine runs")
    }

    /// True when a run of a sequencer engine ended where the generator's
    /// state was after as many body commands (always true for `lobster`).
    pub fn agrees(&self, kind: EngineKind, outcome: &Outcome) -> bool {
        let Some(f) = outcome.fingerprint else {
            return true;
        };
        let body = match kind {
            EngineKind::Replay => (outcome.commands as usize).saturating_sub(self.setup_commands),
            _ => outcome.commands as usize,
        };
        let Some(&event_hash) = body
            .checked_sub(1)
            .and_then(|i| self.flow_event_hash_after.get(i))
        else {
            return false;
        };
        let whole = body == self.flow_event_hash_after.len();
        f.event_hash == event_hash
            && f.last_seq == (self.setup_commands + body) as u64
            && f.state_hash
                .is_none_or(|h| whole && h == self.flow_state_hash)
    }

    /// Ratio of the best rates of two engines.
    pub fn ratio(&self, a: EngineKind, b: EngineKind) -> f64 {
        self.engine(a).best() / self.engine(b).best()
    }
}

/// Runs the whole benchmark, writing progress and the tables to `out`.
pub fn run(config: &BenchConfig, out: &mut dyn Write) -> Result<Report, BenchError> {
    let started = std::time::Instant::now();
    writeln!(
        out,
        "updown core benchmark: {} commands, seed {}, {} traders, batches of {}, {} round(s)",
        config.flow.commands, config.flow.seed, config.flow.traders, config.batch, config.rounds
    )?;
    let flow = generate(&config.flow);
    writeln!(
        out,
        "flow: {} setup + {} timed commands on {} books, generated in {:.1} s",
        flow.setup.len(),
        flow.body.len(),
        flow.books,
        started.elapsed().as_secs_f64()
    )?;
    writeln!(out, "mix: {}", flow.mix.describe(flow.body.len()))?;
    let segment_bytes = journal_bytes(&flow);
    writeln!(
        out,
        "journal: {:.1} MiB, {:.0} bytes per command (record header and padding included)",
        segment_bytes as f64 / (1 << 20) as f64,
        segment_bytes as f64 / (flow.setup.len() + flow.body.len()) as f64
    )?;
    writeln!(
        out,
        "size of one stamped command in memory: {} bytes",
        std::mem::size_of::<sequencer::Stamped>()
    )?;

    let root = tempfile::Builder::new()
        .prefix("updown-bench-")
        .tempdir_in(&config.dir)?;
    writeln!(out, "journals in {}", root.path().display())?;
    let mut engines: Vec<EngineFigures> = EngineKind::ALL
        .iter()
        .map(|&kind| EngineFigures {
            kind,
            runs: Vec::new(),
            latency: None,
        })
        .collect();
    let batch = config.batch;
    // The never-flushed journal gets one segment that holds the whole run;
    // the group-committed one the default segment size, over a prefix.
    let never = JournalRun {
        durability: Durability::Never,
        segment_bytes,
        commands: flow.body.len(),
    };
    let group = JournalRun {
        durability: Durability::GroupCommit,
        segment_bytes: journal::DEFAULT_SEGMENT_BYTES,
        commands: config.group_commands.min(flow.body.len()),
    };

    // Throughput: every engine once per round, interleaved, so that a slow
    // spell of this shared machine hits all of them alike.
    for round in 0..config.rounds {
        let full = config.full_hash && round == 0;
        write!(out, "round {}:", round + 1)?;
        let mut record =
            |kind: EngineKind, outcome: Outcome, out: &mut dyn Write| -> std::io::Result<()> {
                write!(out, " {} {:.2} M/s", short(kind), outcome.rate() / 1e6)?;
                if let Some(cpu) = outcome.cpu {
                    write!(
                        out,
                        " (user {:.2} s, sys {:.2} s, {} faults)",
                        cpu.user.as_secs_f64(),
                        cpu.sys.as_secs_f64(),
                        cpu.faults
                    )?;
                }
                write!(out, ";")?;
                out.flush()?;
                engines
                    .iter_mut()
                    .find(|e| e.kind == kind)
                    .expect("listed")
                    .runs
                    .push(outcome);
                Ok(())
            };
        record(EngineKind::Core, run_core(&flow, batch, None, full), out)?;
        record(EngineKind::Lobster, run_lobster(&flow, batch, None), out)?;
        let never_dir = root.path().join(format!("never-{round}"));
        record(
            EngineKind::JournalNever,
            run_journaled(&flow, &never_dir, never, batch, None, full)?,
            out,
        )?;
        record(EngineKind::Replay, run_replay(&never_dir, full)?, out)?;
        std::fs::remove_dir_all(&never_dir)?;
        let group_dir = root.path().join(format!("group-{round}"));
        // A full hash is only comparable when the prefix is the whole body.
        let group_full = full && group.commands == flow.body.len();
        record(
            EngineKind::GroupCommit,
            run_journaled(&flow, &group_dir, group, batch, None, group_full)?,
            out,
        )?;
        std::fs::remove_dir_all(&group_dir)?;
        writeln!(out)?;
    }

    // Latency: a separate pass timing each command on its own.
    let overhead = crate::clock::overhead_ns();
    writeln!(
        out,
        "latency pass (each pair of time-stamp counter readings adds about {overhead:.0} ns to every sample)"
    )?;
    for figures in &mut engines {
        let mut latencies = Latencies::default();
        let outcome = match figures.kind {
            EngineKind::Core => run_core(&flow, batch, Some(&mut latencies), false),
            EngineKind::Lobster => run_lobster(&flow, batch, Some(&mut latencies)),
            EngineKind::JournalNever | EngineKind::GroupCommit => {
                let run = if figures.kind == EngineKind::JournalNever {
                    never
                } else {
                    group
                };
                let dir = root.path().join("latency");
                let outcome = run_journaled(&flow, &dir, run, batch, Some(&mut latencies), false)?;
                std::fs::remove_dir_all(&dir)?;
                outcome
            }
            EngineKind::Replay => continue,
        };
        figures.latency = Some((outcome, latencies));
    }

    let report = Report {
        config: config.clone(),
        setup_commands: flow.setup.len(),
        flow_contracts: flow.contracts,
        flow_event_hash: flow.event_hash,
        flow_state_hash: flow.state_hash,
        flow_event_hash_after: flow.event_hash_after.clone(),
        engines,
    };
    print_tables(&report, out)?;
    writeln!(out, "total time {:.1} s", started.elapsed().as_secs_f64())?;
    Ok(report)
}

fn short(kind: EngineKind) -> &'static str {
    match kind {
        EngineKind::Core => "core",
        EngineKind::Lobster => "lobster",
        EngineKind::JournalNever => "journal-never",
        EngineKind::Replay => "replay",
        EngineKind::GroupCommit => "group-commit",
    }
}

/// Formats nanoseconds as ns or µs.
fn time(ns: u64) -> String {
    if ns < 10_000 {
        format!("{ns} ns")
    } else if ns < 10_000_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{:.1} ms", ns as f64 / 1e6)
    }
}

fn print_tables(report: &Report, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "| engine | commands | best M cmd/s | every round (M cmd/s) | by user time, best | p50 | p99 | p99.9 | max |"
    )?;
    writeln!(out, "| - | -: | -: | - | -: | -: | -: | -: | -: |")?;
    for e in &report.engines {
        let rounds: Vec<String> = e
            .runs
            .iter()
            .map(|r| format!("{:.2}", r.rate() / 1e6))
            .collect();
        let (p50, p99, p999, max) = match &e.latency {
            Some((_, l)) => (
                time(l.command.value_at_quantile(0.5)),
                time(l.command.value_at_quantile(0.99)),
                time(l.command.value_at_quantile(0.999)),
                time(l.command.max()),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let commands = e.runs.first().map_or(0, |r| r.commands);
        let user = e
            .best_user()
            .map_or_else(|| "-".to_string(), |r| format!("{:.2}", r / 1e6));
        writeln!(
            out,
            "| {} | {} | {:.2} | {} | {user} | {p50} | {p99} | {p999} | {max} |",
            e.kind.name(),
            commands,
            e.best() / 1e6,
            rounds.join(" / ")
        )?;
    }
    if let Some((_, l)) = &report.engine(EngineKind::GroupCommit).latency {
        writeln!(
            out,
            "group commit, one msync per batch of {}: p50 {}, p99 {}, p99.9 {}, max {} ({} commits)",
            report.config.batch,
            time(l.batch.value_at_quantile(0.5)),
            time(l.batch.value_at_quantile(0.99)),
            time(l.batch.value_at_quantile(0.999)),
            time(l.batch.max()),
            l.batch.len()
        )?;
    }
    // Where the time goes by kind of command, from the latency pass.
    let kinds = [
        EngineKind::Core,
        EngineKind::JournalNever,
        EngineKind::Lobster,
    ];
    writeln!(out)?;
    writeln!(out, "| command (latency pass) | share | core p50 / p99 | journal-never p50 / p99 | lobster p50 / p99 |")?;
    writeln!(out, "| - | -: | -: | -: | -: |")?;
    let total = report
        .engine(EngineKind::Core)
        .latency
        .as_ref()
        .map_or(0, |(_, l)| l.command.len())
        .max(1);
    for label in Label::ALL {
        let mut row = String::new();
        let mut count = 0;
        for kind in kinds {
            match &report.engine(kind).latency {
                Some((_, l)) => {
                    let h = &l.by_label[label.index()];
                    count = count.max(h.len());
                    row.push_str(&format!(
                        " {} / {} |",
                        time(h.value_at_quantile(0.5)),
                        time(h.value_at_quantile(0.99))
                    ));
                }
                None => row.push_str(" - |"),
            }
        }
        if count > 0 {
            writeln!(
                out,
                "| {} | {:.1}% |{row}",
                label.name(),
                100.0 * count as f64 / total as f64
            )?;
        }
    }
    writeln!(out)?;
    let core = report.engine(EngineKind::Core).best();
    let replay = report.engine(EngineKind::Replay).best();
    let core_over_lobster = report.ratio(EngineKind::Core, EngineKind::Lobster);
    let never_over_core = report.ratio(EngineKind::JournalNever, EngineKind::Core);
    let group_over_core = report.ratio(EngineKind::GroupCommit, EngineKind::Core);
    // Ratios within each round, to show how much the noise moves them.
    let per_round = |a: EngineKind, b: EngineKind| -> String {
        let (a, b) = (report.engine(a), report.engine(b));
        a.runs
            .iter()
            .zip(&b.runs)
            .map(|(x, y)| format!("{:.2}", x.rate() / y.rate()))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    writeln!(out, "ratios of the best rates (and within each round):")?;
    writeln!(
        out,
        "  core / lobster           {core_over_lobster:.2}  ({})",
        per_round(EngineKind::Core, EngineKind::Lobster)
    )?;
    writeln!(
        out,
        "  journal-never / core     {never_over_core:.2}  ({})",
        per_round(EngineKind::JournalNever, EngineKind::Core)
    )?;
    writeln!(
        out,
        "  group-commit / core      {group_over_core:.2}  ({})",
        per_round(EngineKind::GroupCommit, EngineKind::Core)
    )?;
    writeln!(
        out,
        "  replay rate              {:.2} M cmd/s",
        replay / 1e6
    )?;
    // The same ratios by the driving threads' user time: the kernel's
    // share (first touches of fresh memory) and other tenants taken out.
    let user_ratio = |a: EngineKind, b: EngineKind| {
        report
            .engine(a)
            .best_user()
            .zip(report.engine(b).best_user())
            .map(|(a, b)| a / b)
    };
    if let (Some(cl), Some(nc)) = (
        user_ratio(EngineKind::Core, EngineKind::Lobster),
        user_ratio(EngineKind::JournalNever, EngineKind::Core),
    ) {
        writeln!(
            out,
            "by user time (not an aim; steadier): core / lobster {cl:.2}, journal-never / core {nc:.2}"
        )?;
    }
    writeln!(out)?;
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    writeln!(out, "aims:")?;
    writeln!(
        out,
        "  core >= 6 M cmd/s:              {:.2} M -> {}",
        core / 1e6,
        verdict(core >= AIM_CORE_RATE)
    )?;
    writeln!(
        out,
        "  core >= 3x lobster:             {core_over_lobster:.2}x -> {}",
        verdict(core_over_lobster >= AIM_CORE_OVER_LOBSTER)
    )?;
    writeln!(
        out,
        "  journal(Never) >= 0.5x core:    {never_over_core:.2}x -> {}",
        verdict(never_over_core >= AIM_JOURNAL_OVER_CORE)
    )?;
    writeln!(
        out,
        "  replay >= 5 M cmd/s:            {:.2} M -> {}",
        replay / 1e6,
        verdict(replay >= AIM_REPLAY_RATE)
    )?;
    let agree = report
        .engines
        .iter()
        .all(|e| e.runs.iter().all(|r| report.agrees(e.kind, r)));
    writeln!(
        out,
        "every sequencer engine reached the generator's state: {}",
        if agree { "yes" } else { "NO" }
    )?;
    let lobster = report.engine(EngineKind::Lobster);
    let same_fills = lobster
        .runs
        .iter()
        .all(|r| r.contracts == report.flow_contracts);
    writeln!(
        out,
        "lobster traded the same {} contracts as the core: {}",
        report.flow_contracts,
        if same_fills { "yes" } else { "NO" }
    )?;
    Ok(())
}
