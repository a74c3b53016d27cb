//! `Communicator::exchange_sparse` (NBX) on the engine (`local`): worlds of 1, 2, 3, 4
//! and 7 ranks with seeded random destinations, ranks that send to nobody and ranks that
//! receive from nobody, several exchanges back to back and between other collectives,
//! against the reference computed on one thread from every rank's plan; ranks in
//! different collectives get an error.

mod coll;

use ballast_runtime::{Communicator, Received, ReduceOp, Result};
use coll::{bytes, run, run_all, Rng, WORLDS};

const SEED: u64 = 0x5ba25e;

/// What an exchange returns: a [`Received`] per source, by source.
type Parts = Vec<Received>;

/// Rank `r`'s sends of exchange `k` in a world of `n`: seeded random destinations (each
/// with probability 2/5), none for rank 0 (it sends to nobody) and never rank `n - 1` when
/// `n > 2` (it receives from nobody); seeded bytes of seeded lengths (0 to 3,000, one in
/// eight of 1 MiB + 5).
fn plan(n: usize, k: u64, r: usize) -> Vec<(usize, Vec<u8>)> {
    let mut g = Rng::new(SEED, &[n as u64, k, r as u64]);
    let mut out = Vec::new();
    if r == 0 {
        return out;
    }
    for d in 0..n {
        if d == r || (n > 2 && d == n - 1) || g.below(5) >= 2 {
            continue;
        }
        let len = match g.below(8) {
            0 => (1 << 20) + 5,
            _ => g.below(3001),
        };
        out.push((d, bytes(SEED, &[k, r as u64, d as u64], len)));
    }
    // The caller's order is free: give them backwards on odd ranks.
    if r % 2 == 1 {
        out.reverse();
    }
    out
}

/// What rank `r` must receive in exchange `k`: every rank's part for it, by source.
fn want(n: usize, k: u64, r: usize) -> Parts {
    (0..n)
        .flat_map(|s| {
            plan(n, k, s)
                .into_iter()
                .filter(move |(d, _)| *d == r)
                .map(move |(_, data)| Received { source: s, data })
        })
        .collect()
}

/// One exchange of plan `k` on `comm`.
fn exchange(comm: &mut Communicator, k: u64) -> Result<Parts> {
    let mine = plan(comm.world_size(), k, comm.rank());
    let sends: Vec<(usize, &[u8])> = mine.iter().map(|(d, b)| (*d, &b[..])).collect();
    comm.exchange_sparse(&sends)
}

#[test]
fn random_destinations_reach_their_ranks_in_source_order() {
    for n in WORLDS {
        let res = run(n, |comm: &mut Communicator| exchange(comm, 0));
        let mut received = 0;
        for (r, got) in res.iter().enumerate() {
            assert!(got == &want(n, 0, r), "{n} ranks: rank {r}");
            received += got.len();
        }
        if n > 2 {
            assert!(
                res[n - 1].is_empty() && received > 0,
                "{n} ranks: the plan sends something"
            );
        }
    }
}

/// Ten exchanges back to back on 7 ranks, with other collectives between some: no
/// message of one leaks into another (a rank that finished an exchange starts the next
/// while others still receive in theirs).
#[test]
fn exchanges_back_to_back_and_between_other_collectives() {
    let n = 7;
    let res = run(n, |comm: &mut Communicator| -> Result<Vec<Parts>> {
        let mut all = Vec::new();
        for k in 1..=10u64 {
            all.push(exchange(comm, k)?);
            match k % 4 {
                1 => comm.barrier()?,
                2 => {
                    let mut x = [comm.rank() as u64];
                    comm.all_reduce(&mut x, ReduceOp::Sum)?;
                    assert_eq!(x[0], 21);
                }
                _ => {}
            }
        }
        Ok(all)
    });
    for (r, all) in res.iter().enumerate() {
        for (i, got) in all.iter().enumerate() {
            let k = i as u64 + 1;
            assert!(got == &want(n, k, r), "rank {r}, exchange {k}");
        }
    }
}

/// Every rank sends to every other (the dense case) in a world of 7.
#[test]
fn everybody_to_everybody() {
    let n = 7;
    let res = run(n, |comm: &mut Communicator| {
        let me = comm.rank();
        let parts: Vec<(usize, Vec<u8>)> = (0..n)
            .filter(|&d| d != me)
            .map(|d| (d, bytes(SEED, &[99, me as u64, d as u64], 10 * d + me)))
            .collect();
        let sends: Vec<(usize, &[u8])> = parts.iter().map(|(d, b)| (*d, &b[..])).collect();
        comm.exchange_sparse(&sends)
    });
    for (r, got) in res.iter().enumerate() {
        let w: Parts = (0..n)
            .filter(|&s| s != r)
            .map(|s| Received {
                source: s,
                data: bytes(SEED, &[99, s as u64, r as u64], 10 * r + s),
            })
            .collect();
        assert!(got == &w, "rank {r}");
    }
}

/// A rank in an exchange against one in a barrier: both get an error, none hangs.
#[test]
fn an_exchange_against_a_barrier_is_an_error() {
    for n in [2, 3] {
        let res = run_all(n, |comm: &mut Communicator| {
            if comm.rank() == 0 {
                comm.exchange_sparse(&[(1, &b"spikes"[..])]).map(|_| ())
            } else {
                comm.barrier()
            }
            .map_err(|e| e.to_string())
        });
        assert!(res.iter().all(|r| r.is_err()), "{n} ranks: {res:?}");
        assert!(
            res.iter().any(|r| r
                .as_ref()
                .unwrap_err()
                .contains("the ranks called different collectives")),
            "{n} ranks: {res:?}"
        );
    }
}
