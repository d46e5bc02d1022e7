//! Runs the REST benchmark briefly against both servers. It asserts what
//! the servers did, never how fast: every request of every phase was
//! answered 201, and the venue holds every order it accepted.

use benches::rest::report::{run, RestConfig, ServerKind};

#[test]
fn both_servers_accept_every_order_and_the_venue_holds_them_all() {
    // Measured windows of 1 s after 0.2 s of warm-up: about 5 s in all. A
    // closed-loop phase counts the answers that arrive in its window: its 8
    // connections would all have to wait over a second for none to (a 0.3 s
    // window was short enough for one slow spell of a fresh venue on a
    // loaded machine to fill). An open-loop phase counts every request
    // scheduled in its window, however late the answer, at half the best
    // closed-loop rate (thousands a second).
    let config = RestConfig::smoke(1.0);
    let mut out = Vec::new();
    let report = run(&config, &mut out).expect("the benchmark runs");
    let text = String::from_utf8(out).expect("the report is text");
    assert!(text.contains("| bare axum handler |"), "{text}");
    assert!(text.contains("venue / bare"), "{text}");

    for kind in ServerKind::ALL {
        let phases: Vec<_> = report
            .closed
            .iter()
            .chain(&report.open)
            .filter(|p| p.kind == kind)
            .collect();
        assert_eq!(phases.len(), 2, "{kind:?}: one closed and one open phase");
        for phase in phases {
            let o = &phase.outcome;
            assert!(o.sent > 0, "{kind:?} was sent orders\n{text}");
            assert_eq!(
                o.created, o.sent,
                "{kind:?}: every order answered 201 (first refusal: {:?})",
                o.first_refusal
            );
            assert!(o.measured > 0, "{kind:?}: answers in the measured window");
            assert!(!o.latency.is_empty(), "{kind:?}: latencies recorded");
        }
        assert_eq!(report.created(kind), report.sent(kind));
    }
    // Every order rests (none can cross), so the venue holds all of them.
    assert_eq!(
        report.venue_resting,
        report.created(ServerKind::Venue),
        "{text}"
    );
}
