//! Non-blocking sends of owned byte buffers (`MPI_Isend` + `MPI_Testsome`). rsmpi's safe
//! requests borrow their buffer for a scope, which a fabric that lives behind
//! `Box<dyn Fabric>` cannot express; this queue owns each buffer until MPI reports the send
//! complete, so the buffer outlives the request by construction.

use std::os::raw::c_int;

use rsmpi::datatype::traits::*;
use rsmpi::ffi;
use rsmpi::raw::AsRaw;
use rsmpi::topology::SimpleCommunicator;

use crate::error::{Error, Result};

/// Sends in flight: request, owned buffer, caller's id, side by side.
pub(crate) struct SendQueue {
    reqs: Vec<ffi::MPI_Request>,
    bufs: Vec<Vec<u8>>,
    ids: Vec<u64>,
    /// Completed buffers kept for reuse (at most `keep`).
    free: Vec<Vec<u8>>,
    keep: usize,
    indices: Vec<c_int>,
    statuses: Vec<ffi::MPI_Status>,
}

// SAFETY: the raw request handles are plain values owned by this queue; MPI allows a
// request to be completed by any thread when MPI runs at MPI_THREAD_SERIALIZED or above
// (checked by the fabric), and the queue is driven by one thread at a time (`&mut self`).
unsafe impl Send for SendQueue {}

fn check(code: c_int, what: &str) -> Result<()> {
    if code as i64 == ffi::MPI_SUCCESS as i64 {
        Ok(())
    } else {
        Err(Error::Mpi(format!("{what} returned error code {code}")))
    }
}

impl SendQueue {
    /// An empty queue that keeps up to `keep` completed buffers for reuse.
    pub(crate) fn new(keep: usize) -> SendQueue {
        SendQueue { reqs: Vec::new(), bufs: Vec::new(), ids: Vec::new(), free: Vec::new(), keep, indices: Vec::new(), statuses: Vec::new() }
    }

    /// A cleared buffer with at least `cap` bytes of capacity (reused when possible).
    pub(crate) fn buffer(&mut self, cap: usize) -> Vec<u8> {
        let mut b = self.free.pop().unwrap_or_default();
        b.clear();
        b.reserve(cap);
        b
    }

    /// Bytes of the buffers held (in flight and kept for reuse).
    pub(crate) fn bytes(&self) -> u64 {
        self.bufs.iter().chain(&self.free).map(|b| b.capacity() as u64).sum()
    }

    /// Starts sending `buf` to `dest` with `tag` on `comm`; `id` comes back from [`SendQueue::test`].
    /// Errors: [`Error::Mpi`] when the buffer is longer than an MPI `int` count or MPI fails.
    pub(crate) fn post(&mut self, comm: &SimpleCommunicator, dest: usize, tag: i32, buf: Vec<u8>, id: u64) -> Result<()> {
        let count = c_int::try_from(buf.len()).map_err(|_| Error::Mpi(format!("one MPI message of {} bytes overflows an int count", buf.len())))?;
        let dest = c_int::try_from(dest).map_err(|_| Error::Mpi(format!("rank {dest} overflows an int")))?;
        // SAFETY: reading the null request constant.
        let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: `buf` is moved into `self.bufs` below and stays there (its heap block does
        // not move when the Vec value moves) until MPI_Testsome/MPI_Waitall reports the
        // request complete; `count` bytes of it are initialised; `comm` is a live
        // communicator for the duration of the call.
        let code = unsafe {
            ffi::MPI_Isend(buf.as_ptr().cast(), count, u8::equivalent_datatype().as_raw(), dest, tag, comm.as_raw(), &mut req)
        };
        check(code, "MPI_Isend")?;
        self.reqs.push(req);
        self.bufs.push(buf);
        self.ids.push(id);
        Ok(())
    }

    /// Tests the sends in flight; calls `done(id)` for each completed one. Returns how many completed.
    pub(crate) fn test(&mut self, done: &mut dyn FnMut(u64)) -> Result<usize> {
        if self.reqs.is_empty() {
            return Ok(0);
        }
        let n = self.reqs.len();
        self.indices.resize(n, 0);
        // SAFETY: MPI_Status is a plain C struct; zeroed is a valid (unused) value.
        self.statuses.resize(n, unsafe { std::mem::zeroed() });
        let mut outcount: c_int = 0;
        // SAFETY: the three arrays have `n` elements; the requests are live or null.
        let code = unsafe {
            ffi::MPI_Testsome(n as c_int, self.reqs.as_mut_ptr(), &mut outcount, self.indices.as_mut_ptr(), self.statuses.as_mut_ptr())
        };
        check(code, "MPI_Testsome")?;
        if outcount <= 0 {
            // MPI_UNDEFINED (no active request) or nothing completed.
            return Ok(0);
        }
        for &i in &self.indices[..outcount as usize] {
            done(self.ids[i as usize]);
        }
        // Compact: completed requests were set to MPI_REQUEST_NULL.
        // SAFETY: reading the null request constant.
        let null = unsafe { ffi::RSMPI_REQUEST_NULL };
        let mut i = 0;
        while i < self.reqs.len() {
            if self.reqs[i] == null {
                self.reqs.swap_remove(i);
                self.ids.swap_remove(i);
                let b = self.bufs.swap_remove(i);
                if self.free.len() < self.keep {
                    self.free.push(b);
                }
            } else {
                i += 1;
            }
        }
        Ok(outcount as usize)
    }

    /// Waits for every send in flight (before the buffers may be freed).
    pub(crate) fn wait_all(&mut self) {
        if self.reqs.is_empty() || rsmpi::environment::is_finalized() {
            return;
        }
        // SAFETY: `reqs` holds live or null requests whose buffers are in `bufs`;
        // MPI_STATUSES_IGNORE is accepted by MPI_Waitall.
        unsafe {
            ffi::MPI_Waitall(self.reqs.len() as c_int, self.reqs.as_mut_ptr(), ffi::RSMPI_STATUSES_IGNORE);
        }
        self.reqs.clear();
        self.ids.clear();
        self.bufs.clear();
    }
}

impl Drop for SendQueue {
    fn drop(&mut self) {
        self.wait_all();
    }
}
