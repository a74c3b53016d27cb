//! What the C-program tests share: the C compiler, the built libballast.so, building a C
//! program against include/ballast.h and that library (capi/tests/c/check.h, the checks the
//! programs share, is found beside them), running it, and reading its summary line. Each
//! test binary uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The C compiler (`$CC`, else `cc`), if it runs.
pub fn compiler() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let ok = Command::new(&cc)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(cc);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but no C compiler ({cc}) runs"
    );
    println!("SKIP: no C compiler ({cc}) runs; install gcc");
    None
}

/// target/<profile>, where cargo puts libballast.so for this test build.
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/..")
        .to_path_buf();
    assert!(
        dir.join("libballast.so").exists(),
        "{} has no libballast.so",
        dir.display()
    );
    dir
}

/// Compiles `src` with `flags` against the header and libballast.so; runs it and returns
/// its standard output (fails the test with its output when it exits non-zero).
pub fn build_and_run(cc: &str, src: &Path, flags: &[&str]) -> String {
    let prog = build(cc, src, flags);
    run(&prog, &[])
}

/// A C program built into a temporary directory (removed on drop).
pub struct Program {
    pub exe: PathBuf,
    pub src: PathBuf,
    _dir: tempfile::TempDir,
}

/// Compiles `src` with `flags` against the header and libballast.so.
pub fn build(cc: &str, src: &Path, flags: &[&str]) -> Program {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().expect("temp dir");
    let exe = tmp.path().join("prog");
    let lib = lib_dir();
    // The library's SONAME (capi/build.rs), which the program records and the loader looks
    // for: a link to the built libballast.so under that name, beside the program.
    let soname = format!(
        "libballast.so.{}.{}",
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR")
    );
    std::os::unix::fs::symlink(lib.join("libballast.so"), tmp.path().join(&soname)).expect("link the SONAME");
    let out = Command::new(cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g"])
        .args(flags)
        .arg("-I")
        .arg(manifest.join("include"))
        .arg(src)
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", tmp.path().display()))
        .args(["-lballast", "-o"])
        .arg(&exe)
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "{cc} {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Program {
        exe,
        src: src.to_path_buf(),
        _dir: tmp,
    }
}

/// Runs `prog` with `args`; returns its standard output (fails the test with its output
/// when it exits non-zero).
pub fn run(prog: &Program, args: &[&str]) -> String {
    let run = Command::new(&prog.exe)
        .args(args)
        .env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:exitcode=23")
        .env("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1:exitcode=24")
        .output()
        .expect("run the C program");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{} {args:?} exited with {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        prog.src.display(),
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    stdout
}

/// The sanitizer flags of the C test programs.
pub const SANITIZE: [&str; 3] = [
    "-fsanitize=address,undefined",
    "-fno-omit-frame-pointer",
    "-fno-sanitize-recover=undefined",
];

/// The number of passed checks on `prog`'s summary line (`{prog}: N passed, 0 failed`);
/// fails the test when a check failed.
pub fn passed(out: &str, prog: &str) -> usize {
    let head = format!("{prog}: ");
    let line = out
        .lines()
        .find(|l| l.starts_with(&head))
        .expect("the summary line");
    assert!(line.ends_with(" passed, 0 failed"), "{line}");
    line.trim_start_matches(&head)
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a count of passed checks")
}
