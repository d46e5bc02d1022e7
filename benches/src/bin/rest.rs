//! `cargo run --release -p benches --bin rest`: REST order entry over
//! loopback, the venue beside a bare axum handler. Settings come from the
//! environment (`UPDOWN_BENCH_REST_SECONDS=1` for a quick smoke run); see
//! `benches/README.md`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let config = match benches::rest::report::RestConfig::from_env() {
        Ok(config) => config,
        Err(why) => {
            eprintln!("rest: {why}");
            return ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout().lock();
    match benches::rest::report::run(&config, &mut out) {
        Ok(_) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("rest: {why}");
            ExitCode::FAILURE
        }
    }
}
