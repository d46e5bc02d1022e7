//! The reader: sequential, read-only access that can follow a live writer.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};

use memmap2::Mmap;

use crate::error::JournalError;
use crate::format::{
    decode_slot, SegmentHeader, Slot, RECORD_ALIGN, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use crate::segment::{list_segments, read_header, segment_path};

/// One record as stored. `payload` borrows the reader's mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    pub seq: u64,
    pub kind: u16,
    /// The caller's bytes, starting at a 16-byte aligned address.
    pub payload: &'a [u8],
    /// Index of the segment holding the record.
    pub segment: u64,
    /// Byte offset of the record header inside its segment file.
    pub offset: u64,
    /// The record's CRC-32 as stored in its header (and checked): what a
    /// snapshot taken after this record names to be tied to this journal.
    pub crc: u32,
}

struct ReadSegment {
    index: u64,
    path: PathBuf,
    /// Path of the segment after this one, checked when this one runs out.
    next_path: PathBuf,
    map: Mmap,
}

/// Reads records in sequence order. Safe to use while another thread or
/// process appends: at the current end `next` returns `None`, and a later
/// call returns whatever was appended since, moving into new segments as
/// they appear. Readers never write, so any number may run at once.
///
/// A reader that was open while a writer's recovery cut the journal (see
/// `Recovery::truncated_tail`) should be reopened and seeked again: its
/// position may lie past the cut, where new records are not where it looks.
pub struct Reader {
    dir: PathBuf,
    seg: Option<ReadSegment>,
    /// Segment to open next; `None` means the first one present.
    want: Option<u64>,
    /// Offset of the next record header in `seg`.
    cursor: usize,
    /// Sequence number the next record must carry, once known.
    expect: Option<u64>,
    /// Records below this sequence number are skipped (set by `seek`).
    min_seq: u64,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("dir", &self.dir)
            .field("segment", &self.seg.as_ref().map(|s| s.index))
            .field("cursor", &self.cursor)
            .field("expect", &self.expect)
            .finish()
    }
}

/// Loads the marker of the slot at `pos` so that the rest of the record,
/// written before the marker, is visible once the marker is.
fn load_marker(map: &Mmap, pos: usize) -> u32 {
    let bytes = &map[pos..pos + 4];
    assert_eq!(bytes.as_ptr() as usize % 4, 0, "record markers are aligned");
    // SAFETY: the pointer is valid for reading 4 aligned bytes of a mapping
    // that lives as long as `map`. The writer may store to these bytes at any
    // time (it publishes the marker with a release store); a volatile load
    // keeps the compiler from caching or splitting the read, and the acquire
    // fence below orders all later reads of the record after it.
    let raw = unsafe { std::ptr::read_volatile(bytes.as_ptr().cast::<u32>()) };
    fence(Ordering::Acquire);
    u32::from_le(raw)
}

impl Reader {
    /// Opens a reader on the journal directory, positioned at the first record.
    pub fn open(dir: &Path) -> Result<Reader, JournalError> {
        if !dir.is_dir() {
            return Err(JournalError::io(
                format!("opening journal directory {}", dir.display()),
                io::Error::new(io::ErrorKind::NotFound, "not a directory"),
            ));
        }
        Ok(Reader {
            dir: dir.to_path_buf(),
            seg: None,
            want: None,
            cursor: SEGMENT_HEADER_LEN,
            expect: None,
            min_seq: 0,
        })
    }

    /// Positions the reader so that `next` yields the first record with a
    /// sequence number of at least `seq` (waiting for it if it is not
    /// written yet). Finds the segment from the headers, then skips forward.
    pub fn seek(&mut self, seq: u64) -> Result<(), JournalError> {
        let segments = list_segments(&self.dir)?;
        let mut target = segments.first().map(|s| s.index);
        for s in &segments {
            let header = read_header(&s.path)?;
            if header.first_seq > seq {
                break;
            }
            target = Some(s.index);
        }
        self.seg = None;
        self.want = target;
        self.cursor = SEGMENT_HEADER_LEN;
        self.expect = None;
        self.min_seq = seq;
        Ok(())
    }

    /// The next record, or `None` at the current end of the journal. An error
    /// leaves the position unchanged, so a retry meets the same spot.
    // This cannot be `Iterator::next`: the record borrows the reader's
    // mapping (a lending iterator), and the end is not final.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Record<'_>>, JournalError> {
        let (pos, seq, kind, len, crc) = loop {
            if self.seg.is_none() && !self.open_segment()? {
                return Ok(None);
            }
            let seg = self.seg.as_ref().expect("segment is open");
            let pos = self.cursor;
            if pos + RECORD_HEADER_LEN > seg.map.len() {
                // No room for another header: the writer moved on, or will.
                if self.advance()? {
                    continue;
                }
                return Ok(None);
            }
            let marker = load_marker(&seg.map, pos);
            match decode_slot(&seg.map, pos, marker) {
                Slot::Record {
                    seq,
                    kind,
                    payload_len,
                    total,
                    crc,
                } => {
                    if let Some(expected) = self.expect {
                        if seq != expected {
                            return Err(JournalError::SeqGap {
                                segment: seg.path.clone(),
                                offset: pos as u64,
                                expected,
                                found: seq,
                            });
                        }
                    }
                    self.expect = Some(seq.wrapping_add(1));
                    self.cursor = pos + total;
                    if seq < self.min_seq {
                        continue;
                    }
                    break (pos, seq, kind, payload_len as usize, crc);
                }
                Slot::Seal => {
                    if self.advance()? {
                        continue;
                    }
                    return Ok(None);
                }
                Slot::Unpublished => {
                    if !seg.next_path.exists() {
                        return Ok(None);
                    }
                    // The writer seals a segment before the next one appears,
                    // so the slot must now hold the seal.
                    if load_marker(&seg.map, pos) == 0 {
                        return Err(JournalError::Corrupt {
                            segment: seg.path.clone(),
                            offset: pos as u64,
                            reason:
                                "segment ends without a seal mark although a later segment exists"
                                    .into(),
                        });
                    }
                }
                Slot::Bad(reason) => {
                    return Err(JournalError::Corrupt {
                        segment: seg.path.clone(),
                        offset: pos as u64,
                        reason,
                    });
                }
            }
        };
        let seg = self.seg.as_ref().expect("segment is open");
        let start = pos + RECORD_HEADER_LEN;
        let payload = &seg.map[start..start + len];
        assert_eq!(
            payload.as_ptr() as usize % RECORD_ALIGN,
            0,
            "payload must be 16-byte aligned"
        );
        Ok(Some(Record {
            seq,
            kind,
            payload,
            segment: seg.index,
            offset: pos as u64,
            crc,
        }))
    }

    /// Moves to the segment after the current one if it exists.
    fn advance(&mut self) -> Result<bool, JournalError> {
        let seg = self.seg.as_ref().expect("segment is open");
        if seg.next_path.exists() {
            self.want = Some(seg.index + 1);
            self.seg = None;
            self.cursor = SEGMENT_HEADER_LEN;
            return Ok(true);
        }
        // Normally the writer is about to create the next segment. If a later
        // one exists already, the next one has gone missing.
        let later = list_segments(&self.dir)?
            .into_iter()
            .find(|s| s.index > seg.index + 1);
        match later {
            Some(found) => Err(JournalError::MissingSegment {
                expected: seg.next_path.clone(),
                found: found.path,
            }),
            None => Ok(false),
        }
    }

    /// Maps the segment `want` (or the first present); false when it does not exist yet.
    fn open_segment(&mut self) -> Result<bool, JournalError> {
        let index = match self.want {
            Some(i) => i,
            None => match list_segments(&self.dir)?.first() {
                Some(s) => s.index,
                None => return Ok(false),
            },
        };
        let path = segment_path(&self.dir, index);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let later = list_segments(&self.dir)?
                    .into_iter()
                    .find(|s| s.index > index);
                return match later {
                    Some(found) => Err(JournalError::MissingSegment {
                        expected: path,
                        found: found.path,
                    }),
                    None => Ok(false),
                };
            }
            Err(e) => {
                return Err(JournalError::io(
                    format!("opening segment {}", path.display()),
                    e,
                ))
            }
        };
        let len = file
            .metadata()
            .map_err(|e| JournalError::io(format!("reading metadata of {}", path.display()), e))?
            .len();
        let corrupt = |reason: String| JournalError::Corrupt {
            segment: path.clone(),
            offset: 0,
            reason,
        };
        if len < SEGMENT_HEADER_LEN as u64 || !len.is_multiple_of(RECORD_ALIGN as u64) {
            return Err(corrupt(format!(
                "segment file length {len} is not a valid segment size"
            )));
        }
        // SAFETY: read-only mapping of a complete segment. Segments appear
        // only after they are fully preallocated and are never shrunk, so no
        // mapped page can lie past the end of the file (no SIGBUS). Bytes the
        // writer is still filling are read only after their marker is
        // published, through `load_marker`.
        let map = unsafe { Mmap::map(&file) }
            .map_err(|e| JournalError::io(format!("mapping {}", path.display()), e))?;
        let header = SegmentHeader::decode(&map[..SEGMENT_HEADER_LEN]).map_err(corrupt)?;
        if header.index != index || header.segment_bytes != len {
            return Err(corrupt(format!(
                "header (index {}, {} bytes) disagrees with the file (index {index}, {len} bytes)",
                header.index, header.segment_bytes
            )));
        }
        if let Some(expected) = self.expect {
            if header.first_seq != expected {
                return Err(JournalError::SeqGap {
                    segment: path,
                    offset: 0,
                    expected,
                    found: header.first_seq,
                });
            }
        }
        let next_path = segment_path(&self.dir, index + 1);
        self.seg = Some(ReadSegment {
            index,
            path,
            next_path,
            map,
        });
        self.want = Some(index);
        self.cursor = SEGMENT_HEADER_LEN;
        Ok(true)
    }
}
