//! `ballast dry-run`: balance a neurodamus dry run, a SONATA circuit or the built-in
//! synthetic input, optionally charging each rank its transport memory, and write the
//! allocation file.
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use anyhow::{bail, Context};
use ballast_balancer::atomic::{self, AtomicFile};
use ballast_balancer::files::{stage_allocation, AllocationCosts, CostInputs};
use ballast_balancer::network::Network;
use ballast_balancer::nodefit::{fewest_nodes, node_totals, node_totals_kb, nodes_over, NodeFitError};
use ballast_balancer::synthetic::{self, CircuitSpec, SyntheticSpec};
use ballast_balancer::transport_aware::RankLoads;
use ballast_balancer::{
    balance_charged_counted, Allocation, Balanced, BalancerConfig, DryRun, GidTables, Strategy, Summary,
};
use clap::{Args, ValueEnum};
use serde_json::json;

use crate::exchange::{self, Exchange};
use crate::node_suggest;
use crate::output::{count, population_json, population_warnings};
use crate::plot;
use crate::progress::Counter;
use crate::runtime_args::RuntimeArgs;

#[derive(Args)]
#[command(group = clap::ArgGroup::new("input").required(true).multiple(true).args(["memory_usage", "synthetic", "circuit"]))]
pub struct DryRunArgs {
    /// neurodamus' dry-run output (cell_memory_usage.json). With --circuit: the measured
    /// memory per metype to use for the circuit's cells.
    #[arg(long, value_name = "FILE")]
    memory_usage: Option<PathBuf>,
    /// Use the built-in generator with this many cells instead of a file.
    #[arg(long, value_name = "CELLS", conflicts_with_all = ["memory_usage", "circuit"])]
    synthetic: Option<usize>,
    /// Metypes of the synthetic input [default: 200].
    #[arg(long, requires = "synthetic")]
    metypes: Option<usize>,
    /// Populations of the synthetic input [default: 2].
    #[arg(long, requires = "synthetic")]
    populations: Option<usize>,
    /// Seed of the synthetic input [default: 1].
    #[arg(long, requires = "synthetic")]
    seed: Option<u64>,
    /// Give the synthetic input this many synapses, with distance-dependent connectivity
    /// (a synthetic circuit: per-cell synapse counts and peers).
    #[arg(long, value_name = "N", requires = "synthetic")]
    synapses: Option<u64>,
    /// Write the dry run (metype averages, neurodamus' layout) to PATH, or without a value to
    /// OUTPUT_DIR/cell_memory_usage.json; refused when that is an input file.
    #[arg(long, value_name = "PATH", num_args = 0..=1)]
    write_memory_usage: Option<Option<PathBuf>>,
    /// A SONATA circuit config (circuit_config.json); needs the `sonata` feature.
    #[arg(long, value_name = "CONFIG")]
    circuit: Option<PathBuf>,
    /// With --circuit: KB per detailed cell for metypes not in --memory-usage [default:
    /// 3000, as ballast run].
    #[arg(long, value_name = "KB", requires = "circuit", value_parser = crate::parse::non_negative_kb, allow_negative_numbers = true)]
    cell_kb: Option<f64>,
    /// With --circuit: KB per point neuron for metypes not in --memory-usage [default: 40,
    /// as ballast run].
    #[arg(long, value_name = "KB", requires = "circuit", value_parser = crate::parse::non_negative_kb, allow_negative_numbers = true)]
    point_cell_kb: Option<f64>,
    /// Number of ranks to balance for (at least 1; ranks × cycles at most the cells + 2^20).
    /// Without it, the node count is suggested as neurodamus does (suggest_nodes, margin
    /// 0.3: see --rank-overhead-mb, --ranks-per-node, --node-memory-gb) and the allocation
    /// is balanced for nodes × ranks per node.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    num_target_ranks: Option<u32>,
    /// Memory of a rank before it builds cells, MiB (neurodamus' base_memory: its "Overhead
    /// (ranks=N)" / N), for the estimate and the node suggestion.
    #[arg(long, value_name = "MIB", default_value_t = ballast_balancer::nodesuggest::DEFAULT_RANK_OVERHEAD_MB,
          value_parser = crate::parse::non_negative_mb, allow_negative_numbers = true)]
    rank_overhead_mb: f64,
    /// Model-building cycles per rank (neurodamus' ModelBuildingSteps), at least 1.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    cycles: u32,
    /// lpt (Ballast's) or neurodamus (its batched greedy, reproduced exactly).
    #[arg(long, default_value = "lpt")]
    strategy: Strategy,
    /// Charge each rank the transport memory Ballast's runtime uses for its peers (ballast),
    /// or not (none). Needs connectivity: --circuit, or --synthetic with --synapses (not
    /// with --exchange allgather).
    #[arg(long, value_enum, default_value_t = TransportModel::None)]
    transport_model: TransportModel,
    /// With --transport-model ballast: the spike exchange whose peers are charged.
    /// allgather: the all-gather's ring partners (no connectivity needed); multisend: the
    /// ranks holding targets or sources, and the ring partners of its closing all-gather
    /// (needs --circuit or --synthetic --synapses) [default: the connectivity's peers].
    #[arg(long, value_enum)]
    exchange: Option<Exchange>,
    #[command(flatten)]
    runtime: RuntimeArgs,
    /// Memory of one node, GiB: flag nodes above it and find the fewest nodes that fit
    /// (ranks per node: --ranks-per-node, else this machine's cores). Without it, the node
    /// suggestion takes this machine's MemTotal (/proc/meminfo).
    #[arg(long, value_name = "GIB", value_parser = positive_gib)]
    node_memory_gb: Option<f64>,
    /// Draw per-rank stacked bars (cells, synapses, transport) to FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Where allocation_r{N}_c{C}.pkl.gz and its sidecar allocation_r{N}_c{C}.json go.
    #[arg(long, default_value = ".")]
    output_dir: PathBuf,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    json: bool,
    /// Print the wall and CPU seconds of reading, balancing and writing to stderr, as one
    /// line `timings: read WALL CPU balance WALL CPU write WALL CPU`.
    #[arg(long)]
    timings: bool,
}

/// `--node-memory-gb`: a finite GiB count above 0 and at most 2^40 (so KB stay exact and
/// finite).
fn positive_gib(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if x.is_finite() && x > 0.0 && x <= (1u64 << 40) as f64 {
        Ok(x)
    } else {
        Err(format!(
            "{s} is not a memory size: give GiB per node, above 0 and at most 2^40"
        ))
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TransportModel {
    None,
    Ballast,
}

/// The cells to balance and, when known, their connectivity.
struct Input {
    dry_run: DryRun,
    network: Option<Network>,
    /// Where the input came from, for messages.
    label: String,
    /// The files read, which no output may replace.
    files: Vec<atomic::Input>,
}

fn load_input(args: &DryRunArgs, done: &AtomicU64) -> anyhow::Result<Input> {
    if let Some(config) = &args.circuit {
        return load_circuit(args, config);
    }
    if let Some(cells) = args.synthetic {
        let d = SyntheticSpec::default();
        let spec = SyntheticSpec {
            cells,
            metypes: args.metypes.unwrap_or(d.metypes),
            populations: args.populations.unwrap_or(d.populations),
            seed: args.seed.unwrap_or(d.seed),
        };
        return Ok(match args.synapses {
            Some(synapses) => {
                let c = synthetic::generate_circuit(&CircuitSpec {
                    dry_run: spec,
                    synapses,
                    ..CircuitSpec::default()
                })?;
                Input {
                    dry_run: c.dry_run,
                    network: Some(c.network),
                    label: format!("synthetic circuit ({synapses} synapses)"),
                    files: Vec::new(),
                }
            }
            None => Input {
                dry_run: synthetic::generate(&spec)?,
                network: None,
                label: "synthetic dry run".into(),
                files: Vec::new(),
            },
        });
    }
    let path = args.memory_usage.as_ref().expect("clap requires an input");
    Ok(Input {
        dry_run: read_dry_run(path, done)?,
        network: None,
        label: path.display().to_string(),
        files: vec![atomic::Input::new(path, "--memory-usage")],
    })
}

/// Reads a dry-run file, printing its notes (e.g. unknown keys) as warnings; its progress
/// counted in `done` ([`DryRun::from_json_file_counted`]).
fn read_dry_run(path: &Path, done: &AtomicU64) -> anyhow::Result<DryRun> {
    let (dry_run, notes) = DryRun::from_json_file_counted(path, done)?;
    for note in notes {
        eprintln!("warning: {note}");
    }
    Ok(dry_run)
}

#[cfg(feature = "sonata")]
fn load_circuit(args: &DryRunArgs, config: &Path) -> anyhow::Result<Input> {
    use ballast_balancer::circuit::{dry_run_from_circuit, MetypeMemory};
    let circuit = ballast_balancer::sonata::Circuit::open(config)?;
    let measured = match &args.memory_usage {
        Some(p) => read_dry_run(p, &AtomicU64::new(0))?
            .metypes
            .into_iter()
            .map(|m| (m.name, m.memory_kb))
            .collect(),
        None => Default::default(),
    };
    let d = MetypeMemory::default();
    let memory = MetypeMemory {
        measured,
        cell_kb: args.cell_kb.or(d.cell_kb),
        point_cell_kb: args.point_cell_kb.or(d.point_cell_kb),
    };
    let (dry_run, network) = dry_run_from_circuit(&circuit, &memory)?;
    let mut files = vec![atomic::Input::new(config, "--circuit")];
    files.extend(
        args.memory_usage
            .iter()
            .map(|p| atomic::Input::new(p, "--memory-usage")),
    );
    files.extend(
        circuit
            .node_populations
            .iter()
            .map(|p| atomic::Input::new(&p.file, "a nodes file of --circuit")),
    );
    files.extend(
        circuit
            .edge_populations
            .iter()
            .map(|e| atomic::Input::new(&e.file, "an edges file of --circuit")),
    );
    Ok(Input {
        dry_run,
        network: Some(network),
        label: config.display().to_string(),
        files,
    })
}

#[cfg(not(feature = "sonata"))]
fn load_circuit(_: &DryRunArgs, config: &Path) -> anyhow::Result<Input> {
    bail!("{}: reading SONATA circuits needs the `sonata` feature: build with `cargo build --release --bin ballast --features sonata` (needs libhdf5-dev pkg-config)", config.display())
}

/// Options that only make sense with another one (clap's `requires` is not enforced for
/// members of a satisfied argument group, so this checks it).
fn check_combinations(args: &DryRunArgs) -> anyhow::Result<()> {
    let synthetic_only = [
        ("--metypes", args.metypes.is_some()),
        ("--populations", args.populations.is_some()),
        ("--seed", args.seed.is_some()),
        ("--synapses", args.synapses.is_some()),
    ];
    if args.synthetic.is_none() {
        if let Some((name, _)) = synthetic_only.iter().find(|(_, given)| *given) {
            bail!("{name} describes the synthetic input: it needs --synthetic CELLS");
        }
    }
    if args.circuit.is_none() && (args.cell_kb.is_some() || args.point_cell_kb.is_some()) {
        bail!("--cell-kb and --point-cell-kb give circuit cells their memory: they need --circuit");
    }
    Ok(())
}

pub fn run(args: &DryRunArgs) -> anyhow::Result<()> {
    // Memory one step frees is reused by the next instead of faulted in again.
    ballast_balancer::arena::keep_freed();
    check_combinations(args)?;
    let mut config = BalancerConfig::builder()
        .ranks(args.num_target_ranks.unwrap_or(1))
        .cycles(args.cycles)
        .strategy(args.strategy)
        .build()?;
    let runtime = args.runtime.to_config()?;
    if let Some(p) = &args.plot {
        plot::check_path(p)?;
    }
    if let Some(Some(p)) = &args.write_memory_usage {
        atomic::refuse_special(p).context("--write-memory-usage")?;
    }
    let mut timings = crate::progress::Timings::default();
    // Reading a dry-run file counts its bytes twice (read, then parsed).
    let read = AtomicU64::new(0);
    let read_total = match (&args.memory_usage, &args.circuit) {
        (Some(p), None) => std::fs::metadata(p).ok().map(|m| 2 * m.len()),
        _ => None,
    };
    let input = timings.time_counted(
        "read",
        "reading the input",
        read_total.map(|t| (t, &read as &dyn Counter)),
        || load_input(args, &read),
    )?;
    let charge = match args.transport_model {
        TransportModel::None if args.exchange.is_some() => {
            bail!("--exchange chooses the peers the transport charge counts: it needs --transport-model ballast")
        }
        TransportModel::None => {
            let unused = args.runtime.given_charge_options();
            if !unused.is_empty() {
                eprintln!(
                    "note: {} {} no effect: without --transport-model ballast no transport memory is charged",
                    unused.join(", "),
                    if unused.len() == 1 { "has" } else { "have" }
                );
            }
            None
        }
        TransportModel::Ballast => {
            if input.network.is_none() && args.exchange != Some(Exchange::Allgather) {
                bail!("--transport-model ballast needs the circuit's connectivity: use --circuit, or --synthetic with --synapses ({} has none), or --exchange allgather", input.label);
            }
            if args.strategy == Strategy::Neurodamus {
                bail!(
                    "--transport-model ballast balances with its own algorithm; drop --strategy neurodamus"
                );
            }
            if runtime.transport().max_endpoints == 0 && args.runtime.endpoint_overflow.is_some() {
                eprintln!("note: --endpoint-overflow has no effect: max_endpoints is 0 (no cap)");
            }
            let mut charge = ballast_sim::transport_charge(runtime.transport());
            charge.ring_partners = args.exchange == Some(Exchange::Multisend);
            Some(charge)
        }
    };
    // The all-gather's charge does not depend on the placement: balance without it, add it.
    let allgather = args.exchange == Some(Exchange::Allgather);
    let balance_charge = if allgather { None } else { charge.as_ref() };
    // Ranks per node: given, or this machine's cores where nodes are to be counted.
    let rpn = node_suggest::ranks_per_node(
        args.runtime.ranks_per_node,
        args.num_target_ranks.is_none() || args.node_memory_gb.is_some(),
    );
    let suggestion = match (args.num_target_ranks, rpn) {
        (None, Some(rpn)) => {
            let memory = node_suggest::node_memory(args.node_memory_gb)?;
            let s = node_suggest::suggest(
                &input.dry_run,
                input.network.as_ref(),
                &config,
                balance_charge,
                args.rank_overhead_mb,
                rpn,
                memory,
            )?;
            config.ranks = u32::try_from(s.nodes.saturating_mul(rpn.ranks as u64)).map_err(|_| {
                anyhow::anyhow!(
                    "the suggested {} nodes × {} ranks are more than 2^32 - 1 ranks: is the node memory ({:.3} GiB) below its ranks' overhead ({} × {:.1} MiB, --rank-overhead-mb)?",
                    s.nodes,
                    rpn.ranks,
                    memory.mb / 1024.0,
                    rpn.ranks,
                    args.rank_overhead_mb
                )
            })?;
            Some((s, rpn, memory))
        }
        _ => None,
    };
    let ranks_option = if suggestion.is_some() {
        "the suggested ranks"
    } else {
        "--num-target-ranks"
    };
    config
        .check_size(&input.dry_run)
        .with_context(|| format!("{ranks_option} {} --cycles {}", config.ranks, config.cycles))?;
    if charge.is_some() {
        // The charge saturates where the model overflows 64 bits: refused here, named.
        ballast_sim::check_transport_charge(runtime.transport(), config.ranks as usize)
            .with_context(|| format!("{ranks_option} {}", config.ranks))?;
    }
    // LPT without a charge counts every cell twice (placed, then gathered).
    let placed = AtomicU64::new(0);
    let balance_total = (config.strategy == Strategy::Lpt && balance_charge.is_none())
        .then(|| 2 * input.dry_run.cell_count() as u64);
    let balanced = timings.time_counted(
        "balance",
        "balancing",
        balance_total.map(|t| (t, &placed as &dyn Counter)),
        || {
            balance_step(
                args,
                &input,
                &config,
                balance_charge,
                rpn.map(|r| r.ranks),
                &placed,
            )
        },
    )?;
    let BalanceStep {
        allocation,
        blind,
        mut loads,
        tried,
        strategy_name,
        seconds,
        baseline,
        cost_inputs,
        gid_tables,
        fit,
    } = balanced;
    let dry_run = &input.dry_run;
    if let (true, Some(ch)) = (allgather, &charge) {
        loads = Some(exchange::allgather_loads(
            exchange::rank_kb(&allocation, dry_run),
            ch,
        ));
    }
    let rpn = rpn.map(|r| r.ranks);

    let (written, summary) = timings.time(
        "write",
        "writing the allocation",
        || -> anyhow::Result<(Vec<PathBuf>, Summary)> {
            atomic::create_dir_all(&args.output_dir).with_context(|| {
                format!(
                    "cannot create output directory {} (--output-dir)",
                    args.output_dir.display()
                )
            })?;
            let costs = || {
                let mut costs = AllocationCosts::from_inputs(
                    &cost_inputs,
                    "ballast dry-run",
                    config.ranks,
                    config.cycles,
                    &strategy_name,
                    if charge.is_some() { "ballast" } else { "none" },
                );
                if args.circuit.is_some() {
                    let d = ballast_balancer::circuit::MetypeMemory::default();
                    costs.cell_kb_default = args.cell_kb.or(d.cell_kb);
                    costs.point_cell_kb_default = args.point_cell_kb.or(d.point_cell_kb);
                }
                costs
            };
            write_outputs(
                args,
                &input,
                &allocation,
                gid_tables,
                costs,
                blind.as_ref(),
                loads.as_ref(),
            )
        },
    )?;
    // Node view (`rpn`: ranks per node, given or this machine's cores where nodes are
    // counted): per-node totals. Without a transport charge the rank totals are the
    // allocation's (every cycle of a rank), the figures the node-fit search compares too.
    let nodes = rpn.map(|k| match &loads {
        Some(l) => node_totals(l, k),
        None => node_totals_kb(&summary.rank_kb(), k),
    });
    if args.timings {
        eprintln!("{}", timings.line());
    }
    let output = written[0].clone();

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
        for w in population_warnings(&allocation) {
            eprintln!("warning: {w}");
        }
    }
    let estimate = node_suggest::estimate(
        dry_run,
        config.ranks,
        args.rank_overhead_mb,
        loads.as_ref().map(|l| l.transport_kb.as_slice()),
    );
    let nd_means = node_suggest::neurodamus_means(&allocation, &summary);
    let o = &summary.overall;
    let cap = charge.as_ref().and_then(|_| charged_cap(runtime.transport()));
    if args.json {
        let mut value = json!({
            "ranks": config.ranks, "cycles": config.cycles, "strategy": strategy_name,
            "cells": o.cells, "total_kb": o.total_kb,
            "max_bucket_kb": o.max_bucket_kb, "mean_bucket_kb": o.mean_bucket_kb, "min_bucket_kb": o.min_bucket_kb,
            "max_rank_kb": o.max_rank_kb, "mean_rank_kb": o.mean_rank_kb, "min_rank_kb": o.min_rank_kb,
            "heaviest_cell_kb": o.heaviest_cell_kb, "lower_bound_kb": o.lower_bound_kb,
            "imbalance": o.imbalance, "ratio_to_lower_bound": o.ratio_to_lower_bound,
            "balance_seconds": seconds, "empty_buckets": empty,
            "populations": summary.populations.iter().map(|(n, s)| population_json(n, s)).collect::<Vec<_>>(),
            "output": output, "written": written,
        });
        if let Some(b) = &baseline {
            value["neurodamus_max_bucket_kb"] = json!(b.max_bucket_kb);
            value["neurodamus_ratio_to_lower_bound"] = json!(b.ratio_to_lower_bound);
        }
        if let Some(l) = &loads {
            value["rank_loads"] = rank_json(l);
            value["max_rank_total_kb"] = json!(l.max_total_kb());
        }
        if let Some(b) = &blind {
            value["blind_rank_loads"] = rank_json(b);
            value["blind_max_rank_total_kb"] = json!(b.max_total_kb());
            value["candidates"] = json!(tried);
        }
        if let Some(n) = &nodes {
            value["node_totals_kb"] = json!(n);
        }
        value["estimate"] = json!(estimate);
        if let Some((_, v)) = &cap {
            value["transport_cap"] = v.clone();
        }
        value["neurodamus_mean_kb"] = nd_means
            .iter()
            .map(|(name, nd, held, ours)| json!({"name": name, "neurodamus_mean_kb": nd, "buckets_with_cells": held, "mean_bucket_kb": ours}))
            .collect();
        if let Some((s, r, m)) = &suggestion {
            value["suggestion"] = node_suggest::suggestion_json(s, *r, *m);
        }
        if let Some(f) = &fit {
            value["node_memory_kb"] = json!(f.node_kb);
            value["nodes_over_memory"] = json!(nodes
                .as_ref()
                .map(|n| nodes_over(n, f.node_kb))
                .unwrap_or_default());
            value["suggested_nodes"] = json!(f.nodes);
        }
        outln!("{}", serde_json::to_string_pretty(&value)?);
        exit_without_freeing(input, allocation);
        return Ok(());
    }
    outln!(
        "ballast dry-run: {}, {}, {} ({}) -> {} × {}, strategy {} ({:.3} s)\n",
        count(o.cells as u64, "cell"),
        count(dry_run.populations.len() as u64, "population"),
        count(dry_run.metypes.len() as u64, "metype"),
        input.label,
        count(config.ranks, "rank"),
        count(config.cycles, "cycle"),
        strategy_name,
        seconds
    );
    out!("{}", summary.table("KB"));
    outln!(
        "\nlower bound for the largest bucket: {:.1} KB (max of total/buckets and the heaviest cell, {:.1} KB)",
        o.lower_bound_kb, o.heaviest_cell_kb
    );
    if let Some(b) = baseline {
        outln!(
            "neurodamus' batched greedy on the same input: largest bucket {:.1} KB ({:.4}× the bound); this result's is {}",
            b.max_bucket_kb,
            b.ratio_to_lower_bound,
            relative(o.max_bucket_kb, b.max_bucket_kb)
        );
    }
    if let Some(l) = &loads {
        outln!();
        out!("{}", rank_table(blind.as_ref(), l));
        if let Some(b) = &blind {
            outln!(
                "\nlargest rank total: transport-blind {:.1} KB, transport-aware {:.1} KB ({:.2}% lower; method {})",
                b.max_total_kb(),
                l.max_total_kb(),
                100.0 * (1.0 - l.max_total_kb() / b.max_total_kb()),
                tried.iter().min_by(|a, b| a.1.total_cmp(&b.1)).map_or("blind", |t| t.0.as_str())
            );
        }
    }
    outln!();
    let table = estimate.table(rpn.map(|k| (config.ranks as u64).div_ceil(k.max(1) as u64)));
    for line in table.lines() {
        match &cap {
            // The transport row says which cap and overflow mode the charge used.
            Some((text, _)) if line.starts_with(TRANSPORT_ROW) => outln!("{line}  ({text})"),
            _ => outln!("{line}"),
        }
    }
    for (name, nd, held, ours) in &nd_means {
        outln!(
            "note: population {name}: neurodamus prints a mean of {nd:.1} KB per bucket (\"Mean allocation per rank\"), averaging only the {held} buckets that hold its cells; Ballast's mean bucket, {ours:.1} KB, counts all {}",
            count(summary.bucket_count(), "bucket")
        );
    }
    if let Some((s, r, m)) = &suggestion {
        outln!();
        for line in node_suggest::suggestion_lines(s, *r, *m, args.rank_overhead_mb, charge.is_some()) {
            outln!("{line}");
        }
        let steps = if config.cycles > 1 {
            format!(" --modelbuilding-steps={}", config.cycles)
        } else {
            String::new()
        };
        outln!(
            "balanced for the suggested {} × {} = {}: run neurodamus --lb-mode=Memory{steps} on {} ranks and it loads {}",
            count(s.nodes, "node"),
            r.ranks,
            count(config.ranks, "rank"),
            config.ranks,
            ballast_balancer::allocation_file_name(config.ranks, config.cycles)
        );
    }
    if let (Some(n), Some(k)) = (&nodes, rpn) {
        outln!(
            "\nper node ({k} ranks per node): largest {:.1} KB, smallest {:.1} KB",
            n.iter().copied().fold(0.0, f64::max),
            n.iter().copied().fold(f64::INFINITY, f64::min)
        );
        if let Some(f) = &fit {
            let over = nodes_over(n, f.node_kb);
            if over.is_empty() {
                outln!("every node fits in {:.1} GiB", f.node_kb / 1048576.0);
            } else {
                outln!("nodes over {:.1} GiB: {:?}", f.node_kb / 1048576.0, over);
            }
            outln!(
                "fewest nodes that fit{}: {} ({} ranks)",
                if charge.is_some() {
                    " (transport charge recomputed for each count)"
                } else {
                    ""
                },
                f.nodes,
                f.nodes * k
            );
        }
    }
    for path in &written {
        outln!("wrote {}", path.display());
    }
    exit_without_freeing(input, allocation);
    Ok(())
}

/// The process ends once `run` returns: its largest structures are left to the exit rather
/// than freed one list at a time (a millisecond on a million cells).
fn exit_without_freeing(input: Input, allocation: Allocation) {
    std::mem::forget(input);
    std::mem::forget(allocation);
}

/// What the balancing step gives: the result, neurodamus' on the same input (when another
/// strategy ran) and the fewest nodes that fit (when a node size is given).
struct BalanceStep {
    allocation: Allocation,
    blind: Option<RankLoads>,
    loads: Option<RankLoads>,
    tried: Vec<(String, f64)>,
    strategy_name: String,
    seconds: f64,
    baseline: Option<ballast_balancer::LoadStats>,
    /// The dry run's part of the sidecar.
    cost_inputs: CostInputs,
    /// The summary's gid tables, when built beside the balancing.
    gid_tables: GidTables,
    fit: Option<ballast_balancer::nodefit::Fit>,
}

fn balance_step(
    args: &DryRunArgs,
    input: &Input,
    config: &BalancerConfig,
    charge: Option<&ballast_balancer::transport_aware::TransportCharge>,
    rpn: Option<usize>,
    placed: &AtomicU64,
) -> anyhow::Result<BalanceStep> {
    let dry_run = &input.dry_run;
    // On a second thread while the strategy runs: neurodamus' result on the same input,
    // for comparison (one greedy pass), and what the sidecar takes from the dry run.
    let (balanced, seconds, (baseline, cost_inputs, gid_tables)) = std::thread::scope(|s| {
        let side = ballast_balancer::spawn::side(s, || {
            let baseline = (args.strategy != Strategy::Neurodamus).then(|| {
                let nd = BalancerConfig {
                    strategy: Strategy::Neurodamus,
                    ..config.clone()
                };
                ballast_balancer::strategy::neurodamus::overall_stats(dry_run, &nd)
            });
            // The summary's gid tables too, while they are small (at whole-brain sizes they
            // would add to the balancing's peak memory).
            (
                baseline,
                CostInputs::new(dry_run),
                GidTables::new(dry_run, 64 << 20),
            )
        });
        let start = Instant::now();
        let balanced = balance_charged_counted(dry_run, input.network.as_ref(), config, charge, placed);
        let seconds = start.elapsed().as_secs_f64();
        (balanced, seconds, side.join())
    });
    let Balanced {
        allocation,
        blind,
        loads,
        tried,
        strategy_name,
    } = balanced;
    // The fewest nodes that fit, when a node size is given (before any output is written:
    // no fit is an error).
    let fit = match (args.node_memory_gb, rpn) {
        (Some(gib), Some(k)) => Some(
            fewest_nodes(
                &input.dry_run,
                input.network.as_ref(),
                config,
                charge,
                k,
                gib * 1024.0 * 1024.0,
            )
            .map_err(|e| match e {
                e @ NodeFitError::NoFit { .. } => anyhow::Error::new(e),
                e => anyhow::Error::new(e).context("--node-memory-gb"),
            })?,
        ),
        _ => None,
    };

    Ok(BalanceStep {
        allocation,
        blind,
        loads,
        tried,
        strategy_name,
        seconds,
        baseline,
        cost_inputs,
        gid_tables,
        fit,
    })
}

/// Checks the allocation and writes every output of the command or none. The allocation is
/// written unnamed while a second thread checks it (every cell in exactly one bucket),
/// weighs it ([`Summary::checked_with`], with `gid_tables` built beforehand) and computes
/// the sidecar's `costs`; then the plot is rendered,
/// `cell_memory_usage.json` (when asked) and the sidecar are written unnamed, and only then
/// all are put in place ([`atomic::commit_all`]: a failure there names what was written).
/// No output may be an input. Returns the paths written, the allocation first, and the
/// summary.
fn write_outputs(
    args: &DryRunArgs,
    input: &Input,
    allocation: &Allocation,
    gid_tables: GidTables,
    costs: impl FnOnce() -> AllocationCosts + Send,
    blind: Option<&RankLoads>,
    loads: Option<&RankLoads>,
) -> anyhow::Result<(Vec<PathBuf>, Summary)> {
    let dir = &args.output_dir;
    let in_dir = || {
        format!(
            "cannot write the outputs in {} (--output-dir chooses the directory)",
            dir.display()
        )
    };
    let memory_usage = args
        .write_memory_usage
        .as_ref()
        .map(|p| p.clone().unwrap_or_else(|| dir.join("cell_memory_usage.json")));
    let allocation_path = dir.join(ballast_balancer::allocation_file_name(
        allocation.ranks,
        allocation.cycles,
    ));
    let sidecar_path = dir.join(ballast_balancer::files::sidecar_file_name(
        allocation.ranks,
        allocation.cycles,
    ));
    let outputs: Vec<&Path> = [
        Some(allocation_path.as_path()),
        memory_usage.as_deref(),
        Some(sidecar_path.as_path()),
        args.plot.as_deref(),
    ]
    .into_iter()
    .flatten()
    .collect();
    for out in &outputs {
        atomic::refuse_input(out, &input.files)?;
        atomic::refuse_special(out)?;
    }
    // An allocation file without Ballast's sidecar beside it is another tool's (neurodamus
    // writes its own into its dry run's directory): say that it is replaced.
    if allocation_path.exists() && !sidecar_path.exists() {
        eprintln!(
            "warning: replacing {}, which Ballast did not write (no {} beside it: neurodamus' own allocation?); give --output-dir another directory to keep it",
            allocation_path.display(),
            sidecar_path.file_name().unwrap_or_default().to_string_lossy()
        );
    }
    let dry_run = &input.dry_run;
    // The allocation (pickled on this thread, compressed on another) beside the check, the
    // summary and the costs: none of them is needed to write it, and nothing is in place
    // before the check has passed.
    let (staged, (valid, summary, costs)) = std::thread::scope(|s| {
        let side = ballast_balancer::spawn::side(s, || {
            let (valid, summary) = Summary::checked_with(allocation, dry_run, gid_tables);
            (valid, summary, costs())
        });
        let staged = stage_allocation(dir, allocation);
        (staged, side.join())
    });
    valid.context("internal error: the balancer lost or duplicated a cell")?;
    let mut files: Vec<AtomicFile> = vec![staged.with_context(in_dir)?];
    let mut plot_file = None;
    if let Some(path) = &args.plot {
        let lower = summary.overall.total_kb / allocation.ranks as f64;
        let series = rank_series(dry_run, allocation, blind, loads);
        plot_file = Some(plot::render(path, &series, lower)?);
    }
    if let Some(p) = &memory_usage {
        files.push(
            input
                .dry_run
                .stage_json_file(p)
                .with_context(|| format!("cannot write {} (--write-memory-usage)", p.display()))?,
        );
    }
    files.push(costs.stage(dir).with_context(in_dir)?);
    files.extend(plot_file);
    Ok((atomic::commit_all(files)?, summary))
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

/// The label of the memory estimate's transport row (`Estimate::rows`).
const TRANSPORT_ROW: &str = "Transport (Ballast)";

/// With an endpoint cap, what the transport charge did with the peers past it: the text for
/// the estimate's transport row and the `--json` `transport_cap` object (`max_endpoints`,
/// `endpoint_overflow` as configured, `charged_as`: `datagram`, `evict` or `none` on the MPI
/// native path, and `fallback`: why datagram fell back to evict, or null). `None` without
/// a cap.
fn charged_cap(t: &ballast_runtime::TransportConfig) -> Option<(String, serde_json::Value)> {
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
    let value = json!({
        "max_endpoints": cap, "endpoint_overflow": overflow.to_string(),
        "charged_as": charged_as, "fallback": fallback,
    });
    Some((text, value))
}

fn rank_json(l: &RankLoads) -> serde_json::Value {
    json!({
        "cells_kb": l.cells_kb, "synapses_kb": l.synapses_kb, "transport_kb": l.transport_kb,
        "peers": l.peers, "peer_nodes": l.peer_nodes,
        "total_kb": (0..l.cells_kb.len()).map(|r| l.total_kb(r)).collect::<Vec<_>>(),
    })
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

/// The series a plot draws: one or two results, per rank (cells, synapses, transport).
fn rank_series(
    dry_run: &DryRun,
    allocation: &Allocation,
    blind: Option<&RankLoads>,
    loads: Option<&RankLoads>,
) -> Vec<plot::Series> {
    let from_loads = |title: &str, l: &RankLoads| plot::Series {
        title: title.to_owned(),
        cells_kb: l.cells_kb.clone(),
        synapses_kb: l.synapses_kb.clone(),
        transport_kb: l.transport_kb.clone(),
    };
    match (blind, loads) {
        (Some(b), Some(l)) => vec![from_loads("transport-blind", b), from_loads("transport-aware", l)],
        (None, Some(l)) => vec![from_loads("allocation", l)],
        _ => vec![plot::allocation_series("allocation", allocation, dry_run)],
    }
}
