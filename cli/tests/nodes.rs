//! `ballast dry-run --ranks-per-node K --node-memory-gb G` on a neurodamus dry run without
//! connectivity: the per-node totals are the allocation's rank totals summed per node, the
//! nodes over G are named, and the suggested count is the fewest that fits (checked by
//! balancing again on it and on one node fewer).

mod common;

use serde_json::Value;

fn dry_run(mu: &std::path::Path, dir: &std::path::Path, ranks: &str, extra: &[&str]) -> Value {
    let mut cmd = common::ballast();
    cmd.current_dir(dir).args([
        "dry-run",
        "--memory-usage",
        mu.to_str().unwrap(),
        "--num-target-ranks",
        ranks,
        "--cycles",
        "2",
        "--json",
    ]);
    cmd.args(extra);
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn node_fit_without_connectivity_reports_nodes_over_and_a_count_that_fits() {
    let Some(fixture) = common::shared_data("nd-fixtures") else {
        return;
    };
    let mu = fixture.join("cell_memory_usage.json");
    let dir = tempfile::tempdir().unwrap();
    let node = ["--ranks-per-node", "2", "--node-memory-gb", "1"];
    let v = dry_run(&mu, dir.path(), "4", &node);
    let node_kb = v["node_memory_kb"].as_f64().unwrap();
    assert_eq!(node_kb, 1024.0 * 1024.0);
    // Per-node totals: the rank totals summed per node, so they add up to the total and
    // the largest node holds at least the largest rank.
    let nodes: Vec<f64> = v["node_totals_kb"]
        .as_array()
        .expect("node_totals_kb without connectivity")
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(nodes.len(), 2);
    let total = v["total_kb"].as_f64().unwrap();
    assert!(
        (nodes.iter().sum::<f64>() - total).abs() < 1e-9 * total,
        "{nodes:?} vs {total}"
    );
    let largest = nodes.iter().copied().fold(0.0, f64::max);
    assert!(largest >= v["max_rank_kb"].as_f64().unwrap());
    let over: Vec<usize> = v["nodes_over_memory"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect();
    let want_over: Vec<usize> = (0..nodes.len()).filter(|&n| nodes[n] > node_kb).collect();
    assert_eq!(over, want_over);
    assert!(
        !over.is_empty(),
        "the fixture's 4 ranks do not fit 2 nodes of 1 GiB: {nodes:?}"
    );
    // The suggestion fits: balanced on that many nodes, no node is over.
    let n = v["suggested_nodes"].as_u64().unwrap() as usize;
    assert!(n > nodes.len(), "{n}");
    let fit = dry_run(&mu, dir.path(), &(2 * n).to_string(), &node);
    assert_eq!(
        fit["nodes_over_memory"],
        serde_json::json!([]),
        "{}",
        fit["node_totals_kb"]
    );
    // And one node fewer does not.
    let short = dry_run(&mu, dir.path(), &(2 * (n - 1)).to_string(), &node);
    assert_ne!(short["nodes_over_memory"], serde_json::json!([]));
}
