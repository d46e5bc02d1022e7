//! Journal record decoding: arbitrary bytes written as segment files are
//! opened, verified and read with `journal::verify`, `journal::Reader` and
//! (when asked) `journal::Journal::open`'s recovery, and every payload, as
//! well as the input itself (16-byte aligned), goes through
//! `replay::codec::decode`. Nothing may panic, and the three must agree.
//!
//! Input: one flag byte, then the bytes.
//! - `FIX`: before writing, the segment header gets the right magic,
//!   version, index and length and a good checksum, and every record that
//!   fits gets its checksum recomputed, so the fuzzer gets past the CRCs to
//!   the sequence, seal and layout checks and to the payload decoder;
//! - `SPLIT`: the bytes after a u16 split point make a second segment
//!   (index 1, or 2 with `GAP`, leaving a missing segment between);
//! - `OPEN`: the writer's recovery also runs (cutting damage off), and a
//!   record is appended after it.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use journal::format::{
    record_crc, record_len, SegmentHeader, RECORD_ALIGN, RECORD_HEADER_LEN, RECORD_MARKER,
    SEAL_MARKER, SEGMENT_HEADER_LEN,
};
use journal::{segment_path, Durability, Journal, JournalConfig, Reader};
use libfuzzer_sys::fuzz_target;

const FIX: u8 = 1;
const SPLIT: u8 = 2;
const OPEN: u8 = 4;
const GAP: u8 = 8;
/// More records than any input of the fuzzer's length can hold.
const RECORDS_MAX: u64 = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    decode_payload(u64::from_le_bytes(le8(rest, 8)), rest);

    let dir = fresh_dir();
    let mut segments = vec![rest];
    if flags & SPLIT != 0 && rest.len() >= 2 {
        let at = usize::from(u16::from_le_bytes([rest[0], rest[1]])) % (rest.len() - 1) + 2;
        segments = vec![&rest[2..at], &rest[at..]];
    }
    for (i, bytes) in segments.iter().enumerate() {
        let index = if i == 1 && flags & GAP != 0 {
            2
        } else {
            i as u64
        };
        let mut bytes = bytes.to_vec();
        if flags & FIX != 0 {
            fix(&mut bytes, index);
        }
        std::fs::write(segment_path(&dir, index), &bytes).expect("writing a segment");
    }

    let report = journal::verify(&dir).expect("verify reports damage, it does not fail on it");
    let read = read_all(&dir);
    if report.is_ok() {
        // A journal verify passes must read back in full, record by record.
        let records = read.expect("verify passed but the reader failed");
        assert_eq!(records, report.records, "verify and the reader disagree");
    }

    if flags & OPEN != 0 {
        let config = JournalConfig {
            dir: dir.clone(),
            segment_bytes: 4096,
            durability: Durability::Never,
            truncate_on_corruption: true,
            keep_through: 0,
        };
        if let Ok((mut journal, recovery)) = Journal::open(config) {
            let after = journal::verify(&dir).expect("verify after recovery");
            assert!(
                after.is_ok(),
                "recovery left damage: {after:?} ({recovery:?})"
            );
            assert_eq!(after.records, recovery.records);
            let next = recovery.last_seq.map_or(Some(1), |s| s.checked_add(1));
            if let Some(seq) = next {
                if journal.append(seq, 1, b"appended after recovery").is_ok() {
                    journal.sync().expect("sync");
                    drop(journal);
                    let again = journal::verify(&dir).expect("verify after append");
                    assert!(again.is_ok(), "append after recovery: {again:?}");
                    assert_eq!(again.records, recovery.records + 1);
                    assert_eq!(read_all(&dir).ok(), Some(again.records));
                }
            }
        }
    }
});

/// Reads every record with a `Reader`, decoding each payload; the count, or
/// the error that stopped it.
fn read_all(dir: &Path) -> Result<u64, journal::JournalError> {
    let mut reader = Reader::open(dir)?;
    let mut count = 0u64;
    let mut last: Option<u64> = None;
    while let Some(record) = reader.next()? {
        assert_eq!(record.payload.as_ptr() as usize % RECORD_ALIGN, 0);
        if let Some(last) = last {
            assert_eq!(
                Some(record.seq),
                last.checked_add(1),
                "reader skipped a seq"
            );
        }
        last = Some(record.seq);
        decode_payload(record.seq, record.payload);
        count += 1;
        assert!(count <= RECORDS_MAX, "the reader does not stop");
    }
    Ok(count)
}

/// `replay::codec::decode` on the bytes, from a 16-byte aligned copy (as the
/// journal hands them out); what decodes must encode and decode the same.
fn decode_payload(seq: u64, bytes: &[u8]) {
    let mut words = vec![0u128; bytes.len().div_ceil(16)];
    // SAFETY: `words` owns at least `bytes.len()` initialised bytes, and u8
    // has no alignment or validity requirement.
    let aligned =
        unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), bytes.len()) };
    aligned.copy_from_slice(bytes);
    if let Ok(stamped) = replay::codec::decode(seq, aligned) {
        assert_eq!(stamped.seq, seq);
        let encoded = replay::codec::encode(&stamped);
        let again = replay::codec::decode(seq, &encoded).expect("re-encoded command decodes");
        assert_eq!(again, stamped);
    }
}

/// Makes the header and record checksums (and the header's own fields)
/// right, so only the structure of the bytes is left to check.
fn fix(seg: &mut Vec<u8>, index: u64) {
    let len = seg
        .len()
        .max(SEGMENT_HEADER_LEN + RECORD_HEADER_LEN)
        .next_multiple_of(RECORD_ALIGN);
    seg.resize(len, 0);
    let header = SegmentHeader {
        index,
        first_seq: u64::from_le_bytes(le8(seg, 24)),
        segment_bytes: len as u64,
    };
    seg[..SEGMENT_HEADER_LEN].copy_from_slice(&header.encode());
    let mut off = SEGMENT_HEADER_LEN;
    while off + RECORD_HEADER_LEN <= len {
        let marker = u32::from_le_bytes(seg[off..off + 4].try_into().unwrap());
        if marker != RECORD_MARKER && marker != SEAL_MARKER {
            break;
        }
        let payload_len = u32::from_le_bytes(seg[off + 4..off + 8].try_into().unwrap()) as usize;
        let total = record_len(payload_len);
        if total > len - off {
            break;
        }
        let start = off + RECORD_HEADER_LEN;
        let crc = record_crc(&seg[off..start], &seg[start..start + payload_len]);
        seg[off + 20..off + 24].copy_from_slice(&crc.to_le_bytes());
        off += total;
    }
}

fn le8(bytes: &[u8], at: usize) -> [u8; 8] {
    let mut out = [0u8; 8];
    for (i, b) in out.iter_mut().enumerate() {
        *b = bytes.get(at + i).copied().unwrap_or(0);
    }
    out
}

/// An empty journal directory, reused across runs, under `TMPDIR`
/// (`scripts/fuzz.sh` points it at a tmpfs when there is one, and removes it).
fn fresh_dir() -> PathBuf {
    static ROOT: OnceLock<tempfile::TempDir> = OnceLock::new();
    let root = ROOT.get_or_init(|| tempfile::tempdir().expect("a temporary directory"));
    let dir = root.path().join("journal");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).expect("creating the journal directory");
    dir
}
