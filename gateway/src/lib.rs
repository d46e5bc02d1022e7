//! The venue's front door: HTTP and websocket gateways in front of
//! the single sequencer thread.
//!
//! Gateway tasks parse, validate the shape of requests and hash key secrets;
//! they push one job per request through a bounded queue to the sequencer
//! thread, which authenticates against the key registry, rate-limits new
//! orders, stamps, journals and applies, commits the batch, and only then
//! answers. The admin interface is a second listener, on loopback by
//! default, guarded by a token file in the data directory.
//!
//! What it deliberately does not do: decide any business rule (those live
//! in `sequencer`), keep business state (it asks the sequencer thread), or
//! ever see a key's secret beyond hashing it.

pub mod admin;
pub mod alloc;
pub mod api;
pub mod auth;
pub mod bell;
pub mod config;
pub mod conns;
pub mod engine;
pub mod error;
pub mod feed;
pub mod metrics;
pub mod server;
pub mod ws;

pub use config::ServerConfig;
pub use server::{Server, StartError};
