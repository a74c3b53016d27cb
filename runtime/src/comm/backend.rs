//! What carries a communicator's messages: [`Backend`], implemented by the progress engine
//! over a fabric (every transport, `comm::engine`) and by MPI's native path
//! (`comm::mpi_native`, one MPI message per Ballast message). The [`Communicator`] holds
//! one behind a `Box<dyn Backend>` and writes each API call once over it: one dynamic
//! call per API call; the blocking waits below are generic, so a backend runs them with
//! its own calls dispatched statically.
//!
//! [`Communicator`]: super::Communicator

use super::collective::native::NativeCollectives;
use super::gone::{after_round, EndCheck, Gone};
use super::{Completion, Request};
use crate::comm::error::{CommError, Error, ProtocolError, Result};
use crate::core::backoff::Backoff;
use crate::core::config::TransportConfig;
use crate::core::footprint::{Footprint, MemoryLock};
use crate::core::pool::PoolStats;
use crate::protocol::connection::EndpointStats;
use crate::protocol::engine::DatagramStats;
use crate::protocol::matching::{Envelope, Message, Source, Tag, TagMatch};
use crate::protocol::request::RequestId;

/// A communicator's backend: the non-blocking operations, the counters, and the blocking
/// calls a backend does its own way (`send`, the receives, `wait`).
pub(crate) trait Backend: Send {
    /// This rank, `0..world_size()`.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn world_size(&self) -> usize;
    /// Effective transport configuration.
    fn config(&self) -> &TransportConfig;
    /// The backend's setup notes.
    fn notes(&self) -> &[String];
    /// What became of the `mlock` requests of the memory held now.
    fn memory_lock(&self) -> MemoryLock;
    /// True on the MPI native path.
    fn is_mpi_native(&self) -> bool;

    /// Starts a send; its request id.
    fn isend(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<RequestId>;
    /// Posts a receive; its request id.
    fn irecv(&mut self, src: Source, tag: TagMatch) -> Result<RequestId>;
    /// The next matching message if it has fully arrived.
    fn try_take(&mut self, src: Source, tag: TagMatch) -> Option<Message>;
    /// The envelope of the next matching message if it has fully arrived (left queued).
    fn peek(&mut self, src: Source, tag: TagMatch) -> Option<Envelope>;
    /// Posts a receive of a message of at most `cap` bytes: a longer match is left queued
    /// and ends the receive refused ([`Backend::take_refused`]).
    fn irecv_within(&mut self, src: Source, tag: TagMatch, cap: usize) -> Result<RequestId>;
    /// The envelope of the longer message receive `id` of `irecv_within` refused (left
    /// queued), once: the receive has then ended.
    fn take_refused(&mut self, id: RequestId) -> Option<Envelope>;
    /// Withdraws posted receive `id` if no message has matched it yet: true; false, and
    /// nothing changes, once one has (complete, arriving, or refused).
    fn cancel_recv(&mut self, id: RequestId) -> Result<bool>;
    /// Whether receive `id` completed.
    fn recv_done(&self, id: RequestId) -> bool;
    /// Whether send `id` completed.
    fn send_done(&self, id: RequestId) -> Result<bool>;
    /// The message of completed receive `id`.
    fn take_recv(&mut self, id: RequestId) -> Option<Message>;
    /// Forgets completed send `id`.
    fn finish_send(&mut self, id: RequestId);
    /// Forgets send `id` if it completed: `Some(true)` then, `Some(false)` while in
    /// flight, `None` for an unknown request (`send_done`, then `finish_send`; no `Result`
    /// on the hot path: the error is made by the caller, in the rare case).
    fn take_send(&mut self, id: RequestId) -> Option<bool> {
        let done = self.send_done(id).ok()?;
        if done {
            self.finish_send(id);
        }
        Some(done)
    }
    /// One round of progress; true if anything happened.
    fn progress(&mut self) -> Result<bool>;
    /// True when every send of this rank completed.
    fn sends_drained(&self) -> bool;
    /// Tells the other ranks this rank finished.
    fn mark_done(&mut self);
    /// True when every rank finished.
    fn all_done(&mut self) -> bool;
    /// One idle step of a blocking call (see [`Backoff`]).
    fn snooze(&self, b: &mut Backoff);
    /// Whether the ranks a blocking call `op` waits on (`peer`; `recv`: as a receive)
    /// ended so that it can never complete (see `gone`).
    fn gone(&self, peer: Source, recv: bool, op: &'static str) -> Option<Gone>;
    /// Aborts the job with `code` (`Communicator::abort`): under MPI `MPI_Abort`, which
    /// never returns; on the engine elsewhere, a notice to every other rank.
    fn abort(&mut self, code: i32) -> Result<()>;
    /// The error of the job's abort once this rank knows of one (the engine:
    /// `ProtocolError::Aborted`); `Ok` otherwise, and always under MPI (its abort does not
    /// return).
    fn check_aborted(&self) -> Result<()> {
        Ok(())
    }

    /// Transport memory of this rank by kind.
    fn footprint(&self) -> Footprint;
    /// Pool occupancy counters.
    fn pool_stats(&self) -> PoolStats;
    /// Endpoint counters.
    fn endpoint_stats(&self) -> EndpointStats;
    /// Counters of the datagram path, when it runs.
    fn datagram_stats(&self) -> Option<DatagramStats>;
    /// True if the credit accounting balances.
    fn credits_consistent(&self) -> bool;

    /// Sends `data` to `dest` with `tag`, blocking as `Communicator::send` documents: the
    /// engine sends a message above its direct threshold straight from `data`, and others
    /// through `isend` and a wait ([`send_blocking`]); the MPI native path as one MPI
    /// message. One dynamic call per blocking send.
    fn send(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<()>;
    /// Receives the next message matching `src` and `tag` (blocking).
    fn recv(&mut self, src: Source, tag: TagMatch) -> Result<Message>;
    /// Receives the next matching message if it is at most `cap` bytes long; a longer one
    /// is left queued and its envelope returned as `Err`.
    fn recv_within(
        &mut self,
        src: Source,
        tag: TagMatch,
        cap: usize,
    ) -> Result<std::result::Result<Message, Envelope>>;
    /// Receives the next matching message into `buf` if it fits; a longer one is left
    /// queued and its envelope returned as `Err`.
    fn recv_into(
        &mut self,
        src: Source,
        tag: TagMatch,
        buf: &mut [u8],
    ) -> Result<std::result::Result<Envelope, Envelope>>;
    /// Waits for `req` as the blocking call `op`.
    fn wait(&mut self, req: Request, op: &'static str) -> Result<Completion>;
    /// [`Backend::wait`], a received message's bytes handed to `read` where they lie
    /// (no `Message` for the caller; the MPI native path keeps the buffer of a receive
    /// of `irecv_within` for the next one): its envelope, `None` for a send.
    fn wait_read(
        &mut self,
        req: Request,
        op: &'static str,
        read: &mut dyn FnMut(&[u8]),
    ) -> Result<Option<Envelope>> {
        Ok(match self.wait(req, op)? {
            Completion::Received(m) => {
                read(&m.data);
                Some(m.envelope())
            }
            Completion::Sent => None,
        })
    }
    /// The collectives this backend runs its own way (MPI's on the native path); `None`:
    /// the engine's algorithms over the calls above.
    fn native_collectives(&mut self) -> Option<&mut dyn NativeCollectives> {
        None
    }
}

/// `isend` that progresses and retries while the pool is exhausted.
pub(super) fn isend_retry<B: Backend + ?Sized>(
    b: &mut B,
    dest: usize,
    tag: Tag,
    data: &[u8],
) -> Result<RequestId> {
    let mut off = Backoff::new();
    let mut check = EndCheck::default();
    loop {
        match b.isend(dest, tag, data) {
            Ok(id) => return Ok(id),
            Err(Error::Protocol(ProtocolError::WouldBlock)) => {
                // A failed rank holds pool buffers for ever (its credits never
                // come): the pool may never free.
                let worked = b.progress()?;
                if worked {
                    off.reset();
                }
                let on = (Source::Any, false, "send");
                if after_round(b, worked, &mut check, on, &mut |_| Ok(false))? {
                    b.snooze(&mut off);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// A blocking send through `isend` (progressing and retrying while the pool is exhausted)
/// and a wait, as the blocking call `send`.
pub(super) fn send_blocking<B: Backend + ?Sized>(
    b: &mut B,
    dest: usize,
    tag: Tag,
    data: &[u8],
) -> Result<()> {
    let id = isend_retry(b, dest, tag, data)?;
    let req = Request {
        id,
        recv: false,
        peer: Source::Rank(dest),
        owner: super::Owner::INTERNAL,
    };
    b.wait(req, "send").map(|_| ())
}

/// Whether `req` completed.
pub(super) fn is_done<B: Backend + ?Sized>(b: &mut B, req: &Request) -> Result<bool> {
    if req.recv {
        if let Some(e) = b.take_refused(req.id) {
            return Err(truncated(b.rank(), e));
        }
        Ok(b.recv_done(req.id))
    } else {
        b.send_done(req.id)
    }
}

/// [`CommError::Truncated`]: the receive of rank `rank` refused message `e` (left queued).
#[cold]
pub(super) fn truncated(rank: usize, e: Envelope) -> Error {
    CommError::Truncated {
        rank,
        peer: e.source,
        tag: e.tag,
        len: e.len,
    }
    .into()
}

/// Takes `req`'s outcome if it completed (the received message, or the send forgotten):
/// one lookup, as the first check of every wait finds most requests complete. A receive
/// of `irecv_within` that refused a longer message is [`CommError::Truncated`], as in
/// [`is_done`].
fn take_done<B: Backend + ?Sized>(b: &mut B, req: &Request) -> Result<Option<Completion>> {
    if req.recv {
        if let Some(m) = b.take_recv(req.id) {
            return Ok(Some(Completion::Received(m)));
        }
        match b.take_refused(req.id) {
            Some(e) => Err(truncated(b.rank(), e)),
            None => Ok(None),
        }
    } else {
        match b.take_send(req.id) {
            Some(done) => Ok(done.then_some(Completion::Sent)),
            None => Err(unknown(req.id)),
        }
    }
}

/// A request this backend does not know (out of line: the hot path only tests for it).
#[cold]
#[inline(never)]
fn unknown(id: RequestId) -> Error {
    Error::Protocol(ProtocolError::UnknownRequest(id))
}

/// Progresses until `req` completes, as the blocking call `op`: once every rank that
/// could complete it ended ([`CommError::PeerGone`](crate::comm::error::CommError::PeerGone), see `gone`), an error naming `op`.
pub(super) fn wait_loop<B: Backend + ?Sized>(
    b: &mut B,
    req: Request,
    op: &'static str,
) -> Result<Completion> {
    if let Some(c) = take_done(b, &req)? {
        return Ok(c);
    }
    let mut off = Backoff::new();
    let mut check = EndCheck::default();
    loop {
        let worked = b.progress()?;
        if worked {
            off.reset();
        }
        if let Some(c) = take_done(b, &req)? {
            return Ok(c);
        }
        let on = (req.peer, req.recv, op);
        if after_round(b, worked, &mut check, on, &mut |c| is_done(c, &req))? {
            b.snooze(&mut off);
        }
    }
}

/// One end check of a non-blocking call `op` after its round of progress found it not
/// complete (see `gone`): once every rank that could complete it ended, one more round,
/// and if that brought nothing (idle, for a finished rank) and `done` still says no, the
/// [`CommError::PeerGone`](crate::comm::error::CommError::PeerGone) that the blocking call would give. `Ok(())` while it may still
/// complete. A polling loop of such calls thus ends as the blocking call does, with one
/// difference: an any-source call does not end once every other rank finished, nor a
/// receive from this rank itself, since this rank still runs and may send to itself
/// between two polls (a blocking call's rank cannot); they end only when a rank failed,
/// as the blocking call does then.
fn end_check<B: Backend + ?Sized>(
    b: &mut B,
    (peer, recv, op): (Source, bool, &'static str),
    done: &mut dyn FnMut(&mut B) -> Result<bool>,
) -> Result<()> {
    let gone = match b.gone(peer, recv, op) {
        Some(g)
            if (peer == Source::Any || peer == Source::Rank(b.rank()))
                && !matches!(g.error, Error::Comm(CommError::PeerGone { failed: true, .. })) =>
        {
            None
        }
        g => g,
    };
    if let Some(g) = gone {
        let again = b.progress()?;
        if (g.sure || !again) && !done(b)? {
            return Err(g.error);
        }
    }
    Ok(())
}

/// Progresses once and tells whether `req` completed; a request that can never complete
/// (every rank that could complete it ended, see `gone` and `end_check`) is
/// [`CommError::PeerGone`](crate::comm::error::CommError::PeerGone) for `test`.
pub(super) fn test<B: Backend + ?Sized>(b: &mut B, req: &Request) -> Result<bool> {
    b.progress()?;
    if is_done(b, req)? {
        return Ok(true);
    }
    end_check(b, (req.peer, req.recv, "test"), &mut |c| is_done(c, req))?;
    is_done(b, req)
}

/// Progresses once and tells the envelope of the next fully arrived message matching
/// `src` and `tag`, if any; none when `src` ended is [`CommError::PeerGone`](crate::comm::error::CommError::PeerGone) for `iprobe`
/// (see `gone`; for [`Source::Any`] only once a rank failed, see `end_check`).
pub(super) fn iprobe<B: Backend + ?Sized>(b: &mut B, src: Source, tag: TagMatch) -> Result<Option<Envelope>> {
    b.progress()?;
    if let Some(e) = b.peek(src, tag) {
        return Ok(Some(e));
    }
    end_check(b, (src, true, "iprobe"), &mut |c| Ok(c.peek(src, tag).is_some()))?;
    Ok(b.peek(src, tag))
}

/// Progresses (waiting as [`wait_loop`] does) until a message matching `src` and `tag`
/// has fully arrived; its envelope.
pub(super) fn probe<B: Backend + ?Sized>(b: &mut B, src: Source, tag: TagMatch) -> Result<Envelope> {
    let mut off = Backoff::new();
    let mut check = EndCheck::default();
    loop {
        let active = b.progress()?;
        if let Some(e) = b.peek(src, tag) {
            return Ok(e);
        }
        if active {
            off.reset();
        }
        let seen = &mut |c: &mut B| Ok(c.peek(src, tag).is_some());
        if after_round(b, active, &mut check, (src, true, "probe"), seen)? {
            b.snooze(&mut off);
        }
    }
}

/// Delivers all own sends, then keeps serving other ranks until every rank is done. After
/// the job's abort (known here) it fails at once with its error: the job is over.
pub(super) fn finalize<B: Backend + ?Sized>(b: &mut B) -> Result<()> {
    b.check_aborted()?;
    let mut off = Backoff::new();
    let mut check = EndCheck::default();
    while !b.sends_drained() {
        let worked = b.progress()?;
        if worked {
            off.reset();
        }
        // A send to a failed rank is never delivered.
        let drained = &mut |c: &mut B| Ok(c.sends_drained());
        if after_round(b, worked, &mut check, (Source::Any, false, "finish"), drained)? {
            b.snooze(&mut off);
        }
    }
    b.mark_done();
    loop {
        if b.all_done() {
            return Ok(());
        }
        if b.progress()? {
            off.reset();
        } else {
            b.snooze(&mut off);
        }
    }
}
