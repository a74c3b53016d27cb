//! Ping-pong over the `local` transport beside a raw crossbeam channel ping-pong in the
//! same run: latency (8 B, 1 KiB round trips) and bandwidth (64 KiB, 1 MiB, 16 MiB).
//!
//! Each measurement runs `iters` round trips inside one `threads::run_ranks(2, ..)` and times
//! only the loop on rank 0 (thread start and connection set-up excluded, one warm-up
//! round trip first). The raw baseline moves a fresh copy of the bytes (`to_vec`) through
//! bounded(1) channels, the same copy the runtime's `send(&[u8])` / `recv` pair makes at
//! its ends.
//!
//! `pingpong-cap`: the 8 B and 1 KiB round trip to an endpoint peer beside one to a
//! datagram peer: 3 ranks with `max_endpoints 1`; rank 0 first exchanges a message with
//! rank 2 (which takes its one endpoint), then ping-pongs with rank 1 (`datagram`: over the
//! datagram path both ways) or with rank 2 (`endpoint`).

use std::time::{Duration, Instant};

use ballast_runtime::{launch::threads, RuntimeConfig};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use crossbeam::channel::bounded;

fn local_round_trips(cfg: &RuntimeConfig, size: usize, iters: u64) -> Duration {
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

/// Round trips between rank 0 and rank `peer` (1: a datagram peer, 2: the endpoint peer)
/// of 3 ranks with `max_endpoints 1`, after rank 0 exchanged a message with rank 2: in
/// worlds of at most 200 round trips each (400 datagrams, below the promotion policy's
/// `PROMOTE_EVERY`, which would otherwise give the busy datagram peer the endpoint).
fn capped_round_trips(size: usize, iters: u64, peer: usize) -> Duration {
    let chunk = 200.min(ballast_runtime::engine::PROMOTE_EVERY as u64 / 2 - 1);
    let mut left = iters;
    let mut total = Duration::ZERO;
    while left > 0 {
        let n = left.min(chunk);
        total += capped_world(size, n, peer);
        left -= n;
    }
    total
}

fn capped_world(size: usize, iters: u64, peer: usize) -> Duration {
    let cfg = RuntimeConfig::builder()
        .lock_pool(false)
        .max_endpoints(1)
        .build()
        .unwrap();
    let data = vec![7u8; size];
    let out = threads::run_ranks(3, &cfg, |comm| {
        let me = comm.rank();
        if me == 0 {
            comm.send(2, 9, &[1]).unwrap();
        } else if me == 2 {
            comm.recv(0, 9u32).unwrap();
        }
        if me != 0 && me != peer {
            return Duration::ZERO;
        }
        let other = if me == 0 { peer } else { 0 };
        let one = |comm: &mut ballast_runtime::Communicator| {
            if me == 0 {
                comm.send(other, 1, &data).unwrap();
                comm.recv(other, 1u32).unwrap();
            } else {
                let m = comm.recv(other, 1u32).unwrap();
                comm.send(other, 1, &m.data).unwrap();
            }
        };
        one(comm);
        let t = Instant::now();
        for _ in 0..iters {
            one(comm);
        }
        let d = t.elapsed();
        if me == 0 {
            let dg = comm.footprint().datagram_peers;
            assert_eq!(dg, u64::from(peer == 1), "rank {peer} on the datagram path");
        }
        d
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
    let mut g = c.benchmark_group("pingpong-cap");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    for &size in &[8usize, 1024] {
        g.bench_with_input(BenchmarkId::new("endpoint", size), &size, |b, &s| {
            b.iter_custom(|n| capped_round_trips(s, n, 2))
        });
        g.bench_with_input(BenchmarkId::new("datagram", size), &size, |b, &s| {
            b.iter_custom(|n| capped_round_trips(s, n, 1))
        });
    }
    g.finish();
}

criterion_group!(benches, pingpong);
criterion_main!(benches);
