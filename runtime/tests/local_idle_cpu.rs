//! A rank of the in-process transport that waits (in `recv`, in a barrier) blocks and
//! uses no core meanwhile: its thread's CPU time (from /proc/thread-self/schedstat, in
//! nanoseconds) over a one-second wait stays far below the wait. CPU time, not wall time:
//! a loaded machine makes the wait longer, not the CPU time larger.

use std::time::Duration;

use ballast_runtime::{launch::threads, RuntimeConfig};

/// How long the sender keeps the others waiting.
const WAIT: Duration = Duration::from_secs(1);
/// Most CPU time a rank may use while it waits that long: a fifth of the wait. A rank that
/// spins uses all of it (half on a shared core); one that blocks uses the spin phase of its
/// backoff and its wake-ups, a few ms, more when the machine runs other tests beside.
const MAX_CPU_NS: u64 = 200_000_000;

/// CPU time of the calling thread so far, ns; None (with the reason) where the kernel
/// does not give it.
fn thread_cpu_ns() -> Result<u64, String> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat")
        .map_err(|e| format!("/proc/thread-self/schedstat: {e}"))?;
    s.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("/proc/thread-self/schedstat: unexpected content {s:?}"))
}

fn available() -> bool {
    match thread_cpu_ns() {
        Ok(_) => true,
        Err(e) => {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("thread CPU time needed under CI: {e}");
            }
            eprintln!("skipped: no per-thread CPU time ({e})");
            false
        }
    }
}

fn config() -> RuntimeConfig {
    RuntimeConfig::builder().lock_pool(false).build().unwrap()
}

#[test]
fn a_rank_blocked_in_recv_for_a_second_uses_no_core() {
    if !available() {
        return;
    }
    let out = threads::run_ranks(2, &config(), |comm| {
        // Connect first, so that the wait below is a wait for data only.
        comm.barrier().unwrap();
        if comm.rank() == 0 {
            std::thread::sleep(WAIT);
            comm.send(1, 5, &[42]).unwrap();
            None
        } else {
            let t0 = std::time::Instant::now();
            let c0 = thread_cpu_ns().unwrap();
            let m = comm.recv(0, 5u32).unwrap();
            let cpu = thread_cpu_ns().unwrap() - c0;
            Some((m.data, t0.elapsed(), cpu))
        }
    })
    .unwrap();
    let (data, waited, cpu) = out[1].clone().unwrap();
    eprintln!("cpu {cpu} ns in {waited:?}");
    assert_eq!(data, vec![42]);
    assert!(
        waited >= WAIT - Duration::from_millis(50),
        "waited only {waited:?}"
    );
    assert!(
        cpu < MAX_CPU_NS,
        "the waiting rank used {} ms of CPU in {waited:?}",
        cpu / 1_000_000
    );
}

#[test]
fn many_ranks_waiting_in_a_barrier_use_no_core() {
    if !available() {
        return;
    }
    let n = 64;
    let out = threads::run_ranks(n, &config(), |comm| {
        comm.barrier().unwrap();
        if comm.rank() == 0 {
            std::thread::sleep(WAIT);
        }
        let c0 = thread_cpu_ns().unwrap();
        comm.barrier().unwrap();
        thread_cpu_ns().unwrap() - c0
    })
    .unwrap();
    let waiting = &out[1..];
    let max = *waiting.iter().max().unwrap();
    let sum: u64 = waiting.iter().sum();
    assert!(
        max < MAX_CPU_NS,
        "a waiting rank used {} ms of CPU (all: {:?})",
        max / 1_000_000,
        waiting
    );
    // 63 ranks waiting a second together use less than a quarter of the machine's 2 cores
    // (spinning, they would use both cores for the whole second).
    assert!(
        sum < 500_000_000,
        "{} waiting ranks used {} ms of CPU together",
        n - 1,
        sum / 1_000_000
    );
}
