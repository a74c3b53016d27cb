//! The collectives on the MPI native path (MPI's own, issue 35), as cases of
//! `mpi_conformance`: one rank per process (`mpirun -n 1, 2, 3, 4, 7`), every result
//! checked against a reference each rank computes alone from the inputs' generators (the
//! inputs of every rank are a function of its rank and the round). `values.rs`: all_reduce
//! (every op × type), bcast, gather, all_gatherv, all_to_allv; `sparse.rs`: the sparse
//! exchange, the size limits of MPI's `int` counts and a rank that fails during a
//! collective. The engine path's algorithms (`mpi_native` off) are not run here.

mod checks;
mod sparse;
mod values;

use ballast_runtime::mpi::Mpi;
use ballast_runtime::{Communicator, RuntimeConfig};

/// The element counts of the reductions and the byte lengths of the other calls: 0, 1,
/// 1,000 and 1 MiB (for a reduction: as many elements as make 1 MiB).
pub const LENS: [usize; 4] = [0, 1, 1000, 1 << 20];

/// Runs `f` on one rank per MPI process (the native path, asserted) and checks that every
/// process' rank returned; a failed assertion in `f` panics its rank, whose peers then end
/// with `Aborted` (the abort protocol): the case fails everywhere instead of hanging.
pub fn native(f: impl Fn(&mut Communicator) + Sync) {
    let mpi = Mpi::init().unwrap();
    let cfg = RuntimeConfig::builder().lock_pool(false).build().unwrap();
    let out = mpi
        .run_ranks(mpi.size(), &cfg, |comm| {
            assert!(comm.is_mpi_native(), "native path: {:?}", comm.notes());
            f(comm)
        })
        .unwrap();
    assert_eq!(out.len(), 1);
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

/// The cases, named `native collectives: ...`.
pub fn cases() -> Vec<(String, Box<dyn Fn()>)> {
    let mut v: Vec<(String, Box<dyn Fn()>)> = Vec::new();
    let mut add = |name: &str, f: fn()| v.push((format!("native collectives: {name}"), Box::new(f)));
    add(
        "all_reduce every op and type",
        values::all_reduce_every_op_and_type,
    );
    add("bcast from the first and last rank", values::bcast_roots);
    add("gather to the first and last rank", values::gather_roots);
    add(
        "barrier and all_gatherv open no peer",
        values::all_gatherv_lengths,
    );
    add("all_to_allv uneven and empty parts", values::all_to_allv_uneven);
    add(
        "exchange_sparse random destinations",
        sparse::exchange_sparse_random,
    );
    add("sizes above MPI's int", sparse::sizes_above_int);
    add(
        "a failed rank ends the others' collective",
        sparse::failed_rank_aborts,
    );
    add(
        "checked: different collectives are an error",
        checks::mismatch_is_an_error_when_checked,
    );
    add(
        "checked: every process alike or refused",
        checks::different_checks_are_refused,
    );
    v
}
