//! The native MPI path ([`MpiNative`]): with one Ballast rank per MPI process (the normal
//! case under `mpirun`/`srun`), every Ballast message is one MPI message and MPI does the
//! tag matching, so a small message costs what it costs in MPI (`MPI_Isend` +
//! `MPI_Test`, `MPI_Irecv` + `MPI_Test`) instead of going through the progress engine's
//! pool, credits and matching (which exist for RDMA and bought nothing above MPI: MPI
//! manages its own buffers and connections). Chosen by [`super::Mpi`] when
//! `mpi_native` is on (`BALLAST_MPI_NATIVE`, default on), the world has one rank per
//! process and `MPI_TAG_UB` holds every Ballast tag; otherwise the engine path
//! ([`super::MpiFabric`]) is used.
//!
//! Wire, on Ballast's own duplicates of the world communicator (five of them: messages and
//! parts for user tags, messages and parts for the runtime's reserved tags, abort notices):
//! - a message of at most `buffer_size` bytes is one MPI message, its payload followed by a
//!   kind byte 0, with the Ballast tag as MPI tag (reserved tags minus
//!   [`RESERVED_TAG_BASE`] on the reserved-tag communicator);
//! - a larger one is a 9-byte header (length, u64 little-endian; kind byte 1) followed by
//!   its bytes as MPI messages of at most `part_bytes` (1 GiB by default, so no count
//!   overflows an `int`) with the same tag on the parts communicator. A blocking send
//!   sends them straight from the caller's slice; the receiver receives them straight into
//!   the `Vec` that becomes the message.
//!
//! Receives are `MPI_Irecv`s of `buffer_size + 1` bytes; a blocking `recv` uses one kept
//! buffer (no allocation). MPI matches them in posting order; when a large header
//! completes, the parts receives of every earlier receive that could have matched the same
//! sender and tag are posted first (MPI has completed them already), so parts are taken
//! in the order their headers were matched. Every [`DRAIN_EVERY`] calls of `progress` (and
//! in blocking calls after every [`DRAIN_EVERY`] idle polls in a row, so that a ping-pong
//! never pays for it), messages no receive is posted for are taken out of MPI
//! (`MPI_Improbe`/`MPI_Mrecv`, with their parts) into Ballast's unexpected queue, which new
//! receives look at first: a large blocking send completes even when its receiver is
//! itself blocked sending or waiting for another tag (MPI would deadlock there; Ballast's
//! semantics say it does not). The same housekeeping looks for an abort notice.
//!
//! The latency path: a blocking `recv` with nothing else in flight is one `MPI_Irecv` into
//! the kept buffer tested in place, a blocking `send` of a small message one `MPI_Isend`
//! from the kept send buffer tested in place (8 B ping-pong: 1.05–1.09× a blocking
//! `MPI_Send`/`MPI_Recv` loop, `docs/BENCHMARKS.md`).
//!
//! Not applicable here (MPI owns them): the buffer pool, receive sharing, endpoint caps
//! and credits. [`MpiNative::footprint`] counts Ballast's own bytes: the two kept buffers,
//! the buffers of requests in flight (posted receives, `isend` copies), and its structures.

use std::collections::VecDeque;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use rsmpi::collective::{CommunicatorCollectives as _, SystemOperation};
use rsmpi::datatype::traits::*;
use rsmpi::ffi;
use rsmpi::point_to_point::Source as _;
use rsmpi::raw::AsRaw;
use rsmpi::topology::{Communicator as _, SimpleCommunicator};

use super::raw::{check, recv_append};
use crate::core::backoff::Backoff;
use crate::core::config::TransportConfig;
use crate::core::error::{Error, Result, Sender};
use crate::core::footprint::Footprint;
use crate::core::intmap::{IntMap, IntSet};
use crate::core::pool::PoolStats;
use crate::protocol::connection::EndpointStats;
use crate::protocol::matching::{Message, Source, Tag, TagMatch, RESERVED_TAG_BASE};
use crate::transport::model::{MPI_NATIVE_FIXED_BYTES, MPI_NATIVE_PER_RANK_BYTES};

const KIND_WHOLE: u8 = 0;
const KIND_LARGE: u8 = 1;
/// Bytes of a large message's header (length u64 and kind byte).
const LARGE_HEADER: usize = 9;
/// Progress calls (or idle polls in a row of a blocking call) between two looks for
/// unexpected messages and for an abort notice.
pub const DRAIN_EVERY: u32 = 64;
/// MPI tag of abort notices (on their own communicator).
const ABORT_TAG: c_int = 1;
/// Channel of user tags and of the runtime's reserved tags.
const USER: usize = 0;
const RESERVED: usize = 1;

fn null_request() -> ffi::MPI_Request {
    // SAFETY: reading the null request constant.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

fn any_source() -> c_int {
    // SAFETY: reading a constant.
    unsafe { ffi::RSMPI_ANY_SOURCE }
}

fn any_tag() -> c_int {
    // SAFETY: reading a constant.
    unsafe { ffi::RSMPI_ANY_TAG }
}

fn empty_status() -> ffi::MPI_Status {
    // SAFETY: MPI_Status is a plain C struct; zeroed is a valid value to be overwritten.
    unsafe { std::mem::zeroed() }
}

fn byte_count(status: &ffi::MPI_Status) -> Result<usize> {
    let mut count: c_int = 0;
    // SAFETY: `status` was filled by MPI; `count` is a valid out-parameter.
    check(
        unsafe { ffi::MPI_Get_count(status, u8::equivalent_datatype().as_raw(), &mut count) },
        "MPI_Get_count",
    )?;
    usize::try_from(count).map_err(|_| Error::MpiValue {
        what: "MPI_Get_count gave",
        value: count.into(),
        why: "is negative",
    })
}

/// The sending rank of a completed receive (`MPI_SOURCE`; MPI rank = Ballast rank here).
fn source_rank(source: c_int) -> Result<usize> {
    usize::try_from(source).map_err(|_| Error::MpiValue {
        what: "MPI_Status.MPI_SOURCE",
        value: source.into(),
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

/// True when an `MPI_TAG_UB` of `tag_ub` holds every Ballast tag (user tags, and the
/// reserved ones as offsets, which are smaller).
pub(crate) fn tags_fit(tag_ub: i64) -> bool {
    tag_ub >= i64::from(RESERVED_TAG_BASE - 1)
}

/// Abort notices of one native world, shared with [`super::Mpi::run_ranks`] so that a
/// rank that failed (even by panicking, which drops its communicator) tells the others.
pub(crate) struct AbortLine {
    comm: SimpleCommunicator,
    flag: AtomicBool,
    /// Notices in flight (buffers and requests, leaked: the other processes may be gone).
    notices: Mutex<Vec<ffi::MPI_Request>>,
}

// SAFETY: the communicator and request handles are plain values; the request list is
// behind a mutex, and the line is used by the one thread that drives the rank (and, after
// it failed, by the thread that reports it), which MPI_THREAD_SERIALIZED allows.
unsafe impl Send for AbortLine {}
// SAFETY: as above.
unsafe impl Sync for AbortLine {}

static ABORT_BYTE: [u8; 1] = [1];

impl AbortLine {
    pub(crate) fn new(comm: SimpleCommunicator) -> Arc<AbortLine> {
        Arc::new(AbortLine {
            comm,
            flag: AtomicBool::new(false),
            notices: Mutex::new(Vec::new()),
        })
    }

    /// Marks the world failed and tells every other process (best effort, never waits).
    pub(crate) fn abort(&self) {
        if self.flag.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut q = self.notices.lock();
        for p in (0..self.comm.size()).filter(|&p| p != self.comm.rank()) {
            let mut req = null_request();
            // SAFETY: ABORT_BYTE is a static (outlives the request); the communicator is live.
            let code = unsafe {
                ffi::MPI_Isend(
                    ABORT_BYTE.as_ptr().cast(),
                    1,
                    u8::equivalent_datatype().as_raw(),
                    p,
                    ABORT_TAG,
                    self.comm.as_raw(),
                    &mut req,
                )
            };
            if code as i64 == ffi::MPI_SUCCESS as i64 {
                q.push(req);
            }
        }
    }

    fn poll(&self) -> bool {
        if self.flag.load(Ordering::Acquire) {
            return true;
        }
        if let Some((msg, _)) = self
            .comm
            .any_process()
            .immediate_matched_probe_with_tag(ABORT_TAG)
        {
            let mut b = [0u8; 1];
            msg.matched_receive_into(&mut b[..]);
            self.flag.store(true, Ordering::Release);
            return true;
        }
        false
    }

    fn is_set(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }
}

impl Drop for AbortLine {
    fn drop(&mut self) {
        // Notices may never be received (their target failed): leak their requests, and
        // leak the communicator when there were any, so MPI never frees it under them.
        let q = std::mem::take(&mut *self.notices.lock());
        if !q.is_empty() || rsmpi::environment::is_finalized() {
            let comm = std::mem::replace(&mut self.comm, SimpleCommunicator::self_comm());
            std::mem::forget(comm);
        }
    }
}

struct Channel {
    msgs: SimpleCommunicator,
    parts: SimpleCommunicator,
}

enum RecvState {
    /// Waiting for the message (or a large message's header) in `buf`.
    Header {
        req: ffi::MPI_Request,
        buf: Vec<u8>,
        scratch: bool,
    },
    /// A large message's parts landing in `data` (`total` bytes when complete).
    Parts {
        reqs: Vec<ffi::MPI_Request>,
        data: Vec<u8>,
        total: usize,
        source: usize,
        tag: Tag,
    },
}

struct PendingRecv {
    id: u64,
    chan: usize,
    src: c_int,
    tag: c_int,
    state: RecvState,
}

/// The bytes of a large message after its header: none (a small message), an `isend`'s
/// owned copy, or the caller's slice of a blocking send (which waits for completion).
enum Body<'a> {
    Empty,
    Owned(Vec<u8>),
    Caller(&'a [u8]),
}

struct PendingSend {
    id: u64,
    reqs: Vec<ffi::MPI_Request>,
    /// The MPI message (or a large message's header); the kept send buffer when `scratch`.
    head: Vec<u8>,
    /// An `isend`'s copy of a large message's bytes (empty for a blocking send: the
    /// parts are read from the caller's slice, which the send waits for).
    body: Vec<u8>,
    scratch: bool,
}

/// Idle polls of a blocking call that run back to back before [`Backoff`] (pause, yield,
/// sleep) takes over: on this path a poll is an `MPI_Test`, which is itself the wait loop
/// of `MPI_Recv` (which polls without pausing).
const BUSY_POLLS: u32 = 64;

/// The idle policy of the native path's blocking calls (see [`BUSY_POLLS`]), and when
/// they do housekeeping (see [`MpiNative::poll`]).
struct Idle {
    polls: u32,
    backoff: Backoff,
}

impl Idle {
    fn new() -> Idle {
        Idle {
            polls: 0,
            backoff: Backoff::new(),
        }
    }
    fn reset(&mut self) {
        if self.polls > 0 {
            self.polls = 0;
            self.backoff.reset();
        }
    }
    fn snooze(&mut self) {
        self.polls = self.polls.saturating_add(1);
        if self.polls > BUSY_POLLS {
            self.backoff.snooze();
        }
    }
    /// True once per [`DRAIN_EVERY`] idle polls in a row.
    fn housekeeping(&self) -> bool {
        self.polls > 0 && self.polls.is_multiple_of(DRAIN_EVERY)
    }
}

/// One Ballast rank on its own MPI process, messages mapped onto MPI point-to-point (see
/// the module docs).
pub struct MpiNative {
    rank: usize,
    world: usize,
    cfg: TransportConfig,
    notes: Vec<String>,
    chans: [Channel; 2],
    abort: Arc<AbortLine>,
    /// Largest message sent whole (`buffer_size`).
    eager: usize,
    part_bytes: usize,
    recv_scratch: Vec<u8>,
    send_scratch: Vec<u8>,
    recvs: Vec<PendingRecv>,
    done_recvs: IntMap<u64, Message>,
    sends: Vec<PendingSend>,
    done_sends: IntSet<u64>,
    /// Messages taken out of MPI before a receive was posted for them, in arrival order.
    unexpected: VecDeque<(usize, Message)>,
    next_id: u64,
    /// Ranks sent to or received from (index = rank), and how many.
    seen: Vec<bool>,
    peers: usize,
    /// The message of the blocking `recv` in progress once it completed (kept out of
    /// `done_recvs`: no hashing on the latency path).
    scratch_done: Option<Message>,
    /// MPI messages (not parts) sent to each rank, and received, for the final drain.
    sent: Vec<u64>,
    received: u64,
    calls: u32,
    barrier: Option<ffi::MPI_Request>,
    all_done: bool,
    statuses: Vec<ffi::MPI_Status>,
}

// SAFETY: the MPI handles (communicators, requests) are plain values owned by this
// struct and used by the one thread that drives the rank at a time, which
// MPI_THREAD_SERIALIZED allows; the buffers they read or write are owned by it too.
unsafe impl Send for MpiNative {}

impl MpiNative {
    /// Sets up the native path on `world` (the world communicator; five duplicates are
    /// made). Collective; every rank must use the same `buffer_size` (checked by
    /// [`super::Mpi`]).
    pub(crate) fn new(
        world: &SimpleCommunicator,
        cfg: &TransportConfig,
        part_bytes: usize,
        abort: Arc<AbortLine>,
    ) -> Result<MpiNative> {
        let chans = [
            Channel {
                msgs: world.duplicate(),
                parts: world.duplicate(),
            },
            Channel {
                msgs: world.duplicate(),
                parts: world.duplicate(),
            },
        ];
        let rank = world.rank() as usize;
        let size = world.size() as usize;
        // Every rank uses the same buffer_size: checked by `Mpi` before (a receive is posted
        // for `buffer_size + 1` bytes).
        let eager = cfg.buffer_size;
        Ok(MpiNative {
            rank,
            world: size,
            cfg: *cfg,
            notes: vec!["MPI native path: one MPI message per Ballast message, MPI matches tags; pool, endpoint cap and receive sharing do not apply (MPI manages its buffers and connections)".into()],
            chans,
            abort,
            eager,
            part_bytes: part_bytes.clamp(1, c_int::MAX as usize),
            recv_scratch: Vec::with_capacity(eager + 1),
            send_scratch: Vec::with_capacity(eager + 1),
            recvs: Vec::new(),
            done_recvs: IntMap::default(),
            sends: Vec::new(),
            done_sends: IntSet::default(),
            unexpected: VecDeque::new(),
            next_id: 0,
            seen: vec![false; size],
            peers: 0,
            scratch_done: None,
            sent: vec![0; size],
            received: 0,
            calls: 0,
            barrier: None,
            all_done: false,
            statuses: Vec::new(),
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.world
    }

    /// The configuration (the pool, endpoint and sharing settings are not used here).
    pub fn config(&self) -> &TransportConfig {
        &self.cfg
    }

    /// Notes about the setup.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn check_rank(&self, r: usize) -> Result<()> {
        if r >= self.world {
            return Err(Error::InvalidRank {
                rank: r,
                world_size: self.world,
            });
        }
        Ok(())
    }

    /// Channel and MPI tag of a Ballast tag.
    fn wire_tag(tag: Tag) -> (usize, c_int) {
        if tag < RESERVED_TAG_BASE {
            (USER, tag as c_int)
        } else {
            (RESERVED, (tag - RESERVED_TAG_BASE) as c_int)
        }
    }

    fn ballast_tag(chan: usize, mpi_tag: c_int) -> Tag {
        if chan == USER {
            mpi_tag as Tag
        } else {
            mpi_tag as Tag + RESERVED_TAG_BASE
        }
    }

    fn note_peer(&mut self, r: usize) {
        if r != self.rank && !self.seen[r] {
            self.seen[r] = true;
            self.peers += 1;
        }
    }

    /// True when a message of `len` bytes is sent as a header and parts.
    pub fn goes_direct(&self, _dest: usize, len: usize) -> bool {
        len > self.eager
    }

    /// Posts `head` (and, for a large message, its parts from `body`) to `dest`.
    fn post(&mut self, dest: usize, tag: Tag, head: Vec<u8>, body: Body<'_>, scratch: bool) -> Result<u64> {
        let (body_ptr, body_len) = match &body {
            Body::Empty => (std::ptr::null(), 0),
            Body::Owned(v) => (v.as_ptr(), v.len()),
            Body::Caller(d) => (d.as_ptr(), d.len()),
        };
        let body = match body {
            Body::Owned(v) => v,
            _ => Vec::new(),
        };
        let (chan, mtag) = Self::wire_tag(tag);
        let dt = u8::equivalent_datatype().as_raw();
        let d = dest as c_int;
        let mut reqs = Vec::with_capacity(1);
        let mut req = null_request();
        // SAFETY: `head` is moved into the PendingSend below (its heap block does not move)
        // and kept until MPI reports the request complete; its length fits an int (at most
        // buffer_size + 1 <= 1 GiB + 1); the communicator is live.
        let code = unsafe {
            ffi::MPI_Isend(
                head.as_ptr().cast(),
                head.len() as c_int,
                dt,
                d,
                mtag,
                self.chans[chan].msgs.as_raw(),
                &mut req,
            )
        };
        check(code, "MPI_Isend")?;
        reqs.push(req);
        let mut off = 0;
        while off < body_len {
            let n = self.part_bytes.min(body_len - off);
            let mut req = null_request();
            // SAFETY: `body_ptr + off .. + n` lies in the message's bytes: `body`, kept in
            // the PendingSend until complete, or the caller's slice of a blocking send,
            // which waits for completion before returning; `n` fits an int (part_bytes is
            // clamped); the communicator is live.
            let code = unsafe {
                ffi::MPI_Isend(
                    body_ptr.add(off).cast(),
                    n as c_int,
                    dt,
                    d,
                    mtag,
                    self.chans[chan].parts.as_raw(),
                    &mut req,
                )
            };
            if let Err(e) = check(code, "MPI_Isend") {
                // The header is out: keep what was posted so it completes and is freed.
                let id = self.new_id();
                self.sends.push(PendingSend {
                    id,
                    reqs,
                    head,
                    body,
                    scratch,
                });
                return Err(e);
            }
            reqs.push(req);
            off += n;
        }
        self.sent[dest] += 1;
        self.note_peer(dest);
        let id = self.new_id();
        self.sends.push(PendingSend {
            id,
            reqs,
            head,
            body,
            scratch,
        });
        Ok(id)
    }

    /// Starts sending a copy of `data` (the caller may reuse `data` at once). Never
    /// [`Error::WouldBlock`]: MPI queues it.
    pub fn isend(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<u64> {
        self.check_rank(dest)?;
        if data.len() <= self.eager {
            let mut head = Vec::with_capacity(data.len() + 1);
            head.extend_from_slice(data);
            head.push(KIND_WHOLE);
            self.post(dest, tag, head, Body::Empty, false)
        } else {
            let mut head = Vec::with_capacity(LARGE_HEADER);
            head.extend_from_slice(&(data.len() as u64).to_le_bytes());
            head.push(KIND_LARGE);
            self.post(dest, tag, head, Body::Owned(data.to_vec()), false)
        }
    }

    /// Sends `data` and returns when MPI no longer reads it (a small message from the
    /// kept send buffer, a large one's bytes straight from `data`), progressing meanwhile.
    pub fn send(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<()> {
        self.check_rank(dest)?;
        let mut head = std::mem::take(&mut self.send_scratch);
        head.clear();
        let id = if data.len() <= self.eager {
            head.extend_from_slice(data);
            head.push(KIND_WHOLE);
            return self.send_small(dest, tag, head);
        } else {
            head.extend_from_slice(&(data.len() as u64).to_le_bytes());
            head.push(KIND_LARGE);
            match self.post(dest, tag, head, Body::Caller(data), true) {
                Ok(id) => id,
                Err(e) => {
                    // Some parts may read `data`: they must finish before it is released.
                    self.wait_all_sends();
                    return Err(e);
                }
            }
        };
        let mut b = Idle::new();
        loop {
            match self.send_done(id) {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => return Err(e),
            }
            match self.poll(b.housekeeping()) {
                Ok(true) => b.reset(),
                Ok(false) => b.snooze(),
                Err(e) => {
                    if data.len() > self.eager {
                        // MPI may still read the caller's slice: wait for it (as MPI_Send would).
                        self.wait_all_sends();
                    }
                    return Err(e);
                }
            }
        }
        self.finish_send(id);
        Ok(())
    }

    /// The blocking send of a small message in `head` (the kept send buffer): one
    /// `MPI_Isend`, tested until complete, progressing the rest meanwhile (no request
    /// bookkeeping: the latency path of a ping-pong).
    fn send_small(&mut self, dest: usize, tag: Tag, head: Vec<u8>) -> Result<()> {
        let (chan, mtag) = Self::wire_tag(tag);
        let mut req = null_request();
        // SAFETY: `head` is kept alive until the request completes: tested below, and on an
        // early error moved with the request into `sends`, which holds it until complete;
        // its length fits an int (at most buffer_size + 1); the communicator is live.
        let code = unsafe {
            ffi::MPI_Isend(
                head.as_ptr().cast(),
                head.len() as c_int,
                u8::equivalent_datatype().as_raw(),
                dest as c_int,
                mtag,
                self.chans[chan].msgs.as_raw(),
                &mut req,
            )
        };
        check(code, "MPI_Isend")?;
        self.sent[dest] += 1;
        self.note_peer(dest);
        let mut b = Idle::new();
        loop {
            let mut flag: c_int = 0;
            // SAFETY: `req` is the live send request reading `head`.
            let tested = check(
                unsafe { ffi::MPI_Test(&mut req, &mut flag, ffi::RSMPI_STATUS_IGNORE) },
                "MPI_Test",
            );
            let failed = match tested {
                Ok(()) if flag != 0 => {
                    self.send_scratch = head;
                    return Ok(());
                }
                Ok(()) => match self.poll(b.housekeeping()) {
                    Ok(true) => {
                        b.reset();
                        None
                    }
                    Ok(false) => {
                        b.snooze();
                        None
                    }
                    Err(e) => Some(e),
                },
                Err(e) => Some(e),
            };
            if let Some(e) = failed {
                let id = self.new_id();
                self.sends.push(PendingSend {
                    id,
                    reqs: vec![req],
                    head,
                    body: Vec::new(),
                    scratch: false,
                });
                return Err(e);
            }
        }
    }

    /// Large blocking sends read the caller's slice: on an error they are waited for.
    fn wait_all_sends(&mut self) {
        for s in &mut self.sends {
            if !s.body.is_empty() || !s.scratch {
                continue;
            }
            for r in &mut s.reqs {
                // SAFETY: `r` is a live or null request of this process.
                unsafe { ffi::MPI_Wait(r, ffi::RSMPI_STATUS_IGNORE) };
            }
        }
    }

    /// True when send `id` completed.
    pub fn send_done(&self, id: u64) -> Result<bool> {
        if self.done_sends.contains(&id) {
            return Ok(true);
        }
        if self.sends.iter().any(|s| s.id == id) {
            return Ok(false);
        }
        Err(Error::UnknownRequest(id))
    }

    /// Forgets a completed send.
    pub fn finish_send(&mut self, id: u64) {
        self.done_sends.remove(&id);
    }

    /// True when every send completed.
    pub fn sends_drained(&self) -> bool {
        self.sends.is_empty()
    }

    fn wire_match(&self, src: Source, tag: TagMatch) -> Result<(usize, c_int, c_int)> {
        let s = match src {
            Source::Any => any_source(),
            Source::Rank(r) => {
                self.check_rank(r)?;
                r as c_int
            }
        };
        Ok(match tag {
            TagMatch::Any => (USER, s, any_tag()),
            TagMatch::Tag(t) => {
                let (c, m) = Self::wire_tag(t);
                (c, s, m)
            }
        })
    }

    fn take_unexpected(&mut self, chan: usize, src: c_int, tag: c_int) -> Option<Message> {
        let i = self.unexpected.iter().position(|(c, m)| {
            *c == chan
                && (src == any_source() || m.source as c_int == src)
                && (tag == any_tag() || Self::wire_tag(m.tag).1 == tag)
        })?;
        self.unexpected.remove(i).map(|(_, m)| m)
    }

    fn post_recv(&mut self, src: Source, tag: TagMatch, scratch: bool) -> Result<u64> {
        let (chan, s, t) = self.wire_match(src, tag)?;
        let id = self.new_id();
        if let Some(m) = self.take_unexpected(chan, s, t) {
            self.done_recvs.insert(id, m);
            return Ok(id);
        }
        let mut buf = if scratch {
            std::mem::take(&mut self.recv_scratch)
        } else {
            Vec::new()
        };
        // SAFETY: `buf` is moved into the PendingRecv (its heap block does not move) until
        // the request completes or is cancelled.
        let req = unsafe { self.post_header_recv(chan, s, t, &mut buf) }?;
        self.recvs.push(PendingRecv {
            id,
            chan,
            src: s,
            tag: t,
            state: RecvState::Header { req, buf, scratch },
        });
        Ok(id)
    }

    /// Posts an `MPI_Irecv` of `eager + 1` bytes (a whole message or a large header) from
    /// `(s, t)` on `chan` into `buf` (cleared and grown as needed).
    ///
    /// # Safety
    /// `buf`'s heap block must stay alive, unmoved and unread until the returned request
    /// completes or is cancelled.
    unsafe fn post_header_recv(
        &self,
        chan: usize,
        s: c_int,
        t: c_int,
        buf: &mut Vec<u8>,
    ) -> Result<ffi::MPI_Request> {
        buf.clear();
        buf.reserve_exact(self.eager + 1);
        let mut req = null_request();
        // SAFETY: `buf` has capacity for `eager + 1` bytes (<= 1 GiB + 1, an int), kept alive
        // by the caller until the request completes; the communicator is live.
        let code = unsafe {
            ffi::MPI_Irecv(
                buf.as_mut_ptr().cast(),
                (self.eager + 1) as c_int,
                u8::equivalent_datatype().as_raw(),
                s,
                t,
                self.chans[chan].msgs.as_raw(),
                &mut req,
            )
        };
        check(code, "MPI_Irecv")?;
        Ok(req)
    }

    /// Posts a receive; a matching unexpected message completes it at once.
    pub fn irecv(&mut self, src: Source, tag: TagMatch) -> Result<u64> {
        self.post_recv(src, tag, false)
    }

    /// Receives the next matching message, progressing until it is there (into the kept
    /// receive buffer, then copied to a `Vec` of its size).
    pub fn recv(&mut self, src: Source, tag: TagMatch) -> Result<Message> {
        if self.recvs.is_empty() && self.sends.is_empty() && self.unexpected.is_empty() {
            return self.recv_alone(src, tag);
        }
        let id = self.post_recv(src, tag, true)?;
        self.wait_recv(id, Idle::new())
    }

    /// `recv` when nothing else is in flight (the latency path of a ping-pong): one
    /// `MPI_Irecv` into the kept buffer, tested in place. Nothing else can complete or
    /// arrive in Ballast's queues meanwhile, so the receive needs no place in the posting
    /// order until the first housekeeping (after [`DRAIN_EVERY`] idle polls) or a large
    /// header: then it joins `recvs` and the general wait takes over.
    fn recv_alone(&mut self, src: Source, tag: TagMatch) -> Result<Message> {
        let (chan, s, t) = self.wire_match(src, tag)?;
        let mut buf = std::mem::take(&mut self.recv_scratch);
        // SAFETY: `buf` stays alive until the request completes: it is only read or
        // released below after completion, or moved with the live request into `recvs`.
        let mut req = unsafe { self.post_header_recv(chan, s, t, &mut buf) }?;
        let mut idle = Idle::new();
        loop {
            let mut flag: c_int = 0;
            let mut status = empty_status();
            // SAFETY: `req` is the live receive request writing into `buf`.
            let tested = check(
                unsafe { ffi::MPI_Test(&mut req, &mut flag, &mut status) },
                "MPI_Test",
            );
            let done = tested.is_ok() && flag != 0;
            if done {
                let n = byte_count(&status)?;
                if (1..=self.eager + 1).contains(&n) {
                    // SAFETY: MPI wrote `n` bytes into `buf`'s capacity.
                    unsafe { buf.set_len(n) };
                    if buf[n - 1] == KIND_WHOLE {
                        self.received += 1;
                        let source = source_rank(status.MPI_SOURCE)?;
                        self.note_peer(source);
                        let m = Message {
                            source,
                            tag: Self::ballast_tag(chan, status.MPI_TAG),
                            data: buf[..n - 1].to_vec(),
                        };
                        self.recv_scratch = buf;
                        return Ok(m);
                    }
                }
            }
            if done || tested.is_err() || idle.housekeeping() {
                // A large header, something to report, or housekeeping due: join `recvs`.
                let id = self.new_id();
                self.recvs.push(PendingRecv {
                    id,
                    chan,
                    src: s,
                    tag: t,
                    state: RecvState::Header {
                        req,
                        buf,
                        scratch: true,
                    },
                });
                tested?;
                if done {
                    let i = self.recvs.len() - 1;
                    self.header_done(i, status)?;
                }
                return self.wait_recv(id, idle);
            }
            idle.snooze();
        }
    }

    /// Waits for blocking receive `id` (posted with the kept buffer) to complete.
    fn wait_recv(&mut self, id: u64, mut idle: Idle) -> Result<Message> {
        loop {
            if let Some(m) = self.scratch_done.take() {
                return Ok(m);
            }
            if !self.done_recvs.is_empty() {
                // Matched an unexpected message at once, or a large message's parts.
                if let Some(m) = self.done_recvs.remove(&id) {
                    return Ok(m);
                }
            }
            if self.poll(idle.housekeeping())? {
                idle.reset();
            } else {
                idle.snooze();
            }
        }
    }

    /// True when receive `id` completed.
    pub fn recv_done(&self, id: u64) -> bool {
        self.done_recvs.contains_key(&id)
    }

    /// Takes the message of a completed receive.
    pub fn take_recv(&mut self, id: u64) -> Option<Message> {
        self.done_recvs.remove(&id)
    }

    /// Takes a matching message that arrived without a posted receive, if any.
    pub fn try_take(&mut self, src: Source, tag: TagMatch) -> Option<Message> {
        let (chan, s, t) = self.wire_match(src, tag).ok()?;
        if let Some(m) = self.take_unexpected(chan, s, t) {
            return Some(m);
        }
        match self.probe_one(chan, s, t) {
            Ok(Some(m)) => Some(m),
            _ => None,
        }
    }

    /// Takes the first message matching `(s, t)` on `chan` out of MPI, if one is there.
    fn probe_one(&mut self, chan: usize, s: c_int, t: c_int) -> Result<Option<Message>> {
        let mut flag: c_int = 0;
        // SAFETY: reading the "no process" message constant as an initial value.
        let mut msg: ffi::MPI_Message = unsafe { ffi::RSMPI_MESSAGE_NO_PROC };
        let mut status = empty_status();
        // SAFETY: the communicator is live; the out-parameters are valid.
        check(
            unsafe {
                ffi::MPI_Improbe(
                    s,
                    t,
                    self.chans[chan].msgs.as_raw(),
                    &mut flag,
                    &mut msg,
                    &mut status,
                )
            },
            "MPI_Improbe",
        )?;
        if flag == 0 {
            return Ok(None);
        }
        let n = byte_count(&status)?;
        let mut buf: Vec<u8> = Vec::with_capacity(n);
        // SAFETY: `buf` has capacity for the `n` bytes of the matched message, received
        // exactly once.
        check(
            unsafe {
                ffi::MPI_Mrecv(
                    buf.as_mut_ptr().cast(),
                    n as c_int,
                    u8::equivalent_datatype().as_raw(),
                    &mut msg,
                    &mut status,
                )
            },
            "MPI_Mrecv",
        )?;
        // SAFETY: MPI_Mrecv initialised `n` bytes.
        unsafe { buf.set_len(n) };
        self.received += 1;
        let (source, mtag) = (status.MPI_SOURCE, status.MPI_TAG);
        let m = self.finish_header(chan, source, mtag, buf, n, None)?;
        Ok(m)
    }

    /// A message or large header of `n` bytes in `buf` from `source` with `mtag` on
    /// `chan`: the message (a large one's parts received here, blocking: the sender posted
    /// them with the header), or, when `parts_for` is given (a posted receive), `None`
    /// after posting the parts receives into that receive's state.
    fn finish_header(
        &mut self,
        chan: usize,
        source: c_int,
        mtag: c_int,
        mut buf: Vec<u8>,
        n: usize,
        parts_for: Option<u64>,
    ) -> Result<Option<Message>> {
        let tag = Self::ballast_tag(chan, mtag);
        let src = source_rank(source)?;
        self.note_peer(src);
        let kind = if n == 0 { u8::MAX } else { buf[n - 1] };
        match kind {
            KIND_WHOLE => {
                let data = if n - 1 <= buf.capacity() / 2 {
                    buf[..n - 1].to_vec()
                } else {
                    buf.truncate(n - 1);
                    buf
                };
                Ok(Some(Message {
                    source: src,
                    tag,
                    data,
                }))
            }
            KIND_LARGE if n == LARGE_HEADER => {
                let bytes = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
                // Earlier posted receives that could have matched this sender and tag have
                // matched earlier messages: their parts come first.
                self.settle_earlier(chan, source, mtag, parts_for)?;
                let mut data = Vec::new();
                // (A length beyond usize fails the reservation too.)
                data.try_reserve_exact(usize::try_from(bytes).unwrap_or(usize::MAX))
                    .map_err(|e| Error::MessageAlloc {
                        rank: self.rank,
                        peer: src,
                        bytes,
                        source: e,
                    })?;
                let total = bytes as usize;
                match parts_for {
                    None => {
                        while data.len() < total {
                            if recv_append(&self.chans[chan].parts, self.rank, src, mtag, &mut data)? == 0 {
                                return Err(Error::BadPacket {
                                    rank: self.rank,
                                    from: Sender::Rank(src),
                                    bytes: 0,
                                    what: format!("empty part at {} of {total} bytes", data.len()),
                                });
                            }
                        }
                        Ok(Some(Message {
                            source: src,
                            tag,
                            data,
                        }))
                    }
                    Some(id) => {
                        let i = self
                            .recvs
                            .iter()
                            .position(|r| r.id == id)
                            .ok_or(Error::UnknownRequest(id))?;
                        let mut reqs = Vec::new();
                        let mut off = 0;
                        while off < total {
                            let k = self.part_bytes.min(total - off);
                            let mut req = null_request();
                            // SAFETY: `data` has capacity `total`; `off + k <= total`; it is
                            // moved into the receive's state (its heap block does not move)
                            // until the requests complete or are cancelled.
                            let code = unsafe {
                                ffi::MPI_Irecv(
                                    data.as_mut_ptr().add(off).cast(),
                                    k as c_int,
                                    u8::equivalent_datatype().as_raw(),
                                    source,
                                    mtag,
                                    self.chans[chan].parts.as_raw(),
                                    &mut req,
                                )
                            };
                            check(code, "MPI_Irecv")?;
                            reqs.push(req);
                            off += k;
                        }
                        self.recvs[i].state = RecvState::Parts {
                            reqs,
                            data,
                            total,
                            source: src,
                            tag,
                        };
                        Ok(None)
                    }
                }
            }
            k => Err(Error::BadPacket {
                rank: self.rank,
                from: Sender::Rank(src),
                bytes: n,
                what: format!("unknown kind {k}"),
            }),
        }
    }

    /// Completes (waiting: MPI matched them already) the posted receives before receive
    /// `before` (all of them when `None`) that could match `(source, mtag)` on `chan` and
    /// still wait for their header, in posting order, so that their parts are posted first.
    fn settle_earlier(&mut self, chan: usize, source: c_int, mtag: c_int, before: Option<u64>) -> Result<()> {
        let mut j = 0;
        while j < self.recvs.len() && Some(self.recvs[j].id) != before {
            let r = &self.recvs[j];
            let matches = r.chan == chan
                && (r.src == any_source() || r.src == source)
                && (r.tag == any_tag() || r.tag == mtag);
            if matches {
                if let RecvState::Header { req, .. } = &mut self.recvs[j].state {
                    let mut status = empty_status();
                    // SAFETY: `req` is a live receive request whose buffer is owned by the
                    // receive's state.
                    check(unsafe { ffi::MPI_Wait(req, &mut status) }, "MPI_Wait")?;
                    let removed = self.header_done(j, status)?;
                    if removed {
                        continue;
                    }
                }
            }
            j += 1;
        }
        Ok(())
    }

    /// The header request of receive `i` completed with `status`. Returns true when the
    /// receive was removed from the list (a whole message), false when it now waits for
    /// its parts.
    fn header_done(&mut self, i: usize, status: ffi::MPI_Status) -> Result<bool> {
        let n = byte_count(&status)?;
        self.received += 1;
        let chan = self.recvs[i].chan;
        let RecvState::Header { buf, scratch, .. } = &mut self.recvs[i].state else {
            unreachable!("header state")
        };
        let scratch = *scratch;
        let mut buf = std::mem::take(buf);
        // SAFETY: MPI wrote `n <= eager + 1` bytes (the receive's count) into the buffer.
        unsafe { buf.set_len(n) };
        if n == LARGE_HEADER && buf[n - 1] == KIND_LARGE {
            let header = buf[..n].to_vec();
            if scratch {
                self.recv_scratch = buf;
            }
            let id = self.recvs[i].id;
            self.finish_header(chan, status.MPI_SOURCE, status.MPI_TAG, header, n, Some(id))?;
            return Ok(false);
        }
        let m = if scratch {
            let kind = if n == 0 { u8::MAX } else { buf[n - 1] };
            let m = if kind == KIND_WHOLE {
                let src = source_rank(status.MPI_SOURCE)?;
                self.note_peer(src);
                Ok(Some(Message {
                    source: src,
                    tag: Self::ballast_tag(chan, status.MPI_TAG),
                    data: buf[..n - 1].to_vec(),
                }))
            } else {
                Err(Error::BadPacket {
                    rank: self.rank,
                    from: Sender::Rank(status.MPI_SOURCE.max(0) as usize),
                    bytes: n,
                    what: format!("kind {kind} where a whole message was expected"),
                })
            };
            self.recv_scratch = buf;
            m
        } else {
            self.finish_header(chan, status.MPI_SOURCE, status.MPI_TAG, buf, n, None)
        };
        let r = self.recvs.remove(i);
        let m = m?.ok_or_else(|| Error::BadPacket {
            rank: self.rank,
            from: Sender::Rank(status.MPI_SOURCE.max(0) as usize),
            bytes: n,
            what: "a large message's header where a whole message was expected".into(),
        })?;
        if scratch {
            self.scratch_done = Some(m);
        } else {
            self.done_recvs.insert(r.id, m);
        }
        Ok(true)
    }

    /// Tests the posted receives in posting order.
    fn test_recvs(&mut self) -> Result<bool> {
        let mut work = false;
        let mut i = 0;
        while i < self.recvs.len() {
            let mut status = empty_status();
            let mut flag: c_int = 0;
            match &mut self.recvs[i].state {
                RecvState::Header { req, .. } => {
                    // SAFETY: `req` is a live receive request whose buffer the state owns.
                    check(unsafe { ffi::MPI_Test(req, &mut flag, &mut status) }, "MPI_Test")?;
                    if flag != 0 {
                        work = true;
                        // Completing it may complete (and remove) earlier receives too.
                        let (id, len) = (self.recvs[i].id, self.recvs.len());
                        let removed = self.header_done(i, status)?;
                        let earlier = len - self.recvs.len() - usize::from(removed);
                        i -= earlier;
                        if removed {
                            continue;
                        }
                        debug_assert_eq!(self.recvs[i].id, id);
                    }
                }
                RecvState::Parts { reqs, .. } => {
                    let n = reqs.len();
                    self.statuses.resize(n, empty_status());
                    // SAFETY: `reqs` holds `n` live or null requests whose buffer is the
                    // state's `data`; `statuses` has `n` entries.
                    check(
                        unsafe {
                            ffi::MPI_Testall(
                                n as c_int,
                                reqs.as_mut_ptr(),
                                &mut flag,
                                self.statuses.as_mut_ptr(),
                            )
                        },
                        "MPI_Testall",
                    )?;
                    if flag != 0 {
                        work = true;
                        let r = self.recvs.remove(i);
                        let RecvState::Parts {
                            mut data,
                            total,
                            source,
                            tag,
                            ..
                        } = r.state
                        else {
                            unreachable!("parts state")
                        };
                        // SAFETY: the parts receives wrote all `total` bytes (the sender sent
                        // exactly `total` bytes as parts of these sizes).
                        unsafe { data.set_len(total) };
                        self.done_recvs.insert(r.id, Message { source, tag, data });
                        continue;
                    }
                }
            }
            i += 1;
        }
        Ok(work)
    }

    fn test_sends(&mut self) -> Result<bool> {
        let mut work = false;
        let mut i = 0;
        while i < self.sends.len() {
            let s = &mut self.sends[i];
            let n = s.reqs.len();
            let mut flag: c_int = 0;
            // SAFETY: `reqs` holds `n` live or null requests whose buffers the entry (or,
            // for a blocking send, the waiting caller) owns.
            check(
                unsafe {
                    ffi::MPI_Testall(
                        n as c_int,
                        s.reqs.as_mut_ptr(),
                        &mut flag,
                        ffi::RSMPI_STATUSES_IGNORE,
                    )
                },
                "MPI_Testall",
            )?;
            if flag != 0 {
                work = true;
                let s = self.sends.swap_remove(i);
                if s.scratch {
                    self.send_scratch = s.head;
                }
                self.done_sends.insert(s.id);
                continue;
            }
            i += 1;
        }
        Ok(work)
    }

    /// Takes every message no receive is posted for out of MPI into the unexpected queue.
    fn drain(&mut self) -> Result<bool> {
        let mut work = false;
        for chan in [USER, RESERVED] {
            while let Some(m) = self.probe_one(chan, any_source(), any_tag())? {
                self.unexpected.push_back((chan, m));
                work = true;
            }
        }
        Ok(work)
    }

    /// One round of progress: tests sends and posted receives, and every
    /// [`DRAIN_EVERY`] calls takes unexpected messages out of MPI.
    pub fn progress(&mut self) -> Result<bool> {
        self.calls = self.calls.wrapping_add(1);
        self.poll(self.calls.is_multiple_of(DRAIN_EVERY))
    }

    /// One round of progress; with `housekeeping`, also looks for an abort notice and
    /// drains unexpected messages (each an `MPI_Improbe`, which costs about what a receive
    /// does in Open MPI: the blocking calls do it only after [`DRAIN_EVERY`] idle polls in a
    /// row, so a ping-pong never pays for it).
    fn poll(&mut self, housekeeping: bool) -> Result<bool> {
        if housekeeping {
            if self.abort.poll() {
                return Err(Error::Aborted);
            }
        } else if self.abort.is_set() {
            return Err(Error::Aborted);
        }
        let mut work = false;
        if !self.sends.is_empty() {
            work |= self.test_sends()?;
        }
        if !self.recvs.is_empty() {
            work |= self.test_recvs()?;
        }
        if housekeeping {
            work |= self.drain()?;
        }
        Ok(work)
    }

    /// Starts the final barrier (non-blocking).
    pub fn mark_done(&mut self) {
        if self.barrier.is_some() || self.all_done {
            return;
        }
        let mut req = null_request();
        // SAFETY: the communicator is live; `req` is a valid out-parameter.
        let code = unsafe { ffi::MPI_Ibarrier(self.chans[RESERVED].parts.as_raw(), &mut req) };
        if code as i64 == ffi::MPI_SUCCESS as i64 {
            self.barrier = Some(req);
        }
    }

    /// True when every rank passed [`MpiNative::mark_done`].
    pub fn all_done(&mut self) -> bool {
        if let Some(req) = &mut self.barrier {
            let mut flag: c_int = 0;
            // SAFETY: `req` is the live barrier request.
            unsafe { ffi::MPI_Test(req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
            if flag != 0 {
                self.barrier = None;
                self.all_done = true;
            }
        }
        self.all_done
    }

    /// Ballast's own bytes: the kept buffers and the buffers of requests in flight (posted
    /// receives, `isend` copies) as `srq_bytes` (what receive resources are on the other
    /// transports), and the structure with its per-rank entries as `control_bytes`.
    /// Messages that arrived before their receive was posted are the application's data
    /// waiting to be received (as in the engine's matcher, and in MPI's own unexpected
    /// queue): not counted.
    pub fn footprint(&self) -> Footprint {
        let kept = (self.recv_scratch.capacity() + self.send_scratch.capacity()) as u64;
        let in_flight: u64 = self
            .recvs
            .iter()
            .map(|r| match &r.state {
                RecvState::Header { buf, .. } => buf.capacity() as u64,
                RecvState::Parts { data, .. } => data.capacity() as u64,
            })
            .chain(
                self.sends
                    .iter()
                    .map(|s| (s.head.capacity() + s.body.capacity()) as u64),
            )
            .sum();
        let peers = self.peers as u64;
        Footprint {
            pool_bytes: 0,
            registered_bytes: 0,
            locked_bytes: 0,
            endpoint_bytes: 0,
            srq_bytes: kept + in_flight,
            control_bytes: MPI_NATIVE_FIXED_BYTES + self.world as u64 * MPI_NATIVE_PER_RANK_BYTES,
            endpoints_live: 0,
            endpoints_peak: 0,
            endpoints_opened: 0,
            peers_connected: peers,
        }
    }

    /// No pool here: all zero.
    pub fn pool_stats(&self) -> PoolStats {
        PoolStats {
            buffers: 0,
            free: 0,
            high_water: 0,
            chunks: 0,
            exhausted: 0,
        }
    }

    /// No endpoints here (MPI's own): only `peers_connected` is counted.
    pub fn endpoint_stats(&self) -> EndpointStats {
        EndpointStats {
            live: 0,
            peak: 0,
            opened: 0,
            evicted: 0,
            peers_connected: self.peers as u64,
        }
    }

    /// The unused part of the abort line for [`super::Mpi::run_ranks`].
    pub(crate) fn abort_line(&self) -> Arc<AbortLine> {
        Arc::clone(&self.abort)
    }

    /// Receives every message still addressed to this rank (counted against what every
    /// rank sent to it), so that none is left when the communicators are freed (MPI may
    /// reuse their contexts). Collective; only after the final barrier.
    fn drain_for_free(&mut self) -> Result<()> {
        // Posted receives never completed: cancel them (or count what they got).
        while let Some(r) = self.recvs.pop() {
            match r.state {
                RecvState::Header { mut req, buf, .. } => {
                    let mut status = empty_status();
                    // SAFETY: `req` is a live receive request whose buffer `buf` is alive
                    // until after MPI_Wait returns.
                    unsafe {
                        ffi::MPI_Cancel(&mut req);
                        ffi::MPI_Wait(&mut req, &mut status);
                    }
                    let mut cancelled: c_int = 0;
                    // SAFETY: `status` was filled by MPI_Wait.
                    unsafe { ffi::MPI_Test_cancelled(&status, &mut cancelled) };
                    if cancelled == 0 {
                        self.received += 1;
                        let n = byte_count(&status)?;
                        if n == LARGE_HEADER {
                            // SAFETY: MPI wrote `n` bytes into `buf`'s capacity.
                            let kind = unsafe { *buf.as_ptr().add(n - 1) };
                            if kind == KIND_LARGE {
                                let mut b = [0u8; 8];
                                // SAFETY: as above, 8 initialised bytes at the start.
                                unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), b.as_mut_ptr(), 8) };
                                self.discard_parts(
                                    r.chan,
                                    status.MPI_SOURCE as usize,
                                    status.MPI_TAG,
                                    u64::from_le_bytes(b),
                                )?;
                            }
                        }
                    }
                    drop(buf);
                }
                RecvState::Parts { mut reqs, data, .. } => {
                    // SAFETY: the parts were sent with the header: waiting completes.
                    unsafe {
                        ffi::MPI_Waitall(reqs.len() as c_int, reqs.as_mut_ptr(), ffi::RSMPI_STATUSES_IGNORE)
                    };
                    drop(data);
                }
            }
        }
        let mut total = vec![0u64; self.world];
        self.chans[RESERVED]
            .parts
            .all_reduce_into(&self.sent[..], &mut total[..], SystemOperation::sum());
        while self.received < total[self.rank] {
            let mut got = false;
            for chan in [USER, RESERVED] {
                if self.probe_one(chan, any_source(), any_tag())?.is_some() {
                    got = true;
                }
            }
            if !got {
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    fn discard_parts(&mut self, chan: usize, source: usize, mtag: c_int, total: u64) -> Result<()> {
        // (Parts are received in pieces of at most `part_bytes`: no allocation of `total`.)
        let total = usize::try_from(total).unwrap_or(usize::MAX);
        let mut sink = Vec::with_capacity(self.part_bytes.min(total));
        let mut got = 0;
        while got < total {
            sink.clear();
            match recv_append(&self.chans[chan].parts, self.rank, source, mtag, &mut sink) {
                Ok(n) if n > 0 => got += n,
                _ => break,
            }
        }
        Ok(())
    }
}

impl Drop for MpiNative {
    fn drop(&mut self) {
        let finished = self.all_done && !self.abort.is_set() && !rsmpi::environment::is_finalized();
        if finished && self.sends.is_empty() && self.drain_for_free().is_ok() {
            return; // the communicators are freed with `chans`
        }
        // Unfinished, failed, or MPI already finalised: requests may still be live (a peer
        // may still send, or read what we send): leak them with their buffers and the
        // communicators, which are then never freed and never reused.
        std::mem::forget(std::mem::take(&mut self.recvs));
        std::mem::forget(std::mem::take(&mut self.sends));
        // The barrier request handle is a plain value: dropping it leaves the request live.
        let _ = self.barrier.take();
        let chans = std::mem::replace(
            &mut self.chans,
            [
                Channel {
                    msgs: SimpleCommunicator::self_comm(),
                    parts: SimpleCommunicator::self_comm(),
                },
                Channel {
                    msgs: SimpleCommunicator::self_comm(),
                    parts: SimpleCommunicator::self_comm(),
                },
            ],
        );
        std::mem::forget(chans);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structure_fits_the_model() {
        let size = std::mem::size_of::<MpiNative>() as u64;
        assert!(
            size <= MPI_NATIVE_FIXED_BYTES,
            "MpiNative is {size} bytes, the model charges {MPI_NATIVE_FIXED_BYTES}"
        );
    }

    #[test]
    fn wire_tags_round_trip() {
        for t in [
            0,
            1,
            77,
            RESERVED_TAG_BASE - 1,
            RESERVED_TAG_BASE,
            RESERVED_TAG_BASE + 100,
        ] {
            let (chan, m) = MpiNative::wire_tag(t);
            assert!(m >= 0, "tag {t} maps to MPI tag {m}");
            assert_eq!(chan, if t < RESERVED_TAG_BASE { USER } else { RESERVED });
            assert_eq!(MpiNative::ballast_tag(chan, m), t);
        }
    }
}
