//! Transport conformance suite, written once and generic over a [`Launcher`]; each
//! transport instantiates it (`local_conformance.rs` for the in-process transport).
//! This file owns the [`Launcher`] trait and the shared helpers (payloads, checksums,
//! configuration); the cases are grouped by topic in `matching.rs` (order, any-source and
//! any-tag, message sizes), `completion.rs` (limited receives, cancel), `resources.rs` (back-pressure, pool growth, endpoint caps,
//! footprint), `scale.rs` (many ranks, collectives, bad input) and `large.rs` (messages
//! above the buffer size); `exchange.rs` carries results between processes.
#![allow(dead_code)]

use ballast_runtime::{Communicator, RecvSharing, Result, RuntimeConfig};

mod completion;
mod exchange;
mod large;
mod matching;
mod resources;
mod scale;

// Each test binary runs the groups its transport supports (verbs has no large-message
// cases), so a re-export may be unused in one of them.
#[allow(unused_imports)]
pub use {completion::*, exchange::*, large::*, matching::*, resources::*, scale::*};

/// Starts `n` ranks of one transport and runs `f` on each.
pub trait Launcher: Sync {
    /// Transport name (for messages).
    fn name(&self) -> &'static str;
    /// Runs `f` on `n` ranks; results by rank (on every process, for multi-process
    /// transports: hence [`Exchange`]).
    fn run<R: Send + Exchange, F: Fn(&mut Communicator) -> R + Sync>(
        &self,
        n: usize,
        cfg: &RuntimeConfig,
        f: F,
    ) -> Result<Vec<R>>;
}

/// FNV-1a 64-bit checksum.
pub fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Deterministic payload of `len` bytes depending on `seed` (xorshift).
pub fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn enc(a: u64, b: u64) -> Vec<u8> {
    let mut v = a.to_le_bytes().to_vec();
    v.extend_from_slice(&b.to_le_bytes());
    v
}

fn dec(d: &[u8]) -> (u64, u64) {
    (
        u64::from_le_bytes(d[0..8].try_into().unwrap()),
        u64::from_le_bytes(d[8..16].try_into().unwrap()),
    )
}

/// The datagram overlay of a test binary that runs the suite over the datagram path:
/// `(max_endpoints, datagram_drop_every)` applied by [`cfg`] to every case (a case that sets
/// its own cap overrides it). `None`: the suite's own settings. Process-wide: a binary
/// sets it for all its cases (local) or around a sequence of cases (MPI, one at a time).
pub static DATAGRAM_OVERLAY: std::sync::RwLock<Option<(usize, usize)>> = std::sync::RwLock::new(None);

/// Sets the [`DATAGRAM_OVERLAY`].
pub fn set_datagram_overlay(o: Option<(usize, usize)>) {
    *DATAGRAM_OVERLAY.write().unwrap() = o;
}

/// The seed of the test drop model's pattern (`datagram_drop_seed`) that [`cfg`] gives
/// every case: 0 (the default) is the drop model's default pattern.
pub static DATAGRAM_DROP_SEED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Sets the [`DATAGRAM_DROP_SEED`] from `BALLAST_DATAGRAM_DROP_SEED` (through the runtime's
/// own reading of the environment) and prints it when it is set, so that a failing
/// pattern can be run again; returns it.
pub fn datagram_drop_seed_from_env() -> u64 {
    let seed = RuntimeConfig::from_env()
        .expect("BALLAST_* variables")
        .transport()
        .datagram_drop_seed;
    if seed != 0 {
        println!("datagram drop pattern: BALLAST_DATAGRAM_DROP_SEED={seed}");
    }
    DATAGRAM_DROP_SEED.store(seed, std::sync::atomic::Ordering::Relaxed);
    seed
}

fn cfg(sharing: RecvSharing) -> ballast_runtime::RuntimeConfigBuilder {
    let b = RuntimeConfig::builder()
        .recv_sharing(sharing)
        .lock_pool(false)
        .datagram_drop_seed(DATAGRAM_DROP_SEED.load(std::sync::atomic::Ordering::Relaxed));
    match *DATAGRAM_OVERLAY.read().unwrap() {
        Some((cap, drop)) => b
            .max_endpoints(cap)
            .endpoint_overflow(ballast_runtime::EndpointOverflow::Datagram)
            .datagram_drop_every(drop),
        None => b,
    }
}

/// The cases every transport whose ranks run as threads of one process passes, as
/// `#[test]`s on launcher `$l` (`local_conformance.rs`, `shm_conformance.rs`):
/// `threaded_cases!(Local);` in a test crate that imports `conformance::*` and
/// `RecvSharing`.
#[allow(unused_macros)]
macro_rules! threaded_cases {
    ($l:expr) => {
        #[test]
        fn ordering_per_peer_and_tag_all_modes() {
            for m in [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc] {
                crate::conformance::ordering_per_peer_and_tag(&$l, m);
            }
        }

        #[test]
        fn any_source_any_tag_all_modes() {
            for m in [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc] {
                crate::conformance::any_source_any_tag(&$l, m);
            }
        }

        #[test]
        fn try_recv_waits_for_whole_message() {
            crate::conformance::try_recv_and_test(&$l);
        }

        #[test]
        fn probe_then_take() {
            crate::conformance::probe_then_take(&$l);
        }

        #[test]
        fn cancel_and_irecv_within() {
            crate::conformance::cancel_and_irecv_within(&$l);
        }

        #[test]
        fn refused_behind_posted_receives() {
            crate::conformance::refused_behind_posted_receives(&$l);
        }

        #[test]
        fn recv_within_leaves_long_messages() {
            crate::conformance::recv_within_leaves_long_messages(&$l);
        }

        #[test]
        fn recv_into_fills_the_buffer() {
            crate::conformance::recv_into_fills_the_buffer(&$l);
        }

        #[test]
        fn refused_message_keeps_its_senders_order() {
            crate::conformance::refused_message_keeps_its_senders_order(&$l);
        }

        #[test]
        fn refused_large_message_before_later_ones() {
            crate::conformance::refused_large_message_before_later_ones(&$l);
        }

        #[test]
        fn recv_into_large_pairs_in_order() {
            crate::conformance::recv_into_large_pairs_in_order(&$l);
        }

        #[test]
        fn recv_into_ping_pong_all_modes() {
            for m in [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc] {
                crate::conformance::recv_into_ping_pong(&$l, m, 1, (1 << 20) + 3);
            }
        }

        #[test]
        fn message_sizes_shared() {
            crate::conformance::message_sizes_with_checksums(&$l, RecvSharing::Shared);
        }

        #[test]
        fn message_sizes_per_peer() {
            crate::conformance::message_sizes_with_checksums(&$l, RecvSharing::PerPeer);
        }

        #[test]
        fn chunked_send_then_retried_smalls() {
            crate::conformance::chunked_send_then_retried_smalls(&$l, 1, 16 << 10, 1);
            crate::conformance::chunked_send_then_retried_smalls(&$l, 64, 1 << 20, 64);
        }

        #[test]
        fn back_pressure_pool_of_two_all_modes() {
            for m in [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc] {
                crate::conformance::back_pressure_pool_of_two(&$l, m);
            }
        }

        #[test]
        fn pool_growth_bounded() {
            crate::conformance::pool_growth_is_bounded(&$l);
        }

        #[test]
        fn eviction_two_endpoints_all_modes() {
            for m in [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc] {
                crate::conformance::eviction_with_two_endpoints(&$l, m);
            }
        }

        #[test]
        fn all_to_all_cap_below_peers_all_modes() {
            for m in [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc] {
                crate::conformance::all_to_all_with_a_cap_below_the_peers(&$l, m);
            }
        }

        #[test]
        fn all_to_all_64_shared() {
            crate::conformance::all_to_all_64(&$l, RecvSharing::Shared);
        }

        #[test]
        fn all_to_all_64_per_peer() {
            crate::conformance::all_to_all_64(&$l, RecvSharing::PerPeer);
        }

        #[test]
        fn many_to_one_srq4_shared() {
            crate::conformance::many_to_one_srq4(&$l, RecvSharing::Shared);
        }

        #[test]
        fn many_to_one_srq4_xrc() {
            crate::conformance::many_to_one_srq4(&$l, RecvSharing::Xrc);
        }

        #[test]
        fn collectives_all_modes() {
            for m in [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc] {
                crate::conformance::collectives(&$l, m);
            }
        }

        #[test]
        fn mismatched_collectives() {
            // Before the collectives' stamps this hung: a watchdog fails the binary instead.
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            std::thread::spawn(move || {
                let waited = rx.recv_timeout(std::time::Duration::from_secs(60));
                if waited == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                    eprintln!("mismatched_collectives: hung for 60 s");
                    std::process::exit(1);
                }
            });
            crate::conformance::mismatched_collectives(&$l);
            tx.send(()).unwrap();
        }

        #[test]
        fn bad_input() {
            crate::conformance::bad_input_is_an_error(&$l);
        }

        #[test]
        fn large_messages_in_order_with_small_ones_all_modes() {
            for m in [RecvSharing::PerPeer, RecvSharing::Shared] {
                crate::conformance::large_messages_in_order_with_small_ones(&$l, m);
            }
        }

        #[test]
        fn large_send_completes_before_its_receive_is_posted_all_modes() {
            for m in [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc] {
                crate::conformance::large_send_completes_before_its_receive_is_posted(&$l, m);
            }
        }

        #[test]
        fn both_sides_send_large_first_shared() {
            crate::conformance::both_sides_send_large_first(&$l, RecvSharing::Shared);
        }

        #[test]
        fn any_source_with_large_messages_shared() {
            crate::conformance::any_source_with_large_messages(&$l, RecvSharing::Shared);
        }
    };
}
#[allow(unused_imports)]
pub(crate) use threaded_cases;
