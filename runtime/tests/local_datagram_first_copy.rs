//! A large message copied for an endpoint, then sent by datagram, under an address-space
//! limit (issue 33: a library never kills its host), on `local`: rank 0 `isend`s 256 MiB to
//! rank 1 before it knows rank 1 is full (its first chunk copied into a whole pool buffer
//! for an endpoint, the rest into a copy of its own); then the limit (RLIMIT_AS, set here:
//! this test binary holds this one test, as the limit is the process') leaves 128 MiB, and
//! rank 1 refuses rank 0's connect request, so the message goes by datagram. Before the
//! fix the first datagram gave the first buffer's bytes past one datagram back to the
//! rest by `Vec::splice`, which reallocated the whole rest (doubling it): the process
//! aborted ("memory allocation of 534773760 bytes failed"). Now it is sent; rank 1's
//! receive under the limit is `Error::Alloc`, and once the limit is lifted rank 1 gets the
//! 256 MiB intact, then the 5-byte message sent after it.

use std::sync::{mpsc, Barrier};
use std::time::Duration;

use ballast_runtime::launch::threads::run_ranks;
use ballast_runtime::{EndpointOverflow, Error, ProcStatus, RuntimeConfig};

const BIG: usize = 256 << 20;

/// The process' address space now (`VmSize`, read by the runtime's [`ProcStatus`]), bytes.
fn vm_size() -> u64 {
    ProcStatus::read_self().expect("/proc/self/status").vm_size_kb << 10
}

fn byte(i: usize) -> u8 {
    (i % 251) as u8
}

#[test]
fn a_message_copied_for_an_endpoint_then_sent_by_datagram_does_not_abort() {
    let cfg = RuntimeConfig::builder()
        .buffer_size(1 << 20)
        .buffer_count(64)
        .lock_pool(false)
        .max_endpoints(1)
        .endpoint_overflow(EndpointOverflow::Datagram)
        .build()
        .unwrap();
    let data: Vec<u8> = (0..BIG).map(byte).collect();
    let (soft, hard) = rlimit::getrlimit(rlimit::Resource::AS).expect("RLIMIT_AS");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // Out of band (the ranks are threads): the limit is the process'.
        let sync = Barrier::new(3);
        let out = run_ranks(3, &cfg, |comm| -> Result<(), String> {
            let e = |e: Error| e.to_string();
            match comm.rank() {
                // Rank 2 takes rank 1's only endpoint.
                2 => {
                    comm.send(1, 1, b"first").map_err(e)?;
                    sync.wait();
                    sync.wait();
                    comm.recv(1, 9).map_err(e)?;
                }
                1 => {
                    comm.recv(2, 1).map_err(e)?;
                    sync.wait();
                    let limit = vm_size() + (128 << 20);
                    rlimit::setrlimit(rlimit::Resource::AS, limit, hard).map_err(|e| e.to_string())?;
                    sync.wait();
                    let refused = comm.recv(0, 3);
                    rlimit::setrlimit(rlimit::Resource::AS, soft, hard).map_err(|e| e.to_string())?;
                    match refused {
                        Err(Error::Alloc(a)) if a.bytes == BIG as u64 => {}
                        Err(other) => return Err(format!("the receive under the limit: {other}")),
                        Ok(m) => {
                            return Err(format!("the receive under the limit got {} bytes", m.data.len()))
                        }
                    }
                    let m = comm.recv(0, 3).map_err(e)?;
                    if m.data.len() != BIG || m.data.iter().enumerate().any(|(i, &b)| b != byte(i)) {
                        return Err(format!("{} bytes, not the message sent", m.data.len()));
                    }
                    let after = comm.recv(0, 3).map_err(e)?;
                    if after.data != b"after" {
                        return Err(format!("then {:?}", after.data));
                    }
                    let stats = comm.datagram_stats().ok_or("no datagram path")?;
                    if stats.acks == 0 {
                        return Err("no datagram acknowledged: rank 0 was not a datagram peer".into());
                    }
                    comm.send(2, 9, b"done").map_err(e)?;
                }
                _ => {
                    // Rank 1 is full, but rank 0 does not know it yet: an endpoint's copy.
                    let big = comm.isend(1, 3, &data).map_err(e)?;
                    let after = comm.isend(1, 3, b"after").map_err(e)?;
                    sync.wait();
                    sync.wait();
                    comm.wait(big).map_err(e)?;
                    comm.wait(after).map_err(e)?;
                    let stats = comm.datagram_stats().ok_or("no datagram path")?;
                    if stats.sent < (BIG >> 20) as u64 {
                        return Err(format!("{} datagrams sent: not the datagram path", stats.sent));
                    }
                }
            }
            Ok(())
        });
        let _ = tx.send(out.map_err(|e| e.to_string()));
    });
    let out = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the run hung (120 s)")
        .expect("run_ranks");
    for (rank, r) in out.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
    }
}
