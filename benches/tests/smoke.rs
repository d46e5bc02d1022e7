//! Runs the benchmark in its smoke size so CI exercises every engine and the
//! report. It asserts what the engines did, never how fast: timing
//! assertions fail on a busy machine and prove nothing.

use benches::engines::Fingerprint;
use benches::report::{run, BenchConfig, EngineKind};

#[test]
fn every_engine_processes_the_whole_flow_and_the_sequencer_engines_agree() {
    let config = BenchConfig::smoke(20_000);
    let mut out = Vec::new();
    let report = run(&config, &mut out).expect("the benchmark runs");
    let text = String::from_utf8(out).expect("the report is text");
    assert!(text.contains("| core: State::apply |"), "{text}");

    let body = config.flow.commands as u64;
    let mut fingerprints: Vec<Fingerprint> = Vec::new();
    for figures in &report.engines {
        let mut runs: Vec<_> = figures.runs.iter().collect();
        runs.extend(figures.latency.as_ref().map(|(outcome, _)| outcome));
        assert!(!runs.is_empty(), "{:?} ran", figures.kind);
        for outcome in runs {
            let expected = match figures.kind {
                // Replay applies the setup too.
                EngineKind::Replay => body + report.setup_commands as u64,
                _ => body,
            };
            assert_eq!(
                outcome.commands, expected,
                "{:?} processed every command",
                figures.kind
            );
            assert_eq!(
                outcome.rejected, 0,
                "{:?}: the flow holds only commands the venue accepts",
                figures.kind
            );
            // Same fills everywhere, lobster included: the mapping is faithful.
            assert_eq!(
                outcome.contracts, report.flow_contracts,
                "{:?} traded the same contracts",
                figures.kind
            );
            assert!(
                report.agrees(figures.kind, outcome),
                "{:?} reached the generator's state",
                figures.kind
            );
            fingerprints.extend(outcome.fingerprint);
            // The driving thread's CPU is counted where the kernel counts
            // per thread, and it cannot exceed the wall time by more than
            // the counters' tick.
            if cfg!(target_os = "linux") {
                let cpu = outcome.cpu.expect("Linux counts a thread's CPU");
                assert!(
                    cpu.user + cpu.sys <= outcome.elapsed + std::time::Duration::from_millis(20),
                    "{:?}: {cpu:?} within {:?}",
                    figures.kind,
                    outcome.elapsed
                );
                assert!(outcome.user_rate().is_some_and(|r| r > 0.0));
            }
        }
    }
    if cfg!(target_os = "linux") {
        assert!(text.contains("by user time"), "{text}");
    }
    assert!(report.flow_contracts > 0, "the flow trades");
    // The core alone, the journaled runs and replay end in the same state.
    assert!(fingerprints.len() >= 4);
    for f in &fingerprints {
        assert_eq!(f.event_hash, report.flow_event_hash);
        if let Some(hash) = f.state_hash {
            assert_eq!(hash, report.flow_state_hash);
        }
    }
    assert!(
        fingerprints
            .iter()
            .filter(|f| f.state_hash.is_some())
            .count()
            >= 4,
        "full hashes were compared"
    );
    assert!(fingerprints
        .windows(2)
        .all(|w| w[0].last_seq == w[1].last_seq));
}
