//! The collectives measured by `mpi_collectives` and `local_collectives` (see
//! docs/BENCHMARKS.md): the eight operations ([`OPS`]), their calls per round, Ballast's side
//! of each ([`run_op`]), the partners per rank that the collectives' documentation promises
//! ([`Op::partners_bound`]) and the median of the rounds.

use ballast_runtime::{Communicator, ReduceOp};

/// The operations measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `all_reduce` (sum) of this many doubles.
    AllReduce(usize),
    /// `barrier`.
    Barrier,
    /// `all_to_allv` of this many bytes per pair: into the parts of the previous call
    /// (`all_to_allv_into` with one `out` kept, as raw MPI keeps its receive buffer) when
    /// true, else new parts each call (`all_to_allv`).
    AllToAllv(usize, bool),
    /// `exchange_sparse` of this many bytes to each of the next (up to) 3 ranks.
    Sparse(usize),
}

/// The eight operations, in the order they run and are reported.
pub const OPS: [Op; 8] = [
    Op::AllReduce(1),
    Op::AllReduce(1000),
    Op::Barrier,
    Op::AllToAllv(64, true),
    Op::AllToAllv(64 << 10, true),
    Op::AllToAllv(64, false),
    Op::AllToAllv(64 << 10, false),
    Op::Sparse(64),
];

impl Op {
    /// The row's name.
    pub fn name(self) -> String {
        match self {
            Op::AllReduce(1) => "allreduce 1 double".into(),
            Op::AllReduce(n) => format!("allreduce {n} doubles"),
            Op::Barrier => "barrier".into(),
            Op::AllToAllv(b, kept) => {
                let size = if b >= 1024 {
                    format!("{} KiB", b >> 10)
                } else {
                    format!("{b} B")
                };
                let how = if kept { "" } else { ", new parts each call" };
                format!("alltoallv {size} per pair{how}")
            }
            Op::Sparse(b) => format!("sparse exchange, 3 destinations, {b} B"),
        }
    }

    /// Calls per timed round (a twentieth with `quick`).
    pub fn iters(self, quick: bool) -> usize {
        let n = match self {
            Op::AllReduce(1) | Op::Barrier => 5000,
            Op::AllReduce(_) | Op::AllToAllv(64, _) | Op::Sparse(_) => 2000,
            Op::AllToAllv(..) => 200,
        };
        if quick {
            n / 20
        } else {
            n
        }
    }

    /// The most partners per rank over `n` ranks that the doc comments of the engine's
    /// collectives (runtime/src/comm/collective/) promise, capped at `n - 1`:
    /// allreduce `log2 p + 1` (`p` the largest power of two <= `n`; the `+ 1` only when
    /// `p < n`), barrier and alltoallv `2 * ceil(log2 n)`, the sparse exchange its
    /// destinations and sources (3 each) plus the barrier's `2 * ceil(log2 n)`.
    pub fn partners_bound(self, n: usize) -> usize {
        let ceil_log2 = n.next_power_of_two().trailing_zeros() as usize;
        let p = if n.is_power_of_two() {
            n
        } else {
            n.next_power_of_two() / 2
        };
        let bound = match self {
            Op::AllReduce(_) => p.trailing_zeros() as usize + usize::from(p < n),
            Op::Barrier | Op::AllToAllv(..) => 2 * ceil_log2,
            Op::Sparse(_) => 2 * dests(0, n).len() + 2 * ceil_log2,
        };
        bound.min(n.saturating_sub(1))
    }
}

/// The destinations of rank `me` in the sparse exchange: the next (up to) 3 ranks.
pub fn dests(me: usize, n: usize) -> Vec<usize> {
    (1..n.min(4)).map(|k| (me + k) % n).collect()
}

/// The bytes `run_op` sends from: `n` parts of the largest alltoallv.
pub fn send_bytes(n: usize) -> Vec<u8> {
    (0..n * (64 << 10)).map(|i| i as u8).collect()
}

/// Ballast's side of `op`: `iters` back-to-back calls on `comm`, from `send` (see
/// [`send_bytes`]).
pub fn run_op(comm: &mut Communicator, op: Op, iters: usize, send: &[u8]) -> ballast_runtime::Result<()> {
    let (n, me) = (comm.world_size(), comm.rank());
    match op {
        Op::AllReduce(k) => {
            let mut x = vec![1.0f64; k];
            for _ in 0..iters {
                comm.all_reduce(&mut x, ReduceOp::Sum)?;
            }
        }
        Op::Barrier => {
            for _ in 0..iters {
                comm.barrier()?;
            }
        }
        Op::AllToAllv(b, true) => {
            let parts: Vec<&[u8]> = (0..n).map(|d| &send[d * b..(d + 1) * b]).collect();
            let mut got = Vec::new();
            for _ in 0..iters {
                comm.all_to_allv_into(&parts, &mut got)?;
                debug_assert_eq!(got.len(), n);
            }
        }
        Op::AllToAllv(b, false) => {
            let parts: Vec<&[u8]> = (0..n).map(|d| &send[d * b..(d + 1) * b]).collect();
            for _ in 0..iters {
                let got = comm.all_to_allv(&parts)?;
                debug_assert_eq!(got.len(), n);
            }
        }
        Op::Sparse(b) => {
            let to: Vec<(usize, &[u8])> = dests(me, n).into_iter().map(|d| (d, &send[..b])).collect();
            for _ in 0..iters {
                comm.exchange_sparse(&to)?;
            }
        }
    }
    Ok(())
}

/// The median of `v` (the upper one of an even count); NaN when `v` is empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partner_bounds_follow_the_doc_comments() {
        let bounds = |n| OPS.map(|op| op.partners_bound(n));
        // 2 ranks: one partner whatever the algorithm.
        assert_eq!(bounds(2), [1; 8]);
        // 4: allreduce log2 4 = 2; barrier and alltoallv 2 * 2 = 4 capped at 3.
        assert_eq!(bounds(4), [2, 2, 3, 3, 3, 3, 3, 3]);
        // 8: allreduce 3; barrier and alltoallv 6; sparse 3 + 3 + 6 capped at 7.
        assert_eq!(bounds(8), [3, 3, 6, 6, 6, 6, 6, 7]);
        // 6: p = 4, so 2 + 1 for the folded ranks; 2 * ceil(log2 6) = 6 capped at 5.
        assert_eq!(Op::AllReduce(1).partners_bound(6), 3);
        assert_eq!(Op::Barrier.partners_bound(6), 5);
        assert_eq!(Op::Sparse(64).partners_bound(1), 0);
    }

    #[test]
    fn the_engine_opens_the_partners_its_doc_comments_promise_on_local() {
        use ballast_runtime::launch::threads;
        let cfg = ballast_runtime::RuntimeConfig::builder()
            .lock_pool(false)
            .build()
            .unwrap();
        // The distinct partners: dissemination and Bruck's rounds at 8 ranks meet rank
        // r + 4 both ways (5, not 6); the sparse exchange's 3 + 3 + barrier's are all 7.
        for (n, want) in [
            (2, [1u64; 8]),
            (4, [2, 2, 3, 3, 3, 3, 3, 3]),
            (8, [3, 3, 5, 5, 5, 5, 5, 7]),
        ] {
            let send = send_bytes(n);
            let got = OPS.map(|op| {
                let per_rank = threads::run_ranks(n, &cfg, |comm| {
                    run_op(comm, op, 3, &send).unwrap();
                    comm.footprint().peers_connected
                })
                .unwrap();
                per_rank.into_iter().max().unwrap()
            });
            assert_eq!(got, want, "{n} ranks");
            for (op, g) in OPS.iter().zip(got) {
                assert!(g as usize <= op.partners_bound(n), "{} at {n} ranks", op.name());
            }
        }
    }

    #[test]
    fn sparse_destinations_are_the_next_three_ranks() {
        assert_eq!(dests(6, 8), vec![7, 0, 1]);
        assert_eq!(dests(1, 2), vec![0]);
        assert!(dests(0, 1).is_empty());
    }

    #[test]
    fn median_is_the_middle_value() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
        assert!(median(Vec::new()).is_nan());
    }
}
