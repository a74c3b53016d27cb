//! The protocol's errors ([`ProtocolError`]): the engine's, tag matching's and the
//! collectives' own, a variant per failing operation, and the fabric's below
//! ([`ProtocolError::Fabric`], unchanged). The public error shows them with the same
//! messages.

use thiserror::Error;

use crate::core::config::ConfigError;
use crate::core::memory::AllocError;
use crate::fabric::error::FabricError;
use crate::protocol::request::RequestId;

/// Errors of the protocol. New variants may be added (`#[non_exhaustive]`): match with a
/// `_` arm.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A fabric's error ([`FabricError`]), unchanged.
    #[error(transparent)]
    Fabric(#[from] FabricError),
    /// A bad configuration given to the engine ([`ConfigError`], boxed: it is the largest
    /// error, and the protocol's results stay small), unchanged.
    #[error(transparent)]
    Config(Box<ConfigError>),
    /// Memory the protocol needed (a message, a table) could not be had ([`AllocError`]).
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// A non-blocking send found the buffer pool exhausted (back-pressure); retry after `progress()`.
    #[error("buffer pool exhausted: the send would block")]
    WouldBlock,
    /// The request handle does not belong to this communicator or was already completed.
    #[error("unknown or already completed request {0}")]
    UnknownRequest(RequestId),
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
    /// The engine's `send_direct` was called while messages to `dest` accepted earlier are
    /// still queued: they must be posted first (order per destination), by progress until
    /// `Engine::queued_for(dest)` is false.
    #[error(
        "protocol error: rank {rank}: a direct send to rank {dest} while messages to it are still queued"
    )]
    QueuedBeforeDirect {
        /// The sending rank.
        rank: usize,
        /// The destination rank.
        dest: usize,
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
    /// The engine found no direct path ([`crate::fabric::Fabric::direct`] is `None`) on a
    /// transport that offered one when the engine started.
    #[error("protocol error: transport `{transport}` has no direct path")]
    NoDirectPath {
        /// The transport's name.
        transport: &'static str,
    },
    /// The job was aborted on purpose: rank `by` called `Communicator::abort` with `code`
    /// (on a transport without a job-wide abort of its own; `by` is `rank` itself when it
    /// was this rank). Every later call of rank `rank` that progresses fails with it.
    #[error("rank {rank}: {}", aborted_phrase(*.rank, *.by, *.code))]
    Aborted {
        /// The rank that fails.
        rank: usize,
        /// The rank that aborted the job.
        by: usize,
        /// Its code.
        code: i32,
    },
}

/// The message of [`ProtocolError::Aborted`] after the rank.
fn aborted_phrase(rank: usize, by: usize, code: i32) -> String {
    if rank == by {
        format!("this rank aborted the job (abort with code {code}): no call can complete any more")
    } else {
        format!("rank {by} aborted the job (abort with code {code}): no call can complete any more")
    }
}

/// Result of the protocol.
pub type Result<T, E = ProtocolError> = std::result::Result<T, E>;
