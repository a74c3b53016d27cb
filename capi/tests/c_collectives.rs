//! Builds tests/c/collectives.c (issue 35's collectives from C, tests/c/collectives_body.h)
//! against include/ballast.h and the freshly built libballast.so under
//! `-fsanitize=address,undefined`, and runs it: worlds of 1, 2, 3, 4 and 7 ranks as threads,
//! every result against a reference computed on one rank, and the misuse cases. Skips with
//! a printed reason when no C compiler is found, except under CI=true, where that is a
//! failure. (The MPI half, tests/c/mpi_collectives.c, runs under mpirun in ci/capi.sh.)

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

#[test]
fn collectives_from_c_on_1_to_7_local_ranks_under_sanitizers() {
    let Some(cc) = compiler() else { return };
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().expect("temp dir");
    let exe = tmp.path().join("collectives");
    let lib = lib_dir();
    // The program records the SONAME (capi/build.rs): a link to the built library under it.
    let soname = format!(
        "libballast.so.{}.{}",
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR")
    );
    std::os::unix::fs::symlink(lib.join("libballast.so"), tmp.path().join(&soname)).expect("link the SONAME");
    let src = manifest.join("tests/c/collectives.c");
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-O1"])
        .args([
            "-fsanitize=address,undefined",
            "-fno-omit-frame-pointer",
            "-fno-sanitize-recover=undefined",
        ])
        .arg("-I")
        .arg(manifest.join("include"))
        .arg(&src)
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
    print!("{stdout}");
    assert!(
        run.status.success(),
        "collectives.c exited with {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    for n in [1, 2, 3, 4, 7] {
        assert!(
            stdout.contains(&format!("capi collectives: {n} ranks: ok\n")),
            "{stdout}"
        );
    }
    let line = stdout
        .lines()
        .find(|l| l.ends_with(" passed, 0 failed"))
        .expect("the summary line");
    let passed: usize = line
        .trim_start_matches("capi collectives: ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a count of passed checks");
    // Per rank, about 400 checks (misuse, 96 reductions, roots, parts); 17 ranks in all.
    assert!(passed >= 17 * 300, "only {passed} checks ran");
}
