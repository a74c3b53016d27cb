//! Many ranks: 64-rank all-to-all, 63 senders into a shared receive queue of 4, the
//! collectives, and bad input.

use ballast_runtime::{fabric::FabricError, CommError, ProtocolError};
use ballast_runtime::{Error, RecvSharing, Result, Source, TagMatch};

use super::*;

/// 64 ranks all-to-all, 1,000 messages sent by each rank (round-robin over the 63
/// others, mixed eager and chunked), every message checked on arrival.
pub fn all_to_all_64<L: Launcher>(l: &L, sharing: RecvSharing) {
    let c = cfg(sharing)
        .buffer_size(512)
        .buffer_count(16)
        .recv_depth(4)
        .srq_depth(32)
        .build()
        .unwrap();
    const MSGS: u64 = 1000;
    let res = l
        .run(64, &c, |comm| -> Result<u64> {
            let n = comm.world_size() as u64;
            let me = comm.rank() as u64;
            // Messages I will receive from each source.
            let expect = |src: u64| (0..MSGS).filter(|i| (src + 1 + i % (n - 1)) % n == me).count() as u64;
            let total_in: u64 = (0..n).filter(|&s| s != me).map(expect).sum();
            let mut next = vec![0u64; n as usize];
            let mut sent = 0u64;
            let mut got = 0u64;
            let mut pending = vec![];
            while sent < MSGS || got < total_in {
                if sent < MSGS {
                    let dest = (me + 1 + sent % (n - 1)) % n;
                    let k = sent / (n - 1); // k-th message to this dest
                    let len = if sent.is_multiple_of(50) {
                        2000
                    } else {
                        16 + (sent % 64) as usize
                    };
                    let mut d = enc(me, k);
                    d.extend(payload(len - 16, me * 1_000_000 + k));
                    match comm.isend(dest as usize, 11, &d) {
                        Ok(r) => {
                            pending.push(r);
                            sent += 1;
                        }
                        Err(Error::Protocol(ProtocolError::WouldBlock)) => {}
                        Err(e) => return Err(e),
                    }
                }
                let mut idle = true;
                while let Some(m) = comm.try_recv(Source::Any, TagMatch::Tag(11))? {
                    idle = false;
                    let (src, k) = dec(&m.data);
                    assert_eq!(src, m.source as u64);
                    assert_eq!(k, next[src as usize], "order from {src}");
                    assert_eq!(
                        &m.data[16..],
                        &payload(m.data.len() - 16, src * 1_000_000 + k)[..]
                    );
                    next[src as usize] += 1;
                    got += 1;
                }
                if idle {
                    // 64 ranks share 2 cores: let the others run (as a simulator would compute).
                    std::thread::yield_now();
                }
            }
            comm.wait_all(pending)?;
            for s in 0..n {
                if s != me {
                    assert_eq!(next[s as usize], expect(s));
                }
            }
            assert!(comm.credits_consistent());
            Ok(got)
        })
        .unwrap();
    let total: u64 = res.iter().map(|r| *r.as_ref().unwrap()).sum();
    assert_eq!(total, 64 * MSGS);
}

/// 63 senders to one receiver through a shared receive queue of 4 buffers: nothing is
/// dropped (a missing posted buffer would fail the run with receiver-not-ready).
pub fn many_to_one_srq4<L: Launcher>(l: &L, sharing: RecvSharing) {
    // The engine's credits (the MPI native path has none: MPI does its own flow control).
    let c = cfg(sharing)
        .srq_depth(4)
        .recv_depth(1)
        .buffer_size(256)
        .buffer_count(4)
        .ranks_per_node(8)
        .mpi_native(false)
        .build()
        .unwrap();
    const PER: u64 = 40;
    let res = l
        .run(64, &c, |comm| -> Result<u64> {
            if comm.rank() == 0 {
                let mut next = vec![0u64; 64];
                for _ in 0..63 * PER {
                    let m = comm.recv(Source::Any, TagMatch::Any)?;
                    let (src, k) = dec(&m.data);
                    assert_eq!((src, k), (m.source as u64, next[m.source]));
                    assert_eq!(m.data.len(), if k % 8 == 0 { 700 } else { 16 });
                    next[m.source] += 1;
                }
                assert!(comm.credits_consistent());
                Ok(next.iter().sum())
            } else {
                for k in 0..PER {
                    let mut d = enc(comm.rank() as u64, k);
                    d.resize(if k % 8 == 0 { 700 } else { 16 }, 1);
                    comm.send(0, 1, &d)?;
                }
                Ok(0)
            }
        })
        .unwrap();
    assert_eq!(*res[0].as_ref().unwrap(), 63 * PER);
}

/// barrier and all_gatherv with ragged sizes.
pub fn collectives<L: Launcher>(l: &L, sharing: RecvSharing) {
    let c = cfg(sharing).buffer_size(64).build().unwrap();
    let res = l
        .run(7, &c, |comm| -> Result<Vec<Vec<u8>>> {
            comm.barrier()?;
            let me = comm.rank();
            let all = comm.all_gatherv(&payload(me * 50, me as u64))?;
            comm.barrier()?;
            Ok(all)
        })
        .unwrap();
    for r in res {
        let all = r.unwrap();
        assert_eq!(all.len(), 7);
        for (i, b) in all.iter().enumerate() {
            assert_eq!(b, &payload(i * 50, i as u64));
        }
    }
}

/// Bad input gives errors, not panics.
pub fn bad_input_is_an_error<L: Launcher>(l: &L) {
    let c = cfg(RecvSharing::Shared).build().unwrap();
    let res = l
        .run(2, &c, |comm| {
            let a = comm.send(5, 1, &[1]).is_err_and(|e| {
                matches!(
                    e,
                    Error::Fabric(FabricError::InvalidRank {
                        rank: 5,
                        world_size: 2
                    })
                )
            });
            let b = comm
                .send(1, ballast_runtime::RESERVED_TAG_BASE, &[1])
                .is_err_and(|e| matches!(e, Error::Comm(CommError::ReservedTag(_))));
            let c = comm.irecv(Source::Rank(9), TagMatch::Any).is_err();
            (a, b, c)
        })
        .unwrap();
    assert!(res.iter().all(|&(a, b, c)| a && b && c));
}

/// Ranks in different collectives get an error naming both, not a hang: after a barrier
/// together, rank 0 enters a barrier and rank 1 an all-gather (every transport: the
/// collective's stamp travels in its messages; on the MPI native path with
/// `collective_checks` on, without which its barrier is `MPI_Barrier`, MPI's rule).
pub fn mismatched_collectives<L: Launcher>(l: &L) {
    let c = cfg(RecvSharing::Shared).collective_checks(true).build().unwrap();
    let res = l
        .run(2, &c, |comm| -> Result<Vec<u8>> {
            comm.barrier()?;
            let r = if comm.rank() == 0 {
                comm.barrier()
            } else {
                comm.all_gatherv(b"x").map(|_| ())
            };
            let msg = r.err().map(|e| e.to_string()).unwrap_or_default();
            Ok(msg.into_bytes())
        })
        .unwrap();
    let got: Vec<String> = res
        .into_iter()
        .map(|r| String::from_utf8(r.unwrap()).unwrap())
        .collect();
    assert_eq!(
        got,
        [
            "rank 0: barrier (collective #2, step 0) got a message of all_gatherv (collective #2, step 0) \
             from rank 1: the ranks called different collectives",
            "rank 1: all_gatherv (collective #2, step 0) got a message of barrier (collective #2, step 0) \
             from rank 0: the ranks called different collectives",
        ]
    );
}
