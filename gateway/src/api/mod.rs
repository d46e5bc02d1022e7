//! The REST API under `/v1`: routes, handlers and their JSON.

pub mod json;
pub mod parse;
pub mod rest;
