//! `ballast dry-run` interrupted while it writes its outputs: nothing left behind on SIGINT,
//! SIGTERM or (for a new file) SIGKILL.
mod common;

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::ballast;
use common::cmd::files_in;

/// Whether `pid` has a file open in `dir` (by /proc/PID/fd), and whether it is unnamed.
fn open_in(pid: u32, dir: &Path) -> Option<bool> {
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    fds.filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .find(|t| t.starts_with(dir))
        .map(|t| t.to_string_lossy().ends_with(" (deleted)"))
}

/// `command` (`ballast`, or what execs it) started on a 4M-cell dry-run into `dir`, output
/// silenced.
fn start_dry_run(mut command: Command, dir: &Path) -> std::process::Child {
    command
        .args([
            "dry-run",
            "--synthetic",
            "4000000",
            "--num-target-ranks",
            "64",
            "--output-dir",
            dir.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Starts a 4M-cell dry-run into `dir` and sends `signal` once it has its output file open
/// there. Returns whether the file was unnamed (O_TMPFILE), or `None` when the run ended
/// before it was seen writing.
fn signal_while_writing(dir: &Path, signal: &str) -> Option<bool> {
    let mut child = start_dry_run(ballast(), dir);
    let pid = child.id();
    let start = Instant::now();
    let mut unnamed = None;
    while start.elapsed() < Duration::from_secs(300) {
        if let Some(u) = open_in(pid, dir) {
            unnamed = Some(u);
            break;
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    if unnamed.is_some() {
        let k = Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .unwrap();
        assert!(k.success());
    }
    let status = child.wait().unwrap();
    if unnamed.is_some() {
        use std::os::unix::process::ExitStatusExt;
        assert!(
            status.signal().is_some() || !status.success(),
            "{signal}: {status:?}"
        );
    }
    unnamed
}

/// Rule 5: SIGINT or SIGTERM while the allocation is being written leaves nothing (a new
/// target) or only the previous file (an existing one); never a temporary file.
#[test]
fn sigint_and_sigterm_while_writing_leave_no_temporary_file() {
    for (signal, existing) in [("INT", false), ("TERM", false), ("INT", true), ("TERM", true)] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().canonicalize().unwrap();
        let target = d.join("allocation_r64_c1.pkl.gz");
        if existing {
            fs::write(&target, b"the previous allocation").unwrap();
        }
        let Some(_) = signal_while_writing(&d, signal) else {
            panic!(
                "SIG{signal}: the dry-run ended before its output file was seen open in {}",
                d.display()
            );
        };
        let left = files_in(&d);
        if existing {
            assert!(
                left == ["allocation_r64_c1.pkl.gz"]
                    || left == ["allocation_r64_c1.json", "allocation_r64_c1.pkl.gz"],
                "SIG{signal} with an existing target: {left:?}"
            );
            // The previous file, or (a signal during the commit waits for it) the complete new one.
            if fs::read(&target).unwrap() != b"the previous allocation" {
                let a = ballast_balancer::read_allocation(&target).unwrap();
                assert_eq!(
                    a.populations
                        .iter()
                        .map(|p| p.buckets.values().map(Vec::len).sum::<usize>())
                        .sum::<usize>(),
                    4_000_000
                );
            }
        } else {
            // Nothing, or (a signal during the commits) the complete outputs.
            assert!(
                left.is_empty() || left == ["allocation_r64_c1.json", "allocation_r64_c1.pkl.gz"],
                "SIG{signal} left {left:?}"
            );
        }
    }
}

/// SIGINT while writing into an output directory the run made (two levels of it) leaves
/// neither directory behind, unless the outputs were complete.
#[test]
fn sigint_while_writing_removes_the_output_directory_it_made() {
    let dir = tempfile::tempdir().unwrap();
    let top = dir.path().canonicalize().unwrap().join("new");
    let out = top.join("out");
    let Some(_) = signal_while_writing(&out, "INT") else {
        panic!(
            "the dry-run ended before its output file was seen open in {}",
            out.display()
        );
    };
    if top.exists() {
        assert_eq!(
            files_in(&out),
            ["allocation_r64_c1.json", "allocation_r64_c1.pkl.gz"],
            "left {} with incomplete outputs",
            out.display()
        );
    }
}

/// A run started ignoring SIGHUP (`nohup`) is not ended by SIGHUP while it writes its
/// outputs: the cleanup handler leaves an ignored signal ignored.
#[test]
fn an_ignored_sighup_stays_ignored_while_writing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    // `trap '' HUP` sets SIGHUP to ignored, which the exec'd command inherits.
    let mut sh = Command::new("sh");
    sh.args(["-c", "trap '' HUP; exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_ballast"));
    let mut child = start_dry_run(sh, &d);
    let pid = child.id();
    let start = Instant::now();
    let mut hups = 0;
    // SIGHUP every millisecond from when the output file is open until the run ends.
    while child.try_wait().unwrap().is_none() && start.elapsed() < Duration::from_secs(300) {
        if open_in(pid, &d).is_some() {
            let k = Command::new("kill")
                .args(["-HUP", &pid.to_string()])
                .status()
                .unwrap();
            hups += k.success() as usize;
            std::thread::sleep(Duration::from_millis(1));
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let status = child.wait().unwrap();
    assert!(hups > 0, "the dry-run ended before its output file was seen open");
    assert!(status.success(), "{hups} SIGHUPs: {status:?}");
    assert_eq!(
        files_in(&d),
        ["allocation_r64_c1.json", "allocation_r64_c1.pkl.gz"]
    );
}

/// Rule 5: SIGKILL while writing a new target leaves nothing (the file is unnamed until
/// linked into place).
#[test]
fn sigkill_while_writing_a_new_file_leaves_nothing() {
    use ballast_balancer::atomic::{AtomicFile, Method};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    // Whether the file system has O_TMPFILE (asked with the library's own fallback logic).
    if AtomicFile::create(&d.join("probe")).unwrap().method() != Method::Unnamed {
        eprintln!(
            "SKIP: {} does not support O_TMPFILE: a SIGKILL may leave the named temporary",
            d.display()
        );
        return;
    }
    let unnamed = signal_while_writing(&d, "KILL").unwrap_or_else(|| {
        panic!(
            "the dry-run ended before its output file was seen open in {}",
            d.display()
        )
    });
    assert!(files_in(&d).is_empty(), "SIGKILL left {:?}", files_in(&d));
    assert!(unnamed, "the file was open under a name");
}
