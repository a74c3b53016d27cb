//! The native path's collectives in flight: [`CollOp`], one non-blocking MPI collective
//! (`MPI_Ibarrier`, `MPI_Iallgather`, `MPI_Iallgatherv`, `MPI_Iallreduce`, `MPI_Ibcast`,
//! `MPI_Igather`, `MPI_Igatherv`, `MPI_Ialltoall`, `MPI_Ialltoallv`) or synchronous send
//! (`MPI_Issend`, for the sparse exchange) together with every buffer and count array MPI
//! reads or writes until it completes ([`CollBufs`]).
//!
//! Non-blocking, so that the caller polls for the native path's abort notices while it
//! waits (a blocking MPI collective never returns when a peer failed before entering it);
//! owned buffers, so that a collective abandoned on an error leaves MPI nothing of the
//! caller's: a `CollOp` dropped before it completed leaks its buffers (a collective cannot
//! be cancelled). Every MPI return code is checked (the native path's communicators return
//! errors, `MPI_ERRORS_RETURN`): rsmpi's collectives ignore them, have no way to leave a
//! request in flight on an error (their requests must complete in scope) and no typed
//! in-place buffers, hence these calls.

use std::os::raw::c_int;

use rsmpi::collective::SystemOperation;
use rsmpi::datatype::traits::*;
use rsmpi::ffi;
use rsmpi::raw::AsRaw;
use rsmpi::topology::SimpleCommunicator;

use super::{check, dt_byte, null_request};
use crate::comm::collective::{ReduceOp, ReduceSlice};
use crate::core::memory::try_reserve_for;
use crate::error::Result;

/// The buffers and count arrays of one [`CollOp`], by role (each unused one empty); they
/// are handed back by [`CollOp::take_bufs`] once MPI completed the operation.
#[derive(Default)]
pub(in crate::comm::mpi_native) struct CollBufs {
    /// Bytes sent.
    pub send: Vec<u8>,
    /// Bytes received.
    pub recv: Vec<u8>,
    /// Send counts and displacements in bytes, one per rank (`MPI_Ialltoallv`).
    pub scounts: Vec<c_int>,
    pub sdispls: Vec<c_int>,
    /// Receive counts and displacements in bytes, one per rank (the `v` collectives).
    pub rcounts: Vec<c_int>,
    pub rdispls: Vec<c_int>,
    /// 64-bit words sent and received: lengths (`MPI_UINT64_T`), or a reduction's
    /// elements (any of its types, 8-byte aligned).
    pub wsend: Vec<u64>,
    pub wrecv: Vec<u64>,
}

/// One collective (or synchronous send) in flight with its buffers (see the module docs).
pub(in crate::comm::mpi_native) struct CollOp {
    req: ffi::MPI_Request,
    done: bool,
    bufs: Option<CollBufs>,
}

// SAFETY: the request handle is a plain value and the buffers are owned; the operation
// is driven by one thread at a time (`&mut`), which MPI_THREAD_SERIALIZED allows.
unsafe impl Send for CollOp {}

impl CollOp {
    fn started(code: c_int, call: &'static str, req: ffi::MPI_Request, bufs: CollBufs) -> Result<CollOp> {
        // On an error MPI started nothing: the buffers may go.
        check(code, call)?;
        Ok(CollOp {
            req,
            done: false,
            bufs: Some(bufs),
        })
    }

    /// An operation already complete with `bufs` (a collective's finished stage, kept for
    /// its resumption).
    pub(in crate::comm::mpi_native) fn finished(bufs: CollBufs) -> CollOp {
        CollOp {
            req: null_request(),
            done: true,
            bufs: Some(bufs),
        }
    }

    /// True once MPI completed it (as last tested).
    pub(in crate::comm::mpi_native) fn is_done(&self) -> bool {
        self.done
    }

    /// Tests the operation (`MPI_Test`): true once it completed.
    pub(in crate::comm::mpi_native) fn test(&mut self) -> Result<bool> {
        if self.done {
            return Ok(true);
        }
        let mut flag: c_int = 0;
        // SAFETY: `req` is the live (or completed, null) request of this operation, whose
        // buffers this value owns.
        check(
            unsafe { ffi::MPI_Test(&mut self.req, &mut flag, ffi::RSMPI_STATUS_IGNORE) },
            "MPI_Test",
        )?;
        self.done = flag != 0;
        Ok(self.done)
    }

    /// The buffers once the operation completed (`None` while in flight, or taken).
    pub(in crate::comm::mpi_native) fn take_bufs(&mut self) -> Option<CollBufs> {
        if self.done {
            self.bufs.take()
        } else {
            None
        }
    }
}

impl Drop for CollOp {
    fn drop(&mut self) {
        if !self.done {
            // MPI may still read or write them (a collective cannot be cancelled, and
            // waiting could hang on a peer that failed): leaked.
            std::mem::forget(self.bufs.take());
        }
    }
}

/// Gives an empty byte buffer a heap block: an empty `Vec<u8>`'s dangling pointer is
/// address 1, which is `MPI_IN_PLACE` in Open MPI.
fn not_in_place(v: &mut Vec<u8>) {
    if v.capacity() == 0 {
        v.reserve_exact(1);
    }
}

#[inline]
fn dt_u64() -> ffi::MPI_Datatype {
    u64::equivalent_datatype().as_raw()
}

/// `MPI_Ibarrier` on `comm`.
pub(in crate::comm::mpi_native) fn ibarrier(comm: &SimpleCommunicator) -> Result<CollOp> {
    let mut req = null_request();
    // SAFETY: `comm` is live; `req` is a valid out-parameter; no buffer.
    let code = unsafe { ffi::MPI_Ibarrier(comm.as_raw(), &mut req) };
    CollOp::started(code, "MPI_Ibarrier", req, CollBufs::default())
}

/// `MPI_Iallgather` of `u64`s: `bufs.wsend` holds this rank's (the same number on every
/// rank), and `bufs.wrecv` must have room for as many per rank of `comm`.
pub(in crate::comm::mpi_native) fn iallgather_u64(
    comm: &SimpleCommunicator,
    mut bufs: CollBufs,
) -> Result<CollOp> {
    let count = c_int::try_from(bufs.wsend.len()).unwrap_or(c_int::MAX);
    debug_assert_eq!(bufs.wrecv.len() % bufs.wsend.len().max(1), 0);
    let mut req = null_request();
    // SAFETY: `wsend` holds `count` words and `wrecv` `count` per rank of `comm` (the
    // caller's sizes), both owned by the returned value until MPI completed the operation
    // (or leaked); `comm` is live.
    let code = unsafe {
        ffi::MPI_Iallgather(
            bufs.wsend.as_ptr().cast(),
            count,
            dt_u64(),
            bufs.wrecv.as_mut_ptr().cast(),
            count,
            dt_u64(),
            comm.as_raw(),
            &mut req,
        )
    };
    CollOp::started(code, "MPI_Iallgather", req, bufs)
}

/// `MPI_Iallgatherv` of bytes: `bufs.send` this rank's, into `bufs.recv` at `rdispls` with
/// `rcounts` (one per rank, within `recv`: the caller's check).
pub(in crate::comm::mpi_native) fn iallgatherv(
    comm: &SimpleCommunicator,
    mut bufs: CollBufs,
) -> Result<CollOp> {
    not_in_place(&mut bufs.send);
    not_in_place(&mut bufs.recv);
    let count = c_int::try_from(bufs.send.len()).unwrap_or(c_int::MAX);
    let mut req = null_request();
    // SAFETY: the caller sized `recv` to hold every `rcounts[i]` bytes at `rdispls[i]` and
    // `count` is `send`'s length (checked to fit an int by the caller); every array is
    // owned by the returned value until MPI completed the operation (or leaked).
    let code = unsafe {
        ffi::MPI_Iallgatherv(
            bufs.send.as_ptr().cast(),
            count,
            dt_byte(),
            bufs.recv.as_mut_ptr().cast(),
            bufs.rcounts.as_ptr(),
            bufs.rdispls.as_ptr(),
            dt_byte(),
            comm.as_raw(),
            &mut req,
        )
    };
    CollOp::started(code, "MPI_Iallgatherv", req, bufs)
}

/// The MPI datatype, element count and byte view of a reduction's buffer.
fn reduce_parts(data: &ReduceSlice<'_>) -> (ffi::MPI_Datatype, usize, *const u8) {
    match data {
        ReduceSlice::I32(s) => (i32::equivalent_datatype().as_raw(), s.len(), s.as_ptr().cast()),
        ReduceSlice::I64(s) => (i64::equivalent_datatype().as_raw(), s.len(), s.as_ptr().cast()),
        ReduceSlice::U64(s) => (u64::equivalent_datatype().as_raw(), s.len(), s.as_ptr().cast()),
        ReduceSlice::F64(s) => (f64::equivalent_datatype().as_raw(), s.len(), s.as_ptr().cast()),
    }
}

fn mpi_op(op: ReduceOp) -> ffi::MPI_Op {
    match op {
        ReduceOp::Sum => SystemOperation::sum().as_raw(),
        ReduceOp::Min => SystemOperation::min().as_raw(),
        ReduceOp::Max => SystemOperation::max().as_raw(),
    }
}

/// `MPI_Iallreduce` of `data` (copied into owned words; `data.len()` fits an int: the
/// caller's check) with `op`; [`reduce_result`] copies the result back. Errors: the copy's
/// allocation, [`FabricError::MpiCall`](crate::error::FabricError::MpiCall).
pub(in crate::comm::mpi_native) fn iallreduce(
    comm: &SimpleCommunicator,
    data: &ReduceSlice<'_>,
    op: ReduceOp,
) -> Result<CollOp> {
    let (dt, count, src) = reduce_parts(data);
    let bytes = count * data.ty().size();
    let words = bytes.div_ceil(8);
    let mut bufs = CollBufs::default();
    for w in [&mut bufs.wsend, &mut bufs.wrecv] {
        try_reserve_for(w, words, || format!("all_reduce buffer of {bytes} bytes"))?;
        w.resize(words, 0);
    }
    // SAFETY: `src` points to `bytes` initialised bytes of the caller's slice; `wsend` has
    // room for `words * 8 >= bytes` bytes; they do not overlap (`wsend` is new).
    unsafe { std::ptr::copy_nonoverlapping(src, bufs.wsend.as_mut_ptr().cast::<u8>(), bytes) };
    let mut req = null_request();
    // SAFETY: `wsend` and `wrecv` hold `count` elements of the datatype `dt` (8-byte
    // aligned words), owned by the returned value until MPI completed the operation (or
    // leaked); `count` fits an int (the caller's check); `comm` is live.
    let code = unsafe {
        ffi::MPI_Iallreduce(
            bufs.wsend.as_ptr().cast(),
            bufs.wrecv.as_mut_ptr().cast(),
            count as c_int,
            dt,
            mpi_op(op),
            comm.as_raw(),
            &mut req,
        )
    };
    CollOp::started(code, "MPI_Iallreduce", req, bufs)
}

/// Copies the result of a completed [`iallreduce`] (`bufs.wrecv`) into `data`, the slice
/// it was started with.
pub(in crate::comm::mpi_native) fn reduce_result(bufs: &CollBufs, data: &mut ReduceSlice<'_>) {
    // (Always the slice's size: `wrecv` was made for it.)
    let bytes = (data.len() * data.ty().size()).min(bufs.wrecv.len() * 8);
    let dst: *mut u8 = match data {
        ReduceSlice::I32(s) => s.as_mut_ptr().cast(),
        ReduceSlice::I64(s) => s.as_mut_ptr().cast(),
        ReduceSlice::U64(s) => s.as_mut_ptr().cast(),
        ReduceSlice::F64(s) => s.as_mut_ptr().cast(),
    };
    // SAFETY: `wrecv` holds at least `bytes` bytes written by MPI as elements of the
    // slice's type; `dst` is the caller's slice of at least `bytes` bytes, borrowed
    // mutably, not overlapping an owned buffer. Every bit pattern is a valid i32, i64,
    // u64 or f64.
    unsafe { std::ptr::copy_nonoverlapping(bufs.wrecv.as_ptr().cast::<u8>(), dst, bytes) };
}

/// `MPI_Ibcast` of `bufs.recv` (its length fits an int: the caller's check) from `root`.
pub(in crate::comm::mpi_native) fn ibcast(
    comm: &SimpleCommunicator,
    mut bufs: CollBufs,
    root: usize,
) -> Result<CollOp> {
    not_in_place(&mut bufs.send);
    not_in_place(&mut bufs.recv);
    let count = c_int::try_from(bufs.recv.len()).unwrap_or(c_int::MAX);
    let mut req = null_request();
    // SAFETY: `recv` holds `count` initialised bytes, owned by the returned value until MPI
    // completed the operation (or leaked); `root` is a rank of `comm` (the caller's
    // check); `comm` is live.
    let code = unsafe {
        ffi::MPI_Ibcast(
            bufs.recv.as_mut_ptr().cast(),
            count,
            dt_byte(),
            root as c_int,
            comm.as_raw(),
            &mut req,
        )
    };
    CollOp::started(code, "MPI_Ibcast", req, bufs)
}

/// `MPI_Igather` of one `u64` per rank (`bufs.wsend`) into `bufs.wrecv` on `root` (one word
/// per rank there; not read elsewhere).
pub(in crate::comm::mpi_native) fn igather_u64(
    comm: &SimpleCommunicator,
    mut bufs: CollBufs,
    root: usize,
) -> Result<CollOp> {
    debug_assert_eq!(bufs.wsend.len(), 1);
    let mut req = null_request();
    // SAFETY: `wsend` holds 1 word; on the root `wrecv` holds one per rank of `comm` (the
    // caller's sizes; MPI reads the receive buffer only at the root), all owned by the
    // returned value until MPI completed the operation (or leaked); `comm` is live.
    let code = unsafe {
        ffi::MPI_Igather(
            bufs.wsend.as_ptr().cast(),
            1,
            dt_u64(),
            bufs.wrecv.as_mut_ptr().cast(),
            1,
            dt_u64(),
            root as c_int,
            comm.as_raw(),
            &mut req,
        )
    };
    CollOp::started(code, "MPI_Igather", req, bufs)
}

/// `MPI_Igatherv` of bytes: `bufs.send` from every rank into `bufs.recv` on `root` at
/// `rdispls` with `rcounts` (the root's arrays; empty elsewhere).
pub(in crate::comm::mpi_native) fn igatherv(
    comm: &SimpleCommunicator,
    mut bufs: CollBufs,
    root: usize,
) -> Result<CollOp> {
    not_in_place(&mut bufs.send);
    not_in_place(&mut bufs.recv);
    let count = c_int::try_from(bufs.send.len()).unwrap_or(c_int::MAX);
    let mut req = null_request();
    // SAFETY: `count` is `send`'s length (fits an int: the caller's check); on the root the
    // caller sized `recv` to hold every `rcounts[i]` bytes at `rdispls[i]` (MPI reads the
    // receive arguments only at the root); everything is owned by the returned value
    // until MPI completed the operation (or leaked); `comm` is live.
    let code = unsafe {
        ffi::MPI_Igatherv(
            bufs.send.as_ptr().cast(),
            count,
            dt_byte(),
            bufs.recv.as_mut_ptr().cast(),
            bufs.rcounts.as_ptr(),
            bufs.rdispls.as_ptr(),
            dt_byte(),
            root as c_int,
            comm.as_raw(),
            &mut req,
        )
    };
    CollOp::started(code, "MPI_Igatherv", req, bufs)
}

/// `MPI_Ialltoall` of one `u64` per pair: `bufs.wsend[d]` to rank `d`, into `bufs.wrecv`
/// (both one word per rank).
pub(in crate::comm::mpi_native) fn ialltoall_u64(
    comm: &SimpleCommunicator,
    mut bufs: CollBufs,
) -> Result<CollOp> {
    debug_assert_eq!(bufs.wsend.len(), bufs.wrecv.len());
    let mut req = null_request();
    // SAFETY: `wsend` and `wrecv` hold one word per rank of `comm` (the caller's sizes),
    // owned by the returned value until MPI completed the operation (or leaked).
    let code = unsafe {
        ffi::MPI_Ialltoall(
            bufs.wsend.as_ptr().cast(),
            1,
            dt_u64(),
            bufs.wrecv.as_mut_ptr().cast(),
            1,
            dt_u64(),
            comm.as_raw(),
            &mut req,
        )
    };
    CollOp::started(code, "MPI_Ialltoall", req, bufs)
}

/// `MPI_Ialltoallv` of bytes: `bufs.send` at `sdispls` with `scounts`, into `bufs.recv` at
/// `rdispls` with `rcounts`.
pub(in crate::comm::mpi_native) fn ialltoallv(
    comm: &SimpleCommunicator,
    mut bufs: CollBufs,
) -> Result<CollOp> {
    not_in_place(&mut bufs.send);
    not_in_place(&mut bufs.recv);
    let mut req = null_request();
    // SAFETY: the caller sized `send` and `recv` to hold every count at its displacement
    // (one per rank of `comm`); everything is owned by the returned value until MPI
    // completed the operation (or leaked); `comm` is live.
    let code = unsafe {
        ffi::MPI_Ialltoallv(
            bufs.send.as_ptr().cast(),
            bufs.scounts.as_ptr(),
            bufs.sdispls.as_ptr(),
            dt_byte(),
            bufs.recv.as_mut_ptr().cast(),
            bufs.rcounts.as_ptr(),
            bufs.rdispls.as_ptr(),
            dt_byte(),
            comm.as_raw(),
            &mut req,
        )
    };
    CollOp::started(code, "MPI_Ialltoallv", req, bufs)
}

/// `MPI_Issend` of `bufs.send` (its length fits an int: the caller's check) to `dest`
/// with `tag`: complete once the receiver matched it.
pub(in crate::comm::mpi_native) fn issend(
    comm: &SimpleCommunicator,
    mut bufs: CollBufs,
    dest: usize,
    tag: c_int,
) -> Result<CollOp> {
    not_in_place(&mut bufs.send);
    let count = c_int::try_from(bufs.send.len()).unwrap_or(c_int::MAX);
    let mut req = null_request();
    // SAFETY: `send` holds `count` initialised bytes owned by the returned value until MPI
    // completed the send (or leaked); `dest` is a rank of `comm` (the caller's check).
    let code = unsafe {
        ffi::MPI_Issend(
            bufs.send.as_ptr().cast(),
            count,
            dt_byte(),
            dest as c_int,
            tag,
            comm.as_raw(),
            &mut req,
        )
    };
    CollOp::started(code, "MPI_Issend", req, bufs)
}
