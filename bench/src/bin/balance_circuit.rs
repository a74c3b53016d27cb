//! Benchmark program: transport-aware balancing of a large synthetic circuit.
//! Prints a table: generation and balancing time, peak memory, largest rank total
//! (transport-blind vs transport-aware) and mean peers, per receive-sharing mode.
//!
//! Run: `cargo run --release -p ballast-bench --bin balance_circuit -- [CELLS SYNAPSES RANKS]`
//! (default: 1,000,000 cells, 100,000,000 synapses, 1,024 ranks).
use std::time::Instant;

use ballast_balancer::synthetic::{generate_circuit, CircuitSpec, SyntheticSpec};
use ballast_balancer::transport_aware::balance_transport_aware;
use ballast_balancer::BalancerConfig;
use ballast_runtime::{ProcStatus, RecvSharing, TransportConfig};

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers: CELLS SYNAPSES RANKS"))
        .collect();
    let (cells, synapses, ranks) = match args[..] {
        [c, s, r] => (c as usize, s, r as u32),
        [] => (1_000_000, 100_000_000, 1024),
        _ => panic!("usage: balance_circuit [CELLS SYNAPSES RANKS]"),
    };
    let t = Instant::now();
    let spec = CircuitSpec {
        dry_run: SyntheticSpec {
            cells,
            metypes: 1000,
            populations: 2,
            seed: 1,
        },
        synapses,
        ..CircuitSpec::default()
    };
    let circuit = generate_circuit(&spec).expect("valid spec");
    println!(
        "circuit: {cells} cells, {synapses} synapses, {} distinct connections, generated in {:.1} s",
        circuit.network.connection_count(),
        t.elapsed().as_secs_f64()
    );
    let config = BalancerConfig::builder()
        .ranks(ranks)
        .build()
        .expect("valid config");
    println!(
        "{:<10} {:>9} {:>16} {:>16} {:>9} {:>11} {:>11}",
        "sharing", "seconds", "blind max KB", "aware max KB", "gain %", "blind peers", "aware peers"
    );
    for sharing in [RecvSharing::PerPeer, RecvSharing::Shared] {
        let charge = ballast_sim::transport_charge(&TransportConfig {
            recv_sharing: sharing,
            ..TransportConfig::default()
        });
        let t = Instant::now();
        let r = balance_transport_aware(&circuit.dry_run, &circuit.network, &config, &charge);
        let secs = t.elapsed().as_secs_f64();
        let mean = |v: &[usize]| v.iter().sum::<usize>() as f64 / v.len() as f64;
        let (b, a) = (r.blind.loads.max_total_kb(), r.aware.loads.max_total_kb());
        println!(
            "{:<10} {:>9.1} {:>16.1} {:>16.1} {:>9.2} {:>11.1} {:>11.1}",
            format!("{sharing:?}"),
            secs,
            b,
            a,
            100.0 * (1.0 - a / b),
            mean(&r.blind.loads.peers),
            mean(&r.aware.loads.peers)
        );
    }
    let status = ProcStatus::read_self().expect("/proc/self/status");
    println!(
        "peak resident memory (VmHWM): {:.0} MiB",
        status.vm_hwm_kb as f64 / 1024.0
    );
}
