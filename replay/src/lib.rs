//! Rebuilding the venue from its journal, and the live driver that writes it.
//!
//! - [`codec`] turns a stamped command into journal bytes (rkyv) and back.
//! - [`Node`] is the one place that stamps, journals, then applies a command:
//!   the gateway's sequencer thread and the tools drive it.
//! - [`rebuild`] feeds a journal, from the newest valid snapshot, through the
//!   same `sequencer` code; there is exactly one implementation of the rules.
//! - [`snapshot`] writes and loads checksummed rkyv images of the state.
//! - [`history`] stores what leaves the live state after the history tail,
//!   for reads past it; derived from the journal, rebuilt by replay.
//!
//! What it deliberately does not do: it holds no business rule, opens no
//! socket and reads no clock; the time of each command comes from its caller
//! (live) or from the journal (replay).

pub mod codec;
pub mod history;
pub mod node;
pub mod rebuild;
pub mod snapshot;

pub use node::{Node, NodeConfig, NodeError, SnapshotJob};
pub use rebuild::{replay, replay_with, ReplayError, ReplayOutcome, Until};
