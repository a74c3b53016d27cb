//! The native path's collectives: MPI's blocking collectives (`MPI_Barrier`, `MPI_Allgather`,
//! `MPI_Allgatherv`, `MPI_Allreduce`, `MPI_Bcast`, `MPI_Gather`, `MPI_Gatherv`,
//! `MPI_Alltoall`, `MPI_Alltoallv`) over the caller's memory, each return code checked
//! (the native path's communicators return errors, `MPI_ERRORS_RETURN`: rsmpi's
//! collectives ignore the codes), and, for the sparse exchange, [`CollOp`]: an `MPI_Issend`
//! or `MPI_Ibarrier` in flight with the buffer it reads, leaked if dropped in flight.
//!
//! The `v` collectives receive each rank's part straight into its own `Vec` (the shape of
//! their results): MPI is given the lowest of the parts' addresses and each part's offset
//! from it as its displacement, when every offset fits an `int` ([`Layout`]); otherwise
//! the caller receives into one buffer and splits it. Sends likewise read the caller's
//! parts where they are.

use std::os::raw::c_int;

use rsmpi::collective::SystemOperation;
use rsmpi::datatype::traits::*;
use rsmpi::ffi;
use rsmpi::raw::AsRaw;
use rsmpi::topology::SimpleCommunicator;

use super::{check, dt_byte, null_request};
use crate::comm::collective::{ReduceOp, ReduceSlice};
use crate::comm::error::Result;

/// One `MPI_Issend` or `MPI_Ibarrier` in flight with the bytes it reads.
pub(in crate::comm::mpi_native) struct CollOp {
    req: ffi::MPI_Request,
    done: bool,
    data: Vec<u8>,
}

// SAFETY: the request handle is a plain value and the buffer is owned; the operation is
// driven by one thread at a time (`&mut`), which MPI_THREAD_SERIALIZED allows.
unsafe impl Send for CollOp {}

impl CollOp {
    /// Tests the operation (`MPI_Test`): true once it completed.
    pub(in crate::comm::mpi_native) fn test(&mut self) -> Result<bool> {
        if self.done {
            return Ok(true);
        }
        let mut flag: c_int = 0;
        // SAFETY: `req` is the live (or completed, null) request of this operation, whose
        // buffer this value owns.
        check(
            unsafe { ffi::MPI_Test(&mut self.req, &mut flag, ffi::RSMPI_STATUS_IGNORE) },
            "MPI_Test",
        )?;
        self.done = flag != 0;
        Ok(self.done)
    }
}

impl Drop for CollOp {
    fn drop(&mut self) {
        if !self.done {
            // MPI may still read it (waiting could hang on a peer that failed): leaked.
            std::mem::forget(std::mem::take(&mut self.data));
        }
    }
}

/// `MPI_Ibarrier` on `comm`.
pub(in crate::comm::mpi_native) fn ibarrier(comm: &SimpleCommunicator) -> Result<CollOp> {
    let mut req = null_request();
    // SAFETY: `comm` is live; `req` is a valid out-parameter; no buffer.
    check(
        unsafe { ffi::MPI_Ibarrier(comm.as_raw(), &mut req) },
        "MPI_Ibarrier",
    )?;
    Ok(CollOp {
        req,
        done: false,
        data: Vec::new(),
    })
}

/// `MPI_Issend` of `data` (its length fits an int: the caller's check) to `dest` with
/// `tag`: complete once the receiver matched it.
pub(in crate::comm::mpi_native) fn issend(
    comm: &SimpleCommunicator,
    mut data: Vec<u8>,
    dest: usize,
    tag: c_int,
) -> Result<CollOp> {
    not_in_place(&mut data);
    let count = c_int::try_from(data.len()).unwrap_or(c_int::MAX);
    let mut req = null_request();
    // SAFETY: `data` holds `count` initialised bytes, moved into the returned value (its
    // heap block does not move) until MPI completed the send (or leaked); `dest` is a
    // rank of `comm` (the caller's check).
    let code = unsafe {
        ffi::MPI_Issend(
            data.as_ptr().cast(),
            count,
            dt_byte(),
            dest as c_int,
            tag,
            comm.as_raw(),
            &mut req,
        )
    };
    check(code, "MPI_Issend")?;
    Ok(CollOp {
        req,
        done: false,
        data,
    })
}

/// Gives an empty byte buffer a heap block: an empty `Vec<u8>`'s dangling pointer is
/// address 1, which is `MPI_IN_PLACE` in Open MPI.
fn not_in_place(v: &mut Vec<u8>) {
    if v.capacity() == 0 {
        v.reserve_exact(1);
    }
}

/// A byte address that is never `MPI_IN_PLACE`, for buffers of no bytes.
fn nowhere() -> *const u8 {
    static BYTE: u8 = 0;
    &BYTE
}

/// The address MPI is given for `s` (see [`nowhere`]).
fn addr(s: &[u8]) -> *const u8 {
    if s.is_empty() {
        nowhere()
    } else {
        s.as_ptr()
    }
}

#[inline]
fn dt_u64() -> ffi::MPI_Datatype {
    u64::equivalent_datatype().as_raw()
}

/// Parts at scattered addresses as one base address and `int` displacements from it.
pub(in crate::comm::mpi_native) struct Layout {
    base: *const u8,
    /// Each part's offset from `base` (0 for an empty part).
    pub displs: Vec<c_int>,
}

/// Writes to `displs` each part's offset from the lowest address of a non-empty part (0
/// for an empty part) of `parts` (address and length each, one per entry of `displs`):
/// `Some(Some(i))`, part `i` being at that lowest address, or `Some(None)` when every part
/// is empty; `None` when an offset plus its part's length does not fit an `int`.
#[inline]
fn offsets(
    parts: impl Iterator<Item = (*const u8, usize)> + Clone,
    displs: &mut [c_int],
) -> Option<Option<usize>> {
    let lowest = parts
        .clone()
        .enumerate()
        .filter(|(_, (_, len))| *len > 0)
        .min_by_key(|(_, (a, _))| *a as usize);
    let Some((first, (base, _))) = lowest else {
        displs.fill(0);
        return Some(None);
    };
    for ((a, len), d) in parts.zip(displs) {
        *d = if len == 0 {
            0
        } else {
            let off = a as usize - base as usize;
            if off.checked_add(len)? > c_int::MAX as usize {
                return None;
            }
            off as c_int
        };
    }
    Some(Some(first))
}

impl Layout {
    /// The layout of parts at `addrs` of `lens` bytes, if every offset from the lowest
    /// address, plus its part's length, fits an `int`.
    /// (`displs` is a buffer to reuse, its content replaced.)
    fn of(
        addrs: impl Iterator<Item = *const u8> + Clone,
        lens: &[c_int],
        mut displs: Vec<c_int>,
    ) -> Option<Layout> {
        displs.clear();
        displs.resize(lens.len(), 0);
        let parts = addrs.zip(lens).map(|(a, &l)| (a, l as usize));
        let base = match offsets(parts.clone(), &mut displs)? {
            Some(i) => parts.clone().nth(i).map_or(nowhere(), |(a, _)| a),
            None => nowhere(),
        };
        Some(Layout { base, displs })
    }

    /// The layout of parts laid end to end in `buf` at `displs`.
    pub(in crate::comm::mpi_native) fn contiguous(buf: &[u8], displs: Vec<c_int>) -> Layout {
        Layout {
            base: addr(buf),
            displs,
        }
    }

    /// The layout of the caller's `parts` (`displs`: a buffer to reuse).
    pub(in crate::comm::mpi_native) fn of_parts(
        parts: &[&[u8]],
        lens: &[c_int],
        displs: Vec<c_int>,
    ) -> Option<Layout> {
        Layout::of(parts.iter().map(|p| addr(p)), lens, displs)
    }

    /// The layout of `bufs`' spare capacities (each at least its length in `lens`;
    /// `displs`: a buffer to reuse).
    pub(in crate::comm::mpi_native) fn of_spare(
        bufs: &[Vec<u8>],
        lens: &[c_int],
        displs: Vec<c_int>,
    ) -> Option<Layout> {
        Layout::of(bufs.iter().map(|b| b.as_ptr()), lens, displs)
    }

    /// The displacements' buffer, for reuse.
    pub(in crate::comm::mpi_native) fn into_displs(self) -> Vec<c_int> {
        self.displs
    }
}

/// Marks `bufs` as holding the `lens` bytes MPI received into their capacities.
///
/// # Safety
/// MPI completed a receive of `lens[i]` bytes into `bufs[i]`'s capacity for every `i`.
unsafe fn filled(bufs: &mut [Vec<u8>], lens: &[c_int]) {
    for (b, &l) in bufs.iter_mut().zip(lens) {
        debug_assert!(b.capacity() >= l as usize);
        // SAFETY: the caller's guarantee: MPI wrote `l <= capacity` bytes at its start.
        unsafe { b.set_len(l as usize) };
    }
}

/// `MPI_Allgather` of `u64`s: `send` this rank's, `recv` as many per rank of `comm`.
pub(in crate::comm::mpi_native) fn allgather_u64(
    comm: &SimpleCommunicator,
    send: &[u64],
    recv: &mut [u64],
) -> Result<()> {
    let count = send.len() as c_int;
    debug_assert_eq!(recv.len() % send.len().max(1), 0);
    // SAFETY: `send` holds `count` words and `recv` `count` per rank of `comm` (the
    // caller's sizes), both borrowed for the call; `comm` is live.
    let code = unsafe {
        ffi::MPI_Allgather(
            send.as_ptr().cast(),
            count,
            dt_u64(),
            recv.as_mut_ptr().cast(),
            count,
            dt_u64(),
            comm.as_raw(),
        )
    };
    Ok(check(code, "MPI_Allgather")?)
}

/// `MPI_Barrier` on `comm`.
pub(in crate::comm::mpi_native) fn barrier(comm: &SimpleCommunicator) -> Result<()> {
    // SAFETY: `comm` is live; the call takes no buffer.
    let code = unsafe { ffi::MPI_Barrier(comm.as_raw()) };
    Ok(check(code, "MPI_Barrier")?)
}

/// `MPI_Alltoall` of one `u64` per pair: `send[d]` to rank `d`, into `recv` (both one
/// word per rank of `comm`).
pub(in crate::comm::mpi_native) fn alltoall_u64(
    comm: &SimpleCommunicator,
    send: &[u64],
    recv: &mut [u64],
) -> Result<()> {
    debug_assert_eq!(send.len(), recv.len());
    // SAFETY: `send` and `recv` hold one word per rank of `comm` (the caller's sizes),
    // borrowed for the call.
    let code = unsafe {
        ffi::MPI_Alltoall(
            send.as_ptr().cast(),
            1,
            dt_u64(),
            recv.as_mut_ptr().cast(),
            1,
            dt_u64(),
            comm.as_raw(),
        )
    };
    Ok(check(code, "MPI_Alltoall")?)
}

/// `MPI_Alltoallv` of byte parts straight from `parts` (part `d` for rank `d`) into the
/// buffers of `out`, which the caller kept from an earlier call, when each already has the
/// room for its part of `got[s]` bytes and every offset fits an `int`: the counts and
/// displacements are laid out in `ints` (four per rank, a buffer kept for reuse). `None`,
/// nothing sent, when a buffer lacks the room or an offset or length does not fit (the
/// caller's general path then runs); otherwise MPI's outcome, and `out[s]` holds rank
/// `s`'s part. The lean path of a loop that passes the same `out` every call: no
/// allocation, two plain loops, one MPI call.
pub(in crate::comm::mpi_native) fn alltoallv_kept(
    comm: &SimpleCommunicator,
    parts: &[&[u8]],
    got: &[u64],
    out: &mut [Vec<u8>],
    ints: &mut Vec<c_int>,
) -> Option<Result<()>> {
    let n = parts.len();
    if got.len() != n || out.len() != n {
        return None;
    }
    if ints.len() != 4 * n {
        ints.clear();
        ints.try_reserve(4 * n).ok()?;
        ints.resize(4 * n, 0);
    }
    let (sc, rest) = ints.split_at_mut(n);
    let (sd, rest) = rest.split_at_mut(n);
    let (rc, rd) = rest.split_at_mut(n);
    // Offsets from the lowest address of a non-empty part, on either side.
    let send = parts.iter().map(|p| (p.as_ptr(), p.len()));
    let sbase = match offsets(send, sd)? {
        Some(d) => parts[d].as_ptr(),
        None => nowhere(),
    };
    for (c, p) in sc.iter_mut().zip(parts) {
        *c = p.len() as c_int;
    }
    // The receive side: every buffer has the room.
    if out.iter().zip(got).any(|(b, &len)| (b.capacity() as u64) < len) {
        return None;
    }
    let recv = out.iter().zip(got).map(|(b, &len)| (b.as_ptr(), len as usize));
    let rbase: *mut u8 = match offsets(recv, rd)? {
        Some(s) => out[s].as_mut_ptr(),
        None => nowhere().cast_mut(),
    };
    for (c, &len) in rc.iter_mut().zip(got) {
        *c = len as c_int;
    }
    // SAFETY: `sbase + sd[d]` is part `d`, `sc[d]` bytes of the caller's slices (borrowed
    // for the call; 0 bytes and MPI reads nothing where a part is empty); `rbase + rd[s]`
    // is the start of `out[s]`'s buffer, which has room for `rc[s]` bytes (checked above),
    // borrowed mutably for the call and distinct from every part; every offset plus its
    // count fits an `int`; one entry per rank of `comm` in each array.
    let code = unsafe {
        ffi::MPI_Alltoallv(
            sbase.cast(),
            sc.as_ptr(),
            sd.as_ptr(),
            dt_byte(),
            rbase.cast(),
            rc.as_ptr(),
            rd.as_ptr(),
            dt_byte(),
            comm.as_raw(),
        )
    };
    if let Err(e) = check(code, "MPI_Alltoallv") {
        return Some(Err(e.into()));
    }
    // SAFETY: MPI completed, receiving `rc[s]` bytes at the start of `out[s]`'s buffer.
    unsafe { filled(out, rc) };
    Some(Ok(()))
}

/// `MPI_Gather` of one `u64` per rank into `recv` on `root` (one word per rank there; not
/// read elsewhere).
pub(in crate::comm::mpi_native) fn gather_u64(
    comm: &SimpleCommunicator,
    send: u64,
    recv: &mut [u64],
    root: usize,
) -> Result<()> {
    let mut spare = [0u64; 1];
    let recv = if recv.is_empty() { &mut spare[..] } else { recv };
    // SAFETY: `send` is one word; on the root `recv` holds one per rank of `comm` (the
    // caller's size; MPI reads the receive buffer only at the root); `root` is a rank of
    // `comm` (the caller's check).
    let code = unsafe {
        ffi::MPI_Gather(
            (&send as *const u64).cast(),
            1,
            dt_u64(),
            recv.as_mut_ptr().cast(),
            1,
            dt_u64(),
            root as c_int,
            comm.as_raw(),
        )
    };
    Ok(check(code, "MPI_Gather")?)
}

/// The MPI datatype and byte view of a reduction's buffer.
fn reduce_parts(data: &mut ReduceSlice<'_>) -> (ffi::MPI_Datatype, *mut u8) {
    match data {
        ReduceSlice::I32(s) => (i32::equivalent_datatype().as_raw(), s.as_mut_ptr().cast()),
        ReduceSlice::I64(s) => (i64::equivalent_datatype().as_raw(), s.as_mut_ptr().cast()),
        ReduceSlice::U64(s) => (u64::equivalent_datatype().as_raw(), s.as_mut_ptr().cast()),
        ReduceSlice::F64(s) => (f64::equivalent_datatype().as_raw(), s.as_mut_ptr().cast()),
    }
}

fn mpi_op(op: ReduceOp) -> ffi::MPI_Op {
    match op {
        ReduceOp::Sum => SystemOperation::sum().as_raw(),
        ReduceOp::Min => SystemOperation::min().as_raw(),
        ReduceOp::Max => SystemOperation::max().as_raw(),
    }
}

extern "C" {
    /// `MPI_IN_PLACE` of the MPI this crate is built against (`consts.c`, built by
    /// build.rs: a macro of `mpi.h` that rsmpi does not export).
    fn ballast_mpi_in_place() -> *mut std::ffi::c_void;
}

/// `MPI_Allreduce` of `data` with `op`, in place (`MPI_IN_PLACE`: no copy of the input;
/// `data.len()` fits an int: the caller's check).
pub(in crate::comm::mpi_native) fn allreduce(
    comm: &SimpleCommunicator,
    mut data: ReduceSlice<'_>,
    op: ReduceOp,
) -> Result<()> {
    let count = data.len();
    let (dt, ptr) = reduce_parts(&mut data);
    // SAFETY: the shim returns mpi.h's constant and touches nothing.
    let in_place = unsafe { ballast_mpi_in_place() };
    // SAFETY: the caller's slice (aligned for its type, borrowed mutably for the call) holds
    // `count` elements of `dt`, read as the input and overwritten with the result
    // (`MPI_IN_PLACE` as the send buffer); `count` fits an int (the caller's check); `comm`
    // is live.
    let code = unsafe {
        ffi::MPI_Allreduce(
            in_place.cast_const(),
            ptr.cast(),
            count as c_int,
            dt,
            mpi_op(op),
            comm.as_raw(),
        )
    };
    Ok(check(code, "MPI_Allreduce")?)
}

/// `MPI_Bcast` of `buf` (its length fits an int: the caller's check) from `root`.
pub(in crate::comm::mpi_native) fn bcast(
    comm: &SimpleCommunicator,
    buf: &mut [u8],
    root: usize,
) -> Result<()> {
    let count = buf.len() as c_int;
    let ptr = if buf.is_empty() {
        nowhere().cast_mut()
    } else {
        buf.as_mut_ptr()
    };
    // SAFETY: `ptr` is `buf` (borrowed mutably for the call), of `count` bytes, or, for no
    // bytes, an address MPI does not touch; `root` is a rank of `comm` (the caller's check).
    let code = unsafe { ffi::MPI_Bcast(ptr.cast(), count, dt_byte(), root as c_int, comm.as_raw()) };
    Ok(check(code, "MPI_Bcast")?)
}

/// Where a `v` collective receives: into the spare capacities of `bufs` by [`Layout`],
/// or into `flat` at the prefix sums of the counts.
pub(in crate::comm::mpi_native) enum RecvInto<'a> {
    Parts(&'a mut [Vec<u8>], &'a Layout),
    Flat(&'a mut [u8], &'a [c_int]),
}

impl RecvInto<'_> {
    fn ptr_displs(&mut self) -> (*mut u8, *const c_int) {
        match self {
            RecvInto::Parts(_, l) => (l.base.cast_mut(), l.displs.as_ptr()),
            RecvInto::Flat(f, d) => (
                if f.is_empty() {
                    nowhere().cast_mut()
                } else {
                    f.as_mut_ptr()
                },
                d.as_ptr(),
            ),
        }
    }

    /// Runs `call`, the MPI collective `name` that receives into `self` with `counts` (one
    /// per rank), given the receive buffer's address, the counts and the displacements;
    /// once it returned `MPI_SUCCESS`, the parts hold what MPI wrote. The one receive
    /// bookkeeping of the `v` collectives.
    ///
    /// # Safety
    /// `call` makes one blocking MPI collective that receives at most `counts[i]` bytes at
    /// the buffer's address plus the `i`-th displacement, for every rank `i`, and returns
    /// its code.
    unsafe fn receive(
        mut self,
        counts: &[c_int],
        name: &'static str,
        call: impl FnOnce(*mut std::ffi::c_void, *const c_int, *const c_int) -> c_int,
    ) -> Result<()> {
        let (rptr, rdispls) = self.ptr_displs();
        check(call(rptr.cast(), counts.as_ptr(), rdispls), name)?;
        if let RecvInto::Parts(bufs, _) = self {
            // SAFETY: the caller's guarantee: MPI completed the collective, which
            // received `counts[i]` bytes into part `i`'s spare capacity.
            unsafe { filled(bufs, counts) };
        }
        Ok(())
    }
}

/// `MPI_Allgatherv` of bytes: `send` this rank's, received by `into` with `counts` (one
/// per rank; the caller sized and checked them).
pub(in crate::comm::mpi_native) fn allgatherv(
    comm: &SimpleCommunicator,
    send: &[u8],
    into: RecvInto<'_>,
    counts: &[c_int],
) -> Result<()> {
    // SAFETY: `send` is borrowed for the call, its length fits an int (the caller's
    // check); the receive arguments are `into`'s (each part's spare capacity or a slice of
    // the flat buffer, borrowed mutably for the call) with `counts`.
    unsafe {
        into.receive(counts, "MPI_Allgatherv", |rbuf, rcounts, rdispls| {
            ffi::MPI_Allgatherv(
                addr(send).cast(),
                send.len() as c_int,
                dt_byte(),
                rbuf,
                rcounts,
                rdispls,
                dt_byte(),
                comm.as_raw(),
            )
        })
    }
}

/// `MPI_Gatherv` of bytes: `send` from every rank, received on `root` by `into` with
/// `counts` (`None` elsewhere).
pub(in crate::comm::mpi_native) fn gatherv(
    comm: &SimpleCommunicator,
    send: &[u8],
    into: Option<(RecvInto<'_>, &[c_int])>,
    root: usize,
) -> Result<()> {
    // SAFETY: (each call of `gather`) `send` is borrowed for the call, its length fits
    // an int; MPI reads the receive arguments only at the root, where they are `into`'s
    // with its counts; `root` is a rank of `comm`.
    let gather = |rbuf, rcounts, rdispls| unsafe {
        ffi::MPI_Gatherv(
            addr(send).cast(),
            send.len() as c_int,
            dt_byte(),
            rbuf,
            rcounts,
            rdispls,
            dt_byte(),
            root as c_int,
            comm.as_raw(),
        )
    };
    match into {
        // SAFETY: `gather` is one `MPI_Gatherv` receiving with the arguments it is given.
        Some((into, counts)) => unsafe { into.receive(counts, "MPI_Gatherv", gather) },
        None => {
            let none: [c_int; 1] = [0];
            let code = gather(nowhere().cast_mut().cast(), none.as_ptr(), none.as_ptr());
            Ok(check(code, "MPI_Gatherv")?)
        }
    }
}

/// `MPI_Alltoallv` of bytes: the parts laid out by `send` with `scounts`, received by
/// `into` with `rcounts`.
pub(in crate::comm::mpi_native) fn alltoallv(
    comm: &SimpleCommunicator,
    send: &Layout,
    scounts: &[c_int],
    into: RecvInto<'_>,
    rcounts: &[c_int],
) -> Result<()> {
    // SAFETY: `send.base` + `send.displs[d]` is the part for rank `d` (of `scounts[d]`
    // bytes: a slice of the caller's, or of its copy, which the caller keeps for the
    // call); the receive arguments are `into`'s with `rcounts`, borrowed mutably for the
    // call; one entry per rank of `comm` in each array.
    unsafe {
        into.receive(rcounts, "MPI_Alltoallv", |rbuf, counts, rdispls| {
            ffi::MPI_Alltoallv(
                send.base.cast(),
                scounts.as_ptr(),
                send.displs.as_ptr(),
                dt_byte(),
                rbuf,
                counts,
                rdispls,
                dt_byte(),
                comm.as_raw(),
            )
        })
    }
}
