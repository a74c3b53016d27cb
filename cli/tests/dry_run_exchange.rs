//! `ballast dry-run --transport-model ballast --exchange allgather|multisend`: the all-gather
//! charges each rank its ring partners without connectivity, over the transport given, and
//! leaves the allocation the memory-only one.
mod common;

use std::fs;
use std::path::Path;

use ballast_runtime::{RuntimeConfig, TransportKind};
use common::ballast;
use serde_json::Value;

fn dry_run(dir: &Path, out: &str, extra: &[&str]) -> std::process::Output {
    ballast()
        .current_dir(dir)
        .env_remove("BALLAST_MPI_NATIVE")
        .env_remove("BALLAST_TRANSPORT")
        .args([
            "dry-run",
            "--synthetic",
            "300",
            "--seed",
            "7",
            "--json",
            "--output-dir",
            out,
        ])
        .args(extra)
        .output()
        .unwrap()
}

fn json_of(o: &std::process::Output) -> Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The runtime's own prediction for `peers` ring partners in `ranks` ranks over MPI.
fn predicted_kb(peers: usize, ranks: usize, mpi_native: bool) -> f64 {
    let cfg = RuntimeConfig::builder()
        .transport(TransportKind::Mpi)
        .mpi_native(mpi_native)
        .build()
        .unwrap();
    let t = cfg.transport();
    t.predict(peers, ranks, t.ranks_per_node).total_bytes() as f64 / 1024.0
}

#[test]
fn allgather_charges_the_ring_partners_without_connectivity_none_on_native() {
    let dir = tempfile::tempdir().unwrap();
    let plain = json_of(&dry_run(dir.path(), "plain", &["--num-target-ranks", "4"]));
    for (native, flag) in [(true, "true"), (false, "false")] {
        let out = format!("ag-{flag}");
        let j = json_of(&dry_run(
            dir.path(),
            &out,
            &[
                "--num-target-ranks",
                "4",
                "--transport-model",
                "ballast",
                "--exchange",
                "allgather",
                "--transport",
                "mpi",
                "--mpi-native",
                flag,
            ],
        ));
        let loads = &j["rank_loads"];
        // The native path's all-gather is MPI's own: it opens no peer.
        let peers = if native { 0 } else { 2 };
        assert_eq!(loads["peers"], serde_json::json!(vec![peers; 4]), "{loads}");
        let want = predicted_kb(peers, 4, native);
        for t in loads["transport_kb"].as_array().unwrap() {
            assert_eq!(t.as_f64().unwrap(), want, "{loads}");
        }
        assert!(want > 0.0);
        // The cells are the plain balance's, the charge added on top.
        let cells: f64 = loads["cells_kb"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .sum();
        assert!(
            (cells - plain["total_kb"].as_f64().unwrap()).abs() < 1e-6 * cells,
            "{cells} vs {plain}"
        );
        assert!(
            (j["max_rank_total_kb"].as_f64().unwrap() - (plain["max_rank_kb"].as_f64().unwrap() + want))
                .abs()
                < 1e-6,
            "{j}"
        );
        assert_eq!(
            fs::read(dir.path().join("plain/allocation_r4_c1.pkl.gz")).unwrap(),
            fs::read(dir.path().join(out).join("allocation_r4_c1.pkl.gz")).unwrap(),
            "the all-gather's charge changed the allocation"
        );
    }
    // The MPI native path holds no per-peer state; the engine path does.
    assert!(predicted_kb(2, 4, false) > predicted_kb(2, 4, true));
}

#[test]
fn allgather_partners_follow_the_world_size() {
    let dir = tempfile::tempdir().unwrap();
    for (ranks, peers) in [("1", serde_json::json!([0])), ("2", serde_json::json!([1, 1]))] {
        let j = json_of(&dry_run(
            dir.path(),
            ranks,
            &[
                "--num-target-ranks",
                ranks,
                "--transport-model",
                "ballast",
                "--exchange",
                "allgather",
                "--transport",
                "mpi",
                "--mpi-native",
                "false",
            ],
        ));
        assert_eq!(j["rank_loads"]["peers"], peers, "{j}");
    }
}

#[test]
fn exchange_needs_the_charge_and_multisend_the_connectivity() {
    let dir = tempfile::tempdir().unwrap();
    let o = dry_run(
        dir.path(),
        "a",
        &["--num-target-ranks", "4", "--exchange", "allgather"],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--exchange") && err.contains("--transport-model ballast"),
        "{err}"
    );
    for exchange in [None, Some("multisend")] {
        let mut args = vec!["--num-target-ranks", "4", "--transport-model", "ballast"];
        args.extend(exchange.iter().flat_map(|e| ["--exchange", e]));
        let o = dry_run(dir.path(), "m", &args);
        assert_eq!(o.status.code(), Some(1), "{exchange:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("needs the circuit's connectivity") && err.contains("--exchange allgather"),
            "{err}"
        );
    }
    assert!(!dir.path().join("a").exists() && !dir.path().join("m").exists());
}

#[test]
fn multisend_adds_the_ring_of_its_closing_all_gather() {
    let dir = tempfile::tempdir().unwrap();
    let sparse = [
        "--synthetic",
        "400",
        "--synapses",
        "60",
        "--num-target-ranks",
        "8",
        "--transport-model",
        "ballast",
        "--transport",
        "mpi",
        "--mpi-native",
        "false",
        "--json",
    ];
    let run = |out: &str, exchange: &[&str]| -> Value {
        json_of(
            &ballast()
                .current_dir(dir.path())
                .env_remove("BALLAST_MPI_NATIVE")
                .env_remove("BALLAST_TRANSPORT")
                .args(["dry-run", "--output-dir", out])
                .args(sparse)
                .args(exchange)
                .output()
                .unwrap(),
        )
    };
    let peers = |j: &Value, key: &str| -> Vec<u64> {
        j[key]["peers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    };
    let plain = run("plain", &[]);
    let multi = run("multi", &["--exchange", "multisend"]);
    // The blind placement is the same memory-only LPT in both: there the ring can only add.
    let (p, m) = (
        peers(&plain, "blind_rank_loads"),
        peers(&multi, "blind_rank_loads"),
    );
    assert!(p.iter().zip(&m).all(|(a, b)| b >= a && *b >= 2), "{p:?} vs {m:?}");
    assert!(
        m.iter().sum::<u64>() > p.iter().sum::<u64>(),
        "the ring added no peer: {p:?} vs {m:?}"
    );
    // Every charged rank pays for at least its two ring partners.
    let charged = peers(&multi, "rank_loads");
    assert!(charged.iter().all(|&c| c >= 2), "{charged:?}");
    let kb = &multi["rank_loads"]["transport_kb"];
    for (r, c) in charged.iter().enumerate() {
        assert_eq!(
            kb[r].as_f64().unwrap(),
            predicted_kb(*c as usize, 8, false),
            "rank {r}"
        );
    } // The search's candidates, as `[method, largest rank total KB]` pairs in the order
      // tried: the blind one first, the chosen one the smallest.
    let candidates: Vec<(&str, f64)> = multi["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| match c.as_array().map(Vec::as_slice) {
            Some([method, kb]) => (method.as_str().unwrap(), kb.as_f64().unwrap()),
            _ => panic!("not a [method, KB] pair: {c}"),
        })
        .collect();
    let methods: Vec<&str> = candidates.iter().map(|c| c.0).collect();
    let mut want = vec!["blind"];
    want.extend(["charge-aware-lpt"; 3]);
    want.extend(["locality-cut"; 4]);
    want.extend(["spatial-cut"; 4]);
    assert_eq!(methods, want);
    assert_eq!(
        candidates[0].1,
        multi["blind_max_rank_total_kb"].as_f64().unwrap()
    );
    let least = candidates.iter().map(|c| c.1).fold(f64::INFINITY, f64::min);
    assert_eq!(least, multi["max_rank_total_kb"].as_f64().unwrap());
}
