//! Balancer benchmarks: LPT beside neurodamus' batched greedy on the same synthetic input.
//! Before timing, prints each case's quality (largest bucket / lower bound) as a table.
//! Run: `cargo bench -p ballast-bench --bench balancer`.
use std::hint::black_box;
use std::time::Duration;

use ballast_balancer::synthetic::{generate, SyntheticSpec};
use ballast_balancer::{balance, BalancerConfig, Strategy, Summary};
use criterion::{criterion_group, criterion_main, Criterion};

/// (label, cells, metypes, populations, ranks, cycles)
const CASES: [(&str, usize, usize, usize, u32, u32); 2] = [
    ("4M_cells_4096x1", 4_000_000, 1_000, 2, 4_096, 1),
    ("100k_cells_64x4", 100_000, 1_000, 2, 64, 4),
];

fn balancer(c: &mut Criterion) {
    println!(
        "{:<18} {:<11} {:>14} {:>14} {:>12}",
        "case", "strategy", "max bucket KB", "lower bound KB", "max/LB"
    );
    for (label, cells, metypes, populations, ranks, cycles) in CASES {
        let dry_run = generate(&SyntheticSpec {
            cells,
            metypes,
            populations,
            seed: 1,
        })
        .unwrap();
        let mut group = c.benchmark_group(label);
        group
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(15));
        for strategy in [Strategy::Lpt, Strategy::Neurodamus] {
            let config = BalancerConfig::builder()
                .ranks(ranks)
                .cycles(cycles)
                .strategy(strategy)
                .build()
                .unwrap();
            let s = Summary::new(&balance(&dry_run, &config), &dry_run).overall;
            let name = format!("{strategy:?}").to_lowercase();
            println!(
                "{label:<18} {name:<11} {:>14.1} {:>14.1} {:>12.9}",
                s.max_bucket_kb, s.lower_bound_kb, s.ratio_to_lower_bound
            );
            group.bench_function(&name, |b| {
                b.iter(|| balance(black_box(&dry_run), black_box(&config)))
            });
        }
        group.finish();
    }
}

criterion_group!(benches, balancer);
criterion_main!(benches);
