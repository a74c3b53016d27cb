//! Issue 35's collective cases, written once for any transport: each body takes one rank's
//! `&mut Communicator` (rank and world from it) and checks every result against a reference
//! the rank computes alone from the inputs' generators (every rank's inputs are a function
//! of its rank and the round). `values.rs`: all_reduce (every op × type, in place: the
//! Rust call's `in == out`), bcast and gather (roots 0 and n−1), barrier and all_gatherv,
//! all_to_allv; `reuse.rs`: all_to_allv_into with the same `out` across calls; `sparse.rs`:
//! the sparse exchange with seeded random destinations. Run on the MPI native and engine
//! paths by `mpi_coll/` (`mpi_conformance`) and over verbs by
//! `verbs_conformance`; a failed assertion panics the rank.
#![allow(dead_code)]

pub mod reuse;
pub mod sparse;
pub mod values;

use std::sync::atomic::{AtomicUsize, Ordering};

use ballast_runtime::Communicator;

/// The element counts of the reductions and the byte lengths of the other calls: 0, 1,
/// 1,000 and 1 MiB (for a reduction: as many elements as make 1 MiB).
pub const LENS: [usize; 4] = [0, 1, 1000, 1 << 20];

/// The largest of [`LENS`] the bodies use (all of them unless set).
static LARGEST: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The bodies use the lengths of [`LENS`] up to `largest` from now on (this process): a
/// run under emulation leaves out 1 MiB where it would take minutes.
pub fn set_largest(largest: usize) {
    LARGEST.store(largest, Ordering::Relaxed);
}

/// The lengths of [`LENS`] in use (see [`set_largest`]).
pub fn lens() -> impl Iterator<Item = usize> {
    let largest = LARGEST.load(Ordering::Relaxed);
    LENS.into_iter().filter(move |&l| l <= largest)
}

/// A case body: one rank's part, panicking on a wrong result.
pub type Body = fn(&mut Communicator);

/// Every transport-agnostic case: its name and body.
pub fn cases() -> Vec<(&'static str, Body)> {
    vec![
        (
            "all_reduce every op and type",
            values::all_reduce_every_op_and_type,
        ),
        ("bcast from the first and last rank", values::bcast_roots),
        ("gather to the first and last rank", values::gather_roots),
        ("barrier and all_gatherv", values::all_gatherv_lengths),
        ("all_to_allv uneven and empty parts", values::all_to_allv_uneven),
        (
            "all_to_allv_into reuses its buffers",
            reuse::all_to_allv_into_reuses,
        ),
        (
            "exchange_sparse random destinations",
            sparse::exchange_sparse_random,
        ),
    ]
}

/// A xorshift generator, seeded: the same sequence on every rank.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
