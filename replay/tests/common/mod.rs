//! What the replay crate's test binaries share: a scenario and the node
//! configuration they run it under.
#![allow(dead_code)]

use std::path::Path;

use journal::{Durability, JournalConfig};
use replay::NodeConfig;
use sequencer::Stamped;
use sequencer::VenueConfig;
use tests::harness::{Venue, WINDOW_MS};

/// A scenario with trading, cancels, refusals, window closes and settlement.
pub fn scenario() -> Vec<Stamped> {
    let mut v = Venue::new();
    let traders: Vec<_> = (0..4).map(|_| v.trader(1_000_00)).collect();
    for round in 0..12u64 {
        for (i, &t) in traders.iter().enumerate() {
            let price = 40 + ((round as usize * 7 + i * 3) % 20) as u8;
            let outcome = if i % 2 == 0 { "up" } else { "down" };
            let _ = v.place(t, &format!("buy {outcome} 0.{price:02} x{}", 1 + i));
            let _ = v.place(t, &format!("sell {outcome} 0.{:02} x1", price + 5));
        }
        let _ = v.cancel(traders[0], round * 3 + 1);
        // Never exactly on a window's open: a window opens on the first
        // print after its open, and this one comes 20 s later.
        v.now += WINDOW_MS / 3 + 7;
        v.print(100 + round as i64 % 3);
    }
    v.log.clone()
}

pub fn node_config(dir: &Path) -> NodeConfig {
    let mut journal = JournalConfig::new(dir.join("journal"));
    journal.segment_bytes = 64 * 1024;
    journal.durability = Durability::GroupCommit;
    NodeConfig {
        journal,
        snapshot_dir: Some(dir.join("snapshots")),
        venue: VenueConfig::default(),
        history_dir: None,
    }
}
