//! Errors of the journal. Every error about damaged data names the segment
//! file and the byte offset inside it, so an operator can find the spot.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong in the journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// An operating-system call failed; `context` says what we were doing.
    #[error("journal I/O error while {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },

    /// The disk (or the quota) is full. Raised when a new segment is
    /// preallocated, never later, so a full disk cannot kill the process
    /// with SIGBUS while it writes through the mapping.
    #[error("no space left for journal segment {path}: {source}")]
    NoSpace {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// Bytes that are not a valid segment header or record.
    #[error("corrupt journal at {}, byte offset {offset}: {reason}", segment.display())]
    Corrupt {
        segment: PathBuf,
        offset: u64,
        reason: String,
    },

    /// A sealed segment file shorter than its header says, cut after its
    /// seal: every record of it is whole. Nothing changed; opening with
    /// `truncate_on_corruption` writes it back to its full length, losing
    /// nothing.
    #[error(
        "journal segment {} is cut short after its seal, at byte offset {offset} ({reason}); every record of it is whole",
        segment.display()
    )]
    CutAfterSeal {
        segment: PathBuf,
        offset: u64,
        reason: String,
    },

    /// The last record looks torn, but cutting it would drop records known
    /// to be acknowledged: damage, not a crash's leftover. Nothing changed.
    #[error(
        "the journal's last record, at {}, byte offset {offset}, is damaged ({reason}); cutting it would leave the journal at seq {kept}, but records through seq {keep_through} were acknowledged (a snapshot holds them): refusing to change the journal",
        segment.display()
    )]
    CutWouldDrop {
        segment: PathBuf,
        offset: u64,
        reason: String,
        kept: u64,
        keep_through: u64,
    },

    /// Valid records whose sequence numbers do not follow each other.
    #[error(
        "sequence gap in journal at {}, byte offset {offset}: expected seq {expected}, found {found}",
        segment.display()
    )]
    SeqGap {
        segment: PathBuf,
        offset: u64,
        expected: u64,
        found: u64,
    },

    /// A segment file is missing between two that exist.
    #[error("journal segment {} is missing (the next one present is {})", expected.display(), found.display())]
    MissingSegment { expected: PathBuf, found: PathBuf },

    /// `append` was called with a sequence number that does not follow the last one.
    #[error("append out of order: expected seq {expected}, got {got}")]
    OutOfOrder { expected: u64, got: u64 },

    /// The payload cannot fit in one segment.
    #[error("record too large: payload of {len} bytes, a segment holds at most {max}")]
    RecordTooLarge { len: usize, max: usize },

    /// An earlier flush failed. After a failed msync the kernel may have
    /// dropped the dirty pages, so nothing written since can be trusted to
    /// be durable; the journal refuses further work until it is reopened.
    #[error("journal is unusable after an earlier flush failure; reopen it to recover")]
    Poisoned,

    /// A bad argument or configuration value.
    #[error("invalid journal argument: {0}")]
    Invalid(String),
}

impl JournalError {
    /// Wraps an I/O error with a description of what was being done.
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> JournalError {
        JournalError::Io {
            context: context.into(),
            source,
        }
    }

    /// True for errors that mean the data on disk is damaged.
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            JournalError::Corrupt { .. }
                | JournalError::CutAfterSeal { .. }
                | JournalError::SeqGap { .. }
                | JournalError::MissingSegment { .. }
        )
    }
}
