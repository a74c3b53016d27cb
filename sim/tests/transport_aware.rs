//! Transport-aware balancing on synthetic circuits: never worse than transport-blind, and
//! strictly better where per-peer receive buffers make peers expensive; the charge is the
//! runtime's footprint model ([`ballast_sim::transport_charge`]).
use ballast_balancer::synthetic::{generate_circuit, CircuitSpec, SyntheticSpec};
use ballast_balancer::transport_aware::{
    balance_transport_aware, evaluate, rank_of_allocation, Candidate, CellCosts,
};
use ballast_balancer::BalancerConfig;
use ballast_runtime::{RecvSharing, TransportConfig};
use ballast_sim::transport_charge;

fn transport(sharing: RecvSharing) -> TransportConfig {
    TransportConfig {
        recv_sharing: sharing,
        ..TransportConfig::default()
    }
}

#[test]
fn per_peer_charge_is_lowered_by_co_locating_connected_cells() {
    // 20,000 cells on a sheet, 2M synapses, local connectivity (sigma 100 µm), 64 ranks.
    let spec = CircuitSpec {
        dry_run: SyntheticSpec {
            cells: 20_000,
            metypes: 50,
            populations: 2,
            seed: 3,
        },
        synapses: 2_000_000,
        ..CircuitSpec::default()
    };
    let circuit = generate_circuit(&spec).unwrap();
    let config = BalancerConfig::builder().ranks(64).cycles(2).build().unwrap();
    // Deep per-peer receive queues (64 × 64 KiB = 4 MiB per peer, the order of what
    // per-peer RC receive queues pin in MPI libraries tuned for bandwidth): peers are
    // expensive, so where connected cells sit matters.
    let mut per_peer = transport(RecvSharing::PerPeer);
    per_peer.recv_depth = 64;
    per_peer.buffer_size = 65536;
    let per_peer = transport_charge(&per_peer);
    let result = balance_transport_aware(&circuit.dry_run, &circuit.network, &config, &per_peer);
    let (blind, aware) = (&result.blind.loads, &result.aware.loads);
    eprintln!("tried: {:?}", result.tried);
    eprintln!(
        "blind: max total {:.0} KB, mean peers {:.1}; aware ({}): max total {:.0} KB, mean peers {:.1}",
        blind.max_total_kb(),
        blind.peers.iter().sum::<usize>() as f64 / 64.0,
        result.aware.method,
        aware.max_total_kb(),
        aware.peers.iter().sum::<usize>() as f64 / 64.0
    );
    assert!(aware.max_total_kb() < blind.max_total_kb());
    // Every candidate recorded: the blind one first, the one kept among them and the least.
    assert_eq!(
        result.tried[0],
        Candidate {
            method: "blind".into(),
            max_total_kb: blind.max_total_kb(),
        }
    );
    assert!(result.tried.contains(&Candidate {
        method: result.aware.method.clone(),
        max_total_kb: aware.max_total_kb(),
    }));
    assert!(result
        .tried
        .iter()
        .all(|c| c.max_total_kb >= aware.max_total_kb()));
    // The allocation holds every gid once and matches the placement it came from.
    result.allocation.validate(&circuit.dry_run).unwrap();
    let costs = CellCosts::new(&circuit.dry_run, &circuit.network.offsets);
    let again = evaluate(
        &circuit.network,
        &costs,
        &rank_of_allocation(&result.allocation, &circuit.network.offsets),
        64,
        Some(&per_peer),
    );
    assert_eq!(&again, aware);
    // Peer counts are symmetric totals of real cross-rank connections: blind placement
    // scatters connected cells, so it has more peers on average.
    assert!(aware.peers.iter().sum::<usize>() < blind.peers.iter().sum::<usize>());
}

#[test]
fn never_worse_than_blind_in_any_mode() {
    let spec = CircuitSpec {
        dry_run: SyntheticSpec {
            cells: 3_000,
            metypes: 30,
            populations: 1,
            seed: 9,
        },
        synapses: 300_000,
        sigma_um: 400.0,
        ..CircuitSpec::default()
    };
    let circuit = generate_circuit(&spec).unwrap();
    for sharing in [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc] {
        for ranks in [1, 7, 32] {
            let config = BalancerConfig::builder().ranks(ranks).build().unwrap();
            let mut t = transport(sharing);
            t.ranks_per_node = 4;
            let ch = transport_charge(&t);
            let r = balance_transport_aware(&circuit.dry_run, &circuit.network, &config, &ch);
            assert!(
                r.aware.loads.max_total_kb() <= r.blind.loads.max_total_kb(),
                "{sharing:?} {ranks}"
            );
            r.allocation.validate(&circuit.dry_run).unwrap();
        }
    }
}
