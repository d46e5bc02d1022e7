//! The single writer: append, commit, segment roll, and recovery at open.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memmap2::MmapMut;

use crate::error::JournalError;
use crate::format::{
    encode_record_header, max_payload, record_len, RECORD_ALIGN, RECORD_HEADER_LEN, RECORD_MARKER,
    SEAL_MARKER, SEGMENT_HEADER_LEN,
};
use crate::scan::{cut, scan, TailCut};
use crate::segment::{prepare_segment, remove_temp_files, sync_dir, Populate, Prepared};

/// Default size of a segment file: 256 MiB.
pub const DEFAULT_SEGMENT_BYTES: u64 = 256 * 1024 * 1024;
/// Segment sizes must be a multiple of this (and at least this large).
pub const SEGMENT_SIZE_UNIT: u64 = 4096;
/// The largest segment: what a venue may be set to make (`segment_mib`),
/// and what a header may name for a cut to make a file whole again.
pub const SEGMENT_BYTES_MAX: u64 = 16 << 30;

/// When appended records are made durable (msync of the written range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Flush after every `append` (and so also at every `commit`).
    Always,
    /// The caller calls `commit` once per batch; `commit` flushes.
    GroupCommit,
    /// `commit` flushes only when at least this many milliseconds passed since
    /// the last flush. The journal reads the monotonic clock here; that clock
    /// never reaches the records, so replay stays deterministic.
    IntervalMs(u64),
    /// Never flush on `commit`; only `sync` (or a segment roll) flushes.
    /// Data still reaches disk through the kernel's own writeback. For benchmarks.
    /// Its segments are faulted in writable when they are built, every
    /// page dirty at once, so that appends take no page fault; a sync (a
    /// roll, `close`) writes back the rest of the segment's zeros too.
    Never,
}

/// How to open a journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalConfig {
    /// Directory of segment files; created when missing.
    pub dir: PathBuf,
    /// Size of each new segment file, preallocated at creation. A multiple of 4096.
    pub segment_bytes: u64,
    pub durability: Durability,
    /// When true, damage in the middle of the log (bad record, sequence gap,
    /// missing segment, bad segment header) makes open cut the journal back to
    /// the last good record instead of failing. A torn tail is always cut,
    /// unless cutting it would drop a record through `keep_through`.
    pub truncate_on_corruption: bool,
    /// Records through this seq are known to be acknowledged (a snapshot
    /// holds them; 0 when nothing is known). A torn tail whose cut would
    /// drop one of them is damage, not a crash's leftover: open refuses,
    /// unless `truncate_on_corruption`, and changes nothing.
    pub keep_through: u64,
}

impl JournalConfig {
    /// A configuration with the defaults: 256 MiB segments, group commit,
    /// and refusal to open a journal damaged in the middle.
    pub fn new(dir: impl Into<PathBuf>) -> JournalConfig {
        JournalConfig {
            dir: dir.into(),
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            durability: Durability::GroupCommit,
            truncate_on_corruption: false,
            keep_through: 0,
        }
    }
}

/// What open found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// Valid records in the journal after recovery.
    pub records: u64,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    /// Segment files in the journal after recovery.
    pub segments: u64,
    /// The cut made at open: a torn tail, or damage when `truncate_on_corruption` is set.
    pub truncated_tail: Option<TailCut>,
    /// A last segment that held no record (a crash right after it was created)
    /// and was removed; it is re-created by the next append.
    pub removed_empty_segment: Option<PathBuf>,
    /// The seq the journal's next record must carry, when the journal says:
    /// `last_seq + 1`, or, with no record left, the first seq named by the
    /// header of its only segment, which is kept empty (the records before
    /// it were in segments removed earlier, so the journal is not new:
    /// whoever appends must start there, from a snapshot through the seq
    /// before).
    pub next_seq: Option<u64>,
}

impl Recovery {
    /// The seq the journal ends at: the one before [`Recovery::next_seq`]
    /// (0 for a new journal). With no record left after older segments
    /// were removed, it names the last record of those.
    pub fn end_seq(&self) -> u64 {
        crate::scan::end_seq(self.next_seq)
    }
}

/// The segment being appended to.
struct Active {
    index: u64,
    path: PathBuf,
    map: MmapMut,
    /// The segment file, shared with the [`SyncPoint`]s handed out for it.
    file: Arc<File>,
    /// Offset of the next record header.
    pos: usize,
    /// Bytes before this offset are known to be flushed.
    synced: usize,
}

/// The single writer of a journal. Only one may exist per directory at a
/// time: it holds `LOCK` (see `_lock`), so a second one is refused.
///
/// Dropping it does not flush: appended records stay in the kernel's page
/// cache, which survives the process but not a power loss. `close` or `sync`
/// makes them durable and reports a failure.
pub struct Journal {
    dir: PathBuf,
    segment_bytes: u64,
    durability: Durability,
    /// `None` when there is no segment yet, or the last one is sealed or full.
    active: Option<Active>,
    /// Index given to the next segment created.
    next_index: u64,
    /// See [`Journal::last_seq`]: the next append must carry the seq after.
    last_seq: Option<u64>,
    /// See [`Journal::last_record_crc`].
    last_crc: Option<u32>,
    last_flush: Instant,
    poisoned: bool,
    /// A `SyncPoint` was handed out since the last flush: its sync may not
    /// have happened yet, so the next flush must not be skipped.
    deferred: bool,
    /// The next segment, being built on a `journal-prepare` thread: creating,
    /// preallocating, syncing and mapping 64 MiB took tens of milliseconds
    /// on the appending thread at every roll.
    preparing: Option<Preparing>,
    /// The next segment, built and waiting for its roll (taken out of
    /// `preparing` by [`Journal::next_segment_problem`]).
    ready: Option<Prepared>,
    /// Why the last attempt to build the next segment failed, and when it
    /// was made; cleared once one succeeds.
    prepare_failed: Option<(String, Instant)>,
    /// Bytes the journal's file system has free (`free_bytes`; tests
    /// replace it): a failed build is tried again only when a segment fits.
    room: fn(&Path) -> Option<u64>,
    /// Syncs this writer made itself (every append under `Always`, due
    /// commits under `IntervalMs`, rolls), and the time they took; the
    /// syncs of handed-out [`SyncPoint`]s are their caller's to count.
    syncs: SyncCount,
    /// `LOCK` in the directory, locked (`flock`) while this writer lives: a
    /// second writer on the same journal (a second `updown serve` on the
    /// same data directory) would cut, overwrite and delete under the
    /// first. Released by the kernel when the process ends, however.
    _lock: File,
    /// That file's device and inode, for `still_in_place` (where the
    /// platform has them).
    lock_identity: Option<(u64, u64)>,
}

/// A file's device and inode, where the platform has them.
fn identity(metadata: &std::fs::Metadata) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some((metadata.dev(), metadata.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = metadata;
        None
    }
}

/// Syncs made and the time they took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncCount {
    pub syncs: u64,
    pub micros: u64,
}

impl SyncCount {
    /// `fdatasync` of `file`, counted and timed whether it fails or not.
    fn sync(&mut self, file: &File) -> std::io::Result<()> {
        let started = Instant::now();
        let synced = file.sync_data();
        self.syncs += 1;
        self.micros += started.elapsed().as_micros() as u64;
        synced
    }
}

/// The file a writer locks in its journal directory.
pub const LOCK_FILE: &str = "LOCK";

/// Whether a writer holds the journal in `dir` now, for tools that must
/// not act behind a running venue's back. It takes the lock shared for an
/// instant: a writer opening the journal in that instant is refused as if
/// another one held it.
pub fn writer_running(dir: &Path) -> Result<bool, JournalError> {
    let path = dir.join(LOCK_FILE);
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(JournalError::io(format!("opening {}", path.display()), e)),
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(false),
        Err(std::fs::TryLockError::WouldBlock) => Ok(true),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(JournalError::io(format!("locking {}", path.display()), e))
        }
    }
}

/// How long after a failed build of the next segment it is tried again.
pub const PREPARE_RETRY: Duration = Duration::from_secs(1);

/// Bytes the file system holding `dir` has free for an unprivileged
/// writer, where the platform says.
#[cfg(unix)]
pub fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: a zeroed statvfs is a valid value of it; statvfs reads a
    // NUL-terminated path and fills the struct it is given.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    // A file system that counts no blocks at all (some virtual ones) says
    // nothing of its room: unknown, not full.
    if stat.f_blocks == 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // u32 on some targets, u64 on others
    Some((stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
}

#[cfg(not(unix))]
pub fn free_bytes(_: &Path) -> Option<u64> {
    None
}

/// A segment being built on its own thread; joining it gives the result
/// and leaves no thread behind.
type Preparing = std::thread::JoinHandle<Result<Prepared, JournalError>>;

/// The prepared segment, waiting for its thread if it is still at work;
/// `None` when its preparation failed.
fn finish(preparing: Preparing) -> Option<Prepared> {
    preparing.join().ok()?.ok()
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("dir", &self.dir)
            .field("segment", &self.active.as_ref().map(|a| &a.path))
            .field("pos", &self.active.as_ref().map(|a| a.pos))
            .field("last_seq", &self.last_seq)
            .finish()
    }
}

impl Journal {
    /// Opens (creating the directory if missing) and recovers the journal:
    /// every segment and record is checked, a torn tail is cut off, and the
    /// writer is positioned after the last good record.
    pub fn open(config: JournalConfig) -> Result<(Journal, Recovery), JournalError> {
        let JournalConfig {
            dir,
            segment_bytes,
            durability,
            truncate_on_corruption,
            keep_through,
        } = config;
        if segment_bytes < SEGMENT_SIZE_UNIT || !segment_bytes.is_multiple_of(SEGMENT_SIZE_UNIT) {
            return Err(JournalError::Invalid(format!(
                "segment_bytes {segment_bytes} must be a non-zero multiple of {SEGMENT_SIZE_UNIT}"
            )));
        }
        if usize::try_from(segment_bytes).is_err() {
            return Err(JournalError::Invalid(format!(
                "segment_bytes {segment_bytes} does not fit in memory"
            )));
        }
        // Directories created here must reach their parents durably too, or
        // a power loss could take the whole journal directory away.
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
            .map(Path::to_path_buf)
            .collect();
        fs::create_dir_all(&dir).map_err(|e| {
            JournalError::io(format!("creating journal directory {}", dir.display()), e)
        })?;
        for created in &missing {
            if let Some(parent) = created.parent().filter(|p| !p.as_os_str().is_empty()) {
                sync_dir(parent)?;
            }
        }
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(dir.join(LOCK_FILE))
            .map_err(|e| JournalError::io(format!("opening {}/{LOCK_FILE}", dir.display()), e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(JournalError::Invalid(format!(
                    "the journal {} is open for writing by another process (is another updown serve running on this data directory?)",
                    dir.display()
                )))
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(JournalError::io(
                    format!("locking {}/{LOCK_FILE}", dir.display()),
                    e,
                ))
            }
        }
        remove_temp_files(&dir)?;

        let mut found = scan(&dir)?;
        let mut truncated_tail = None;
        // A segment cut after its seal loses nothing when it is made whole
        // again, and the scan then goes on past it (a later segment may
        // hold the same damage, or other).
        while let Some(f) = found.problem.take_if(|f| {
            truncate_on_corruption && f.problem.kind == crate::scan::ProblemKind::CutAfterSeal
        }) {
            crate::scan::make_whole(&found.segments[f.seg_pos])?;
            let again = scan(&dir)?;
            if again.problem.as_ref().is_some_and(|g| {
                g.problem.kind == f.problem.kind && g.problem.segment == f.problem.segment
            }) {
                return Err(f.problem.to_error(None));
            }
            found = again;
            truncated_tail = Some(TailCut {
                segment: f.problem.segment,
                segment_index: f.problem.segment_index,
                offset: f.problem.offset,
                bytes_dropped: 0,
                segments_removed: Vec::new(),
                kind: f.problem.kind,
                reason: f.problem.reason,
            });
        }
        if let Some(f) = found.problem.take() {
            let is_torn = f.problem.kind == crate::scan::ProblemKind::TornTail;
            if !is_torn && !truncate_on_corruption {
                let next_present = found.segments.get(f.seg_pos).map(|s| s.path.as_path());
                return Err(f.problem.to_error(next_present));
            }
            // What the cut keeps: everything before the seq the next record
            // must carry (after the last whole record, or, when no record
            // is left, the first seq the remaining segment was made for).
            let kept = crate::scan::end_seq(found.next_seq);
            if kept < keep_through && !truncate_on_corruption {
                return Err(JournalError::CutWouldDrop {
                    segment: f.problem.segment,
                    offset: f.problem.offset,
                    reason: f.problem.reason,
                    kept,
                    keep_through,
                });
            }
            let (bytes_dropped, segments_removed) =
                cut(&dir, &found.segments, f.seg_pos, f.problem.offset)?;
            truncated_tail = Some(TailCut {
                segment: f.problem.segment,
                segment_index: f.problem.segment_index,
                offset: f.problem.offset,
                bytes_dropped,
                segments_removed,
                kind: f.problem.kind,
                reason: f.problem.reason,
            });
            // Scan again so that the writer's position comes from the same
            // code path as a clean open, and so that the cut is verified.
            found = scan(&dir)?;
            if let Some(f) = found.problem {
                let next_present = found.segments.get(f.seg_pos).map(|s| s.path.as_path());
                return Err(f.problem.to_error(next_present));
            }
        }

        let mut segments = found.segments.len() as u64;
        let mut removed_empty_segment = None;
        let mut active = None;
        let mut next_index = 0;
        // An empty segment that is the journal's only one, made for a seq
        // past 1: the segments before it were removed, and its header is
        // the only record of the seq the journal goes on from. It stays,
        // and the next append must carry that seq.
        let resumes_at = found
            .tail
            .as_ref()
            .filter(|t| t.records == 0 && found.segments.len() == 1)
            .and(found.next_seq)
            .filter(|&next| next > 1);
        if let Some(tail) = found.tail {
            if tail.records == 0 && resumes_at.is_none() {
                // A segment is created together with its first record, so an
                // empty last segment means that record never reached the disk.
                // Removing it lets the next append choose its first seq freely
                // on an empty journal and re-create the segment.
                fs::remove_file(&tail.path).map_err(|e| {
                    JournalError::io(format!("removing empty segment {}", tail.path.display()), e)
                })?;
                sync_dir(&dir)?;
                segments -= 1;
                next_index = tail.index;
                match truncated_tail.as_mut() {
                    Some(cut) => cut.segments_removed.push(tail.path),
                    None => removed_empty_segment = Some(tail.path),
                }
            } else if tail.writable {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&tail.path)
                    .map_err(|e| {
                        JournalError::io(format!("opening segment {}", tail.path.display()), e)
                    })?;
                // What the last segment holds may be in the page cache only
                // (the process died before its sync): it reaches the disk
                // before anything is built on it (replayed state, a
                // snapshot, reads, later records).
                file.sync_data().map_err(|e| {
                    JournalError::io(format!("syncing segment {}", tail.path.display()), e)
                })?;
                // SAFETY: the file is a complete, preallocated segment that is
                // never shrunk, so every mapped byte is backed by the file.
                // This is the only writer; readers map the same file read-only
                // and only look at records after their marker is published.
                let map = unsafe { MmapMut::map_mut(&file) }.map_err(|e| {
                    JournalError::io(format!("mapping segment {}", tail.path.display()), e)
                })?;
                let pos = usize::try_from(tail.end).expect("segment fits in memory");
                active = Some(Active {
                    index: tail.index,
                    path: tail.path,
                    map,
                    file: Arc::new(file),
                    pos,
                    synced: pos,
                });
                next_index = tail.index + 1;
            } else {
                // Sealed, but the process may have died before the roll's
                // sync: the next segment must not become durable before it.
                File::open(&tail.path)
                    .and_then(|f| f.sync_data())
                    .map_err(|e| {
                        JournalError::io(format!("syncing segment {}", tail.path.display()), e)
                    })?;
                next_index = tail.index + 1;
            }
        }

        let recovery = Recovery {
            records: found.records,
            first_seq: found.first_seq,
            last_seq: found.last_seq,
            segments,
            truncated_tail,
            removed_empty_segment,
            next_seq: found.next_seq,
        };
        let journal = Journal {
            dir,
            segment_bytes,
            durability,
            active,
            next_index,
            last_seq: found.last_seq.or(resumes_at.map(|next| next - 1)),
            last_crc: found.last_crc,
            last_flush: Instant::now(),
            poisoned: false,
            deferred: false,
            preparing: None,
            ready: None,
            prepare_failed: None,
            room: free_bytes,
            syncs: SyncCount::default(),
            lock_identity: lock.metadata().ok().as_ref().and_then(identity),
            _lock: lock,
        };
        let mut journal = journal;
        journal.prepare_next(None);
        Ok((journal, recovery))
    }

    /// Appends one record. `seq` must be exactly `last_seq + 1`; on an empty
    /// journal any `seq >= 1` starts it. Rolls to a new segment when the
    /// record does not fit in the current one. Durable only per the policy:
    /// with `Always` before this returns, otherwise after `commit`/`sync`.
    ///
    /// No allocation and no system call happen here except on a segment roll
    /// and on the flush of `Durability::Always`.
    pub fn append(&mut self, seq: u64, kind: u16, payload: &[u8]) -> Result<(), JournalError> {
        if self.poisoned {
            return Err(JournalError::Poisoned);
        }
        match self.last_seq {
            Some(last) if last.checked_add(1) != Some(seq) => {
                return Err(JournalError::OutOfOrder {
                    expected: last.wrapping_add(1),
                    got: seq,
                });
            }
            None if seq == 0 => {
                return Err(JournalError::OutOfOrder {
                    expected: 1,
                    got: 0,
                })
            }
            _ => {}
        }
        let max = max_payload(self.segment_bytes);
        if payload.len() > max {
            return Err(JournalError::RecordTooLarge {
                len: payload.len(),
                max,
            });
        }
        let total = record_len(payload.len());
        let fits = self
            .active
            .as_ref()
            .is_some_and(|a| a.pos + total <= a.map.len());
        if !fits {
            self.roll(seq)?;
        }
        let active = self.active.as_mut().expect("roll leaves an active segment");
        let pos = active.pos;
        assert!(
            pos + total <= active.map.len(),
            "record must fit after a roll"
        );
        assert_eq!(pos % RECORD_ALIGN, 0, "record headers are 16-byte aligned");
        let start = pos + RECORD_HEADER_LEN;
        let end = start + payload.len();
        assert_eq!(
            active.map[start..].as_ptr() as usize % RECORD_ALIGN,
            0,
            "payloads must be 16-byte aligned in memory for zero-copy decoding"
        );
        assert_eq!(
            active.map[pos..pos + 4],
            [0u8; 4],
            "appending over a published slot"
        );
        // The payload goes first and the marker last, so that a reader (or
        // recovery after a crash) never takes a half-written record as valid.
        active.map[start..end].copy_from_slice(payload);
        active.map[end..pos + total].fill(0);
        let header = encode_record_header(RECORD_MARKER, seq, kind, payload);
        publish(&mut active.map, pos, &header);
        active.pos = pos + total;
        self.last_seq = Some(seq);
        self.last_crc = Some(crate::format::read_u32(&header, 20));
        if self.durability == Durability::Always {
            self.flush()?;
        }
        Ok(())
    }

    /// Syncs this writer made itself so far (not those of [`SyncPoint`]s).
    pub fn syncs(&self) -> SyncCount {
        self.syncs
    }

    /// Makes the records appended so far durable according to the policy.
    pub fn commit(&mut self) -> Result<(), JournalError> {
        if self.poisoned {
            return Err(JournalError::Poisoned);
        }
        match self.durability {
            Durability::Always | Durability::GroupCommit => self.flush(),
            Durability::IntervalMs(ms) => {
                if self.last_flush.elapsed() >= Duration::from_millis(ms) {
                    self.flush()
                } else {
                    Ok(())
                }
            }
            Durability::Never => Ok(()),
        }
    }

    /// Like [`Journal::commit`], but leaves the flush itself to the caller:
    /// when the policy wants a flush now, the records appended so far are
    /// handed back as a [`SyncPoint`], and they are durable once
    /// [`SyncPoint::sync`] returns `Ok`. This lets another thread wait for
    /// the disk while the writer goes on appending (a pipelined group
    /// commit). The journal counts the range as flushed from here on; if
    /// the point's sync fails, the caller must stop writing (see
    /// [`Journal::poison`]).
    ///
    /// `Always` flushed at every append already, and `Never` leaves flushing
    /// to `sync`: both answer `None`.
    pub fn commit_deferred(&mut self) -> Result<Option<SyncPoint>, JournalError> {
        if self.poisoned {
            return Err(JournalError::Poisoned);
        }
        let due = match self.durability {
            Durability::GroupCommit => true,
            Durability::IntervalMs(ms) => self.last_flush.elapsed() >= Duration::from_millis(ms),
            Durability::Always | Durability::Never => false,
        };
        if !due {
            return Ok(None);
        }
        self.still_in_place()?;
        self.last_flush = Instant::now();
        let unsynced = self.active.as_mut().is_some_and(|a| {
            let unsynced = a.pos > a.synced;
            a.synced = a.pos;
            unsynced
        });
        Ok(if unsynced { self.point() } else { None })
    }

    /// A point covering every record appended so far, whatever the policy
    /// (for a snapshot, which must never describe records that are not
    /// durable). `None` when nothing was appended to the active segment; a
    /// roll synced the older ones.
    pub fn sync_point(&mut self) -> Result<Option<SyncPoint>, JournalError> {
        if self.poisoned {
            return Err(JournalError::Poisoned);
        }
        self.still_in_place()?;
        Ok(self.point())
    }

    /// Refuses (and stops the journal) once its directory was removed
    /// while open: the writer would go on into files that no longer have a
    /// name, lost at exit, while another venue may be started on the same
    /// path and have this one's snapshots written into its directory (a
    /// resource trial, twelfth session). Checked where the records are
    /// made durable and at rolls: a `stat` beside a sync.
    ///
    /// The file at `dir/LOCK` must still be the one this writer locked
    /// (same device and inode): a removed, moved or replaced directory
    /// fails it. A `stat` that fails otherwise (not "not found") is let
    /// pass.
    fn still_in_place(&mut self) -> Result<(), JournalError> {
        let Some(held) = self.lock_identity else {
            return Ok(());
        };
        let moved = match std::fs::metadata(self.dir.join(LOCK_FILE)) {
            Ok(named) => identity(&named) != Some(held),
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        };
        if moved {
            self.poisoned = true;
            return Err(JournalError::Invalid(format!(
                "the journal {} was removed or moved while the venue ran (its {LOCK_FILE} file is not there any more): writes stop here; what was written since is only in the files this process holds open",
                self.dir.display()
            )));
        }
        Ok(())
    }

    /// A point at the end of the active segment; the next flush must not
    /// be skipped while it may be in flight.
    fn point(&mut self) -> Option<SyncPoint> {
        let seq = self.last_seq.unwrap_or(0);
        let point = self.active.as_ref().map(|a| SyncPoint {
            file: a.file.clone(),
            segment: a.index,
            path: a.path.clone(),
            seq,
        });
        self.deferred |= point.is_some();
        point
    }

    /// Refuses every later append, commit and sync: a deferred sync failed,
    /// so what was appended may not be on the disk.
    pub fn poison(&mut self) {
        self.poisoned = true;
    }

    /// Flushes everything appended so far, whatever the policy.
    pub fn sync(&mut self) -> Result<(), JournalError> {
        if self.poisoned {
            return Err(JournalError::Poisoned);
        }
        self.flush()
    }

    /// After a failure stopped the journal: makes durable what was appended
    /// before it (records the caller's state already holds), so that what
    /// the caller shows of that state stays true. The journal stays stopped.
    pub fn sync_appended(&mut self) -> Result<(), JournalError> {
        if let Some(a) = self.active.as_mut() {
            a.file.sync_data().map_err(|e| {
                JournalError::io(format!("flushing segment {}", a.path.display()), e)
            })?;
            a.synced = a.pos;
        }
        Ok(())
    }

    /// The sequence number of the last appended record; on a journal
    /// that holds none but goes on from removed segments (its only
    /// segment's header names a first seq past 1), the seq before that.
    pub fn last_seq(&self) -> Option<u64> {
        self.last_seq
    }

    /// The checksum of the record at [`Journal::last_seq`] (`None` when the
    /// journal holds no record). A snapshot of the state after that record
    /// names it, so that it is never taken for the state of another journal.
    pub fn last_record_crc(&self) -> Option<u32> {
        self.last_crc
    }

    /// The journal directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The durability policy in force.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Flushes and closes the journal, reporting a flush failure that a plain
    /// drop would have to ignore.
    pub fn close(mut self) -> Result<(), JournalError> {
        self.sync()
    }

    /// Makes the active segment durable: `fdatasync` of its file, which on
    /// Linux is what `msync(MS_SYNC)` of the mapping does (see
    /// [`SyncPoint`]), and covers ranges handed out by `commit_deferred`
    /// whose sync may still be in flight. The file's length and blocks were
    /// made durable when the segment was created.
    fn flush(&mut self) -> Result<(), JournalError> {
        self.still_in_place()?;
        if let Some(a) = self.active.as_mut() {
            if a.pos > a.synced || self.deferred {
                if let Err(e) = self.syncs.sync(&a.file) {
                    self.poisoned = true;
                    return Err(JournalError::io(
                        format!("flushing segment {}", a.path.display()),
                        e,
                    ));
                }
                a.synced = a.pos;
            }
        }
        self.deferred = false;
        self.last_flush = Instant::now();
        Ok(())
    }

    /// Seals the current segment, flushes it whatever the policy, and creates
    /// the next one starting at `first_seq`. Flushing before the next segment
    /// exists keeps a simple invariant for recovery: only the last segment can
    /// ever have a torn tail.
    fn roll(&mut self, first_seq: u64) -> Result<(), JournalError> {
        self.still_in_place()?;
        // The sealed segment's mapping, unmapped on the next preparing thread:
        // tearing down 64 MiB of populated pages took 3-4 ms of the appending
        // thread at every roll.
        let mut retired = None;
        if let Some(mut a) = self.active.take() {
            if a.pos + RECORD_HEADER_LEN <= a.map.len() {
                let seal = encode_record_header(SEAL_MARKER, self.last_seq.unwrap_or(0), 0, &[]);
                publish(&mut a.map, a.pos, &seal);
            }
            // The whole file, not only the range since the last flush: a
            // deferred `SyncPoint` for an earlier range of this segment may
            // still be in flight on another thread, and the records of the
            // next segment must never be durable before these.
            if let Err(e) = self.syncs.sync(&a.file) {
                self.poisoned = true;
                return Err(JournalError::io(
                    format!("flushing sealed segment {}", a.path.display()),
                    e,
                ));
            }
            self.next_index = a.index + 1;
            retired = Some(a.map);
        }
        let index = self.next_index;
        let path = crate::segment::segment_path(&self.dir, index);
        // Nothing prepared (or its preparation failed): built here, unpaced,
        // which reports a failure as the roll's, naming the segment.
        let prepared = match self.take_prepared(index) {
            Some(prepared) => prepared,
            None => prepare_segment(&self.dir, index, self.segment_bytes, false, self.populate())?,
        };
        let (file, map) = prepared.finish(&self.dir, first_seq, self.segment_bytes)?;
        self.next_index = index + 1;
        self.active = Some(Active {
            index,
            path,
            map,
            file: Arc::new(file),
            pos: SEGMENT_HEADER_LEN,
            synced: SEGMENT_HEADER_LEN,
        });
        // What failed before was the build of the segment now in place.
        self.prepare_failed = None;
        self.prepare_next(retired);
        Ok(())
    }

    /// Starts building the segment the next roll will need, on its own
    /// thread (called at open and after each roll, when none is being
    /// built); that thread first unmaps `retired`, the segment just sealed.
    fn prepare_next(&mut self, retired: Option<MmapMut>) {
        debug_assert!(self.preparing.is_none());
        let index = match &self.active {
            Some(a) => a.index + 1,
            None => self.next_index,
        };
        let (dir, bytes, populate) = (self.dir.clone(), self.segment_bytes, self.populate());
        // Without a thread the roll builds the segment itself.
        self.preparing = std::thread::Builder::new()
            .name("journal-prepare".into())
            .spawn(move || {
                drop(retired);
                prepare_segment(&dir, index, bytes, true, populate)
            })
            .ok();
    }

    /// How new segments are faulted in: writable, dirty at once, when
    /// nothing is ever synced (`Never`), so that appends take no fault;
    /// else for reading, so that a sync writes back only what was
    /// appended (see [`Populate`]).
    fn populate(&self) -> Populate {
        if self.durability == Durability::Never {
            Populate::Write
        } else {
            Populate::Read
        }
    }

    /// Why the segment the next roll needs could not be built ahead (a full
    /// disk, most often), as soon as its builder has finished: that roll
    /// builds it itself and fails the same way unless the cause goes first,
    /// which stops the journal. A failed build is tried again at most every
    /// [`PREPARE_RETRY`] (on a call of this), and only when the file system
    /// has room for a whole segment (a build on a full disk takes every
    /// free block before it fails, which other writers there would meet),
    /// so the report clears once space is freed; it stands while a new try
    /// runs. `None` while the first build runs, once one succeeded, or with
    /// nothing to build. Cheap: for a writer's idle moments.
    pub fn next_segment_problem(&mut self) -> Option<&str> {
        if self.preparing.as_ref().is_some_and(|p| p.is_finished()) {
            let finished = self.preparing.take().expect("finished").join();
            match finished {
                Ok(Ok(prepared)) => {
                    if let Some(stale) = self.ready.replace(prepared) {
                        stale.discard();
                    }
                    self.prepare_failed = None;
                }
                Ok(Err(e)) => self.prepare_failed = Some((e.to_string(), Instant::now())),
                Err(_) => {
                    self.prepare_failed =
                        Some(("the thread building it panicked".into(), Instant::now()))
                }
            }
        }
        let retry = self.preparing.is_none()
            && self.ready.is_none()
            && self.active.is_some()
            && !self.poisoned
            && self
                .prepare_failed
                .as_ref()
                .is_some_and(|(_, at)| at.elapsed() >= PREPARE_RETRY);
        if retry && (self.room)(&self.dir).is_some_and(|free| free < self.segment_bytes) {
            // No room yet: look again after another interval.
            if let Some((_, at)) = &mut self.prepare_failed {
                *at = Instant::now();
            }
        } else if retry {
            self.prepare_next(None);
        }
        self.prepare_failed.as_ref().map(|(why, _)| why.as_str())
    }

    /// The prepared segment `index`, waiting for its thread if it is still
    /// at work; `None` when none was prepared or its preparation failed.
    fn take_prepared(&mut self, index: u64) -> Option<Prepared> {
        let prepared = match self.ready.take() {
            Some(ready) => {
                if let Some(running) = self.preparing.take() {
                    if let Some(other) = finish(running) {
                        other.discard();
                    }
                }
                ready
            }
            None => finish(self.preparing.take()?)?,
        };
        if prepared.index == index {
            Some(prepared)
        } else {
            prepared.discard();
            None
        }
    }
}

impl Drop for Journal {
    /// A segment still being prepared is removed once built (a crash
    /// leaves it under its temporary name, which the next open removes).
    fn drop(&mut self) {
        if let Some(prepared) = self.preparing.take().and_then(finish) {
            prepared.discard();
        }
        if let Some(prepared) = self.ready.take() {
            prepared.discard();
        }
    }
}

/// Records appended before a [`Journal::commit_deferred`], to be made
/// durable by [`SyncPoint::sync`], on any thread.
///
/// On Linux, `msync(MS_SYNC)` of a shared file mapping is `fdatasync` of the
/// file's range (the kernel tracks pages dirtied through the mapping in the
/// page cache), so `fdatasync` of the segment file makes the mapped writes
/// durable without touching the mapping: no pointer into it crosses threads,
/// and the point stays valid after the writer rolled to the next segment and
/// unmapped this one.
#[derive(Debug, Clone)]
pub struct SyncPoint {
    file: Arc<File>,
    segment: u64,
    path: PathBuf,
    seq: u64,
}

impl SyncPoint {
    /// Waits until every record appended before this point is on the disk.
    pub fn sync(&self) -> Result<(), JournalError> {
        self.file
            .sync_data()
            .map_err(|e| JournalError::io(format!("flushing segment {}", self.path.display()), e))
    }

    /// The last seq this point covers.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// True when both points are in the same segment file (so syncing the
    /// later one covers the earlier one too).
    pub fn same_segment(&self, other: &SyncPoint) -> bool {
        self.segment == other.segment
    }
}

/// Writes a record header at `pos`: bytes 4..32 first, then the marker with
/// release ordering, so that a reader that loads the marker with acquire
/// ordering sees the whole header and payload.
fn publish(map: &mut MmapMut, pos: usize, header: &[u8; RECORD_HEADER_LEN]) {
    assert_eq!(pos % RECORD_ALIGN, 0);
    map[pos + 4..pos + RECORD_HEADER_LEN].copy_from_slice(&header[4..]);
    let marker = u32::from_ne_bytes(header[0..4].try_into().expect("4 bytes"));
    let ptr = map[pos..pos + 4].as_mut_ptr().cast::<u32>();
    // SAFETY: `ptr` points into our writable mapping, is 4-byte aligned
    // (page-aligned base plus a 16-byte aligned offset, asserted above) and
    // valid for reads and writes while `map` is borrowed mutably. Readers in
    // other threads only read these bytes, with a volatile load followed by an
    // acquire fence, so this atomic store is the only write to them.
    let atomic = unsafe { AtomicU32::from_ptr(ptr) };
    atomic.store(marker, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &Path, durability: Durability) -> Journal {
        let mut cfg = JournalConfig::new(dir);
        cfg.segment_bytes = 64 * 1024;
        cfg.durability = durability;
        Journal::open(cfg).unwrap().0
    }

    /// (position, flushed position) of the active segment.
    fn positions(j: &Journal) -> (usize, usize) {
        let a = j.active.as_ref().unwrap();
        (a.pos, a.synced)
    }

    /// A second writer on one journal (a second server on one data
    /// directory) is refused while the first lives, and allowed after.
    #[test]
    fn one_writer_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = open(dir.path(), Durability::GroupCommit);
        first.append(1, 1, b"one").unwrap();
        let mut cfg = JournalConfig::new(dir.path());
        cfg.segment_bytes = 64 * 1024;
        let refused = Journal::open(cfg.clone()).unwrap_err().to_string();
        assert!(
            refused.contains("is open for writing by another process"),
            "{refused}"
        );
        // The refused open changed nothing: the first goes on.
        first.append(2, 1, b"two").unwrap();
        first.commit().unwrap();
        drop(first);
        let (_, recovery) = Journal::open(cfg).unwrap();
        assert_eq!(recovery.last_seq, Some(2));
    }

    /// The last record's checksum, as appended and as found again by an
    /// open, is the one a reader sees in that record's header.
    #[test]
    fn last_record_crc_is_the_stored_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = open(dir.path(), Durability::GroupCommit);
        assert_eq!(j.last_record_crc(), None, "no record yet");
        j.append(1, 1, b"one").unwrap();
        j.append(2, 7, b"two").unwrap();
        j.commit().unwrap();
        let appended = j.last_record_crc().expect("a record");
        drop(j);
        let mut reader = crate::Reader::open(dir.path()).unwrap();
        let first = reader.next().unwrap().unwrap().crc;
        let second = reader.next().unwrap().unwrap();
        assert_eq!((second.seq, second.crc), (2, appended));
        assert_ne!(first, appended, "each record has its own");
        let reopened = open(dir.path(), Durability::GroupCommit);
        assert_eq!(reopened.last_record_crc(), Some(appended));
    }

    #[test]
    fn defaults() {
        let cfg = JournalConfig::new("/x");
        assert_eq!(cfg.segment_bytes, 256 * 1024 * 1024);
        assert_eq!(cfg.durability, Durability::GroupCommit);
        assert!(!cfg.truncate_on_corruption);
    }

    #[test]
    fn always_flushes_on_every_append() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = open(dir.path(), Durability::Always);
        j.append(1, 1, b"a").unwrap();
        let (pos, synced) = positions(&j);
        assert_eq!(pos, synced);
    }

    #[test]
    fn group_commit_flushes_on_commit_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = open(dir.path(), Durability::GroupCommit);
        j.append(1, 1, b"a").unwrap();
        j.append(2, 1, b"b").unwrap();
        let (pos, synced) = positions(&j);
        assert!(synced < pos);
        j.commit().unwrap();
        let (pos, synced) = positions(&j);
        assert_eq!(pos, synced);
    }

    #[test]
    fn interval_flushes_only_when_due() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = open(dir.path(), Durability::IntervalMs(3_600_000));
        j.append(1, 1, b"a").unwrap();
        j.commit().unwrap();
        let (pos, synced) = positions(&j);
        assert!(synced < pos, "an hour has not passed");
        j.sync().unwrap();
        let (pos, synced) = positions(&j);
        assert_eq!(pos, synced, "sync flushes whatever the policy");

        let dir2 = tempfile::tempdir().unwrap();
        let mut j = open(dir2.path(), Durability::IntervalMs(0));
        j.append(1, 1, b"a").unwrap();
        j.commit().unwrap();
        let (pos, synced) = positions(&j);
        assert_eq!(pos, synced);
    }

    #[test]
    fn never_leaves_flushing_to_sync() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = open(dir.path(), Durability::Never);
        j.append(1, 1, b"a").unwrap();
        j.commit().unwrap();
        let (pos, synced) = positions(&j);
        assert!(synced < pos);
        j.sync().unwrap();
        let (pos, synced) = positions(&j);
        assert_eq!(pos, synced);
    }

    #[test]
    fn deferred_commit_hands_out_a_point_per_flush_due() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = open(dir.path(), Durability::GroupCommit);
        assert!(j.commit_deferred().unwrap().is_none(), "nothing appended");
        j.append(1, 1, b"a").unwrap();
        j.append(2, 1, b"b").unwrap();
        let point = j.commit_deferred().unwrap().expect("group commit flushes");
        assert_eq!(point.seq(), 2);
        let (pos, synced) = positions(&j);
        assert_eq!(pos, synced, "the range is handed over");
        assert!(j.commit_deferred().unwrap().is_none(), "nothing new");
        j.append(3, 1, b"c").unwrap();
        let later = j.commit_deferred().unwrap().unwrap();
        assert!(later.same_segment(&point));
        // The points sync on another thread while the writer goes on.
        let handle = std::thread::spawn(move || (point.sync(), later.sync()));
        j.append(4, 1, b"d").unwrap();
        let (a, b) = handle.join().unwrap();
        a.unwrap();
        b.unwrap();
        j.sync().unwrap();
        assert_eq!(j.last_seq(), Some(4));

        for policy in [
            Durability::Never,
            Durability::Always,
            Durability::IntervalMs(3_600_000),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let mut j = open(dir.path(), policy);
            j.append(1, 1, b"a").unwrap();
            assert!(j.commit_deferred().unwrap().is_none(), "{policy:?}");
        }
    }

    #[test]
    fn a_point_stays_valid_after_the_segment_rolled() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = open(dir.path(), Durability::GroupCommit);
        j.append(1, 1, &[1; 100]).unwrap();
        let first = j.commit_deferred().unwrap().unwrap();
        let mut seq = 2;
        while j.active.as_ref().map(|a| a.index) != Some(1) {
            j.append(seq, 1, &[0xAB; 1000]).unwrap();
            seq += 1;
        }
        let second = j.commit_deferred().unwrap().unwrap();
        assert!(!second.same_segment(&first));
        first.sync().unwrap();
        second.sync().unwrap();
    }

    #[test]
    fn poison_stops_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = open(dir.path(), Durability::GroupCommit);
        j.append(1, 1, b"a").unwrap();
        j.poison();
        assert!(matches!(j.append(2, 1, b"b"), Err(JournalError::Poisoned)));
        assert!(matches!(j.commit_deferred(), Err(JournalError::Poisoned)));
        assert!(matches!(j.sync(), Err(JournalError::Poisoned)));
        // Closing it reports it too: what was appended since the last
        // sync may not be durable.
        assert!(matches!(j.close(), Err(JournalError::Poisoned)));
    }

    /// Tools ask whether a venue writes a journal before acting on it: no
    /// lock file or a lock nobody holds is no writer; a live `Journal` is
    /// one; a directory that cannot be looked in is an error, not "no".
    #[test]
    fn writer_running_tells_whether_a_writer_holds_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!writer_running(dir.path()).unwrap(), "no lock file yet");
        let j = open(dir.path(), Durability::GroupCommit);
        assert!(writer_running(dir.path()).unwrap());
        let shown = format!("{j:?}");
        assert!(shown.starts_with("Journal"), "{shown}");
        assert!(shown.contains(&format!("{:?}", dir.path())), "{shown}");
        drop(j);
        assert!(dir.path().join(LOCK_FILE).exists());
        assert!(!writer_running(dir.path()).unwrap(), "the writer is gone");
        let not_a_dir = dir.path().join("file");
        std::fs::write(&not_a_dir, b"x").unwrap();
        let err = writer_running(&not_a_dir).unwrap_err().to_string();
        assert!(err.contains(LOCK_FILE), "{err}");
    }

    /// Each sync is counted once, and the time counted for them is time
    /// that passed (the venue's metrics report both).
    #[test]
    fn syncs_are_counted_with_the_time_they_took() {
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let mut j = open(dir.path(), Durability::Always);
        let before = j.syncs();
        for seq in 1..=5 {
            j.append(seq, 1, b"a").unwrap();
        }
        let after = j.syncs();
        let elapsed = started.elapsed().as_micros() as u64;
        assert_eq!(after.syncs - before.syncs, 5, "one per append");
        assert!(after.micros <= elapsed, "{after:?} in {elapsed} us");
    }

    /// A next segment that cannot be built is reported as soon as its
    /// builder gives up, long before the roll that needs it; the build is
    /// tried again, the report clears once it succeeds, and the roll then
    /// takes that segment.
    #[test]
    fn a_next_segment_that_cannot_be_built_is_reported_before_its_roll() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = open(dir.path(), Durability::GroupCommit);
        assert!(free_bytes(dir.path()).is_some_and(|free| free > 0));
        let wait_for = |j: &mut Journal, failing: bool| {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let problem = j.next_segment_problem().is_some();
                let done = j.preparing.is_none() && problem == failing;
                if done || Instant::now() > deadline {
                    return j.next_segment_problem().map(str::to_string);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        assert_eq!(wait_for(&mut j, false), None, "segment 1 is built ahead");
        // Segment 2's temporary name taken by a directory: its build fails.
        let blocker = dir.path().join(format!("{:020}.seg.tmp", 2));
        std::fs::create_dir(&blocker).unwrap();
        let mut seq = 1;
        while j.active.as_ref().map(|a| a.index) != Some(1) {
            j.append(seq, 1, &[7; 100]).unwrap();
            seq += 1;
        }
        let why = wait_for(&mut j, true).expect("reported before the roll");
        assert!(why.contains(&format!("{:020}", 2)), "{why}");
        assert_eq!(j.active.as_ref().unwrap().index, 1, "no roll yet");
        // Freed, but the file system says a segment would not fit: no try
        // (it would take every free block before failing).
        std::fs::remove_dir(&blocker).unwrap();
        j.room = |_| Some(1024);
        let deadline = Instant::now() + PREPARE_RETRY * 2;
        while Instant::now() < deadline {
            assert!(j.next_segment_problem().is_some());
            assert!(j.preparing.is_none() && j.ready.is_none(), "not tried");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Room: the next try builds it, and the roll uses it.
        j.room = free_bytes;
        assert_eq!(wait_for(&mut j, false), None, "cleared once built");
        assert!(j.ready.is_some());
        while j.active.as_ref().map(|a| a.index) != Some(2) {
            j.append(seq, 1, &[7; 100]).unwrap();
            seq += 1;
        }
        j.commit().unwrap();
        assert!(j.ready.is_none(), "taken by the roll");
        drop(j);
        let mut reader = crate::Reader::open(dir.path()).unwrap();
        let mut read = 0;
        while reader.next().unwrap().is_some() {
            read += 1;
        }
        assert_eq!(read, seq - 1);
    }

    /// Rolls take the segment prepared on the other thread: each segment
    /// is in place with its own header, records read back in order across
    /// them, and no temporary file is left once the journal is dropped.
    #[test]
    fn rolls_use_the_prepared_segment_and_leave_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = open(dir.path(), Durability::GroupCommit);
        let mut seq = 1;
        while j.active.as_ref().map(|a| a.index) != Some(3) {
            j.append(seq, 1, &seq.to_le_bytes()).unwrap();
            if seq % 50 == 0 {
                j.commit().unwrap();
            }
            seq += 1;
        }
        j.commit().unwrap();
        // The segment after the active one is being built, or built.
        let next = finish(j.preparing.take().expect("being built")).expect("built");
        assert_eq!(next.index, 4);
        next.discard();
        drop(j);
        for index in 0..4u64 {
            let header =
                crate::segment::read_header(&crate::segment::segment_path(dir.path(), index))
                    .unwrap();
            assert_eq!(header.index, index);
        }
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().into_string().unwrap())
            .filter(|n| !n.ends_with(".seg") && n != LOCK_FILE)
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        let report = crate::scan::verify(dir.path()).unwrap();
        assert_eq!(report.last_seq, Some(seq - 1));
        // Reopened, it appends on.
        let mut j = open(dir.path(), Durability::GroupCommit);
        j.append(seq, 1, b"on").unwrap();
        j.commit().unwrap();
    }

    /// A journal whose directory was removed under it stops at its next
    /// sync, and stays stopped: a new directory on the same path (another
    /// venue's) is never written by it.
    #[test]
    fn a_journal_removed_while_open_stops_at_its_next_sync() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let mut j = open(&path, Durability::GroupCommit);
        j.append(1, 1, b"kept").unwrap();
        j.commit().unwrap();
        j.append(2, 1, b"after").unwrap();
        // The next segment's builder done first: a file it made while the
        // directory went failed the removal now and then.
        if let Some(building) = j.preparing.take() {
            j.ready = finish(building);
        }
        std::fs::remove_dir_all(&path).unwrap();
        let other = open(&path, Durability::GroupCommit);
        let error = j.commit().unwrap_err().to_string();
        assert!(
            error.contains("was removed or moved while the venue ran"),
            "{error}"
        );
        assert!(matches!(j.sync_point(), Err(JournalError::Poisoned)));
        assert!(matches!(j.append(3, 1, b"no"), Err(JournalError::Poisoned)));
        drop(j);
        drop(other);
        assert_eq!(crate::scan::verify(&path).unwrap().last_seq, None);
    }

    /// Moved aside, it stops too (the name now leads elsewhere).
    #[test]
    fn a_journal_moved_while_open_stops_at_its_next_sync() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let mut j = open(&path, Durability::GroupCommit);
        j.append(1, 1, b"kept").unwrap();
        j.commit().unwrap();
        std::fs::rename(&path, dir.path().join("moved")).unwrap();
        let error = j.commit().unwrap_err().to_string();
        assert!(error.contains("was removed or moved"), "{error}");
    }

    /// A sync (a snapshot's, or the one at shutdown) after a deferred
    /// commit handed out a point syncs the segment even with nothing new
    /// appended: the point's own sync may not have run yet, and the
    /// caller is told its records are durable when this returns.
    #[test]
    fn a_sync_after_a_deferred_commit_syncs_even_with_nothing_new() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = open(dir.path(), Durability::GroupCommit);
        j.append(1, 1, b"a").unwrap();
        let point = j.commit_deferred().unwrap().expect("a point");
        let before = j.syncs().syncs;
        j.sync().unwrap();
        assert_eq!(j.syncs().syncs, before + 1, "the sync was skipped");
        // Once synced, nothing is pending: the next one is skipped.
        j.sync().unwrap();
        assert_eq!(j.syncs().syncs, before + 1);
        drop(point);
    }

    /// Only a journal that is never synced dirties its segments ahead: a
    /// sync writes back every dirty page of the file, so under any other
    /// policy the first would write a whole segment of zeros.
    #[test]
    fn only_a_never_synced_journal_populates_segments_writable() {
        for (durability, populate) in [
            (Durability::Never, Populate::Write),
            (Durability::GroupCommit, Populate::Read),
            (Durability::Always, Populate::Read),
            (Durability::IntervalMs(5), Populate::Read),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let mut j = open(dir.path(), durability);
            assert_eq!(j.populate(), populate, "{durability:?}");
            j.append(1, 1, b"a record").unwrap();
            j.close().unwrap();
        }
    }

    /// A roll syncs the segment it seals whatever the policy (`Never`
    /// included), so that no record of the next segment is ever durable
    /// before those of the one sealed.
    #[test]
    fn a_roll_syncs_the_sealed_segment_whatever_the_policy() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = open(dir.path(), Durability::Never);
        let mut seq = 1;
        while j.active.as_ref().map(|a| a.index) != Some(1) {
            j.append(seq, 1, &[0xAB; 1000]).unwrap();
            j.commit().unwrap();
            seq += 1;
        }
        assert_eq!(j.syncs().syncs, 1, "the roll's sync, and no other");
    }

    #[test]
    fn roll_seals_and_flushes_the_old_segment() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = open(dir.path(), Durability::Never);
        let mut seq = 1;
        while j.active.as_ref().map(|a| a.index) != Some(1) {
            j.append(seq, 1, &[0xAB; 1000]).unwrap();
            seq += 1;
        }
        let bytes = std::fs::read(crate::segment::segment_path(dir.path(), 0)).unwrap();
        let records = (seq - 2) as usize;
        let seal_at = SEGMENT_HEADER_LEN + records * record_len(1000);
        let marker = crate::format::read_u32(&bytes, seal_at);
        assert_eq!(marker, SEAL_MARKER);
        assert_eq!(
            crate::format::decode_slot(&bytes, seal_at, marker),
            crate::format::Slot::Seal
        );
    }
}
