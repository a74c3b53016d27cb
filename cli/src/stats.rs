//! `ballast stats`: per rank and cycle loads of any allocation file, with warnings about
//! empty buckets and duplicated, missing or unknown gids. The options are checked into a
//! [`Plan`]; the file's loads become one [`Report`], printed as JSON or as text.
use std::path::PathBuf;

use anyhow::{bail, Context};
use ballast_balancer::atomic;
use ballast_balancer::{read_allocation, Allocation, GidProblems, Summary};
use serde::Serialize;

use crate::output::{count, population_warnings, KbStats, PopulationStats};
use crate::plot;
use clap::Args;

#[derive(Args)]
pub struct StatsArgs {
    /// An allocation file (allocation_r{R}_c{C}.pkl.gz), written by Ballast or neurodamus.
    file: PathBuf,
    /// The dry run it was made from: gives KB per bucket and checks every gid is present once.
    /// May be a pipe or FIFO (`<(zcat f.json.gz)`, /dev/stdin), read to its end: a FIFO with
    /// no writer waits for one.
    #[arg(long, value_name = "FILE")]
    memory_usage: Option<PathBuf>,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    json: bool,
    /// Draw per-rank stacked bars (cell memory, synapse memory) to FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE", requires = "memory_usage")]
    plot: Option<PathBuf>,
}

/// A bucket holding cells (its KB with `--memory-usage`).
#[derive(Serialize)]
struct BucketReport {
    rank: u32,
    cycle: u32,
    cells: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    kb: Option<f64>,
}

/// The result of `ballast stats`.
#[derive(Serialize)]
struct Report {
    file: PathBuf,
    ranks: u32,
    cycles: u32,
    populations: Vec<PopulationStats>,
    cells: usize,
    /// `KB`, or `cells` without `--memory-usage`.
    unit: &'static str,
    #[serde(flatten)]
    kb: KbStats,
    imbalance: f64,
    ratio_to_lower_bound: f64,
    buckets: Vec<BucketReport>,
    empty_buckets: u64,
    duplicated_gids: usize,
    missing_gids: usize,
    unknown_gids: usize,
    /// What the text form prints from.
    #[serde(skip)]
    summary: Summary,
    #[serde(skip)]
    populations_in_file: usize,
}

/// `ballast stats`' options, checked (the plot's path before anything is read).
struct Plan<'a> {
    args: &'a StatsArgs,
}

pub fn run(args: &StatsArgs) -> anyhow::Result<()> {
    let plan = Plan::new(args)?;
    let allocation = read_allocation(&args.file)?;
    let dry_run = args
        .memory_usage
        .as_deref()
        .map(|p| crate::memory_usage::read(p, None).map(|r| r.dry_run))
        .transpose()?;
    let problems = allocation.gid_problems(dry_run.as_ref());
    let summary = match &dry_run {
        Some(d) => Summary::new(&allocation, d),
        None => Summary::by_cell_count(&allocation),
    };
    plan.check_plot_size(&allocation, &summary)?;
    plan.warn(&allocation, &summary, &problems);
    let report = Report::new(args, &allocation, summary, &problems, dry_run.is_some());
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        render(&report)?;
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
            report.summary.overall.total_kb / allocation.ranks as f64,
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

impl Plan<'_> {
    /// Checks the plot's path: a `.svg` or `.png` that is neither an input nor a FIFO or
    /// device.
    fn new(args: &StatsArgs) -> anyhow::Result<Plan<'_>> {
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
        Ok(Plan { args })
    }

    /// The plot holds values per rank: as many as the cells justify, as for balancing.
    fn check_plot_size(&self, allocation: &Allocation, summary: &Summary) -> anyhow::Result<()> {
        if self.args.plot.is_some() {
            let cells = summary.overall.cells as u64;
            ballast_balancer::limits::check_buckets(
                allocation.ranks,
                1,
                cells,
                ballast_balancer::limits::available_memory(),
            )
            .with_context(|| format!("--plot: {}", self.args.file.display()))?;
        }
        Ok(())
    }

    /// Warns (stderr) about gid problems, empty buckets and populations not spread over
    /// every bucket.
    fn warn(&self, allocation: &Allocation, summary: &Summary, problems: &GidProblems) {
        let file = self.args.file.display();
        let empty = summary.empty_bucket_count();
        for line in problems.describe() {
            eprintln!("warning: {file}: {line}");
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
            for w in population_warnings(allocation) {
                eprintln!("warning: {file}: {w}");
            }
        }
    }
}

impl Report {
    fn new(
        args: &StatsArgs,
        allocation: &Allocation,
        summary: Summary,
        problems: &GidProblems,
        with_kb: bool,
    ) -> Report {
        let o = &summary.overall;
        Report {
            file: args.file.clone(),
            ranks: allocation.ranks,
            cycles: allocation.cycles,
            populations: summary
                .populations
                .iter()
                .map(|p| PopulationStats::new(p, with_kb))
                .collect(),
            cells: o.cells,
            unit: if with_kb { "KB" } else { "cells" },
            kb: KbStats::new(o, with_kb),
            imbalance: o.imbalance,
            ratio_to_lower_bound: o.ratio_to_lower_bound,
            buckets: summary
                .buckets
                .iter()
                .map(|b| BucketReport {
                    rank: b.rank,
                    cycle: b.cycle,
                    cells: b.cells,
                    kb: with_kb.then_some(b.kb),
                })
                .collect(),
            empty_buckets: summary.empty_bucket_count(),
            duplicated_gids: problems.duplicated.len(),
            missing_gids: problems.missing.len(),
            unknown_gids: problems.unknown.len(),
            populations_in_file: allocation.populations.len(),
            summary,
        }
    }
}

/// Prints the report as text: the header, the bucket table and the statistics table.
fn render(r: &Report) -> anyhow::Result<()> {
    let with_kb = r.unit == "KB";
    outln!(
        "{}: {} × {}, {}, {}{}\n",
        r.file.display(),
        count(r.ranks, "rank"),
        count(r.cycles, "cycle"),
        count(r.populations_in_file as u64, "population"),
        count(r.cells as u64, "cell"),
        if with_kb {
            ""
        } else {
            " (no --memory-usage: loads are cell counts)"
        }
    );
    out!("{}", r.summary.bucket_table(with_kb));
    outln!();
    out!("{}", r.summary.table(r.unit));
    Ok(())
}
