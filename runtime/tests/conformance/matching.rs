//! Matching and ordering: order per (peer, tag), any-source and any-tag receives,
//! try_recv and test/wait, and message sizes from 0 bytes to 64 MiB.

use ballast_runtime::{RecvSharing, Result, Source, TagMatch};

use super::*;

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

/// `probe`/`iprobe` tell the source, tag and length of the message a receive with the same
/// source and tag takes next, leave it queued, and see wildcards and earlier messages first.
pub fn probe_then_take<L: Launcher>(l: &L) {
    let c = cfg(RecvSharing::Shared).buffer_size(128).build().unwrap();
    let res = l
        .run(3, &c, |comm| -> Result<Vec<(usize, u32, usize)>> {
            match comm.rank() {
                1 => {
                    comm.send(0, 3, &payload(1000, 3))?;
                    comm.send(0, 9, &payload(5, 9))?;
                    comm.barrier()?;
                    Ok(vec![])
                }
                2 => {
                    comm.barrier()?;
                    comm.send(0, 3, &[])?;
                    Ok(vec![])
                }
                _ => {
                    let mut seen = vec![];
                    let e = comm.probe(1, 9u32)?;
                    seen.push((e.source, e.tag, e.len));
                    assert_eq!(comm.iprobe(1, 9u32)?, Some(e), "the probe left it queued");
                    assert_eq!(comm.iprobe(2, TagMatch::Any)?, None);
                    let e = comm.probe(Source::Any, TagMatch::Any)?;
                    seen.push((e.source, e.tag, e.len));
                    let m = comm.try_recv(Source::Any, TagMatch::Any)?.unwrap();
                    assert_eq!((m.source, m.tag, m.data.len()), (e.source, e.tag, e.len));
                    assert_eq!(m.data, payload(1000, 3));
                    let m = comm.recv(1, 9u32)?;
                    assert_eq!(m.data, payload(5, 9));
                    assert_eq!(comm.iprobe(1, TagMatch::Any)?, None, "taken");
                    comm.barrier()?;
                    let e = comm.probe(Source::Any, 3u32)?;
                    seen.push((e.source, e.tag, e.len));
                    assert_eq!(comm.recv(2, 3u32)?.data, Vec::<u8>::new());
                    Ok(seen)
                }
            }
        })
        .unwrap();
    assert_eq!(
        res[0].as_ref().unwrap(),
        &vec![(1, 9, 5), (1, 3, 1000), (2, 3, 0)]
    );
}

/// `recv_within` takes the next matching message only if it fits: a longer one stays
/// queued, first in line for its source and tag, and is told by its envelope; a message
/// of exactly `cap` bytes (and 0 bytes into 0) is taken.
pub fn recv_within_leaves_long_messages<L: Launcher>(l: &L) {
    let c = cfg(RecvSharing::Shared).buffer_size(128).build().unwrap();
    let res = l
        .run(3, &c, |comm| -> Result<Vec<(usize, u32, usize, bool)>> {
            match comm.rank() {
                1 => {
                    comm.send(0, 3, &payload(1000, 3))?;
                    comm.send(0, 9, &payload(5, 9))?;
                    comm.send(0, 3, &payload(10, 4))?;
                    comm.barrier()?;
                    Ok(vec![])
                }
                2 => {
                    comm.barrier()?;
                    comm.send(0, 7, &[])?;
                    Ok(vec![])
                }
                _ => {
                    let mut seen = vec![];
                    let note =
                        |r: std::result::Result<ballast_runtime::Message, ballast_runtime::Envelope>| match r
                        {
                            Ok(m) => (m.source, m.tag, m.data.len(), true),
                            Err(e) => (e.source, e.tag, e.len, false),
                        };
                    seen.push(note(comm.recv_within(1, 3u32, 100)?));
                    seen.push(note(comm.recv_within(Source::Any, TagMatch::Any, 999)?));
                    let m = comm.recv_within(1, 9u32, 5)?.expect("exactly cap bytes fit");
                    assert_eq!(m.data, payload(5, 9));
                    seen.push((m.source, m.tag, m.data.len(), true));
                    let m = comm.recv_within(1, 3u32, 1000)?.expect("now it fits");
                    assert_eq!(m.data, payload(1000, 3), "the long message, intact, first");
                    seen.push((m.source, m.tag, m.data.len(), true));
                    let m = comm.recv_within(Source::Any, 3u32, 10)?.expect("fits");
                    assert_eq!(m.data, payload(10, 4));
                    seen.push((m.source, m.tag, m.data.len(), true));
                    comm.barrier()?;
                    seen.push(note(comm.recv_within(Source::Any, TagMatch::Any, 0)?));
                    assert_eq!(comm.iprobe(Source::Any, TagMatch::Any)?, None, "all taken");
                    Ok(seen)
                }
            }
        })
        .unwrap();
    assert_eq!(
        res[0].as_ref().unwrap(),
        &vec![
            (1, 3, 1000, false),
            (1, 3, 1000, false),
            (1, 9, 5, true),
            (1, 3, 1000, true),
            (1, 3, 10, true),
            (2, 7, 0, true)
        ]
    );
}

/// `recv_into` writes the next matching message into the caller's buffer if it fits, and
/// leaves the bytes past it untouched; a longer one (a whole message as well as a large
/// one, past the 128 B buffers) is left queued, first in line, with the buffer untouched,
/// and told by its envelope; exactly `buf.len()` bytes, 0 bytes into an empty buffer, and
/// a message of several MPI parts are taken.
pub fn recv_into_fills_the_buffer<L: Launcher>(l: &L) {
    const BIG: usize = (7 << 20) + 3;
    let c = cfg(RecvSharing::Shared).buffer_size(128).build().unwrap();
    let res = l
        .run(2, &c, |comm| -> Result<Vec<(usize, u32, usize, bool)>> {
            if comm.rank() == 1 {
                comm.send(0, 3, &payload(100, 3))?;
                comm.send(0, 3, &payload(1000, 4))?;
                comm.send(0, 9, &payload(5, 9))?;
                comm.send(0, 4, &[])?;
                comm.send(0, 8, &payload(BIG, 8))?;
                return Ok(vec![]);
            }
            let mut seen = vec![];
            let mut note = |r: std::result::Result<ballast_runtime::Envelope, ballast_runtime::Envelope>| {
                let v = match r {
                    Ok(e) => (e.source, e.tag, e.len, true),
                    Err(e) => (e.source, e.tag, e.len, false),
                };
                seen.push(v);
                v
            };
            let mut buf = vec![0xAAu8; 1000];
            note(comm.recv_into(1, 3u32, &mut buf[..50])?);
            assert!(buf.iter().all(|&b| b == 0xAA), "a refused message writes nothing");
            note(comm.recv_into(1, 3u32, &mut buf[..101])?);
            assert_eq!(&buf[..100], &payload(100, 3)[..]);
            assert_eq!(buf[100], 0xAA, "nothing past the message");
            buf.fill(0xAA);
            note(comm.recv_into(Source::Any, TagMatch::Any, &mut buf[..999])?);
            assert!(
                buf.iter().all(|&b| b == 0xAA),
                "a refused large message writes nothing"
            );
            note(comm.recv_into(1, 3u32, &mut buf[..1000])?);
            assert_eq!(
                buf,
                payload(1000, 4),
                "the long message, intact, exactly the buffer"
            );
            buf.fill(0xAA);
            note(comm.recv_into(Source::Any, 9u32, &mut buf[..64])?);
            assert_eq!(&buf[..5], &payload(5, 9)[..]);
            assert!(buf[5..].iter().all(|&b| b == 0xAA));
            note(comm.recv_into(1, TagMatch::Any, &mut [])?);
            // Larger than MPI's parts (3 MiB + 7 in mpi_conformance): into the buffer part
            // by part on the native path.
            let mut big = vec![0xAAu8; BIG + 1];
            note(comm.recv_into(1, 8u32, &mut big)?);
            assert!(big[..BIG] == payload(BIG, 8)[..], "the large message, intact");
            assert_eq!(big[BIG], 0xAA);
            assert_eq!(comm.iprobe(Source::Any, TagMatch::Any)?, None, "all taken");
            Ok(seen)
        })
        .unwrap();
    assert_eq!(
        res[0].as_ref().unwrap(),
        &vec![
            (1, 3, 100, false),
            (1, 3, 100, true),
            (1, 3, 1000, false),
            (1, 3, 1000, true),
            (1, 9, 5, true),
            (1, 4, 0, true),
            (1, 8, BIG, true)
        ]
    );
}

/// A message too long for `recv_into` (and `recv_within`) keeps its sender's order: an
/// earlier message of the same sender with another tag, already queued (after `probe`) or
/// still on its way, is received before it by a receive that takes either. (On the MPI
/// native path only the queued case holds: a refused message has been taken out of MPI,
/// and one still in MPI cannot be placed before or after it; see `recv_within`.)
pub fn refused_message_keeps_its_senders_order<L: Launcher>(l: &L) {
    let c = cfg(RecvSharing::Shared).buffer_size(128).build().unwrap();
    let res = l
        .run(2, &c, |comm| -> Result<Vec<(u32, usize)>> {
            let mut seen = vec![];
            for round in 0..2 {
                if comm.rank() == 1 {
                    comm.send(0, 6, &payload(10, 6))?;
                    comm.send(0, 5, &payload(100, 5))?;
                    comm.send(0, 5, &payload(1000, 7))?;
                    comm.barrier()?;
                    continue;
                }
                comm.barrier()?;
                if round == 0 || comm.is_mpi_native() {
                    comm.probe(1, 6u32)?;
                }
                let e = comm
                    .recv_into(1, 5u32, &mut [0u8; 20])?
                    .expect_err("100 B into 20");
                seen.push((e.tag, e.len));
                let e = comm.recv_within(1, 5u32, 20)?.expect_err("still 100 B");
                seen.push((e.tag, e.len));
                for _ in 0..3 {
                    let m = comm.recv(1, TagMatch::Any)?;
                    seen.push((m.tag, m.data.len()));
                }
            }
            Ok(seen)
        })
        .unwrap();
    let round = [(5, 100), (5, 100), (6, 10), (5, 100), (5, 1000)];
    assert_eq!(res[0].as_ref().unwrap(), &[round, round].concat());
}

/// A large message refused by `recv_into` (then by `recv_within`) while a later message
/// of its sender with another tag arrives during its parts: a receive of any tag then
/// takes the refused one first, intact, then the later one. (On MPI this needs parts that
/// move only with the sender's progress: CI runs it also with Open MPI's shared memory
/// single copy off.)
pub fn refused_large_message_before_later_ones<L: Launcher>(l: &L) {
    const N: usize = 4 << 20;
    let c = cfg(RecvSharing::Shared).buffer_size(4096).build().unwrap();
    let res = l
        .run(2, &c, |comm| -> Result<Vec<(u32, usize)>> {
            let mut seen = vec![];
            for round in 0..2u64 {
                if comm.rank() == 1 {
                    let big = comm.isend(0, 5, &payload(N, round))?;
                    comm.send(0, 6, &payload(10, 6))?;
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    comm.wait(big)?;
                    comm.barrier()?;
                    continue;
                }
                std::thread::sleep(std::time::Duration::from_millis(30));
                let e = if round == 0 {
                    comm.recv_into(1, 5u32, &mut [0u8; 100])?
                        .expect_err("4 MiB into 100 B")
                } else {
                    comm.recv_within(1, 5u32, 100)?.expect_err("4 MiB within 100 B")
                };
                seen.push((e.tag, e.len));
                let m = comm.recv(1, TagMatch::Any)?;
                assert!(
                    m.tag != 5 || m.data == payload(N, round),
                    "the refused message, intact"
                );
                seen.push((m.tag, m.data.len()));
                let m = comm.recv(1, TagMatch::Any)?;
                seen.push((m.tag, m.data.len()));
                comm.barrier()?;
            }
            Ok(seen)
        })
        .unwrap();
    let round = [(5, N), (5, N), (6, 10)];
    assert_eq!(res[0].as_ref().unwrap(), &[round, round].concat());
}

/// Pairs of large messages with one tag, each into its own `recv_into` while another
/// receive is posted (so not on the native path's latency path), the sender pausing
/// between pairs so that the receiver's housekeeping runs while it waits: every message in
/// order and intact (the second one's parts must not go to the first).
pub fn recv_into_large_pairs_in_order<L: Launcher>(l: &L) {
    const ROUNDS: u64 = 800;
    const LEN: usize = 64 << 10;
    let c = cfg(RecvSharing::Shared).buffer_size(4096).build().unwrap();
    let res = l
        .run(2, &c, |comm| -> Result<u64> {
            if comm.rank() == 1 {
                for r in 0..ROUNDS {
                    let (x, y) = (payload(LEN, 2 * r), payload(LEN, 2 * r + 1));
                    std::thread::sleep(std::time::Duration::from_micros(300));
                    // Back to back: the second is in MPI when the first's header is taken.
                    let a = comm.isend(0, 5, &x)?;
                    let b = comm.isend(0, 5, &y)?;
                    comm.wait_all(vec![a, b])?;
                    comm.recv(0, 9u32)?;
                }
                comm.send(0, 77, &[])?;
                return Ok(0);
            }
            let other = comm.irecv(1, 77u32)?;
            let mut buf = vec![0u8; LEN];
            let mut good = 0;
            for r in 0..ROUNDS {
                for k in 0..2 {
                    let e = comm.recv_into(1, 5u32, &mut buf)?.expect("fits");
                    assert_eq!(e.len, LEN);
                    assert!(
                        buf == payload(LEN, 2 * r + k),
                        "round {r} message {k} intact, in order"
                    );
                    good += 1;
                }
                comm.send(1, 9, &[])?;
            }
            comm.wait(other)?;
            Ok(good)
        })
        .unwrap();
    assert_eq!(*res[0].as_ref().unwrap(), 2 * ROUNDS);
}

/// A ping-pong of `recv_into` between rank 0 and each of `peers` other ranks in turn (the
/// echo is posted before it arrives, so on the engine each message is written into the
/// receiver's buffer as its chunks come; past a cap of one endpoint, over datagrams): sizes
/// around the chunk size and up to `largest`, each intact, nothing past it written,
/// through buffers larger than the message.
pub fn recv_into_ping_pong<L: Launcher>(l: &L, sharing: RecvSharing, peers: usize, largest: usize) {
    let c = cfg(sharing).buffer_size(1024).build().unwrap();
    let sizes = [0usize, 1, 1023, 1024, 1025, 3 * 1024 + 5, largest];
    let res = l
        .run(peers + 1, &c, |comm| -> Result<Vec<usize>> {
            let me = comm.rank();
            let mut buf = vec![0u8; largest + 64];
            let mut seen = vec![];
            for (i, &n) in sizes.iter().enumerate() {
                for p in 1..=peers {
                    if me != 0 && me != p {
                        continue;
                    }
                    let peer = if me == 0 { p } else { 0 };
                    let d = payload(n, (i * 31 + p) as u64);
                    if me == 0 {
                        comm.send(peer, 2, &d)?;
                    }
                    buf.fill(0xAA);
                    let e = comm.recv_into(peer, 2u32, &mut buf)?.expect("fits");
                    assert_eq!((e.source, e.tag, e.len), (peer, 2, n));
                    assert!(buf[..n] == d[..], "{n} bytes intact on rank {me}");
                    assert!(buf[n..].iter().all(|&b| b == 0xAA), "nothing past {n} bytes");
                    if me != 0 {
                        comm.send(peer, 2, &buf[..n])?;
                    }
                    seen.push(e.len);
                }
            }
            Ok(seen)
        })
        .unwrap();
    let want = |k: usize| {
        sizes
            .iter()
            .flat_map(|&n| std::iter::repeat_n(n, k))
            .collect::<Vec<_>>()
    };
    for (rank, r) in res.into_iter().enumerate() {
        assert_eq!(r.unwrap(), want(if rank == 0 { peers } else { 1 }), "rank {rank}");
    }
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
