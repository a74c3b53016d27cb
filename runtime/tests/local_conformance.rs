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

threaded_cases!(Local);

#[test]
fn footprint_equals_model_all_modes() {
    for m in MODES {
        footprint_matches_model(&Local, m, true);
        footprint_matches_model(&Local, m, false);
    }
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
