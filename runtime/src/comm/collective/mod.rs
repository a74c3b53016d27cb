//! The collectives of [`Communicator`]: the machinery every engine algorithm runs on
//! (`coll_start`, `coll_run`, `coll_step`, [`Unfinished`]) with `barrier`
//! (dissemination) and `all_gatherv` (ring) here; the public calls of the others in
//! `api`, their engine algorithms one per module (`allreduce`: recursive doubling;
//! `bcast`, `gather`: binomial trees; `alltoallv`: Bruck; `sparse`: NBX; `parts`: the
//! length-prefixed parts gather and all-to-all send). On a backend with its own
//! ([`native::NativeCollectives`], the MPI native path) those run instead. Each message
//! carries its collective's stamp (`protocol::collective`), so ranks in different
//! collectives get [`ProtocolError::CollectiveMismatch`](crate::comm::error::ProtocolError::CollectiveMismatch)
//! instead of a hang, and a rank that ended before taking part is
//! [`CommError::PeerGone`](crate::comm::error::CommError::PeerGone) naming the call. The sparse
//! exchange takes its messages from any source; one of a later collective (from a peer
//! that finished the exchange first) waits in the communicator's `early` list, which
//! `coll_next` reads before the queue.
//!
//! A collective that fails with a retryable error (out of memory, [`FabricError::MessageAlloc`]
//! or [`Error::Alloc`], e.g. for an unrelated large arrival; [`ProtocolError::WouldBlock`]) stays
//! unfinished ([`Unfinished`]: its kind, number, step, what it sent and received): the
//! next call of the same collective on the communicator resumes it (same number, nothing
//! sent twice), so the peers' copy of it completes only once this rank took part; a call
//! of another collective meanwhile is [`CommError::CollectiveUnfinished`] naming both. Any
//! other error ends it.
//!
//! [`ProtocolError::CollectiveMismatch`]: crate::comm::error::ProtocolError::CollectiveMismatch
//! [`CommError::PeerGone`]: crate::comm::error::CommError::PeerGone
//! [`CommError::CollectiveUnfinished`]: crate::comm::error::CommError::CollectiveUnfinished
//! [`FabricError::MessageAlloc`]: crate::comm::error::FabricError::MessageAlloc
//! [`ProtocolError::WouldBlock`]: crate::comm::error::ProtocolError::WouldBlock
//! [`Error::Alloc`]: crate::comm::error::Error::Alloc

mod allreduce;
mod alltoallv;
mod api;
mod bcast;
mod gather;
mod mismatch;
pub(crate) mod native;
mod parts;
pub mod reduce;
mod sparse;

pub use reduce::{ReduceOp, ReduceSlice, ReduceType, Reducible};

use super::{Communicator, Request};
use crate::comm::error::{CommError, Error, FabricError, ProtocolError, Result};
use crate::fabric::wire::STAMP_BYTES;
use crate::protocol::collective::{Collective, CollectiveKind, COLLECTIVE_TAG};
use crate::protocol::matching::{Source, TagMatch};

/// What one rank sent this rank in a [`Communicator::exchange_sparse`] (the sparse
/// exchange's counterpart of a part of [`Communicator::all_to_allv`], whose result is
/// indexed by source instead).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The rank that sent it.
    pub source: usize,
    /// Its bytes.
    pub data: Vec<u8>,
}

/// A collective under way on a communicator, kept across a retryable failure.
#[derive(Debug)]
pub(super) struct Unfinished {
    c: Collective,
    /// The step (round) it is in.
    step: u32,
    /// This step's message, sent and not yet waited for.
    send: Option<Request>,
    /// This step's message was sent (its request may be waited for already).
    sent: bool,
    /// This step's message from the peer was received (and stored).
    got: bool,
    /// The byte blocks of the collective (an all-gather's by rank; each module says what
    /// its are).
    blocks: Vec<Vec<u8>>,
    /// All-to-all (Bruck): where each slot's block is in `blocks`.
    slots: Vec<alltoallv::Slot>,
    /// Sparse exchange (NBX): its state.
    nbx: Option<Box<sparse::Nbx>>,
    /// All-reduce, broadcast: a length that differs, found here or upstream (sent on
    /// instead of data, returned at the end).
    mismatch: Option<mismatch::LengthMismatch>,
}

/// True for the errors after which a collective can be resumed: the communicator works on.
fn retryable(e: &Error) -> bool {
    matches!(
        e,
        Error::Fabric(FabricError::MessageAlloc { .. })
            | Error::Alloc(_)
            | Error::Protocol(ProtocolError::WouldBlock)
    )
}

impl Communicator {
    /// Sends collective message `msg` to `dest`.
    fn coll_send(&mut self, dest: usize, msg: &[u8]) -> Result<Request> {
        Ok(Request {
            id: self.isend_retry(dest, COLLECTIVE_TAG, msg)?,
            recv: false,
            peer: Source::Rank(dest),
            owner: self.owner,
        })
    }

    /// Posts the receive of the next collective message from `src`.
    fn coll_recv(&mut self, src: usize) -> Result<Request> {
        Ok(Request {
            id: self.irecv_raw(Source::Rank(src), TagMatch::Tag(COLLECTIVE_TAG))?,
            recv: true,
            peer: Source::Rank(src),
            owner: self.owner,
        })
    }

    /// The next collective message from `src`: one a sparse exchange took early (it
    /// belongs to a later collective, see `early`), else the next to arrive, waited for as
    /// blocking call `op`.
    fn coll_next(&mut self, src: usize, op: &'static str) -> Result<Vec<u8>> {
        if let Some(i) = self.early.iter().position(|(s, _)| *s == src) {
            return Ok(self.early.remove(i).1);
        }
        let rr = self.coll_recv(src)?;
        Ok(self.wait_as(rr, op)?.into_message().expect("receive").data)
    }

    /// The unfinished collective of `kind` to resume, or a new one, set up by `init`
    /// (called only for a new one; e.g. an all-gather's `blocks`, this rank's data in its
    /// place). Errors: [`Error::CollectiveUnfinished`] when another kind is unfinished.
    fn coll_start(
        &mut self,
        kind: CollectiveKind,
        init: impl FnOnce(&mut Unfinished) -> Result<()>,
    ) -> Result<Unfinished> {
        match self.unfinished.take() {
            Some(u) if u.c.kind == kind => Ok(u),
            Some(u) => {
                let e: Error = CommError::CollectiveUnfinished {
                    rank: self.rank(),
                    op: kind.name(),
                    unfinished: u.c.kind.name(),
                    seq: u.c.seq,
                }
                .into();
                self.unfinished = Some(u);
                Err(e)
            }
            None => {
                let mut u = Unfinished {
                    c: crate::protocol::collective::Collective {
                        kind,
                        seq: self.collectives.next(),
                    },
                    step: 0,
                    send: None,
                    sent: false,
                    got: false,
                    blocks: Vec::new(),
                    slots: Vec::new(),
                    nbx: None,
                    mismatch: None,
                };
                init(&mut u)?;
                u.c = self.collectives.begin(kind);
                Ok(u)
            }
        }
    }

    /// Runs `u` to its end with `run`; after a retryable error it is kept for the next
    /// call of its kind.
    fn coll_run(
        &mut self,
        mut u: Unfinished,
        run: impl FnOnce(&mut Self, &mut Unfinished) -> Result<()>,
    ) -> Result<Unfinished> {
        match run(self, &mut u) {
            Ok(()) => Ok(u),
            Err(e) => {
                if retryable(&e) {
                    self.unfinished = Some(u);
                }
                Err(e)
            }
        }
    }

    /// One step of a collective: receives the message of `u`'s step from `from` (unless
    /// already received; none when `None`) and sends `msg()` to `to` (unless already sent;
    /// none when `None`), then waits for the send; the received message (its stamp checked
    /// and taken off) goes to `got`, which checks it without allocating (its error ends
    /// the collective). A receive whose wait failed is withdrawn by the backend (its
    /// message goes back to the queue in its place): the retry posts a new one.
    fn coll_step(
        &mut self,
        u: &mut Unfinished,
        (from, to, op): (Option<usize>, Option<usize>, &'static str),
        msg: impl FnOnce(&Unfinished) -> Result<Vec<u8>>,
        got: impl FnOnce(&mut Unfinished, usize, Vec<u8>) -> Result<()>,
    ) -> Result<()> {
        let r = self.rank();
        if let (false, Some(to)) = (u.sent, to) {
            let m = msg(u)?;
            u.send = Some(self.coll_send(to, &m)?);
            u.sent = true;
        }
        if let (false, Some(from)) = (u.got, from) {
            let mut data = self.coll_next(from, op)?;
            u.c.open(r, from, u.step, &mut data)?;
            got(u, from, data)?;
            u.got = true;
        }
        if let (Some(s), Some(to)) = (u.send.take(), to) {
            let id = s.id;
            if let Err(e) = self.wait_as(s, op) {
                u.send = Some(Request {
                    id,
                    recv: false,
                    peer: Source::Rank(to),
                    owner: self.owner,
                });
                return Err(e);
            }
        }
        u.step += 1;
        u.sent = false;
        u.got = false;
        Ok(())
    }

    /// Blocks until every rank entered the barrier (dissemination algorithm,
    /// `ceil(log2 n)` rounds, talks to `2 * ceil(log2 n)` peers). After a retryable error
    /// (see the module) the next `barrier` resumes this one. Errors:
    /// [`ProtocolError::CollectiveMismatch`](crate::comm::error::ProtocolError::CollectiveMismatch) when a peer is in
    /// another collective, [`CommError::CollectiveUnfinished`](crate::comm::error::CommError::CollectiveUnfinished)
    /// when an all-gather is unfinished here, [`CommError::PeerGone`](crate::comm::error::CommError::PeerGone)
    /// when a peer ended without entering it, the transport's.
    pub fn barrier(&mut self) -> Result<()> {
        if let Some(n) = self.backend.native_collectives() {
            return n.barrier();
        }
        let u = self.coll_start(CollectiveKind::Barrier, |_| Ok(()))?;
        let n = self.world_size();
        let r = self.rank();
        self.coll_run(u, |c, u| {
            while (1usize << u.step) < n {
                let d = 1usize << u.step;
                let ends = (Some((r + n - d) % n), Some((r + d) % n), "barrier");
                let msg = |u: &Unfinished| {
                    let mut msg = Vec::with_capacity(STAMP_BYTES);
                    u.c.seal(u.step, &mut msg);
                    Ok(msg)
                };
                c.coll_step(u, ends, msg, |_, _, _| Ok(()))?;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Gathers every rank's `data` (any length) on every rank, ordered by rank (ring
    /// algorithm: `n - 1` steps, talks to 2 peers). After a retryable error the next
    /// `all_gatherv` resumes this one, with the `data` given first (on the engine paths the
    /// retry's is not read; on the MPI native path it must be the same length as the first
    /// call's, and it is what is sent). Errors as [`Communicator::barrier`].
    pub fn all_gatherv(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        if let Some(nc) = self.backend.native_collectives() {
            return nc.all_gatherv(data);
        }
        let n = self.world_size();
        let r = self.rank();
        let u = self.coll_start(CollectiveKind::AllGatherv, |u| {
            let mut blocks: Vec<Vec<u8>> = vec![Vec::new(); n];
            blocks[r] = crate::core::memory::try_copy(data, || {
                format!("this rank's {} bytes of an all-gather", data.len())
            })?;
            u.blocks = blocks;
            Ok(())
        })?;
        let right = (r + 1) % n;
        let left = (r + n - 1) % n;
        let u = self.coll_run(u, |c, u| {
            while (u.step as usize) < n.saturating_sub(1) {
                let s = u.step as usize;
                let send_idx = (r + n - s) % n;
                let recv_idx = (r + 2 * n - s - 1) % n;
                let msg = |u: &Unfinished| {
                    let block = &u.blocks[send_idx];
                    let mut msg = crate::core::memory::try_buffer(block.len() + STAMP_BYTES, || {
                        format!("an all-gather part of {} bytes", block.len())
                    })?;
                    msg.extend_from_slice(block);
                    u.c.seal(u.step, &mut msg);
                    Ok(msg)
                };
                let ends = (Some(left), Some(right), "all_gatherv");
                c.coll_step(u, ends, msg, |u, _, got| {
                    u.blocks[recv_idx] = got;
                    Ok(())
                })?;
            }
            Ok(())
        })?;
        Ok(u.blocks)
    }
}
