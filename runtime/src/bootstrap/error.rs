//! The start-up exchange's errors ([`BootstrapError`]): the environment, the TCP
//! rendezvous (`BALLAST_ROOT`), MPI's start-up, a rank outside the world. Below the fabrics:
//! the verbs fabric's exchange wraps them (`FabricError::Bootstrap`), and the public error
//! shows them with the same messages.

use thiserror::Error;

/// Errors of the bootstrap. New variants may be added (`#[non_exhaustive]`): match with a
/// `_` arm.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum BootstrapError {
    /// A rank argument is outside `0..world_size`.
    #[error("rank {rank} is outside the world of {world_size} ranks")]
    InvalidRank {
        /// The rank given.
        rank: usize,
        /// The world size.
        world_size: usize,
    },
    /// An MPI call returned an error code.
    #[error("mpi: {call} returned error code {code}")]
    MpiCall {
        /// The MPI function.
        call: &'static str,
        /// Its return code.
        code: i32,
    },
    /// MPI is not in the state the operation needs (not initialised, already finalised).
    #[error("mpi: {op}: {what}")]
    MpiState {
        /// The operation asked for.
        op: &'static str,
        /// The state MPI is in, and what is needed.
        what: &'static str,
    },
    /// The environment says neither how to meet the other processes nor who this one is.
    #[error("bootstrap: {what}")]
    Env {
        /// What is missing and which variables give it.
        what: &'static str,
    },
    /// `BALLAST_ROOT` is not a usable `host:port`.
    #[error("bootstrap: BALLAST_ROOT `{root}` {what}")]
    Root {
        /// The value given.
        root: String,
        /// What is wrong with it.
        what: &'static str,
        /// The resolver's answer, if it gave one.
        #[source]
        source: Option<std::io::Error>,
    },
    /// Rank 0 waited `timeout` for the others and some did not show up.
    #[error(
        "bootstrap: timed out after {timeout:?} at rank 0 ({root}): rank(s) {missing:?} did not show up ({} of {size} present)",
        .size - .missing.len()
    )]
    Timeout {
        /// Where rank 0 listened.
        root: String,
        /// How long it waited.
        timeout: std::time::Duration,
        /// The ranks that did not connect.
        missing: Vec<usize>,
        /// Ranks of the job.
        size: usize,
    },
    /// Rank `rank` could not connect to rank 0 within `timeout`.
    #[error("bootstrap: rank {rank} could not reach rank 0 at {root} within {timeout:?}")]
    Unreachable {
        /// The connecting rank.
        rank: usize,
        /// Where rank 0 should listen.
        root: String,
        /// How long it tried.
        timeout: std::time::Duration,
        /// The last connection error.
        #[source]
        source: Option<std::io::Error>,
    },
    /// A process broke the start-up protocol (another world size, a rank claimed twice, a
    /// contribution over the limit).
    #[error("bootstrap: rank {rank} ({root}): {what}")]
    Peer {
        /// The rank that noticed.
        rank: usize,
        /// The rank at fault, when known.
        peer: Option<usize>,
        /// The rendezvous address.
        root: String,
        /// What it did, with the values involved.
        what: String,
    },
    /// An i/o step of the start-up exchange failed (listen, accept, send, receive).
    #[error("bootstrap: rank {rank} ({root}): {what}")]
    Io {
        /// The rank where it failed.
        rank: usize,
        /// The other side, when there is one.
        peer: Option<usize>,
        /// The rendezvous address (boxed: keeps the error small).
        root: Box<str>,
        /// The step, and for a receive whether it timed out or the connection closed.
        what: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// An operating-system error without a step of its own (a socket option).
    #[error("{0}")]
    System(#[from] std::io::Error),
}

/// Result of the bootstrap.
pub type Result<T, E = BootstrapError> = std::result::Result<T, E>;
