//! Test helpers shared by the `ballast` binary's integration tests: running the command
//! ([`cmd`]), as an unprivileged user, and `shared_data` (the balancer's: one copy for the
//! workspace's test crates).
#![allow(dead_code)]
use std::path::PathBuf;

pub mod cmd;

#[path = "../../../balancer/tests/common/mod.rs"]
mod balancer_common;
/// `../shared/data/<rel>`, or a printed skip (a failure under `CI=true`): the balancer's.
#[allow(unused_imports)] // not every test binary reads ../shared
pub use balancer_common::shared_data;

/// Path to the `ballast` binary built for these tests.
pub fn ballast() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_ballast"))
}

/// The `ballast` binary run as the unprivileged user `nobody` with a memlock limit
/// (`runuser -u nobody -- prlimit --memlock=L:L`), from a copy in a world-readable
/// temporary directory (the checkout may sit under a 0700 home) with a work directory
/// `nobody` may write to.
pub struct Unprivileged {
    dir: tempfile::TempDir,
    bin: PathBuf,
    work: PathBuf,
}

fn have(tool: &str) -> bool {
    std::process::Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

impl Unprivileged {
    /// `None` (after printing why `test` is skipped) when this process is not root (it
    /// cannot switch user) or `runuser`/`prlimit` are absent; under `CI=true` (which runs
    /// as root) an absent tool is a failure.
    pub fn new(test: &str) -> Option<Unprivileged> {
        use std::os::unix::fs::PermissionsExt;
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let root = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            == Some("0");
        if !root {
            eprintln!("SKIP {test}: not root, so the test cannot switch to the unprivileged user nobody");
            return None;
        }
        for tool in ["runuser", "prlimit"] {
            if !have(tool) {
                if std::env::var("CI").as_deref() == Ok("true") {
                    panic!("CI=true but `{tool}` (util-linux) is missing");
                }
                eprintln!("SKIP {test}: `{tool}` (util-linux) is missing");
                return None;
            }
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin = dir.path().join("ballast");
        std::fs::copy(env!("CARGO_BIN_EXE_ballast"), &bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
        Some(Unprivileged { dir, bin, work })
    }

    /// Runs `ballast ARGS` as nobody with RLIMIT_MEMLOCK `memlock` bytes (soft and hard),
    /// in the work directory.
    pub fn run(&self, memlock: u64, args: &[&str]) -> std::process::Output {
        let _ = &self.dir;
        std::process::Command::new("runuser")
            .args([
                "-u",
                "nobody",
                "--",
                "prlimit",
                &format!("--memlock={memlock}:{memlock}"),
            ])
            .arg(&self.bin)
            .args(args)
            .current_dir(&self.work)
            .output()
            .unwrap()
    }

    /// The work directory (written by the runs).
    pub fn work(&self) -> &std::path::Path {
        &self.work
    }
}
