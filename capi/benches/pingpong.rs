//! Ping-pong over the `local` transport through the C ABI (libballast's `extern "C"`
//! functions, `ballast_local_run` + `ballast_send`/`ballast_recv`) beside the same through
//! the Rust API (`threads::run_ranks` + `send`/`recv`), in one run: 8 B and 1 MiB round trips.
//!
//! The C path is called from Rust through this crate's rlib: the same functions a C
//! program links, without a C compiler in the benchmark (so it lives in the C-API crate,
//! with the `unsafe` of its calls). Each measurement runs its round
//! trips inside one run of 2 ranks and times only rank 0's loop after one warm-up round
//! trip. The C path receives into a caller buffer (probe, take, copy), the Rust path
//! takes the message's own `Vec`.

use std::os::raw::{c_int, c_void};
use std::time::{Duration, Instant};

use ballast::{ballast_comm, ballast_config, ballast_local_run, ballast_recv, ballast_send};
use ballast_runtime::{launch::threads, RuntimeConfig};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn rust_round_trips(cfg: &RuntimeConfig, size: usize, iters: u64) -> Duration {
    let data = vec![7u8; size];
    let out = threads::run_ranks(2, cfg, |comm| {
        let peer = 1 - comm.rank();
        let one = |comm: &mut ballast_runtime::Communicator| {
            if comm.rank() == 0 {
                comm.send(peer, 1, &data).unwrap();
                comm.recv(peer, 1u32).unwrap();
            } else {
                let m = comm.recv(peer, 1u32).unwrap();
                comm.send(peer, 1, &m.data).unwrap();
            }
        };
        one(comm);
        let t = Instant::now();
        for _ in 0..iters {
            one(comm);
        }
        t.elapsed()
    })
    .unwrap();
    out[0]
}

/// The Rust API with the receive the C path makes: `probe`, then `try_recv` of the probed
/// message (its cost, apart from the boundary's).
fn rust_probe_round_trips(cfg: &RuntimeConfig, size: usize, iters: u64) -> Duration {
    let data = vec![7u8; size];
    let out = threads::run_ranks(2, cfg, |comm| {
        let peer = 1 - comm.rank();
        let recv = |comm: &mut ballast_runtime::Communicator| {
            let e = comm.probe(peer, 1u32).unwrap();
            comm.try_recv(e.source, e.tag).unwrap().unwrap()
        };
        let one = |comm: &mut ballast_runtime::Communicator| {
            if comm.rank() == 0 {
                comm.send(peer, 1, &data).unwrap();
                recv(comm);
            } else {
                let m = recv(comm);
                comm.send(peer, 1, &m.data).unwrap();
            }
        };
        one(comm);
        let t = Instant::now();
        for _ in 0..iters {
            one(comm);
        }
        t.elapsed()
    })
    .unwrap();
    out[0]
}

/// What `rank_main` needs: the size, the round trips, and rank 0's time (out).
struct Job {
    size: usize,
    iters: u64,
    elapsed: std::sync::Mutex<Duration>,
}

unsafe extern "C" fn rank_main(comm: *mut ballast_comm, user: *mut c_void) -> c_int {
    // SAFETY: `user` is the `Job` `c_round_trips` passes, alive for the whole run.
    let job = unsafe { &*(user as *const Job) };
    let mut rank = 0;
    // SAFETY: `comm` is the live communicator of this rank; `rank` a local.
    unsafe { ballast::ballast_rank(comm, &mut rank) };
    let peer = 1 - rank;
    let mut buf = vec![7u8; job.size];
    let mut one = || {
        let (p, n) = (buf.as_mut_ptr().cast::<c_void>(), buf.len());
        // SAFETY: `buf` has `n` bytes, readable and writable; the status may be NULL.
        unsafe {
            if rank == 0 {
                assert_eq!(ballast_send(comm, peer, 1, p, n), 0);
                assert_eq!(
                    ballast_recv(comm, peer as c_int, 1, p, n, std::ptr::null_mut()),
                    0
                );
            } else {
                assert_eq!(
                    ballast_recv(comm, peer as c_int, 1, p, n, std::ptr::null_mut()),
                    0
                );
                assert_eq!(ballast_send(comm, peer, 1, p, n), 0);
            }
        }
    };
    one();
    let t = Instant::now();
    for _ in 0..job.iters {
        one();
    }
    if rank == 0 {
        *job.elapsed.lock().unwrap() = t.elapsed();
    }
    0
}

fn c_round_trips(cfg: &ballast_config, size: usize, iters: u64) -> Duration {
    let job = Job {
        size,
        iters,
        elapsed: std::sync::Mutex::new(Duration::ZERO),
    };
    // SAFETY: `cfg` is a live configuration; `job` outlives the run; `rank_main` only
    // reads it and writes rank 0's time under its mutex.
    let rc = unsafe { ballast_local_run(2, cfg, Some(rank_main), &job as *const Job as *mut c_void) };
    assert_eq!(rc, 0);
    let d = *job.elapsed.lock().unwrap();
    d
}

/// The C configuration with the same settings as `rust`'s.
fn c_config(settings: &[(&str, &str)]) -> *mut ballast_config {
    let mut c = std::ptr::null_mut();
    // SAFETY: `c` is a local out-pointer; keys and values are NUL-terminated literals.
    unsafe {
        assert_eq!(ballast::ballast_config_new(&mut c), 0);
        for (k, v) in settings {
            let (k, v) = (
                std::ffi::CString::new(*k).unwrap(),
                std::ffi::CString::new(*v).unwrap(),
            );
            assert_eq!(ballast::ballast_config_set(c, k.as_ptr(), v.as_ptr()), 0);
        }
    }
    c
}

fn pingpong(c: &mut Criterion) {
    let settings = [("transport", "local"), ("lock_pool", "off")];
    let rust = RuntimeConfig::builder().lock_pool(false).build().unwrap();
    let cc = c_config(&settings);
    let mut g = c.benchmark_group("pingpong");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    for &size in &[8usize, 1 << 20] {
        g.throughput(Throughput::Bytes(2 * size as u64));
        g.bench_with_input(BenchmarkId::new("rust", size), &size, |b, &s| {
            b.iter_custom(|n| rust_round_trips(&rust, s, n))
        });
        g.bench_with_input(BenchmarkId::new("rust-probe", size), &size, |b, &s| {
            b.iter_custom(|n| rust_probe_round_trips(&rust, s, n))
        });
        g.bench_with_input(BenchmarkId::new("c", size), &size, |b, &s| {
            // SAFETY: `cc` is live until freed below.
            b.iter_custom(|n| c_round_trips(unsafe { &*cc }, s, n))
        });
    }
    g.finish();
    // SAFETY: `cc` from ballast_config_new, freed once.
    unsafe { ballast::ballast_config_free(cc) };
}

criterion_group!(benches, pingpong);
criterion_main!(benches);
