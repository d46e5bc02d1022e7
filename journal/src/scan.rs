//! Whole-journal checks: the scan behind recovery at open and `verify`, and
//! the truncation that cuts a damaged journal back to its last good record.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapMut};

use crate::error::JournalError;
use crate::format::{
    decode_slot, read_u32, SegmentHeader, Slot, RECORD_ALIGN, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use crate::segment::{list_segments, segment_path, sync_dir, SegFile};

/// What kind of damage a scan found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// The last record of the last segment is incomplete or fails its
    /// checksum, and nothing valid follows it: a write cut short by a crash.
    /// Open cuts it off without being asked; nothing before it is lost.
    TornTail,
    /// A bad record (or bytes that should be zero) inside the log.
    Corrupt,
    /// A segment header that is unreadable or disagrees with its file.
    BadSegmentHeader,
    /// Sequence numbers that do not follow each other.
    SeqGap { expected: u64, found: u64 },
    /// A segment index is missing between two present segments.
    MissingSegment,
    /// A sealed segment file shorter than its header says, cut after its
    /// seal: every record of it is whole, only the zeros after the seal are
    /// gone. Readers refuse it; the repair (`truncate_on_corruption`) writes
    /// the file back to its full length and loses nothing.
    CutAfterSeal,
}

/// The first damaged spot of a journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The segment file (for `MissingSegment`, the path the missing file would have).
    pub segment: PathBuf,
    /// Index of that segment.
    pub segment_index: u64,
    /// Byte offset of the bad record header in the segment (0 for segment-level problems).
    pub offset: u64,
    pub kind: ProblemKind,
    /// Human-readable explanation.
    pub reason: String,
}

impl Problem {
    /// The error that `Journal::open` returns for this problem; `next_present`
    /// is the segment found after a missing one.
    pub(crate) fn to_error(&self, next_present: Option<&Path>) -> JournalError {
        match self.kind {
            ProblemKind::SeqGap { expected, found } => JournalError::SeqGap {
                segment: self.segment.clone(),
                offset: self.offset,
                expected,
                found,
            },
            ProblemKind::MissingSegment => JournalError::MissingSegment {
                expected: self.segment.clone(),
                found: next_present.map(Path::to_path_buf).unwrap_or_default(),
            },
            ProblemKind::CutAfterSeal => JournalError::CutAfterSeal {
                segment: self.segment.clone(),
                offset: self.offset,
                reason: self.reason.clone(),
            },
            _ => JournalError::Corrupt {
                segment: self.segment.clone(),
                offset: self.offset,
                reason: self.reason.clone(),
            },
        }
    }
}

/// The result of [`verify`](crate::verify).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Segment files present.
    pub segments: u64,
    /// Valid records before the first problem (all of them when there is none).
    pub records: u64,
    pub first_seq: Option<u64>,
    /// The last valid sequence number before the first problem.
    pub last_seq: Option<u64>,
    /// The first damaged spot, if any. A `TornTail` is what open would cut off.
    pub problem: Option<Problem>,
}

impl VerifyReport {
    /// True when every segment and every record checked out.
    pub fn is_ok(&self) -> bool {
        self.problem.is_none()
    }
}

/// Where a journal was cut back, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailCut {
    /// The segment file that was cut.
    pub segment: PathBuf,
    pub segment_index: u64,
    /// Byte offset of the first dropped byte; the record that started there is gone.
    pub offset: u64,
    /// Bytes of data (non-zero region) zeroed in `segment`, not counting removed files.
    pub bytes_dropped: u64,
    /// Later segment files that were deleted, in index order.
    pub segments_removed: Vec<PathBuf>,
    pub kind: ProblemKind,
    pub reason: String,
}

/// State of the last intact segment after a scan.
#[derive(Debug, Clone)]
pub(crate) struct TailState {
    pub index: u64,
    pub path: PathBuf,
    /// Offset where the next record would go.
    pub end: u64,
    /// False when the segment is sealed or has no room for another header.
    pub writable: bool,
    pub records: u64,
}

#[derive(Debug)]
pub(crate) struct Found {
    pub problem: Problem,
    /// Position in `Scan::segments` of the first segment to cut or remove.
    pub seg_pos: usize,
}

#[derive(Debug)]
pub(crate) struct Scan {
    pub segments: Vec<SegFile>,
    pub records: u64,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    /// The checksum of the record at `last_seq`.
    pub last_crc: Option<u32>,
    /// The seq the next record must carry, as far as the segments scanned
    /// say: after the last record, or the first seq in the header of a
    /// segment that holds none yet (whose predecessors were removed).
    pub next_seq: Option<u64>,
    pub tail: Option<TailState>,
    pub problem: Option<Found>,
}

/// The seq a journal whose next record must carry `next_seq` ends at: the
/// one before (0 when nothing says, a new journal).
pub(crate) fn end_seq(next_seq: Option<u64>) -> u64 {
    next_seq.map_or(0, |next| next.saturating_sub(1))
}

struct SegScan {
    records: u64,
    first_seq: Option<u64>,
    last_seq: Option<u64>,
    last_crc: Option<u32>,
    /// The seq the next segment must start with.
    next_seq: Option<u64>,
    end: u64,
    writable: bool,
    problem: Option<Problem>,
}

/// Scans every segment of `dir` in order, checking headers, every record's
/// checksum and the continuity of sequence numbers, and stops at the first
/// problem. Only I/O failures are errors; damage is reported in the result.
pub(crate) fn scan(dir: &Path) -> Result<Scan, JournalError> {
    let segments = list_segments(dir)?;
    let mut out = Scan {
        segments: Vec::new(),
        records: 0,
        first_seq: None,
        last_seq: None,
        last_crc: None,
        next_seq: None,
        tail: None,
        problem: None,
    };
    let mut expect: Option<u64> = None;
    for (i, seg) in segments.iter().enumerate() {
        if i > 0 && segments[i - 1].index.checked_add(1) != Some(seg.index) {
            let missing = segments[i - 1].index + 1;
            out.problem = Some(Found {
                problem: Problem {
                    segment: segment_path(dir, missing),
                    segment_index: missing,
                    offset: 0,
                    kind: ProblemKind::MissingSegment,
                    reason: format!(
                        "segment file is missing; the next one present is {}",
                        seg.path.display()
                    ),
                },
                seg_pos: i,
            });
            break;
        }
        let is_last = i + 1 == segments.len();
        let r = scan_segment(seg, is_last, expect)?;
        out.records += r.records;
        if out.first_seq.is_none() {
            out.first_seq = r.first_seq;
        }
        if r.last_seq.is_some() {
            out.last_seq = r.last_seq;
            out.last_crc = r.last_crc;
        }
        if r.next_seq.is_some() {
            out.next_seq = r.next_seq;
        }
        if let Some(problem) = r.problem {
            out.problem = Some(Found {
                problem,
                seg_pos: i,
            });
            break;
        }
        expect = r.next_seq;
        out.tail = Some(TailState {
            index: seg.index,
            path: seg.path.clone(),
            end: r.end,
            writable: r.writable,
            records: r.records,
        });
    }
    out.segments = segments;
    Ok(out)
}

/// Maps a whole segment file read-only; the caller checked its length.
fn map_readonly(path: &Path) -> Result<(File, u64, Option<Mmap>), JournalError> {
    let file = File::open(path)
        .map_err(|e| JournalError::io(format!("opening segment {}", path.display()), e))?;
    let len = file
        .metadata()
        .map_err(|e| JournalError::io(format!("reading metadata of {}", path.display()), e))?
        .len();
    if len < SEGMENT_HEADER_LEN as u64 {
        return Ok((file, len, None));
    }
    // SAFETY: the mapping is read-only and lives only while this scan runs.
    // Segment files are never shrunk (cuts zero bytes instead), so every
    // mapped page stays backed by the file and reading it cannot raise SIGBUS.
    // A concurrent writer only fills bytes past the end we stop at.
    let map = unsafe { Mmap::map(&file) }
        .map_err(|e| JournalError::io(format!("mapping {}", path.display()), e))?;
    Ok((file, len, Some(map)))
}

fn scan_segment(
    seg: &SegFile,
    is_last: bool,
    expect: Option<u64>,
) -> Result<SegScan, JournalError> {
    let mut out = SegScan {
        records: 0,
        first_seq: None,
        last_seq: None,
        last_crc: None,
        next_seq: expect,
        end: 0,
        writable: false,
        problem: None,
    };
    let problem = |offset: u64, kind: ProblemKind, reason: String| Problem {
        segment: seg.path.clone(),
        segment_index: seg.index,
        offset,
        kind,
        reason,
    };
    let (_file, len, map) = map_readonly(&seg.path)?;
    let Some(map) = map else {
        out.problem = Some(problem(
            0,
            ProblemKind::BadSegmentHeader,
            format!(
                "file is {len} bytes, shorter than the {SEGMENT_HEADER_LEN}-byte segment header"
            ),
        ));
        return Ok(out);
    };
    let header = match SegmentHeader::decode(&map[..SEGMENT_HEADER_LEN]) {
        Ok(h) => h,
        Err(reason) => {
            out.problem = Some(problem(0, ProblemKind::BadSegmentHeader, reason));
            return Ok(out);
        }
    };
    if header.index != seg.index {
        out.problem = Some(problem(
            0,
            ProblemKind::BadSegmentHeader,
            format!(
                "header says segment index {} but the file name says {}",
                header.index, seg.index
            ),
        ));
        return Ok(out);
    }
    // A file shorter than its header says was cut (segments are made whole
    // and never shrunk): its whole records are read, and the damage is
    // named where they end, so that a cut there keeps them.
    let cut_short = header.segment_bytes > len;
    if !cut_short && (header.segment_bytes != len || !len.is_multiple_of(RECORD_ALIGN as u64)) {
        out.problem = Some(problem(
            0,
            ProblemKind::BadSegmentHeader,
            format!(
                "header says the segment is {} bytes but the file is {len}",
                header.segment_bytes
            ),
        ));
        return Ok(out);
    }
    if let Some(expected) = expect {
        if header.first_seq != expected {
            out.problem = Some(problem(
                0,
                ProblemKind::SeqGap {
                    expected,
                    found: header.first_seq,
                },
                format!(
                    "segment starts at seq {} but seq {expected} was expected",
                    header.first_seq
                ),
            ));
            return Ok(out);
        }
    }
    out.next_seq = Some(header.first_seq);
    let body = &map[..map.len() / RECORD_ALIGN * RECORD_ALIGN];
    let sealed = scan_records(body, header.first_seq, is_last, &mut out, &problem);
    if cut_short {
        // Damage the records show keeps its own reason; a cut after a seal
        // is named at the seal (readers refuse a file shorter than its
        // header says, so it cannot pass as whole).
        let cut = format!(
            "the file is cut short: {len} of the {} bytes its header says{}",
            header.segment_bytes,
            if sealed {
                ", after its seal"
            } else {
                "; the records before this offset are whole"
            }
        );
        out.writable = false;
        match out.problem.as_mut() {
            Some(p) if matches!(p.kind, ProblemKind::SeqGap { .. }) => {}
            Some(p) => {
                p.kind = ProblemKind::Corrupt;
                p.reason = format!("{}; {cut}", p.reason);
            }
            None if sealed => out.problem = Some(problem(out.end, ProblemKind::CutAfterSeal, cut)),
            None => out.problem = Some(problem(out.end, ProblemKind::Corrupt, cut)),
        }
    }
    Ok(out)
}

/// Reads the records of a segment's `body` from its header on, into
/// `out`; true when it ends with a seal.
fn scan_records(
    map: &[u8],
    first_seq: u64,
    is_last: bool,
    out: &mut SegScan,
    problem: &dyn Fn(u64, ProblemKind, String) -> Problem,
) -> bool {
    let mut next = first_seq;
    let mut pos = SEGMENT_HEADER_LEN;
    loop {
        out.end = pos as u64;
        if pos + RECORD_HEADER_LEN > map.len() {
            // No room for another header: the segment is full.
            return false;
        }
        match decode_slot(map, pos, read_u32(map, pos)) {
            Slot::Record {
                seq, total, crc, ..
            } => {
                if seq != next {
                    out.problem = Some(problem(
                        pos as u64,
                        ProblemKind::SeqGap {
                            expected: next,
                            found: seq,
                        },
                        format!("record has seq {seq} but seq {next} was expected"),
                    ));
                    return false;
                }
                out.records += 1;
                out.first_seq.get_or_insert(seq);
                out.last_seq = Some(seq);
                out.last_crc = Some(crc);
                next = seq.wrapping_add(1);
                out.next_seq = Some(next);
                pos += total;
            }
            Slot::Seal => return true,
            Slot::Unpublished if !is_last => {
                out.problem = Some(problem(
                    pos as u64,
                    ProblemKind::Corrupt,
                    "segment ends without a seal mark although a later segment exists".into(),
                ));
                return false;
            }
            Slot::Bad(reason) if !is_last => {
                out.problem = Some(problem(pos as u64, ProblemKind::Corrupt, reason));
                return false;
            }
            slot => {
                // The end of the last segment. Everything from here on must be
                // zero; otherwise decide between a torn tail and damage.
                let reason = match slot {
                    Slot::Bad(reason) => reason,
                    _ => "partly written record (its marker is still zero)".to_string(),
                };
                let stray_end = last_nonzero_end(map, pos);
                if stray_end == pos {
                    out.writable = true;
                    return false;
                }
                if let Some(q) = find_valid_slot(map, pos + RECORD_ALIGN, stray_end) {
                    out.problem = Some(problem(
                        pos as u64,
                        ProblemKind::Corrupt,
                        format!(
                            "{reason}; a valid record follows at offset {q}, so this is damage inside the log, not a torn tail"
                        ),
                    ));
                } else {
                    out.problem = Some(problem(
                        pos as u64,
                        ProblemKind::TornTail,
                        format!(
                            "torn tail: {reason} ({} bytes up to the last non-zero byte)",
                            stray_end - pos
                        ),
                    ));
                }
                return false;
            }
        }
    }
}

/// The end of the last 16-byte chunk at or after `from` that holds a non-zero
/// byte, or `from` when everything after it is zero.
pub(crate) fn last_nonzero_end(seg: &[u8], from: usize) -> usize {
    debug_assert_eq!(from % RECORD_ALIGN, 0);
    debug_assert_eq!(seg.len() % RECORD_ALIGN, 0);
    let tail = &seg[from..];
    // Comparing whole u128 chunks keeps this a fast linear pass even over
    // the unwritten remainder of a large segment.
    match tail
        .chunks_exact(RECORD_ALIGN)
        .rposition(|c| u128::from_ne_bytes(c.try_into().expect("16-byte chunk")) != 0)
    {
        Some(i) => from + (i + 1) * RECORD_ALIGN,
        None => from,
    }
}

/// Looks for a record or seal with a valid checksum at any aligned offset in
/// `[from, to)`; the first one found is returned.
fn find_valid_slot(seg: &[u8], from: usize, to: usize) -> Option<usize> {
    let mut q = from;
    while q < to && q + RECORD_HEADER_LEN <= seg.len() {
        let marker = read_u32(seg, q);
        if marker != 0
            && matches!(
                decode_slot(seg, q, marker),
                Slot::Record { .. } | Slot::Seal
            )
        {
            return Some(q);
        }
        q += RECORD_ALIGN;
    }
    None
}

/// Writes a segment file cut short back to the length its header says
/// (zeros, every block written); its header, whose checksum holds, says how
/// long (a size a venue could have made only). Returns the file's length.
fn fill_to_header(file: &File, path: &Path, len: u64) -> Result<u64, JournalError> {
    let whole = crate::segment::read_header(path)
        .map_err(|e| JournalError::Invalid(format!("cannot make {} whole: {e}", path.display())))?
        .segment_bytes;
    if len >= whole {
        return Ok(len);
    }
    if !whole.is_multiple_of(crate::writer::SEGMENT_SIZE_UNIT)
        || whole > crate::writer::SEGMENT_BYTES_MAX
    {
        return Err(JournalError::Invalid(format!(
            "cannot make {} whole: its header says {whole} bytes",
            path.display()
        )));
    }
    crate::segment::zero_fill(file, path, len, whole)?;
    Ok(whole)
}

/// Repairs a segment cut after its seal ([`ProblemKind::CutAfterSeal`]):
/// writes it back to its full length. No record is dropped.
pub(crate) fn make_whole(seg: &SegFile) -> Result<(), JournalError> {
    let (file, len) = open_to_repair(&seg.path, "make it whole")?;
    fill_to_header(&file, &seg.path, len)?;
    Ok(())
}

/// Opens a segment for a repair (`what` names it in the error) and
/// measures it.
fn open_to_repair(path: &Path, what: &str) -> Result<(File, u64), JournalError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| JournalError::io(format!("opening {} to {what}", path.display()), e))?;
    let len = file
        .metadata()
        .map_err(|e| JournalError::io(format!("reading metadata of {}", path.display()), e))?
        .len();
    Ok((file, len))
}

/// Cuts the journal at `offset` of `segments[seg_pos]`: zeroes that segment
/// from `offset` on (or removes it when `offset` is 0) and removes every later
/// segment. Segments are never shrunk, because a reader may have them mapped
/// and touching a page past a file's end raises SIGBUS.
pub(crate) fn cut(
    dir: &Path,
    segments: &[SegFile],
    seg_pos: usize,
    offset: u64,
) -> Result<(u64, Vec<PathBuf>), JournalError> {
    let mut bytes_dropped = 0;
    let first_removed = if offset == 0 {
        seg_pos
    } else {
        let seg = &segments[seg_pos];
        let (file, mut len) = open_to_repair(&seg.path, "cut it")?;
        let start = offset as usize;
        if offset < SEGMENT_HEADER_LEN as u64 || !start.is_multiple_of(RECORD_ALIGN) || offset > len
        {
            return Err(JournalError::Invalid(format!(
                "cannot cut {} at offset {offset}: not a record boundary inside the file",
                seg.path.display()
            )));
        }
        // A segment file cut short is made whole again, so that the writer
        // can go on in it.
        len = fill_to_header(&file, &seg.path, len)?;
        if !len.is_multiple_of(16) {
            return Err(JournalError::Invalid(format!(
                "cannot cut {}: its length {len} is not a multiple of 16",
                seg.path.display()
            )));
        }
        // SAFETY: the mapping covers exactly the file, which is never shrunk;
        // only the single writer (us, during open or an offline tool) writes it.
        let mut map = unsafe { MmapMut::map_mut(&file) }
            .map_err(|e| JournalError::io(format!("mapping {}", seg.path.display()), e))?;
        let end = last_nonzero_end(&map, start);
        if end > start {
            map[start..end].fill(0);
            map.flush_range(start, end - start).map_err(|e| {
                JournalError::io(format!("flushing the cut of {}", seg.path.display()), e)
            })?;
        }
        bytes_dropped = (end - start) as u64;
        seg_pos + 1
    };
    let mut removed = Vec::new();
    for seg in &segments[first_removed..] {
        fs::remove_file(&seg.path)
            .map_err(|e| JournalError::io(format!("removing segment {}", seg.path.display()), e))?;
        removed.push(seg.path.clone());
    }
    if !removed.is_empty() {
        sync_dir(dir)?;
    }
    Ok((bytes_dropped, removed))
}

/// Checks every segment header, every record's checksum and the continuity
/// of sequence numbers in `dir` without changing anything. Damage is
/// reported in the result (the first bad spot, with segment file and offset);
/// only I/O failures are errors.
pub fn verify(dir: &Path) -> Result<VerifyReport, JournalError> {
    if !dir.is_dir() {
        return Err(JournalError::Invalid(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    let s = scan(dir)?;
    Ok(VerifyReport {
        segments: s.segments.len() as u64,
        records: s.records,
        first_seq: s.first_seq,
        last_seq: s.last_seq,
        problem: s.problem.map(|f| f.problem),
    })
}

/// Cuts the journal in `dir` so that it ends just before byte `offset` of
/// segment `segment` (an index): the record starting at `offset` and
/// everything after it, including all later segment files, is dropped.
/// `offset` must be a record boundary (a multiple of 16, at least 64), or 0
/// to drop the whole segment. Must not run while a writer has the journal open.
pub fn truncate_after(dir: &Path, segment: u64, offset: u64) -> Result<TailCut, JournalError> {
    let segments = list_segments(dir)?;
    let seg_pos = segments
        .iter()
        .position(|s| s.index == segment)
        .ok_or_else(|| {
            JournalError::Invalid(format!("no segment {segment} in {}", dir.display()))
        })?;
    let (bytes_dropped, segments_removed) = cut(dir, &segments, seg_pos, offset)?;
    Ok(TailCut {
        segment: segments[seg_pos].path.clone(),
        segment_index: segment,
        offset,
        bytes_dropped,
        segments_removed,
        kind: ProblemKind::Corrupt,
        reason: "cut on request".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{encode_record_header, RECORD_MARKER};

    #[test]
    fn last_nonzero_end_finds_the_last_dirty_chunk() {
        let mut seg = vec![0u8; 4096];
        assert_eq!(last_nonzero_end(&seg, 64), 64);
        seg[100] = 1;
        assert_eq!(last_nonzero_end(&seg, 64), 112);
        seg[4095] = 1;
        assert_eq!(last_nonzero_end(&seg, 64), 4096);
        assert_eq!(last_nonzero_end(&seg, 4096), 4096);
    }

    #[test]
    fn find_valid_slot_skips_garbage() {
        let mut seg = vec![0xFFu8; 1024];
        assert_eq!(find_valid_slot(&seg, 0, 1024), None);
        let h = encode_record_header(RECORD_MARKER, 5, 1, b"hello");
        seg[512..544].copy_from_slice(&h);
        seg[544..549].copy_from_slice(b"hello");
        assert_eq!(find_valid_slot(&seg, 0, 1024), Some(512));
        assert_eq!(find_valid_slot(&seg, 528, 1024), None);
    }
}
