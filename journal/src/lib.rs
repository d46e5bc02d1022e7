//! An append-only, memory-mapped, segmented log of records.
//!
//! The journal is the durable memory of the exchange: the sequencer appends
//! every command to it before acting on it, and replay rebuilds state from it.
//! It stores records of `(seq, kind, payload)`, where `seq` is a strictly
//! increasing `u64` (each record's is the previous one's plus one), `kind` is
//! a `u16` tag the caller chooses, and `payload` is opaque bytes (rkyv-encoded
//! by the caller). Every payload starts at a 16-byte aligned offset of its
//! segment file, and since mappings are page aligned, the `&[u8]` a
//! [`Reader`] hands back is 16-byte aligned in memory and can be decoded in
//! place.
//!
//! Records live in segment files of a fixed, preallocated size. Each record
//! carries a CRC-32, so a write torn by a crash is found and cut off at the
//! next [`Journal::open`], while damage inside the log stops the open with an
//! error naming the segment file and byte offset (unless
//! [`JournalConfig::truncate_on_corruption`] asks for a cut there). The
//! layout is described in `FORMAT.md` and in the [`format`](mod@format) module.
//!
//! What it deliberately does not do:
//! - It knows nothing of orders, markets or accounts: only bytes, records and
//!   segments. Decoding payloads is the caller's business.
//! - It has exactly one writer. [`Journal`] is not shared between threads, and
//!   a second writer on one directory is refused: `open` holds an exclusive
//!   `flock` on `LOCK` while the journal lives ([`writer_running`] tells a
//!   tool whether one does). The process that runs the sequencer owns the
//!   journal. Any number of [`Reader`]s may follow it, in the same process
//!   or others.
//! - It does not assign sequence numbers or read the time for records: the
//!   sequencer does. (The `IntervalMs` policy reads a monotonic clock only to
//!   decide when to flush.)
//! - It does not delete old segments, compress, or index beyond segment
//!   headers; snapshots and retention belong to the layers above.
//! - Preallocation guarantees space on ordinary file systems (ext4, xfs,
//!   tmpfs). On copy-on-write file systems (btrfs, zfs) a later write may
//!   still need new blocks.

mod error;
pub mod format;
mod reader;
mod scan;
mod segment;
mod writer;

pub use error::JournalError;
pub use reader::{Reader, Record};
pub use scan::{truncate_after, verify, Problem, ProblemKind, TailCut, VerifyReport};
pub use segment::{segment_file_name, segment_path};
pub use writer::{
    free_bytes, writer_running, Durability, Journal, JournalConfig, Recovery, SyncCount, SyncPoint,
    DEFAULT_SEGMENT_BYTES, LOCK_FILE, SEGMENT_BYTES_MAX, SEGMENT_SIZE_UNIT,
};
