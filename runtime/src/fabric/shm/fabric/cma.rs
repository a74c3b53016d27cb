//! [`ShmFabric`]'s direct path ([`DirectPath`]): large messages by CMA, the descriptors it
//! sends and reads, their answers, the quiet wait of a blocking send whose poll stopped
//! (the bookkeeping is `super::super::direct`'s; the design in docs/fabrics/shm.md).

use super::*;

impl ShmFabric {
    /// Starts direct message `data` (at `addr`, `len` bytes) to `dest`: its descriptor into
    /// `dest`'s control ring, or held behind an earlier direct message to it. Its id.
    pub(super) fn begin_direct(
        &mut self,
        dest: usize,
        h: &PacketHeader,
        addr: u64,
        len: usize,
        out: Out,
    ) -> Result<u32> {
        self.target(dest)?;
        let blocked = self.direct.blocked(dest);
        let id = self.direct.begin(dest, out);
        let cell = Cell {
            src: self.rank as u32,
            kind: KIND_DIRECT,
            more: h.more,
            tag: h.tag,
            total: len as u64,
            offset: addr,
            len: 0,
        };
        if blocked {
            self.direct.hold(dest, Held::Descriptor(cell, id));
        } else {
            self.queue_control(dest, cell)?;
            self.direct.pushed(dest, id);
        }
        Ok(id)
    }

    /// The answer from `src` to the direct message in flight to it: what was held for `src`
    /// goes, in order, and an owned message's send completes. Errors: an answer this rank
    /// did not expect, or a failed read (named, with the way out).
    pub(super) fn direct_answered(
        &mut self,
        src: usize,
        status: u32,
        on_event: &mut dyn FnMut(Event<'_>) -> Flow,
    ) -> std::result::Result<(), Halt> {
        let done = self.direct.answered(src, status).ok_or_else(|| {
            self.shm_err(Some(src), "an answer to a direct message never sent to it".into())
        })?;
        for item in self.direct.release(src) {
            match item {
                Held::Packet(cell, payload) => self.push_packet(src, cell, &payload)?,
                Held::Descriptor(cell, id) => {
                    self.queue_control(src, cell)?;
                    self.direct.pushed(src, id);
                }
            }
        }
        if status != 0 {
            return Err(self
                .shm_err(
                    Some(src),
                    format!(
                        "it could not read a message of this rank by process_vm_readv ({}): set \
                         BALLAST_SHM_CMA=off to send large messages through the rings",
                        std::io::Error::from_raw_os_error(status as i32)
                    ),
                )
                .into());
        }
        if let Some(wr_id) = done {
            go(on_event(Event::SendComplete(wr_id)))?;
        }
        Ok(())
    }

    /// Reads direct message `c` (the descriptor at the head of the control ring, from rank
    /// `c.src`) out of its sender's memory, then takes the descriptor and answers it (done,
    /// or the read's errno). Errors: [`FabricError::Aborted`] when the job failed (a sender
    /// that died: not answered); [`FabricError::MessageAlloc`] when the message's memory
    /// cannot be had (the descriptor stays, unanswered, as a chunk would); a failed read
    /// (answered with its errno, and named here).
    pub(super) fn read_direct(&mut self, c: &Cell) -> Result<Vec<u8>> {
        let src = c.src as usize;
        let pid = self.job.board.pid(src);
        let len = usize::try_from(c.total).unwrap_or(usize::MAX);
        let got = crate::fabric::shm::ffi::read_remote_vec(pid as i32, c.offset, len);
        if got.is_err() && (self.aborted() || self.job.board.state(src) == FAILED) {
            return Err(FabricError::Aborted);
        }
        if let Err(e) = &got {
            if e.kind() == std::io::ErrorKind::OutOfMemory {
                let source = Vec::<u8>::new()
                    .try_reserve_exact(len)
                    .err()
                    .unwrap_or_else(|| Vec::<u8>::new().try_reserve_exact(usize::MAX).unwrap_err());
                return Err(FabricError::MessageAlloc {
                    rank: self.rank,
                    peer: src,
                    bytes: c.total,
                    source,
                });
            }
        }
        self.control
            .advance(&self.own.seg)
            .map_err(|e| self.bad(format!("{e:?}")))?;
        let status = match &got {
            Ok(_) => 0,
            Err(e) => e.raw_os_error().unwrap_or(libc::EIO) as u32,
        };
        let answer = Cell {
            src: self.rank as u32,
            kind: KIND_DIRECT_DONE,
            tag: status,
            ..Cell::default()
        };
        self.queue_control(src, answer)?;
        got.map_err(|e| {
            self.shm_err(
                Some(src),
                format!(
                    "reading its message of {} bytes by process_vm_readv from process {pid}: {e} (set \
                     BALLAST_SHM_CMA=off to send large messages through the rings)",
                    c.total
                ),
            )
        })
    }

    /// A poll of the control ring alone that gives no event (a blocking direct send whose
    /// caller's poll stopped): answers are taken, controls and completions kept for the
    /// next poll. `Err(Halt::Stop)` when a descriptor is first in the ring (reading it
    /// would give an event); else the cells taken.
    pub(super) fn poll_quiet(&mut self) -> std::result::Result<usize, Halt> {
        if !self.pending.is_empty() {
            self.flush_controls()?;
        }
        let mut n = 0;
        for _ in 0..POLL_BATCH {
            let Some((c, _)) = self
                .control
                .peek(&self.own.seg)
                .map_err(|e| self.bad(format!("{e:?}")))?
            else {
                break;
            };
            let src = c.src as usize;
            if c.kind == KIND_DIRECT || src >= self.world {
                return Err(Halt::Stop);
            }
            self.control
                .advance(&self.own.seg)
                .map_err(|e| self.bad(format!("{e:?}")))?;
            match c.kind {
                KIND_DIRECT_DONE => {
                    let mut sent = Vec::new();
                    self.direct_answered(src, c.tag, &mut |ev| {
                        if let Event::SendComplete(w) = ev {
                            sent.push(w);
                        }
                        Flow::Continue(())
                    })?;
                    self.deferred.extend(sent.into_iter().map(Deferred::Sent));
                }
                KIND_CONTROL => {
                    let msg = Control::decode(u8::try_from(c.tag).unwrap_or(u8::MAX), c.total)?;
                    self.deferred.push_back(Deferred::Control(src, msg));
                }
                k => {
                    return Err(self
                        .bad(format!("a control cell of kind {k} from rank {src}"))
                        .into())
                }
            }
            n += 1;
        }
        Ok(n)
    }
}

/// Large messages by CMA (`super::direct`), offered by [`Fabric::direct`] only when the
/// system allows it.
impl DirectPath for ShmFabric {
    fn direct_threshold(&self) -> usize {
        self.direct.threshold.unwrap_or(usize::MAX)
    }

    /// The descriptor goes to `dest` and this rank serves its own traffic until `dest` read
    /// `data` (one copy in all: from `data` into the receiver's message). After the
    /// callback stopped the poll, it waits for the answer reading only its control ring,
    /// keeping the controls for the next poll; should a descriptor from another rank be
    /// first there (reading it would give an event), it stops waiting: the receiver may
    /// then read `data` after it is given back.
    fn send_direct(
        &mut self,
        dest: usize,
        header: &PacketHeader,
        data: &[u8],
        on_event: &mut dyn FnMut(Event<'_>) -> Flow,
    ) -> Result<()> {
        let id = self.begin_direct(
            dest,
            header,
            data.as_ptr() as u64,
            data.len(),
            Out::Borrowed { done: None },
        )?;
        let mut backoff = Backoff::new();
        let mut stopped = false;
        loop {
            if self.direct.take_done(id).is_some() {
                // A failed read was an error of the answer's poll, below.
                return Ok(());
            }
            if self.aborted() {
                self.direct.abandon(id);
                return if stopped {
                    Ok(())
                } else {
                    Err(FabricError::Aborted)
                };
            }
            let polled = if stopped {
                self.poll_quiet()
            } else {
                self.poll_events(on_event)
            };
            match polled {
                Ok(0) => backoff.snooze_on(true, |t| self.wait_for_arrival(t)),
                Ok(_) => backoff.reset(),
                // The caller's poll stopped: wait for the answer without giving events.
                Err(Halt::Stop) if !stopped => stopped = true,
                Err(Halt::Stop) => {
                    // A descriptor from another rank is first in the control ring, and
                    // reading it would give events: stop waiting (see the doc above).
                    self.direct.abandon(id);
                    return Ok(());
                }
                Err(Halt::Fail(e)) => {
                    self.direct.abandon(id);
                    return Err(e);
                }
            }
        }
    }

    fn post_direct(&mut self, dest: usize, header: &PacketHeader, data: Vec<u8>, wr_id: u64) -> Result<()> {
        let (addr, len) = (data.as_ptr() as u64, data.len());
        // The vector's heap buffer does not move with it: `addr` stays valid while it is kept.
        self.begin_direct(dest, header, addr, len, Out::Owned { _data: data, wr_id })?;
        self.job.board.ring(dest);
        Ok(())
    }
}
