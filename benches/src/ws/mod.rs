//! Websocket fan-out, side by side: the venue (`gateway::Server`
//! in-process: sequencer, journal, websocket publisher, one gateway
//! worker) against a bare fastwebsockets broadcast of the same bytes, to
//! the same 1, 100 or 1,000 subscribers on loopback. See `README.md`.
//!
//! - [`plan`] is the event stream both carry, and the clients' check of it.
//! - [`venue`] starts the venue and turns each event into an order or a
//!   cancel submitted straight to the sequencer.
//! - [`bare`] is the bare server and its broadcaster.
//! - [`client`] is the subscribers: connect, subscribe, check, time.
//! - [`cpu`] reads the CPU time of each thread, by role.
//! - [`report`] runs the interleaved rounds and prints the figures and aims.

pub mod bare;
pub mod client;
pub mod cpu;
pub mod plan;
pub mod report;
pub mod venue;
