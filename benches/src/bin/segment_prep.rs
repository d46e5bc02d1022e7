//! `cargo run --release -p benches --bin segment_prep`: what building the
//! next journal segment in the background does to the group commit's
//! syncs of the active one, with the two ways of preallocating it.
//!
//! Both ways make every block of a 64 MiB file exist, as
//! `journal::segment::build_body` does (one byte written per 4 KiB page,
//! then `sync_all`); `paced` also syncs after every 1 MiB, as the journal
//! does for a segment prepared ahead. While one is built on its own thread,
//! this thread does what the commit thread does under load: write a little
//! into an allocated file and `fdatasync` it, over and over (200 µs apart),
//! and times each sync. Rounds alternate the two ways; each new file is a
//! fresh one, as the journal's are. See `benches/README.md`.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SEGMENT: u64 = 64 << 20;
const PAGE: u64 = 4096;
const PACE: u64 = 1 << 20;

fn build(path: &Path, paced: bool) -> std::io::Result<(File, Duration)> {
    let started = Instant::now();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    file.set_len(SEGMENT)?;
    let mut at = 0;
    while at < SEGMENT {
        file.write_all_at(&[0u8], at)?;
        at += PAGE;
        if paced && at.is_multiple_of(PACE) && at < SEGMENT {
            file.sync_data()?;
        }
    }
    file.sync_all()?;
    Ok((file, started.elapsed()))
}

fn at(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn main() -> std::io::Result<()> {
    let rounds: usize = std::env::var("UPDOWN_BENCH_PREP_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let base = std::env::var_os("UPDOWN_BENCH_DIR").map_or_else(std::env::temp_dir, Into::into);
    let dir = tempfile::Builder::new()
        .prefix("updown-bench-prep-")
        .tempdir_in(base)?;
    let (active, _) = build(&dir.path().join("active.seg"), false)?;
    println!(
        "segment preparation beside group-commit syncs: {} MiB segments, {rounds} rounds, in {}",
        SEGMENT >> 20,
        dir.path().display()
    );
    println!();
    println!("| round | preallocation | build time | syncs meanwhile | sync p50 | p99 | max |");
    println!("| -: | - | -: | -: | -: | -: | -: |");
    let mut worst = [Duration::ZERO; 2];
    let mut offset = 0u64;
    for round in 0..rounds {
        let paced = round % 2 == 1;
        let path = dir.path().join(format!("next-{round}.seg"));
        let done = Arc::new(AtomicBool::new(false));
        let builder = {
            let (done, path) = (done.clone(), path.clone());
            std::thread::spawn(move || {
                let built = build(&path, paced);
                done.store(true, Ordering::Release);
                built.map(|(_, took)| took)
            })
        };
        let mut syncs = Vec::new();
        while !done.load(Ordering::Acquire) {
            active.write_all_at(&[1u8; 512], SEGMENT / 2 + offset)?;
            offset = (offset + 512) % (SEGMENT / 2);
            let started = Instant::now();
            active.sync_data()?;
            syncs.push(started.elapsed());
            std::thread::sleep(Duration::from_micros(200));
        }
        let took = builder.join().expect("the builder thread")?;
        syncs.sort();
        let max = *syncs.last().unwrap_or(&Duration::ZERO);
        worst[usize::from(paced)] = worst[usize::from(paced)].max(max);
        if !syncs.is_empty() {
            println!(
                "| {} | {} | {:.1?} | {} | {:.1?} | {:.1?} | {:.1?} |",
                round + 1,
                if paced {
                    "paced, 1 MiB steps"
                } else {
                    "one sync"
                },
                took,
                syncs.len(),
                at(&syncs, 0.5),
                at(&syncs, 0.99),
                max,
            );
        }
        std::fs::remove_file(&path)?;
        // Let the disk settle between rounds.
        std::thread::sleep(Duration::from_millis(300));
    }
    println!();
    println!(
        "slowest sync during a build: one sync {:.1?}, paced {:.1?}",
        worst[0], worst[1]
    );
    Ok(())
}
