//! MPI's limits on the native path: the errors of sizes above MPI's `int` counts, and a
//! rank that fails while the others are in a collective.

use ballast_runtime::fabric::FabricError;
use ballast_runtime::mpi::Mpi;
use ballast_runtime::{Communicator, Error, Received, ReduceOp, RuntimeConfig};

use super::native;

/// 2 GiB and one byte: above `i32::MAX`, allocated zeroed and never touched (no memory).
const BIG: usize = (1 << 31) + 1;

fn err_text(r: ballast_runtime::Result<impl Sized>) -> String {
    match r {
        Ok(_) => "no error".to_string(),
        Err(e) => e.to_string(),
    }
}

pub fn sizes_above_int() {
    native(|comm| {
        let (n, me) = (comm.world_size(), comm.rank());
        let mut big = vec![0u8; BIG];
        // Every rank has the same length: every rank refuses it, before any message.
        let e = err_text(comm.bcast(0, &mut big));
        assert_eq!(
            e,
            format!("rank {me}: bcast: a buffer of {BIG} bytes is above MPI's count limit of 2147483647 bytes (an int)")
        );
        // The lengths travel first: every rank refuses the last rank's part.
        let mine: &[u8] = if me == n - 1 { &big } else { b"small" };
        let e = err_text(comm.all_gatherv(mine));
        let whose = if me == n - 1 {
            "this rank's part".to_string()
        } else {
            format!("rank {}'s part", n - 1)
        };
        assert_eq!(
            e,
            format!("rank {me}: all_gatherv: {whose} of {BIG} bytes is above MPI's count limit of 2147483647 bytes (an int)")
        );
        if n <= 2 {
            // The sender and the receiver of the big part refuse it (here: every rank).
            let parts: Vec<&[u8]> = (0..n)
                .map(|d| {
                    if d == n - 1 && me == 0 {
                        &big[..]
                    } else {
                        &b"x"[..]
                    }
                })
                .collect();
            let e = err_text(comm.all_to_allv(&parts));
            let what = if me == 0 {
                format!("the part for rank {} of {BIG} bytes", n - 1)
            } else {
                format!("rank 0's part of {BIG} bytes")
            };
            assert_eq!(
                e,
                format!(
                    "rank {me}: all_to_allv: {what} is above MPI's count limit of 2147483647 bytes (an int)"
                )
            );
        }
        if n >= 2 {
            // Refused before anything is sent; the exchange then runs with the others.
            if me == 0 {
                let e = err_text(comm.exchange_sparse(&[(1, &big[..])]));
                assert_eq!(
                    e,
                    format!("rank 0: exchange_sparse: the message of {BIG} bytes for rank 1 is above MPI's count limit of 2147483647 bytes (an int)")
                );
            }
            let sends: Vec<(usize, &[u8])> = if me == 0 { vec![(1, b"after")] } else { Vec::new() };
            let got = comm.exchange_sparse(&sends).unwrap();
            let want: Vec<Received> = if me == 1 {
                vec![Received {
                    source: 0,
                    data: b"after".to_vec(),
                }]
            } else {
                Vec::new()
            };
            assert_eq!(got, want);
        }
        // The communicator goes on: the ranks still agree on their collectives.
        comm.barrier().unwrap();
        let got = comm.all_gatherv(&[me as u8]).unwrap();
        assert_eq!(got, (0..n).map(|r| vec![r as u8]).collect::<Vec<_>>());
    });
}

/// The last rank fails (panics) before a collective: the others end with `Aborted` (the
/// abort protocol), not a hang. In the sparse exchange (polled) while they wait in it; in
/// all_reduce (MPI's blocking collective, which nothing can leave) once the notice came
/// (here: a receive from the failed rank ended with it).
pub fn failed_rank_aborts() {
    let mpi = Mpi::init().unwrap();
    let n = mpi.size();
    if n < 2 {
        return;
    }
    let cfg = RuntimeConfig::builder().lock_pool(false).build().unwrap();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {})); // the planned panics print nothing
    for which in 0..2 {
        let body = |comm: &mut Communicator| -> ballast_runtime::Result<()> {
            assert!(comm.is_mpi_native());
            if comm.rank() == n - 1 {
                panic!("planned failure of the last rank");
            }
            if which == 0 {
                let e = comm.recv(n - 1, 9u32).map(drop);
                assert!(matches!(e, Err(Error::Fabric(FabricError::Aborted))), "{e:?}");
                let mut x = [1.0f64; 4];
                comm.all_reduce(&mut x, ReduceOp::Sum)
            } else {
                let to = (comm.rank() + 1) % n;
                comm.exchange_sparse(&[(to, b"to a rank that failed")]).map(drop)
            }
        };
        let r = mpi.run_ranks(n, &cfg, body);
        let aborted = |e: &Error| matches!(e, Error::Fabric(FabricError::Aborted));
        match (mpi.rank() == n - 1, &r) {
            (true, Err(Error::RankPanicked { .. })) => {}
            (false, Err(e)) if aborted(e) => {}
            (false, Ok(v)) if v.iter().all(|o| o.output.as_ref().is_err_and(aborted)) => {}
            _ => {
                std::panic::set_hook(hook);
                panic!("case {which}: process {}: {r:?}", mpi.rank());
            }
        }
    }
    std::panic::set_hook(hook);
}
