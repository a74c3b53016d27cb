//! A panic the library catches at its C boundary prints nothing to stderr unless
//! `BALLAST_DEBUG` is set (issue 35, point 5); its message is `ballast_last_error`'s either
//! way. The panic runs in a child process (this test binary run again with `CHILD`), whose
//! stderr is read whole.

use std::process::Command;

use ballast::{ballast_last_error, panic_in_boundary_for_tests, BALLAST_EINTERNAL};

const CHILD: &str = "CAPI_QUIET_PANIC_CHILD";

/// In the child: the panic, then its code and `ballast_last_error`'s message on stdout.
fn child() {
    let rc = panic_in_boundary_for_tests();
    let mut buf = vec![0u8; 256];
    // SAFETY: `buf` has 256 writable bytes.
    let n = unsafe { ballast_last_error(buf.as_mut_ptr().cast(), buf.len()) };
    let msg = String::from_utf8_lossy(&buf[..n as usize]).into_owned();
    println!("rc {rc} msg {msg}");
}

/// Runs this test in a child with `debug` as `BALLAST_DEBUG` (or without it); its stdout
/// and stderr.
fn run_child(debug: Option<&str>) -> (String, String) {
    let exe = std::env::current_exe().expect("the test binary");
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        "a_caught_panic_is_quiet_unless_ballast_debug",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, "1")
    .env_remove("BALLAST_DEBUG")
    .env_remove("RUST_BACKTRACE");
    if let Some(d) = debug {
        cmd.env("BALLAST_DEBUG", d);
    }
    let out = cmd.output().expect("run the child");
    assert!(out.status.success(), "child failed: {out:?}");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_caught_panic_is_quiet_unless_ballast_debug() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let want = format!(
        "rc {BALLAST_EINTERNAL} msg ballast_test_panic: internal error (panic): a panic for the test"
    );
    let (out, err) = run_child(None);
    assert!(out.contains(&want), "stdout: {out}");
    assert!(!err.contains("panicked"), "stderr without BALLAST_DEBUG: {err}");
    assert!(
        !err.contains("a panic for the test"),
        "stderr without BALLAST_DEBUG: {err}"
    );
    let (out, err) = run_child(Some("0"));
    assert!(out.contains(&want), "stdout: {out}");
    assert!(
        !err.contains("a panic for the test"),
        "stderr with BALLAST_DEBUG=0: {err}"
    );
    let (out, err) = run_child(Some("1"));
    assert!(out.contains(&want), "stdout: {out}");
    assert!(
        err.contains("panicked") && err.contains("a panic for the test"),
        "stderr with BALLAST_DEBUG=1: {err}"
    );
}
