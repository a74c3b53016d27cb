//! The case that hung under load (issue 33), for the stress runner `ci/stress_datagram.sh`:
//! `datagram_all_to_all` over 16 ranks (`max_endpoints 1`, the test drop model at 1 in 7)
//! in both symmetric receive modes, with the `recv_into` ping-pong of 1 MiB messages over
//! datagrams running beside it in the same process, as `local_datagram_drop` ran them. The
//! drop pattern's seed comes from `BALLAST_DATAGRAM_DROP_SEED` (printed; 0 = the default
//! pattern), so that a pattern that hung can be run again. One run of the
//! pair per process: the runner repeats it beside a CPU hog, each run with a timeout.
//! `STRESS_PING_PONG_KIB` sets the ping-pong's largest message (KiB, default 1024; the
//! runner's short run in ci/test.sh uses 64).

/// (max_endpoints, datagram_drop_every)
const OVERLAY: (usize, usize) = (1, 7);

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

#[test]
fn all_to_all_16_beside_a_1_mib_ping_pong() {
    set_datagram_overlay(Some(OVERLAY));
    datagram_drop_seed_from_env();
    let kib: usize = std::env::var("STRESS_PING_PONG_KIB").map_or(1024, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("STRESS_PING_PONG_KIB={v}: not a number of KiB"))
    });
    std::thread::scope(|s| {
        s.spawn(|| {
            for m in [RecvSharing::PerPeer, RecvSharing::Shared] {
                recv_into_ping_pong(&Local, m, 3, (kib << 10) + 3);
            }
        });
        for m in [RecvSharing::PerPeer, RecvSharing::Shared] {
            datagram_all_to_all(&Local, m, 16, OVERLAY.0, OVERLAY.1, 6);
        }
    });
}
