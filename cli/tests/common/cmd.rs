//! Running `ballast` in a directory as a user does, and the checks the command-line tests
//! share: stderr as text, the files left in a directory, a command refused with no output.
use std::fs;
use std::path::Path;
use std::process::Output;

use super::ballast;

pub fn run(args: &[&str], dir: &Path) -> Output {
    ballast()
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run ballast")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Runs a dry-run that must fail: non-zero exit, `needle` in the message, no output file.
pub fn refused(args: &[&str], needle: &str) {
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

pub fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_owned()
}
