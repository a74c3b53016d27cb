//! `Communicator::bcast` and `Communicator::gather` on the engine (`local`): worlds of 1,
//! 2, 3, 4 and 7 ranks, roots 0 and n − 1, 0, 1, 1,000 bytes and 1 MiB, against the
//! bytes each rank generated (the reference, computed on one thread); a length that
//! differs from the root's as an error.

mod coll;

use ballast_runtime::{Communicator, Result};
use coll::{bytes, run, run_all, COUNTS, WORLDS};

const SEED: u64 = 0xb0ca57;

/// The roots checked in a world of `n`: 0 and n − 1.
fn roots(n: usize) -> Vec<usize> {
    if n == 1 {
        vec![0]
    } else {
        vec![0, n - 1]
    }
}

#[test]
fn bcast_copies_the_roots_bytes_to_every_rank() {
    for n in WORLDS {
        for root in roots(n) {
            for len in COUNTS {
                let want = bytes(SEED, &[root as u64, len as u64], len);
                let res = run(n, |comm: &mut Communicator| -> Result<Vec<u8>> {
                    let mut buf = if comm.rank() == root {
                        want.clone()
                    } else {
                        vec![0xee; len]
                    };
                    comm.bcast(root, &mut buf)?;
                    Ok(buf)
                });
                for (r, got) in res.iter().enumerate() {
                    assert!(
                        got == &want,
                        "{n} ranks, root {root}, {len} bytes: rank {r} differs"
                    );
                }
            }
        }
    }
}

/// Rank `r`'s bytes of a gather around `len`: lengths differ by rank (`len + r`, and 0
/// on every third rank).
fn part(r: usize, len: usize) -> Vec<u8> {
    let l = if r % 3 == 2 { 0 } else { len + r };
    bytes(SEED, &[7, r as u64, len as u64], l)
}

#[test]
fn gather_brings_every_ranks_bytes_to_the_root_only() {
    for n in WORLDS {
        for root in roots(n) {
            for len in COUNTS {
                let res = run(n, |comm: &mut Communicator| {
                    comm.gather(root, &part(comm.rank(), len))
                });
                for (r, got) in res.iter().enumerate() {
                    if r != root {
                        assert!(got.is_none(), "{n} ranks, root {root}: rank {r} got parts");
                        continue;
                    }
                    let got = got.as_ref().expect("the root's parts");
                    assert_eq!(got.len(), n);
                    for (s, p) in got.iter().enumerate() {
                        assert!(
                            p == &part(s, len),
                            "{n} ranks, root {root}, {len}: rank {s}'s part differs"
                        );
                    }
                }
            }
        }
    }
}

/// Back to back, with other collectives between: nothing of one leaks into the next.
#[test]
fn rooted_collectives_back_to_back() {
    let n = 7;
    let res = run(n, |comm: &mut Communicator| -> Result<Vec<Vec<u8>>> {
        let mut seen = Vec::new();
        for k in 0..6usize {
            let root = (k * 3) % n;
            let mut buf = if comm.rank() == root {
                bytes(SEED, &[k as u64], 100 + k)
            } else {
                vec![0; 100 + k]
            };
            comm.bcast(root, &mut buf)?;
            seen.push(buf);
            if let Some(all) = comm.gather(root, &part(comm.rank() + k, k * 10))? {
                seen.extend(all);
            }
            comm.barrier()?;
        }
        Ok(seen)
    });
    for (r, seen) in res.iter().enumerate() {
        let mut want = Vec::new();
        for k in 0..6usize {
            want.push(bytes(SEED, &[k as u64], 100 + k));
            if (k * 3) % n == r {
                want.extend((0..n).map(|s| part(s + k, k * 10)));
            }
        }
        assert!(seen == &want, "rank {r}");
    }
}

/// A rank whose length differs from the root's gets the error naming both ranks, and so
/// does every rank below it in the tree (passed on in place of the data, each naming
/// itself as the rank reporting it); the others get the root's bytes.
#[test]
fn a_bcast_length_that_differs_from_the_roots_is_an_error_below_it() {
    let res = run_all(4, |comm: &mut Communicator| {
        let mut buf = vec![1u8; if comm.rank() == 1 { 11 } else { 10 }];
        comm.bcast(0, &mut buf).map_err(|e| e.to_string())
    });
    let e = |at: usize| {
        Err(format!(
            "rank {at}: bcast (collective #1): rank 0 passed 10 bytes where rank 1 passed 11 bytes: \
             every rank must pass the same length"
        ))
    };
    // Rank 0 sends to 1 then 2; rank 1 to 3, which reports what rank 1 found.
    assert_eq!(res, [Ok(()), e(1), Ok(()), e(3)]);
}
