//! The shared-memory transport across real processes: this test binary starts copies of
//! itself as ranks (`child_rank`, configured through `BALLAST_ROOT`/`BALLAST_RANK`/
//! `BALLAST_SIZE` like a launcher would, the TCP bootstrap on loopback), each over
//! `ballast_runtime::shm::communicator`: an exchange of small and large messages and an
//! all-reduce at 1, 2, 3, 4 and 7 processes, and at 3 as `nobody`; a rank killed with
//! SIGKILL while the others wait for it; a rank stopped (SIGSTOP) for 2 s in the middle of
//! a flood, continued, and nothing lost; ranks on two nodes refused.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ballast_runtime::{bootstrap, shm, Communicator, ReduceOp, Result, RuntimeConfig, Source, Tag, TagMatch};

/// The bytes rank `r` sends in round `k` (`len` of them).
fn payload(r: usize, k: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + r * 7 + k) as u8).collect()
}

/// Each rank sends a small and a 1 MiB message to the next rank and checks those of the
/// previous one, then all-reduces its rank; returns the sum.
fn exchange(comm: &mut Communicator) -> Result<u64> {
    let (r, n) = (comm.rank(), comm.world_size());
    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    for (k, len) in [(0, 10), (1, 1 << 20), (2, 0)] {
        let req = comm.isend(next, k as Tag, &payload(r, k, len))?;
        let m = comm.recv(Source::Rank(prev), TagMatch::Tag(k as Tag))?;
        assert_eq!(m.data, payload(prev, k, len), "rank {r}: round {k} from {prev}");
        comm.wait(req)?;
    }
    let mut sum = [r as u64];
    comm.all_reduce(&mut sum[..], ReduceOp::Sum)?;
    Ok(sum[0])
}

/// Rounds of [`flood`]; the rank stopped stops itself after posting round [`STOP_AT`]'s sends.
const FLOOD_ROUNDS: usize = 120;
const STOP_AT: usize = 40;

/// Every rank sends a message to every other in each of [`FLOOD_ROUNDS`] rounds (8 B, 1 KB
/// or 70 KB: past the credits, so that senders to a stopped rank block), and checks every
/// message it receives; the last rank stops itself (SIGSTOP) once, mid-flood. Returns the
/// bytes received.
fn flood(comm: &mut Communicator) -> Result<u64> {
    let (r, n) = (comm.rank(), comm.world_size());
    let mut got = 0u64;
    for k in 0..FLOOD_ROUNDS {
        let len = [8, 1000, 70_000][k % 3];
        let reqs = (0..n)
            .filter(|&p| p != r)
            .map(|p| comm.isend(p, k as Tag, &payload(r, k, len)))
            .collect::<Result<Vec<_>>>()?;
        if r == n - 1 && k == STOP_AT {
            println!("STOPPING {r}");
            let pid = std::process::id().to_string();
            Command::new("kill").args(["-STOP", &pid]).status().unwrap();
        }
        for p in (0..n).filter(|&p| p != r) {
            let m = comm.recv(Source::Rank(p), TagMatch::Tag(k as Tag))?;
            assert_eq!(m.data, payload(p, k, len), "rank {r}: round {k} from {p}");
            got += m.data.len() as u64;
        }
        for q in reqs {
            comm.wait(q)?;
        }
    }
    Ok(got)
}

/// A rank, when started by the tests below; does nothing in a normal test run.
#[test]
fn child_rank() {
    let cfg = RuntimeConfig::from_env().unwrap();
    let b = cfg.bootstrap();
    if b.root.is_none() || b.rank_var != Some("BALLAST_RANK") {
        return;
    }
    let rank = b.rank.unwrap();
    let mode = std::env::var("SHM_TEST_MODE").unwrap_or_default();
    let out = bootstrap::auto(&cfg)
        .map_err(ballast_runtime::Error::from)
        .and_then(|mut auto| {
            let mut comm = shm::communicator(&mut *auto.boot, &cfg)?;
            if mode == "wait" {
                // Every rank waits for a message from the last, which is killed meanwhile.
                println!("READY {rank}");
                let last = comm.world_size() - 1;
                if rank == last {
                    std::thread::sleep(Duration::from_secs(60));
                }
                let t = Instant::now();
                let e = comm.recv(Source::Rank(last), TagMatch::Any).err();
                println!("WAITED {rank} {} ms: {e:?}", t.elapsed().as_millis());
                return Ok(0);
            }
            let sum = if mode == "flood" {
                flood(&mut comm)?
            } else {
                exchange(&mut comm)?
            };
            shm::finish(comm)?;
            Ok(sum)
        });
    match out {
        Ok(sum) => println!("RESULT {rank} {sum}"),
        Err(e) => {
            println!("ERROR {rank}: {e}");
            std::process::exit(1);
        }
    }
}

fn loopback_root() -> String {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

fn spawn(root: &str, rank: usize, size: usize, env: &[(&str, &str)]) -> Child {
    spawn_as(None, root, rank, size, env)
}

/// The options of `setpriv` that run a command as `nobody` (65534, numeric: the group's
/// name differs between distributions).
const AS_NOBODY: [&str; 3] = ["--reuid=65534", "--regid=65534", "--clear-groups"];

/// A rank, run from `exe` through `setpriv` with `user` when given (else this binary).
fn spawn_as(
    user: Option<(&[&str], &std::path::Path)>,
    root: &str,
    rank: usize,
    size: usize,
    env: &[(&str, &str)],
) -> Child {
    let mut c = match user {
        Some((opts, exe)) => {
            let mut c = Command::new("setpriv");
            c.args(opts).arg(exe).current_dir("/");
            c
        }
        None => Command::new(std::env::current_exe().unwrap()),
    };
    c.args(["--exact", "child_rank", "--nocapture", "--test-threads=1"])
        .env("BALLAST_ROOT", root)
        .env("BALLAST_RANK", rank.to_string())
        .env("BALLAST_SIZE", size.to_string())
        .env("BALLAST_BOOTSTRAP_TIMEOUT", "30")
        .env("BALLAST_LOCK_POOL", "off")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().unwrap()
}

/// Waits (at most `limit`) for a child; its success and stdout.
fn finish(mut c: Child, limit: Duration) -> (bool, String) {
    let start = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            c.kill().unwrap();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = c.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn processes_exchange_and_reduce_at_1_2_3_4_and_7() {
    // The 1 MiB messages go by CMA (process_vm_readv between the processes), and at 3 also
    // in chunks through the rings (BALLAST_SHM_CMA=off).
    for (n, cma) in [(1, "on"), (2, "on"), (3, "on"), (3, "off"), (4, "on"), (7, "on")] {
        let root = loopback_root();
        let children: Vec<Child> = (0..n)
            .map(|r| spawn(&root, r, n, &[("BALLAST_SHM_CMA", cma)]))
            .collect();
        let want = (0..n as u64).sum::<u64>();
        for (r, c) in children.into_iter().enumerate() {
            let (ok, out) = finish(c, Duration::from_secs(120));
            assert!(
                ok && out.contains(&format!("RESULT {r} {want}")),
                "{n} processes (CMA {cma}), rank {r}: {out}"
            );
        }
    }
}

/// Cluster users are not root: the ranks run as `nobody` (memfd, abstract sockets and the
/// same-uid check need no privilege). Skipped with a reason where this cannot switch user;
/// a failure under `CI=true`, which runs as root.
#[test]
fn processes_exchange_as_nobody() {
    // A copy of this binary that nobody can run, wherever the clone is (a home directory
    // of mode 0700 would stop it).
    let dir = std::env::temp_dir().join(format!("ballast-shm-nobody-{}", std::process::id()));
    // Removed however the test ends (the copy is the size of this binary).
    struct Gone<'a>(&'a std::path::Path);
    impl Drop for Gone<'_> {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(self.0);
        }
    }
    let _gone = Gone(&dir);
    let exe = dir.join("shm_processes");
    let copied = std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::copy(std::env::current_exe()?, &exe))
        .and_then(|_| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
        });
    let probe = copied.map_err(|e| e.to_string()).and_then(|_| {
        let o = Command::new("setpriv")
            .args(AS_NOBODY)
            .arg(&exe)
            .arg("--list")
            .output()
            .map_err(|e| e.to_string())?;
        if o.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&o.stderr).into_owned())
        }
    });
    if let Err(why) = probe {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true: cannot run as nobody with setpriv: {why}"
        );
        eprintln!("SKIP: cannot run as nobody with setpriv (not root, or setpriv absent): {why}");
        return;
    }
    let n = 3;
    let root = loopback_root();
    let children: Vec<Child> = (0..n)
        .map(|r| spawn_as(Some((&AS_NOBODY, &exe)), &root, r, n, &[]))
        .collect();
    for (r, c) in children.into_iter().enumerate() {
        let (ok, out) = finish(c, Duration::from_secs(120));
        assert!(
            ok && out.contains(&format!("RESULT {r} 3")),
            "as nobody, rank {r}: {out}"
        );
    }
}

#[test]
fn a_rank_killed_while_the_others_wait_ends_their_wait_within_a_second() {
    let n = 3;
    let root = loopback_root();
    let mut children: Vec<Child> = (0..n)
        .map(|r| spawn(&root, r, n, &[("SHM_TEST_MODE", "wait")]))
        .collect();
    // Each rank's lines of its own (the test harness prints its own lines too), read by a
    // thread: a line that never comes fails the test at a deadline instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel::<(usize, String)>();
    for (r, c) in children.iter_mut().enumerate() {
        let out = c.stdout.take().unwrap();
        let tx = tx.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(|l| l.ok()) {
                for what in ["READY", "WAITED"] {
                    if let Some(i) = l.find(what) {
                        let _ = tx.send((r, l[i..].to_string()));
                    }
                }
            }
        });
    }
    let next = |what: &str| -> (usize, String) {
        loop {
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok((r, l)) if l.starts_with(what) => return (r, l),
                Ok(_) => continue,
                Err(e) => panic!("no {what} line within 30 s: {e}"),
            }
        }
    };
    // Every rank is up (its communicator made) before the last is killed.
    let mut ready: Vec<String> = (0..n).map(|_| next("READY").1).collect();
    ready.sort();
    assert_eq!(ready, (0..n).map(|r| format!("READY {r}")).collect::<Vec<_>>());
    // Let the waiting ranks block in their receive.
    std::thread::sleep(Duration::from_millis(200));
    let killed = Instant::now();
    children[n - 1].kill().unwrap();
    children[n - 1].wait().unwrap();
    for _ in 0..n - 1 {
        let (r, line) = next("WAITED");
        let after = killed.elapsed();
        assert!(line.starts_with(&format!("WAITED {r} ")), "{line}");
        assert!(line.contains("Aborted"), "rank {r} must see the job fail: {line}");
        assert!(
            after < Duration::from_secs(1),
            "rank {r} waited {after:?} after the kill: {line}"
        );
    }
    for c in children.iter_mut().take(n - 1) {
        c.wait().unwrap();
    }
    // Segments are memfds: nothing of Ballast's was ever named in /dev/shm (the names it
    // gives its segments start `ballast`; other jobs on the machine may add their own).
    let ours: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains("ballast"))
                .collect()
        })
        .unwrap_or_default();
    assert!(ours.is_empty(), "in /dev/shm: {ours:?}");
}

/// Whether process `pid` is stopped (`T` in `/proc/{pid}/stat`).
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('T')))
        .unwrap_or(false)
}

#[test]
fn a_rank_stopped_mid_flood_is_waited_for_and_nothing_is_lost() {
    let n = 3;
    let root = loopback_root();
    let mut children: Vec<Child> = (0..n)
        .map(|r| spawn(&root, r, n, &[("SHM_TEST_MODE", "flood")]))
        .collect();
    let last = children[n - 1].id();
    let start = Instant::now();
    while !stopped(last) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "rank {} never stopped itself",
            n - 1
        );
        assert!(
            children[n - 1].try_wait().unwrap().is_none(),
            "rank {} ended",
            n - 1
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Stopped for twice the time a dead rank takes to be noticed: the others wait.
    std::thread::sleep(Duration::from_secs(2));
    for (r, c) in children.iter_mut().enumerate().take(n - 1) {
        assert!(
            c.try_wait().unwrap().is_none(),
            "rank {r} ended while rank {} was stopped",
            n - 1
        );
    }
    assert!(stopped(last));
    let cont = Command::new("kill")
        .args(["-CONT", &last.to_string()])
        .status()
        .unwrap();
    assert!(cont.success());
    // Every rank received every byte of every other rank, checked by content.
    let per_peer: u64 = (0..FLOOD_ROUNDS).map(|k| [8u64, 1000, 70_000][k % 3]).sum();
    for (r, c) in children.into_iter().enumerate() {
        let (ok, out) = finish(c, Duration::from_secs(60));
        assert!(
            ok && out.contains(&format!("RESULT {r} {}", per_peer * (n as u64 - 1))),
            "rank {r}: {out}"
        );
    }
}

#[test]
fn ranks_on_two_nodes_are_refused_naming_them() {
    let root = loopback_root();
    let children: Vec<Child> = (0..2)
        .map(|r| {
            spawn(
                &root,
                r,
                2,
                &[("BALLAST_NODE", if r == 0 { "node-a" } else { "node-b" })],
            )
        })
        .collect();
    for (r, c) in children.into_iter().enumerate() {
        let (ok, out) = finish(c, Duration::from_secs(60));
        let other = if r == 0 {
            "rank 1 on `node-b`"
        } else {
            "rank 0 on `node-a`"
        };
        assert!(
            !ok && out.contains("needs every rank on one node") && out.contains(other),
            "rank {r}: {out}"
        );
    }
}
