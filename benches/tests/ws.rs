//! Runs the websocket fan-out benchmark tiny (`WsConfig::smoke`: 1 and 40
//! subscribers, the 40 from three source addresses) against the venue, the
//! bare broadcast and its coalescing variant. It asserts what the clients
//! received, never how fast: every client got every message of every
//! phase, in order, with contiguous `seq`, each the book change its event
//! made, and nothing was dropped anywhere.

use benches::ws::report::{run, Load, Side, WsConfig};

#[test]
fn every_subscriber_receives_every_message_in_order() {
    let mut config = WsConfig::smoke();
    config.sides = Side::ALL.to_vec();
    let mut out = Vec::new();
    let report = run(&config, &mut out).expect("the benchmark runs");
    let text = String::from_utf8(out).expect("the report is text");
    assert!(text.contains("| venue at least 0.8x"), "{text}");
    assert_eq!(report.first_error, None, "{text}");
    assert_eq!(report.lost_batches, 0, "{text}");
    for side in Side::ALL {
        for &n in &config.subscribers {
            for max in [true, false] {
                let phases: Vec<_> = report
                    .phases
                    .iter()
                    .filter(|p| {
                        p.side == side
                            && p.subscribers == n
                            && matches!(p.load, Load::Max { .. }) == max
                    })
                    .collect();
                assert_eq!(
                    phases.len(),
                    config.rounds,
                    "{side:?} {n} max={max}\n{text}"
                );
                for p in phases {
                    let what = format!("{side:?}, {n} subscribers, {:?}", p.load);
                    assert!(p.events > 0, "{what}: events were sent");
                    assert!(p.drained, "{what}: every client got the last event\n{text}");
                    assert_eq!(p.gaps, 0, "{what}: no seq gap\n{text}");
                    assert_eq!(p.bad, 0, "{what}: every frame the expected change\n{text}");
                    assert_eq!(p.dropped, 0, "{what}: no queue overflowed\n{text}");
                    assert_eq!(p.received, p.expected(), "{what}: every message\n{text}");
                    assert_eq!(p.latency.len(), p.received, "{what}: every message timed");
                }
            }
        }
    }
    assert_eq!(report.lost(), 0);
}
