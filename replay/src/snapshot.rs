//! Snapshots: the whole state as of a seq, rkyv-encoded, in one file named
//! by that seq (`{seq:020}.snap`) with a header holding a magic, the format
//! version, the seq, the payload length and a CRC-32 of the payload. Written
//! to a temporary name, synced, then renamed, so a snapshot file is either
//! whole or absent. The newest valid one at or before a seq is picked
//! automatically; damaged ones are skipped and reported.
//!
//! Since format 2 the payload is split into sections, each its own
//! rkyv archive: the state without its order and fill lists, then the
//! orders and the fills in chunks of [`SECTION_ITEMS`]. No archive comes
//! near rkyv's 2 GiB limit of 32-bit relative pointers however long the
//! history, and loading decodes the sections on two threads.
//!
//! The version also names the layout of the state: it goes up whenever an
//! archived type changes (3: the idempotency index that grows a few slots
//! at a time; 4: the history tail, orders and fills in tables whose oldest
//! records leave; 5: each account's set of resting orders), and a
//! snapshot of another version is skipped with a message
//! that says so; the state is then rebuilt from the journal.
//!
//! Since format 7 a snapshot is tied to the journal it was taken from: a
//! section names the checksum of the journal record at its seq (the CRC-32
//! in that record's header). A start from a snapshot checks it against the
//! journal's record at that seq, where the journal still holds it, and
//! passes over a snapshot of another journal (copied in from another venue,
//! or left from a journal that was replaced) instead of going on from a
//! state this journal never described.

use std::fs;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use rkyv::rancor::Error as RkyvError;
use rkyv::util::AlignedVec;
use sequencer::state::{Fill, Order};
use sequencer::State;

const MAGIC: &[u8; 8] = b"UPDNSNAP";
/// The format written. 6 (eleventh session) is 5's layout under a new
/// number, so that a build of before rules 2 (which reads 5 and knows
/// nothing of newer rules) passes over the snapshots of a venue run under
/// rules 2 and meets the journal's `SetRules`, which it refuses, instead of
/// serving that state under its own rules after a rollback. 7 (thirteenth
/// session) adds the journal section, which a build reading 6 would take
/// for damage.
const VERSION: u32 = 7;
/// Formats read: 5 and 6 too (the same layout, no journal section), so an
/// upgrade starts from the last snapshot of the build before.
const VERSIONS_READ: [u32; 3] = [5, 6, 7];
const HEADER_LEN: usize = 32;

/// Orders or fills per section of a snapshot.
pub const SECTION_ITEMS: usize = 1 << 18;
/// Section kinds, and the length of a section's head (kind, reserved,
/// length), which keeps each archive 16-byte aligned.
const SECTION_SHELL: u32 = 1;
const SECTION_ORDERS: u32 = 2;
const SECTION_FILLS: u32 = 3;
/// The journal section: 16 bytes, the checksum of the journal record at
/// the snapshot's seq (u32, little-endian), then zeros. Absent when the
/// writer did not know it (a state of seq 0, or one rebuilt from a
/// snapshot of before format 7 with no record applied since).
const SECTION_JOURNAL: u32 = 4;
const SECTION_JOURNAL_LEN: usize = 16;
const SECTION_HEAD: usize = 16;

/// Errors of snapshot files.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The I/O error is in the message, not a source too (the CLI prints
    /// sources after the message: it was said twice).
    #[error("snapshot {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("snapshot {path} is damaged: {reason}")]
    Damaged { path: PathBuf, reason: String },
    #[error("snapshot at seq {seq} could not be encoded: {reason}")]
    Encode { seq: u64, reason: String },
    #[error("snapshot at seq {seq} was not written: {reason}")]
    Writer { seq: u64, reason: String },
    #[error("snapshot {path} is of a venue under business rules version {version}, newer than this build's ({current}): the journal is replayed instead, and a newer build is needed for it")]
    NewerRules {
        path: PathBuf,
        version: u32,
        current: u32,
    },
    #[error("snapshot {path} was not taken from this journal: it follows a record of checksum {tied:#010x} at seq {seq}, and the journal's record at that seq has checksum {found:#010x} (a snapshot copied from another venue, or a journal replaced); passed over")]
    OtherJournal {
        path: PathBuf,
        seq: u64,
        tied: u32,
        found: u32,
    },
}

/// The file name of the snapshot as of `seq`.
pub fn file_name(seq: u64) -> String {
    format!("{seq:020}.snap")
}

/// Writes a snapshot of `state` into `dir`; returns its path. `journal`
/// is the checksum of the journal record at `state.last_seq` (see
/// [`journal::Journal::last_record_crc`], [`journal::Record::crc`]), when
/// known. The order and fill lists are taken out of `state` while the rest
/// is encoded and put back before this returns, whatever happens.
pub fn write(
    dir: &Path,
    state: &mut State,
    journal: Option<u32>,
) -> Result<PathBuf, SnapshotError> {
    let temporary = write_temporary(dir, state, journal, SECTION_ITEMS)?;
    publish(dir, &temporary, state.last_seq)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotError {
    let path = path.to_path_buf();
    move |error| SnapshotError::Io { path, error }
}

/// Where a snapshot of `seq` is written before it is renamed into place.
pub(crate) fn temporary_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{}{TEMPORARY_SUFFIX}", file_name(seq)))
}

const TEMPORARY_SUFFIX: &str = ".tmp";

/// Removes snapshots left under their temporary name (a writer killed
/// with the venue); only the journal's one writer may call it. Returns
/// how many it removed.
pub(crate) fn remove_temporaries(dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|name| name.ends_with(&format!(".snap{TEMPORARY_SUFFIX}")))
        })
        .filter(|e| fs::remove_file(e.path()).is_ok())
        .count()
}

/// Renames a snapshot written by `write_temporary` into place and makes
/// the name durable: from then on it is a snapshot.
pub(crate) fn publish(dir: &Path, temporary: &Path, seq: u64) -> Result<PathBuf, SnapshotError> {
    let path = dir.join(file_name(seq));
    fs::rename(temporary, &path).map_err(io(&path))?;
    if let Ok(d) = fs::File::open(dir) {
        // Makes the rename durable; a failure here loses only the snapshot.
        let _ = d.sync_all();
    }
    Ok(path)
}

/// Writes the snapshot under its temporary name and syncs it; returns
/// that name.
///
/// The sections go to the file as they are encoded, not into one buffer
/// first: the writer (a forked child of the venue) then holds a section or
/// two beyond the state it copies on write, not a second copy of the whole
/// snapshot. The header, whose checksum and length are known only at the
/// end, is written last over the zeros that kept its place; the file has
/// its final name only once it is whole and synced (`publish`).
pub(crate) fn write_temporary(
    dir: &Path,
    state: &mut State,
    journal: Option<u32>,
    per_section: usize,
) -> Result<PathBuf, SnapshotError> {
    fs::create_dir_all(dir).map_err(io(dir))?;
    let temporary = temporary_path(dir, state.last_seq);
    let file = fs::File::create(&temporary).map_err(io(&temporary))?;
    let written = write_file(file, state, journal, per_section, WRITE_BUFFER)
        .map_err(|e| match e {
            Failure::Io(error) => SnapshotError::Io {
                path: temporary.clone(),
                error,
            },
            Failure::Snapshot(e) => e,
        })
        .and_then(|file| file.sync_all().map_err(io(&temporary)));
    if let Err(e) = written {
        // A half-written file is no snapshot: it goes now, not at the
        // next start.
        let _ = fs::remove_file(&temporary);
        return Err(e);
    }
    Ok(temporary)
}

/// Bytes gathered before a write to the file.
const WRITE_BUFFER: usize = 1 << 20;

/// What stops a snapshot being written: the file, or the encoding.
#[derive(Debug)]
enum Failure {
    Io(std::io::Error),
    Snapshot(SnapshotError),
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Io(e)
    }
}

/// Writes header and payload into `out` (at its start); returns it. The
/// order and fill lists are back in `state` when this returns, whatever
/// happened.
fn write_file<W: Write + Seek>(
    out: W,
    state: &mut State,
    journal: Option<u32>,
    per_section: usize,
    buffer: usize,
) -> Result<W, Failure> {
    // Encoded in place: a wrapped deque is read as its two slices (a
    // forked writer would otherwise copy the pages it rotates), and the
    // lists go back by a move.
    let orders = state.orders.take_items();
    let fills = state.fills.take_items();
    let written = (|| {
        let mut payload = Payload {
            out: BufWriter::with_capacity(buffer, out),
            crc: crc32fast::Hasher::new(),
            len: 0,
        };
        payload.out.write_all(&[0u8; HEADER_LEN])?;
        if let Some(crc) = journal {
            let mut section = [0u8; SECTION_JOURNAL_LEN];
            section[..4].copy_from_slice(&crc.to_le_bytes());
            put_section(&mut payload, SECTION_JOURNAL, &section)?;
        }
        encode_sections(
            &mut payload,
            state,
            <[&[Order]; 2]>::from(orders.as_slices()),
            <[&[Fill]; 2]>::from(fills.as_slices()),
            per_section,
        )?;
        let Payload { out, crc, len } = payload;
        let mut out = out.into_inner().map_err(|e| e.into_error())?;
        let mut header = [0u8; HEADER_LEN];
        header[..8].copy_from_slice(MAGIC);
        header[8..12].copy_from_slice(&VERSION.to_le_bytes());
        header[12..16].copy_from_slice(&crc.finalize().to_le_bytes());
        header[16..24].copy_from_slice(&state.last_seq.to_le_bytes());
        header[24..32].copy_from_slice(&len.to_le_bytes());
        out.seek(SeekFrom::Start(0))?;
        out.write_all(&header)?;
        out.flush()?;
        Ok(out)
    })();
    state.orders.put_back_items(orders);
    state.fills.put_back_items(fills);
    written
}

/// The payload as it is written: its bytes so far, their CRC-32 and length.
struct Payload<W: Write> {
    out: BufWriter<W>,
    crc: crc32fast::Hasher,
    len: u64,
}

impl<W: Write> Payload<W> {
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.crc.update(bytes);
        self.len += bytes.len() as u64;
        self.out.write_all(bytes)
    }
}

/// The payload: the shell (a state whose order and fill lists are
/// empty), then the orders and the fills, section by section.
fn encode_sections<W: Write>(
    payload: &mut Payload<W>,
    shell: &State,
    orders: [&[Order]; 2],
    fills: [&[Fill]; 2],
    per_section: usize,
) -> Result<(), Failure> {
    let seq = shell.last_seq;
    append_section(payload, SECTION_SHELL, seq, || {
        rkyv::to_bytes::<RkyvError>(shell)
    })?;
    for chunk in orders.iter().flat_map(|part| part.chunks(per_section)) {
        append_section(payload, SECTION_ORDERS, seq, || {
            rkyv::to_bytes::<RkyvError>(&chunk.to_vec())
        })?;
    }
    for chunk in fills.iter().flat_map(|part| part.chunks(per_section)) {
        append_section(payload, SECTION_FILLS, seq, || {
            rkyv::to_bytes::<RkyvError>(&chunk.to_vec())
        })?;
    }
    Ok(())
}

/// Encodes one archive and writes it as a section. rkyv panics past its
/// 2 GiB limit: that is an error for the caller, never the end of the
/// calling thread.
fn append_section<W: Write>(
    payload: &mut Payload<W>,
    kind: u32,
    seq: u64,
    encode: impl FnOnce() -> Result<AlignedVec, RkyvError>,
) -> Result<(), Failure> {
    let encode_failed = |reason: String| Failure::Snapshot(SnapshotError::Encode { seq, reason });
    let bytes = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(encode)) {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => return Err(encode_failed(e.to_string())),
        Err(_) => {
            return Err(encode_failed(
                "a section is too large for the archive format's 2 GiB limit".into(),
            ))
        }
    };
    put_section(payload, kind, &bytes)?;
    Ok(())
}

/// Writes one section: its head (kind, length), its bytes, zeros to the
/// next multiple of 16.
fn put_section<W: Write>(payload: &mut Payload<W>, kind: u32, bytes: &[u8]) -> std::io::Result<()> {
    let mut head = [0u8; SECTION_HEAD];
    head[..4].copy_from_slice(&kind.to_le_bytes());
    head[8..].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
    payload.put(&head)?;
    payload.put(bytes)?;
    let pad = bytes.len().next_multiple_of(SECTION_HEAD) - bytes.len();
    payload.put(&[0u8; SECTION_HEAD][..pad])
}

/// Reads and checks one snapshot file.
pub fn load(path: &Path) -> Result<State, SnapshotError> {
    load_tied(path).map(|(state, _)| state)
}

/// Reads and checks one snapshot file; returns the state and the checksum
/// of the journal record it was taken after, when the file names it
/// (format 7 on).
pub fn load_tied(path: &Path) -> Result<(State, Option<u32>), SnapshotError> {
    load_checked(path, None)
}

/// Loads a snapshot to go on from with the journal in `journal_dir`: as
/// [`load_tied`], but a snapshot that names a record the journal holds
/// with another checksum is refused ([`SnapshotError::OtherJournal`]),
/// before its state is decoded. One whose record the journal no longer
/// holds (its segments removed) or that names none (before format 7) is
/// taken as it is.
pub fn load_for(path: &Path, journal_dir: &Path) -> Result<(State, Option<u32>), SnapshotError> {
    load_checked(path, Some(journal_dir))
}

/// The seq a snapshot file holds and the checksum of the journal record it
/// names (format 7 on), from its header and first section only: a look
/// for tools that compare snapshots with a journal without loading them
/// (the payload's checksum is not checked here; [`load`] does).
pub fn journal_tie(path: &Path) -> Result<(u64, Option<u32>), SnapshotError> {
    use std::io::Read;
    let damaged = |reason: &str| SnapshotError::Damaged {
        path: path.to_path_buf(),
        reason: reason.into(),
    };
    let mut head = [0u8; HEADER_LEN + SECTION_HEAD + SECTION_JOURNAL_LEN];
    let mut file = fs::File::open(path).map_err(io(path))?;
    let mut got = 0;
    while got < head.len() {
        match file.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(path)(e)),
        }
    }
    if got < HEADER_LEN || &head[..8] != MAGIC {
        return Err(damaged("no snapshot header"));
    }
    let version = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    if !VERSIONS_READ.contains(&version) {
        return Err(damaged("format version of another build"));
    }
    let seq = u64::from_le_bytes(head[16..24].try_into().expect("8 bytes"));
    Ok((seq, journal_section(&head[HEADER_LEN..got])))
}

/// Whether the snapshot at `path` was taken from the journal in
/// `journal_dir`, from its header and first section and the journal's
/// record at its seq only (no payload read): a snapshot that names a
/// record the journal holds with another checksum is
/// [`SnapshotError::OtherJournal`]. For snapshots a start passes over
/// unread (past what the history store holds), so that one of another
/// journal is named all the same.
pub fn check_tie(path: &Path, journal_dir: &Path) -> Result<(), SnapshotError> {
    let (seq, tied) = journal_tie(path)?;
    same_journal(path, seq, tied, journal_dir)
}

/// A snapshot at `seq` that names the journal record of checksum `tied`
/// belongs to the journal in `journal_dir` unless that journal holds the
/// record with another checksum ([`SnapshotError::OtherJournal`]). One
/// that names none, or whose record the journal no longer holds, passes.
fn same_journal(
    path: &Path,
    seq: u64,
    tied: Option<u32>,
    journal_dir: &Path,
) -> Result<(), SnapshotError> {
    let Some(tied) = tied else {
        return Ok(());
    };
    match journal_crc_at(journal_dir, seq).filter(|&found| found != tied) {
        Some(found) => Err(SnapshotError::OtherJournal {
            path: path.to_path_buf(),
            seq,
            tied,
            found,
        }),
        None => Ok(()),
    }
}

/// The checksum of the journal's record at `seq`, if the journal holds a
/// whole one there. A journal that cannot be read here is left for the
/// replay that follows to report.
fn journal_crc_at(dir: &Path, seq: u64) -> Option<u32> {
    let mut reader = journal::Reader::open(dir).ok()?;
    reader.seek(seq).ok()?;
    let record = reader.next().ok()??;
    (record.seq == seq).then_some(record.crc)
}

fn load_checked(
    path: &Path,
    journal_dir: Option<&Path>,
) -> Result<(State, Option<u32>), SnapshotError> {
    let damaged = |reason: String| SnapshotError::Damaged {
        path: path.to_path_buf(),
        reason,
    };
    let io = |error| SnapshotError::Io {
        path: path.to_path_buf(),
        error,
    };
    let file = fs::File::open(path).map_err(io)?;
    let file_len = file.metadata().map_err(io)?.len();
    if file_len < HEADER_LEN as u64 {
        return Err(damaged("no snapshot header".into()));
    }
    // Mapped, not read: no copy of gigabytes from the page cache into a
    // buffer; the kernel maps the pages at once (populate). The payload
    // starts 32 bytes into a page-aligned mapping, so it is 16-byte aligned
    // as rkyv needs.
    // SAFETY: snapshot files are written under a temporary name, synced and
    // renamed into place, and never changed afterwards; the mapping is
    // read-only and dropped before this returns.
    let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }.map_err(io)?;
    let header = &map[..HEADER_LEN];
    if &header[..8] != MAGIC {
        return Err(damaged("no snapshot header".into()));
    }
    let word = |range: std::ops::Range<usize>| {
        header[range]
            .iter()
            .rev()
            .fold(0u64, |n, &b| (n << 8) | u64::from(b))
    };
    let version = word(8..12);
    if !VERSIONS_READ.iter().any(|&v| u64::from(v) == version) {
        return Err(damaged(format!(
            "format version {version} is not {VERSION} (a snapshot of another build: the state is rebuilt from the journal instead)"
        )));
    }
    let (crc, seq, len) = (word(12..16) as u32, word(16..24), word(24..32));
    // Snapshots are chosen by the seq in their name (`list`): one renamed
    // by hand, or restored under another name, would give a state past
    // the seq asked for.
    if let Some(named) = named_seq(path) {
        if named != seq {
            return Err(damaged(format!(
                "named for seq {named}, header says {seq} (renamed?)"
            )));
        }
    }
    let payload = &map[HEADER_LEN..];
    if len != payload.len() as u64 {
        return Err(damaged(format!(
            "payload is {} bytes, header says {len}",
            payload.len()
        )));
    }
    if crc32fast::hash(payload) != crc {
        return Err(damaged("checksum mismatch".into()));
    }
    if let Some(dir) = journal_dir {
        same_journal(path, seq, journal_section(payload), dir)?;
    }
    let (state, journal) = decode_sections(payload).map_err(damaged)?;
    if journal.is_some() && version < 7 {
        return Err(damaged(format!(
            "a journal section in a snapshot of format {version}"
        )));
    }
    if state.last_seq != seq {
        return Err(damaged(format!(
            "holds seq {}, header says {seq}",
            state.last_seq
        )));
    }
    // A newer build's rules: going on from here under this build's would
    // run a venue the journal never described. Passed over like a snapshot
    // of another format; the journal's `SetRules` then stops the replay.
    if state.rules > sequencer::limits::RULES_CURRENT {
        return Err(SnapshotError::NewerRules {
            path: path.to_path_buf(),
            version: state.rules,
            current: sequencer::limits::RULES_CURRENT,
        });
    }
    Ok((state, journal))
}

/// Removes the snapshots of `dir` older than its newest `keep` (0 keeps
/// every one); returns how many went. Only the journal's one writer may
/// call it. A reader that has one open keeps reading it (the name goes,
/// not the file).
pub fn prune(dir: &Path, keep: usize) -> usize {
    if keep == 0 {
        return 0;
    }
    let removed = list(dir)
        .into_iter()
        .skip(keep)
        .filter(|(_, path)| fs::remove_file(path).is_ok())
        .count();
    if removed > 0 {
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    removed
}

/// The seq a snapshot file's name gives (`{seq}.snap`), if it has such a
/// name; a file named otherwise (given by its path) has none.
fn named_seq(path: &Path) -> Option<u64> {
    path.file_name()?
        .to_str()?
        .strip_suffix(".snap")?
        .parse()
        .ok()
}

/// Snapshot files in `dir` with their seq, newest first.
pub fn list(dir: &Path) -> Vec<(u64, PathBuf)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(u64, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let path = e.path();
            Some((named_seq(&path)?, path))
        })
        .collect();
    found.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    found
}

/// The checksum a payload's journal section names, if it starts with one
/// (the writer puts it first). Only a look ahead: `decode_sections` checks
/// the whole.
fn journal_section(payload: &[u8]) -> Option<u32> {
    let head = payload.get(..SECTION_HEAD)?;
    let kind = u32::from_le_bytes(head[0..4].try_into().ok()?);
    let len = u64::from_le_bytes(head[8..16].try_into().ok()?);
    if kind != SECTION_JOURNAL || len != SECTION_JOURNAL_LEN as u64 {
        return None;
    }
    let bytes = payload.get(SECTION_HEAD..SECTION_HEAD + 4)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

/// Decodes a payload: the sections are found first, then decoded
/// on two threads (the shell and the fills on one, the orders on the
/// other), and the lists put back in order.
fn decode_sections(payload: &[u8]) -> Result<(State, Option<u32>), String> {
    let mut shell = None;
    let mut journal = None;
    let (mut orders, mut fills) = (Vec::new(), Vec::new());
    let mut at = 0;
    while at < payload.len() {
        let head = payload
            .get(at..at + SECTION_HEAD)
            .ok_or_else(|| format!("a section head cut short at byte {at}"))?;
        let kind = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes"));
        let len = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
        let start = at + SECTION_HEAD;
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| start.checked_add(len))
            .filter(|&end| end <= payload.len())
            .ok_or_else(|| format!("a section at byte {at} runs past the end"))?;
        let bytes = &payload[start..end];
        match kind {
            SECTION_SHELL if shell.is_none() => shell = Some(bytes),
            SECTION_ORDERS => orders.push(bytes),
            SECTION_FILLS => fills.push(bytes),
            SECTION_JOURNAL if journal.is_none() && bytes.len() == SECTION_JOURNAL_LEN => {
                journal = Some(u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")));
            }
            _ => return Err(format!("an unexpected section of kind {kind} at byte {at}")),
        }
        at = end.next_multiple_of(SECTION_HEAD);
    }
    let shell = shell.ok_or("no state section")?;
    // Two threads take the sections in turn (the shell first, the largest),
    // so neither waits while the other has work; the lists go back in order.
    let mut jobs: Vec<(u32, &[u8])> = vec![(SECTION_SHELL, shell)];
    jobs.extend(orders.iter().map(|b| (SECTION_ORDERS, *b)));
    jobs.extend(fills.iter().map(|b| (SECTION_FILLS, *b)));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(&(kind, bytes)) = jobs.get(i) else {
                return done;
            };
            let decoded = match kind {
                SECTION_SHELL => {
                    rkyv::from_bytes::<State, RkyvError>(bytes).map(|s| Section::Shell(Box::new(s)))
                }
                SECTION_ORDERS => {
                    rkyv::from_bytes::<Vec<Order>, RkyvError>(bytes).map(Section::Orders)
                }
                _ => rkyv::from_bytes::<Vec<Fill>, RkyvError>(bytes).map(Section::Fills),
            };
            done.push((i, decoded.map_err(|e| e.to_string())));
        }
    };
    let mut decoded = std::thread::scope(|scope| {
        let other = scope.spawn(work);
        let mut decoded = work();
        decoded.extend(
            other
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        );
        decoded
    });
    decoded.sort_by_key(|(i, _)| *i);
    let mut sections = decoded.into_iter().map(|(_, section)| section);
    let state = match sections.next() {
        Some(Ok(Section::Shell(state))) => state,
        Some(Err(e)) => return Err(format!("the state section: {e}")),
        _ => return Err("no state section".into()),
    };
    let mut state = *state;
    if !state.orders.items_empty() || !state.fills.items_empty() {
        return Err("the state section holds orders or fills".into());
    }
    for section in sections {
        match section? {
            Section::Orders(list) => state.orders.extend_items(list),
            Section::Fills(list) => state.fills.extend_items(list),
            Section::Shell(_) => return Err("a second state section".into()),
        }
    }
    Ok((state, journal))
}

/// One decoded section.
enum Section {
    Shell(Box<State>),
    Orders(Vec<Order>),
    Fills(Vec<Fill>),
}

/// The newest valid snapshot at or before `max_seq` taken from the journal
/// in `journal_dir` (see [`load_for`]), with the checksum it names, and the
/// snapshots that were skipped on the way.
pub fn newest(
    dir: &Path,
    max_seq: u64,
    journal_dir: &Path,
) -> (Option<(State, Option<u32>)>, Vec<SnapshotError>) {
    let mut skipped = Vec::new();
    for (seq, path) in list(dir) {
        if seq > max_seq {
            continue;
        }
        match load_for(&path, journal_dir) {
            Ok(found) => return (Some(found), skipped),
            Err(e) => skipped.push(e),
        }
    }
    (None, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn damaged(path: &Path) -> String {
        match load(path) {
            Err(SnapshotError::Damaged { reason, .. }) => reason,
            other => panic!("expected a damaged snapshot, got {other:?}"),
        }
    }

    /// Snapshots are chosen by the seq in their name: one renamed to an
    /// earlier seq would give a replay asked for that seq a later state.
    #[test]
    fn a_snapshot_renamed_to_another_seq_is_damaged() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = State {
            last_seq: 33,
            ..State::default()
        };
        let path = write(dir.path(), &mut state, None).unwrap();
        assert_eq!(named_seq(&path), Some(33));
        let renamed = dir.path().join(file_name(23));
        fs::rename(&path, &renamed).unwrap();
        assert_eq!(list(dir.path()), [(23, renamed.clone())]);
        assert_eq!(
            damaged(&renamed),
            "named for seq 23, header says 33 (renamed?)"
        );
        // Named otherwise (an auditor's copy), it is read for what it holds.
        let copy = dir.path().join("copy.snap");
        fs::rename(&renamed, &copy).unwrap();
        assert_eq!(load(&copy).unwrap().last_seq, 33);
    }

    #[test]
    fn load_reads_back_what_write_wrote_and_names_every_damage() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = State {
            last_seq: 77,
            ..State::default()
        };
        let path = write(dir.path(), &mut state, Some(0xdead_beef)).unwrap();
        assert_eq!(
            load_tied(&path).unwrap(),
            (state.clone(), Some(0xdead_beef))
        );
        let good = fs::read(&path).unwrap();
        assert_eq!(good[8..12], 7u32.to_le_bytes(), "written as format 7");
        // Formats 5 and 6, the same layout with no journal section, load;
        // a journal section in them is not theirs.
        let untied = fs::read(write(dir.path(), &mut state, None).unwrap()).unwrap();
        let older = dir.path().join("older.snap");
        for version in [5u32, 6] {
            let relabel =
                |bytes: &[u8]| [&bytes[..8], &version.to_le_bytes(), &bytes[12..]].concat();
            fs::write(&older, relabel(&untied)).unwrap();
            assert_eq!(load_tied(&older).unwrap(), (state.clone(), None));
            fs::write(&older, relabel(&good)).unwrap();
            let reason = damaged(&older);
            assert!(
                reason.contains("a journal section in a snapshot of format"),
                "{reason}"
            );
        }
        let broken = dir.path().join("broken.snap");
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (good[..HEADER_LEN - 1].to_vec(), "no snapshot header"),
            (
                good[..HEADER_LEN].to_vec(),
                "payload is 0 bytes, header says",
            ),
            (
                [b"NOTASNAP".as_slice(), &good[8..]].concat(),
                "no snapshot header",
            ),
            (
                [&good[..8], &[9, 0, 0, 0], &good[12..]].concat(),
                "format version",
            ),
            (
                [&good[..8], &[4, 0, 0, 0], &good[12..]].concat(),
                "format version",
            ),
            (good[..good.len() - 1].to_vec(), "header says"),
            ([good.as_slice(), &[0]].concat(), "header says"),
            (
                {
                    let mut b = good.clone();
                    let last = b.len() - 1;
                    b[last] ^= 1;
                    b
                },
                "checksum mismatch",
            ),
        ];
        for (bytes, expected) in cases {
            fs::write(&broken, &bytes).unwrap();
            let reason = damaged(&broken);
            assert!(
                reason.contains(expected),
                "{reason:?} should say {expected:?}"
            );
        }
        // The tie is read from the head alone (the header and the first
        // section; the payload's checksum is `load`'s to check): a header
        // with no section names no record, a file with no header is damage.
        let tie = |bytes: &[u8]| {
            fs::write(&broken, bytes).unwrap();
            journal_tie(&broken)
        };
        assert_eq!(tie(&good).unwrap(), (77, Some(0xdead_beef)));
        assert_eq!(tie(&good[..HEADER_LEN]).unwrap(), (77, None));
        // A first section that is not a whole journal section names none.
        let mut odd = good.clone();
        odd[HEADER_LEN + 8..HEADER_LEN + 16].copy_from_slice(&17u64.to_le_bytes());
        assert_eq!(tie(&odd).unwrap(), (77, None));
        for bytes in [
            good[..HEADER_LEN - 1].to_vec(),
            [b"NOTASNAP".as_slice(), &good[8..]].concat(),
        ] {
            match tie(&bytes) {
                Err(SnapshotError::Damaged { reason, .. }) => {
                    assert_eq!(reason, "no snapshot header")
                }
                other => panic!("{other:?}"),
            }
        }
    }

    /// A header whose seq is not the one of the state the payload holds
    /// (the seq is outside the payload's checksum: one damaged byte there)
    /// is damage, never a state taken for another seq than its own.
    #[test]
    fn a_header_naming_another_seq_than_its_state_is_damage() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = State {
            last_seq: 77,
            ..State::default()
        };
        let path = write(dir.path(), &mut state, None).unwrap();
        let mut bytes = fs::read(&path).unwrap();
        bytes[16..24].copy_from_slice(&70u64.to_le_bytes());
        // Named as its header says (the name is checked first).
        let path = dir.path().join(file_name(70));
        fs::write(&path, &bytes).unwrap();
        let reason = damaged(&path);
        assert!(reason.contains("holds seq 77, header says 70"), "{reason}");
    }

    fn history(orders: u64, fills: u64) -> State {
        use sequencer::types::{Action, ClientOrderId, OrderStatus, Outcome, TimeInForce};
        let order = |id: u64| Order {
            id,
            account: 1 + (id % 3) as u32,
            key: 0,
            market: 0,
            outcome: if id.is_multiple_of(2) {
                Outcome::Up
            } else {
                Outcome::Down
            },
            action: Action::Buy,
            price: 1 + (id % 98) as u8,
            time_in_force: TimeInForce::GoodTillCanceled,
            post_only: false,
            status: OrderStatus::Canceled,
            count: 1 + id as u32,
            filled: 0,
            fill_cost: 0,
            fees: 0,
            created_ts_ms: 1_000 + id,
            updated_ts_ms: 2_000 + id,
            client_order_id: ClientOrderId::new(&format!("c{id}")).unwrap(),
            hold: 0,
            max_fee_per_contract: 1,
            node: u32::MAX,
            account_slot: 0,
        };
        let fill = |id: u64| Fill {
            id,
            order: id,
            account: 1,
            market: 0,
            outcome: Outcome::Up,
            action: Action::Sell,
            price: 40,
            count: id as u32,
            cost: 40 * id as i64,
            fee: 1,
            is_taker: id % 2 == 1,
            trade_id: id,
            ts_ms: 3_000 + id,
        };
        State {
            last_seq: 1_000,
            orders: (1..=orders).map(order).collect(),
            fills: (1..=fills).map(fill).collect(),
            ..State::default()
        }
    }

    /// Orders and fills in many sections, and in none: read back whole and
    /// in order, and the state given to `write` is left as it was.
    #[test]
    fn sections_hold_the_history_in_order_even_from_a_wrapped_deque() {
        for (orders, fills, per_section) in [(10, 7, 3), (9, 9, 100)] {
            let dir = tempfile::tempdir().unwrap();
            let mut state = history(orders, fills);
            // The same lists, held in deques whose storage wraps around.
            fn wrap<T: Copy>(
                items: std::collections::VecDeque<T>,
            ) -> std::collections::VecDeque<T> {
                // One placeholder stays in front while the rest drains, so
                // the deque never empties (which would move it back to the
                // start of its storage), and goes last.
                let mut wrapped = std::collections::VecDeque::with_capacity(items.len() + 1);
                let spare = wrapped.capacity() - 3;
                for item in items.iter().take(1).cycle().take(spare + 1) {
                    wrapped.push_back(*item);
                }
                wrapped.drain(..spare);
                wrapped.extend(items);
                wrapped.pop_front();
                assert!(!wrapped.as_slices().1.is_empty(), "wraps");
                wrapped
            }
            let taken = state.orders.take_items();
            state.orders.put_back_items(wrap(taken));
            let taken = state.fills.take_items();
            state.fills.put_back_items(wrap(taken));
            let before = state.clone();
            let temporary = write_temporary(dir.path(), &mut state, None, per_section).unwrap();
            let path = publish(dir.path(), &temporary, state.last_seq).unwrap();
            assert_eq!(state, before, "write leaves the state as it was");
            assert_eq!(
                load(&path).unwrap(),
                before,
                "{orders} orders, {fills} fills"
            );
        }
    }

    #[test]
    fn sections_hold_the_history_in_order() {
        for (orders, fills, per_section) in [(10, 7, 3), (6, 0, 2), (0, 5, 5), (0, 0, 4), (1, 1, 1)]
        {
            let dir = tempfile::tempdir().unwrap();
            let mut state = history(orders, fills);
            let before = state.clone();
            let temporary = write_temporary(dir.path(), &mut state, None, per_section).unwrap();
            assert!(list(dir.path()).is_empty(), "not a snapshot before publish");
            let path = publish(dir.path(), &temporary, state.last_seq).unwrap();
            assert_eq!(list(dir.path()), vec![(state.last_seq, path.clone())]);
            assert_eq!(state, before, "write leaves the state as it was");
            assert_eq!(
                load(&path).unwrap(),
                before,
                "{orders} orders, {fills} fills by {per_section}"
            );
        }
    }

    /// A file that takes `room` bytes, then fails as a full disk does.
    struct Full {
        inner: std::io::Cursor<Vec<u8>>,
        room: u64,
    }

    impl Write for Full {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let at = self.inner.position();
            if at + buf.len() as u64 > self.room {
                return Err(std::io::Error::other("no space left"));
            }
            self.inner.write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Seek for Full {
        fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
            self.inner.seek(to)
        }
    }

    /// Streamed into a file, the snapshot is the same whatever the room:
    /// whole and loadable when it fits, an I/O error when it does not, and
    /// either way the state keeps its orders and fills.
    #[test]
    fn a_write_that_fails_midway_is_an_error_and_leaves_the_state_whole() {
        let mut state = history(40, 30);
        let before = state.clone();
        let whole = write_file(
            Full {
                inner: Default::default(),
                room: u64::MAX,
            },
            &mut state,
            Some(1),
            16,
            64,
        )
        .unwrap()
        .inner
        .into_inner();
        assert_eq!(state, before);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(file_name(state.last_seq));
        fs::write(&path, &whole).unwrap();
        assert_eq!(load(&path).unwrap(), before);
        for room in [
            0,
            10,
            HEADER_LEN as u64 + 20,
            whole.len() as u64 / 2,
            whole.len() as u64 - 1,
        ] {
            let full = Full {
                inner: Default::default(),
                room,
            };
            // A 64-byte buffer: the file fills up in the middle of a
            // section, not only at the last flush.
            match write_file(full, &mut state, Some(1), 16, 64) {
                Err(Failure::Io(e)) => assert!(e.to_string().contains("no space"), "{e}"),
                Err(other) => panic!("room {room}: {other:?}"),
                Ok(_) => panic!("room {room}: a snapshot of {} bytes fitted", whole.len()),
            }
            assert_eq!(state, before, "room {room}");
        }
    }

    #[test]
    fn prune_keeps_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        for seq in 1..=5 {
            let mut state = State {
                last_seq: seq,
                ..State::default()
            };
            write(dir.path(), &mut state, None).unwrap();
        }
        assert_eq!(prune(dir.path(), 0), 0, "0 keeps every one");
        assert_eq!(list(dir.path()).len(), 5);
        assert_eq!(prune(dir.path(), 2), 3);
        let left: Vec<u64> = list(dir.path()).iter().map(|(seq, _)| *seq).collect();
        assert_eq!(left, vec![5, 4]);
        assert_eq!(prune(dir.path(), 2), 0);
    }

    /// Sections that do not add up are named, never a panic.
    #[test]
    fn bad_sections_are_refused() {
        let shell = rkyv::to_bytes::<RkyvError>(&State::default()).unwrap();
        let section = |kind: u32, bytes: &[u8], len: u64| {
            let mut s = Vec::new();
            s.extend_from_slice(&kind.to_le_bytes());
            s.extend_from_slice(&0u32.to_le_bytes());
            s.extend_from_slice(&len.to_le_bytes());
            s.extend_from_slice(bytes);
            s.resize(s.len().next_multiple_of(SECTION_HEAD), 0);
            s
        };
        let good = section(SECTION_SHELL, &shell, shell.len() as u64);
        let tie = section(SECTION_JOURNAL, &[7; SECTION_JOURNAL_LEN], 16);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (Vec::new(), "no state section"),
            ([good.clone(), good.clone()].concat(), "unexpected section"),
            (section(9, &shell, shell.len() as u64), "unexpected section"),
            (
                section(SECTION_SHELL, &shell, u64::MAX),
                "runs past the end",
            ),
            (good[..8].to_vec(), "cut short"),
            (
                section(SECTION_ORDERS, &shell, shell.len() as u64),
                "no state section",
            ),
            // A state section that does not decode is named as such.
            (
                section(SECTION_SHELL, &[0xFF; 64], 64),
                "the state section: ",
            ),
            // The lists live in their own sections only, orders or fills.
            (
                {
                    let with_orders = rkyv::to_bytes::<RkyvError>(&history(1, 0)).unwrap();
                    section(SECTION_SHELL, &with_orders, with_orders.len() as u64)
                },
                "the state section holds orders or fills",
            ),
            // One journal section of its own length, no other.
            (
                [tie.clone(), tie.clone(), good.clone()].concat(),
                "unexpected section of kind 4",
            ),
            (
                [section(SECTION_JOURNAL, &[1, 2, 3, 4], 4), good.clone()].concat(),
                "unexpected section of kind 4",
            ),
        ];
        for (payload, expected) in cases {
            let mut aligned = AlignedVec::<16>::new();
            aligned.extend_from_slice(&payload);
            let reason = decode_sections(&aligned).unwrap_err();
            assert!(
                reason.contains(expected),
                "{reason:?} should say {expected:?}"
            );
        }
        let mut aligned = AlignedVec::<16>::new();
        aligned.extend_from_slice(&good);
        assert_eq!(decode_sections(&aligned).unwrap(), (State::default(), None));
        let mut aligned = AlignedVec::<16>::new();
        aligned.extend_from_slice(&[tie, good].concat());
        let tied = decode_sections(&aligned).unwrap();
        assert_eq!(tied, (State::default(), Some(0x0707_0707)));
    }
}
