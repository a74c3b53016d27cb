//! Transport-aware balancing: charge each rank the transport memory the communication
//! runtime will use there, from its peer count, and minimise the largest rank *total*
//! (cells + synapses + transport).
//!
//! The charge is a function `(peers, world_size) -> bytes` ([`TransportCharge`]) given by
//! the caller: the `ballast` command passes the runtime's own formula
//! (`ballast_runtime::TransportConfig::predict(peers, world_size, ranks_per_node)
//! .total_bytes()`, through `ballast_sim::transport_charge`), called, not copied; this crate
//! does not depend on the runtime. Peers come from the circuit's connectivity
//! ([`Network::peers`]); with every rank connected at start ([`TransportCharge::lazy_connect`]
//! off) every rank pays for all others, and with [`TransportCharge::per_node`] (XRC) peers
//! are counted as peer nodes.
//!
//! # Algorithm
//! Candidates, each evaluated exactly (peers recomputed from the placement), the best
//! (smallest largest rank total) kept:
//! 1. **Transport-blind**: the memory-only LPT (`crate::strategy::lpt`); always a
//!    candidate, so the result is never worse than it.
//! 2. **Charge-aware LPT**, 3 passes: LPT on ranks whose heaps start at the charge the
//!    previous candidate's placement implies for them.
//! 3. **Locality cut**, 4 passes: cells in a connectivity-preserving order
//!    ([`Network::locality_order`], Cuthill–McKee), cut into `ranks` contiguous pieces so
//!    that piece `r` holds at most `T − charge[r]` KB, with `T` the smallest feasible
//!    (bisection); charges are then recomputed from the peers of that cut. Co-locating
//!    connected cells is what lowers peer counts (and so the per-peer transport memory).
//!    When the circuit has soma positions, the same cut along a recursive-coordinate-
//!    bisection order ([`crate::network::spatial_order`]) is tried too: with
//!    distance-dependent connectivity, compact regions have the fewest peers.
//!
//! Cost: each evaluation is O(connections); the cut is O(cells × 50) per pass; LPT is
//! O(cells log ranks). Cycles: each rank's cells are then split into its `cycles` buckets by
//! LPT (transport memory is per rank, not per cycle).
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;

use serde::Serialize;

use crate::allocation::{Allocation, Bucket, PopulationAllocation};
use crate::dry_run::{DryRun, GidMetype, SYNAPSE_KB};
use crate::network::Network;
use crate::strategy::{balance, BalancerConfig, Lightest, Strategy};

/// The transport memory of one rank, bytes, from its counted peers (peer ranks, or peer
/// nodes with [`TransportCharge::per_node`]) and the world size in ranks.
pub type ChargeFn = dyn Fn(usize, usize) -> u64 + Send + Sync;

/// How transport memory is charged to ranks: the bytes of a rank with `peers` peers in a
/// world of `world_size` ranks, and how its peers are counted.
#[derive(Clone)]
pub struct TransportCharge {
    bytes: Arc<ChargeFn>,
    /// Peers are counted as peer nodes (other nodes holding a peer), as XRC shares one
    /// receive queue per node. Default: off (peer ranks).
    pub per_node: bool,
    /// Endpoints open on the first message (the runtime's `lazy_connect`); off, every rank
    /// pays for all the others. Default: on.
    pub lazy_connect: bool,
    /// Consecutive ranks per node, for counting peer nodes (at least 1). Default: 1.
    pub ranks_per_node: usize,
    /// Each rank's two neighbours of a ring all-gather ([`ring_partners`]) are its peers
    /// too, whatever the placement: NEURON's multisend ends each exchange with a reduction
    /// that the NEURON shim runs as Ballast's ring all-gather. Default: off.
    pub ring_partners: bool,
}

/// The ranks rank `rank` of `world_size` talks to in Ballast's ring all-gather
/// (`Communicator::all_gatherv`: it sends to `rank + 1` and receives from `rank - 1`, mod
/// `world_size`), ascending, without `rank` itself: 2 ranks, 1 on 2 ranks, none on 1.
pub fn ring_partners(rank: usize, world_size: usize) -> Vec<usize> {
    if world_size < 2 {
        return Vec::new();
    }
    let right = (rank + 1) % world_size;
    let left = (rank + world_size - 1) % world_size;
    let mut v = vec![right.min(left), right.max(left)];
    v.dedup();
    v
}

impl TransportCharge {
    /// A charge of `bytes(peers, world_size)` bytes per rank, peers counted as ranks, with
    /// lazy connections and 1 rank per node (change the public fields for others).
    pub fn new(bytes: impl Fn(usize, usize) -> u64 + Send + Sync + 'static) -> TransportCharge {
        TransportCharge {
            bytes: Arc::new(bytes),
            per_node: false,
            lazy_connect: true,
            ranks_per_node: 1,
            ring_partners: false,
        }
    }

    /// Bytes charged to a rank with `peers` counted peers in a world of `world_size` ranks.
    pub fn bytes(&self, peers: usize, world_size: usize) -> u64 {
        (self.bytes)(peers, world_size)
    }

    /// KB charged to a rank with `peers` peer ranks (`peer_nodes` peer nodes) in a world
    /// of `world_size` ranks.
    pub fn charge_kb(&self, peers: usize, peer_nodes: usize, world_size: usize) -> f64 {
        let counted = if self.per_node { peer_nodes } else { peers };
        self.bytes(counted, world_size) as f64 / 1024.0
    }
}

impl std::fmt::Debug for TransportCharge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransportCharge")
            .field("per_node", &self.per_node)
            .field("lazy_connect", &self.lazy_connect)
            .field("ranks_per_node", &self.ranks_per_node)
            .field("ring_partners", &self.ring_partners)
            .finish_non_exhaustive()
    }
}

/// Per-rank memory of a placement, KB, and its peers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankLoads {
    /// Cell memory (metype memory) per rank, KB.
    pub cells_kb: Vec<f64>,
    /// Synapse memory (1.9 KB × afferent synapses) per rank, KB.
    pub synapses_kb: Vec<f64>,
    /// Transport memory charged per rank, KB (0 without a charge).
    pub transport_kb: Vec<f64>,
    /// Peer ranks per rank.
    pub peers: Vec<usize>,
    /// Peer nodes per rank (other nodes holding a peer).
    pub peer_nodes: Vec<usize>,
}

impl RankLoads {
    /// Total of rank `r`, KB.
    pub fn total_kb(&self, r: usize) -> f64 {
        self.cells_kb[r] + self.synapses_kb[r] + self.transport_kb[r]
    }
    /// Largest rank total, KB.
    pub fn max_total_kb(&self) -> f64 {
        (0..self.cells_kb.len())
            .map(|r| self.total_kb(r))
            .fold(0.0, f64::max)
    }
    /// Mean rank total, KB.
    pub fn mean_total_kb(&self) -> f64 {
        (0..self.cells_kb.len()).map(|r| self.total_kb(r)).sum::<f64>() / self.cells_kb.len().max(1) as f64
    }
}

/// Per-cell memory split into cell and synapse parts, by global cell index.
#[derive(Debug, Clone)]
pub struct CellCosts {
    pub cell_kb: Vec<f64>,
    pub synapse_kb: Vec<f64>,
}

impl CellCosts {
    /// Costs of every cell of `dry_run`, indexed like `network.offsets` (population
    /// offset + gid). Gids absent from the dry run cost 0.
    pub fn new(dry_run: &DryRun, offsets: &[usize]) -> CellCosts {
        let n = *offsets.last().unwrap_or(&0);
        let (mut cell_kb, mut synapse_kb) = (vec![0.0; n], vec![0.0; n]);
        for (p, pop) in dry_run.populations.iter().enumerate() {
            for GidMetype { gid, metype: m } in pop.cells() {
                let c = offsets[p] + gid as usize;
                let metype = &dry_run.metypes[m];
                let syn = match &pop.cell_synapses {
                    Some(s) => s[gid as usize] as f64,
                    None => metype.synapses_per_cell,
                };
                cell_kb[c] = metype.memory_kb;
                synapse_kb[c] = syn * SYNAPSE_KB;
            }
        }
        CellCosts { cell_kb, synapse_kb }
    }

    fn total(&self, c: usize) -> f64 {
        self.cell_kb[c] + self.synapse_kb[c]
    }
}

/// Per-rank loads of the placement `rank_of` (global cell → rank).
pub fn evaluate(
    network: &Network,
    costs: &CellCosts,
    rank_of: &[u32],
    ranks: usize,
    charge: Option<&TransportCharge>,
) -> RankLoads {
    let mut cells_kb = vec![0.0; ranks];
    let mut synapses_kb = vec![0.0; ranks];
    for (c, &r) in rank_of.iter().enumerate() {
        cells_kb[r as usize] += costs.cell_kb[c];
        synapses_kb[r as usize] += costs.synapse_kb[c];
    }
    let mut sets = network.peers(rank_of, ranks);
    if charge.is_some_and(|ch| ch.ring_partners) {
        sets = sets.with(|r| ring_partners(r, ranks));
    }
    let lazy = charge.is_none_or(|ch| ch.lazy_connect);
    let rpn = charge.map_or(1, |ch| ch.ranks_per_node.max(1));
    let (peers, peer_nodes): (Vec<usize>, Vec<usize>) = if lazy {
        (
            (0..ranks).map(|r| sets.count(r)).collect(),
            network.peer_nodes(&sets, rpn),
        )
    } else {
        let nodes = ranks.div_ceil(rpn);
        (
            (0..ranks).map(|_| ranks - 1).collect(),
            (0..ranks).map(|_| nodes - 1).collect(),
        )
    };
    let transport_kb = match charge {
        Some(ch) => (0..ranks)
            .map(|r| ch.charge_kb(peers[r], peer_nodes[r], ranks))
            .collect(),
        None => vec![0.0; ranks],
    };
    RankLoads {
        cells_kb,
        synapses_kb,
        transport_kb,
        peers,
        peer_nodes,
    }
}

/// One evaluated placement.
#[derive(Debug, Clone)]
pub struct Placement {
    /// Which algorithm produced it (`blind`, `charge-aware-lpt`, `locality-cut`).
    pub method: String,
    /// Rank of each global cell.
    pub rank_of: Vec<u32>,
    pub loads: RankLoads,
}

/// One candidate the search evaluated ([`TransportAwareResult::tried`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Which algorithm produced it ([`Placement::method`]).
    pub method: String,
    /// Its largest rank total, KB (cells + synapses + transport: [`RankLoads::max_total_kb`]).
    pub max_total_kb: f64,
}

impl Candidate {
    fn of(p: &Placement) -> Candidate {
        Candidate {
            method: p.method.clone(),
            max_total_kb: p.loads.max_total_kb(),
        }
    }
}

/// The transport-blind and the transport-aware results side by side.
#[derive(Debug, Clone)]
pub struct TransportAwareResult {
    /// Memory-only LPT, charged after the fact.
    pub blind: Placement,
    /// The best candidate (may be `blind` itself when nothing beat it).
    pub aware: Placement,
    /// Every candidate tried, in order (the transport-blind one first).
    pub tried: Vec<Candidate>,
    /// The aware placement as an allocation (`ranks × cycles` buckets).
    pub allocation: Allocation,
}

/// Runs the algorithm of the module docs. `config.strategy` is ignored (LPT throughout).
pub fn balance_transport_aware(
    dry_run: &DryRun,
    network: &Network,
    config: &BalancerConfig,
    charge: &TransportCharge,
) -> TransportAwareResult {
    let ranks = config.ranks as usize;
    let costs = CellCosts::new(dry_run, &network.offsets);
    let placed = placed_cells(dry_run, &network.offsets);
    let eval = |method: &str, rank_of: Vec<u32>| {
        let loads = evaluate(network, &costs, &rank_of, ranks, Some(charge));
        Placement {
            method: method.to_owned(),
            rank_of,
            loads,
        }
    };

    // 1. Transport-blind: the memory-only LPT over ranks.
    let blind_alloc = balance(
        dry_run,
        &BalancerConfig {
            cycles: 1,
            strategy: Strategy::Lpt,
            ..config.clone()
        },
    );
    let blind = eval("blind", rank_of_allocation(&blind_alloc, &network.offsets));
    let mut tried = vec![Candidate::of(&blind)];
    let mut best = blind.clone();
    let keep = |p: Placement, tried: &mut Vec<Candidate>, best: &mut Placement| {
        tried.push(Candidate::of(&p));
        if p.loads.max_total_kb() < best.loads.max_total_kb() {
            *best = p;
        }
    };

    // 2. Charge-aware LPT passes.
    let mut order: Vec<usize> = placed.clone();
    order.sort_by(|&a, &b| costs.total(b).total_cmp(&costs.total(a)).then(a.cmp(&b)));
    let mut prev = blind.loads.transport_kb.clone();
    for _ in 0..3 {
        let p = eval(
            "charge-aware-lpt",
            lpt_with_preload(&order, &costs, &prev, network.cell_count()),
        );
        prev = p.loads.transport_kb.clone();
        keep(p, &mut tried, &mut best);
    }

    // 3. Locality cut passes: along the connectivity order, and along space when known.
    let mut orders = vec![("locality-cut", network.locality_order())];
    if let Some(pos) = &network.positions {
        orders.push(("spatial-cut", crate::network::spatial_order(pos)));
    }
    for (method, order) in orders {
        let order: Vec<usize> = order
            .into_iter()
            .map(|c| c as usize)
            .filter(|c| placed.binary_search(c).is_ok())
            .collect();
        let mut charges = vec![0.0; ranks];
        for _ in 0..4 {
            let p = eval(method, cut(&order, &costs, &charges, network.cell_count()));
            charges = p.loads.transport_kb.clone();
            keep(p, &mut tried, &mut best);
        }
    }

    let allocation = split_into_cycles(dry_run, &network.offsets, &best.rank_of, &costs, config);
    TransportAwareResult {
        blind,
        aware: best,
        tried,
        allocation,
    }
}

/// Global indices of the cells of the dry run, ascending.
fn placed_cells(dry_run: &DryRun, offsets: &[usize]) -> Vec<usize> {
    let mut v: Vec<usize> = dry_run
        .populations
        .iter()
        .enumerate()
        .flat_map(|(p, pop)| pop.cells().map(move |c| offsets[p] + c.gid as usize))
        .collect();
    v.sort_unstable();
    v
}

/// Rank of every global cell in `alloc` (cells not in it: rank 0).
pub fn rank_of_allocation(alloc: &Allocation, offsets: &[usize]) -> Vec<u32> {
    let mut rank_of = vec![0u32; *offsets.last().unwrap_or(&0)];
    for (p, pop) in alloc.populations.iter().enumerate() {
        for (b, gids) in &pop.buckets {
            for &g in gids {
                rank_of[offsets[p] + g as usize] = b.rank;
            }
        }
    }
    rank_of
}

/// LPT over ranks whose loads start at `preload` (KB). `order`: cells heaviest first.
fn lpt_with_preload(order: &[usize], costs: &CellCosts, preload: &[f64], n: usize) -> Vec<u32> {
    let mut heap: BinaryHeap<Lightest<usize>> = preload
        .iter()
        .enumerate()
        .map(|(key, &load)| Lightest { load, key })
        .collect();
    let mut rank_of = vec![0u32; n];
    for &c in order {
        let mut top = heap.peek_mut().expect("at least one rank");
        top.load += costs.total(c);
        rank_of[c] = top.key as u32;
    }
    rank_of
}

/// Cuts `order` into `charges.len()` contiguous pieces, piece `r` holding at most
/// `T - charges[r]` KB, with the smallest feasible `T` (bisection, 50 steps).
fn cut(order: &[usize], costs: &CellCosts, charges: &[f64], n: usize) -> Vec<u32> {
    let ranks = charges.len();
    let total: f64 = order.iter().map(|&c| costs.total(c)).sum();
    let heaviest = order.iter().map(|&c| costs.total(c)).fold(0.0, f64::max);
    let max_charge = charges.iter().copied().fold(0.0, f64::max);
    // Fill ranks in order; returns the rank of each cell, or None if T is too small.
    let fill = |t: f64| -> Option<Vec<u32>> {
        let mut rank_of = vec![0u32; n];
        let (mut r, mut load) = (0usize, charges[0]);
        for &c in order {
            let w = costs.total(c);
            while load + w > t && load > charges[r] {
                r += 1;
                if r == ranks {
                    return None;
                }
                load = charges[r];
            }
            if load + w > t {
                return None;
            }
            load += w;
            rank_of[c] = r as u32;
        }
        Some(rank_of)
    };
    let (mut lo, mut hi) = (total / ranks as f64, total / ranks as f64 + heaviest + max_charge);
    while fill(hi).is_none() {
        hi *= 2.0;
    }
    for _ in 0..50 {
        let mid = 0.5 * (lo + hi);
        if fill(mid).is_some() {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    fill(hi).expect("hi is feasible")
}

/// Turns a rank placement into an allocation: each rank's cells split into its cycles by
/// LPT (heaviest first onto the lightest cycle); gids ascending within a bucket.
fn split_into_cycles(
    dry_run: &DryRun,
    offsets: &[usize],
    rank_of: &[u32],
    costs: &CellCosts,
    config: &BalancerConfig,
) -> Allocation {
    let cycles = config.cycles as usize;
    let mut per_rank: Vec<Vec<(usize, u32)>> = vec![Vec::new(); config.ranks as usize];
    for (p, pop) in dry_run.populations.iter().enumerate() {
        for GidMetype { gid: g, .. } in pop.cells() {
            per_rank[rank_of[offsets[p] + g as usize] as usize].push((p, g));
        }
    }
    let mut populations: Vec<PopulationAllocation> = dry_run
        .populations
        .iter()
        .map(|p| PopulationAllocation {
            name: p.name.clone(),
            buckets: BTreeMap::new(),
        })
        .collect();
    for (r, cells) in per_rank.iter_mut().enumerate() {
        let w = |&(p, g): &(usize, u32)| costs.total(offsets[p] + g as usize);
        cells.sort_by(|a, b| w(b).total_cmp(&w(a)).then(a.cmp(b)));
        let mut heap: BinaryHeap<Lightest<usize>> =
            (0..cycles).map(|key| Lightest { load: 0.0, key }).collect();
        for cell in cells.iter() {
            let mut top = heap.peek_mut().expect("at least one cycle");
            top.load += w(cell);
            let bucket = Bucket {
                rank: r as u32,
                cycle: top.key as u32,
            };
            populations[cell.0]
                .buckets
                .entry(bucket)
                .or_default()
                .push(cell.1);
        }
    }
    for p in &mut populations {
        for gids in p.buckets.values_mut() {
            gids.sort_unstable();
        }
    }
    Allocation {
        ranks: config.ranks,
        cycles: config.cycles,
        populations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_partners_by_world_size() {
        assert!(ring_partners(0, 1).is_empty());
        assert_eq!(ring_partners(1, 2), vec![0]);
        assert_eq!(ring_partners(0, 5), vec![1, 4]);
        assert_eq!(ring_partners(3, 5), vec![2, 4]);
    }

    /// One connection, 0 -> 1, on 5 ranks (cell c on rank c): ranks 0 and 1 are peers; the
    /// ring adds each rank's neighbours mod 5, and nothing twice.
    #[test]
    fn evaluate_counts_the_ring_partners_when_asked() {
        let net = Network::from_pairs(vec![0, 5], &[(0, 1), (2, 0)]).unwrap();
        let costs = CellCosts {
            cell_kb: vec![1.0; 5],
            synapse_kb: vec![0.0; 5],
        };
        let rank_of: Vec<u32> = (0..5).collect();
        let mut charge = TransportCharge::new(|peers, _| peers as u64 * 1024);
        let plain = evaluate(&net, &costs, &rank_of, 5, Some(&charge));
        assert_eq!(plain.peers, vec![2, 1, 1, 0, 0]);
        charge.ring_partners = true;
        let ring = evaluate(&net, &costs, &rank_of, 5, Some(&charge));
        // Rank 0: 1 and 2 (connections) and 4 (ring); rank 2: 0 (connection), 1 and 3.
        assert_eq!(ring.peers, vec![3, 2, 3, 2, 2]);
        assert_eq!(ring.transport_kb, vec![3.0, 2.0, 3.0, 2.0, 2.0]);
    }
}
