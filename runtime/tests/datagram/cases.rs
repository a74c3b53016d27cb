// The conformance suite over the datagram path of the in-process transport, included by
// the test binaries `local_datagram*.rs` (each sets its own `OVERLAY`: one per binary,
// since the overlay is process-wide).


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

/// The overlay, and the drop pattern's seed from `BALLAST_DATAGRAM_DROP_SEED` (printed when
/// set; 0, the default pattern, otherwise).
fn overlay() {
    set_datagram_overlay(Some(OVERLAY));
    datagram_drop_seed_from_env();
}

/// xrc has no datagram path (it falls back to evict, with a note): still conformant.
const MODES: [RecvSharing; 3] = [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc];

#[test]
fn ordering_per_peer_and_tag_all_modes() {
    overlay();
    for m in MODES {
        ordering_per_peer_and_tag(&Local, m);
    }
}

#[test]
fn any_source_any_tag_all_modes() {
    overlay();
    for m in MODES {
        any_source_any_tag(&Local, m);
    }
}

#[test]
fn message_sizes_all_modes() {
    overlay();
    for m in [RecvSharing::PerPeer, RecvSharing::Shared] {
        message_sizes_with_checksums(&Local, m);
    }
}

#[test]
fn recv_into_ping_pong_all_modes() {
    overlay();
    for m in MODES {
        // 64 KiB at most: 1 MiB in 976 B datagrams with drops would weigh on the tests beside it.
        recv_into_ping_pong(&Local, m, 3, (64 << 10) + 3);
    }
}

#[test]
fn back_pressure_pool_of_two_all_modes() {
    overlay();
    for m in MODES {
        back_pressure_pool_of_two(&Local, m);
    }
}

#[test]
fn all_to_all_cap_below_peers_all_modes() {
    overlay();
    for m in MODES {
        all_to_all_with_a_cap_below_the_peers(&Local, m);
    }
}

#[test]
fn many_to_one_srq4_shared() {
    overlay();
    many_to_one_srq4(&Local, RecvSharing::Shared);
}

#[test]
fn collectives_all_modes() {
    overlay();
    for m in MODES {
        collectives(&Local, m);
    }
}

#[test]
fn large_messages_in_order_with_small_ones_all_modes() {
    overlay();
    for m in [RecvSharing::PerPeer, RecvSharing::Shared] {
        large_messages_in_order_with_small_ones(&Local, m);
    }
}

#[test]
fn any_source_with_large_messages_shared() {
    overlay();
    any_source_with_large_messages(&Local, RecvSharing::Shared);
}

#[test]
fn datagram_all_to_all_16_all_modes() {
    overlay();
    for m in [RecvSharing::PerPeer, RecvSharing::Shared] {
        datagram_all_to_all(&Local, m, 16, OVERLAY.0, OVERLAY.1, 6);
    }
}

#[test]
fn datagram_all_to_all_64_cap_4() {
    overlay();
    datagram_all_to_all(&Local, RecvSharing::Shared, 64, 4, OVERLAY.1, 3);
}

#[test]
fn datagram_footprint_equals_model() {
    overlay();
    for m in [RecvSharing::PerPeer, RecvSharing::Shared] {
        datagram_footprint_matches_model(&Local, m, OVERLAY.1);
    }
}

#[test]
fn datagram_fanout_256_cap_8() {
    overlay();
    datagram_fanout(&Local, 256, 8, OVERLAY.1);
}

#[test]
fn datagram_promotion_of_the_most_active_peer() {
    overlay();
    for m in [RecvSharing::PerPeer, RecvSharing::Shared] {
        datagram_promotion(&Local, m, OVERLAY.1);
    }
}
