//! `ballast dry-run`: balance a neurodamus dry run (or the built-in synthetic one) and write
//! the allocation file.
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use ballast_balancer::synthetic::{self, SyntheticSpec};
use ballast_balancer::{balance, write_allocation, BalancerConfig, DryRun, Strategy, Summary};
use clap::Args;
use serde_json::json;

#[derive(Args)]
#[command(group = clap::ArgGroup::new("input").required(true).args(["memory_usage", "synthetic"]))]
pub struct DryRunArgs {
    /// neurodamus' dry-run output (cell_memory_usage.json).
    #[arg(long, value_name = "FILE")]
    memory_usage: Option<PathBuf>,
    /// Use the built-in generator with this many cells instead of a file.
    #[arg(long, value_name = "CELLS")]
    synthetic: Option<usize>,
    /// Metypes of the synthetic input.
    #[arg(long, default_value_t = SyntheticSpec::default().metypes, requires = "synthetic")]
    metypes: usize,
    /// Populations of the synthetic input.
    #[arg(long, default_value_t = SyntheticSpec::default().populations, requires = "synthetic")]
    populations: usize,
    /// Seed of the synthetic input.
    #[arg(long, default_value_t = SyntheticSpec::default().seed, requires = "synthetic")]
    seed: u64,
    /// Also write the synthetic input as OUTPUT_DIR/cell_memory_usage.json.
    #[arg(long, requires = "synthetic")]
    write_memory_usage: bool,
    /// Number of ranks to balance for.
    #[arg(long, value_name = "N")]
    num_target_ranks: u32,
    /// Model-building cycles per rank (neurodamus' ModelBuildingSteps).
    #[arg(long, default_value_t = 1)]
    cycles: u32,
    /// lpt (Ballast's) or neurodamus (its batched greedy, reproduced exactly).
    #[arg(long, default_value = "lpt")]
    strategy: Strategy,
    /// Where allocation_r{N}_c{C}.pkl.gz goes.
    #[arg(long, default_value = ".")]
    output_dir: PathBuf,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &DryRunArgs) -> anyhow::Result<()> {
    let config = BalancerConfig::builder()
        .ranks(args.num_target_ranks)
        .cycles(args.cycles)
        .strategy(args.strategy)
        .build()?;
    let dry_run = match (&args.memory_usage, args.synthetic) {
        (Some(path), _) => DryRun::from_json_file(path)?,
        (None, Some(cells)) => synthetic::generate(&SyntheticSpec {
            cells,
            metypes: args.metypes,
            populations: args.populations,
            seed: args.seed,
        })?,
        (None, None) => unreachable!("clap requires one input"),
    };
    std::fs::create_dir_all(&args.output_dir)
        .with_context(|| format!("cannot create output directory {}", args.output_dir.display()))?;

    let start = Instant::now();
    let allocation = balance(&dry_run, &config);
    let seconds = start.elapsed().as_secs_f64();
    allocation.validate(&dry_run).context("internal error: the balancer lost or duplicated a cell")?;
    let summary = Summary::new(&allocation, &dry_run);
    // neurodamus' result on the same input, for comparison (cheap: one greedy pass).
    let baseline = (args.strategy != Strategy::Neurodamus).then(|| {
        let nd = BalancerConfig { strategy: Strategy::Neurodamus, ..config.clone() };
        Summary::new(&balance(&dry_run, &nd), &dry_run).overall
    });

    if args.write_memory_usage {
        dry_run.write_json_file(&args.output_dir.join("cell_memory_usage.json"))?;
    }
    let output = write_allocation(&args.output_dir, &allocation)?;

    let empty = summary.empty_buckets();
    if !empty.is_empty() {
        eprintln!(
            "warning: {} of {} buckets got no cell (more ranks × cycles than cells can fill); consider fewer ranks or cycles",
            empty.len(),
            allocation.bucket_count()
        );
    }
    let o = &summary.overall;
    if args.json {
        let mut value = json!({
            "ranks": config.ranks, "cycles": config.cycles, "strategy": format!("{:?}", config.strategy).to_lowercase(),
            "cells": o.cells, "total_kb": o.total_kb,
            "max_bucket_kb": o.max_bucket_kb, "mean_bucket_kb": o.mean_bucket_kb, "min_bucket_kb": o.min_bucket_kb,
            "max_rank_kb": o.max_rank_kb, "mean_rank_kb": o.mean_rank_kb, "min_rank_kb": o.min_rank_kb,
            "heaviest_cell_kb": o.heaviest_cell_kb, "lower_bound_kb": o.lower_bound_kb,
            "imbalance": o.imbalance, "ratio_to_lower_bound": o.ratio_to_lower_bound,
            "balance_seconds": seconds, "empty_buckets": empty.len(),
            "populations": summary.populations.iter().map(|(n, s)| (n.clone(), serde_json::to_value(s).unwrap())).collect::<serde_json::Map<_, _>>(),
            "output": output,
        });
        if let Some(b) = &baseline {
            value["neurodamus_max_bucket_kb"] = json!(b.max_bucket_kb);
            value["neurodamus_ratio_to_lower_bound"] = json!(b.ratio_to_lower_bound);
        }
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!(
        "ballast dry-run: {} cells, {} populations, {} metypes -> {} ranks × {} cycles, strategy {} ({:.3} s)\n",
        o.cells,
        dry_run.populations.len(),
        dry_run.metypes.len(),
        config.ranks,
        config.cycles,
        format!("{:?}", config.strategy).to_lowercase(),
        seconds
    );
    print!("{}", summary.table("KB"));
    println!("\nlower bound for the largest bucket: {:.1} KB (max of total/buckets and the heaviest cell, {:.1} KB)", o.lower_bound_kb, o.heaviest_cell_kb);
    if let Some(b) = baseline {
        println!(
            "neurodamus' batched greedy on the same input: largest bucket {:.1} KB ({:.4}× the bound); Ballast's is {:.2}% lower",
            b.max_bucket_kb,
            b.ratio_to_lower_bound,
            100.0 * (1.0 - o.max_bucket_kb / b.max_bucket_kb)
        );
    }
    println!("wrote {}", output.display());
    Ok(())
}
