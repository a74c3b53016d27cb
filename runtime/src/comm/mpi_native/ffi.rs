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
//! - [`Ibarrier`], [`NativeComm`], the constants, status reads and `MPI_TAG_UB`.
//!
//! Dropping a request still in flight never frees memory MPI may still write into or read
//! from: a receive is cancelled and waited for (`MPI_Cancel` + `MPI_Wait`; a receive
//! cancels at once unless it was matched, and then it completes); a send's buffers are
//! leaked (a send cannot be cancelled reliably, and waiting could hang on a peer that
//! failed); a blocking send's parts are waited for, as `MPI_Send` would. Once MPI is
//! finalised, nothing is freed and nothing waited for: the buffers are leaked. This is the
//! only file of `comm/mpi_native/` with `unsafe` code.

use std::marker::PhantomData;
use std::ops::Deref;
use std::os::raw::c_int;

use rsmpi::datatype::traits::*;
use rsmpi::ffi;
use rsmpi::raw::AsRaw;
use rsmpi::topology::SimpleCommunicator;

use crate::core::error::{Error, Result};
use crate::fabric::mpi::ffi::check;

/// A completion status (`MPI_Status`: source, tag, error; read its fields directly).
pub(super) type Status = ffi::MPI_Status;

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

fn dt_byte() -> ffi::MPI_Datatype {
    u8::equivalent_datatype().as_raw()
}

fn int(v: usize, what: &'static str) -> Result<c_int> {
    c_int::try_from(v).map_err(|_| Error::MpiValue {
        what,
        value: v as i128,
        why: "overflows an MPI int",
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
    usize::try_from(count).map_err(|_| Error::MpiValue {
        what: "MPI_Get_count gave",
        value: count.into(),
        why: "is negative",
    })
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
}

impl Deref for NativeComm {
    type Target = SimpleCommunicator;
    fn deref(&self) -> &SimpleCommunicator {
        &self.0
    }
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

/// An `MPI_Irecv` of at most `cap` bytes into a `Vec` it owns (see the module docs).
pub(super) struct HeaderRecv {
    req: ffi::MPI_Request,
    buf: Vec<u8>,
    /// Bytes MPI wrote, once complete.
    got: Option<usize>,
}

// SAFETY: the request handle is a plain value and the buffer is owned; the receive is
// driven by one thread at a time (`&mut`), which MPI_THREAD_SERIALIZED allows.
unsafe impl Send for HeaderRecv {}

impl HeaderRecv {
    /// Posts a receive of at most `cap` bytes from `(source, tag)` on `comm` into `buf`
    /// (cleared, and grown to `cap` bytes of capacity). Errors: [`Error::MpiValue`] when
    /// `cap` overflows an `int`, [`Error::MpiCall`].
    pub(super) fn post(
        comm: &SimpleCommunicator,
        source: c_int,
        tag: c_int,
        mut buf: Vec<u8>,
        cap: usize,
    ) -> Result<HeaderRecv> {
        let count = int(cap, "receive of bytes")?;
        buf.clear();
        buf.reserve_exact(cap);
        let mut req = null_request();
        // SAFETY: `buf` has capacity for `cap` bytes and is moved into the returned value,
        // which keeps it (its heap block does not move) until the request completed or was
        // cancelled and waited for; `comm` is live.
        let code = unsafe {
            ffi::MPI_Irecv(
                buf.as_mut_ptr().cast(),
                count,
                dt_byte(),
                source,
                tag,
                comm.as_raw(),
                &mut req,
            )
        };
        check(code, "MPI_Irecv")?;
        Ok(HeaderRecv { req, buf, got: None })
    }

    fn completed(&mut self, status: &Status) -> Result<()> {
        self.got = Some(0); // no longer in flight, whatever MPI_Get_count says
        let n = byte_count(status)?.min(self.buf.capacity());
        self.got = Some(n);
        Ok(())
    }

    /// Tests the receive (`MPI_Test`): true when it completed, with `status` filled.
    pub(super) fn test(&mut self, status: &mut Status) -> Result<bool> {
        if self.got.is_some() {
            return Ok(true);
        }
        let mut flag: c_int = 0;
        // SAFETY: `req` is the live receive request writing into `buf`, which this owns.
        check(
            unsafe { ffi::MPI_Test(&mut self.req, &mut flag, status) },
            "MPI_Test",
        )?;
        if flag == 0 {
            return Ok(false);
        }
        self.completed(status)?;
        Ok(true)
    }

    /// Waits for the receive (`MPI_Wait`), filling `status`.
    pub(super) fn wait(&mut self, status: &mut Status) -> Result<()> {
        if self.got.is_some() {
            return Ok(());
        }
        // SAFETY: `req` is the live receive request writing into `buf`, which this owns.
        check(unsafe { ffi::MPI_Wait(&mut self.req, status) }, "MPI_Wait")?;
        self.completed(status)
    }

    /// The received bytes once complete (`None` while in flight).
    pub(super) fn bytes(&self) -> Option<&[u8]> {
        let n = self.got?;
        // SAFETY: MPI completed the receive and reported writing `n` bytes (at most the
        // capacity) at the start of `buf`.
        Some(unsafe { std::slice::from_raw_parts(self.buf.as_ptr(), n) })
    }

    /// The buffer, its length the bytes received, once complete (`None` while in flight).
    pub(super) fn take_filled(&mut self) -> Option<Vec<u8>> {
        let n = self.got?;
        let mut buf = std::mem::take(&mut self.buf);
        // SAFETY: MPI completed the receive and wrote `n <= capacity` bytes into `buf`.
        unsafe { buf.set_len(n) };
        self.got = Some(0);
        Some(buf)
    }

    /// Bytes of the buffer.
    pub(super) fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Cancels the receive and waits for it: `None` when it was cancelled, else the
    /// message it received (and its status).
    pub(super) fn cancel(mut self) -> Result<Option<(Vec<u8>, Status)>> {
        let mut status = empty_status();
        if self.got.is_none() {
            if cancel_recv(&mut self.req, &mut status) {
                self.got = Some(0);
                return Ok(None);
            }
            self.completed(&status)?;
        }
        Ok(self.take_filled().map(|b| (b, status)))
    }
}

impl Drop for HeaderRecv {
    fn drop(&mut self) {
        if self.got.is_some() {
            return;
        }
        if rsmpi::environment::is_finalized() {
            std::mem::forget(std::mem::take(&mut self.buf));
            return;
        }
        cancel_recv(&mut self.req, &mut empty_status());
    }
}

/// The `MPI_Irecv`s of a large message's parts into one `Vec` it owns (see the module
/// docs).
pub(super) struct PartsRecv {
    reqs: Vec<ffi::MPI_Request>,
    data: Vec<u8>,
    total: usize,
    /// Bytes the parts wrote, once all completed.
    got: Option<usize>,
}

// SAFETY: as for `HeaderRecv`.
unsafe impl Send for PartsRecv {}

impl PartsRecv {
    /// Posts receives of `total` bytes from `(source, tag)` on `comm` as parts of at most
    /// `part_bytes` bytes into `data`, whose capacity must hold `total` bytes (its length
    /// is reset to 0). Errors: [`Error::MpiValue`] when `data` is too small, [`Error::MpiCall`]
    /// (the parts posted before are cancelled).
    pub(super) fn post(
        comm: &SimpleCommunicator,
        source: c_int,
        tag: c_int,
        mut data: Vec<u8>,
        total: usize,
        part_bytes: usize,
    ) -> Result<PartsRecv> {
        data.clear();
        if data.capacity() < total {
            return Err(Error::MpiValue {
                what: "receive buffer of the parts",
                value: data.capacity() as i128,
                why: "is smaller than the message",
            });
        }
        let part_bytes = part_bytes.clamp(1, c_int::MAX as usize);
        let mut r = PartsRecv {
            reqs: Vec::new(),
            data,
            total,
            got: None,
        };
        let base = r.data.as_mut_ptr();
        let mut off = 0;
        while off < total {
            let k = part_bytes.min(total - off);
            let mut req = null_request();
            // SAFETY: `off + k <= total <= capacity`, so the part lies in `data`'s heap
            // block, owned by `r` (it does not move) until every request completed or was
            // cancelled and waited for (also when this returns an error: `r`'s drop);
            // `k` fits an int (clamped); `comm` is live.
            let code = unsafe {
                ffi::MPI_Irecv(
                    base.add(off).cast(),
                    k as c_int,
                    dt_byte(),
                    source,
                    tag,
                    comm.as_raw(),
                    &mut req,
                )
            };
            check(code, "MPI_Irecv")?;
            r.reqs.push(req);
            off += k;
        }
        if total == 0 {
            r.got = Some(0);
        }
        Ok(r)
    }

    /// Tests every part (`MPI_Testall`, statuses in `statuses`): true when all completed.
    pub(super) fn test(&mut self, statuses: &mut Vec<Status>) -> Result<bool> {
        if self.got.is_some() {
            return Ok(true);
        }
        let n = self.reqs.len();
        statuses.resize(n, empty_status());
        let mut flag: c_int = 0;
        // SAFETY: `reqs` holds `n` live or completed (null) requests writing into `data`,
        // which this owns; `statuses` has `n` entries.
        check(
            unsafe {
                ffi::MPI_Testall(
                    n as c_int,
                    self.reqs.as_mut_ptr(),
                    &mut flag,
                    statuses.as_mut_ptr(),
                )
            },
            "MPI_Testall",
        )?;
        if flag == 0 {
            return Ok(false);
        }
        self.got = Some(0); // no longer in flight, whatever MPI_Get_count says
        let mut got = 0usize;
        for s in &statuses[..n] {
            got = got.saturating_add(byte_count(s)?);
        }
        self.got = Some(got.min(self.total));
        Ok(true)
    }

    /// The message once every part completed with all `total` bytes; else `Err` with the
    /// number of bytes the parts held (fewer: a peer that sent less), 0 while in flight.
    pub(super) fn take_data(&mut self) -> std::result::Result<Vec<u8>, usize> {
        let got = self.got.unwrap_or(0);
        if self.got.is_none() || got < self.total {
            return Err(got);
        }
        let mut data = std::mem::take(&mut self.data);
        // SAFETY: every part completed and together they wrote `total` bytes, the parts
        // tiling `data[..total]` without overlap.
        unsafe { data.set_len(self.total) };
        self.total = 0;
        Ok(data)
    }

    /// Waits for every part (`MPI_Waitall`; MPI's error code is not looked at: the parts
    /// are discarded).
    pub(super) fn wait_discard(mut self) {
        // SAFETY: `reqs` holds live or null requests writing into `data`, which this owns
        // until after MPI_Waitall returned.
        unsafe {
            ffi::MPI_Waitall(
                self.reqs.len() as c_int,
                self.reqs.as_mut_ptr(),
                ffi::RSMPI_STATUSES_IGNORE,
            )
        };
        self.got = Some(0);
    }

    /// Bytes of the buffer.
    pub(super) fn capacity(&self) -> usize {
        self.data.capacity()
    }
}

impl Drop for PartsRecv {
    fn drop(&mut self) {
        if self.got.is_some() {
            return;
        }
        if rsmpi::environment::is_finalized() {
            std::mem::forget(std::mem::take(&mut self.data));
            return;
        }
        let mut status = empty_status();
        for r in &mut self.reqs {
            cancel_recv(r, &mut status);
        }
    }
}

/// `MPI_Isend`s of an owned header (one message on the messages communicator) and, for a
/// large message sent by `isend`, an owned body (parts on the parts communicator).
pub(super) struct OwnedSend {
    head_req: ffi::MPI_Request,
    parts: Vec<ffi::MPI_Request>,
    head: Vec<u8>,
    body: Vec<u8>,
    done: bool,
}

// SAFETY: as for `HeaderRecv` (the requests read buffers this owns).
unsafe impl Send for OwnedSend {}

impl OwnedSend {
    /// Starts sending `head` to `dest` with `tag` on `comm` as one message. Errors:
    /// [`Error::MpiValue`] when it overflows an `int` count, [`Error::MpiCall`].
    pub(super) fn post(
        comm: &SimpleCommunicator,
        dest: c_int,
        tag: c_int,
        head: Vec<u8>,
    ) -> Result<OwnedSend> {
        let count = int(head.len(), "message of bytes")?;
        let mut req = null_request();
        // SAFETY: `head` is initialised for its length and moved into the returned value,
        // which keeps it (its heap block does not move) until MPI reports the request
        // complete, or leaks it; `comm` is live.
        let code = unsafe {
            ffi::MPI_Isend(
                head.as_ptr().cast(),
                count,
                dt_byte(),
                dest,
                tag,
                comm.as_raw(),
                &mut req,
            )
        };
        check(code, "MPI_Isend")?;
        Ok(OwnedSend {
            head_req: req,
            parts: Vec::new(),
            head,
            body: Vec::new(),
            done: false,
        })
    }

    /// Starts sending `body` to `dest` with `tag` on `comm` as parts of at most
    /// `part_bytes` bytes; kept with the header. Errors: [`Error::MpiCall`] (the parts
    /// posted before stay in flight, with the body).
    pub(super) fn post_body(
        &mut self,
        comm: &SimpleCommunicator,
        dest: c_int,
        tag: c_int,
        body: Vec<u8>,
        part_bytes: usize,
    ) -> Result<()> {
        debug_assert!(self.body.is_empty() && self.parts.is_empty());
        self.body = body;
        self.done = false;
        let part_bytes = part_bytes.clamp(1, c_int::MAX as usize);
        let (ptr, len) = (self.body.as_ptr(), self.body.len());
        let mut off = 0;
        while off < len {
            let n = part_bytes.min(len - off);
            let mut req = null_request();
            // SAFETY: `ptr + off .. + n` lies in `body`, owned by this value (its heap block
            // does not move) until MPI reports every request complete, or leaked; `n` fits
            // an int (clamped); `comm` is live.
            let code = unsafe {
                ffi::MPI_Isend(
                    ptr.add(off).cast(),
                    n as c_int,
                    dt_byte(),
                    dest,
                    tag,
                    comm.as_raw(),
                    &mut req,
                )
            };
            check(code, "MPI_Isend")?;
            self.parts.push(req);
            off += n;
        }
        Ok(())
    }

    /// Tests the header and the parts (`MPI_Test`, `MPI_Testall`): true when all completed.
    pub(super) fn test(&mut self) -> Result<bool> {
        if self.done {
            return Ok(true);
        }
        let mut flag: c_int = 0;
        // SAFETY: `head_req` is a live or completed (null) request reading `head`, owned here.
        check(
            unsafe { ffi::MPI_Test(&mut self.head_req, &mut flag, ffi::RSMPI_STATUS_IGNORE) },
            "MPI_Test",
        )?;
        if flag == 0 {
            return Ok(false);
        }
        if !self.parts.is_empty() {
            // SAFETY: `parts` holds live or null requests reading `body`, owned here.
            check(
                unsafe {
                    ffi::MPI_Testall(
                        self.parts.len() as c_int,
                        self.parts.as_mut_ptr(),
                        &mut flag,
                        ffi::RSMPI_STATUSES_IGNORE,
                    )
                },
                "MPI_Testall",
            )?;
            if flag == 0 {
                return Ok(false);
            }
        }
        self.done = true;
        Ok(true)
    }

    /// The header's buffer once every send completed (`None` while in flight).
    pub(super) fn take_head(&mut self) -> Option<Vec<u8>> {
        self.done.then(|| std::mem::take(&mut self.head))
    }

    /// Bytes of the buffers.
    pub(super) fn capacity(&self) -> usize {
        self.head.capacity() + self.body.capacity()
    }
}

impl Drop for OwnedSend {
    fn drop(&mut self) {
        if !self.done {
            // MPI may still read them, and waiting could hang on a peer that failed: leak.
            std::mem::forget(std::mem::take(&mut self.head));
            std::mem::forget(std::mem::take(&mut self.body));
        }
    }
}

/// The parts of a blocking send in flight, reading the caller's slice (lifetime `'a`);
/// only [`send_parts_scoped`] makes one, and waits for it before returning.
pub(super) struct CallerParts<'a> {
    reqs: Vec<ffi::MPI_Request>,
    done: bool,
    _data: PhantomData<&'a [u8]>,
}

impl CallerParts<'_> {
    /// Tests the parts (`MPI_Testall`): true when all completed.
    pub(super) fn test(&mut self) -> Result<bool> {
        if self.done || self.reqs.is_empty() {
            self.done = true;
            return Ok(true);
        }
        let mut flag: c_int = 0;
        // SAFETY: `reqs` holds live or null requests reading the caller's slice, which is
        // borrowed for `'a`, longer than this value lives.
        check(
            unsafe {
                ffi::MPI_Testall(
                    self.reqs.len() as c_int,
                    self.reqs.as_mut_ptr(),
                    &mut flag,
                    ffi::RSMPI_STATUSES_IGNORE,
                )
            },
            "MPI_Testall",
        )?;
        self.done = flag != 0;
        Ok(self.done)
    }
}

impl Drop for CallerParts<'_> {
    fn drop(&mut self) {
        if self.done || rsmpi::environment::is_finalized() {
            return;
        }
        // The caller's slice must outlive the transfer: wait (as MPI_Send would block).
        // SAFETY: `reqs` holds live or null requests of this process.
        unsafe {
            ffi::MPI_Waitall(
                self.reqs.len() as c_int,
                self.reqs.as_mut_ptr(),
                ffi::RSMPI_STATUSES_IGNORE,
            )
        };
    }
}

/// Starts sending `data` to `dest` with `tag` on the communicator `comm(state)` as parts of
/// at most `part_bytes` bytes, straight from `data`, then runs `f` with `state`, the
/// outcome of the posting (an [`Error::MpiCall`] when a part could not be posted; those
/// posted before stay in flight) and the parts in flight; returns `f`'s result once every
/// part completed (waiting for them after `f`, also when `f` unwinds), so `data` is never
/// released while MPI reads it.
pub(super) fn send_parts_scoped<S, R>(
    state: &mut S,
    comm: impl FnOnce(&S) -> &SimpleCommunicator,
    dest: c_int,
    tag: c_int,
    data: &[u8],
    part_bytes: usize,
    f: impl FnOnce(&mut S, Result<()>, &mut CallerParts<'_>) -> R,
) -> R {
    let mut parts = CallerParts {
        reqs: Vec::new(),
        done: false,
        _data: PhantomData,
    };
    let posted = {
        let comm = comm(state);
        let part_bytes = part_bytes.clamp(1, c_int::MAX as usize);
        let mut off = 0;
        let mut posted = Ok(());
        while off < data.len() {
            let n = part_bytes.min(data.len() - off);
            let mut req = null_request();
            // SAFETY: `data[off..off + n]` is initialised and borrowed for this whole
            // function, which does not return (nor unwind past `parts`' drop, which waits)
            // before every request completed; `n` fits an int (clamped); `comm` is live.
            let code = unsafe {
                ffi::MPI_Isend(
                    data.as_ptr().add(off).cast(),
                    n as c_int,
                    dt_byte(),
                    dest,
                    tag,
                    comm.as_raw(),
                    &mut req,
                )
            };
            if let Err(e) = check(code, "MPI_Isend") {
                posted = Err(e);
                break;
            }
            parts.reqs.push(req);
            off += n;
        }
        posted
    };
    let r = f(state, posted, &mut parts);
    drop(parts);
    r
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
    /// must hold it (reserve first). Returns its status. Errors: [`Error::MpiValue`] when
    /// the spare capacity is too small (the message is lost), [`Error::MpiCall`].
    pub(super) fn recv_append(mut self, buf: &mut Vec<u8>) -> Result<Status> {
        if buf.capacity() - buf.len() < self.len {
            return Err(Error::MpiValue {
                what: "spare capacity of the receive buffer",
                value: (buf.capacity() - buf.len()) as i128,
                why: "is smaller than the matched message",
            });
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
