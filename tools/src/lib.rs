//! What other crates use of the `updown` tools: the load generator's
//! HTTP/1.1 client, with which the benchmarks drive servers too. The
//! `updown` binary is `src/main.rs`.

pub mod http;
