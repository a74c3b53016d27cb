//! MPI's native path as a communicator's [`Backend`]: its own blocking send and receives
//! (one MPI message per Ballast message), no pool, credits or locked memory, no end check
//! (MPI tells no ends), and the plain idle wait.

use super::MpiNative;
use crate::comm::backend::Backend;
use crate::comm::collective::native::NativeCollectives;
use crate::comm::error::Result;
use crate::comm::gone::Gone;
use crate::comm::{Completion, Request};
use crate::core::backoff::Backoff;
use crate::core::config::TransportConfig;
use crate::core::footprint::{Footprint, MemoryLock};
use crate::core::pool::PoolStats;
use crate::protocol::connection::EndpointStats;
use crate::protocol::engine::DatagramStats;
use crate::protocol::matching::{Envelope, Message, Source, Tag, TagMatch};
use crate::protocol::request::RequestId;

impl Backend for MpiNative {
    fn rank(&self) -> usize {
        MpiNative::rank(self)
    }
    fn world_size(&self) -> usize {
        MpiNative::world_size(self)
    }
    fn config(&self) -> &TransportConfig {
        MpiNative::config(self)
    }
    fn notes(&self) -> &[String] {
        MpiNative::notes(self)
    }
    /// Nothing is locked.
    fn memory_lock(&self) -> MemoryLock {
        MemoryLock::default()
    }
    fn is_mpi_native(&self) -> bool {
        true
    }
    fn isend(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<RequestId> {
        MpiNative::isend(self, dest, tag, data)
    }
    fn irecv(&mut self, src: Source, tag: TagMatch) -> Result<RequestId> {
        MpiNative::irecv(self, src, tag)
    }
    fn irecv_within(&mut self, src: Source, tag: TagMatch, cap: usize) -> Result<RequestId> {
        MpiNative::irecv_within(self, src, tag, cap)
    }
    fn take_refused(&mut self, id: RequestId) -> Option<Envelope> {
        MpiNative::take_refused(self, id)
    }
    fn cancel_recv(&mut self, id: RequestId) -> Result<bool> {
        MpiNative::cancel_recv(self, id)
    }
    fn try_take(&mut self, src: Source, tag: TagMatch) -> Option<Message> {
        MpiNative::try_take(self, src, tag)
    }
    fn peek(&mut self, src: Source, tag: TagMatch) -> Option<Envelope> {
        MpiNative::peek(self, src, tag)
    }
    fn recv_done(&self, id: RequestId) -> bool {
        MpiNative::recv_done(self, id)
    }
    fn send_done(&self, id: RequestId) -> Result<bool> {
        MpiNative::send_done(self, id)
    }
    fn take_recv(&mut self, id: RequestId) -> Option<Message> {
        MpiNative::take_recv(self, id)
    }
    fn finish_send(&mut self, id: RequestId) {
        MpiNative::finish_send(self, id)
    }
    fn progress(&mut self) -> Result<bool> {
        MpiNative::progress(self)
    }
    fn sends_drained(&self) -> bool {
        MpiNative::sends_drained(self)
    }
    fn mark_done(&mut self) {
        MpiNative::mark_done(self)
    }
    fn all_done(&mut self) -> bool {
        MpiNative::all_done(self)
    }
    fn snooze(&self, b: &mut Backoff) {
        b.snooze()
    }
    /// MPI tells no ends.
    fn gone(&self, _peer: Source, _recv: bool, _op: &'static str) -> Option<Gone> {
        None
    }
    /// `MPI_Abort`: never returns.
    fn abort(&mut self, code: i32) -> Result<()> {
        self.abort.abort_job(code)
    }
    fn footprint(&self) -> Footprint {
        MpiNative::footprint(self)
    }
    fn pool_stats(&self) -> PoolStats {
        MpiNative::pool_stats(self)
    }
    fn endpoint_stats(&self) -> EndpointStats {
        MpiNative::endpoint_stats(self)
    }
    /// No datagram path.
    fn datagram_stats(&self) -> Option<DatagramStats> {
        None
    }
    /// No credits: MPI does its own flow control.
    fn credits_consistent(&self) -> bool {
        true
    }

    /// Every message is sent at once.
    #[inline]
    fn send(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<()> {
        MpiNative::send(self, dest, tag, data)
    }
    fn recv(&mut self, src: Source, tag: TagMatch) -> Result<Message> {
        MpiNative::recv(self, src, tag)
    }
    fn recv_within(
        &mut self,
        src: Source,
        tag: TagMatch,
        cap: usize,
    ) -> Result<std::result::Result<Message, Envelope>> {
        MpiNative::recv_within(self, src, tag, cap)
    }
    fn recv_into(
        &mut self,
        src: Source,
        tag: TagMatch,
        buf: &mut [u8],
    ) -> Result<std::result::Result<Envelope, Envelope>> {
        MpiNative::recv_into(self, src, tag, buf)
    }
    /// MPI's own collectives (`coll.rs`).
    fn native_collectives(&mut self) -> Option<&mut dyn NativeCollectives> {
        Some(self)
    }
    /// A receive waits in MPI for its posted receive; a send as a blocking send does
    /// (`MpiNative::wait_send`: busy `MPI_Test`s first, housekeeping only once the polls
    /// have been idle for a while). Both as the blocking calls, so that `irecv`/`isend`
    /// then `wait` cost what `recv`/`send` do. A receive whose wait failed is withdrawn
    /// (`MpiNative::withdraw`): a message deferred for memory, or matched to it, goes to a
    /// later receive (as on the engine).
    fn wait(&mut self, req: Request, _op: &'static str) -> Result<Completion> {
        if !req.recv {
            self.wait_send(req.id, None)?;
            return Ok(Completion::Sent);
        }
        if self.is_limited(req.id) {
            return self.wait_within(req.id).map(Completion::Received);
        }
        let r = self.wait_posted(req.id);
        if let Err(e) = &r {
            self.withdraw(req.id, e);
        }
        r.map(Completion::Received)
    }
    /// A receive of `irecv_within` is read in its receive's buffer, which is then kept for
    /// the next receive (`MpiNative::wait_within_read`).
    fn wait_read(
        &mut self,
        req: Request,
        op: &'static str,
        read: &mut dyn FnMut(&[u8]),
    ) -> Result<Option<Envelope>> {
        if req.recv && self.is_limited(req.id) {
            return self.wait_within_read(req.id, read).map(Some);
        }
        Ok(match Backend::wait(self, req, op)? {
            Completion::Received(m) => {
                read(&m.data);
                Some(m.envelope())
            }
            Completion::Sent => None,
        })
    }
}
