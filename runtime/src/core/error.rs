//! The runtime's error type.

use thiserror::Error;

/// Errors of the Ballast runtime.
#[derive(Debug, Error)]
pub enum Error {
    /// A configuration value is out of range or unparsable; `var` is its `BALLAST_*` variable.
    #[error("bad value `{value}` for {var}: {reason}")]
    Config {
        /// The environment variable naming the setting.
        var: &'static str,
        /// The rejected value.
        value: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A value set through the configuration builder (in code, or by a command-line option
    /// that maps to it) is out of range; `name` is the setting, `var` its variable.
    #[error("bad value `{value}` for {name} (given in code or as a command-line option; variable {var}): {reason}")]
    Setting {
        /// The setting's name ([`crate::core::config::TransportConfig`] field).
        name: &'static str,
        /// The environment variable of the same setting.
        var: &'static str,
        /// The rejected value.
        value: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A non-blocking send found the buffer pool exhausted (back-pressure); retry after `progress()`.
    #[error("buffer pool exhausted: the send would block")]
    WouldBlock,
    /// A rank argument is outside `0..world_size`.
    #[error("rank {rank} is outside the world of {world_size} ranks")]
    InvalidRank {
        /// The rank given.
        rank: usize,
        /// The world size.
        world_size: usize,
    },
    /// The tag is in the range reserved for the runtime's collectives (`>= RESERVED_TAG_BASE`).
    #[error("tag {0} is reserved for internal use (user tags must be < 2^31)")]
    ReservedTag(u32),
    /// The requested transport is not compiled into this build.
    #[error("transport `{0}` is not compiled into this build")]
    TransportUnavailable(String),
    /// A send found no posted receive buffer at the receiver: a flow-control bug, never expected.
    #[error("receiver-not-ready: rank {dest} had no posted receive buffer (flow-control violation)")]
    ReceiverNotReady {
        /// The receiving rank.
        dest: usize,
    },
    /// The wire protocol saw something impossible (out-of-order chunk, unknown endpoint).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The request handle does not belong to this communicator or was already completed.
    #[error("unknown or already completed request {0}")]
    UnknownRequest(u64),
    /// Another rank failed (panicked or returned an error), so this rank cannot progress.
    #[error("the run was aborted because another rank failed")]
    Aborted,
    /// A rank thread panicked.
    #[error("rank {0} panicked: {1}")]
    RankPanicked(usize, String),
    /// The MPI library failed or cannot do what was asked (MPI transport).
    #[error("mpi: {0}")]
    Mpi(String),
    /// Ranks could not exchange their start-up data (which rank, where, why).
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    /// The verbs library or the RDMA device failed (which call, which device, why).
    #[error("verbs: {0}")]
    Verbs(String),
    /// Memory for a region (pool, receive queue, slots) could not be mapped.
    #[error("cannot allocate {bytes} bytes for {what}: {error}")]
    Alloc {
        /// What the region was for, with the settings that size it.
        what: String,
        /// Bytes asked for.
        bytes: u64,
        /// The kernel's answer (shown in the message, not chained as a source).
        error: std::io::Error,
    },
    /// The registered memory does not fit under the locked-memory limit (`ulimit -l`).
    #[error(
        "verbs: registering {needed_kib} KiB needs RLIMIT_MEMLOCK of at least that, but `ulimit -l` is {limit_kib} KiB; \
         raise it (e.g. `ulimit -l unlimited`, or `* - memlock unlimited` in /etc/security/limits.conf, or LimitMEMLOCK=infinity for systemd services), \
         or make the pool smaller (BALLAST_BUFFER_COUNT x BALLAST_BUFFER_SIZE)"
    )]
    MemlockTooLow {
        /// Bytes that would be registered, KiB (rounded up).
        needed_kib: u64,
        /// The soft RLIMIT_MEMLOCK, KiB.
        limit_kib: u64,
    },
    /// Operating-system error (thread spawn, /proc read).
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Result alias of the runtime.
pub type Result<T> = std::result::Result<T, Error>;

/// Collects per-rank results: all values in order, or the first real error — a rank's own
/// failure wins over the [`Error::Aborted`] the other ranks see because of it. Shared by the
/// transports' `run` functions.
pub(crate) fn first_error<T>(results: impl IntoIterator<Item = Result<T>>) -> Result<Vec<T>> {
    let mut out = Vec::new();
    let mut first: Option<Error> = None;
    for res in results {
        match res {
            Ok(v) => out.push(v),
            Err(Error::Aborted) => {
                first.get_or_insert(Error::Aborted);
            }
            Err(e) => {
                if matches!(first, None | Some(Error::Aborted)) {
                    first = Some(e);
                }
            }
        }
    }
    match first {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// The message of a rank thread's panic payload.
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic".to_string()
    }
}
