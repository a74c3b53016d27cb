//! The sparse exchange: seeded random destinations, back to back, with ranks that send to
//! nobody and ranks that receive from nobody (one rank's part of the case).

use ballast_runtime::{Communicator, Received, ReduceOp};

use super::Rng;
use crate::conformance::payload;

/// Round `round`'s messages, the same on every rank: `(source, dest, bytes)` in increasing
/// source then destination order. Each rank sends to each other with probability 1/3,
/// except that rank 0 sends to nobody and rank n-1 receives from nobody (n >= 3), and every
/// fifth round nobody sends at all. Lengths 0, 1, 1,000 or 100,000 bytes.
fn messages(n: usize, round: u64) -> Vec<(usize, usize, Vec<u8>)> {
    let mut rng = Rng::new(0x5eed_0035 ^ round);
    let mut out = Vec::new();
    for s in 0..n {
        for d in 0..n {
            let pick = rng.below(3) == 0;
            let len = [0, 1, 1000, 100_000][rng.below(4) as usize];
            let quiet = s == 0 || (n >= 3 && d == n - 1) || round % 5 == 4;
            if pick && d != s && !quiet {
                out.push((s, d, payload(len, round << 32 | (s as u64) << 16 | d as u64)));
            }
        }
    }
    out
}

pub fn exchange_sparse_random(comm: &mut Communicator) {
    let (n, me) = (comm.world_size(), comm.rank());
    // Back to back: a rank may start the next exchange while a peer is in this one.
    for round in 0..24 {
        let all = messages(n, round);
        let sends: Vec<(usize, &[u8])> = all
            .iter()
            .filter(|(s, _, _)| *s == me)
            .map(|(_, d, b)| (*d, &b[..]))
            .collect();
        let got = comm.exchange_sparse(&sends).unwrap();
        let want: Vec<Received> = all
            .iter()
            .filter(|(_, d, _)| *d == me)
            .map(|(s, _, b)| Received {
                source: *s,
                data: b.clone(),
            })
            .collect();
        let show = |v: &[Received]| v.iter().map(|r| (r.source, r.data.len())).collect::<Vec<_>>();
        assert!(
            got == want,
            "rank {me} round {round}: got {:?}, want {:?}",
            show(&got),
            show(&want)
        );
        if round % 8 == 7 {
            // Another collective between exchanges.
            let mut x = [me as u64];
            comm.all_reduce(&mut x, ReduceOp::Sum).unwrap();
            assert_eq!(x[0] as usize, n * (n - 1) / 2);
        }
    }
}
