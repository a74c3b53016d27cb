//! `ballast dry-run` without `--num-target-ranks`: the node and rank count suggested as
//! neurodamus' `suggest_nodes` does (checked against a transcription of its loop on the
//! input's own figures), ranks per node and node memory from this machine when not given,
//! the allocation written for the suggested ranks, the estimate table (neurodamus'
//! `display_total` plus Ballast's transport), and neurodamus' mean beside Ballast's.
mod common;

use std::fs;
use std::path::Path;

use common::cmd::run;
use serde_json::Value;

fn ok_json(args: &[&str], dir: &Path) -> Value {
    let mut a = vec!["dry-run"];
    a.extend_from_slice(args);
    a.push("--json");
    let o = run(&a, dir);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// 3 metypes: A 2000 KB and 1000 synapses per cell, B 500 KB and 10, C 100 KB; 40 cells.
const DRY_RUN: &str = r#"{"metype_memory": {"A": 2000.0, "B": 500.0, "C": 100.0},
 "metype_cell_syn_average": {"A": 1000.0, "B": 10.0},
 "pop_metype_gids": {"P": {"A": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], "B": [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]},
                     "Q": {"C": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]}}}"#;

/// neurodamus' `suggest_nodes` loop, transcribed (MiB).
fn neurodamus_nodes(cells_mb: f64, syn_mb: f64, base: f64, rpn: f64, node_mb: f64) -> u64 {
    let mut full_overhead = base * rpn;
    let (mut est, mut prev): (f64, Option<f64>) = (0.0, None);
    let mut iter = 0;
    while (prev.is_none() || Some(est) != prev) && iter < 5 {
        prev = Some(est);
        let usage = full_overhead + cells_mb + syn_mb + (cells_mb + syn_mb) * 2.5;
        est = (usage * 1.3 / node_mb).ceil();
        full_overhead = base * rpn * est;
        iter += 1;
    }
    est as u64
}

const CELLS_MB: f64 = (10.0 * 2000.0 + 10.0 * 500.0 + 20.0 * 100.0) / 1024.0;
const SYN_MB: f64 = (10.0 * 1000.0 + 10.0 * 10.0) * 1.9 / 1024.0;

/// Rule: without --num-target-ranks the suggestion is neurodamus', the allocation is
/// written for nodes × ranks per node, the estimate is display_total's.
#[test]
fn the_suggested_node_count_is_neurodamus_and_the_allocation_follows_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("mu.json"), DRY_RUN).unwrap();
    // Node memories from roomy to tight, 2 and 3 ranks per node, overheads 0 to 20 MiB.
    for (gib, rpn, overhead) in [
        ("1", 2u64, "0"),
        ("0.2", 2, "5"),
        ("0.1", 3, "2"),
        ("0.05", 2, "20"),
    ] {
        let v = ok_json(
            &[
                "--memory-usage",
                "mu.json",
                "--cycles",
                "2",
                "--ranks-per-node",
                &rpn.to_string(),
                "--node-memory-gb",
                gib,
                "--rank-overhead-mb",
                overhead,
            ],
            d,
        );
        let node_mb: f64 = gib.parse::<f64>().unwrap() * 1024.0;
        let want = neurodamus_nodes(CELLS_MB, SYN_MB, overhead.parse().unwrap(), rpn as f64, node_mb).max(1);
        let s = &v["suggestion"];
        assert_eq!(s["nodes"], want, "{gib} GiB, {rpn} ranks: {s}");
        assert_eq!(s["ranks"], want * rpn);
        assert_eq!(s["node_memory_source"], "--node-memory-gb");
        assert_eq!(s["ranks_per_node_source"], "--ranks-per-node");
        assert_eq!(v["ranks"], want * rpn);
        let file = format!("allocation_r{}_c2.pkl.gz", want * rpn);
        assert!(d.join(&file).exists(), "{file}");
        assert_eq!(v["output"], format!("./{file}"));
        // The estimate of the suggested ranks: display_total's rows.
        let e = &v["estimate"];
        let ranks = (want * rpn) as f64;
        let close = |a: &Value, b: f64| (a.as_f64().unwrap() - b).abs() < 1e-9 * b.max(1.0);
        assert!(close(&e["cells_mb"], CELLS_MB), "{e}");
        assert!(close(&e["synapses_mb"], SYN_MB), "{e}");
        assert!(close(&e["simulation_mb"], (CELLS_MB + SYN_MB) * 2.5), "{e}");
        assert!(
            close(&e["overhead_mb"], overhead.parse::<f64>().unwrap() * ranks),
            "{e}"
        );
        assert_eq!(e["transport_mb"], 0.0);
        let sum = [
            "overhead_mb",
            "cells_mb",
            "synapses_mb",
            "simulation_mb",
            "transport_mb",
        ]
        .iter()
        .map(|k| e[k].as_f64().unwrap())
        .sum::<f64>();
        assert!(close(&e["grand_total_mb"], sum));
    }
    // The tightest case needs several nodes: the loop really iterates.
    let v = ok_json(
        &[
            "--memory-usage",
            "mu.json",
            "--ranks-per-node",
            "2",
            "--node-memory-gb",
            "0.05",
            "--rank-overhead-mb",
            "20",
        ],
        d,
    );
    assert!(
        v["suggestion"]["nodes"].as_u64().unwrap() > 1,
        "{}",
        v["suggestion"]
    );
    assert!(
        v["suggestion"]["iterations"].as_u64().unwrap() > 1,
        "{}",
        v["suggestion"]
    );
}

/// Rule: node memory defaults to MemTotal and ranks per node to this machine's cores, and
/// the text output says so and names the allocation written.
#[test]
fn this_machine_gives_the_defaults_and_the_output_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("mu.json"), DRY_RUN).unwrap();
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap();
    let mem_kb: f64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let cores = std::thread::available_parallelism().unwrap().get() as u64;
    let v = ok_json(&["--memory-usage", "mu.json"], d);
    let s = &v["suggestion"];
    assert_eq!(s["node_memory_source"], "/proc/meminfo MemTotal");
    assert_eq!(s["node_memory_mb"], mem_kb / 1024.0);
    assert_eq!(s["ranks_per_node"], cores);
    assert_eq!(s["ranks_per_node_source"], "available_parallelism");
    let want = neurodamus_nodes(CELLS_MB, SYN_MB, 52.1, cores as f64, mem_kb / 1024.0).max(1);
    assert_eq!(s["nodes"], want);
    let o = run(&["dry-run", "--memory-usage", "mu.json"], d);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    let r = want * cores;
    for line in [
        "MemTotal of this machine's /proc/meminfo (give --node-memory-gb for other nodes)".to_string(),
        "per node: this machine's cores (give --ranks-per-node for other nodes)".to_string(),
        format!("run neurodamus --lb-mode=Memory on {r} ranks and it loads allocation_r{r}_c1.pkl.gz"),
        format!("wrote ./allocation_r{r}_c1.pkl.gz"),
        "memory estimate (MiB)".to_string(),
        format!("Overhead (ranks={r})"),
        "GRAND TOTAL".to_string(),
        "Simulation (x2.5)".to_string(),
    ] {
        assert!(out.contains(&line), "{line:?} missing:\n{out}");
    }
    // --node-memory-gb without --ranks-per-node: the node fit uses this machine's cores.
    let v = ok_json(
        &[
            "--memory-usage",
            "mu.json",
            "--num-target-ranks",
            "4",
            "--node-memory-gb",
            "1",
        ],
        d,
    );
    assert!(v.get("suggestion").is_none());
    assert_eq!(v["ranks"], 4);
    assert_eq!(
        v["node_totals_kb"].as_array().unwrap().len() as u64,
        4u64.div_ceil(cores)
    );
    assert!(v["suggested_nodes"].as_u64().is_some());
}

/// Rule: with --num-target-ranks nothing is suggested; the estimate is printed for those
/// ranks, per node when --ranks-per-node is given.
#[test]
fn with_a_rank_count_the_estimate_is_printed_and_nothing_suggested() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("mu.json"), DRY_RUN).unwrap();
    let o = run(
        &["dry-run", "--memory-usage", "mu.json", "--num-target-ranks", "4"],
        d,
    );
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("suggested:"), "{out}");
    let header = out
        .lines()
        .find(|l| l.starts_with("memory estimate (MiB)"))
        .unwrap();
    assert!(!header.contains("per node"), "{header}");
    let total = out.lines().find(|l| l.starts_with("GRAND TOTAL")).unwrap();
    let figures: Vec<f64> = total
        .split_whitespace()
        .skip(2)
        .map(|x| x.parse().unwrap())
        .collect();
    let grand = 52.1 * 4.0 + (CELLS_MB + SYN_MB) * 3.5;
    assert_eq!(figures.len(), 2, "{total}");
    assert!((figures[0] - grand).abs() < 0.06, "{total} vs {grand}");
    assert!((figures[1] - grand / 4.0).abs() < 0.06, "{total}");
    let o = run(
        &[
            "dry-run",
            "--memory-usage",
            "mu.json",
            "--num-target-ranks",
            "4",
            "--ranks-per-node",
            "2",
        ],
        d,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let total = out.lines().find(|l| l.starts_with("GRAND TOTAL")).unwrap();
    let per_node: f64 = total.split_whitespace().last().unwrap().parse().unwrap();
    assert!((per_node - grand / 2.0).abs() < 0.06, "{total}");
    // Nodes smaller than their ranks' overhead: the count diverges and is refused, naming why.
    let fresh = tempfile::tempdir().unwrap();
    let o = run(
        &[
            "dry-run",
            "--memory-usage",
            d.join("mu.json").to_str().unwrap(),
            "--ranks-per-node",
            "2",
            "--node-memory-gb",
            "0.001",
        ],
        fresh.path(),
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("ranks are more than 2^32 - 1 ranks: is the node memory (0.001 GiB) below its ranks' overhead (2 × 52.1 MiB, --rank-overhead-mb)?"),
        "{err}"
    );
    assert_eq!(fs::read_dir(fresh.path()).unwrap().count(), 0, "nothing written");
    let o = run(
        &["dry-run", "--memory-usage", "mu.json", "--ranks-per-node", "0"],
        d,
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains(
        "bad value `0` for --ranks-per-node (variable BALLAST_RANKS_PER_NODE): must be at least 1"
    ));
    // A negative overhead is refused by name.
    let o = run(
        &[
            "dry-run",
            "--memory-usage",
            "mu.json",
            "--num-target-ranks",
            "4",
            "--rank-overhead-mb",
            "-1",
        ],
        d,
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("'--rank-overhead-mb <MIB>'"));
}

/// Rule: the transport charge is in the estimate (the balanced ranks' charge summed) and in
/// the suggestion (never fewer nodes than without it).
#[test]
fn the_transport_charge_is_estimated_and_suggested() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base = [
        "--synthetic",
        "400",
        "--synapses",
        "40000",
        "--ranks-per-node",
        "2",
        "--node-memory-gb",
        "1",
        "--rank-overhead-mb",
        "0",
    ];
    let mut charged = base.to_vec();
    charged.extend(["--transport-model", "ballast"]);
    let with = ok_json(&charged, d);
    let without = ok_json(&base, d);
    let t: f64 = with["rank_loads"]["transport_kb"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .sum();
    assert!(t > 0.0);
    assert!((with["estimate"]["transport_mb"].as_f64().unwrap() - t / 1024.0).abs() < 1e-9 * t);
    assert_eq!(without["estimate"]["transport_mb"], 0.0);
    let (n_with, n_without) = (
        with["suggestion"]["nodes"].as_u64().unwrap(),
        without["suggestion"]["nodes"].as_u64().unwrap(),
    );
    assert!(n_with >= n_without, "{n_with} < {n_without}");
    assert_eq!(with["ranks"], n_with * 2);
}

/// Rule: where a population leaves buckets empty, neurodamus' mean (over the buckets with
/// its cells) is printed beside Ballast's (over all buckets), and the warning counts the
/// ranks without any of its cells.
#[test]
fn neurodamus_mean_and_rank_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(
        d.join("small.json"),
        r#"{"metype_memory": {"A": 10.0, "B": 1.0}, "pop_metype_gids": {"big": {"A": [0, 1, 2, 3, 4, 5]}, "small": {"B": [0, 1]}}}"#,
    )
    .unwrap();
    let o = run(
        &[
            "dry-run",
            "--memory-usage",
            "small.json",
            "--num-target-ranks",
            "3",
        ],
        d,
    );
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    // small: 2 KB over the 2 buckets holding it: neurodamus' mean 1.0, Ballast's 2/3.
    assert!(
        out.contains("note: population small: neurodamus prints a mean of 1.0 KB per bucket (\"Mean allocation per rank\"), averaging only the 2 buckets that hold its cells; Ballast's mean bucket, 0.7 KB, counts all 3 buckets"),
        "{out}"
    );
    assert!(!out.contains("note: population big"), "{out}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("1 of 3 buckets hold none of its cells (1 of 3 ranks hold none at all)"),
        "{err}"
    );
    let v = ok_json(&["--memory-usage", "small.json", "--num-target-ranks", "3"], d);
    assert_eq!(v["neurodamus_mean_kb"][0]["name"], "small");
    assert_eq!(v["neurodamus_mean_kb"][0]["neurodamus_mean_kb"], 1.0);
    assert_eq!(v["neurodamus_mean_kb"][0]["buckets_with_cells"], 2);
}
