//! The collectives over MPI (issue 35), as cases of `mpi_conformance`: one rank per process
//! (`mpirun -n 1, 2, 3, 4, 7`), on both paths. The bodies are `coll_cases/`'s (shared with
//! `verbs_conformance`), each run through [`native`] (MPI's own collectives: after barrier
//! and all_gatherv no Ballast peer is open) and through `engine.rs`'s `engine`
//! (`mpi_native` off: Ballast's own algorithms over MPI point to point, talking to their
//! documented partners only). `limits.rs`: the size limits of MPI's `int` counts and a
//! rank that fails during a collective; `checks.rs`: `collective_checks` (mismatches an
//! error, every process alike). `limits.rs` and `checks.rs`'s first case are native only.

mod checks;
mod engine;
mod limits;

use ballast_runtime::mpi::Mpi;
use ballast_runtime::{Communicator, RuntimeConfig};

use crate::coll_cases;

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

/// Barrier and all_gatherv, then: MPI's own collectives opened no peer of Ballast's
/// (Ballast's algorithms would have sent to their partners).
fn all_gatherv_opens_no_peer(comm: &mut Communicator) {
    coll_cases::values::all_gatherv_lengths(comm);
    assert_eq!(
        comm.footprint().peers_connected,
        0,
        "peers after barrier and all_gatherv"
    );
}

/// The cases, named `native collectives: ...` and `engine collectives: ...`.
pub fn cases() -> Vec<(String, Box<dyn Fn()>)> {
    let mut v: Vec<(String, Box<dyn Fn()>)> = Vec::new();
    for (name, body) in coll_cases::cases() {
        let (name, body): (&str, coll_cases::Body) = match name {
            "barrier and all_gatherv" => ("barrier and all_gatherv open no peer", all_gatherv_opens_no_peer),
            _ => (name, body),
        };
        v.push((
            format!("native collectives: {name}"),
            Box::new(move || native(body)),
        ));
    }
    let mut add = |name: &str, f: fn()| v.push((format!("native collectives: {name}"), Box::new(f)));
    add("sizes above MPI's int", limits::sizes_above_int);
    add(
        "a failed rank ends the others' collective",
        limits::failed_rank_aborts,
    );
    add(
        "checked: different collectives are an error",
        checks::mismatch_is_an_error_when_checked,
    );
    add(
        "checked: every process alike or refused",
        checks::different_checks_are_refused,
    );
    v.extend(engine::cases());
    v
}
