//! The proxy simulation over the local transport: the same spikes for every rank count,
//! balancing mode and exchange; peers and transport footprint as the balancer predicts.

use std::path::Path;

use ballast_balancer::network::Network;
use ballast_balancer::synthetic::{CircuitSpec, SyntheticSpec};
use ballast_balancer::AllocationSource;
use ballast_runtime::RuntimeConfig;
use ballast_sim::place;
use ballast_sim::{all_spikes, exchange::ExchangeKind, launch::run_local, LbMode, SimInput, SimParams};
use ballast_sim::{report::out_dat, report::predicted_footprint};

fn small_circuit() -> SimInput {
    let spec = CircuitSpec {
        dry_run: SyntheticSpec {
            cells: 600,
            metypes: 20,
            populations: 2,
            seed: 3,
        },
        synapses: 600 * 150,
        ..CircuitSpec::default()
    };
    SimInput::synthetic(&spec).unwrap()
}

fn params(exchange: ExchangeKind) -> SimParams {
    SimParams {
        tstop_ms: 60.0,
        exchange,
        memory_scale: 0.001,
        ..SimParams::default()
    }
}

fn run(
    input: &SimInput,
    mode: LbMode,
    ranks: u32,
    exchange: ExchangeKind,
    dir: &Path,
) -> (String, Vec<ballast_sim::RankOutcome>, Vec<u32>) {
    let p = place(mode, &input.dry_run, &input.circuit.network.offsets, ranks, dir).unwrap();
    let cfg = RuntimeConfig::default();
    let out = run_local(
        &input.circuit,
        &p.rank_of,
        ranks as usize,
        &cfg,
        &params(exchange),
        None,
    )
    .unwrap();
    (out_dat(&all_spikes(&out), 0.025), out, p.rank_of)
}

fn peer_counts(net: &Network, rank_of: &[u32], ranks: usize) -> Vec<usize> {
    let sets = net.peers(rank_of, ranks);
    (0..ranks).map(|r| sets.count(r)).collect()
}

#[test]
fn identical_spikes_across_ranks_modes_and_exchanges() {
    let input = small_circuit();
    let dir = tempfile::tempdir().unwrap();
    let (reference, outs, _) = run(&input, LbMode::RoundRobin, 1, ExchangeKind::P2p, dir.path());
    let spikes = reference.lines().count() - 1;
    // Irregular firing at a few Hz: 600 cells × 60 ms.
    assert!(spikes > 30 && spikes < 3000, "{spikes} spikes");
    assert_eq!(outs[0].exchange.spikes_sent, 0);
    // Recurrent input matters: without the network the spikes differ.
    let mut silent = small_circuit();
    silent.circuit = ballast_sim::SimCircuit::new(
        Network::from_pairs(silent.circuit.network.offsets.clone(), &[]).unwrap(),
        silent.circuit.cell_kb.clone(),
        silent.circuit.delays.clone(),
    )
    .unwrap();
    let (alone, _, _) = run(&silent, LbMode::RoundRobin, 1, ExchangeKind::P2p, dir.path());
    assert_ne!(alone, reference, "recurrent spikes change the activity");
    for ranks in [1u32, 3, 8] {
        for mode in [LbMode::RoundRobin, LbMode::Memory] {
            for exchange in [ExchangeKind::P2p, ExchangeKind::Allgather] {
                let (got, outs, _) = run(&input, mode, ranks, exchange, dir.path());
                assert_eq!(got, reference, "{ranks} ranks, {mode}, {exchange}");
                if ranks > 1 {
                    assert!(outs.iter().map(|o| o.exchange.spikes_received).sum::<u64>() > 0);
                }
            }
        }
    }
}

#[test]
fn p2p_connects_exactly_the_predicted_peers_with_the_predicted_footprint() {
    let input = small_circuit();
    let dir = tempfile::tempdir().unwrap();
    let cfg = RuntimeConfig::default();
    for (mode, ranks) in [
        (LbMode::RoundRobin, 8u32),
        (LbMode::Memory, 8),
        (LbMode::Memory, 3),
    ] {
        let (_, outs, rank_of) = run(&input, mode, ranks, ExchangeKind::P2p, dir.path());
        let peers = peer_counts(&input.circuit.network, &rank_of, ranks as usize);
        for o in &outs {
            assert_eq!(
                o.footprint.peers_connected, peers[o.rank] as u64,
                "{mode} rank {}",
                o.rank
            );
            let predicted = predicted_footprint(cfg.transport(), peers[o.rank], 0, ranks as usize);
            assert_eq!(
                o.footprint.total_bytes(),
                predicted.total_bytes(),
                "{mode} rank {}",
                o.rank
            );
        }
    }
}

#[test]
fn memory_mode_regenerates_for_another_rank_count_and_refuses_a_corrupt_file() {
    let input = small_circuit();
    let dir = tempfile::tempdir().unwrap();
    let offs = &input.circuit.network.offsets;
    let p4 = place(LbMode::Memory, &input.dry_run, offs, 4, dir.path()).unwrap();
    assert!(matches!(p4.source, Some(AllocationSource::Regenerated(_))));
    let again = place(LbMode::Memory, &input.dry_run, offs, 4, dir.path()).unwrap();
    assert!(matches!(again.source, Some(AllocationSource::File(_))));
    assert_eq!(again.rank_of, p4.rank_of);
    // A file for 4 ranks does not serve 5: regenerated.
    let p5 = place(LbMode::Memory, &input.dry_run, offs, 5, dir.path()).unwrap();
    assert!(matches!(p5.source, Some(AllocationSource::Regenerated(_))));
    assert!(p5.rank_of.iter().all(|&r| r < 5) && p5.rank_of.contains(&4));
    std::fs::write(
        dir.path().join("allocation_r6_c1.pkl.gz"),
        b"\x1f\x8b not really gzip",
    )
    .unwrap();
    let err = place(LbMode::Memory, &input.dry_run, offs, 6, dir.path())
        .unwrap_err()
        .to_string();
    assert!(err.contains("allocation_r6_c1.pkl.gz"), "{err}");
}
