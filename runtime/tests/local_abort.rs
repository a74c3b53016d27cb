//! `Communicator::abort` over the local transport (issue 35, point 4): the aborting rank
//! tells every other rank with a control message and returns; the peers' calls blocked in
//! `recv`, `barrier`, `wait` and a `test` loop then fail with `ProtocolError::Aborted`
//! naming the rank and its code, soon (checked against a loose upper bound only: timing
//! on this shared machine is noisy; the target is 1 s), and so does every later call,
//! the aborting rank's own included. A watchdog fails the binary rather than hanging.

use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ballast_runtime::ProtocolError;
use ballast_runtime::{launch::threads, Communicator, Error, RuntimeConfig, Source, TagMatch};

/// Runs `f` on `n` local ranks (with a 30 s watchdog) and returns the run's result.
fn run<F: Fn(&mut Communicator) + Sync>(case: &'static str, n: usize, f: F) -> ballast_runtime::Result<()> {
    let (tx, rx) = mpsc::channel::<()>();
    let dog = std::thread::spawn(move || {
        if rx.recv_timeout(Duration::from_secs(30)) == Err(mpsc::RecvTimeoutError::Timeout) {
            eprintln!("local_abort: case `{case}` hung for 30 s (an abort did not end a wait)");
            std::process::exit(1);
        }
    });
    let cfg = RuntimeConfig::builder()
        .buffer_count(8)
        .buffer_size(256)
        .lock_pool(false)
        .build()
        .unwrap();
    let out = threads::run_ranks(n, &cfg, &f).map(drop);
    drop(tx);
    dog.join().unwrap();
    out
}

/// `ProtocolError::Aborted`'s fields: (rank, by, code).
type Aborted = Option<(usize, usize, i32)>;

/// What a rank saw: its rank, its call, the error's fields, its message, when it came.
type Seen = (usize, &'static str, Aborted, String, Instant);

fn aborted(e: &Error) -> Aborted {
    match *e {
        Error::Protocol(ProtocolError::Aborted { rank, by, code }) => Some((rank, by, code)),
        _ => None,
    }
}

/// The upper bound on the time from the abort to a peer's error (the target is 1 s).
const BOUND: Duration = Duration::from_secs(5);

#[test]
fn peers_blocked_in_recv_barrier_wait_and_test_fail_naming_the_aborting_rank() {
    let seen: Mutex<Vec<Seen>> = Mutex::new(Vec::new());
    let at: Mutex<Option<Instant>> = Mutex::new(None);
    let res = run("recv, barrier, wait, test", 5, |comm| {
        let r = comm.rank();
        comm.barrier().unwrap();
        let (call, e) = match r {
            0 => {
                // Let the others block first.
                std::thread::sleep(Duration::from_millis(300));
                *at.lock().unwrap() = Some(Instant::now());
                comm.abort(7).unwrap();
                // Its own later calls fail too, naming itself.
                (
                    "recv after abort",
                    comm.recv(Source::Rank(1), TagMatch::Tag(5)).unwrap_err(),
                )
            }
            1 => ("recv", comm.recv(Source::Rank(0), TagMatch::Tag(5)).unwrap_err()),
            2 => ("barrier", comm.barrier().unwrap_err()),
            3 => {
                let q = comm.irecv(Source::Any, TagMatch::Any).unwrap();
                ("wait", comm.wait(q).unwrap_err())
            }
            _ => {
                let q = comm.irecv(Source::Rank(0), TagMatch::Tag(9)).unwrap();
                let e = loop {
                    match comm.test(&q) {
                        Ok(false) => std::thread::sleep(Duration::from_millis(1)),
                        Ok(true) => panic!("rank 4: the receive completed"),
                        Err(e) => break e,
                    }
                };
                ("test", e)
            }
        };
        let when = Instant::now();
        seen.lock()
            .unwrap()
            .push((r, call, aborted(&e), e.to_string(), when));
    });
    // The run fails with the aborting rank's own error (its finish fails: the job is over),
    // which wins over the others' (theirs name another rank).
    let e = res.unwrap_err();
    assert_eq!(aborted(&e), Some((0, 0, 7)), "{e}");
    let at = at.into_inner().unwrap().expect("rank 0 aborted");
    let mut seen = seen.into_inner().unwrap();
    seen.sort_by_key(|s| s.0);
    let calls: Vec<_> = seen.iter().map(|s| (s.0, s.1, s.2)).collect();
    assert_eq!(
        calls,
        [
            (0, "recv after abort", Some((0, 0, 7))),
            (1, "recv", Some((1, 0, 7))),
            (2, "barrier", Some((2, 0, 7))),
            (3, "wait", Some((3, 0, 7))),
            (4, "test", Some((4, 0, 7))),
        ]
    );
    assert_eq!(
        seen[0].3,
        "rank 0: this rank aborted the job (abort with code 7): no call can complete any more"
    );
    assert_eq!(
        seen[2].3,
        "rank 2: rank 0 aborted the job (abort with code 7): no call can complete any more"
    );
    for (r, call, _, _, when) in &seen[1..] {
        let took = when.saturating_duration_since(at);
        assert!(took < BOUND, "rank {r}: {call} failed {took:?} after the abort");
    }
}

#[test]
fn a_second_abort_and_an_abort_after_a_peers_do_nothing() {
    let seen: Mutex<Vec<(usize, Aborted)>> = Mutex::new(Vec::new());
    let res = run("second abort", 3, |comm| {
        let r = comm.rank();
        if r == 0 {
            comm.abort(-3).unwrap();
            comm.abort(4).unwrap();
            let e = comm.progress().unwrap_err();
            seen.lock().unwrap().push((r, aborted(&e)));
            return;
        }
        // Wait for the notice, then abort too: the first abort known stays the job's.
        let e = comm.recv(Source::Any, TagMatch::Any).unwrap_err();
        comm.abort(11).unwrap();
        let again = comm.barrier().unwrap_err();
        assert_eq!(aborted(&again), aborted(&e));
        seen.lock().unwrap().push((r, aborted(&e)));
    });
    assert_eq!(aborted(&res.unwrap_err()), Some((0, 0, -3)));
    let mut seen = seen.into_inner().unwrap();
    seen.sort_by_key(|s| s.0);
    assert_eq!(
        seen,
        [
            (0, Some((0, 0, -3))),
            (1, Some((1, 0, -3))),
            (2, Some((2, 0, -3)))
        ]
    );
}
