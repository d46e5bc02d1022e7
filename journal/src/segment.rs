//! Segment files: naming, listing, creation with preallocation, and the
//! directory syncs that make a new file's existence durable.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::JournalError;
use crate::format::{SegmentHeader, SEGMENT_HEADER_LEN};

/// Extension of a segment file.
const SEGMENT_EXT: &str = ".seg";
/// Extension of a segment that is still being created; such files are
/// ignored by readers and removed by the writer at open.
const TEMP_EXT: &str = ".seg.tmp";
/// Number of decimal digits in a segment file name.
const NAME_DIGITS: usize = 20;
/// Granularity at which a new segment's blocks are forced into existence.
const PREALLOC_STEP: u64 = 4096;

/// The file name of the segment with this index: 20 zero-padded decimal
/// digits and `.seg`, so that names sort in index order.
pub fn segment_file_name(index: u64) -> String {
    format!("{index:020}{SEGMENT_EXT}")
}

/// The path of the segment with this index inside `dir`.
pub fn segment_path(dir: &Path, index: u64) -> PathBuf {
    dir.join(segment_file_name(index))
}

/// A segment file found in the journal directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegFile {
    pub index: u64,
    pub path: PathBuf,
}

/// Parses a segment file name back into its index; other names give `None`.
fn parse_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_EXT)?;
    if digits.len() != NAME_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Lists the segment files of `dir`, sorted by index. Files with other
/// names are ignored so that operators may keep notes or locks beside them.
pub(crate) fn list_segments(dir: &Path) -> Result<Vec<SegFile>, JournalError> {
    let entries = fs::read_dir(dir)
        .map_err(|e| JournalError::io(format!("listing journal directory {}", dir.display()), e))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| {
            JournalError::io(format!("listing journal directory {}", dir.display()), e)
        })?;
        let name = entry.file_name();
        if let Some(index) = name.to_str().and_then(parse_name) {
            out.push(SegFile {
                index,
                path: entry.path(),
            });
        }
    }
    out.sort_by_key(|s| s.index);
    Ok(out)
}

/// Removes segments that were being created when a writer stopped. They were
/// never renamed into place, so no reader has seen them and they hold no record.
pub(crate) fn remove_temp_files(dir: &Path) -> Result<(), JournalError> {
    let entries = fs::read_dir(dir)
        .map_err(|e| JournalError::io(format!("listing journal directory {}", dir.display()), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| {
            JournalError::io(format!("listing journal directory {}", dir.display()), e)
        })?;
        let is_temp = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.ends_with(TEMP_EXT));
        if is_temp {
            let path = entry.path();
            fs::remove_file(&path).map_err(|e| {
                JournalError::io(format!("removing unfinished segment {}", path.display()), e)
            })?;
        }
    }
    Ok(())
}

/// Makes the directory's entries (created, renamed or removed files) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), JournalError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| JournalError::io(format!("syncing journal directory {}", dir.display()), e))
}

/// Reads and checks the header of a segment file without mapping it.
pub(crate) fn read_header(path: &Path) -> Result<SegmentHeader, JournalError> {
    let mut buf = [0u8; SEGMENT_HEADER_LEN];
    let mut file = File::open(path)
        .map_err(|e| JournalError::io(format!("opening segment {}", path.display()), e))?;
    file.read_exact(&mut buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            JournalError::Corrupt {
                segment: path.to_path_buf(),
                offset: 0,
                reason: "file is shorter than the segment header".into(),
            }
        } else {
            JournalError::io(format!("reading segment header of {}", path.display()), e)
        }
    })?;
    SegmentHeader::decode(&buf).map_err(|reason| JournalError::Corrupt {
        segment: path.to_path_buf(),
        offset: 0,
        reason,
    })
}

/// A failed write to the segment file at `path`: `NoSpace` when the file
/// system is full, else the I/O error with its context.
fn write_error(path: &Path, e: io::Error, context: impl FnOnce() -> String) -> JournalError {
    if is_no_space(&e) {
        JournalError::NoSpace {
            path: path.to_path_buf(),
            source: e,
        }
    } else {
        JournalError::io(context(), e)
    }
}

/// True when an I/O error means the file system has no room left.
fn is_no_space(e: &io::Error) -> bool {
    // ENOSPC is 28 and EDQUOT is 122 on Linux; std maps both to these kinds.
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    ) || matches!(e.raw_os_error(), Some(28) | Some(122))
}

/// A new segment, built ahead of its roll on another thread (or at the roll
/// when none was): created under its temporary name, preallocated, synced
/// and mapped (pages populated), with no header yet; [`Prepared::finish`]
/// writes the header, makes it durable and renames the file into place, so
/// a reader never sees a half-made segment.
///
/// `set_len` alone makes a sparse file on Linux; a later store into a hole
/// on a full disk would raise SIGBUS. Writing one byte per page makes the
/// file system allocate every block now, so a full disk surfaces here as
/// `NoSpace`, naming the segment as the operator will look for it.
pub(crate) struct Prepared {
    pub index: u64,
    temp: PathBuf,
    file: File,
    map: memmap2::MmapMut,
}

/// How a new segment's pages are faulted in before any record is appended:
/// a segment is written front to back, and taking the faults while it is
/// prepared keeps them off the append path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Populate {
    /// For reading (`MAP_POPULATE`). The pages stay clean, so a sync writes
    /// back only what was appended; but the kernel maps a shared file's
    /// clean pages read-only to see them dirtied, so the first store into
    /// each 4 KiB page still faults on the appending thread (one fault per
    /// 20 records or so).
    Read,
    /// Writable (`MADV_POPULATE_WRITE`, Linux 5.14 and later), dirtying
    /// every page at once: appends never fault. Only for a journal that is
    /// never synced (`Durability::Never`): a sync writes back every dirty
    /// page of the file, and the first would write the whole segment of
    /// zeros ahead of the records. Where the kernel refuses, as `Read`.
    Write,
}

/// Maps a built segment, faulted in as `populate` says.
fn map_segment(file: &File, populate: Populate) -> io::Result<memmap2::MmapMut> {
    // SAFETY (both mappings): `build_body` preallocated the whole file and
    // synced it; it is never shrunk, so every mapped byte is backed.
    // Nothing else maps it until it is renamed into place by the only
    // writer.
    #[cfg(target_os = "linux")]
    if populate == Populate::Write {
        let map = unsafe { memmap2::MmapOptions::new().map_mut(file) }?;
        if map.advise(memmap2::Advice::PopulateWrite).is_ok() {
            return Ok(map);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = populate;
    unsafe { memmap2::MmapOptions::new().populate().map_mut(file) }
}

/// Builds segment `index` of `segment_bytes` under its temporary name (see
/// [`Prepared`]); `paced` for one built ahead (see [`build_body`]), its
/// pages faulted in as `populate` says. On failure the temporary file is
/// removed.
pub(crate) fn prepare_segment(
    dir: &Path,
    index: u64,
    segment_bytes: u64,
    paced: bool,
    populate: Populate,
) -> Result<Prepared, JournalError> {
    // A segment the file system has no room for fails at once, instead of
    // filling the disk to its last block first (a segment may be GiBs)
    // and taking that space from everything else on it meanwhile.
    if let Some(free) = crate::writer::free_bytes(dir) {
        if free < segment_bytes {
            return Err(JournalError::NoSpace {
                path: segment_path(dir, index),
                source: io::Error::new(
                    io::ErrorKind::StorageFull,
                    format!(
                        "the segment needs {segment_bytes} bytes, the file system has {free} free"
                    ),
                ),
            });
        }
    }
    let temp = dir.join(format!("{index:020}{TEMP_EXT}"));
    let built = build_body(&temp, segment_bytes, paced).and_then(|file| {
        let map = map_segment(&file, populate)
            .map_err(|e| JournalError::io(format!("mapping new segment {}", temp.display()), e))?;
        Ok((file, map))
    });
    match built {
        Ok((file, map)) => Ok(Prepared {
            index,
            temp,
            file,
            map,
        }),
        Err(e) => {
            // Best effort: the temporary file is garbage either way, and the
            // next open removes it if this removal fails too. Removing it
            // also gives the space back.
            let _ = fs::remove_file(&temp);
            Err(match e {
                // Name the segment as the operator will look for it.
                JournalError::NoSpace { source, .. } => JournalError::NoSpace {
                    path: segment_path(dir, index),
                    source,
                },
                other => other,
            })
        }
    }
}

impl Prepared {
    /// Writes the header (first seq known now), makes it durable, renames
    /// the file into place and makes the name durable: only one page is
    /// left to sync here.
    pub(crate) fn finish(
        mut self,
        dir: &Path,
        first_seq: u64,
        segment_bytes: u64,
    ) -> Result<(File, memmap2::MmapMut), JournalError> {
        let final_path = segment_path(dir, self.index);
        let header = SegmentHeader {
            index: self.index,
            first_seq,
            segment_bytes,
        }
        .encode();
        self.map[..SEGMENT_HEADER_LEN].copy_from_slice(&header);
        let done = self
            .map
            .flush_range(0, SEGMENT_HEADER_LEN)
            .map_err(|e| {
                JournalError::io(
                    format!("writing header of new segment {}", self.temp.display()),
                    e,
                )
            })
            .and_then(|()| {
                fs::rename(&self.temp, &final_path).map_err(|e| {
                    JournalError::io(
                        format!(
                            "renaming {} to {}",
                            self.temp.display(),
                            final_path.display()
                        ),
                        e,
                    )
                })
            })
            .and_then(|()| sync_dir(dir));
        match done {
            Ok(()) => Ok((self.file, self.map)),
            Err(e) => {
                let _ = fs::remove_file(&self.temp);
                Err(e)
            }
        }
    }

    /// Gives up a prepared segment that will not be used.
    pub(crate) fn discard(self) {
        drop(self.map);
        let _ = fs::remove_file(&self.temp);
    }
}

/// Bytes of a segment prepared ahead that are written back to disk at a
/// time (see [`build_body`]).
const PACE_BYTES: u64 = 1 << 20;
/// The pause after each step of a segment built ahead: 64 MiB then take
/// at least 64 ms, against the seconds a segment lasts at the venue's
/// highest journal rate (tens of MB/s).
const PACE_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);

/// A new file of `segment_bytes`, zeros with every block allocated, synced
/// (its header is written at [`Prepared::finish`]).
///
/// `paced` (a segment prepared ahead, in the background): the blocks are
/// written back [`PACE_BYTES`] at a time, each synced before the next are
/// dirtied. One sync of 64 MiB of zeros queues that much writing on the
/// disk at once, and every group-commit sync of the active segment issued
/// meanwhile (its cache flush waits for the writes in flight) stalls
/// behind it; paced, a commit waits for at most one step.
fn build_body(path: &Path, segment_bytes: u64, paced: bool) -> Result<File, JournalError> {
    let wrap =
        |what: &str, e| write_error(path, e, || format!("{what} new segment {}", path.display()));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| wrap("creating", e))?;
    file.set_len(segment_bytes).map_err(|e| wrap("sizing", e))?;
    let mut at = 0;
    while at < segment_bytes {
        file.write_all_at(&[0u8], at)
            .map_err(|e| wrap("preallocating", e))?;
        at += PREALLOC_STEP;
        if paced && at.is_multiple_of(PACE_BYTES) && at < segment_bytes {
            file.sync_data().map_err(|e| wrap("syncing", e))?;
            // Built ahead, it has seconds to spare: a pause between steps
            // keeps its CPU (a write per page) from bursting beside the
            // sequencer and the gateway on a small machine.
            std::thread::sleep(PACE_PAUSE);
        }
    }
    file.sync_all().map_err(|e| wrap("syncing", e))?;
    Ok(file)
}

/// Writes zeros over bytes `from..to` of `file` (growing it to `to`),
/// every block allocated, and syncs it: a segment cut short made whole.
pub(crate) fn zero_fill(file: &File, path: &Path, from: u64, to: u64) -> Result<(), JournalError> {
    let wrap = |e| write_error(path, e, || format!("making {} whole again", path.display()));
    let zeros = vec![0u8; PREALLOC_STEP as usize];
    let mut at = from;
    while at < to {
        let n = (to - at).min(PREALLOC_STEP);
        file.write_all_at(&zeros[..n as usize], at).map_err(wrap)?;
        at += n;
    }
    file.sync_all().map_err(wrap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_by_index_and_parse_back() {
        assert_eq!(segment_file_name(3), "00000000000000000003.seg");
        assert_eq!(parse_name("00000000000000000003.seg"), Some(3));
        assert_eq!(parse_name(&segment_file_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_name("3.seg"), None);
        assert_eq!(parse_name("00000000000000000003.seg.tmp"), None);
        assert_eq!(parse_name("0000000000000000000x.seg"), None);
        assert!(segment_file_name(9) < segment_file_name(10));
    }

    /// Minor page faults of the calling thread so far.
    #[cfg(target_os = "linux")]
    fn minor_faults() -> i64 {
        // SAFETY: getrusage writes only the struct it is given; all zeros is
        // a valid value of it.
        unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, &mut usage), 0);
            usage.ru_minflt
        }
    }

    /// A journal that is never synced gets segments faulted in writable, so
    /// that its appends take no page fault (one per page when faulted in for
    /// reading, on a file system that tracks dirty pages); the contents are
    /// the same zeros either way.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_segment_populated_for_writing_takes_no_fault_per_page() {
        let dir = tempfile::tempdir().unwrap();
        // Whether this kernel populates writable at all (5.14 and later),
        // asked of another file so as not to populate the segment itself.
        let probe_path = dir.path().join("probe");
        let probe = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&probe_path)
            .unwrap();
        probe.set_len(4096).unwrap();
        // SAFETY: a file of this test's own, mapped once.
        let probe_map = unsafe { memmap2::MmapOptions::new().map_mut(&probe) }.unwrap();
        if probe_map.advise(memmap2::Advice::PopulateWrite).is_err() {
            eprintln!("skipped: this kernel does not populate mappings writable");
            return;
        }
        let bytes: u64 = 4 << 20;
        let (_file, mut map) = prepare_segment(dir.path(), 6, bytes, false, Populate::Write)
            .unwrap()
            .finish(dir.path(), 1, bytes)
            .unwrap();
        assert!(map[SEGMENT_HEADER_LEN..].iter().all(|&b| b == 0));
        let pages = (SEGMENT_HEADER_LEN..bytes as usize).step_by(4096);
        let count = pages.len() as i64;
        let before = minor_faults();
        for at in pages {
            map[at] = 1;
        }
        let faults = minor_faults() - before;
        // The header's page was synced at `finish`, so it faults again.
        assert!(faults <= 8, "{faults} faults storing into {count} pages");
    }

    #[test]
    fn created_segment_has_header_and_full_length() {
        let dir = tempfile::tempdir().unwrap();
        let (file, _) = prepare_segment(dir.path(), 5, 16384, false, Populate::Read)
            .unwrap()
            .finish(dir.path(), 77, 16384)
            .unwrap();
        assert_eq!(file.metadata().unwrap().len(), 16384);
        let h = read_header(&segment_path(dir.path(), 5)).unwrap();
        assert_eq!(
            h,
            SegmentHeader {
                index: 5,
                first_seq: 77,
                segment_bytes: 16384
            }
        );
        let listed = list_segments(dir.path()).unwrap();
        assert_eq!(
            listed,
            vec![SegFile {
                index: 5,
                path: segment_path(dir.path(), 5)
            }]
        );
    }

    /// A segment larger than the file system's free space is refused
    /// before a byte is written (it filled the disk to its last block
    /// first), naming the segment; no temporary file is left.
    #[test]
    fn a_segment_with_no_room_is_refused_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let Err(JournalError::NoSpace { path, source }) =
            prepare_segment(dir.path(), 2, 1 << 60, false, Populate::Read)
        else {
            panic!("an exabyte segment was built");
        };
        assert_eq!(path, segment_path(dir.path(), 2));
        assert!(source.to_string().contains("free"), "{source}");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// A write that fails for another reason than room (here the directory
    /// is gone) is an I/O error naming what was being done, never `NoSpace`:
    /// an operator told the disk is full would free space in vain.
    #[test]
    fn a_failure_other_than_room_is_not_no_space() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone");
        match prepare_segment(&gone, 3, 16384, false, Populate::Read) {
            Err(JournalError::Io { context, source }) => {
                assert_eq!(source.kind(), io::ErrorKind::NotFound, "{source}");
                assert!(context.contains("creating new segment"), "{context}");
            }
            other => panic!("{:?}", other.map(|p| p.index)),
        }
        assert!(!is_no_space(&io::Error::from(
            io::ErrorKind::PermissionDenied
        )));
        assert!(is_no_space(&io::Error::from_raw_os_error(28)));
        assert!(is_no_space(&io::Error::from_raw_os_error(122)));
    }

    /// The body of a segment, paced or not, has every block allocated when
    /// it is built (`set_len` alone leaves a sparse file, and a store into
    /// one of its holes on a full disk raises SIGBUS mid-append). Checked
    /// where the crate promises it (ext4, xfs, tmpfs: see the crate's
    /// documentation) and before anything maps the file, since a mapping's
    /// page faults allocate on some file systems (tmpfs) and not on others.
    #[test]
    fn a_built_body_has_every_block_allocated() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let Some(kind) = file_system_kind(dir.path()) else {
            eprintln!("skipping: allocation is not promised on this file system");
            return;
        };
        for paced in [false, true] {
            let path = dir.path().join(format!("body-{paced}"));
            let bytes = 2 * PACE_BYTES + 3 * PREALLOC_STEP;
            let file = build_body(&path, bytes, paced).unwrap();
            let meta = file.metadata().unwrap();
            assert_eq!(meta.len(), bytes);
            assert!(
                meta.blocks() * 512 >= bytes,
                "{kind}, paced {paced}: {} of {bytes} bytes allocated",
                meta.blocks() * 512
            );
        }
    }

    /// The name of the file system holding `dir` when it is one whose
    /// allocation the crate promises.
    fn file_system_kind(dir: &Path) -> Option<&'static str> {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
        // SAFETY: a zeroed statfs is a valid value of it; statfs reads a
        // NUL-terminated path and fills the struct it is given.
        let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statfs(path.as_ptr(), &mut stat) } != 0 {
            return None;
        }
        #[allow(clippy::unnecessary_cast)] // its width differs by target
        match stat.f_type as i64 {
            0xEF53 => Some("ext4"),
            0x5846_5342 => Some("xfs"),
            0x0102_1994 => Some("tmpfs"),
            _ => None,
        }
    }

    /// A segment prepared ahead is built in paced steps: over several
    /// steps it still ends full length and zero throughout, and its header
    /// and name arrive at `finish`. (That every block is allocated:
    /// `a_built_body_has_every_block_allocated`.)
    #[test]
    fn a_paced_segment_is_whole_and_zero() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = 2 * PACE_BYTES + 3 * PREALLOC_STEP;
        let prepared = prepare_segment(dir.path(), 4, bytes, true, Populate::Read).unwrap();
        assert_eq!(prepared.file.metadata().unwrap().len(), bytes);
        assert!(prepared.map.iter().all(|&b| b == 0));
        assert!(list_segments(dir.path()).unwrap().is_empty());
        let (file, map) = prepared.finish(dir.path(), 9, bytes).unwrap();
        assert_eq!(file.metadata().unwrap().len(), bytes);
        assert!(map[SEGMENT_HEADER_LEN..].iter().all(|&b| b == 0));
        let h = read_header(&segment_path(dir.path(), 4)).unwrap();
        assert_eq!(
            h,
            SegmentHeader {
                index: 4,
                first_seq: 9,
                segment_bytes: bytes
            }
        );
    }
}
