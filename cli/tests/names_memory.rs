//! Issue 33, finding 8 for names: a `cell_memory_usage.json` with millions of distinct
//! metype or population names (a few bytes of text each, some 150 bytes of memory) aborted
//! ("memory allocation failed") under `ulimit -v`. The maps and lists of names grow with
//! `try_reserve`: under every limit the read ends with a message or succeeds, never aborts,
//! in the plain shape and with another key first (once read by a separate serde reader;
//! the one scanner now reads both).
mod common;

use std::fmt::Write;
use std::fs;
use std::path::Path;

/// `ballast dry-run` on `name` in `dir` under `ulimit -v limit_kb`: exit code and stderr.
fn dry_run_limited(dir: &Path, name: &str, limit_kb: u64) -> (Option<i32>, String) {
    let o = std::process::Command::new("sh")
        .current_dir(dir)
        .args([
            "-c",
            &format!("ulimit -v {limit_kb}; exec \"$0\" \"$@\""),
            env!("CARGO_BIN_EXE_ballast"),
        ])
        .args(["dry-run", "--memory-usage", name, "--num-target-ranks", "2"])
        .output()
        .unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// `{"m0": 1, "m1": 1, …}` for `n` names, and `{"m0": [0], "m1": [1], …}` for the first `k`.
fn metypes(n: usize, k: usize) -> (String, String) {
    let (mut memory, mut gids) = (String::from("{"), String::from("{"));
    for i in 0..n {
        let sep = if i == 0 { "" } else { "," };
        write!(memory, "{sep}\"m{i}\":1").unwrap();
        if i < k {
            write!(gids, "{sep}\"m{i}\":[{i}]").unwrap();
        }
    }
    (memory + "}", gids + "}")
}

#[test]
fn millions_of_names_are_refused_cleanly_under_ulimit() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let n = 3_000_000;
    let (many_metypes, all_gids) = metypes(n, n);
    let (_, one_gid) = metypes(1, 1);
    let mut pops = String::from("{");
    for i in 0..n {
        let sep = if i == 0 { "" } else { "," };
        write!(pops, "{sep}\"p{i}\":{{\"m0\":[{i}]}}").unwrap();
    }
    pops.push('}');
    let files = [
        (
            "metypes.json",
            format!(r#"{{"metype_memory": {many_metypes}, "pop_metype_gids": {{"p": {one_gid}}}}}"#),
        ),
        (
            "metypes-serde.json",
            format!(r#"{{"x": 1, "metype_memory": {many_metypes}, "pop_metype_gids": {{"p": {one_gid}}}}}"#),
        ),
        (
            "pop-metypes.json",
            format!(r#"{{"metype_memory": {many_metypes}, "pop_metype_gids": {{"p": {all_gids}}}}}"#),
        ),
        (
            "populations.json",
            format!(r#"{{"metype_memory": {{"m0": 1}}, "pop_metype_gids": {pops}}}"#),
        ),
        (
            "populations-serde.json",
            format!(r#"{{"x": 1, "metype_memory": {{"m0": 1}}, "pop_metype_gids": {pops}}}"#),
        ),
    ];
    for (name, text) in &files {
        fs::write(d.join(name), text).unwrap();
        let mut refused = 0;
        for limit_kb in [250_000, 400_000, 600_000, 900_000, 1_300_000] {
            let (code, e) = dry_run_limited(d, name, limit_kb);
            if code == Some(0) {
                continue;
            }
            assert_eq!(code, Some(1), "{name} under ulimit -v {limit_kb}: {e}");
            assert!(
                e.contains(&format!("{name}: not enough memory to hold its"))
                    || e.contains(&format!("reading {name} would need about")),
                "{name} under ulimit -v {limit_kb}: {e}"
            );
            refused += e.contains("not enough memory to hold its metype and population names") as usize;
        }
        assert!(refused > 0, "{name}: no limit was low enough to test the refusal");
        fs::remove_file(d.join(name)).unwrap();
    }
}
