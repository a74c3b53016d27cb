//! Ping-pong over the `local` transport beside a raw crossbeam channel ping-pong in the
//! same run: latency (8 B, 1 KiB round trips) and bandwidth (64 KiB, 1 MiB, 16 MiB).
//!
//! Each measurement runs `iters` round trips inside one `local::run(2, ..)` and times
//! only the loop on rank 0 (thread start and connection set-up excluded, one warm-up
//! round trip first). The raw baseline moves a fresh copy of the bytes (`to_vec`) through
//! bounded(1) channels, the same copy the runtime's `send(&[u8])` / `recv` pair makes at
//! its ends.

use std::time::{Duration, Instant};

use ballast_runtime::{local, RuntimeConfig};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use crossbeam::channel::bounded;

fn local_round_trips(cfg: &RuntimeConfig, size: usize, iters: u64) -> Duration {
    let data = vec![7u8; size];
    let out = local::run(2, cfg, |comm| {
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

fn raw_round_trips(size: usize, iters: u64) -> Duration {
    let data = vec![7u8; size];
    let (to_b, from_a) = bounded::<Vec<u8>>(1);
    let (to_a, from_b) = bounded::<Vec<u8>>(1);
    std::thread::scope(|s| {
        s.spawn(move || {
            for _ in 0..iters + 1 {
                let m = from_a.recv().unwrap();
                to_a.send(m.as_slice().to_vec()).unwrap();
            }
        });
        to_b.send(data.to_vec()).unwrap();
        from_b.recv().unwrap();
        let t = Instant::now();
        for _ in 0..iters {
            to_b.send(data.to_vec()).unwrap();
            let _m = from_b.recv().unwrap();
        }
        t.elapsed()
    })
}

fn pingpong(c: &mut Criterion) {
    let cfg = RuntimeConfig::builder().lock_pool(false).build().unwrap();
    let big = RuntimeConfig::builder()
        .lock_pool(false)
        .buffer_size(64 << 10)
        .buffer_count(64)
        .srq_depth(64)
        .build()
        .unwrap();
    let mut g = c.benchmark_group("pingpong");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    for &size in &[8usize, 1024, 64 << 10, 1 << 20, 16 << 20] {
        g.throughput(Throughput::Bytes(2 * size as u64));
        if size >= 16 << 20 {
            g.sample_size(10);
        }
        g.bench_with_input(BenchmarkId::new("local", size), &size, |b, &s| {
            b.iter_custom(|n| local_round_trips(&cfg, s, n))
        });
        if size >= 64 << 10 {
            g.bench_with_input(BenchmarkId::new("local-64KiB-buffers", size), &size, |b, &s| {
                b.iter_custom(|n| local_round_trips(&big, s, n))
            });
        }
        g.bench_with_input(BenchmarkId::new("raw-crossbeam", size), &size, |b, &s| {
            b.iter_custom(|n| raw_round_trips(s, n))
        });
    }
    g.finish();
}

criterion_group!(benches, pingpong);
criterion_main!(benches);
