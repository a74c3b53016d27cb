//! Sizes and totals from the user or a file are checked before anything is allocated:
//! `ballast dry-run` and `ballast stats` under `ulimit -v` (4 GB of address space), with huge
//! rank and cycle counts from options, file names and bucket keys, zero counts, and
//! non-finite totals. Each is refused with exit 1 or 2 and a message naming the option or
//! file and the number, or accepted with output proportional to the file's content; never
//! an abort, a panic, or NaN/inf printed.
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use ballast_balancer::pickle::write_allocation_file;
use ballast_balancer::{Bucket, PopulationAllocation};
use serde_json::Value;

/// Runs `ballast ARGS` in `dir` with its address space limited to 4 GB, as a user on a
/// shared login node would be: an allocation of the claimed size would fail there.
fn limited(args: &[&str], dir: &Path) -> Output {
    limited_to(4_000_000, args, dir)
}

/// [`limited`] with `kb` KB of address space.
fn limited_to(kb: u64, args: &[&str], dir: &Path) -> Output {
    std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("ulimit -v {kb} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_ballast"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run ballast under bash")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Exit code 1 or 2 and every needle in stderr; no crash.
fn refused(o: &Output, needles: &[&str]) {
    let (out, err) = text(o);
    assert!(
        matches!(o.status.code(), Some(1 | 2)),
        "status {:?}; stdout {out}; stderr {err}",
        o.status
    );
    for n in needles {
        assert!(err.contains(n), "expected {n:?} in: {err}");
    }
    for bad in ["panicked", "memory allocation", "capacity overflow"] {
        assert!(!err.contains(bad), "{err}");
    }
}

fn sane(s: &str) {
    for bad in ["NaN", "inf", "panicked"] {
        assert!(!s.contains(bad), "{bad} in: {s}");
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_owned()
}

fn one_bucket(dir: &Path, name: &str, rank: u32, cycle: u32) -> String {
    let path = dir.join(name);
    let pops = [PopulationAllocation {
        name: "P".into(),
        buckets: BTreeMap::from([(Bucket { rank, cycle }, vec![1])]),
    }];
    write_allocation_file(&path, &pops).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn huge_rank_and_cycle_counts_are_refused_before_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mu = write(
        d,
        "mu.json",
        r#"{"metype_memory": {"A": 10}, "pop_metype_gids": {"P": {"A": [0, 1, 2]}}}"#,
    );
    for (counts, needles) in [
        (
            &["1000000000"][..],
            &[
                "--num-target-ranks 1000000000",
                "1000000000 buckets for 3 cells",
                "at most 1048579 buckets",
                "119.2 GiB",
            ][..],
        ),
        (
            &["4294967295"],
            &[
                "--num-target-ranks 4294967295",
                "4294967295 buckets for 3 cells",
                "512.0 GiB",
            ],
        ),
        (
            &["65536", "--cycles", "65535"],
            &[
                "--num-target-ranks 65536 --cycles 65535",
                "65536 ranks × 65535 cycles = 4294901760 buckets",
                "512.0 GiB",
            ],
        ),
    ] {
        let mut args = vec![
            "dry-run",
            "--memory-usage",
            &mu,
            "--output-dir",
            "out",
            "--num-target-ranks",
        ];
        args.extend_from_slice(counts);
        let o = limited(&args, d);
        refused(&o, needles);
        assert_eq!(o.status.code(), Some(1));
        assert!(!d.join("out").exists(), "{counts:?} wrote output");
    }
    refused(
        &limited(&["dry-run", "--memory-usage", &mu, "--num-target-ranks", "0"], d),
        &["--num-target-ranks must be at least 1 (got 0)"],
    );
    refused(
        &limited(
            &[
                "dry-run",
                "--memory-usage",
                &mu,
                "--num-target-ranks",
                "2",
                "--cycles",
                "0",
            ],
            d,
        ),
        &["--cycles must be at least 1 (got 0)"],
    );
    // Empty buckets up to 2^20 beyond the cells are a warning, as in neurodamus.
    let o = limited(
        &[
            "dry-run",
            "--memory-usage",
            &mu,
            "--num-target-ranks",
            "1048579",
            "--output-dir",
            "ok",
            "--json",
        ],
        d,
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("warning: 1048576 of 1048579 buckets got no cell"),
        "{err}"
    );
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (j["cells"].as_u64(), j["empty_buckets"].as_u64()),
        (Some(3), Some(1048576))
    );
    // One more is refused.
    refused(
        &limited(
            &[
                "dry-run",
                "--memory-usage",
                &mu,
                "--num-target-ranks",
                "1048580",
                "--output-dir",
                "no",
            ],
            d,
        ),
        &["1048580 buckets for 3 cells"],
    );
}

#[test]
fn load_or_generate_checks_the_rank_count_before_balancing() {
    let dir = tempfile::tempdir().unwrap();
    let dry_run = ballast_balancer::synthetic::generate(&ballast_balancer::synthetic::SyntheticSpec {
        cells: 10,
        ..Default::default()
    })
    .unwrap();
    let e = ballast_balancer::load_or_generate(dir.path(), 1_000_000_000, 1, &dry_run, Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("1000000000 ranks × 1 cycle = 1000000000 buckets for 10 cells"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn allocation_files_claiming_huge_or_zero_counts_cost_their_content_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 10^8 ranks from the file name, 10^8 × 10^8 buckets from a key, and the 60-byte file
    // with key (200000, 1000): accepted, empty buckets counted, a few lines of output.
    let named = one_bucket(d, "allocation_r100000000_c1.pkl.gz", 0, 0);
    let keyed = one_bucket(d, "keys.pkl.gz", 100_000_000, 100_000_000);
    let sparse = one_bucket(d, "sparse.pkl.gz", 200_000, 1000);
    assert!(std::fs::metadata(&sparse).unwrap().len() < 100);
    for (file, ranks, cycles, empty) in [
        (&named, 100_000_000u64, 1u64, 99_999_999u64),
        (&keyed, 100_000_001, 100_000_001, 100_000_001u64 * 100_000_001 - 1),
        (&sparse, 200_001, 1001, 200_001 * 1001 - 1),
    ] {
        let o = limited(&["stats", file], d);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{file}: {err}");
        assert!(out.lines().count() < 15, "{file}: {out}");
        assert!(
            out.contains(&format!(
                "({empty} of {} buckets hold no cell and are not listed)",
                ranks * cycles
            )),
            "{out}"
        );
        assert!(
            err.contains(&format!(
                "warning: {empty} of {} buckets hold no cell",
                ranks * cycles
            )),
            "{err}"
        );
        sane(&out);
        let o = limited(&["stats", file, "--json"], d);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{file}: {err}");
        assert!(out.len() < 2000, "{file}: {} bytes of JSON", out.len());
        let j: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            (
                j["ranks"].as_u64(),
                j["cycles"].as_u64(),
                j["empty_buckets"].as_u64()
            ),
            (Some(ranks), Some(cycles), Some(empty))
        );
        assert_eq!(j["buckets"].as_array().unwrap().len(), 1);
        assert_eq!(j["min_bucket_kb"], Value::Null);
        assert_eq!(j["cells"].as_u64(), Some(1));
        let imbalance = j["imbalance"].as_f64().unwrap();
        assert!(
            (imbalance / (ranks * cycles) as f64 - 1.0).abs() < 1e-9,
            "{imbalance}"
        );
    }
    // A plot would hold a value per rank: refused for 10^8 ranks and 1 cell, naming both.
    let mu = write(
        d,
        "mu.json",
        r#"{"metype_memory": {"A": 10}, "pop_metype_gids": {"P": {"A": [1]}}}"#,
    );
    refused(
        &limited(&["stats", &named, "--memory-usage", &mu, "--plot", "p.svg"], d),
        &[
            "--plot",
            "allocation_r100000000_c1.pkl.gz",
            "100000000 ranks × 1 cycle = 100000000 buckets for 1 cell",
        ],
    );
    assert!(!d.join("p.svg").exists());
    // Zero ranks or cycles in the name, and a key whose count would not fit in 32 bits.
    let r0 = one_bucket(d, "allocation_r0_c1.pkl.gz", 0, 0);
    refused(&limited(&["stats", &r0], d), &["allocation_r0_c1.pkl.gz: the file name says 0 ranks × 1 cycle: an allocation has at least 1 rank and 1 cycle"]);
    let c0 = one_bucket(d, "allocation_r1_c0.pkl.gz", 0, 0);
    refused(
        &limited(&["stats", &c0], d),
        &["allocation_r1_c0.pkl.gz: the file name says 1 rank × 0 cycles"],
    );
    let max = one_bucket(d, "max.pkl.gz", u32::MAX, 0);
    refused(
        &limited(&["stats", &max], d),
        &["max.pkl.gz: a bucket has rank 4294967295: the rank count 4294967296 does not fit in 32 bits"],
    );
}

#[test]
fn totals_that_would_overflow_are_refused_naming_the_metype() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 6 equal cells of 1e308 KB: the total is infinite (it used to exit 0, print inf and
    // split the cells 4 and 2).
    let big = write(
        d,
        "big.json",
        r#"{"metype_memory": {"A": 1, "B": 1e308}, "pop_metype_gids": {"P": {"A": [6], "B": [0, 1, 2, 3, 4, 5]}}}"#,
    );
    let o = limited(
        &[
            "dry-run",
            "--memory-usage",
            &big,
            "--num-target-ranks",
            "2",
            "--output-dir",
            "out",
        ],
        d,
    );
    refused(
        &o,
        &[
            r#"big.json: metype_memory["B"]: 6 cells of 1e308 KB each"#,
            "bring the total to inf KB, above the 1e300 KB",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(!d.join("out").exists());
    // Memory and synapses each finite, their sum per cell not: the synapses' 1.9e300 KB are
    // the larger term, the figure named.
    let syn = write(
        d,
        "syn.json",
        r#"{"metype_memory": {"A": 1e300}, "metype_cell_syn_average": {"A": 1e300}, "pop_metype_gids": {"P": {"A": [0]}}}"#,
    );
    refused(
        &limited(
            &[
                "dry-run",
                "--memory-usage",
                &syn,
                "--num-target-ranks",
                "2",
                "--output-dir",
                "out",
            ],
            d,
        ),
        &[r#"metype_cell_syn_average["A"]: 1 cell of 2.9000000000000004e300 KB each"#],
    );
    // The same file is refused by stats, which weighs with it.
    let alloc = one_bucket(d, "allocation_r2_c1.pkl.gz", 0, 0);
    refused(
        &limited(&["stats", &alloc, "--memory-usage", &big], d),
        &[r#"metype_memory["B"]"#],
    );
    // A node size that is not a finite positive number of GiB is refused by name, and a
    // tiny one stops the node search at the bucket limit instead of balancing for billions.
    for v in ["inf", "NaN", "-1", "0"] {
        let arg = format!("--node-memory-gb={v}");
        refused(
            &limited(
                &[
                    "dry-run",
                    "--synthetic",
                    "100",
                    "--num-target-ranks",
                    "2",
                    "--ranks-per-node",
                    "2",
                    &arg,
                    "--output-dir",
                    "out",
                ],
                d,
            ),
            &[&format!("invalid value '{v}' for '--node-memory-gb <GIB>'")],
        );
    }
    // A KB per cell that is not finite and 0 or more is refused by name, by dry-run and run,
    // written with `=` or as the next argument.
    for v in ["-1", "NaN", "inf"] {
        for opt in ["--cell-kb", "--point-cell-kb"] {
            let want = format!("invalid value '{v}' for '{opt} <KB>'");
            let dry = ["dry-run", "--circuit", "none.json", "--num-target-ranks", "2"];
            refused(&limited(&[&dry[..], &[opt, v]].concat(), d), &[&want]);
            refused(
                &limited(&[&dry[..], &[&format!("{opt}={v}")]].concat(), d),
                &[&want],
            );
            refused(
                &limited(&["run", "--synthetic", "10", "--output", "out", opt, v], d),
                &[&want],
            );
        }
    }
    assert!(!d.join("out").exists());
    refused(
        &limited(
            &[
                "dry-run",
                "--synthetic",
                "100",
                "--num-target-ranks",
                "2",
                "--ranks-per-node",
                "2",
                "--node-memory-gb=1e-12",
                "--output-dir",
                "out",
            ],
            d,
        ),
        &["no node count up to 100 fits 0.0000 GiB per node (the search stops at one node per cell"],
    );
    // Just below the limit works and prints finite figures.
    let ok = write(
        d,
        "ok.json",
        r#"{"metype_memory": {"B": 1e299}, "pop_metype_gids": {"P": {"B": [0, 1, 2, 3, 4, 5]}}}"#,
    );
    let o = limited(
        &[
            "dry-run",
            "--memory-usage",
            &ok,
            "--num-target-ranks",
            "2",
            "--output-dir",
            "out",
            "--json",
        ],
        d,
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    sane(&out);
    let j: Value = serde_json::from_str(&out).unwrap();
    let (max, min) = (
        j["max_bucket_kb"].as_f64().unwrap(),
        j["min_bucket_kb"].as_f64().unwrap(),
    );
    assert!(
        max == min && (max / 3e299 - 1.0).abs() < 1e-12,
        "6 equal cells split 3 and 3: {out}"
    );
}

#[test]
fn synthetic_inputs_and_buckets_are_checked_against_the_address_space() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The generator's own sizes, before it allocates.
    refused(
        &limited(
            &[
                "dry-run",
                "--synthetic",
                "4000000000",
                "--num-target-ranks",
                "2",
                "--output-dir",
                "out",
            ],
            d,
        ),
        &[
            "a synthetic input of 4000000000 cells and 200 metypes would need about 59.6 GiB but only",
            "(MemAvailable, or ulimit -v)",
        ],
    );
    refused(
        &limited(
            &[
                "dry-run",
                "--synthetic",
                "1000",
                "--synapses",
                "100000000000000",
                "--num-target-ranks",
                "2",
                "--output-dir",
                "out",
            ],
            d,
        ),
        &["a synthetic circuit of 1000 cells and 100000000000000 synapses would need about 582.1 TiB"],
    );
    // 5 M buckets for 5 M cells pass the bucket rule but need 1.0 GiB: refused under 1 GB.
    refused(
        &limited_to(
            1_000_000,
            &[
                "dry-run",
                "--synthetic",
                "5000000",
                "--num-target-ranks",
                "5000000",
                "--output-dir",
                "out",
            ],
            d,
        ),
        &[
            "--num-target-ranks 5000000 --cycles 1: ",
            "5000000 ranks × 1 cycle = 5000000 buckets for 5000000 cells: balancing needs about 1.0 GiB",
            "are available (MemAvailable, or ulimit -v)",
        ],
    );
    assert!(!d.join("out").exists());
}

/// The node suggestion tries ever more ranks (here about 17 million for 3,000 cells): each
/// count's peer sets take memory for the (rank, peer) pairs, not `ranks × ranks` bits (628k
/// ranks asked for 49 GB and aborted), until the balancer refuses a count by name.
#[test]
fn the_node_suggestion_over_many_ranks_ends_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let o = limited(
        &[
            "dry-run",
            "--synthetic",
            "3000",
            "--synapses",
            "200000",
            "--transport-model",
            "ballast",
            "--ranks-per-node",
            "4",
            "--node-memory-gb",
            "0.01",
        ],
        dir.path(),
    );
    // The count reached depends on the transport model's per-rank charge: read it back.
    refused(&o, &["the node suggestion tried ", " buckets for 3000 cells"]);
    let err = String::from_utf8_lossy(&o.stderr);
    let tried: u64 = err
        .split("the node suggestion tried ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no rank count in: {err}"));
    assert!(
        tried > 1_051_576,
        "refused at {tried} ranks, under the bucket limit: {err}"
    );
    assert!(
        err.contains(&format!(
            "{tried} ranks × 1 cycle = {tried} buckets for 3000 cells"
        )),
        "{err}"
    );
    // The node-fit search over the same circuit with a rank count given: up to 3,000
    // nodes of 4 ranks, then the search's own message.
    let o = limited(
        &[
            "dry-run",
            "--synthetic",
            "3000",
            "--synapses",
            "200000",
            "--transport-model",
            "ballast",
            "--ranks-per-node",
            "4",
            "--node-memory-gb",
            "0.01",
            "--num-target-ranks",
            "4",
        ],
        dir.path(),
    );
    refused(&o, &["no node count up to 3000 fits 0.0100 GiB per node"]);
}
