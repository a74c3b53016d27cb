//! neurodamus' memory estimate and node suggestion (`neurodamus/utils/memory.py`:
//! `display_total`, `suggest_nodes`), with Ballast's transport charge added: the figures
//! `ballast dry-run` prints, and the node count it balances for when `--num-target-ranks` is
//! absent.
//!
//! The estimate, MiB as neurodamus prints it (`MB` there, 1024² bytes):
//! - overhead: a rank's memory before it builds cells (neurodamus measures its own RSS,
//!   `base_memory`) × ranks;
//! - cells: the dry run's memory per cell summed over cells;
//! - synapses: 1.9 KB per synapse (neurodamus' `SynapseMemoryUsage`);
//! - simulation: (cells + synapses) × [`SIM_ESTIMATE_FACTOR`];
//! - transport: Ballast's runtime charge over every rank (0 without a transport model);
//! - grand total: the sum.
//!
//! [`suggest_nodes`] iterates as `suggest_nodes` does: start from the overhead of one node,
//! nodes = ⌈grand total × (1 + margin) / node memory⌉, recompute the overhead (and the
//! transport) for that many nodes, and repeat until the count is stable or
//! [`MAX_ITERATIONS`] passes were made.
use crate::dry_run::{DryRun, MetypeGids, SYNAPSE_KB};

/// neurodamus' `SIM_ESTIMATE_FACTOR`: the simulation's memory as a multiple of cells +
/// synapses.
pub const SIM_ESTIMATE_FACTOR: f64 = 2.5;

/// The margin neurodamus' `display_node_suggestions` passes to `suggest_nodes`.
pub const MARGIN: f64 = 0.3;

/// `suggest_nodes`' `max_iter`.
pub const MAX_ITERATIONS: usize = 5;

/// Default overhead per rank, MiB: neurodamus' `DryRunStats().base_memory` (the RSS of a
/// rank before it builds cells) measured in a serial Python process with neurodamus 4.2.9
/// and NEURON 9.0.2: 52.1 MiB. A real dry run under MPI measures more (MPI, mechanisms):
/// give neurodamus' own figure (its "Overhead (ranks=N)" line / N) with `--rank-overhead-mb`.
pub const DEFAULT_RANK_OVERHEAD_MB: f64 = 52.1;

/// A dry run's memory in two parts ([`cell_and_synapse_kb`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryKb {
    /// Its cells' own memory, KB: Σ metype memory per cell.
    pub cells_kb: f64,
    /// Its synapses' memory, KB: Σ 1.9 KB ([`SYNAPSE_KB`]) × synapses.
    pub synapses_kb: f64,
}

/// The dry run's cell and synapse memory, KB, synapses counted per cell where the dry run
/// has them, else the metype average.
pub fn cell_and_synapse_kb(dry_run: &DryRun) -> MemoryKb {
    let (mut cells, mut synapses) = (0.0, 0.0);
    for p in &dry_run.populations {
        for MetypeGids { metype, gids } in &p.metype_gids {
            let m = &dry_run.metypes[*metype];
            cells += m.memory_kb * gids.len() as f64;
            match &p.cell_synapses {
                Some(syn) => {
                    for &g in gids {
                        synapses += syn.get(g as usize).copied().unwrap_or(0) as f64 * SYNAPSE_KB;
                    }
                }
                None => synapses += m.synapses_per_cell * SYNAPSE_KB * gids.len() as f64,
            }
        }
    }
    MemoryKb {
        cells_kb: cells,
        synapses_kb: synapses,
    }
}

/// A row of the estimate table ([`Estimate::rows`]).
#[derive(Debug, Clone, PartialEq)]
pub struct EstimateRow {
    /// Its label, as neurodamus prints it (`Overhead (ranks=4)`, `GRAND TOTAL`).
    pub label: String,
    /// Its figure, MiB in all.
    pub mb: f64,
}

/// neurodamus' total estimate for `ranks` ranks, MiB (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Estimate {
    pub ranks: u64,
    pub overhead_per_rank_mb: f64,
    /// Overhead per rank × ranks.
    pub overhead_mb: f64,
    pub cells_mb: f64,
    pub synapses_mb: f64,
    /// Ballast's transport charge, all ranks together.
    pub transport_mb: f64,
    /// (cells + synapses) × [`SIM_ESTIMATE_FACTOR`].
    pub simulation_mb: f64,
    pub grand_total_mb: f64,
}

impl Estimate {
    /// The estimate of `ranks` ranks of `overhead_per_rank_mb` each holding cells of
    /// `cells_kb` and synapses of `synapses_kb` KB in all, plus `transport_mb` MiB of
    /// transport in all.
    pub fn new(
        ranks: u64,
        overhead_per_rank_mb: f64,
        cells_kb: f64,
        synapses_kb: f64,
        transport_mb: f64,
    ) -> Estimate {
        let cells_mb = cells_kb / 1024.0;
        let synapses_mb = synapses_kb / 1024.0;
        let overhead_mb = overhead_per_rank_mb * ranks as f64;
        let simulation_mb = (cells_mb + synapses_mb) * SIM_ESTIMATE_FACTOR;
        Estimate {
            ranks,
            overhead_per_rank_mb,
            overhead_mb,
            cells_mb,
            synapses_mb,
            transport_mb,
            simulation_mb,
            grand_total_mb: overhead_mb + cells_mb + synapses_mb + simulation_mb + transport_mb,
        }
    }

    /// The rows of the table, neurodamus' order, transport before the simulation estimate,
    /// the grand total last.
    pub fn rows(&self) -> [EstimateRow; 6] {
        let row = |label: String, mb| EstimateRow { label, mb };
        [
            row(format!("Overhead (ranks={})", self.ranks), self.overhead_mb),
            row("Cells".into(), self.cells_mb),
            row("Synapses".into(), self.synapses_mb),
            row("Transport (Ballast)".into(), self.transport_mb),
            row(format!("Simulation (x{SIM_ESTIMATE_FACTOR})"), self.simulation_mb),
            row("GRAND TOTAL".into(), self.grand_total_mb),
        ]
    }

    /// The table: every row in all, per rank and, with `nodes`, per node (MiB).
    pub fn table(&self, nodes: Option<u64>) -> String {
        let mut out = format!(
            "{:<28} {:>14} {:>14}{}\n",
            "memory estimate (MiB)",
            "all",
            "per rank",
            if nodes.is_some() {
                format!(" {:>14}", "per node")
            } else {
                String::new()
            }
        );
        let ranks = self.ranks.max(1) as f64;
        for EstimateRow { label, mb } in self.rows() {
            out += &format!("{label:<28} {mb:>14.1} {:>14.1}", mb / ranks);
            if let Some(n) = nodes {
                out += &format!(" {:>14.1}", mb / n.max(1) as f64);
            }
            out.push('\n');
        }
        out
    }
}

/// The suggested node count and the estimate it was computed from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Suggestion {
    pub nodes: u64,
    /// Passes made (at most [`MAX_ITERATIONS`]).
    pub iterations: usize,
    /// The estimate of the last pass (its overhead and transport for the nodes before it).
    pub estimate: Estimate,
}

/// neurodamus' `suggest_nodes` (see the module documentation): nodes of `ranks_per_node`
/// ranks and `node_mb` MiB for a dry run of `cells_kb` + `synapses_kb`, with `margin`;
/// `transport_mb(nodes)` gives the transport charge of all ranks on that many nodes (0
/// without a transport model; it may fail, e.g. a rank count the balancer refuses). The
/// count is at least 1; the passes stop early at a count of more than 2^32 - 1 ranks (which
/// the caller refuses).
pub fn suggest_nodes<E>(
    cells_kb: f64,
    synapses_kb: f64,
    overhead_per_rank_mb: f64,
    ranks_per_node: u64,
    node_mb: f64,
    margin: f64,
    mut transport_mb: impl FnMut(u64) -> Result<f64, E>,
) -> Result<Suggestion, E> {
    let mut nodes: u64 = 1; // the overhead of the first pass is one node's
    let mut est: Option<u64> = None;
    let mut iterations = 0;
    let mut estimate;
    loop {
        let ranks = nodes.saturating_mul(ranks_per_node);
        estimate = Estimate::new(
            ranks,
            overhead_per_rank_mb,
            cells_kb,
            synapses_kb,
            transport_mb(nodes)?,
        );
        // f64 to u64 saturates: a node of almost no memory gives u64::MAX nodes.
        let next = ((estimate.grand_total_mb * (1.0 + margin) / node_mb).ceil() as u64).max(1);
        iterations += 1;
        let stable = est == Some(next);
        est = Some(next);
        nodes = next;
        // More ranks than a u32 holds cannot be balanced: no further pass.
        let too_many = next.saturating_mul(ranks_per_node) > u64::from(u32::MAX);
        if stable || iterations == MAX_ITERATIONS || too_many {
            break;
        }
    }
    Ok(Suggestion {
        nodes,
        iterations,
        estimate,
    })
}

/// MemTotal of `/proc/meminfo`, MiB (neurodamus' `psutil.virtual_memory().total`), or
/// `None` where it cannot be read.
pub fn node_memory_mb() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: f64 = text
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    #[test]
    fn estimate_as_display_total() {
        // 1024 KB of cells, 1024 KB of synapses, 4 ranks of 10 MiB: 40 + 1 + 1 + 5 = 47.
        let e = Estimate::new(4, 10.0, 1024.0, 1024.0, 0.0);
        assert_eq!(e.overhead_mb, 40.0);
        assert_eq!(e.simulation_mb, 5.0);
        assert_eq!(e.grand_total_mb, 47.0);
        let labels = e.rows().map(|r| r.label);
        assert_eq!(
            labels,
            [
                "Overhead (ranks=4)",
                "Cells",
                "Synapses",
                "Transport (Ballast)",
                "Simulation (x2.5)",
                "GRAND TOTAL"
            ]
        );
        assert_eq!(e.rows().map(|r| r.mb), [40.0, 1.0, 1.0, 0.0, 5.0, 47.0]);
        let t = e.table(Some(2));
        assert!(t.contains("Overhead (ranks=4)"), "{t}");
        assert!(t.lines().last().unwrap().starts_with("GRAND TOTAL"), "{t}");
        assert!(
            t.lines()
                .last()
                .unwrap()
                .ends_with("47.0           11.8           23.5"),
            "{t}"
        );
    }

    /// Cells' memory and synapses' apart: per-cell synapse counts where known, else the
    /// metype average.
    #[test]
    fn cell_and_synapse_kb_sums_each_part() {
        use crate::dry_run::{Metype, MetypeGids, Population};
        let metype = |name: &str, memory_kb, synapses_per_cell| Metype {
            name: name.into(),
            memory_kb,
            synapses_per_cell,
        };
        let population = |name: &str, cell_synapses| Population {
            name: name.into(),
            metype_gids: vec![
                MetypeGids {
                    metype: 0,
                    gids: vec![0, 1],
                },
                MetypeGids {
                    metype: 1,
                    gids: vec![2],
                },
            ],
            cell_synapses,
        };
        let mut d = DryRun {
            metypes: vec![metype("A", 100.0, 10.0), metype("B", 7.0, 0.0)],
            populations: vec![population("P", None)],
        };
        // 2 × 100 + 7 KB of cells; 2 × 10 average synapses of 1.9 KB.
        let want = |cells_kb, synapses_kb| MemoryKb {
            cells_kb,
            synapses_kb,
        };
        assert_eq!(cell_and_synapse_kb(&d), want(207.0, 20.0 * SYNAPSE_KB));
        // Counted per cell: 1 + 2 + 3 synapses (summed cell by cell, in that order).
        d.populations.push(population("Q", Some(vec![1, 2, 3])));
        let synapses_kb = 20.0 * SYNAPSE_KB + SYNAPSE_KB + 2.0 * SYNAPSE_KB + 3.0 * SYNAPSE_KB;
        assert_eq!(cell_and_synapse_kb(&d), want(414.0, synapses_kb));
    }

    /// neurodamus' loop, transcribed: the reference the Rust function must match.
    fn reference(cells_mb: f64, syn_mb: f64, base: f64, rpn: f64, node: f64, margin: f64) -> u64 {
        let mut full_overhead = base * rpn;
        let (mut est, mut prev): (f64, Option<f64>) = (0.0, None);
        let mut iter = 0;
        while (prev.is_none() || Some(est) != prev) && iter < 5 {
            prev = Some(est);
            let sim = (cells_mb + syn_mb) * 2.5;
            let usage = full_overhead + cells_mb + syn_mb + sim;
            est = (usage * (1.0 + margin) / node).ceil();
            full_overhead = base * rpn * est;
            iter += 1;
        }
        est as u64
    }

    #[test]
    fn suggest_nodes_as_neurodamus() {
        let ok = |_| Ok::<f64, Infallible>(0.0);
        for (cells_mb, syn_mb, base, rpn, node) in [
            (1000.0, 500.0, 50.0, 40.0, 4000.0),
            (100000.0, 80000.0, 200.0, 128.0, 256000.0),
            (1.0, 0.0, 52.1, 2.0, 24105.0),
            (5e6, 5e6, 300.0, 64.0, 512000.0),
        ] {
            let s = suggest_nodes(
                cells_mb * 1024.0,
                syn_mb * 1024.0,
                base,
                rpn as u64,
                node,
                MARGIN,
                ok,
            )
            .unwrap();
            assert_eq!(
                s.nodes,
                reference(cells_mb, syn_mb, base, rpn, node, MARGIN).max(1)
            );
            assert!(s.iterations <= MAX_ITERATIONS);
        }
        // By hand: 1000 + 500 MiB, 2.5× = 3750, one node's overhead 2000: 7250 × 1.3 / 4000
        // = 2.36 → 3 nodes; then overhead 6000: 11250 × 1.3 / 4000 = 3.66 → 4; then 8000:
        // 13250 × 1.3 / 4000 = 4.31 → 5; 10000: 15250 × 1.3 / 4000 = 4.96 → 5, stable.
        let s = suggest_nodes(1000.0 * 1024.0, 500.0 * 1024.0, 50.0, 40, 4000.0, MARGIN, ok).unwrap();
        assert_eq!((s.nodes, s.iterations), (5, 4));
    }

    #[test]
    fn the_transport_charge_adds_nodes() {
        // 1 MiB of transport per rank on nodes of 2 ranks and 10 MiB, no other overhead.
        let t = |nodes: u64| Ok::<f64, Infallible>(2.0 * nodes as f64);
        let s = suggest_nodes(1024.0, 0.0, 0.0, 2, 10.0, 0.0, t).unwrap();
        // Cells 1 + simulation 2.5 + transport 2 per node: 1 node (5.5 MiB).
        assert_eq!(s.nodes, 1);
        let s = suggest_nodes(8.0 * 1024.0, 0.0, 0.0, 2, 10.0, 0.0, t).unwrap();
        // 28 MiB + 2 per node: 30/10 → 3, 34/10 → 4, 36/10 → 4.
        assert_eq!(s.nodes, 4);
        let e = suggest_nodes(1.0, 0.0, 0.0, 2, 10.0, 0.0, |_| Err("refused")).unwrap_err();
        assert_eq!(e, "refused");
        // A node of almost no memory: one pass, a count the caller refuses, no overflow.
        let s = suggest_nodes(1024.0, 0.0, 1.0, 1000, 1e-300, MARGIN, |_| {
            Ok::<f64, Infallible>(0.0)
        })
        .unwrap();
        assert_eq!((s.nodes, s.iterations), (u64::MAX, 1));
    }
}
