//! The runtime's public error type: one [`enum@Error`] enum, a variant per failing operation,
//! with the ranks, peers, tags and sizes involved as fields and the underlying error as its
//! source; the configuration's own errors ([`ConfigError`]) are wrapped as `Error::Config`.

use thiserror::Error;

use crate::core::config::ConfigError;

/// Errors of the Ballast runtime. New variants may be added (`#[non_exhaustive]`): match
/// with a `_` arm.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// A bad configuration value, or a transport that cannot run here ([`ConfigError`]).
    #[error(transparent)]
    Config(#[from] ConfigError),
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
    /// A send found no posted receive buffer at the receiver: a flow-control bug, never expected.
    #[error("receiver-not-ready: rank {dest} had no posted receive buffer (flow-control violation)")]
    ReceiverNotReady {
        /// The receiving rank.
        dest: usize,
    },
    /// The request handle does not belong to this communicator or was already completed.
    #[error("unknown or already completed request {0}")]
    UnknownRequest(u64),
    /// Another rank failed (panicked or returned an error), so this rank cannot progress.
    #[error("the run was aborted because another rank failed")]
    Aborted,
    /// A blocking call of rank `rank` (`op`: `recv`, `wait`, `barrier`, ...) waits for
    /// something no rank can do any more: rank `peer` ended, having `failed` (it stopped
    /// without finishing: its sends are lost and it receives nothing) or finished (it
    /// returned, everything it sent was delivered, and what `op` waits for was not among
    /// it). `peer` is `None` for an any-source receive when every other rank finished;
    /// `peer` is `rank` for a receive from this rank itself with nothing from it queued
    /// (only this rank's thread, blocked in the call, could send it).
    #[error("rank {rank}: {op} can never complete: {}", gone_phrase(*.rank, .peer, *.failed))]
    PeerGone {
        /// The waiting rank.
        rank: usize,
        /// The blocking call.
        op: &'static str,
        /// The rank that ended (`None`: every other rank).
        peer: Option<usize>,
        /// It failed rather than finished.
        failed: bool,
    },
    /// A collective's message from `peer` belongs to another collective: the ranks called
    /// different collectives, or the same ones in another order. `op` is the collective rank
    /// `rank` is in, `seq` its number among this communicator's collectives (from 1) and
    /// `step` the message it waited for; `got` says what came instead.
    #[error("rank {rank}: {op} (collective #{seq}, step {step}) got {got} from rank {peer}: the ranks called different collectives")]
    CollectiveMismatch {
        /// The receiving rank.
        rank: usize,
        /// The sending rank.
        peer: usize,
        /// The collective the receiving rank is in.
        op: &'static str,
        /// Its sequence number on this communicator (from 1).
        seq: u64,
        /// The step (message) of it that was expected.
        step: u32,
        /// What arrived instead (the other collective's kind, number and step).
        got: Box<str>,
    },
    /// Collective `op` was called on rank `rank` while collective `unfinished` (number
    /// `seq` on this communicator) failed with a retryable error and is not finished:
    /// calling `unfinished` again resumes it; the peers wait in it.
    #[error("rank {rank}: {op} called while {unfinished} (collective #{seq}) is unfinished: it failed with a retryable error (out of memory); call {unfinished} again to finish it first")]
    CollectiveUnfinished {
        /// The calling rank.
        rank: usize,
        /// The collective called.
        op: &'static str,
        /// The unfinished one.
        unfinished: &'static str,
        /// Its number on this communicator (from 1).
        seq: u64,
    },
    /// A rank thread panicked.
    #[error("rank {rank} panicked: {message}")]
    RankPanicked {
        /// The rank whose thread panicked.
        rank: usize,
        /// The panic's message.
        message: String,
    },
    /// A rank in another process failed; a multi-process launcher carries its error across
    /// as its message (shown unchanged: it already names the rank and the operation).
    #[error("{message}")]
    Remote {
        /// The MPI process (or launcher slot) the error came from, when known.
        process: Option<usize>,
        /// The error's message, as the failing rank printed it.
        message: String,
    },
    // ---- The verbs transport (`fabric::verbs`): one variant per failing operation. ----
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

    // Protocol: the wire codec, endpoints, matching.
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
    /// A receive queue of the local transport was misused (set up twice, overflowed).
    #[error("protocol error: rank {rank}: receive queue: {what}")]
    ReceiveQueue {
        /// The receiving rank.
        rank: usize,
        /// What went wrong.
        what: &'static str,
    },
    /// The engine found no direct path ([`crate::fabric::Fabric::direct`] is `None`) on a
    /// transport that offered one when the engine started.
    #[error("protocol error: transport `{transport}` has no direct path")]
    NoDirectPath {
        /// The transport's name.
        transport: &'static str,
    },
    /// The engine (or the fault wrapper) found no datagram path
    /// ([`crate::fabric::Fabric::datagrams`] is `None`) on a transport that offered one when
    /// it started.
    #[error("protocol error: transport `{transport}` has no datagrams")]
    NoDatagrams {
        /// The transport's name.
        transport: &'static str,
    },
    /// The engine saw a send completion it has no record of (`direct`: of the direct path).
    #[error("protocol error: rank {rank}: unknown {}completion {wr}", if *.direct { "direct " } else { "" })]
    UnknownCompletion {
        /// The rank that polled it.
        rank: usize,
        /// The work request id.
        wr: u64,
        /// Whether it is a direct-path send's.
        direct: bool,
    },
    /// The engine's `send_direct` was asked to send a message that does
    /// not take the direct path (too small, or to itself).
    #[error("protocol error: rank {rank}: a message of {bytes} bytes to rank {dest} does not take the direct path")]
    NotDirect {
        /// The sending rank.
        rank: usize,
        /// The destination rank.
        dest: usize,
        /// The message's length, bytes.
        bytes: usize,
    },
    /// A chunk of a message does not fit the message being reassembled from `peer`.
    #[error("protocol error: message from rank {peer} with tag {tag} ({total} bytes), chunk at offset {offset}: {what}")]
    BadChunk {
        /// The sending rank.
        peer: usize,
        /// The message's tag.
        tag: u32,
        /// The message's announced length, bytes.
        total: u64,
        /// The chunk's offset, bytes.
        offset: u64,
        /// What is wrong with it.
        what: String,
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
    /// A term of the memory model ([`crate::TransportConfig::try_predict`]) does not fit
    /// in 64 bits: the configuration asks for more bytes than any machine has.
    #[error("the memory model overflows 64 bits at {term}: the configuration asks for more than 2^64 bytes")]
    ModelOverflow {
        /// The term that overflows, with its factors' values.
        term: String,
    },
    /// The thread of a rank could not be started (threads of ranks in this process).
    #[error("cannot start the thread of rank {rank} of {ranks} (stack {stack_bytes} bytes, from ulimit -s): {error}")]
    ThreadStart {
        /// The rank whose thread could not be started.
        rank: usize,
        /// The ranks asked for.
        ranks: usize,
        /// The stack size of each rank's thread, bytes.
        stack_bytes: usize,
        /// The system's answer.
        error: std::io::Error,
    },
    /// A message of the runtime's own traffic (fanout, collectives) has the wrong length.
    #[error("protocol error: rank {rank}: message of {bytes} bytes from rank {peer} with tag {tag}, expected {expected}")]
    MessageSize {
        /// The receiving rank.
        rank: usize,
        /// The sending rank.
        peer: usize,
        /// The message's tag.
        tag: u32,
        /// Bytes received.
        bytes: usize,
        /// Bytes expected.
        expected: usize,
    },

    // MPI (structured).
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

    // Bootstrap (structured).
    /// The environment says neither how to meet the other processes nor who this one is.
    #[error("bootstrap: {what}")]
    BootstrapEnv {
        /// What is missing and which variables give it.
        what: &'static str,
    },
    /// `BALLAST_ROOT` is not a usable `host:port`.
    #[error("bootstrap: BALLAST_ROOT `{root}` {what}")]
    BootstrapRoot {
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
    BootstrapTimeout {
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
    BootstrapUnreachable {
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
    BootstrapPeer {
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
    BootstrapIo {
        /// The rank where it failed.
        rank: usize,
        /// The other side, when there is one.
        peer: Option<usize>,
        /// The rendezvous address (boxed: keeps `Error` as small as before this variant).
        root: Box<str>,
        /// The step, and for a receive whether it timed out or the connection closed.
        what: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}

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

/// The end of [`Error::PeerGone`]'s message.
fn gone_phrase(rank: usize, peer: &Option<usize>, failed: bool) -> String {
    match (peer, failed) {
        (Some(p), false) if *p == rank => format!(
            "it receives from rank {p}, itself: nothing from rank {p} is queued, and only this rank's thread, blocked in this call, could send it"
        ),
        (Some(p), true) => format!("rank {p} failed"),
        (Some(p), false) => format!("rank {p} finished (returned) without sending what it waits for"),
        (None, true) => "a rank failed".to_string(),
        (None, false) => "every other rank finished (returned) without sending what it waits for".to_string(),
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
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_is_no_larger_than_before_the_structured_variants() {
        // Every `Result` of the hot path carries it: 80 bytes, the size of the `Setting`
        // variant, before and after the structured variants.
        assert_eq!(std::mem::size_of::<Error>(), 80);
    }

    #[test]
    fn config_errors_keep_their_messages_through_the_public_error() {
        let e = Error::from(ConfigError::Var {
            var: "BALLAST_BUFFER_COUNT",
            value: "0".into(),
            reason: "must be at least 1".into(),
        });
        assert_eq!(
            e.to_string(),
            "bad value `0` for BALLAST_BUFFER_COUNT: must be at least 1"
        );
        let e = Error::from(ConfigError::Setting {
            name: "buffer_count",
            var: "BALLAST_BUFFER_COUNT",
            value: "0".into(),
            reason: "must be at least 1".into(),
        });
        assert_eq!(
            e.to_string(),
            "bad value `0` for buffer_count (given in code or as a command-line option; variable BALLAST_BUFFER_COUNT): must be at least 1"
        );
        // Transparent: the source is the configuration error's own (none here).
        assert!(std::error::Error::source(&e).is_none());
        let bad = crate::core::config::RuntimeConfig::builder()
            .buffer_count(0)
            .build()
            .unwrap_err();
        assert!(
            matches!(
                bad,
                ConfigError::Setting {
                    name: "buffer_count",
                    ..
                }
            ),
            "{bad}"
        );
    }

    #[test]
    fn structured_messages_name_the_ranks_and_keep_the_source() {
        let e = Error::BootstrapTimeout {
            root: "127.0.0.1:4000".into(),
            timeout: std::time::Duration::from_millis(1500),
            missing: vec![3],
            size: 4,
        };
        assert_eq!(
            e.to_string(),
            "bootstrap: timed out after 1.5s at rank 0 (127.0.0.1:4000): rank(s) [3] did not show up (3 of 4 present)"
        );
        let e = Error::BootstrapIo {
            rank: 2,
            peer: Some(0),
            root: "h:1".into(),
            what: "sending to rank 0".into(),
            source: std::io::Error::from(std::io::ErrorKind::BrokenPipe),
        };
        assert_eq!(e.to_string(), "bootstrap: rank 2 (h:1): sending to rank 0");
        assert!(std::error::Error::source(&e).is_some());
        let e = Error::Endpoint {
            rank: 1,
            key: 5,
            what: "opened twice",
        };
        assert_eq!(e.to_string(), "protocol error: rank 1: endpoint 5 opened twice");
    }

    #[test]
    fn engine_verbs_and_launch_errors_name_rank_peer_and_operation() {
        let cases = [
            (
                Error::UnknownCompletion {
                    rank: 3,
                    wr: 17,
                    direct: true,
                },
                "protocol error: rank 3: unknown direct completion 17",
            ),
            (
                Error::UnknownCompletion {
                    rank: 3,
                    wr: 17,
                    direct: false,
                },
                "protocol error: rank 3: unknown completion 17",
            ),
            (
                Error::NotDirect {
                    rank: 0,
                    dest: 2,
                    bytes: 64,
                },
                "protocol error: rank 0: a message of 64 bytes to rank 2 does not take the direct path",
            ),
            (
                Error::VerbsSend {
                    rank: 1,
                    dest: 0,
                    what: "sent before the pool was registered".into(),
                },
                "protocol error: rank 1: verbs send to rank 0: sent before the pool was registered",
            ),
            (
                Error::VerbsReceive {
                    rank: 1,
                    qp: 42,
                    what: "no queue pair of this rank has that number".into(),
                },
                "protocol error: rank 1: receive completion on QP 42: no queue pair of this rank has that number",
            ),
            (
                Error::ControlFrame {
                    rank: Some(2),
                    from: Some(9),
                    what: "rank outside the world of 4".into(),
                },
                "protocol error: rank 2: control frame from rank 9: rank outside the world of 4",
            ),
            (
                Error::ControlFrame {
                    rank: None,
                    from: None,
                    what: "unknown control frame kind 9".into(),
                },
                "protocol error: control frame: unknown control frame kind 9",
            ),
            (
                Error::ControlAddresses {
                    rank: 1,
                    what: "no control address for rank 3".into(),
                },
                "bootstrap: rank 1: no control address for rank 3",
            ),
            (
                Error::Config(ConfigError::TransportUnavailable {
                    transport: crate::core::config::TransportKind::Mpi,
                    why: "local::run runs transport=local only",
                }),
                "transport `mpi` is unavailable: local::run runs transport=local only",
            ),
            (
                Error::RankPanicked {
                    rank: 1,
                    message: "boom".into(),
                },
                "rank 1 panicked: boom",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }
}
