//! `Communicator::all_to_allv` on the engine (`local`): worlds of 1, 2, 3, 4 and 7 ranks,
//! parts of 0, 1, 1,000 bytes and 1 MiB, uneven and zero lengths, against the bytes each
//! rank generated for each destination (the reference, computed on one thread).

mod coll;

use ballast_runtime::{Communicator, Result};
use coll::{bytes, run, COUNTS, WORLDS};

const SEED: u64 = 0xa2a;

/// What rank `src` sends rank `dst` in exchange `k`, of `len` bytes.
fn part(k: u64, src: usize, dst: usize, len: usize) -> Vec<u8> {
    bytes(SEED, &[k, src as u64, dst as u64], len)
}

/// Every rank's parts of `len(src, dst)` bytes: each rank gets, by source, what each
/// source made for it.
fn check(n: usize, k: u64, len: impl Fn(usize, usize) -> usize + Sync) {
    let res = run(n, |comm: &mut Communicator| -> Result<Vec<Vec<u8>>> {
        let me = comm.rank();
        let parts: Vec<Vec<u8>> = (0..n).map(|d| part(k, me, d, len(me, d))).collect();
        let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        comm.all_to_allv(&refs)
    });
    for (r, got) in res.iter().enumerate() {
        assert_eq!(got.len(), n);
        for (s, p) in got.iter().enumerate() {
            assert!(
                p == &part(k, s, r, len(s, r)),
                "{n} ranks, case {k}: rank {r}'s part from {s} differs"
            );
        }
    }
}

#[test]
fn equal_parts_of_0_1_1000_bytes_and_1_mib() {
    for n in WORLDS {
        for len in COUNTS {
            check(n, len as u64, |_, _| len);
        }
    }
}

#[test]
fn uneven_and_zero_lengths() {
    for n in WORLDS {
        // Some pairs empty, others of lengths that differ by source and destination, a
        // rank that sends nothing at all (rank 1) and one that receives nothing (rank 2).
        check(n, 1 << 40, |s, d| match (s, d) {
            (1, _) | (_, 2) => 0,
            _ if (s + 2 * d) % 4 == 0 => 0,
            _ => 1 + (s * 977 + d * 131) % 3000,
        });
    }
}

/// Several in a row, with a barrier between some: nothing of one leaks into the next.
#[test]
fn back_to_back() {
    let n = 7;
    let res = run(n, |comm: &mut Communicator| -> Result<Vec<Vec<Vec<u8>>>> {
        let me = comm.rank();
        let mut all = Vec::new();
        for k in 0..5u64 {
            let parts: Vec<Vec<u8>> = (0..n)
                .map(|d| part(k, me, d, (me + d + k as usize) % 5))
                .collect();
            let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
            all.push(comm.all_to_allv(&refs)?);
            if k % 2 == 1 {
                comm.barrier()?;
            }
        }
        Ok(all)
    });
    for (r, all) in res.iter().enumerate() {
        for (k, got) in all.iter().enumerate() {
            let want: Vec<Vec<u8>> = (0..n).map(|s| part(k as u64, s, r, (s + r + k) % 5)).collect();
            assert!(got == &want, "rank {r}, exchange {k}");
        }
    }
}

/// `all_to_allv_into` with one `out` kept across calls (stale buffers, more than ranks, at
/// first): each call's parts are the reference's, whatever the previous call left, and a
/// part that fits the buffer of the previous call's part takes it in place.
#[test]
fn into_a_kept_out() {
    for n in [1, 3, 4] {
        let res = run(n, |comm: &mut Communicator| -> Result<Vec<Vec<Vec<u8>>>> {
            let me = comm.rank();
            let mut out: Vec<Vec<u8>> = (0..n + 2).map(|i| vec![0xee; 3 * i]).collect();
            let mut all = Vec::new();
            for k in 0..4u64 {
                let parts: Vec<Vec<u8>> = (0..n).map(|d| part(k, me, d, (1000 >> (2 * k)) + d)).collect();
                let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
                let before: Vec<(*const u8, usize)> =
                    out.iter().map(|b| (b.as_ptr(), b.capacity())).collect();
                comm.all_to_allv_into(&refs, &mut out)?;
                // The parts shrink from call to call: from the second on, each goes into
                // the buffer that held the previous one (no allocation).
                for (s, p) in out.iter().enumerate() {
                    if k > 0 && !p.is_empty() {
                        assert_eq!(
                            p.as_ptr(),
                            before[s].0,
                            "rank {me}, call {k}: part from {s} moved"
                        );
                    }
                }
                all.push(out.clone());
            }
            Ok(all)
        });
        for (r, all) in res.iter().enumerate() {
            for (k, got) in all.iter().enumerate() {
                let want: Vec<Vec<u8>> = (0..n)
                    .map(|s| part(k as u64, s, r, (1000 >> (2 * k)) + r))
                    .collect();
                assert!(got == &want, "{n} ranks: rank {r}, call {k}");
            }
        }
    }
}
