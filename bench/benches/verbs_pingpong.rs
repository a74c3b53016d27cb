//! `cargo bench --features verbs --bench verbs_pingpong`: the verbs ping-pong program
//! (`bench/src/bin/verbs_pingpong.rs`, documented there and in docs/BENCHMARKS.md).
include!("../src/bin/verbs_pingpong.rs");
