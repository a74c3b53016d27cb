//! `collective_checks` on the MPI native path: with it on, every collective carries its
//! number and ranks that call different ones get `CollectiveMismatch` (here `all_reduce`
//! against `bcast`, neither of which carries a number when it is off); every process must
//! use the same value, or every process gets the same configuration error.

use ballast_runtime::mpi::Mpi;
use ballast_runtime::{Error, ProtocolError, ReduceOp, RuntimeConfig};

/// With `collective_checks` on, rank 0's `all_reduce` against the others' `bcast` (the
/// second collective of each, after a barrier together) is an error on every rank, naming
/// the rank whose number differs, not a hang. Needs at least 2 processes.
pub fn mismatch_is_an_error_when_checked() {
    let mpi = Mpi::init().unwrap();
    if mpi.size() < 2 {
        return;
    }
    let cfg = RuntimeConfig::builder()
        .lock_pool(false)
        .collective_checks(true)
        .build()
        .unwrap();
    let mut comm = mpi.communicator(&cfg).unwrap();
    assert!(comm.is_mpi_native(), "native path: {:?}", comm.notes());
    comm.barrier().unwrap();
    let me = comm.rank();
    let r = if me == 0 {
        let mut x = [1.0f64];
        comm.all_reduce(&mut x, ReduceOp::Sum)
    } else {
        let mut b = [0u8; 4];
        comm.bcast(0, &mut b)
    };
    match r {
        Err(Error::Protocol(e @ ProtocolError::CollectiveMismatch { .. })) => {
            let want = if me == 0 {
                "rank 0: all_reduce (collective #2, step 0) got a message of bcast (collective #2, \
                 step 0) from rank 1: the ranks called different collectives"
                    .to_string()
            } else {
                format!(
                    "rank {me}: bcast (collective #2, step 0) got a message of all_reduce \
                     (collective #2, step 0) from rank 0: the ranks called different collectives"
                )
            };
            assert_eq!(e.to_string(), want);
        }
        other => panic!("rank {me}: expected CollectiveMismatch, got {other:?}"),
    }
}

/// Processes with different `collective_checks` are refused when the communicator is made,
/// on both paths, with the same message on every process. Needs at least 2 processes.
pub fn different_checks_are_refused() {
    crate::refused_unless_alike(
        "BALLAST_COLLECTIVE_CHECKS",
        "on on MPI rank 0, off on MPI rank 1",
        |r| if r == 0 { "on" } else { "off" }.to_string(),
        |b, r| b.collective_checks(r == 0),
    );
}
