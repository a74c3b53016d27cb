//! The dry run's one report: what `--json` prints (its keys in this order, optional ones
//! left out when they do not apply) and what the text form ([`super::render`]) is written
//! from, plus the warnings about buckets left empty.
use std::path::PathBuf;

use ballast_balancer::node_fit::{node_totals, node_totals_kb, nodes_over};
use ballast_balancer::node_suggest::{Estimate, Suggestion};
use ballast_balancer::transport_aware::{Candidate, RankLoads};
use ballast_balancer::{Allocation, LoadStats, Summary};
use serde::Serialize;

use super::balance::BalanceStep;
use super::input::Input;
use super::plan::{Plan, Sizing};
use crate::node_suggest::{self, NodeMemory, RanksPerNode, SuggestionReport};
use crate::output::{count, population_warnings, PopulationStats};

/// The result of `ballast dry-run`.
#[derive(Serialize)]
pub(super) struct Report {
    pub ranks: u32,
    pub cycles: u32,
    pub strategy: String,
    /// All populations together.
    #[serde(flatten)]
    pub overall: LoadStats,
    pub balance_seconds: f64,
    pub empty_buckets: u64,
    pub populations: Vec<PopulationStats>,
    /// The allocation file.
    pub output: PathBuf,
    /// Every file written, the allocation first.
    pub written: Vec<PathBuf>,
    /// neurodamus' batched greedy on the same input (when another strategy ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub neurodamus_max_bucket_kb: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub neurodamus_ratio_to_lower_bound: Option<f64>,
    /// Per rank, with connectivity or a transport charge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank_loads: Option<RankLoadsReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_rank_total_kb: Option<f64>,
    /// The transport-blind result the transport-aware search started from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blind_rank_loads: Option<RankLoadsReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blind_max_rank_total_kb: Option<f64>,
    /// The transport-aware search's candidates; in JSON, `[method, largest rank total KB]`
    /// pairs.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "method_kb_pairs")]
    pub candidates: Option<Vec<Candidate>>,
    /// Per node, KB, where nodes are counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_totals_kb: Option<Vec<f64>>,
    pub estimate: Estimate,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport_cap: Option<TransportCap>,
    #[serde(rename = "neurodamus_mean_kb")]
    pub neurodamus_means: Vec<NeurodamusMean>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<SuggestionReport>,
    /// With `--node-memory-gb`: the node size, the nodes above it and the fewest that fit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_memory_kb: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes_over_memory: Option<Vec<usize>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggested_nodes: Option<usize>,
    /// What only the text form prints.
    #[serde(skip)]
    pub text: TextOnly,
}

/// [`Report::candidates`] as JSON: `[["blind", 1234.5], ...]`, the shape `--json` has
/// always printed.
fn method_kb_pairs<S: serde::Serializer>(
    candidates: &Option<Vec<Candidate>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    let pairs = candidates.iter().flatten().map(|c| (&c.method, c.max_total_kb));
    s.collect_seq(pairs)
}

/// The figures the text form prints beside the report's.
pub(super) struct TextOnly {
    /// Where the input came from.
    pub label: String,
    pub populations: usize,
    pub metypes: usize,
    pub summary: Summary,
    pub rank_overhead_mb: f64,
    /// Whether a transport charge was balanced for.
    pub charged: bool,
    /// Ranks per node where nodes are counted.
    pub ranks_per_node: Option<usize>,
    pub suggestion: Option<(Suggestion, RanksPerNode, NodeMemory)>,
}

/// One result's per-rank loads (KB) and peers.
#[derive(Serialize)]
pub(super) struct RankLoadsReport {
    #[serde(flatten)]
    pub loads: RankLoads,
    pub total_kb: Vec<f64>,
}

impl RankLoadsReport {
    fn new(l: &RankLoads) -> RankLoadsReport {
        RankLoadsReport {
            loads: l.clone(),
            total_kb: (0..l.cells_kb.len()).map(|r| l.total_kb(r)).collect(),
        }
    }
}

impl NeurodamusMean {
    /// Per population, neurodamus' mean beside this allocation's
    /// ([`node_suggest::neurodamus_means`]).
    fn list(allocation: &Allocation, summary: &Summary) -> Vec<NeurodamusMean> {
        node_suggest::neurodamus_means(allocation, summary)
            .into_iter()
            .map(|(name, nd, held, ours)| NeurodamusMean {
                name,
                neurodamus_mean_kb: nd,
                buckets_with_cells: held,
                mean_bucket_kb: ours,
            })
            .collect()
    }
}

/// With an endpoint cap, what the transport charge did with the peers past it:
/// `charged_as` is `datagram`, `evict` or `none` (the MPI native path), `fallback` why
/// datagram fell back to evict.
#[derive(Serialize)]
pub(super) struct TransportCap {
    pub max_endpoints: usize,
    pub endpoint_overflow: String,
    pub charged_as: &'static str,
    pub fallback: Option<String>,
    /// The text form's words, after the estimate's transport row.
    #[serde(skip)]
    pub text: String,
}

/// A population whose cells leave buckets empty: the mean neurodamus prints (over the
/// buckets holding its cells) beside Ballast's (over every bucket).
#[derive(Serialize)]
pub(super) struct NeurodamusMean {
    pub name: String,
    pub neurodamus_mean_kb: f64,
    pub buckets_with_cells: u64,
    pub mean_bucket_kb: f64,
}

/// Warns (stderr) about buckets that got no cell and populations not spread over every
/// bucket.
pub(super) fn warn_empty(allocation: &Allocation, summary: &Summary) {
    let empty = summary.empty_bucket_count();
    if empty > 0 {
        eprintln!(
            "warning: {} of {} got no cell (more ranks × cycles than cells can fill); consider fewer ranks or cycles",
            empty,
            count(allocation.bucket_count(), "bucket")
        );
    }
    // With one population the warning above says it all.
    if allocation.populations.len() > 1 {
        for w in population_warnings(allocation) {
            eprintln!("warning: {w}");
        }
    }
}

impl Report {
    /// The report of a run that balanced `input` as `sizing` says into `step` and wrote
    /// `written` (the allocation first), weighed in `summary`.
    pub fn new(
        plan: &Plan,
        input: &Input,
        sizing: &Sizing,
        step: &BalanceStep,
        summary: Summary,
        written: Vec<PathBuf>,
        charged: bool,
    ) -> Report {
        let config = &sizing.config;
        let rpn = sizing.rpn.map(|r| r.ranks);
        let loads = step.loads.as_ref();
        // Node view: per-node totals. Without a transport charge the rank totals are the
        // allocation's (every cycle of a rank), the figures the node-fit search compares too.
        let nodes = rpn.map(|k| match loads {
            Some(l) => node_totals(l, k),
            None => node_totals_kb(&summary.rank_kb(), k),
        });
        let estimate = node_suggest::estimate(
            &input.dry_run,
            config.ranks,
            plan.rank_overhead_mb,
            loads.map(|l| l.transport_kb.as_slice()),
        );
        let neurodamus_means = NeurodamusMean::list(&step.allocation, &summary);
        let fit = step.fit.as_ref();
        Report {
            ranks: config.ranks,
            cycles: config.cycles,
            strategy: step.strategy_name.clone(),
            overall: summary.overall.clone(),
            balance_seconds: step.seconds,
            empty_buckets: summary.empty_bucket_count(),
            populations: summary
                .populations
                .iter()
                .map(|p| PopulationStats::new(p, true))
                .collect(),
            output: written[0].clone(),
            written,
            neurodamus_max_bucket_kb: step.baseline.as_ref().map(|b| b.max_bucket_kb),
            neurodamus_ratio_to_lower_bound: step.baseline.as_ref().map(|b| b.ratio_to_lower_bound),
            rank_loads: loads.map(RankLoadsReport::new),
            max_rank_total_kb: loads.map(RankLoads::max_total_kb),
            blind_rank_loads: step.blind.as_ref().map(RankLoadsReport::new),
            blind_max_rank_total_kb: step.blind.as_ref().map(RankLoads::max_total_kb),
            candidates: step.blind.as_ref().map(|_| step.tried.clone()),
            nodes_over_memory: fit.map(|f| {
                nodes
                    .as_ref()
                    .map(|n| nodes_over(n, f.node_kb))
                    .unwrap_or_default()
            }),
            node_totals_kb: nodes,
            estimate,
            transport_cap: charged.then(|| charged_cap(plan.runtime.transport())).flatten(),
            neurodamus_means,
            suggestion: sizing
                .suggestion
                .as_ref()
                .map(|(s, r, m)| SuggestionReport::new(s, *r, *m)),
            node_memory_kb: fit.map(|f| f.node_kb),
            suggested_nodes: fit.map(|f| f.nodes),
            text: TextOnly {
                label: input.label.clone(),
                populations: input.dry_run.populations.len(),
                metypes: input.dry_run.metypes.len(),
                summary,
                rank_overhead_mb: plan.rank_overhead_mb,
                charged,
                ranks_per_node: rpn,
                suggestion: sizing.suggestion,
            },
        }
    }
}

/// With an endpoint cap, what the transport charge did with the peers past it; `None`
/// without a cap.
fn charged_cap(t: &ballast_runtime::TransportConfig) -> Option<TransportCap> {
    use ballast_runtime::{datagram::chunk_for, model::datagram_mtu, TransportKind};
    let (cap, overflow) = (t.max_endpoints, t.endpoint_overflow);
    if cap == 0 {
        return None;
    }
    let set = format!("max_endpoints={cap}, endpoint_overflow={overflow}");
    let (charged_as, fallback, text) = if t.kind == TransportKind::Mpi && t.mpi_native {
        (
            "none",
            None,
            format!("{set}: no effect on the MPI native path, no endpoint charged"),
        )
    } else {
        match chunk_for(t, datagram_mtu(t.kind)) {
            Ok(Some(_)) => (
                "datagram",
                None,
                format!("{set}: peers past the cap charged their datagram state"),
            ),
            Ok(None) => (
                "evict",
                None,
                format!("{set}: at most {cap} endpoints charged, nothing for the peers past the cap"),
            ),
            Err(why) => {
                let why = format!("transport {} {why}", t.kind);
                let text = format!(
                    "{set} falls back to evict: {why}; at most {cap} endpoints charged, nothing for the peers past the cap"
                );
                ("evict", Some(why), text)
            }
        }
    };
    Some(TransportCap {
        max_endpoints: cap,
        endpoint_overflow: overflow.to_string(),
        charged_as,
        fallback,
        text,
    })
}
