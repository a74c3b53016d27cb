//! `ballast rebalance-corenrn`: `--strategy neurodamus` byte for byte against neurodamus'
//! own `tools/rebalance-corenrn-data.py` on the shared CoreNEURON input; Ballast's strategy
//! read back the way CoreNEURON reads it (every group on exactly one rank, every rank
//! loaded, the count line covering every line); the gap-junction header; and the refusals.
mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ballast_balancer::corenrn::coreneuron_reads;
use common::ballast;
use serde_json::Value;

fn run(args: &[&str], dir: &Path) -> Output {
    ballast()
        .arg("rebalance-corenrn")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run ballast")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// neurodamus' script and a Python to run it, or `None` after printing why (a failure under
/// `CI=true`). Its `toolbox.py` imports NumPy at the top but uses it only for `--histogram`:
/// where NumPy is absent, the returned PYTHONPATH holds an empty `numpy` module.
fn neurodamus_script(tmp: &Path) -> Option<(PathBuf, Option<PathBuf>)> {
    let script = common::shared_data("neurodamus-tests/tools/rebalance-corenrn-data.py")?;
    let python = Command::new("python3").arg("--version").output();
    if !python.is_ok_and(|o| o.status.success()) {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("CI=true but python3 is missing");
        }
        eprintln!("SKIP: python3 is absent: neurodamus' script cannot be run");
        return None;
    }
    let has_numpy = Command::new("python3")
        .args(["-c", "import numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    let stub = (!has_numpy).then(|| {
        let d = tmp.join("numpy-stub");
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("numpy.py"), "").unwrap();
        d
    });
    Some((script, stub))
}

/// Rule: `--strategy neurodamus` writes exactly the bytes of neurodamus' script, at its
/// default 40 ranks per machine and at other counts, for every machine count the input
/// allows (1 to 6 groups: up to 6 machines).
#[test]
fn neurodamus_strategy_matches_the_script_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(input) = common::shared_data("coreneuron-bigring") else {
        return;
    };
    let Some((script, stub)) = neurodamus_script(tmp.path()) else {
        return;
    };
    let files_dat = input.join("files.dat");
    let mut compared = 0;
    for (machines, rpm) in [(1, 40), (2, 40), (3, 40), (6, 40), (2, 1), (2, 2), (3, 3), (1, 4)] {
        let ours = format!("ours_{machines}_{rpm}.dat");
        let theirs = format!("theirs_{machines}_{rpm}.dat");
        let m = machines.to_string();
        let r = rpm.to_string();
        let o = run(
            &[
                files_dat.to_str().unwrap(),
                &m,
                "--ranks-per-machine",
                &r,
                "--strategy",
                "neurodamus",
                "--output-file",
                &ours,
            ],
            tmp.path(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let mut py = Command::new("python3");
        py.arg(&script)
            .arg(&files_dat)
            .arg(&m)
            .args(["--ranks-per-machine", &r, "--output-file", &theirs])
            .current_dir(tmp.path());
        if let Some(s) = &stub {
            py.env("PYTHONPATH", s);
        }
        let p = py.output().unwrap();
        assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
        let a = fs::read(tmp.path().join(&ours)).unwrap();
        let b = fs::read(tmp.path().join(&theirs)).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&a),
            String::from_utf8_lossy(&b),
            "{machines} machines × {rpm}"
        );
        // The script's layout: rounds × machines × ranks per machine lines after the header.
        let lines = String::from_utf8(a).unwrap();
        let count: usize = lines.lines().nth(1).unwrap().parse().unwrap();
        assert_eq!(count, lines.lines().count() - 2);
        assert_eq!(count % (machines * rpm), 0);
        compared += 1;
    }
    assert_eq!(compared, 8);
}

/// Rule: Ballast's layout, read as CoreNEURON reads it on machines × ranks per machine
/// ranks, loads every group of the input exactly once, none twice, every rank at least one;
/// its largest rank is no larger than neurodamus' layout's on this input; the count line is
/// every line written.
#[test]
fn ballast_strategy_loads_every_group_once_and_balances_ranks() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(input) = common::shared_data("coreneuron-bigring") else {
        return;
    };
    let files_dat = input.join("files.dat");
    let original: Vec<String> = fs::read_to_string(&files_dat)
        .unwrap()
        .lines()
        .skip(2)
        .map(|l| l.trim().to_owned())
        .collect();
    assert_eq!(original.len(), 6);
    for (machines, rpm) in [(1usize, 6usize), (2, 3), (3, 2), (2, 2), (1, 1)] {
        let (m, r) = (machines.to_string(), rpm.to_string());
        let o = run(
            &[files_dat.to_str().unwrap(), &m, "--ranks-per-node", &r, "--json"],
            tmp.path(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        let text = fs::read_to_string(tmp.path().join("rebalanced-files.dat")).unwrap();
        let reads = coreneuron_reads(&text, machines * rpm).unwrap();
        let mut loaded: Vec<String> = reads.iter().flatten().cloned().collect();
        loaded.sort();
        let mut want = original.clone();
        want.sort();
        assert_eq!(loaded, want, "{machines} × {rpm}: every group exactly once");
        assert!(
            reads.iter().all(|r| !r.is_empty()),
            "{machines} × {rpm}: {reads:?}"
        );
        let count: u64 = text.lines().nth(1).unwrap().parse().unwrap();
        assert_eq!(count as usize, text.lines().count() - 2);
        assert_eq!(v["count_line"], count);
        // The per-rank bytes reported are the files' sizes on that rank.
        let size = |id: &str| -> u64 {
            ["1", "2", "3"]
                .iter()
                .map(|s| fs::metadata(input.join(format!("{id}_{s}.dat"))).unwrap().len())
                .sum()
        };
        let rank_bytes: Vec<u64> = reads.iter().map(|r| r.iter().map(|id| size(id)).sum()).collect();
        assert_eq!(v["rank_bytes"], serde_json::json!(rank_bytes));
        let max = *rank_bytes.iter().max().unwrap();
        assert!(
            max <= v["neurodamus_strategy"]["max_rank_bytes"].as_u64().unwrap(),
            "{machines} × {rpm}: {max} vs {}",
            v["neurodamus_strategy"]
        );
        assert_eq!(v["total_bytes"], rank_bytes.iter().sum::<u64>());
    }
    // The text output names the layout and how to run it.
    let o = run(
        &[
            files_dat.to_str().unwrap(),
            "2",
            "--ranks-per-node",
            "2",
            "--histogram",
        ],
        tmp.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("6 cell groups"), "{out}");
    assert!(out.contains("count line 8 = 2 rounds × 4 ranks"), "{out}");
    assert!(out.contains("run CoreNEURON on exactly 4 ranks (2 × 2)"), "{out}");
    assert!(out.contains("rank totals (KiB), 40 bins"), "{out}");
    // CoreNEURON opens `-d` + "/" + `-f`: the printed pair must name the file written (in
    // the working directory, not the data directory).
    let line = out
        .lines()
        .find(|l| l.contains("special-core"))
        .expect("the special-core line");
    assert!(line.contains("mpirun -n 4 special-core --mpi -d "), "{line}");
    let words: Vec<&str> = line.split_whitespace().collect();
    let arg = |flag: &str| words[words.iter().position(|w| *w == flag).expect(flag) + 1];
    let opened = Path::new(arg("-d")).join(arg("-f"));
    assert_eq!(
        std::fs::canonicalize(&opened).unwrap(),
        std::fs::canonicalize(tmp.path().join("rebalanced-files.dat")).unwrap(),
        "{line}"
    );
}

/// A small CoreNEURON-like directory: groups `ids` with `_1`, `_2` (of `sizes` bytes), `_3`
/// files, `_gap` files for `gap` ids.
fn make_dir(d: &Path, files_dat: &str, ids: &[(u32, usize)], gap: &[u32]) {
    fs::write(d.join("files.dat"), files_dat).unwrap();
    for &(id, n) in ids {
        fs::write(d.join(format!("{id}_1.dat")), vec![1u8; 10]).unwrap();
        fs::write(d.join(format!("{id}_2.dat")), vec![2u8; n]).unwrap();
        fs::write(d.join(format!("{id}_3.dat")), vec![3u8; 5]).unwrap();
    }
    for id in gap {
        fs::write(d.join(format!("{id}_gap.dat")), vec![4u8; 1000]).unwrap();
    }
}

/// Rule: the gap-junction header (`-1`, then the count) is kept; the gap files are weighed;
/// `--dat-path` finds the data elsewhere; skip marks in the input are not groups.
#[test]
fn gap_junction_header_is_kept_and_gap_files_weighed() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    fs::create_dir(&data).unwrap();
    make_dir(
        &data,
        "1.8\n-1\n5\n0\n1\n2\n-1\n3\n",
        &[(0, 100), (1, 100), (2, 100), (3, 100)],
        &[3],
    );
    fs::rename(data.join("files.dat"), tmp.path().join("files.dat")).unwrap();
    let o = run(
        &[
            "files.dat",
            "2",
            "--ranks-per-node",
            "1",
            "--dat-path",
            "data",
            "--json",
        ],
        tmp.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = fs::read_to_string(tmp.path().join("rebalanced-files.dat")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(&lines[..3], &["1.8", "-1", "6"], "{text}");
    // Group 3 weighs 1115 bytes (its gap file), the others 115: it is alone on its rank.
    let reads = coreneuron_reads(&text, 2).unwrap();
    assert!(reads.contains(&vec!["3".to_string()]), "{reads:?}");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["gap_junctions"], true);
    assert_eq!(
        v["rank_bytes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .max(),
        Some(1115)
    );
    // Without --dat-path the data is looked for beside files.dat, and the missing file is named.
    let o = run(&["files.dat", "2", "--ranks-per-node", "1"], tmp.path());
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("0_1.dat: missing data file of cell group 0 (listed in files.dat)"),
        "{}",
        stderr(&o)
    );
}

/// Rule: bad input is refused with a message naming the file, line or option, and no
/// output (nor a temporary file) is left behind.
#[test]
fn bad_input_is_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    make_dir(d, "1.8\n3\n0\n1\n2\n", &[(0, 10), (1, 20), (2, 30)], &[]);
    let before = files_in(d);
    let refused = |args: &[&str], want: &str| {
        let o = run(args, d);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
        assert_eq!(files_in(d), before, "{args:?} left a file");
    };
    // Fewer groups than ranks (Ballast) or machines (neurodamus).
    refused(
        &["files.dat", "2", "--ranks-per-node", "2"],
        "3 cell groups for 2 machines × 2 ranks = 4 ranks: every rank needs at least one",
    );
    refused(
        &["files.dat", "4", "--strategy", "neurodamus"],
        "3 cell groups for 4 machines: every machine needs at least one",
    );
    // A missing data file.
    fs::remove_file(d.join("2_2.dat")).unwrap();
    let before_missing = files_in(d);
    let o = run(&["files.dat", "1", "--ranks-per-node", "3"], d);
    assert!(
        stderr(&o).contains("2_2.dat: missing data file of cell group 2"),
        "{}",
        stderr(&o)
    );
    assert_eq!(files_in(d), before_missing);
    fs::write(d.join("2_2.dat"), [0u8; 30]).unwrap();
    // The count line against the entries; --max-entries overrides it.
    fs::write(d.join("files.dat"), "1.8\n4\n0\n1\n2\n").unwrap();
    refused(
        &["files.dat", "1", "--ranks-per-node", "3"],
        "files.dat: the count line says 4 entries but 3 entry lines follow; give --max-entries 0",
    );
    let o = run(
        &[
            "files.dat",
            "1",
            "--ranks-per-node",
            "3",
            "--max-entries",
            "0",
            "--output-file",
            "all.dat",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        fs::read_to_string(d.join("all.dat")).unwrap().lines().nth(1),
        Some("3")
    );
    fs::remove_file(d.join("all.dat")).unwrap();
    let o = run(
        &[
            "files.dat",
            "1",
            "--ranks-per-node",
            "2",
            "--max-entries",
            "2",
            "--output-file",
            "two.dat",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("using the first 2 of 3 entry lines"),
        "{}",
        stderr(&o)
    );
    // Group 1 (20 bytes of _2.dat) is the heavier: rank 0.
    assert_eq!(fs::read_to_string(d.join("two.dat")).unwrap(), "1.8\n2\n1\n0\n");
    fs::remove_file(d.join("two.dat")).unwrap();
    // Not a files.dat; a duplicate group.
    fs::write(d.join("files.dat"), "1.8\n3\n0\nx\n2\n").unwrap();
    refused(
        &["files.dat", "1", "--ranks-per-node", "1"],
        "files.dat: line 4: \"x\" is not a cell-group id",
    );
    fs::write(d.join("files.dat"), "1.8\n3\n0\n1\n0\n").unwrap();
    refused(
        &["files.dat", "1", "--ranks-per-node", "1"],
        "files.dat: line 5: cell group 0 already appears on line 3",
    );
    fs::write(d.join("files.dat"), "1.8\n3\n0\n1\n2\n").unwrap();
    // The input as output, and an unwritable output.
    refused(
        &[
            "files.dat",
            "1",
            "--ranks-per-node",
            "1",
            "--output-file",
            "./files.dat",
        ],
        "refusing to write ./files.dat: it is the input files.dat",
    );
    refused(
        &[
            "files.dat",
            "1",
            "--ranks-per-node",
            "1",
            "--output-file",
            "no/such/dir/out.dat",
        ],
        "cannot write no/such/dir/out.dat (--output-file chooses where)",
    );
    refused(&["missing.dat", "1"], "missing.dat: No such file or directory");
    refused(&["files.dat", "0"], "<N_MACHINES> must be at least 1 (got 0)");
}

/// Rule: an output directory the user cannot write is refused naming the file and the
/// option, with nothing left behind (as nobody: root writes anywhere).
#[test]
fn an_unwritable_output_is_refused_as_an_unprivileged_user() {
    let Some(u) = common::Unprivileged::new("an_unwritable_output_is_refused_as_an_unprivileged_user") else {
        return;
    };
    use std::os::unix::fs::PermissionsExt;
    let w = u.work();
    make_dir(w, "1.8\n2\n0\n1\n", &[(0, 10), (1, 20)], &[]);
    for f in fs::read_dir(w).unwrap() {
        fs::set_permissions(f.unwrap().path(), fs::Permissions::from_mode(0o644)).unwrap();
    }
    let ro = w.join("ro");
    fs::create_dir(&ro).unwrap();
    fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
    let o = u.run(
        0,
        &[
            "rebalance-corenrn",
            "files.dat",
            "1",
            "--ranks-per-node",
            "2",
            "--output-file",
            "ro/out.dat",
        ],
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("cannot write ro/out.dat (--output-file chooses where)"),
        "{err}"
    );
    assert!(err.contains("ro"), "{err}");
    assert!(files_in(&ro).is_empty(), "{:?}", files_in(&ro));
    // The same run into the work directory succeeds: the refusal was the directory's.
    let o = u.run(
        0,
        &[
            "rebalance-corenrn",
            "files.dat",
            "1",
            "--ranks-per-node",
            "2",
            "--output-file",
            "out.dat",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(fs::read_to_string(w.join("out.dat")).unwrap(), "1.8\n2\n1\n0\n");
}
