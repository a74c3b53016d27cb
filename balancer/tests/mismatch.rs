//! `Allocation::validate` against another dry run: a structured `BalancerError::Mismatch`
//! naming the first population and gid at fault, with every problem in its message.
use ballast_balancer::{balance, BalancerConfig, BalancerError, DryRun};

fn dry_run(gids: &[u32]) -> DryRun {
    let json = serde_json::json!({
        "metype_memory": {"M": 100.0},
        "metype_cell_syn_average": {"M": 10.0},
        "pop_metype_gids": {"P": {"M": gids}},
    });
    DryRun::from_json_slice(
        &serde_json::to_vec(&json).unwrap(),
        std::path::Path::new("mismatch"),
    )
    .unwrap()
    .dry_run
}

#[test]
fn mismatch_names_the_first_population_and_gid() {
    let config = BalancerConfig::builder().ranks(2).cycles(1).build().unwrap();
    let alloc = balance(&dry_run(&[0, 1, 2, 3]), &config);
    let err = alloc.validate(&dry_run(&[0, 1, 2, 9])).unwrap_err();
    let msg = err.to_string();
    match err {
        BalancerError::Mismatch {
            file,
            population,
            gid,
            what,
        } => {
            assert_eq!(file, None);
            assert_eq!(population, "P");
            assert_eq!(gid, Some(9), "the first problem is the dry run's gid 9, missing");
            assert_eq!(
                what,
                "1 gids of the dry run missing from the allocation (population, gid): (\"P\", 9); \
                 1 gids not in the dry run (population, gid): (\"P\", 3)"
            );
            assert_eq!(msg, format!("allocation does not match the dry-run data: {what}"));
        }
        other => panic!("expected Mismatch, got {other:?}"),
    }
    assert!(alloc.validate(&dry_run(&[0, 1, 2, 3])).is_ok());
}
