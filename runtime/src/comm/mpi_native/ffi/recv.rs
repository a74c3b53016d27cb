//! The native path's receives that own their buffers: [`HeaderRecv`] (a whole message or a
//! large message's header) and [`PartsRecv`] (a large message's parts).

use std::os::raw::c_int;

use rsmpi::ffi;
use rsmpi::raw::AsRaw;
use rsmpi::topology::SimpleCommunicator;

use super::{
    byte_count, cancel_recv, cancel_recv_checked, check, dt_byte, empty_status, int, null_request, Status,
};
use crate::comm::error::{Error, FabricError, Result};

/// An `MPI_Irecv` of at most `cap` bytes into a `Vec` it owns (see the module docs).
pub(in crate::comm::mpi_native) struct HeaderRecv {
    req: ffi::MPI_Request,
    buf: Vec<u8>,
    /// Bytes MPI wrote, once complete.
    got: Option<usize>,
}

// SAFETY: the request handle is a plain value and the buffer is owned; the receive is
// driven by one thread at a time (`&mut`), which MPI_THREAD_SERIALIZED allows.
unsafe impl Send for HeaderRecv {}

impl HeaderRecv {
    /// Posts a receive of at most `cap` bytes from `(source, tag)` on `comm` into `buf`
    /// (cleared, and grown to `cap` bytes of capacity). Errors: [`FabricError::MpiValue`](crate::comm::error::FabricError::MpiValue) when
    /// `cap` overflows an `int`, [`FabricError::MpiCall`](crate::comm::error::FabricError::MpiCall). Inline: the receive is built in its
    /// caller's place (the latency path of every receive).
    #[inline(always)]
    pub(in crate::comm::mpi_native) fn post(
        comm: &SimpleCommunicator,
        source: c_int,
        tag: c_int,
        mut buf: Vec<u8>,
        cap: usize,
    ) -> Result<HeaderRecv> {
        let count = int(cap, "receive of bytes")?;
        buf.clear();
        buf.reserve_exact(cap);
        let mut req = null_request();
        // SAFETY: `buf` has capacity for `cap` bytes and is moved into the returned value,
        // which keeps it (its heap block does not move) until the request completed or was
        // cancelled and waited for; `comm` is live.
        let code = unsafe {
            ffi::MPI_Irecv(
                buf.as_mut_ptr().cast(),
                count,
                dt_byte(),
                source,
                tag,
                comm.as_raw(),
                &mut req,
            )
        };
        check(code, "MPI_Irecv")?;
        Ok(HeaderRecv { req, buf, got: None })
    }

    #[inline]
    fn completed(&mut self, status: &Status) -> Result<()> {
        self.got = Some(0); // no longer in flight, whatever MPI_Get_count says
        let n = byte_count(status)?.min(self.buf.capacity());
        self.got = Some(n);
        Ok(())
    }

    /// Tests the receive (`MPI_Test`): true when it completed, with `status` filled.
    #[inline]
    pub(in crate::comm::mpi_native) fn test(&mut self, status: &mut Status) -> Result<bool> {
        if self.got.is_some() {
            return Ok(true);
        }
        let mut flag: c_int = 0;
        // SAFETY: `req` is the live receive request writing into `buf`, which this owns.
        check(
            unsafe { ffi::MPI_Test(&mut self.req, &mut flag, status) },
            "MPI_Test",
        )?;
        if flag == 0 {
            return Ok(false);
        }
        self.completed(status)?;
        Ok(true)
    }

    /// Waits for the receive (`MPI_Wait`), filling `status`.
    pub(in crate::comm::mpi_native) fn wait(&mut self, status: &mut Status) -> Result<()> {
        if self.got.is_some() {
            return Ok(());
        }
        // SAFETY: `req` is the live receive request writing into `buf`, which this owns.
        check(unsafe { ffi::MPI_Wait(&mut self.req, status) }, "MPI_Wait")?;
        self.completed(status)
    }

    /// The received bytes once complete (`None` while in flight).
    #[inline]
    pub(in crate::comm::mpi_native) fn bytes(&self) -> Option<&[u8]> {
        let n = self.got?;
        // SAFETY: MPI completed the receive and reported writing `n` bytes (at most the
        // capacity) at the start of `buf`.
        Some(unsafe { std::slice::from_raw_parts(self.buf.as_ptr(), n) })
    }

    /// The buffer, its length the bytes received, once complete (`None` while in flight).
    #[inline]
    pub(in crate::comm::mpi_native) fn take_filled(&mut self) -> Option<Vec<u8>> {
        let n = self.got?;
        let mut buf = std::mem::take(&mut self.buf);
        // SAFETY: MPI completed the receive and wrote `n <= capacity` bytes into `buf`.
        unsafe { buf.set_len(n) };
        self.got = Some(0);
        Some(buf)
    }

    /// Bytes of the buffer.
    pub(in crate::comm::mpi_native) fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Cancels the receive and waits for it: `None` when it was cancelled, else the
    /// message it received (and its status).
    pub(in crate::comm::mpi_native) fn cancel(mut self) -> Result<Option<(Vec<u8>, Status)>> {
        let mut status = empty_status();
        if self.got.is_none() {
            if cancel_recv(&mut self.req, &mut status) {
                self.got = Some(0);
                return Ok(None);
            }
            self.completed(&status)?;
        }
        Ok(self.take_filled().map(|b| (b, status)))
    }
}

impl HeaderRecv {
    /// Cancels the receive and waits for it, keeping it in place (MPI errors checked):
    /// `None` when it was cancelled (nothing received), else the status of the message
    /// it received, whose bytes are then read as after [`HeaderRecv::wait`].
    pub(in crate::comm::mpi_native) fn cancel_in_place(&mut self) -> Result<Option<Status>> {
        let mut status = empty_status();
        if let Some(n) = self.got {
            return Err(Error::Fabric(FabricError::MpiValue {
                what: "MPI_Cancel of a receive that completed with bytes",
                value: n as i128,
                why: "is too late",
            }));
        }
        if cancel_recv_checked(&mut self.req, &mut status)? {
            self.got = Some(0);
            return Ok(None);
        }
        self.completed(&status)?;
        Ok(Some(status))
    }
}

impl Drop for HeaderRecv {
    /// Inline: a completed receive (every one on the latency path) has nothing to do.
    #[inline]
    fn drop(&mut self) {
        if self.got.is_none() {
            self.drop_in_flight();
        }
    }
}

impl HeaderRecv {
    /// The drop of a receive still in flight: cancelled and waited for (its buffer
    /// leaked instead once MPI is finalized).
    #[cold]
    #[inline(never)]
    fn drop_in_flight(&mut self) {
        if rsmpi::environment::is_finalized() {
            std::mem::forget(std::mem::take(&mut self.buf));
            return;
        }
        cancel_recv(&mut self.req, &mut empty_status());
    }
}

/// The `MPI_Irecv`s of a large message's parts into one `Vec` it owns (see the module
/// docs).
pub(in crate::comm::mpi_native) struct PartsRecv {
    reqs: Vec<ffi::MPI_Request>,
    data: Vec<u8>,
    total: usize,
    /// Bytes the parts wrote, once all completed.
    got: Option<usize>,
}

// SAFETY: as for `HeaderRecv`.
unsafe impl Send for PartsRecv {}

impl PartsRecv {
    /// Posts receives of `total` bytes from `(source, tag)` on `comm` as parts of at most
    /// `part_bytes` bytes into `data`, whose capacity must hold `total` bytes (its length
    /// is reset to 0). Errors: [`FabricError::MpiValue`](crate::comm::error::FabricError::MpiValue) when `data` is too small, [`FabricError::MpiCall`](crate::comm::error::FabricError::MpiCall)
    /// (the parts posted before are cancelled).
    pub(in crate::comm::mpi_native) fn post(
        comm: &SimpleCommunicator,
        source: c_int,
        tag: c_int,
        mut data: Vec<u8>,
        total: usize,
        part_bytes: usize,
    ) -> Result<PartsRecv> {
        data.clear();
        if data.capacity() < total {
            return Err(Error::Fabric(FabricError::MpiValue {
                what: "receive buffer of the parts",
                value: data.capacity() as i128,
                why: "is smaller than the message",
            }));
        }
        let part_bytes = part_bytes.clamp(1, c_int::MAX as usize);
        let mut r = PartsRecv {
            reqs: Vec::new(),
            data,
            total,
            got: None,
        };
        let base = r.data.as_mut_ptr();
        let mut off = 0;
        while off < total {
            let k = part_bytes.min(total - off);
            let mut req = null_request();
            // SAFETY: `off + k <= total <= capacity`, so the part lies in `data`'s heap
            // block, owned by `r` (it does not move) until every request completed or was
            // cancelled and waited for (also when this returns an error: `r`'s drop);
            // `k` fits an int (clamped); `comm` is live.
            let code = unsafe {
                ffi::MPI_Irecv(
                    base.add(off).cast(),
                    k as c_int,
                    dt_byte(),
                    source,
                    tag,
                    comm.as_raw(),
                    &mut req,
                )
            };
            check(code, "MPI_Irecv")?;
            r.reqs.push(req);
            off += k;
        }
        if total == 0 {
            r.got = Some(0);
        }
        Ok(r)
    }

    /// Tests every part (`MPI_Testall`, statuses in `statuses`): true when all completed.
    pub(in crate::comm::mpi_native) fn test(&mut self, statuses: &mut Vec<Status>) -> Result<bool> {
        if self.got.is_some() {
            return Ok(true);
        }
        let n = self.reqs.len();
        statuses.resize(n, empty_status());
        let mut flag: c_int = 0;
        // SAFETY: `reqs` holds `n` live or completed (null) requests writing into `data`,
        // which this owns; `statuses` has `n` entries.
        check(
            unsafe {
                ffi::MPI_Testall(
                    n as c_int,
                    self.reqs.as_mut_ptr(),
                    &mut flag,
                    statuses.as_mut_ptr(),
                )
            },
            "MPI_Testall",
        )?;
        if flag == 0 {
            return Ok(false);
        }
        self.completed(&statuses[..n])?;
        Ok(true)
    }

    /// Waits for every part (`MPI_Waitall`, statuses in `statuses`); then
    /// [`PartsRecv::take_data`] has the message.
    pub(in crate::comm::mpi_native) fn wait(&mut self, statuses: &mut Vec<Status>) -> Result<()> {
        if self.got.is_some() {
            return Ok(());
        }
        let n = self.reqs.len();
        statuses.resize(n, empty_status());
        // SAFETY: `reqs` holds `n` live or completed (null) requests writing into `data`,
        // which this owns until they completed; `statuses` has `n` entries.
        check(
            unsafe { ffi::MPI_Waitall(n as c_int, self.reqs.as_mut_ptr(), statuses.as_mut_ptr()) },
            "MPI_Waitall",
        )?;
        self.completed(&statuses[..n])
    }

    /// Every part completed with `statuses`: counts the bytes they wrote.
    fn completed(&mut self, statuses: &[Status]) -> Result<()> {
        self.got = Some(0); // no longer in flight, whatever MPI_Get_count says
        let mut got = 0usize;
        for s in statuses {
            got = got.saturating_add(byte_count(s)?);
        }
        self.got = Some(got.min(self.total));
        Ok(())
    }

    /// The message once every part completed with all `total` bytes; else `Err` with the
    /// number of bytes the parts held (fewer: a peer that sent less), 0 while in flight.
    pub(in crate::comm::mpi_native) fn take_data(&mut self) -> std::result::Result<Vec<u8>, usize> {
        let got = self.got.unwrap_or(0);
        if self.got.is_none() || got < self.total {
            return Err(got);
        }
        let mut data = std::mem::take(&mut self.data);
        // SAFETY: every part completed and together they wrote `total` bytes, the parts
        // tiling `data[..total]` without overlap.
        unsafe { data.set_len(self.total) };
        self.total = 0;
        Ok(data)
    }

    /// Waits for every part (`MPI_Waitall`; MPI's error code is not looked at: the parts
    /// are discarded).
    pub(in crate::comm::mpi_native) fn wait_discard(mut self) {
        // SAFETY: `reqs` holds live or null requests writing into `data`, which this owns
        // until after MPI_Waitall returned.
        unsafe {
            ffi::MPI_Waitall(
                self.reqs.len() as c_int,
                self.reqs.as_mut_ptr(),
                ffi::RSMPI_STATUSES_IGNORE,
            )
        };
        self.got = Some(0);
    }

    /// Bytes of the buffer.
    pub(in crate::comm::mpi_native) fn capacity(&self) -> usize {
        self.data.capacity()
    }
}

impl Drop for PartsRecv {
    fn drop(&mut self) {
        if self.got.is_some() {
            return;
        }
        if rsmpi::environment::is_finalized() {
            std::mem::forget(std::mem::take(&mut self.data));
            return;
        }
        let mut status = empty_status();
        for r in &mut self.reqs {
            cancel_recv(r, &mut status);
        }
    }
}
