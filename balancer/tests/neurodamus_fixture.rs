//! The `neurodamus` strategy reproduces neurodamus' own batched greedy on the shared
//! fixture, bucket by bucket and gid by gid; `lpt` beats it on the same input.
mod common;

use ballast_balancer::{balance, BalancerConfig, DryRun, Strategy, Summary};
use serde_json::Value;

fn fixture() -> Option<(DryRun, Value)> {
    let dir = common::shared_data("nd-fixtures")?;
    let dry_run = DryRun::from_json_file(&dir.join("cell_memory_usage.json")).unwrap();
    let expected: Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected_allocation.json")).unwrap()).unwrap();
    Some((dry_run, expected))
}

#[test]
fn neurodamus_strategy_matches_neurodamus_exactly() {
    let Some((dry_run, expected)) = fixture() else {
        return;
    };
    let config = BalancerConfig::builder()
        .ranks(4)
        .cycles(2)
        .strategy(Strategy::Neurodamus)
        .build()
        .unwrap();
    let alloc = balance(&dry_run, &config);

    // Per-cell KB as neurodamus computed it.
    for m in &dry_run.metypes {
        assert_eq!(
            m.cell_kb(),
            expected["per_cell_kb"][&m.name].as_f64().unwrap(),
            "{}",
            m.name
        );
    }
    let want = expected["allocation"].as_object().unwrap();
    assert_eq!(
        alloc
            .populations
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        want.keys().map(String::as_str).collect::<Vec<_>>()
    );
    for pop in &alloc.populations {
        let want_buckets = want[&pop.name].as_object().unwrap();
        assert_eq!(pop.buckets.len(), want_buckets.len(), "{}", pop.name);
        for (bucket, gids) in &pop.buckets {
            let key = format!("{},{}", bucket.rank, bucket.cycle);
            let want_gids: Vec<u32> = want_buckets[&key]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| g.as_u64().unwrap() as u32)
                .collect();
            assert_eq!(gids, &want_gids, "population {} bucket {key}", pop.name);
        }
        // Bucket loads equal neurodamus' own sums (same summation order).
        let summary = Summary::new(
            &ballast_balancer::Allocation {
                populations: vec![pop.clone()],
                ..alloc.clone()
            },
            &dry_run,
        );
        for (key, kb) in expected["bucket_memory_kb"][&pop.name].as_object().unwrap() {
            let (r, c) = key.split_once(',').unwrap();
            let (r, c) = (r.parse::<u32>().unwrap(), c.parse::<u32>().unwrap());
            let got = summary
                .buckets
                .iter()
                .find(|b| (b.rank, b.cycle) == (r, c))
                .map_or(0.0, |b| b.kb);
            assert!(
                (got - kb.as_f64().unwrap()).abs() < 1e-6,
                "{} {key}: {got} vs {kb}",
                pop.name
            );
        }
    }
    alloc.validate(&dry_run).unwrap();
}

#[test]
fn lpt_beats_neurodamus_on_the_fixture() {
    let Some((dry_run, _)) = fixture() else { return };
    let run = |s| {
        let config = BalancerConfig::builder()
            .ranks(4)
            .cycles(2)
            .strategy(s)
            .build()
            .unwrap();
        let alloc = balance(&dry_run, &config);
        alloc.validate(&dry_run).unwrap();
        Summary::new(&alloc, &dry_run).overall
    };
    let (lpt, nd) = (run(Strategy::Lpt), run(Strategy::Neurodamus));
    assert_eq!(lpt.total_kb.round(), nd.total_kb.round());
    assert!(
        lpt.max_bucket_kb < nd.max_bucket_kb,
        "lpt {} vs neurodamus {}",
        lpt.max_bucket_kb,
        nd.max_bucket_kb
    );
    assert!(lpt.max_bucket_kb <= lpt.lower_bound_kb + lpt.heaviest_cell_kb);
}
