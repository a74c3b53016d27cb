//! Running the simulation of a circuit as `ballast run` does, from checks to outputs: the
//! ranks as threads of this process (`run_threads`, `local` or `verbs` on one device), or
//! one rank per process ([`run_per_process`] over a [`Job`]: [`MpiJob`] under `mpirun`,
//! [`LaunchJob`] over verbs under a launcher that sets `BALLAST_ROOT` and the rank/size
//! variables, or over shm for every rank on this node, under `mpirun`, `srun` or
//! `BALLAST_ROOT`).
//! Both check the memory before anything is written ([`crate::check`]), place the cells,
//! run, build the report and write `out.dat` and `report.json`.
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use parking_lot::Mutex;

use ballast_runtime::{Communicator, ProcStatus, RuntimeConfig, TransportKind};

use crate::check::check_memory;
use crate::input::SimInput;
use crate::outputs::{prepare_output_dir, write_outputs, OutputDir};
use crate::placement::{place, LbMode, Placement};
use crate::report::{build_report, RunReport};
use crate::run::{run_rank, RankOutcome, SimCircuit, SimParams};
use crate::SimError;

/// What to run: the circuit, the parameters, the placement mode and where the allocation
/// file and the outputs go.
#[derive(Clone, Copy)]
pub struct RunPlan<'a> {
    /// The circuit and its dry run.
    pub input: &'a SimInput,
    /// Simulation parameters.
    pub params: &'a SimParams,
    /// How cells are placed.
    pub lb_mode: LbMode,
    /// Where `allocation_r{N}_c1.pkl.gz` is read or written.
    pub allocation_dir: &'a Path,
    /// Where `out.dat` and `report.json` go.
    pub output: &'a Path,
    /// What `--transport auto` picked and why, first of the report's `transport_notes`.
    pub transport_note: Option<&'a str>,
}

impl RunPlan<'_> {
    /// Places the cells on `ranks` ranks; errors name the allocation directory.
    fn place(&self, ranks: usize) -> Result<Placement, SimError> {
        place(
            self.lb_mode,
            &self.input.dry_run,
            &self.input.circuit.network.offsets,
            ranks as u32,
            self.allocation_dir,
        )
        .map_err(|source| SimError::Placement {
            dir: self.allocation_dir.to_owned(),
            source: Box::new(source),
        })
    }

    /// The report of a finished run whose outcomes are `outcomes`, its transport notes
    /// [`RunPlan::transport_note`] then `notes` (the communicator's).
    fn report(
        &self,
        placement: &Placement,
        outcomes: &[RankOutcome],
        cfg: &RuntimeConfig,
        seconds: f64,
        notes: Vec<String>,
    ) -> Result<RunReport, SimError> {
        let mut report = build_report(
            self.input,
            placement,
            outcomes,
            cfg,
            self.params,
            self.lb_mode,
            seconds,
            &self.output.join("out.dat"),
        )?;
        report.transport_notes = self
            .transport_note
            .map(str::to_owned)
            .into_iter()
            .chain(notes)
            .collect();
        Ok(report)
    }

    /// Writes the outputs, then keeps the output directory.
    fn write(&self, report: &RunReport, outcomes: &[RankOutcome], dir: OutputDir) -> Result<(), SimError> {
        write_outputs(self.output, report, outcomes, self.params.dt_ms)?;
        dir.keep();
        Ok(())
    }
}

/// A finished run, on the process that wrote the outputs.
#[derive(Debug)]
pub struct Finished {
    /// The report written to `report.json`.
    pub report: RunReport,
    /// Where the cells ran.
    pub placement: Placement,
}

/// Runs the simulation on `ranks` threads of this process: [`run_verbs_threads`] with
/// `--transport verbs` (`config.transport().kind`), else [`run_local`].
pub fn run_ranks_as_threads(
    circuit: &SimCircuit,
    rank_of: &[u32],
    ranks: usize,
    config: &RuntimeConfig,
    params: &SimParams,
    windows_done: Option<&AtomicU64>,
) -> Result<Vec<RankOutcome>, SimError> {
    let verbs = config.transport().kind == TransportKind::Verbs;
    Ok(threads(circuit, rank_of, ranks, config, params, windows_done, verbs)?.0)
}

/// The ranks as threads over verbs ([`run_verbs_threads`]) or `local` ([`run_local`]):
/// every rank's outcome, and rank 0's communicator notes (e.g. a setting that fell back,
/// and why).
fn threads(
    circuit: &SimCircuit,
    rank_of: &[u32],
    ranks: usize,
    config: &RuntimeConfig,
    params: &SimParams,
    windows_done: Option<&AtomicU64>,
    verbs: bool,
) -> Result<(Vec<RankOutcome>, Vec<String>), SimError> {
    let notes = Mutex::new(Vec::new());
    let rank = |comm: &mut Communicator| {
        if comm.rank() == 0 {
            *notes.lock() = comm.notes().to_vec();
        }
        run_rank(comm, circuit, rank_of, params, windows_done)
    };
    let start = ProcStatus::read_self().unwrap_or_default();
    #[cfg(feature = "verbs")]
    if verbs {
        let mut boot = ballast_runtime::bootstrap::LocalBootstrap::group(1)?
            .pop()
            .expect("a group of one");
        let results = ballast_runtime::verbs::run_ranks(&mut boot, ranks, config, rank)?;
        // run_ranks returns this process' ranks in ascending order: all of them here.
        let outcomes = stamped(results.into_iter().map(|o| o.output), start)?;
        return Ok((outcomes, notes.into_inner()));
    }
    #[cfg(not(feature = "verbs"))]
    let _ = verbs;
    #[cfg(target_os = "linux")]
    if config.transport().kind == TransportKind::Shm {
        let outcomes = stamped(ballast_runtime::shm::run_ranks(ranks, config, rank)?, start)?;
        return Ok((outcomes, notes.into_inner()));
    }
    let outcomes = stamped(
        ballast_runtime::launch::threads::run_ranks(ranks, config, rank)?,
        start,
    )?;
    Ok((outcomes, notes.into_inner()))
}

/// Runs the simulation on `ranks` threads of this process over the `local` transport and
/// returns every rank's outcome, by rank (all stamped process 0, with the process'
/// counters from before the communicators were created). With `windows_done`, every rank
/// adds 1 after each window it finished (see [`run_rank`]).
pub fn run_local(
    circuit: &SimCircuit,
    rank_of: &[u32],
    ranks: usize,
    config: &RuntimeConfig,
    params: &SimParams,
    windows_done: Option<&AtomicU64>,
) -> Result<Vec<RankOutcome>, SimError> {
    Ok(threads(circuit, rank_of, ranks, config, params, windows_done, false)?.0)
}

/// Runs the simulation on `ranks` threads of this process, each with its own verbs
/// communicator on the device `config.verbs()` selects (`BALLAST_IB_DEVICE`, else the first
/// active one), meeting through an in-process bootstrap; returns every rank's outcome, by
/// rank, and counts windows as [`run_local`]. Errors: the runtime's (no device, memlock
/// limit, a failed rank) and the ranks'.
#[cfg(feature = "verbs")]
pub fn run_verbs_threads(
    circuit: &SimCircuit,
    rank_of: &[u32],
    ranks: usize,
    config: &RuntimeConfig,
    params: &SimParams,
    windows_done: Option<&AtomicU64>,
) -> Result<Vec<RankOutcome>, SimError> {
    Ok(threads(circuit, rank_of, ranks, config, params, windows_done, true)?.0)
}

fn stamped(
    results: impl IntoIterator<Item = Result<RankOutcome, SimError>>,
    start: ProcStatus,
) -> Result<Vec<RankOutcome>, SimError> {
    results
        .into_iter()
        .map(|r| {
            r.map(|mut o| {
                o.stamp(0, start);
                o
            })
        })
        .collect()
}

/// A run of the ranks as threads, checked and placed, ready for [`ThreadRun::run`].
#[must_use]
pub struct ThreadRun<'a> {
    plan: RunPlan<'a>,
    ranks: usize,
    output_dir: OutputDir,
    /// Where the cells run.
    pub placement: Placement,
}

/// Prepares a run of `ranks` threads: checks the steps and the memory (nothing written
/// yet), creates and checks the output directory (removed again when the run fails), then
/// places the cells (reading or regenerating the allocation file).
pub fn prepare_threads<'a>(
    plan: RunPlan<'a>,
    ranks: usize,
    cfg: &RuntimeConfig,
) -> Result<ThreadRun<'a>, SimError> {
    plan.params.steps(&plan.input.circuit.delays)?;
    check_memory(plan.input, plan.params, 1, cfg, ranks, ranks)?;
    // An output directory that cannot be written fails before the allocation is written
    // and before the run.
    let output_dir = prepare_output_dir(plan.output)?;
    let placement = plan.place(ranks)?;
    Ok(ThreadRun {
        plan,
        ranks,
        output_dir,
        placement,
    })
}

impl ThreadRun<'_> {
    /// Runs the ranks ([`run_ranks_as_threads`], counting windows in `windows_done`), builds
    /// the report and writes the outputs.
    pub fn run(self, cfg: &RuntimeConfig, windows_done: Option<&AtomicU64>) -> Result<Finished, SimError> {
        let ThreadRun {
            plan,
            ranks,
            output_dir,
            placement,
        } = self;
        let start = Instant::now();
        let (outcomes, notes) = threads(
            &plan.input.circuit,
            &placement.rank_of,
            ranks,
            cfg,
            plan.params,
            windows_done,
            cfg.transport().kind == TransportKind::Verbs,
        )?;
        let seconds = start.elapsed().as_secs_f64();
        let report = plan.report(&placement, &outcomes, cfg, seconds, notes)?;
        plan.write(&report, &outcomes, output_dir)?;
        Ok(Finished { report, placement })
    }
}

/// This process' part of a job whose processes are one rank each: what differs between the
/// transports, for [`run_per_process`].
pub type RankFn<'a> = dyn FnMut(&mut Communicator, ProcStatus) -> Result<Vec<RankOutcome>, SimError> + 'a;

/// A job of processes that are one rank each (`mpirun` with `--transport mpi`; a launcher
/// with `BALLAST_ROOT` with `--transport verbs`).
pub trait Job {
    /// This process' rank.
    fn rank(&self) -> usize;
    /// Number of processes (= ranks).
    fn size(&self) -> usize;
    /// Returns once every process called it.
    fn barrier(&mut self) -> Result<(), SimError>;
    /// Creates this process' communicator, runs `f` on it and finishes it (collective). `f`
    /// gets the process' counters from before the communicator, the baseline of the
    /// transport's growth (less what the bootstrap's library kept while it was made).
    fn run(&mut self, cfg: &RuntimeConfig, f: &mut RankFn) -> Result<Vec<RankOutcome>, SimError>;
    /// Who started the processes, for messages.
    fn launcher(&self) -> &'static str;
}

/// One process, one rank: every process checks the memory, rank 0 prepares the output
/// directory and reads or regenerates the allocation file, then (after a barrier) the
/// others read it; `on_placed` is called on rank 0 with the placement before the run.
/// Every process runs its rank and gathers every outcome; rank 0 builds the report, writes
/// the outputs and returns them (the others return `None`).
pub fn run_per_process(
    job: &mut dyn Job,
    cfg: &RuntimeConfig,
    plan: RunPlan,
    on_placed: &mut dyn FnMut(&Placement),
) -> Result<Option<Finished>, SimError> {
    let (me, size) = (job.rank(), job.size());
    plan.params.steps(&plan.input.circuit.delays)?;
    check_memory(plan.input, plan.params, size, cfg, 1, size)?;
    let output_dir = if me == 0 {
        Some(prepare_output_dir(plan.output)?)
    } else {
        None
    };
    // Rank 0 reads or regenerates the allocation file first; the others read it after.
    let first = (me == 0).then(|| plan.place(size));
    job.barrier()?;
    let placement = match first {
        Some(p) => p?,
        None => plan.place(size)?,
    };
    if me == 0 {
        on_placed(&placement);
    }
    let start = Instant::now();
    let mut native = false;
    let mut notes = Vec::new();
    let outcomes = job.run(cfg, &mut |comm, process_start| {
        native = comm.is_mpi_native();
        notes = comm.notes().to_vec();
        let mut mine = run_rank(comm, &plan.input.circuit, &placement.rank_of, plan.params, None)?;
        mine.stamp(me, process_start);
        crate::gather::gather(comm, &mine)
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let Some(output_dir) = output_dir else {
        return Ok(None);
    };
    // The MPI native path asked for but not taken (the communicator's notes say why): the
    // report's predictions are the engine path's.
    let engine_cfg;
    let cfg = if cfg.transport().kind == TransportKind::Mpi && cfg.transport().mpi_native && !native {
        engine_cfg = cfg
            .to_builder()
            .mpi_native(false)
            .build()
            .map_err(ballast_runtime::Error::from)?;
        &engine_cfg
    } else {
        cfg
    };
    let report = plan.report(&placement, &outcomes, cfg, seconds, notes)?;
    plan.write(&report, &outcomes, output_dir)?;
    Ok(Some(Finished { report, placement }))
}

/// An MPI job: `mpirun -n N`, one rank per process.
#[cfg(feature = "mpi")]
pub struct MpiJob(pub ballast_runtime::mpi::Mpi);

#[cfg(feature = "mpi")]
impl Job for MpiJob {
    fn rank(&self) -> usize {
        self.0.rank()
    }
    fn size(&self) -> usize {
        self.0.size()
    }
    fn barrier(&mut self) -> Result<(), SimError> {
        use ballast_runtime::mpi::rsmpi::collective::CommunicatorCollectives as _;
        self.0.world().barrier();
        Ok(())
    }
    fn run(&mut self, cfg: &RuntimeConfig, f: &mut RankFn) -> Result<Vec<RankOutcome>, SimError> {
        let process_start = ProcStatus::read_self().unwrap_or_default();
        self.0.run(cfg, |comm| f(comm, process_start))?
    }
    fn launcher(&self) -> &'static str {
        "mpirun"
    }
}

/// Ends this process' use of MPI: finalises it on success; on an error, skips
/// `MPI_Finalize` (which waits for every process, and the others may be waiting for this
/// one: the job would hang with the error unprinted), so that the error is printed and the
/// process exits non-zero, which makes the launcher (`mpirun`, `srun`) end the job.
#[cfg(feature = "mpi")]
pub fn leave_mpi_on_error<T, E>(mpi: ballast_runtime::mpi::Mpi, out: Result<T, E>) -> Result<T, E> {
    if out.is_err() {
        std::mem::forget(mpi);
    }
    out
}

/// A job of one rank per process met through [`ballast_runtime::launch::Launch`] (MPI under
/// `mpirun` in a build with `mpi`, `BALLAST_ROOT`, or for shm the node's socket named by the
/// launcher's job step), over the transport whose communicator it makes:
/// [`LaunchJob::verbs`] or [`LaunchJob::shm`]. After an error, call
/// [`ballast_runtime::launch::Launch::abandon`] on `.launch` (it leaves MPI unfinalised).
pub struct LaunchJob {
    /// The start-up exchange (and the MPI it may have initialised for it).
    pub launch: ballast_runtime::launch::Launch,
    /// The transport's communicator over the exchange, and its collective finish.
    connect: Connect,
    finish: fn(Communicator) -> ballast_runtime::Result<()>,
}

/// A transport's communicator over a bootstrap (`verbs::communicator`, `shm::communicator`).
type Connect = fn(
    &mut dyn ballast_runtime::bootstrap::Bootstrap,
    &RuntimeConfig,
) -> ballast_runtime::Result<Communicator>;

impl LaunchJob {
    /// Over verbs: the start-up exchange carries the control listeners' addresses.
    #[cfg(feature = "verbs")]
    pub fn verbs(launch: ballast_runtime::launch::Launch) -> LaunchJob {
        LaunchJob {
            launch,
            connect: ballast_runtime::verbs::communicator,
            finish: ballast_runtime::verbs::finish,
        }
    }

    /// Over shared memory, every process on this node: the start-up exchange names the job.
    #[cfg(target_os = "linux")]
    pub fn shm(launch: ballast_runtime::launch::Launch) -> LaunchJob {
        LaunchJob {
            launch,
            connect: ballast_runtime::shm::communicator,
            finish: ballast_runtime::shm::finish,
        }
    }
}

impl Job for LaunchJob {
    fn rank(&self) -> usize {
        self.launch.rank()
    }
    fn size(&self) -> usize {
        self.launch.size()
    }
    fn barrier(&mut self) -> Result<(), SimError> {
        self.launch.bootstrap().all_gather(&[])?;
        Ok(())
    }
    fn run(&mut self, cfg: &RuntimeConfig, f: &mut RankFn) -> Result<Vec<RankOutcome>, SimError> {
        let process_start = ProcStatus::read_self().unwrap_or_default();
        let kept0 = self.launch.bootstrap().kept();
        let mut comm = (self.connect)(self.launch.bootstrap(), cfg)?;
        // Under mpirun, what MPI kept during the start-up exchange is not the transport's.
        let baseline = self.launch.bootstrap().kept().since(&kept0).shift(&process_start);
        // A failed rank drops its communicator unfinished: the others see it end (verbs: its
        // control connections; shm: the board) instead of waiting for it in the finish.
        let out = f(&mut comm, baseline)?;
        (self.finish)(comm)?;
        Ok(out)
    }
    fn launcher(&self) -> &'static str {
        "the launcher"
    }
}
