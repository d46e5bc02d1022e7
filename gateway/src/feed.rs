//! The built-in price simulator: a seeded random walk per symbol, printing
//! into the venue as journaled `Price` commands, so the server runs with no
//! outside service. A real feed adapter uses the admin ingest path instead.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sequencer::Command;

use crate::engine::{now_ms, Submitter};

/// A small deterministic generator (xorshift64*), seeded per symbol.
struct Walk {
    state: u64,
    price: f64,
}

impl Walk {
    fn next_unit(&mut self) -> f64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        let bits = self.state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
        bits as f64 / (1u64 << 53) as f64
    }

    /// One step: a move of about 2 basis points, up or down.
    fn step(&mut self) -> f64 {
        let u = self.next_unit() + self.next_unit() + self.next_unit() - 1.5;
        self.price *= 1.0 + u * 0.0004;
        self.price = self.price.max(0.01);
        self.price
    }
}

/// Starts the simulator thread for `symbols` (symbol -> start price).
pub fn start(
    submitter: Submitter,
    symbols: BTreeMap<String, f64>,
    interval: Duration,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("price-sim".into())
        .spawn(move || {
            let mut walks: Vec<(String, Walk)> = symbols
                .into_iter()
                .enumerate()
                .map(|(i, (symbol, price))| {
                    let state = seed
                        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                        .wrapping_add(i as u64 + 1)
                        | 1;
                    (symbol, Walk { state, price })
                })
                .collect();
            while !stop.load(Ordering::SeqCst) {
                let t_ms = now_ms();
                for (symbol, walk) in &mut walks {
                    let price_e8 = (walk.step() * 1e8).round() as i64;
                    submitter.internal_nowait(Command::Price {
                        symbol: symbol.clone(),
                        price_e8,
                        t_ms,
                    });
                }
                let mut slept = Duration::ZERO;
                while slept < interval && !stop.load(Ordering::SeqCst) {
                    let step = Duration::from_millis(50).min(interval - slept);
                    std::thread::sleep(step);
                    slept += step;
                }
            }
        })
        .expect("spawn the price simulator")
}
