//! Sending on the native path: small messages as one MPI message, large ones as a
//! header and parts; blocking and non-blocking sends and their completion.

use super::*;

impl MpiNative {
    /// Posts `head` (and, for a large message, its parts from `body`) to `dest`.
    pub(super) fn post(
        &mut self,
        dest: usize,
        tag: Tag,
        head: Vec<u8>,
        body: Body<'_>,
        scratch: bool,
    ) -> Result<u64> {
        let (body_ptr, body_len) = match &body {
            Body::Empty => (std::ptr::null(), 0),
            Body::Owned(v) => (v.as_ptr(), v.len()),
            Body::Caller(d) => (d.as_ptr(), d.len()),
        };
        let body = match body {
            Body::Owned(v) => v,
            _ => Vec::new(),
        };
        let (chan, mtag) = Self::wire_tag(tag);
        let dt = u8::equivalent_datatype().as_raw();
        let d = dest as c_int;
        let mut reqs = Vec::with_capacity(1);
        let mut req = null_request();
        // SAFETY: `head` is moved into the PendingSend below (its heap block does not move)
        // and kept until MPI reports the request complete; its length fits an int (at most
        // buffer_size + 1 <= 1 GiB + 1); the communicator is live.
        let code = unsafe {
            ffi::MPI_Isend(
                head.as_ptr().cast(),
                head.len() as c_int,
                dt,
                d,
                mtag,
                self.chans[chan].msgs.as_raw(),
                &mut req,
            )
        };
        check(code, "MPI_Isend")?;
        reqs.push(req);
        let mut off = 0;
        while off < body_len {
            let n = self.part_bytes.min(body_len - off);
            let mut req = null_request();
            // SAFETY: `body_ptr + off .. + n` lies in the message's bytes: `body`, kept in
            // the PendingSend until complete, or the caller's slice of a blocking send,
            // which waits for completion before returning; `n` fits an int (part_bytes is
            // clamped); the communicator is live.
            let code = unsafe {
                ffi::MPI_Isend(
                    body_ptr.add(off).cast(),
                    n as c_int,
                    dt,
                    d,
                    mtag,
                    self.chans[chan].parts.as_raw(),
                    &mut req,
                )
            };
            if let Err(e) = check(code, "MPI_Isend") {
                // The header is out: keep what was posted so it completes and is freed.
                let id = self.new_id();
                self.sends.push(PendingSend {
                    id,
                    reqs,
                    head,
                    body,
                    scratch,
                });
                return Err(e);
            }
            reqs.push(req);
            off += n;
        }
        self.sent[dest] += 1;
        self.note_peer(dest);
        let id = self.new_id();
        self.sends.push(PendingSend {
            id,
            reqs,
            head,
            body,
            scratch,
        });
        Ok(id)
    }

    /// Starts sending a copy of `data` (the caller may reuse `data` at once). Never
    /// [`Error::WouldBlock`]: MPI queues it.
    pub fn isend(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<u64> {
        self.check_rank(dest)?;
        if data.len() <= self.eager {
            let mut head = Vec::with_capacity(data.len() + 1);
            head.extend_from_slice(data);
            head.push(KIND_WHOLE);
            self.post(dest, tag, head, Body::Empty, false)
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
    pub fn send(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<()> {
        self.check_rank(dest)?;
        let mut head = std::mem::take(&mut self.send_scratch);
        head.clear();
        let id = if data.len() > self.eager && dest == self.rank {
            // To itself: no receive is posted while this call waits, and an MPI_Send to
            // self with none posted never completes. A copy is sent instead (ENOMEM when it
            // does not fit, as on `local`), and this rank's own progress takes it out of
            // MPI into the unexpected queue.
            self.send_scratch = head;
            self.isend(dest, tag, data)?
        } else if data.len() <= self.eager {
            head.extend_from_slice(data);
            head.push(KIND_WHOLE);
            return self.send_small(dest, tag, head);
        } else {
            head.extend_from_slice(&(data.len() as u64).to_le_bytes());
            head.push(KIND_LARGE);
            match self.post(dest, tag, head, Body::Caller(data), true) {
                Ok(id) => id,
                Err(e) => {
                    // Some parts may read `data`: they must finish before it is released.
                    self.wait_all_sends();
                    return Err(e);
                }
            }
        };
        let mut b = Idle::new();
        loop {
            match self.send_done(id) {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => return Err(e),
            }
            match self.poll(b.housekeeping()) {
                Ok(true) => b.reset(),
                Ok(false) => b.snooze(),
                Err(e) => {
                    if data.len() > self.eager {
                        // MPI may still read the caller's slice: wait for it (as MPI_Send would).
                        self.wait_all_sends();
                    }
                    return Err(e);
                }
            }
        }
        self.finish_send(id);
        Ok(())
    }

    /// The blocking send of a small message in `head` (the kept send buffer): one
    /// `MPI_Isend`, tested until complete, progressing the rest meanwhile (no request
    /// bookkeeping: the latency path of a ping-pong).
    pub(super) fn send_small(&mut self, dest: usize, tag: Tag, head: Vec<u8>) -> Result<()> {
        let (chan, mtag) = Self::wire_tag(tag);
        let mut req = null_request();
        // SAFETY: `head` is kept alive until the request completes: tested below, and on an
        // early error moved with the request into `sends`, which holds it until complete;
        // its length fits an int (at most buffer_size + 1); the communicator is live.
        let code = unsafe {
            ffi::MPI_Isend(
                head.as_ptr().cast(),
                head.len() as c_int,
                u8::equivalent_datatype().as_raw(),
                dest as c_int,
                mtag,
                self.chans[chan].msgs.as_raw(),
                &mut req,
            )
        };
        check(code, "MPI_Isend")?;
        self.sent[dest] += 1;
        self.note_peer(dest);
        let mut b = Idle::new();
        loop {
            let mut flag: c_int = 0;
            // SAFETY: `req` is the live send request reading `head`.
            let tested = check(
                unsafe { ffi::MPI_Test(&mut req, &mut flag, ffi::RSMPI_STATUS_IGNORE) },
                "MPI_Test",
            );
            let failed = match tested {
                Ok(()) if flag != 0 => {
                    self.send_scratch = head;
                    return Ok(());
                }
                Ok(()) => match self.poll(b.housekeeping()) {
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
                    reqs: vec![req],
                    head,
                    body: Vec::new(),
                    scratch: false,
                });
                return Err(e);
            }
        }
    }

    /// Large blocking sends read the caller's slice: on an error they are waited for.
    pub(super) fn wait_all_sends(&mut self) {
        for s in &mut self.sends {
            if !s.body.is_empty() || !s.scratch {
                continue;
            }
            for r in &mut s.reqs {
                // SAFETY: `r` is a live or null request of this process.
                unsafe { ffi::MPI_Wait(r, ffi::RSMPI_STATUS_IGNORE) };
            }
        }
    }

    /// True when send `id` completed.
    pub fn send_done(&self, id: u64) -> Result<bool> {
        if self.done_sends.contains(&id) {
            return Ok(true);
        }
        if self.sends.iter().any(|s| s.id == id) {
            return Ok(false);
        }
        Err(Error::UnknownRequest(id))
    }

    /// Forgets a completed send.
    pub fn finish_send(&mut self, id: u64) {
        self.done_sends.remove(&id);
    }

    /// True when every send completed.
    pub fn sends_drained(&self) -> bool {
        self.sends.is_empty()
    }
}
