//! Hostile files given to the CLI (issue 33, findings 7 to 15): outputs that are FIFOs or
//! device nodes, sidecars and allocation files that are not regular files, an allocation
//! reused for another rank count, inputs that change while read or do not fit in memory,
//! huge lines quoted in messages, `files.dat` as CoreNEURON reads it. FIFOs and device
//! nodes are made in a temporary directory, never in the real `/dev`.
mod common;

use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::ballast;

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

fn mkfifo(path: &Path) {
    let s = std::process::Command::new("mkfifo").arg(path).status().unwrap();
    assert!(s.success(), "mkfifo {}", path.display());
}

/// A FIFO at `name` in `dir`, and a character device with `/dev/null`'s numbers at
/// `name` + `.dev` where `mknod` works (as root); the paths made.
fn special_nodes(dir: &Path, name: &str) -> Vec<PathBuf> {
    let fifo = dir.join(name);
    mkfifo(&fifo);
    let dev = dir.join(format!("{name}.dev"));
    let made = std::process::Command::new("mknod")
        .arg(&dev)
        .args(["c", "1", "3"])
        .output()
        .unwrap();
    if made.status.success() {
        vec![fifo, dev]
    } else {
        eprintln!("SKIP the device node case: mknod: {}", stderr(&made).trim());
        vec![fifo]
    }
}

/// `path` is still the FIFO or device node it was.
fn still_special(path: &Path) -> bool {
    let t = fs::symlink_metadata(path).unwrap().file_type();
    t.is_fifo() || t.is_char_device()
}

const DRY_RUN: &str = r#"{"metype_memory": {"A": 100.0, "B": 50.0}, "metype_cell_syn_average": {"A": 10.0},
 "pop_metype_gids": {"P": {"A": [0, 1, 2, 3, 4, 5], "B": [6, 7, 8, 9]}}}"#;

/// A files.dat of `n` groups (ids 1..=n) with their data files, in `dir`.
fn corenrn_input(dir: &Path, n: usize) -> PathBuf {
    let mut text = format!("1.8\n{n}\n");
    for id in 1..=n {
        text.push_str(&format!("{id}\n"));
        for (suffix, size) in [("1", 10 * id), ("2", 100 * id), ("3", 5)] {
            fs::write(dir.join(format!("{id}_{suffix}.dat")), vec![0u8; size]).unwrap();
        }
    }
    let f = dir.join("files.dat");
    fs::write(&f, text).unwrap();
    f
}

/// Finding 7: an output that exists and is a FIFO or a device node is refused, naming it,
/// and left as it was: every output of `dry-run` and `rebalance-corenrn`.
#[test]
fn outputs_that_are_fifos_or_devices_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    fs::write(d.join("cm.json"), DRY_RUN).unwrap();
    corenrn_input(d, 4);
    let mut cases: Vec<(PathBuf, Vec<String>)> = Vec::new();
    let base = |extra: &[&str]| -> Vec<String> {
        ["dry-run", "--memory-usage", "cm.json", "--num-target-ranks", "2"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    };
    for node in special_nodes(d, "out.json") {
        let n = node.to_str().unwrap().to_owned();
        cases.push((node, base(&["--output-dir", "o1", "--write-memory-usage", &n])));
    }
    for node in special_nodes(d, "plot.svg") {
        let n = node.to_str().unwrap().to_owned();
        cases.push((node, base(&["--output-dir", "o2", "--plot", &n])));
    }
    for node in special_nodes(d, "rebalanced.dat") {
        let n = node.to_str().unwrap().to_owned();
        let args = [
            "rebalance-corenrn",
            "files.dat",
            "1",
            "--ranks-per-node",
            "2",
            "--output-file",
            &n,
        ];
        cases.push((node, args.iter().map(|s| s.to_string()).collect()));
    }
    // The allocation and its sidecar in --output-dir.
    for name in ["allocation_r2_c1.pkl.gz", "allocation_r2_c1.json"] {
        let out = d.join(format!("dir-{name}"));
        fs::create_dir(&out).unwrap();
        for node in special_nodes(&out, name) {
            if node.extension().is_some_and(|e| e == "dev") {
                // Named by the allocation only: the device case goes under the real name.
                fs::remove_file(&node).unwrap();
                continue;
            }
            let o = out.to_str().unwrap().to_owned();
            cases.push((node, base(&["--output-dir", &o])));
        }
    }
    assert!(cases.len() >= 5);
    for (node, args) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run(&args, d);
        let e = stderr(&o);
        assert!(!o.status.success(), "{args:?}: {e}");
        assert!(
            e.contains("refusing to write")
                && e.contains(node.to_str().unwrap())
                && e.contains("not a regular file"),
            "{args:?}: {e}"
        );
        assert!(still_special(&node), "{} was replaced", node.display());
    }
    // A symlink to a regular file is fine.
    fs::write(d.join("real.dat"), b"old").unwrap();
    std::os::unix::fs::symlink(d.join("real.dat"), d.join("link.dat")).unwrap();
    let o = run(
        &[
            "rebalance-corenrn",
            "files.dat",
            "1",
            "--ranks-per-node",
            "2",
            "--output-file",
            "link.dat",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(fs::read_to_string(d.join("link.dat"))
        .unwrap()
        .starts_with("1.8\n"));
}
