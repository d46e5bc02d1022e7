//! A reader follows a live writer: records appended after the reader reached
//! the end show up on later calls, across segment rolls.

mod common;

use std::time::{Duration, Instant};

use common::*;
use journal::{Durability, Journal, Reader};

#[test]
fn reader_follows_the_writer_in_the_same_thread() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, _) = Journal::open(config(dir.path(), SEG)).unwrap();
    // Opened before any segment exists.
    let mut r = Reader::open(dir.path()).unwrap();
    assert!(r.next().unwrap().is_none());
    let mut next_seq = 1;
    for batch in [1u64, 5, 1, 300, 2, 700, 1] {
        write_range(&mut j, next_seq, next_seq + batch - 1);
        for seq in next_seq..next_seq + batch {
            let rec = r
                .next()
                .unwrap()
                .unwrap_or_else(|| panic!("seq {seq} not visible"));
            assert_eq!(rec.seq, seq);
            assert_eq!(rec.kind, kind_for(seq));
            assert_eq!(rec.payload, &payload(seq, size_for(seq))[..]);
            assert_eq!(rec.payload.as_ptr() as usize % 16, 0);
        }
        assert!(r.next().unwrap().is_none(), "nothing past the end");
        assert!(r.next().unwrap().is_none(), "still nothing");
        next_seq += batch;
    }
    assert!(
        segment_count(dir.path()) > 3,
        "the reader crossed segment rolls"
    );
    // Without commit the records are visible too: the mapping is shared.
    j.append(next_seq, 1, b"uncommitted").unwrap();
    assert_eq!(r.next().unwrap().unwrap().payload, b"uncommitted");
}

#[test]
fn reader_waits_at_a_seal_until_the_next_segment_appears() {
    let dir = tempfile::tempdir().unwrap();
    let seg = 8192;
    let (mut j, _) = Journal::open(config(dir.path(), seg)).unwrap();
    j.append(1, 1, &[1u8; 4000]).unwrap();
    j.append(2, 1, &[2u8; 4000]).unwrap();
    let mut r = Reader::open(dir.path()).unwrap();
    assert_eq!(r.next().unwrap().unwrap().seq, 1);
    assert_eq!(r.next().unwrap().unwrap().seq, 2);
    assert!(r.next().unwrap().is_none());
    // This one rolls: segment 0 is sealed and segment 1 created.
    j.append(3, 1, &[3u8; 4000]).unwrap();
    let rec = r.next().unwrap().unwrap();
    assert_eq!((rec.seq, rec.segment, rec.offset), (3, 1, 64));
}

#[test]
fn reader_in_another_thread_sees_every_record_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let total = 20_000u64;
    let mut cfg = config(dir.path(), SEG);
    cfg.durability = Durability::Never;
    let (mut j, _) = Journal::open(cfg).unwrap();
    let reader = std::thread::spawn(move || {
        let mut r = Reader::open(&path).unwrap();
        let mut expect = 1u64;
        let deadline = Instant::now() + Duration::from_secs(120);
        while expect <= total {
            match r.next().unwrap() {
                Some(rec) => {
                    assert_eq!(rec.seq, expect);
                    assert_eq!(rec.payload.len(), size_for(expect));
                    assert_eq!(rec.payload, &payload(expect, size_for(expect))[..]);
                    assert_eq!(rec.payload.as_ptr() as usize % 16, 0);
                    expect += 1;
                }
                None => {
                    assert!(Instant::now() < deadline, "reader stalled at {expect}");
                    std::thread::yield_now();
                }
            }
        }
        assert!(r.next().unwrap().is_none());
        expect - 1
    });
    for seq in 1..=total {
        j.append(seq, kind_for(seq), &payload(seq, size_for(seq)))
            .unwrap();
        if seq % 64 == 0 {
            j.commit().unwrap();
            std::thread::yield_now();
        }
    }
    j.sync().unwrap();
    assert_eq!(reader.join().unwrap(), total);
}

const CHILD_ENV: &str = "JOURNAL_TEST_WRITER_DIR";
const CHILD_RECORDS: u64 = 5000;

/// Not a test on its own: the body of the writer process started by
/// `reader_follows_a_writer_in_another_process`. Does nothing otherwise.
#[test]
fn helper_writer_process() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut cfg = config(std::path::Path::new(&dir), SEG);
    cfg.durability = Durability::Never;
    let (mut j, _) = Journal::open(cfg).unwrap();
    for seq in 1..=CHILD_RECORDS {
        j.append(seq, kind_for(seq), &payload(seq, size_for(seq)))
            .unwrap();
        if seq % 50 == 0 {
            j.commit().unwrap();
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    j.close().unwrap();
}

#[test]
fn reader_follows_a_writer_in_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_writer_process",
            "--test-threads=1",
            "--quiet",
        ])
        .env(CHILD_ENV, dir.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut r = Reader::open(dir.path()).unwrap();
    let mut expect = 1;
    let deadline = Instant::now() + Duration::from_secs(120);
    while expect <= CHILD_RECORDS {
        match r.next().unwrap() {
            Some(rec) => {
                assert_eq!(rec.seq, expect);
                assert_eq!(rec.payload, &payload(expect, size_for(expect))[..]);
                expect += 1;
            }
            None => {
                assert!(Instant::now() < deadline, "reader stalled at {expect}");
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }
    assert!(child.wait().unwrap().success(), "writer process failed");
    assert!(r.next().unwrap().is_none());
    assert!(segment_count(dir.path()) > 3);
}
