//! The deterministic core of updown: one state machine that takes
//! `(seq, ts_ms, command)` and returns a reply and the events it caused.
//!
//! It holds every business rule of the venue once: markets and their
//! windows, accounts and keys, order entry, matching, fees, holds, limits,
//! settlement, and the queries answered from the state.
//!
//! What it deliberately does not do: no I/O, no clock, no randomness, no
//! environment, no threads, no hash-seeded iteration. Time enters only as the
//! stamp on each command; the outside world only as commands (`Tick`,
//! `Price`, operator commands). The same commands in give the same state and
//! the same events out, on every machine. It never panics on user input:
//! every refusal is a `Reply::Rejected` with one of the spec's codes.

pub mod auth;
pub mod book;
pub mod calendar;
pub mod command;
mod crc;
pub mod engine;
pub mod event;
pub mod fees;
pub mod hash;
mod hint;
pub mod index;
pub mod invariants;
pub mod limits;
pub mod query;
pub mod reply;
pub mod retention;
pub mod state;
pub mod table;
pub mod types;
pub mod validate;
pub mod wire;

pub use command::{Command, NewKey, NewOrder, SeriesConfig, Stamped, VenueConfig};
pub use event::Event;
pub use reply::{ErrorCode, Reject, Reply};
pub use state::State;
