//! Balance quality at scale: 4,000,000 synthetic cells (1,000 metypes, 2 populations) into
//! 4,096 ranks with the default strategy leave the largest bucket within a millionth of the
//! lower bound, and every cell is placed once.
use ballast_balancer::synthetic::{generate, SyntheticSpec};
use ballast_balancer::{balance, BalancerConfig, Summary};

#[test]
fn four_million_cells_into_4096_ranks_are_at_the_lower_bound() {
    let dry_run = generate(&SyntheticSpec {
        cells: 4_000_000,
        metypes: 1000,
        populations: 2,
        seed: 1,
    })
    .unwrap();
    let config = BalancerConfig::builder().ranks(4096).build().unwrap();
    let allocation = balance(&dry_run, &config);
    allocation.validate(&dry_run).unwrap();
    let o = Summary::new(&allocation, &dry_run).overall;
    assert_eq!(o.cells, 4_000_000);
    assert!(
        o.ratio_to_lower_bound <= 1.000001,
        "largest bucket {} KB is {}× the lower bound {} KB",
        o.max_bucket_kb,
        o.ratio_to_lower_bound,
        o.lower_bound_kb
    );
}
