//! Completion of several requests and withdrawing one: [`ballast_waitany`],
//! [`ballast_testsome`] (over `ballast_test`, request by request) and
//! [`ballast_request_cancel`] (a posted receive that no message has matched).

use std::os::raw::c_int;

use crate::comm::ballast_status;
use crate::error::{last_error, set_last_error, Fail};
use crate::request::{ballast_request, ballast_test, cancelled, with_request};
use crate::{BALLAST_EINVAL, BALLAST_ENOMEM};

/// The `n` entries at `reqs`, checked as `ballast_waitall` checks them: `reqs` NULL with
/// `n` > 0, or `n` above the largest array of pointers, is BALLAST_EINVAL.
///
/// # Safety
/// `reqs` must be NULL or point to `n` readable entries, valid for `'a`.
unsafe fn entries<'a>(
    func: &str,
    n: usize,
    reqs: *const *mut ballast_request,
) -> Result<&'a [*mut ballast_request], Fail> {
    if n == 0 {
        return Ok(&[]);
    }
    if reqs.is_null() {
        return Err(Fail::null(func, "reqs"));
    }
    let most = isize::MAX as usize / std::mem::size_of::<*mut ballast_request>();
    if n > most {
        return Err(Fail::inval(format!(
            "{func}: n is {n} requests, above the largest array of them ({most}, PTRDIFF_MAX / sizeof(ballast_request *))"
        )));
    }
    // SAFETY: `n` readable entries (the caller's contract), `n` within an array's size.
    Ok(unsafe { std::slice::from_raw_parts(reqs, n) })
}

/// One `ballast_test` of entry `i`: `Ok(Some((status, code)))` when it completed (its
/// status with its own error, the code `ballast_test` returned), `Ok(None)` when not yet;
/// an entry that is not a live request (freed, stale, of another kind) is BALLAST_EINVAL
/// naming it, as is BALLAST_ENOMEM from its progress (the request stays live).
fn test_one(func: &str, i: usize, r: *mut ballast_request) -> Result<Option<(ballast_status, c_int)>, Fail> {
    let mut done: c_int = -1;
    let mut st = ballast_status::default();
    // SAFETY: `r` is non-NULL (the caller skips NULL entries); a handle that is not a live
    // request is refused by ballast_test without being followed; `done` and `st` are locals.
    let rc = unsafe { ballast_test(r, &mut done, &mut st) };
    match done {
        1 => {
            st.error = rc;
            Ok(Some((st, rc)))
        }
        0 if rc == 0 => Ok(None),
        // Not a live request (`done` untouched), or out of memory with the request live.
        _ => Err(Fail::new(rc, format!("{func}: request {i}: {}", last_error()))),
    }
}

/// Waits until one of the `n` requests in `reqs` completes and gives its index in *index
/// and its status in *status (if not NULL); returns that request's own error, as
/// ballast_wait would (e.g. BALLAST_ETRUNC, BALLAST_ECANCELED, BALLAST_EPEER), with its
/// message. A request that completed before (and was not freed) counts as complete: the
/// lowest such index is given. NULL entries are skipped; with every entry NULL (or `n`
/// 0) it returns 0 at once with *index = SIZE_MAX. The request stays live: free it
/// (ballast_request_free) and set its entry to NULL before the next call, or it is given
/// again. Each round tests every entry once (a round of progress each), in index order;
/// an idle wait yields the core after a while. Errors: BALLAST_EINVAL for NULL `index`,
/// `reqs` NULL with `n` > 0, `n` above PTRDIFF_MAX / sizeof(ballast_request *), or an
/// entry that is not a live request (freed, or cancelled by its communicator's free; the
/// message names its index; *index = SIZE_MAX); BALLAST_ENOMEM as ballast_test gives it
/// (the request stays live; *index = SIZE_MAX). New in 0.3.
///
/// # Safety
/// `reqs` must point to `n` entries, each NULL or a ballast_request handle not freed by
/// another thread during the call; `index` NULL or writable; `status` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_waitany(
    n: usize,
    reqs: *const *mut ballast_request,
    index: *mut usize,
    status: *mut ballast_status,
) -> c_int {
    const F: &str = "ballast_waitany";
    if index.is_null() {
        set_last_error(&format!("{F}: index is NULL"));
        return BALLAST_EINVAL;
    }
    // SAFETY: non-NULL and writable (the contract).
    unsafe { *index = usize::MAX };
    // SAFETY: `n` entries at `reqs` (the contract).
    let all = match unsafe { entries(F, n, reqs) } {
        Ok(a) => a,
        Err(f) => {
            set_last_error(&f.msg);
            return f.code;
        }
    };
    let mut idle: u32 = 0;
    loop {
        let mut any = false;
        for (i, &r) in all.iter().enumerate() {
            if r.is_null() {
                continue;
            }
            any = true;
            match test_one(F, i, r) {
                Ok(None) => {}
                Ok(Some((st, rc))) => {
                    // SAFETY: non-NULL and writable (the contract).
                    unsafe { *index = i };
                    if !status.is_null() {
                        // SAFETY: non-NULL and writable (the contract).
                        unsafe { *status = st };
                    }
                    return rc;
                }
                Err(f) => {
                    set_last_error(&f.msg);
                    return f.code;
                }
            }
        }
        if !any {
            return 0;
        }
        idle = idle.saturating_add(1);
        if idle > 64 {
            std::thread::yield_now();
        }
    }
}

/// Tests each of the `n` requests in `reqs` once (a round of progress each) and gives the
/// indices of those that are complete, ascending, in `indices[0, *count)`, and their
/// statuses in `statuses[0, *count)` (when `statuses` is not NULL): `statuses[k]` belongs
/// to `indices[k]`, its error field the request's own (0, BALLAST_ETRUNC,
/// BALLAST_ECANCELED, ...). A request that completed before (and was not freed) is given
/// again: free each one taken (ballast_request_free) and set its entry to NULL, which is
/// skipped. Returns 0, or the own error of the first request given that failed (its
/// message kept: the arrays and *count are filled all the same). Errors: BALLAST_EINVAL
/// for NULL `count`, `indices` NULL with `n` > 0, `reqs` NULL with `n` > 0, `n` above
/// PTRDIFF_MAX / sizeof(ballast_request *), or an entry that is not a live request (the
/// message names its index; *count = 0); BALLAST_ENOMEM when a request's progress ran out
/// of memory (that request stays live and is not given; the others are). New in 0.3.
///
/// # Safety
/// `reqs` must point to `n` entries, each NULL or a ballast_request handle not freed by
/// another thread during the call; `indices` NULL or `n` writable entries; `count` NULL
/// or writable; `statuses` NULL or `n` writable entries.
#[no_mangle]
pub unsafe extern "C" fn ballast_testsome(
    n: usize,
    reqs: *const *mut ballast_request,
    indices: *mut usize,
    count: *mut usize,
    statuses: *mut ballast_status,
) -> c_int {
    const F: &str = "ballast_testsome";
    if count.is_null() {
        set_last_error(&format!("{F}: count is NULL"));
        return BALLAST_EINVAL;
    }
    // SAFETY: non-NULL and writable (the contract).
    unsafe { *count = 0 };
    if n > 0 && indices.is_null() {
        set_last_error(&format!("{F}: indices is NULL"));
        return BALLAST_EINVAL;
    }
    // SAFETY: `n` entries at `reqs` (the contract).
    let all = match unsafe { entries(F, n, reqs) } {
        Ok(a) => a,
        Err(f) => {
            set_last_error(&f.msg);
            return f.code;
        }
    };
    // An entry that is not a live request fails the call before any is tested.
    for (i, &r) in all.iter().enumerate() {
        if r.is_null() {
            continue;
        }
        if let Err(f) = crate::handles::object(F, "request", r, crate::handles::Kind::Request) {
            set_last_error(&format!("{F}: request {i}: {}", f.msg));
            return BALLAST_EINVAL;
        }
    }
    let mut k = 0;
    let mut first: Option<(c_int, String)> = None;
    let mut short: Option<String> = None;
    for (i, &r) in all.iter().enumerate() {
        if r.is_null() {
            continue;
        }
        match test_one(F, i, r) {
            Ok(None) => {}
            Ok(Some((st, rc))) => {
                if rc != 0 && first.is_none() {
                    first = Some((rc, format!("{F}: request {i}: {}", last_error())));
                }
                // SAFETY: `indices` (and `statuses` when not NULL) have `n` writable
                // entries, and `k <= i < n`.
                unsafe {
                    *indices.add(k) = i;
                    if !statuses.is_null() {
                        *statuses.add(k) = st;
                    }
                }
                k += 1;
            }
            Err(f) if f.code == BALLAST_ENOMEM => {
                short.get_or_insert_with(|| f.msg.clone());
            }
            Err(f) => {
                set_last_error(&f.msg);
                return f.code;
            }
        }
    }
    // SAFETY: non-NULL and writable (the contract).
    unsafe { *count = k };
    if let Some((rc, msg)) = first {
        set_last_error(&msg);
        return rc;
    }
    if let Some(msg) = short {
        set_last_error(&msg);
        return BALLAST_ENOMEM;
    }
    0
}

/// Cancels posted receive `req` if no message has matched it yet: it completes as
/// cancelled (ballast_test and ballast_wait return BALLAST_ECANCELED, its status's error is
/// BALLAST_ECANCELED and its other fields 0) and can be freed; a message that arrives
/// later goes to another receive. Cancelling before freeing is how a receive that will not
/// be used ends, e.g. at shutdown (a request still live at the communicator's free is an
/// error). Errors: BALLAST_EINVAL for NULL or a request not live, and, with nothing
/// changed, for a send or a receive that a message has matched (completed, or being
/// received: wait for it; a message longer than a ballast_irecv_into buffer counts,
/// BALLAST_ETRUNC) or that was cancelled already; the transport's (MPI_Cancel's on the
/// MPI native path). New in 0.3.
///
/// # Safety
/// `req` must be NULL or a ballast_request handle, not freed by another thread during the
/// call (a freed one is refused).
#[no_mangle]
pub unsafe extern "C" fn ballast_request_cancel(req: *mut ballast_request) -> c_int {
    const F: &str = "ballast_request_cancel";
    with_request(F, req, |c, r| {
        if r.is_send() {
            return Err(Fail::inval(format!(
                "{F}: the request is a send (only a posted receive can be cancelled)"
            )));
        }
        if let Some(st) = r.done() {
            return Err(Fail::inval(format!(
                "{F}: the receive has completed already ({}), so it cannot be cancelled",
                if st.error == crate::BALLAST_ECANCELED {
                    "it was cancelled".to_string()
                } else if st.error == 0 {
                    format!("a message of {} bytes from rank {} matched it", st.len, st.source)
                } else {
                    format!("with error {}", st.error)
                }
            )));
        }
        let Some(pending) = r.take_pending() else {
            return Err(Fail::inval(format!("{F}: request without an operation")));
        };
        match c.comm().cancel(pending) {
            Ok(Ok(())) => {
                cancelled(r);
                Ok(0)
            }
            Ok(Err(back)) => {
                r.put_pending(back);
                Err(Fail::inval(format!(
                    "{F}: a message has matched the receive (it is being received, or has arrived): wait for it instead"
                )))
            }
            Err(e) => {
                // The runtime's request is consumed: the C request ends with the error.
                let f = Fail::runtime(F, &e);
                r.end_with(crate::error::code_of(&e), format!("{F}: {e}"));
                Err(f)
            }
        }
    })
}
