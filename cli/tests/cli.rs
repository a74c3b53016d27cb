//! The `ballast dry-run` and `ballast stats` commands, run as a user runs them: outputs,
//! JSON keys, and every bad input refused with a clear message, a non-zero exit and no file;
//! and `ballast fanout`'s report of a refused memory lock, as an unprivileged user.
mod common;

use std::fs;
use std::path::Path;
use std::process::Output;

use common::ballast;
use serde_json::Value;

fn run(args: &[&str], dir: &Path) -> Output {
    ballast()
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run ballast")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Runs a dry-run that must fail: non-zero exit, `needle` in the message, no output file.
fn refused(args: &[&str], needle: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let mut all = args.to_vec();
    let out_s = out_dir.to_str().unwrap().to_owned();
    if args.first() == Some(&"dry-run") {
        all.extend(["--output-dir", &out_s]);
    }
    let o = run(&all, dir.path());
    assert!(
        !o.status.success(),
        "{args:?} should fail; stdout: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(
        stderr(&o).contains(needle),
        "{args:?}: expected {needle:?} in: {}",
        stderr(&o)
    );
    if out_dir.exists() {
        assert!(
            files_in(&out_dir).is_empty(),
            "{args:?} left files: {:?}",
            files_in(&out_dir)
        );
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_owned()
}

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
fn bad_dry_run_inputs_are_refused_with_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let dry = |name: &str, text: &str| write(d, name, text);
    let args = |f: &str| -> Vec<String> {
        vec![
            "dry-run".into(),
            "--memory-usage".into(),
            f.into(),
            "--num-target-ranks".into(),
            "2".into(),
        ]
    };
    let check = |f: String, needle: &str| {
        let a = args(&f);
        refused(&a.iter().map(String::as_str).collect::<Vec<_>>(), needle);
    };
    check(
        d.join("absent.json").to_str().unwrap().into(),
        "absent.json: No such file",
    );
    check(
        dry("broken.json", r#"{"metype_memory": {"A": 1"#),
        "broken.json: invalid JSON",
    );
    check(
        dry("nomem.json", r#"{"pop_metype_gids": {}}"#),
        "nomem.json: metype_memory: missing",
    );
    check(
        dry(
            "unknown.json",
            r#"{"metype_memory": {"A": 1}, "pop_metype_gids": {"P": {"A": [0], "L5_X": [1]}}}"#,
        ),
        r#"pop_metype_gids["P"]["L5_X"]: metype "L5_X" is absent from metype_memory"#,
    );
    check(
        dry(
            "neg.json",
            r#"{"metype_memory": {"A": -5}, "pop_metype_gids": {"P": {"A": [0]}}}"#,
        ),
        r#"neg.json: metype_memory["A"]: KB per cell must be finite and >= 0, got -5"#,
    );
    check(
        dry(
            "nan.json",
            "{\"metype_memory\": {\"A\": NaN}, \"pop_metype_gids\": {}}",
        ),
        "nan.json: line 1 column",
    );
    check(
        dry(
            "nan2.json",
            "{\"metype_memory\": {\"A\": NaN}, \"pop_metype_gids\": {}}",
        ),
        "NaN is not a finite number",
    );
    check(dry("inf.json", "{\"metype_memory\": {\"A\": 1},\n \"metype_cell_syn_average\": {\"A\": Infinity}, \"pop_metype_gids\": {}}"), "Infinity is not a finite number");
    check(
        dry(
            "big.json",
            r#"{"metype_memory": {"A": 1e400}, "pop_metype_gids": {}}"#,
        ),
        "big.json",
    );
    check(
        dry(
            "dup.json",
            r#"{"metype_memory": {"A": 1, "B": 2}, "pop_metype_gids": {"P": {"A": [0, 7], "B": [7]}}}"#,
        ),
        "gid 7 is listed twice in population \"P\"",
    );
    let ok = dry(
        "ok.json",
        r#"{"metype_memory": {"A": 1}, "pop_metype_gids": {"P": {"A": [0]}}}"#,
    );
    refused(
        &["dry-run", "--memory-usage", &ok, "--num-target-ranks", "0"],
        "invalid value '0' for '--num-target-ranks <N>'",
    );
    refused(
        &[
            "dry-run",
            "--memory-usage",
            &ok,
            "--num-target-ranks",
            "2",
            "--cycles",
            "0",
        ],
        "invalid value '0' for '--cycles <CYCLES>'",
    );
    refused(&["dry-run", "--num-target-ranks", "2"], "required");
    refused(
        &[
            "dry-run",
            "--memory-usage",
            &ok,
            "--num-target-ranks",
            "2",
            "--strategy",
            "magic",
        ],
        "unknown strategy \"magic\"",
    );
    refused(
        &[
            "dry-run",
            "--memory-usage",
            &ok,
            "--num-target-ranks",
            "2",
            "--metypes",
            "5",
        ],
        "--metypes describes the synthetic input",
    );
    refused(
        &[
            "dry-run",
            "--memory-usage",
            &ok,
            "--num-target-ranks",
            "2",
            "--cell-kb",
            "5",
        ],
        "--circuit <CONFIG>",
    );
}

#[test]
fn bad_allocation_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mu = write(
        d,
        "cell_memory_usage.json",
        r#"{"metype_memory": {"A": 1}, "pop_metype_gids": {"P": {"A": [0, 1, 2, 3]}}}"#,
    );
    let o = run(
        &[
            "dry-run",
            "--memory-usage",
            &mu,
            "--num-target-ranks",
            "2",
            "--output-dir",
            d.to_str().unwrap(),
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let good = fs::read(d.join("allocation_r2_c1.pkl.gz")).unwrap();

    // Truncated gzip.
    let trunc = d.join("allocation_r2_c1_truncated.pkl.gz");
    fs::write(&trunc, &good[..good.len() / 2]).unwrap();
    let o = run(&["stats", trunc.to_str().unwrap()], d);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("truncated"), "{}", stderr(&o));

    // A pickle that would run a shell command: refused by name, nothing run.
    let marker = d.join("pwned");
    let evil = d.join("allocation_r2_c1_evil.pkl.gz");
    let py = format!(
        "import gzip,pickle,os\nclass E:\n    def __reduce__(self): return (os.system, ('touch {}',))\ngzip.open('{}','wb').write(pickle.dumps({{'P': {{(0,0): E()}}}}))",
        marker.display(),
        evil.display()
    );
    if std::process::Command::new("python3")
        .args(["-c", &py])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
    {
        let o = run(&["stats", evil.to_str().unwrap()], d);
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(
            e.contains("refused pickle global") && (e.contains("posix.system") || e.contains("os.system")),
            "{e}"
        );
        assert!(!marker.exists(), "the pickle was executed");
    } else if std::env::var("CI").as_deref() == Ok("true") {
        panic!("python3 is required under CI");
    }

    // gids that do not match the dry run: one gid missing, one unknown.
    let bad = ballast_balancer::Allocation {
        ranks: 2,
        cycles: 1,
        populations: vec![ballast_balancer::PopulationAllocation {
            name: "P".into(),
            buckets: [
                (ballast_balancer::Bucket { rank: 0, cycle: 0 }, vec![0, 1]),
                (ballast_balancer::Bucket { rank: 1, cycle: 0 }, vec![2, 9]),
            ]
            .into_iter()
            .collect(),
        }],
    };
    let bad_dir = d.join("bad");
    fs::create_dir(&bad_dir).unwrap();
    let bad_file = ballast_balancer::write_allocation(&bad_dir, &bad).unwrap();
    let o = run(&["stats", bad_file.to_str().unwrap(), "--memory-usage", &mu], d);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("1 gids of the dry run missing from the allocation (population, gid): (\"P\", 3)"),
        "{e}"
    );
    assert!(
        e.contains("1 gids not in the dry run (population, gid): (\"P\", 9)"),
        "{e}"
    );
    // load_or_generate refuses it too, and leaves the file as it was.
    let dry_run = ballast_balancer::DryRun::from_json_file(Path::new(&mu)).unwrap();
    let before = fs::read(&bad_file).unwrap();
    let err = ballast_balancer::load_or_generate(&bad_dir, 2, 1, &dry_run, Default::default()).unwrap_err();
    assert!(err.to_string().contains("allocation_r2_c1.pkl.gz"), "{err}");
    assert!(
        err.to_string().contains("1 gids not in the dry run")
            && err.to_string().contains("move it away to have it regenerated"),
        "{err}"
    );
    assert_eq!(fs::read(&bad_file).unwrap(), before);
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

#[test]
fn user_reported_rough_edges_are_smooth() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A misspelt optional key is reported, not silently dropped.
    let mu = write(
        d,
        "typo.json",
        r#"{"metype_memory": {"A": 10}, "metype_cell_syn_averge": {"A": 100}, "pop_metype_gids": {"P": {"A": [0, 1]}}}"#,
    );
    let o = run(&["dry-run", "--memory-usage", &mu, "--num-target-ranks", "2"], d);
    assert!(o.status.success());
    assert!(
        stderr(&o).contains("ignoring unknown key \"metype_cell_syn_averge\""),
        "{}",
        stderr(&o)
    );
    // An empty dry run is refused (no NaN report).
    let empty = write(
        d,
        "empty.json",
        r#"{"metype_memory": {"A": 10}, "pop_metype_gids": {}}"#,
    );
    refused(
        &["dry-run", "--memory-usage", &empty, "--num-target-ranks", "2"],
        "pop_metype_gids: no cells",
    );
    // The largest gid costs no memory in proportion to itself.
    let huge = write(
        d,
        "huge.json",
        r#"{"metype_memory": {"A": 10}, "pop_metype_gids": {"P": {"A": [0, 4294967295]}}}"#,
    );
    let o = run(
        &[
            "dry-run",
            "--memory-usage",
            &huge,
            "--num-target-ranks",
            "2",
            "--json",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(
        &[
            "stats",
            "allocation_r2_c1.pkl.gz",
            "--memory-usage",
            &huge,
            "--json",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let s: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (s["cells"].as_u64(), s["total_kb"].as_f64()),
        (Some(2), Some(20.0))
    );
    // OS errors are said once.
    let o = run(
        &[
            "dry-run",
            "--memory-usage",
            "absent.json",
            "--num-target-ranks",
            "2",
        ],
        d,
    );
    assert_eq!(
        stderr(&o).matches("No such file or directory").count(),
        1,
        "{}",
        stderr(&o)
    );
    // A closed stdout pipe ends the program quietly.
    let mut child = ballast()
        .args(["stats", "allocation_r2_c1.pkl.gz"])
        .current_dir(d)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    // Written files are readable like any other (0666 less the umask), not 0600.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let o = run(
            &[
                "dry-run",
                "--synthetic",
                "100",
                "--num-target-ranks",
                "2",
                "--write-memory-usage",
            ],
            d,
        );
        assert!(o.status.success());
        for f in ["cell_memory_usage.json", "allocation_r2_c1.pkl.gz"] {
            let mode = fs::metadata(d.join(f)).unwrap().permissions().mode();
            assert_ne!(mode & 0o044, 0, "{f} has mode {mode:o}");
        }
    }
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

/// Rule 9 of issue 13: an unprivileged user whose memlock limit (8 MiB) is below what
/// `fanout --recv-sharing per-peer` on 16 ranks registers is told, in `--json` `notes` and
/// `memory_lock` and in the table, how many bytes were asked to be locked, how many were
/// locked (what VmLck shows) and the limit, instead of seeing the registered memory as
/// locked. As root (CAP_IPC_LOCK) the same run locks everything and has no note.
#[test]
fn fanout_as_an_unprivileged_user_names_the_refused_lock() {
    const LIMIT: u64 = 8 << 20;
    let Some(u) = common::Unprivileged::new("fanout_as_an_unprivileged_user_names_the_refused_lock") else {
        return;
    };
    let args = ["fanout", "--ranks", "16", "--recv-sharing", "per-peer"];
    let o = u.run(LIMIT, &[&args[..], &["--json"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let l = &v["memory_lock"];
    let (asked, locked) = (
        l["asked_bytes"].as_u64().unwrap(),
        l["locked_bytes"].as_u64().unwrap(),
    );
    assert_eq!(l["status"], "partially locked", "{v}");
    assert_eq!(l["memlock_limit_bytes"], LIMIT, "{v}");
    assert!(asked > LIMIT && locked <= LIMIT && locked > 0, "{v}");
    assert!(
        l["refused_requests"].as_u64().unwrap() > 0 && l["error"].as_str().unwrap().contains("os error"),
        "{v}"
    );
    // What is accounted as locked is what the kernel counts (the regions are whole pages).
    assert_eq!(v["after"]["vm_lck_kb"].as_u64().unwrap() * 1024, locked, "{v}");
    let notes: Vec<&str> = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(notes.len(), 1, "{v}");
    for want in [
        "all 16 ranks of this process: memory partially locked".to_string(),
        format!("asked to lock {asked} B"),
        format!("locked {locked} B"),
        format!("RLIMIT_MEMLOCK (soft) {LIMIT} B"),
    ] {
        assert!(notes[0].contains(&want), "{want:?} not in {}", notes[0]);
    }
    let o = u.run(LIMIT, &args);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        text.contains("memory lock, all ranks of this process (after): partially locked: ")
            && text.contains("note: all 16 ranks of this process: memory partially locked: asked to lock "),
        "{text}"
    );
    // The local transport has no MPI_Init: the start line says what it precedes.
    assert!(
        text.contains("\nprocess at start (before the ranks, their communicators and pools): VmRSS ")
            && !text.contains("MPI_Init"),
        "{text}"
    );

    // Root: every lock granted, no note; the footnote says where "before" is taken.
    let o = common::ballast()
        .args([&args[..], &["--json"]].concat())
        .current_dir(u.work())
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (
            v["memory_lock"]["status"].as_str(),
            v["notes"].as_array().map(Vec::len)
        ),
        (Some("locked"), Some(0)),
        "{v}"
    );
    assert_eq!(v["memory_lock"]["asked_bytes"], v["memory_lock"]["locked_bytes"]);
    let before = v["before"]["footprint_bytes"].as_u64().unwrap();
    assert!(before > 0);
    let peers_before = v["before_taken"].as_str().unwrap();
    assert!(
        peers_before.starts_with("after the setup and 2 barriers")
            && peers_before.ends_with("connected to 7 peers"),
        "{peers_before}"
    );
}

/// `ballast info` shows `endpoint_overflow`, says it has no effect without a cap, and with
/// `--max-endpoints` predicts the peers beyond the cap as datagram peers (none with
/// `evict`).
#[test]
fn info_shows_the_endpoint_overflow_and_the_datagram_peers() {
    let o = common::ballast()
        .args(["info", "--peers", "20"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("endpoint_overflow=datagram has no effect: max_endpoints is 0 (no cap)"),
        "{text}"
    );
    let row = |text: &str, name: &str| -> Vec<String> {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {text}"));
        line.split_whitespace().skip(1).map(String::from).collect()
    };
    assert_eq!(row(&text, "datagram_peers"), ["0", "0", "0"]);
    let o = common::ballast()
        .args(["info", "--peers", "20", "--max-endpoints", "8"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("peers beyond max_endpoints=8 go over the datagram path"),
        "{text}"
    );
    // per-peer and shared: 12 datagram peers; xrc has no datagram path (evict).
    assert_eq!(row(&text, "datagram_peers"), ["12", "12", "0"]);
    assert_eq!(row(&text, "endpoints_live"), ["8", "8", "8"]);
    let bytes: Vec<u64> = row(&text, "datagram_bytes")
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
    assert!(
        bytes[0] > 0 && bytes[0] <= 12 * 256,
        "at most 256 B per datagram peer: {bytes:?}"
    );
    let o = common::ballast()
        .args([
            "info",
            "--peers",
            "20",
            "--max-endpoints",
            "8",
            "--endpoint-overflow",
            "evict",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("endpoint_overflow=evict: peers beyond max_endpoints=8 evict"),
        "{text}"
    );
    assert_eq!(row(&text, "datagram_peers"), ["0", "0", "0"]);
    let o = common::ballast()
        .args(["info", "--endpoint-overflow", "sometimes"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("expected datagram or evict"));
}

/// `dry-run --transport-model ballast` with `--max-endpoints 2` charges each rank's peers
/// beyond the cap their datagram state with `endpoint_overflow=datagram` (the default),
/// and not with `evict`: 8 ranks that all talk to each other, 5 datagram peers each, the
/// runtime's per-peer state bytes apart.
#[test]
fn dry_run_charges_the_datagram_peers_beyond_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let transport = |mode: &str| -> Vec<f64> {
        let o = ballast()
            .current_dir(dir.path())
            .args([
                "dry-run",
                "--synthetic",
                "2000",
                "--synapses",
                "100000",
                "--num-target-ranks",
                "8",
            ])
            .args([
                "--transport-model",
                "ballast",
                "--max-endpoints",
                "2",
                "--endpoint-overflow",
                mode,
            ])
            .args(["--json", "--output-dir", mode])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let peers = j["rank_loads"]["peers"].as_array().unwrap();
        assert!(peers.iter().all(|p| p.as_u64() == Some(7)), "{peers:?}");
        j["rank_loads"]["transport_kb"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    let (dg, ev) = (transport("datagram"), transport("evict"));
    let per_peer = ballast_runtime::datagram::PEER_STATE_BYTES as f64;
    for (d, e) in dg.iter().zip(&ev) {
        assert_eq!((d - e) * 1024.0, 5.0 * per_peer, "{dg:?} vs {ev:?}");
    }
}

/// `ballast info` with a cap says what `endpoint_overflow` really does for the
/// configuration: the fallback to evict with the runtime's reason (buffers too small, xrc),
/// that it does not apply on the MPI native path, that no datagram peer is predicted when
/// `--peers` is within the cap, and the cost of the cap from the footprint model: on verbs
/// the UD QP's fixed bytes and the break-even peer count, on `local` with `shared` that a
/// datagram peer costs as much as an endpoint (the totals with and without the cap from
/// the table of each run).
#[test]
fn info_says_what_the_endpoint_overflow_really_does() {
    use ballast_runtime::{datagram::PEER_STATE_BYTES, model, MemoryModel};
    let info = |args: &[&str]| -> String {
        let o = ballast().arg("info").args(args).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    // The `total_bytes` row's column of the configured sharing mode (per-peer, shared, xrc).
    let total = |text: &str, col: usize| -> u64 {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("total_bytes"))
            .unwrap();
        line.split_whitespace().nth(1 + col).unwrap().parse().unwrap()
    };
    let t = info(&["--peers", "20", "--max-endpoints", "8", "--buffer-size", "32"]);
    assert!(
        t.contains(
            "endpoint_overflow=datagram falls back to evict: transport local fits 32 B per datagram \
             (buffer_size 32 B, datagram size 65536 B), less than 64 B; peers beyond max_endpoints=8 evict"
        ),
        "{t}"
    );
    assert!(!t.contains("go over the datagram path"), "{t}");
    let t = info(&["--peers", "20", "--max-endpoints", "8", "--recv-sharing", "xrc"]);
    assert!(
        t.contains("endpoint_overflow=datagram falls back to evict: transport local runs recv_sharing=xrc"),
        "{t}"
    );
    let t = info(&["--peers", "20", "--max-endpoints", "8", "--transport", "mpi"]);
    assert!(
        t.contains("max_endpoints=8 and endpoint_overflow=datagram do not apply: the MPI native path"),
        "{t}"
    );
    let t = info(&["--peers", "8", "--max-endpoints", "8"]);
    assert!(
        t.contains("with 8 peers (--peers) no peer goes past the cap of 8: no datagram peer is predicted"),
        "{t}"
    );
    let t = info(&[
        "--peers",
        "5",
        "--world-size",
        "30",
        "--max-endpoints",
        "8",
        "--lazy-connect",
        "off",
    ]);
    assert!(
        t.contains(
            "of 29 peers (lazy_connect off: every other rank), 8 get endpoints and 21 go past the cap"
        ),
        "{t}"
    );
    // local, shared: an endpoint costs the engine's entry, a datagram peer its state.
    let local = MemoryModel::local();
    let ep = local.endpoint_fixed_bytes + local.engine_endpoint_bytes;
    assert!(PEER_STATE_BYTES >= ep, "the premise: {PEER_STATE_BYTES} vs {ep}");
    let capped = info(&["--peers", "20", "--max-endpoints", "8"]);
    let uncapped = info(&["--peers", "20"]);
    assert!(
        capped.contains("of 20 peers (--peers), 8 get endpoints and 12 go past the cap"),
        "{capped}"
    );
    let (a, b) = (total(&capped, 1), total(&uncapped, 1));
    assert!(
        capped.contains(&format!(
            "a datagram peer costs {PEER_STATE_BYTES} B, an endpoint {ep} B: the cap bounds endpoints but \
             does not save memory on local with recv_sharing=shared (predicted total {a} B with the cap, {b} B without"
        )),
        "{capped}"
    );
    // verbs, shared: the UD QP's fixed bytes against the saving per peer past the cap.
    let verbs = MemoryModel::verbs();
    let ep = verbs.endpoint_fixed_bytes + verbs.engine_endpoint_bytes;
    let dg = PEER_STATE_BYTES + model::VERBS_UD_PEER_BYTES;
    let fixed = model::verbs_ud_fixed_bytes(8192);
    let k = fixed / (ep - dg);
    for (peers, past) in [(20u64, 12u64), (8 + k + 1, k + 1)] {
        let p = peers.to_string();
        let capped = info(&["--peers", &p, "--max-endpoints", "8", "--transport", "verbs"]);
        let uncapped = info(&["--peers", &p, "--transport", "verbs"]);
        let (a, b) = (total(&capped, 1), total(&uncapped, 1));
        assert_eq!(
            a + past * (ep - dg),
            b + fixed,
            "the model's totals: {capped}\n{uncapped}"
        );
        assert!(
            capped.contains(&format!(
                "the UD QP costs {fixed} B per rank once a peer goes past the cap (made on first use); each peer past the cap saves {} B (endpoint {ep} B, \
                 datagram peer {dg} B): a cap saves memory once more than {k} peers go past it \
                 (predicted total {a} B with the cap, {b} B without",
                ep - dg
            )),
            "{capped}"
        );
        let verdict = if past > k {
            format!("saves {} B per rank", b - a)
        } else {
            format!("costs {} B more", a - b)
        };
        assert!(capped.contains(&format!("here the cap {verdict}")), "{capped}");
    }
}

/// The runtime's integer options (`--max-endpoints`, `--buffer-size`, `--max-pool-bytes`,
/// ...) say a number is too large, with the maximum, and that a fraction is not a whole
/// number, through clap's message naming the option (exit 2); suffixes still work.
#[test]
fn integer_options_say_too_large_and_not_a_whole_number() {
    let max = usize::MAX.to_string();
    let cases: [(&str, &str, String); 5] = [
        (
            "--max-endpoints",
            "99999999999999999999",
            format!("is too large (at most {max})"),
        ),
        (
            "--max-endpoints",
            "20000000000G",
            format!("is too large (at most {max})"),
        ),
        (
            "--max-pool-bytes",
            "16777216T",
            "has an unknown unit (use K, M or G)".to_string(),
        ),
        (
            "--max-endpoints",
            "1.5",
            "`1.5` is not a whole number".to_string(),
        ),
        (
            "--srq-depth",
            "2.25K",
            "`2.25K` is not a whole number".to_string(),
        ),
    ];
    for (opt, value, needle) in &cases {
        let o = ballast().args(["info", opt, value]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{opt} {value}");
        let e = stderr(&o);
        assert!(e.contains(&format!("invalid value '{value}' for '{opt} ")), "{e}");
        assert!(e.contains(needle.as_str()), "{opt} {value}: {needle:?} in {e}");
    }
    let o = ballast()
        .args(["info", "--max-endpoints", "18446744073709551615G"])
        .output()
        .unwrap();
    assert!(
        stderr(&o).contains(&format!("is too large (at most {max})")),
        "{}",
        stderr(&o)
    );
    let o = ballast()
        .args([
            "info",
            "--max-endpoints",
            "2K",
            "--max-pool-bytes",
            "18446744073709551615",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("  max_endpoints       2048 "), "{text}");
}

/// `dry-run` without `--transport-model ballast` names the runtime options that have no
/// effect on stderr and leaves stdout and the files as without them; with it and a cap,
/// the estimate's transport row and `--json` `transport_cap` say which cap and overflow
/// mode the charge used (the fallback to evict with its reason), and nothing without a cap.
#[test]
fn dry_run_says_which_cap_the_transport_charge_used() {
    let dir = tempfile::tempdir().unwrap();
    let input = [
        "dry-run",
        "--synthetic",
        "2000",
        "--synapses",
        "100000",
        "--num-target-ranks",
        "8",
    ];
    let dry_run = |out: &str, extra: &[&str]| -> (String, String) {
        let o = run(&[&input[..], &["--output-dir", out], extra].concat(), dir.path());
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        // The balancing time and the output directory aside.
        let text = String::from_utf8_lossy(&o.stdout);
        let text: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with("ballast dry-run: "))
            .map(|l| l.replace(out, "OUT"))
            .collect();
        (text.join("\n"), stderr(&o))
    };
    let (plain, plain_err) = dry_run("plain", &[]);
    let (opts, opts_err) = dry_run("opts", &["--max-endpoints", "2", "--endpoint-overflow", "evict"]);
    assert_eq!(plain, opts);
    assert!(!plain_err.contains("no effect"), "{plain_err}");
    assert!(
        opts_err.contains(
            "note: --max-endpoints, --endpoint-overflow have no effect: without --transport-model ballast no transport memory is charged"
        ),
        "{opts_err}"
    );
    for f in ["allocation_r8_c1.pkl.gz", "allocation_r8_c1.json"] {
        let read = |d: &str| fs::read(dir.path().join(d).join(f)).unwrap();
        assert_eq!(read("plain"), read("opts"), "{f}");
    }
    let row = |text: &str| -> String {
        text.lines()
            .find(|l| l.starts_with("Transport (Ballast)"))
            .unwrap()
            .to_string()
    };
    let charged = ["--transport-model", "ballast"];
    let (t, _) = dry_run("uncapped", &charged);
    let r = row(&t);
    assert!(
        !r.contains("max_endpoints") && r.ends_with(|c: char| c.is_ascii_digit()),
        "{t}"
    );
    let (t, _) = dry_run("capped", &[&charged[..], &["--max-endpoints", "2"]].concat());
    assert!(
        row(&t).ends_with("  (max_endpoints=2, endpoint_overflow=datagram: peers past the cap charged their datagram state)"),
        "{t}"
    );
    let (t, _) = dry_run(
        "small",
        &[&charged[..], &["--max-endpoints", "2", "--buffer-size", "32"]].concat(),
    );
    assert!(
        row(&t).ends_with(
            "  (max_endpoints=2, endpoint_overflow=datagram falls back to evict: transport local fits 32 B per \
             datagram (buffer_size 32 B, datagram size 65536 B), less than 64 B; at most 2 endpoints charged, \
             nothing for the peers past the cap)"
        ),
        "{t}"
    );
    let json = |out: &str, extra: &[&str]| -> Value {
        let (t, _) = dry_run(out, &[&charged[..], extra, &["--json"]].concat());
        serde_json::from_str(&t).unwrap()
    };
    assert!(json("j0", &[]).get("transport_cap").is_none());
    let cap = |j: Value| {
        let c = &j["transport_cap"];
        (
            c["max_endpoints"].as_u64(),
            c["endpoint_overflow"].clone(),
            c["charged_as"].clone(),
            c["fallback"].clone(),
        )
    };
    assert_eq!(
        cap(json("j1", &["--max-endpoints", "2"])),
        (Some(2), "datagram".into(), "datagram".into(), Value::Null)
    );
    assert_eq!(
        cap(json(
            "j2",
            &["--max-endpoints", "3", "--endpoint-overflow", "evict"]
        )),
        (Some(3), "evict".into(), "evict".into(), Value::Null)
    );
    let (_, _, charged_as, why) = cap(json("j3", &["--max-endpoints", "2", "--recv-sharing", "xrc"]));
    assert_eq!(charged_as, "evict");
    assert!(
        why.as_str()
            .unwrap()
            .starts_with("transport local runs recv_sharing=xrc"),
        "{why}"
    );
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
