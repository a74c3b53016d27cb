//! A message over the datagram path whose memory is refused (issue 33: no fault loses
//! data), on `local`: rank 1's receive of 256 MiB from rank 0, a datagram peer, fails
//! with `Error::Alloc` under an address-space limit (RLIMIT_AS, set here: this test binary
//! holds this one test, as the limit is the process'); once the limit is lifted a later
//! receive takes the message whole, then the message sent after it. Two faults were in
//! the way: the acknowledgement owed when the delivery failed was never queued (nor for
//! any datagram after: the peer's `ack_due` stayed set), so rank 0's window stayed full and
//! the transfer hung (the run is given 120 s); and the engine's blocking `recv` left its
//! receive posted when its wait failed, so the 256 MiB message, once it fitted, bound to
//! that ended receive and was lost, and the next receive got the message sent after it.

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
fn a_datagram_message_refused_for_memory_is_received_once_it_fits() {
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
        // Out of band (the ranks are threads): rank 0's copy of the message is made before
        // rank 1 lowers the limit, which is the process'.
        let sync = Barrier::new(3);
        let out = run_ranks(3, &cfg, |comm| -> Result<(), String> {
            let e = |e: Error| e.to_string();
            match comm.rank() {
                // Rank 2 takes rank 1's only endpoint: rank 0 is a datagram peer of rank 1.
                2 => {
                    comm.send(1, 1, b"first").map_err(e)?;
                    sync.wait();
                    sync.wait();
                    sync.wait();
                    comm.recv(1, 9).map_err(e)?;
                }
                1 => {
                    comm.recv(2, 1).map_err(e)?;
                    sync.wait();
                    comm.recv(0, 2).map_err(e)?;
                    sync.wait();
                    sync.wait();
                    let limit = vm_size() + (128 << 20);
                    rlimit::setrlimit(rlimit::Resource::AS, limit, hard).map_err(|e| e.to_string())?;
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
                    // Refused an endpoint by rank 1 (full): a datagram peer from now on.
                    sync.wait();
                    comm.send(1, 2, b"hello").map_err(e)?;
                    sync.wait();
                    let big = comm.isend(1, 3, &data).map_err(e)?;
                    let after = comm.isend(1, 3, b"after").map_err(e)?;
                    sync.wait();
                    comm.wait(big).map_err(e)?;
                    comm.wait(after).map_err(e)?;
                }
            }
            Ok(())
        });
        let _ = tx.send(out.map_err(|e| e.to_string()));
    });
    let out = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the run hung: the refused datagram message never came (120 s)")
        .expect("run_ranks");
    for (rank, r) in out.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
    }
}
