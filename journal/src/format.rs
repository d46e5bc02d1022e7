//! The bytes on disk: segment header, record header, checksums and alignment.
//!
//! Everything here is plain encoding and decoding with no I/O, so that the
//! writer, the reader, recovery and outside tools all agree on one definition.
//! `FORMAT.md` beside `Cargo.toml` describes the same layout in prose.

/// The first eight bytes of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"UPDNJRNL";
/// Version of the on-disk format written by this crate.
pub const FORMAT_VERSION: u32 = 1;
/// Length of the segment header; the first record starts right after it.
pub const SEGMENT_HEADER_LEN: usize = 64;
/// Length of a record header; the payload starts right after it.
pub const RECORD_HEADER_LEN: usize = 32;
/// Every record header, and therefore every payload, starts at a multiple of
/// this many bytes from the start of the segment file.
pub const RECORD_ALIGN: usize = 16;
/// Marker of a published record ("RCRD" in little-endian byte order).
pub const RECORD_MARKER: u32 = u32::from_le_bytes(*b"RCRD");
/// Marker of the seal that closes a segment ("SEAL" in little-endian byte order).
pub const SEAL_MARKER: u32 = u32::from_le_bytes(*b"SEAL");

/// Rounds `n` up to the next multiple of [`RECORD_ALIGN`].
pub const fn align_up(n: usize) -> usize {
    (n + RECORD_ALIGN - 1) & !(RECORD_ALIGN - 1)
}

/// Total bytes a record with a payload of `payload_len` bytes occupies in a
/// segment: the header, the payload and the padding to the next record.
pub const fn record_len(payload_len: usize) -> usize {
    RECORD_HEADER_LEN + align_up(payload_len)
}

/// The largest payload a segment of `segment_bytes` bytes can hold.
pub fn max_payload(segment_bytes: u64) -> usize {
    let room = segment_bytes.saturating_sub((SEGMENT_HEADER_LEN + RECORD_HEADER_LEN) as u64);
    // Padding never pushes a record past the end because segment sizes are
    // multiples of the alignment, so the room itself is the limit, capped by
    // the u32 length field.
    room.min(u64::from(u32::MAX)) as usize
}

/// The 64-byte header at the start of every segment file.
///
/// Layout (little-endian): magic `[u8; 8]` at 0, version u32 at 8, reserved
/// u32 at 12 (zero), segment index u64 at 16, first seq u64 at 24, segment
/// length in bytes u64 at 32, reserved zeros 40..60, crc32 of bytes 0..60 at 60.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Position of the segment in the journal; also its file name.
    pub index: u64,
    /// Sequence number of the first record the segment holds (or will hold).
    pub first_seq: u64,
    /// Length of the segment file as it was preallocated.
    pub segment_bytes: u64,
}

impl SegmentHeader {
    /// Encodes the header with its checksum.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        let mut b = [0u8; SEGMENT_HEADER_LEN];
        b[0..8].copy_from_slice(&SEGMENT_MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[16..24].copy_from_slice(&self.index.to_le_bytes());
        b[24..32].copy_from_slice(&self.first_seq.to_le_bytes());
        b[32..40].copy_from_slice(&self.segment_bytes.to_le_bytes());
        let crc = crc32fast::hash(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks a header; the error says what is wrong with it.
    pub fn decode(b: &[u8]) -> Result<SegmentHeader, String> {
        if b.len() < SEGMENT_HEADER_LEN {
            return Err(format!(
                "header is {} bytes, expected {SEGMENT_HEADER_LEN}",
                b.len()
            ));
        }
        if b[0..8] != SEGMENT_MAGIC {
            return Err(format!("bad segment magic {:02x?}", &b[0..8]));
        }
        let stored = read_u32(b, 60);
        let computed = crc32fast::hash(&b[0..60]);
        if stored != computed {
            return Err(format!(
                "segment header crc mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ));
        }
        let version = read_u32(b, 8);
        if version != FORMAT_VERSION {
            return Err(format!(
                "unsupported format version {version} (this build reads {FORMAT_VERSION})"
            ));
        }
        Ok(SegmentHeader {
            index: read_u64(b, 16),
            first_seq: read_u64(b, 24),
            segment_bytes: read_u64(b, 32),
        })
    }
}

/// Encodes a 32-byte record header (marker included) for a payload.
///
/// Layout (little-endian): marker u32 at 0, payload_len u32 at 4, seq u64 at 8,
/// kind u16 at 16, reserved u16 at 18 (zero), crc32 u32 at 20, zero padding
/// 24..32. The crc covers header bytes 0..20, then 24..32, then the payload.
pub fn encode_record_header(marker: u32, seq: u64, kind: u16, payload: &[u8]) -> [u8; 32] {
    let len = u32::try_from(payload.len()).expect("payload length was checked against u32");
    let mut h = [0u8; RECORD_HEADER_LEN];
    h[0..4].copy_from_slice(&marker.to_le_bytes());
    h[4..8].copy_from_slice(&len.to_le_bytes());
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..18].copy_from_slice(&kind.to_le_bytes());
    let crc = record_crc(&h, payload);
    h[20..24].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The checksum of a record: header bytes 0..20 and 24..32 (everything but the
/// crc field itself) followed by the payload.
pub fn record_crc(header: &[u8], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&header[0..20]);
    hasher.update(&header[24..32]);
    hasher.update(payload);
    hasher.finalize()
}

/// What sits at a record-aligned offset of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot {
    /// A complete record whose checksum matches.
    Record {
        seq: u64,
        kind: u16,
        payload_len: u32,
        /// Bytes from this header to the next one.
        total: usize,
        /// The record's checksum, as stored (and checked).
        crc: u32,
    },
    /// The seal that closes a segment: no record follows in this segment.
    Seal,
    /// The marker is zero: nothing has been published here (yet).
    Unpublished,
    /// Something that is neither of the above; the reason says why.
    Bad(String),
}

/// Reads the slot at `off` of a segment, given the marker already read there.
///
/// The marker is passed in so that a concurrent reader can load it with
/// acquire ordering before it looks at the rest of the record. The caller
/// guarantees `off + RECORD_HEADER_LEN <= seg.len()`.
pub fn decode_slot(seg: &[u8], off: usize, marker: u32) -> Slot {
    debug_assert!(off + RECORD_HEADER_LEN <= seg.len());
    debug_assert_eq!(off % RECORD_ALIGN, 0);
    let h = &seg[off..off + RECORD_HEADER_LEN];
    match marker {
        0 => Slot::Unpublished,
        RECORD_MARKER | SEAL_MARKER => {
            let payload_len = read_u32(h, 4);
            let total = record_len(payload_len as usize);
            if total > seg.len() - off {
                return Slot::Bad(format!(
                    "payload length {payload_len} runs past the end of the segment ({} bytes left)",
                    seg.len() - off - RECORD_HEADER_LEN
                ));
            }
            if marker == SEAL_MARKER && payload_len != 0 {
                return Slot::Bad(format!("seal mark with payload length {payload_len}"));
            }
            let payload_start = off + RECORD_HEADER_LEN;
            let payload = &seg[payload_start..payload_start + payload_len as usize];
            // The crc is computed over the header as published, so the marker
            // value is taken from the argument, not re-read from memory.
            let mut head = [0u8; RECORD_HEADER_LEN];
            head.copy_from_slice(h);
            head[0..4].copy_from_slice(&marker.to_le_bytes());
            let stored = read_u32(&head, 20);
            let computed = record_crc(&head, payload);
            if stored != computed {
                return Slot::Bad(format!(
                    "record crc mismatch (stored {stored:#010x}, computed {computed:#010x})"
                ));
            }
            if marker == SEAL_MARKER {
                Slot::Seal
            } else {
                Slot::Record {
                    seq: read_u64(&head, 8),
                    kind: read_u16(&head, 16),
                    payload_len,
                    total,
                    crc: stored,
                }
            }
        }
        other => Slot::Bad(format!("unknown record marker {other:#010x}")),
    }
}

pub(crate) fn read_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

pub(crate) fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

pub(crate) fn read_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_helpers() {
        assert_eq!(align_up(0), 0);
        assert_eq!(align_up(1), 16);
        assert_eq!(align_up(16), 16);
        assert_eq!(align_up(17), 32);
        assert_eq!(record_len(0), 32);
        assert_eq!(record_len(5), 48);
        assert_eq!(max_payload(4096), 4096 - 96);
    }

    #[test]
    fn segment_header_round_trip_and_damage() {
        let h = SegmentHeader {
            index: 7,
            first_seq: 1234,
            segment_bytes: 65536,
        };
        let mut b = h.encode();
        assert_eq!(&b[0..8], b"UPDNJRNL");
        assert_eq!(SegmentHeader::decode(&b), Ok(h));
        b[25] ^= 1;
        let err = SegmentHeader::decode(&b).unwrap_err();
        assert!(err.contains("crc mismatch"), "{err}");
        b[25] ^= 1;
        // Bytes after the header are not its business; fewer are no header.
        let longer = [&b[..], &[0xAB; 36][..]].concat();
        assert_eq!(SegmentHeader::decode(&longer), Ok(h));
        assert_eq!(
            SegmentHeader::decode(&b[..40]),
            Err("header is 40 bytes, expected 64".to_string())
        );
        b[0] = b'X';
        assert!(SegmentHeader::decode(&b).unwrap_err().contains("magic"));
    }

    #[test]
    fn record_round_trip_and_every_bit_flip_is_detected() {
        let payload: Vec<u8> = (1..=21u8).collect();
        let mut seg = vec![0u8; 128];
        let h = encode_record_header(RECORD_MARKER, 42, 3, &payload);
        seg[0..32].copy_from_slice(&h);
        seg[32..32 + payload.len()].copy_from_slice(&payload);
        let marker = read_u32(&seg, 0);
        assert_eq!(
            decode_slot(&seg, 0, marker),
            Slot::Record {
                seq: 42,
                kind: 3,
                payload_len: 21,
                total: 64,
                crc: read_u32(&h, 20),
            }
        );
        // Every field read back whole: a kind past one byte, a seq past 56 bits.
        let h = encode_record_header(RECORD_MARKER, u64::MAX - 1, 0xBEEF, &payload);
        seg[0..32].copy_from_slice(&h);
        match decode_slot(&seg, 0, RECORD_MARKER) {
            Slot::Record { seq, kind, .. } => assert_eq!((seq, kind), (u64::MAX - 1, 0xBEEF)),
            other => panic!("{other:?}"),
        }
        seg[0..32].copy_from_slice(&encode_record_header(RECORD_MARKER, 42, 3, &payload));
        for bit in 0..(32 + payload.len()) * 8 {
            let mut damaged = seg.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            let marker = read_u32(&damaged, 0);
            match decode_slot(&damaged, 0, marker) {
                Slot::Bad(_) => {}
                other => panic!("flip of bit {bit} gave {other:?}"),
            }
        }
    }

    /// A seal that claims a payload (its checksum good) is not a seal: a
    /// seal carries nothing, and a slot that says otherwise was not
    /// written by this format.
    #[test]
    fn a_seal_that_claims_a_payload_is_bad() {
        let mut seg = vec![0u8; 128];
        seg[0..32].copy_from_slice(&encode_record_header(SEAL_MARKER, 9, 0, b"extra"));
        seg[32..37].copy_from_slice(b"extra");
        match decode_slot(&seg, 0, SEAL_MARKER) {
            Slot::Bad(reason) => assert!(reason.contains("seal"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn zero_marker_is_unpublished_and_seal_is_recognised() {
        let seg = vec![0u8; 64];
        assert_eq!(decode_slot(&seg, 0, 0), Slot::Unpublished);
        let mut seg = vec![0u8; 64];
        seg[0..32].copy_from_slice(&encode_record_header(SEAL_MARKER, 9, 0, &[]));
        assert_eq!(decode_slot(&seg, 0, SEAL_MARKER), Slot::Seal);
    }
}
