//! REST order entry over loopback, side by side: the whole venue
//! (`gateway::Server` in-process: gateway worker, sequencer thread, journal
//! with group commit) against a bare axum handler that parses the same JSON
//! and answers without an exchange behind it. See `README.md`.
//!
//! - [`http`] is the load generator's small HTTP/1.1 keep-alive client.
//! - [`load`] drives one server: closed loop (maximum rate) or open loop
//!   (fixed rate, latency from the scheduled send time).
//! - [`servers`] starts the bare handler, and the venue with its traders.
//! - [`cpu`] reads the CPU time of each thread, to split a request's cost.
//! - [`report`] runs the interleaved rounds and prints the figures and aims.

pub mod cpu;
pub mod load;
pub mod report;
pub mod servers;
