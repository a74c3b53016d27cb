//! Balancing real SONATA circuits (`../shared/data/sonata/`): per-cell costs from the
//! edges, virtual sources, the transport charge, the CLI's reports, plots and errors.
#![cfg(feature = "sonata")]
mod common;

use ballast_balancer::circuit::{dry_run_from_circuit, MetypeMemory};
use ballast_balancer::sonata::Circuit;
use ballast_balancer::transport_aware::balance_transport_aware;
use ballast_balancer::{BalancerConfig, GidMetype};
use ballast_runtime::{RecvSharing, TransportConfig};
use common::cmd::stderr;
use serde_json::Value;

fn defaults() -> MetypeMemory {
    let d = MetypeMemory::default();
    assert_eq!(
        (d.cell_kb, d.point_cell_kb),
        (Some(3000.0), Some(40.0)),
        "the documented defaults"
    );
    d
}

#[test]
fn layer4_cells_weigh_their_own_synapses() {
    let Some(dir) = common::shared_data("sonata/allen-layer4_sample") else {
        return;
    };
    let circuit = Circuit::open(&dir.join("circuit_config.json")).unwrap();
    let (dry_run, network) = dry_run_from_circuit(&circuit, &defaults()).unwrap();
    assert_eq!(dry_run.cell_count(), 449);
    assert_eq!(dry_run.metypes.len(), 7);
    let syn = dry_run.populations[0].cell_synapses.as_ref().unwrap();
    // 47,020 synapses, all between placed cells of the one population.
    assert_eq!(syn.iter().map(|&s| s as u64).sum::<u64>(), 47_020);
    assert_eq!(syn, &circuit.afferent_counts("l4").unwrap());
    // A cell's cost: its metype's memory + 1.9 KB for each of its own synapses.
    let pop = &dry_run.populations[0];
    for GidMetype { gid, metype: m } in pop.cells().take(20) {
        let want = dry_run.metypes[m].memory_kb + 1.9 * syn[gid as usize] as f64;
        assert_eq!(dry_run.cell_kb(pop, gid, m), want);
    }
    // Distinct connections: no more than the synapses, and every target's sources exist.
    assert!(network.connection_count() <= 47_020 && network.connection_count() > 0);
    assert_eq!(network.cell_count(), 449);
}

#[test]
fn virtual_sources_add_synapses_but_are_not_placed() {
    let Some(dir) = common::shared_data("sonata/allen-300_pointneurons") else {
        return;
    };
    let circuit = Circuit::open(&dir.join("circuit_config.json")).unwrap();
    let (dry_run, network) = dry_run_from_circuit(&circuit, &defaults()).unwrap();
    assert_eq!(
        dry_run.populations.len(),
        1,
        "the 100 virtual sources are not placed"
    );
    assert_eq!(dry_run.cell_count(), 300);
    let syn: u64 = dry_run.populations[0]
        .cell_synapses
        .as_ref()
        .unwrap()
        .iter()
        .map(|&s| s as u64)
        .sum();
    assert_eq!(syn, 27_588 + 20_844, "internal and external synapses both count");
    assert!(
        network.connection_count() <= 27_588,
        "only internal edges make peers"
    );
    // Point neurons take the point default.
    assert!(
        dry_run.metypes.iter().all(|m| m.memory_kb == 40.0),
        "{:?}",
        dry_run.metypes
    );
}

#[test]
fn a_metype_without_memory_is_an_error_naming_it() {
    let Some(dir) = common::shared_data("sonata/nd-usecase3") else {
        return;
    };
    let circuit = Circuit::open(&dir.join("circuit_config.json")).unwrap();
    let none = MetypeMemory {
        cell_kb: None,
        point_cell_kb: None,
        ..Default::default()
    };
    let err = dry_run_from_circuit(&circuit, &none).unwrap_err().to_string();
    assert!(
        err.contains("population `") && err.contains("has no measured memory and no default"),
        "{err}"
    );
}

#[test]
fn transport_aware_is_never_above_blind_on_the_shared_circuits() {
    for name in [
        "allen-layer4_sample",
        "allen-300_pointneurons",
        "nd-ringtest",
        "nd-usecase3",
    ] {
        let Some(dir) = common::shared_data(&format!("sonata/{name}")) else {
            return;
        };
        let circuit = Circuit::open(&dir.join("circuit_config.json")).unwrap();
        let (dry_run, network) = dry_run_from_circuit(&circuit, &defaults()).unwrap();
        for ranks in [2, 5, 16] {
            let config = BalancerConfig::builder().ranks(ranks).cycles(2).build().unwrap();
            let charge = ballast_sim::transport_charge(&TransportConfig {
                recv_sharing: RecvSharing::PerPeer,
                ..Default::default()
            });
            let r = balance_transport_aware(&dry_run, &network, &config, &charge);
            assert!(
                r.aware.loads.max_total_kb() <= r.blind.loads.max_total_kb(),
                "{name} {ranks}"
            );
            r.allocation.validate(&dry_run).unwrap();
            // Peers are real: a rank with cells connected to another rank's counts it.
            assert!(r.aware.loads.peers.iter().all(|&p| p < ranks as usize));
        }
    }
}

#[test]
fn cli_reports_transport_nodes_and_draws() {
    let Some(dir) = common::shared_data("sonata/allen-layer4_sample") else {
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let o = common::ballast()
        .args([
            "dry-run",
            "--circuit",
            dir.join("circuit_config.json").to_str().unwrap(),
            "--cell-kb",
            "3000",
        ])
        .args([
            "--num-target-ranks",
            "8",
            "--transport-model",
            "ballast",
            "--recv-sharing",
            "per-peer",
        ])
        .args([
            "--ranks-per-node",
            "4",
            "--node-memory-gb",
            "0.1",
            "--json",
            "--output-dir",
            out.path().to_str().unwrap(),
        ])
        .args([
            "--plot",
            out.path().join("ranks.svg").to_str().unwrap(),
            "--write-memory-usage",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    let loads = &j["rank_loads"];
    assert_eq!(loads["peers"].as_array().unwrap().len(), 8);
    assert!(j["max_rank_total_kb"].as_f64().unwrap() <= j["blind_max_rank_total_kb"].as_f64().unwrap());
    // Per node = sum of its 4 ranks' totals.
    let totals: Vec<f64> = loads["total_kb"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let nodes: Vec<f64> = j["node_totals_kb"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(nodes.len(), 2);
    assert!((nodes[0] - totals[..4].iter().sum::<f64>()).abs() < 1e-6);
    // 0.1 GiB nodes: ~210 MB per node of 4 ranks does not fit; the suggestion needs more nodes.
    assert_eq!(j["nodes_over_memory"], serde_json::json!([0, 1]));
    let suggested = j["suggested_nodes"].as_u64().unwrap();
    assert!(suggested > 2, "{suggested}");
    // Written: allocation, its sidecar, cell_memory_usage.json in neurodamus' layout (asked
    // for), the plot.
    let mu = ballast_balancer::DryRun::from_json_file(&out.path().join("cell_memory_usage.json")).unwrap();
    assert_eq!(mu.cell_count(), 449);
    assert!(out.path().join("allocation_r8_c1.pkl.gz").exists());
    let sidecar: Value =
        serde_json::from_slice(&std::fs::read(out.path().join("allocation_r8_c1.json")).unwrap()).unwrap();
    assert_eq!(
        (sidecar["strategy"].as_str(), sidecar["transport_model"].as_str()),
        (Some("lpt+transport"), Some("ballast"))
    );
    assert_eq!(
        (sidecar["cells"].as_u64(), sidecar["cell_kb_default"].as_f64()),
        (Some(449), Some(3000.0))
    );
    let svg = std::fs::read_to_string(out.path().join("ranks.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("transport-aware") && svg.contains("<rect"),
        "{}",
        &svg[..200.min(svg.len())]
    );
}

#[test]
fn cli_refuses_bad_circuit_requests_without_output() {
    let out = tempfile::tempdir().unwrap();
    let o_dir = out.path().join("o");
    let run = |args: &[&str]| {
        common::ballast()
            .args(args)
            .args(["--output-dir", o_dir.to_str().unwrap()])
            .output()
            .unwrap()
    };
    // A missing config.
    let o = run(&[
        "dry-run",
        "--circuit",
        "/nonexistent/circuit_config.json",
        "--cell-kb",
        "1",
        "--num-target-ranks",
        "2",
    ]);
    assert!(
        !o.status.success() && stderr(&o).contains("/nonexistent/circuit_config.json"),
        "{}",
        stderr(&o)
    );
    // Transport model without connectivity.
    let o = run(&[
        "dry-run",
        "--synthetic",
        "100",
        "--num-target-ranks",
        "2",
        "--transport-model",
        "ballast",
    ]);
    assert!(
        !o.status.success() && stderr(&o).contains("needs the circuit's connectivity"),
        "{}",
        stderr(&o)
    );
    // A plot with an unknown extension is refused before anything is written.
    let o = run(&[
        "dry-run",
        "--synthetic",
        "100",
        "--num-target-ranks",
        "2",
        "--plot",
        "x.txt",
    ]);
    assert!(
        !o.status.success() && stderr(&o).contains("must end in .svg or .png"),
        "{}",
        stderr(&o)
    );
    assert!(!o_dir.exists() || std::fs::read_dir(&o_dir).unwrap().next().is_none());
    let Some(dir) = common::shared_data("sonata/nd-usecase3") else {
        return;
    };
    // Without --cell-kb the documented defaults apply (as in `ballast run`): nothing refused.
    let o = run(&[
        "dry-run",
        "--circuit",
        dir.join("circuit_config.json").to_str().unwrap(),
        "--num-target-ranks",
        "2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut written: Vec<String> = std::fs::read_dir(&o_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    // No cell_memory_usage.json unasked.
    assert_eq!(written, ["allocation_r2_c1.json", "allocation_r2_c1.pkl.gz"]);
}

#[test]
fn fresh_user_rough_edges() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A config whose `networks` is not an object is refused, nothing written.
    std::fs::write(d.join("cc.json"), r#"{"networks": 3}"#).unwrap();
    let out = d.join("out");
    let o = common::ballast()
        .args([
            "dry-run",
            "--circuit",
            d.join("cc.json").to_str().unwrap(),
            "--num-target-ranks",
            "4",
            "--cell-kb",
            "1",
        ])
        .args(["--output-dir", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        !o.status.success() && stderr(&o).contains("networks: must be an object"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists());
    // A plot into a missing directory is refused before the allocation is written.
    let o = common::ballast()
        .args([
            "dry-run",
            "--synthetic",
            "200",
            "--num-target-ranks",
            "4",
            "--plot",
            "/nonexistent/dir/x.png",
        ])
        .args(["--output-dir", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        !o.status.success() && stderr(&o).contains("does not exist"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists());
}
