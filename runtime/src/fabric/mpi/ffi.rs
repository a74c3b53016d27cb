//! The raw MPI calls of the transport, each behind a safe function: non-blocking sends of
//! owned byte buffers (`MPI_Isend` + `MPI_Testsome`), receiving a message into the spare
//! capacity of a `Vec` (`MPI_Mprobe` + `MPI_Mrecv`, no zeroing), and the MPI handles the
//! ranks (threads) of one process share ([`SharedComm`], [`Barrier`]). rsmpi's safe requests
//! borrow their buffer for a scope, which a fabric that lives behind `Box<dyn Fabric>`
//! cannot express; this queue owns each buffer until MPI reports every send reading it
//! complete, so the buffer outlives its requests by construction. This is the only file of
//! `fabric/mpi/` with `unsafe` code.

use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::os::raw::c_int;

use rsmpi::collective::CommunicatorCollectives as _;
use rsmpi::datatype::traits::*;
use rsmpi::ffi;
use rsmpi::raw::AsRaw;
use rsmpi::request::Request;
use rsmpi::topology::SimpleCommunicator;

use crate::fabric::error::{FabricError, Result, Sender};

/// One owned buffer in flight: sent as `parts` MPI messages that are not complete yet.
struct Entry {
    buf: Vec<u8>,
    id: u64,
    parts: usize,
}

/// Sends in flight: the MPI requests (contiguous, for `MPI_Testsome`), the entry each one
/// reads, and the entries (a slab) owning the buffers.
pub(crate) struct SendQueue {
    reqs: Vec<ffi::MPI_Request>,
    owner: Vec<usize>,
    entries: Vec<Option<Entry>>,
    free_entries: Vec<usize>,
    /// Completed buffers kept for reuse (at most `keep`, each of capacity at most `keep_cap`).
    free: Vec<Vec<u8>>,
    keep: usize,
    keep_cap: usize,
    indices: Vec<c_int>,
    statuses: Vec<ffi::MPI_Status>,
}

// SAFETY: the raw request handles are plain values owned by this queue; MPI allows a
// request to be completed by any thread when MPI runs at MPI_THREAD_SERIALIZED or above
// (checked by the fabric), and the queue is driven by one thread at a time (`&mut self`).
unsafe impl Send for SendQueue {}

/// A communicator that the threads of one process share (Ballast's duplicate of the world
/// for the ranks of one process): freed with `MPI_Comm_free` when dropped after
/// [`SharedComm::free_on_drop`], else leaked (never freed, so its context is never reused
/// while a peer may still send on it).
pub(crate) struct SharedComm {
    comm: ManuallyDrop<SimpleCommunicator>,
    free: bool,
}

// SAFETY: a communicator handle is a plain value that MPI lets any thread use at
// MPI_THREAD_MULTIPLE; below that level `SharedComm::new` accepts only one user thread
// (one local rank), and `SharedComm::serialized` is for one (the native path's abort line),
// whose calls MPI_THREAD_SERIALIZED allows from any thread in turn (the thread that drops
// the last `Arc` of the world, or a launcher reporting a failure, uses it only after that
// rank stopped). The rest is the crate's discipline: nothing else shares one.
unsafe impl Send for SharedComm {}
// SAFETY: as above.
unsafe impl Sync for SharedComm {}

impl SharedComm {
    /// `comm` shared by `threads` threads of this process: `None` when `threads > 1` and MPI
    /// does not provide `MPI_THREAD_MULTIPLE`.
    pub(crate) fn new(comm: SimpleCommunicator, threads: usize) -> Option<SharedComm> {
        if threads > 1 && rsmpi::environment::threading_support() != rsmpi::Threading::Multiple {
            return None;
        }
        Some(SharedComm {
            comm: ManuallyDrop::new(comm),
            free: false,
        })
    }

    /// `comm` used by one thread at a time (MPI_THREAD_SERIALIZED suffices): only for one
    /// rank's own communicator, used by another thread only after that rank stopped.
    pub(crate) fn serialized(comm: SimpleCommunicator) -> SharedComm {
        SharedComm {
            comm: ManuallyDrop::new(comm),
            free: false,
        }
    }

    /// Frees the communicator when this is dropped (once every message addressed to it was
    /// received), rather than leaking it.
    pub(crate) fn free_on_drop(&mut self) {
        self.free = true;
    }

    /// A non-blocking barrier over the communicator (`MPI_Ibarrier`).
    pub(crate) fn barrier(&self) -> Barrier {
        Barrier(Some(self.comm.immediate_barrier()))
    }
}

impl Deref for SharedComm {
    type Target = SimpleCommunicator;
    fn deref(&self) -> &SimpleCommunicator {
        &self.comm
    }
}

impl Drop for SharedComm {
    fn drop(&mut self) {
        if self.free && !rsmpi::environment::is_finalized() {
            // SAFETY: this is the only drop of `comm` (in this value's own drop, after which
            // it is not used); MPI is live, so dropping the duplicate frees it.
            unsafe { ManuallyDrop::drop(&mut self.comm) };
        }
    }
}

/// A non-blocking barrier of a [`SharedComm`] in flight; leaked (the request left live) when
/// dropped before it completed.
pub(crate) struct Barrier(Option<Request<'static, ()>>);

// SAFETY: as for `SharedComm` (the request handle is a plain value, completed by one thread
// at a time: it sits behind a mutex).
unsafe impl Send for Barrier {}

impl Barrier {
    /// True once every process entered the barrier (`MPI_Test`); then it is complete.
    pub(crate) fn test(&mut self) -> bool {
        match self.0.take().map(Request::test) {
            Some(Ok(_)) | None => true,
            Some(Err(r)) => {
                self.0 = Some(r);
                false
            }
        }
    }

    /// Waits for every process to enter the barrier (`MPI_Wait`).
    pub(crate) fn wait(mut self) {
        if let Some(r) = self.0.take() {
            r.wait();
        }
    }
}

impl Drop for Barrier {
    fn drop(&mut self) {
        // rsmpi's request panics when dropped live: leave it to MPI (never completed).
        std::mem::forget(self.0.take());
    }
}

pub(crate) fn check(code: c_int, call: &'static str) -> Result<()> {
    if code as i64 == ffi::MPI_SUCCESS as i64 {
        Ok(())
    } else {
        Err(FabricError::MpiCall { call, code })
    }
}

fn int(v: usize, what: &'static str) -> Result<c_int> {
    c_int::try_from(v).map_err(|_| FabricError::MpiValue {
        what,
        value: v as i128,
        why: "overflows an MPI int",
    })
}

impl SendQueue {
    /// An empty queue that keeps up to `keep` completed buffers of at most `keep_cap`
    /// bytes of capacity for reuse (larger ones, the direct path's, are freed).
    pub(crate) fn new(keep: usize, keep_cap: usize) -> SendQueue {
        SendQueue {
            reqs: Vec::new(),
            owner: Vec::new(),
            entries: Vec::new(),
            free_entries: Vec::new(),
            free: Vec::new(),
            keep,
            keep_cap,
            indices: Vec::new(),
            statuses: Vec::new(),
        }
    }

    /// A cleared buffer with at least `cap` bytes of capacity (reused when possible).
    pub(crate) fn buffer(&mut self, cap: usize) -> Vec<u8> {
        let mut b = self.free.pop().unwrap_or_default();
        b.clear();
        b.reserve(cap);
        b
    }

    /// Bytes of the buffers held (in flight and kept for reuse).
    pub(crate) fn bytes(&self) -> u64 {
        self.entries
            .iter()
            .flatten()
            .map(|e| &e.buf)
            .chain(&self.free)
            .map(|b| b.capacity() as u64)
            .sum()
    }

    /// Starts sending `buf` to `dest` with `tag` on `comm` as one MPI message; `id` comes
    /// back from [`SendQueue::test`]. Errors: [`FabricError::MpiValue`] when the buffer is longer than
    /// an MPI `int` count or MPI fails.
    pub(crate) fn post(
        &mut self,
        comm: &SimpleCommunicator,
        dest: usize,
        tag: i32,
        buf: Vec<u8>,
        id: u64,
    ) -> Result<()> {
        int(buf.len(), "message of bytes")?;
        let part = buf.len().max(1);
        self.post_parts(comm, dest, tag, buf, part, id)
    }

    /// Starts sending `buf` to `dest` with `tag` on `comm` as consecutive MPI messages of
    /// `part` bytes (the last one shorter; none when `buf` is empty), so that no count
    /// overflows an `int`; `id` comes back from [`SendQueue::test`] once all completed.
    pub(crate) fn post_parts(
        &mut self,
        comm: &SimpleCommunicator,
        dest: usize,
        tag: i32,
        buf: Vec<u8>,
        part: usize,
        id: u64,
    ) -> Result<()> {
        let dest = int(dest, "rank")?;
        let part = part.clamp(1, c_int::MAX as usize);
        let slot = self.free_entries.pop().unwrap_or_else(|| {
            self.entries.push(None);
            self.entries.len() - 1
        });
        let ptr = buf.as_ptr();
        let len = buf.len();
        // The entry owns the buffer from now on; its heap block does not move.
        self.entries[slot] = Some(Entry { buf, id, parts: 0 });
        let mut off = 0;
        while off < len {
            let n = part.min(len - off);
            // SAFETY: reading the null request constant.
            let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
            // SAFETY: `ptr + off .. + n` lies inside the buffer owned by `entries[slot]`,
            // initialised, and kept there until MPI_Testsome/MPI_Waitall reports every one
            // of its requests complete; `n` fits an int (clamped); `comm` is live.
            let code = unsafe {
                ffi::MPI_Isend(
                    ptr.add(off).cast(),
                    n as c_int,
                    u8::equivalent_datatype().as_raw(),
                    dest,
                    tag,
                    comm.as_raw(),
                    &mut req,
                )
            };
            if let Err(e) = check(code, "MPI_Isend") {
                if self.entries[slot].as_ref().is_some_and(|e| e.parts == 0) {
                    self.entries[slot] = None;
                    self.free_entries.push(slot);
                }
                return Err(e);
            }
            self.reqs.push(req);
            self.owner.push(slot);
            self.entries[slot].as_mut().expect("entry").parts += 1;
            off += n;
        }
        if len == 0 {
            // Nothing to send: complete at the next test.
            // SAFETY: reading the null request constant.
            self.reqs.push(unsafe { ffi::RSMPI_REQUEST_NULL });
            self.owner.push(slot);
            self.entries[slot].as_mut().expect("entry").parts = 1;
        }
        Ok(())
    }

    fn complete_one(&mut self, i: usize, done: &mut dyn FnMut(u64)) {
        let slot = self.owner[i];
        let e = self.entries[slot].as_mut().expect("entry of a request");
        e.parts -= 1;
        if e.parts == 0 {
            let e = self.entries[slot].take().expect("entry");
            self.free_entries.push(slot);
            done(e.id);
            if self.free.len() < self.keep && e.buf.capacity() <= self.keep_cap {
                self.free.push(e.buf);
            }
        }
    }

    /// Tests the sends in flight; calls `done(id)` for each buffer whose sends all completed.
    pub(crate) fn test(&mut self, done: &mut dyn FnMut(u64)) -> Result<()> {
        if self.reqs.is_empty() {
            return Ok(());
        }
        let n = self.reqs.len();
        self.indices.resize(n, 0);
        // SAFETY: MPI_Status is a plain C struct; zeroed is a valid (unused) value.
        self.statuses.resize(n, unsafe { std::mem::zeroed() });
        let mut outcount: c_int = 0;
        // SAFETY: the three arrays have `n` elements; the requests are live or null.
        let code = unsafe {
            ffi::MPI_Testsome(
                n as c_int,
                self.reqs.as_mut_ptr(),
                &mut outcount,
                self.indices.as_mut_ptr(),
                self.statuses.as_mut_ptr(),
            )
        };
        check(code, "MPI_Testsome")?;
        // SAFETY: reading the null request constant.
        let null = unsafe { ffi::RSMPI_REQUEST_NULL };
        // MPI_UNDEFINED: no active request, every one is null (empty sends): all complete.
        if outcount == 0 {
            return Ok(());
        }
        // Completed requests were set to MPI_REQUEST_NULL: finish their entries, compact.
        let mut i = 0;
        while i < self.reqs.len() {
            if self.reqs[i] == null {
                self.complete_one(i, done);
                self.reqs.swap_remove(i);
                self.owner.swap_remove(i);
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// Waits for every send in flight (before the buffers may be freed).
    pub(crate) fn wait_all(&mut self) {
        if self.reqs.is_empty() || rsmpi::environment::is_finalized() {
            return;
        }
        // SAFETY: `reqs` holds live or null requests whose buffers are in `entries`;
        // MPI_STATUSES_IGNORE is accepted by MPI_Waitall.
        unsafe {
            ffi::MPI_Waitall(
                self.reqs.len() as c_int,
                self.reqs.as_mut_ptr(),
                ffi::RSMPI_STATUSES_IGNORE,
            );
        }
        self.reqs.clear();
        self.owner.clear();
        self.entries.clear();
        self.free_entries.clear();
    }
}

impl Drop for SendQueue {
    fn drop(&mut self) {
        self.wait_all();
    }
}

/// Receives the next message from process `source` with `tag` on `comm` (blocking,
/// `MPI_Mprobe` + `MPI_Mrecv`) and appends it to `buf`, whose spare capacity must hold it
/// (no zeroing of the destination). Returns its length. Errors: [`FabricError::BadPacket`] (for
/// receiving rank `rank`) when it does not fit (it is received and dropped first, so MPI's
/// queue stays consistent), [`FabricError::MpiCall`] when MPI fails.
pub(crate) fn recv_append(
    comm: &SimpleCommunicator,
    rank: usize,
    source: usize,
    tag: i32,
    buf: &mut Vec<u8>,
) -> Result<usize> {
    let n = recv_to(comm, rank, source, tag, buf.spare_capacity_mut())?;
    // SAFETY: MPI_Mrecv initialised the `n` bytes after the old length, within capacity.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// [`recv_append`] into the caller's bytes `dst`: the message is written to `dst[..n]`;
/// returns `n`. Errors: as `recv_append`'s when it is longer than `dst`.
pub(crate) fn recv_to_slice(
    comm: &SimpleCommunicator,
    rank: usize,
    source: usize,
    tag: i32,
    dst: &mut [u8],
) -> Result<usize> {
    // SAFETY: `[u8]` and `[MaybeUninit<u8>]` have the same layout, and `recv_to` writes
    // only initialised bytes (MPI's), so `dst` stays initialised.
    let dst = unsafe { &mut *(dst as *mut [u8] as *mut [std::mem::MaybeUninit<u8>]) };
    recv_to(comm, rank, source, tag, dst)
}

/// The receive of [`recv_append`] into `dst`, which MPI writes `n` bytes of (returned).
fn recv_to(
    comm: &SimpleCommunicator,
    rank: usize,
    source: usize,
    tag: i32,
    dst: &mut [std::mem::MaybeUninit<u8>],
) -> Result<usize> {
    let source = int(source, "rank")?;
    let dt = u8::equivalent_datatype().as_raw();
    // SAFETY: reading the "no process" message constant as an initial value.
    let mut msg: ffi::MPI_Message = unsafe { ffi::RSMPI_MESSAGE_NO_PROC };
    // SAFETY: MPI_Status is a plain C struct; zeroed is a valid value to be overwritten.
    let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
    // SAFETY: `comm` is live; `msg` and `status` are valid out-parameters.
    check(
        unsafe { ffi::MPI_Mprobe(source, tag, comm.as_raw(), &mut msg, &mut status) },
        "MPI_Mprobe",
    )?;
    let mut count: c_int = 0;
    // SAFETY: `status` was filled by MPI_Mprobe; `count` is a valid out-parameter.
    check(
        unsafe { ffi::MPI_Get_count(&status, dt, &mut count) },
        "MPI_Get_count",
    )?;
    let n = usize::try_from(count).map_err(|_| FabricError::MpiValue {
        what: "MPI_Get_count gave",
        value: count.into(),
        why: "is negative",
    })?;
    let fits = n <= dst.len();
    let mut sink = Vec::new();
    let to: *mut u8 = if fits {
        dst.as_mut_ptr().cast()
    } else {
        sink.reserve_exact(n);
        sink.as_mut_ptr()
    };
    // SAFETY: `to` points to at least `n` writable bytes (`dst` or `sink`'s capacity);
    // `msg` is the message matched above, received exactly once.
    check(
        unsafe { ffi::MPI_Mrecv(to.cast(), count, dt, &mut msg, &mut status) },
        "MPI_Mrecv",
    )?;
    if !fits {
        return Err(FabricError::BadPacket {
            rank,
            from: Sender::MpiProcess(source as usize),
            bytes: n,
            what: format!(
                "a direct-path part overruns its message ({} bytes left)",
                dst.len()
            ),
        });
    }
    Ok(n)
}
