//! Completion cases (issue 35): a receive limited to a length (`irecv_within`, C's
//! `ballast_irecv_into`) refusing a longer message, whether it arrives after the post or was
//! queued before, and leaving it whole for the next receive; `cancel` of a posted receive
//! nothing matched (the message sent later goes to the next receive), refused for a
//! matched receive and for a send.

use ballast_runtime::{CommError, Error};
use ballast_runtime::{RecvSharing, Result, Source, TagMatch};

use super::*;

/// `Ok(code)` of how wait/test of a limited receive ended: 1 refused (with the source, tag
/// and length checked), else the message's length plus 100.
fn refused(r: Result<Option<ballast_runtime::Message>>, source: usize, tag: u32, len: usize) -> u64 {
    match r {
        Err(Error::Comm(CommError::Truncated {
            peer: s,
            tag: t,
            len: n,
            ..
        })) if (s, t, n) == (source, tag, len) => 1,
        Ok(Some(m)) => 100 + m.data.len() as u64,
        other => panic!("want Truncated from {source} tag {tag} of {len} bytes, got {other:?}"),
    }
}

/// Rank 1 sends, rank 0 receives with limits and cancels; every message checked against
/// its payload; the steps rank 0 went through compared at the end.
pub fn cancel_and_irecv_within<L: Launcher>(l: &L) {
    let c = cfg(RecvSharing::Shared).buffer_size(128).build().unwrap();
    let res = l
        .run(2, &c, |comm| -> Result<Vec<u64>> {
            if comm.rank() == 1 {
                comm.barrier()?; // B1
                comm.send(0, 5, &payload(40, 5))?;
                comm.send(0, 6, &payload(300, 6))?; // longer than its receive and the buffers
                comm.send(0, 9, &payload(50, 9))?;
                comm.barrier()?; // B2
                comm.barrier()?; // B3: rank 0 cancelled its receive of tag 7
                comm.send(0, 7, &payload(9, 7))?;
                comm.send(0, 8, &payload(3, 8))?;
                comm.barrier()?; // B4
                return Ok(vec![]);
            }
            let mut seen = vec![];
            // Posted before the messages: the one that fits is taken, the longer refused.
            let a = comm.irecv_within(1, 5u32, 64)?;
            let b = comm.irecv_within(1, 6u32, 64)?;
            comm.barrier()?; // B1
            let m = comm.wait(a)?.into_message().expect("a receive");
            assert_eq!(m.data, payload(40, 5));
            seen.push(100 + m.data.len() as u64);
            seen.push(refused(comm.wait(b).map(|c| c.into_message()), 1, 6, 300));
            let m = comm.recv(1, 6u32)?;
            assert_eq!(
                m.data,
                payload(300, 6),
                "the refused message, whole, for the next receive"
            );
            seen.push(100 + m.data.len() as u64);
            comm.barrier()?; // B2
                             // Queued before the post: refused at the first test.
            comm.probe(1, 9u32)?;
            let q = comm.irecv_within(1, 9u32, 49)?;
            seen.push(refused(comm.test(&q).map(|_| None), 1, 9, 50));
            let q = comm.irecv_within(1, 9u32, 50)?; // exactly its length
            let m = comm.wait(q)?.into_message().expect("a receive");
            assert_eq!(m.data, payload(50, 9));
            seen.push(100 + m.data.len() as u64);
            // Cancelled before anything matched it: the message goes to the next receive.
            let r = comm.irecv(1, 7u32)?;
            // Consumed: a cancelled receive cannot be waited for (it would never complete).
            seen.push(u64::from(comm.cancel(r)?.is_ok()));
            comm.barrier()?; // B3
                             // Matched (the message queued before the post): not cancelled, waited as before.
            comm.probe(1, 8u32)?;
            let r8 = comm.irecv(1, 8u32)?;
            let r8 = match comm.cancel(r8)? {
                Ok(()) => panic!("a matched receive was cancelled"),
                Err(back) => back,
            };
            seen.push(0);
            let m = comm.wait(r8)?.into_message().expect("a receive");
            assert_eq!(m.data, payload(3, 8));
            let m = comm.recv(1, 7u32)?;
            assert_eq!(
                m.data,
                payload(9, 7),
                "the cancelled receive's message, for the next one"
            );
            seen.push(100 + m.data.len() as u64);
            // A send is not cancelled.
            let s = comm.isend(0, 99, b"self")?;
            let s = match comm.cancel(s)? {
                Ok(()) => panic!("a send was cancelled"),
                Err(back) => back,
            };
            seen.push(0);
            comm.wait(s)?;
            assert_eq!(comm.recv(0, 99u32)?.data, b"self");
            comm.barrier()?; // B4
            assert_eq!(comm.iprobe(Source::Any, TagMatch::Any)?, None, "all taken");
            Ok(seen)
        })
        .unwrap();
    assert_eq!(
        res[0].as_ref().unwrap(),
        &vec![140, 1, 400, 1, 150, 1, 0, 109, 0],
        "{}",
        l.name()
    );
}

/// Two limited receives posted before their sender's two messages (tag 11): the first
/// receive refuses the first message (20 B into 4), the second keeps the second message
/// (2 B), which MPI or the engine matched to it, and the refused message goes to the next
/// receive posted after the refusal (the documented order of `irecv_within`: receives
/// posted before a refusal keep what was matched to them).
pub fn refused_behind_posted_receives<L: Launcher>(l: &L) {
    let c = cfg(RecvSharing::Shared).buffer_size(128).build().unwrap();
    let res = l
        .run(2, &c, |comm| -> Result<Vec<u64>> {
            if comm.rank() == 1 {
                comm.barrier()?; // rank 0 posted both receives
                comm.send(0, 11, &payload(20, 11))?;
                comm.send(0, 11, &payload(2, 12))?;
                comm.barrier()?;
                return Ok(vec![]);
            }
            let a = comm.irecv_within(1, 11u32, 4)?;
            let b = comm.irecv_within(1, 11u32, 64)?;
            comm.barrier()?;
            let mut seen = vec![refused(comm.wait(a).map(|c| c.into_message()), 1, 11, 20)];
            let m = comm.wait(b)?.into_message().expect("a receive");
            assert_eq!(m.data, payload(2, 12), "the second message, matched to b");
            seen.push(100 + m.data.len() as u64);
            let m = comm.recv(1, 11u32)?;
            assert_eq!(m.data, payload(20, 11), "the refused message, whole, after");
            seen.push(100 + m.data.len() as u64);
            comm.barrier()?;
            Ok(seen)
        })
        .unwrap();
    assert_eq!(res[0].as_ref().unwrap(), &vec![1, 102, 120], "{}", l.name());
}
