//! The fabrics' errors ([`FabricError`]): what a fabric (local, MPI, verbs) can fail
//! with (the start-up exchange's below it wrapped), a variant per failing operation
//! with the ranks, peers and sizes involved as fields, and [`FabricError::kind`], the
//! fabric a variant belongs to. The protocol above wraps them; the public error shows them
//! unchanged (same message, same C code).

use thiserror::Error;

use crate::bootstrap::BootstrapError;
use crate::core::memory::AllocError;

/// Errors of the fabrics. New variants may be added
/// (`#[non_exhaustive]`): match with a `_` arm.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FabricError {
    // ---- Any fabric (and the layers above, which raise these as they are). ----
    /// A rank argument is outside `0..world_size`.
    #[error("rank {rank} is out of range: the world has {world_size} ranks (0 to {})", world_size.saturating_sub(1))]
    InvalidRank {
        /// The rank given.
        rank: usize,
        /// The world size.
        world_size: usize,
    },
    /// Another rank failed (panicked or returned an error), so this rank cannot progress.
    #[error("the run was aborted because another rank failed")]
    Aborted,
    /// A control message's wire form (code, value) is not one of [`crate::fabric::Control`]'s.
    #[error("protocol error: control message with code {code} and value {value}: {what}")]
    ControlDecode {
        /// The control code on the wire.
        code: u8,
        /// The value on the wire.
        value: u64,
        /// What is wrong with it (unknown code, value too large for its field).
        what: &'static str,
    },
    /// A packet received by `rank` breaks the wire format (its length, kind or trailer).
    #[error("protocol error: rank {rank}: packet of {bytes} bytes from {from}: {what}")]
    BadPacket {
        /// The receiving rank.
        rank: usize,
        /// Who sent it (a rank, or an MPI process when the header is not read yet).
        from: Sender,
        /// Bytes received.
        bytes: usize,
        /// What is wrong with it, with the values involved.
        what: String,
    },
    /// An endpoint operation met an endpoint in the wrong state (a fabric's bookkeeping).
    #[error("protocol error: rank {rank}: endpoint {key} {what}")]
    Endpoint {
        /// The rank owning the endpoint.
        rank: usize,
        /// The endpoint key (the peer rank, or the remote node in `xrc` mode).
        key: usize,
        /// What went wrong ("opened twice", "closed but not open", ...).
        what: &'static str,
    },
    /// The engine (or the fault wrapper) found no datagram path
    /// ([`crate::fabric::Fabric::datagrams`] is `None`) on a transport that offered one when
    /// it started.
    #[error("protocol error: transport `{transport}` has no datagrams")]
    NoDatagrams {
        /// The transport's name.
        transport: &'static str,
    },
    /// Memory for a received message could not be reserved.
    #[error("cannot allocate a message of {bytes} bytes from rank {peer} at rank {rank}")]
    MessageAlloc {
        /// The receiving rank.
        rank: usize,
        /// The sending rank (on MPI's engine path: the sending MPI process).
        peer: usize,
        /// The message's length, bytes.
        bytes: u64,
        /// The allocator's answer.
        #[source]
        source: std::collections::TryReserveError,
    },
    /// Operating-system error (thread spawn, /proc read).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Memory for a region (pool, receive queue, slots, a staging buffer) could not be had
    /// ([`AllocError`], a leaf of core's).
    #[error(transparent)]
    Alloc(#[from] AllocError),
    // ---- The local fabric. ----
    /// A send found no posted receive buffer at the receiver: a flow-control bug, never expected.
    #[error("receiver-not-ready: rank {dest} had no posted receive buffer (flow-control violation)")]
    ReceiverNotReady {
        /// The receiving rank.
        dest: usize,
    },
    /// A receive queue of the local transport was misused (set up twice, overflowed).
    #[error("protocol error: rank {rank}: receive queue: {what}")]
    ReceiveQueue {
        /// The receiving rank.
        rank: usize,
        /// What went wrong.
        what: &'static str,
    },
    // ---- The verbs fabric (`fabric::verbs`): one variant per failing operation. ----
    /// A libibverbs call failed (`verb`, e.g. `ibv_modify_qp`), on `object` (what it was
    /// called on or for, e.g. `the QP toward rank 1 to RTR`), in rank `rank` (`None` outside
    /// a rank, e.g. the device probe); `source` is the errno the call reported.
    #[error("verbs: {}{verb}({object}){} failed", rank_prefix(.rank), .peer.map(|p| format!(" toward rank {p}")).unwrap_or_default())]
    VerbsCall {
        /// The libibverbs function.
        verb: &'static str,
        /// What it was called on or for, with the sizes asked (boxed: keeps `Error` at 80 bytes).
        object: Box<str>,
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
        /// libibverbs' text for it (`ibv_wc_status_str`; boxed: keeps `Error` at 80 bytes).
        status_text: Box<str>,
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
    /// The shared-memory fabric failed: a segment, a ring, the rendezvous with a peer
    /// (`peer`, when one is concerned), or a broken segment of a peer.
    #[error("shm: rank {rank}{}: {what}", .peer.map(|p| format!(" with rank {p}")).unwrap_or_default())]
    Shm {
        /// The rank that saw it.
        rank: usize,
        /// The peer concerned, if one is.
        peer: Option<usize>,
        /// What failed, with the call or the value.
        what: String,
    },
    /// A send on the verbs fabric could not be posted toward rank `dest` (no endpoint or
    /// queue pair yet, a buffer outside the registered pool, ...): a bookkeeping bug.
    #[error("protocol error: rank {rank}: verbs send to rank {dest}: {what}")]
    VerbsSend {
        /// The sending rank.
        rank: usize,
        /// The destination rank (its endpoint, in `xrc` mode, is its node's).
        dest: usize,
        /// What was missing or wrong, with the values involved.
        what: String,
    },
    /// A receive completion on the verbs fabric does not fit the queue pair or slots it
    /// names (`qp`: the queue pair number the completion reported).
    #[error("protocol error: rank {rank}: receive completion on QP {qp}: {what}")]
    VerbsReceive {
        /// The receiving rank.
        rank: usize,
        /// The queue pair number of the completion.
        qp: u32,
        /// What is wrong, with the values involved.
        what: String,
    },
    /// A receive work request would reach outside its registered area.
    #[error("verbs: receive of {len} bytes at offset {offset} outside a registered area of {area} bytes")]
    VerbsRecvRange {
        /// Bytes asked for.
        len: usize,
        /// Offset in the area, bytes.
        offset: usize,
        /// The area's size, bytes.
        area: usize,
    },
    /// A frame of the verbs control channel is not a valid one (unknown kind, a rank
    /// outside the world, a value too large for its field); `rank` is the receiver
    /// (`None` when decoding outside a rank's channel).
    #[error("protocol error: {}control frame{}: {what}", rank_prefix(.rank), .from.map(|p| format!(" from rank {p}")).unwrap_or_default())]
    ControlFrame {
        /// The receiving rank.
        rank: Option<usize>,
        /// The rank the frame says it is from, when read.
        from: Option<usize>,
        /// What is wrong, with the values involved.
        what: String,
    },
    /// The verbs control channels' addresses, exchanged at start through the bootstrap, do
    /// not parse or do not cover every rank.
    #[error("bootstrap: rank {rank}: {what}")]
    ControlAddresses {
        /// The rank that read them.
        rank: usize,
        /// What is wrong, with the entry concerned.
        what: String,
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
    // ---- MPI (the MPI fabric, MPI's start-up and its native path). ----
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
    /// The MPI processes cannot host a Ballast world of `world` ranks.
    #[error("mpi: {world} Ballast ranks on {procs} MPI processes: {what}")]
    MpiWorld {
        /// Ballast ranks asked for.
        world: usize,
        /// MPI processes in the communicator.
        procs: usize,
        /// Why not, and what to do.
        what: String,
    },
    /// A value does not fit MPI's types (a count over an `int`), or MPI gave an impossible one.
    #[error("mpi: {what} {value}: {why}")]
    MpiValue {
        /// What the value is (e.g. "MPI_Get_count gave", "MPI_Isend count").
        what: &'static str,
        /// The value.
        value: i128,
        /// Why it cannot be used ("overflows an MPI int", "is negative").
        why: &'static str,
    },
    // ---- The start-up exchange, below the fabrics (the verbs fabric exchanges its
    // control channels' addresses through it). ----
    /// The bootstrap's error ([`BootstrapError`]), unchanged.
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
}

/// Which fabric a [`FabricError`] belongs to ([`FabricError::kind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FabricKind {
    /// The verbs fabric (libibverbs calls, the device, work completions, the control
    /// channel, memory registration).
    Verbs,
    /// MPI: the MPI fabric, MPI's start-up and MPI's native path.
    Mpi,
    /// The in-process fabric (`local`).
    Local,
    /// The shared-memory fabric (`shm`).
    Shm,
    /// The start-up exchange ([`crate::bootstrap`]: environment, TCP rendezvous, MPI).
    Bootstrap,
    /// Any fabric: ranks, aborts, the wire format, endpoints, memory, the system.
    Other,
}

impl FabricError {
    /// The fabric the error belongs to.
    pub fn kind(&self) -> FabricKind {
        match self {
            FabricError::VerbsCall { .. }
            | FabricError::VerbsDevice { .. }
            | FabricError::WorkCompletion { .. }
            | FabricError::QueuePairBroken { .. }
            | FabricError::ControlChannel { .. }
            | FabricError::PeerDied { .. }
            | FabricError::VerbsSend { .. }
            | FabricError::VerbsReceive { .. }
            | FabricError::VerbsRecvRange { .. }
            | FabricError::ControlFrame { .. }
            | FabricError::ControlAddresses { .. }
            | FabricError::MemlockTooLow { .. } => FabricKind::Verbs,
            FabricError::MpiCall { .. }
            | FabricError::MpiState { .. }
            | FabricError::MpiWorld { .. }
            | FabricError::MpiValue { .. } => FabricKind::Mpi,
            FabricError::ReceiverNotReady { .. } | FabricError::ReceiveQueue { .. } => FabricKind::Local,
            FabricError::Shm { .. } => FabricKind::Shm,
            FabricError::Bootstrap(_) => FabricKind::Bootstrap,
            _ => FabricKind::Other,
        }
    }
}

/// Result of the fabrics.
pub type Result<T, E = FabricError> = std::result::Result<T, E>;

/// The sender of a packet, as far as the receiver knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sender {
    /// A Ballast rank (the packet's header was read).
    Rank(usize),
    /// An MPI process (MPI's engine path, before the header is read: the process hosts the
    /// sending rank).
    MpiProcess(usize),
}

impl std::fmt::Display for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sender::Rank(r) => write!(f, "rank {r}"),
            Sender::MpiProcess(p) => write!(f, "MPI process {p}"),
        }
    }
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
