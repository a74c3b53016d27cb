//! The progress engine as a communicator's [`Backend`] ([`EngineBackend`]): its calls,
//! the time given to its rounds (the system clock, read only when the engine has timers),
//! its idle wait (blocking on a fabric that can), the end check of its blocking calls, the
//! wait of a direct send behind queued messages, and its limited receives (`recv_within`,
//! `recv_into`: a receive posted with the limit, waited for here).

use std::time::Instant;

use super::backend::{self, Backend};
use super::gone::{self, EndCheck, Gone};
use super::{Completion, Request};
use crate::comm::error::{Error, ProtocolError, Result};
use crate::core::backoff::Backoff;
use crate::core::config::TransportConfig;
use crate::core::footprint::{Footprint, MemoryLock};
use crate::core::pool::PoolStats;
use crate::fabric::Fabric;
use crate::protocol::connection::EndpointStats;
use crate::protocol::engine::{DatagramStats, Engine};
use crate::protocol::matching::{Envelope, Message, RecvInto, Source, Tag, TagMatch};
use crate::protocol::request::RequestId;

/// The engine as a backend, with the time its rounds run at: the system clock's, read at
/// each round only when the engine has timers ([`Engine::uses_time`]; reading it costs
/// tens of nanoseconds, much of a local ping-pong's round), else the instant the engine
/// was made at (which it does not read).
pub(crate) struct EngineBackend {
    engine: Engine,
    /// The `now` given to [`Engine::new`].
    start: Instant,
}

impl EngineBackend {
    /// Makes the engine over `fabric` ([`Engine::new`]) at the current time.
    pub(crate) fn new(fabric: Box<dyn Fabric>, config: &TransportConfig) -> Result<EngineBackend> {
        let start = Instant::now();
        let engine = Engine::new(fabric, config, start)?;
        Ok(EngineBackend { engine, start })
    }

    /// The time of the engine's next round: the system clock when the engine reads it.
    #[inline]
    fn now(&self) -> Instant {
        if self.engine.uses_time() {
            Instant::now()
        } else {
            self.start
        }
    }

    /// One round of the engine's progress (its `progress_into`) at the current time.
    #[inline]
    fn round(&mut self, into: Option<RecvInto<'_>>) -> Result<bool> {
        let now = self.now();
        Ok(self.engine.progress_into(now, into)?)
    }

    /// A blocking send on the direct path: once the messages queued earlier for `dest` are
    /// posted (rounds of progress until then: the engine does not wait itself), the
    /// engine's `send_direct`.
    fn send_direct(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<()> {
        let mut b = Backoff::new();
        while self.engine.queued_for(dest) {
            if self.round(None)? {
                b.reset();
            } else {
                Backend::snooze(self, &mut b);
            }
        }
        Ok(self.engine.send_direct(dest, tag, data)?)
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

impl Backend for EngineBackend {
    fn rank(&self) -> usize {
        self.engine.rank()
    }
    fn world_size(&self) -> usize {
        self.engine.world_size()
    }
    fn config(&self) -> &TransportConfig {
        self.engine.config()
    }
    fn notes(&self) -> &[String] {
        self.engine.notes()
    }
    fn memory_lock(&self) -> MemoryLock {
        self.engine.memory_lock()
    }
    fn is_mpi_native(&self) -> bool {
        false
    }
    fn isend(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<RequestId> {
        Ok(self.engine.isend(dest, tag, data)?)
    }
    fn irecv(&mut self, src: Source, tag: TagMatch) -> Result<RequestId> {
        Ok(self.engine.irecv(src, tag)?)
    }
    fn irecv_within(&mut self, src: Source, tag: TagMatch, cap: usize) -> Result<RequestId> {
        Ok(self.engine.irecv_within(src, tag, cap)?)
    }
    fn take_refused(&mut self, id: RequestId) -> Option<Envelope> {
        self.engine.take_refused(id)
    }
    fn cancel_recv(&mut self, id: RequestId) -> Result<bool> {
        Ok(self.engine.withdraw_recv(id))
    }
    fn try_take(&mut self, src: Source, tag: TagMatch) -> Option<Message> {
        self.engine.try_take(src, tag)
    }
    fn peek(&mut self, src: Source, tag: TagMatch) -> Option<Envelope> {
        self.engine.peek(src, tag)
    }
    fn recv_done(&self, id: RequestId) -> bool {
        self.engine.recv_done(id)
    }
    fn send_done(&self, id: RequestId) -> Result<bool> {
        Ok(self.engine.send_done(id)?)
    }
    fn take_recv(&mut self, id: RequestId) -> Option<Message> {
        self.engine.take_recv(id)
    }
    fn finish_send(&mut self, id: RequestId) {
        self.engine.finish_send(id)
    }
    fn take_send(&mut self, id: RequestId) -> Option<bool> {
        self.engine.take_send(id)
    }
    fn progress(&mut self) -> Result<bool> {
        self.round(None)
    }
    fn sends_drained(&self) -> bool {
        self.engine.sends_drained()
    }
    fn mark_done(&mut self) {
        self.engine.fabric_mut().mark_done()
    }
    fn all_done(&mut self) -> bool {
        self.engine.fabric_mut().all_done()
    }
    /// Blocks until an arrival on a fabric that can.
    fn snooze(&self, b: &mut Backoff) {
        let f = self.engine.fabric();
        let limit = self.engine.wait_limit();
        b.snooze_on(f.blocks_when_idle(), |d| {
            f.wait_for_arrival(limit.map_or(d, |l| d.min(l)))
        })
    }
    fn gone(&self, peer: Source, recv: bool, op: &'static str) -> Option<Gone> {
        gone::engine_gone(&self.engine, peer, recv, op)
    }
    fn abort(&mut self, code: i32) -> Result<()> {
        Ok(self.engine.abort(code)?)
    }
    fn check_aborted(&self) -> Result<()> {
        Ok(self.engine.check_aborted()?)
    }
    fn footprint(&self) -> Footprint {
        self.engine.footprint()
    }
    fn pool_stats(&self) -> PoolStats {
        self.engine.pool_stats()
    }
    fn endpoint_stats(&self) -> EndpointStats {
        self.engine.endpoint_stats()
    }
    fn datagram_stats(&self) -> Option<DatagramStats> {
        self.engine.datagram_stats()
    }
    fn credits_consistent(&self) -> bool {
        self.engine.credits_consistent()
    }

    fn send(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<()> {
        if self.engine.send_now(dest, tag, data)? {
            return Ok(());
        }
        if self.engine.goes_direct(dest, data.len()) {
            return EngineBackend::send_direct(self, dest, tag, data);
        }
        backend::send_blocking(self, dest, tag, data)
    }

    fn recv(&mut self, src: Source, tag: TagMatch) -> Result<Message> {
        let req = Request {
            id: self.engine.irecv(src, tag)?,
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
            self.engine.cancel_recv(id, None)?;
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
    e: &mut EngineBackend,
    src: Source,
    tag: TagMatch,
    cap: usize,
    mut into: Option<&mut [u8]>,
) -> Result<Limited> {
    let id = e.engine.irecv_within(src, tag, cap)?;
    let r = wait_limited(e, id, src, into.as_deref_mut());
    if r.is_err() {
        e.engine.cancel_recv(id, into.as_deref())?;
    }
    r
}

/// The wait of [`recv_limited`] for its receive `id`.
fn wait_limited(
    e: &mut EngineBackend,
    id: RequestId,
    src: Source,
    mut into: Option<&mut [u8]>,
) -> Result<Limited> {
    let mut b = Backoff::new();
    // The end seen of the sender, and whether a round of progress came after it.
    let mut gone: Option<(Gone, bool)> = None;
    let mut check = EndCheck::default();
    let mut worked = true;
    loop {
        if into.is_some() {
            if let Some(env) = e.engine.take_into_done(id) {
                return Ok(Limited::Into(env));
            }
        }
        if e.engine.recv_done(id) {
            return e
                .engine
                .take_recv(id)
                .map(Limited::Message)
                .ok_or(Error::Protocol(ProtocolError::UnknownRequest(id)));
        }
        if let Some(refused) = e.engine.take_refused(id) {
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
        worked = e.round(lent)?;
        if worked {
            b.reset();
        }
        if let Some((g, false)) = gone.take() {
            gone = Some((g, true));
        } else if check.due(worked) {
            // One more round takes what an ended rank sent, or nothing will.
            gone = gone::engine_gone(&e.engine, src, true, "recv").map(|g| (g, false));
        }
        if gone.is_none() && !worked {
            Backend::snooze(e, &mut b);
        }
    }
}
