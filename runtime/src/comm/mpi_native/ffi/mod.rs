//! The native path's raw MPI calls, each behind a safe function or a type that owns the
//! memory MPI writes into or reads from until MPI is done with it:
//! - [`HeaderRecv`]: an `MPI_Irecv` into an owned `Vec` (a whole message or a large
//!   message's header), tested or waited for in place, cancelled with `MPI_Cancel` +
//!   `MPI_Wait`; its bytes are handed out only once MPI completed it, and only as many as
//!   MPI reports written;
//! - [`PartsRecv`]: the `MPI_Irecv`s of a large message's parts into one owned `Vec`, handed
//!   out only when every part completed and together they wrote the whole length;
//! - [`OwnedSend`]: `MPI_Isend`s of an owned header and body;
//! - [`send_parts_scoped`]: `MPI_Isend`s of a blocking send's parts straight from the
//!   caller's slice, completed before the scope returns (as rsmpi's scope does);
//! - [`Matched`]: a message matched by `MPI_Improbe`, received (`MPI_Mrecv`) into the
//!   spare capacity of a `Vec`;
//! - `coll.rs`: MPI's blocking collectives over the caller's memory (the `v` ones
//!   receiving into each part's own `Vec`), and [`CollOp`], an `MPI_Issend` or
//!   `MPI_Ibarrier` of the sparse exchange with its owned buffer;
//! - [`Ibarrier`], [`NativeComm`], the constants, status reads and `MPI_TAG_UB`.
//!
//! Dropping a request still in flight never frees memory MPI may still write into or read
//! from: a receive is cancelled and waited for (`MPI_Cancel` + `MPI_Wait`; a receive
//! cancels at once unless it was matched, and then it completes); a send's buffers are
//! leaked (a send cannot be cancelled reliably, and waiting could hang on a peer that
//! failed); a blocking send's parts are waited for, as `MPI_Send` would. Once MPI is
//! finalised, nothing is freed and nothing waited for: the buffers are leaked. A
//! sparse exchange's send dropped in flight leaks its buffer too ([`CollOp`]). This folder (`mod.rs`:
//! the helpers, communicators, `Matched`, `Ibarrier`; `recv.rs`; `send.rs`; `coll.rs`) is
//! the only place of `comm/mpi_native/` with `unsafe` code.

use std::ops::Deref;
use std::os::raw::c_int;

use rsmpi::datatype::traits::*;
use rsmpi::ffi;
use rsmpi::raw::AsRaw;
use rsmpi::topology::SimpleCommunicator;

use crate::comm::error::{Error, FabricError, Result};
use crate::fabric::mpi::ffi::check;

mod coll;
mod recv;
mod send;

pub(super) use coll::{
    allgather_u64, allgatherv, allreduce, alltoall_u64, alltoallv, alltoallv_kept, barrier, bcast,
    gather_u64, gatherv, ibarrier, issend, CollOp, Layout, RecvInto,
};
pub(super) use recv::{HeaderRecv, PartsRecv};
pub(super) use send::{send_parts_scoped, CallerParts, OwnedSend};

/// A completion status (`MPI_Status`: source, tag, error; read its fields directly).
pub(super) type Status = ffi::MPI_Status;

#[inline]
fn null_request() -> ffi::MPI_Request {
    // SAFETY: reading the null request constant.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

/// `MPI_ANY_SOURCE`.
pub(super) fn any_source() -> c_int {
    // SAFETY: reading a constant.
    unsafe { ffi::RSMPI_ANY_SOURCE }
}

/// `MPI_ANY_TAG`.
pub(super) fn any_tag() -> c_int {
    // SAFETY: reading a constant.
    unsafe { ffi::RSMPI_ANY_TAG }
}

/// A status to be overwritten by MPI.
pub(super) fn empty_status() -> Status {
    // SAFETY: MPI_Status is a plain C struct of integers; zeroed is a valid value.
    unsafe { std::mem::zeroed() }
}

#[inline]
fn dt_byte() -> ffi::MPI_Datatype {
    u8::equivalent_datatype().as_raw()
}

#[inline]
fn int(v: usize, what: &'static str) -> Result<c_int> {
    c_int::try_from(v).map_err(|_| {
        Error::Fabric(FabricError::MpiValue {
            what,
            value: v as i128,
            why: "overflows an MPI int",
        })
    })
}

/// Bytes of a completed receive (`MPI_Get_count` of `MPI_BYTE`).
pub(super) fn byte_count(status: &Status) -> Result<usize> {
    let mut count: c_int = 0;
    // SAFETY: `status` is a valid status (filled by MPI); `count` is a valid out-parameter.
    check(
        unsafe { ffi::MPI_Get_count(status, dt_byte(), &mut count) },
        "MPI_Get_count",
    )?;
    usize::try_from(count).map_err(|_| {
        Error::Fabric(FabricError::MpiValue {
            what: "MPI_Get_count gave",
            value: count.into(),
            why: "is negative",
        })
    })
}

/// A cheap clock for coarse intervals: the time-stamp counter on x86-64 (cycles), else
/// nanoseconds since the first call.
#[inline]
pub(super) fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc reads a register; it has no memory effects and every x86-64 CPU has it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
    }
}

/// `MPI_TAG_UB` of `comm` (the largest tag MPI accepts, at least 32767).
pub(crate) fn tag_ub(comm: &SimpleCommunicator) -> Result<i64> {
    let mut value: *mut c_int = std::ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: MPI_Comm_get_attr writes a pointer to the attribute's int into `value`
    // (MPI_TAG_UB is predefined on every communicator); `flag` is a valid out-parameter.
    let code = unsafe {
        ffi::MPI_Comm_get_attr(
            comm.as_raw(),
            ffi::MPI_TAG_UB as c_int,
            (&mut value as *mut *mut c_int).cast(),
            &mut flag,
        )
    };
    check(code, "MPI_Comm_get_attr(MPI_TAG_UB)")?;
    if flag == 0 || value.is_null() {
        return Ok(32_767);
    }
    // SAFETY: MPI says the attribute value is a pointer to a live int owned by MPI.
    Ok(i64::from(unsafe { *value }))
}

/// One of the rank's communicators (Ballast's duplicates of the world), movable to
/// another thread with the rank.
pub(super) struct NativeComm(SimpleCommunicator);

// SAFETY: a communicator handle is a plain value; the native path runs one rank per
// process, driven by one thread at a time (`&mut` access), which MPI_THREAD_SERIALIZED
// allows from any thread.
unsafe impl Send for NativeComm {}

impl NativeComm {
    pub(super) fn new(comm: SimpleCommunicator) -> NativeComm {
        NativeComm(comm)
    }

    /// Makes MPI return its errors on this communicator to the call that made them
    /// (`MPI_Comm_set_errhandler` with `MPI_ERRORS_RETURN`) instead of aborting the job.
    pub(super) fn errors_return(&self) -> Result<()> {
        // SAFETY: the communicator is live (owned by `self`); MPI_ERRORS_RETURN is a
        // predefined error handler, read as a constant.
        let code = unsafe { ffi::MPI_Comm_set_errhandler(self.0.as_raw(), ffi::RSMPI_ERRORS_RETURN) };
        Ok(check(code, "MPI_Comm_set_errhandler")?)
    }
}

impl Deref for NativeComm {
    type Target = SimpleCommunicator;
    fn deref(&self) -> &SimpleCommunicator {
        &self.0
    }
}

/// Cancels `req` (a live receive) and waits for it (`MPI_Cancel`, `MPI_Wait`,
/// `MPI_Test_cancelled`), each call checked: true when it was cancelled (nothing received),
/// false when it completed with a message, in `status`. On an error the request may still
/// be live: its owner keeps the buffer and cancels again when dropped.
fn cancel_recv_checked(req: &mut ffi::MPI_Request, status: &mut Status) -> Result<bool> {
    if *req == null_request() {
        return Ok(false); // completed already (MPI_Cancel refuses a null request)
    }
    let mut cancelled: c_int = 0;
    // SAFETY: `req` is a live receive request whose buffer its owner keeps until MPI is
    // done with it (also on an error here); `status` and `cancelled` are valid
    // out-parameters, `status` filled by MPI_Wait before MPI_Test_cancelled reads it.
    unsafe {
        check(ffi::MPI_Cancel(req), "MPI_Cancel")?;
        check(ffi::MPI_Wait(req, status), "MPI_Wait")?;
        check(
            ffi::MPI_Test_cancelled(status, &mut cancelled),
            "MPI_Test_cancelled",
        )?;
    }
    Ok(cancelled != 0)
}

/// Cancels `req` (a live receive) and waits for it; true when it was cancelled (nothing
/// received), false when it completed with a message, in `status`. MPI's error codes are
/// not looked at: this is the last thing done with the request.
fn cancel_recv(req: &mut ffi::MPI_Request, status: &mut Status) -> bool {
    if *req == null_request() {
        return false; // completed already (MPI_Cancel refuses a null request)
    }
    let mut cancelled: c_int = 0;
    // SAFETY: `req` is a live receive request; `status` is a valid out-parameter, filled
    // by MPI_Wait before MPI_Test_cancelled reads it.
    unsafe {
        ffi::MPI_Cancel(req);
        ffi::MPI_Wait(req, status);
        ffi::MPI_Test_cancelled(status, &mut cancelled);
    }
    cancelled != 0
}

/// A message matched by `MPI_Improbe`, to be received exactly once ([`Matched::recv_append`]);
/// dropping it unreceived loses the message (MPI has no way to put it back).
pub(super) struct Matched {
    msg: ffi::MPI_Message,
    status: Status,
    len: usize,
}

/// Matches the first message from `(source, tag)` on `comm` (`MPI_Improbe`), if one is there.
pub(super) fn improbe(comm: &SimpleCommunicator, source: c_int, tag: c_int) -> Result<Option<Matched>> {
    let mut flag: c_int = 0;
    // SAFETY: reading the "no process" message constant as an initial value.
    let mut msg: ffi::MPI_Message = unsafe { ffi::RSMPI_MESSAGE_NO_PROC };
    let mut status = empty_status();
    // SAFETY: `comm` is live; the out-parameters are valid.
    check(
        unsafe { ffi::MPI_Improbe(source, tag, comm.as_raw(), &mut flag, &mut msg, &mut status) },
        "MPI_Improbe",
    )?;
    if flag == 0 {
        return Ok(None);
    }
    let len = byte_count(&status)?;
    Ok(Some(Matched { msg, status, len }))
}

impl Matched {
    /// Bytes of the message.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Its status (source, tag).
    pub(super) fn status(&self) -> &Status {
        &self.status
    }

    /// Receives the message (`MPI_Mrecv`), appending it to `buf`, whose spare capacity
    /// must hold it (reserve first). Returns its status. Errors: [`FabricError::MpiValue`](crate::comm::error::FabricError::MpiValue) when
    /// the spare capacity is too small (the message is lost), [`FabricError::MpiCall`](crate::comm::error::FabricError::MpiCall).
    pub(super) fn recv_append(mut self, buf: &mut Vec<u8>) -> Result<Status> {
        if buf.capacity() - buf.len() < self.len {
            return Err(Error::Fabric(FabricError::MpiValue {
                what: "spare capacity of the receive buffer",
                value: (buf.capacity() - buf.len()) as i128,
                why: "is smaller than the matched message",
            }));
        }
        let count = int(self.len, "message of bytes")?;
        // SAFETY: the spare capacity of `buf` holds `len` bytes; `msg` is the message
        // matched by MPI_Improbe, received exactly once (this consumes `self`).
        check(
            unsafe {
                ffi::MPI_Mrecv(
                    buf.as_mut_ptr().add(buf.len()).cast(),
                    count,
                    dt_byte(),
                    &mut self.msg,
                    &mut self.status,
                )
            },
            "MPI_Mrecv",
        )?;
        // SAFETY: MPI_Mrecv initialised the `len` bytes after the old length, in capacity.
        unsafe { buf.set_len(buf.len() + self.len) };
        Ok(self.status)
    }
}

/// A non-blocking barrier (`MPI_Ibarrier`) in flight; dropping it leaves the request live
/// (it references no memory of ours).
pub(super) struct Ibarrier(ffi::MPI_Request);

// SAFETY: the request handle is a plain value, tested by one thread at a time (`&mut`).
unsafe impl Send for Ibarrier {}

impl Ibarrier {
    /// Starts a barrier over `comm`; `None` when MPI refuses.
    pub(super) fn start(comm: &SimpleCommunicator) -> Option<Ibarrier> {
        let mut req = null_request();
        // SAFETY: `comm` is live; `req` is a valid out-parameter.
        let code = unsafe { ffi::MPI_Ibarrier(comm.as_raw(), &mut req) };
        (code as i64 == ffi::MPI_SUCCESS as i64).then_some(Ibarrier(req))
    }

    /// True once every process entered it (`MPI_Test`; MPI's error code is not looked at).
    pub(super) fn test(&mut self) -> bool {
        let mut flag: c_int = 0;
        // SAFETY: the request is the live barrier request (no buffer).
        unsafe { ffi::MPI_Test(&mut self.0, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
        flag != 0
    }
}
