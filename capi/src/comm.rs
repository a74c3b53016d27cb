//! The communicator handle [`ballast_comm`]: the queries, blocking point-to-point with
//! truncation and probing, progress, the barrier, freeing, and the footprint
//! ([`ballast_footprint`]). [`with_comm`] is the boundary of every call on a communicator:
//! the handle's validity (`crate::handles`), the one-thread-at-a-time check ([`enter`]),
//! the poison check, and poisoning on a panic.
//! Ranks as threads are `crate::local_run`'s; the all-gather is `crate::gathered`'s.

use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use ballast_runtime::{Communicator, Envelope, Footprint, Source, TagMatch};

use crate::error::{boundary, panic_text, set_last_error, Fail};
use crate::handles::{self, Kind};
use crate::process::{free_owned, Owned};
use crate::rank_thread::foreign;
use crate::request::Requests;
use crate::{
    BALLAST_ANY_SOURCE, BALLAST_ANY_TAG, BALLAST_EINTERNAL, BALLAST_ETRUNC, BALLAST_EUNSUPPORTED,
    BALLAST_TAG_MAX,
};

/// A rank's communicator (opaque).
pub struct ballast_comm {
    /// The thread inside a call on the communicator now (`pthread_self`), 0 when none:
    /// a second thread's call is refused ([`with_comm_at`]). The one field another thread
    /// touches while a call runs, always through a raw pointer (never a reference to the
    /// whole handle).
    owner: AtomicU64,
    /// For a communicator lent to a rank's thread (`ballast_local_run`,
    /// `ballast_mpi_run_ranks`), that thread (`pthread_self`); 0 for one a process owns. A
    /// call from another thread that runs another rank is refused ([`foreign`]).
    home: u64,
    /// Its rank (for [`foreign`]'s message; another thread reads it, atomically, as
    /// `owner`).
    pub(crate) rank: AtomicUsize,
    /// The runtime's communicator: lent by `ballast_local_run` for the duration of
    /// `rank_main`, or a box of this handle's own (`owned`).
    comm: *mut Communicator,
    /// For a communicator of ballast_comm_from_env or ballast_comm_from_mpi, what it lives
    /// on (its box in `comm` is this handle's); None for one lent by ballast_local_run.
    pub(crate) owned: Option<Owned>,
    /// Why the communicator is poisoned (a panic inside a call), if it is.
    pub(crate) poisoned: Option<String>,
    /// Its requests (boxes lent to C until ballast_request_free): the live ones are freed
    /// and reported when the communicator finishes.
    pub(crate) requests: Requests,
}

impl ballast_comm {
    /// A handle lent `comm` by ballast_local_run for the duration of rank_main.
    pub(crate) fn lent(comm: &mut Communicator) -> ballast_comm {
        ballast_comm {
            owner: AtomicU64::new(0),
            home: this_thread(),
            rank: AtomicUsize::new(comm.rank()),
            comm,
            owned: None,
            poisoned: None,
            requests: Requests::default(),
        }
    }

    /// A handle owning `comm` and what it lives on.
    pub(crate) fn owned(comm: Box<Communicator>, owned: Owned) -> ballast_comm {
        ballast_comm {
            owner: AtomicU64::new(0),
            home: 0,
            rank: AtomicUsize::new(comm.rank()),
            comm: Box::into_raw(comm),
            owned: Some(owned),
            poisoned: None,
            requests: Requests::default(),
        }
    }

    /// The communicator and what it lives on, of an owning handle (after its requests
    /// were cancelled).
    pub(crate) fn into_owned(self) -> (Box<Communicator>, Owned) {
        let owned = self.owned.expect("into_owned on an owning handle");
        // SAFETY: an owning handle's `comm` is the box of `ballast_comm::owned`, taken back
        // once here (the handle is consumed).
        (unsafe { Box::from_raw(self.comm) }, owned)
    }

    pub(crate) fn comm(&mut self) -> &mut Communicator {
        // SAFETY: `comm` points to the communicator `ballast_local_run` lends for the whole
        // life of this handle (the handle is dropped before the communicator finishes), or
        // to this handle's own box.
        unsafe { &mut *self.comm }
    }

    fn comm_ref(&self) -> &Communicator {
        // SAFETY: as in `comm`.
        unsafe { &*self.comm }
    }

    /// Frees the requests still live; returns how many there were.
    pub(crate) fn cancel_requests(&mut self) -> usize {
        self.requests.cancel_all()
    }
}

/// What a receive or send completed with.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ballast_status {
    /// The source rank of a receive; the destination rank of a send.
    pub source: c_int,
    /// The message's tag.
    pub tag: u32,
    /// The message's length in bytes.
    pub len: usize,
    /// 0, or the request's own BALLAST_E* code.
    pub error: c_int,
}

/// Transport memory of a rank, in bytes, and its endpoint counters. Fields added later go
/// at the end, in a new minor version: the struct grows, so the SONAME
/// (libballast.so.MAJOR.MINOR) changes with it and a program built against an older header
/// does not load a newer library.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ballast_footprint {
    /// Registered pool buffers.
    pub pool: u64,
    /// All registered memory.
    pub registered: u64,
    /// Memory locked with mlock.
    pub locked: u64,
    /// Per-endpoint receive queues and endpoint state.
    pub endpoint_queues: u64,
    /// The shared receive queue.
    pub shared_receive_queue: u64,
    /// Control channels and per-peer control state.
    pub control: u64,
    /// The sum the runtime reports as Footprint::total_bytes.
    pub total: u64,
    /// Peers connected.
    pub peers_connected: u32,
    /// Endpoints open now.
    pub endpoints_live: u32,
    /// Most endpoints open at once.
    pub endpoints_peak: u32,
    /// Endpoints opened in all.
    pub endpoints_opened: u32,
    /// Peers reached over the datagram path (past max_endpoints with
    /// endpoint_overflow=datagram).
    pub datagram_peers: u32,
    /// Their fixed state, bytes (part of total).
    pub datagram: u64,
    /// Shared memory (transport shm; 0 elsewhere): this rank's own segment, which the other
    /// processes of its node map (not added again to total: it is shared_receive_queue).
    /// New in 0.4.
    pub shm_segment: u64,
    /// Node-local peers whose segments this rank mapped (at its first endpoint to each).
    /// New in 0.4.
    pub shm_peers_mapped: u32,
    /// Their segments' bytes, mapped here (not in total: each is its owner's shm_segment,
    /// and resident pages are shared, so a node's shm memory is the sum of its ranks'
    /// shm_segment). New in 0.4.
    pub shm_mapped: u64,
}

impl From<&Footprint> for ballast_footprint {
    fn from(f: &Footprint) -> ballast_footprint {
        let c = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        ballast_footprint {
            pool: f.pool_bytes,
            registered: f.registered_bytes,
            locked: f.locked_bytes,
            endpoint_queues: f.endpoint_bytes,
            shared_receive_queue: f.srq_bytes,
            control: f.control_bytes,
            total: f.total_bytes(),
            peers_connected: c(f.peers_connected),
            endpoints_live: c(f.endpoints_live),
            endpoints_peak: c(f.endpoints_peak),
            endpoints_opened: c(f.endpoints_opened),
            datagram_peers: c(f.datagram_peers),
            datagram: f.datagram_bytes,
            shm_segment: f.shm_segment_bytes,
            shm_peers_mapped: c(f.shm_peers_mapped),
            shm_mapped: f.shm_mapped_bytes,
        }
    }
}

/// The boundary of a call on communicator handle `comm`: NULL and a handle that is not a
/// live communicator (freed, of a finished ballast_local_run, of another kind) are
/// `BALLAST_EINVAL`, a poisoned communicator `BALLAST_EINTERNAL`, a [`Fail`] becomes the
/// thread's last error and its code, and a panic inside `f` poisons the communicator. One
/// `catch_unwind` and no allocation on the success path: it is the cost every call pays.
#[inline(always)]
pub(crate) fn with_comm(
    func: &str,
    comm: *mut ballast_comm,
    f: impl FnOnce(&mut ballast_comm) -> Result<c_int, Fail>,
) -> c_int {
    match comm_of(func, comm) {
        Ok(c) => with_comm_at(func, "communicator", c, f),
        Err(fail) => failed(fail),
    }
}

/// The communicator behind live handle `comm`.
#[inline(always)]
pub(crate) fn comm_of(func: &str, comm: *const ballast_comm) -> Result<*mut ballast_comm, Fail> {
    handles::object(func, "comm", comm, Kind::Comm)
}

/// The calling thread, as the C library's threads know it (`pthread_self`: it reads the
/// thread pointer; a `thread_local!` in a shared library costs a `__tls_get_addr` call on
/// every call).
#[inline(always)]
pub(crate) fn this_thread() -> u64 {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    unsafe { libc::pthread_self() as u64 }
}

/// The entry of a call on communicator `comm` by this thread: `Ok(Some(guard))` once this
/// thread is the one inside (the guard leaves at its drop), `Ok(None)` when this thread is
/// inside already (a call made from within a call), BALLAST_EUNSUPPORTED naming both
/// threads when another thread is inside. One compare-and-swap, no lock.
#[inline(always)]
pub(crate) fn enter(func: &str, comm: *mut ballast_comm) -> Result<Option<Inside>, Fail> {
    enter_as(func, comm, this_thread())
}

/// [`enter`] by thread `me` (the caller's `this_thread()`).
#[inline(always)]
fn enter_as(func: &str, comm: *mut ballast_comm, me: u64) -> Result<Option<Inside>, Fail> {
    // SAFETY: a live communicator (its handle resolved), not freed during the call (the
    // contract): the address of its `owner` field alone, from the raw pointer (never
    // through a reference to the whole handle, which the thread inside a call holds); the
    // field is an atomic, only ever accessed atomically.
    let (owner, cell) = unsafe {
        let p = std::ptr::addr_of!((*comm).owner);
        (p, &*p)
    };
    match cell.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
        Ok(_) => Ok(Some(Inside(owner))),
        Err(other) if other == me => Ok(None),
        Err(other) => Err(busy(func, me, other)),
    }
}

/// A thread inside a call on a communicator (its `owner` field): leaves at its drop (also
/// when a panic unwinds).
pub(crate) struct Inside(*const AtomicU64);

impl Drop for Inside {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: the `owner` field of a communicator that is live for the whole call the
        // guard belongs to (the handle is not freed while used; a freed one's guard is
        // forgotten, `ballast_comm_free`); derived from the raw pointer, after the call's
        // reference to the handle was last used.
        unsafe { (*self.0).store(0, Ordering::Release) };
    }
}

/// A call from thread `me` while thread `other` is inside a call on the communicator.
#[cold]
#[inline(never)]
fn busy(func: &str, me: u64, other: u64) -> Fail {
    Fail::new(
        BALLAST_EUNSUPPORTED,
        format!(
            "{func}: called from thread {me:#x} while thread {other:#x} is inside a call on the same \
             communicator (pthread_self values): a communicator and its requests are used by one \
             thread at a time; serialise the calls, or give each thread a communicator of its own"
        ),
    )
}

/// [`with_comm`] on the communicator at `comm` (a live one, not a handle), reached through
/// a handle of `what` ("communicator" or "request"): a call from the thread of another
/// rank is BALLAST_EINVAL ([`foreign`]).
#[inline(always)]
pub(crate) fn with_comm_at(
    func: &str,
    what: &str,
    comm: *mut ballast_comm,
    f: impl FnOnce(&mut ballast_comm) -> Result<c_int, Fail>,
) -> c_int {
    let me = this_thread();
    let _inside = match enter_as(func, comm, me) {
        Ok(g) => g,
        Err(fail) => return failed(foreign(func, what, comm).unwrap_or(fail)),
    };
    // SAFETY: a live communicator (its handle resolved), and this thread is the one inside
    // it (`enter`).
    let c = unsafe { &mut *comm };
    if c.home != 0 && c.home != me {
        if let Some(fail) = foreign(func, what, comm) {
            return failed(fail);
        }
    }
    if let Some(why) = &c.poisoned {
        return failed(poisoned(func, why));
    }
    if let Some(o) = &c.owned {
        if let Err(e) = o.enter(func) {
            return failed(e);
        }
    }
    match catch_unwind(AssertUnwindSafe(|| f(c))) {
        Ok(Ok(code)) => code,
        Ok(Err(fail)) => failed(fail),
        Err(p) => panicked(func, comm, p),
    }
}

/// A call on a poisoned communicator (out of line: every call's hot path stays short).
#[cold]
#[inline(never)]
fn poisoned(func: &str, why: &str) -> Fail {
    Fail::new(BALLAST_EINTERNAL, format!("{func}: communicator poisoned: {why}"))
}

/// A rank outside the world (out of line, as [`poisoned`]).
#[cold]
#[inline(never)]
fn bad_rank(func: &str, rank: c_int, n: usize) -> Fail {
    Fail::inval(format!(
        "{func}: rank {rank} is out of range: the world has {n} rank{} (0 to {})",
        if n == 1 { "" } else { "s" },
        n.saturating_sub(1)
    ))
}

/// A failed call: its message becomes the thread's last error; returns its code.
#[cold]
#[inline(never)]
pub(crate) fn failed(fail: Fail) -> c_int {
    set_last_error(&fail.msg);
    fail.code
}

/// A panic inside a call on `comm`: poisons it; `BALLAST_EINTERNAL`.
#[cold]
#[inline(never)]
fn panicked(func: &str, comm: *mut ballast_comm, p: Box<dyn std::any::Any + Send>) -> c_int {
    let why = format!("{func}: internal error (panic): {}", panic_text(&*p));
    // SAFETY: the handle is still live; the closure that borrowed it has unwound.
    unsafe { (*comm).poisoned = Some(why.clone()) };
    failed(Fail::new(BALLAST_EINTERNAL, why))
}

/// `with_comm` for the calls that take a `const ballast_comm *`.
fn with_comm_ref(
    func: &str,
    comm: *const ballast_comm,
    f: impl FnOnce(&ballast_comm) -> Result<c_int, Fail>,
) -> c_int {
    with_comm(func, comm.cast_mut(), |c| f(c))
}

/// Writes `v` to `out`, or fails naming `what`.
///
/// # Safety
/// `out` must be NULL or writable.
pub(crate) unsafe fn put<T>(func: &str, what: &str, out: *mut T, v: T) -> Result<(), Fail> {
    // SAFETY: NULL or writable (the caller's contract).
    let o = unsafe { out.as_mut() }.ok_or_else(|| Fail::null(func, what))?;
    *o = v;
    Ok(())
}

/// A destination rank, checked against the world.
pub(crate) fn dest_rank(func: &str, c: &ballast_comm, dest: c_int) -> Result<usize, Fail> {
    let n = c.comm_ref().world_size();
    match usize::try_from(dest) {
        Ok(d) if d < n => Ok(d),
        _ => Err(bad_rank(func, dest, n)),
    }
}

/// A source (a rank or BALLAST_ANY_SOURCE), checked against the world.
pub(crate) fn source_of(func: &str, c: &ballast_comm, source: c_int) -> Result<Source, Fail> {
    if source == BALLAST_ANY_SOURCE {
        return Ok(Source::Any);
    }
    Ok(Source::Rank(dest_rank(func, c, source)?))
}

/// A send tag, 0 to BALLAST_TAG_MAX.
pub(crate) fn send_tag(func: &str, tag: u32) -> Result<u32, Fail> {
    if i64::from(tag) > BALLAST_TAG_MAX {
        return Err(bad_send_tag(func, tag));
    }
    Ok(tag)
}

#[cold]
#[inline(never)]
fn bad_send_tag(func: &str, tag: u32) -> Fail {
    Fail::inval(format!(
        "{func}: tag {tag} is above BALLAST_TAG_MAX ({BALLAST_TAG_MAX}): the tags above are the runtime's"
    ))
}

#[cold]
#[inline(never)]
fn bad_recv_tag(func: &str, tag: i64) -> Fail {
    Fail::inval(if tag > BALLAST_TAG_MAX {
        format!("{func}: tag {tag} is above BALLAST_TAG_MAX ({BALLAST_TAG_MAX}): the tags above are the runtime's")
    } else {
        format!("{func}: tag {tag} is negative and not BALLAST_ANY_TAG ({BALLAST_ANY_TAG})")
    })
}

/// A receive tag (a tag or BALLAST_ANY_TAG).
pub(crate) fn tag_match(func: &str, tag: i64) -> Result<TagMatch, Fail> {
    match tag {
        BALLAST_ANY_TAG => Ok(TagMatch::Any),
        0..=BALLAST_TAG_MAX => Ok(TagMatch::Tag(tag as u32)),
        _ => Err(bad_recv_tag(func, tag)),
    }
}

/// The bytes C passes as (`buf`, `len`).
///
/// # Safety
/// `buf` must be NULL with `len` 0, or point to `len` readable bytes valid for `'a`.
pub(crate) unsafe fn bytes<'a>(func: &str, buf: *const c_void, len: usize) -> Result<&'a [u8], Fail> {
    if len == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return Err(Fail::null(func, "buf"));
    }
    if len > isize::MAX as usize {
        return Err(too_long(func, "len", len));
    }
    // SAFETY: non-NULL with `len` readable bytes (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) })
}

/// A length no buffer can have, of argument `arg` (out of line, as [`poisoned`]).
#[cold]
#[inline(never)]
pub(crate) fn too_long(func: &str, arg: &str, len: usize) -> Fail {
    Fail::inval(format!(
        "{func}: {arg} is {len} bytes, above the largest message ({} bytes, PTRDIFF_MAX)",
        isize::MAX
    ))
}

pub(crate) fn runtime(func: &'static str) -> impl Fn(ballast_runtime::Error) -> Fail {
    move |e| Fail::runtime(func, &e)
}

/// Frees a communicator of ballast_comm_from_env or ballast_comm_from_mpi: the
/// collective finish (every rank must call it; it delivers this rank's sends and serves
/// the others until every rank has finished), then frees the handle, whatever it returns.
/// NULL is not an error: it returns 0 and does nothing, as free(NULL) does.
/// Requests still live are cancelled (freed) and reported: BALLAST_EINVAL, after the
/// finish. The handle is refused from then on (a second free is BALLAST_EINVAL). Errors:
/// BALLAST_EINVAL for a handle that is not a live communicator, or a communicator
/// of ballast_local_run (which finishes its own; nothing is freed), and under MPI when the host already called
/// MPI_Finalize (ballast_comm_free must come first: the communicator's MPI state is then
/// abandoned, not finished, and its handle is ended all the same: refused from then on);
/// BALLAST_EINTERNAL for a poisoned communicator (dropped without the finish); the
/// runtime's errors (e.g. BALLAST_EPEER).
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not used by another thread during the
/// call (a freed one is refused).
#[no_mangle]
pub unsafe extern "C" fn ballast_comm_free(comm: *mut ballast_comm) -> c_int {
    const F: &str = "ballast_comm_free";
    if comm.is_null() {
        return 0;
    }
    boundary(F, || {
        let c = comm_of(F, comm)?;
        // Another thread inside a call on it is refused, as for every call.
        let inside = enter(F, c)?;
        // SAFETY: a live communicator (its handle resolved), this thread inside it.
        if unsafe { (*c).owned.is_none() } {
            return Err(Fail::inval(format!(
                "{F}: the communicator belongs to ballast_local_run, which finishes it"
            )));
        }
        handles::unregister(comm as usize, Kind::Comm)
            .map_err(|r| handles::refused(F, "comm", Kind::Comm, r))?;
        // The handle goes, and its atomic with it: not left (no later store into it).
        std::mem::forget(inside);
        // SAFETY: an owning handle's object is the box of `Box::into_raw` in process.rs,
        // taken back once here (its handle has just been ended).
        let c = unsafe { Box::from_raw(c) };
        free_owned(F, *c)
    })
}

/// This rank, 0 to world size - 1, in *out.
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused); `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_rank(comm: *const ballast_comm, out: *mut c_int) -> c_int {
    const F: &str = "ballast_rank";
    with_comm_ref(F, comm, |c| {
        // SAFETY: NULL or writable (the contract).
        unsafe { put(F, "out", out, c.comm_ref().rank() as c_int) }?;
        Ok(0)
    })
}

/// The number of ranks, in *out.
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused); `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_world_size(comm: *const ballast_comm, out: *mut c_int) -> c_int {
    const F: &str = "ballast_world_size";
    with_comm_ref(F, comm, |c| {
        // SAFETY: NULL or writable (the contract).
        unsafe { put(F, "out", out, c.comm_ref().world_size() as c_int) }?;
        Ok(0)
    })
}

/// Sends `len` bytes at `buf` to `dest` with `tag` (0 to 2^31 - 1) and returns when they
/// are delivered (over local and verbs: the receiving rank has taken them into its queue,
/// which needs it to call into the library, as an MPI rendezvous send waits for its
/// receiver; on MPI, when MPI holds them); waits while the pool is exhausted. A send to
/// the caller's own rank never waits for its receive, on every transport: a message larger
/// than a pool buffer is copied and queued for it (BALLAST_ENOMEM when the copy does not
/// fit). Errors: BALLAST_EINVAL (NULL, rank or tag out of range, `len` above PTRDIFF_MAX);
/// BALLAST_ENOMEM when the copy the runtime keeps of a message larger than a pool buffer
/// cannot be allocated; BALLAST_EPEER when the peer died or the run was aborted; the
/// transport's.
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused); `buf` NULL with `len` 0 or `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn ballast_send(
    comm: *mut ballast_comm,
    dest: c_int,
    tag: u32,
    buf: *const c_void,
    len: usize,
) -> c_int {
    const F: &str = "ballast_send";
    with_comm(F, comm, |c| {
        let d = dest_rank(F, c, dest)?;
        let t = send_tag(F, tag)?;
        // SAFETY: `len` readable bytes at `buf` (the contract).
        let data = unsafe { bytes(F, buf, len) }?;
        c.comm().send(d, t, data).map_err(runtime(F))?;
        Ok(0)
    })
}

fn status_of(e: &Envelope, error: c_int) -> ballast_status {
    ballast_status {
        source: e.source as c_int,
        tag: e.tag,
        len: e.len,
        error,
    }
}

/// Receives the next message from `source` (a rank or BALLAST_ANY_SOURCE) with `tag` (0
/// to 2^31 - 1 or BALLAST_ANY_TAG) into `buf` of `cap` bytes, waiting until it arrives;
/// fills *status when it is not NULL. `cap` is at most PTRDIFF_MAX (no C object is
/// larger; a larger message cannot be sent either). Errors: BALLAST_ETRUNC when the
/// message is longer than `cap`: the status is filled (its len is the message's) and
/// nothing is consumed; BALLAST_EINVAL (NULL, rank or tag out of range, `cap` above
/// PTRDIFF_MAX, checked before anything is received); BALLAST_ENOMEM when memory for the
/// message cannot be had: over MPI even when `cap` is large enough, since a message is
/// taken out of MPI into memory of its own before it is copied into `buf` (on the local
/// transport a message arriving during the wait is written into `buf` chunk by chunk,
/// with no memory of its own); BALLAST_EPEER when the rank it waits for (for
/// BALLAST_ANY_SOURCE, every other rank) finished or failed without sending a match, and
/// at once for a receive from the caller's own rank with nothing from it queued (only
/// the calling thread could send it: a wait that can never complete returns an error,
/// on every transport); the transport's. A receive whose wait fails gives back a message
/// it had already matched: a later receive gets it, in its place.
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused); `buf` NULL with `cap` 0 or `cap` writable bytes; `status`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_recv(
    comm: *mut ballast_comm,
    source: c_int,
    tag: i64,
    buf: *mut c_void,
    cap: usize,
    status: *mut ballast_status,
) -> c_int {
    const F: &str = "ballast_recv";
    with_comm(F, comm, |c| {
        let s = source_of(F, c, source)?;
        let t = tag_match(F, tag)?;
        if buf.is_null() && cap > 0 {
            return Err(Fail::null(F, "buf"));
        }
        if cap > isize::MAX as usize {
            return Err(too_long(F, "cap", cap));
        }
        let into: &mut [u8] = if cap == 0 {
            &mut []
        } else {
            // SAFETY: `buf` is non-NULL with `cap` writable bytes (the contract), not
            // otherwise borrowed during the call. The bytes may be uninitialised C memory
            // (a fresh `malloc`): `recv_into` only writes them (the message's bytes), and
            // nothing reads them before.
            unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), cap) }
        };
        let got = match c.comm().recv_into(s, t, into).map_err(runtime(F))? {
            Ok(e) => e,
            Err(e) => {
                if !status.is_null() {
                    // SAFETY: non-NULL and writable (the contract).
                    unsafe { *status = status_of(&e, BALLAST_ETRUNC) };
                }
                return Err(Fail::new(
                    BALLAST_ETRUNC,
                    format!(
                        "{F}: the message from rank {} with tag {} is {} bytes, the buffer {cap}",
                        e.source, e.tag, e.len
                    ),
                ));
            }
        };
        if !status.is_null() {
            // SAFETY: non-NULL and writable (the contract).
            unsafe { *status = status_of(&got, 0) };
        }
        Ok(0)
    })
}

/// Progresses once and tells whether a message from `source` with `tag` has fully arrived
/// (*found 1 or 0) and, when it has and `status` is not NULL, its source, tag and length;
/// the message stays for the next receive. Errors: BALLAST_EINVAL (NULL, rank or tag out
/// of range); BALLAST_EPEER when none has arrived and none can come any more: rank
/// `source` finished or failed, so that an iprobe loop ends as a blocking ballast_recv would (told
/// on the local transport; over MPI, which tells no ends, it keeps answering 0; never for
/// BALLAST_ANY_SOURCE while no rank failed: the caller may still send to itself); the
/// transport's.
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused); `found` NULL or writable; `status` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_iprobe(
    comm: *mut ballast_comm,
    source: c_int,
    tag: i64,
    found: *mut c_int,
    status: *mut ballast_status,
) -> c_int {
    const F: &str = "ballast_iprobe";
    with_comm(F, comm, |c| {
        let s = source_of(F, c, source)?;
        let t = tag_match(F, tag)?;
        if found.is_null() {
            return Err(Fail::null(F, "found"));
        }
        let e = c.comm().iprobe(s, t).map_err(runtime(F))?;
        // SAFETY: `found` is non-NULL and writable (the contract).
        unsafe { *found = c_int::from(e.is_some()) };
        if let (Some(e), false) = (e, status.is_null()) {
            // SAFETY: non-NULL and writable (the contract).
            unsafe { *status = status_of(&e, 0) };
        }
        Ok(0)
    })
}

/// Advances the runtime once (arrivals, completions, handshakes, credits, queued chunks).
/// Errors: BALLAST_EINVAL for NULL; BALLAST_EPEER when a peer died or the run was aborted;
/// the transport's.
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused).
#[no_mangle]
pub unsafe extern "C" fn ballast_progress(comm: *mut ballast_comm) -> c_int {
    const F: &str = "ballast_progress";
    with_comm(F, comm, |c| {
        c.comm().progress().map_err(runtime(F))?;
        Ok(0)
    })
}

/// Returns when every rank has entered the barrier. Collective. Errors: BALLAST_EINVAL for
/// NULL, or when another rank called a different collective at this point (each collective
/// carries its number and kind; the message names both; on the MPI native path only with
/// the setting collective_checks on, otherwise the barrier is MPI_Barrier and a rank in
/// another collective is an erroneous MPI program, as in MPI), or while another collective that
/// failed with BALLAST_ENOMEM is unfinished; BALLAST_ENOMEM when memory ran out meanwhile
/// (e.g. for another message arriving): the barrier is not finished, and calling
/// ballast_barrier again resumes it (the other ranks wait in it until then); BALLAST_EPEER
/// when a peer died, the run was aborted, or a rank ended (returned from its
/// ballast_local_run main) without entering the barrier (the message names it).
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused).
#[no_mangle]
pub unsafe extern "C" fn ballast_barrier(comm: *mut ballast_comm) -> c_int {
    const F: &str = "ballast_barrier";
    with_comm(F, comm, |c| {
        c.comm().barrier().map_err(runtime(F))?;
        Ok(0)
    })
}

/// This rank's transport memory as accounted now, in *out (bytes).
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused); `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_comm_footprint(
    comm: *const ballast_comm,
    out: *mut ballast_footprint,
) -> c_int {
    const F: &str = "ballast_comm_footprint";
    with_comm_ref(F, comm, |c| {
        let fp = ballast_footprint::from(&c.comm_ref().footprint());
        // SAFETY: NULL or writable (the contract).
        unsafe { put(F, "out", out, fp) }?;
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::last_error;
    use ballast_runtime::{launch::threads, RuntimeConfig};

    #[test]
    fn a_panic_on_a_communicator_poisons_it() {
        let cfg = RuntimeConfig::builder().buffer_count(4).build().unwrap();
        let got = threads::run_ranks(1, &cfg, |comm| {
            let mut h = ballast_comm::lent(comm);
            let h: *mut ballast_comm = &mut h;
            let p = handles::register(Kind::Comm, h.cast()).unwrap() as *mut ballast_comm;
            let mut n = 0;
            // SAFETY: `p` is the live handle above; `n` a local.
            let before = unsafe { ballast_world_size(p, &mut n) };
            let code = with_comm("ballast_test_call", p, |_| -> Result<c_int, Fail> {
                panic!("inside")
            });
            let first = last_error();
            // SAFETY: as above.
            let after = unsafe { ballast_progress(p) };
            let second = last_error();
            // SAFETY: as above.
            let query = unsafe { ballast_rank(p, &mut n) };
            handles::unregister(p as usize, Kind::Comm).unwrap();
            // SAFETY: as above (a stale handle is refused, never followed).
            let stale = unsafe { ballast_rank(p, &mut n) };
            (before, code, first, after, second, query, stale)
        })
        .unwrap();
        let (before, code, first, after, second, query, stale) = got.into_iter().next().unwrap();
        assert_eq!(stale, crate::BALLAST_EINVAL);
        assert_eq!(before, 0);
        assert_eq!(code, BALLAST_EINTERNAL);
        assert_eq!(first, "ballast_test_call: internal error (panic): inside");
        assert_eq!(after, BALLAST_EINTERNAL, "every later call on it");
        assert_eq!(query, BALLAST_EINTERNAL);
        assert_eq!(
            second,
            "ballast_progress: communicator poisoned: ballast_test_call: internal error (panic): inside"
        );
    }
}
