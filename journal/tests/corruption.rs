//! Damage inside the log: open refuses it naming the spot, or cuts it when
//! asked; verify names the first bad record.

mod common;

use std::fs;
use std::path::Path;

use common::*;
use journal::format::{self, SegmentHeader};
use journal::{Journal, JournalError, ProblemKind, Reader};

const N: u64 = 2000;

/// A journal of N records and the records as read back.
fn setup() -> (tempfile::TempDir, Vec<Owned>) {
    let dir = tempfile::tempdir().unwrap();
    make_journal(dir.path(), SEG, N);
    let recs = read_all(dir.path());
    assert!(recs.last().unwrap().segment >= 3);
    (dir, recs)
}

/// The error a reader stops at, reading the journal from its start; each
/// record read before it goes to `each`. Reaching the end is a failure.
fn reader_error(dir: &Path, mut each: impl FnMut(&journal::Record<'_>)) -> JournalError {
    let mut r = Reader::open(dir).unwrap();
    loop {
        match r.next() {
            Ok(Some(rec)) => each(&rec),
            Ok(None) => panic!("the reader reached the end"),
            Err(e) => return e,
        }
    }
}

/// The record in the middle of segment 1.
fn middle_record(recs: &[Owned]) -> &Owned {
    let in_seg1: Vec<&Owned> = recs.iter().filter(|r| r.segment == 1).collect();
    in_seg1[in_seg1.len() / 2]
}

fn with_truncate(dir: &Path) -> journal::JournalConfig {
    let mut cfg = config(dir, SEG);
    cfg.truncate_on_corruption = true;
    cfg
}

#[test]
fn flipped_bit_in_a_middle_record_fails_open_naming_segment_and_offset() {
    let (dir, recs) = setup();
    let victim = middle_record(&recs).clone();
    // Flip one bit of the payload (or of the header when the payload is empty).
    let at = victim.offset as usize
        + if victim.payload.is_empty() {
            10
        } else {
            32 + victim.payload.len() / 2
        };
    patch_file(&seg_path(dir.path(), 1), |b| b[at] ^= 0x10);

    let err = Journal::open(config(dir.path(), SEG)).unwrap_err();
    match &err {
        JournalError::Corrupt {
            segment,
            offset,
            reason,
        } => {
            assert_eq!(segment, &seg_path(dir.path(), 1));
            assert_eq!(*offset, victim.offset);
            assert!(reason.contains("crc") || reason.contains("seq"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(err.is_corruption());
    let msg = err.to_string();
    assert!(
        msg.contains("00000000000000000001.seg") && msg.contains(&victim.offset.to_string()),
        "{msg}"
    );

    let report = journal::verify(dir.path()).unwrap();
    assert!(!report.is_ok());
    let p = report.problem.clone().unwrap();
    assert_eq!(
        (p.kind, p.segment_index, p.offset),
        (ProblemKind::Corrupt, 1, victim.offset)
    );
    assert_eq!(p.segment, seg_path(dir.path(), 1));
    assert_eq!(report.last_seq, Some(victim.seq - 1));
    assert_eq!(report.records, victim.seq - 1);

    // A reader stops at the same spot with the same error.
    let mut last = 0;
    let err = reader_error(dir.path(), |rec| last = rec.seq);
    assert_eq!(last, victim.seq - 1);
    assert!(matches!(err, JournalError::Corrupt { offset, .. } if offset == victim.offset));

    // With truncate_on_corruption the journal is cut there and reopened.
    let (j, rec) = Journal::open(with_truncate(dir.path())).unwrap();
    assert_eq!(rec.last_seq, Some(victim.seq - 1));
    assert_eq!(rec.records, victim.seq - 1);
    let t = rec.truncated_tail.expect("cut reported");
    assert_eq!(
        (t.segment_index, t.offset, t.kind),
        (1, victim.offset, ProblemKind::Corrupt)
    );
    let later: Vec<_> = (2..=recs.last().unwrap().segment)
        .map(|i| seg_path(dir.path(), i))
        .collect();
    assert_eq!(t.segments_removed, later);
    assert!(later.iter().all(|p| !p.exists()));
    assert_eq!(rec.segments, 2);
    goes_on(dir.path(), j, victim.seq, victim.seq + 500);
}

#[test]
fn bit_flip_anywhere_in_a_middle_segment_header_or_record_is_caught() {
    let (dir, recs) = setup();
    let victim = middle_record(&recs).clone();
    let len = format::record_len(victim.payload.len()).min(32 + victim.payload.len());
    // Every bit of the record (header and payload; padding is not data).
    for byte in 0..len {
        for bit in [0, 3, 7] {
            let work = tempfile::tempdir().unwrap();
            copy_dir(dir.path(), work.path());
            patch_file(&seg_path(work.path(), 1), |b| {
                b[victim.offset as usize + byte] ^= 1 << bit
            });
            let err = Journal::open(config(work.path(), SEG)).unwrap_err();
            match err {
                JournalError::Corrupt { offset, .. } | JournalError::SeqGap { offset, .. } => {
                    assert_eq!(offset, victim.offset, "byte {byte} bit {bit}")
                }
                other => panic!("byte {byte} bit {bit}: {other:?}"),
            }
        }
    }
    // Every byte of the segment header.
    for byte in 0..64 {
        let work = tempfile::tempdir().unwrap();
        copy_dir(dir.path(), work.path());
        patch_file(&seg_path(work.path(), 1), |b| b[byte] ^= 0x04);
        match Journal::open(config(work.path(), SEG)).unwrap_err() {
            JournalError::Corrupt {
                segment, offset: 0, ..
            } => assert_eq!(segment, seg_path(work.path(), 1)),
            other => panic!("header byte {byte}: {other:?}"),
        }
        let p = journal::verify(work.path()).unwrap().problem.unwrap();
        assert_eq!(
            (p.kind, p.segment_index, p.offset),
            (ProblemKind::BadSegmentHeader, 1, 0)
        );
    }
}

/// Rewrites the header of segment `index` with `edit` applied to its
/// bytes, its checksum made to match again (a header written by another
/// build or another tool, not a bit flip).
fn rewrite_header(dir: &Path, index: u64, edit: impl FnOnce(&mut [u8])) {
    patch_file(&seg_path(dir, index), |b| {
        edit(&mut b[..64]);
        let crc = crc32fast::hash(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
    });
}

/// The offset of segment `index`'s seal, just after its last record, when
/// the segment has room for one.
fn seal_offset(recs: &[Owned], index: u64) -> Option<u64> {
    let last = recs.iter().rfind(|r| r.segment == index)?;
    let seal = last.offset
        + (format::RECORD_HEADER_LEN + last.payload.len()).next_multiple_of(format::RECORD_ALIGN)
            as u64;
    (seal + format::RECORD_HEADER_LEN as u64 <= SEG).then_some(seal)
}

/// A segment written in another format version (its header whole, its
/// checksum good) is refused at its header, naming the version, by open,
/// verify and a reader alike: this build never reads records laid out in
/// a format it does not know.
#[test]
fn a_segment_of_another_format_version_is_refused_at_its_header() {
    let (dir, _) = setup();
    rewrite_header(dir.path(), 1, |h| {
        h[8..12].copy_from_slice(&2u32.to_le_bytes())
    });
    let path = seg_path(dir.path(), 1);
    match Journal::open(config(dir.path(), SEG)).unwrap_err() {
        JournalError::Corrupt {
            segment,
            offset,
            reason,
        } => {
            assert_eq!((segment, offset), (path.clone(), 0));
            assert!(reason.contains("format version 2"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let p = journal::verify(dir.path()).unwrap().problem.unwrap();
    assert_eq!(
        (p.kind, p.segment_index, p.offset),
        (ProblemKind::BadSegmentHeader, 1, 0)
    );
    let err = reader_error(dir.path(), |rec| {
        assert_eq!(rec.segment, 0, "a record of segment 1 was read")
    });
    assert!(
        matches!(&err, JournalError::Corrupt { segment, offset: 0, .. } if *segment == path),
        "{err:?}"
    );
}

/// A segment whose header names another index than its file name (a
/// segment copied or renamed by hand), its seqs following on all the same,
/// is damage at its header: verify names it and open refuses, instead of
/// taking the file for the segment it is not.
#[test]
fn a_segment_whose_header_names_another_index_is_damage_at_its_header() {
    let (dir, _) = setup();
    rewrite_header(dir.path(), 1, |h| {
        h[16..24].copy_from_slice(&7u64.to_le_bytes())
    });
    let path = seg_path(dir.path(), 1);
    let p = journal::verify(dir.path())
        .unwrap()
        .problem
        .expect("a problem");
    assert_eq!(
        (p.kind, p.segment_index, p.offset),
        (ProblemKind::BadSegmentHeader, 1, 0)
    );
    assert!(p.reason.contains("index 7"), "{}", p.reason);
    match Journal::open(config(dir.path(), SEG)).unwrap_err() {
        JournalError::Corrupt {
            segment, offset, ..
        } => assert_eq!((segment, offset), (path, 0)),
        other => panic!("{other:?}"),
    }
}

/// A reader refuses a sealed segment that was cut after its seal (shorter
/// than its header says), as open does: it never reads on as if the file
/// were whole.
#[test]
fn a_reader_refuses_a_segment_cut_after_its_seal() {
    let (dir, recs) = setup();
    let (segment, seal) = (0..recs.last().unwrap().segment)
        .find_map(|segment| {
            let seal = seal_offset(&recs, segment).filter(|&seal| seal + 64 < SEG)?;
            Some((segment, seal))
        })
        .expect("a segment with room after its seal");
    let path = seg_path(dir.path(), segment);
    cut_file(&path, seal + format::RECORD_HEADER_LEN as u64 + 16);
    let err = reader_error(dir.path(), |rec| {
        assert!(rec.segment < segment, "a record of the cut one was read")
    });
    assert!(
        matches!(&err, JournalError::Corrupt { segment, offset: 0, .. } if *segment == path),
        "{err:?}"
    );
}

/// A segment that is not the last but lost its seal (zeros where the
/// seal was, every record whole) is damage named at the seal's place by
/// verify and open, and a reader reports it there instead of taking it
/// for the end of the journal (a replay would stop there and show an
/// older state as the latest).
#[test]
fn a_middle_segment_that_lost_its_seal_is_damage_for_open_and_readers() {
    let (dir, recs) = setup();
    let seal = seal_offset(&recs, 0).expect("segment 0 has a seal");
    let path = seg_path(dir.path(), 0);
    patch_file(&path, |b| {
        let at = seal as usize;
        assert_eq!(&b[at..at + 4], b"SEAL");
        b[at..at + format::RECORD_HEADER_LEN].fill(0);
    });
    let last_in_0 = recs.iter().rfind(|r| r.segment == 0).unwrap().seq;
    let report = journal::verify(dir.path()).unwrap();
    let p = report.problem.clone().expect("a problem");
    assert_eq!(
        (p.kind, p.segment_index, p.offset),
        (ProblemKind::Corrupt, 0, seal)
    );
    assert!(p.reason.contains("without a seal"), "{}", p.reason);
    assert_eq!(report.last_seq, Some(last_in_0));
    match Journal::open(config(dir.path(), SEG)).unwrap_err() {
        JournalError::Corrupt {
            segment, offset, ..
        } => assert_eq!((segment, offset), (path.clone(), seal)),
        other => panic!("{other:?}"),
    }
    let err = reader_error(dir.path(), |_| {});
    match err {
        JournalError::Corrupt {
            segment, offset, ..
        } => assert_eq!((segment, offset), (path, seal)),
        other => panic!("{other:?}"),
    }
}

/// A segment file longer than its header says (grown by hand or by a
/// tool) is damage at its header: verify names it and open refuses, as
/// readers do, instead of a venue that starts on a journal its replays
/// and tools then cannot read.
#[test]
fn a_segment_file_longer_than_its_header_says_is_damage_at_its_header() {
    let (dir, _) = setup();
    let path = seg_path(dir.path(), 1);
    cut_file(&path, SEG + 4096);
    let p = journal::verify(dir.path())
        .unwrap()
        .problem
        .expect("a problem");
    assert_eq!(
        (p.kind, p.segment_index, p.offset),
        (ProblemKind::BadSegmentHeader, 1, 0)
    );
    match Journal::open(config(dir.path(), SEG)).unwrap_err() {
        JournalError::Corrupt {
            segment, offset, ..
        } => assert_eq!((segment, offset), (path.clone(), 0)),
        other => panic!("{other:?}"),
    }
    assert_eq!(fs::metadata(&path).unwrap().len(), SEG + 4096, "unchanged");
}

#[test]
fn missing_middle_segment_is_an_error_or_a_cut() {
    let (dir, recs) = setup();
    fs::remove_file(seg_path(dir.path(), 1)).unwrap();
    match Journal::open(config(dir.path(), SEG)).unwrap_err() {
        JournalError::MissingSegment { expected, found } => {
            assert_eq!(expected, seg_path(dir.path(), 1));
            assert_eq!(found, seg_path(dir.path(), 2));
        }
        other => panic!("{other:?}"),
    }
    let report = journal::verify(dir.path()).unwrap();
    let p = report.problem.unwrap();
    assert_eq!((p.kind, p.segment_index), (ProblemKind::MissingSegment, 1));
    let last_in_0 = recs
        .iter()
        .filter(|r| r.segment == 0)
        .map(|r| r.seq)
        .max()
        .unwrap();
    assert_eq!(report.last_seq, Some(last_in_0));
    // A reader reaches the end of segment 0 and then reports the gap.
    let err = reader_error(dir.path(), |_| {});
    assert!(
        matches!(err, JournalError::MissingSegment { .. }),
        "{err:?}"
    );

    let (j, rec) = Journal::open(with_truncate(dir.path())).unwrap();
    assert_eq!(rec.last_seq, Some(last_in_0));
    let t = rec.truncated_tail.unwrap();
    assert_eq!(t.kind, ProblemKind::MissingSegment);
    assert_eq!(t.segments_removed.first(), Some(&seg_path(dir.path(), 2)));
    assert_eq!(segment_count(dir.path()), 1);
    goes_on(dir.path(), j, last_in_0 + 1, last_in_0 + 10);
    assert!(
        seg_path(dir.path(), 1).exists(),
        "the next segment takes the missing index"
    );
}

#[test]
fn seq_gap_between_segments_is_an_error() {
    let (dir, recs) = setup();
    // Rewrite segment 2's header as if it started five seqs later.
    let path = seg_path(dir.path(), 2);
    let first_in_2 = recs.iter().find(|r| r.segment == 2).unwrap().seq;
    patch_file(&path, |b| {
        let h = SegmentHeader::decode(&b[..64]).unwrap();
        assert_eq!(h.first_seq, first_in_2);
        let h2 = SegmentHeader {
            first_seq: h.first_seq + 5,
            ..h
        };
        b[..64].copy_from_slice(&h2.encode());
    });
    match Journal::open(config(dir.path(), SEG)).unwrap_err() {
        JournalError::SeqGap {
            segment,
            offset,
            expected,
            found,
        } => {
            assert_eq!((segment, offset), (path.clone(), 0));
            assert_eq!((expected, found), (first_in_2, first_in_2 + 5));
        }
        other => panic!("{other:?}"),
    }
    let p = journal::verify(dir.path()).unwrap().problem.unwrap();
    assert_eq!(
        p.kind,
        ProblemKind::SeqGap {
            expected: first_in_2,
            found: first_in_2 + 5
        }
    );
    let (_j, rec) = Journal::open(with_truncate(dir.path())).unwrap();
    assert_eq!(rec.last_seq, Some(first_in_2 - 1));
    assert!(!path.exists());
}

/// A segment whose header starts at another seq than the records before
/// it end (its records following on all the same) stops a reader there,
/// at the header, as it stops open: readers (replay, the tools) never
/// read on through a journal that open refuses.
#[test]
fn a_reader_stops_at_a_segment_header_that_breaks_the_seqs() {
    let (dir, recs) = setup();
    let first_in_2 = recs.iter().find(|r| r.segment == 2).unwrap().seq;
    rewrite_header(dir.path(), 2, |h| {
        h[24..32].copy_from_slice(&(first_in_2 + 5).to_le_bytes())
    });
    let err = reader_error(dir.path(), |rec| {
        assert!(rec.segment < 2, "seq {} of segment 2 was read", rec.seq)
    });
    match err {
        JournalError::SeqGap {
            segment,
            offset,
            expected,
            found,
        } => {
            assert_eq!((segment, offset), (seg_path(dir.path(), 2), 0));
            assert_eq!((expected, found), (first_in_2, first_in_2 + 5));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn seq_gap_inside_a_segment_with_valid_crcs_is_an_error() {
    let (dir, recs) = setup();
    let victim = middle_record(&recs).clone();
    // Re-encode the record with a later seq and a matching checksum: only
    // the continuity check can catch it.
    patch_file(&seg_path(dir.path(), 1), |b| {
        let off = victim.offset as usize;
        let h = format::encode_record_header(
            format::RECORD_MARKER,
            victim.seq + 3,
            victim.kind,
            &victim.payload,
        );
        b[off..off + 32].copy_from_slice(&h);
    });
    match Journal::open(config(dir.path(), SEG)).unwrap_err() {
        JournalError::SeqGap {
            segment,
            offset,
            expected,
            found,
        } => {
            assert_eq!(segment, seg_path(dir.path(), 1));
            assert_eq!(offset, victim.offset);
            assert_eq!((expected, found), (victim.seq, victim.seq + 3));
        }
        other => panic!("{other:?}"),
    }
    let mut r = Reader::open(dir.path()).unwrap();
    r.seek(victim.seq - 1).unwrap();
    assert_eq!(r.next().unwrap().unwrap().seq, victim.seq - 1);
    assert!(matches!(r.next(), Err(JournalError::SeqGap { .. })));

    // The file cut short after the gap as well: the gap, met first, keeps
    // its kind and place for verify and open.
    let later = recs.iter().find(|r| r.seq == victim.seq + 2).unwrap();
    assert_eq!(later.segment, 1);
    cut_file(&seg_path(dir.path(), 1), later.offset + 37);
    let p = journal::verify(dir.path()).unwrap().problem.unwrap();
    let gap = ProblemKind::SeqGap {
        expected: victim.seq,
        found: victim.seq + 3,
    };
    assert_eq!((p.segment_index, p.offset, p.kind), (1, victim.offset, gap));
    match Journal::open(config(dir.path(), SEG)).unwrap_err() {
        JournalError::SeqGap {
            offset,
            expected,
            found,
            ..
        } => assert_eq!(
            (offset, expected, found),
            (victim.offset, victim.seq, victim.seq + 3)
        ),
        other => panic!("{other:?}"),
    }
}

/// A segment file cut short (segments are made whole and never shrunk,
/// so only damage or a hand does that), in the middle of the journal or at
/// its end: it is never mapped past its end; the damage is named where its
/// whole records end, not at its header, and a cut there keeps them (it
/// dropped the whole segment) and makes the file whole again, so that the
/// writer goes on in it.
#[test]
fn a_segment_file_cut_short_keeps_its_whole_records() {
    for middle in [true, false] {
        let (dir, recs) = setup();
        let segment = if middle {
            1
        } else {
            recs.last().unwrap().segment
        };
        let path = seg_path(dir.path(), segment);
        let in_it: Vec<&Owned> = recs.iter().filter(|r| r.segment == segment).collect();
        // Cut inside a record halfway through, at a length no record
        // boundary has (the trial's `truncate -s 278628`).
        let victim = in_it[in_it.len() / 2];
        let cut_len = victim.offset + 37;
        cut_file(&path, cut_len);
        match Journal::open(config(dir.path(), SEG)).unwrap_err() {
            JournalError::Corrupt {
                segment: at,
                offset,
                reason,
            } => {
                assert_eq!((at, offset), (path.clone(), victim.offset));
                assert!(reason.contains("cut short"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        let report = journal::verify(dir.path()).unwrap();
        let p = report.problem.clone().unwrap();
        assert_eq!((p.segment_index, p.offset), (segment, victim.offset));
        assert_eq!(report.last_seq, Some(victim.seq - 1), "{report:?}");

        let (j, rec) = Journal::open(with_truncate(dir.path())).unwrap();
        assert_eq!(rec.last_seq, Some(victim.seq - 1));
        let t = rec.truncated_tail.unwrap();
        assert_eq!((t.segment_index, t.offset), (segment, victim.offset));
        assert_eq!(fs::metadata(&path).unwrap().len(), SEG, "made whole");
        goes_on(dir.path(), j, victim.seq, victim.seq + 50);
    }
}

/// A middle segment cut after its seal (every record whole): readers
/// refuse a file shorter than its header says, so it is damage too, named
/// at the seal, of its own kind; the repair writes the file back to its
/// length and loses nothing, the later segments included (it cut them).
#[test]
fn a_segment_cut_after_its_seal_is_made_whole_losing_nothing() {
    let (dir, recs) = setup();
    // A sealed segment with room after its seal for a cut.
    let (segment, last, seal) = (0..recs.last().unwrap().segment)
        .find_map(|segment| {
            let last = recs.iter().rfind(|r| r.segment == segment)?.clone();
            let seal = last.offset
                + (format::RECORD_HEADER_LEN + last.payload.len())
                    .next_multiple_of(format::RECORD_ALIGN) as u64;
            (seal + 64 < SEG).then_some((segment, last, seal))
        })
        .expect("a segment with room after its seal");
    let cut_len = seal + format::RECORD_HEADER_LEN as u64 + 5;
    let path = seg_path(dir.path(), segment);
    cut_file(&path, cut_len);
    let report = journal::verify(dir.path()).unwrap();
    let p = report.problem.clone().expect("a problem");
    assert_eq!((p.segment_index, p.offset), (segment, seal), "{p:?}");
    assert_eq!(p.kind, ProblemKind::CutAfterSeal);
    assert!(p.reason.contains("after its seal"), "{}", p.reason);
    assert_eq!(report.last_seq, Some(last.seq), "{report:?}");
    match Journal::open(config(dir.path(), SEG)).unwrap_err() {
        JournalError::CutAfterSeal {
            segment: at,
            offset,
            ..
        } => {
            assert_eq!((at, offset), (path.clone(), seal));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        fs::metadata(&path).unwrap().len(),
        cut_len,
        "nothing changed"
    );
    let segments = segment_count(dir.path());
    let (j, rec) = Journal::open(with_truncate(dir.path())).unwrap();
    let n = recs.last().unwrap().seq;
    assert_eq!(rec.last_seq, Some(n), "every record kept");
    let t = rec.truncated_tail.unwrap();
    assert_eq!(
        (t.kind, t.segment_index, t.offset),
        (ProblemKind::CutAfterSeal, segment, seal)
    );
    assert_eq!((t.bytes_dropped, t.segments_removed.len()), (0, 0));
    assert_eq!(fs::metadata(&path).unwrap().len(), SEG, "made whole");
    assert_eq!(segment_count(dir.path()), segments);
    goes_on(dir.path(), j, n + 1, n + 20);
}

/// Two segments cut after their seals, and the last one cut in a record:
/// the repair makes both whole and cuts the last at its damage only.
#[test]
fn segments_cut_after_their_seals_and_damage_after_them_are_each_repaired() {
    let (dir, recs) = setup();
    let last_segment = recs.last().unwrap().segment;
    let sealed: Vec<(u64, u64)> = (0..last_segment)
        .filter_map(|segment| {
            let last = recs.iter().rfind(|r| r.segment == segment)?;
            let seal = last.offset
                + (format::RECORD_HEADER_LEN + last.payload.len())
                    .next_multiple_of(format::RECORD_ALIGN) as u64;
            (seal + 64 < SEG).then_some((segment, seal))
        })
        .take(2)
        .collect();
    assert_eq!(sealed.len(), 2, "two segments with room after their seals");
    for &(segment, seal) in &sealed {
        cut_file(&seg_path(dir.path(), segment), seal + 48);
    }
    let in_last: Vec<&Owned> = recs.iter().filter(|r| r.segment == last_segment).collect();
    let victim = in_last[in_last.len() / 2];
    cut_file(&seg_path(dir.path(), last_segment), victim.offset + 37);
    let (j, rec) = Journal::open(with_truncate(dir.path())).unwrap();
    assert_eq!(rec.last_seq, Some(victim.seq - 1));
    let t = rec.truncated_tail.unwrap();
    assert_eq!(
        (t.kind, t.segment_index, t.offset),
        (ProblemKind::Corrupt, last_segment, victim.offset)
    );
    for &(segment, _) in &sealed {
        assert_eq!(
            fs::metadata(seg_path(dir.path(), segment)).unwrap().len(),
            SEG
        );
    }
    goes_on(dir.path(), j, victim.seq, victim.seq + 20);
}

#[test]
fn truncate_after_cuts_at_a_record() {
    let (dir, recs) = setup();
    let victim = middle_record(&recs).clone();
    let t = journal::truncate_after(dir.path(), 1, victim.offset).unwrap();
    assert_eq!((t.segment_index, t.offset), (1, victim.offset));
    assert!(t.bytes_dropped > 0);
    let report = journal::verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.last_seq, Some(victim.seq - 1));
    assert!(
        journal::truncate_after(dir.path(), 1, 7).is_err(),
        "not a record boundary"
    );
    assert!(
        journal::truncate_after(dir.path(), 99, 64).is_err(),
        "no such segment"
    );
    // Offset 0 drops the whole segment.
    journal::truncate_after(dir.path(), 1, 0).unwrap();
    assert_eq!(segment_count(dir.path()), 1);
    assert!(journal::verify(dir.path()).unwrap().is_ok());
}

#[test]
fn verify_on_a_good_journal() {
    let (dir, recs) = setup();
    let report = journal::verify(dir.path()).unwrap();
    assert!(report.is_ok());
    assert_eq!(report.records, N);
    assert_eq!((report.first_seq, report.last_seq), (Some(1), Some(N)));
    assert_eq!(report.segments, recs.last().unwrap().segment + 1);
    assert!(journal::verify(&dir.path().join("nope")).is_err());
}

/// A segment that goes away after a reader chose it (a seek found it by
/// its header, then it was removed) is a missing segment naming the next
/// one present, also when a name is still listed but leads nowhere (a
/// dangling link); with nothing after it the reader is at the end.
#[test]
fn a_segment_removed_under_a_reader_is_missing_naming_the_next_one() {
    let (dir, recs) = setup();
    let first_of_2 = recs.iter().find(|r| r.segment == 2).unwrap().seq;
    let last = recs.last().unwrap();
    let mut r = Reader::open(dir.path()).unwrap();
    r.seek(first_of_2).unwrap();
    let mut dangling = Reader::open(dir.path()).unwrap();
    dangling.seek(first_of_2).unwrap();
    let mut at_end = Reader::open(dir.path()).unwrap();
    at_end.seek(last.seq).unwrap();
    fs::remove_file(seg_path(dir.path(), 2)).unwrap();
    let missing = |r: &mut Reader| match r.next() {
        Err(JournalError::MissingSegment { expected, found }) => (expected, found),
        other => panic!("{other:?}"),
    };
    let want = (seg_path(dir.path(), 2), seg_path(dir.path(), 3));
    assert_eq!(missing(&mut r), want);
    std::os::unix::fs::symlink(dir.path().join("gone"), seg_path(dir.path(), 2)).unwrap();
    assert_eq!(missing(&mut dangling), want);
    for index in last.segment..=last.segment + 1 {
        let _ = fs::remove_file(seg_path(dir.path(), index));
    }
    assert!(at_end.next().unwrap().is_none());
}

/// A segment that cannot be opened for another reason than its absence
/// (here a link that loops) is an I/O error naming it: a reader never
/// takes it for a missing segment, nor the journal for empty.
#[test]
fn a_segment_that_cannot_be_opened_is_an_io_error_not_an_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = seg_path(dir.path(), 0);
    std::os::unix::fs::symlink(&path, &path).unwrap();
    let mut r = Reader::open(dir.path()).unwrap();
    match r.next() {
        Err(JournalError::Io { context, .. }) => {
            assert!(context.contains(&path.display().to_string()), "{context}")
        }
        other => panic!("{other:?}"),
    }
    make_journal(&dir.path().join("other"), SEG, 1);
    fs::copy(
        seg_path(&dir.path().join("other"), 0),
        seg_path(dir.path(), 1),
    )
    .unwrap();
    match r.next() {
        Err(JournalError::Io { context, .. }) => {
            assert!(context.contains(&path.display().to_string()), "{context}")
        }
        other => panic!("{other:?}"),
    }
}

/// A segment file cut to less than a segment header, or to the header
/// alone, is damage at its offset 0 for a reader, which says which: a
/// length no segment has, or a header that names another length.
#[test]
fn a_reader_names_a_segment_cut_to_its_header_or_less() {
    let (dir, recs) = setup();
    let path = seg_path(dir.path(), 1);
    let saved = fs::read(&path).unwrap();
    for (len, says) in [
        (
            16,
            "segment file length 16 is not a valid segment size".to_string(),
        ),
        (
            48,
            "segment file length 48 is not a valid segment size".to_string(),
        ),
        (
            100,
            "segment file length 100 is not a valid segment size".to_string(),
        ),
        (
            64,
            format!("header (index 1, {SEG} bytes) disagrees with the file (index 1, 64 bytes)"),
        ),
    ] {
        fs::write(&path, &saved[..len]).unwrap();
        if len < 64 {
            // A seek, which reads the headers, names it too.
            match Reader::open(dir.path()).unwrap().seek(1) {
                Err(JournalError::Corrupt {
                    segment,
                    offset: 0,
                    reason,
                }) => {
                    assert_eq!(segment, path);
                    assert_eq!(reason, "file is shorter than the segment header");
                }
                other => panic!("{len}: {other:?}"),
            }
        }
        let err = reader_error(dir.path(), |rec| assert_eq!(rec.segment, 0));
        match err {
            JournalError::Corrupt {
                segment,
                offset,
                reason,
            } => {
                assert_eq!((segment, offset), (path.clone(), 0), "{len}");
                assert_eq!(reason, says, "{len}");
            }
            other => panic!("{len}: {other:?}"),
        }
    }
    assert!(recs.iter().any(|r| r.segment == 1));
}

/// A segment file cut to less than a segment header has no header to
/// read: verify and open name it at offset 0. One cut to its header
/// alone still has it: it is cut short where its records would start,
/// named there, and a cut there loses only the later segments.
#[test]
fn a_segment_cut_to_its_header_or_less_is_named_by_open_and_verify() {
    let (dir, recs) = setup();
    let path = seg_path(dir.path(), 1);
    let saved = fs::read(&path).unwrap();
    let last_in_0 = recs.iter().rfind(|r| r.segment == 0).unwrap().seq;
    fs::write(&path, &saved[..40]).unwrap();
    let report = journal::verify(dir.path()).unwrap();
    let p = report.problem.unwrap();
    assert_eq!(
        (p.segment_index, p.offset, p.kind),
        (1, 0, ProblemKind::BadSegmentHeader)
    );
    let says = "file is 40 bytes, shorter than the 64-byte segment header";
    assert_eq!(p.reason, says);
    assert_eq!(report.last_seq, Some(last_in_0));
    match Journal::open(config(dir.path(), SEG)).unwrap_err() {
        JournalError::Corrupt {
            segment,
            offset,
            reason,
        } => assert_eq!((segment, offset, reason.as_str()), (path.clone(), 0, says)),
        other => panic!("{other:?}"),
    }

    fs::write(&path, &saved[..64]).unwrap();
    let report = journal::verify(dir.path()).unwrap();
    let p = report.problem.unwrap();
    assert_eq!(
        (p.segment_index, p.offset, p.kind),
        (1, 64, ProblemKind::Corrupt)
    );
    assert!(
        p.reason
            .contains(&format!("the file is cut short: 64 of the {SEG} bytes")),
        "{}",
        p.reason
    );
    assert_eq!(report.last_seq, Some(last_in_0));
    let (j, rec) = Journal::open(with_truncate(dir.path())).unwrap();
    let t = rec.truncated_tail.unwrap();
    assert_eq!((t.segment_index, t.offset), (1, 64));
    assert_eq!(t.segments_removed.first(), Some(&seg_path(dir.path(), 2)));
    assert_eq!(rec.last_seq, Some(last_in_0));
    // Kept by the cut, it holds no record: the last segment, empty, goes
    // as after a crash at its roll, and the next append makes it again.
    assert_eq!(t.segments_removed.last(), Some(&path));
    assert!(!path.exists());
    goes_on(dir.path(), j, last_in_0 + 1, last_in_0 + 50);
    assert_eq!(fs::metadata(&path).unwrap().len(), SEG);
}

/// The seal of a segment that is not the last, damaged (its checksum
/// fails), is damage inside the log named at the seal: nothing valid
/// follows it in its segment, but later segments do, so it is never taken
/// for a torn tail and cut with every later segment.
#[test]
fn a_damaged_seal_of_a_middle_segment_is_damage_not_a_torn_tail() {
    let (dir, recs) = setup();
    let seal = seal_offset(&recs, 0).expect("segment 0 has a seal");
    let path = seg_path(dir.path(), 0);
    patch_file(&path, |b| b[seal as usize + 8] ^= 0x01);
    let before = segment_count(dir.path());
    let p = journal::verify(dir.path()).unwrap().problem.unwrap();
    assert_eq!(
        (p.kind, p.segment_index, p.offset),
        (ProblemKind::Corrupt, 0, seal)
    );
    assert!(p.reason.starts_with("record crc mismatch"), "{}", p.reason);
    match Journal::open(config(dir.path(), SEG)).unwrap_err() {
        JournalError::Corrupt {
            segment,
            offset,
            reason,
        } => {
            assert_eq!((segment, offset), (path.clone(), seal));
            assert_eq!(reason, p.reason);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(segment_count(dir.path()), before, "nothing was cut");
}

/// `truncate_after` cuts only at a record boundary inside the file: an
/// offset inside the segment header, off the 16-byte grid or past the
/// file's end is refused, naming the offset, and changes nothing. At the
/// file's end it keeps the whole segment and drops the later ones.
#[test]
fn truncate_after_refuses_offsets_that_are_not_record_boundaries_in_the_file() {
    let (dir, recs) = setup();
    let victim = middle_record(&recs).clone();
    let before = fs::read(seg_path(dir.path(), 1)).unwrap();
    for offset in [32, victim.offset + 8, SEG + 16] {
        match journal::truncate_after(dir.path(), 1, offset) {
            Err(JournalError::Invalid(why)) => assert!(
                why.contains(&format!("at offset {offset}: not a record boundary")),
                "{why}"
            ),
            other => panic!("{offset}: {other:?}"),
        }
        assert_eq!(fs::read(seg_path(dir.path(), 1)).unwrap(), before);
    }
    assert!(journal::verify(dir.path()).unwrap().is_ok());
    let segments = segment_count(dir.path()) as u64;
    let t = journal::truncate_after(dir.path(), 1, SEG).unwrap();
    assert_eq!(t.bytes_dropped, 0);
    assert_eq!(
        t.segments_removed,
        (2..segments)
            .map(|i| seg_path(dir.path(), i))
            .collect::<Vec<_>>()
    );
    assert_eq!(fs::read(seg_path(dir.path(), 1)).unwrap(), before);
    let report = journal::verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report:?}");
    let last_in_1 = recs.iter().rfind(|r| r.segment == 1).unwrap().seq;
    assert_eq!(report.last_seq, Some(last_in_1));
}
