//! The conformance suite instantiated for the in-process transport.

mod conformance;

use ballast_runtime::{launch::threads, Communicator, RecvSharing, Result, RuntimeConfig};
use conformance::*;

struct Local;

impl Launcher for Local {
    fn name(&self) -> &'static str {
        "local"
    }
    fn run<R: Send + Exchange, F: Fn(&mut Communicator) -> R + Sync>(
        &self,
        n: usize,
        cfg: &RuntimeConfig,
        f: F,
    ) -> Result<Vec<R>> {
        threads::run_ranks(n, cfg, f)
    }
}

const MODES: [RecvSharing; 3] = [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc];

#[test]
fn ordering_per_peer_and_tag_all_modes() {
    for m in MODES {
        ordering_per_peer_and_tag(&Local, m);
    }
}

#[test]
fn any_source_any_tag_all_modes() {
    for m in MODES {
        any_source_any_tag(&Local, m);
    }
}

#[test]
fn try_recv_waits_for_whole_message() {
    try_recv_and_test(&Local);
}

#[test]
fn probe_then_take_local() {
    probe_then_take(&Local);
}

#[test]
fn cancel_and_irecv_within_local() {
    cancel_and_irecv_within(&Local);
}

#[test]
fn refused_behind_posted_receives_local() {
    refused_behind_posted_receives(&Local);
}

#[test]
fn recv_within_leaves_long_messages_local() {
    recv_within_leaves_long_messages(&Local);
}

#[test]
fn recv_into_fills_the_buffer_local() {
    recv_into_fills_the_buffer(&Local);
}

#[test]
fn refused_message_keeps_its_senders_order_local() {
    refused_message_keeps_its_senders_order(&Local);
}

#[test]
fn refused_large_message_before_later_ones_local() {
    refused_large_message_before_later_ones(&Local);
}

#[test]
fn recv_into_large_pairs_in_order_local() {
    recv_into_large_pairs_in_order(&Local);
}

#[test]
fn recv_into_ping_pong_all_modes() {
    for m in [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc] {
        recv_into_ping_pong(&Local, m, 1, (1 << 20) + 3);
    }
}

#[test]
fn message_sizes_shared() {
    message_sizes_with_checksums(&Local, RecvSharing::Shared);
}

#[test]
fn message_sizes_per_peer() {
    message_sizes_with_checksums(&Local, RecvSharing::PerPeer);
}

#[test]
fn chunked_send_then_retried_smalls_local() {
    chunked_send_then_retried_smalls(&Local, 1, 16 << 10, 1);
    chunked_send_then_retried_smalls(&Local, 64, 1 << 20, 64);
}

#[test]
fn back_pressure_pool_of_two_all_modes() {
    for m in MODES {
        back_pressure_pool_of_two(&Local, m);
    }
}

#[test]
fn pool_growth_bounded() {
    pool_growth_is_bounded(&Local);
}

#[test]
fn eviction_two_endpoints_all_modes() {
    for m in MODES {
        eviction_with_two_endpoints(&Local, m);
    }
}

#[test]
fn all_to_all_cap_below_peers_all_modes() {
    for m in MODES {
        all_to_all_with_a_cap_below_the_peers(&Local, m);
    }
}

#[test]
fn all_to_all_64_shared() {
    all_to_all_64(&Local, RecvSharing::Shared);
}

#[test]
fn all_to_all_64_per_peer() {
    all_to_all_64(&Local, RecvSharing::PerPeer);
}

#[test]
fn many_to_one_srq4_shared() {
    many_to_one_srq4(&Local, RecvSharing::Shared);
}

#[test]
fn many_to_one_srq4_xrc() {
    many_to_one_srq4(&Local, RecvSharing::Xrc);
}

#[test]
fn collectives_all_modes() {
    for m in MODES {
        collectives(&Local, m);
    }
}

#[test]
fn mismatched_collectives_local() {
    // Before the collectives' stamps this hung: a watchdog fails the binary instead.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let waited = rx.recv_timeout(std::time::Duration::from_secs(60));
        if waited == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            eprintln!("mismatched_collectives_local: hung for 60 s");
            std::process::exit(1);
        }
    });
    mismatched_collectives(&Local);
    tx.send(()).unwrap();
}

#[test]
fn bad_input() {
    bad_input_is_an_error(&Local);
}

#[test]
fn footprint_equals_model_all_modes() {
    for m in MODES {
        footprint_matches_model(&Local, m, true);
        footprint_matches_model(&Local, m, false);
    }
}

#[test]
fn large_messages_in_order_with_small_ones_all_modes() {
    for m in [RecvSharing::PerPeer, RecvSharing::Shared] {
        large_messages_in_order_with_small_ones(&Local, m);
    }
}

#[test]
fn large_send_completes_before_its_receive_is_posted_all_modes() {
    for m in [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc] {
        large_send_completes_before_its_receive_is_posted(&Local, m);
    }
}

#[test]
fn both_sides_send_large_first_shared() {
    both_sides_send_large_first(&Local, RecvSharing::Shared);
}

#[test]
fn any_source_with_large_messages_shared() {
    any_source_with_large_messages(&Local, RecvSharing::Shared);
}

/// `endpoint_overflow=datagram` where the datagram path cannot run (xrc: endpoints per
/// node; buffers too small for the header) falls back to evict with a note; without a cap
/// it does not run and says nothing.
#[test]
fn datagram_fallbacks_say_why() {
    let run = |sharing: RecvSharing, cap: usize, buffer: usize| {
        let c = RuntimeConfig::builder()
            .recv_sharing(sharing)
            .lock_pool(false)
            .max_endpoints(cap)
            .buffer_size(buffer)
            .build()
            .unwrap();
        threads::run_ranks(2, &c, |comm| -> Result<(Vec<String>, bool, String)> {
            Ok((
                comm.notes().to_vec(),
                comm.datagram_stats().is_some(),
                comm.config().endpoint_overflow.to_string(),
            ))
        })
        .unwrap()
        .remove(0)
        .unwrap()
    };
    let (notes, on, mode) = run(RecvSharing::Xrc, 1, 1024);
    assert!(!on && mode == "evict", "{notes:?}");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("runs recv_sharing=xrc")
                && n.contains("falling back to endpoint_overflow=evict")),
        "{notes:?}"
    );
    let (notes, on, _) = run(RecvSharing::Shared, 1, 32);
    assert!(
        !on && notes.iter().any(|n| n.contains("fits 32 B per datagram")),
        "{notes:?}"
    );
    let (notes, on, mode) = run(RecvSharing::Shared, 1, 1024);
    assert!(on && mode == "datagram" && notes.is_empty(), "{notes:?}");
    let (notes, on, _) = run(RecvSharing::Shared, 0, 1024);
    assert!(!on && notes.is_empty(), "no cap: {notes:?}");
}
