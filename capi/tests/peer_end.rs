//! `ballast_local_run` with a rank that returns early (issue 33, finding 3): the rank
//! waiting for it gets BALLAST_EPEER naming the finished rank, instead of hanging; ranks in
//! different collectives get BALLAST_EINVAL naming both collectives; a `ballast_test` loop
//! on a receive from it, or a `ballast_iprobe` loop for it, ends with BALLAST_EPEER too. A watchdog fails the
//! binary rather than hanging.

use std::ffi::{c_int, c_void};
use std::sync::mpsc;
use std::time::Duration;

use ballast::*;

/// What rank 0 calls while rank 1 returns 0 at once (or, for `Mismatch`, calls all-gather).
#[derive(Clone, Copy)]
enum Case {
    Recv,
    Barrier,
    Allgatherv,
    Mismatch,
    /// A `ballast_test` loop on an `ballast_irecv` from rank 1 (NEURON's multisend style).
    TestLoop,
    /// A `ballast_iprobe` loop for rank 1.
    IprobeLoop,
}

/// Rank 0's polling loops: the first non-zero code (0 if the poll ever says done/found).
///
/// # Safety
/// `comm` a live communicator lent by ballast_local_run.
unsafe fn poll_loop(comm: *mut ballast_comm, case: Case) -> c_int {
    let mut flag: c_int = 0;
    // SAFETY: as the function's contract; `req` and `flag` writable; `req` live until
    // freed at the end.
    unsafe {
        if let Case::IprobeLoop = case {
            loop {
                let rc = ballast_iprobe(comm, 1, 3, &mut flag, std::ptr::null_mut());
                if rc != 0 || flag != 0 {
                    return rc;
                }
            }
        }
        let mut req: *mut ballast_request = std::ptr::null_mut();
        assert_eq!(ballast_irecv(comm, 1, 3, &mut req), 0);
        let rc = loop {
            let rc = ballast_test(req, &mut flag, std::ptr::null_mut());
            if rc != 0 || flag != 0 {
                break rc;
            }
        };
        assert_eq!(ballast_request_free(req), 0);
        rc
    }
}

unsafe extern "C" fn rank_main(comm: *mut ballast_comm, user: *mut c_void) -> c_int {
    // SAFETY: `user` is the `Case` the test passed, alive for the whole run.
    let case = unsafe { *(user as *const Case) };
    let mut rank: c_int = -1;
    // SAFETY: a live communicator lent by ballast_local_run; `rank` writable.
    assert_eq!(unsafe { ballast_rank(comm, &mut rank) }, 0);
    let mut out: *mut ballast_gathered = std::ptr::null_mut();
    let mut buf = [0u8; 8];
    // SAFETY: as above; `buf` of 8 writable bytes; `out` writable.
    unsafe {
        match (case, rank) {
            (Case::Mismatch, 0) => ballast_barrier(comm),
            (Case::Mismatch, _) => ballast_allgatherv(comm, buf.as_ptr().cast(), 1, &mut out),
            (_, 1) => 0,
            (Case::Recv, _) => ballast_recv(comm, 1, 3, buf.as_mut_ptr().cast(), 8, std::ptr::null_mut()),
            (Case::Barrier, _) => ballast_barrier(comm),
            (Case::Allgatherv, _) => ballast_allgatherv(comm, buf.as_ptr().cast(), 1, &mut out),
            (Case::TestLoop | Case::IprobeLoop, _) => poll_loop(comm, case),
        }
    }
}

/// Runs `case` on 2 ranks: `ballast_local_run`'s result and the last error message.
fn run(case: Case) -> (c_int, String) {
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if rx.recv_timeout(Duration::from_secs(30)) == Err(mpsc::RecvTimeoutError::Timeout) {
            eprintln!("peer_end: ballast_local_run hung for 30 s");
            std::process::exit(1);
        }
    });
    let mut cfg: *mut ballast_config = std::ptr::null_mut();
    let case = Box::new(case);
    // SAFETY: `cfg` writable; then a live config; rank_main is thread-safe; `case` outlives
    // the run.
    let rc = unsafe {
        assert_eq!(ballast_config_new(&mut cfg), 0);
        let rc = ballast_local_run(2, cfg, Some(rank_main), &*case as *const Case as *mut c_void);
        ballast_config_free(cfg);
        rc
    };
    let mut msg = vec![0u8; 1024];
    // SAFETY: 1024 writable bytes.
    let n = unsafe { ballast_last_error(msg.as_mut_ptr().cast(), msg.len()) };
    msg.truncate(usize::try_from(n).unwrap().min(1023));
    let _ = tx.send(());
    (rc, String::from_utf8(msg).unwrap())
}

#[test]
fn a_rank_that_returned_early_ends_its_peers_waits_with_epeer() {
    for (case, call, op) in [
        (Case::Recv, "ballast_recv", "recv"),
        (Case::Barrier, "ballast_barrier", "barrier"),
        (Case::Allgatherv, "ballast_allgatherv", "all_gatherv"),
        (Case::TestLoop, "ballast_test", "test"),
        (Case::IprobeLoop, "ballast_iprobe", "iprobe"),
    ] {
        let (rc, msg) = run(case);
        assert_eq!(rc, BALLAST_EPEER, "{call}: {msg}");
        assert_eq!(
            msg,
            format!(
                "rank 0: {call}: rank 0: {op} can never complete: rank 1 finished (returned) \
                 without sending what it waits for"
            )
        );
    }
}

#[test]
fn different_collectives_are_einval_naming_both() {
    let (rc, msg) = run(Case::Mismatch);
    assert_eq!(rc, BALLAST_EINVAL, "{msg}");
    // Either rank may see the other's message first; both name both collectives.
    let from_0 = "rank 0: ballast_barrier: rank 0: barrier (collective #1, step 0) got a message of \
                  all_gatherv (collective #1, step 0) from rank 1: the ranks called different collectives";
    let from_1 = "rank 1: ballast_allgatherv: rank 1: all_gatherv (collective #1, step 0) got a message \
                  of barrier (collective #1, step 0) from rank 0: the ranks called different collectives";
    assert!(msg == from_0 || msg == from_1, "{msg}");
}
