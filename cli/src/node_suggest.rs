//! `ballast dry-run`'s node view as neurodamus gives it: ranks per node and node memory
//! from this machine when not given, the node and rank count suggested when
//! `--num-target-ranks` is absent ([`ballast_balancer::node_suggest`]), the memory estimate
//! table, and the figures neurodamus prints differently by definition.
use anyhow::Context;
use ballast_balancer::network::Network;
use ballast_balancer::node_suggest::{self, cell_and_synapse_kb, Estimate, MemoryKb, Suggestion, MARGIN};
use ballast_balancer::transport_aware::TransportCharge;
use ballast_balancer::{balance_charged, Allocation, BalancerConfig, DryRun, Summary};
use serde::Serialize;

/// Ranks per node and where the figure came from.
#[derive(Debug, Clone, Copy)]
pub struct RanksPerNode {
    pub ranks: usize,
    /// `--ranks-per-node`, or this machine's cores.
    pub given: bool,
}

/// `--ranks-per-node`, or when `needed`, the CPUs this process may use
/// (`std::thread::available_parallelism`: affinity and cgroup quotas counted; neurodamus
/// takes `os.cpu_count()`); `None` when neither.
pub fn ranks_per_node(given: Option<usize>, needed: bool) -> Option<RanksPerNode> {
    match given {
        Some(ranks) => Some(RanksPerNode { ranks, given: true }),
        None if needed => Some(RanksPerNode {
            ranks: std::thread::available_parallelism().map_or(1, |n| n.get()),
            given: false,
        }),
        None => None,
    }
}

/// Node memory, MiB, and whether `--node-memory-gb` gave it (else MemTotal).
#[derive(Debug, Clone, Copy)]
pub struct NodeMemory {
    pub mb: f64,
    pub given: bool,
}

/// `--node-memory-gb` in MiB, or MemTotal of /proc/meminfo (an error naming the file and
/// the option when it cannot be read).
pub fn node_memory(gib: Option<f64>) -> anyhow::Result<NodeMemory> {
    match gib {
        Some(g) => Ok(NodeMemory {
            mb: g * 1024.0,
            given: true,
        }),
        None => node_suggest::node_memory_mb()
            .filter(|&mb| mb > 0.0)
            .map(|mb| NodeMemory { mb, given: false })
            .context("cannot read MemTotal from /proc/meminfo: give the nodes' memory with --node-memory-gb"),
    }
}

/// The transport charge, MiB, of all ranks when `dry_run` is balanced for `ranks` ranks
/// with `config`'s cycles and strategy (0 without a charge).
fn transport_mb(
    dry_run: &DryRun,
    network: Option<&Network>,
    config: &BalancerConfig,
    charge: Option<&TransportCharge>,
    ranks: u64,
) -> anyhow::Result<f64> {
    let Some(charge) = charge else { return Ok(0.0) };
    let ranks = u32::try_from(ranks).map_err(|_| anyhow::anyhow!("{ranks} ranks: more than 2^32 - 1"))?;
    let c = BalancerConfig {
        ranks,
        ..config.clone()
    };
    c.check_size(dry_run)
        .with_context(|| format!("the node suggestion tried {ranks} ranks × {} cycles", c.cycles))?;
    let b = balance_charged(dry_run, network, &c, Some(charge), None);
    Ok(b.loads
        .map_or(0.0, |l| l.transport_kb.iter().sum::<f64>() / 1024.0))
}

/// neurodamus' `suggest_nodes` for this input (margin [`MARGIN`]), the transport charged
/// for each count tried when `charge` is given.
pub fn suggest(
    dry_run: &DryRun,
    network: Option<&Network>,
    config: &BalancerConfig,
    charge: Option<&TransportCharge>,
    overhead_per_rank_mb: f64,
    rpn: RanksPerNode,
    memory: NodeMemory,
) -> anyhow::Result<Suggestion> {
    let MemoryKb {
        cells_kb,
        synapses_kb,
    } = cell_and_synapse_kb(dry_run);
    node_suggest::suggest_nodes(
        cells_kb,
        synapses_kb,
        overhead_per_rank_mb,
        rpn.ranks as u64,
        memory.mb,
        MARGIN,
        |nodes| {
            transport_mb(
                dry_run,
                network,
                config,
                charge,
                nodes.saturating_mul(rpn.ranks as u64),
            )
        },
    )
}

/// The estimate of the balanced result: `ranks` ranks, the transport of `loads` when
/// charged.
pub fn estimate(
    dry_run: &DryRun,
    ranks: u32,
    overhead_per_rank_mb: f64,
    transport_kb: Option<&[f64]>,
) -> Estimate {
    let m = cell_and_synapse_kb(dry_run);
    let transport = transport_kb.map_or(0.0, |t| t.iter().sum::<f64>() / 1024.0);
    Estimate::new(
        ranks as u64,
        overhead_per_rank_mb,
        m.cells_kb,
        m.synapses_kb,
        transport,
    )
}

/// The lines saying where the node figures came from and what was suggested.
pub fn suggestion_lines(
    s: &Suggestion,
    rpn: RanksPerNode,
    memory: NodeMemory,
    overhead: f64,
    charged: bool,
) -> Vec<String> {
    let ranks = s.nodes.saturating_mul(rpn.ranks as u64);
    vec![
        format!(
            "suggested: at least {} × {} per node = {} (neurodamus' suggest_nodes: grand total × (1 + {MARGIN}) / node memory, {} per rank of overhead, {}; {} pass{})",
            crate::output::count(s.nodes, "node"),
            crate::output::count(rpn.ranks as u64, "rank"),
            crate::output::count(ranks, "rank"),
            format_args!("{overhead:.1} MiB"),
            if charged { "Ballast's transport charged" } else { "no transport charge (--transport-model none)" },
            s.iterations,
            if s.iterations == 1 { "" } else { "es" }
        ),
        if memory.given {
            format!("node memory {:.2} GiB (--node-memory-gb)", memory.mb / 1024.0)
        } else {
            format!(
                "node memory {:.1} GiB: MemTotal of this machine's /proc/meminfo (give --node-memory-gb for other nodes)",
                memory.mb / 1024.0
            )
        },
        if rpn.given {
            format!("{} per node (--ranks-per-node)", crate::output::count(rpn.ranks as u64, "rank"))
        } else {
            format!(
                "{} per node: this machine's cores (give --ranks-per-node for other nodes)",
                crate::output::count(rpn.ranks as u64, "rank")
            )
        },
    ]
}

/// The suggestion as `dry-run --json` gives it: nodes, ranks, where the ranks per node and
/// the node memory (MiB) came from, the margin and the passes made.
#[derive(Serialize)]
pub struct SuggestionReport {
    nodes: u64,
    ranks: u64,
    ranks_per_node: usize,
    ranks_per_node_source: &'static str,
    node_memory_mb: f64,
    node_memory_source: &'static str,
    margin: f64,
    iterations: usize,
}

impl SuggestionReport {
    pub fn new(s: &Suggestion, rpn: RanksPerNode, memory: NodeMemory) -> SuggestionReport {
        SuggestionReport {
            nodes: s.nodes,
            ranks: s.nodes.saturating_mul(rpn.ranks as u64),
            ranks_per_node: rpn.ranks,
            ranks_per_node_source: if rpn.given {
                "--ranks-per-node"
            } else {
                "available_parallelism"
            },
            node_memory_mb: memory.mb,
            node_memory_source: if memory.given {
                "--node-memory-gb"
            } else {
                "/proc/meminfo MemTotal"
            },
            margin: MARGIN,
            iterations: s.iterations,
        }
    }
}

/// Per population with empty buckets: the mean neurodamus prints ("Mean allocation per
/// rank \[KB\]", `print_allocation_stats`), which averages only the buckets holding the
/// population's cells, beside Ballast's mean bucket, which counts every bucket. (name,
/// neurodamus' mean KB, buckets holding cells, Ballast's mean KB.)
pub fn neurodamus_means(allocation: &Allocation, summary: &Summary) -> Vec<(String, f64, u64, f64)> {
    let buckets = u64::from(allocation.ranks) * u64::from(allocation.cycles);
    allocation
        .populations
        .iter()
        .filter_map(|p| {
            let stats = &summary.populations.iter().find(|s| s.name == p.name)?.stats;
            let held = p.buckets.iter().filter(|(_, g)| !g.is_empty()).count() as u64;
            (held > 0 && held < buckets).then(|| {
                (
                    p.name.clone(),
                    stats.total_kb / held as f64,
                    held,
                    stats.mean_bucket_kb,
                )
            })
        })
        .collect()
}
