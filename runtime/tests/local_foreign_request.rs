//! A `Request` is `Send`: one rank's request can reach another rank's communicator. That
//! communicator refuses it at once (`CommError::ForeignRequest`, naming the call and both
//! ranks) in `test`, `wait`, `wait_all` and `cancel`, gives back the requests it took by
//! value, and both communicators work on: the owner completes its request afterwards.

use ballast_runtime::CommError;
use ballast_runtime::{launch::threads, Completion, Error, Request, RuntimeConfig, Source, TagMatch};
use crossbeam::channel::{unbounded, Receiver, Sender};

/// Checks that `e` is the refusal of call `op` on rank 1 of rank 0's request; the request
/// given back, if any.
fn foreign(e: Error, op: &str) -> Option<Request> {
    let text = e.to_string();
    match e {
        Error::Comm(CommError::ForeignRequest {
            op: o,
            rank,
            comm,
            owner_rank,
            owner_comm,
            request,
            ..
        }) => {
            assert_eq!((o, rank, owner_rank), (op, 1, 0), "{text}");
            assert_ne!(comm, owner_comm, "{text}");
            assert!(
                text.starts_with(&format!(
                    "rank 1: {op}: the request belongs to another communicator (#{owner_comm}, rank 0), not to this one (#{comm}, rank 1)"
                )),
                "{text}"
            );
            request.map(|r| *r)
        }
        other => panic!("{op}: expected ForeignRequest, got {other:?}"),
    }
}

#[test]
fn a_request_of_another_communicator_is_refused_and_given_back() {
    let cfg = RuntimeConfig::builder().lock_pool(false).build().unwrap();
    // Rank 0's requests to rank 1 (`to`), and back (`back`).
    let (to, from0): (Sender<Request>, Receiver<Request>) = unbounded();
    let (back, from1): (Sender<Request>, Receiver<Request>) = unbounded();
    let got = threads::run_ranks(2, &cfg, |comm| {
        if comm.rank() == 0 {
            let recv = comm.irecv(Source::Rank(1), TagMatch::Tag(5)).unwrap();
            let send = comm.isend(1, 6, b"to one").unwrap();
            to.send(recv).unwrap();
            to.send(send).unwrap();
            let recv = from1.recv().unwrap();
            let send = from1.recv().unwrap();
            // The owner completes both, as if they had never left.
            assert_eq!(comm.wait(send).unwrap(), Completion::Sent);
            let m = comm.wait(recv).unwrap().into_message().unwrap();
            comm.barrier().unwrap();
            (m.source, m.tag, m.data)
        } else {
            let recv = from0.recv().unwrap();
            let send = from0.recv().unwrap();
            // Refused at once, nothing done: without the check, `test` said "not yet" for
            // ever and `wait` hung.
            assert!(foreign(comm.test(&recv).unwrap_err(), "test").is_none());
            assert!(foreign(comm.test(&send).unwrap_err(), "test").is_none());
            let recv = foreign(comm.wait(recv).unwrap_err(), "wait").unwrap();
            let recv = foreign(comm.cancel(recv).unwrap_err(), "cancel").unwrap();
            let send = foreign(comm.cancel(send).unwrap_err(), "cancel").unwrap();
            let send = foreign(comm.wait_all(vec![send]).unwrap_err(), "wait_all").unwrap();
            // Back to their owner (which waits on the channel, not progressing).
            back.send(recv).unwrap();
            back.send(send).unwrap();
            // Rank 1's own requests are its own: its communicator works on.
            let own = comm.irecv(Source::Rank(0), TagMatch::Tag(6)).unwrap();
            assert!(comm.cancel(own).unwrap().is_ok());
            comm.send(0, 5, b"to zero").unwrap();
            let m = comm.recv(Source::Rank(0), TagMatch::Tag(6)).unwrap();
            assert_eq!(m.data, b"to one");
            comm.barrier().unwrap();
            (m.source, m.tag, m.data)
        }
    })
    .unwrap();
    assert_eq!(got[0], (1, 5, b"to zero".to_vec()));
    assert_eq!(got[1], (0, 6, b"to one".to_vec()));
}
