//! `cargo run --release -p benches --bin core`: the side-by-side benchmark.
//! Settings come from the environment (`UPDOWN_BENCH_COMMANDS=20000` for a
//! quick smoke run); see `benches/README.md`.

use std::process::ExitCode;

fn main() -> ExitCode {
    benches::venue_memory();
    let config = match benches::report::BenchConfig::from_env() {
        Ok(config) => config,
        Err(why) => {
            eprintln!("core: {why}");
            return ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout().lock();
    match benches::report::run(&config, &mut out) {
        Ok(_) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("core: {why}");
            ExitCode::FAILURE
        }
    }
}
