//! `ballast stats`: per rank and cycle loads of any allocation file, with warnings about
//! empty buckets and duplicated, missing or unknown gids.
use std::path::PathBuf;

use anyhow::{bail, Context};
use ballast_balancer::atomic;
use ballast_balancer::{read_allocation, DryRun, Summary};

use crate::output::{count, population_warnings};
use crate::plot;
use clap::Args;
use serde_json::json;

#[derive(Args)]
pub struct StatsArgs {
    /// An allocation file (allocation_r{R}_c{C}.pkl.gz), written by Ballast or neurodamus.
    file: PathBuf,
    /// The dry run it was made from: gives KB per bucket and checks every gid is present once.
    #[arg(long, value_name = "FILE")]
    memory_usage: Option<PathBuf>,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    json: bool,
    /// Draw per-rank stacked bars (cell memory, synapse memory) to FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE", requires = "memory_usage")]
    plot: Option<PathBuf>,
}

pub fn run(args: &StatsArgs) -> anyhow::Result<()> {
    if let Some(p) = &args.plot {
        plot::check_path(p)?;
        let mut inputs = vec![atomic::Input::new(&args.file, "the allocation file")];
        inputs.extend(
            args.memory_usage
                .iter()
                .map(|m| atomic::Input::new(m, "--memory-usage")),
        );
        atomic::refuse_input(p, &inputs)?;
    }
    let allocation = read_allocation(&args.file)?;
    let dry_run = args
        .memory_usage
        .as_deref()
        .map(DryRun::from_json_file)
        .transpose()?;
    let problems = allocation.gid_problems(dry_run.as_ref());
    let (summary, unit) = match &dry_run {
        Some(d) => (Summary::new(&allocation, d), "KB"),
        None => (Summary::by_cell_count(&allocation), "cells"),
    };
    if args.plot.is_some() {
        // The plot holds values per rank: as many as the cells justify, as for balancing.
        let cells = summary.overall.cells as u64;
        ballast_balancer::limits::check_buckets(
            allocation.ranks,
            1,
            cells,
            ballast_balancer::limits::available_memory(),
        )
        .with_context(|| format!("--plot: {}", args.file.display()))?;
    }
    let empty = summary.empty_bucket_count();
    for line in problems.describe() {
        eprintln!("warning: {}: {line}", args.file.display());
    }
    if empty > 0 {
        let first: Vec<(u32, u32)> = summary
            .first_empty_buckets(8)
            .iter()
            .map(|b| (b.rank, b.cycle))
            .collect();
        eprintln!(
            "warning: {empty} of {} hold no cell: {first:?}{}",
            count(allocation.bucket_count(), "bucket"),
            if empty > 8 { " ..." } else { "" }
        );
    }
    if allocation.populations.len() > 1 {
        for w in population_warnings(&allocation) {
            eprintln!("warning: {}: {w}", args.file.display());
        }
    }
    let o = &summary.overall;
    if args.json {
        let kb = |x: f64| {
            if dry_run.is_some() {
                json!(x)
            } else {
                serde_json::Value::Null
            }
        };
        let value = json!({
            "file": args.file, "ranks": allocation.ranks, "cycles": allocation.cycles,
            "populations": summary.populations.iter().map(|(n, s)| population_json(n, s, dry_run.is_some())).collect::<Vec<_>>(),
            "cells": o.cells, "unit": unit,
            "total_kb": kb(o.total_kb), "max_bucket_kb": kb(o.max_bucket_kb), "mean_bucket_kb": kb(o.mean_bucket_kb),
            "min_bucket_kb": kb(o.min_bucket_kb), "max_rank_kb": kb(o.max_rank_kb), "mean_rank_kb": kb(o.mean_rank_kb),
            "min_rank_kb": kb(o.min_rank_kb), "heaviest_cell_kb": kb(o.heaviest_cell_kb),
            "lower_bound_kb": kb(o.lower_bound_kb),
            "imbalance": o.imbalance, "ratio_to_lower_bound": o.ratio_to_lower_bound,
            "buckets": summary.buckets.iter().map(|b| {
                let mut v = json!({"rank": b.rank, "cycle": b.cycle, "cells": b.cells});
                if dry_run.is_some() {
                    v["kb"] = json!(b.kb);
                }
                v
            }).collect::<Vec<_>>(),
            "empty_buckets": empty,
            "duplicated_gids": problems.duplicated.len(), "missing_gids": problems.missing.len(), "unknown_gids": problems.unknown.len(),
        });
        outln!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        outln!(
            "{}: {} × {}, {}, {}{}\n",
            args.file.display(),
            count(allocation.ranks, "rank"),
            count(allocation.cycles, "cycle"),
            count(allocation.populations.len() as u64, "population"),
            count(o.cells as u64, "cell"),
            if dry_run.is_none() {
                " (no --memory-usage: loads are cell counts)"
            } else {
                ""
            }
        );
        out!("{}", summary.bucket_table(dry_run.is_some()));
        outln!();
        out!("{}", summary.table(unit));
    }
    if let (Some(path), Some(d)) = (&args.plot, &dry_run) {
        let title = args
            .file
            .file_name()
            .map_or("allocation".into(), |n| n.to_string_lossy().into_owned());
        let series = plot::allocation_series(&title, &allocation, d);
        plot::render(
            path,
            &[series],
            summary.overall.total_kb / allocation.ranks as f64,
        )?
        .commit()?;
        eprintln!("wrote {}", path.display());
    }
    if !problems.is_empty() {
        bail!(
            "{}: the allocation does not hold every gid exactly once (see the warnings above)",
            args.file.display()
        );
    }
    Ok(())
}

/// A population as `stats --json` lists it: its name and statistics (KB figures null
/// without `--memory-usage`), the same objects as `dry-run --json`'s.
fn population_json(name: &str, s: &ballast_balancer::LoadStats, with_kb: bool) -> serde_json::Value {
    let mut v = crate::output::population_json(name, s);
    if !with_kb {
        for key in [
            "total_kb",
            "max_bucket_kb",
            "mean_bucket_kb",
            "min_bucket_kb",
            "max_rank_kb",
            "mean_rank_kb",
            "min_rank_kb",
            "heaviest_cell_kb",
            "lower_bound_kb",
        ] {
            v[key] = serde_json::Value::Null;
        }
    }
    v
}
