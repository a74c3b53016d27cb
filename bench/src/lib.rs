//! Shared helpers for Ballast's benchmarks (see `benches/` and `docs/BENCHMARKS.md`).
#![deny(unsafe_code)]

pub mod collectives;

#[cfg(feature = "verbs")]
pub mod raw_pingpong;
