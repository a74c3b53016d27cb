//! `ballast dry-run`: balance a neurodamus dry run, a SONATA circuit or the built-in
//! synthetic input, optionally charging each rank its transport memory, and write the
//! allocation file. The options ([`DryRunArgs`]) are checked once into a [`Plan`]; the run
//! reads the input ([`input`]), charges and sizes the ranks ([`plan`]), balances
//! ([`balance`]), writes every output or none ([`write`](mod@write)), and gives one [`Report`], printed
//! as JSON or as text ([`render`]).
mod balance;
mod input;
mod plan;
mod render;
mod report;
mod write;

use std::path::PathBuf;

use ballast_balancer::{Allocation, Progress, Strategy};
use clap::{Args, ValueEnum};

use crate::exchange::{self, Exchange};
use crate::progress::{Counter, Timings};
use crate::runtime_args::RuntimeArgs;
use input::Input;
use plan::Plan;
use report::Report;

#[derive(Args)]
#[command(group = clap::ArgGroup::new("input").required(true).multiple(true).args(["memory_usage", "synthetic", "circuit"]))]
pub struct DryRunArgs {
    /// neurodamus' dry-run output (cell_memory_usage.json). With --circuit: the measured
    /// memory per metype to use for the circuit's cells. May be a pipe or FIFO
    /// (`<(zcat f.json.gz)`, /dev/stdin), read to its end: a FIFO with no writer waits for one.
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
    #[arg(long, value_name = "N", value_parser = crate::parse::whole::<u32>(1, u32::MAX.into()), allow_negative_numbers = true)]
    num_target_ranks: Option<u32>,
    /// Memory of a rank before it builds cells, MiB (neurodamus' base_memory: its "Overhead
    /// (ranks=N)" / N), for the estimate and the node suggestion.
    #[arg(long, value_name = "MIB", default_value_t = ballast_balancer::node_suggest::DEFAULT_RANK_OVERHEAD_MB,
          value_parser = crate::parse::non_negative_mb, allow_negative_numbers = true)]
    rank_overhead_mb: f64,
    /// Model-building cycles per rank (neurodamus' ModelBuildingSteps), at least 1.
    #[arg(long, default_value_t = 1, value_parser = crate::parse::whole::<u32>(1, u32::MAX.into()), allow_negative_numbers = true)]
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

pub fn run(args: &DryRunArgs) -> anyhow::Result<()> {
    // Memory one step frees is reused by the next instead of faulted in again.
    crate::arena::keep_freed();
    let plan = Plan::new(args)?;
    let mut timings = Timings::default();
    // Reading a dry-run file counts its bytes twice (read, then parsed).
    let read = Progress::new();
    let input = timings.time_counted(
        "read",
        "reading the input",
        plan.source.read_total().map(|t| (t, &read as &dyn Counter)),
        || plan.source.load(&read),
    )?;
    let charge = plan.charge(&input)?;
    // The all-gather's charge does not depend on the placement: balance without it, add it.
    let allgather = plan.exchange == Some(Exchange::Allgather);
    let balance_charge = if allgather { None } else { charge.as_ref() };
    let sizing = plan.size(&input, balance_charge, charge.is_some())?;
    // LPT without a charge counts every cell twice (placed, then gathered).
    let placed = Progress::new();
    let balance_total = (sizing.config.strategy == Strategy::Lpt && balance_charge.is_none())
        .then(|| 2 * input.dry_run.cell_count() as u64);
    let (mut step, gid_tables) = timings.time_counted(
        "balance",
        "balancing",
        balance_total.map(|t| (t, &placed as &dyn Counter)),
        || balance::balance_step(&plan, &input, &sizing, balance_charge, &placed),
    )?;
    if let (true, Some(ch)) = (allgather, &charge) {
        step.loads = Some(exchange::allgather_loads(
            exchange::rank_kb(&step.allocation, &input.dry_run),
            ch,
            plan.mpi_collectives(),
        ));
    }
    let (written, summary) = timings.time("write", "writing the allocation", || {
        write::write_step(&plan, &input, &sizing, &step, gid_tables, charge.is_some())
    })?;
    if plan.timings {
        eprintln!("{}", timings.line());
    }
    report::warn_empty(&step.allocation, &summary);
    let report = Report::new(&plan, &input, &sizing, &step, summary, written, charge.is_some());
    if plan.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        render::text(&report)?;
    }
    exit_without_freeing(input, step.allocation);
    Ok(())
}

/// The process ends once `run` returns: its largest structures are left to the exit rather
/// than freed one list at a time (a millisecond on a million cells).
fn exit_without_freeing(input: Input, allocation: Allocation) {
    std::mem::forget(input);
    std::mem::forget(allocation);
}
