//! The collectives on the MPI engine path (`mpi_native` off: Ballast's own algorithms over
//! MPI point to point, issue 35), as cases of `mpi_conformance`: one rank per process, the
//! same `coll_cases/` bodies as the native path's, each run through [`engine`]. Where the
//! native path opens no peer, the engine's barrier and all_gatherv talk to their documented
//! partners only: `all_gatherv`'s ring 2, the barrier's dissemination `2 * ceil(log2 n)`.

use ballast_runtime::mpi::Mpi;
use ballast_runtime::{Communicator, RuntimeConfig};

use crate::coll_cases;

/// The note of a communicator whose `mpi_native` is off (part of it).
const OFF_NOTE: &str = "MPI native path off (BALLAST_MPI_NATIVE / mpi_native)";

/// Runs `f` on one rank per MPI process with `mpi_native` off (the engine path, asserted,
/// and the notes saying why) and checks that every process' rank returned; a failed
/// assertion panics its rank, whose peers then end with `Aborted`.
pub fn engine(f: impl Fn(&mut Communicator) + Sync) {
    let mpi = Mpi::init().unwrap();
    let cfg = RuntimeConfig::builder()
        .lock_pool(false)
        .mpi_native(false)
        .build()
        .unwrap();
    let out = mpi
        .run_ranks(mpi.size(), &cfg, |comm| {
            assert!(!comm.is_mpi_native(), "engine path: {:?}", comm.notes());
            assert!(
                comm.notes().iter().any(|n| n.contains(OFF_NOTE)),
                "the notes say mpi_native is off: {:?}",
                comm.notes()
            );
            f(comm)
        })
        .unwrap();
    assert_eq!(out.len(), 1);
}

/// `ceil(log2 n)`: the dissemination barrier's rounds.
fn log2_ceil(n: usize) -> usize {
    n.next_power_of_two().trailing_zeros() as usize
}

/// The distinct ranks rank `r` of `n` talks to in the dissemination barrier: `r ± 2^k`
/// (mod n) for `2^k < n`.
fn barrier_partners(r: usize, n: usize) -> u64 {
    let mut p: Vec<usize> = (0..log2_ceil(n))
        .flat_map(|k| [(r + (1 << k)) % n, (r + n - (1 << k) % n) % n])
        .collect();
    p.sort_unstable();
    p.dedup();
    p.len() as u64
}

/// all_gatherv, then the shared body (a barrier and all_gatherv): the peers connected are
/// all_gatherv's ring neighbours after it (at most its documented 2), and the barrier's
/// partners after the rest (at most its documented `2 * ceil(log2 n)`; at n = 7 that is
/// every other rank: distances 1, 2 and 4 both ways cover all 6).
fn peers_within_partners(comm: &mut Communicator) {
    let (n, me) = (comm.world_size(), comm.rank());
    coll_cases::values::all_gatherv_parts(comm);
    let after_gather = comm.footprint().peers_connected;
    assert!(
        after_gather <= 2,
        "rank {me}: {after_gather} peers after all_gatherv of {n} ranks (documented: 2)"
    );
    assert_eq!(
        after_gather,
        (n - 1).min(2) as u64,
        "rank {me}: the ring's neighbours"
    );
    coll_cases::values::all_gatherv_lengths(comm);
    let after_barrier = comm.footprint().peers_connected;
    assert!(
        after_barrier <= 2 * log2_ceil(n) as u64,
        "rank {me}: {after_barrier} peers after a barrier of {n} ranks (documented: 2 * ceil(log2 n))"
    );
    assert_eq!(
        after_barrier,
        barrier_partners(me, n),
        "rank {me}: the barrier's partners"
    );
}

/// The cases, named `engine collectives: ...`.
pub fn cases() -> Vec<(String, Box<dyn Fn()>)> {
    coll_cases::cases()
        .into_iter()
        .map(|(name, body)| {
            let (name, body): (&str, coll_cases::Body) = match name {
                "barrier and all_gatherv" => (
                    "barrier and all_gatherv talk to their partners only",
                    peers_within_partners,
                ),
                _ => (name, body),
            };
            let case: Box<dyn Fn()> = Box::new(move || engine(body));
            (format!("engine collectives: {name}"), case)
        })
        .collect()
}
