//! The collectives of issue 35 from C: [`ballast_allreduce`] (its element types
//! [`ballast_type`] and operations [`ballast_op`]), [`ballast_bcast`], [`ballast_gather`],
//! [`ballast_alltoallv`] and [`ballast_exchange_sparse`]; the last three return a
//! `ballast_gathered` (`crate::gathered`). Every size C passes is checked here (NULL with
//! a non-zero length, products and sums that overflow or pass PTRDIFF_MAX, alignment,
//! overlap) before anything is read, written or sent; the runtime's
//! `Communicator::{all_reduce, bcast, gather, all_to_allv, exchange_sparse}` do the rest.

use std::os::raw::{c_int, c_void};

use ballast_runtime::{Communicator, ReduceOp, ReduceType, Reducible};

use crate::comm::{ballast_comm, bytes, runtime, too_long, with_comm};
use crate::error::{clear_out, Fail};
use crate::gathered::ballast_gathered;
use crate::handles::{self, Kind};
use crate::BALLAST_ENOMEM;

/// The element type of ballast_allreduce: one of the BALLAST_INT32, BALLAST_INT64,
/// BALLAST_UINT64, BALLAST_DOUBLE values (any other is BALLAST_EINVAL).
pub type ballast_type = c_int;
/// `int32_t` elements (4 bytes, MPI_INT32_T).
pub const BALLAST_INT32: ballast_type = 1;
/// `int64_t` elements (8 bytes, MPI_INT64_T).
pub const BALLAST_INT64: ballast_type = 2;
/// `uint64_t` elements (8 bytes, MPI_UINT64_T).
pub const BALLAST_UINT64: ballast_type = 3;
/// `double` elements (8 bytes, IEEE 754 binary64, MPI_DOUBLE).
pub const BALLAST_DOUBLE: ballast_type = 4;

/// The operation of ballast_allreduce: one of the BALLAST_SUM, BALLAST_MIN, BALLAST_MAX
/// values (any other is BALLAST_EINVAL).
pub type ballast_op = c_int;
/// The sum (MPI_SUM): integers wrap on overflow (two's complement); doubles round as IEEE
/// 754 does, in the order given at ballast_allreduce.
pub const BALLAST_SUM: ballast_op = 1;
/// The minimum (MPI_MIN); for doubles a NaN operand gives NaN.
pub const BALLAST_MIN: ballast_op = 2;
/// The maximum (MPI_MAX); for doubles a NaN operand gives NaN.
pub const BALLAST_MAX: ballast_op = 3;

/// The element type `ty`, or the error naming it.
fn reduce_type(func: &str, ty: ballast_type) -> Result<ReduceType, Fail> {
    Ok(match ty {
        BALLAST_INT32 => ReduceType::I32,
        BALLAST_INT64 => ReduceType::I64,
        BALLAST_UINT64 => ReduceType::U64,
        BALLAST_DOUBLE => ReduceType::F64,
        _ => {
            return Err(Fail::inval(format!(
                "{func}: type {ty} is not a ballast_type (BALLAST_INT32 {BALLAST_INT32}, \
                 BALLAST_INT64 {BALLAST_INT64}, BALLAST_UINT64 {BALLAST_UINT64}, BALLAST_DOUBLE {BALLAST_DOUBLE})"
            )))
        }
    })
}

/// The operation `op`, or the error naming it.
fn reduce_op(func: &str, op: ballast_op) -> Result<ReduceOp, Fail> {
    Ok(match op {
        BALLAST_SUM => ReduceOp::Sum,
        BALLAST_MIN => ReduceOp::Min,
        BALLAST_MAX => ReduceOp::Max,
        _ => {
            return Err(Fail::inval(format!(
                "{func}: op {op} is not a ballast_op (BALLAST_SUM {BALLAST_SUM}, BALLAST_MIN {BALLAST_MIN}, \
                 BALLAST_MAX {BALLAST_MAX})"
            )))
        }
    })
}

/// The C name of element type `t`.
fn type_name(t: ReduceType) -> &'static str {
    match t {
        ReduceType::I32 => "BALLAST_INT32",
        ReduceType::I64 => "BALLAST_INT64",
        ReduceType::U64 => "BALLAST_UINT64",
        ReduceType::F64 => "BALLAST_DOUBLE",
    }
}

/// Root `root` checked against `comm`'s world, or the error in C terms.
fn root_of(func: &str, comm: &Communicator, root: c_int) -> Result<usize, Fail> {
    let n = comm.world_size();
    match usize::try_from(root) {
        Ok(r) if r < n => Ok(r),
        _ => Err(Fail::inval(format!(
            "{func}: root {root} is out of range: the world has {n} ranks (0 to {})",
            n - 1
        ))),
    }
}

/// `ptr` is aligned for elements of `align` bytes, or the error naming `what`.
fn aligned(func: &str, what: &str, ptr: usize, t: ReduceType, align: usize) -> Result<(), Fail> {
    if ptr.is_multiple_of(align) {
        return Ok(());
    }
    Err(Fail::inval(format!(
        "{func}: {what} ({ptr:#x}) is not aligned for {} ({align} bytes)",
        type_name(t)
    )))
}

/// `output[..count]`, reduced with `op` over the ranks, as `T`.
///
/// # Safety
/// `output` is NULL with `count` 0, or aligned for `T` with `count` initialised elements,
/// not otherwise borrowed during the call.
unsafe fn reduce_in_place<T: Reducible>(
    comm: &mut Communicator,
    output: *mut c_void,
    count: usize,
    op: ReduceOp,
) -> ballast_runtime::Result<()> {
    let data: &mut [T] = if count == 0 {
        &mut []
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(output.cast::<T>(), count) }
    };
    comm.all_reduce(data, op)
}

/// Reduces `count` elements of type `type` element by element with `op` over every rank:
/// each rank gives its `count` elements at `in`, and every rank gets the result at `out`
/// (`count` elements; `in == out` reduces in place): on the engine paths the same bits on
/// every rank (below), on the MPI native path as MPI_Allreduce gives them.
/// Collective: every rank calls it with the same `count`, `type` and `op`. `count` may be
/// 0 (then `in` and `out` may be NULL; the ranks still synchronise). New in 0.3.
///
/// The algorithm: on the engine paths (local, verbs, MPI with mpi_native off) recursive
/// doubling. With p the largest power of two <= the world size n and rem = n - p, rank 2i
/// (i < rem) first gives its elements to rank 2i + 1 and gets the result back from it at
/// the end; the p other ranks exchange their whole vectors with partner v XOR 2^j in round
/// j (log2 p rounds, v their place among the p). Partners per rank: log2 p, plus 1 for a
/// rank below 2 rem. Every combination is (lower ranks' value) op (higher ranks' value),
/// so the result is one fixed expression over the inputs in rank order: for doubles the
/// same bits on every rank, for given inputs and world size. On the MPI native path:
/// MPI_Allreduce, in place (MPI_INT32_T, MPI_INT64_T, MPI_UINT64_T, MPI_DOUBLE with
/// MPI_SUM, MPI_MIN, MPI_MAX), on a duplicate of the communicator kept for Ballast's
/// collectives (MPI's algorithm, partners and order of
/// combination); `count` above INT_MAX is BALLAST_EINVAL there (MPI's counts are ints).
///
/// Errors: BALLAST_EINVAL for NULL `comm`, `type` or `op` not one of the BALLAST_* values
/// above, `count` times the element's size above PTRDIFF_MAX bytes, NULL `in` or `out`
/// with `count` > 0, `in` or `out` not aligned for the type (4 bytes for BALLAST_INT32, 8
/// for the others), `in` and `out` overlapping without being equal, or another rank
/// calling a different collective at this point (the engine paths, and the MPI native
/// path with BALLAST_COLLECTIVE_CHECKS on) or a different `count` (the engine paths; the
/// message names both); BALLAST_ENOMEM when memory for a step's message cannot be had;
/// BALLAST_EPEER when a peer died, the run was aborted, or a rank ended without taking
/// part; the transport's. After an error `out` holds unspecified values.
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused); `in` NULL with `count` 0 or `count` readable elements;
/// `out` NULL with `count` 0 or `count` writable elements.
#[no_mangle]
pub unsafe extern "C" fn ballast_allreduce(
    comm: *mut ballast_comm,
    r#in: *const c_void,
    out: *mut c_void,
    count: usize,
    r#type: ballast_type,
    op: ballast_op,
) -> c_int {
    const F: &str = "ballast_allreduce";
    with_comm(F, comm, |c| {
        let t = reduce_type(F, r#type)?;
        let o = reduce_op(F, op)?;
        let size = t.size();
        let total = count
            .checked_mul(size)
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(|| {
                Fail::inval(format!(
                    "{F}: count {count} elements of {} ({size} bytes each) is above PTRDIFF_MAX bytes",
                    type_name(t)
                ))
            })?;
        if total > 0 {
            if r#in.is_null() {
                return Err(Fail::null(F, "in"));
            }
            if out.is_null() {
                return Err(Fail::null(F, "out"));
            }
            let (a, b) = (r#in as usize, out as usize);
            // The alignment of the Rust element type (what the slice below needs).
            let align = match t {
                ReduceType::I32 => std::mem::align_of::<i32>(),
                ReduceType::I64 => std::mem::align_of::<i64>(),
                ReduceType::U64 => std::mem::align_of::<u64>(),
                ReduceType::F64 => std::mem::align_of::<f64>(),
            };
            aligned(F, "in", a, t, align)?;
            aligned(F, "out", b, t, align)?;
            if a != b && a < b.saturating_add(total) && b < a.saturating_add(total) {
                return Err(Fail::inval(format!(
                    "{F}: in ({a:#x}) and out ({b:#x}), {total} bytes each, overlap without being \
                     equal (in == out reduces in place)"
                )));
            }
            if a != b {
                // SAFETY: `total` readable bytes at `in`, `total` writable at `out` (the
                // contract), not overlapping (checked above).
                unsafe { std::ptr::copy_nonoverlapping(r#in.cast::<u8>(), out.cast::<u8>(), total) };
            }
        }
        let comm = c.comm();
        // SAFETY: `out` is NULL with `count` 0, or aligned (checked) with `count` elements
        // initialised (copied from `in`, or `in` itself), borrowed only by this call.
        let r = unsafe {
            match t {
                ReduceType::I32 => reduce_in_place::<i32>(comm, out, count, o),
                ReduceType::I64 => reduce_in_place::<i64>(comm, out, count, o),
                ReduceType::U64 => reduce_in_place::<u64>(comm, out, count, o),
                ReduceType::F64 => reduce_in_place::<f64>(comm, out, count, o),
            }
        };
        r.map_err(runtime(F))?;
        Ok(0)
    })
}

/// Copies rank `root`'s `len` bytes at `buf` into every other rank's `buf`. Collective:
/// every rank calls it with the same `root` and `len` (bytes; 0 is allowed, `buf` may then
/// be NULL). New in 0.3.
///
/// The algorithm: on the engine paths a binomial tree rooted at `root`: with v = (rank -
/// root) mod n a rank's place, in round k (ceil(log2 n) rounds) every place v < 2^k sends
/// to v + 2^k (when below n), which receives from v - 2^k. Partners per rank: its parent
/// (none for the root) and its children, at most ceil(log2 n). On the MPI native path:
/// MPI_Bcast (`len` above INT_MAX is BALLAST_EINVAL there).
///
/// Errors: BALLAST_EINVAL for NULL `comm`, `root` out of range (the message gives the
/// world), NULL `buf` with `len` > 0, `len` above PTRDIFF_MAX, or another rank calling a
/// different collective at this point (the engine paths, and the MPI native path with
/// BALLAST_COLLECTIVE_CHECKS on) or a different root or length (the engine paths);
/// BALLAST_ENOMEM; BALLAST_EPEER when
/// a peer died, the run was aborted, or a rank ended without taking part; the transport's.
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused); `buf` NULL with `len` 0 or `len` readable and writable
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn ballast_bcast(
    comm: *mut ballast_comm,
    root: c_int,
    buf: *mut c_void,
    len: usize,
) -> c_int {
    const F: &str = "ballast_bcast";
    with_comm(F, comm, |c| {
        let r = root_of(F, c.comm(), root)?;
        if len > isize::MAX as usize {
            return Err(too_long(F, "len", len));
        }
        let data: &mut [u8] = if len == 0 {
            &mut []
        } else if buf.is_null() {
            return Err(Fail::null(F, "buf"));
        } else {
            // SAFETY: non-NULL with `len` readable and writable bytes (the contract), not
            // otherwise borrowed during the call.
            unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) }
        };
        c.comm().bcast(r, data).map_err(runtime(F))?;
        Ok(0)
    })
}

/// Gathers every rank's `len` bytes at `buf` (any length per rank, 0 included) on rank
/// `root`: there *out is a result with one part per rank (ballast_gathered_part, or
/// ballast_gathered_count / _at: part i is rank i's), freed with ballast_gathered_free; on
/// every other rank *out is NULL. Collective: every rank calls it with the same `root`.
/// New in 0.3.
///
/// The algorithm: on the engine paths the binomial tree of ballast_bcast, reversed: in
/// round k a place v with v mod 2^(k+1) = 2^k sends every part it holds (its own and its
/// subtree's, each with its length) to v - 2^k and is done. Partners per rank: at most
/// ceil(log2 n) (the root's children; a leaf has 1). On the MPI native path: MPI_Gather
/// of the lengths, then MPI_Gatherv of the bytes (a length or the root's
/// total above INT_MAX bytes is BALLAST_EINVAL there).
///
/// Errors: BALLAST_EINVAL for NULL `comm` or `out`, `root` out of range, NULL `buf` with
/// `len` > 0, `len` above PTRDIFF_MAX, or another rank calling a different collective at
/// this point (the engine paths, and the MPI native path with BALLAST_COLLECTIVE_CHECKS
/// on) or a different root (the engine paths); BALLAST_ENOMEM when the result cannot be held; BALLAST_EPEER; the
/// transport's.
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused); `buf` NULL with `len` 0 or `len` readable bytes; `out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_gather(
    comm: *mut ballast_comm,
    root: c_int,
    buf: *const c_void,
    len: usize,
    out: *mut *mut ballast_gathered,
) -> c_int {
    const F: &str = "ballast_gather";
    with_comm(F, comm, |c| {
        // SAFETY: NULL or writable (the contract).
        let out = unsafe { clear_out(F, out) }?;
        let r = root_of(F, c.comm(), root)?;
        // SAFETY: `len` readable bytes at `buf` (the contract).
        let data = unsafe { bytes(F, buf, len) }?;
        match c.comm().gather(r, data).map_err(runtime(F))? {
            Some(parts) => ballast_gathered::by_rank(parts).hand_out(F, out),
            None => Ok(0),
        }
    })
}

/// `p`, argument `what` of `func`, is an array's start: not NULL, aligned for `T`.
fn array<T>(func: &str, what: &str, p: *const T) -> Result<(), Fail> {
    if p.is_null() {
        return Err(Fail::null(func, what));
    }
    let align = std::mem::align_of::<T>();
    if !(p as usize).is_multiple_of(align) {
        return Err(Fail::inval(format!(
            "{func}: {what} ({:#x}) is not aligned for its elements ({align} bytes)",
            p as usize
        )));
    }
    Ok(())
}

/// Room for `n` items, or BALLAST_ENOMEM naming `what`.
fn list<T>(func: &str, what: &str, n: usize) -> Result<Vec<T>, Fail> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        Fail::new(
            BALLAST_ENOMEM,
            format!("{func}: no memory for the list of {n} {what}"),
        )
    })?;
    Ok(v)
}

/// Sends part d of `send` to every rank d and gathers what every rank sent here: `send` is
/// the concatenation of the parts in rank order (part d is `send_lens[d]` bytes, any
/// length, 0 included), `send_lens` has one entry per rank (the world size), and *out is
/// a result with one part per rank (part i is what rank i sent here; read with
/// ballast_gathered_part, or ballast_gathered_count / _at), freed with
/// ballast_gathered_free. The lengths travel with the data: no rank needs to know what it
/// receives beforehand. Part d = this rank is copied. Collective. New in 0.3.
///
/// The algorithm: on the engine paths Bruck's all-to-all (ceil(log2 n) steps; at step k
/// rank r sends to r + 2^k and receives from r - 2^k, modulo n, the parts whose
/// destination distance has bit k set, lengths included), so at most 2 ceil(log2 n)
/// partners per rank, and each byte travels up to ceil(log2 n) times. On the MPI native
/// path: MPI_Alltoall of the lengths, then MPI_Alltoallv of the bytes (a rank's total
/// sent or received above INT_MAX bytes is BALLAST_EINVAL there).
///
/// Errors: BALLAST_EINVAL for NULL `comm`, `send_lens` or `out`, `send_lens` not aligned
/// for size_t, NULL `send` with lengths
/// summing above 0, lengths whose sum overflows or passes PTRDIFF_MAX, or another rank
/// calling a different collective at this point (the engine paths, and the MPI native
/// path with BALLAST_COLLECTIVE_CHECKS on); BALLAST_ENOMEM when the result or a step's
/// message cannot be held: calling ballast_alltoallv again resumes it (on the engine paths
/// the retry's `send` is not read; on the MPI native path it must have the first call's
/// lengths, and it is what is sent); BALLAST_EPEER; the transport's.
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused); `send_lens` NULL or world-size readable entries; `send`
/// NULL when they sum to 0, else their sum's readable bytes; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_alltoallv(
    comm: *mut ballast_comm,
    send: *const c_void,
    send_lens: *const usize,
    out: *mut *mut ballast_gathered,
) -> c_int {
    const F: &str = "ballast_alltoallv";
    with_comm(F, comm, |c| {
        // SAFETY: NULL or writable (the contract).
        let out = unsafe { clear_out(F, out) }?;
        // SAFETY: the contract of `send` and `send_lens`.
        let parts = unsafe { send_parts(F, c.comm().world_size(), send, send_lens) }?;
        let got = c.comm().all_to_allv(&parts).map_err(runtime(F))?;
        ballast_gathered::by_rank(got).hand_out(F, out)
    })
}

/// The `n` parts of an alltoallv's `send`, by `send_lens` (checked: non-NULL and aligned
/// lengths, their sum within PTRDIFF_MAX, `send` non-NULL when it is above 0).
///
/// # Safety
/// `send_lens` NULL, misaligned, or `n` readable entries; `send` NULL or their sum of
/// readable bytes.
unsafe fn send_parts<'a>(
    func: &str,
    n: usize,
    send: *const c_void,
    send_lens: *const usize,
) -> Result<Vec<&'a [u8]>, Fail> {
    array(func, "send_lens", send_lens)?;
    // SAFETY: non-NULL and aligned (checked) with `n` readable entries (the caller's
    // contract); `n` entries of a world that exists fit in memory.
    let lens = unsafe { std::slice::from_raw_parts(send_lens, n) };
    let mut total = 0usize;
    for (d, &l) in lens.iter().enumerate() {
        total = total
            .checked_add(l)
            .filter(|&t| t <= isize::MAX as usize)
            .ok_or_else(|| {
                Fail::inval(format!(
                    "{func}: send_lens[0] to send_lens[{d}] sum above PTRDIFF_MAX bytes \
                     (send_lens[{d}] is {l})"
                ))
            })?;
    }
    // SAFETY: `total` readable bytes at `send` (the caller's contract).
    let all = unsafe { bytes(func, send, total) }.map_err(|_| Fail::null(func, "send"))?;
    let mut parts = list::<&[u8]>(func, "parts", n)?;
    let mut at = 0;
    for &l in lens {
        parts.push(&all[at..at + l]);
        at += l;
    }
    Ok(parts)
}

/// ballast_alltoallv into an existing result, `result`, whose memory it reuses: each
/// part goes into the buffer of the part it replaces when that buffer is large enough
/// (no allocation; on the MPI native path MPI receives straight into it, on the engine
/// paths it is copied from the step's message), so that a loop passing the same result
/// every time step allocates no parts once they stop growing, as an MPI program keeps
/// its receive buffer. `result` may come from any call that returns a
/// ballast_gathered (ballast_allgatherv, ballast_alltoallv, ballast_gather,
/// ballast_exchange_sparse); afterwards it holds one part per rank (part i is what rank i
/// sent here), read and freed as ballast_alltoallv's. Pointers read from it before the
/// call are invalid after it. Buffers are never shrunk: free the result to give their
/// memory back. Collective. New in 0.3.
///
/// Errors: as ballast_alltoallv, with BALLAST_EINVAL for NULL `result` or a handle that is
/// not a live result (freed, or another kind) in place of NULL `out`. After an error the
/// result holds unspecified parts (possibly none) and must still be freed.
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused); `send_lens` NULL or world-size readable entries; `send`
/// NULL or their sum of readable bytes; `result` NULL or a ballast_gathered handle, not
/// used by another thread during the call (a freed one is refused).
#[no_mangle]
pub unsafe extern "C" fn ballast_alltoallv_into(
    comm: *mut ballast_comm,
    send: *const c_void,
    send_lens: *const usize,
    result: *mut ballast_gathered,
) -> c_int {
    const F: &str = "ballast_alltoallv_into";
    with_comm(F, comm, |c| {
        let g = handles::object(F, "result", result.cast_const(), Kind::Gathered)?;
        // SAFETY: the contract of `send` and `send_lens`.
        let parts = unsafe { send_parts(F, c.comm().world_size(), send, send_lens) }?;
        // SAFETY: the result of a live handle, not freed by another thread during the call
        // (the contract); its parts are written under its lock.
        let mut g = unsafe { &*g }.write(F)?;
        c.comm()
            .all_to_allv_into(&parts, g.reuse_by_rank())
            .map_err(runtime(F))?;
        Ok(0)
    })
}

/// The dynamic sparse data exchange: sends `lens[i]` bytes at `bufs[i]` to rank `dests[i]`
/// for each i < `n` (distinct destinations, not this rank; `n` may be 0) and receives
/// from whichever ranks sent here, which no rank knows in advance. *out is a result with
/// the parts of the ranks that sent here, in increasing source order: their number is
/// ballast_gathered_count's (0 to world size - 1), part i's rank ballast_gathered_source's
/// and its bytes ballast_gathered_at's (ballast_gathered_part(rank) works for a rank that
/// sent); freed with ballast_gathered_free. Collective: every rank calls it. New in 0.3.
///
/// The algorithm: NBX (Hoefler, Siebert and Lumsdaine, PPoPP 2010). On the engine paths
/// each part goes straight to its destination, which acknowledges its delivery with an
/// empty message back; a rank whose sends are all acknowledged enters a non-blocking
/// dissemination barrier (ceil(log2 n) rounds: rank r to r + 2^k, from r - 2^k) and keeps
/// receiving (and acknowledging) until it completes. Partners per rank: its destinations,
/// its sources, and the barrier's 2 ceil(log2 n). On the MPI native path: MPI_Issend of
/// each part, MPI_Improbe and MPI_Mrecv of any source meanwhile, and MPI_Ibarrier once
/// every MPI_Issend completed (was matched); a part above INT_MAX bytes is BALLAST_EINVAL
/// there.
///
/// Errors: BALLAST_EINVAL for NULL `comm` or `out`, NULL or misaligned `dests`, `bufs` or
/// `lens` with `n` > 0, `n` above the number of other ranks (world size - 1), a destination out of
/// range, this rank or named twice, NULL `bufs[i]` with `lens[i]` > 0, lengths whose sum
/// (bytes) overflows or passes PTRDIFF_MAX, or another rank calling a different
/// collective at this point (the engine paths, and the MPI native path with
/// BALLAST_COLLECTIVE_CHECKS on); BALLAST_ENOMEM when the result or a received part
/// cannot be held;
/// BALLAST_EPEER; the transport's.
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused); `dests`, `bufs` and `lens` NULL or `n` readable entries
/// each; each `bufs[i]` NULL with `lens[i]` 0 or `lens[i]` readable bytes; `out` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_exchange_sparse(
    comm: *mut ballast_comm,
    n: usize,
    dests: *const c_int,
    bufs: *const *const c_void,
    lens: *const usize,
    out: *mut *mut ballast_gathered,
) -> c_int {
    const F: &str = "ballast_exchange_sparse";
    with_comm(F, comm, |c| {
        // SAFETY: NULL or writable (the contract).
        let out = unsafe { clear_out(F, out) }?;
        let world = c.comm().world_size();
        if n > world - 1 {
            return Err(Fail::inval(format!(
                "{F}: n is {n}, above the {} other ranks of the world of {world} \
                 (destinations are distinct and not this rank)",
                world - 1
            )));
        }
        let mut sends = list::<(usize, &[u8])>(F, "destinations", n)?;
        if n > 0 {
            array(F, "dests", dests)?;
            array(F, "bufs", bufs)?;
            array(F, "lens", lens)?;
            // SAFETY: non-NULL and aligned (checked) with `n` readable entries each (the
            // contract); `n` is below the world size.
            let (ds, bs, ls) = unsafe {
                (
                    std::slice::from_raw_parts(dests, n),
                    std::slice::from_raw_parts(bufs, n),
                    std::slice::from_raw_parts(lens, n),
                )
            };
            // Every size is checked before any slice is made of it.
            let mut total = 0usize;
            for i in 0..n {
                if ds[i] < 0 {
                    return Err(Fail::inval(format!(
                        "{F}: dests[{i}] is {}: out of range: the world has {world} ranks (0 to {})",
                        ds[i],
                        world - 1
                    )));
                }
                if ls[i] > 0 && bs[i].is_null() {
                    return Err(Fail::inval(format!(
                        "{F}: bufs[{i}] is NULL with lens[{i}] = {}",
                        ls[i]
                    )));
                }
                total = total
                    .checked_add(ls[i])
                    .filter(|&t| t <= isize::MAX as usize)
                    .ok_or_else(|| {
                        Fail::inval(format!(
                            "{F}: lens[0] to lens[{i}] sum above PTRDIFF_MAX bytes (lens[{i}] is {})",
                            ls[i]
                        ))
                    })?;
            }
            for i in 0..n {
                // SAFETY: `lens[i]` readable bytes at `bufs[i]` (the contract; non-NULL when
                // not empty, at most PTRDIFF_MAX: checked above).
                let b = unsafe { bytes(F, bs[i], ls[i]) }?;
                sends.push((ds[i] as usize, b));
            }
        }
        let got = c.comm().exchange_sparse(&sends).map_err(runtime(F))?;
        let g = ballast_gathered::by_source(F, got)?;
        g.hand_out(F, out)
    })
}
