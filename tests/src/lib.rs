//! Test support for the whole workspace: a scenario harness over the
//! sequencer, a naive reference book, and a seeded simulation with invariant
//! checkers. Nothing here is used by the venue itself.

pub mod checks;
pub mod harness;
pub mod reference;
pub mod rng;
pub mod sim;
