//! The TCP bootstrap across real processes on loopback: this test binary starts copies of
//! itself as ranks (`child_rank`, configured through `BALLAST_ROOT`/`BALLAST_RANK`/
//! `BALLAST_SIZE`/`BALLAST_BOOTSTRAP_TIMEOUT` like a launcher would), 4 that all-gather, then
//! 3 of 4 so that rank 0 times out naming the rank that never started.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ballast_runtime::bootstrap::{self, BootstrapKind};
use ballast_runtime::RuntimeConfig;

/// A rank, when started by the tests below; does nothing in a normal test run.
#[test]
fn child_rank() {
    let cfg = RuntimeConfig::from_env().unwrap();
    let b = cfg.bootstrap();
    if b.root.is_none() || b.rank_var != Some("BALLAST_RANK") {
        return;
    }
    let rank = b.rank.unwrap();
    match bootstrap::auto(&cfg).and_then(|mut auto| {
        assert_eq!(auto.kind, BootstrapKind::Tcp);
        let boot = &mut auto.boot;
        let first = boot.all_gather(format!("hello from {rank}").as_bytes())?;
        let second = boot.all_gather(&vec![rank as u8; rank * 100_000])?;
        Ok((first, second))
    }) {
        Ok((first, second)) => {
            let text: Vec<String> = first
                .iter()
                .map(|d| String::from_utf8_lossy(d).into_owned())
                .collect();
            let sizes: Vec<usize> = second
                .iter()
                .enumerate()
                .map(|(r, d)| {
                    if d.iter().all(|&x| x == r as u8) {
                        d.len()
                    } else {
                        usize::MAX
                    }
                })
                .collect();
            println!("GATHERED {} | {:?}", text.join(","), sizes);
        }
        Err(e) => {
            println!("BOOTSTRAP-ERROR rank {rank}: {e}");
            panic!("bootstrap failed: {e}");
        }
    }
}

fn spawn(root: &str, rank: usize, size: usize, timeout_s: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_rank", "--nocapture", "--test-threads=1"])
        .env("BALLAST_ROOT", root)
        .env("BALLAST_RANK", rank.to_string())
        .env("BALLAST_SIZE", size.to_string())
        .env("BALLAST_BOOTSTRAP_TIMEOUT", timeout_s)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits (bounded) for a child and returns (success, stdout).
fn finish(mut c: Child, limit: Duration) -> (bool, String) {
    let start = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            c.kill().unwrap();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = c.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn loopback_root() -> String {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

#[test]
fn four_processes_all_gather_on_loopback() {
    let root = loopback_root();
    // Rank 0 starts last: the others retry until it listens.
    let mut children: Vec<Child> = (1..4).map(|r| spawn(&root, r, 4, "30")).collect();
    std::thread::sleep(Duration::from_millis(200));
    children.insert(0, spawn(&root, 0, 4, "30"));
    for (r, c) in children.into_iter().enumerate() {
        let (ok, out) = finish(c, Duration::from_secs(60));
        assert!(ok, "rank {r}: {out}");
        assert!(
            out.contains(
                "GATHERED hello from 0,hello from 1,hello from 2,hello from 3 | [0, 100000, 200000, 300000]"
            ),
            "rank {r}: {out}"
        );
    }
}

#[test]
fn rank_that_never_starts_is_named_after_the_timeout() {
    let root = loopback_root();
    let children: Vec<Child> = (0..3).map(|r| spawn(&root, r, 4, "1.5")).collect();
    let outs: Vec<(bool, String)> = children
        .into_iter()
        .map(|c| finish(c, Duration::from_secs(30)))
        .collect();
    let (ok0, out0) = &outs[0];
    assert!(!ok0, "rank 0 must fail: {out0}");
    assert!(
        out0.contains("BOOTSTRAP-ERROR rank 0: bootstrap: timed out after 1.5s at rank 0"),
        "{out0}"
    );
    assert!(
        out0.contains("rank(s) [3] did not show up (3 of 4 present)"),
        "{out0}"
    );
    for (r, (ok, out)) in outs.iter().enumerate().skip(1) {
        assert!(
            !ok && out.contains(&format!("BOOTSTRAP-ERROR rank {r}")),
            "rank {r}: {out}"
        );
    }
}
