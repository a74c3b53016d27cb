//! The progress engine as a communicator's [`Backend`]: its calls, its idle wait (blocking
//! on a fabric that can), the end check of its blocking calls, and its limited receives
//! (`recv_within`, `recv_into`: a receive posted with the limit, waited for here).

use super::backend::{self, Backend};
use super::gone::{self, EndCheck, Gone};
use super::{Completion, Request};
use crate::comm::error::{Error, ProtocolError, Result};
use crate::core::backoff::Backoff;
use crate::core::config::TransportConfig;
use crate::core::footprint::{Footprint, MemoryLock};
use crate::core::pool::PoolStats;
use crate::protocol::clock::Clock;
use crate::protocol::connection::EndpointStats;
use crate::protocol::engine::{DatagramStats, Engine};
use crate::protocol::matching::{Envelope, Message, RecvInto, Source, Tag, TagMatch};
use crate::protocol::request::RequestId;

/// The system clock: the time the communicator passes to its engine.
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> std::time::Instant {
        std::time::Instant::now()
    }
}

/// How a limited blocking receive on the engine ended.
enum Limited {
    /// The message, in a buffer of its own.
    Message(Message),
    /// The message, written into the lent buffer.
    Into(Envelope),
    /// A longer message, left queued.
    Refused(Envelope),
}

impl Backend for Engine {
    fn rank(&self) -> usize {
        Engine::rank(self)
    }
    fn world_size(&self) -> usize {
        Engine::world_size(self)
    }
    fn config(&self) -> &TransportConfig {
        Engine::config(self)
    }
    fn notes(&self) -> &[String] {
        Engine::notes(self)
    }
    fn memory_lock(&self) -> MemoryLock {
        Engine::memory_lock(self)
    }
    fn is_mpi_native(&self) -> bool {
        false
    }
    fn isend(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<RequestId> {
        Ok(Engine::isend(self, dest, tag, data)?)
    }
    fn irecv(&mut self, src: Source, tag: TagMatch) -> Result<RequestId> {
        Ok(Engine::irecv(self, src, tag)?)
    }
    fn irecv_within(&mut self, src: Source, tag: TagMatch, cap: usize) -> Result<RequestId> {
        Ok(Engine::irecv_within(self, src, tag, cap)?)
    }
    fn take_refused(&mut self, id: RequestId) -> Option<Envelope> {
        Engine::take_refused(self, id)
    }
    fn cancel_recv(&mut self, id: RequestId) -> Result<bool> {
        Ok(self.withdraw_recv(id))
    }
    fn try_take(&mut self, src: Source, tag: TagMatch) -> Option<Message> {
        Engine::try_take(self, src, tag)
    }
    fn peek(&mut self, src: Source, tag: TagMatch) -> Option<Envelope> {
        Engine::peek(self, src, tag)
    }
    fn recv_done(&self, id: RequestId) -> bool {
        Engine::recv_done(self, id)
    }
    fn send_done(&self, id: RequestId) -> Result<bool> {
        Ok(Engine::send_done(self, id)?)
    }
    fn take_recv(&mut self, id: RequestId) -> Option<Message> {
        Engine::take_recv(self, id)
    }
    fn finish_send(&mut self, id: RequestId) {
        Engine::finish_send(self, id)
    }
    fn take_send(&mut self, id: RequestId) -> Option<bool> {
        Engine::take_send(self, id)
    }
    fn progress(&mut self) -> Result<bool> {
        Ok(Engine::progress(self)?)
    }
    fn sends_drained(&self) -> bool {
        Engine::sends_drained(self)
    }
    fn mark_done(&mut self) {
        self.fabric_mut().mark_done()
    }
    fn all_done(&mut self) -> bool {
        self.fabric_mut().all_done()
    }
    /// Blocks until an arrival on a fabric that can.
    fn snooze(&self, b: &mut Backoff) {
        let f = self.fabric();
        let limit = self.wait_limit();
        b.snooze_on(f.blocks_when_idle(), |d| {
            f.wait_for_arrival(limit.map_or(d, |l| d.min(l)))
        })
    }
    fn gone(&self, peer: Source, recv: bool, op: &'static str) -> Option<Gone> {
        gone::engine_gone(self, peer, recv, op)
    }
    fn abort(&mut self, code: i32) -> Result<()> {
        Ok(Engine::abort(self, code)?)
    }
    fn check_aborted(&self) -> Result<()> {
        Ok(Engine::check_aborted(self)?)
    }
    fn footprint(&self) -> Footprint {
        Engine::footprint(self)
    }
    fn pool_stats(&self) -> PoolStats {
        Engine::pool_stats(self)
    }
    fn endpoint_stats(&self) -> EndpointStats {
        Engine::endpoint_stats(self)
    }
    fn datagram_stats(&self) -> Option<DatagramStats> {
        Engine::datagram_stats(self)
    }
    fn credits_consistent(&self) -> bool {
        Engine::credits_consistent(self)
    }

    fn send(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<()> {
        if self.goes_direct(dest, data.len()) {
            return Ok(self.send_direct(dest, tag, data)?);
        }
        backend::send_blocking(self, dest, tag, data)
    }

    fn recv(&mut self, src: Source, tag: TagMatch) -> Result<Message> {
        let req = Request {
            id: Engine::irecv(self, src, tag)?,
            recv: true,
            peer: src,
            owner: super::Owner::INTERNAL,
        };
        // Withdrawn on an error as `wait` does: a message on its way, or one refused for
        // memory (kept by the fabric), must not bind to this ended receive later.
        Ok(Backend::wait(self, req, "recv")?
            .into_message()
            .expect("receive request"))
    }

    fn recv_within(
        &mut self,
        src: Source,
        tag: TagMatch,
        cap: usize,
    ) -> Result<std::result::Result<Message, Envelope>> {
        Ok(match recv_limited(self, src, tag, cap, None)? {
            Limited::Message(m) => Ok(m),
            Limited::Refused(e) => Err(e),
            Limited::Into(_) => unreachable!("no buffer was lent"),
        })
    }

    fn recv_into(
        &mut self,
        src: Source,
        tag: TagMatch,
        buf: &mut [u8],
    ) -> Result<std::result::Result<Envelope, Envelope>> {
        Ok(match recv_limited(self, src, tag, buf.len(), Some(&mut *buf))? {
            Limited::Into(e) => Ok(e),
            Limited::Message(m) => {
                buf[..m.data.len()].copy_from_slice(&m.data);
                Ok(m.envelope())
            }
            Limited::Refused(e) => Err(e),
        })
    }

    fn wait(&mut self, req: Request, op: &'static str) -> Result<Completion> {
        let (id, recv) = (req.id, req.recv);
        let r = backend::wait_loop(self, req, op);
        if r.is_err() && recv {
            // Withdrawn: a message bound to it (complete, or still on its way) goes back to
            // the queue in its place, and one refused for memory (kept by the fabric) is
            // left, for a later receive.
            self.cancel_recv(id, None)?;
        }
        r
    }
}

/// `recv_within` on the engine: a receive posted with the limit, so that a message
/// arriving during the wait binds to it as to `recv`'s, waited for as `wait` does. With
/// `into` (of `cap` bytes) lent to every progress of the wait, a message that binds as it
/// arrives is written there (`Limited::Into`); one that was already queued, or arrived
/// whole in a buffer of its own, comes as `Limited::Message`. When the wait fails the
/// receive is withdrawn, and the message bound to it goes back to the queue, with what
/// `into` holds of it copied out (`Engine::cancel_recv`); when that copy cannot be
/// reserved, the message is dropped and that error is returned instead of the wait's.
fn recv_limited(
    e: &mut Engine,
    src: Source,
    tag: TagMatch,
    cap: usize,
    mut into: Option<&mut [u8]>,
) -> Result<Limited> {
    let id = e.irecv_within(src, tag, cap)?;
    let r = wait_limited(e, id, src, into.as_deref_mut());
    if r.is_err() {
        e.cancel_recv(id, into.as_deref())?;
    }
    r
}

/// The wait of [`recv_limited`] for its receive `id`.
fn wait_limited(e: &mut Engine, id: RequestId, src: Source, mut into: Option<&mut [u8]>) -> Result<Limited> {
    let mut b = Backoff::new();
    // The end seen of the sender, and whether a round of progress came after it.
    let mut gone: Option<(Gone, bool)> = None;
    let mut check = EndCheck::default();
    let mut worked = true;
    loop {
        if into.is_some() {
            if let Some(env) = e.take_into_done(id) {
                return Ok(Limited::Into(env));
            }
        }
        if Engine::recv_done(e, id) {
            return Engine::take_recv(e, id)
                .map(Limited::Message)
                .ok_or(Error::Protocol(ProtocolError::UnknownRequest(id)));
        }
        if let Some(refused) = e.take_refused(id) {
            return Ok(Limited::Refused(refused));
        }
        // The round after the sender was seen ended (idle, if it finished) brought no
        // outcome (the checks above): nothing can.
        if let Some((g, true)) = gone.take_if(|(_, after)| *after) {
            if !worked || g.sure {
                return Err(g.error);
            }
        }
        let lent = into.as_deref_mut().map(|buf| RecvInto { req: id, buf });
        worked = e.progress_into(lent)?;
        if worked {
            b.reset();
        }
        if let Some((g, false)) = gone.take() {
            gone = Some((g, true));
        } else if check.due(worked) {
            // One more round takes what an ended rank sent, or nothing will.
            gone = gone::engine_gone(e, src, true, "recv").map(|g| (g, false));
        }
        if gone.is_none() && !worked {
            Backend::snooze(e, &mut b);
        }
    }
}
