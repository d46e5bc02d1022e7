//! `cargo run --release -p benches --bin replay`: the replay benchmark.
//! Generates (once, cached under `target/replay-bench`) a seeded journal
//! of `UPDOWN_REPLAY_COMMANDS` commands with a snapshot every
//! `UPDOWN_REPLAY_SNAPSHOT_EVERY`, then times full replays, snapshot loads
//! and the state at random seqs, and prints a markdown report with the
//! aims (replay at least 5 M/s; any seq of 10 M in under 1 s). See
//! `benches/README.md`.

#[path = "../replayb/mod.rs"]
mod replayb;

use std::process::ExitCode;

fn main() -> ExitCode {
    benches::venue_memory();
    let config = match replayb::Config::from_env() {
        Ok(config) => config,
        Err(why) => {
            eprintln!("replay: {why}");
            return ExitCode::from(2);
        }
    };
    let mut log = std::io::stderr();
    match replayb::run(&config, &mut log) {
        Ok(outcome) => {
            println!("{}", outcome.report);
            eprintln!(
                "replay: best full replay {:.2} M commands/s; slowest random seq {:.3} s",
                outcome.best_rate / 1e6,
                outcome.worst_seq.as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("replay: {why}");
            ExitCode::FAILURE
        }
    }
}
