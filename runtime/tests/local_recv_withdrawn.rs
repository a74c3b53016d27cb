//! A receive whose wait fails while its message is half arrived (issue 33: no fault loses
//! data), on `local`: rank 1's `recv_into` (or `recv`) of rank 0's message A has taken A's
//! first chunks when rank 2's 256 MiB message B, arriving behind them, is refused for
//! memory under an address-space limit (RLIMIT_AS, set here: this test binary holds this
//! one test, as the limit is the process'). The wait fails with B's `Error::Alloc` and the
//! receive is withdrawn; A, bound to it, goes back to the queue (what the caller's buffer
//! held of it copied out), so once the limit is lifted the next receive gets A whole, then
//! the message sent after it. Before the fix A stayed with the withdrawn receive (its rest
//! written nowhere), and the next receive got the message sent after it. When the copy out
//! of the caller's buffer does not fit either, A is dropped and the error names A.
//!
//! The order is made certain out of band: rank 0 posts A's first chunks (its per-peer
//! credits, fewer than A's chunks) and stops; rank 2 then posts B's; rank 1's port takes
//! packets in the order they were posted.

use std::sync::{mpsc, Barrier};
use std::time::Duration;

use ballast_runtime::launch::threads::run_ranks;
use ballast_runtime::{Error, ProcStatus, RecvSharing, RuntimeConfig};

const BIG: usize = 256 << 20;
const CHUNK: usize = 64 << 10;

/// The process' address space now (`VmSize`, read by the runtime's [`ProcStatus`]), bytes.
fn vm_size() -> u64 {
    ProcStatus::read_self().expect("/proc/self/status").vm_size_kb << 10
}

fn byte(i: usize) -> u8 {
    (i % 251) as u8
}

/// How rank 1 receives A.
#[derive(Clone, Copy, Debug)]
enum Case {
    /// `recv_into` a buffer of A's length: A is written there as it arrives.
    Into,
    /// `recv`: A is reassembled in a buffer of its own.
    Recv,
    /// `recv_into` of an A too large to be copied out under the limit: A is dropped.
    IntoDropped,
}

/// Rank 1's receive of A from rank 0 (tag 3): the message's bytes.
fn receive(
    comm: &mut ballast_runtime::Communicator,
    case: Case,
    len: usize,
) -> ballast_runtime::Result<Vec<u8>> {
    match case {
        Case::Recv => Ok(comm.recv(0, 3)?.data),
        Case::Into | Case::IntoDropped => {
            let mut buf = vec![0u8; len];
            let env = comm.recv_into(0, 3, &mut buf)?.expect("fits its buffer");
            buf.truncate(env.len);
            Ok(buf)
        }
    }
}

fn run(case: Case) {
    let a_len = match case {
        Case::IntoDropped => 192 << 20,
        _ => 2 << 20,
    };
    let cfg = RuntimeConfig::builder()
        .buffer_size(CHUNK)
        .buffer_count(64)
        .recv_sharing(RecvSharing::PerPeer)
        .recv_depth(8)
        .lock_pool(false)
        .build()
        .unwrap();
    let a: Vec<u8> = (0..a_len).map(byte).collect();
    let (soft, hard) = rlimit::getrlimit(rlimit::Resource::AS).expect("RLIMIT_AS");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let sync = Barrier::new(3);
        let out = run_ranks(3, &cfg, |comm| -> Result<(), String> {
            let e = |e: Error| e.to_string();
            match comm.rank() {
                0 => {
                    comm.send(1, 1, b"hello").map_err(e)?;
                    sync.wait();
                    let req = comm.isend(1, 3, &a).map_err(e)?;
                    // One round: A's first chunks, as many as the credits allow.
                    if comm.test(&req).map_err(e)? {
                        return Err("A went whole: its chunks outnumber the credits".into());
                    }
                    sync.wait();
                    sync.wait();
                    sync.wait();
                    comm.wait(req).map_err(e)?;
                    comm.send(1, 3, b"after").map_err(e)?;
                }
                2 => {
                    comm.send(1, 1, b"hello").map_err(e)?;
                    sync.wait();
                    sync.wait();
                    let req = comm.isend(1, 4, &vec![7u8; BIG]).map_err(e)?;
                    comm.test(&req).map_err(e)?;
                    sync.wait();
                    sync.wait();
                    comm.wait(req).map_err(e)?;
                }
                _ => {
                    comm.recv(0, 1).map_err(e)?;
                    comm.recv(2, 1).map_err(e)?;
                    sync.wait();
                    sync.wait();
                    let mut buf = vec![0u8; a_len];
                    sync.wait();
                    let limit = vm_size() + (128 << 20);
                    rlimit::setrlimit(rlimit::Resource::AS, limit, hard).map_err(|e| e.to_string())?;
                    let failed = match case {
                        Case::Recv => comm.recv(0, 3).map(|m| m.data.len()),
                        _ => comm
                            .recv_into(0, 3, &mut buf)
                            .map(|r| r.map_or_else(|e| e.len, |e| e.len)),
                    };
                    rlimit::setrlimit(rlimit::Resource::AS, soft, hard).map_err(|e| e.to_string())?;
                    drop(buf);
                    // B's refusal; or, when A's copy out of the buffer is refused too,
                    // that one, naming A and saying it is dropped.
                    let (refused, dropped) = match case {
                        Case::IntoDropped => (a_len as u64, true),
                        _ => (BIG as u64, false),
                    };
                    let verdict = match &failed {
                        Err(Error::Alloc { bytes, what, .. })
                            if *bytes == refused && what.contains("dropped") == dropped =>
                        {
                            Ok(())
                        }
                        Err(other) => Err(format!("the receive under the limit: {other}")),
                        Ok(n) => Err(format!("the receive under the limit got {n} bytes")),
                    };
                    // Past the others' last wait first: a failure ends the run, not hangs it.
                    sync.wait();
                    verdict?;
                    let got = receive(comm, case, a_len).map_err(e)?;
                    if let Case::IntoDropped = case {
                        if got != b"after" {
                            return Err(format!("after A was dropped: {} bytes, not `after`", got.len()));
                        }
                    } else {
                        if got.len() != a_len || got.iter().enumerate().any(|(i, &b)| b != byte(i)) {
                            return Err(format!("{} bytes, not A ({a_len} bytes)", got.len()));
                        }
                        let after = receive(comm, case, a_len).map_err(e)?;
                        if after != b"after" {
                            return Err(format!("then {} bytes, not `after`", after.len()));
                        }
                    }
                    let b = comm.recv(2, 4).map_err(e)?;
                    if b.data.len() != BIG || b.data[0] != 7 || b.data[BIG - 1] != 7 {
                        return Err(format!("B: {} bytes", b.data.len()));
                    }
                }
            }
            Ok(())
        });
        let _ = tx.send(out.map_err(|e| e.to_string()));
    });
    let out = rx
        .recv_timeout(Duration::from_secs(120))
        .unwrap_or_else(|_| panic!("{case:?}: the run hung (120 s)"))
        .expect("run_ranks");
    for (rank, r) in out.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("{case:?}: rank {rank}: {e}"));
    }
}

#[test]
fn a_message_bound_to_a_failed_receive_goes_to_the_next_one() {
    for case in [Case::Into, Case::Recv, Case::IntoDropped] {
        run(case);
    }
}
