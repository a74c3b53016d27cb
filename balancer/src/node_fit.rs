//! The node-fit search: per-node memory totals of a balanced allocation, the nodes above a
//! node's memory, and the fewest nodes of `ranks_per_node` ranks that hold a dry run within
//! a node's memory, each count balanced anew ([`balance_charged`]: the transport charge
//! depends on the rank count). `ballast dry-run --node-memory-gb` prints these.
use crate::dry_run::DryRun;
use crate::error::BalancerError;
use crate::network::Network;
use crate::strategy::{balance, balance_charged, BalancerConfig, RankLoads, TransportCharge};
use crate::summary::Summary;

/// Largest node count [`fewest_nodes`] tries before giving up.
pub const MAX_NODES: usize = 1 << 20;

/// Why the node-fit search found no node count.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeFitError {
    /// Nodes of 0 ranks hold nothing.
    #[error("0 ranks per node: give at least 1")]
    NoRanksPerNode,
    /// A node's memory that is not a finite size above 0.
    #[error("{node_kb} KB per node: give a finite size above 0")]
    NodeMemory {
        /// The node memory given, KB.
        node_kb: f64,
    },
    /// The rank count of a node count does not fit in a `u32`.
    #[error("trying {nodes} nodes of {ranks_per_node} ranks: more than 2^32 - 1 ranks")]
    TooManyRanks {
        /// The node count tried.
        nodes: usize,
        /// Ranks per node.
        ranks_per_node: usize,
    },
    /// The balancer refused the rank count of a node count (too many buckets for the
    /// cells, or more memory than the machine has).
    #[error("trying {nodes} nodes of {ranks_per_node} ranks")]
    Size {
        /// The node count tried.
        nodes: usize,
        /// Ranks per node.
        ranks_per_node: usize,
        /// [`BalancerConfig::check_size`]'s error.
        #[source]
        source: BalancerError,
    },
    /// No count up to `nodes` fits (a cell, or a rank's transport memory, larger than a
    /// node): the search stops at one node per cell.
    #[error("no node count up to {nodes} fits {:.4} GiB per node (the search stops at one node per cell; is a single cell, or a rank's transport memory, larger than a node?)", .node_kb / 1048576.0)]
    NoFit {
        /// The last node count tried.
        nodes: usize,
        /// The node memory, KB.
        node_kb: f64,
    },
}

/// The fewest nodes that hold the dry run, and the node memory they were fitted in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    /// Node count.
    pub nodes: usize,
    /// Memory of one node, KB.
    pub node_kb: f64,
}

/// Per-node totals, KB, of per-rank totals ([`RankLoads::total_kb`]), `ranks_per_node`
/// consecutive ranks per node (the last node may hold fewer). `ranks_per_node` 0 gives no
/// nodes.
pub fn node_totals(loads: &RankLoads, ranks_per_node: usize) -> Vec<f64> {
    if ranks_per_node == 0 {
        return Vec::new();
    }
    let ranks = loads.cells_kb.len();
    (0..ranks.div_ceil(ranks_per_node))
        .map(|n| {
            (n * ranks_per_node..((n + 1) * ranks_per_node).min(ranks))
                .map(|r| loads.total_kb(r))
                .sum()
        })
        .collect()
}

/// Per-node totals, KB, of per-rank totals given directly (`rank_kb`, e.g.
/// [`Summary::rank_kb`] of a balance without transport charge), `ranks_per_node`
/// consecutive ranks per node (the last node may hold fewer). `ranks_per_node` 0 gives no
/// nodes.
pub fn node_totals_kb(rank_kb: &[f64], ranks_per_node: usize) -> Vec<f64> {
    if ranks_per_node == 0 {
        return Vec::new();
    }
    rank_kb.chunks(ranks_per_node).map(|n| n.iter().sum()).collect()
}

/// Indices of the nodes whose total is above `node_kb`.
pub fn nodes_over(nodes: &[f64], node_kb: f64) -> Vec<usize> {
    (0..nodes.len()).filter(|&n| nodes[n] > node_kb).collect()
}

/// The largest node total, KB, of `dry_run` balanced on `nodes × ranks_per_node` ranks
/// (with `config`'s cycles and strategy; transport-aware with `network` and `charge`).
fn largest_node_kb(
    dry_run: &DryRun,
    network: Option<&Network>,
    config: &BalancerConfig,
    charge: Option<&TransportCharge>,
    ranks_per_node: usize,
    nodes: usize,
) -> Result<f64, NodeFitError> {
    let ranks = nodes
        .checked_mul(ranks_per_node)
        .and_then(|r| u32::try_from(r).ok())
        .ok_or(NodeFitError::TooManyRanks {
            nodes,
            ranks_per_node,
        })?;
    let c = BalancerConfig {
        ranks,
        ..config.clone()
    };
    c.check_size(dry_run).map_err(|source| NodeFitError::Size {
        nodes,
        ranks_per_node,
        source,
    })?;
    let balanced = balance_charged(dry_run, network, &c, charge, None);
    Ok(match balanced.loads {
        Some(l) => node_totals(&l, ranks_per_node).into_iter().fold(0.0, f64::max),
        None => node_totals_kb(
            &Summary::new(&balanced.allocation, dry_run).rank_kb(),
            ranks_per_node,
        )
        .into_iter()
        .fold(0.0, f64::max),
    })
}

/// The fewest nodes of `ranks_per_node` ranks whose every node total is at most `node_kb`:
/// from the memory lower bound (total / node memory) doubling until a count fits, then
/// bisection between the last count that did not and the first that did; each count is
/// balanced anew with `config` (its `ranks` ignored) and, given `network` and `charge`,
/// transport-aware. The search ends at one node per cell (at most [`MAX_NODES`]): there no
/// rank holds more than one cell, so more nodes cannot make the largest node lighter (a
/// rank's transport charge does not shrink as the world grows), and the work stays bounded
/// by the circuit. Errors: [`NodeFitError`] (no count up to that fits, a count the balancer
/// refuses, bad arguments).
pub fn fewest_nodes(
    dry_run: &DryRun,
    network: Option<&Network>,
    config: &BalancerConfig,
    charge: Option<&TransportCharge>,
    ranks_per_node: usize,
    node_kb: f64,
) -> Result<Fit, NodeFitError> {
    if ranks_per_node == 0 {
        return Err(NodeFitError::NoRanksPerNode);
    }
    if !(node_kb.is_finite() && node_kb > 0.0) {
        return Err(NodeFitError::NodeMemory { node_kb });
    }
    let total: f64 = Summary::new(&balance(dry_run, config), dry_run).overall.total_kb;
    let fits = |nodes: usize| -> Result<bool, NodeFitError> {
        Ok(largest_node_kb(dry_run, network, config, charge, ranks_per_node, nodes)? <= node_kb)
    };
    let most = dry_run.cell_count().clamp(1, MAX_NODES);
    // The lower bound, capped at the last count worth trying (f64 to usize saturates).
    let mut lo = ((total / node_kb).ceil() as usize).clamp(1, most);
    if fits(lo)? {
        return Ok(Fit { nodes: lo, node_kb });
    }
    if lo == most {
        return Err(NodeFitError::NoFit { nodes: lo, node_kb });
    }
    let mut hi = (lo * 2).min(most);
    while !fits(hi)? {
        if hi == most {
            return Err(NodeFitError::NoFit { nodes: hi, node_kb });
        }
        lo = hi;
        hi = (hi * 2).min(most);
    }
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if fits(mid)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(Fit { nodes: hi, node_kb })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dry_run::{Metype, MetypeGids, Population};
    use crate::strategy::transport_aware::{evaluate, CellCosts};

    /// `cells` cells of `kb` KB each, one population, one metype.
    fn uniform(cells: u32, kb: f64) -> DryRun {
        DryRun {
            metypes: vec![Metype {
                name: "m".into(),
                memory_kb: kb,
                synapses_per_cell: 0.0,
            }],
            populations: vec![Population {
                name: "p".into(),
                metype_gids: vec![MetypeGids {
                    metype: 0,
                    gids: (0..cells).collect(),
                }],
                cell_synapses: None,
            }],
        }
    }

    fn config() -> BalancerConfig {
        BalancerConfig::builder().build().unwrap()
    }

    #[test]
    fn node_totals_sum_consecutive_ranks() {
        let loads = RankLoads {
            cells_kb: vec![1.0, 2.0, 3.0, 4.0, 5.0],
            synapses_kb: vec![10.0, 0.0, 0.0, 0.0, 0.5],
            transport_kb: vec![0.0, 0.25, 0.0, 0.0, 0.0],
            peers: vec![0; 5],
            peer_nodes: vec![0; 5],
        };
        assert_eq!(node_totals(&loads, 2), vec![13.25, 7.0, 5.5]);
        assert_eq!(node_totals(&loads, 5), vec![25.75]);
        assert_eq!(node_totals(&loads, 1), vec![11.0, 2.25, 3.0, 4.0, 5.5]);
        assert!(node_totals(&loads, 0).is_empty());
        assert_eq!(node_totals_kb(&[1.0, 2.0, 3.0, 4.0, 5.5], 2), vec![3.0, 7.0, 5.5]);
        assert!(node_totals_kb(&[1.0], 0).is_empty());
        assert_eq!(nodes_over(&[13.25, 7.0, 5.5], 7.0), vec![0]);
        assert_eq!(nodes_over(&[13.25, 7.0, 5.5], 5.0), vec![0, 1, 2]);
    }

    #[test]
    fn fewest_nodes_of_equal_cells() {
        // 4 cells of 100 KB: a node of 250 KB holds 2 cells, one of 150 KB holds 1.
        let d = uniform(4, 100.0);
        let fit = |rpn, kb| fewest_nodes(&d, None, &config(), None, rpn, kb).unwrap().nodes;
        assert_eq!(fit(1, 250.0), 2);
        assert_eq!(fit(1, 150.0), 4);
        assert_eq!(fit(1, 400.0), 1);
        // 2 ranks per node: 4 ranks of 100 KB = 2 nodes of 200 KB.
        assert_eq!(fit(2, 200.0), 2);
        // 12 cells, 150 KB nodes: the lower bound 8 does not fit (LPT puts 2 on some rank),
        // 16 does, bisection lands on 12.
        let d = uniform(12, 100.0);
        assert_eq!(
            fewest_nodes(&d, None, &config(), None, 1, 150.0).unwrap(),
            Fit {
                nodes: 12,
                node_kb: 150.0
            }
        );
    }

    #[test]
    fn the_transport_charge_adds_nodes() {
        // 4 cells of 100 KB on a ring (each connected to the next): with a charge of 100 KB
        // per peer, a rank of 1 cell has 2 peers (300 KB) and 2 ranks of 2 cells have 1 peer
        // each (300 KB): a 300 KB node fits from 2 nodes on.
        let d = uniform(4, 100.0);
        let ring: Vec<(u32, u32)> = (0..4).map(|c| ((c + 1) % 4, c)).collect();
        let net = Network::from_pairs(vec![0, 4], &ring).unwrap();
        let charge = TransportCharge::new(|peers, _| peers as u64 * 100 * 1024);
        let f = fewest_nodes(&d, Some(&net), &config(), Some(&charge), 1, 300.0).unwrap();
        assert_eq!(f.nodes, 2);
        // The fitted count really fits: both nodes hold exactly 300 KB, as `evaluate`
        // recomputes from the allocation (1 node, 400 KB of cells, is below the lower bound).
        let c = BalancerConfig::builder().ranks(2).build().unwrap();
        let b = balance_charged(&d, Some(&net), &c, Some(&charge), None);
        let loads = b.loads.unwrap();
        assert_eq!(node_totals(&loads, 1), vec![300.0, 300.0]);
        let rank_of = crate::strategy::transport_aware::rank_of_allocation(&b.allocation, &net.offsets);
        assert_eq!(
            evaluate(
                &net,
                &CellCosts::new(&d, &net.offsets),
                &rank_of,
                2,
                Some(&charge)
            ),
            loads
        );
    }

    #[test]
    fn a_cell_larger_than_a_node_fits_no_count() {
        // One cell of 500 KB and nodes of 250 KB: one node (one per cell) is the last count
        // worth trying.
        let d = uniform(1, 500.0);
        let e = fewest_nodes(&d, None, &config(), None, 1, 250.0).unwrap_err();
        assert!(matches!(e, NodeFitError::NoFit { nodes: 1, .. }), "{e}");
        assert!(
            e.to_string().starts_with(
                "no node count up to 1 fits 0.0002 GiB per node (the search stops at one node per cell"
            ),
            "{e}"
        );
        // 10 cells of 100 KB, one of 500 KB: the doubling stops at 11 nodes, not 2^20.
        let mut d = uniform(10, 100.0);
        d.metypes.push(Metype {
            name: "big".into(),
            memory_kb: 500.0,
            synapses_per_cell: 0.0,
        });
        d.populations[0].metype_gids.push(MetypeGids {
            metype: 1,
            gids: vec![10],
        });
        let e = fewest_nodes(&d, None, &config(), None, 1, 250.0).unwrap_err();
        assert!(matches!(e, NodeFitError::NoFit { nodes: 11, .. }), "{e}");
    }

    #[test]
    fn bad_arguments_and_refused_counts_are_errors() {
        let d = uniform(4, 100.0);
        assert!(matches!(
            fewest_nodes(&d, None, &config(), None, 0, 100.0),
            Err(NodeFitError::NoRanksPerNode)
        ));
        for kb in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                fewest_nodes(&d, None, &config(), None, 1, kb),
                Err(NodeFitError::NodeMemory { .. })
            ));
        }
        // A node of 1e-9 KB: the lower bound (4e11 nodes) is capped at one node per cell,
        // and 4 nodes of 2^31 ranks are more ranks than a u32.
        let e = fewest_nodes(&d, None, &config(), None, 1 << 31, 1e-9).unwrap_err();
        assert!(
            matches!(e, NodeFitError::TooManyRanks { nodes: 4, ranks_per_node } if ranks_per_node == 1 << 31),
            "{e}"
        );
        assert!(
            e.to_string()
                .ends_with(" nodes of 2147483648 ranks: more than 2^32 - 1 ranks"),
            "{e}"
        );
        // 4 cells cannot fill one node of 2^21 ranks: the balancer's size check refuses it.
        let e = fewest_nodes(&d, None, &config(), None, 1 << 21, 1000.0).unwrap_err();
        assert!(matches!(e, NodeFitError::Size { nodes: 1, .. }), "{e}");
        assert!(std::error::Error::source(&e).is_some());
        // A tiny node: every count up to one node per cell is tried, then the search stops.
        let e = fewest_nodes(&d, None, &config(), None, 1, 1e-9).unwrap_err();
        assert!(matches!(e, NodeFitError::NoFit { nodes: 4, .. }), "{e}");
    }
}
