//! Crash damage at the end of the journal: every possible cut inside the last
//! record is recovered, and damage that is not at the tail is refused.

mod common;

use std::path::Path;

use common::*;
use journal::{Journal, JournalError, ProblemKind, Reader};

/// Builds a journal of `n` records whose last record has a payload of 80
/// non-zero bytes (a multiple of 16, so the record has no padding and every
/// byte of it matters). Returns the last record's segment and offset.
fn build(dir: &Path, n: u64) -> (u64, u64, usize) {
    let (mut j, _) = Journal::open(config(dir, SEG)).unwrap();
    write_range(&mut j, 1, n - 1);
    j.append(n, kind_for(n), &payload(n, 80)).unwrap();
    j.close().unwrap();
    let mut r = Reader::open(dir).unwrap();
    r.seek(n).unwrap();
    let rec = r.next().unwrap().unwrap();
    assert_eq!(rec.seq, n);
    (rec.segment, rec.offset, 32 + 80)
}

#[derive(Clone, Copy, Debug)]
enum Damage {
    /// Bytes from the cut to the end of the record never reached the disk.
    ZeroFrom,
    /// Bytes from the cut to the end of the record hold garbage.
    GarbageFrom,
    /// Bytes from the start of the record up to the cut never reached the
    /// disk, but the rest did (the header is written last).
    ZeroBefore,
}

fn check_every_cut(damage: Damage) {
    let base = tempfile::tempdir().unwrap();
    let n = 700;
    let (segment, rec_off, rec_len) = build(base.path(), n);
    assert!(segment >= 2, "the last record should be in a later segment");
    let rec_off = rec_off as usize;
    let cuts: Vec<usize> = match damage {
        Damage::ZeroFrom | Damage::GarbageFrom => (rec_off..rec_off + rec_len).collect(),
        Damage::ZeroBefore => (rec_off + 1..rec_off + rec_len).collect(),
    };
    for cut in cuts {
        let work = tempfile::tempdir().unwrap();
        copy_dir(base.path(), work.path());
        patch_file(&seg_path(work.path(), segment), |b| match damage {
            Damage::ZeroFrom => b[cut..rec_off + rec_len].fill(0),
            Damage::GarbageFrom => {
                for (i, byte) in b[cut..rec_off + rec_len].iter_mut().enumerate() {
                    *byte = (*byte ^ 0x5A).wrapping_add(i as u8) | 0x80;
                }
            }
            Damage::ZeroBefore => b[rec_off..cut].fill(0),
        });
        // verify sees the same thing open is about to fix.
        let report = journal::verify(work.path()).unwrap();
        assert_eq!(report.last_seq, Some(n - 1), "{damage:?} cut {cut}");
        let (mut j, rec) = Journal::open(config(work.path(), SEG))
            .unwrap_or_else(|e| panic!("{damage:?} cut at {cut}: open failed: {e}"));
        assert_eq!(rec.records, n - 1, "{damage:?} cut {cut}");
        assert_eq!(rec.last_seq, Some(n - 1));
        let whole_record_gone = matches!(damage, Damage::ZeroFrom) && cut == rec_off;
        if whole_record_gone {
            assert!(report.is_ok());
            assert_eq!(rec.truncated_tail, None, "clean end, nothing to cut");
        } else {
            let p = report
                .problem
                .as_ref()
                .expect("verify reports the torn tail");
            assert_eq!(
                (p.kind, p.segment_index, p.offset),
                (ProblemKind::TornTail, segment, rec_off as u64)
            );
            let t = rec
                .truncated_tail
                .as_ref()
                .unwrap_or_else(|| panic!("{damage:?} cut {cut}: no tail cut"));
            assert_eq!(t.kind, ProblemKind::TornTail);
            assert_eq!(t.segment, seg_path(work.path(), segment));
            assert_eq!(t.segment_index, segment);
            assert_eq!(t.offset, rec_off as u64);
            assert!(
                t.bytes_dropped > 0 && t.bytes_dropped <= rec_len as u64,
                "{t:?}"
            );
            assert!(t.segments_removed.is_empty());
        }
        // Appending continues right where the good records end.
        assert!(
            matches!(j.append(n + 1, 1, b"x"), Err(JournalError::OutOfOrder { expected, .. }) if expected == n)
        );
        j.append(n, 42, b"after recovery").unwrap();
        j.close().unwrap();
        let recs = read_all(work.path());
        assert_records(&recs[..recs.len() - 1], 1, n - 1);
        let last = recs.last().unwrap();
        assert_eq!(
            (last.seq, last.kind, &last.payload[..]),
            (n, 42, &b"after recovery"[..])
        );
        assert_eq!(last.offset, rec_off as u64);
        assert!(journal::verify(work.path()).unwrap().is_ok());
    }
}

#[test]
fn every_cut_inside_the_last_record_zeroed_suffix() {
    check_every_cut(Damage::ZeroFrom);
}

#[test]
fn every_cut_inside_the_last_record_garbage_suffix() {
    check_every_cut(Damage::GarbageFrom);
}

#[test]
fn every_cut_inside_the_last_record_missing_prefix() {
    check_every_cut(Damage::ZeroBefore);
}

/// Appends until a third segment is made: it holds one record, whose seq
/// is returned.
fn three_segments_the_last_with_one_record(dir: &Path) -> u64 {
    let (mut j, _) = Journal::open(config(dir, SEG)).unwrap();
    let mut seq = 0;
    while segment_count(dir) < 3 {
        seq += 1;
        j.append(seq, kind_for(seq), &payload(seq, size_for(seq)))
            .unwrap();
    }
    j.close().unwrap();
    seq
}

#[test]
fn torn_first_record_of_the_last_segment_removes_that_segment() {
    let dir = tempfile::tempdir().unwrap();
    let seq = three_segments_the_last_with_one_record(dir.path());
    // Segment 2 holds exactly one record; tear it.
    patch_file(&seg_path(dir.path(), 2), |b| b[64 + 40] ^= 0xFF);
    let (mut j, rec) = Journal::open(config(dir.path(), SEG)).unwrap();
    assert_eq!(rec.last_seq, Some(seq - 1));
    let t = rec.truncated_tail.expect("torn tail");
    assert_eq!(
        (t.segment_index, t.offset, t.kind),
        (2, 64, ProblemKind::TornTail)
    );
    assert_eq!(t.segments_removed, vec![seg_path(dir.path(), 2)]);
    assert_eq!(rec.segments, 2);
    j.append(seq, 3, b"redo").unwrap();
    j.close().unwrap();
    let recs = read_all(dir.path());
    assert_records(&recs[..recs.len() - 1], 1, seq - 1);
    assert_eq!(
        (recs.last().unwrap().seq, recs.last().unwrap().segment),
        (seq, 2)
    );
}

#[test]
fn stray_bytes_after_the_end_are_cut() {
    // Payload bytes of a record whose header never landed, far past the end.
    let dir = tempfile::tempdir().unwrap();
    make_journal(dir.path(), SEG, 20);
    let end = read_all(dir.path())
        .last()
        .map(|r| r.offset as usize + 32 + 256)
        .unwrap();
    patch_file(&seg_path(dir.path(), 0), |b| {
        b[end + 1000..end + 1100].fill(0xEE)
    });
    let (_j, rec) = Journal::open(config(dir.path(), SEG)).unwrap();
    assert_eq!(rec.last_seq, Some(20));
    let t = rec.truncated_tail.expect("stray bytes are cut");
    assert_eq!(t.kind, ProblemKind::TornTail);
    assert!(t.offset as usize <= end + 1000);
    let bytes = std::fs::read(seg_path(dir.path(), 0)).unwrap();
    assert!(
        bytes[t.offset as usize..].iter().all(|&b| b == 0),
        "the tail is zero again"
    );
}

#[test]
fn bad_record_followed_by_a_valid_one_is_not_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    make_journal(dir.path(), SEG, 30);
    let recs = read_all(dir.path());
    let victim = &recs[recs.len() - 3];
    let (seg, off) = (victim.segment, victim.offset);
    patch_file(&seg_path(dir.path(), seg), |b| b[off as usize + 9] ^= 0x01);
    match Journal::open(config(dir.path(), SEG)) {
        Err(JournalError::Corrupt {
            segment,
            offset,
            reason,
        }) => {
            assert_eq!(segment, seg_path(dir.path(), seg));
            assert_eq!(offset, off);
            assert!(reason.contains("valid record follows"), "{reason}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    let report = journal::verify(dir.path()).unwrap();
    let p = report.problem.unwrap();
    assert_eq!((p.kind, p.offset), (ProblemKind::Corrupt, off));
    assert_eq!(report.last_seq, Some(victim.seq - 1));
}

/// A torn last record that the opener knows was acknowledged (`keep_through`,
/// a snapshot's seq) is damage: open refuses and leaves every byte as it
/// was; allowed to truncate, it cuts; known only up to the record before,
/// it cuts as any torn tail.
#[test]
fn a_torn_record_known_to_be_acknowledged_is_refused_and_left_alone() {
    let base = tempfile::tempdir().unwrap();
    let n = 300;
    let (segment, rec_off, rec_len) = build(base.path(), n);
    let rec_off = rec_off as usize;
    patch_file(&seg_path(base.path(), segment), |b| {
        b[rec_off + rec_len / 2..rec_off + rec_len].fill(0)
    });
    let before = std::fs::read(seg_path(base.path(), segment)).unwrap();
    let mut known = config(base.path(), SEG);
    known.keep_through = n;
    match Journal::open(known.clone()) {
        Err(JournalError::CutWouldDrop {
            segment: s,
            offset,
            kept,
            keep_through,
            ..
        }) => {
            assert_eq!(s, seg_path(base.path(), segment));
            assert_eq!((offset, kept, keep_through), (rec_off as u64, n - 1, n));
        }
        other => panic!("expected a refusal, got {:?}", other.map(|(_, r)| r)),
    }
    assert_eq!(
        std::fs::read(seg_path(base.path(), segment)).unwrap(),
        before
    );
    let report = journal::verify(base.path()).unwrap();
    assert_eq!(report.problem.map(|p| p.kind), Some(ProblemKind::TornTail));

    for (keep_through, truncate) in [(n, true), (n - 1, false)] {
        let work = tempfile::tempdir().unwrap();
        copy_dir(base.path(), work.path());
        let mut cfg = config(work.path(), SEG);
        cfg.keep_through = keep_through;
        cfg.truncate_on_corruption = truncate;
        let (j, rec) = Journal::open(cfg).unwrap();
        assert_eq!(
            rec.last_seq,
            Some(n - 1),
            "keep {keep_through} truncate {truncate}"
        );
        assert!(rec.truncated_tail.is_some());
        j.close().unwrap();
    }
}

/// The older segments were removed (an operator trimmed them, keeping a
/// snapshot) and the only record of the only segment left is torn. The
/// segment's header still says which seq it was made for, so the journal
/// knows what a cut keeps: through the seq before. Known to be
/// acknowledged only that far, the record is cut as any torn tail and the
/// journal reports the seq its next record must carry; known to be
/// acknowledged itself, it is refused and left alone.
#[test]
fn a_torn_only_record_after_trimmed_segments_keeps_the_seq_before_it() {
    let base = tempfile::tempdir().unwrap();
    let seq = three_segments_the_last_with_one_record(base.path());
    // Trim segments 0 and 1, tear the record of segment 2.
    std::fs::remove_file(seg_path(base.path(), 0)).unwrap();
    std::fs::remove_file(seg_path(base.path(), 1)).unwrap();
    patch_file(&seg_path(base.path(), 2), |b| b[64 + 40] ^= 0xFF);
    let before = std::fs::read(seg_path(base.path(), 2)).unwrap();

    let mut known = config(base.path(), SEG);
    known.keep_through = seq;
    match Journal::open(known) {
        Err(JournalError::CutWouldDrop {
            kept, keep_through, ..
        }) => assert_eq!((kept, keep_through), (seq - 1, seq)),
        other => panic!("expected a refusal, got {:?}", other.map(|(_, r)| r)),
    }
    assert_eq!(std::fs::read(seg_path(base.path(), 2)).unwrap(), before);

    let mut cfg = config(base.path(), SEG);
    cfg.keep_through = seq - 1;
    let (j, rec) = Journal::open(cfg.clone()).unwrap();
    assert_eq!((rec.records, rec.last_seq), (0, None));
    assert_eq!(
        rec.next_seq,
        Some(seq),
        "the seq the next record must carry"
    );
    assert_eq!(rec.end_seq(), seq - 1, "the journal ends at the seq before");
    assert!(rec.truncated_tail.is_some());
    j.close().unwrap();
    // The emptied segment stays: its header is all that says where the
    // journal goes on, for the next open too, and for the next append.
    let (mut j, rec) = Journal::open(cfg).unwrap();
    assert_eq!((rec.records, rec.next_seq), (0, Some(seq)));
    assert!(rec.truncated_tail.is_none() && rec.removed_empty_segment.is_none());
    assert!(matches!(
        j.append(1, 3, b"again"),
        Err(JournalError::OutOfOrder { .. })
    ));
    j.append(seq, 3, b"redo").unwrap();
    j.close().unwrap();
    let recs = read_all(base.path());
    assert_eq!(recs.len(), 1);
    assert_eq!((recs[0].seq, recs[0].segment), (seq, 2));
}

/// A torn tail is named by what is wrong with it (a checksum that fails,
/// or a marker never written) and by how many bytes it spans, up to its
/// last non-zero byte; open cuts exactly those.
#[test]
fn a_torn_tail_names_its_damage_and_its_length() {
    let base = tempfile::tempdir().unwrap();
    let n = 700;
    let (segment, rec_off, rec_len) = build(base.path(), n);
    let rec_off = rec_off as usize;
    let span = format!("({rec_len} bytes up to the last non-zero byte)");
    for (damage, says) in [
        (40, "torn tail: record crc mismatch"),
        (
            0,
            "torn tail: partly written record (its marker is still zero)",
        ),
    ] {
        let work = tempfile::tempdir().unwrap();
        copy_dir(base.path(), work.path());
        patch_file(&seg_path(work.path(), segment), |b| {
            if damage == 0 {
                b[rec_off..rec_off + 4].fill(0)
            } else {
                b[rec_off + damage] ^= 0x10
            }
        });
        let p = journal::verify(work.path()).unwrap().problem.unwrap();
        assert_eq!((p.kind, p.offset), (ProblemKind::TornTail, rec_off as u64));
        assert!(p.reason.starts_with(says), "{}", p.reason);
        assert!(p.reason.ends_with(&span), "{}", p.reason);
        let (_, rec) = Journal::open(config(work.path(), SEG)).unwrap();
        let t = rec.truncated_tail.unwrap();
        assert_eq!(t.reason, p.reason);
        assert_eq!(t.bytes_dropped, rec_len as u64);
        assert_eq!(rec.last_seq, Some(n - 1));
    }
}
