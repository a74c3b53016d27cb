//! Bounded resources: back-pressure with a pool of two buffers, bounded pool growth,
//! endpoint eviction and a cap below the number of peers, and the footprint model.

use ballast_runtime::ProtocolError;
use ballast_runtime::{Error, RecvSharing, Result, Source, TagMatch};

use super::*;

/// With a pool of 2 buffers, isend reports would-block once both are taken, blocking sends
/// wait and progress, everything arrives, and the pool never grows.
pub fn back_pressure_pool_of_two<L: Launcher>(l: &L, sharing: RecvSharing) {
    // The engine's pool (the MPI native path has none: MPI queues every isend).
    let c = cfg(sharing)
        .buffer_count(2)
        .buffer_size(1024)
        .srq_depth(2)
        .recv_depth(2)
        .mpi_native(false)
        .build()
        .unwrap();
    let res = l
        .run(2, &c, |comm| -> Result<(usize, usize, u64, u64)> {
            if comm.rank() == 0 {
                let a = comm.isend(1, 1, &[1])?;
                let b = comm.isend(1, 1, &[2])?;
                let third = comm.isend(1, 1, &[3]);
                assert!(
                    matches!(third, Err(Error::Protocol(ProtocolError::WouldBlock))),
                    "third isend: {third:?}"
                );
                comm.wait(a)?;
                comm.wait(b)?;
                comm.send(1, 1, &[3])?;
                for i in 0..200u64 {
                    let len = if i % 10 == 0 {
                        100_000
                    } else {
                        (i * 13 % 3000) as usize
                    };
                    comm.send(1, 2, &payload(len, i))?;
                }
                let p = comm.pool_stats();
                Ok((p.buffers, p.high_water, comm.footprint().pool_bytes, p.exhausted))
            } else {
                for v in 1..=3u8 {
                    assert_eq!(comm.recv(0, 1u32)?.data, vec![v]);
                }
                for i in 0..200u64 {
                    let len = if i % 10 == 0 {
                        100_000
                    } else {
                        (i * 13 % 3000) as usize
                    };
                    assert_eq!(comm.recv(0, 2u32)?.data, payload(len, i));
                }
                let p = comm.pool_stats();
                Ok((p.buffers, p.high_water, comm.footprint().pool_bytes, p.exhausted))
            }
        })
        .unwrap();
    let s = res[0].as_ref().unwrap();
    assert_eq!((s.0, s.2), (2, 2048), "pool stays 2 buffers of 1 KiB");
    assert!(s.1 <= 2);
    assert!(
        s.3 > 0,
        "the pool was exhausted at least once (back-pressure happened)"
    );
}

/// isend of small messages retried on would-block (progress, then again) while a message
/// of several chunks is still being sent: the small ones must not take the buffers the big
/// one's later chunks need, or nothing moves again. With `buffer_count` buffers of 8 KiB, a
/// message of `big` bytes then `smalls` 1-byte isends, the receiver's receives pre-posted;
/// everything arrives in order. (Found from C: a 16 KiB isend with one buffer, and 1 MiB
/// then 64 smalls with the default 64 buffers, hung over `local`.)
pub fn chunked_send_then_retried_smalls<L: Launcher>(l: &L, buffer_count: usize, big: usize, smalls: usize) {
    let c = cfg(RecvSharing::Shared)
        .buffer_count(buffer_count)
        .buffer_size(8 << 10)
        .mpi_native(false)
        .build()
        .unwrap();
    let res = l
        .run(2, &c, |comm| -> Result<(usize, bool)> {
            if comm.rank() == 0 {
                let mut reqs = vec![comm.isend(1, 1, &payload(big, 5))?];
                for i in 0..smalls {
                    loop {
                        match comm.isend(1, 1, &[i as u8]) {
                            Err(Error::Protocol(ProtocolError::WouldBlock)) => {
                                comm.progress()?;
                            }
                            r => break reqs.push(r?),
                        }
                    }
                }
                comm.wait_all(reqs)?;
                Ok((0, true))
            } else {
                let reqs = (0..=smalls)
                    .map(|_| comm.irecv(0, TagMatch::Tag(1)))
                    .collect::<Result<Vec<_>>>()?;
                let got = comm.wait_all(reqs)?;
                let mut ok = got.len() == smalls + 1;
                for (k, g) in got.into_iter().enumerate() {
                    let m = g.into_message().expect("a receive");
                    ok &= if k == 0 {
                        m.data == payload(big, 5)
                    } else {
                        m.data == vec![(k - 1) as u8]
                    };
                }
                Ok((smalls + 1, ok))
            }
        })
        .unwrap();
    assert_eq!(
        res[1].as_ref().unwrap(),
        &(smalls + 1, true),
        "every message, in order, with its bytes"
    );
}

/// With pool growth on, the pool grows in registered chunks up to max_pool_bytes, never beyond.
pub fn pool_growth_is_bounded<L: Launcher>(l: &L) {
    // The engine's pool (the MPI native path has none).
    let c = cfg(RecvSharing::Shared)
        .buffer_count(2)
        .buffer_size(1024)
        .pool_growth(true)
        .max_pool_bytes(8 * 1024)
        .mpi_native(false)
        .build()
        .unwrap();
    let res = l
        .run(2, &c, |comm| -> Result<(usize, u64)> {
            if comm.rank() == 0 {
                let mut reqs = vec![];
                loop {
                    match comm.isend(1, 1, &[7; 10]) {
                        Ok(r) => reqs.push(r),
                        Err(Error::Protocol(ProtocolError::WouldBlock)) => break,
                        Err(e) => return Err(e),
                    }
                }
                let n = reqs.len();
                comm.wait_all(reqs)?;
                Ok((n, comm.footprint().pool_bytes))
            } else {
                let mut n = 0;
                while let Ok(m) = comm.recv(0, 1u32) {
                    assert_eq!(m.data, vec![7; 10]);
                    n += 1;
                    if n == 8 {
                        break;
                    }
                }
                Ok((n, comm.footprint().pool_bytes))
            }
        })
        .unwrap();
    assert_eq!(
        res[0].as_ref().unwrap(),
        &(8, 8 * 1024),
        "grew 2 -> 4 -> 8 buffers, then would-block"
    );
}

/// `max_endpoints 2` under traffic from rank 0 to 16 peers: endpoints are evicted and
/// reopened, never more than 2 live, and nothing is lost or reordered.
pub fn eviction_with_two_endpoints<L: Launcher>(l: &L, sharing: RecvSharing) {
    // The engine's endpoints (on the MPI native path MPI owns the connections).
    let c = cfg(sharing)
        .max_endpoints(2)
        .endpoint_overflow(ballast_runtime::EndpointOverflow::Evict)
        .buffer_size(256)
        .buffer_count(4)
        .recv_depth(2)
        .srq_depth(4)
        .mpi_native(false)
        .build()
        .unwrap();
    const ROUNDS: u64 = 12;
    let res = l
        .run(17, &c, |comm| -> Result<(u64, u64, u64, u64)> {
            let n = comm.world_size();
            if comm.rank() == 0 {
                for round in 0..ROUNDS {
                    for p in 1..n {
                        let len = if round % 4 == 3 { 1000 } else { 16 };
                        let mut d = enc(p as u64, round);
                        d.resize(len, round as u8);
                        comm.send(p, 3, &d)?;
                    }
                }
            } else {
                for round in 0..ROUNDS {
                    let m = comm.recv(0, 3u32)?;
                    let (p, r) = dec(&m.data);
                    assert_eq!((p, r), (comm.rank() as u64, round));
                    assert_eq!(m.data.len(), if round % 4 == 3 { 1000 } else { 16 });
                }
            }
            let s = comm.endpoint_stats();
            Ok((s.peak, s.opened, s.evicted, s.peers_connected))
        })
        .unwrap();
    let r0 = res[0].as_ref().unwrap();
    assert!(r0.0 <= 2, "peak {} > cap", r0.0);
    assert!(r0.1 >= 16 && r0.2 >= 14, "opened {} evicted {}", r0.1, r0.2);
    assert_eq!(r0.3, 16);
    for r in &res[1..] {
        assert!(r.as_ref().unwrap().0 <= 2);
    }
}

/// Every rank sends to and receives from every other rank with `max_endpoints 1`, below
/// the number of peers (the exchange of a simulation with a tight cap): all ranks start by
/// connecting to a different peer at once, so every slot holds a connecting endpoint and
/// the requests cross in a cycle. Must not deadlock; nothing lost or reordered.
pub fn all_to_all_with_a_cap_below_the_peers<L: Launcher>(l: &L, sharing: RecvSharing) {
    // Eviction (the case's origin), or the datagram path when a binary runs the suite over it.
    let overflow = if DATAGRAM_OVERLAY.read().unwrap().is_some() {
        ballast_runtime::EndpointOverflow::Datagram
    } else {
        ballast_runtime::EndpointOverflow::Evict
    };
    let c = cfg(sharing)
        .max_endpoints(1)
        .endpoint_overflow(overflow)
        .buffer_size(256)
        .buffer_count(8)
        .recv_depth(2)
        .srq_depth(4)
        .build()
        .unwrap();
    const ROUNDS: u64 = 4;
    let res = l
        .run(4, &c, |comm| -> Result<u64> {
            let (n, me) = (comm.world_size(), comm.rank());
            let mut got = 0;
            for round in 0..ROUNDS {
                let mut reqs = Vec::new();
                for k in 1..n {
                    let dest = (me + k) % n;
                    reqs.push(comm.irecv((me + n - k) % n, 5u32)?);
                    reqs.push(comm.isend(dest, 5, &enc(me as u64, round))?);
                }
                for c in comm.wait_all(reqs)? {
                    if let Some(m) = c.into_message() {
                        assert_eq!(dec(&m.data), (m.source as u64, round));
                        got += 1;
                    }
                }
            }
            Ok(got)
        })
        .unwrap();
    for r in &res {
        assert_eq!(*r.as_ref().unwrap(), 3 * ROUNDS);
    }
}

/// Accounted footprint equals the model's prediction exactly, rank by rank, after traffic
/// (every field but locked_bytes, which depends on the OS granting mlock).
pub fn footprint_matches_model<L: Launcher>(l: &L, sharing: RecvSharing, lazy: bool) {
    // The engine's model (the MPI native path has its own, checked by the MPI suite).
    let c = cfg(sharing)
        .lazy_connect(lazy)
        .buffer_size(1024)
        .buffer_count(8)
        .recv_depth(3)
        .srq_depth(8)
        .ranks_per_node(4)
        .mpi_native(false)
        .build()
        .unwrap();
    let t = *c.transport();
    let n = 12;
    let res = l
        .run(
            n,
            &c,
            |comm| -> Result<(ballast_runtime::Footprint, ballast_runtime::Footprint)> {
                let me = comm.rank();
                // Rank 0 sends to everybody; everybody sends to its right neighbour.
                if me == 0 {
                    for p in 1..comm.world_size() {
                        comm.send(p, 1, &[0u8; 10])?;
                    }
                } else {
                    comm.recv(0, 1u32)?;
                }
                comm.send((me + 1) % comm.world_size(), 2, &[1u8; 10])?;
                comm.recv(Source::Any, TagMatch::Tag(2))?;
                comm.barrier()?;
                let f = comm.footprint();
                let p = t.predict(f.peers_connected as usize, comm.world_size(), t.ranks_per_node);
                Ok((f, p))
            },
        )
        .unwrap();
    for (rank, r) in res.into_iter().enumerate() {
        let (f, p) = r.unwrap();
        if sharing == RecvSharing::Xrc && rank != 0 {
            // Receivers open no endpoints in xrc: the model over-counts, never under.
            assert!(f.total_bytes() <= p.total_bytes(), "rank {rank}: {f:?} > {p:?}");
            continue;
        }
        let f0 = ballast_runtime::Footprint { locked_bytes: 0, ..f };
        let p0 = ballast_runtime::Footprint { locked_bytes: 0, ..p };
        assert_eq!(f0, p0, "rank {rank} mode {sharing} lazy {lazy}");
    }
}

/// The datagram path's footprint equals the model exactly where the split between
/// endpoints and datagram peers is deterministic: first a ring (every rank's 2 endpoints
/// to its neighbours, the cap), then rank 0 sends to every other rank, over datagrams (it
/// is at its cap). Rank 0 then has 2 endpoints and 9 datagram peers, ranks 2..=10 have 2
/// endpoints and 1 datagram peer (rank 0), ranks 1 and 11 only their 2 endpoints.
pub fn datagram_footprint_matches_model<L: Launcher>(l: &L, sharing: RecvSharing, drop_every: usize) {
    let c = cfg(sharing)
        .max_endpoints(2)
        .endpoint_overflow(ballast_runtime::EndpointOverflow::Datagram)
        .datagram_drop_every(drop_every)
        .buffer_size(1024)
        .buffer_count(8)
        .recv_depth(3)
        .srq_depth(8)
        .mpi_native(false)
        .build()
        .unwrap();
    let t = *c.transport();
    let n = 12;
    let res = l
        .run(
            n,
            &c,
            |comm| -> Result<(ballast_runtime::Footprint, ballast_runtime::Footprint)> {
                let (me, n) = (comm.rank(), comm.world_size());
                let (right, left) = ((me + 1) % n, (me + n - 1) % n);
                let a = comm.isend(right, 1, &enc(me as u64, 1))?;
                let b = comm.isend(left, 1, &enc(me as u64, 2))?;
                assert_eq!(dec(&comm.recv(left, 1u32)?.data), (left as u64, 1));
                assert_eq!(dec(&comm.recv(right, 1u32)?.data), (right as u64, 2));
                comm.wait_all(vec![a, b])?;
                if me == 0 {
                    for p in 2..n - 1 {
                        let mut d = enc(p as u64, 3);
                        d.extend(payload(3000, p as u64)); // several datagrams
                        comm.send(p, 2, &d)?;
                    }
                } else if me != 1 && me != n - 1 {
                    let m = comm.recv(0, 2u32)?;
                    assert_eq!(dec(&m.data), (me as u64, 3));
                    assert_eq!(&m.data[16..], &payload(3000, me as u64)[..]);
                }
                let f = comm.footprint();
                let p = t.predict(f.peers_connected as usize, n, 1);
                Ok((f, p))
            },
        )
        .unwrap();
    for (rank, r) in res.into_iter().enumerate() {
        let (f, p) = r.unwrap();
        let want_dg = match rank {
            0 => 9,
            1 | 11 => 0,
            _ => 1,
        };
        assert_eq!(
            (f.endpoints_live, f.datagram_peers),
            (2, want_dg),
            "rank {rank}: {f:?}"
        );
        assert!(
            f.datagram_bytes <= 256 * want_dg,
            "rank {rank}: at most 256 B per datagram peer"
        );
        let f0 = ballast_runtime::Footprint { locked_bytes: 0, ..f };
        let p0 = ballast_runtime::Footprint { locked_bytes: 0, ..p };
        assert_eq!(f0, p0, "rank {rank} mode {sharing}");
    }
}

/// `n` ranks all-to-all with `max_endpoints` `cap` over the datagram path (every rank
/// sends `rounds` messages to every other, eager and chunked, with `isend` and
/// back-pressure; checked in order per source): nothing lost, order kept, never more than
/// `cap` endpoints, and datagrams really carried part of the traffic.
pub fn datagram_all_to_all<L: Launcher>(
    l: &L,
    sharing: RecvSharing,
    n: usize,
    cap: usize,
    drop_every: usize,
    rounds: u64,
) {
    let c = cfg(sharing)
        .max_endpoints(cap)
        .endpoint_overflow(ballast_runtime::EndpointOverflow::Datagram)
        .datagram_drop_every(drop_every)
        .buffer_size(512)
        .buffer_count(16)
        .recv_depth(4)
        .srq_depth(32)
        .mpi_native(false)
        .build()
        .unwrap();
    let res = l
        .run(n, &c, |comm| -> Result<(u64, u64, u64, u64, u64)> {
            let (n, me) = (comm.world_size() as u64, comm.rank() as u64);
            let total = rounds * (n - 1);
            let mut next = vec![0u64; n as usize];
            let (mut sent, mut got) = (0u64, 0u64);
            let mut pending = vec![];
            while sent < total || got < total {
                if sent < total {
                    let dest = (me + 1 + sent % (n - 1)) % n;
                    let k = sent / (n - 1);
                    let len = if k % 5 == 4 {
                        1500
                    } else {
                        16 + (sent % 40) as usize
                    };
                    let mut d = enc(me, k);
                    d.extend(payload(len - 16, me * 1_000_000 + k));
                    match comm.isend(dest as usize, 7, &d) {
                        Ok(r) => {
                            pending.push(r);
                            sent += 1;
                        }
                        Err(e) if e.is_would_block() => {}
                        Err(e) => return Err(e),
                    }
                }
                let mut idle = true;
                while let Some(m) = comm.try_recv(Source::Any, TagMatch::Tag(7))? {
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
                    std::thread::yield_now();
                }
            }
            comm.wait_all(pending)?;
            let f = comm.footprint();
            let s = comm.datagram_stats().expect("the datagram path runs");
            Ok((got, f.endpoints_peak, f.datagram_peers, s.sent, s.resent))
        })
        .unwrap();
    let (mut dg, mut sent, mut resent) = (0, 0, 0);
    for (rank, r) in res.iter().enumerate() {
        let (got, peak, d, s, rs) = *r.as_ref().unwrap();
        assert_eq!(got, rounds * (n as u64 - 1), "rank {rank}");
        assert!(peak <= cap as u64, "rank {rank}: {peak} endpoints > cap {cap}");
        dg += d;
        sent += s;
        resent += rs;
    }
    assert!(dg > 0 && sent > 0, "no datagram peer at all");
    if drop_every > 0 {
        // Every drop_every-th datagram is lost (data or ack): some data went again.
        assert!(resent > 0, "{sent} datagrams sent, none again with drops");
    }
    println!("{n} ranks cap {cap} drop {drop_every}: {sent} datagrams sent, {resent} again");
}

/// The fanout at `n` ranks with `max_endpoints` `cap` over the datagram path: rank 0 sends
/// to ranks 1, 2, ... in turn. The model of that pattern (`predict_with`): rank 0 holds
/// `cap` endpoints (its first `cap` receivers) and `n - 1 - cap` datagram peers; receivers
/// `1..=cap` one endpoint; every later receiver one datagram peer of at most 256 B and no
/// endpoint. Every rank's footprint equals it, and the plain `predict` of a receiver's one
/// peer (an endpoint) differs from a datagram receiver by exactly the state swapped, as
/// `Footprint::differences` says.
pub fn datagram_fanout<L: Launcher>(l: &L, n: usize, cap: usize, drop_every: usize) {
    let c = cfg(RecvSharing::Shared)
        .max_endpoints(cap)
        .endpoint_overflow(ballast_runtime::EndpointOverflow::Datagram)
        .datagram_drop_every(drop_every)
        .buffer_count(16)
        .buffer_size(4096)
        .srq_depth(16)
        .mpi_native(false)
        .build()
        .unwrap();
    let t = *c.transport();
    let res = l
        .run(
            n,
            &c,
            |comm| -> Result<(ballast_runtime::Footprint, ballast_runtime::Footprint)> {
                let (me, n) = (comm.rank(), comm.world_size());
                if me == 0 {
                    for p in 1..n {
                        let d: Vec<u8> = (0..10u32).flat_map(|i| (i + p as u32).to_le_bytes()).collect();
                        comm.send(p, 4, &d)?;
                    }
                } else {
                    let m = comm.recv(0, 4u32)?;
                    let want: Vec<u8> = (0..10u32).flat_map(|i| (i + me as u32).to_le_bytes()).collect();
                    assert_eq!(m.data, want);
                }
                let f = comm.footprint();
                let model = match me {
                    0 => t.predict_with(n - 1, cap, n - 1 - cap, n),
                    p if p <= cap => t.predict_with(1, 1, 0, n),
                    _ => t.predict_with(1, 0, 1, n),
                };
                Ok((f, model))
            },
        )
        .unwrap();
    let per = ballast_runtime::datagram::PEER_STATE_BYTES;
    assert!(per <= 256);
    let unlocked = |f: &ballast_runtime::Footprint| ballast_runtime::Footprint {
        locked_bytes: 0,
        ..*f
    };
    let (f0, p0) = res[0].as_ref().unwrap();
    assert_eq!(
        (f0.endpoints_live, f0.datagram_peers, f0.datagram_bytes),
        (cap as u64, (n - 1 - cap) as u64, (n - 1 - cap) as u64 * per)
    );
    assert_eq!(unlocked(f0), unlocked(p0), "rank 0 = model");
    assert_eq!(*p0, t.predict(n - 1, n, 1), "rank 0 is the symmetric case too");
    let mut by_datagram = 0;
    for (rank, r) in res.iter().enumerate().skip(1) {
        let (f, p) = r.as_ref().unwrap();
        assert_eq!(unlocked(f), unlocked(p), "rank {rank} = model of the fanout");
        assert_eq!(f.peers_connected, 1, "rank {rank}");
        let plain = t.predict(1, n, 1);
        if rank > cap {
            by_datagram += 1;
            assert_eq!(
                (f.endpoints_live, f.datagram_peers, f.datagram_bytes),
                (0, 1, per),
                "rank {rank}"
            );
            assert_eq!(
                f.total_bytes() + plain.endpoint_bytes,
                plain.total_bytes() + per,
                "rank {rank}: a datagram peer instead of an endpoint: {f:?} vs {plain:?}"
            );
            // `differences` explains a total that differs (the endpoint and the datagram
            // state may weigh the same: then there is nothing to explain).
            let why = f.differences(&plain, &t).join("; ");
            assert!(
                why.contains("1 peer with datagram state, 0 predicted")
                    || f.total_bytes() == plain.total_bytes(),
                "rank {rank}: {why}"
            );
        } else {
            assert_eq!(unlocked(f), unlocked(&plain), "rank {rank} (endpoint) = predict");
        }
    }
    assert_eq!(by_datagram, n - 1 - cap);
}

/// The promotion policy: with `max_endpoints 1`, rank 0 first sends to rank 1 (which gets
/// the endpoint), then thousands of small messages to rank 2 (over datagrams), then one
/// more to rank 1. Rank 2, far more active, is promoted: rank 0's endpoint to rank 1 is
/// closed and one to rank 2 opened; rank 1's last message then comes by datagram after the
/// endpoint's. Everything arrives in order.
pub fn datagram_promotion<L: Launcher>(l: &L, sharing: RecvSharing, drop_every: usize) {
    let c = cfg(sharing)
        .max_endpoints(1)
        .endpoint_overflow(ballast_runtime::EndpointOverflow::Datagram)
        .datagram_drop_every(drop_every)
        .buffer_size(256)
        .buffer_count(32)
        .recv_depth(8)
        .srq_depth(16)
        .mpi_native(false)
        .build()
        .unwrap();
    const MANY: u64 = 3000;
    let res = l
        .run(3, &c, |comm| -> Result<(u64, u64, u64)> {
            match comm.rank() {
                0 => {
                    comm.send(1, 1, &enc(1, 0))?;
                    for k in 0..MANY {
                        comm.send(2, 2, &enc(2, k))?;
                    }
                    comm.send(1, 1, &enc(1, 1))?;
                }
                1 => {
                    for k in 0..2 {
                        assert_eq!(dec(&comm.recv(0, 1u32)?.data), (1, k));
                    }
                }
                _ => {
                    for k in 0..MANY {
                        assert_eq!(dec(&comm.recv(0, 2u32)?.data), (2, k), "order");
                    }
                }
            }
            let s = comm.datagram_stats().expect("the datagram path runs");
            let f = comm.footprint();
            Ok((s.promoted, f.endpoints_opened, f.endpoints_peak))
        })
        .unwrap();
    let (promoted, opened, peak) = *res[0].as_ref().unwrap();
    assert!(promoted >= 1, "rank 2 promoted on rank 0: {:?}", res);
    assert!(
        opened >= 2 && peak <= 1,
        "rank 0 opened {opened} endpoints, peak {peak}"
    );
}
