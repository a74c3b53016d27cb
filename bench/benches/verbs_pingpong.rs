//! `cargo bench --features verbs --bench verbs_pingpong`: the verbs ping-pong program
//! (`bench/src/bin/verbs_pingpong.rs`, documented there and in docs/BENCHMARKS.md).
#[path = "../src/bin/verbs_pingpong.rs"]
mod verbs_pingpong;

fn main() {
    verbs_pingpong::main()
}
