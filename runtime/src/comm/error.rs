//! The runtime's errors, as the communicator's calls return them: the communicator's own
//! ([`CommError`]: a reserved tag, a wait no rank can end, a request of another
//! communicator, a collective called while another one is unfinished, the memory model's
//! overflow, a message of the runtime's own traffic of the wrong size), and the public
//! [`enum@Error`], which wraps every layer's error unchanged (the same messages, the same
//! sources) with the few of the top itself (launching ranks, the system). Each layer has
//! its own: the configuration's [`ConfigError`], the start-up exchange's
//! [`BootstrapError`], the fabrics' [`FabricError`] (with its
//! [`kind`](FabricError::kind): verbs, MPI, local, ...), the protocol's [`ProtocolError`]
//! and [`CommError`]. An error has one public shape whatever layers it passed through: a
//! fabric's error the protocol carried is `Error::Fabric`, not `Error::Protocol`, and a
//! failed allocation is `Error::Alloc` whoever made it. Published as
//! `ballast_runtime::error`; defined here, in the layer whose calls return it, so that no
//! layer imports one above it.

use thiserror::Error;

use super::Request;
pub(crate) use crate::bootstrap::BootstrapError;
pub(crate) use crate::core::config::ConfigError;
pub(crate) use crate::core::memory::AllocError;
pub(crate) use crate::fabric::error::FabricError;
pub(crate) use crate::protocol::error::ProtocolError;

/// Errors of the communicator. New variants may be added (`#[non_exhaustive]`): match with
/// a `_` arm.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CommError {
    /// The tag is in the range reserved for the runtime's collectives (`>= RESERVED_TAG_BASE`).
    #[error("tag {0} is reserved for internal use (user tags must be < 2^31)")]
    ReservedTag(u32),
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
    /// Call `op` (`test`, `wait`, `wait_all`, `cancel`) of rank `rank`'s communicator
    /// (number `comm` in this process) was given a request of another communicator (number
    /// `owner_comm`, of rank `owner_rank`): a request is `Send`, but only the communicator
    /// that made it can complete it. Nothing was done; a call that took the request by
    /// value gives it back in `request`, to be returned to its owner.
    #[error("rank {rank}: {op}: the request belongs to another communicator (#{owner_comm}, rank {owner_rank}), not to this one (#{comm}, rank {rank}): only the communicator that made a request can test, wait for or cancel it")]
    ForeignRequest {
        /// The call.
        op: &'static str,
        /// The calling communicator's rank.
        rank: usize,
        /// The calling communicator's number (from 1, unique in the process).
        comm: u64,
        /// The rank of the communicator the request belongs to.
        owner_rank: usize,
        /// That communicator's number.
        owner_comm: u64,
        /// The request, when the call took it by value (`wait`, `cancel`, the first
        /// foreign one of `wait_all`); `None` for `test`, which borrows it.
        request: Option<Box<Request>>,
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
    /// A term of the memory model ([`crate::core::config::TransportConfig::try_predict`]) does not fit
    /// in 64 bits: the configuration asks for more bytes than any machine has.
    #[error("the memory model overflows 64 bits at {term}: the configuration asks for more than 2^64 bytes")]
    ModelOverflow {
        /// The term that overflows, with its factors' values.
        term: String,
    },
    /// Call `op` is not available on this communicator (`why`: its path, or what is
    /// missing).
    #[error("rank {rank}: {op} is not supported here: {why}")]
    Unsupported {
        /// The calling rank.
        rank: usize,
        /// The call.
        op: &'static str,
        /// Why not.
        why: String,
    },
    /// Argument `what` of collective `op` on rank `rank` is invalid (`why`), e.g. a root
    /// out of range, a destination named twice.
    #[error("rank {rank}: {op}: {what} {why}")]
    CollectiveArgument {
        /// The calling rank.
        rank: usize,
        /// The collective.
        op: &'static str,
        /// The argument.
        what: String,
        /// What is wrong with it.
        why: String,
    },
    /// Rank `peer` passed collective `op` (number `seq` on the communicator) a length
    /// other than rank `found_by`'s (each said with its unit, e.g. `5 elements`), where
    /// every rank must pass the same (`all_reduce`, `bcast`); reported by rank `rank`,
    /// which is `found_by` or a rank it was passed on to in place of the data.
    #[error("rank {rank}: {op} (collective #{seq}): rank {peer} passed {theirs} where rank {found_by} passed {mine}: every rank must pass the same length")]
    CollectiveLength {
        /// The rank reporting it (the calling rank).
        rank: usize,
        /// The rank that found it (compared `peer`'s length with its own).
        found_by: usize,
        /// The rank whose message told its length.
        peer: usize,
        /// The collective.
        op: &'static str,
        /// Its number among the communicator's collectives, from 1.
        seq: u64,
        /// The finder's length.
        mine: String,
        /// The peer's length.
        theirs: String,
    },
    /// A receive of at most some bytes (`Communicator::irecv_within`) on rank `rank`
    /// matched a longer message, from rank `peer` with `tag`, of `len` bytes: the message
    /// was left queued, first for the next receive that matches it; the receive has ended.
    #[error("rank {rank}: the message from rank {peer} with tag {tag} is {len} bytes, longer than the receive's buffer: it stays queued for a later receive")]
    Truncated {
        /// The receiving rank.
        rank: usize,
        /// The message's source rank.
        peer: usize,
        /// Its tag.
        tag: u32,
        /// Its length in bytes.
        len: usize,
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
}

/// The end of [`CommError::PeerGone`](crate::comm::error::CommError::PeerGone)'s message.
fn gone_phrase(rank: usize, peer: &Option<usize>, failed: bool) -> String {
    match (peer, failed) {
        (Some(p), false) if *p == rank => format!(
            "it receives from rank {p}, itself: nothing from rank {p} that matches is queued, and only this rank's thread, blocked in this call, could send it"
        ),
        (Some(p), true) => format!("rank {p} failed"),
        (Some(p), false) => format!("rank {p} finished (returned) without sending what it waits for"),
        (None, true) => "a rank failed".to_string(),
        (None, false) => "every other rank finished (returned) without sending what it waits for".to_string(),
    }
}

/// Errors of the Ballast runtime. New variants may be added (`#[non_exhaustive]`): match
/// with a `_` arm.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// A bad configuration value, or a transport that cannot run here ([`ConfigError`]).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The start-up exchange failed ([`BootstrapError`]).
    #[error(transparent)]
    Bootstrap(BootstrapError),
    /// A fabric failed ([`FabricError`], see [`FabricError::kind`]).
    #[error(transparent)]
    Fabric(FabricError),
    /// The protocol failed ([`ProtocolError`]; never its `Fabric`, `Alloc` or `Config`,
    /// shown as [`Error::Fabric`], [`Error::Alloc`] and [`Error::Config`]).
    #[error(transparent)]
    Protocol(ProtocolError),
    /// A communicator's call failed ([`CommError`]).
    #[error(transparent)]
    Comm(#[from] CommError),
    /// Memory could not be had ([`AllocError`]), in whichever layer.
    #[error(transparent)]
    Alloc(#[from] AllocError),
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
    /// Operating-system error (thread spawn, /proc read).
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl From<BootstrapError> for Error {
    fn from(e: BootstrapError) -> Error {
        Error::Bootstrap(e)
    }
}

impl From<FabricError> for Error {
    /// A fabric's error as [`Error::Fabric`]; the bootstrap's and an allocation's it
    /// carries as [`Error::Bootstrap`] and [`Error::Alloc`].
    fn from(e: FabricError) -> Error {
        match e {
            FabricError::Bootstrap(b) => Error::Bootstrap(b),
            FabricError::Alloc(a) => Error::Alloc(a),
            e => Error::Fabric(e),
        }
    }
}

impl From<ProtocolError> for Error {
    /// The protocol's error as [`Error::Protocol`]; a fabric's it carries as that fabric
    /// error's shape, an allocation's as [`Error::Alloc`], a configuration's as
    /// [`Error::Config`].
    fn from(e: ProtocolError) -> Error {
        match e {
            ProtocolError::Fabric(f) => f.into(),
            ProtocolError::Alloc(a) => Error::Alloc(a),
            ProtocolError::Config(c) => Error::Config(*c),
            e => Error::Protocol(e),
        }
    }
}

/// libibverbs' errors (`ballast-ibv`) as the verbs fabric's ([`FabricError::VerbsCall`],
/// [`FabricError::VerbsRecvRange`], [`Error::Alloc`]), for code that calls the safe layer
/// itself (the raw-verbs benchmark).
#[cfg(feature = "verbs")]
impl From<ballast_ibv::IbvError> for Error {
    fn from(e: ballast_ibv::IbvError) -> Error {
        FabricError::from(e).into()
    }
}

impl Error {
    /// True for the back-pressure of a non-blocking send (the buffer pool is exhausted,
    /// [`ProtocolError::WouldBlock`]): retry after `progress()`.
    pub fn is_would_block(&self) -> bool {
        matches!(self, Error::Protocol(ProtocolError::WouldBlock))
    }

    /// True when the run was aborted because of another rank: it failed
    /// ([`FabricError::Aborted`]) or it called `Communicator::abort`
    /// ([`ProtocolError::Aborted`] naming another rank; the aborting rank's own is not).
    pub fn is_aborted(&self) -> bool {
        match self {
            Error::Fabric(FabricError::Aborted) => true,
            Error::Protocol(ProtocolError::Aborted { rank, by, .. }) => rank != by,
            _ => false,
        }
    }

    /// The fabric's error, if this is one ([`Error::Fabric`]).
    pub fn fabric(&self) -> Option<&FabricError> {
        match self {
            Error::Fabric(f) => Some(f),
            _ => None,
        }
    }
}

/// Result alias of the runtime.
pub type Result<T> = std::result::Result<T, Error>;

/// Collects per-rank results: all values in order, or the first real error — a rank's own
/// failure wins over the [`FabricError::Aborted`] the other ranks see because of it. Shared
/// by the transports' `run` functions.
pub(crate) fn first_error<T>(results: impl IntoIterator<Item = Result<T>>) -> Result<Vec<T>> {
    let mut out = Vec::new();
    let mut first: Option<Error> = None;
    for res in results {
        match res {
            Ok(v) => out.push(v),
            Err(e) if e.is_aborted() => {
                first.get_or_insert(e);
            }
            Err(e) => {
                if first.as_ref().is_none_or(Error::is_aborted) {
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
    use crate::fabric::FabricKind;

    #[test]
    fn errors_stay_small() {
        // The engine's results carry the protocol's error: 80 bytes, the size of the one
        // flat error before the layers (its largest variants, `ConfigError::Setting` and
        // `FabricError::VerbsCall`, are 72-80 bytes). The public error wraps 80-byte
        // errors of several layers, so it needs a tag of its own: 96 bytes.
        assert_eq!(std::mem::size_of::<FabricError>(), 80);
        assert_eq!(std::mem::size_of::<ProtocolError>(), 80);
        assert_eq!(std::mem::size_of::<BootstrapError>(), 80);
        assert_eq!(std::mem::size_of::<Error>(), 96);
    }

    #[test]
    fn a_fabric_error_has_one_public_shape_whatever_layer_carried_it() {
        let aborted = || FabricError::Aborted;
        for e in [
            Error::from(aborted()),
            Error::from(ProtocolError::from(aborted())),
            Error::from(ProtocolError::Fabric(aborted())),
        ] {
            assert!(matches!(e, Error::Fabric(FabricError::Aborted)), "{e:?}");
            assert!(e.is_aborted());
            assert_eq!(e.to_string(), "the run was aborted because another rank failed");
        }
        let alloc = || AllocError {
            what: "a test region".into(),
            bytes: 4096,
            error: std::io::Error::from(std::io::ErrorKind::OutOfMemory),
        };
        for e in [
            Error::from(alloc()),
            Error::from(FabricError::from(alloc())),
            Error::from(ProtocolError::from(alloc())),
            Error::from(ProtocolError::from(FabricError::from(alloc()))),
        ] {
            assert!(matches!(&e, Error::Alloc(a) if a.bytes == 4096), "{e:?}");
            assert_eq!(
                e.to_string(),
                "cannot allocate 4096 bytes for a test region: out of memory"
            );
        }
        let boot = Error::from(FabricError::from(BootstrapError::Env {
            what: "no BALLAST_ROOT",
        }));
        assert!(
            matches!(boot, Error::Bootstrap(BootstrapError::Env { .. })),
            "{boot:?}"
        );
        assert_eq!(boot.to_string(), "bootstrap: no BALLAST_ROOT");
        let wb = Error::from(ProtocolError::WouldBlock);
        assert!(wb.is_would_block() && !wb.is_aborted());
        assert_eq!(wb.to_string(), "buffer pool exhausted: the send would block");
    }

    #[test]
    fn fabric_errors_name_their_fabric() {
        let cases = [
            (
                FabricError::MpiCall {
                    call: "MPI_Isend",
                    code: 3,
                },
                FabricKind::Mpi,
            ),
            (FabricError::PeerDied { rank: 0, peer: 1 }, FabricKind::Verbs),
            (
                FabricError::ReceiveQueue {
                    rank: 0,
                    what: "overflow",
                },
                FabricKind::Local,
            ),
            (
                FabricError::Bootstrap(BootstrapError::Env { what: "x" }),
                FabricKind::Bootstrap,
            ),
            (FabricError::Aborted, FabricKind::Other),
        ];
        for (e, kind) in cases {
            assert_eq!(e.kind(), kind, "{e}");
        }
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
        let e = Error::Bootstrap(BootstrapError::Timeout {
            root: "127.0.0.1:4000".into(),
            timeout: std::time::Duration::from_millis(1500),
            missing: vec![3],
            size: 4,
        });
        assert_eq!(
            e.to_string(),
            "bootstrap: timed out after 1.5s at rank 0 (127.0.0.1:4000): rank(s) [3] did not show up (3 of 4 present)"
        );
        let e = Error::Bootstrap(BootstrapError::Io {
            rank: 2,
            peer: Some(0),
            root: "h:1".into(),
            what: "sending to rank 0".into(),
            source: std::io::Error::from(std::io::ErrorKind::BrokenPipe),
        });
        assert_eq!(e.to_string(), "bootstrap: rank 2 (h:1): sending to rank 0");
        assert!(std::error::Error::source(&e).is_some());
        let e = Error::Fabric(FabricError::Endpoint {
            rank: 1,
            key: 5,
            what: "opened twice",
        });
        assert_eq!(e.to_string(), "protocol error: rank 1: endpoint 5 opened twice");
    }

    #[test]
    fn engine_verbs_and_launch_errors_name_rank_peer_and_operation() {
        let cases = [
            (
                Error::Protocol(ProtocolError::UnknownCompletion {
                    rank: 3,
                    wr: 17,
                    direct: true,
                }),
                "protocol error: rank 3: unknown direct completion 17",
            ),
            (
                Error::Protocol(ProtocolError::UnknownCompletion {
                    rank: 3,
                    wr: 17,
                    direct: false,
                }),
                "protocol error: rank 3: unknown completion 17",
            ),
            (
                Error::Protocol(ProtocolError::NotDirect {
                    rank: 0,
                    dest: 2,
                    bytes: 64,
                }),
                "protocol error: rank 0: a message of 64 bytes to rank 2 does not take the direct path",
            ),
            (
                Error::Fabric(FabricError::VerbsSend {
                    rank: 1,
                    dest: 0,
                    what: "sent before the pool was registered".into(),
                }),
                "protocol error: rank 1: verbs send to rank 0: sent before the pool was registered",
            ),
            (
                Error::Fabric(FabricError::VerbsReceive {
                    rank: 1,
                    qp: 42,
                    what: "no queue pair of this rank has that number".into(),
                }),
                "protocol error: rank 1: receive completion on QP 42: no queue pair of this rank has that number",
            ),
            (
                Error::Fabric(FabricError::ControlFrame {
                    rank: Some(2),
                    from: Some(9),
                    what: "rank outside the world of 4".into(),
                }),
                "protocol error: rank 2: control frame from rank 9: rank outside the world of 4",
            ),
            (
                Error::Fabric(FabricError::ControlFrame {
                    rank: None,
                    from: None,
                    what: "unknown control frame kind 9".into(),
                }),
                "protocol error: control frame: unknown control frame kind 9",
            ),
            (
                Error::Fabric(FabricError::ControlAddresses {
                    rank: 1,
                    what: "no control address for rank 3".into(),
                }),
                "bootstrap: rank 1: no control address for rank 3",
            ),
            (
                Error::Config(ConfigError::TransportUnavailable {
                    transport: crate::core::config::TransportKind::Mpi,
                    why: "threads::run_ranks runs transport=local only",
                }),
                "transport `mpi` is unavailable: threads::run_ranks runs transport=local only",
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
