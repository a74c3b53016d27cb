//! [`ShmFabric`]'s direct path ([`DirectPath`]): large messages by CMA, the descriptors it
//! sends and reads, their answers, the quiet wait of a blocking send whose poll stopped
//! (the bookkeeping is `super::super::direct`'s; the design in docs/fabrics/shm.md).

use super::*;

/// The slowest copy a blocking direct send expects of its receiver, bytes per microsecond
/// (1 GB/s: a quarter of what one core's `process_vm_readv` moved in docs/BENCHMARKS.md's
/// 1 MiB ping-pong), to decide how long it yields before it blocks.
const CMA_YIELD_BYTES_PER_US: usize = 1000;

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

    /// Settles direct message `c` (the descriptor at the head of the control ring, from
    /// rank `c.src`) after the protocol was given its reader: when the reader read it (or
    /// failed to, for a reason the sender must hear), the descriptor is taken and answered
    /// with 0 or the read's errno; otherwise (not read, memory refused) it stays, to be
    /// given again. [`FabricError::Aborted`] when the read failed because the job did (a
    /// sender that died: not answered).
    pub(super) fn settle_direct(&mut self, c: &Cell, read: ReadOutcome) -> Result<()> {
        if read.aborted {
            return Err(FabricError::Aborted);
        }
        let Some(status) = read.answer else {
            return Ok(());
        };
        self.control
            .advance(&self.own.seg)
            .map_err(|e| self.bad(format!("{e:?}")))?;
        let answer = Cell {
            src: self.rank as u32,
            kind: KIND_DIRECT_DONE,
            tag: status,
            ..Cell::default()
        };
        self.queue_control(c.src as usize, answer)
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
        self.sending = Some(id);
        let r = self.wait_direct(id, data.len(), on_event);
        self.sending = None;
        r
    }

    fn post_direct(&mut self, dest: usize, header: &PacketHeader, data: Vec<u8>, wr_id: u64) -> Result<()> {
        let (addr, len) = (data.as_ptr() as u64, data.len());
        // The vector's heap buffer does not move with it: `addr` stays valid while it is kept.
        self.begin_direct(dest, header, addr, len, Out::Owned { _data: data, wr_id })?;
        self.job.board.ring(dest);
        Ok(())
    }
}

impl ShmFabric {
    /// [`DirectPath::send_direct`]'s wait for the answer to its message `id` of `len`
    /// bytes: it yields rather than blocks for as long as the receiver may take to copy
    /// the message (at [`CMA_YIELD_BYTES_PER_US`]), then blocks as any wait does.
    fn wait_direct(
        &mut self,
        id: u32,
        len: usize,
        on_event: &mut dyn FnMut(Event<'_>) -> Flow,
    ) -> Result<()> {
        let copy = std::time::Duration::from_micros((len / CMA_YIELD_BYTES_PER_US) as u64);
        let mut backoff = Backoff::patient(copy);
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
}

/// What became of a [`CmaRead`] ([`ShmFabric::settle_direct`]).
#[derive(Clone, Copy)]
pub(super) struct ReadOutcome {
    answer: Option<u32>,
    aborted: bool,
}

/// The reader of one direct message ([`RemoteRead`]): `process_vm_readv` from its sender's
/// memory into the receive's buffer or a new one. It records what the sender is owed
/// ([`ShmFabric::settle_direct`]).
pub(super) struct CmaRead<'j> {
    job: &'j Job,
    rank: usize,
    src: usize,
    pid: i32,
    addr: u64,
    len: u64,
    /// The answer owed: 0 (read) or the read's errno; `None` while unread or when memory
    /// was refused (the descriptor stays).
    answer: Option<u32>,
    /// The read failed because the job did (its sender died): no answer.
    aborted: bool,
}

impl std::fmt::Debug for CmaRead<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmaRead")
            .field("src", &self.src)
            .field("pid", &self.pid)
            .field("len", &self.len)
            .field("answer", &self.answer)
            .finish()
    }
}

impl<'j> CmaRead<'j> {
    /// The reader of descriptor `c`, received by rank `rank` of `job`.
    pub(super) fn new(job: &'j Job, rank: usize, c: &Cell) -> CmaRead<'j> {
        let src = c.src as usize;
        CmaRead {
            job,
            rank,
            src,
            pid: job.board.pid(src) as i32,
            addr: c.offset,
            len: c.total,
            answer: None,
            aborted: false,
        }
    }

    /// What became of it.
    pub(super) fn outcome(&self) -> ReadOutcome {
        ReadOutcome {
            answer: self.answer,
            aborted: self.aborted,
        }
    }

    /// The error of a failed read, recorded: the job's end when it failed (or the sender
    /// did), else the errno owed to the sender and the read named.
    fn failed(&mut self, e: std::io::Error) -> FabricError {
        let job_failed = self.job.stop.load(Ordering::Acquire)
            || self.job.board.failed().is_some_and(|r| r != self.rank)
            || self.job.board.state(self.src) == FAILED;
        if job_failed {
            self.aborted = true;
            return FabricError::Aborted;
        }
        self.answer = Some(e.raw_os_error().unwrap_or(libc::EIO) as u32);
        FabricError::Shm {
            rank: self.rank,
            peer: Some(self.src),
            what: format!(
                "reading its message of {} bytes by process_vm_readv from process {}: {e} (set \
                 BALLAST_SHM_CMA=off to send large messages through the rings)",
                self.len, self.pid
            ),
        }
    }
}

impl RemoteRead for CmaRead<'_> {
    fn read_into(&mut self, buf: &mut [u8]) -> Result<()> {
        if buf.len() as u64 != self.len {
            // The protocol's contract; answered, so the sender is not left waiting.
            let e = std::io::Error::from_raw_os_error(libc::EINVAL);
            return Err(self.failed(e));
        }
        match crate::fabric::shm::ffi::read_remote(self.pid, self.addr, buf) {
            Ok(()) => {
                self.answer = Some(0);
                Ok(())
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    fn read_vec(&mut self) -> Result<Vec<u8>> {
        let len = usize::try_from(self.len).unwrap_or(usize::MAX);
        match crate::fabric::shm::ffi::read_remote_vec(self.pid, self.addr, len) {
            Ok(v) => {
                self.answer = Some(0);
                Ok(v)
            }
            Err(e) if e.kind() == std::io::ErrorKind::OutOfMemory => {
                let source = Vec::<u8>::new()
                    .try_reserve_exact(len)
                    .err()
                    .unwrap_or_else(|| Vec::<u8>::new().try_reserve_exact(usize::MAX).unwrap_err());
                Err(FabricError::MessageAlloc {
                    rank: self.rank,
                    peer: self.src,
                    bytes: self.len,
                    source,
                })
            }
            Err(e) => Err(self.failed(e)),
        }
    }
}
