//! A rank that returned early ends the waits that depended on it (issue 33, finding 3):
//! over the local transport, a blocking call waiting for a rank that finished without
//! sending what it waits for returns `CommError::PeerGone` naming that rank and the call,
//! instead of waiting for ever; an any-source receive once every other rank finished.
//! What a finished rank sent before it returned is still received. A watchdog fails the
//! binary (naming the case) rather than hanging when a wait is not ended.

use std::sync::mpsc;
use std::time::Duration;

use ballast_runtime::CommError;
use ballast_runtime::{
    launch::threads, Communicator, Completion, Error, RecvSharing, Request, RuntimeConfig, Source, TagMatch,
};

/// Runs `f` on `n` local ranks, failing the whole binary after 30 s (a hang).
fn run<R: Send, F: Fn(&mut Communicator) -> R + Sync>(case: &'static str, n: usize, f: F) -> Vec<R> {
    let (tx, rx) = mpsc::channel::<()>();
    let dog = std::thread::spawn(move || {
        if rx.recv_timeout(Duration::from_secs(30)) == Err(mpsc::RecvTimeoutError::Timeout) {
            eprintln!("local_peer_end: case `{case}` hung for 30 s (a wait was not ended)");
            std::process::exit(1);
        }
    });
    let mut out = Vec::new();
    for sharing in [RecvSharing::PerPeer, RecvSharing::Shared] {
        let cfg = RuntimeConfig::builder()
            .recv_sharing(sharing)
            .buffer_count(8)
            .buffer_size(256)
            .lock_pool(false)
            .build()
            .unwrap();
        out = threads::run_ranks(n, &cfg, &f).unwrap();
    }
    drop(tx);
    dog.join().unwrap();
    out
}

/// `CommError::PeerGone`'s fields: (rank, op, peer, failed).
type Gone = Option<(usize, &'static str, Option<usize>, bool)>;

fn gone(e: &Error) -> Gone {
    match *e {
        Error::Comm(CommError::PeerGone {
            rank,
            op,
            peer,
            failed,
        }) => Some((rank, op, peer, failed)),
        _ => None,
    }
}

#[test]
fn a_receive_from_a_rank_that_returned_is_peer_gone() {
    let got = run("recv", 2, |comm| {
        if comm.rank() == 1 {
            return None;
        }
        let e = comm.recv(Source::Rank(1), TagMatch::Tag(3)).unwrap_err();
        Some((gone(&e), e.to_string()))
    });
    let (g, msg) = got[0].clone().unwrap();
    assert_eq!(g, Some((0, "recv", Some(1), false)));
    assert_eq!(
        msg,
        "rank 0: recv can never complete: rank 1 finished (returned) without sending what it waits for"
    );
}

#[test]
fn wait_probe_recv_into_and_recv_within_end_too() {
    let got = run("wait, probe, recv_into, recv_within", 3, |comm| {
        match comm.rank() {
            0 => {
                let r = comm.irecv(2, 1).unwrap();
                let w = comm.wait(r).unwrap_err();
                let p = comm.probe(2, TagMatch::Any).unwrap_err();
                let mut buf = [0u8; 8];
                let i = comm.recv_into(Source::Rank(2), 1, &mut buf).unwrap_err();
                let l = comm.recv_within(Source::Rank(2), 1, 8).unwrap_err();
                vec![gone(&w), gone(&p), gone(&i), gone(&l)]
            }
            // Rank 1 waits for rank 0 after rank 0 is done with rank 2.
            1 => vec![gone(&comm.recv(0, 9).unwrap_err())],
            _ => Vec::new(),
        }
    });
    assert_eq!(
        got[0],
        [
            Some((0, "wait", Some(2), false)),
            Some((0, "probe", Some(2), false)),
            Some((0, "recv", Some(2), false)),
            Some((0, "recv", Some(2), false)),
        ]
    );
    assert_eq!(got[1], [Some((1, "recv", Some(0), false))]);
}

#[test]
fn what_a_rank_sent_before_returning_is_received_then_the_next_receive_ends() {
    // Rank 1 sends 40 messages (eager and chunked, more than the pool holds) and returns at
    // once; rank 0 starts receiving only after rank 1 finished.
    let got = run("sent before returning", 2, |comm| {
        if comm.rank() == 1 {
            for i in 0..40u32 {
                let len = (i as usize * 37) % 900;
                comm.send(0, 5, &vec![i as u8; len]).unwrap();
            }
            return Vec::new();
        }
        std::thread::sleep(Duration::from_millis(50));
        let mut out: Vec<Gone> = Vec::new();
        for i in 0..40u32 {
            let m = comm.recv(1, 5).unwrap();
            assert_eq!(m.data, vec![i as u8; (i as usize * 37) % 900]);
        }
        out.push(gone(&comm.recv(1, 5).unwrap_err()));
        out
    });
    assert_eq!(got[0], [Some((0, "recv", Some(1), false))]);
}

#[test]
fn an_any_source_receive_ends_when_every_other_rank_finished() {
    let got = run("any source", 4, |comm| {
        match comm.rank() {
            0 => {
                // Rank 2's message is received, then nothing can come.
                let m = comm.recv(Source::Any, 4).unwrap();
                let e = comm.recv(Source::Any, TagMatch::Any).unwrap_err();
                Some((m.source, gone(&e), e.to_string()))
            }
            2 => {
                comm.send(0, 4, b"last words").unwrap();
                None
            }
            _ => None,
        }
    });
    let (src, g, msg) = got[0].clone().unwrap();
    assert_eq!(src, 2);
    assert_eq!(g, Some((0, "recv", None, false)));
    assert!(
        msg.ends_with("every other rank finished (returned) without sending what it waits for"),
        "{msg}"
    );
}

#[test]
fn an_any_source_receive_waits_while_one_rank_runs() {
    // Ranks 1 and 2 return; rank 3 sends only after they finished (it waits for them in a
    // barrier-free way: it sleeps). The receive must not end early.
    let got = run("any source, one rank running", 4, |comm| match comm.rank() {
        0 => comm.recv(Source::Any, 6).map(|m| m.source).ok(),
        3 => {
            std::thread::sleep(Duration::from_millis(200));
            comm.send(0, 6, b"late").unwrap();
            None
        }
        _ => None,
    });
    assert_eq!(got[0], Some(3));
}

#[test]
fn collectives_end_when_a_rank_returned_without_entering_them() {
    let got = run("collectives", 3, |comm| {
        if comm.rank() == 1 {
            return (None, None);
        }
        let b = comm.barrier().unwrap_err();
        let a = comm.all_gatherv(b"block").unwrap_err();
        (gone(&b), gone(&a))
    });
    // The dissemination barrier on 3 ranks: rank 2 waits for rank 1 in round 0; rank 0
    // gets rank 2's round-0 message, then waits for rank 1 in round 1. The ring all-gather:
    // rank 2 waits for rank 1; rank 0 gets rank 2's step 0, then waits for its step 1,
    // which rank 2 never sends (its own all-gather failed and it returned).
    assert_eq!(
        got,
        [
            (
                Some((0, "barrier", Some(1), false)),
                Some((0, "all_gatherv", Some(2), false))
            ),
            (None, None),
            (
                Some((2, "barrier", Some(1), false)),
                Some((2, "all_gatherv", Some(1), false))
            ),
        ]
    );
}

#[test]
fn a_blocking_send_to_a_finished_rank_completes() {
    // A finished rank still takes what is sent to it (it serves until every rank is done):
    // a send larger than the pool completes, and nothing is an error.
    let got = run("send to finished", 2, |comm| {
        if comm.rank() == 1 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
        comm.send(1, 2, &vec![7u8; 64 << 10]).is_ok()
    });
    assert_eq!(got, [true, true]);
}

/// Calls `f` until it gives `Some`, as a polling loop of `test` or `iprobe` does (NEURON's
/// multisend style); the watchdog of [`run`] bounds it.
fn poll<T>(mut f: impl FnMut() -> Result<Option<T>, Error>) -> Result<T, Error> {
    loop {
        if let Some(t) = f()? {
            return Ok(t);
        }
    }
}

/// `test` as a poll: `Some(())` once `req` completed.
fn tested(comm: &mut Communicator, req: &Request) -> Result<Option<()>, Error> {
    comm.test(req).map(|done| done.then_some(()))
}

#[test]
fn a_test_loop_and_an_iprobe_loop_end_when_the_rank_returned() {
    // Rank 1 sends 20 messages (more than the pool holds, some chunked) and returns at
    // once; rank 0 takes each by polling (iprobe, then test on an irecv), so what came
    // before the end is received; then a test loop and an iprobe loop on rank 1 end.
    let got = run("test and iprobe loops", 2, |comm| {
        if comm.rank() == 1 {
            for i in 0..20u32 {
                comm.send(0, 5, &vec![i as u8; (i as usize * 97) % 900]).unwrap();
            }
            return None;
        }
        for i in 0..20u32 {
            let len = (i as usize * 97) % 900;
            let env = poll(|| comm.iprobe(1, 5)).unwrap();
            assert_eq!((env.source, env.tag, env.len), (1, 5, len));
            let r = comm.irecv(1, 5).unwrap();
            poll(|| tested(comm, &r)).unwrap();
            match comm.wait(r).unwrap() {
                Completion::Received(m) => assert_eq!(m.data, vec![i as u8; len]),
                Completion::Sent => panic!("a receive completed as a send"),
            }
        }
        let r = comm.irecv(1, 5).unwrap();
        let t = poll(|| tested(comm, &r)).unwrap_err();
        // The request stays valid: its wait ends the same way.
        let w = comm.wait(r).unwrap_err();
        let p = poll(|| comm.iprobe(1, TagMatch::Any)).unwrap_err();
        Some((gone(&t), gone(&w), gone(&p), t.to_string()))
    });
    let (t, w, p, msg) = got[0].clone().unwrap();
    assert_eq!(t, Some((0, "test", Some(1), false)));
    assert_eq!(w, Some((0, "wait", Some(1), false)));
    assert_eq!(p, Some((0, "iprobe", Some(1), false)));
    assert_eq!(
        msg,
        "rank 0: test can never complete: rank 1 finished (returned) without sending what it waits for"
    );
}
