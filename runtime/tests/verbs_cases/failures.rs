//! The failure cases of `verbs_conformance`: a pool above `ulimit -l` (`--memlock`), a
//! peer that exits (`--dead-peer`), one killed while streamed to (`--killed-peer`), and a
//! connection never answered (`--unanswered-connect`).

use crate::*;

/// The pool does not fit under a low RLIMIT_MEMLOCK: the communicator fails with the amount
/// needed and how to raise it.
pub(crate) fn memlock_error() -> i32 {
    let (soft, hard) = rlimit_memlock();
    if soft == u64::MAX || soft > 64 * 1024 {
        println!("memlock: RLIMIT_MEMLOCK is {soft} B; lowering it to 64 KiB for this process");
        set_memlock(64 * 1024, hard);
    }
    let cfg = RuntimeConfig::from_env()
        .unwrap()
        .to_builder()
        .buffer_count(64)
        .buffer_size(8192)
        .build()
        .unwrap();
    let mut boot = TcpBootstrap::new("127.0.0.1:0", 0, 1, Duration::from_secs(5)).unwrap();
    match verbs::communicator(&mut boot, &cfg) {
        Err(e @ Error::Fabric(FabricError::MemlockTooLow { .. })) => {
            let m = e.to_string();
            println!("memlock: got the expected error: {m}");
            // Pool 64 x 8 KiB, send headers 64 x 32 B, SRQ 64 x (32 B + 8 KiB): 1028 KiB.
            let need =
                (64 * 8192 + 64 * verbs::HEADER_BYTES + 64 * (verbs::HEADER_BYTES + 8192)).div_ceil(1024);
            let ok = m.contains(&format!("registering {need} KiB"))
                && m.contains("`ulimit -l` is 64 KiB")
                && m.contains("ulimit -l unlimited");
            i32::from(!ok)
        }
        Err(e) => {
            println!("memlock: wrong error: {e}");
            1
        }
        Ok(_) => {
            println!("memlock: the communicator was created under a 64 KiB limit");
            1
        }
    }
}

pub(crate) fn rlimit_memlock() -> (u64, u64) {
    let l = ballast_runtime::memory::memlock_limit_bytes().unwrap_or(u64::MAX);
    (l, u64::MAX)
}

pub(crate) fn set_memlock(soft: u64, _hard: u64) {
    let (_, hard) = rlimit::getrlimit(rlimit::Resource::MEMLOCK).unwrap();
    rlimit::setrlimit(rlimit::Resource::MEMLOCK, soft, hard).unwrap();
}

/// Rank 1 exits after one exchange; rank 0's next receive from it is an error, not a hang.
pub(crate) fn child_dead_peer() -> i32 {
    let cfg = RuntimeConfig::from_env()
        .unwrap()
        .to_builder()
        .buffer_count(8)
        .build()
        .unwrap();
    let mut boot = TcpBootstrap::connect(cfg.bootstrap()).unwrap();
    let mut comm = verbs::communicator(&mut boot, &cfg).unwrap();
    let me = comm.rank();
    let other = 1 - me;
    comm.send(other, 1, b"hello").unwrap();
    comm.recv(other, 1u32).unwrap();
    if me == 1 {
        std::thread::sleep(Duration::from_millis(200));
        std::process::exit(7); // dies without finishing
    }
    let t = Instant::now();
    match comm.recv(other, 2u32) {
        Err(e) => {
            println!(
                "dead peer: rank 0 got an error after {:.1} s: {e}",
                t.elapsed().as_secs_f64()
            );
            i32::from(!e.to_string().contains("rank 1"))
        }
        Ok(_) => {
            println!("dead peer: a message arrived from a dead rank");
            1
        }
    }
}

/// Rank 1 is killed in the middle of a stream (it exits after acknowledging two batches of
/// 8 messages); rank 0, which has not progressed since (so it has not yet seen rank 1's
/// control connection close), posts its next batch to the dead queue pair. Rank 0 must get
/// an error naming rank 1 (not hang), the failed completions (retry exceeded, then flushed)
/// must say so too, and once they are in every pool buffer must be free again: no slot
/// leaked by an error completion.
pub(crate) fn child_killed_peer() -> i32 {
    let cfg = RuntimeConfig::from_env()
        .unwrap()
        .to_builder()
        .recv_sharing(RecvSharing::PerPeer)
        .recv_depth(8)
        .buffer_count(16)
        .buffer_size(4096)
        .build()
        .unwrap();
    let mut boot = TcpBootstrap::connect(cfg.bootstrap()).unwrap();
    let mut comm = verbs::communicator(&mut boot, &cfg).unwrap();
    let me = comm.rank();
    let payload = vec![5u8; 4000];
    if me == 1 {
        for _ in 0..2 {
            for _ in 0..8 {
                comm.recv(0, 1u32).unwrap();
            }
            comm.send(0, 2, b"ack").unwrap();
        }
        // Serve rank 0 a little longer (its credits may still be on the control channel)...
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(500) {
            comm.progress().unwrap();
        }
        std::process::exit(9); // ...then die mid-stream: no finish, QPs destroyed by the kernel
    }
    for _ in 0..2 {
        let reqs: Vec<_> = (0..8).map(|_| comm.isend(1, 1, &payload).unwrap()).collect();
        comm.wait_all(reqs).unwrap();
        comm.recv(1, 2u32).unwrap();
    }
    // Collect the credits for the next batch (granted on the ack or on the control channel)
    // while rank 1 still lives, then wait, without progressing, until it is gone.
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(200) {
        comm.progress().unwrap();
    }
    std::thread::sleep(Duration::from_millis(1500));
    let t = Instant::now();
    let mut errors = Vec::new();
    let reqs: Result<Vec<_>> = (0..8).map(|_| comm.isend(1, 1, &payload)).collect();
    match reqs.and_then(|r| comm.wait_all(r)) {
        Err(e) => {
            println!(
                "killed peer: rank 0 got an error after {:.1} s: {e}",
                t.elapsed().as_secs_f64()
            );
            errors.push(e.to_string());
        }
        Ok(_) => {
            println!("killed peer: 8 sends to a dead rank completed");
            return 1;
        }
    }
    // Keep progressing: the failed completions (retry exceeded after ~2 s, then flushes)
    // return their buffers; each later error is reported once.
    let total = comm.pool_stats().buffers;
    let t = Instant::now();
    while (comm.pool_stats().free < total || !errors.iter().any(|e| e.contains("failed:")))
        && t.elapsed() < Duration::from_secs(30)
    {
        if let Err(e) = comm.progress() {
            errors.push(e.to_string());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let st = comm.pool_stats();
    println!(
        "killed peer: pool {} of {} buffers free after {:.1} s of draining; errors seen: {errors:?}",
        st.free,
        st.buffers,
        t.elapsed().as_secs_f64()
    );
    let named = !errors.is_empty() && errors.iter().all(|e| e.contains("rank 1"));
    let completion_error = errors.iter().any(|e| e.contains("failed:"));
    i32::from(!(st.free == st.buffers && named && completion_error))
}

/// Rank 0 opens a queue pair toward rank 1, which does not answer (it sleeps without
/// progressing), and drops its communicator before the connection finished: the QP is
/// destroyed in INIT and every registration is released (VmPin back to where it was).
/// Rank 1 then wakes up, finds the connect request of a rank that is gone, and gets an
/// error, not a hang; its own teardown releases everything too.
pub(crate) fn child_unanswered_connect() -> i32 {
    let cfg = RuntimeConfig::from_env()
        .unwrap()
        .to_builder()
        .buffer_count(8)
        .build()
        .unwrap();
    let mut boot = TcpBootstrap::connect(cfg.bootstrap()).unwrap();
    let start = ProcStatus::read_self().unwrap();
    let mut comm = verbs::communicator(&mut boot, &cfg).unwrap();
    let me = comm.rank();
    let pinned = ProcStatus::read_self().unwrap().vm_pin_kb - start.vm_pin_kb;
    let ok = if me == 0 {
        let r = comm.isend(1, 3, b"hello?").unwrap();
        for _ in 0..200 {
            comm.progress().unwrap();
        }
        let connecting = comm.endpoint_stats().live;
        drop(r);
        drop(comm); // the QP toward rank 1 never reached RTR
        let after = ProcStatus::read_self().unwrap().vm_pin_kb - start.vm_pin_kb;
        println!("unanswered connect: rank 0 had {connecting} endpoint(s) opening, VmPin {pinned} KiB while running, {after} KiB after the drop");
        connecting == 1 && pinned > 0 && after == 0
    } else {
        std::thread::sleep(Duration::from_secs(3));
        let t = Instant::now();
        let res = comm.recv(0, 3u32);
        let e = res.err().map(|e| e.to_string());
        drop(comm);
        let after = ProcStatus::read_self().unwrap().vm_pin_kb - start.vm_pin_kb;
        println!(
            "unanswered connect: rank 1 got {:?} after {:.1} s; VmPin {after} KiB after the drop",
            e,
            t.elapsed().as_secs_f64()
        );
        e.is_some_and(|e| e.contains("rank 0")) && after == 0
    };
    i32::from(!ok)
}
