//! `cargo run --release -p benches --bin ws`: websocket fan-out to 1, 100
//! and 1,000 subscribers, the venue beside a bare fastwebsockets
//! broadcast. Settings come from the environment
//! (`UPDOWN_BENCH_WS_SMOKE=1` for a quick smoke run); see
//! `benches/README.md`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let config = match benches::ws::report::WsConfig::from_env() {
        Ok(config) => config,
        Err(why) => {
            eprintln!("ws: {why}");
            return ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout();
    match benches::ws::report::run(&config, &mut out) {
        Ok(report) if report.lost() == 0 && report.first_error.is_none() => ExitCode::SUCCESS,
        Ok(_) => {
            eprintln!("ws: messages were lost or wrong (see above)");
            ExitCode::FAILURE
        }
        Err(why) => {
            eprintln!("ws: {why}");
            ExitCode::FAILURE
        }
    }
}
