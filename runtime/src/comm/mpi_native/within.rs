//! Limited receives and cancels on the native path: [`MpiNative::irecv_within`] (a posted
//! receive whose message is checked against its limit when it completes, and left queued
//! in its receive's place when longer) and [`MpiNative::cancel_recv`] (`MPI_Cancel` of a
//! receive still waiting in MPI for its message).

use super::*;
use crate::comm::backend::truncated;

/// A receive of [`MpiNative::irecv_within`]: its limit, and the envelope of the longer
/// message it refused at once (queued already when it was posted).
pub(super) struct Limit {
    id: RequestId,
    cap: usize,
    refused: Option<Envelope>,
}

impl MpiNative {
    /// Posts a receive of a message of at most `cap` bytes: a longer one already queued
    /// ends it refused at once; one MPI matches to it later is refused when it completes
    /// ([`MpiNative::take_refused`]). Errors as [`MpiNative::irecv`].
    pub fn irecv_within(&mut self, src: Source, tag: TagMatch, cap: usize) -> Result<RequestId> {
        let (chan, s, t) = self.wire_match(src, tag)?;
        self.retry_deferred()?;
        if !self.unexpected.is_empty() {
            if let Some(e) = self.queued_too_long(chan, s, t, cap) {
                let id = self.new_id();
                self.limits.push(Limit {
                    id,
                    cap,
                    refused: Some(e),
                });
                return Ok(id);
            }
        }
        let id = self.post_matched(chan, s, t, false)?;
        self.limits.push(Limit {
            id,
            cap,
            refused: None,
        });
        Ok(id)
    }

    /// The limit of receive `id`, taken out of the list (it has ended).
    fn forget_limit(&mut self, id: RequestId) -> Option<Limit> {
        let i = self.limits.iter().position(|l| l.id == id)?;
        Some(self.limits.swap_remove(i))
    }

    /// Receive `id` of `irecv_within` refused a longer message: its envelope, once. A
    /// message that completed it and is longer than its limit goes back to the unexpected
    /// queue in its receive's place (MPI matched it ahead of every later message of its
    /// source and tag), first for the next receive.
    pub fn take_refused(&mut self, id: RequestId) -> Option<Envelope> {
        if self.limits.is_empty() {
            return None;
        }
        let l = self.limits.iter().find(|l| l.id == id)?;
        if l.refused.is_none() && self.done_recvs.get(&id)?.data.len() <= l.cap {
            return None;
        }
        let l = self.forget_limit(id)?;
        if let Some(e) = l.refused {
            return Some(e);
        }
        let m = self.done_recvs.remove(&id)?;
        Some(self.refuse(id, m))
    }

    /// Message `m` of receive `id`, longer than its limit, back to the queue's front; its
    /// envelope.
    fn refuse(&mut self, id: RequestId, m: Message) -> Envelope {
        let m = self.own(m);
        let e = m.envelope();
        let chan = Self::wire_tag(m.tag).0;
        self.unexpected.push_matched(id, (chan, m));
        e
    }

    /// True when receive `id` is one of `irecv_within`.
    #[inline]
    pub(super) fn is_limited(&self, id: RequestId) -> bool {
        !self.limits.is_empty() && self.limits.iter().any(|l| l.id == id)
    }

    /// The wait of receive `id` of `irecv_within`: as [`MpiNative::wait_posted`], then the
    /// limit: [`CommError::Truncated`](crate::comm::error::CommError::Truncated) for a longer
    /// message, left queued.
    pub(super) fn wait_within(&mut self, id: RequestId) -> Result<Message> {
        let m = self.wait_limited(id)?;
        Ok(self.own(m))
    }

    /// [`MpiNative::wait_within`] handing the message's bytes to `read` where they lie
    /// (the receive's buffer, then kept for the next receive: no `Vec` per message); its
    /// envelope.
    pub(super) fn wait_within_read(
        &mut self,
        id: RequestId,
        read: &mut dyn FnMut(&[u8]),
    ) -> Result<Envelope> {
        match self.read_alone(id, read) {
            Ok(Some(e)) => return Ok(e),
            Ok(None) => {}
            Err(e) => {
                // As `wait_limited` after a failed wait.
                self.forget_limit(id);
                self.withdraw(id, &e);
                return Err(e);
            }
        }
        let m = self.wait_limited(id)?;
        read(&m.data);
        let e = m.envelope();
        self.keep_head(m.data);
        Ok(e)
    }

    /// The latency path of [`MpiNative::wait_within_read`] (a loop of one `irecv_within`
    /// at a time, C's `ballast_irecv_into`): while receive `id` (not from this rank itself)
    /// is the only request in flight and the only limited one, with nothing deferred, its
    /// `MPI_Test` in place, at most [`BUSY_POLLS`] times, as [`MpiNative::spin_alone`] does.
    /// A whole message within the limit is read in the receive's buffer, which is kept for
    /// the next receive, and the receive ends there: its envelope, without the completed
    /// requests' map or a search of the lists. Anything else that completes it (a large
    /// message's header, a longer message, a bad kind byte) is taken in as every completed
    /// header is ([`MpiNative::header_done`]), and the general wait goes on (`None`), as
    /// it does when no message came. Errors: MPI's, an abort, `header_done`'s.
    #[inline]
    fn read_alone(&mut self, id: RequestId, read: &mut dyn FnMut(&[u8])) -> Result<Option<Envelope>> {
        let cap = match (self.recvs.as_slice(), self.limits.as_slice()) {
            ([r], [l])
                if l.id == id
                    && l.refused.is_none()
                    && r.src != self.rank as c_int
                    && matches!(r.state, RecvState::Header { scratch: false, .. })
                    && self.only_request(id) =>
            {
                l.cap
            }
            _ => return Ok(None),
        };
        let Some(status) = self.poll_alone()? else {
            return Ok(None);
        };
        let RecvState::Header { recv, .. } = &mut self.recvs[0].state else {
            unreachable!("the header receive polled above")
        };
        // The bytes MPI wrote: a whole message of at most `cap` bytes and its kind byte?
        let whole = matches!(recv.bytes(), Some([body @ .., KIND_WHOLE]) if body.len() <= cap);
        if !whole || status.MPI_SOURCE < 0 {
            self.header_done(0, status)?;
            return Ok(None);
        }
        let source = status.MPI_SOURCE as usize;
        let Some(PendingRecv {
            chan,
            state: RecvState::Header { mut recv, .. },
            ..
        }) = self.recvs.pop()
        else {
            unreachable!("the receive tested above")
        };
        self.limits.clear();
        // The message, without its kind byte.
        let buf = recv.take_filled().unwrap_or_default();
        let len = buf.len().saturating_sub(1);
        read(&buf[..len]);
        self.keep_head(buf);
        self.received += 1;
        self.note_peer(source);
        Ok(Some(Envelope {
            source,
            tag: Self::ballast_tag(chan, status.MPI_TAG),
            len,
        }))
    }

    /// [`MpiNative::wait_within`]'s message, still in its receive's buffer.
    fn wait_limited(&mut self, id: RequestId) -> Result<Message> {
        if let Some(e) = self.take_refused(id) {
            return Err(truncated(self.rank, e));
        }
        let r = self.wait_posted(id);
        let cap = self.forget_limit(id).map_or(usize::MAX, |l| l.cap);
        let m = match r {
            Ok(m) => m,
            Err(e) => {
                self.withdraw(id, &e);
                return Err(e);
            }
        };
        if m.data.len() > cap {
            let e = self.refuse(id, m);
            return Err(truncated(self.rank, e));
        }
        Ok(m)
    }

    /// Bytes of the receive buffers that completed receives of `irecv_within` hold until
    /// their wait (counted in the footprint, as while they were posted).
    pub(super) fn held_heads(&self) -> u64 {
        if self.limits.is_empty() || self.done_recvs.is_empty() {
            return 0;
        }
        self.limits
            .iter()
            .filter_map(|l| self.done_recvs.get(&l.id))
            .filter(|m| m.data.capacity() == self.head_bytes)
            .map(|m| m.data.capacity() as u64)
            .sum()
    }

    /// Forgets the limit of a receive whose message was taken.
    #[inline]
    pub(super) fn taken(&mut self, id: RequestId) {
        if !self.limits.is_empty() {
            self.forget_limit(id);
        }
    }

    /// Withdraws receive `id` if MPI has not matched a message to it: `MPI_Cancel` of its
    /// header receive, true when that cancelled it. False, and the receive goes on, when a
    /// message has matched it: already complete, its parts arriving, or matched in MPI
    /// meanwhile (then taken in as its progress would: it completes, or waits for its
    /// parts). Errors: MPI's.
    pub fn cancel_recv(&mut self, id: RequestId) -> Result<bool> {
        let Some(i) = self.recvs.iter().position(|r| r.id == id) else {
            return Ok(false);
        };
        let RecvState::Header { recv, .. } = &mut self.recvs[i].state else {
            return Ok(false);
        };
        match recv.cancel_in_place()? {
            None => {
                if let RecvState::Header { mut recv, .. } = self.recvs.remove(i).state {
                    if let Some(buf) = recv.take_filled() {
                        self.keep_head(buf);
                    }
                }
                self.forget_limit(id);
                Ok(true)
            }
            Some(status) => {
                self.header_done(i, status)?;
                Ok(false)
            }
        }
    }
}
