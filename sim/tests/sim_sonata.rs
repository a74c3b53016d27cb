//! The proxy simulation on the shared SONATA circuit `allen-layer4_sample` (feature
//! `sonata`): with p2p, the peers each rank connects equal the balancer's prediction and
//! the measured transport footprint equals the predicted one exactly (local transport);
//! spikes are identical whatever the rank count and balancing mode.
#![cfg(feature = "sonata")]
mod common;

use ballast_balancer::circuit::MetypeMemory;
use ballast_balancer::transport_aware::{evaluate, CellCosts};
use ballast_runtime::{RecvSharing, RuntimeConfig};
use ballast_sim::place;
use ballast_sim::{all_spikes, exchange::ExchangeKind, launch::run_local, LbMode, SimInput, SimParams};
use ballast_sim::{report::out_dat, report::predicted_footprint};

#[test]
fn allen_layer4_peers_and_footprint_as_predicted_and_identical_spikes() {
    let Some(dir) = common::shared_data("sonata/allen-layer4_sample") else {
        return;
    };
    let memory = MetypeMemory {
        cell_kb: Some(3000.0),
        point_cell_kb: Some(40.0),
        ..Default::default()
    };
    let input = SimInput::sonata(&dir.join("circuit_config.json"), &memory, 2.0).unwrap();
    assert_eq!(input.circuit.cell_count(), 449);
    let work = tempfile::tempdir().unwrap();
    let params = SimParams {
        tstop_ms: 50.0,
        memory_scale: 0.001,
        exchange: ExchangeKind::P2p,
        ..SimParams::default()
    };
    let mut reference: Option<String> = None;
    for sharing in [RecvSharing::Shared, RecvSharing::PerPeer] {
        let cfg = RuntimeConfig::builder().recv_sharing(sharing).build().unwrap();
        for (mode, ranks) in [
            (LbMode::Memory, 3u32),
            (LbMode::Memory, 96),
            (LbMode::RoundRobin, 96),
            (LbMode::RoundRobin, 1),
        ] {
            let p = place(
                mode,
                &input.dry_run,
                &input.circuit.network.offsets,
                ranks,
                work.path(),
            )
            .unwrap();
            let outs = run_local(&input.circuit, &p.rank_of, ranks as usize, &cfg, &params, None).unwrap();
            // The balancer's prediction: transport_aware::evaluate charges exactly these peers.
            let costs = CellCosts::new(&input.dry_run, &input.circuit.network.offsets);
            let charge = ballast_sim::transport_charge(cfg.transport());
            let loads = evaluate(
                &input.circuit.network,
                &costs,
                &p.rank_of,
                ranks as usize,
                Some(&charge),
            );
            for o in &outs {
                let what = format!("{sharing}, {mode}, {ranks} ranks, rank {}", o.rank);
                assert_eq!(o.footprint.peers_connected, loads.peers[o.rank] as u64, "{what}");
                let predicted = predicted_footprint(cfg.transport(), loads.peers[o.rank], 0, ranks as usize);
                assert_eq!(o.footprint, predicted, "{what}");
                assert_eq!(
                    o.footprint.total_bytes() as f64 / 1024.0,
                    loads.transport_kb[o.rank],
                    "{what}"
                );
            }
            if ranks == 96 {
                // Not everyone talks to everyone: the prediction is not trivially ranks - 1.
                assert!(loads.peers.iter().any(|&p| p < 95), "{:?}", loads.peers);
            }
            let got = out_dat(&all_spikes(&outs), params.dt_ms);
            assert!(got.lines().count() > 50, "{got}");
            match &reference {
                None => reference = Some(got),
                Some(r) => assert_eq!(&got, r, "{sharing}, {mode}, {ranks} ranks"),
            }
        }
    }
}

#[test]
fn ringtest_delays_come_from_the_edges_and_spikes_do_not_depend_on_ranks() {
    let Some(dir) = common::shared_data("sonata/nd-ringtest") else {
        return;
    };
    let config = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("circuit_config"))
                && p.extension().is_some_and(|x| x == "json")
        })
        .expect("a circuit config");
    let memory = MetypeMemory {
        cell_kb: Some(3000.0),
        point_cell_kb: Some(40.0),
        ..Default::default()
    };
    let input = SimInput::sonata(&config, &memory, 2.0).unwrap();
    let ballast_sim::model::DelayModel::PerPair { pairs, min_ms, .. } = &input.circuit.delays else {
        panic!(
            "ringtest stores delays: {:?}",
            std::mem::discriminant(&input.circuit.delays)
        );
    };
    assert!(!pairs.is_empty() && *min_ms > 0.0, "{min_ms}");
    let work = tempfile::tempdir().unwrap();
    let params = SimParams {
        tstop_ms: 50.0,
        memory_scale: 0.001,
        ..SimParams::default()
    };
    let cfg = RuntimeConfig::default();
    let mut reference = None;
    for ranks in [1u32, 2, 3] {
        let p = place(
            LbMode::Memory,
            &input.dry_run,
            &input.circuit.network.offsets,
            ranks,
            work.path(),
        )
        .unwrap();
        let outs = run_local(&input.circuit, &p.rank_of, ranks as usize, &cfg, &params, None).unwrap();
        let got = out_dat(&all_spikes(&outs), params.dt_ms);
        match &reference {
            None => reference = Some(got),
            Some(r) => assert_eq!(&got, r, "{ranks} ranks"),
        }
    }
}
