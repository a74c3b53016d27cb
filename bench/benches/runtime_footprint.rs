//! Footprint at 16, 64, 256 and 1,024 peers for `per-peer`, `shared`, `shared` +
//! `max_endpoints 64` and `xrc` (32 ranks per node): the model's prediction and what the
//! `local` transport measures (rank 0 of a fanout to every other rank: accounted
//! footprint, and the process' VmRSS / VmLck growth for all ranks). The table is printed
//! once; criterion then times `TransportConfig::predict`, which the balancer calls in
//! its loops.

use std::hint::black_box;

use ballast_runtime::{RecvSharing, RuntimeConfig, TransportConfig};
use ballast_sim::fanout::run_local;
use criterion::{criterion_group, criterion_main, Criterion};

fn modes() -> Vec<(&'static str, RuntimeConfig)> {
    let b = || RuntimeConfig::builder().lock_pool(true).ranks_per_node(32);
    vec![
        (
            "per-peer",
            b().recv_sharing(RecvSharing::PerPeer).build().unwrap(),
        ),
        ("shared", b().recv_sharing(RecvSharing::Shared).build().unwrap()),
        (
            "shared+max64",
            b().recv_sharing(RecvSharing::Shared)
                .max_endpoints(64)
                .build()
                .unwrap(),
        ),
        ("xrc", b().recv_sharing(RecvSharing::Xrc).build().unwrap()),
    ]
}

fn table() {
    println!("\nfootprint of rank 0 sending to P peers (defaults: 64 x 8 KiB pool, recv_depth 8, srq_depth 64; xrc: 32 ranks/node)");
    println!(
        "| mode | peers | model B | measured B (accounted) | endpoints live (model/measured) | VmRSS growth all ranks KiB | VmLck growth all ranks KiB | model growth all ranks KiB |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (name, cfg) in modes() {
        for peers in [16usize, 64, 256, 1024] {
            let t = cfg.transport();
            let pred = t.predict(peers, peers + 1, t.ranks_per_node);
            match run_local(peers + 1, &cfg, 1, 10, None) {
                Ok(r) => println!(
                    "| {name} | {peers} | {} | {} | {}/{} | {} | {} | {} |",
                    pred.total_bytes(),
                    r.after.footprint.total_bytes(),
                    pred.endpoints_live,
                    r.after.footprint.endpoints_live,
                    r.after.status.vm_rss_kb as i64 - r.before.status.vm_rss_kb as i64,
                    r.after.status.vm_lck_kb as i64 - r.before.status.vm_lck_kb as i64,
                    (r.after.world_predicted_bytes as i64 - r.before.world_predicted_bytes as i64) / 1024,
                ),
                Err(e) => println!(
                    "| {name} | {peers} | {} | error: {e} | | | | |",
                    pred.total_bytes()
                ),
            }
        }
    }
    println!();
}

fn predict_speed(c: &mut Criterion) {
    table();
    let t = TransportConfig {
        recv_sharing: RecvSharing::Xrc,
        ..Default::default()
    };
    c.bench_function("predict", |b| {
        b.iter(|| {
            black_box(&t)
                .predict(black_box(1023), black_box(4096), black_box(32))
                .total_bytes()
        })
    });
}

criterion_group!(benches, predict_speed);
criterion_main!(benches);
