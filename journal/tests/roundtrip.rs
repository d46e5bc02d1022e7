//! Append/read round trips, seeking, reopening and the append contract.

mod common;

use common::*;
use journal::{format, Durability, Journal, JournalError, Reader};

#[test]
fn round_trip_many_varied_records_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    make_journal(dir.path(), SEG, 3000);
    let recs = read_all(dir.path());
    assert_records(&recs, 1, 3000);
    // The journal spans several segments, entered in index order, and every
    // record header sits on a 16-byte boundary after the segment header.
    let last_segment = recs.last().unwrap().segment;
    assert!(
        last_segment >= 5,
        "expected several segments, got {}",
        last_segment + 1
    );
    assert_eq!(segment_count(dir.path()) as u64, last_segment + 1);
    for w in recs.windows(2) {
        assert!(w[1].segment == w[0].segment || w[1].segment == w[0].segment + 1);
        if w[1].segment == w[0].segment {
            assert_eq!(
                w[1].offset,
                w[0].offset + format::record_len(w[0].payload.len()) as u64
            );
        } else {
            assert_eq!(w[1].offset, format::SEGMENT_HEADER_LEN as u64);
        }
    }
    assert!(recs.iter().all(|r| r.offset % 16 == 0 && r.offset >= 64));
    let report = journal::verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(
        (report.records, report.first_seq, report.last_seq),
        (3000, Some(1), Some(3000))
    );
}

#[test]
fn seek_to_every_seq() {
    let dir = tempfile::tempdir().unwrap();
    make_journal(dir.path(), SEG, 1200);
    let mut r = Reader::open(dir.path()).unwrap();
    for seq in 1..=1200u64 {
        r.seek(seq).unwrap();
        let rec = r.next().unwrap().expect("record after seek");
        assert_eq!(rec.seq, seq);
        assert_eq!(rec.payload, &payload(seq, size_for(seq))[..]);
        assert_eq!(rec.payload.as_ptr() as usize % 16, 0);
    }
    // Seeking backwards works too, and reading continues in order from there.
    r.seek(3).unwrap();
    let seqs: Vec<u64> = (0..5).map(|_| r.next().unwrap().unwrap().seq).collect();
    assert_eq!(seqs, vec![3, 4, 5, 6, 7]);
    // Before the first record: start at the first record.
    r.seek(0).unwrap();
    assert_eq!(r.next().unwrap().unwrap().seq, 1);
    // Past the end: nothing yet, then the record once it is appended.
    r.seek(1202).unwrap();
    assert!(r.next().unwrap().is_none());
    let (mut j, _) = Journal::open(config(dir.path(), SEG)).unwrap();
    write_range(&mut j, 1201, 1203);
    let got: Vec<u64> = std::iter::from_fn(|| r.next().unwrap().map(|x| x.seq)).collect();
    assert_eq!(got, vec![1202, 1203]);
}

#[test]
fn journal_starting_at_a_high_seq() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, _) = Journal::open(config(dir.path(), SEG)).unwrap();
    assert!(matches!(
        j.append(0, 1, b"x"),
        Err(JournalError::OutOfOrder {
            expected: 1,
            got: 0
        })
    ));
    write_range(&mut j, 1_000_000, 1_000_400);
    drop(j);
    let recs = read_all(dir.path());
    assert_records(&recs, 1_000_000, 1_000_400);
    let mut r = Reader::open(dir.path()).unwrap();
    r.seek(1_000_300).unwrap();
    assert_eq!(r.next().unwrap().unwrap().seq, 1_000_300);
}

#[test]
fn reopen_continues_the_sequence_and_rejects_wrong_seqs() {
    let dir = tempfile::tempdir().unwrap();
    make_journal(dir.path(), SEG, 10);
    let (mut j, rec) = Journal::open(config(dir.path(), SEG)).unwrap();
    assert_eq!(rec.records, 10);
    assert_eq!(rec.first_seq, Some(1));
    assert_eq!(rec.last_seq, Some(10));
    assert_eq!(rec.truncated_tail, None);
    assert_eq!((rec.next_seq, rec.end_seq()), (Some(11), 10));
    assert_eq!(j.last_seq(), Some(10));
    assert_eq!(j.dir(), dir.path());
    for bad in [12, 10, 1, 0, u64::MAX] {
        match j.append(bad, 1, b"nope") {
            Err(JournalError::OutOfOrder { expected: 11, got }) => assert_eq!(got, bad),
            other => panic!("append({bad}) gave {other:?}"),
        }
    }
    let refused = j.append(12, 1, b"nope").unwrap_err();
    assert!(!refused.is_corruption(), "a caller's mistake, not damage");
    // A rejected append leaves nothing behind.
    assert_eq!(j.last_seq(), Some(10));
    write_range(&mut j, 11, 700);
    j.close().unwrap();
    let (j, rec) = Journal::open(config(dir.path(), SEG)).unwrap();
    assert_eq!((rec.records, rec.last_seq), (700, Some(700)));
    assert_eq!(j.last_seq(), Some(700));
    assert_records(&read_all(dir.path()), 1, 700);
}

#[test]
fn reopen_with_a_different_segment_size_keeps_old_segments() {
    let dir = tempfile::tempdir().unwrap();
    make_journal(dir.path(), SEG, 300);
    let (mut j, _) = Journal::open(config(dir.path(), 2 * SEG)).unwrap();
    write_range(&mut j, 301, 900);
    drop(j);
    assert_records(&read_all(dir.path()), 1, 900);
    assert!(journal::verify(dir.path()).unwrap().is_ok());
}

#[test]
fn record_too_large_is_refused_and_the_largest_fits() {
    let dir = tempfile::tempdir().unwrap();
    let seg = 8192;
    let (mut j, _) = Journal::open(config(dir.path(), seg)).unwrap();
    let max = format::max_payload(seg);
    assert_eq!(max, 8192 - 96);
    match j.append(1, 1, &vec![7u8; max + 1]) {
        Err(JournalError::RecordTooLarge { len, max: m }) => assert_eq!((len, m), (max + 1, max)),
        other => panic!("{other:?}"),
    }
    j.append(1, 1, b"small").unwrap();
    j.append(2, 1, &vec![7u8; max]).unwrap();
    j.append(3, 1, &vec![8u8; max]).unwrap();
    j.append(4, 1, b"").unwrap();
    j.sync().unwrap();
    let mut r = Reader::open(dir.path()).unwrap();
    let sizes: Vec<(u64, usize, u64)> = std::iter::from_fn(|| {
        r.next()
            .unwrap()
            .map(|x| (x.seq, x.payload.len(), x.segment))
    })
    .collect();
    assert_eq!(sizes, vec![(1, 5, 0), (2, max, 1), (3, max, 2), (4, 0, 3)]);
}

#[test]
fn every_durability_policy_writes_a_readable_journal() {
    for durability in [
        Durability::Always,
        Durability::GroupCommit,
        Durability::IntervalMs(5),
        Durability::Never,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(dir.path(), SEG);
        cfg.durability = durability;
        let (mut j, _) = Journal::open(cfg).unwrap();
        assert_eq!(j.durability(), durability);
        for seq in 1..=400 {
            j.append(seq, kind_for(seq), &payload(seq, size_for(seq)))
                .unwrap();
            if seq % 50 == 0 {
                j.commit().unwrap();
            }
        }
        j.sync().unwrap();
        drop(j);
        assert_records(&read_all(dir.path()), 1, 400);
    }
}

#[test]
fn empty_journal_opens_reads_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let jdir = dir.path().join("a/b/journal");
    let (j, rec) = Journal::open(config(&jdir, SEG)).unwrap();
    assert!(jdir.is_dir(), "open creates the directory");
    assert_eq!((rec.records, rec.last_seq, rec.segments), (0, None, 0));
    assert_eq!((rec.next_seq, rec.end_seq()), (None, 0), "a new journal");
    assert_eq!(j.last_seq(), None);
    let mut r = Reader::open(&jdir).unwrap();
    assert!(r.next().unwrap().is_none());
    r.seek(5).unwrap();
    assert!(r.next().unwrap().is_none());
    let report = journal::verify(&jdir).unwrap();
    assert!(report.is_ok());
    assert_eq!((report.segments, report.records), (0, 0));
    assert!(Reader::open(&dir.path().join("missing")).is_err());
}

#[test]
fn bad_segment_size_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    for bytes in [0, 100, 4095, 4097, 10_000] {
        assert!(
            matches!(
                Journal::open(config(dir.path(), bytes)),
                Err(JournalError::Invalid(_))
            ),
            "{bytes}"
        );
    }
    // The unit itself is the smallest segment.
    let (mut j, _) = Journal::open(config(dir.path(), 4096)).unwrap();
    j.append(1, 1, b"smallest").unwrap();
    j.close().unwrap();
    assert_eq!(read_all(dir.path())[0].payload, b"smallest");
}

#[test]
fn empty_last_segment_is_removed_and_recreated() {
    // A crash right after a roll can leave a new segment with no record in it.
    let dir = tempfile::tempdir().unwrap();
    let seg = 8192;
    let (mut j, _) = Journal::open(config(dir.path(), seg)).unwrap();
    let mut seq = 0;
    while segment_count(dir.path()) < 2 {
        seq += 1;
        j.append(seq, 1, &payload(seq, 500)).unwrap();
    }
    j.close().unwrap();
    // Zero the only record of segment 1, as if it never reached the disk.
    patch_file(&seg_path(dir.path(), 1), |b| b[64..64 + 32 + 512].fill(0));
    let (mut j, rec) = Journal::open(config(dir.path(), seg)).unwrap();
    assert_eq!(rec.last_seq, Some(seq - 1));
    assert_eq!(rec.truncated_tail, None);
    assert_eq!(rec.removed_empty_segment, Some(seg_path(dir.path(), 1)));
    assert_eq!(rec.segments, 1);
    assert!(!seg_path(dir.path(), 1).exists());
    j.append(seq, 9, b"again").unwrap();
    j.close().unwrap();
    let recs = read_all(dir.path());
    assert_eq!(recs.last().unwrap().seq, seq);
    assert_eq!(recs.last().unwrap().payload, b"again");
    assert_eq!(recs.last().unwrap().segment, 1);
    assert!(journal::verify(dir.path()).unwrap().is_ok());
}

/// A journal whose only segment lost its first record (the writer died
/// right after creating it, before the record reached the disk) opens as
/// a new journal: the empty segment is removed, and the next append may
/// start it at any seq, as on a journal never written.
#[test]
fn a_journal_whose_only_segment_lost_its_first_record_starts_anew() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, _) = Journal::open(config(dir.path(), SEG)).unwrap();
    j.append(1, 1, &payload(1, 100)).unwrap();
    j.close().unwrap();
    patch_file(&seg_path(dir.path(), 0), |b| b[64..64 + 32 + 112].fill(0));
    let (mut j, rec) = Journal::open(config(dir.path(), SEG)).unwrap();
    assert_eq!(rec.removed_empty_segment, Some(seg_path(dir.path(), 0)));
    assert_eq!((rec.records, rec.segments, rec.last_seq), (0, 0, None));
    assert_eq!(j.last_seq(), None);
    j.append(40, 2, b"a new start").unwrap();
    j.close().unwrap();
    let recs = read_all(dir.path());
    assert_eq!(recs.len(), 1);
    assert_eq!((recs[0].seq, recs[0].segment), (40, 0));
}

/// A seek finds its segment from the headers and reads nothing before
/// it: seeking to the first seq of a segment starts in that segment, so
/// damage in the one before (which a seek one seq earlier meets, named
/// by segment and offset) is never read.
#[test]
fn seek_to_a_segments_first_seq_reads_nothing_before_it() {
    let dir = tempfile::tempdir().unwrap();
    make_journal(dir.path(), SEG, 1200);
    let recs = read_all(dir.path());
    let first_of_2 = recs.iter().find(|r| r.segment == 2).unwrap().clone();
    assert_eq!(first_of_2.offset, format::SEGMENT_HEADER_LEN as u64);
    let last_of_1 = recs.iter().rfind(|r| r.segment == 1).unwrap().clone();
    assert_eq!(last_of_1.seq + 1, first_of_2.seq);
    // Damage the payload of segment 1's last record.
    let at = (last_of_1.offset as usize) + format::RECORD_HEADER_LEN;
    patch_file(&seg_path(dir.path(), 1), |b| b[at] ^= 0x40);
    let mut r = Reader::open(dir.path()).unwrap();
    r.seek(first_of_2.seq).unwrap();
    let rec = r.next().unwrap().expect("the first record of segment 2");
    assert_eq!((rec.seq, rec.segment, rec.offset), (first_of_2.seq, 2, 64));
    assert_eq!(rec.payload, &first_of_2.payload[..]);
    r.seek(last_of_1.seq).unwrap();
    match r.next() {
        Err(JournalError::Corrupt {
            segment, offset, ..
        }) => assert_eq!(
            (segment, offset),
            (seg_path(dir.path(), 1), last_of_1.offset)
        ),
        other => panic!("{other:?}"),
    }
}

/// An empty record may take a segment's last 32 bytes (it fits exactly,
/// leaving no room for a seal): a reader reads it, live and afterwards,
/// then goes on into the next segment; open and verify count it.
#[test]
fn an_empty_record_in_a_segments_last_32_bytes_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let seg = 4096;
    let (mut j, _) = Journal::open(config(dir.path(), seg)).unwrap();
    // 64 + 32 + 3968 = 4064: room for one header only.
    j.append(1, 1, &payload(1, 3968)).unwrap();
    j.commit().unwrap();
    let mut live = Reader::open(dir.path()).unwrap();
    assert_eq!(live.next().unwrap().unwrap().seq, 1);
    assert!(live.next().unwrap().is_none(), "nothing after seq 1 yet");
    j.append(2, 2, b"").unwrap();
    j.commit().unwrap();
    let rec = live.next().unwrap().expect("the empty record at the end");
    assert_eq!(
        (rec.seq, rec.kind, rec.segment, rec.offset),
        (2, 2, 0, 4064)
    );
    assert!(rec.payload.is_empty());
    assert!(live.next().unwrap().is_none());
    j.append(3, 3, b"next").unwrap();
    j.close().unwrap();
    let rec = live.next().unwrap().expect("seq 3 in the next segment");
    assert_eq!((rec.seq, rec.segment, rec.offset), (3, 1, 64));
    let got: Vec<(u64, u64, u64)> = read_all(dir.path())
        .iter()
        .map(|r| (r.seq, r.segment, r.offset))
        .collect();
    assert_eq!(got, vec![(1, 0, 64), (2, 0, 4064), (3, 1, 64)]);
    let report = journal::verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!((report.records, report.last_seq), (3, Some(3)));
    let (j, rec) = Journal::open(config(dir.path(), seg)).unwrap();
    assert_eq!((rec.records, rec.last_seq), (3, Some(3)));
    assert_eq!(j.last_seq(), Some(3));
}

/// A segment a writer was building when it stopped (still under its
/// temporary name) is no segment: readers and verify pass it by, and the
/// next open removes it.
#[test]
fn a_half_built_segment_is_ignored_by_readers_and_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    make_journal(dir.path(), SEG, 10);
    let temp = dir.path().join("00000000000000000007.seg.tmp");
    std::fs::write(&temp, vec![0x5Au8; 1000]).unwrap();
    assert_records(&read_all(dir.path()), 1, 10);
    assert!(journal::verify(dir.path()).unwrap().is_ok());
    let (j, rec) = Journal::open(config(dir.path(), SEG)).unwrap();
    assert_eq!((rec.last_seq, rec.segments), (Some(10), 1));
    assert!(!temp.exists(), "removed at open");
    drop(j);
    assert_records(&read_all(dir.path()), 1, 10);
}
