//! Results of all_reduce, bcast, gather, all_gatherv and all_to_allv against references
//! computed on each rank from every rank's inputs (one rank's part of each case).

use std::fmt::Debug;

use ballast_runtime::{Communicator, ReduceOp, Reducible};

use super::lens;
use crate::conformance::{fnv, payload};

const OPS: [ReduceOp; 3] = [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max];

/// A hash of (rank, index, round): the inputs' source.
fn h(rank: usize, i: usize, round: u64) -> u64 {
    let mut x =
        (rank as u64).wrapping_mul(0x100_0000_01b3) ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ round;
    x ^= x >> 31;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^ (x >> 29)
}

/// An element type of the test: its inputs and the reference reduction.
trait El: Reducible + Debug {
    /// The input of hash `h`.
    fn gen(h: u64) -> Self;
    /// `a op b` (the reference).
    fn comb(a: Self, b: Self, op: ReduceOp) -> Self;
    /// Bit-for-bit equality.
    fn same(a: Self, b: Self) -> bool;
}

macro_rules! int_el {
    ($t:ty) => {
        impl El for $t {
            fn gen(h: u64) -> $t {
                // The full range: sums wrap (two's complement), as the runtime's and MPI's do.
                h as $t
            }
            fn comb(a: $t, b: $t, op: ReduceOp) -> $t {
                match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                }
            }
            fn same(a: $t, b: $t) -> bool {
                a == b
            }
        }
    };
}
int_el!(i32);
int_el!(i64);
int_el!(u64);

impl El for f64 {
    fn gen(h: u64) -> f64 {
        // Quarters of integers below 2^20 in magnitude: every sum of a few of them is exact
        // in any order (MPI's order of combination is its own, the engine's documented).
        ((h % (1 << 21)) as f64 - (1 << 20) as f64) * 0.25
    }
    fn comb(a: f64, b: f64, op: ReduceOp) -> f64 {
        match op {
            ReduceOp::Sum => a + b,
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        }
    }
    fn same(a: f64, b: f64) -> bool {
        a.to_bits() == b.to_bits()
    }
}

/// Every count of [`super::LENS`] in use and op of type `T`, in place (the Rust call's `in == out`).
fn reduce_type<T: El>(comm: &mut Communicator, round: u64) {
    let (n, me) = (comm.world_size(), comm.rank());
    let size = std::mem::size_of::<T>();
    for len in lens() {
        // 0, 1 and 1,000 elements, and 1 MiB of them.
        let count = if len == 1 << 20 { len / size } else { len };
        for (k, op) in OPS.into_iter().enumerate() {
            let round = round << 8 | k as u64;
            let mut data: Vec<T> = (0..count).map(|i| T::gen(h(me, i, round))).collect();
            comm.all_reduce(&mut data, op).unwrap();
            let bad = (0..count).find(|&i| {
                let want = (1..n).fold(T::gen(h(0, i, round)), |a, r| {
                    T::comb(a, T::gen(h(r, i, round)), op)
                });
                !T::same(data[i], want)
            });
            assert_eq!(
                bad,
                None,
                "rank {me}: all_reduce {} of {count} {}: first wrong element",
                op.name(),
                std::any::type_name::<T>()
            );
        }
    }
}

pub fn all_reduce_every_op_and_type(comm: &mut Communicator) {
    reduce_type::<i32>(comm, 1);
    reduce_type::<i64>(comm, 2);
    reduce_type::<u64>(comm, 3);
    reduce_type::<f64>(comm, 4);
    // Values whose wrong combination shows: the sum of 1..=n, min 1, max n.
    let me = comm.rank() as i64 + 1;
    let n = comm.world_size() as i64;
    for (op, want) in [
        (ReduceOp::Sum, n * (n + 1) / 2),
        (ReduceOp::Min, 1),
        (ReduceOp::Max, n),
    ] {
        let mut v = [me, -me];
        comm.all_reduce(&mut v, op).unwrap();
        let neg = match op {
            ReduceOp::Sum => -want,
            ReduceOp::Min => -n,
            ReduceOp::Max => -1,
        };
        assert_eq!(v, [want, neg], "{}", op.name());
    }
}

/// The roots of the rooted calls: the first and last rank.
fn roots(n: usize) -> Vec<usize> {
    if n == 1 {
        vec![0]
    } else {
        vec![0, n - 1]
    }
}

pub fn bcast_roots(comm: &mut Communicator) {
    let (n, me) = (comm.world_size(), comm.rank());
    for root in roots(n) {
        for len in lens() {
            let want = payload(len, (root as u64) << 32 | len as u64);
            let mut buf = if me == root { want.clone() } else { vec![0xa5; len] };
            comm.bcast(root, &mut buf).unwrap();
            assert!(buf == want, "rank {me}: bcast of {len} bytes from {root}");
        }
    }
}

/// Rank `r`'s length in a round of base length `base`: different per rank, and 0 on
/// every third rank.
fn len_of(r: usize, base: usize) -> usize {
    if base == 0 || r % 3 == 1 {
        0
    } else {
        base + 3 * r
    }
}

fn part(r: usize, base: usize, salt: u64) -> Vec<u8> {
    payload(len_of(r, base), salt << 40 | (r as u64) << 32 | base as u64)
}

pub fn gather_roots(comm: &mut Communicator) {
    let (n, me) = (comm.world_size(), comm.rank());
    for root in roots(n) {
        for base in lens() {
            let got = comm.gather(root, &part(me, base, 1)).unwrap();
            if me != root {
                assert!(got.is_none(), "rank {me}: a gather's result off the root");
                continue;
            }
            let got = got.expect("the root's result");
            assert_eq!(got.len(), n);
            for (r, p) in got.iter().enumerate() {
                assert!(
                    *p == part(r, base, 1),
                    "gather to {root}, base {base}: part of rank {r}"
                );
            }
        }
    }
}

/// A barrier, then [`all_gatherv_parts`].
pub fn all_gatherv_lengths(comm: &mut Communicator) {
    comm.barrier().unwrap();
    all_gatherv_parts(comm);
}

/// `all_gatherv` of every length of [`lens`], a different length per rank (every third
/// rank empty), each part checked.
pub fn all_gatherv_parts(comm: &mut Communicator) {
    let n = comm.world_size();
    for base in lens() {
        let got = comm.all_gatherv(&part(comm.rank(), base, 2)).unwrap();
        assert_eq!(got.len(), n);
        for (r, p) in got.iter().enumerate() {
            assert_eq!(
                (p.len(), fnv(p)),
                (len_of(r, base), fnv(&part(r, base, 2))),
                "all_gatherv base {base}: part of rank {r}"
            );
        }
    }
}

/// The bytes rank `s` sends rank `d` in a round of unit `unit`: 0, `unit` or `unit + 7` by
/// pair, so some pairs send nothing and the lengths are uneven.
fn pair(s: usize, d: usize, unit: usize) -> Vec<u8> {
    let len = [0, unit, unit + 7][(s * 3 + d * 5) % 3];
    let len = if unit == 0 { 0 } else { len };
    payload(len, (s as u64) << 40 | (d as u64) << 32 | unit as u64)
}

pub fn all_to_allv_uneven(comm: &mut Communicator) {
    let (n, me) = (comm.world_size(), comm.rank());
    for unit in lens() {
        let parts: Vec<Vec<u8>> = (0..n).map(|d| pair(me, d, unit)).collect();
        let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        let got = comm.all_to_allv(&refs).unwrap();
        assert_eq!(got.len(), n);
        for (s, p) in got.iter().enumerate() {
            let want = pair(s, me, unit);
            assert_eq!(
                (p.len(), fnv(p)),
                (want.len(), fnv(&want)),
                "rank {me}: all_to_allv unit {unit}: part from rank {s}"
            );
        }
    }
}
