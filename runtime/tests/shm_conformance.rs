//! The conformance suite instantiated for the shared-memory transport, its ranks as threads
//! of this process (`ballast_runtime::shm::run_ranks`), each with its own segment and
//! socket: the rings, bells, descriptor passing and board of the real fabric.

mod conformance;

use ballast_runtime::{shm, Communicator, RecvSharing, Result, RuntimeConfig};
use conformance::*;

struct Shm;

impl Launcher for Shm {
    fn name(&self) -> &'static str {
        "shm"
    }
    fn run<R: Send + Exchange, F: Fn(&mut Communicator) -> R + Sync>(
        &self,
        n: usize,
        cfg: &RuntimeConfig,
        f: F,
    ) -> Result<Vec<R>> {
        shm::run_ranks(n, cfg, f)
    }
}

const MODES: [RecvSharing; 3] = [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc];

#[test]
fn ordering_per_peer_and_tag_all_modes() {
    for m in MODES {
        ordering_per_peer_and_tag(&Shm, m);
    }
}

#[test]
fn any_source_any_tag_all_modes() {
    for m in MODES {
        any_source_any_tag(&Shm, m);
    }
}

#[test]
fn try_recv_waits_for_whole_message() {
    try_recv_and_test(&Shm);
}

#[test]
fn probe_then_take_shm() {
    probe_then_take(&Shm);
}

#[test]
fn cancel_and_irecv_within_shm() {
    cancel_and_irecv_within(&Shm);
}

#[test]
fn refused_behind_posted_receives_shm() {
    refused_behind_posted_receives(&Shm);
}

#[test]
fn recv_within_leaves_long_messages_shm() {
    recv_within_leaves_long_messages(&Shm);
}

#[test]
fn recv_into_fills_the_buffer_shm() {
    recv_into_fills_the_buffer(&Shm);
}

#[test]
fn refused_message_keeps_its_senders_order_shm() {
    refused_message_keeps_its_senders_order(&Shm);
}

#[test]
fn refused_large_message_before_later_ones_shm() {
    refused_large_message_before_later_ones(&Shm);
}

#[test]
fn recv_into_large_pairs_in_order_shm() {
    recv_into_large_pairs_in_order(&Shm);
}

#[test]
fn recv_into_ping_pong_all_modes() {
    for m in [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc] {
        recv_into_ping_pong(&Shm, m, 1, (1 << 20) + 3);
    }
}

#[test]
fn message_sizes_shared() {
    message_sizes_with_checksums(&Shm, RecvSharing::Shared);
}

#[test]
fn message_sizes_per_peer() {
    message_sizes_with_checksums(&Shm, RecvSharing::PerPeer);
}

#[test]
fn chunked_send_then_retried_smalls_shm() {
    chunked_send_then_retried_smalls(&Shm, 1, 16 << 10, 1);
    chunked_send_then_retried_smalls(&Shm, 64, 1 << 20, 64);
}

#[test]
fn back_pressure_pool_of_two_all_modes() {
    for m in MODES {
        back_pressure_pool_of_two(&Shm, m);
    }
}

#[test]
fn pool_growth_bounded() {
    pool_growth_is_bounded(&Shm);
}

#[test]
fn eviction_two_endpoints_all_modes() {
    for m in MODES {
        eviction_with_two_endpoints(&Shm, m);
    }
}

#[test]
fn all_to_all_cap_below_peers_all_modes() {
    for m in MODES {
        all_to_all_with_a_cap_below_the_peers(&Shm, m);
    }
}

#[test]
fn all_to_all_64_shared() {
    all_to_all_64(&Shm, RecvSharing::Shared);
}

#[test]
fn all_to_all_64_per_peer() {
    all_to_all_64(&Shm, RecvSharing::PerPeer);
}

#[test]
fn many_to_one_srq4_shared() {
    many_to_one_srq4(&Shm, RecvSharing::Shared);
}

#[test]
fn many_to_one_srq4_xrc() {
    many_to_one_srq4(&Shm, RecvSharing::Xrc);
}

#[test]
fn collectives_all_modes() {
    for m in MODES {
        collectives(&Shm, m);
    }
}

#[test]
fn mismatched_collectives_shm() {
    // Before the collectives' stamps this hung: a watchdog fails the binary instead.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let waited = rx.recv_timeout(std::time::Duration::from_secs(60));
        if waited == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            eprintln!("mismatched_collectives_shm: hung for 60 s");
            std::process::exit(1);
        }
    });
    mismatched_collectives(&Shm);
    tx.send(()).unwrap();
}

#[test]
fn bad_input() {
    bad_input_is_an_error(&Shm);
}

#[test]
fn large_messages_in_order_with_small_ones_all_modes() {
    for m in [RecvSharing::PerPeer, RecvSharing::Shared] {
        large_messages_in_order_with_small_ones(&Shm, m);
    }
}

#[test]
fn large_send_completes_before_its_receive_is_posted_all_modes() {
    for m in [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc] {
        large_send_completes_before_its_receive_is_posted(&Shm, m);
    }
}

#[test]
fn both_sides_send_large_first_shared() {
    both_sides_send_large_first(&Shm, RecvSharing::Shared);
}

#[test]
fn any_source_with_large_messages_shared() {
    any_source_with_large_messages(&Shm, RecvSharing::Shared);
}

/// The footprint of every rank equals `predict` for shm (the segment charged whole, the
/// endpoints the engine opened), in each mode, lazy or not, with and without the lock.
#[test]
fn footprint_equals_the_shm_model() {
    use ballast_runtime::{Source, TagMatch, TransportKind};
    for sharing in MODES {
        for lazy in [true, false] {
            let c = RuntimeConfig::builder()
                .recv_sharing(sharing)
                .lock_pool(false)
                .lazy_connect(lazy)
                .buffer_size(1024)
                .buffer_count(8)
                .recv_depth(3)
                .srq_depth(8)
                .build()
                .unwrap();
            let res = shm::run_ranks(6, &c, |comm| -> Result<_> {
                let me = comm.rank();
                if me == 0 {
                    for p in 1..comm.world_size() {
                        comm.send(p, 1, &[0u8; 10])?;
                    }
                } else {
                    comm.recv(0, 1u32)?;
                }
                comm.send((me + 1) % comm.world_size(), 2, &[1u8; 10])?;
                comm.recv(Source::Any, TagMatch::Tag(2))?;
                comm.barrier()?;
                let t = *comm.config();
                assert_eq!(t.kind, TransportKind::Shm);
                let f = comm.footprint();
                Ok((
                    f,
                    t.predict(f.peers_connected as usize, comm.world_size(), t.ranks_per_node),
                ))
            })
            .unwrap();
            for (rank, r) in res.into_iter().enumerate() {
                let (f, p) = r.unwrap();
                assert_eq!(f, p, "rank {rank} mode {sharing} lazy {lazy}");
            }
        }
    }
}
