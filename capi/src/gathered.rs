//! The all-gather from C: [`ballast_allgatherv`] and its result handle
//! [`ballast_gathered`] (read by rank, freed once).

use std::os::raw::{c_int, c_void};

use crate::comm::{ballast_comm, bytes, runtime, with_comm};
use crate::error::{boundary, Fail};
use crate::handles::{self, Kind};
use crate::BALLAST_ENOMEM;

/// The result of ballast_allgatherv (opaque): every rank's bytes.
pub struct ballast_gathered {
    parts: Vec<Vec<u8>>,
}

/// Gathers every rank's `len` bytes at `buf` (any length per rank) on every rank, in *out
/// (read with ballast_gathered_part, freed with ballast_gathered_free). Collective.
/// Errors: BALLAST_EINVAL for NULL `comm` or `out`, NULL `buf` with `len` > 0, or `len`
/// above PTRDIFF_MAX, or when another rank called a different collective at this point
/// (the message names both), or while a barrier that failed with BALLAST_ENOMEM is
/// unfinished (call ballast_barrier again first); BALLAST_ENOMEM when the result cannot be
/// held, or memory ran out during the all-gather: calling ballast_allgatherv again then
/// resumes it (the `buf` of the first call was copied; the retry's is not read); BALLAST_EPEER
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
        if out.is_null() {
            return Err(Fail::null(F, "out"));
        }
        // SAFETY: non-NULL and writable (the contract).
        unsafe { *out = std::ptr::null_mut() };
        // SAFETY: `len` readable bytes at `buf` (the contract).
        let data = unsafe { bytes(F, buf, len) }?;
        let parts = c.comm().all_gatherv(data).map_err(runtime(F))?;
        let p = Box::into_raw(Box::new(ballast_gathered { parts }));
        let Some(h) = handles::register(Kind::Gathered, p.cast()) else {
            // SAFETY: the box just made, never handed out.
            drop(unsafe { Box::from_raw(p) });
            return Err(Fail::new(
                BALLAST_ENOMEM,
                format!("{F}: no handle for the result (out of memory)"),
            ));
        };
        // SAFETY: as above; the result is C's until ballast_gathered_free.
        unsafe { *out = h as *mut ballast_gathered };
        Ok(0)
    })
}

/// Rank `rank`'s bytes of an all-gather: *data (valid until ballast_gathered_free; NULL
/// for 0 bytes) and *len. Errors: BALLAST_EINVAL for NULL or a rank out
/// of range.
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
        let g = unsafe { &*g };
        let n = g.parts.len();
        let p = usize::try_from(rank)
            .ok()
            .and_then(|r| g.parts.get(r))
            .ok_or_else(|| {
                Fail::inval(format!(
                    "{F}: rank {rank} is out of range: the world has {n} ranks (0 to {})",
                    n.saturating_sub(1)
                ))
            })?;
        if data.is_null() || len.is_null() {
            return Err(Fail::null(F, if data.is_null() { "data" } else { "len" }));
        }
        // SAFETY: both non-NULL and writable (the contract).
        unsafe {
            *data = if p.is_empty() {
                std::ptr::null()
            } else {
                p.as_ptr().cast()
            };
            *len = p.len();
        }
        Ok(0)
    })
}

/// Frees an all-gather result. NULL is not an error: it returns 0 and does nothing, as
/// free(NULL) does. Errors: BALLAST_EINVAL for a result already freed.
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
