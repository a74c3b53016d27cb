//! Invariants of the balancing strategies on random and synthetic inputs (proptest).
use ballast_balancer::synthetic::{generate, SyntheticSpec};
use ballast_balancer::{balance, BalancerConfig, DryRun, Strategy as Balancing, Summary};
use proptest::prelude::*;

/// A random dry run: 1–3 populations of 1–149 cells, 1–12 metypes with KB in [0, 5000] (an empty dry run is refused).
fn dry_run_strategy() -> impl Strategy<Value = DryRun> {
    (
        prop::collection::vec((0.0f64..5000.0, 0.0f64..3000.0), 1..12),
        prop::collection::vec(prop::collection::vec(0usize..12, 1..150), 1..3),
    )
        .prop_map(|(metypes, pops)| {
            let n = metypes.len();
            let json = serde_json::json!({
                "metype_memory": (0..n).map(|i| (format!("M{i}"), metypes[i].0.into())).collect::<serde_json::Map<_, _>>(),
                "metype_cell_syn_average": (0..n).map(|i| (format!("M{i}"), metypes[i].1.into())).collect::<serde_json::Map<_, _>>(),
                "pop_metype_gids": pops.iter().enumerate().map(|(p, cells)| {
                    let mut per: Vec<Vec<u32>> = vec![Vec::new(); n];
                    for (gid, m) in cells.iter().enumerate() {
                        per[m % n].push(gid as u32);
                    }
                    (format!("pop{p}"), serde_json::Value::Object(per.into_iter().enumerate().filter(|(_, g)| !g.is_empty()).map(|(m, g)| (format!("M{m}"), g.into())).collect()))
                }).collect::<serde_json::Map<_, _>>(),
            });
            DryRun::from_json_slice(&serde_json::to_vec(&json).unwrap(), std::path::Path::new("proptest")).unwrap().dry_run
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn every_gid_once_and_lpt_within_the_list_scheduling_bound(
        dry_run in dry_run_strategy(), ranks in 1u32..9, cycles in 1u32..4,
    ) {
        for strategy in [Balancing::Lpt, Balancing::Neurodamus] {
            let config = BalancerConfig::builder().ranks(ranks).cycles(cycles).strategy(strategy).build().unwrap();
            let alloc = balance(&dry_run, &config);
            prop_assert!(alloc.validate(&dry_run).is_ok(), "{:?}", alloc.gid_problems(Some(&dry_run)));
            prop_assert_eq!((alloc.ranks, alloc.cycles), (ranks, cycles));
            if strategy == Balancing::Lpt {
                let s = Summary::new(&alloc, &dry_run).overall;
                let bound = s.total_kb / (ranks * cycles) as f64 + s.heaviest_cell_kb;
                prop_assert!(s.max_bucket_kb <= bound * (1.0 + 1e-12) + 1e-9,
                    "max bucket {} > total/B + heaviest = {}", s.max_bucket_kb, bound);
                prop_assert!(s.max_bucket_kb >= s.lower_bound_kb * (1.0 - 1e-12));
            }
        }
    }
}

/// On synthetic inputs of 1,000 cells or more, LPT's largest bucket is below neurodamus'.
#[test]
fn lpt_beats_neurodamus_on_synthetic_inputs() {
    for (cells, metypes, populations, ranks, cycles, seed) in [
        (1_000, 50, 2, 16, 1, 1),
        (1_000, 20, 1, 8, 4, 2),
        (5_000, 200, 3, 64, 2, 3),
        (20_000, 200, 2, 128, 1, 4),
        (50_000, 500, 2, 32, 4, 5),
    ] {
        let dry_run = generate(&SyntheticSpec {
            cells,
            metypes,
            populations,
            seed,
        })
        .unwrap();
        let run = |strategy| {
            let config = BalancerConfig::builder()
                .ranks(ranks)
                .cycles(cycles)
                .strategy(strategy)
                .build()
                .unwrap();
            let alloc = balance(&dry_run, &config);
            alloc.validate(&dry_run).unwrap();
            Summary::new(&alloc, &dry_run).overall
        };
        let (lpt, nd) = (run(Balancing::Lpt), run(Balancing::Neurodamus));
        assert!(
            lpt.max_bucket_kb < nd.max_bucket_kb,
            "{cells} cells into {ranks}×{cycles}: lpt {} vs neurodamus {}",
            lpt.max_bucket_kb,
            nd.max_bucket_kb
        );
        // Rank totals even too: the largest rank within 1% + one heaviest cell of the mean.
        assert!(
            lpt.max_rank_kb <= lpt.mean_rank_kb * 1.01 + lpt.heaviest_cell_kb,
            "{lpt:?}"
        );
    }
}
