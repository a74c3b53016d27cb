//! The all-gather from C: [`ballast_allgatherv`], and the result handle of it and of the
//! other collectives that return bytes per rank, [`ballast_gathered`] (read by rank, or by
//! index with its sources; freed once).

use std::os::raw::{c_int, c_void};

use ballast_runtime::Received;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::comm::{ballast_comm, bytes, put, runtime, with_comm};
use crate::error::{boundary, clear_out, Fail};
use crate::handles::{self, Kind};
use crate::{BALLAST_ENOMEM, BALLAST_EUNSUPPORTED};

/// The result of ballast_allgatherv, ballast_alltoallv, ballast_gather (on the root) or
/// ballast_exchange_sparse (opaque): bytes per rank. Its parts are behind a lock that
/// ballast_alltoallv_into takes to write them: a second thread's call meanwhile gets
/// BALLAST_EUNSUPPORTED instead of reading or freeing what is being replaced.
pub struct ballast_gathered {
    inner: RwLock<Parts>,
}

/// The parts of a result.
pub(crate) struct Parts {
    /// The parts: by rank (`sources` None), or of the ranks in `sources`.
    parts: Vec<Vec<u8>>,
    /// The rank of each part of a sparse exchange's result (increasing); None when part i
    /// is rank i's.
    sources: Option<Vec<usize>>,
}

impl Parts {
    /// The parts, to be replaced by one per rank (rank i's at i): the result is by rank
    /// from now on.
    pub(crate) fn reuse_by_rank(&mut self) -> &mut Vec<Vec<u8>> {
        self.sources = None;
        &mut self.parts
    }
}

/// The error of a call on a result that another thread's ballast_alltoallv_into holds.
#[cold]
fn in_use(func: &str) -> Fail {
    Fail::new(
        BALLAST_EUNSUPPORTED,
        format!(
            "{func}: the result is in use by ballast_alltoallv_into on another thread (a result \
             is used by one thread at a time while that call writes it)"
        ),
    )
}

impl ballast_gathered {
    fn new(parts: Vec<Vec<u8>>, sources: Option<Vec<usize>>) -> ballast_gathered {
        ballast_gathered {
            inner: RwLock::new(Parts { parts, sources }),
        }
    }

    /// A result with one part per rank, rank i's at i.
    pub(crate) fn by_rank(parts: Vec<Vec<u8>>) -> ballast_gathered {
        ballast_gathered::new(parts, None)
    }

    /// The parts to read; BALLAST_EUNSUPPORTED while another thread writes them.
    fn read(&self, func: &str) -> Result<RwLockReadGuard<'_, Parts>, Fail> {
        self.inner.try_read().ok_or_else(|| in_use(func))
    }

    /// The parts to write; BALLAST_EUNSUPPORTED while another thread reads or writes them.
    pub(crate) fn write(&self, func: &str) -> Result<RwLockWriteGuard<'_, Parts>, Fail> {
        self.inner.try_write().ok_or_else(|| in_use(func))
    }

    /// A result with the parts of the ranks that sent (increasing sources). Fails for
    /// memory only (`func` names the call).
    pub(crate) fn by_source(func: &str, got: Vec<Received>) -> Result<ballast_gathered, Fail> {
        let mut parts = Vec::new();
        let mut sources = Vec::new();
        if parts.try_reserve_exact(got.len()).is_err() || sources.try_reserve_exact(got.len()).is_err() {
            return Err(Fail::new(
                BALLAST_ENOMEM,
                format!("{func}: no memory for the list of {} parts", got.len()),
            ));
        }
        for r in got {
            sources.push(r.source);
            parts.push(r.data);
        }
        Ok(ballast_gathered::new(parts, Some(sources)))
    }

    /// Hands `self` to C in `out` as a new handle.
    pub(crate) fn hand_out(self, func: &str, out: &mut *mut ballast_gathered) -> Result<c_int, Fail> {
        let p = Box::into_raw(Box::new(self));
        let Some(h) = handles::register(Kind::Gathered, p.cast()) else {
            // SAFETY: the box just made, never handed out.
            drop(unsafe { Box::from_raw(p) });
            return Err(Fail::new(
                BALLAST_ENOMEM,
                format!("{func}: no handle for the result (out of memory)"),
            ));
        };
        // The result is C's until ballast_gathered_free.
        *out = h as *mut ballast_gathered;
        Ok(0)
    }
}

/// Gathers every rank's `len` bytes at `buf` (any length per rank) on every rank, in *out
/// (read with ballast_gathered_part, freed with ballast_gathered_free). Collective.
/// Errors: BALLAST_EINVAL for NULL `comm` or `out`, NULL `buf` with `len` > 0, or `len`
/// above PTRDIFF_MAX, or when another rank called a different collective at this point
/// (the engine paths, and the MPI native path: there all_gatherv carries its number, which
/// catches another ballast_allgatherv at a different number, and any other collective only
/// with BALLAST_COLLECTIVE_CHECKS on; the message names both), or while another
/// collective that failed with BALLAST_ENOMEM is unfinished (call it again first);
/// BALLAST_ENOMEM when the result cannot be held, or memory ran out during the all-gather:
/// calling ballast_allgatherv again then resumes it (on the engine paths the `buf` of the
/// first call was copied and the retry's is not read; on the MPI native path the retry's
/// must be of the same length, and it is what is sent); BALLAST_EPEER
/// when a peer died, the run was aborted, or a rank ended without taking part (named).
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused); `buf` NULL with `len` 0 or `len` readable bytes; `out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_allgatherv(
    comm: *mut ballast_comm,
    buf: *const c_void,
    len: usize,
    out: *mut *mut ballast_gathered,
) -> c_int {
    const F: &str = "ballast_allgatherv";
    with_comm(F, comm, |c| {
        // SAFETY: NULL or writable (the contract).
        let out = unsafe { clear_out(F, out) }?;
        // SAFETY: `len` readable bytes at `buf` (the contract).
        let data = unsafe { bytes(F, buf, len) }?;
        let parts = c.comm().all_gatherv(data).map_err(runtime(F))?;
        ballast_gathered::by_rank(parts).hand_out(F, out)
    })
}

/// Rank `rank`'s bytes of a result (ballast_allgatherv, ballast_alltoallv, ballast_gather,
/// ballast_exchange_sparse): *data (valid until ballast_gathered_free; NULL for 0 bytes)
/// and *len. Errors: BALLAST_EINVAL for NULL or a rank out of range, and on the result of
/// ballast_exchange_sparse for a rank that sent nothing here (read such a result with
/// ballast_gathered_count, ballast_gathered_source and ballast_gathered_at).
///
/// # Safety
/// `gathered` must be NULL or a ballast_gathered handle, not freed by another thread during
/// the call (a freed one is refused); `data` and `len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_gathered_part(
    gathered: *const ballast_gathered,
    rank: c_int,
    data: *mut *const c_void,
    len: *mut usize,
) -> c_int {
    const F: &str = "ballast_gathered_part";
    boundary(F, || {
        let g = handles::object(F, "gathered", gathered, Kind::Gathered)?;
        // SAFETY: the result of a live handle, not freed while this call reads it.
        let g = unsafe { &*g }.read(F)?;
        let n = g.parts.len();
        let p = match &g.sources {
            None => usize::try_from(rank)
                .ok()
                .and_then(|r| g.parts.get(r))
                .ok_or_else(|| {
                    Fail::inval(format!(
                        "{F}: rank {rank} is out of range: the world has {n} ranks (0 to {})",
                        n.saturating_sub(1)
                    ))
                })?,
            Some(sources) => usize::try_from(rank)
                .ok()
                .and_then(|r| sources.binary_search(&r).ok())
                .map(|i| &g.parts[i])
                .ok_or_else(|| not_a_source(F, rank, sources.len()))?,
        };
        write_part(F, p, data, len)
    })
}

/// Frees a result (of any call that returns a ballast_gathered). NULL is not an error: it
/// returns 0 and does nothing, as free(NULL) does. Errors: BALLAST_EINVAL for a result already freed.
///
/// # Safety
/// `gathered` must be NULL or a ballast_gathered handle, not used by another thread during
/// the call (a freed one is refused).
#[no_mangle]
pub unsafe extern "C" fn ballast_gathered_free(gathered: *mut ballast_gathered) -> c_int {
    const F: &str = "ballast_gathered_free";
    boundary(F, || {
        if gathered.is_null() {
            return Ok(0);
        }
        let g = handles::unregister(gathered as usize, Kind::Gathered)
            .map_err(|r| handles::refused(F, "gathered", Kind::Gathered, r))?;
        // SAFETY: the box of ballast_allgatherv, taken back once (its handle has just ended).
        drop(unsafe { Box::from_raw(g.cast::<ballast_gathered>()) });
        Ok(0)
    })
}

/// A rank that sent nothing to a sparse exchange's result of `n` parts.
#[cold]
fn not_a_source(func: &str, rank: c_int, n: usize) -> Fail {
    Fail::inval(format!(
        "{func}: rank {rank} sent nothing here: this result of ballast_exchange_sparse holds \
         the {n} parts of the ranks that sent (ballast_gathered_count, ballast_gathered_source \
         and ballast_gathered_at read them)"
    ))
}

/// Part `i` of `g`, or the error naming `i` and the number of parts.
fn part_at<'a>(func: &str, g: &'a Parts, i: usize) -> Result<&'a [u8], Fail> {
    let n = g.parts.len();
    g.parts.get(i).map(Vec::as_slice).ok_or_else(|| {
        Fail::inval(if n == 0 {
            format!("{func}: index {i} is out of range: the result has no parts")
        } else {
            format!(
                "{func}: index {i} is out of range: the result has {n} parts (0 to {})",
                n - 1
            )
        })
    })
}

/// The number of parts of a result, in *n: the world size for ballast_allgatherv,
/// ballast_alltoallv and ballast_gather (part i is rank i's); for ballast_exchange_sparse
/// the number of ranks that sent here (0 to world size - 1). New in 0.3. Errors:
/// BALLAST_EINVAL for NULL or a handle that is not a live result.
///
/// # Safety
/// `gathered` must be NULL or a ballast_gathered handle, not freed by another thread during
/// the call (a freed one is refused); `n` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_gathered_count(gathered: *const ballast_gathered, n: *mut usize) -> c_int {
    const F: &str = "ballast_gathered_count";
    boundary(F, || {
        let g = handles::object(F, "gathered", gathered, Kind::Gathered)?;
        // SAFETY: the result of a live handle, not freed while this call reads it.
        let g = unsafe { &*g }.read(F)?;
        // SAFETY: NULL or writable (the contract).
        unsafe { put(F, "n", n, g.parts.len()) }?;
        Ok(0)
    })
}

/// The rank that sent part `i` (0 to count - 1) of a result, in *rank: for
/// ballast_exchange_sparse the sources in increasing order, for the others `i` itself.
/// New in 0.3. Errors: BALLAST_EINVAL for NULL, a handle that is not a live result, or `i`
/// out of range (the message gives the count).
///
/// # Safety
/// `gathered` must be NULL or a ballast_gathered handle, not freed by another thread during
/// the call (a freed one is refused); `rank` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_gathered_source(
    gathered: *const ballast_gathered,
    i: usize,
    rank: *mut c_int,
) -> c_int {
    const F: &str = "ballast_gathered_source";
    boundary(F, || {
        let g = handles::object(F, "gathered", gathered, Kind::Gathered)?;
        // SAFETY: the result of a live handle, not freed while this call reads it.
        let g = unsafe { &*g }.read(F)?;
        part_at(F, &g, i)?;
        let source = g.sources.as_ref().map_or(i, |s| s[i]);
        // A rank fits in an int: the world size does (ballast_world_size).
        // SAFETY: NULL or writable (the contract).
        unsafe { put(F, "rank", rank, source as c_int) }?;
        Ok(0)
    })
}

/// The bytes of part `i` (0 to count - 1) of a result: *data (valid until
/// ballast_gathered_free; NULL for 0 bytes, no alignment promised) and *len (bytes). Its
/// rank is ballast_gathered_source's. New in 0.3. Errors: BALLAST_EINVAL for NULL, a
/// handle that is not a live result, or `i` out of range (the message gives the count).
///
/// # Safety
/// `gathered` must be NULL or a ballast_gathered handle, not freed by another thread during
/// the call (a freed one is refused); `data` and `len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_gathered_at(
    gathered: *const ballast_gathered,
    i: usize,
    data: *mut *const c_void,
    len: *mut usize,
) -> c_int {
    const F: &str = "ballast_gathered_at";
    boundary(F, || {
        let g = handles::object(F, "gathered", gathered, Kind::Gathered)?;
        // SAFETY: the result of a live handle, not freed while this call reads it.
        let g = unsafe { &*g }.read(F)?;
        let p = part_at(F, &g, i)?;
        write_part(F, p, data, len)
    })
}

/// Writes part `p`'s address (NULL when empty) and length to `data` and `len`: the output of
/// `ballast_gathered_part` and `ballast_gathered_at`. Errors: BALLAST_EINVAL for NULL.
fn write_part(f: &str, p: &[u8], data: *mut *const c_void, len: *mut usize) -> Result<c_int, Fail> {
    if data.is_null() || len.is_null() {
        return Err(Fail::null(f, if data.is_null() { "data" } else { "len" }));
    }
    // SAFETY: both non-NULL and writable (the callers' contract).
    unsafe {
        *data = if p.is_empty() {
            std::ptr::null()
        } else {
            p.as_ptr().cast()
        };
        *len = p.len();
    }
    Ok(0)
}
