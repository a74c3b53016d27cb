//! The runtime's error type.

use thiserror::Error;

/// Errors of the Ballast runtime. Non-exhaustive: new failure kinds may be added.
#[derive(Debug, Error)]
#[non_exhaustive]
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
    // ---- The verbs transport (`transport::verbs`): one variant per failing operation. ----
    /// A libibverbs call failed (`verb`, e.g. `ibv_modify_qp`), on `object` (what it was
    /// called on or for, e.g. `the QP toward rank 1 to RTR`), in rank `rank` (`None` outside
    /// a rank, e.g. the device probe); `source` is the errno the call reported.
    #[error("verbs: {}{verb}({object}){} failed", rank_prefix(.rank), .peer.map(|p| format!(" toward rank {p}")).unwrap_or_default())]
    VerbsCall {
        /// The libibverbs function.
        verb: &'static str,
        /// What it was called on or for, with the sizes asked.
        object: String,
        /// The rank that made the call.
        rank: Option<usize>,
        /// The peer rank the object is toward, if any.
        peer: Option<usize>,
        /// The error the call reported (errno).
        #[source]
        source: std::io::Error,
    },
    /// The RDMA device cannot do what the configuration asks, or none is usable (no device,
    /// no active port, no GID, no SRQ, a depth beyond the device's limits); `reason` says
    /// what, naming the device and the `BALLAST_*` variable to change.
    #[error("verbs: {reason}")]
    VerbsDevice {
        /// The device concerned (`None`: none was found).
        device: Option<String>,
        /// What is missing or out of range, and what to do.
        reason: String,
    },
    /// A work request completed with an error status (`op`: `send` or `receive`), in rank
    /// `rank`, toward `peer` (a rank, or in XRC mode a node; `None` when unknown).
    #[error(
        "verbs: {}{op} {} failed: {status_text} (status {status}){}",
        rank_prefix(.rank),
        peer_phrase(.op, .peer),
        if *.op == "send" { " (the peer died or its queue pair broke)" } else { "" }
    )]
    WorkCompletion {
        /// `send` or `receive`.
        op: &'static str,
        /// The `ibv_wc_status` value.
        status: u32,
        /// libibverbs' text for it (`ibv_wc_status_str`).
        status_text: String,
        /// The rank that polled the completion.
        rank: Option<usize>,
        /// Whom the work request was toward.
        peer: Option<VerbsPeer>,
    },
    /// A send toward `peer` was refused because an earlier send on the same queue pair
    /// failed (the queue pair is in the error state).
    #[error("verbs: rank {rank}: the queue pair toward {peer} broke (an earlier send failed)")]
    QueuePairBroken {
        /// The sending rank.
        rank: usize,
        /// The peer (rank, or node in XRC mode).
        peer: VerbsPeer,
    },
    /// The verbs control channel (TCP) to or from rank `peer` failed: `what` is the step
    /// (`connect`, `hello`, `send`), `addr` the peer's listener.
    #[error(
        "verbs: rank {rank}: control {what} to rank {peer}{} failed (did rank {peer} die?)",
        .addr.map(|a| format!(" at {a}")).unwrap_or_default()
    )]
    ControlChannel {
        /// The rank that hit the error.
        rank: usize,
        /// The other end.
        peer: usize,
        /// `connection`, `hello` or `message`.
        what: &'static str,
        /// The peer's control listener address.
        addr: Option<std::net::SocketAddr>,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// Rank `peer`'s control connection ended before it said it finished: it died or failed.
    #[error(
        "verbs: rank {rank}: rank {peer} closed its control connection before finishing (it died or failed)"
    )]
    PeerDied {
        /// The rank that saw it.
        rank: usize,
        /// The rank that went away.
        peer: usize,
    },
    // ---- end of the verbs variants. ----
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

/// A verbs peer: a rank, or in XRC mode (where the engine's endpoints are nodes) a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerbsPeer {
    /// A rank.
    Rank(usize),
    /// A node (XRC send queue pair, shared by the node's ranks).
    Node(usize),
}

impl std::fmt::Display for VerbsPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VerbsPeer::Rank(r) => write!(f, "rank {r}"),
            VerbsPeer::Node(n) => write!(f, "node {n}"),
        }
    }
}

fn rank_prefix(rank: &Option<usize>) -> String {
    rank.map(|r| format!("rank {r}: ")).unwrap_or_default()
}

fn peer_phrase(op: &str, peer: &Option<VerbsPeer>) -> String {
    let dir = if op == "send" { "to" } else { "from" };
    match peer {
        Some(p) => format!("{dir} {p}"),
        None => format!("{dir} an unknown rank"),
    }
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
