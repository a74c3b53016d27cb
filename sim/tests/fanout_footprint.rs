//! The fanout scenario with 256 ranks (rank 0 sends 10 integers to every other rank),
//! checked against the footprint model and the process' own /proc/self/status.
//!
//! Runs in its own test binary (own process) and sequentially, so that the process
//! counters see only this scenario.
//!
//! Slack: the process' counters may move by at most 110% of the predicted growth plus a
//! documented slack of `SLACK_KB` (8 MiB: allocator arenas and the 256 rank threads'
//! heap state the model does not charge: glibc arena heap growth, hash-table growth,
//! message vectors, queue blocks; 3 to 7 MiB were seen over six runs of the per-peer case) plus one 4 KiB page per receive region created during the measurement
//! (regions are heap allocations that are not page-aligned, so zeroing and mlock touch
//! one page more than their length).

use ballast_runtime::{RecvSharing, RuntimeConfig};
use ballast_sim::{fanout::run_local, fanout::FanoutReport};

const RANKS: usize = 256;
const SLACK_KB: u64 = 8192;

fn config(sharing: RecvSharing) -> RuntimeConfig {
    RuntimeConfig::builder()
        .recv_sharing(sharing)
        .buffer_count(16)
        .buffer_size(4096)
        .recv_depth(4)
        .srq_depth(16)
        .lock_pool(true)
        .build()
        .unwrap()
}

fn locked(r: &FanoutReport) -> bool {
    r.before.footprint.locked_bytes == r.before.footprint.registered_bytes
}

fn check_common(r: &FanoutReport, what: &str) {
    println!("{what}: {r:#?}");
    assert!(
        r.all_ranks_match_model,
        "{what}: accounted != predicted on some rank"
    );
    assert_eq!(r.after.footprint.peers_connected, 255);
    assert_eq!(r.after.footprint.endpoints_live, 255);
    assert_eq!(
        r.after.footprint,
        Footprint0::with_locked(r.predicted, r.after.footprint.locked_bytes)
    );
    let grow_pred_kb = r
        .after
        .world_predicted_bytes
        .saturating_sub(r.before.world_predicted_bytes)
        / 1024;
    let rss_kb = r.after.status.vm_rss_kb.saturating_sub(r.before.status.vm_rss_kb);
    let data_kb = r
        .after
        .status
        .vm_data_kb
        .saturating_sub(r.before.status.vm_data_kb);
    let new_regions = if r.after.footprint.srq_bytes == 0 {
        2 * (r.after.footprint.endpoints_live - r.before.footprint.endpoints_live)
    } else {
        0
    };
    let bound = grow_pred_kb + grow_pred_kb / 10 + SLACK_KB + 4 * new_regions;
    assert!(rss_kb <= bound, "{what}: VmRSS grew {rss_kb} KiB > {bound} KiB");
    assert!(
        data_kb <= bound,
        "{what}: VmData grew {data_kb} KiB > {bound} KiB"
    );
    // The lock outcome of every rank: what it accounts as locked is what the kernel counts
    // (page-aligned regions, nothing else of this process locks), and a refusal is a note.
    let l = r.memory_lock;
    assert_eq!(
        r.after.status.vm_lck_kb * 1024,
        l.locked_bytes,
        "{what}: VmLck against {l:?}"
    );
    assert!(l.asked_bytes >= l.locked_bytes && l.requests > 0, "{what}: {l:?}");
    if l.refused == 0 {
        assert_eq!(
            (l.asked_bytes, r.notes.len()),
            (l.locked_bytes, 0),
            "{what}: {:?}",
            r.notes
        );
    } else {
        let want = format!("asked to lock {} B", l.asked_bytes);
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains(&want) && n.contains("RLIMIT_MEMLOCK")),
            "{what}: {:?}",
            r.notes
        );
    }
}

struct Footprint0;
impl Footprint0 {
    fn with_locked(mut f: ballast_runtime::Footprint, locked: u64) -> ballast_runtime::Footprint {
        f.locked_bytes = locked;
        f
    }
}

#[test]
fn fanout_256_shared_then_per_peer() {
    // shared: at most 1 KiB per connected peer, VmLck unchanged after the pool is locked.
    let r = run_local(RANKS, &config(RecvSharing::Shared), 1, 10, None).unwrap();
    check_common(&r, "shared");
    let b = r.before.footprint;
    let a = r.after.footprint;
    let new_peers = a.peers_connected - b.peers_connected;
    assert!(new_peers >= 200);
    let per_peer = (a.total_bytes() - b.total_bytes()) / new_peers;
    assert!(per_peer <= 1024, "shared: {per_peer} B per peer");
    if locked(&r) {
        assert_eq!(
            r.after.status.vm_lck_kb, r.before.status.vm_lck_kb,
            "shared: VmLck moved"
        );
        assert!(
            r.before.status.vm_lck_kb * 1024 >= 256 * (16 + 16) * 4096,
            "pools and SRQs of 256 ranks are locked"
        );
    } else {
        println!("shared: memory not locked: {:?}", r.notes);
    }

    // per-peer: each new peer costs recv_depth x buffer_size (+ WQE slots and endpoint).
    let r = run_local(RANKS, &config(RecvSharing::PerPeer), 1, 10, None).unwrap();
    check_common(&r, "per-peer");
    let b = r.before.footprint;
    let a = r.after.footprint;
    let new_peers = a.peers_connected - b.peers_connected;
    let per_peer = (a.total_bytes() - b.total_bytes()) / new_peers;
    assert!(
        (4 * 4096..4 * 4096 + 1024).contains(&per_peer),
        "per-peer: {per_peer} B per peer"
    );
    assert_eq!(a.registered_bytes - b.registered_bytes, new_peers * 4 * 4096);
    if locked(&r) {
        // Both sides of every new endpoint lock their receive queue.
        let pred_kb = (r.after.world_predicted_bytes - r.before.world_predicted_bytes) / 1024;
        let lck_kb = r.after.status.vm_lck_kb - r.before.status.vm_lck_kb;
        let recv_kb = 2 * new_peers * 4 * 4096 / 1024;
        assert!(
            lck_kb >= recv_kb * 9 / 10,
            "per-peer: VmLck grew {lck_kb} KiB < 90% of {recv_kb} KiB"
        );
        assert!(
            lck_kb <= pred_kb + pred_kb / 10 + SLACK_KB + 4 * 2 * new_peers,
            "per-peer: VmLck grew {lck_kb} KiB"
        );
    } else {
        println!("per-peer: memory not locked: {:?}", r.notes);
    }
}
