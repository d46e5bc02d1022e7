//! Benchmarks of the updown core, side by side on one pre-generated order
//! flow: the sequencer alone, the sequencer behind the journal (never
//! flushed, and group-committed), the `lobster` crate as a reference
//! matcher, and replay of the journal. See `README.md` for what each figure
//! means and how to reproduce it.
//!
//! - [`flow`] generates the flow (and its `lobster` twin) from a seed.
//! - [`engines`] drives each engine over it, timing the whole loop or each
//!   command.
//! - [`clock`] is the cheap clock of the latency pass.
//! - [`report`] runs the rounds and prints the tables and the aims.
//! - [`rest`] is the REST order-entry benchmark: the venue in-process
//!   against a bare axum handler, over loopback (`--bin rest`).
//! - [`loopback`] serves the bare servers' routers (REST and websocket).
//! - [`ws`] is the websocket fan-out benchmark: the venue's publisher
//!   against a bare fastwebsockets broadcast (`--bin ws`).

/// The venue's allocator (`gateway::alloc`), so that every figure is the
/// `updown` binary's: large blocks on transparent huge pages.
#[global_allocator]
static ALLOC: gateway::alloc::HugePages = gateway::alloc::HugePages;

/// Runs this thread as the venue runs its sequencer thread: the pages of
/// its new large blocks faulted in ahead by the allocator's `populate`
/// thread (`gateway::alloc`). Every benchmark binary calls it first, so all
/// its engines (the reference's too) run on that thread alike.
/// `UPDOWN_BENCH_POPULATE=0` leaves it off, to measure without it.
pub fn venue_memory() {
    if std::env::var("UPDOWN_BENCH_POPULATE").as_deref() != Ok("0") {
        gateway::alloc::populate_ahead_on_this_thread();
    }
}

pub mod clock;
pub mod engines;
pub mod flow;
pub mod loopback;
pub mod report;
pub mod rest;
pub mod rng;
pub mod ws;
