//! The proxy simulation over the verbs transport with the ranks as threads of this process
//! (what `ballast run --transport verbs --ranks N` does without a launcher): the same spikes
//! as the local transport, the peers the balancer predicts, and the transport footprint
//! within 10% of the prediction, both as Ballast accounts it per rank and as the kernel
//! counts pinned memory (VmPin) for the process.
//!
//! Compiled with the `verbs` feature only. Without an RDMA device (a host without
//! soft-RoCE) the test prints why and passes; ci/verbs_run.sh runs this binary in the
//! soft-RoCE guest with `BALLAST_TEST_REQUIRE_RDMA=1`, where a missing device fails.
#![cfg(feature = "verbs")]

use ballast_balancer::synthetic::{CircuitSpec, SyntheticSpec};
use ballast_runtime::{verbs, RecvSharing, RuntimeConfig, TransportKind};
use ballast_sim::place;
use ballast_sim::{
    all_spikes, exchange::ExchangeKind, launch::run_local, launch::run_verbs_threads, LbMode, SimInput,
    SimParams,
};
use ballast_sim::{report::out_dat, report::process_rows, report::rows, report::FOOTPRINT_TOLERANCE_PCT};

/// True when an RDMA device is there; otherwise prints why the test skips (or panics when
/// `BALLAST_TEST_REQUIRE_RDMA=1`).
fn rdma_device() -> bool {
    let why = match verbs::device::device_names() {
        Ok(d) if !d.is_empty() => return true,
        Ok(_) => "no RDMA device".to_string(),
        Err(e) => e.to_string(),
    };
    if std::env::var("BALLAST_TEST_REQUIRE_RDMA").as_deref() == Ok("1") {
        panic!("BALLAST_TEST_REQUIRE_RDMA=1 but {why}");
    }
    println!("SKIPPED: {why} (ci/verbs_run.sh runs this test in the soft-RoCE guest)");
    false
}

#[test]
fn verbs_threads_give_the_local_spikes_and_the_predicted_footprint() {
    if !rdma_device() {
        return;
    }
    let spec = CircuitSpec {
        dry_run: SyntheticSpec {
            cells: 600,
            metypes: 20,
            populations: 2,
            seed: 3,
        },
        synapses: 600 * 150,
        ..CircuitSpec::default()
    };
    let input = SimInput::synthetic(&spec).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let net = &input.circuit.network;
    let offsets = &net.offsets;
    let params = |exchange| SimParams {
        tstop_ms: 50.0,
        exchange,
        memory_scale: 0.001,
        ..SimParams::default()
    };

    let one = place(LbMode::RoundRobin, &input.dry_run, offsets, 1, dir.path()).unwrap();
    let local = run_local(
        &input.circuit,
        &one.rank_of,
        1,
        &RuntimeConfig::default(),
        &params(ExchangeKind::P2p),
        None,
    )
    .unwrap();
    let reference = out_dat(&all_spikes(&local), 0.025);
    let spikes = reference.lines().count() - 1;
    assert!(spikes > 30, "{spikes} spikes");

    let ranks = 3usize;
    for (mode, exchange, sharing) in [
        (LbMode::RoundRobin, ExchangeKind::P2p, RecvSharing::Shared),
        (LbMode::Memory, ExchangeKind::Allgather, RecvSharing::Shared),
        (LbMode::Memory, ExchangeKind::P2p, RecvSharing::PerPeer),
    ] {
        let what = format!("{mode}, {exchange}, {sharing}");
        let cfg = RuntimeConfig::builder()
            .transport(TransportKind::Verbs)
            .recv_sharing(sharing)
            .build()
            .unwrap();
        let p = place(mode, &input.dry_run, offsets, ranks as u32, dir.path()).unwrap();
        let outs =
            run_verbs_threads(&input.circuit, &p.rank_of, ranks, &cfg, &params(exchange), None).unwrap();
        assert_eq!(outs.len(), ranks);
        assert_eq!(
            out_dat(&all_spikes(&outs), 0.025),
            reference,
            "{what}: spikes differ from the local run"
        );

        let sets = net.peers(&p.rank_of, ranks);
        let peers: Vec<usize> = (0..ranks).map(|r| sets.count(r)).collect();
        let peer_nodes = vec![0; ranks];
        for r in rows(&outs, &peers, &peer_nodes, cfg.transport()) {
            if exchange == ExchangeKind::P2p {
                assert_eq!(
                    r.peers_connected, r.peers_predicted as u64,
                    "{what}: rank {}",
                    r.rank
                );
            }
            assert!(r.footprint_predicted_bytes > 0);
            assert!(
                r.footprint_diff_pct.abs() <= FOOTPRINT_TOLERANCE_PCT,
                "{what}: rank {}: {r:?}",
                r.rank
            );
            println!(
                "{what}: rank {} footprint predicted {} B, accounted {} B ({:+.1}%)",
                r.rank, r.footprint_predicted_bytes, r.footprint_measured_bytes, r.footprint_diff_pct
            );
        }
        let procs = process_rows(&outs, &peers, &peer_nodes, cfg.transport());
        assert_eq!(procs.len(), 1, "{what}: all ranks are threads of this process");
        let p0 = &procs[0];
        assert_eq!(p0.ranks, (0..ranks).collect::<Vec<_>>());
        // Registration really pins: the kernel's count grows by about what the model predicts.
        assert!(p0.pinned_delta_bytes > 0, "{what}: {p0:?}");
        let diff = p0.pinned_diff_pct.expect("verbs registrations pin: compared");
        assert!(diff.abs() <= FOOTPRINT_TOLERANCE_PCT, "{what}: {p0:?}");
        assert_eq!(p0.lock_status, "pinned (registration)");
        println!(
            "{what}: process registered predicted {} B, pinned (VmPin growth) {} B ({diff:+.1}%)",
            p0.registered_predicted_bytes, p0.pinned_delta_bytes
        );
    }
}
