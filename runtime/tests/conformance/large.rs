//! Large messages (above the buffer size: chunked, or MPI's direct path): order with
//! small ones, both sides sending large first, a send completing before its receive is
//! posted, and any-source receives of large messages.

use ballast_runtime::ProtocolError;
use ballast_runtime::{Error, RecvSharing, Result, Source, TagMatch};

use super::*;

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
                                    Err(Error::Protocol(ProtocolError::WouldBlock)) => {
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
