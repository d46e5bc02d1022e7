//! Periodic snapshots through the running venue. In a test binary of its
//! own: the snapshot writer is a forked child, which holds every
//! descriptor the process had (other tests' journals and their locks)
//! until its first instructions close them, and a test restarting its
//! venue meanwhile in the same process would be refused as if another
//! venue held its journal.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::*;

fn id_of(order: &Value) -> String {
    order["order_id"].as_str().expect("order_id").to_string()
}

/// Periodic snapshots are written by the snapshot thread, never ahead of
/// the durable journal, and a restart starts from the newest one with
/// nothing lost.
#[test]
fn periodic_snapshots_are_written_off_the_sequencer_and_restart_from_them() {
    let mut v = Venue::start_with(|c| c.snapshot_every = 10);
    let a = v.trader("100.00");
    let market = v.open_market(SERIES_A);
    let mut placed = Vec::new();
    // Within the rate limit's burst of 20.
    for i in 0..18 {
        let price = format!("0.{:02}", 10 + i);
        placed.push(id_of(
            &v.place_ok(a.key(), &buy(&market, "up", &price, "1")),
        ));
    }
    let dir = v.config.snapshot_dir();
    // A snapshot is due every 10 commands, but one is not begun while
    // the last is being written: prints (journaled, not rate-limited) go
    // on until two are there.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let snapshots = loop {
        let found = replay::snapshot::list(&dir);
        if found.len() >= 2 || std::time::Instant::now() > deadline {
            break found;
        }
        v.push_price("100.00");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        snapshots.len() >= 2,
        "snapshots every 10 commands: {snapshots:?}"
    );
    for (seq, path) in &snapshots {
        let state = replay::snapshot::load(path).expect("a whole, checksummed snapshot");
        assert_eq!(state.last_seq, *seq);
    }
    v.restart();
    for id in &placed {
        let order = v.read(&format!("/portfolio/orders/{id}"), a.key());
        assert_eq!(order["order"]["status"], "resting");
    }
}

/// Only the newest `snapshots_keep` snapshots stay: each one written
/// removes those older than them, so the disk they take is bounded.
#[test]
fn older_snapshots_beyond_snapshots_keep_are_removed() {
    let mut v = Venue::start_with(|c| {
        c.snapshot_every = 10;
        c.snapshots_keep = 2;
    });
    let dir = v.config.snapshot_dir();
    let mut written = std::collections::BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while written.len() < 5 && std::time::Instant::now() < deadline {
        v.push_price("100.00");
        let found = replay::snapshot::list(&dir);
        assert!(found.len() <= 3, "one being written beside two: {found:?}");
        written.extend(found.iter().map(|(seq, _)| *seq));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(written.len() >= 5, "five snapshots written: {written:?}");
    // Quiet, the last writer pruned: the newest two, nothing older.
    let settled = std::time::Instant::now() + Duration::from_secs(30);
    let found = loop {
        let found = replay::snapshot::list(&dir);
        if found.len() <= 2 || std::time::Instant::now() > settled {
            break found;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let newest: Vec<u64> = written.iter().rev().take(2).copied().collect();
    assert_eq!(
        found.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
        newest
    );
    v.restart();
    assert_eq!(replay::snapshot::list(&dir).len(), 2, "kept at shutdown");
}
