//! Ballast's proxy simulation, behind `ballast run` and `ballast demo`: cells placed on ranks by
//! the balancer (`Memory`) or in turn (`RoundRobin`), each a leaky integrate-and-fire
//! neuron holding a really allocated state block of its estimated memory, exchanging
//! spikes over Ballast's runtime with the circuit's delays.
//!
//! Modules: [`model`] (the cell, its drive, delays and weights), [`exchange`] (p2p and
//! allgather spike exchange over a `Communicator`), `run` (the per-rank driver), [`gather`]
//! (outcomes to every process after the run),
//! `input` (circuits to simulate), `placement` (which rank holds which cell),
//! [`report`] (`out.dat`, `report.json`, the per-rank table, the report of a run),
//! [`check`] (memory and device checks at start), [`launch`] (a run from checks to
//! outputs: ranks as threads, or one rank per process over MPI or verbs), [`outputs`] (the
//! output directory and files), [`fanout`] (the job of `ballast fanout`: rank 0 sends to
//! every other rank, the memory counters and footprint taken around it).
#![deny(unsafe_code)]

pub mod check;
pub mod exchange;
pub mod fanout;
pub mod gather;
mod input;
pub mod launch;
pub mod model;
pub mod outputs;
mod placement;
pub mod report;
mod run;

use exchange::Spike;
pub use input::SimInput;
pub use placement::{place, LbMode, Placement};
pub use run::{run_rank, PopulationGid, RankOutcome, SimCircuit, SimParams, Steps};

use ballast_balancer::transport_aware::TransportCharge;

/// Errors of the proxy simulation.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The communication runtime failed (transparent: its message already names the
    /// transport, and a `runtime: {0}` wrapper printed it twice in an error chain).
    #[error(transparent)]
    Runtime(#[from] ballast_runtime::Error),
    /// The transport model cannot charge a rank of this world (a term above 2^64 bytes).
    #[error("--transport-model ballast: a rank of {world_size} ranks cannot be charged")]
    TransportModel {
        /// The world size, ranks.
        world_size: usize,
        /// The model's refusal ([`ballast_runtime::CommError::ModelOverflow`]).
        #[source]
        source: ballast_runtime::Error,
    },
    /// A rank's footprint report (gathered by rank 0 of `ballast fanout` over verbs) has the
    /// wrong length.
    #[error("fanout: rank {rank}: the report of rank {peer} has {words} words, expected {expected}")]
    FanoutReport {
        /// The gathering rank.
        rank: usize,
        /// The rank whose report it is.
        peer: usize,
        /// 64-bit words received.
        words: usize,
        /// Words expected.
        expected: usize,
    },
    /// The balancer or a file failed (allocation files, circuits).
    #[error(transparent)]
    Balancer(#[from] ballast_balancer::BalancerError),
    /// A spike message (p2p) or block (allgather) from rank `from` is not whole spikes.
    #[error(
        "spike exchange: spike message of {bytes} bytes from rank {from} (not a multiple of {})",
        exchange::SPIKE_BYTES
    )]
    SpikeMessage {
        /// The sending rank.
        from: usize,
        /// The message's length, bytes.
        bytes: usize,
    },
    /// A window's number leaves no user tag for its messages.
    #[error("spike exchange: window {window} exceeds the tag space")]
    WindowTag {
        /// The window.
        window: u32,
    },
    /// A spike targets a rank that is not one of this rank's out-peers (inconsistent peer sets).
    #[error("spike exchange: rank {rank}: rank {dest} is not an out-peer")]
    NotOutPeer {
        /// The sending rank.
        rank: usize,
        /// The target rank.
        dest: u32,
    },
    /// A rank's outcome, all-gathered at the end of the run, is torn or inconsistent.
    #[error("gathering the rank outcomes: the outcome of rank {from} ({bytes} bytes) is torn")]
    TornOutcome {
        /// The rank whose outcome it is.
        from: usize,
        /// Bytes received.
        bytes: usize,
    },
    /// Bad parameters or inconsistent input.
    #[error("invalid input: {0}")]
    Input(String),
    /// Memory at start that does not fit.
    #[error(transparent)]
    Memory(#[from] check::MemoryError),
    /// The allocation file could not be read or written.
    #[error("the allocation file in {} (--allocation-dir chooses that directory)", .dir.display())]
    Placement {
        /// The allocation directory.
        dir: std::path::PathBuf,
        /// What failed.
        #[source]
        source: Box<SimError>,
    },
    /// The output directory cannot be created or written.
    #[error("cannot write the outputs in {} (--output chooses the directory)", .path.display())]
    OutputDir {
        /// The directory.
        path: std::path::PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An output directory could not be created.
    #[error("cannot create output directory {}", .path.display())]
    CreateDir {
        /// The directory.
        path: std::path::PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The report could not be serialised.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
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

impl From<ballast_runtime::fabric::FabricError> for SimError {
    /// A fabric's error, as the runtime shows it ([`SimError::Runtime`]).
    fn from(e: ballast_runtime::fabric::FabricError) -> SimError {
        SimError::Runtime(e.into())
    }
}

impl From<ballast_runtime::bootstrap::BootstrapError> for SimError {
    /// The start-up exchange's error, as the runtime shows it ([`SimError::Runtime`]).
    fn from(e: ballast_runtime::bootstrap::BootstrapError) -> SimError {
        SimError::Runtime(e.into())
    }
}

/// Transport-aware balancing's charge from the runtime's footprint model: a rank with
/// `peers` peers in a world of `world_size` ranks is charged
/// `t.predict(peers, world_size, t.ranks_per_node).total_bytes()` bytes (the one formula),
/// with peers counted as peer nodes under XRC, every rank connected to all others without
/// `lazy_connect`, and `t.ranks_per_node` ranks per node.
pub fn transport_charge(t: &ballast_runtime::TransportConfig) -> TransportCharge {
    let config = *t;
    let mut charge = TransportCharge::new(move |peers, world_size| {
        config
            .predict(peers, world_size, config.ranks_per_node)
            .total_bytes()
    });
    charge.per_node = t.recv_sharing == ballast_runtime::RecvSharing::Xrc;
    charge.lazy_connect = t.lazy_connect;
    charge.ranks_per_node = t.ranks_per_node;
    charge
}

/// Checks that [`transport_charge`] of `t` is a number for every rank of a world of
/// `world_size` ranks: the model at the most peers a rank can have there (`world_size - 1`,
/// the largest charge: the model grows with peers) fits in 64 bits. The charge itself
/// saturates (a rank it cannot count never fits); this is the refusal. Errors:
/// [`SimError::TransportModel`] naming the term that overflows.
pub fn check_transport_charge(
    t: &ballast_runtime::TransportConfig,
    world_size: usize,
) -> Result<(), SimError> {
    let peers = world_size.saturating_sub(1);
    t.try_predict(peers, world_size, t.ranks_per_node)
        .map(|_| ())
        .map_err(|source| SimError::TransportModel { world_size, source })
}

/// All spikes of all ranks, sorted by (step, global cell index).
pub fn all_spikes(outcomes: &[RankOutcome]) -> Vec<Spike> {
    let mut v: Vec<Spike> = outcomes.iter().flat_map(|o| o.spikes.iter().copied()).collect();
    v.sort_unstable();
    v
}
