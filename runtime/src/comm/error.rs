//! The communicator's own errors ([`CommError`]): a reserved tag, a wait no rank can end,
//! a request of another communicator, a collective called while another one is unfinished,
//! the memory model's overflow, a message of the runtime's own traffic of the wrong size.
//! The public [`crate::error::Error`] wraps them (`Error::Comm`), with the same messages.

use thiserror::Error;

use super::Request;

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

/// The end of [`CommError::PeerGone`](crate::error::CommError::PeerGone)'s message.
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
