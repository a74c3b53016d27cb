//! `ballast run`: the proxy simulation of a circuit (SONATA or synthetic) on N ranks over
//! Ballast's runtime, cells placed by `--lb-mode=Memory` (allocation file, regenerated
//! when absent, as neurodamus does) or `RoundRobin`; writes `out.dat` and `report.json` and
//! prints the per-rank table. With `--transport local` the N ranks are threads; under
//! `mpirun -n N ballast run --transport mpi` each process is one rank. `--transport verbs`
//! does either: N threads of this process, each with its own verbs communicator on the
//! selected device, or, under a launcher that sets `BALLAST_ROOT` and the rank/size
//! variables, one rank per process (the same per-process flow as mpi: [`Job`]); under
//! `mpirun` without `BALLAST_ROOT` (a build with both `mpi` and `verbs`) MPI carries the
//! start-up exchange and the data goes over verbs. `--transport shm` likewise: N threads
//! with a segment each, or one rank per process on this node under `mpirun` or `srun`
//! (their variables; no MPI data calls).
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use ballast_balancer::synthetic::{CircuitSpec, SyntheticSpec};
use ballast_runtime::{RuntimeConfig, TransportKind};
use ballast_sim::outputs::written_files;
use ballast_sim::Placement;
use ballast_sim::{exchange::ExchangeKind, LbMode, SimInput, SimParams};
use ballast_sim::{launch::Finished, launch::Job, launch::RunPlan};
use ballast_sim::{report, report::describe_source, report::RunReport};
use clap::Args;

use crate::runtime_args::RuntimeArgs;

/// Arguments of `ballast run`.
#[derive(Args, Debug, Clone)]
#[command(group = clap::ArgGroup::new("input").required(true).args(["circuit", "synthetic"]), args_override_self = true)]
pub struct RunArgs {
    /// Memory (cells from allocation_r{N}_c1.pkl.gz, regenerated when absent) or RoundRobin.
    #[arg(long, default_value = "Memory", value_parser = |s: &str| s.parse::<LbMode>())]
    pub lb_mode: LbMode,
    /// A SONATA circuit config (needs the `sonata` feature).
    #[arg(long, value_name = "CONFIG")]
    pub circuit: Option<PathBuf>,
    /// With --circuit: KB per detailed cell (metypes not in --memory-usage); the same
    /// default as dry-run's [default: 3000].
    #[arg(long, value_name = "KB", value_parser = crate::parse::non_negative_kb, allow_negative_numbers = true)]
    pub cell_kb: Option<f64>,
    /// With --circuit: KB per point neuron (metypes not in --memory-usage); the same default
    /// as dry-run's [default: 40].
    #[arg(long, value_name = "KB", value_parser = crate::parse::non_negative_kb, allow_negative_numbers = true)]
    pub point_cell_kb: Option<f64>,
    /// With --circuit: measured memory per metype (neurodamus' cell_memory_usage.json). May
    /// be a pipe or FIFO (`<(zcat f.json.gz)`, /dev/stdin), read to its end: a FIFO with no
    /// writer waits for one.
    #[arg(long, value_name = "FILE")]
    pub memory_usage: Option<PathBuf>,
    /// With --circuit: the synaptic delay, ms, of connections whose edges carry no `delay`
    /// (edge group 0's `delay` is used when present, as in neurodamus circuits); finite,
    /// at least --dt, at most 1000000 (1000 s).
    #[arg(long, value_name = "MS", default_value_t = ballast_sim::model::SONATA_DEFAULT_DELAY_MS,
          value_parser = crate::parse::delay_ms, allow_negative_numbers = true)]
    pub delay_ms: f64,
    /// A synthetic circuit of this many cells (distance-dependent connectivity).
    #[arg(long, value_name = "CELLS")]
    pub synthetic: Option<usize>,
    /// Synapses per cell of the synthetic circuit.
    #[arg(long, default_value_t = 300)]
    pub synapses_per_cell: u64,
    /// Seed of the synthetic circuit and of every cell's drive.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Ranks (default 1). local, and verbs without a launcher: threads of this process; mpi,
    /// and verbs under a launcher: must equal the number of processes when given.
    #[arg(long, value_name = "N", value_parser = crate::parse::whole::<usize>(1, usize::MAX as u64), allow_negative_numbers = true)]
    pub ranks: Option<usize>,
    /// Spike exchange: p2p or allgather.
    #[arg(long, default_value = "p2p", value_parser = |s: &str| s.parse::<ExchangeKind>())]
    pub exchange: ExchangeKind,
    /// Simulated time, ms (finite, 0 or more).
    #[arg(long, default_value_t = 100.0, value_parser = crate::parse::non_negative, allow_negative_numbers = true)]
    pub tstop: f64,
    /// Time step, ms (finite, above 0).
    #[arg(long, default_value_t = 0.025, value_parser = positive, allow_negative_numbers = true)]
    pub dt: f64,
    /// Scale of each cell's estimated memory really allocated and touched (below 1 to run a
    /// big circuit's estimate on a small machine; above 1 is allowed, up to 1000000; the run
    /// refuses what does not fit in MemAvailable).
    #[arg(long, default_value_t = 0.01, value_parser = crate::parse::memory_scale, allow_negative_numbers = true)]
    pub memory_scale: f64,
    /// Where out.dat and report.json go.
    #[arg(long, default_value = "ballast-run")]
    pub output: PathBuf,
    /// Where allocation_r{N}_c1.pkl.gz is read or written (neurodamus: the working directory).
    #[arg(long, default_value = ".")]
    pub allocation_dir: PathBuf,
    /// Print the report as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// Loads the circuit of `args`.
pub fn load_input(args: &RunArgs) -> anyhow::Result<SimInput> {
    if let Some(cells) = args.synthetic {
        // clap's `requires` does not fire here (the input group counts --synthetic as there).
        if args.cell_kb.is_some() || args.point_cell_kb.is_some() {
            bail!(
                "--cell-kb and --point-cell-kb apply to --circuit only: a --synthetic circuit's cell memory comes from its generator"
            );
        }
        let spec = CircuitSpec {
            dry_run: SyntheticSpec {
                cells,
                seed: args.seed,
                ..SyntheticSpec::default()
            },
            synapses: (cells as u64).checked_mul(args.synapses_per_cell).ok_or_else(|| {
                anyhow::anyhow!(
                    "--synthetic {cells} --synapses-per-cell {}: the circuit's synapses (cells x synapses per cell) do not fit in 64 bits",
                    args.synapses_per_cell
                )
            })?,
            ..CircuitSpec::default()
        };
        return Ok(SimInput::synthetic(&spec)?);
    }
    let config = args.circuit.as_ref().expect("clap requires an input");
    load_sonata(args, config)
}

#[cfg(feature = "sonata")]
fn load_sonata(args: &RunArgs, config: &Path) -> anyhow::Result<SimInput> {
    use ballast_balancer::circuit::MetypeMemory;
    if args.delay_ms < args.dt {
        bail!(
            "--delay-ms {:?} is below --dt {:?}: a synaptic delay is at least one time step",
            args.delay_ms,
            args.dt
        );
    }
    let measured = match &args.memory_usage {
        Some(p) => crate::memory_usage::read(p, None)?
            .dry_run
            .metypes
            .into_iter()
            .map(|m| (m.name, m.memory_kb))
            .collect(),
        None => Default::default(),
    };
    let memory = MetypeMemory {
        measured,
        cell_kb: Some(args.cell_kb.unwrap_or(MetypeMemory::DEFAULT_CELL_KB)),
        point_cell_kb: Some(args.point_cell_kb.unwrap_or(MetypeMemory::DEFAULT_POINT_CELL_KB)),
    };
    let input = SimInput::sonata(config, &memory, args.delay_ms)?;
    if let Some(p) = &args.memory_usage {
        let missing: Vec<&str> = input
            .dry_run
            .metypes
            .iter()
            .map(|m| m.name.as_str())
            .filter(|n| !memory.measured.contains_key(*n))
            .collect();
        if !missing.is_empty() {
            eprintln!(
                "warning: {}: {} of the circuit's {} metypes have no measured memory there (e.g. {}); they use --cell-kb {} / --point-cell-kb {}",
                p.display(),
                missing.len(),
                input.dry_run.metypes.len(),
                missing.iter().take(3).copied().collect::<Vec<_>>().join(", "),
                memory.cell_kb.unwrap_or_default(),
                memory.point_cell_kb.unwrap_or_default()
            );
        }
    }
    Ok(input)
}

#[cfg(not(feature = "sonata"))]
fn load_sonata(_: &RunArgs, config: &Path) -> anyhow::Result<SimInput> {
    bail!("{}: reading SONATA circuits needs the `sonata` feature: build with `cargo build --release --bin ballast --features sonata` (needs libhdf5-dev pkg-config)", config.display())
}

/// The simulation parameters of `args`.
pub fn params(args: &RunArgs) -> SimParams {
    SimParams {
        tstop_ms: args.tstop,
        dt_ms: args.dt,
        seed: args.seed,
        memory_scale: args.memory_scale,
        exchange: args.exchange,
        ..SimParams::default()
    }
}

/// Prints a `wrote PATH` line per file: after the table, or on stderr with `--json` (whose
/// stdout is the report alone).
fn print_written(files: &[PathBuf], json: bool) -> anyhow::Result<()> {
    for f in files {
        if json {
            eprintln!("wrote {}", f.display());
        } else {
            outln!("wrote {}", f.display());
        }
    }
    Ok(())
}

fn print_report(report: &RunReport, json: bool) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(report)?);
        return Ok(());
    }
    let cap = if report.max_endpoints > 0 {
        format!(
            ", max_endpoints {} ({})",
            report.max_endpoints, report.endpoint_overflow
        )
    } else {
        String::new()
    };
    outln!(
        "{} | lb-mode {} | {} ranks over {} ({}{cap}) | exchange {} | {} ms, dt {} ms, window {} ms",
        report.circuit,
        report.lb_mode,
        report.ranks,
        report.transport,
        report.recv_sharing,
        report.exchange,
        report.tstop_ms,
        report.dt_ms,
        (report.window_ms * 1e9).round() / 1e9
    );
    out!("{}", report::table(report));
    out!("{}", report::process_table(report));
    outln!(
        "{} spikes in {:.2} s -> {} | peers connected = predicted: {} | footprint measured = predicted: {} | process VmHWM {} KB",
        report.spikes,
        report.seconds,
        report.out_dat.display(),
        yes_or_why(&report.peers_mismatch),
        yes_or_why(&report.footprint_mismatch),
        report.process_vm_hwm_kb
    );
    if report.transport == TransportKind::Verbs.as_str() {
        outln!("{}", verbs_check_line(report));
    }
    for n in report.transport_notes.iter().chain(&report.notes) {
        outln!("note: {n}");
    }
    Ok(())
}

/// `yes`, or `no (why)`.
pub fn yes_or_why(mismatch: &Option<String>) -> String {
    match mismatch {
        None => "yes".to_string(),
        Some(why) => format!("no ({why})"),
    }
}

/// The verbs footprint check: Ballast's accounting per rank and the kernel's pinned/locked
/// growth per process, each within the tolerance of the prediction.
fn verbs_check_line(r: &RunReport) -> String {
    let pinned = report::max_abs(&r.processes, |p| p.pinned_diff_pct.unwrap_or(0.0));
    let ok = r.footprint_within_tolerance && r.pinned_within_tolerance == Some(true);
    format!(
        "verbs footprint within {}% of predicted: {} (accounted per rank: max {:.1}%; pinned per process (VmPin/VmLck growth) vs registered: max {:.1}%)",
        report::FOOTPRINT_TOLERANCE_PCT,
        if ok { "yes" } else { "NO" },
        r.footprint_max_diff_pct,
        pinned
    )
}

/// clap's parser for `--dt`: a finite number above 0.
fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        Ok(_) => Err(format!("{s} is out of range: give a finite number above 0")),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs `ballast run`.
pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    // `--transport auto`: verbs with a usable device, else shm for the processes of one node,
    // else mpi under an MPI launch, else local.
    let (cfg, note) = args.runtime.to_config_resolved()?;
    if let Some(note) = note.as_ref().filter(|_| cfg.bootstrap().rank.unwrap_or(0) == 0) {
        eprintln!("ballast run: {note}");
    }
    let kind = cfg.transport().kind;
    crate::runtime_args::check_compiled_in(kind)?;
    crate::runtime_args::check_not_one_of_many(&cfg, "run", note.as_deref())?;
    if kind == TransportKind::Shm && cfg.bootstrap().rank.is_none() && args.ranks.is_none() {
        bail!(
            "--ranks is required with --transport shm without a launcher (threads of this process), or start \
             the processes with mpirun or srun"
        );
    }
    ballast_sim::check::check_device(&cfg).context("--transport verbs")?;
    match kind {
        // Under a launcher: one rank per process, every process on this node.
        TransportKind::Shm if cfg.bootstrap().rank.is_some() => run_shm_processes(args, &cfg, note),
        TransportKind::Mpi => run_mpi(args, &cfg, note),
        // Under a launcher (rank/size variables set): one rank per process.
        TransportKind::Verbs if cfg.bootstrap().rank.is_some() => run_verbs_processes(args, &cfg, note),
        _ => run_threads(args, &cfg, note),
    }
}

/// The run of `args` for [`ballast_sim::launch`].
fn plan<'a>(
    args: &'a RunArgs,
    input: &'a SimInput,
    params: &'a SimParams,
    transport_note: Option<&'a str>,
) -> RunPlan<'a> {
    RunPlan {
        input,
        params,
        lb_mode: args.lb_mode,
        allocation_dir: &args.allocation_dir,
        output: &args.output,
        transport_note,
    }
}

/// Where the cells' allocation came from and its warnings, on stderr.
fn print_placement(placement: &Placement) {
    if let Some(s) = describe_source(placement) {
        eprintln!("ballast run: allocation: {s}");
    }
    for w in &placement.warnings {
        eprintln!("warning: {w}");
    }
}

/// The ranks as threads of this process: `local`, or `verbs` without a launcher, with a
/// progress bar of the windows they finished (simulated time, averaged over the ranks) on
/// runs longer than a few seconds.
fn run_threads(args: &RunArgs, cfg: &RuntimeConfig, note: Option<String>) -> anyhow::Result<()> {
    let ranks = args.ranks.unwrap_or(1);
    let input = load_input(args)?;
    let params = params(args);
    let prepared =
        ballast_sim::launch::prepare_threads(plan(args, &input, &params, note.as_deref()), ranks, cfg)?;
    print_placement(&prepared.placement);
    crate::progress::warn_oversubscribed("run", ranks);
    let ballast_sim::Steps { total: steps, window } = params.steps(&input.circuit.delays)?;
    let done = std::sync::atomic::AtomicU64::new(0);
    let total = steps.div_ceil(window as u64) * ranks as u64;
    let window_ms = window as f64 * params.dt_ms;
    // The simulated time of the ranks on average.
    let message = |n: u64| {
        format!(
            "{:.2} of {} ms simulated",
            (n as f64 / ranks as f64 * window_ms).min(params.tstop_ms),
            params.tstop_ms
        )
    };
    let finished = crate::progress::with_progress(total, &done, &message, || prepared.run(cfg, Some(&done)))?;
    print_finished(&finished, ranks, args)
}

/// The report on stdout (table or JSON), then the files written.
fn print_finished(finished: &Finished, ranks: usize, args: &RunArgs) -> anyhow::Result<()> {
    print_report(&finished.report, args.json)?;
    print_written(
        &written_files(&finished.placement, ranks, &args.output),
        args.json,
    )
}

/// One process, one rank ([`ballast_sim::launch::run_per_process`]): `--ranks`, when given,
/// must equal the processes the launcher started; rank 0 prints.
fn run_per_process(
    args: &RunArgs,
    cfg: &RuntimeConfig,
    job: &mut dyn Job,
    note: Option<String>,
) -> anyhow::Result<()> {
    let size = job.size();
    if let Some(n) = args.ranks {
        if n != size {
            bail!(
                "--ranks {n} but {} started {size} process{} (each process is one rank)",
                job.launcher(),
                if size == 1 { "" } else { "es" }
            );
        }
    }
    let input = load_input(args)?;
    let params = params(args);
    let plan = plan(args, &input, &params, note.as_deref());
    match ballast_sim::launch::run_per_process(job, cfg, plan, &mut print_placement)? {
        Some(finished) => print_finished(&finished, size, args),
        None => Ok(()),
    }
}

#[cfg(feature = "mpi")]
fn run_mpi(args: &RunArgs, cfg: &RuntimeConfig, note: Option<String>) -> anyhow::Result<()> {
    use ballast_sim::{launch::leave_mpi_on_error, launch::MpiJob};
    let mut job = MpiJob(ballast_runtime::mpi::Mpi::init()?);
    let out = run_per_process(args, cfg, &mut job, note);
    leave_mpi_on_error(job.0, out)
}

#[cfg(not(feature = "mpi"))]
fn run_mpi(_: &RunArgs, _: &RuntimeConfig, _: Option<String>) -> anyhow::Result<()> {
    unreachable!("check_transport refuses mpi without the feature")
}

fn run_shm_processes(args: &RunArgs, cfg: &RuntimeConfig, note: Option<String>) -> anyhow::Result<()> {
    // `mpirun -n N ballast run --transport shm`: MPI (a build with `mpi`), BALLAST_ROOT or
    // the node's socket named by the launcher's job step carries the start-up exchange.
    run_launched(args, cfg, ballast_sim::launch::LaunchJob::shm, note)
}

#[cfg(feature = "verbs")]
fn run_verbs_processes(args: &RunArgs, cfg: &RuntimeConfig, note: Option<String>) -> anyhow::Result<()> {
    // `mpirun -n N ballast run --transport verbs` without BALLAST_ROOT (a build with both
    // `mpi` and `verbs`): MPI carries the start-up exchange (the control listeners'
    // addresses); the data goes over verbs.
    run_launched(args, cfg, ballast_sim::launch::LaunchJob::verbs, note)
}

/// One rank per process met through [`ballast_runtime::launch::Launch`], over the transport
/// of `job`. The launch frees its MPI communicator before it finalises MPI; after an error
/// it leaves MPI unfinalised (see `Launch::abandon`).
fn run_launched(
    args: &RunArgs,
    cfg: &RuntimeConfig,
    job: fn(ballast_runtime::launch::Launch) -> ballast_sim::launch::LaunchJob,
    note: Option<String>,
) -> anyhow::Result<()> {
    let mut job = job(ballast_runtime::launch::Launch::new(cfg)?);
    let out = run_per_process(args, cfg, &mut job, note);
    if out.is_err() {
        job.launch.abandon();
    }
    out
}

#[cfg(not(feature = "verbs"))]
fn run_verbs_processes(_: &RunArgs, _: &RuntimeConfig, _: Option<String>) -> anyhow::Result<()> {
    unreachable!("check_transport refuses verbs without the feature")
}
