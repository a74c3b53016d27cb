//! The dry run's report as text: the header, the bucket table, the comparison with
//! neurodamus, per-rank loads, the memory estimate, the node suggestion and per-node view,
//! and the files written.
use ballast_balancer::node_fit::nodes_over;
use ballast_balancer::transport_aware::RankLoads;

use super::report::Report;
use crate::node_suggest;
use crate::output::count;

/// The label of the memory estimate's transport row (`Estimate::rows`).
const TRANSPORT_ROW: &str = "Transport (Ballast)";

/// Prints `r` as text to stdout.
pub(super) fn text(r: &Report) -> anyhow::Result<()> {
    let t = &r.text;
    let o = &r.overall;
    outln!(
        "ballast dry-run: {}, {}, {} ({}) -> {} × {}, strategy {} ({:.3} s)\n",
        count(o.cells as u64, "cell"),
        count(t.populations as u64, "population"),
        count(t.metypes as u64, "metype"),
        t.label,
        count(r.ranks, "rank"),
        count(r.cycles, "cycle"),
        r.strategy,
        r.balance_seconds
    );
    out!("{}", t.summary.table("KB"));
    outln!(
        "\nlower bound for the largest bucket: {:.1} KB (max of total/buckets and the heaviest cell, {:.1} KB)",
        o.lower_bound_kb, o.heaviest_cell_kb
    );
    if let (Some(max), Some(ratio)) = (r.neurodamus_max_bucket_kb, r.neurodamus_ratio_to_lower_bound) {
        outln!(
            "neurodamus' batched greedy on the same input: largest bucket {:.1} KB ({:.4}× the bound); this result's is {}",
            max,
            ratio,
            relative(o.max_bucket_kb, max)
        );
    }
    rank_loads(r)?;
    outln!();
    estimate(r)?;
    suggestion(r)?;
    node_view(r)?;
    for path in &r.written {
        outln!("wrote {}", path.display());
    }
    Ok(())
}

/// Per rank (with connectivity or a charge), beside the transport-blind result.
fn rank_loads(r: &Report) -> anyhow::Result<()> {
    if let Some(l) = &r.rank_loads {
        let blind = r.blind_rank_loads.as_ref().map(|b| &b.loads);
        outln!();
        out!("{}", rank_table(blind, &l.loads));
        if let Some(b) = blind {
            outln!(
                "\nlargest rank total: transport-blind {:.1} KB, transport-aware {:.1} KB ({:.2}% lower; method {})",
                b.max_total_kb(),
                l.loads.max_total_kb(),
                100.0 * (1.0 - l.loads.max_total_kb() / b.max_total_kb()),
                r.candidates
                    .iter()
                    .flatten()
                    .min_by(|a, b| a.max_total_kb.total_cmp(&b.max_total_kb))
                    .map_or("blind", |c| c.method.as_str())
            );
        }
    }
    Ok(())
}

/// The memory estimate table and neurodamus' means.
fn estimate(r: &Report) -> anyhow::Result<()> {
    let t = &r.text;
    let table = r.estimate.table(
        t.ranks_per_node
            .map(|k| (r.ranks as u64).div_ceil(k.max(1) as u64)),
    );
    for line in table.lines() {
        match &r.transport_cap {
            // The transport row says which cap and overflow mode the charge used.
            Some(cap) if line.starts_with(TRANSPORT_ROW) => outln!("{line}  ({})", cap.text),
            _ => outln!("{line}"),
        }
    }
    for m in &r.neurodamus_means {
        outln!(
            "note: population {}: neurodamus prints a mean of {:.1} KB per bucket (\"Mean allocation per rank\"), averaging only the {} buckets that hold its cells; Ballast's mean bucket, {:.1} KB, counts all {}",
            m.name,
            m.neurodamus_mean_kb,
            m.buckets_with_cells,
            m.mean_bucket_kb,
            count(t.summary.bucket_count(), "bucket")
        );
    }
    Ok(())
}

/// The node suggestion, without `--num-target-ranks`.
fn suggestion(r: &Report) -> anyhow::Result<()> {
    let t = &r.text;
    if let Some((s, rpn, m)) = &t.suggestion {
        outln!();
        for line in node_suggest::suggestion_lines(s, *rpn, *m, t.rank_overhead_mb, t.charged) {
            outln!("{line}");
        }
        let steps = if r.cycles > 1 {
            format!(" --modelbuilding-steps={}", r.cycles)
        } else {
            String::new()
        };
        outln!(
            "balanced for the suggested {} × {} = {}: run neurodamus --lb-mode=Memory{steps} on {} ranks and it loads {}",
            count(s.nodes, "node"),
            rpn.ranks,
            count(r.ranks, "rank"),
            r.ranks,
            ballast_balancer::allocation_file_name(r.ranks, r.cycles)
        );
    }
    Ok(())
}

/// Per node, where nodes are counted, and the fewest that fit a node size.
fn node_view(r: &Report) -> anyhow::Result<()> {
    let (Some(n), Some(k)) = (&r.node_totals_kb, r.text.ranks_per_node) else {
        return Ok(());
    };
    outln!(
        "\nper node ({k} ranks per node): largest {:.1} KB, smallest {:.1} KB",
        n.iter().copied().fold(0.0, f64::max),
        n.iter().copied().fold(f64::INFINITY, f64::min)
    );
    if let (Some(node_kb), Some(nodes)) = (r.node_memory_kb, r.suggested_nodes) {
        let over = nodes_over(n, node_kb);
        if over.is_empty() {
            outln!("every node fits in {:.1} GiB", node_kb / 1048576.0);
        } else {
            outln!("nodes over {:.1} GiB: {:?}", node_kb / 1048576.0, over);
        }
        outln!(
            "fewest nodes that fit{}: {} ({} ranks)",
            if r.text.charged {
                " (transport charge recomputed for each count)"
            } else {
                ""
            },
            nodes,
            nodes * k
        );
    }
    Ok(())
}

/// "x.xx% lower" / "x.xx% higher" / "the same" of `ours` against `theirs`.
fn relative(ours: f64, theirs: f64) -> String {
    if theirs <= 0.0 || ours == theirs {
        return "the same".into();
    }
    let pct = 100.0 * (1.0 - ours / theirs);
    if pct >= 0.0 {
        format!("{pct:.2}% lower")
    } else {
        format!("{:.2}% higher (the transport charge is balanced too)", -pct)
    }
}

/// One row per rank: cells, synapses, transport, total and peers, beside the blind result.
fn rank_table(blind: Option<&RankLoads>, l: &RankLoads) -> String {
    let mut out = String::new();
    match blind {
        Some(_) => {
            out += &format!(
                "{:>6} {:>13} {:>13} {:>12} {:>14} {:>7} | {:>12} {:>14} {:>7}\n",
                "rank",
                "cells KB",
                "synapses KB",
                "transport KB",
                "total KB",
                "peers",
                "blind transp",
                "blind total",
                "peers"
            )
        }
        None => {
            out += &format!(
                "{:>6} {:>13} {:>13} {:>12} {:>14} {:>7}\n",
                "rank", "cells KB", "synapses KB", "transport KB", "total KB", "peers"
            )
        }
    }
    for r in 0..l.cells_kb.len() {
        out += &format!(
            "{:>6} {:>13.1} {:>13.1} {:>12.1} {:>14.1} {:>7}",
            r,
            l.cells_kb[r],
            l.synapses_kb[r],
            l.transport_kb[r],
            l.total_kb(r),
            l.peers[r]
        );
        if let Some(b) = blind {
            out += &format!(
                " | {:>12.1} {:>14.1} {:>7}",
                b.transport_kb[r],
                b.total_kb(r),
                b.peers[r]
            );
        }
        out.push('\n');
    }
    out
}
