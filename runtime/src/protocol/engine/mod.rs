//! The progress engine: the transport-independent protocol that every transport reuses.
//! It owns the send path (eager in one pool buffer up to `buffer_size`, larger messages
//! split into pool-buffer chunks posted as buffers and credits allow), the credit flow
//! control, the endpoint handshakes (lazy connect, graceful close on LRU eviction past
//! `max_endpoints`), arrivals into tag matching, and the footprint accounting.
//!
//! When the fabric has a direct path ([`Fabric::direct`], MPI), messages larger
//! than its threshold skip the pool, the chunking and the credits: a blocking
//! [`Engine::send_direct`] hands the caller's slice to the fabric (zero-copy), an `isend`
//! copies the message once into an owned buffer that waits in the destination's queue like
//! any message (so order per destination is kept) and is handed over when it reaches the
//! front. They arrive whole ([`Event::Whole`](crate::fabric::Event::Whole)) into the
//! buffer that becomes the message.
//!
//! Everything happens in [`Engine::progress`], driven by the rank's single thread. Its
//! owner passes the time of each round (`progress(now)`, as quinn-proto takes `now`), so
//! tests drive its timers directly; only the datagram path has timers
//! ([`Engine::uses_time`]), and none of them reads the system clock. What does read it:
//! in the engine's own code, one place only, `connect_all` ([`Engine::new`] with
//! `lazy_connect` off), which waits for its peers between idle rounds with
//! `core::backoff::Backoff`, and that reads `Instant::now` to choose between spinning,
//! yielding and sleeping (or blocking in `Fabric::wait_for_arrival`); below the engine,
//! the fabric calls it makes may read it in the fabric (the MPI fabric's direct send
//! waits with a `Backoff` too, the local fabric's `wait_for_arrival` blocks with a
//! timeout, the fault fabric times its delays).
//!
//! Its parts, by concept: this file holds the rank's state and the public API (receives,
//! request completion, one round of [`Engine::progress`], statistics and footprint);
//! `send` the send path (`isend`, the fast path, chunking, the direct path, pumping the
//! destination queues); `settle` what a poll brought (completions, arrivals, control
//! messages); `endpoints` the handshakes, lazy connect and eviction; `credit` the credit
//! requests and grants.

use std::collections::hash_map::Entry;
use std::collections::VecDeque;
use std::time::Instant;

use crate::core::config::{RecvSharing, TransportConfig};
use crate::core::footprint::{Footprint, MemoryLock, MemoryModel};
use crate::core::intmap::IntMap;
use crate::core::pool::{BufId, BufferPool, PoolStats};
use crate::fabric::error::FabricError;
use crate::fabric::{
    effective_sharing, Control, DatagramPath, DirectPath, EffectiveSharing, Fabric, PeerKey,
};
use crate::protocol::connection::{ConnectionTable, EndpointStats};
use crate::protocol::credit::{CreditBank, Grant};
use crate::protocol::error::{ProtocolError, Result};
use crate::protocol::matching::{Envelope, Matcher, Message, RecvInto, Source, Tag, TagMatch};
use crate::protocol::request::RequestId;

mod credit;
mod datagram;
mod endpoints;
mod send;
mod settle;
#[cfg(test)]
mod tests;

use datagram::{DatagramRx, Datagrams};
pub use datagram::{DatagramStats, PROMOTE_EVERY, PROMOTE_MARGIN};
use settle::Inbox;

/// A message accepted by `isend` but not fully posted yet.
struct OutMsg {
    req: RequestId,
    tag: Tag,
    total: usize,
    /// Pool buffer holding the first chunk (reserved at `isend`), and its length.
    first: Option<(BufId, usize)>,
    /// The message's bytes from offset `rest_from` on (copied at `isend`; never
    /// registered).
    rest: Vec<u8>,
    /// Offset in the message where `rest` starts: the first chunk's length, or with the
    /// datagram path at most one datagram's payload (`rest` then overlaps the first chunk,
    /// which may go by datagram).
    rest_from: usize,
    /// Next offset to post.
    offset: usize,
    /// Sent on the fabric's direct path: `rest` holds the whole message, `first` is None.
    direct: bool,
    /// Needs pool buffers for chunks after the first (counted in `Engine::chunked_queued`
    /// until its last chunk is posted).
    chunked: bool,
}

/// Completion ids of direct sends: the request id with this bit set (pool buffer ids,
/// the completion ids of chunks, never have it).
const DIRECT_WR: u64 = 1 << 63;

/// The send a pool buffer in flight belongs to: its request and the endpoint it went on.
#[derive(Clone, Copy)]
struct InFlight {
    req: RequestId,
    key: PeerKey,
}

/// Bytes of the engine's table of sends in flight per pool buffer (`wr_info`, allocated at
/// start: one `Option<InFlight>` per buffer).
pub const WR_INFO_BYTES: u64 = std::mem::size_of::<Option<InFlight>>() as u64;

/// Sender-side state toward one destination rank.
#[derive(Default)]
pub(crate) struct PeerState {
    queue: VecDeque<OutMsg>,
    credits: u32,
    requested: bool,
}

struct SendReq {
    outstanding: u32,
    posted_all: bool,
}

/// The destinations with queued messages, kept sorted (the order `pump` serves them in):
/// a vector, so that a destination entering and leaving it per message allocates nothing.
#[derive(Default)]
struct ActiveSet(Vec<usize>);

impl ActiveSet {
    fn insert(&mut self, d: usize) {
        if let Err(i) = self.0.binary_search(&d) {
            self.0.insert(i, d);
        }
    }
    fn remove(&mut self, d: usize) {
        if let Ok(i) = self.0.binary_search(&d) {
            self.0.remove(i);
        }
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    fn iter(&self) -> impl Iterator<Item = &usize> {
        self.0.iter()
    }
}

/// The abort of a job, as a rank knows it ([`Engine::aborted_by`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Abort {
    /// The rank that aborted the job.
    pub rank: usize,
    /// Its code.
    pub code: i32,
}

/// The protocol state of one rank.
pub struct Engine {
    // Declared first so that it is dropped first: registrations (mlock) end before the
    // pool memory is freed.
    fabric: Box<dyn Fabric>,
    pool: BufferPool,
    cfg: TransportConfig,
    rank: usize,
    world: usize,
    conns: ConnectionTable,
    peers: IntMap<usize, PeerState>,
    active: ActiveSet,
    /// Scratch vectors reused across `progress` calls (no allocation per call).
    scratch_dests: Vec<usize>,
    scratch_grants: Vec<Grant>,
    bank: CreditBank,
    matcher: Matcher,
    sends: IntMap<RequestId, SendReq>,
    /// The send of each pool buffer in flight: one entry per buffer.
    wr_info: Vec<Option<InFlight>>,
    next_req: u64,
    notes: Vec<String>,
    inbox: Inbox,
    /// The fabric's direct-path threshold (messages larger go direct), if it has one.
    direct: Option<usize>,
    /// Direct sends handed to the fabric and not completed yet.
    direct_inflight: usize,
    /// Queued messages that still need pool buffers for later chunks: while there are any,
    /// `isend` leaves the pool's last free buffer to them (see `Engine::isend`).
    chunked_queued: usize,
    /// The fabric copies packets at `post_send` (no completion to wait for).
    copies: bool,
    /// The datagram path (`endpoint_overflow=datagram` past `max_endpoints`), if it runs.
    dg: Option<Box<Datagrams>>,
    /// The job's abort, once known (this rank's [`Engine::abort`] or a peer's
    /// [`Control::Abort`](crate::fabric::Control::Abort)): the rank that aborted and its code.
    aborted_by: Option<Abort>,
}

/// The fabric's direct path. The engine uses it only when the fabric offered one at start
/// ([`Fabric::direct`]); a fabric that stops offering it is a protocol error.
pub(super) fn direct_path(fabric: &mut dyn Fabric) -> Result<&mut dyn DirectPath> {
    let transport = fabric.capabilities().name;
    match fabric.direct() {
        Some(path) => Ok(path),
        None => Err(ProtocolError::NoDirectPath { transport }),
    }
}

/// The fabric's datagram path, as [`direct_path`] for [`Fabric::datagrams`].
pub(super) fn datagram_path(fabric: &mut dyn Fabric) -> Result<&mut dyn DatagramPath> {
    let transport = fabric.capabilities().name;
    match fabric.datagrams() {
        Some(path) => Ok(path),
        None => Err(FabricError::NoDatagrams { transport }.into()),
    }
}

impl Engine {
    /// Sets up the rank: registers the pool, creates the receive resources and, with
    /// `lazy_connect` off, connects every peer (needs every rank to be starting too).
    /// `now` is the current time: the epoch of the datagram path's times, and the time of
    /// the rounds of progress the connecting runs. The engine keeps the latest time it was
    /// given: a later [`Engine::progress`] with an earlier `now` runs at that latest time
    /// (its timers never run backwards).
    pub fn new(mut fabric: Box<dyn Fabric>, requested: &TransportConfig, now: Instant) -> Result<Engine> {
        requested
            .validate()
            .map_err(|e| ProtocolError::Config(Box::new(e)))?;
        let mut cfg = *requested;
        let mut notes = Vec::new();
        let EffectiveSharing { mode, note } = effective_sharing(cfg.recv_sharing, fabric.capabilities());
        cfg.recv_sharing = mode;
        notes.extend(note);
        // The fabric's optional paths, asked once: their sizes decide what the engine runs.
        let (mtu, drops) = match fabric.datagrams() {
            Some(d) => (Some(d.datagram_mtu()), d.datagrams_can_drop()),
            None => (None, true),
        };
        let direct = fabric.direct().map(|d| d.direct_threshold());
        let dg = match crate::protocol::datagram::chunk_for(&cfg, mtu) {
            Ok(chunk) => chunk.map(|c| Box::new(Datagrams::new(c, !drops, now))),
            Err(why) => {
                notes.push(format!(
                    "endpoint_overflow=datagram: transport `{}` {why}; falling back to endpoint_overflow=evict",
                    fabric.capabilities().name
                ));
                cfg.endpoint_overflow = crate::core::config::EndpointOverflow::Evict;
                None
            }
        };
        let pool = BufferPool::new(&cfg, fabric.as_mut())?;
        notes.extend(pool.notes().iter().cloned());
        notes.extend(fabric.setup_receive(cfg.recv_sharing)?);
        let bank = match cfg.recv_sharing {
            RecvSharing::PerPeer => CreditBank::new(false, cfg.recv_depth as u32),
            _ => CreditBank::new(true, cfg.srq_depth as u32)
                .with_standing(fabric.standing_credits(cfg.srq_depth as u32)),
        };
        let mut wr_info = Vec::new();
        crate::core::memory::try_reserve_for(&mut wr_info, pool.buffers(), || {
            format!(
                "the engine's table of sends in flight ({WR_INFO_BYTES} bytes per buffer: BALLAST_BUFFER_COUNT)"
            )
        })?;
        wr_info.resize(pool.buffers(), None);
        let mut conns = ConnectionTable::new(cfg.max_endpoints).protect_fresh(cfg.lazy_connect);
        if cfg.recv_sharing == RecvSharing::Xrc {
            conns = conns.per_node(cfg.ranks_per_node);
        }
        let mut e = Engine {
            rank: fabric.rank(),
            world: fabric.world_size(),
            wr_info,
            fabric,
            pool,
            cfg,
            conns,
            peers: IntMap::default(),
            active: ActiveSet::default(),
            scratch_dests: Vec::new(),
            scratch_grants: Vec::new(),
            bank,
            matcher: Matcher::default(),
            sends: IntMap::default(),
            next_req: 0,
            notes,
            inbox: Inbox::default(),
            direct,
            direct_inflight: 0,
            chunked_queued: 0,
            copies: false,
            dg,
            aborted_by: None,
        };
        e.copies = e.fabric.copies_payload();
        if !cfg.lazy_connect {
            e.connect_all(now)?;
        }
        Ok(e)
    }

    #[inline]
    fn symmetric(&self) -> bool {
        self.cfg.recv_sharing != RecvSharing::Xrc
    }

    /// Endpoint key of a peer: the peer itself, or its node in `xrc` mode
    /// ([`ConnectionTable::key_of`]).
    #[inline]
    fn key_of(&self, peer: usize) -> PeerKey {
        self.conns.key_of(peer)
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.world
    }

    /// Effective configuration (after fallbacks).
    pub fn config(&self) -> &TransportConfig {
        &self.cfg
    }

    /// Notes about the setup (fallbacks, refused locks).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// True when other ranks failed.
    pub fn aborted(&self) -> bool {
        self.fabric.aborted()
    }

    /// Aborts the job with `code` ([`Fabric::abort_job`]: on MPI, `MPI_Abort`, which never
    /// returns; elsewhere every other rank is told with a control message). From then on
    /// every call of this rank that progresses fails with [`ProtocolError::Aborted`] naming
    /// this rank, as the other ranks' calls do once the notice reached them. Once the job
    /// was aborted (here, or by a peer's notice), a second call does nothing.
    pub fn abort(&mut self, code: i32) -> Result<()> {
        if self.aborted_by.is_some() {
            return Ok(());
        }
        self.aborted_by = Some(Abort {
            rank: self.rank,
            code,
        });
        self.fabric.abort_job(code)?;
        Ok(())
    }

    /// The job's abort, once known: the rank that aborted it and its code.
    pub fn aborted_by(&self) -> Option<Abort> {
        self.aborted_by
    }

    /// [`ProtocolError::Aborted`] once the job was aborted (as far as this rank knows).
    #[inline]
    pub fn check_aborted(&self) -> Result<()> {
        match self.aborted_by {
            None => Ok(()),
            Some(Abort { rank: by, code }) => Err(ProtocolError::Aborted {
                rank: self.rank,
                by,
                code,
            }),
        }
    }

    pub(crate) fn fabric(&self) -> &dyn Fabric {
        self.fabric.as_ref()
    }

    pub(crate) fn fabric_mut(&mut self) -> &mut dyn Fabric {
        self.fabric.as_mut()
    }

    #[inline]
    fn new_req(&mut self) -> RequestId {
        self.next_req += 1;
        RequestId::new(self.next_req)
    }

    #[inline]
    fn check_rank(&self, r: usize) -> Result<()> {
        if r >= self.world {
            return Err(ProtocolError::Fabric(FabricError::InvalidRank {
                rank: r,
                world_size: self.world,
            }));
        }
        Ok(())
    }

    /// True when send request `req` is complete (all chunks posted and completed).
    pub fn send_done(&self, req: RequestId) -> Result<bool> {
        let s = self.sends.get(&req).ok_or(ProtocolError::UnknownRequest(req))?;
        Ok(s.posted_all && s.outstanding == 0)
    }

    /// Forgets a completed send request.
    pub fn finish_send(&mut self, req: RequestId) {
        self.sends.remove(&req);
    }

    /// Forgets send request `req` if it is complete ([`Engine::send_done`]): `Some(true)`
    /// then, `Some(false)` while it is in flight, `None` for a request this engine does not
    /// know. One hash lookup, where `send_done` and `finish_send` take two.
    pub fn take_send(&mut self, req: RequestId) -> Option<bool> {
        match self.sends.entry(req) {
            Entry::Occupied(s) => {
                let done = s.get().posted_all && s.get().outstanding == 0;
                if done {
                    s.remove();
                }
                Some(done)
            }
            Entry::Vacant(_) => None,
        }
    }

    /// Posts a receive request.
    pub fn irecv(&mut self, src: Source, tag: TagMatch) -> Result<RequestId> {
        if let Source::Rank(r) = src {
            self.check_rank(r)?;
        }
        let req = self.new_req();
        self.matcher.post(req, src, tag);
        Ok(req)
    }

    /// Posts a receive of a message of at most `cap` bytes (`Matcher::post_within`): a
    /// longer match ends it refused ([`Engine::take_refused`]) and stays queued.
    pub fn irecv_within(&mut self, src: Source, tag: TagMatch, cap: usize) -> Result<RequestId> {
        if let Source::Rank(r) = src {
            self.check_rank(r)?;
        }
        let req = self.new_req();
        self.matcher.post_within(req, src, tag, cap);
        Ok(req)
    }

    /// The envelope of the message receive `req` of [`Engine::irecv_within`] wrote into
    /// the buffer lent with [`Engine::progress_into`], once it is all there.
    pub fn take_into_done(&mut self, req: RequestId) -> Option<Envelope> {
        self.matcher.take_into_done(req)
    }

    /// Withdraws receive `req` after its wait failed (`Matcher::cancel`): a message bound
    /// to it goes back to the queue in its place for a later receive. `into` is the buffer
    /// lent to its wait ([`Engine::progress_into`]), if any: what it holds of the message is
    /// copied back. Errors: the message could not be kept (no memory for that copy:
    /// `Error::Alloc` naming it) and is dropped.
    pub fn cancel_recv(&mut self, req: RequestId, into: Option<&[u8]>) -> Result<()> {
        self.matcher.cancel(req, into)
    }

    /// Withdraws receive `req` if no message has matched it yet (`Matcher::withdraw_posted`):
    /// true; false, and nothing changes, once one has.
    pub fn withdraw_recv(&mut self, req: RequestId) -> bool {
        self.matcher.withdraw_posted(req)
    }

    /// The envelope of the longer message receive `req` of [`Engine::irecv_within`]
    /// refused, once.
    pub fn take_refused(&mut self, req: RequestId) -> Option<Envelope> {
        self.matcher.take_refused(req)
    }

    /// True when receive `req` completed.
    pub fn recv_done(&self, req: RequestId) -> bool {
        self.matcher.is_complete(req)
    }

    /// Takes the message of a completed receive.
    pub fn take_recv(&mut self, req: RequestId) -> Option<Message> {
        self.matcher.take_completed(req)
    }

    /// Takes a complete matching unexpected message, if any.
    pub fn try_take(&mut self, src: Source, tag: TagMatch) -> Option<Message> {
        self.matcher.try_take(src, tag)
    }

    /// The envelope of the message `try_take` would take now, leaving it queued.
    pub fn peek(&mut self, src: Source, tag: TagMatch) -> Option<Envelope> {
        self.matcher.peek(src, tag)
    }

    /// True when messages to `dest` wait in its queue (accepted by [`Engine::isend`], not
    /// all posted yet): [`Engine::send_direct`] to it must wait (progress) until they are.
    #[inline]
    pub fn queued_for(&self, dest: usize) -> bool {
        self.peers.get(&dest).is_some_and(|p| !p.queue.is_empty())
    }

    /// True when nothing is queued or in flight on the send side (datagrams included:
    /// until acknowledged).
    pub fn sends_drained(&self) -> bool {
        self.active.is_empty()
            && self.direct_inflight == 0
            && !self.conns.any_inflight()
            && self.dg.as_ref().is_none_or(|d| d.drained())
    }

    /// The longest an idle rank may block: the datagram retransmission timeout while
    /// datagrams are unacknowledged (a lost one is sent again only by progress), else
    /// `None` (no limit of the engine's own).
    pub fn wait_limit(&self) -> Option<std::time::Duration> {
        self.dg.as_ref().filter(|d| !d.drained()).map(|d| d.rto())
    }

    /// Counters of the datagram path (`None` when it does not run).
    pub fn datagram_stats(&self) -> Option<DatagramStats> {
        self.dg.as_ref().map(|d| d.stats)
    }

    /// True when the engine has timers (the datagram path runs): only then does it read
    /// the `now` given to [`Engine::progress`].
    #[inline]
    pub fn uses_time(&self) -> bool {
        self.dg.is_some()
    }

    /// One round of progress at time `now`; returns true if anything happened.
    ///
    /// `now` is read only when [`Engine::uses_time`]; an engine without a datagram path
    /// runs no timers, so a caller may pass any instant then (the one it gave
    /// [`Engine::new`]) rather than read the clock at every call. With the datagram path,
    /// `now` is the current time: the datagrams posted in this round are timed from it,
    /// and the retransmission deadlines are checked against it. The engine keeps the
    /// latest `now` it was given (the largest, [`Engine::new`]'s included), so its timers
    /// never run backwards: a `now` earlier than an earlier round's is accepted and the
    /// round runs at that latest time instead, so it neither times a datagram out early
    /// nor pushes a deadline back. Datagrams posted or acknowledged outside a round (by
    /// [`Engine::isend`], or while [`Engine::send_direct`] polls) are timed from the next
    /// round's time.
    #[inline]
    pub fn progress(&mut self, now: Instant) -> Result<bool> {
        self.progress_into(now, None)
    }

    /// [`Engine::progress`] while a blocking receive waits with its buffer: the message
    /// bound to it is written there ([`RecvInto`]).
    #[inline]
    pub fn progress_into(&mut self, now: Instant, into: Option<RecvInto<'_>>) -> Result<bool> {
        let Some(dg) = self.dg.as_deref_mut() else {
            return self.round(into);
        };
        dg.set_round(Some(now));
        let r = self.round(into);
        if let Some(dg) = self.dg.as_deref_mut() {
            dg.set_round(None);
        }
        r
    }

    /// The round of [`Engine::progress_into`], with the datagram path's time set.
    fn round(&mut self, into: Option<RecvInto<'_>>) -> Result<bool> {
        self.check_aborted()?;
        if self.fabric.aborted() {
            // Another rank failed. If the job was aborted on purpose, that rank's notice
            // may still be queued here: it names the rank and its code (nothing else
            // matters any more, so what else the poll meets is dropped).
            let _ = self.poll_settle(None);
            self.check_aborted()?;
            return Err(ProtocolError::Fabric(FabricError::Aborted));
        }
        let n = self.poll_settle(into)?;
        let mut work = n > 0;
        work |= self.manage_endpoints()?;
        if !self.active.is_empty() {
            work |= self.request_credits()?;
            work |= self.pump()?;
        }
        work |= self.flush_credits()?;
        if self.dg.is_some() {
            work |= self.service_datagrams()?;
        }
        Ok(work)
    }

    /// One poll of the fabric and the settling of what it brought (a peer's abort notice
    /// fails it); the events handled.
    #[inline]
    fn poll_settle(&mut self, into: Option<RecvInto<'_>>) -> Result<usize> {
        let n = {
            let inbox = &mut self.inbox;
            let matcher = &mut self.matcher;
            let mut rx = DatagramRx {
                dg: self.dg.as_deref_mut(),
                pool: &mut self.pool,
                conns: &self.conns,
                rank: self.rank,
                into,
            };
            self.fabric.poll(&mut |ev| inbox.take(matcher, &mut rx, ev))
        };
        let n = match n {
            Ok(n) => n,
            Err(e) => {
                // The fabric's error wins; one the callback kept for the same event (shm:
                // a direct read that failed as its sender died) must not outlive this poll.
                self.inbox.failed = None;
                // A rank that aborted may have ended right after its notice (verbs: its
                // control stream closed): the notice, if this poll got it, names it.
                for &(src, c) in self.inbox.ctrl() {
                    if let Control::Abort { code } = c {
                        self.aborted_by.get_or_insert(Abort { rank: src, code });
                    }
                }
                self.check_aborted()?;
                return Err(e.into());
            }
        };
        if let Some(e) = self.inbox.failed.take() {
            return Err(e);
        }
        // An idle poll (the common case of a blocking wait) has nothing to settle.
        if !self.inbox.is_empty() {
            let mut inbox = std::mem::take(&mut self.inbox);
            let settled = self.settle(&mut inbox);
            self.inbox = inbox;
            settled?;
            // A peer's abort notice fails the call that received it.
            self.check_aborted()?;
        }
        Ok(n)
    }

    /// Pool occupancy.
    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }

    /// Endpoint counters.
    pub fn endpoint_stats(&self) -> EndpointStats {
        self.conns.stats()
    }

    /// True if the shared-queue credit accounting is consistent (diagnostics).
    pub fn credits_consistent(&self) -> bool {
        self.bank.is_consistent()
    }

    /// What became of the `mlock` requests of the memory held now (pool and receive
    /// queues).
    pub fn memory_lock(&self) -> MemoryLock {
        let mut l = self.pool.memory_lock();
        l.add(&self.fabric.bytes().recv_lock);
        l
    }

    /// The transport memory this rank accounts, by kind.
    pub fn footprint(&self) -> Footprint {
        let fb = self.fabric.bytes();
        let st = self.conns.stats();
        let model = with_engine(self.fabric.memory_model());
        let dgp = self.dg.as_ref().map_or(0, |d| d.peers.len() as u64);
        Footprint {
            pool_bytes: self.pool.bytes(),
            registered_bytes: self.pool.registered_bytes() + fb.recv_registered_bytes,
            locked_bytes: self.pool.locked_bytes() + fb.recv_locked_bytes,
            endpoint_bytes: fb.endpoint_bytes + st.live * model.engine_endpoint_bytes,
            srq_bytes: fb.srq_bytes,
            control_bytes: model.control_fixed_bytes + st.peers_connected * model.per_peer_control_bytes,
            endpoints_live: st.live,
            endpoints_peak: st.peak,
            endpoints_opened: st.opened,
            peers_connected: st.peers_connected,
            datagram_peers: dgp,
            datagram_bytes: dgp * crate::protocol::datagram::PEER_STATE_BYTES + fb.datagram_bytes,
            shm_segment_bytes: fb.shm_segment_bytes,
            shm_peers_mapped: fb.shm_peers_mapped,
            shm_mapped_bytes: fb.shm_mapped_bytes,
        }
    }
}

/// A fabric's [`MemoryModel`] (its side) with the engine's structures added: the endpoint
/// table entry per endpoint (its map keeps the key's number, a `usize`), the engine per rank, the sender state and credit-bank entry
/// (and their two map slots) per connected peer.
pub(crate) fn with_engine(fabric: MemoryModel) -> MemoryModel {
    use std::mem::size_of;
    MemoryModel {
        engine_endpoint_bytes: fabric.engine_endpoint_bytes
            + size_of::<crate::protocol::connection::Endpoint>() as u64
            + size_of::<usize>() as u64,
        control_fixed_bytes: fabric.control_fixed_bytes + size_of::<Engine>() as u64,
        per_peer_control_bytes: fabric.per_peer_control_bytes
            + (size_of::<PeerState>()
                + size_of::<crate::protocol::credit::CreditHolder>()
                + 2 * size_of::<usize>()) as u64,
        ..fabric
    }
}
