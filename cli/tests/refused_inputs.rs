//! Bad input to `ballast dry-run` and `ballast stats`, refused with a clear message, a
//! non-zero exit and no file: bad dry runs and allocation files, the rough edges users
//! reported, and integer options too large or not whole.
mod common;

use std::fs;
use std::path::Path;

use common::ballast;
use common::cmd::{refused, run, stderr, write};
use serde_json::Value;

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
        "--num-target-ranks must be at least 1 (got 0)",
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
        "--cycles must be at least 1 (got 0)",
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
    // ... and name the option that gave the path.
    assert!(
        stderr(&o).contains("error: --memory-usage: absent.json: No such file or directory"),
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
