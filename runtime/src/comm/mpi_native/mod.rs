//! The native MPI path ([`MpiNative`]): with one Ballast rank per MPI process (the normal
//! case under `mpirun`/`srun`), every Ballast message is one MPI message and MPI does the
//! tag matching, so a small message costs what it costs in MPI (`MPI_Isend` +
//! `MPI_Test`, `MPI_Irecv` + `MPI_Test`) instead of going through the progress engine's
//! pool, credits and matching (which exist for RDMA and bought nothing above MPI: MPI
//! manages its own buffers and connections). Chosen by [`crate::fabric::mpi::Mpi`] when
//! `mpi_native` is on (`BALLAST_MPI_NATIVE`, default on), the world has one rank per
//! process and `MPI_TAG_UB` holds every Ballast tag; otherwise the engine path
//! ([`crate::fabric::mpi::MpiFabric`]) is used.
//!
//! Wire, on Ballast's own duplicates of the world communicator (six of them: messages and
//! parts for user tags, messages and parts for the runtime's reserved tags, abort notices,
//! and collectives, which are MPI's own: `coll`):
//! - a message of at most `buffer_size` bytes is one MPI message, its payload followed by a
//!   kind byte 0, with the Ballast tag as MPI tag (reserved tags minus
//!   [`RESERVED_TAG_BASE`] on the reserved-tag communicator);
//! - a larger one is a 9-byte header (length, u64 little-endian; kind byte 1) followed by
//!   its bytes as MPI messages of at most `part_bytes` (1 GiB by default, so no count
//!   overflows an `int`) with the same tag on the parts communicator. A blocking send
//!   sends them straight from the caller's slice; the receiver receives them straight into
//!   the `Vec` that becomes the message.
//!
//! Receives are `MPI_Irecv`s of `buffer_size + 1` bytes, at least the 9 of a large
//! message's header (nothing is truncated at any `buffer_size`); a blocking `recv` uses one kept
//! buffer (no allocation), and so does a posted receive while that buffer is free (no
//! blocking receive or other posted receive holds it; otherwise its buffer is allocated).
//! A message of an `irecv_within` stays in its receive's buffer until its wait, which
//! reads it there (`Communicator::wait_read`, C's `ballast_irecv_into`) and gives the
//! buffer back: a loop of one posted receive at a time allocates nothing, and while that
//! receive is the only request in flight its wait tests it in place and reads a whole
//! message without the general wait's bookkeeping (`within::read_alone`). An `isend` of a
//! small message likewise borrows the kept send buffer while it is free (else it copies
//! the message into a `Vec` of its own). MPI matches receives in posting order; when a large header
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
//!
//! Layout: this file holds the rank's state, its set-up, footprint and teardown; `send`,
//! `recv` and `progress` the three halves of the message path; `coll` the collectives
//! (MPI's, and the sparse exchange's NBX); `unexpected` the queue of
//! messages taken out of MPI before a receive took them; `abort` the abort notices; `ffi`
//! the raw MPI calls, behind types that own the buffers MPI reads and writes (the only
//! `unsafe` code of the native path).

use std::collections::VecDeque;
use std::os::raw::c_int;
use std::sync::Arc;

use rsmpi::collective::{CommunicatorCollectives as _, SystemOperation};
use rsmpi::topology::{Communicator as _, SimpleCommunicator};

use crate::comm::error::{Error, FabricError, Result};
use crate::comm::model::{
    mpi_native_kept_bytes, MPI_NATIVE_FIXED_BYTES, MPI_NATIVE_LARGE_HEADER_BYTES, MPI_NATIVE_PER_RANK_BYTES,
};
use crate::core::backoff::Backoff;
use crate::core::config::TransportConfig;
use crate::core::footprint::Footprint;
use crate::core::pool::PoolStats;
use crate::fabric::error::Sender;
use crate::fabric::mpi::ffi::{recv_append, recv_to_slice};
use crate::protocol::connection::EndpointStats;
use crate::protocol::matching::{Envelope, Message, Source, Tag, TagMatch, RESERVED_TAG_BASE};
use crate::protocol::request::RequestId;

const KIND_WHOLE: u8 = 0;
const KIND_LARGE: u8 = 1;
/// Bytes of a large message's header (length u64 and kind byte).
const LARGE_HEADER: usize = MPI_NATIVE_LARGE_HEADER_BYTES as usize;
/// Progress calls (or idle polls in a row of a blocking call) between two looks for
/// unexpected messages and for an abort notice.
pub const DRAIN_EVERY: u32 = 64;
/// MPI tag of abort notices (on their own communicator).
const ABORT_TAG: c_int = 1;
/// Channel of user tags and of the runtime's reserved tags.
const USER: usize = 0;
const RESERVED: usize = 1;

/// The sending rank of a completed receive (`MPI_SOURCE`; MPI rank = Ballast rank here).
fn source_rank(source: c_int) -> Result<usize> {
    usize::try_from(source).map_err(|_| {
        Error::Fabric(FabricError::MpiValue {
            what: "MPI_Status.MPI_SOURCE",
            value: source.into(),
            why: "is negative",
        })
    })
}

/// True when an `MPI_TAG_UB` of `tag_ub` holds every Ballast tag (user tags, and the
/// reserved ones as offsets, which are smaller).
pub(crate) fn tags_fit(tag_ub: i64) -> bool {
    tag_ub >= i64::from(RESERVED_TAG_BASE - 1)
}

mod abort;
mod backend;
mod coll;
mod done;
#[allow(unsafe_code)] // the raw MPI calls, behind types that own their buffers
mod ffi;
mod progress;
mod recv;
mod send;
mod unexpected;
mod within;

pub(crate) use abort::AbortLine;
pub(crate) use ffi::tag_ub;
use ffi::{
    any_source, any_tag, empty_status, HeaderRecv, Ibarrier, NativeComm, OwnedSend, PartsRecv, Status,
};

struct Channel {
    msgs: NativeComm,
    parts: NativeComm,
}

enum RecvState {
    /// Waiting for the message (or a large message's header) in the receive's buffer.
    Header { recv: HeaderRecv, scratch: bool },
    /// A large message's parts landing in the receive's buffer (`total` bytes when complete).
    Parts {
        recv: PartsRecv,
        total: usize,
        source: usize,
        tag: Tag,
    },
}

struct PendingRecv {
    id: RequestId,
    chan: usize,
    src: c_int,
    tag: c_int,
    state: RecvState,
}

/// A large message whose header came out of MPI but whose bytes could not be reserved
/// (out of memory, [`FabricError::MessageAlloc`](crate::comm::error::FabricError::MessageAlloc)): its parts wait in MPI. It stays first in line
/// ([`MpiNative::retry_deferred`], before anything else takes a message out of MPI or
/// matches one): every later call that would do so fails the same way until it fits.
/// Normally one at a time; a second one only when withdrawing a receive finds a large
/// message matched to it ([`MpiNative::withdraw`]): they are taken in order.
struct Deferred {
    chan: usize,
    source: usize,
    mtag: c_int,
    bytes: u64,
    /// The posted receive it was matched to, while that receive still waits (a receive
    /// whose wait failed is withdrawn: the message then goes to a later receive).
    owner: Option<RequestId>,
    /// The posted receive that matched it in MPI, if one did (MPI matched it ahead of
    /// every message taken out of MPI since that receive was posted): in the unexpected
    /// queue's front, in that receive's order ([`unexpected::Unexpected::push_matched`]).
    /// Else it came out unmatched, last so far: at the back.
    matched: Option<RequestId>,
}

/// The bytes of a large message after its header sent with it: none (a small message,
/// or a blocking send, whose parts are read from the caller's slice by
/// [`ffi::send_parts_scoped`]), or an `isend`'s owned copy.
enum Body {
    Empty,
    Owned(Vec<u8>),
}

struct PendingSend {
    id: RequestId,
    /// The MPI message (or a large message's header; the kept send buffer when `scratch`)
    /// and an `isend`'s copy of a large message's bytes, in flight.
    send: OwnedSend,
    scratch: bool,
    /// Sent to this rank itself (what a receive from itself may still get).
    to_self: bool,
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
    /// Bytes of a posted receive and of the kept buffers: a whole message and its kind
    /// byte, or a large message's header, whichever is longer
    /// ([`mpi_native_kept_bytes`]; a receive shorter than the header would be truncated).
    head_bytes: usize,
    part_bytes: usize,
    recv_scratch: Vec<u8>,
    send_scratch: Vec<u8>,
    recvs: Vec<PendingRecv>,
    done_recvs: done::Done<Message>,
    sends: Vec<PendingSend>,
    done_sends: done::Done<()>,
    /// Messages taken out of MPI before a receive took them, in matching order.
    unexpected: unexpected::Unexpected<(usize, Message)>,
    next_id: u64,
    /// Ranks sent to or received from (index = rank), and how many.
    seen: Vec<bool>,
    peers: usize,
    /// The message of the blocking `recv` in progress once it completed (kept out of
    /// `done_recvs`: no hashing on the latency path).
    scratch_done: Option<Message>,
    /// During a blocking `recv_into`: its buffer's length, so that a large message that fits
    /// has its parts received into that buffer rather than a `Vec` ([`MpiNative::recv_into`]).
    into_cap: Option<usize>,
    /// That receive's large message once its header completed and the parts are next.
    scratch_parts: Option<recv::Parts>,
    /// The length of the unexpected queue when the blocking receive's message (its
    /// header) came out of MPI: a message that `recv_into` or `recv_within` refuses goes
    /// back there, behind what was taken out of MPI before it and ahead of what came after.
    scratch_mark: Option<usize>,
    /// The large messages whose bytes could not be reserved yet, in order.
    deferred: VecDeque<Deferred>,
    /// MPI messages (not parts) sent to each rank, and received, for the final drain.
    sent: Vec<u64>,
    received: u64,
    calls: u32,
    barrier: Option<Ibarrier>,
    all_done: bool,
    statuses: Vec<Status>,
    /// The duplicate of the world for MPI's collectives and the sparse exchange (`coll`).
    coll: NativeComm,
    /// Sparse exchanges started (their tag: this modulo 2^15), and collectives started
    /// (stamps).
    sparse_seq: u32,
    coll_seq: u64,
    /// A collective stopped by a retryable error, resumed by the next call of its kind.
    coll_unfinished: Option<Box<coll::CollUnfinished>>,
    /// Kept buffers of the collectives: words (stamps, lengths) and `int` arrays.
    coll_words: Vec<u64>,
    coll_ints: coll::IntBufs,
    /// The counts and displacements of `all_to_allv_into`'s lean path (four per rank; used
    /// in worlds of at most 1,024 ranks, `coll::KEPT_WORDS`: at most 16 KiB).
    coll_lean: Vec<c_int>,
    /// When a collective last did the housekeeping at its start ([`coll::KEEP_EVERY`]).
    coll_kept: u64,
    /// A collective was left in flight by an error: `coll` is never freed.
    coll_abandoned: bool,
    /// The receives of `irecv_within` not ended yet, with their limits.
    limits: Vec<within::Limit>,
}

impl MpiNative {
    /// Sets up the native path on `world` (the world communicator; six duplicates are
    /// made). Collective; every rank must use the same `buffer_size` (checked by
    /// [`crate::fabric::mpi::Mpi`]).
    pub(crate) fn new(
        world: &SimpleCommunicator,
        cfg: &TransportConfig,
        part_bytes: usize,
        abort: Arc<AbortLine>,
    ) -> Result<MpiNative> {
        let chans = [
            Channel {
                msgs: NativeComm::new(world.duplicate()),
                parts: NativeComm::new(world.duplicate()),
            },
            Channel {
                msgs: NativeComm::new(world.duplicate()),
                parts: NativeComm::new(world.duplicate()),
            },
        ];
        let coll = NativeComm::new(world.duplicate());
        for c in chans.iter().flat_map(|c| [&c.msgs, &c.parts]).chain([&coll]) {
            // An MPI error on Ballast's own communicators (a size mismatch, a peer gone) is
            // returned to the call that made it, an error, never the job's abort.
            c.errors_return()?;
        }
        let rank = world.rank() as usize;
        let size = world.size() as usize;
        // Every rank uses the same buffer_size: checked by `Mpi` before (a receive is posted
        // for `head_bytes`).
        let eager = cfg.buffer_size;
        let head_bytes = mpi_native_kept_bytes(eager as u64) as usize;
        Ok(MpiNative {
            rank,
            world: size,
            cfg: *cfg,
            notes: vec!["MPI native path: one MPI message per Ballast message, MPI matches tags; pool, endpoint cap and receive sharing do not apply (MPI manages its buffers and connections)".into()],
            chans,
            abort,
            eager,
            head_bytes,
            part_bytes: part_bytes.clamp(1, c_int::MAX as usize),
            recv_scratch: Vec::with_capacity(head_bytes),
            send_scratch: Vec::with_capacity(head_bytes),
            recvs: Vec::new(),
            done_recvs: done::Done::default(),
            sends: Vec::new(),
            done_sends: done::Done::default(),
            unexpected: Default::default(),
            next_id: 0,
            seen: vec![false; size],
            peers: 0,
            scratch_done: None,
            into_cap: None,
            scratch_parts: None,
            scratch_mark: None,
            deferred: VecDeque::new(),
            sent: vec![0; size],
            received: 0,
            calls: 0,
            barrier: None,
            all_done: false,
            statuses: Vec::new(),
            coll,
            sparse_seq: 0,
            coll_seq: 0,
            coll_unfinished: None,
            coll_words: Vec::new(),
            coll_ints: Default::default(),
            coll_lean: Vec::new(),
            coll_kept: ffi::ticks(),
            coll_abandoned: false,
            limits: Vec::new(),
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

    fn new_id(&mut self) -> RequestId {
        self.next_id += 1;
        RequestId::new(self.next_id)
    }

    fn check_rank(&self, r: usize) -> Result<()> {
        if r >= self.world {
            return Err(Error::Fabric(FabricError::InvalidRank {
                rank: r,
                world_size: self.world,
            }));
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

    /// Starts the final barrier (non-blocking).
    pub fn mark_done(&mut self) {
        if self.barrier.is_some() || self.all_done {
            return;
        }
        if let Some(b) = Ibarrier::start(&self.chans[RESERVED].parts) {
            self.barrier = Some(b);
        }
    }

    /// True when every rank passed [`MpiNative::mark_done`].
    pub fn all_done(&mut self) -> bool {
        if let Some(b) = &mut self.barrier {
            if b.test() {
                self.barrier = None;
                self.all_done = true;
            }
        }
        self.all_done
    }

    /// Ballast's own bytes: the kept buffers and the buffers of requests in flight (posted
    /// receives, also once an `irecv_within` completed into its buffer until its wait, and
    /// `isend` copies) as `srq_bytes` (what receive resources are on the other
    /// transports), and the structure with its per-rank entries as `control_bytes`. A
    /// posted receive or an `isend` that holds a kept buffer counts it once, as in flight.
    /// Messages that arrived before their receive was posted are the application's data
    /// waiting to be received (as in the engine's matcher, and in MPI's own unexpected
    /// queue): not counted. Nor are the collectives' kept arrays, a scratch bounded
    /// whatever the world size (at most 88 KiB: 8 KiB of stamps and lengths,
    /// `coll::KEPT_WORDS`; four `int` arrays of counts and displacements, 64 KiB; the
    /// lean alltoallv's counts, 16 KiB, made only in worlds of at most 1,024 ranks).
    pub fn footprint(&self) -> Footprint {
        let kept = (self.recv_scratch.capacity() + self.send_scratch.capacity()) as u64 + self.held_heads();
        let in_flight: u64 = self
            .recvs
            .iter()
            .map(|r| match &r.state {
                RecvState::Header { recv, .. } => recv.capacity() as u64,
                RecvState::Parts { recv, .. } => recv.capacity() as u64,
            })
            .chain(self.sends.iter().map(|s| s.send.capacity() as u64))
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
            datagram_peers: 0,
            datagram_bytes: 0,
            shm_segment_bytes: 0,
            shm_peers_mapped: 0,
            shm_mapped_bytes: 0,
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

    /// The unused part of the abort line for [`crate::fabric::mpi::Mpi::run_ranks`].
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
                RecvState::Header { recv, .. } => {
                    // Not cancelled: it received a message (or a large message's header).
                    if let Some((buf, status)) = recv.cancel()? {
                        self.received += 1;
                        let n = buf.len();
                        if n == LARGE_HEADER && buf[n - 1] == KIND_LARGE {
                            let b: [u8; 8] = buf[..8].try_into().expect("8 bytes");
                            self.discard_parts(
                                r.chan,
                                status.MPI_SOURCE as usize,
                                status.MPI_TAG,
                                u64::from_le_bytes(b),
                            )?;
                        }
                    }
                }
                // The parts were sent with the header: waiting completes.
                RecvState::Parts { recv, .. } => recv.wait_discard(),
            }
        }
        while let Some(d) = self.deferred.pop_front() {
            // Its header was counted; its parts are still in MPI.
            self.discard_parts(d.chan, d.source, d.mtag, d.bytes)?;
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
            if self.coll_abandoned || self.coll_unfinished.is_some() {
                // A collective may still use it (its buffers are leaked).
                std::mem::forget(std::mem::replace(
                    &mut self.coll,
                    NativeComm::new(SimpleCommunicator::self_comm()),
                ));
            }
            return; // the communicators are freed with `chans` and `coll`
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
                    msgs: NativeComm::new(SimpleCommunicator::self_comm()),
                    parts: NativeComm::new(SimpleCommunicator::self_comm()),
                },
                Channel {
                    msgs: NativeComm::new(SimpleCommunicator::self_comm()),
                    parts: NativeComm::new(SimpleCommunicator::self_comm()),
                },
            ],
        );
        std::mem::forget(chans);
        std::mem::forget(std::mem::replace(
            &mut self.coll,
            NativeComm::new(SimpleCommunicator::self_comm()),
        ));
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
