//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use journal::{Durability, Journal, JournalConfig, Reader};

/// Segment size used by most tests: small, so that journals span many segments.
pub const SEG: u64 = 64 * 1024;

pub fn config(dir: &Path, segment_bytes: u64) -> JournalConfig {
    JournalConfig {
        dir: dir.to_path_buf(),
        segment_bytes,
        durability: Durability::GroupCommit,
        truncate_on_corruption: false,
        keep_through: 0,
    }
}

/// Deterministic payload for a seq: `len` bytes, none of them zero, so that
/// zeroing any byte of it changes the record.
pub fn payload(seq: u64, len: usize) -> Vec<u8> {
    let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 255) as u8 + 1
        })
        .collect()
}

/// Varied payload sizes, including zero and sizes that are not multiples of 16.
pub fn size_for(seq: u64) -> usize {
    match seq % 7 {
        0 => 0,
        1 => 1,
        2 => 15,
        3 => 16,
        4 => 17,
        5 => (seq as usize * 37) % 3000,
        _ => 200 + (seq as usize % 64),
    }
}

pub fn kind_for(seq: u64) -> u16 {
    (seq % 5) as u16 + 1
}

/// Writes records `first..=last` with the sizes of `size_for`.
pub fn write_range(j: &mut Journal, first: u64, last: u64) {
    for seq in first..=last {
        j.append(seq, kind_for(seq), &payload(seq, size_for(seq)))
            .unwrap();
    }
    j.commit().unwrap();
}

/// A journal reopened after a cut goes on: records `first..=last` are
/// written and it is closed; then the whole of it reads back as `1..=last`
/// and verifies clean.
pub fn goes_on(dir: &Path, mut j: Journal, first: u64, last: u64) {
    write_range(&mut j, first, last);
    j.close().unwrap();
    assert_records(&read_all(dir), 1, last);
    assert!(journal::verify(dir).unwrap().is_ok());
}

/// Creates a journal in `dir` with records `1..=n`.
pub fn make_journal(dir: &Path, segment_bytes: u64, n: u64) {
    let (mut j, rec) = Journal::open(config(dir, segment_bytes)).unwrap();
    assert_eq!(rec.records, 0);
    write_range(&mut j, 1, n);
    j.close().unwrap();
}

/// An owned copy of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    pub seq: u64,
    pub kind: u16,
    pub payload: Vec<u8>,
    pub segment: u64,
    pub offset: u64,
}

/// Reads every record of the journal, asserting payload alignment.
pub fn read_all(dir: &Path) -> Vec<Owned> {
    let mut r = Reader::open(dir).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next().unwrap() {
        assert_eq!(
            rec.payload.as_ptr() as usize % 16,
            0,
            "payload of seq {} not aligned",
            rec.seq
        );
        out.push(Owned {
            seq: rec.seq,
            kind: rec.kind,
            payload: rec.payload.to_vec(),
            segment: rec.segment,
            offset: rec.offset,
        });
    }
    out
}

/// Checks that `recs` are exactly seqs `first..=last` with the expected content.
pub fn assert_records(recs: &[Owned], first: u64, last: u64) {
    let seqs: Vec<u64> = recs.iter().map(|r| r.seq).collect();
    let want: Vec<u64> = (first..=last).collect();
    assert_eq!(seqs, want);
    for r in recs {
        assert_eq!(r.kind, kind_for(r.seq));
        assert_eq!(
            r.payload,
            payload(r.seq, size_for(r.seq)),
            "payload of seq {}",
            r.seq
        );
    }
}

/// Copies every file of `from` into the fresh directory `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

pub fn seg_path(dir: &Path, index: u64) -> PathBuf {
    journal::segment_path(dir, index)
}

/// Applies `f` to the bytes of a file and writes them back.
pub fn patch_file(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = fs::read(path).unwrap();
    f(&mut bytes);
    fs::write(path, bytes).unwrap();
}

/// Cuts the file at `path` to `len` bytes (damage by hand or a file system).
pub fn cut_file(path: &Path, len: u64) {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

pub fn segment_count(dir: &Path) -> usize {
    fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_str()
                .unwrap()
                .ends_with(".seg")
        })
        .count()
}
