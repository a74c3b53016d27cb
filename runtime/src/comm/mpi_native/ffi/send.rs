//! The native path's sends: [`OwnedSend`] (owned header and body) and
//! [`send_parts_scoped`] (a blocking send's parts from the caller's slice).

use std::marker::PhantomData;
use std::os::raw::c_int;

use rsmpi::ffi;
use rsmpi::raw::AsRaw;
use rsmpi::topology::SimpleCommunicator;

use super::{check, dt_byte, int, null_request};
use crate::comm::error::Result;

/// `MPI_Isend`s of an owned header (one message on the messages communicator) and, for a
/// large message sent by `isend`, an owned body (parts on the parts communicator).
pub(in crate::comm::mpi_native) struct OwnedSend {
    head_req: ffi::MPI_Request,
    head: Vec<u8>,
    /// A large message's body and its parts' requests (`isend` only): boxed, so that a
    /// small send (the latency path) moves and drops one pointer for it.
    body: Option<Box<OwnedBody>>,
    done: bool,
}

/// The body of an [`OwnedSend`] and the requests of its parts, which read it.
struct OwnedBody {
    parts: Vec<ffi::MPI_Request>,
    data: Vec<u8>,
}

// SAFETY: as for `HeaderRecv` (the requests read buffers this owns).
unsafe impl Send for OwnedSend {}

impl OwnedSend {
    /// Starts sending `head` to `dest` with `tag` on `comm` as one message. Errors:
    /// [`FabricError::MpiValue`](crate::comm::error::FabricError::MpiValue) when it overflows an `int` count,
    /// [`FabricError::MpiCall`](crate::comm::error::FabricError::MpiCall). Inline: the send is built in its caller's
    /// place (the latency path of every send).
    #[inline(always)]
    pub(in crate::comm::mpi_native) fn post(
        comm: &SimpleCommunicator,
        dest: c_int,
        tag: c_int,
        head: Vec<u8>,
    ) -> Result<OwnedSend> {
        let count = int(head.len(), "message of bytes")?;
        let mut req = null_request();
        // SAFETY: `head` is initialised for its length and moved into the returned value,
        // which keeps it (its heap block does not move) until MPI reports the request
        // complete, or leaks it; `comm` is live.
        let code = unsafe {
            ffi::MPI_Isend(
                head.as_ptr().cast(),
                count,
                dt_byte(),
                dest,
                tag,
                comm.as_raw(),
                &mut req,
            )
        };
        check(code, "MPI_Isend")?;
        Ok(OwnedSend {
            head_req: req,
            head,
            body: None,
            done: false,
        })
    }

    /// Starts sending `body` to `dest` with `tag` on `comm` as parts of at most
    /// `part_bytes` bytes; kept with the header. Errors:
    /// [`FabricError::MpiCall`](crate::comm::error::FabricError::MpiCall) (the parts posted before stay in flight,
    /// with the body).
    pub(in crate::comm::mpi_native) fn post_body(
        &mut self,
        comm: &SimpleCommunicator,
        dest: c_int,
        tag: c_int,
        body: Vec<u8>,
        part_bytes: usize,
    ) -> Result<()> {
        debug_assert!(self.body.is_none());
        let body = self.body.insert(Box::new(OwnedBody {
            parts: Vec::new(),
            data: body,
        }));
        self.done = false;
        let part_bytes = part_bytes.clamp(1, c_int::MAX as usize);
        let (ptr, len) = (body.data.as_ptr(), body.data.len());
        let mut off = 0;
        while off < len {
            let n = part_bytes.min(len - off);
            let mut req = null_request();
            // SAFETY: `ptr + off .. + n` lies in `body`, owned by this value (its heap block
            // does not move) until MPI reports every request complete, or leaked; `n` fits
            // an int (clamped); `comm` is live.
            let code = unsafe {
                ffi::MPI_Isend(
                    ptr.add(off).cast(),
                    n as c_int,
                    dt_byte(),
                    dest,
                    tag,
                    comm.as_raw(),
                    &mut req,
                )
            };
            check(code, "MPI_Isend")?;
            body.parts.push(req);
            off += n;
        }
        Ok(())
    }

    /// Tests the header and the parts (`MPI_Test`, `MPI_Testall`): true when all completed.
    #[inline]
    pub(in crate::comm::mpi_native) fn test(&mut self) -> Result<bool> {
        if self.done {
            return Ok(true);
        }
        let mut flag: c_int = 0;
        // SAFETY: `head_req` is a live or completed (null) request reading `head`, owned here.
        check(
            unsafe { ffi::MPI_Test(&mut self.head_req, &mut flag, ffi::RSMPI_STATUS_IGNORE) },
            "MPI_Test",
        )?;
        if flag == 0 {
            return Ok(false);
        }
        if let Some(body) = self.body.as_mut().filter(|b| !b.parts.is_empty()) {
            // SAFETY: `parts` holds live or null requests reading `body.data`, owned here.
            check(
                unsafe {
                    ffi::MPI_Testall(
                        body.parts.len() as c_int,
                        body.parts.as_mut_ptr(),
                        &mut flag,
                        ffi::RSMPI_STATUSES_IGNORE,
                    )
                },
                "MPI_Testall",
            )?;
            if flag == 0 {
                return Ok(false);
            }
        }
        self.done = true;
        Ok(true)
    }

    /// The header's buffer once every send completed (`None` while in flight).
    #[inline]
    pub(in crate::comm::mpi_native) fn take_head(&mut self) -> Option<Vec<u8>> {
        self.done.then(|| std::mem::take(&mut self.head))
    }

    /// Bytes of the buffers.
    pub(in crate::comm::mpi_native) fn capacity(&self) -> usize {
        self.head.capacity() + self.body.as_ref().map_or(0, |b| b.data.capacity())
    }
}

impl Drop for OwnedSend {
    /// Inline: a completed send (every one on the latency path) has nothing to do.
    #[inline]
    fn drop(&mut self) {
        if !self.done {
            self.leak_in_flight();
        }
    }
}

impl OwnedSend {
    /// The drop of a send still in flight: MPI may still read its buffers, and waiting
    /// could hang on a peer that failed, so they are leaked.
    #[cold]
    #[inline(never)]
    fn leak_in_flight(&mut self) {
        std::mem::forget(std::mem::take(&mut self.head));
        if let Some(body) = self.body.as_mut() {
            std::mem::forget(std::mem::take(&mut body.data));
        }
    }
}

/// The parts of a blocking send in flight, reading the caller's slice (lifetime `'a`);
/// only [`send_parts_scoped`] makes one, and waits for it before returning.
pub(in crate::comm::mpi_native) struct CallerParts<'a> {
    reqs: Vec<ffi::MPI_Request>,
    done: bool,
    _data: PhantomData<&'a [u8]>,
}

impl CallerParts<'_> {
    /// Tests the parts (`MPI_Testall`): true when all completed.
    pub(in crate::comm::mpi_native) fn test(&mut self) -> Result<bool> {
        if self.done || self.reqs.is_empty() {
            self.done = true;
            return Ok(true);
        }
        let mut flag: c_int = 0;
        // SAFETY: `reqs` holds live or null requests reading the caller's slice, which is
        // borrowed for `'a`, longer than this value lives.
        check(
            unsafe {
                ffi::MPI_Testall(
                    self.reqs.len() as c_int,
                    self.reqs.as_mut_ptr(),
                    &mut flag,
                    ffi::RSMPI_STATUSES_IGNORE,
                )
            },
            "MPI_Testall",
        )?;
        self.done = flag != 0;
        Ok(self.done)
    }
}

impl Drop for CallerParts<'_> {
    fn drop(&mut self) {
        if self.done || rsmpi::environment::is_finalized() {
            return;
        }
        // The caller's slice must outlive the transfer: wait (as MPI_Send would block).
        // SAFETY: `reqs` holds live or null requests of this process.
        unsafe {
            ffi::MPI_Waitall(
                self.reqs.len() as c_int,
                self.reqs.as_mut_ptr(),
                ffi::RSMPI_STATUSES_IGNORE,
            )
        };
    }
}

/// Starts sending `data` to `dest` with `tag` on the communicator `comm(state)` as parts of
/// at most `part_bytes` bytes, straight from `data`, then runs `f` with `state`, the
/// outcome of the posting (an [`FabricError::MpiCall`](crate::comm::error::FabricError::MpiCall) when a part could
/// not be posted; those posted before stay in flight) and the parts in flight; returns `f`'s result once every
/// part completed (waiting for them after `f`, also when `f` unwinds), so `data` is never
/// released while MPI reads it.
pub(in crate::comm::mpi_native) fn send_parts_scoped<S, R>(
    state: &mut S,
    comm: impl FnOnce(&S) -> &SimpleCommunicator,
    dest: c_int,
    tag: c_int,
    data: &[u8],
    part_bytes: usize,
    f: impl FnOnce(&mut S, Result<()>, &mut CallerParts<'_>) -> R,
) -> R {
    let mut parts = CallerParts {
        reqs: Vec::new(),
        done: false,
        _data: PhantomData,
    };
    let posted = {
        let comm = comm(state);
        let part_bytes = part_bytes.clamp(1, c_int::MAX as usize);
        let mut off = 0;
        let mut posted = Ok(());
        while off < data.len() {
            let n = part_bytes.min(data.len() - off);
            let mut req = null_request();
            // SAFETY: `data[off..off + n]` is initialised and borrowed for this whole
            // function, which does not return (nor unwind past `parts`' drop, which waits)
            // before every request completed; `n` fits an int (clamped); `comm` is live.
            let code = unsafe {
                ffi::MPI_Isend(
                    data.as_ptr().add(off).cast(),
                    n as c_int,
                    dt_byte(),
                    dest,
                    tag,
                    comm.as_raw(),
                    &mut req,
                )
            };
            if let Err(e) = check(code, "MPI_Isend") {
                posted = Err(e.into());
                break;
            }
            parts.reqs.push(req);
            off += n;
        }
        posted
    };
    let r = f(state, posted, &mut parts);
    drop(parts);
    r
}
