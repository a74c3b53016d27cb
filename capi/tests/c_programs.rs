//! Builds the C programs against include/ballast.h and the freshly built libballast.so
//! with the system C compiler, and runs them: examples/c/hello.c, and the C conformance
//! program tests/c/conformance.c under `-fsanitize=address,undefined` (a leak, an invalid
//! access or undefined behaviour fails it). Skips with a printed reason when no C
//! compiler is found, except under CI=true, where that is a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The C compiler (`$CC`, else `cc`), if it runs.
fn compiler() -> Option<String> {
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
fn lib_dir() -> PathBuf {
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
fn build_and_run(cc: &str, src: &Path, flags: &[&str]) -> String {
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
    let run = Command::new(&exe)
        .env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:exitcode=23")
        .env("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1:exitcode=24")
        .output()
        .expect("run the C program");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{} exited with {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        src.display(),
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    stdout
}

#[test]
fn hello_example_runs() {
    let Some(cc) = compiler() else { return };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/c/hello.c");
    let out = build_and_run(&cc, &src, &[]);
    assert_eq!(
        out,
        "rank 1 of 2 got \"hello from rank 0\" (18 bytes from rank 0, tag 7)\n"
    );
}

#[test]
fn comm_notes_from_c_under_address_and_undefined_sanitizers() {
    let Some(cc) = compiler() else { return };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/notes.c");
    let flags = [
        "-fsanitize=address,undefined",
        "-fno-omit-frame-pointer",
        "-fno-sanitize-recover=undefined",
    ];
    let out = build_and_run(&cc, &src, &flags);
    // 14 checks on each of the 2 ranks, and ballast_local_run's own.
    assert_eq!(out, "capi notes: 29 passed, 0 failed\n");
}

#[test]
fn c_conformance_under_address_and_undefined_sanitizers() {
    let Some(cc) = compiler() else { return };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/conformance.c");
    let out = build_and_run(
        &cc,
        &src,
        &[
            "-fsanitize=address,undefined",
            "-fno-omit-frame-pointer",
            "-fno-sanitize-recover=undefined",
        ],
    );
    print!("{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with("capi conformance: "))
        .expect("the summary line");
    let passed: usize = line
        .trim_start_matches("capi conformance: ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a count of passed checks");
    assert!(line.ends_with(" passed, 0 failed"), "{line}");
    assert!(passed >= 150, "only {passed} checks ran: {line}");
}

#[test]
fn header_is_ascii_and_declares_every_exported_function() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let h = std::fs::read_to_string(dir.join("include/ballast.h")).expect("include/ballast.h");
    assert!(h.is_ascii(), "include/ballast.h has non-ASCII characters");
    let mut exported = Vec::new();
    for f in [
        "lib.rs",
        "comm.rs",
        "config.rs",
        "error.rs",
        "notes.rs",
        "process.rs",
        "request.rs",
    ] {
        let src = std::fs::read_to_string(dir.join("src").join(f)).expect("source");
        for l in src.lines() {
            if let Some(rest) = l.trim().strip_prefix("pub unsafe extern \"C\" fn ") {
                exported.push(rest.split('(').next().unwrap().to_string());
            }
        }
    }
    assert!(exported.len() >= 25, "{exported:?}");
    for f in &exported {
        assert!(f.starts_with("ballast_"), "{f} lacks the ballast_ prefix");
        assert!(
            h.contains(&format!(" {f}(")),
            "{f} is not declared in include/ballast.h"
        );
    }
}
