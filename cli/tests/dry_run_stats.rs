//! `ballast dry-run` and `ballast stats` run as a user runs them: the files written and read
//! back (by Python and by `stats`), the JSON keys, neurodamus' fixture reproduced, warnings
//! that do not stop the run, a closed stdout pipe, and a dry run read from a pipe.
mod common;

use std::fs;
use std::path::Path;

use common::ballast;
use common::cmd::{files_in, run, stderr, write};
use serde_json::Value;

#[test]
fn synthetic_dry_run_writes_a_file_python_and_stats_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let o = run(
        &[
            "dry-run",
            "--synthetic",
            "3000",
            "--num-target-ranks",
            "8",
            "--cycles",
            "2",
            "--write-memory-usage",
            "--json",
            "--output-dir",
            d,
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    for key in [
        "ranks",
        "cycles",
        "cells",
        "total_kb",
        "max_bucket_kb",
        "mean_bucket_kb",
        "min_bucket_kb",
        "max_rank_kb",
        "mean_rank_kb",
        "min_rank_kb",
        "lower_bound_kb",
        "imbalance",
        "ratio_to_lower_bound",
        "output",
    ] {
        assert!(j.get(key).is_some(), "missing key {key} in {j}");
    }
    assert_eq!(
        (j["ranks"].as_u64(), j["cycles"].as_u64(), j["cells"].as_u64()),
        (Some(8), Some(2), Some(3000))
    );
    let mean = j["mean_bucket_kb"].as_f64().unwrap();
    assert!((mean * 16.0 - j["total_kb"].as_f64().unwrap()).abs() < 1e-3 * mean);
    assert!(j["max_bucket_kb"].as_f64().unwrap() <= j["lower_bound_kb"].as_f64().unwrap() * 1.05);
    assert!(j["max_bucket_kb"].as_f64().unwrap() < j["neurodamus_max_bucket_kb"].as_f64().unwrap());
    let file = dir.path().join("allocation_r8_c2.pkl.gz");
    assert_eq!(j["output"].as_str().unwrap(), file.to_str().unwrap());
    assert_eq!(
        files_in(dir.path()),
        [
            "allocation_r8_c2.json",
            "allocation_r8_c2.pkl.gz",
            "cell_memory_usage.json"
        ]
    );

    // Plain python3 reads it: every gid of the dry run exactly once, keys (rank, cycle) in range.
    let script = r#"
import gzip, json, pickle, sys
alloc = pickle.load(gzip.open(sys.argv[1]))
dry = json.load(open(sys.argv[2]))
for pop, per_metype in dry["pop_metype_gids"].items():
    want = sorted(g for gids in per_metype.values() for g in gids)
    got = sorted(g for gids in alloc[pop].values() for g in gids)
    assert got == want, pop
    assert all(0 <= r < 8 and 0 <= c < 2 for r, c in alloc[pop]), pop
print(sum(len(v) for b in alloc.values() for v in b.values()))
"#;
    match std::process::Command::new("python3")
        .args([
            "-c",
            script,
            file.to_str().unwrap(),
            dir.path().join("cell_memory_usage.json").to_str().unwrap(),
        ])
        .output()
    {
        Ok(py) => {
            assert!(
                py.status.success(),
                "python3: {}",
                String::from_utf8_lossy(&py.stderr)
            );
            assert_eq!(String::from_utf8_lossy(&py.stdout).trim(), "3000");
        }
        Err(e) if std::env::var("CI").as_deref() != Ok("true") => eprintln!("SKIP python3 check: {e}"),
        Err(e) => panic!("python3 is required under CI: {e}"),
    }

    // stats reads it back with the same loads.
    let mu = dir.path().join("cell_memory_usage.json");
    let o = run(
        &[
            "stats",
            file.to_str().unwrap(),
            "--memory-usage",
            mu.to_str().unwrap(),
            "--json",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let s: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["cells"], j["cells"]);
    assert!((s["max_bucket_kb"].as_f64().unwrap() - j["max_bucket_kb"].as_f64().unwrap()).abs() < 1e-6);
    assert!((s["max_rank_kb"].as_f64().unwrap() - j["max_rank_kb"].as_f64().unwrap()).abs() < 1e-6);
    assert_eq!(s["duplicated_gids"], 0);
    assert_eq!(s["missing_gids"], 0);
}

#[test]
fn stats_reads_the_neurodamus_written_fixture() {
    let Some(dir) = common::shared_data("nd-fixtures") else {
        return;
    };
    let f = dir.join("allocation_r4_c2.pkl.gz");
    let mu = dir.join("cell_memory_usage.json");
    let o = run(
        &[
            "stats",
            f.to_str().unwrap(),
            "--memory-usage",
            mu.to_str().unwrap(),
            "--json",
        ],
        Path::new("."),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let s: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (s["ranks"].as_u64(), s["cycles"].as_u64(), s["cells"].as_u64()),
        (Some(4), Some(2), Some(360))
    );
    // Per-bucket loads equal neurodamus' own bucket_memory_kb summed over populations.
    let expected: Value =
        serde_json::from_slice(&fs::read(dir.join("expected_allocation.json")).unwrap()).unwrap();
    let mut want = [0.0; 8];
    for per_bucket in expected["bucket_memory_kb"].as_object().unwrap().values() {
        for (key, kb) in per_bucket.as_object().unwrap() {
            let (r, c) = key.split_once(',').unwrap();
            want[r.parse::<usize>().unwrap() * 2 + c.parse::<usize>().unwrap()] += kb.as_f64().unwrap();
        }
    }
    // Only buckets with cells are listed (all 8 here), in (rank, cycle) order.
    let buckets = s["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 8, "{buckets:?}");
    assert_eq!(s["empty_buckets"], 0);
    for (i, b) in buckets.iter().enumerate() {
        assert_eq!(
            (b["rank"].as_u64(), b["cycle"].as_u64()),
            (Some(i as u64 / 2), Some(i as u64 % 2))
        );
        let got = b["kb"].as_f64().unwrap();
        assert!((got - want[i]).abs() < 1e-6, "{buckets:?} vs {want:?}");
    }
    // Text mode prints a row per (rank, cycle).
    let o = run(&["stats", f.to_str().unwrap()], Path::new("."));
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        text.lines()
            .filter(|l| l.split_whitespace().count() == 4 && l.trim_start().starts_with(char::is_numeric))
            .count(),
        8,
        "{text}"
    );
}

#[test]
fn neurodamus_strategy_from_the_cli_reproduces_the_fixture_file() {
    let Some(fixture) = common::shared_data("nd-fixtures") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mu = fixture.join("cell_memory_usage.json");
    let o = run(
        &[
            "dry-run",
            "--memory-usage",
            mu.to_str().unwrap(),
            "--num-target-ranks",
            "4",
            "--cycles",
            "2",
            "--strategy",
            "neurodamus",
            "--output-dir",
            dir.path().to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let ours = ballast_balancer::read_allocation(&dir.path().join("allocation_r4_c2.pkl.gz")).unwrap();
    let theirs = ballast_balancer::read_allocation(&fixture.join("allocation_r4_c2.pkl.gz")).unwrap();
    assert_eq!(ours, theirs);
}

#[test]
fn more_ranks_than_cells_warns_but_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let mu = write(
        dir.path(),
        "mu.json",
        r#"{"metype_memory": {"A": 10}, "pop_metype_gids": {"P": {"A": [0, 1, 2]}}}"#,
    );
    let o = run(
        &["dry-run", "--memory-usage", &mu, "--num-target-ranks", "5"],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: 2 of 5 buckets got no cell"),
        "{}",
        stderr(&o)
    );
    let o = run(&["stats", "allocation_r5_c1.pkl.gz"], dir.path());
    assert!(o.status.success());
    assert!(
        stderr(&o).contains("2 of 5 buckets hold no cell"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn load_or_generate_uses_the_file_for_this_rank_count_or_regenerates() {
    let dir = tempfile::tempdir().unwrap();
    let dry_run = ballast_balancer::synthetic::generate(&ballast_balancer::synthetic::SyntheticSpec {
        cells: 500,
        ..Default::default()
    })
    .unwrap();
    use ballast_balancer::AllocationSource::*;
    let first = ballast_balancer::load_or_generate(dir.path(), 4, 1, &dry_run, Default::default()).unwrap();
    assert_eq!(
        first.source,
        Regenerated(dir.path().join("allocation_r4_c1.pkl.gz"))
    );
    let again = ballast_balancer::load_or_generate(dir.path(), 4, 1, &dry_run, Default::default()).unwrap();
    assert_eq!(again.source, File(dir.path().join("allocation_r4_c1.pkl.gz")));
    assert_eq!(again.allocation, first.allocation);
    // Another rank count: its own file is absent, so it is regenerated.
    let other = ballast_balancer::load_or_generate(dir.path(), 3, 1, &dry_run, Default::default()).unwrap();
    assert!(matches!(other.source, Regenerated(_)));
    assert_eq!(other.allocation.ranks, 3);
    other.allocation.validate(&dry_run).unwrap();
}

/// `ballast info | head -n 0`, `ballast fanout | head`: a reader that closes stdout early
/// ends the program quietly (exit 0), not with a broken-pipe panic.
#[test]
fn a_closed_stdout_pipe_ends_quietly() {
    for args in [&["info"][..], &["fanout", "--ranks", "3"][..]] {
        let mut child = ballast()
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn ballast");
        // Close the read end before the program writes anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !err.contains("panicked"),
            "ballast {args:?} panicked on a closed pipe: {err}"
        );
        assert!(
            out.status.success(),
            "ballast {args:?}: {:?}, stderr: {err}",
            out.status
        );
    }
}

/// A dry run read from a pipe (`--memory-usage /dev/stdin`): no size and no offsets to read
/// by; the same allocation as from the file.
#[test]
fn dry_run_reads_its_input_from_a_pipe() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let mu = dir.path().join("cell_memory_usage.json");
    let made = run(
        &[
            "dry-run",
            "--synthetic",
            "3000",
            "--num-target-ranks",
            "5",
            "--output-dir",
            "gen",
            "--write-memory-usage",
            mu.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(made.status.success(), "{}", stderr(&made));
    let from_file = run(
        &[
            "dry-run",
            "--memory-usage",
            mu.to_str().unwrap(),
            "--num-target-ranks",
            "5",
            "--output-dir",
            "file",
        ],
        dir.path(),
    );
    assert!(from_file.status.success(), "{}", stderr(&from_file));
    let mut child = ballast()
        .args([
            "dry-run",
            "--memory-usage",
            "/dev/stdin",
            "--num-target-ranks",
            "5",
            "--output-dir",
            "pipe",
        ])
        .current_dir(dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run ballast");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&fs::read(&mu).unwrap())
        .unwrap();
    let from_pipe = child.wait_with_output().unwrap();
    assert!(from_pipe.status.success(), "{}", stderr(&from_pipe));
    let read = |d: &str| {
        ballast_balancer::pickle::read_allocation_file(&dir.path().join(d).join("allocation_r5_c1.pkl.gz"))
            .unwrap()
    };
    assert_eq!(read("pipe"), read("file"), "the pipe's allocation is the file's");
    assert_eq!(
        read("pipe")
            .iter()
            .map(|p| p.buckets.values().map(Vec::len).sum::<usize>())
            .sum::<usize>(),
        3000
    );
}
