//! `ballast run`: the proxy simulation of a circuit (SONATA or synthetic) on N ranks over
//! Ballast's runtime, cells placed by `--lb-mode=Memory` (allocation file, regenerated
//! when absent, as neurodamus does) or `RoundRobin`; writes `out.dat` and `report.json` and
//! prints the per-rank table. With `--transport local` the N ranks are threads; under
//! `mpirun -n N ballast run --transport mpi` each process is one rank. `--transport verbs`
//! does either: N threads of this process, each with its own verbs communicator on the
//! selected device, or, under a launcher that sets `BALLAST_ROOT` and the rank/size
//! variables, one rank per process (the same per-process flow as mpi: [`Job`]); under
//! `mpirun` without `BALLAST_ROOT` (a build with both `mpi` and `verbs`) MPI carries the
//! start-up exchange and the data goes over verbs.
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use ballast_balancer::files::AllocationSource;
use ballast_balancer::synthetic::{CircuitSpec, SyntheticSpec};
use ballast_runtime::{Communicator, ProcStatus, RuntimeConfig, TransportKind};
use ballast_sim::placement::{place, Placement};
use ballast_sim::report::{self, RunReport};
use ballast_sim::{all_spikes, ExchangeKind, LbMode, RankOutcome, SimError, SimInput, SimParams};
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
    #[arg(long, value_name = "KB", value_parser = crate::dry_run::non_negative_kb, allow_negative_numbers = true)]
    pub cell_kb: Option<f64>,
    /// With --circuit: KB per point neuron (metypes not in --memory-usage); the same default
    /// as dry-run's [default: 40].
    #[arg(long, value_name = "KB", value_parser = crate::dry_run::non_negative_kb, allow_negative_numbers = true)]
    pub point_cell_kb: Option<f64>,
    /// With --circuit: measured memory per metype (neurodamus' cell_memory_usage.json).
    #[arg(long, value_name = "FILE")]
    pub memory_usage: Option<PathBuf>,
    /// With --circuit: the synaptic delay, ms, of connections whose edges carry no `delay`
    /// (edge group 0's `delay` is used when present, as in neurodamus circuits).
    #[arg(long, value_name = "MS", default_value_t = ballast_sim::model::SONATA_DEFAULT_DELAY_MS)]
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
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub ranks: Option<usize>,
    /// Spike exchange: p2p or allgather.
    #[arg(long, default_value = "p2p", value_parser = |s: &str| s.parse::<ExchangeKind>())]
    pub exchange: ExchangeKind,
    /// Simulated time, ms (finite, 0 or more).
    #[arg(long, default_value_t = 100.0, value_parser = non_negative, allow_negative_numbers = true)]
    pub tstop: f64,
    /// Time step, ms (finite, above 0).
    #[arg(long, default_value_t = 0.025, value_parser = positive, allow_negative_numbers = true)]
    pub dt: f64,
    /// Scale of each cell's estimated memory really allocated and touched (below 1 to run a
    /// big circuit's estimate on a small machine; above 1 is allowed; the run refuses what
    /// does not fit in MemAvailable).
    #[arg(long, default_value_t = 0.01, value_parser = non_negative, allow_negative_numbers = true)]
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
            synapses: cells as u64 * args.synapses_per_cell,
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
    let measured = match &args.memory_usage {
        Some(p) => ballast_balancer::DryRun::from_json_file(p)?
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

/// Context of a placement error: the allocation directory and the option that moves it.
fn allocation_dir_hint(dir: &Path) -> String {
    format!(
        "the allocation file in {} (--allocation-dir chooses that directory)",
        dir.display()
    )
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

/// With `--transport verbs`, opens the selected device once (`BALLAST_IB_DEVICE`, else the
/// first active one) before anything is written, so that a machine without one fails with
/// the runtime's reason instead of after regenerating an allocation file.
fn check_device(cfg: &RuntimeConfig) -> anyhow::Result<()> {
    #[cfg(feature = "verbs")]
    if cfg.transport().kind == TransportKind::Verbs {
        ballast_runtime::verbs::probe(cfg.verbs()).context("--transport verbs")?;
    }
    let _ = cfg;
    Ok(())
}

/// Refuses, before anything is written, a run whose state blocks (estimated KB × memory
/// scale, divided over `processes`) or whose transport memory at start (the footprint
/// model with at most one peer — pool, shared receive queue, one per-peer queue — times
/// the `ranks_here` ranks of this process) would not fit in this machine's available memory
/// (`MemAvailable` of /proc/meminfo), instead of failing or being killed half-way.
fn check_memory(
    input: &SimInput,
    params: &SimParams,
    processes: usize,
    cfg: &RuntimeConfig,
    ranks_here: usize,
    world_size: usize,
) -> anyhow::Result<()> {
    let total_kb: f64 =
        input.circuit.cell_kb.iter().sum::<f64>() * params.memory_scale / processes.max(1) as f64;
    let t = cfg.transport();
    // At start: the pool and the shared receive queue; in per-peer mode one endpoint's queue
    // as soon as there is a peer.
    let f = t.predict(world_size.min(2).saturating_sub(1), world_size, t.ranks_per_node);
    // MB for this process's ranks.
    let mb = |bytes: u64| bytes as f64 * ranks_here as f64 / (1024.0 * 1024.0);
    let available_kb = ballast_balancer::limits::available_memory().map(|b| b as f64 / 1024.0);
    if let Some(avail) = available_kb {
        if mb(f.total_bytes()) * 1024.0 > avail {
            bail!(
                "the transport needs {:.0} MB at start in this process, for {ranks_here} rank{}: pool {:.1} MB (buffer_count {} x buffer_size {} B), shared receive queue {:.1} MB (srq_depth {}), endpoints {:.1} MB (per-peer: recv_depth {} each); only {:.0} MB are available: lower buffer_count, buffer_size, srq_depth or recv_depth (options --buffer-count etc., or their BALLAST_* variables)",
                mb(f.total_bytes()),
                if ranks_here == 1 { "" } else { "s" },
                mb(f.pool_bytes),
                t.buffer_count,
                t.buffer_size,
                mb(f.srq_bytes),
                t.srq_depth,
                mb(f.endpoint_bytes),
                t.recv_depth,
                avail / 1024.0
            );
        }
        if total_kb > avail {
            bail!(
                "--memory-scale {} needs {:.0} MB of cell state per process but only {:.0} MB are available: lower --memory-scale",
                params.memory_scale,
                total_kb / 1024.0,
                avail / 1024.0
            );
        }
    }
    Ok(())
}

/// Says where a `Memory` allocation came from.
pub fn describe_source(p: &Placement) -> Option<String> {
    p.source.as_ref().map(|s| match s {
        AllocationSource::File(f) => format!("read {}", f.display()),
        AllocationSource::Regenerated(f) => format!(
            "regenerated {} (no allocation file for this rank count)",
            f.display()
        ),
    })
}

/// The files a run wrote: the allocation file and its sidecar when it regenerated them
/// (`ranks` × 1 cycle), then out.dat and report.json in `output`.
fn written_files(placement: &Placement, ranks: usize, output: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Some(AllocationSource::Regenerated(f)) = &placement.source {
        files.push(f.clone());
        files.push(f.with_file_name(ballast_balancer::files::sidecar_file_name(ranks as u32, 1)));
    }
    files.push(output.join("out.dat"));
    files.push(output.join("report.json"));
    files
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

/// Builds the report of a finished run.
#[allow(clippy::too_many_arguments)]
pub fn build_report(
    input: &SimInput,
    placement: &Placement,
    outcomes: &[RankOutcome],
    cfg: &RuntimeConfig,
    params: &SimParams,
    lb_mode: LbMode,
    seconds: f64,
    out_dat: &Path,
) -> anyhow::Result<RunReport> {
    let ranks = outcomes.len();
    let net = &input.circuit.network;
    let sets = net.peers(&placement.rank_of, ranks);
    let peers: Vec<usize> = (0..ranks).map(|r| sets.count(r)).collect();
    let peer_nodes = net.peer_nodes(&sets, cfg.transport().ranks_per_node.max(1));
    let rows = report::rows(outcomes, &peers, &peer_nodes, cfg.transport());
    let processes = report::process_rows(outcomes, &peers, &peer_nodes, cfg.transport());
    let footprint_max_diff_pct = report::max_abs(&rows, |r| r.footprint_diff_pct);
    let pinned_max_diff_pct = report::max_abs(&processes, |p| p.pinned_diff_pct.unwrap_or(0.0));
    let notes = report::lock_notes(outcomes, &processes);
    let (peers_mismatch, footprint_mismatch) = mismatches(&rows, params.exchange, cfg.transport());
    let (_, window) = params.steps(&input.circuit.delays)?;
    Ok(RunReport {
        circuit: input.label.clone(),
        lb_mode: lb_mode.to_string(),
        exchange: params.exchange.to_string(),
        transport: cfg.transport().kind.to_string(),
        // On the MPI native path MPI owns the receive resources: no sharing mode applies.
        recv_sharing: if cfg.transport().kind == TransportKind::Mpi && cfg.transport().mpi_native {
            "native".to_string()
        } else {
            cfg.transport().recv_sharing.to_string()
        },
        ranks,
        tstop_ms: params.tstop_ms,
        dt_ms: params.dt_ms,
        window_ms: window as f64 * params.dt_ms,
        seed: params.seed,
        memory_scale: params.memory_scale,
        allocation: describe_source(placement),
        spikes: outcomes.iter().map(|o| o.spikes.len()).sum(),
        messages_sent: outcomes.iter().map(|o| o.exchange.messages_sent).sum(),
        seconds,
        peers_match: peers_mismatch.is_none(),
        peers_mismatch,
        footprint_match: footprint_mismatch.is_none(),
        footprint_mismatch,
        footprint_max_diff_pct,
        footprint_within_tolerance: footprint_max_diff_pct <= report::FOOTPRINT_TOLERANCE_PCT,
        // Null unless every process' pinned growth was compared (a lock that was refused,
        // partial or not asked leaves nothing to compare).
        pinned_within_tolerance: processes
            .iter()
            .all(|p| p.pinned_diff_pct.is_some())
            .then_some(pinned_max_diff_pct <= report::FOOTPRINT_TOLERANCE_PCT),
        processes,
        process_vm_hwm_kb: report::process_peak_kb(
            outcomes,
            ballast_runtime::ProcStatus::read_self()
                .map(|p| p.vm_hwm_kb)
                .unwrap_or(0),
        ),
        per_rank: rows,
        out_dat: out_dat.to_owned(),
        transport_notes: Vec::new(),
        notes,
    })
}

/// Why the peers connected and the footprints measured differ from the predictions, when
/// they do (`None` when every rank matches): how many ranks differ, the first one's counts
/// or `footprint_diff_reason`, and the cause when the run's settings give it.
fn mismatches(
    rows: &[report::RankRow],
    exchange: ExchangeKind,
    t: &ballast_runtime::TransportConfig,
) -> (Option<String>, Option<String>) {
    let ranks = rows.len();
    let ring = " (--exchange allgather: the ring all-gather connects each rank to its 2 ring neighbours, not to the circuit's peers that the balancer predicts)";
    let peers_off: Vec<&report::RankRow> = rows
        .iter()
        .filter(|r| r.peers_connected != r.peers_predicted as u64)
        .collect();
    let peers = peers_off.first().map(|r| {
        let cause = if exchange == ExchangeKind::Allgather && peers_off.iter().all(|r| r.peers_connected <= 2)
        {
            ring
        } else {
            ""
        };
        let s = if r.peers_connected == 1 { "" } else { "s" };
        format!(
            "{} of {ranks} ranks differ; rank {}: {} peer{s} connected, {} predicted{cause}",
            peers_off.len(),
            r.rank,
            r.peers_connected,
            r.peers_predicted
        )
    });
    let fp_off: Vec<&report::RankRow> = rows
        .iter()
        .filter(|r| r.footprint_measured_bytes != r.footprint_predicted_bytes)
        .collect();
    let footprint = fp_off.first().map(|r| {
        let reason = r.footprint_diff_reason.as_deref().unwrap_or("the totals differ");
        let cause = if peers.is_some() && exchange == ExchangeKind::Allgather && (reason.contains("peers connected") || reason.contains("peer connected")) {
            ring
        } else if t.kind == TransportKind::Mpi {
            " (the MPI engine path's model is an upper bound that counts every send buffer as kept, while the measurement is what Ballast holds at the end; MPI's own memory shows in VmRSS)"
        } else {
            ""
        };
        format!("{} of {ranks} ranks differ; rank {}: {reason}{cause}", fp_off.len(), r.rank)
    });
    (peers, footprint)
}

/// The output directory checked before the run: the levels it created are removed again
/// (when still empty) unless [`OutputDir::keep`] is called, so a run that fails leaves
/// nothing behind.
#[must_use]
pub struct OutputDir {
    created: Vec<PathBuf>,
}

impl OutputDir {
    /// The run finished: the directory stays.
    pub fn keep(mut self) {
        self.created.clear();
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        // Deepest first; `remove_dir` removes only empty directories.
        for d in &self.created {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Creates `dir` when absent and checks that a file can be created in it, so that a run
/// whose outputs could not be written fails before it starts, naming `--output`.
pub fn prepare_output_dir(dir: &Path) -> anyhow::Result<OutputDir> {
    let hint = || {
        format!(
            "cannot write the outputs in {} (--output chooses the directory)",
            dir.display()
        )
    };
    if dir.exists() && !dir.is_dir() {
        return Err(anyhow::anyhow!("exists and is not a directory")).with_context(hint);
    }
    let created: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
        .map(Path::to_path_buf)
        .collect();
    let guard = OutputDir { created };
    std::fs::create_dir_all(dir).with_context(hint)?;
    // An unnamed probe file, removed when dropped: the directory is writable.
    tempfile::tempfile_in(dir).with_context(hint)?;
    Ok(guard)
}

/// Writes out.dat and report.json into `dir` (each atomically).
pub fn write_outputs(
    dir: &Path,
    report: &RunReport,
    outcomes: &[RankOutcome],
    dt_ms: f64,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create output directory {}", dir.display()))?;
    report::write_atomically(
        &dir.join("out.dat"),
        report::out_dat(&all_spikes(outcomes), dt_ms).as_bytes(),
    )?;
    let json = serde_json::to_string_pretty(report)?;
    report::write_atomically(&dir.join("report.json"), json.as_bytes())?;
    Ok(())
}

fn print_report(report: &RunReport, json: bool) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(report)?);
        return Ok(());
    }
    outln!(
        "{} | lb-mode {} | {} ranks over {} ({}) | exchange {} | {} ms, dt {} ms, window {} ms",
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

/// clap's parser for `--tstop` and `--memory-scale`: a finite number, 0 or more.
fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        Ok(_) => Err(format!("{s} is out of range: give a finite number, 0 or more")),
        Err(e) => Err(e.to_string()),
    }
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
    // `--transport auto`: verbs with a usable device, else mpi under an MPI launch, else local.
    let (cfg, note) = args.runtime.to_config_resolved()?;
    if let Some(note) = note.filter(|_| cfg.bootstrap().rank.unwrap_or(0) == 0) {
        eprintln!("ballast run: {note}");
    }
    let kind = cfg.transport().kind;
    crate::runtime_args::check_compiled_in(kind)?;
    check_device(&cfg)?;
    match kind {
        TransportKind::Mpi => run_mpi(args, &cfg),
        // Under a launcher (rank/size variables set): one rank per process.
        TransportKind::Verbs if cfg.bootstrap().rank.is_some() => run_verbs_processes(args, &cfg),
        _ => run_threads(args, &cfg),
    }
}

/// The ranks as threads of this process: `local`, or `verbs` without a launcher.
fn run_threads(args: &RunArgs, cfg: &RuntimeConfig) -> anyhow::Result<()> {
    let ranks = args.ranks.unwrap_or(1);
    let input = load_input(args)?;
    let params = params(args);
    params.steps(&input.circuit.delays)?;
    check_memory(&input, &params, 1, cfg, ranks, ranks)?;
    // An output directory that cannot be written fails before the allocation is written
    // and before the run.
    let output_dir = prepare_output_dir(&args.output)?;
    let placement = place(
        args.lb_mode,
        &input.dry_run,
        &input.circuit.network.offsets,
        ranks as u32,
        &args.allocation_dir,
    )
    .with_context(|| allocation_dir_hint(&args.allocation_dir))?;
    if let Some(s) = describe_source(&placement) {
        eprintln!("ballast run: allocation: {s}");
    }
    for w in &placement.warnings {
        eprintln!("warning: {w}");
    }
    crate::progress::warn_oversubscribed("run", ranks);
    let start = Instant::now();
    let outcomes = run_thread_ranks(&input, &placement, ranks, cfg, &params)?;
    let seconds = start.elapsed().as_secs_f64();
    let report = build_report(
        &input,
        &placement,
        &outcomes,
        cfg,
        &params,
        args.lb_mode,
        seconds,
        &args.output.join("out.dat"),
    )?;
    write_outputs(&args.output, &report, &outcomes, params.dt_ms)?;
    output_dir.keep();
    print_report(&report, args.json)?;
    print_written(&written_files(&placement, ranks, &args.output), args.json)
}

/// Runs the ranks as threads, with a progress bar of the windows they finished (simulated
/// time, averaged over the ranks) on runs longer than a few seconds.
fn run_thread_ranks(
    input: &SimInput,
    placement: &Placement,
    ranks: usize,
    cfg: &RuntimeConfig,
    params: &SimParams,
) -> anyhow::Result<Vec<RankOutcome>> {
    let (steps, window) = params.steps(&input.circuit.delays)?;
    let windows = steps.div_ceil(window as u64);
    let done = std::sync::atomic::AtomicU64::new(0);
    let total = windows * ranks as u64;
    let window_ms = window as f64 * params.dt_ms;
    // The simulated time of the ranks on average.
    let message = |n: u64| {
        format!(
            "{:.2} of {} ms simulated",
            (n as f64 / ranks as f64 * window_ms).min(params.tstop_ms),
            params.tstop_ms
        )
    };
    Ok(crate::progress::with_progress(total, &done, &message, || {
        #[cfg(feature = "verbs")]
        if cfg.transport().kind == TransportKind::Verbs {
            return ballast_sim::run_verbs_threads_counted(
                &input.circuit,
                &placement.rank_of,
                ranks,
                cfg,
                params,
                &done,
            );
        }
        ballast_sim::run_local_counted(&input.circuit, &placement.rank_of, ranks, cfg, params, &done)
    })?)
}

/// This process' part of a job whose processes are one rank each (`mpirun` with `--transport
/// mpi`; a launcher with `BALLAST_ROOT` with `--transport verbs`): what differs between the
/// transports, for [`run_per_process`]. (Unused in a build with neither mpi nor verbs.)
#[cfg_attr(not(any(feature = "mpi", feature = "verbs")), allow(dead_code))]
type RankFn<'a> = dyn FnMut(&mut Communicator, ProcStatus) -> Result<Vec<RankOutcome>, SimError> + 'a;

#[cfg_attr(not(any(feature = "mpi", feature = "verbs")), allow(dead_code))]
trait Job {
    /// This process' rank.
    fn rank(&self) -> usize;
    /// Number of processes (= ranks).
    fn size(&self) -> usize;
    /// Returns once every process called it.
    fn barrier(&mut self) -> anyhow::Result<()>;
    /// Creates this process' communicator, runs `f` on it and finishes it (collective). `f`
    /// gets the process' counters from before the communicator, the baseline of the
    /// transport's growth (less what the bootstrap's library kept while it was made).
    fn run(&mut self, cfg: &RuntimeConfig, f: &mut RankFn) -> anyhow::Result<Vec<RankOutcome>>;
    /// Who started the processes, for messages.
    fn launcher(&self) -> &'static str;
}

/// One process, one rank: every process loads the circuit and the placement (rank 0 reads
/// or regenerates the allocation file first), runs its rank, and gathers every outcome to
/// write the outputs on rank 0.
#[cfg_attr(not(any(feature = "mpi", feature = "verbs")), allow(dead_code))]
fn run_per_process(args: &RunArgs, cfg: &RuntimeConfig, job: &mut dyn Job) -> anyhow::Result<()> {
    use ballast_sim::{gather, run_rank};
    let (me, size) = (job.rank(), job.size());
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
    params.steps(&input.circuit.delays)?;
    check_memory(&input, &params, size, cfg, 1, size)?;
    let output_dir = if me == 0 {
        Some(prepare_output_dir(&args.output)?)
    } else {
        None
    };
    let offsets = &input.circuit.network.offsets;
    // Rank 0 reads or regenerates the allocation file first; the others read it after.
    let mut first = None;
    if me == 0 {
        first = Some(place(
            args.lb_mode,
            &input.dry_run,
            offsets,
            size as u32,
            &args.allocation_dir,
        ));
    }
    job.barrier()?;
    let placement = match first {
        Some(p) => p.with_context(|| allocation_dir_hint(&args.allocation_dir))?,
        None => place(
            args.lb_mode,
            &input.dry_run,
            offsets,
            size as u32,
            &args.allocation_dir,
        )
        .with_context(|| allocation_dir_hint(&args.allocation_dir))?,
    };
    if me == 0 {
        if let Some(s) = describe_source(&placement) {
            eprintln!("ballast run: allocation: {s}");
        }
        for w in &placement.warnings {
            eprintln!("warning: {w}");
        }
    }
    let start = Instant::now();
    let mut native = false;
    let mut notes = Vec::new();
    let outcomes = job.run(cfg, &mut |comm, process_start| {
        native = comm.is_mpi_native();
        notes = comm.notes().to_vec();
        let mut mine = run_rank(comm, &input.circuit, &placement.rank_of, &params)?;
        mine.stamp(me, process_start);
        gather::gather(comm, &mine)
    })?;
    let seconds = start.elapsed().as_secs_f64();
    if me != 0 {
        return Ok(());
    }
    // The MPI native path asked for but not taken (the communicator's notes say why): the
    // report's predictions are the engine path's.
    let engine_cfg;
    let cfg = if cfg.transport().kind == TransportKind::Mpi && cfg.transport().mpi_native && !native {
        engine_cfg = cfg.to_builder().mpi_native(false).build()?;
        &engine_cfg
    } else {
        cfg
    };
    let mut report = build_report(
        &input,
        &placement,
        &outcomes,
        cfg,
        &params,
        args.lb_mode,
        seconds,
        &args.output.join("out.dat"),
    )?;
    report.transport_notes = notes;
    write_outputs(&args.output, &report, &outcomes, params.dt_ms)?;
    if let Some(d) = output_dir {
        d.keep();
    }
    print_report(&report, args.json)?;
    print_written(&written_files(&placement, size, &args.output), args.json)
}

#[cfg(feature = "mpi")]
struct MpiJob(ballast_runtime::mpi::Mpi);

#[cfg(feature = "mpi")]
impl Job for MpiJob {
    fn rank(&self) -> usize {
        self.0.rank()
    }
    fn size(&self) -> usize {
        self.0.size()
    }
    fn barrier(&mut self) -> anyhow::Result<()> {
        use ballast_runtime::mpi::rsmpi::collective::CommunicatorCollectives as _;
        self.0.world().barrier();
        Ok(())
    }
    fn run(&mut self, cfg: &RuntimeConfig, f: &mut RankFn) -> anyhow::Result<Vec<RankOutcome>> {
        let process_start = ProcStatus::read_self().unwrap_or_default();
        Ok(self.0.run(cfg, |comm| f(comm, process_start))??)
    }
    fn launcher(&self) -> &'static str {
        "mpirun"
    }
}

#[cfg(feature = "mpi")]
fn run_mpi(args: &RunArgs, cfg: &RuntimeConfig) -> anyhow::Result<()> {
    let mut job = MpiJob(ballast_runtime::mpi::Mpi::init()?);
    let out = run_per_process(args, cfg, &mut job);
    leave_mpi_on_error(job.0, out)
}

/// Ends this process' use of MPI: finalises it on success; on an error, skips
/// `MPI_Finalize` (which waits for every process, and the others may be waiting for this
/// one: the job would hang with the error unprinted), so that the error is printed and the
/// process exits non-zero, which makes the launcher (`mpirun`, `srun`) end the job.
#[cfg(feature = "mpi")]
pub(crate) fn leave_mpi_on_error<T>(
    mpi: ballast_runtime::mpi::Mpi,
    out: anyhow::Result<T>,
) -> anyhow::Result<T> {
    if out.is_err() {
        std::mem::forget(mpi);
    }
    out
}

#[cfg(not(feature = "mpi"))]
fn run_mpi(_: &RunArgs, _: &RuntimeConfig) -> anyhow::Result<()> {
    unreachable!("check_transport refuses mpi without the feature")
}

/// A verbs job: the launcher's rank and size, met through [`ballast_runtime::bootstrap::Launch`]
/// (TCP at `BALLAST_ROOT`, or MPI under `mpirun` in a build with `mpi`).
#[cfg(feature = "verbs")]
struct VerbsJob(ballast_runtime::bootstrap::Launch);

#[cfg(feature = "verbs")]
impl Job for VerbsJob {
    fn rank(&self) -> usize {
        self.0.rank()
    }
    fn size(&self) -> usize {
        self.0.size()
    }
    fn barrier(&mut self) -> anyhow::Result<()> {
        self.0.bootstrap().all_gather(&[])?;
        Ok(())
    }
    fn run(&mut self, cfg: &RuntimeConfig, f: &mut RankFn) -> anyhow::Result<Vec<RankOutcome>> {
        use ballast_runtime::verbs;
        let process_start = ProcStatus::read_self().unwrap_or_default();
        let kept0 = self.0.bootstrap().kept();
        let mut comm = verbs::communicator(self.0.bootstrap(), cfg)?;
        // Under mpirun, what MPI kept while the addresses were exchanged is not verbs'.
        let baseline = self.0.bootstrap().kept().since(&kept0).shift(&process_start);
        // A failed rank drops its communicator unfinished: the others see its control
        // connections end instead of waiting for it in the finish.
        let out = f(&mut comm, baseline)?;
        verbs::finish(comm)?;
        Ok(out)
    }
    fn launcher(&self) -> &'static str {
        "the launcher"
    }
}

#[cfg(feature = "verbs")]
fn run_verbs_processes(args: &RunArgs, cfg: &RuntimeConfig) -> anyhow::Result<()> {
    // `mpirun -n N ballast run --transport verbs` without BALLAST_ROOT (a build with both
    // `mpi` and `verbs`): MPI carries the start-up exchange (the control listeners'
    // addresses); the data goes over verbs. The launch frees its MPI communicator before it
    // finalises MPI; after an error it leaves MPI unfinalised (see `Launch::abandon`).
    let mut job = VerbsJob(ballast_runtime::bootstrap::Launch::new(cfg)?);
    let out = run_per_process(args, cfg, &mut job);
    if out.is_err() {
        job.0.abandon();
    }
    out
}

#[cfg(not(feature = "verbs"))]
fn run_verbs_processes(_: &RunArgs, _: &RuntimeConfig) -> anyhow::Result<()> {
    unreachable!("check_transport refuses verbs without the feature")
}
