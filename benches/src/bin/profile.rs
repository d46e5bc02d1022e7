//! `cargo run --release -p benches --bin profile`: generates the flow, then
//! runs ONE engine (`UPDOWN_BENCH_ENGINE` = `core` (default), `lobster`,
//! `journal` or `replay`) `UPDOWN_BENCH_ROUNDS` times, printing only its
//! rate. Meant to run under `perf record` or `valgrind --tool=callgrind`,
//! where the side-by-side `core` binary would mix every engine together.

use std::process::ExitCode;

use benches::engines::{
    journal_bytes, run_core, run_journaled, run_lobster, run_replay, JournalRun,
};
use benches::flow::generate;
use benches::report::BenchConfig;
use journal::Durability;

fn main() -> ExitCode {
    benches::venue_memory();
    let config = match BenchConfig::from_env() {
        Ok(config) => config,
        Err(why) => {
            eprintln!("profile: {why}");
            return ExitCode::from(2);
        }
    };
    let engine = std::env::var("UPDOWN_BENCH_ENGINE").unwrap_or_else(|_| "core".into());
    let flow = generate(&config.flow);
    let dir = match tempfile::Builder::new()
        .prefix("updown-profile-")
        .tempdir_in(&config.dir)
    {
        Ok(dir) => dir,
        Err(why) => {
            eprintln!("profile: {why}");
            return ExitCode::FAILURE;
        }
    };
    let never = JournalRun {
        durability: Durability::Never,
        segment_bytes: journal_bytes(&flow),
        commands: flow.body.len(),
    };
    let journal_dir = dir.path().join("journal");
    if engine == "replay" {
        run_journaled(&flow, &journal_dir, never, config.batch, None, false)
            .expect("journal written");
    }
    for round in 0..config.rounds {
        let outcome = match engine.as_str() {
            "core" => run_core(&flow, config.batch, None, false),
            "lobster" => run_lobster(&flow, config.batch, None),
            "journal" => {
                let round_dir = dir.path().join(format!("round-{round}"));
                let outcome = run_journaled(&flow, &round_dir, never, config.batch, None, false)
                    .expect("journal written");
                std::fs::remove_dir_all(&round_dir).expect("journal removed");
                outcome
            }
            "replay" => run_replay(&journal_dir, false).expect("journal replayed"),
            other => {
                eprintln!("profile: unknown engine {other:?} (core, lobster, journal or replay)");
                return ExitCode::from(2);
            }
        };
        println!(
            "{engine}: {} commands in {:.3} s, {:.2} M cmd/s",
            outcome.commands,
            outcome.elapsed.as_secs_f64(),
            outcome.rate() / 1e6
        );
    }
    ExitCode::SUCCESS
}
