//! Transport conformance suite, written once and generic over a [`Launcher`]; each
//! transport instantiates it (`local_conformance.rs` for the in-process transport).
#![allow(dead_code)]

use ballast_runtime::{Communicator, Error, RecvSharing, Result, RuntimeConfig, Source, TagMatch};

/// Starts `n` ranks of one transport and runs `f` on each.
pub trait Launcher: Sync {
    /// Transport name (for messages).
    fn name(&self) -> &'static str;
    /// Runs `f` on `n` ranks; results by rank (on every process, for multi-process
    /// transports: hence [`Exchange`]).
    fn run<R: Send + Exchange, F: Fn(&mut Communicator) -> R + Sync>(
        &self,
        n: usize,
        cfg: &RuntimeConfig,
        f: F,
    ) -> Result<Vec<R>>;
}

/// A rank's result as bytes, so that multi-process launchers (MPI) can give every process
/// the results of all ranks. Errors travel as their message ([`Error::Protocol`]).
pub trait Exchange: Sized {
    /// Appends the encoding of `self`.
    fn put(&self, out: &mut Vec<u8>);
    /// Decodes one value from the front of `inp`, advancing it.
    fn get(inp: &mut &[u8]) -> Self;
}

fn take<'a>(inp: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (a, b) = inp.split_at(n);
    *inp = b;
    a
}

macro_rules! exchange_int {
    ($($t:ty),*) => {$(
        impl Exchange for $t {
            fn put(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&(*self as u64).to_le_bytes());
            }
            fn get(inp: &mut &[u8]) -> Self {
                u64::from_le_bytes(take(inp, 8).try_into().unwrap()) as $t
            }
        }
    )*};
}
exchange_int!(u8, u32, u64, usize);

impl Exchange for bool {
    fn put(&self, out: &mut Vec<u8>) {
        (*self as u64).put(out)
    }
    fn get(inp: &mut &[u8]) -> Self {
        u64::get(inp) != 0
    }
}

impl<T: Exchange> Exchange for Vec<T> {
    fn put(&self, out: &mut Vec<u8>) {
        self.len().put(out);
        self.iter().for_each(|x| x.put(out));
    }
    fn get(inp: &mut &[u8]) -> Self {
        let n = usize::get(inp);
        (0..n).map(|_| T::get(inp)).collect()
    }
}

macro_rules! exchange_tuple {
    ($($n:ident),*) => {
        impl<$($n: Exchange),*> Exchange for ($($n,)*) {
            #[allow(non_snake_case)]
            fn put(&self, out: &mut Vec<u8>) {
                let ($($n,)*) = self;
                $($n.put(out);)*
            }
            fn get(inp: &mut &[u8]) -> Self {
                ($($n::get(inp),)*)
            }
        }
    };
}
exchange_tuple!(A, B);
exchange_tuple!(A, B, C);
exchange_tuple!(A, B, C, D);
exchange_tuple!(A, B, C, D, E, F);

impl Exchange for ballast_runtime::Footprint {
    fn put(&self, out: &mut Vec<u8>) {
        self.fields().iter().for_each(|(_, v)| v.put(out));
    }
    fn get(inp: &mut &[u8]) -> Self {
        let mut v = [0u64; 10];
        v.iter_mut().for_each(|x| *x = u64::get(inp));
        ballast_runtime::Footprint {
            pool_bytes: v[0],
            registered_bytes: v[1],
            locked_bytes: v[2],
            endpoint_bytes: v[3],
            srq_bytes: v[4],
            control_bytes: v[5],
            endpoints_live: v[6],
            endpoints_peak: v[7],
            endpoints_opened: v[8],
            peers_connected: v[9],
        }
    }
}

impl<T: Exchange> Exchange for Result<T> {
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            Ok(v) => {
                out.push(1);
                v.put(out);
            }
            Err(e) => {
                out.push(0);
                e.to_string().into_bytes().put(out);
            }
        }
    }
    fn get(inp: &mut &[u8]) -> Self {
        if take(inp, 1)[0] == 1 {
            Ok(T::get(inp))
        } else {
            Err(Error::Protocol(
                String::from_utf8_lossy(&Vec::<u8>::get(inp)).into_owned(),
            ))
        }
    }
}

/// FNV-1a 64-bit checksum.
pub fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Deterministic payload of `len` bytes depending on `seed` (xorshift).
pub fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn enc(a: u64, b: u64) -> Vec<u8> {
    let mut v = a.to_le_bytes().to_vec();
    v.extend_from_slice(&b.to_le_bytes());
    v
}

fn dec(d: &[u8]) -> (u64, u64) {
    (
        u64::from_le_bytes(d[0..8].try_into().unwrap()),
        u64::from_le_bytes(d[8..16].try_into().unwrap()),
    )
}

fn cfg(sharing: RecvSharing) -> ballast_runtime::RuntimeConfigBuilder {
    RuntimeConfig::builder().recv_sharing(sharing).lock_pool(false)
}

/// Order per (peer, tag) is kept, with eager and chunked messages interleaved on several tags.
pub fn ordering_per_peer_and_tag<L: Launcher>(l: &L, sharing: RecvSharing) {
    let c = cfg(sharing)
        .buffer_size(64)
        .buffer_count(8)
        .recv_depth(2)
        .srq_depth(4)
        .build()
        .unwrap();
    const PER: u64 = 60;
    let res = l
        .run(3, &c, |comm| -> Result<u64> {
            if comm.rank() == 0 {
                let mut got = 0;
                // Receive tag by tag, source by source, in an order unrelated to sending.
                for tag in [3u32, 1, 0, 2] {
                    for src in [2usize, 1] {
                        for seq in 0..PER {
                            let m = comm.recv(Source::Rank(src), TagMatch::Tag(tag))?;
                            let (s, q) = dec(&m.data);
                            assert_eq!(
                                (m.source, m.tag, s, q),
                                (src, tag, src as u64, seq),
                                "order broken"
                            );
                            let len = 16 + (seq as usize * 37) % 300;
                            assert_eq!(m.data.len(), len);
                            assert_eq!(&m.data[16..], &payload(len - 16, seq)[..]);
                            got += 1;
                        }
                    }
                }
                Ok(got)
            } else {
                for seq in 0..PER {
                    for tag in 0..4u32 {
                        let len = 16 + (seq as usize * 37) % 300;
                        let mut d = enc(comm.rank() as u64, seq);
                        d.extend(payload(len - 16, seq));
                        comm.send(0, tag, &d)?;
                    }
                }
                Ok(0)
            }
        })
        .unwrap();
    assert_eq!(res[0].as_ref().unwrap(), &(2 * 4 * PER), "{}", l.name());
}

/// Any-source and any-tag receives, posted before and after arrival, plus try_recv.
pub fn any_source_any_tag<L: Launcher>(l: &L, sharing: RecvSharing) {
    let c = cfg(sharing).buffer_count(8).build().unwrap();
    let res = l
        .run(4, &c, |comm| -> Result<Vec<(usize, u32, u64)>> {
            let n = comm.world_size();
            if comm.rank() == 0 {
                // A receive posted before anything is sent.
                let early = comm.irecv(Source::Any, TagMatch::Tag(9))?;
                comm.barrier()?;
                let mut got = vec![];
                let m = comm.wait(early)?.into_message().unwrap();
                got.push((m.source, m.tag, dec(&m.data).1));
                while got.len() < 3 * 20 + 1 {
                    let m = comm.recv(Source::Any, TagMatch::Any)?;
                    got.push((m.source, m.tag, dec(&m.data).1));
                }
                // Nothing else is pending.
                assert_eq!(comm.try_recv(Source::Any, TagMatch::Any)?, None);
                Ok(got)
            } else {
                comm.barrier()?;
                if comm.rank() == n - 1 {
                    comm.send(0, 9, &enc(0, 999))?;
                }
                for i in 0..20u64 {
                    comm.send(0, (i % 5) as u32, &enc(comm.rank() as u64, i))?;
                }
                Ok(vec![])
            }
        })
        .unwrap();
    let got = res.into_iter().next().unwrap().unwrap();
    assert_eq!(got[0], (3, 9, 999));
    for src in 1..4 {
        let seqs: Vec<u64> = got[1..].iter().filter(|g| g.0 == src).map(|g| g.2).collect();
        assert_eq!(seqs, (0..20).collect::<Vec<_>>(), "per-source order from {src}");
        for g in got[1..].iter().filter(|g| g.0 == src) {
            assert_eq!(g.1 as u64, g.2 % 5);
        }
    }
}

/// try_recv returns a message only once it has fully arrived; test/wait on requests.
pub fn try_recv_and_test<L: Launcher>(l: &L) {
    let c = cfg(RecvSharing::Shared).buffer_size(128).build().unwrap();
    let res = l
        .run(2, &c, |comm| -> Result<usize> {
            if comm.rank() == 1 {
                let r = comm.isend(0, 4, &payload(1000, 4))?;
                while !comm.test(&r)? {}
                assert_eq!(comm.wait(r)?, ballast_runtime::Completion::Sent);
                Ok(0)
            } else {
                let mut polls = 0;
                loop {
                    polls += 1;
                    if let Some(m) = comm.try_recv(1, 4u32)? {
                        assert_eq!(m.data, payload(1000, 4));
                        return Ok(polls);
                    }
                }
            }
        })
        .unwrap();
    assert!(*res[0].as_ref().unwrap() >= 1);
}

/// Zero-byte, 1-byte, exactly-buffer-size, buffer+1 and 64 MiB messages arrive intact.
pub fn message_sizes_with_checksums<L: Launcher>(l: &L, sharing: RecvSharing) {
    let c = cfg(sharing).build().unwrap();
    let bs = c.transport().buffer_size;
    let sizes = [0usize, 1, bs - 1, bs, bs + 1, 3 * bs, 64 << 20];
    let res = l
        .run(2, &c, |comm| -> Result<Vec<(usize, u64)>> {
            if comm.rank() == 0 {
                for (i, &s) in sizes.iter().enumerate() {
                    let d = payload(s, i as u64 + 1);
                    comm.send(1, 5, &(fnv(&d)).to_le_bytes())?;
                    comm.send(1, 6, &d)?;
                }
                Ok(vec![])
            } else {
                let mut out = vec![];
                for _ in sizes {
                    let sum = u64::from_le_bytes(comm.recv(0, 5u32)?.data.try_into().unwrap());
                    let m = comm.recv(0, 6u32)?;
                    assert_eq!(fnv(&m.data), sum, "checksum of {} bytes", m.data.len());
                    out.push((m.data.len(), fnv(&m.data)));
                }
                Ok(out)
            }
        })
        .unwrap();
    let got = res.into_iter().nth(1).unwrap().unwrap();
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), sizes.to_vec());
    for (i, (&s, g)) in sizes.iter().zip(&got).enumerate() {
        assert_eq!(g.1, fnv(&payload(s, i as u64 + 1)));
    }
}

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
                assert!(matches!(third, Err(Error::WouldBlock)), "third isend: {third:?}");
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
                        Err(Error::WouldBlock) => break,
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
    let c = cfg(sharing)
        .max_endpoints(1)
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
                        Err(Error::WouldBlock) => {}
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
                    Error::InvalidRank {
                        rank: 5,
                        world_size: 2
                    }
                )
            });
            let b = comm
                .send(1, ballast_runtime::RESERVED_TAG_BASE, &[1])
                .is_err_and(|e| matches!(e, Error::ReservedTag(_)));
            let c = comm.irecv(Source::Rank(9), TagMatch::Any).is_err();
            (a, b, c)
        })
        .unwrap();
    assert!(res.iter().all(|&(a, b, c)| a && b && c));
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

/// Sizes around and far above `bs`: on a transport with a direct path (MPI) the ones above
/// `bs` take it, elsewhere they are chunked; either way the semantics are the same.
fn mixed_sizes(bs: usize) -> [usize; 6] {
    [3, bs + 1, 17, 5 * bs + 3, bs, (1 << 20) + 5]
}

/// Large messages keep their order with small ones from the same sender and tag, through
/// blocking sends and `isend`, while another tag is received first.
pub fn large_messages_in_order_with_small_ones<L: Launcher>(l: &L, sharing: RecvSharing) {
    // 32 buffers: the up to 10 queued sends each hold the pool buffer of their first chunk
    // from `isend` on; the message being posted needs free ones for its other chunks.
    let c = cfg(sharing).buffer_size(1024).buffer_count(32).build().unwrap();
    let sizes = mixed_sizes(1024);
    const ROUNDS: u64 = 3;
    let res = l
        .run(2, &c, |comm| -> Result<u64> {
            if comm.rank() == 1 {
                let mut reqs = Vec::new();
                for round in 0..ROUNDS {
                    for (i, &s) in sizes.iter().enumerate() {
                        let seq = round * 100 + i as u64;
                        let mut d = enc(seq, s as u64);
                        d.extend(payload(s, seq));
                        if (i + round as usize).is_multiple_of(2) {
                            comm.send(0, 1, &d)?;
                        } else {
                            // `isend` reports WouldBlock while chunks in flight hold every
                            // pool buffer: progress and retry, as the API says.
                            loop {
                                match comm.isend(0, 1, &d) {
                                    Err(Error::WouldBlock) => {
                                        comm.progress()?;
                                    }
                                    r => break reqs.push(r?),
                                }
                            }
                        }
                    }
                }
                comm.send(0, 2, &payload(3 << 20, 99))?;
                comm.wait_all(reqs)?;
                Ok(0)
            } else {
                // The last message (tag 2) first: everything on tag 1 is unexpected by then.
                let last = comm.recv(1, 2u32)?;
                assert_eq!(fnv(&last.data), fnv(&payload(3 << 20, 99)));
                let mut got = 0;
                for round in 0..ROUNDS {
                    for (i, &s) in sizes.iter().enumerate() {
                        let m = comm.recv(1, 1u32)?;
                        let seq = round * 100 + i as u64;
                        assert_eq!(dec(&m.data), (seq, s as u64), "order broken");
                        assert_eq!(fnv(&m.data[16..]), fnv(&payload(s, seq)), "{s} bytes");
                        got += 1;
                    }
                }
                Ok(got)
            }
        })
        .unwrap();
    assert_eq!(
        res[0].as_ref().unwrap(),
        &(ROUNDS * sizes.len() as u64),
        "{}",
        l.name()
    );
}

/// Every rank first sends a large message to each other rank with a blocking send, then
/// receives theirs: must not deadlock (each blocked sender keeps serving arrivals).
pub fn both_sides_send_large_first<L: Launcher>(l: &L, sharing: RecvSharing) {
    let c = cfg(sharing).buffer_size(4096).build().unwrap();
    let size = (4 << 20) + 11;
    let res = l
        .run(3, &c, |comm| -> Result<u64> {
            let (n, me) = (comm.world_size(), comm.rank());
            for k in 1..n {
                comm.send((me + k) % n, 4, &payload(size, (me * 10 + (me + k) % n) as u64))?;
            }
            let mut ok = 0;
            for k in 1..n {
                let from = (me + n - k) % n;
                let m = comm.recv(from, 4u32)?;
                assert_eq!(
                    fnv(&m.data),
                    fnv(&payload(size, (from * 10 + me) as u64)),
                    "from {from}"
                );
                ok += 1;
            }
            Ok(ok)
        })
        .unwrap();
    assert!(res.iter().all(|r| *r.as_ref().unwrap() == 2), "{res:?}");
}

/// A blocking send of a large message completes while its receiver waits for another tag
/// that the sender sends only afterwards (the receiver's runtime takes the message in as
/// unexpected; plain blocking MPI would deadlock here), and small and large messages on
/// the waited-for tag arrive after it in order.
pub fn large_send_completes_before_its_receive_is_posted<L: Launcher>(l: &L, sharing: RecvSharing) {
    let c = cfg(sharing).buffer_size(1024).build().unwrap();
    let size = (1 << 20) + 5;
    let res = l
        .run(2, &c, |comm| -> Result<u64> {
            if comm.rank() == 0 {
                comm.send(1, 1, &payload(size, 1))?;
                comm.send(1, 2, &payload(10, 2))?;
                comm.send(1, 2, &payload(size, 3))?;
                Ok(0)
            } else {
                let a = comm.recv(0, 2u32)?;
                let b = comm.recv(0, 2u32)?;
                let big = comm.recv(0, 1u32)?;
                assert_eq!(a.data, payload(10, 2));
                assert_eq!(fnv(&b.data), fnv(&payload(size, 3)));
                assert_eq!(fnv(&big.data), fnv(&payload(size, 1)));
                Ok(3)
            }
        })
        .unwrap();
    assert_eq!(res[1].as_ref().unwrap(), &3, "{}", l.name());
}

/// Any-source receives see large and small messages of several senders, each sender's in
/// its order, with posted receives (before arrival) and unexpected ones.
pub fn any_source_with_large_messages<L: Launcher>(l: &L, sharing: RecvSharing) {
    let c = cfg(sharing).buffer_size(2048).buffer_count(8).build().unwrap();
    let sizes = mixed_sizes(2048);
    let res = l
        .run(4, &c, |comm| -> Result<Vec<(usize, u64)>> {
            let me = comm.rank();
            if me == 0 {
                let early = comm.irecv(Source::Any, TagMatch::Any)?;
                comm.barrier()?;
                let mut got = Vec::new();
                let m = comm.wait(early)?.into_message().unwrap();
                got.push(m);
                while got.len() < 3 * sizes.len() {
                    got.push(comm.recv(Source::Any, TagMatch::Any)?);
                }
                assert_eq!(comm.try_recv(Source::Any, TagMatch::Any)?, None);
                Ok(got
                    .iter()
                    .map(|m| {
                        let (seq, len) = dec(&m.data);
                        assert_eq!(m.tag as u64, seq % 3);
                        assert_eq!(
                            fnv(&m.data[16..]),
                            fnv(&payload(len as usize, seq + 1000 * m.source as u64))
                        );
                        (m.source, seq)
                    })
                    .collect())
            } else {
                comm.barrier()?;
                for (i, &s) in sizes.iter().enumerate() {
                    let seq = i as u64;
                    let mut d = enc(seq, s as u64);
                    d.extend(payload(s, seq + 1000 * me as u64));
                    comm.send(0, (seq % 3) as u32, &d)?;
                }
                Ok(vec![])
            }
        })
        .unwrap();
    let got = res.into_iter().next().unwrap().unwrap();
    for src in 1..4 {
        let seqs: Vec<u64> = got.iter().filter(|g| g.0 == src).map(|g| g.1).collect();
        assert_eq!(
            seqs,
            (0..sizes.len() as u64).collect::<Vec<_>>(),
            "per-source order from {src}"
        );
    }
}
