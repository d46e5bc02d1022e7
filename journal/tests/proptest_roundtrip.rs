//! Property: whatever the payload sizes and segment size, what is appended
//! is read back unchanged, aligned, in order, after a reopen, and seekable.

mod common;

use common::*;
use journal::{Journal, Reader};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn round_trip_random_payloads(
        sizes in prop::collection::vec(0usize..6000, 1..150),
        seg_pages in 2u64..8,
        first in 1u64..1_000_000,
        seek_pick in any::<prop::sample::Index>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let seg = seg_pages * 4096;
        let max = journal::format::max_payload(seg);
        let (mut j, _) = Journal::open(config(dir.path(), seg)).unwrap();
        let mut written = Vec::new();
        let mut seq = first;
        for (i, &len) in sizes.iter().enumerate() {
            let len = len.min(max);
            let bytes = payload(seq ^ i as u64, len);
            j.append(seq, (i % 65536) as u16, &bytes).unwrap();
            written.push((seq, (i % 65536) as u16, bytes));
            seq += 1;
            // Reopen now and then, so appends continue across recoveries.
            if i % 37 == 36 {
                j.close().unwrap();
                let (j2, rec) = Journal::open(config(dir.path(), seg)).unwrap();
                prop_assert_eq!(rec.records, written.len() as u64);
                prop_assert!(rec.truncated_tail.is_none());
                j = j2;
            }
        }
        j.close().unwrap();

        let (_j, rec) = Journal::open(config(dir.path(), seg)).unwrap();
        prop_assert_eq!(rec.last_seq, Some(seq - 1));
        let mut r = Reader::open(dir.path()).unwrap();
        for (s, k, bytes) in &written {
            let got = r.next().unwrap().expect("record");
            prop_assert_eq!(got.seq, *s);
            prop_assert_eq!(got.kind, *k);
            prop_assert_eq!(got.payload, &bytes[..]);
            prop_assert_eq!(got.payload.as_ptr() as usize % 16, 0);
        }
        prop_assert!(r.next().unwrap().is_none());
        let target = &written[seek_pick.index(written.len())];
        r.seek(target.0).unwrap();
        prop_assert_eq!(r.next().unwrap().unwrap().seq, target.0);
        prop_assert!(journal::verify(dir.path()).unwrap().is_ok());
    }
}
