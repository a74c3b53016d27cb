//! Ballast's proxy simulation, behind `ballast run` and `ballast demo`: cells placed on ranks by
//! the balancer (`Memory`) or in turn (`RoundRobin`), each a leaky integrate-and-fire
//! neuron holding a really allocated state block of its estimated memory, exchanging
//! spikes over Ballast's runtime with the circuit's delays.
//!
//! Modules: [`model`] (the cell, its drive, delays and weights), [`exchange`] (p2p and
//! allgather spike exchange over a `Communicator`), [`run`] (the per-rank driver), [`gather`]
//! (outcomes to every process after the run),
//! [`input`] (circuits to simulate), [`placement`] (which rank holds which cell),
//! [`report`] (`out.dat`, `report.json`, the per-rank table).
#![deny(unsafe_code)]

pub mod exchange;
pub mod gather;
pub mod input;
pub mod model;
pub mod placement;
pub mod report;
pub mod run;

pub use exchange::{ExchangeKind, ExchangeStats, Spike};
pub use input::SimInput;
pub use placement::{LbMode, Placement};
pub use run::{run_rank, run_rank_counted, RankOutcome, SimCircuit, SimParams};

use std::sync::atomic::AtomicU64;

/// Errors of the proxy simulation.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The communication runtime failed (transparent: its message already names the
    /// transport, and a `runtime: {0}` wrapper printed it twice in an error chain).
    #[error(transparent)]
    Runtime(#[from] ballast_runtime::Error),
    /// The balancer or a file failed (allocation files, circuits).
    #[error(transparent)]
    Balancer(#[from] ballast_balancer::BalancerError),
    /// A message did not have the expected shape.
    #[error("spike exchange: {0}")]
    Protocol(String),
    /// Bad parameters or inconsistent input.
    #[error("invalid input: {0}")]
    Input(String),
    /// Writing an output failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Runs the simulation on `ranks` threads of this process over the `local` transport and
/// returns every rank's outcome, by rank (all stamped process 0, with the process'
/// counters from before the communicators were created).
pub fn run_local(
    circuit: &SimCircuit,
    rank_of: &[u32],
    ranks: usize,
    config: &ballast_runtime::RuntimeConfig,
    params: &SimParams,
) -> Result<Vec<RankOutcome>, SimError> {
    run_local_counted(circuit, rank_of, ranks, config, params, &AtomicU64::new(0))
}

/// [`run_local`] counting the windows every rank finished in `windows_done` (see
/// [`run_rank_counted`]).
pub fn run_local_counted(
    circuit: &SimCircuit,
    rank_of: &[u32],
    ranks: usize,
    config: &ballast_runtime::RuntimeConfig,
    params: &SimParams,
    windows_done: &AtomicU64,
) -> Result<Vec<RankOutcome>, SimError> {
    let start = ballast_runtime::ProcStatus::read_self().unwrap_or_default();
    let results = ballast_runtime::local::run(ranks, config, |comm| {
        run_rank_counted(comm, circuit, rank_of, params, windows_done)
    })?;
    stamped(results, start)
}

/// Runs the simulation on `ranks` threads of this process, each with its own verbs
/// communicator on the device `config.verbs()` selects (`BALLAST_IB_DEVICE`, else the first
/// active one), meeting through an in-process bootstrap; returns every rank's outcome, by
/// rank. Errors: the runtime's (no device, memlock limit, a failed rank) and the ranks'.
#[cfg(feature = "verbs")]
pub fn run_verbs_threads(
    circuit: &SimCircuit,
    rank_of: &[u32],
    ranks: usize,
    config: &ballast_runtime::RuntimeConfig,
    params: &SimParams,
) -> Result<Vec<RankOutcome>, SimError> {
    run_verbs_threads_counted(circuit, rank_of, ranks, config, params, &AtomicU64::new(0))
}

/// [`run_verbs_threads`] counting the windows every rank finished in `windows_done` (see
/// [`run_rank_counted`]).
#[cfg(feature = "verbs")]
pub fn run_verbs_threads_counted(
    circuit: &SimCircuit,
    rank_of: &[u32],
    ranks: usize,
    config: &ballast_runtime::RuntimeConfig,
    params: &SimParams,
    windows_done: &AtomicU64,
) -> Result<Vec<RankOutcome>, SimError> {
    let mut boot = ballast_runtime::bootstrap::LocalBootstrap::group(1)?
        .pop()
        .expect("a group of one");
    let start = ballast_runtime::ProcStatus::read_self().unwrap_or_default();
    let results = ballast_runtime::verbs::run_ranks(&mut boot, ranks, config, |comm| {
        run_rank_counted(comm, circuit, rank_of, params, windows_done)
    })?;
    // run_ranks returns this process' ranks in ascending order: all of them here.
    stamped(results.into_iter().map(|(_, r)| r), start)
}

fn stamped(
    results: impl IntoIterator<Item = Result<RankOutcome, SimError>>,
    start: ballast_runtime::ProcStatus,
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

/// All spikes of all ranks, sorted by (step, global cell index).
pub fn all_spikes(outcomes: &[RankOutcome]) -> Vec<Spike> {
    let mut v: Vec<Spike> = outcomes.iter().flat_map(|o| o.spikes.iter().copied()).collect();
    v.sort_unstable();
    v
}
