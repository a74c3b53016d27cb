//! Progress on the native path: completing posted receives (headers, parts of large
//! messages, in matching order) and sends, and draining unexpected messages out of MPI.

use super::*;
use crate::comm::error::{FabricError, ProtocolError};
use crate::protocol::request::RequestId;

impl MpiNative {
    /// The error of a large message from `source` whose parts brought `got` bytes where
    /// its header announced `total` (the sender sent less than it announced).
    fn short_parts(&self, source: usize, got: usize, total: usize) -> Error {
        Error::Fabric(FabricError::BadPacket {
            rank: self.rank,
            from: Sender::Rank(source),
            bytes: got,
            what: format!("parts of {got} bytes for a message of {total}"),
        })
    }

    /// Takes the first message matching `(s, t)` on `chan` out of MPI, if one is there.
    pub(super) fn probe_one(&mut self, chan: usize, s: c_int, t: c_int) -> Result<Option<Message>> {
        let Some(matched) = ffi::improbe(&self.chans[chan].msgs, s, t)? else {
            return Ok(None);
        };
        let n = matched.len();
        // The length is the peer's: reserved without aborting.
        let mut buf: Vec<u8> = Vec::new();
        buf.try_reserve_exact(n).map_err(|e| {
            Error::Fabric(FabricError::MessageAlloc {
                rank: self.rank,
                peer: matched.status().MPI_SOURCE as usize,
                bytes: n as u64,
                source: e,
            })
        })?;
        let status = matched.recv_append(&mut buf)?;
        self.received += 1;
        let (source, mtag) = (status.MPI_SOURCE, status.MPI_TAG);
        let m = self.finish_header(chan, source, mtag, buf, n, None)?;
        Ok(m)
    }

    /// A message or large header of `n` bytes in `buf` from `source` with `mtag` on
    /// `chan`: the message (a large one's parts received here, blocking: the sender posted
    /// them with the header), or, when `parts_for` is given (a posted receive), `None`
    /// after posting the parts receives into that receive's state.
    pub(super) fn finish_header(
        &mut self,
        chan: usize,
        source: c_int,
        mtag: c_int,
        mut buf: Vec<u8>,
        n: usize,
        parts_for: Option<RequestId>,
    ) -> Result<Option<Message>> {
        let tag = Self::ballast_tag(chan, mtag);
        let src = source_rank(source)?;
        self.note_peer(src);
        let kind = if n == 0 { u8::MAX } else { buf[n - 1] };
        match kind {
            KIND_WHOLE => {
                let data = if n - 1 <= buf.capacity() / 2 {
                    let data = buf[..n - 1].to_vec();
                    // A posted receive's buffer: for the next one.
                    self.keep_head(buf);
                    data
                } else {
                    buf.truncate(n - 1);
                    buf
                };
                Ok(Some(Message {
                    source: src,
                    tag,
                    data,
                }))
            }
            KIND_LARGE if n == LARGE_HEADER => {
                let bytes = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
                // Earlier posted receives that could have matched this sender and tag have
                // matched earlier messages: their parts come first.
                self.settle_earlier(chan, source, mtag, parts_for)?;
                let mut data = Vec::new();
                // (A length beyond usize fails the reservation too.)
                if let Err(e) = data.try_reserve_exact(usize::try_from(bytes).unwrap_or(usize::MAX)) {
                    // Kept, not lost: its parts stay in MPI until it fits
                    // (`retry_deferred`); a posted receive leaves the posting order (its
                    // header request completed) and gets it then, unless withdrawn.
                    if let Some(id) = parts_for {
                        self.recvs.retain(|r| r.id != id);
                    }
                    self.deferred.push_back(Deferred {
                        chan,
                        source: src,
                        mtag,
                        bytes,
                        owner: parts_for,
                        matched: parts_for,
                    });
                    return Err(Error::Fabric(FabricError::MessageAlloc {
                        rank: self.rank,
                        peer: src,
                        bytes,
                        source: e,
                    }));
                }
                let total = bytes as usize;
                match parts_for {
                    None => {
                        while data.len() < total {
                            if recv_append(&self.chans[chan].parts, self.rank, src, mtag, &mut data)? == 0 {
                                return Err(Error::Fabric(FabricError::BadPacket {
                                    rank: self.rank,
                                    from: Sender::Rank(src),
                                    bytes: 0,
                                    what: format!("empty part at {} of {total} bytes", data.len()),
                                }));
                            }
                        }
                        Ok(Some(Message {
                            source: src,
                            tag,
                            data,
                        }))
                    }
                    Some(id) => {
                        let i = self
                            .recvs
                            .iter()
                            .position(|r| r.id == id)
                            .ok_or(Error::Protocol(ProtocolError::UnknownRequest(id)))?;
                        let recv = PartsRecv::post(
                            &self.chans[chan].parts,
                            source,
                            mtag,
                            data,
                            total,
                            self.part_bytes,
                        )?;
                        self.recvs[i].state = RecvState::Parts {
                            recv,
                            total,
                            source: src,
                            tag,
                        };
                        Ok(None)
                    }
                }
            }
            k => Err(Error::Fabric(FabricError::BadPacket {
                rank: self.rank,
                from: Sender::Rank(src),
                bytes: n,
                what: format!("unknown kind {k}"),
            })),
        }
    }

    /// Takes the deferred large messages (see [`Deferred`]), in order, once their bytes
    /// can be reserved: the parts are received (the sender posted them with the header) and
    /// each goes to the receive that still waits for it, else into the unexpected queue in
    /// its place. [`FabricError::MessageAlloc`](crate::comm::error::FabricError::MessageAlloc) again while one cannot: nothing may take a
    /// message out of MPI or match one before it, so the callers stop there.
    #[inline]
    pub(super) fn retry_deferred(&mut self) -> Result<()> {
        // Nothing deferred (always, but after a refused reservation): no call.
        if self.deferred.is_empty() {
            return Ok(());
        }
        self.retry_deferred_all()
    }

    /// [`MpiNative::retry_deferred`] once something is deferred.
    #[cold]
    fn retry_deferred_all(&mut self) -> Result<()> {
        while let Some(d) = self.deferred.pop_front() {
            self.take_deferred(d)?;
        }
        Ok(())
    }

    /// [`MpiNative::retry_deferred`] for `d`.
    fn take_deferred(&mut self, d: Deferred) -> Result<()> {
        let mut data = Vec::new();
        if let Err(e) = data.try_reserve_exact(usize::try_from(d.bytes).unwrap_or(usize::MAX)) {
            let (peer, bytes) = (d.source, d.bytes);
            self.deferred.push_front(d);
            return Err(Error::Fabric(FabricError::MessageAlloc {
                rank: self.rank,
                peer,
                bytes,
                source: e,
            }));
        }
        let total = d.bytes as usize;
        while data.len() < total {
            if recv_append(&self.chans[d.chan].parts, self.rank, d.source, d.mtag, &mut data)? == 0 {
                return Err(Error::Fabric(FabricError::BadPacket {
                    rank: self.rank,
                    from: Sender::Rank(d.source),
                    bytes: 0,
                    what: format!("empty part at {} of {total} bytes", data.len()),
                }));
            }
        }
        let m = Message {
            source: d.source,
            tag: Self::ballast_tag(d.chan, d.mtag),
            data,
        };
        match (d.owner, d.matched) {
            (Some(id), _) => {
                self.done_recvs.insert(id, m);
            }
            (None, Some(recv)) => self.unexpected.push_matched(recv, (d.chan, m)),
            (None, None) => self.unexpected.push_back((d.chan, m)),
        }
        Ok(())
    }

    /// Withdraws blocking receive `id` whose wait failed, as the engine's `cancel_recv`
    /// does, so that no message is left to it: from the deferred message it was matched
    /// to, if any (which then goes to a later receive); and, after `error` out of memory
    /// (another message's: the communicator works on), from MPI when it is still posted
    /// there ([`MpiNative::cancel_posted`]), and a message it already got (completed in
    /// the round of progress that failed: [`MpiNative::give_back`]) goes back in its place.
    pub(super) fn withdraw(&mut self, id: RequestId, error: &Error) {
        if matches!(
            error,
            Error::Fabric(FabricError::MessageAlloc { .. }) | Error::Alloc(_)
        ) {
            // Best effort: the wait's own error is the one reported.
            let _ = self.cancel_posted(id);
            self.give_back(id);
        }
        for d in self.deferred.iter_mut().filter(|d| d.owner == Some(id)) {
            d.owner = None;
        }
    }

    /// The message blocking receive `id` (withdrawn) already got goes to the unexpected
    /// queue's front in its receive's place (MPI matched it ahead of every message of its
    /// source and tag still in MPI), where the next receive finds it: a whole one
    /// (`scratch_done`, or `done_recvs`), or a large one whose header a `recv_into` took
    /// (`scratch_parts`: its parts are still in MPI), which becomes a deferred message.
    /// Left in `scratch_done`, it was overwritten by the next blocking receive's message,
    /// and left posted in MPI, the receive took a later message of its sender (issue 33).
    fn give_back(&mut self, id: RequestId) {
        if let Some(m) = self.done_recvs.remove(&id).or_else(|| self.scratch_done.take()) {
            let m = self.own(m);
            let chan = Self::wire_tag(m.tag).0;
            self.unexpected.push_matched(id, (chan, m));
        }
        if let Some(p) = self.scratch_parts.take() {
            self.deferred.push_back(Deferred {
                chan: p.chan,
                source: p.source,
                mtag: p.mtag,
                bytes: p.bytes,
                owner: None,
                matched: Some(id),
            });
        }
    }

    /// Cancels receive `id` if it still waits for its header in MPI; a message MPI
    /// matched to it meanwhile is received (a large one's parts too: the sender posted
    /// them with its header) and queued first, where a receive posted now finds it (a
    /// blocking receive's whole message through [`MpiNative::give_back`]).
    fn cancel_posted(&mut self, id: RequestId) -> Result<()> {
        let Some(i) = self
            .recvs
            .iter()
            .position(|r| r.id == id && matches!(r.state, RecvState::Header { .. }))
        else {
            return Ok(());
        };
        let RecvState::Header { recv, .. } = &mut self.recvs[i].state else {
            unreachable!("header state")
        };
        let Some(status) = recv.cancel_in_place()? else {
            if let RecvState::Header { mut recv, .. } = self.recvs.remove(i).state {
                if let Some(buf) = recv.take_filled() {
                    self.keep_head(buf);
                }
            }
            return Ok(());
        };
        let chan = self.recvs[i].chan;
        if !self.header_done(i, status)? {
            let j = self
                .recvs
                .iter()
                .position(|r| r.id == id)
                .ok_or(Error::Protocol(ProtocolError::UnknownRequest(id)))?;
            let r = self.recvs.remove(j);
            let RecvState::Parts {
                mut recv,
                total,
                source,
                tag,
            } = r.state
            else {
                unreachable!("parts state")
            };
            // The sender posted the parts with the header: waiting completes.
            recv.wait(&mut self.statuses)?;
            let data = recv
                .take_data()
                .map_err(|got| self.short_parts(source, got, total))?;
            self.done_recvs.insert(id, Message { source, tag, data });
        }
        if let Some(m) = self.done_recvs.remove(&id) {
            let m = self.own(m);
            self.unexpected.push_matched(id, (chan, m));
        }
        Ok(())
    }

    /// Completes (waiting: MPI matched them already) the posted receives before receive
    /// `before` (all of them when `None`) that could match `(source, mtag)` on `chan` and
    /// still wait for their header, in posting order, so that their parts are posted first.
    pub(super) fn settle_earlier(
        &mut self,
        chan: usize,
        source: c_int,
        mtag: c_int,
        before: Option<RequestId>,
    ) -> Result<()> {
        let mut j = 0;
        while j < self.recvs.len() && Some(self.recvs[j].id) != before {
            let r = &self.recvs[j];
            let matches = r.chan == chan
                && (r.src == any_source() || r.src == source)
                && (r.tag == any_tag() || r.tag == mtag);
            if matches {
                if let RecvState::Header { recv, .. } = &mut self.recvs[j].state {
                    let mut status = empty_status();
                    recv.wait(&mut status)?;
                    let removed = self.header_done(j, status)?;
                    if removed {
                        continue;
                    }
                }
            }
            j += 1;
        }
        Ok(())
    }

    /// The header request of receive `i` completed with `status`. Returns true when the
    /// receive was removed from the list (a whole message), false when it now waits for
    /// its parts.
    pub(super) fn header_done(&mut self, i: usize, status: Status) -> Result<bool> {
        self.received += 1;
        let chan = self.recvs[i].chan;
        let RecvState::Header { recv, scratch } = &mut self.recvs[i].state else {
            unreachable!("header state")
        };
        let scratch = *scratch;
        if scratch {
            self.scratch_mark = Some(self.unexpected.len());
        }
        // The `n <= head_bytes` bytes (the receive's count, taken by its test) MPI wrote.
        let buf = recv.take_filled().unwrap_or_default();
        let n = buf.len();
        if n == LARGE_HEADER && buf[n - 1] == KIND_LARGE && scratch {
            let bytes = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
            if self.into_cap.is_some_and(|cap| bytes <= cap as u64) {
                // The blocking recv_into's message fits its buffer: the parts go there
                // (`recv::Take::large`), after those of earlier receives.
                let id = self.recvs[i].id;
                self.settle_earlier(chan, status.MPI_SOURCE, status.MPI_TAG, Some(id))?;
                let i = self
                    .recvs
                    .iter()
                    .position(|r| r.id == id)
                    .ok_or(Error::Protocol(ProtocolError::UnknownRequest(id)))?;
                self.recvs.remove(i);
                self.recv_scratch = buf;
                let source = source_rank(status.MPI_SOURCE)?;
                self.note_peer(source);
                self.scratch_parts = Some(recv::Parts {
                    chan,
                    source,
                    mtag: status.MPI_TAG,
                    tag: Self::ballast_tag(chan, status.MPI_TAG),
                    bytes,
                });
                return Ok(true);
            }
        }
        if n == LARGE_HEADER && buf[n - 1] == KIND_LARGE {
            let header = buf[..n].to_vec();
            if scratch {
                self.recv_scratch = buf;
            } else {
                self.keep_head(buf);
            }
            let id = self.recvs[i].id;
            self.finish_header(chan, status.MPI_SOURCE, status.MPI_TAG, header, n, Some(id))?;
            return Ok(false);
        }
        let m = if scratch {
            let kind = if n == 0 { u8::MAX } else { buf[n - 1] };
            let m = if kind == KIND_WHOLE {
                let src = source_rank(status.MPI_SOURCE)?;
                self.note_peer(src);
                Ok(Some(Message {
                    source: src,
                    tag: Self::ballast_tag(chan, status.MPI_TAG),
                    data: buf[..n - 1].to_vec(),
                }))
            } else {
                Err(Error::Fabric(FabricError::BadPacket {
                    rank: self.rank,
                    from: Sender::Rank(status.MPI_SOURCE.max(0) as usize),
                    bytes: n,
                    what: format!("kind {kind} where a whole message was expected"),
                }))
            };
            self.recv_scratch = buf;
            m
        } else if n >= 1 && buf[n - 1] == KIND_WHOLE && self.is_limited(self.recvs[i].id) {
            // A receive of `irecv_within`: the message stays in the receive's buffer, read
            // there by `wait_read` (which keeps the buffer for the next receive) or given
            // bytes of its own when handed out as a `Message` (`own`).
            let src = source_rank(status.MPI_SOURCE)?;
            self.note_peer(src);
            let mut data = buf;
            data.truncate(n - 1);
            Ok(Some(Message {
                source: src,
                tag: Self::ballast_tag(chan, status.MPI_TAG),
                data,
            }))
        } else {
            self.finish_header(chan, status.MPI_SOURCE, status.MPI_TAG, buf, n, None)
        };
        let r = self.recvs.remove(i);
        let m = m?.ok_or_else(|| {
            Error::Fabric(FabricError::BadPacket {
                rank: self.rank,
                from: Sender::Rank(status.MPI_SOURCE.max(0) as usize),
                bytes: n,
                what: "a large message's header where a whole message was expected".into(),
            })
        })?;
        if scratch {
            self.scratch_done = Some(m);
        } else {
            self.done_recvs.insert(r.id, m);
        }
        Ok(true)
    }

    /// Tests the posted receives in posting order.
    pub(super) fn test_recvs(&mut self) -> Result<bool> {
        let mut work = false;
        let mut i = 0;
        while i < self.recvs.len() {
            let mut status = empty_status();
            match &mut self.recvs[i].state {
                RecvState::Header { recv, .. } => {
                    if recv.test(&mut status)? {
                        work = true;
                        // Completing it may complete (and remove) earlier receives too.
                        let (id, len) = (self.recvs[i].id, self.recvs.len());
                        let removed = self.header_done(i, status)?;
                        let earlier = len - self.recvs.len() - usize::from(removed);
                        i -= earlier;
                        if removed {
                            continue;
                        }
                        debug_assert_eq!(self.recvs[i].id, id);
                    }
                }
                RecvState::Parts { recv, .. } => {
                    if recv.test(&mut self.statuses)? {
                        work = true;
                        let r = self.recvs.remove(i);
                        let RecvState::Parts {
                            mut recv,
                            total,
                            source,
                            tag,
                        } = r.state
                        else {
                            unreachable!("parts state")
                        };
                        // All `total` bytes, unless the sender sent less than it announced.
                        let data = recv
                            .take_data()
                            .map_err(|got| self.short_parts(source, got, total))?;
                        self.done_recvs.insert(r.id, Message { source, tag, data });
                        continue;
                    }
                }
            }
            i += 1;
        }
        Ok(work)
    }

    pub(super) fn test_sends(&mut self) -> Result<bool> {
        let mut work = false;
        let mut i = 0;
        while i < self.sends.len() {
            if self.sends[i].send.test()? {
                work = true;
                let mut s = self.sends.swap_remove(i);
                if s.scratch {
                    self.send_scratch = s.send.take_head().unwrap_or_default();
                }
                self.done_sends.insert(s.id, ());
                continue;
            }
            i += 1;
        }
        Ok(work)
    }

    /// Takes every message no receive is posted for out of MPI into the unexpected queue.
    pub(super) fn drain(&mut self) -> Result<bool> {
        let mut work = false;
        for chan in [USER, RESERVED] {
            while let Some(m) = self.probe_one(chan, any_source(), any_tag())? {
                self.unexpected.push_back((chan, m));
                work = true;
            }
        }
        Ok(work)
    }

    /// One round of progress: tests sends and posted receives, and every
    /// [`DRAIN_EVERY`] calls takes unexpected messages out of MPI.
    pub fn progress(&mut self) -> Result<bool> {
        self.calls = self.calls.wrapping_add(1);
        self.poll(self.calls.is_multiple_of(DRAIN_EVERY))
    }

    /// One round of progress; with `housekeeping`, also looks for an abort notice and
    /// drains unexpected messages (each an `MPI_Improbe`, which costs about what a receive
    /// does in Open MPI: the blocking calls do it only after [`DRAIN_EVERY`] idle polls in a
    /// row, so a ping-pong never pays for it).
    pub(super) fn poll(&mut self, housekeeping: bool) -> Result<bool> {
        if housekeeping {
            if self.abort.poll() {
                return Err(Error::Fabric(FabricError::Aborted));
            }
        } else if self.abort.is_set() {
            return Err(Error::Fabric(FabricError::Aborted));
        }
        self.retry_deferred()?;
        let mut work = false;
        if !self.sends.is_empty() {
            work |= self.test_sends()?;
        }
        if !self.recvs.is_empty() {
            work |= self.test_recvs()?;
        }
        // Not once the blocking receive's message is in (until its wait takes it): a later
        // message of the same sender taken out of MPI now would take a recv_into's large
        // message's parts (`scratch_parts`), or be queued ahead of a message that
        // recv_into or recv_within refuses and queues.
        if housekeeping && self.scratch_parts.is_none() && self.scratch_done.is_none() {
            work |= self.drain()?;
        }
        Ok(work)
    }
}
