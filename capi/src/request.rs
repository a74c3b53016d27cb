//! The request handle [`ballast_request`]: non-blocking sends and receives (into the
//! runtime's buffer, or the caller's: [`ballast_irecv_into`]), their completion (test,
//! wait, waitall, with a [`ballast_status`] kept for repeated waits; waitany, testsome
//! and cancel are `crate::completion`'s), a completed receive's bytes, and freeing.

use std::os::raw::{c_int, c_void};

use ballast_runtime::CommError;
use ballast_runtime::{Completion, Error, Request};

use crate::comm::{
    ballast_comm, ballast_status, bytes, dest_rank, failed, send_tag, source_of, tag_match, with_comm,
    with_comm_at,
};
use crate::error::{clear_out, code_of, set_last_error, Fail};
use crate::handles::{self, Kind};
use crate::{BALLAST_ECANCELED, BALLAST_EINTERNAL, BALLAST_EINVAL, BALLAST_ENOMEM, BALLAST_ETRUNC};

/// A non-blocking send or receive (opaque).
pub struct ballast_request {
    comm: *mut ballast_comm,
    /// Its index in its communicator's live list ([`Requests`]).
    pos: usize,
    /// Its slot in the handle registry (`crate::handles`).
    slot: u32,
    /// The runtime's request, until it completes.
    pending: Option<Request>,
    /// A send's destination, tag and length (its status).
    send: Option<ballast_status>,
    /// The status once complete.
    done: Option<ballast_status>,
    /// The error message of a request that completed with an error; or, just after a
    /// `ballast_test` whose progress ran out of memory (the request stays live), that
    /// error's message until `ballast_test` reports it (empty otherwise).
    failure: String,
    /// A completed receive's bytes.
    data: Vec<u8>,
    /// The caller's buffer and its length, of a receive of `ballast_irecv_into`.
    into: Option<(*mut u8, usize)>,
}

/// The requests of one communicator: the live ones (freed and reported when the
/// communicator finishes), the registry slots it holds for its next requests (taken in
/// batches, reused without a lock: a communicator is used by one thread at a time), and
/// freed boxes kept for reuse, so that a steady loop of requests allocates nothing. A
/// request's handle is its slot and generation, so a freed request's handle is refused
/// whatever reuses its box or its slot.
#[derive(Default)]
pub(crate) struct Requests {
    /// Every live request: `live[r.pos] == r`.
    live: Vec<*mut ballast_request>,
    /// Free registry slots of this communicator.
    slots: Vec<u32>,
    /// Freed boxes, at most [`Requests::SPARE`]: boxes, because the registry holds a
    /// request's address.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<ballast_request>>,
}

impl Requests {
    /// Freed boxes kept for reuse; beyond it they go back to the allocator.
    const SPARE: usize = 1024;

    /// A live request of `comm` for `pending` (with a send's status): its handle for C.
    /// Errors: BALLAST_ENOMEM when no handle can be had.
    #[inline(always)]
    fn hand_out(
        &mut self,
        func: &str,
        comm: *mut ballast_comm,
        pending: Request,
        send: Option<ballast_status>,
        into: Option<(*mut u8, usize)>,
    ) -> Result<*mut ballast_request, Fail> {
        let Some(slot) = self.slots.pop().or_else(|| self.refill()) else {
            return Err(no_handle(func));
        };
        if self.live.try_reserve(1).is_err() {
            self.slots.push(slot);
            return Err(no_handle(func));
        }
        let pos = self.live.len();
        let b = match self.spare.pop() {
            // A spare box is already reset (`release`): only the new request's fields.
            Some(mut b) => {
                b.comm = comm;
                b.pos = pos;
                b.slot = slot;
                b.pending = Some(pending);
                b.send = send;
                b.into = into;
                b
            }
            None => Box::new(ballast_request {
                comm,
                pos,
                slot,
                pending: Some(pending),
                send,
                done: None,
                failure: String::new(),
                data: Vec::new(),
                into,
            }),
        };
        let p = Box::into_raw(b);
        self.live.push(p);
        Ok(handles::open_slot(slot, Kind::Request, p.cast()) as *mut ballast_request)
    }

    /// Takes a batch of slots from the registry; returns one of them.
    #[cold]
    #[inline(never)]
    fn refill(&mut self) -> Option<u32> {
        handles::take(&mut self.slots, handles::BATCH);
        self.slots.pop()
    }

    /// Frees live request `req`: its handle ends, its data is dropped and its box kept for
    /// reuse.
    ///
    /// # Safety
    /// `req` must be a live request of this communicator, not borrowed.
    unsafe fn release(&mut self, req: *mut ballast_request) {
        // SAFETY: live, so a box of ours; not borrowed (the caller's contract).
        let (pos, slot) = unsafe { ((*req).pos, (*req).slot) };
        self.live.swap_remove(pos);
        if let Some(&moved) = self.live.get(pos) {
            // SAFETY: a live box of ours, distinct from `req`.
            unsafe { (*moved).pos = pos };
        }
        if handles::close_slot(slot) {
            // Never fails: `slots` held this slot before it was handed out.
            self.slots.push(slot);
        }
        // SAFETY: taken back from C once: it is no longer in `live`, its handle ended.
        let mut b = unsafe { Box::from_raw(req) };
        b.pending = None;
        b.done = None;
        if !b.failure.is_empty() {
            b.failure = String::new();
        }
        b.data = Vec::new();
        b.into = None;
        if self.spare.len() < Self::SPARE {
            self.spare.push(b);
        }
    }

    /// Frees every live request (cancelling it; their handles end); returns how many there
    /// were.
    pub(crate) fn cancel_all(&mut self) -> usize {
        let n = self.live.len();
        for p in std::mem::take(&mut self.live) {
            // SAFETY: a live box of ours, taken back once (taken from `live`).
            let b = unsafe { Box::from_raw(p) };
            if handles::close_slot(b.slot) && self.slots.try_reserve(1).is_ok() {
                self.slots.push(b.slot);
            }
        }
        n
    }
}

impl Drop for Requests {
    fn drop(&mut self) {
        self.cancel_all();
        handles::give_back(&mut self.slots);
    }
}

/// BALLAST_ENOMEM: no handle for a new request.
#[cold]
#[inline(never)]
fn no_handle(func: &str) -> Fail {
    Fail::new(
        BALLAST_ENOMEM,
        format!("{func}: no handle for the request (out of memory)"),
    )
}

/// The boundary of a call on request handle `req`: NULL and a handle that is not a live
/// request (freed, of a freed communicator, of another kind) are BALLAST_EINVAL; then its
/// communicator's boundary (`with_comm_at`).
#[inline(always)]
pub(crate) fn with_request(
    func: &str,
    req: *mut ballast_request,
    f: impl FnOnce(&mut ballast_comm, &mut ballast_request) -> Result<c_int, Fail>,
) -> c_int {
    let r = match handles::object(func, "request", req, Kind::Request) {
        Ok(r) => r,
        Err(fail) => return failed(fail),
    };
    // SAFETY: a live request (its handle resolved), used by this thread alone (the contract).
    let comm = unsafe { (*r).comm };
    // A live request's communicator is live: freeing it ends its requests' handles.
    with_comm_at(func, "request", comm, |c| {
        // SAFETY: a live box of `c.requests`, a distinct allocation from `c`.
        f(c, unsafe { &mut *r })
    })
}

/// `BALLAST_EINVAL`: "`func`: `what`" (out of line: every call's hot path stays short).
#[cold]
#[inline(never)]
fn invalid(func: &str, what: &str) -> Fail {
    Fail::inval(format!("{func}: {what}"))
}

/// Completes `r` (progressing once when `block` is false, waiting otherwise); returns its
/// status once complete. Callers hand C the returned value, not a copy read back from
/// `r.done`: that load, right after the status was stored field by field, would stall.
#[inline(always)]
fn complete(c: &mut ballast_comm, r: &mut ballast_request, block: bool) -> Option<ballast_status> {
    if let Some(st) = r.done {
        return Some(st);
    }
    let Some(pending) = r.pending.take() else {
        let st = ballast_status {
            error: BALLAST_EINTERNAL,
            ..Default::default()
        };
        r.done = Some(st);
        r.failure = "request without an operation".into();
        return Some(st);
    };
    if !block {
        match c.comm().test(&pending) {
            Ok(false) => {
                r.pending = Some(pending);
                return None;
            }
            Ok(true) => {}
            Err(e) if code_of(&e) == BALLAST_ENOMEM => {
                // Out of memory ends no request: a message that did not fit stays queued
                // (for this receive, if it is this one's), taken once memory allows.
                r.pending = Some(pending);
                r.failure = e.to_string();
                return None;
            }
            Err(e) => return Some(ended(r, &e)),
        }
    }
    if let Some(into) = r.into {
        return Some(wait_into(c, r, pending, into));
    }
    let st = match c.comm().wait(pending) {
        Ok(Completion::Received(m)) => {
            let st = ballast_status {
                source: m.source as c_int,
                tag: m.tag,
                len: m.data.len(),
                error: 0,
            };
            r.data = take_vec(m.data);
            st
        }
        Ok(Completion::Sent) => r.send.unwrap_or_default(),
        Err(e) => return Some(ended(r, &e)),
    };
    r.done = Some(st);
    Some(st)
}

/// A request that ended with error `e`: its status (a refused message's source, tag and
/// length for BALLAST_ETRUNC; a send's destination, tag and length) and message.
#[cold]
#[inline(never)]
fn ended(r: &mut ballast_request, e: &Error) -> ballast_status {
    let st = match e {
        Error::Comm(CommError::Truncated { peer, tag, len, .. }) => ballast_status {
            source: *peer as c_int,
            tag: *tag,
            len: *len,
            error: BALLAST_ETRUNC,
        },
        _ => ballast_status {
            error: code_of(e),
            ..r.send.unwrap_or_default()
        },
    };
    r.failure = e.to_string();
    r.done = Some(st);
    st
}

/// Waits for `ballast_irecv_into` receive `r` (`pending`), its message read where the
/// runtime received it (`Communicator::wait_read`: on the MPI native path the receive's
/// buffer, kept for the next receive, so that no `Vec` is made per message) and copied
/// into the caller's buffer `into` (at most its length: the runtime refuses a longer
/// message); its status.
#[inline(always)]
fn wait_into(
    c: &mut ballast_comm,
    r: &mut ballast_request,
    pending: Request,
    (buf, cap): (*mut u8, usize),
) -> ballast_status {
    let mut fit = true;
    let got = c.comm().wait_read(pending, |data| {
        if data.len() > cap {
            fit = false;
        } else if !data.is_empty() {
            // SAFETY: the caller gave `cap` writable bytes at `buf`, kept until the request
            // completes (ballast_irecv_into's contract); `data.len() <= cap`; `data` is the
            // runtime's buffer, distinct from the caller's.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf, data.len()) };
        }
    });
    let e = match got {
        Ok(Some(e)) => e,
        Ok(None) => return internal(r, "a receive completed as a send".into(), Default::default()),
        Err(e) => return ended(r, &e),
    };
    let st = ballast_status {
        source: e.source as c_int,
        tag: e.tag,
        len: e.len,
        error: 0,
    };
    if !fit {
        let why = format!(
            "the message is {} bytes, the buffer {cap} (and it was taken)",
            e.len
        );
        return internal(r, why, st);
    }
    r.done = Some(st);
    st
}

/// A request that ended with BALLAST_EINTERNAL and message `why`: its status (`st`'s
/// other fields).
#[cold]
#[inline(never)]
fn internal(r: &mut ballast_request, why: String, st: ballast_status) -> ballast_status {
    let st = ballast_status {
        error: BALLAST_EINTERNAL,
        ..st
    };
    r.failure = why;
    r.done = Some(st);
    st
}

/// Cancelled receive `r`: its status (error BALLAST_ECANCELED, the other fields 0).
pub(crate) fn cancelled(r: &mut ballast_request) -> ballast_status {
    let st = ballast_status {
        error: BALLAST_ECANCELED,
        ..Default::default()
    };
    r.pending = None;
    r.failure = "the receive was cancelled (ballast_request_cancel)".into();
    r.done = Some(st);
    st
}

impl ballast_request {
    /// A send (with its status) rather than a receive.
    pub(crate) fn is_send(&self) -> bool {
        self.send.is_some()
    }

    /// The status once complete.
    pub(crate) fn done(&self) -> Option<ballast_status> {
        self.done
    }

    /// The runtime's request taken out (to be cancelled), while not complete.
    pub(crate) fn take_pending(&mut self) -> Option<Request> {
        self.pending.take()
    }

    /// Puts back the runtime's request that a cancel gave back.
    pub(crate) fn put_pending(&mut self, req: Request) {
        self.pending = Some(req);
    }

    /// Ends the request with `code` and `msg` (its receive was consumed by a cancel that
    /// failed): `ballast_test` and `ballast_wait` then return `code`, never hang.
    pub(crate) fn end_with(&mut self, code: std::os::raw::c_int, msg: String) {
        self.pending = None;
        self.failure = msg;
        self.done = Some(ballast_status {
            error: code,
            ..Default::default()
        });
    }
}

/// `v` moved field by field. The message comes back from the runtime in memory written 8
/// bytes at a time; a plain move reads its (pointer, length) pair back as one 16-byte load,
/// which waits for both stores (a store-forwarding stall, the hottest instruction of
/// `ballast_wait` in `perf annotate`).
#[inline(always)]
fn take_vec(v: Vec<u8>) -> Vec<u8> {
    let mut v = std::mem::ManuallyDrop::new(v);
    let (ptr, len, cap) = (v.as_mut_ptr(), v.len(), v.capacity());
    // SAFETY: the parts of a Vec<u8> this function owns and no longer drops.
    unsafe { Vec::from_raw_parts(ptr, len, cap) }
}

/// The result of a completed request: its status's error as a `Fail`.
fn outcome(func: &str, r: &ballast_request) -> Result<c_int, Fail> {
    match &r.done {
        Some(st) if st.error != 0 => Err(Fail::new(st.error, format!("{func}: {}", r.failure))),
        _ => Ok(0),
    }
}

/// Starts sending `len` bytes at `buf` to `dest` with `tag` (0 to 2^31 - 1), in *out;
/// `buf` may be reused as soon as this returns. Errors: BALLAST_EAGAIN when every pool
/// buffer is in flight (*out is NULL: call ballast_progress and retry), with pool_growth
/// on once the pool reached max_pool_bytes; BALLAST_EINVAL (NULL, rank or tag out of
/// range, `len` above PTRDIFF_MAX); BALLAST_ENOMEM when the copy of the message cannot be
/// allocated, or when pool_growth is on and the pool, below max_pool_bytes, cannot grow
/// (the message names pool_growth and max_pool_bytes; *out is NULL); the transport's.
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused); `buf` NULL with `len` 0 or `len` readable bytes; `out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_isend(
    comm: *mut ballast_comm,
    dest: c_int,
    tag: u32,
    buf: *const c_void,
    len: usize,
    out: *mut *mut ballast_request,
) -> c_int {
    const F: &str = "ballast_isend";
    with_comm(F, comm, |c| {
        // SAFETY: NULL or writable (the contract).
        let out = unsafe { clear_out(F, out) }?;
        let d = dest_rank(F, c, dest)?;
        let t = send_tag(F, tag)?;
        // SAFETY: `len` readable bytes at `buf` (the contract).
        let data = unsafe { bytes(F, buf, len) }?;
        let req = c.comm().isend(d, t, data).map_err(|e| Fail::runtime(F, &e))?;
        let send = ballast_status {
            source: dest,
            tag,
            len,
            error: 0,
        };
        let me: *mut ballast_comm = c;
        let p = c.requests.hand_out(F, me, req, Some(send), None)?;
        *out = p;
        Ok(0)
    })
}

/// Posts a receive from `source` (a rank or BALLAST_ANY_SOURCE) with `tag` (0 to
/// 2^31 - 1 or BALLAST_ANY_TAG), in *out. Errors: BALLAST_EINVAL (NULL, rank or tag out of
/// range); BALLAST_ENOMEM on the MPI native path, where posting first takes in a message
/// set aside earlier for lack of memory, when it still cannot be given memory of its own
/// (no request is made); the transport's. On the engine path (local, verbs, MPI through
/// the engine) a message's BALLAST_ENOMEM comes from ballast_test or ballast_wait instead.
/// A posted receive ends when a message matches, when its source can no longer send
/// (BALLAST_EPEER from ballast_wait; told on the local transport, not over MPI), when
/// ballast_request_cancel withdraws it before a message matched it (it then completes
/// with BALLAST_ECANCELED), or when the communicator is freed, which cancels it (the free
/// then reports it); ballast_request_free refuses it until it completed.
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused); `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_irecv(
    comm: *mut ballast_comm,
    source: c_int,
    tag: i64,
    out: *mut *mut ballast_request,
) -> c_int {
    const F: &str = "ballast_irecv";
    with_comm(F, comm, |c| {
        // SAFETY: NULL or writable (the contract).
        let out = unsafe { clear_out(F, out) }?;
        let s = source_of(F, c, source)?;
        let t = tag_match(F, tag)?;
        let req = c.comm().irecv(s, t).map_err(|e| Fail::runtime(F, &e))?;
        let me: *mut ballast_comm = c;
        let p = c.requests.hand_out(F, me, req, None, None)?;
        *out = p;
        Ok(0)
    })
}

/// Posts a receive from `source` (a rank or BALLAST_ANY_SOURCE) with `tag` (0 to
/// 2^31 - 1 or BALLAST_ANY_TAG) into the caller's `buf` of `cap` bytes, in *out; completed
/// by ballast_wait or ballast_test (or ballast_waitany, ballast_testsome), whose status
/// gives the source, tag and length: the message's bytes are then in `buf[0, len)`, and
/// nothing past them is written. `buf` must stay valid and unread until the request
/// completed (or was cancelled): it is written at completion, by the call that completes
/// it. A matching message longer than `cap` is not taken, as with ballast_recv: the
/// request completes with BALLAST_ETRUNC, its status gives the message's source, tag and
/// length, and the message stays queued, first for the next receive that matches it and
/// is posted (or called, blocking) after the refusal. Receives posted before the refusal
/// keep the messages MPI or the engine matched to them, later ones of the same sender and
/// tag included: those are not handed back, so they come ahead of the refused message
/// (post one receive at a time per sender and tag where that order matters).
/// ballast_request_data gives `buf` and the length. It can be cancelled
/// (ballast_request_cancel) until a message matched it. Errors: BALLAST_EINVAL (NULL
/// `comm` or `out`, `buf` NULL with `cap` > 0, rank or tag out of range, `cap` above
/// PTRDIFF_MAX); BALLAST_ENOMEM as ballast_irecv; the transport's. On the engine path
/// (local, verbs, MPI through the engine) the message arrives in the runtime's buffers and
/// is copied into `buf` through a message of its own (one allocation per message) when the
/// request completes; on the MPI native path it is copied from the runtime's kept receive
/// buffer, which MPI received it into, with no allocation per message. New in 0.3.
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused); `buf` NULL with `cap` 0, or `cap` writable bytes that
/// stay valid until the request completed or was cancelled (or its communicator freed);
/// `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_irecv_into(
    comm: *mut ballast_comm,
    source: c_int,
    tag: i64,
    buf: *mut c_void,
    cap: usize,
    out: *mut *mut ballast_request,
) -> c_int {
    const F: &str = "ballast_irecv_into";
    with_comm(F, comm, |c| {
        // SAFETY: NULL or writable (the contract).
        let out = unsafe { clear_out(F, out) }?;
        let s = source_of(F, c, source)?;
        let t = tag_match(F, tag)?;
        if buf.is_null() && cap > 0 {
            return Err(Fail::null(F, "buf"));
        }
        if cap > isize::MAX as usize {
            return Err(crate::comm::too_long(F, "cap", cap));
        }
        let req = c
            .comm()
            .irecv_within(s, t, cap)
            .map_err(|e| Fail::runtime(F, &e))?;
        let me: *mut ballast_comm = c;
        let p = c
            .requests
            .hand_out(F, me, req, None, Some((buf.cast::<u8>(), cap)))?;
        *out = p;
        Ok(0)
    })
}

/// Progresses once and tells whether `req` completed (*done 1 or 0); when it did, fills
/// *status (if not NULL) and returns the request's own error, if any. Testing a completed
/// request again gives the same status. Errors: BALLAST_EINVAL for NULL `req` or `done`, a
/// request already freed (or cancelled by its communicator's free), or another rank's
/// request tested from a rank's thread (ranks as threads: the message names both ranks;
/// nothing is done, and the request stays its owner's); BALLAST_ENOMEM with
/// *done 0 when the progress could not allocate a message: the request stays live (a
/// message that did not fit stays queued, for this receive if it is its own), so test or
/// wait it again once memory was freed; the request's own (e.g. BALLAST_EPEER when its
/// peer died or the run was aborted), and BALLAST_EPEER with *done 1 when it can never
/// complete, as ballast_wait would return: its source rank finished without sending a
/// match, so that a test loop ends (told on the local transport; over MPI, which tells
/// no ends, a test loop on a finished rank keeps answering 0; never for a
/// BALLAST_ANY_SOURCE receive while no rank failed: the caller may still send to itself).
///
/// # Safety
/// `req` must be NULL or a ballast_request handle, not freed by another thread during the
/// call (a freed one is refused); `done` NULL or writable; `status` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_test(
    req: *mut ballast_request,
    done: *mut c_int,
    status: *mut ballast_status,
) -> c_int {
    const F: &str = "ballast_test";
    with_request(F, req, |c, r| {
        if done.is_null() {
            return Err(Fail::null(F, "done"));
        }
        let st = complete(c, r, false);
        // SAFETY: `done` is non-NULL and writable (the contract).
        unsafe { *done = c_int::from(st.is_some()) };
        if st.is_none() && !r.failure.is_empty() {
            // Out of memory, the request still live.
            let why = std::mem::take(&mut r.failure);
            return Err(Fail::new(BALLAST_ENOMEM, format!("{F}: {why}")));
        }
        if let (Some(st), false) = (st, status.is_null()) {
            // SAFETY: non-NULL and writable (the contract).
            unsafe { *status = st };
        }
        outcome(F, r)
    })
}

/// Waits until `req` completes, fills *status (if not NULL) and returns the request's own
/// error, if any. Waiting on a completed request again gives the same status. A send's
/// status holds the destination, tag and length. Errors: BALLAST_EINVAL for NULL, a
/// request already freed (or cancelled by its communicator's free), or another rank's
/// request waited for from a rank's thread (ranks as threads, `ballast_local_run` and
/// `ballast_mpi_run_ranks`: the message names both ranks; nothing is done, and the request
/// stays its owner's); the request's own (e.g. BALLAST_EPEER
/// when its peer died or the run was aborted, and at once for a receive from the caller's
/// own rank with nothing from it queued and no send of its own in flight: only the
/// calling thread could send it, so the wait could never complete).
///
/// # Safety
/// `req` must be NULL or a ballast_request handle, not freed by another thread during the
/// call (a freed one is refused); `status` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_wait(req: *mut ballast_request, status: *mut ballast_status) -> c_int {
    const F: &str = "ballast_wait";
    with_request(F, req, |c, r| {
        let st = complete(c, r, true);
        if let (Some(st), false) = (st, status.is_null()) {
            // SAFETY: non-NULL and writable (the contract).
            unsafe { *status = st };
        }
        outcome(F, r)
    })
}

/// Waits for each of the `n` requests in `reqs`, in order, filling statuses\[i\] (when
/// `statuses` is not NULL) with each one's status and error; returns the first error (a
/// NULL entry is BALLAST_EINVAL in its status) and keeps that one's message. `n` is at
/// most PTRDIFF_MAX / sizeof(ballast_request *) (no C array is larger): above, or with
/// `reqs` NULL and `n` > 0, BALLAST_EINVAL before any request is touched.
///
/// # Safety
/// `reqs` must point to `n` entries, each NULL or a ballast_request handle; `statuses` NULL
/// or `n` writable entries.
#[no_mangle]
pub unsafe extern "C" fn ballast_waitall(
    n: usize,
    reqs: *const *mut ballast_request,
    statuses: *mut ballast_status,
) -> c_int {
    if n > 0 && reqs.is_null() {
        set_last_error("ballast_waitall: reqs is NULL");
        return BALLAST_EINVAL;
    }
    let most = isize::MAX as usize / std::mem::size_of::<*mut ballast_request>();
    if n > most {
        set_last_error(&format!(
            "ballast_waitall: n is {n} requests, above the largest array of them ({most}, PTRDIFF_MAX / sizeof(ballast_request *))"
        ));
        return BALLAST_EINVAL;
    }
    let mut first: Option<(c_int, String)> = None;
    for i in 0..n {
        // SAFETY: `reqs` has `n` readable entries (the contract).
        let r = unsafe { *reqs.add(i) };
        let mut st = ballast_status::default();
        // SAFETY: `r` is NULL or a live request; `st` is a local.
        let rc = unsafe { ballast_wait(r, &mut st) };
        if rc != 0 {
            st.error = rc;
            if first.is_none() {
                first = Some((
                    rc,
                    format!(
                        "ballast_waitall: request {i} of {n}: {}",
                        crate::error::last_error()
                    ),
                ));
            }
        }
        if !statuses.is_null() {
            // SAFETY: `statuses` has `n` writable entries (the contract).
            unsafe { *statuses.add(i) = st };
        }
    }
    match first {
        Some((rc, msg)) => {
            set_last_error(&msg);
            rc
        }
        None => 0,
    }
}

/// A completed receive's bytes: *data (valid until ballast_request_free; NULL for a
/// 0-byte message; for a receive of ballast_irecv_into, the caller's buffer) and *len.
/// Errors: BALLAST_EINVAL for NULL, a send, or a receive not completed yet, failed or
/// cancelled.
///
/// # Safety
/// `req` must be NULL or a ballast_request handle, not freed by another thread during the
/// call (a freed one is refused); `data` and `len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_request_data(
    req: *const ballast_request,
    data: *mut *const c_void,
    len: *mut usize,
) -> c_int {
    const F: &str = "ballast_request_data";
    with_request(F, req.cast_mut(), |_, r| {
        if r.send.is_some() {
            return Err(invalid(F, "the request is a send"));
        }
        match &r.done {
            Some(st) if st.error == 0 => {}
            Some(_) => return Err(invalid(F, "the receive failed")),
            None => return Err(invalid(F, "the receive has not completed")),
        }
        if data.is_null() || len.is_null() {
            return Err(Fail::null(F, if data.is_null() { "data" } else { "len" }));
        }
        if let (Some((buf, _)), Some(st)) = (r.into, r.done) {
            // SAFETY: both non-NULL and writable (the contract).
            unsafe {
                *data = if st.len == 0 {
                    std::ptr::null()
                } else {
                    buf.cast_const().cast()
                };
                *len = st.len;
            }
            return Ok(0);
        }
        // SAFETY: both non-NULL and writable (the contract).
        unsafe {
            *data = if r.data.is_empty() {
                std::ptr::null()
            } else {
                r.data.as_ptr().cast()
            };
            *len = r.data.len();
        }
        Ok(0)
    })
}

/// Frees a completed request (send or receive, cancelled included) and its data; its
/// handle is refused from then on, whatever request reuses its memory. NULL is not an
/// error: it returns 0 and does nothing, as free(NULL) does. Errors: BALLAST_EINVAL for a
/// request already freed, or a request not completed yet (test or wait it first, or
/// cancel a posted receive with ballast_request_cancel; requests still live when the
/// communicator is freed are cancelled there).
///
/// # Safety
/// `req` must be NULL or a ballast_request handle, not used by another thread during the
/// call (a freed one is refused).
#[no_mangle]
pub unsafe extern "C" fn ballast_request_free(req: *mut ballast_request) -> c_int {
    const F: &str = "ballast_request_free";
    if req.is_null() {
        return 0;
    }
    with_request(F, req, |c, r| {
        if r.done.is_none() {
            return Err(invalid(
                F,
                "the request has not completed (ballast_wait or ballast_test it first)",
            ));
        }
        let r: *mut ballast_request = r;
        // SAFETY: live (its handle resolved by `with_request`); not used after this.
        unsafe { c.requests.release(r) };
        Ok(0)
    })
}
