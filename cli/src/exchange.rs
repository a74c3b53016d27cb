//! `ballast dry-run --exchange`: which ranks a simulator's spike exchange talks to, so that
//! `--transport-model ballast` charges each rank the peers the exchange really opens.
//!
//! - `allgather` (NEURON's default, and what the NEURON shim of integrations/neuron/ runs
//!   as one `ballast_allgatherv` per exchange): the partners of Ballast's all-gather, the
//!   ring of `Communicator::all_gatherv` (runtime/src/comm/collectives.rs: rank `r` sends to
//!   `(r + 1) % n` and receives from `(r + n - 1) % n`, so 2 peers, 1 on 2 ranks, 0 on 1).
//!   It depends on the world size only, not on where the cells are: no connectivity is
//!   needed, and the balance is the transport-blind one with this constant charge added.
//!   On the MPI native path (`--transport mpi --mpi-native on`) the all-gather is MPI's
//!   own (`MPI_Allgatherv` on Ballast's duplicate communicator): no peer, in both modes.
//! - `multisend`: the peers that hold targets (and sources), from the circuit's
//!   connectivity, plus the ring all-gather's partners: NEURON's multisend ends each
//!   exchange with `nrnmpi_multisend_conserve`, which the shim runs as a
//!   `ballast_allgatherv` (the transport-aware balance of `--transport-model ballast`, with
//!   `TransportCharge::ring_partners`).

use ballast_balancer::transport_aware::{RankLoads, TransportCharge};
use ballast_balancer::{Allocation, DryRun};
use clap::ValueEnum;

/// The spike exchange the simulator runs (`--exchange`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Exchange {
    /// One all-gather per exchange (NEURON's default; the shim's `ballast_allgatherv`).
    Allgather,
    /// Point to point to the ranks that hold targets (NEURON's `xchng_meth` 1).
    Multisend,
}

/// The ranks rank `rank` of `world_size` exchanges with in Ballast's ring all-gather, in
/// ascending order, without `rank` itself (empty for one rank).
pub fn allgather_partners(rank: usize, world_size: usize) -> Vec<usize> {
    ballast_balancer::transport_aware::ring_partners(rank, world_size)
}

/// Other nodes among `partners` (`ranks_per_node` consecutive ranks per node).
fn peer_nodes(rank: usize, partners: &[usize], ranks_per_node: usize) -> usize {
    let k = ranks_per_node.max(1);
    let mut nodes: Vec<usize> = partners
        .iter()
        .map(|p| p / k)
        .filter(|n| *n != rank / k)
        .collect();
    nodes.dedup();
    nodes.len()
}

/// Per-rank loads of `allocation` with the all-gather's charge: cells from the dry run
/// (`rank_kb`: the allocation's KB per rank, every cycle, as the summary weighs it; no
/// synapse split without connectivity), transport `charge` for each rank's ring partners.
pub fn allgather_loads(rank_kb: Vec<f64>, charge: &TransportCharge, mpi_collectives: bool) -> RankLoads {
    let n = rank_kb.len();
    // `mpi_collectives`: the MPI native path runs MPI's own all-gather, which opens no peer.
    let partners: Vec<Vec<usize>> = (0..n)
        .map(|r| {
            if mpi_collectives {
                Vec::new()
            } else {
                allgather_partners(r, n)
            }
        })
        .collect();
    let peers: Vec<usize> = partners.iter().map(Vec::len).collect();
    let nodes: Vec<usize> = partners
        .iter()
        .enumerate()
        .map(|(r, p)| peer_nodes(r, p, charge.ranks_per_node))
        .collect();
    let transport_kb = (0..n).map(|r| charge.charge_kb(peers[r], nodes[r], n)).collect();
    RankLoads {
        synapses_kb: vec![0.0; n],
        cells_kb: rank_kb,
        transport_kb,
        peers,
        peer_nodes: nodes,
    }
}

/// The allocation's KB per rank (all its cycles), weighed as the summary weighs it.
pub fn rank_kb(allocation: &Allocation, dry_run: &DryRun) -> Vec<f64> {
    ballast_balancer::Summary::new(allocation, dry_run).rank_kb()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_partners_by_world_size() {
        assert!(allgather_partners(0, 1).is_empty());
        assert_eq!(allgather_partners(0, 2), vec![1]);
        assert_eq!(allgather_partners(1, 2), vec![0]);
        assert_eq!(allgather_partners(0, 3), vec![1, 2]);
        assert_eq!(allgather_partners(2, 3), vec![0, 1]);
        assert_eq!(allgather_partners(5, 8), vec![4, 6]);
        assert_eq!(allgather_partners(7, 8), vec![0, 6]);
    }

    #[test]
    fn loads_charge_each_rank_its_ring() {
        let charge = TransportCharge::new(|peers, world| (peers * 1024 + world) as u64);
        let l = allgather_loads(vec![10.0, 20.0, 30.0], &charge, false);
        assert_eq!(l.peers, vec![2, 2, 2]);
        assert_eq!(l.transport_kb, vec![2.0 + 3.0 / 1024.0; 3]);
        assert_eq!(l.total_kb(1), 20.0 + 2.0 + 3.0 / 1024.0);
        let mut per_node = TransportCharge::new(|peers, _| peers as u64 * 1024);
        per_node.per_node = true;
        per_node.ranks_per_node = 2;
        // Ranks 0,1 | 2,3: rank 0's partners 1 (same node) and 3 (other node).
        let l = allgather_loads(vec![0.0; 4], &per_node, false);
        assert_eq!(l.peer_nodes, vec![1, 1, 1, 1]);
        assert_eq!(l.transport_kb, vec![1.0; 4]);
    }

    #[test]
    fn mpi_collectives_open_no_peer() {
        let charge = TransportCharge::new(|peers, world| (peers * 1024 + world) as u64);
        let l = allgather_loads(vec![10.0, 20.0, 30.0], &charge, true);
        assert_eq!(l.peers, vec![0, 0, 0]);
        assert_eq!(l.peer_nodes, vec![0, 0, 0]);
        assert_eq!(l.transport_kb, vec![3.0 / 1024.0; 3]);
    }
}
