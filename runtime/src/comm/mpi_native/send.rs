//! Sending on the native path: small messages as one MPI message, large ones as a
//! header and parts; blocking and non-blocking sends and their completion.

use super::*;
use crate::comm::error::ProtocolError;
use crate::protocol::request::RequestId;

impl MpiNative {
    /// Posts `head` (and, for an `isend`'s large message, its parts from `body`) to `dest`.
    pub(super) fn post(
        &mut self,
        dest: usize,
        tag: Tag,
        head: Vec<u8>,
        body: Body,
        scratch: bool,
    ) -> Result<RequestId> {
        let (chan, mtag) = Self::wire_tag(tag);
        let d = dest as c_int;
        let mut send = OwnedSend::post(&self.chans[chan].msgs, d, mtag, head)?;
        if let Body::Owned(body) = body {
            if let Err(e) = send.post_body(&self.chans[chan].parts, d, mtag, body, self.part_bytes) {
                // The header is out: keep what was posted so it completes and is freed.
                let id = self.new_id();
                self.sends.push(PendingSend {
                    id,
                    send,
                    scratch,
                    to_self: dest == self.rank,
                });
                return Err(e);
            }
        }
        self.sent[dest] += 1;
        self.note_peer(dest);
        let id = self.new_id();
        self.sends.push(PendingSend {
            id,
            send,
            scratch,
            to_self: dest == self.rank,
        });
        Ok(id)
    }

    /// Starts sending a copy of `data` (the caller may reuse `data` at once). Never
    /// [`ProtocolError::WouldBlock`]: MPI queues it.
    pub fn isend(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<RequestId> {
        self.check_rank(dest)?;
        if data.len() <= self.eager {
            // The kept send buffer while nothing holds it (given back when the send
            // completes, `test_sends`): no allocation in a loop of one send at a time.
            let lent = self.send_scratch.capacity() == self.head_bytes;
            let mut head = if lent {
                std::mem::take(&mut self.send_scratch)
            } else {
                Vec::with_capacity(data.len() + 1)
            };
            head.clear();
            head.extend_from_slice(data);
            head.push(KIND_WHOLE);
            self.post(dest, tag, head, Body::Empty, lent)
        } else {
            let mut head = Vec::with_capacity(LARGE_HEADER);
            head.extend_from_slice(&(data.len() as u64).to_le_bytes());
            head.push(KIND_LARGE);
            let copy = crate::core::memory::try_copy(data, || {
                format!("the copy of a message of {} bytes to rank {dest}", data.len())
            })?;
            self.post(dest, tag, head, Body::Owned(copy), false)
        }
    }

    /// Sends `data` and returns when MPI no longer reads it (a small message from the
    /// kept send buffer, a large one's bytes straight from `data`), progressing meanwhile.
    #[inline]
    pub fn send(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<()> {
        self.check_rank(dest)?;
        let mut head = std::mem::take(&mut self.send_scratch);
        head.clear();
        // The small message first: the latency path tests one length.
        if data.len() <= self.eager {
            head.extend_from_slice(data);
            head.push(KIND_WHOLE);
            return self.send_small(dest, tag, head);
        }
        if dest == self.rank {
            // To itself: no receive is posted while this call waits, and an MPI_Send to
            // self with none posted never completes. A copy is sent instead (ENOMEM when it
            // does not fit, as on `local`), and this rank's own progress takes it out of
            // MPI into the unexpected queue.
            self.send_scratch = head;
            let id = self.isend(dest, tag, data)?;
            return self.wait_send(id, None);
        }
        head.extend_from_slice(&(data.len() as u64).to_le_bytes());
        head.push(KIND_LARGE);
        let id = self.post(dest, tag, head, Body::Empty, true)?;
        let (chan, mtag) = Self::wire_tag(tag);
        let part_bytes = self.part_bytes;
        // The parts read `data` in place: the scope waits for them before returning, also
        // on an error (as MPI_Send would block).
        ffi::send_parts_scoped(
            self,
            |n: &MpiNative| -> &SimpleCommunicator { &n.chans[chan].parts },
            dest as c_int,
            mtag,
            data,
            part_bytes,
            |n, posted, parts| {
                posted?;
                n.wait_send(id, Some(parts))
            },
        )
    }

    /// Waits for send `id` (and a blocking send's `parts`), progressing meanwhile.
    pub(super) fn wait_send(
        &mut self,
        id: RequestId,
        mut parts: Option<&mut ffi::CallerParts<'_>>,
    ) -> Result<()> {
        if parts.is_none() {
            // A small message is usually sent by now (MPI's eager path): one `MPI_Test`
            // of it first, without a round of `poll`.
            if let Some(i) = self.sends.iter().position(|s| s.id == id) {
                if self.sends[i].send.test()? {
                    let mut s = self.sends.swap_remove(i);
                    if s.scratch {
                        self.send_scratch = s.send.take_head().unwrap_or_default();
                    }
                    return Ok(());
                }
            }
        }
        let mut b = Idle::new();
        loop {
            if self.send_done(id)? && parts.as_mut().map_or(Ok(true), |p| p.test())? {
                break;
            }
            match self.poll(b.housekeeping()) {
                Ok(true) => b.reset(),
                Ok(false) => b.snooze(),
                Err(e) => return Err(e),
            }
        }
        self.finish_send(id);
        Ok(())
    }

    /// The blocking send of a small message in `head` (the kept send buffer): one
    /// `MPI_Isend`, tested until complete, progressing the rest meanwhile (no request
    /// bookkeeping: the latency path of a ping-pong).
    #[inline]
    pub(super) fn send_small(&mut self, dest: usize, tag: Tag, head: Vec<u8>) -> Result<()> {
        let (chan, mtag) = Self::wire_tag(tag);
        // The send owns `head` until it completed (tested below; on an early error moved
        // into `sends`, which holds it until complete).
        let mut send = OwnedSend::post(&self.chans[chan].msgs, dest as c_int, mtag, head)?;
        self.sent[dest] += 1;
        self.note_peer(dest);
        let mut b = Idle::new();
        loop {
            let failed = match send.test() {
                Ok(true) => {
                    self.send_scratch = send.take_head().unwrap_or_default();
                    return Ok(());
                }
                Ok(false) => match self.poll(b.housekeeping()) {
                    Ok(true) => {
                        b.reset();
                        None
                    }
                    Ok(false) => {
                        b.snooze();
                        None
                    }
                    Err(e) => Some(e),
                },
                Err(e) => Some(e),
            };
            if let Some(e) = failed {
                let id = self.new_id();
                self.sends.push(PendingSend {
                    id,
                    send,
                    scratch: false,
                    to_self: dest == self.rank,
                });
                return Err(e);
            }
        }
    }

    /// True when send `id` completed.
    pub fn send_done(&self, id: RequestId) -> Result<bool> {
        if self.done_sends.contains_key(&id) {
            return Ok(true);
        }
        if self.sends.iter().any(|s| s.id == id) {
            return Ok(false);
        }
        Err(Error::Protocol(ProtocolError::UnknownRequest(id)))
    }

    /// Forgets a completed send.
    pub fn finish_send(&mut self, id: RequestId) {
        self.done_sends.remove(&id);
    }

    /// True when every send completed.
    pub fn sends_drained(&self) -> bool {
        self.sends.is_empty()
    }

    /// True while a send of this rank to itself is in flight (a receive from itself may
    /// still get it; sends to other ranks cannot complete such a receive).
    pub(super) fn sends_to_self(&self) -> bool {
        self.sends.iter().any(|s| s.to_self)
    }
}
