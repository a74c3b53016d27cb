//! The engine's collectives of issue 35 resume after a retryable error (as `barrier` and
//! `all_gatherv` do, issue 33), on `local`: rank 1's `all_reduce`, then its
//! `exchange_sparse`, fail with `Error::Alloc` while an unrelated 256 MiB message from
//! rank 0 arrives under an address-space limit (RLIMIT_AS, set here: this test binary
//! holds this one test, as the limit is the process'). Another collective meanwhile is
//! `CollectiveUnfinished`; a retry under the limit fails again and sends nothing twice;
//! once the limit is lifted the next call of the same collective completes it with the
//! right result, while rank 0 waited in it all along (the run is given 120 s).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Barrier};
use std::time::Duration;

use ballast_runtime::launch::threads::run_ranks;
use ballast_runtime::CommError;
use ballast_runtime::{Communicator, Error, ProcStatus, Received, ReduceOp, RuntimeConfig};

const BIG: usize = 256 << 20;

/// The process' address space now (`VmSize`), bytes.
fn vm_size() -> u64 {
    ProcStatus::read_self().expect("/proc/self/status").vm_size_kb << 10
}

/// Runs `attempt` under a limit of the address space now + 128 MiB: it must fail with
/// `Error::Alloc` of `BIG` bytes, twice, with `other` (another collective) refused as
/// unfinished between; then, the limit lifted, it must succeed: its result. `sent` is
/// what `attempt` sends in all (checked: nothing sent twice).
fn resumed<T>(
    comm: &mut Communicator,
    what: &str,
    sent: u64,
    mut attempt: impl FnMut(&mut Communicator) -> ballast_runtime::Result<T>,
) -> Result<T, String> {
    let (soft, hard) = rlimit::getrlimit(rlimit::Resource::AS).expect("RLIMIT_AS");
    let before = comm.messages_sent();
    let limit = vm_size() + (128 << 20);
    rlimit::setrlimit(rlimit::Resource::AS, limit, hard).map_err(|e| e.to_string())?;
    let first = attempt(comm).map(|_| ());
    let other = comm.barrier();
    let again = attempt(comm).map(|_| ());
    rlimit::setrlimit(rlimit::Resource::AS, soft, hard).map_err(|e| e.to_string())?;
    for (i, r) in [first, again].into_iter().enumerate() {
        match r {
            Err(Error::Alloc(a)) if a.bytes == BIG as u64 => {}
            r => return Err(format!("{what}: attempt {i} under the limit: {r:?}")),
        }
    }
    match other {
        Err(Error::Comm(CommError::CollectiveUnfinished { unfinished, .. })) if unfinished == what => {}
        r => return Err(format!("{what}: a barrier meanwhile: {r:?}")),
    }
    let out = attempt(comm).map_err(|e| format!("{what}: after the limit: {e}"))?;
    let n = comm.messages_sent() - before;
    if n != sent {
        return Err(format!("{what}: {n} messages sent, not {sent}"));
    }
    Ok(out)
}

#[test]
fn all_reduce_and_exchange_sparse_resume_after_out_of_memory() {
    let cfg = RuntimeConfig::builder()
        .buffer_size(1 << 20)
        .buffer_count(64)
        .lock_pool(false)
        .build()
        .unwrap();
    let data: Vec<u8> = (0..BIG).map(|i| (i % 251) as u8).collect();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // Out of band (the ranks are threads): rank 0's copy of each big message is made
        // before rank 1 lowers the limit, which is the process'.
        let sync = Barrier::new(2);
        let taken = AtomicBool::new(false);
        let out = run_ranks(2, &cfg, |comm| -> Result<(), String> {
            let e = |e: Error| e.to_string();
            let mut x = [0.5f64 + comm.rank() as f64, -3.0];
            if comm.rank() == 0 {
                let big = comm.isend(1, 3, &data).map_err(e)?;
                sync.wait();
                comm.all_reduce(&mut x, ReduceOp::Sum).map_err(e)?;
                // Progress (the big message's parts) until rank 1 took it.
                while !taken.load(Ordering::Acquire) {
                    comm.test(&big).map_err(e)?;
                    std::thread::sleep(Duration::from_millis(1));
                }
                let big2 = comm.isend(1, 4, &data).map_err(e)?;
                sync.wait();
                let got = comm.exchange_sparse(&[(1, &b"from 0"[..])]).map_err(e)?;
                if got
                    != [Received {
                        source: 1,
                        data: b"from 1".to_vec(),
                    }]
                {
                    return Err(format!("rank 0's exchange: {got:?}"));
                }
                comm.wait(big).map_err(e)?;
                comm.wait(big2).map_err(e)?;
            } else {
                sync.wait();
                // 2 ranks: one message, to rank 0.
                resumed(comm, "all_reduce", 1, |c| c.all_reduce(&mut x, ReduceOp::Sum))?;
                let m = comm.recv(0, 3).map_err(e)?;
                if m.data != data {
                    return Err(format!("the first big message: {} bytes", m.data.len()));
                }
                drop(m);
                // No progress from here until the limit: the second big message's first
                // part stays in the fabric.
                taken.store(true, Ordering::Release);
                sync.wait();
                // The data, the acknowledgement of rank 0's, the barrier's one round.
                let got = resumed(comm, "exchange_sparse", 3, |c| {
                    c.exchange_sparse(&[(0, &b"from 1"[..])])
                })?;
                if got
                    != [Received {
                        source: 0,
                        data: b"from 0".to_vec(),
                    }]
                {
                    return Err(format!("rank 1's exchange: {got:?}"));
                }
                let m = comm.recv(0, 4).map_err(e)?;
                if m.data.len() != BIG {
                    return Err(format!("the second big message: {} bytes", m.data.len()));
                }
            }
            if x != [2.0, -6.0] {
                return Err(format!("rank {}: all_reduce gave {x:?}", comm.rank()));
            }
            Ok(())
        });
        let _ = tx.send(out.map_err(|e| e.to_string()));
    });
    let out = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the run hung: a collective was not resumed (120 s)")
        .expect("run_ranks");
    for (rank, r) in out.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
    }
}
