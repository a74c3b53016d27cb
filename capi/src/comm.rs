//! The communicator handle [`ballast_comm`]: ranks as threads ([`ballast_local_run`]), the
//! queries, blocking point-to-point with truncation and probing, progress, the
//! collectives and the all-gather result [`ballast_gathered`], and the footprint
//! ([`ballast_footprint`]). [`with_comm`] is the boundary of every call on a communicator:
//! NULL and poison checks, and poisoning on a panic.

use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use parking_lot::Mutex;

use ballast_runtime::{local, Communicator, Envelope, Footprint, Source, TagMatch, TransportKind};

use crate::config::ballast_config;
use crate::error::{boundary, last_error, panic_text, set_last_error, Fail};
use crate::process::{free_owned, Owned};
use crate::request::Requests;
use crate::{
    BALLAST_ANY_SOURCE, BALLAST_ANY_TAG, BALLAST_EINTERNAL, BALLAST_EINVAL, BALLAST_EPEER, BALLAST_ETRUNC,
    BALLAST_TAG_MAX,
};

/// A rank's communicator (opaque).
pub struct ballast_comm {
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
    fn lent(comm: &mut Communicator) -> ballast_comm {
        ballast_comm {
            comm,
            owned: None,
            poisoned: None,
            requests: Requests::default(),
        }
    }

    /// A handle owning `comm` and what it lives on.
    pub(crate) fn owned(comm: Box<Communicator>, owned: Owned) -> ballast_comm {
        ballast_comm {
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
        }
    }
}

/// The result of ballast_allgatherv (opaque): every rank's bytes.
pub struct ballast_gathered {
    parts: Vec<Vec<u8>>,
}

/// The boundary of a call on communicator `comm`: NULL is `BALLAST_EINVAL`, a poisoned
/// communicator `BALLAST_EINTERNAL`, a [`Fail`] becomes the thread's last error and its
/// code, and a panic inside `f` poisons the communicator. One `catch_unwind` and no
/// allocation on the success path: it is the cost every call pays.
#[inline(always)]
pub(crate) fn with_comm(
    func: &str,
    comm: *mut ballast_comm,
    f: impl FnOnce(&mut ballast_comm) -> Result<c_int, Fail>,
) -> c_int {
    // SAFETY: NULL or a live handle used by this thread alone (the contract).
    let Some(c) = (unsafe { comm.as_mut() }) else {
        return failed(Fail::null(func, "comm"));
    };
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
    Fail::inval(format!("{func}: rank {rank} is not in 0..{n}"))
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
    Fail::inval(format!("{func}: tag {tag} is above 2^31 - 1 (reserved)"))
}

#[cold]
#[inline(never)]
fn bad_recv_tag(func: &str, tag: i64) -> Fail {
    Fail::inval(format!(
        "{func}: tag {tag} is not 0..=2^31 - 1 or BALLAST_ANY_TAG"
    ))
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
    // SAFETY: non-NULL with `len` readable bytes (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) })
}

fn runtime(func: &'static str) -> impl Fn(ballast_runtime::Error) -> Fail {
    move |e| Fail::runtime(func, &e)
}

/// The function a rank runs.
pub type ballast_rank_main =
    Option<unsafe extern "C" fn(comm: *mut ballast_comm, user: *mut c_void) -> c_int>;

/// The user pointer, shared by the ranks' threads.
struct UserPtr(*mut c_void);
// SAFETY: the pointer is only passed back to the C callback; ballast_local_run's contract
// makes the caller responsible for what its ranks do with it from their threads.
unsafe impl Sync for UserPtr {}

impl UserPtr {
    fn get(&self) -> *mut c_void {
        self.0
    }
}

/// Runs `rank_main(comm, user)` on `nranks` ranks as threads of this process, over the
/// local transport; the communicators belong to this call (it finishes them after
/// rank_main returns: ballast_comm_free on one is BALLAST_EINVAL). rank_main runs on
/// every rank's thread at once, with the same `user`. Requests not freed when rank_main
/// returns are cancelled, and that rank fails with BALLAST_EINVAL. A rank that fails
/// (returns non-zero) aborts the others: their blocking and waiting calls return
/// BALLAST_EPEER, so none waits forever for the failed rank. Returns 0, or the non-zero
/// result of the lowest-numbered failing rank (a rank that failed only with BALLAST_EPEER,
/// as the abort makes the others fail, counts only when no rank failed otherwise), whose
/// error message is copied to the calling thread. Errors: BALLAST_EINVAL for a NULL
/// argument, `nranks` < 1 or a configuration whose transport is not local (or does not
/// validate); the runtime's.
///
/// # Safety
/// `config` must be NULL or a live ballast_config; `rank_main` must be safe to call from
/// several threads at once with `user`.
#[no_mangle]
pub unsafe extern "C" fn ballast_local_run(
    nranks: c_int,
    config: *const ballast_config,
    rank_main: ballast_rank_main,
    user: *mut c_void,
) -> c_int {
    const F: &str = "ballast_local_run";
    boundary(F, || {
        // SAFETY: NULL or a live ballast_config (the contract).
        let cfg = unsafe { config.as_ref() }.ok_or_else(|| Fail::null(F, "config"))?;
        let main = rank_main.ok_or_else(|| Fail::null(F, "rank_main"))?;
        let n = usize::try_from(nranks)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| Fail::inval(format!("{F}: nranks is {nranks}, must be at least 1")))?;
        let kind = cfg.cfg.transport().kind;
        if kind != TransportKind::Local {
            return Err(Fail::inval(format!(
                "{F}: the transport is {kind}; ballast_local_run needs local"
            )));
        }
        cfg.cfg
            .transport()
            .validate()
            .map_err(|e| Fail::inval(format!("{F}: {e}")))?;
        let user = UserPtr(user);
        let user = &user;
        let failures: Failures = Mutex::new(vec![None; n]);
        let failures_ref = &failures;
        let run = local::run(n, &cfg.cfg, move |comm| {
            run_rank(comm, main, user.get(), failures_ref)
        });
        let failures = failures.into_inner();
        // The lowest-numbered rank that failed other than by the abort; when every failure
        // is BALLAST_EPEER, the one that came first.
        let own = failures.iter().flatten().find(|(_, rc, _)| *rc != BALLAST_EPEER);
        let earliest = failures.iter().flatten().min_by_key(|(seq, _, _)| *seq);
        match own.or(earliest).map(|(_, rc, msg)| (*rc, msg.clone())) {
            Some((rc, msg)) => {
                set_last_error(&msg);
                Ok(rc)
            }
            None => run.map(|_| 0).map_err(runtime(F)),
        }
    })
}

/// Each rank's failure in `ballast_local_run`, if it failed: (the order it came in, its
/// code, its message).
type Failures = Mutex<Vec<Option<(u64, c_int, String)>>>;

/// The unwinding payload of a rank that failed: [`run_rank`] records the failure, then
/// unwinds (without the panic hook's message) so that the launcher aborts the other ranks.
struct RankFailed;

/// One rank of `ballast_local_run`: a failure (rank_main's non-zero result, or requests
/// left live) is recorded in `failures[rank]` with its message, and then ends the rank's
/// thread by unwinding, which makes the launcher abort the other ranks.
fn run_rank(
    comm: &mut Communicator,
    main: unsafe extern "C" fn(*mut ballast_comm, *mut c_void) -> c_int,
    user: *mut c_void,
    failures: &Failures,
) {
    let rank = comm.rank();
    let mut h = Box::new(ballast_comm::lent(comm));
    // SAFETY: the handle is live until after the call; `user` is the caller's, passed back.
    let rc = unsafe { main(&mut *h, user) };
    let live = h.cancel_requests();
    let failure = if rc != 0 {
        let msg = last_error();
        Some(if msg.is_empty() {
            (
                rc,
                format!("rank {rank}: rank_main returned {rc} (no Ballast call had failed on its thread)"),
            )
        } else {
            (rc, format!("rank {rank}: {msg}"))
        })
    } else if live > 0 {
        Some((
            BALLAST_EINVAL,
            format!("rank {rank}: {live} request(s) not freed when rank_main returned (cancelled)"),
        ))
    } else {
        None
    };
    if let Some((rc, msg)) = failure {
        let mut all = failures.lock();
        let seq = all.iter().flatten().count() as u64;
        all[rank] = Some((seq, rc, msg));
        drop(all);
        drop(h);
        std::panic::resume_unwind(Box::new(RankFailed));
    }
}

/// Frees a communicator of ballast_comm_from_env or ballast_comm_from_mpi: the
/// collective finish (every rank must call it; it delivers this rank's sends and serves
/// the others until every rank has finished), then frees the handle, whatever it returns.
/// Requests still live are cancelled (freed) and reported: BALLAST_EINVAL, after the
/// finish. Errors: BALLAST_EINVAL for NULL or a communicator of ballast_local_run (which
/// finishes its own; nothing is freed), and under MPI when the host already called
/// MPI_Finalize (the communicator is left, not freed: call ballast_comm_free first);
/// BALLAST_EINTERNAL for a poisoned communicator (dropped without the finish); the
/// runtime's errors (e.g. BALLAST_EPEER).
///
/// # Safety
/// `comm` must be NULL or a live ballast_comm, not used again after this call (except
/// when it belongs to ballast_local_run).
#[no_mangle]
pub unsafe extern "C" fn ballast_comm_free(comm: *mut ballast_comm) -> c_int {
    const F: &str = "ballast_comm_free";
    boundary(F, || {
        if comm.is_null() {
            return Err(Fail::null(F, "comm"));
        }
        // SAFETY: non-NULL and live (the contract).
        if unsafe { (*comm).owned.is_none() } {
            return Err(Fail::inval(format!(
                "{F}: the communicator belongs to ballast_local_run, which finishes it"
            )));
        }
        // SAFETY: an owning handle is the box of `Box::into_raw` in process.rs, taken back
        // once here (C does not use it again: the contract).
        let c = unsafe { Box::from_raw(comm) };
        free_owned(F, *c)
    })
}

/// This rank, 0 to world size - 1, in *out.
///
/// # Safety
/// `comm` must be NULL or a live ballast_comm; `out` NULL or writable.
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
/// `comm` must be NULL or a live ballast_comm; `out` NULL or writable.
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
/// receiver; on MPI, when MPI holds them); waits while the pool is exhausted. Errors:
/// BALLAST_EINVAL (NULL, rank or tag out of range); BALLAST_EPEER when the peer died or
/// the run was aborted; the transport's.
///
/// # Safety
/// `comm` must be NULL or a live ballast_comm; `buf` NULL with `len` 0 or `len` readable bytes.
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
/// fills *status when it is not NULL. Errors: BALLAST_ETRUNC when the message is longer
/// than `cap`: the status is filled (its len is the message's) and nothing is consumed;
/// BALLAST_EINVAL (NULL, rank or tag out of range); the transport's.
///
/// # Safety
/// `comm` must be NULL or a live ballast_comm; `buf` NULL with `cap` 0 or `cap` writable
/// bytes; `status` NULL or writable.
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
/// of range); the transport's.
///
/// # Safety
/// `comm` must be NULL or a live ballast_comm; `found` NULL or writable; `status` NULL or
/// writable.
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
/// `comm` must be NULL or a live ballast_comm.
#[no_mangle]
pub unsafe extern "C" fn ballast_progress(comm: *mut ballast_comm) -> c_int {
    const F: &str = "ballast_progress";
    with_comm(F, comm, |c| {
        c.comm().progress().map_err(runtime(F))?;
        Ok(0)
    })
}

/// Returns when every rank has entered the barrier. Collective. Errors: BALLAST_EINVAL for
/// NULL; BALLAST_EPEER when a peer died or the run was aborted.
///
/// # Safety
/// `comm` must be NULL or a live ballast_comm.
#[no_mangle]
pub unsafe extern "C" fn ballast_barrier(comm: *mut ballast_comm) -> c_int {
    const F: &str = "ballast_barrier";
    with_comm(F, comm, |c| {
        c.comm().barrier().map_err(runtime(F))?;
        Ok(0)
    })
}

/// Gathers every rank's `len` bytes at `buf` (any length per rank) on every rank, in *out
/// (read with ballast_gathered_part, freed with ballast_gathered_free). Collective.
/// Errors: BALLAST_EINVAL for NULL `comm` or `out`, or NULL `buf` with `len` > 0;
/// BALLAST_ENOMEM when the result cannot be held; BALLAST_EPEER when a peer died or the
/// run was aborted.
///
/// # Safety
/// `comm` must be NULL or a live ballast_comm; `buf` NULL with `len` 0 or `len` readable
/// bytes; `out` NULL or writable.
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
        // SAFETY: as above; the box is C's until ballast_gathered_free.
        unsafe { *out = Box::into_raw(Box::new(ballast_gathered { parts })) };
        Ok(0)
    })
}

/// Rank `rank`'s bytes of an all-gather: *data (valid until ballast_gathered_free; NULL
/// for 0 bytes) and *len. Errors: BALLAST_EINVAL for NULL or a rank out
/// of range.
///
/// # Safety
/// `gathered` must be NULL or a live ballast_gathered; `data` and `len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_gathered_part(
    gathered: *const ballast_gathered,
    rank: c_int,
    data: *mut *const c_void,
    len: *mut usize,
) -> c_int {
    const F: &str = "ballast_gathered_part";
    boundary(F, || {
        // SAFETY: NULL or a live ballast_gathered (the contract).
        let g = unsafe { gathered.as_ref() }.ok_or_else(|| Fail::null(F, "gathered"))?;
        let n = g.parts.len();
        let p = usize::try_from(rank)
            .ok()
            .and_then(|r| g.parts.get(r))
            .ok_or_else(|| Fail::inval(format!("{F}: rank {rank} is not in 0..{n}")))?;
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

/// Frees an all-gather result. Errors: BALLAST_EINVAL for NULL.
///
/// # Safety
/// `gathered` must be NULL or a live ballast_gathered, not freed yet.
#[no_mangle]
pub unsafe extern "C" fn ballast_gathered_free(gathered: *mut ballast_gathered) -> c_int {
    const F: &str = "ballast_gathered_free";
    boundary(F, || {
        if gathered.is_null() {
            return Err(Fail::null(F, "gathered"));
        }
        // SAFETY: a box from ballast_allgatherv, freed once (the contract).
        drop(unsafe { Box::from_raw(gathered) });
        Ok(0)
    })
}

/// This rank's transport memory as accounted now, in *out (bytes).
///
/// # Safety
/// `comm` must be NULL or a live ballast_comm; `out` NULL or writable.
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
    use ballast_runtime::RuntimeConfig;

    #[test]
    fn a_panic_on_a_communicator_poisons_it() {
        let cfg = RuntimeConfig::builder().buffer_count(4).build().unwrap();
        let got = local::run(1, &cfg, |comm| {
            let mut h = ballast_comm::lent(comm);
            let p: *mut ballast_comm = &mut h;
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
            (before, code, first, after, second, query)
        })
        .unwrap();
        let (before, code, first, after, second, query) = got.into_iter().next().unwrap();
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
