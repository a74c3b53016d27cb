//! The progress engine: the transport-independent protocol that every transport reuses.
//! It owns the send path (eager in one pool buffer up to `buffer_size`, larger messages
//! split into pool-buffer chunks posted as buffers and credits allow), the credit flow
//! control, the endpoint handshakes (lazy connect, graceful close on LRU eviction past
//! `max_endpoints`), arrivals into tag matching, and the footprint accounting.
//!
//! When the fabric has a direct path ([`Fabric::direct_threshold`], MPI), messages larger
//! than its threshold skip the pool, the chunking and the credits: a blocking
//! [`Engine::send_direct`] hands the caller's slice to the fabric (zero-copy), an `isend`
//! copies the message once into an owned buffer that waits in the destination's queue like
//! any message (so order per destination is kept) and is handed over when it reaches the
//! front. They arrive whole ([`Event::Whole`]) into the buffer that becomes the message.
//!
//! Everything happens in [`Engine::progress`], driven by the rank's single thread.

use std::collections::{BTreeSet, VecDeque};

use crate::core::config::{RecvSharing, TransportConfig};
use crate::core::error::{Error, Result};
use crate::core::footprint::{Footprint, MemoryLock};
use crate::core::intmap::IntMap;
use crate::core::pool::{BufId, BufferPool, PoolStats};
use crate::fabric::{effective_sharing, Control, Event, Fabric, PacketHeader};
use crate::protocol::connection::{ConnectionTable, EndpointStats, EpState};
use crate::protocol::credit::CreditBank;
use crate::protocol::matching::{Matcher, Message, Source, Tag, TagMatch};

/// A message accepted by `isend` but not fully posted yet.
struct OutMsg {
    req: u64,
    tag: Tag,
    total: usize,
    /// Pool buffer holding the first chunk (reserved at `isend`), and its length.
    first: Option<(BufId, usize)>,
    /// Bytes after the first chunk (copied at `isend`; never registered).
    rest: Vec<u8>,
    /// Next offset to post.
    offset: usize,
    /// Sent on the fabric's direct path: `rest` holds the whole message, `first` is None.
    direct: bool,
}

/// Completion ids of direct sends: the request id with this bit set (pool buffer ids,
/// the completion ids of chunks, never have it).
const DIRECT_WR: u64 = 1 << 63;

/// Events of one fabric poll, collected while the fabric is borrowed and handled after.
#[derive(Default)]
struct Inbox {
    done: Vec<u64>,
    arrivals: Vec<(usize, bool)>,
    ctrl: Vec<(usize, Control)>,
    whole: Vec<usize>,
}

impl Inbox {
    fn is_empty(&self) -> bool {
        self.done.is_empty() && self.arrivals.is_empty() && self.ctrl.is_empty() && self.whole.is_empty()
    }

    /// Takes one fabric event: data goes to the matcher at once (it must see packets in
    /// arrival order), the rest is kept for [`Engine::settle`].
    fn take(&mut self, matcher: &mut Matcher, ev: Event<'_>) -> Result<()> {
        match ev {
            Event::SendComplete(w) => self.done.push(w),
            Event::Arrival(h, payload) => {
                matcher.on_chunk(&h, payload)?;
                self.arrivals.push((h.src as usize, h.more));
            }
            Event::Control(src, c) => self.ctrl.push((src, c)),
            Event::Whole(h, data) => {
                matcher.on_whole(&h, data)?;
                self.whole.push(h.src as usize);
            }
        }
        Ok(())
    }
}

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
    scratch_grants: Vec<(usize, u32)>,
    bank: CreditBank,
    matcher: Matcher,
    sends: IntMap<u64, SendReq>,
    wr_info: Vec<Option<(u64, usize)>>,
    next_req: u64,
    notes: Vec<String>,
    inbox: Inbox,
    /// The fabric's direct-path threshold (messages larger go direct), if it has one.
    direct: Option<usize>,
    /// Direct sends handed to the fabric and not completed yet.
    direct_inflight: usize,
    /// The fabric copies packets at `post_send` (no completion to wait for).
    copies: bool,
}

impl Engine {
    /// Sets up the rank: registers the pool, creates the receive resources and, with
    /// `lazy_connect` off, connects every peer (needs every rank to be starting too).
    pub fn new(mut fabric: Box<dyn Fabric>, requested: &TransportConfig) -> Result<Engine> {
        requested.validate()?;
        let mut cfg = *requested;
        let mut notes = Vec::new();
        let (sharing, note) = effective_sharing(cfg.recv_sharing, fabric.capabilities());
        cfg.recv_sharing = sharing;
        notes.extend(note);
        let pool = BufferPool::new(&cfg, fabric.as_mut())?;
        notes.extend(pool.notes().iter().cloned());
        notes.extend(fabric.setup_receive(cfg.recv_sharing)?);
        let bank = match cfg.recv_sharing {
            RecvSharing::PerPeer => CreditBank::new(false, cfg.recv_depth as u32),
            _ => CreditBank::new(true, cfg.srq_depth as u32),
        };
        let mut e = Engine {
            rank: fabric.rank(),
            world: fabric.world_size(),
            wr_info: vec![None; pool.buffers()],
            fabric,
            pool,
            cfg,
            conns: ConnectionTable::new(cfg.max_endpoints).protect_fresh(cfg.lazy_connect),
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
            direct: None,
            direct_inflight: 0,
            copies: false,
        };
        e.direct = e.fabric.direct_threshold();
        e.copies = e.fabric.copies_payload();
        if !cfg.lazy_connect {
            e.connect_all()?;
        }
        Ok(e)
    }

    fn connect_all(&mut self) -> Result<()> {
        let keys: BTreeSet<usize> = (0..self.world)
            .filter(|&p| p != self.rank)
            .map(|p| self.key_of(p))
            .collect();
        for &k in &keys {
            if !self.conns.has_room() {
                break;
            }
            if self.symmetric() {
                // The lower rank initiates; the higher one accepts.
                if k > self.rank {
                    self.open_key(k)?;
                }
            } else {
                self.open_key(k)?;
            }
        }
        let want = if self.cfg.max_endpoints == 0 {
            keys.len()
        } else {
            keys.len().min(self.cfg.max_endpoints)
        };
        let mut backoff = crate::core::backoff::Backoff::new();
        loop {
            let connecting = self
                .conns
                .keys()
                .into_iter()
                .any(|k| self.conns.get(k).map(|e| e.state) == Some(EpState::Connecting));
            let live = self.conns.stats().live as usize;
            if !connecting && (live >= want || self.cfg.max_endpoints != 0) {
                return Ok(());
            }
            if self.progress()? {
                backoff.reset();
            } else {
                backoff.snooze_on(self.fabric.blocks_when_idle(), |d| {
                    self.fabric.wait_for_arrival(d)
                });
            }
        }
    }

    fn symmetric(&self) -> bool {
        self.cfg.recv_sharing != RecvSharing::Xrc
    }

    /// Endpoint key of a peer: the peer itself, or its node in `xrc` mode.
    fn key_of(&self, peer: usize) -> usize {
        if self.symmetric() {
            peer
        } else {
            peer / self.cfg.ranks_per_node
        }
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

    pub(crate) fn fabric(&self) -> &dyn Fabric {
        self.fabric.as_ref()
    }

    pub(crate) fn fabric_mut(&mut self) -> &mut dyn Fabric {
        self.fabric.as_mut()
    }

    fn new_req(&mut self) -> u64 {
        self.next_req += 1;
        self.next_req
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

    /// Accepts a message for sending if a pool buffer is free for its first chunk
    /// (copied now); otherwise [`Error::WouldBlock`]. Returns the request id.
    pub fn isend(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<u64> {
        self.check_rank(dest)?;
        if dest == self.rank {
            self.matcher.deliver_local(self.rank, tag, data)?;
            let req = self.new_req();
            self.sends.insert(
                req,
                SendReq {
                    outstanding: 0,
                    posted_all: true,
                },
            );
            return Ok(req);
        }
        let direct = self.goes_direct(dest, data.len());
        let (first, rest) = if direct {
            // One copy into an owned buffer (the caller may reuse `data` at once); it waits
            // behind the messages queued before it and is handed to the fabric whole.
            (None, data.to_vec())
        } else {
            let Some(id) = self.pool.acquire(self.fabric.as_mut())? else {
                return Err(Error::WouldBlock);
            };
            self.sync_wr_info();
            let first_len = data.len().min(self.pool.buffer_size());
            self.pool.buf_mut(id)[..first_len].copy_from_slice(&data[..first_len]);
            if first_len == data.len() {
                if let Some(req) = self.post_now(dest, tag, id, first_len)? {
                    return Ok(req);
                }
            }
            (Some((id, first_len)), data[first_len..].to_vec())
        };
        let req = self.new_req();
        self.sends.insert(
            req,
            SendReq {
                outstanding: 0,
                posted_all: false,
            },
        );
        self.peers.entry(dest).or_default().queue.push_back(OutMsg {
            req,
            tag,
            total: data.len(),
            first,
            rest,
            offset: 0,
            direct,
        });
        self.active.insert(dest);
        self.conns.note_peer(dest);
        self.pump_peer(dest)?;
        Ok(req)
    }

    /// The fast path of `isend` for a message that fits in pool buffer `id` (already copied,
    /// `len` bytes): when nothing is queued for `dest`, its endpoint is open and a credit is
    /// at hand, the packet is posted now, without entering the destination's queue (what
    /// `pump_peer` would do with it at once, minus the queue). Returns None, with nothing
    /// changed, when it cannot be posted now. On a failed post the buffer goes back to the
    /// pool.
    fn post_now(&mut self, dest: usize, tag: Tag, id: BufId, len: usize) -> Result<Option<u64>> {
        let key = self.key_of(dest);
        if !self.conns.get(key).is_some_and(|ep| ep.state == EpState::Open) {
            return Ok(None);
        }
        let Some(p) = self
            .peers
            .get_mut(&dest)
            .filter(|p| p.queue.is_empty() && p.credits > 0)
        else {
            return Ok(None);
        };
        p.credits -= 1;
        let req = self.new_req();
        if !self.symmetric() {
            // (With symmetric endpoints, opening the endpoint noted the peer.)
            self.conns.note_peer(dest);
        }
        let hdr = PacketHeader {
            src: self.rank as u32,
            tag,
            total: len as u64,
            offset: 0,
            len: len as u32,
            more: false,
        };
        match self.post_chunk(dest, key, &hdr, id, req) {
            Ok(outstanding) => {
                self.sends.insert(
                    req,
                    SendReq {
                        outstanding: u32::from(outstanding),
                        posted_all: true,
                    },
                );
                Ok(Some(req))
            }
            Err(e) => {
                self.pool.release(id);
                Err(e)
            }
        }
    }

    /// Posts pool buffer `id` (`hdr.len` bytes) of send request `req` to `dest` through
    /// endpoint `key` and accounts it: one more packet sent on the endpoint, and either the
    /// buffer freed at once (a fabric that copies) or its completion awaited (returns true:
    /// one more outstanding completion for `req`). Nothing changes when the post fails.
    fn post_chunk(
        &mut self,
        dest: usize,
        key: usize,
        hdr: &PacketHeader,
        id: BufId,
        req: u64,
    ) -> Result<bool> {
        self.fabric
            .post_send(dest, key, hdr, &self.pool.buf(id)[..hdr.len as usize], id as u64)?;
        let ep = self.conns.get_touched(key).expect("endpoint");
        ep.sent += 1;
        if self.copies {
            // The fabric holds its own copy: the buffer is free, nothing to complete.
            self.pool.release(id);
            return Ok(false);
        }
        ep.inflight += 1;
        self.wr_info[id as usize] = Some((req, key));
        Ok(true)
    }

    /// True when a message of `len` bytes to `dest` takes the fabric's direct path.
    pub fn goes_direct(&self, dest: usize, len: usize) -> bool {
        dest != self.rank && self.direct.is_some_and(|t| len > t)
    }

    /// Sends `data` to `dest` on the fabric's direct path, blocking, straight from `data`
    /// (zero-copy): first lets every message queued earlier for `dest` be posted (order),
    /// then hands the slice to the fabric, which keeps polling (events are handled as in
    /// [`Engine::progress`]) until it no longer reads `data`. Only for messages where
    /// [`Engine::goes_direct`] is true.
    pub fn send_direct(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<()> {
        self.check_rank(dest)?;
        if !self.goes_direct(dest, data.len()) {
            return Err(Error::Protocol(format!(
                "a message of {} bytes to rank {dest} does not take the direct path",
                data.len()
            )));
        }
        let mut backoff = crate::core::backoff::Backoff::new();
        while self.peers.get(&dest).is_some_and(|p| !p.queue.is_empty()) {
            if self.progress()? {
                backoff.reset();
            } else {
                backoff.snooze_on(self.fabric.blocks_when_idle(), |d| {
                    self.fabric.wait_for_arrival(d)
                });
            }
        }
        self.conns.note_peer(dest);
        let hdr = PacketHeader {
            src: self.rank as u32,
            tag,
            total: data.len() as u64,
            offset: 0,
            len: 0,
            more: false,
        };
        let mut inbox = std::mem::take(&mut self.inbox);
        let sent = {
            let matcher = &mut self.matcher;
            self.fabric
                .send_direct(dest, &hdr, data, &mut |ev| inbox.take(matcher, ev))
        };
        let settled = self.settle(&mut inbox);
        self.inbox = inbox;
        sent?;
        settled
    }

    fn sync_wr_info(&mut self) {
        let n = self.pool.buffers();
        if self.wr_info.len() < n {
            self.wr_info.resize(n, None);
        }
    }

    /// True when send request `req` is complete (all chunks posted and completed).
    pub fn send_done(&self, req: u64) -> Result<bool> {
        let s = self.sends.get(&req).ok_or(Error::UnknownRequest(req))?;
        Ok(s.posted_all && s.outstanding == 0)
    }

    /// Forgets a completed send request.
    pub fn finish_send(&mut self, req: u64) {
        self.sends.remove(&req);
    }

    /// Posts a receive request.
    pub fn irecv(&mut self, src: Source, tag: TagMatch) -> Result<u64> {
        if let Source::Rank(r) = src {
            self.check_rank(r)?;
        }
        let req = self.new_req();
        self.matcher.post(req, src, tag);
        Ok(req)
    }

    /// True when receive `req` completed.
    pub fn recv_done(&self, req: u64) -> bool {
        self.matcher.is_complete(req)
    }

    /// Takes the message of a completed receive.
    pub fn take_recv(&mut self, req: u64) -> Option<Message> {
        self.matcher.take_completed(req)
    }

    /// Takes a complete matching unexpected message, if any.
    pub fn try_take(&mut self, src: Source, tag: TagMatch) -> Option<Message> {
        self.matcher.try_take(src, tag)
    }

    /// True when nothing is queued or in flight on the send side.
    pub fn sends_drained(&self) -> bool {
        self.active.is_empty() && self.direct_inflight == 0 && !self.conns.any_inflight()
    }

    /// One round of progress; returns true if anything happened.
    pub fn progress(&mut self) -> Result<bool> {
        if self.fabric.aborted() {
            return Err(Error::Aborted);
        }
        let n = {
            let inbox = &mut self.inbox;
            let matcher = &mut self.matcher;
            self.fabric.poll(&mut |ev| inbox.take(matcher, ev))?
        };
        // An idle poll (the common case of a blocking wait) has nothing to settle.
        if !self.inbox.is_empty() {
            let mut inbox = std::mem::take(&mut self.inbox);
            let settled = self.settle(&mut inbox);
            self.inbox = inbox;
            settled?;
        }

        let mut work = n > 0;
        work |= self.manage_endpoints()?;
        if !self.active.is_empty() {
            work |= self.request_credits()?;
            work |= self.pump()?;
        }
        work |= self.flush_credits()?;
        Ok(work)
    }

    /// Handles what a poll collected: completions free pool buffers (or finish direct
    /// sends), arrivals are counted against credits and endpoints, controls are answered.
    fn settle(&mut self, inbox: &mut Inbox) -> Result<()> {
        for w in inbox.done.drain(..) {
            if w & DIRECT_WR != 0 {
                let s = self
                    .sends
                    .get_mut(&(w & !DIRECT_WR))
                    .ok_or_else(|| Error::Protocol(format!("unknown direct completion {w}")))?;
                s.outstanding -= 1;
                self.direct_inflight -= 1;
                continue;
            }
            let (req, key) = self.wr_info[w as usize]
                .take()
                .ok_or_else(|| Error::Protocol(format!("unknown completion {w}")))?;
            self.pool.release(w as BufId);
            if let Some(s) = self.sends.get_mut(&req) {
                s.outstanding -= 1;
            }
            if let Some(ep) = self.conns.get_mut(key) {
                ep.inflight -= 1;
            }
        }
        for (src, more) in inbox.arrivals.drain(..) {
            self.bank.consumed(src, more);
            if !self.symmetric() {
                self.conns.note_peer(src);
            } else {
                // The endpoint exists (checked here), and opening it noted the peer.
                let ep = self
                    .conns
                    .get_touched(src)
                    .ok_or_else(|| Error::Protocol(format!("data from rank {src} without an endpoint")))?;
                ep.received += 1;
            }
        }
        // Direct messages use no endpoint, receive buffer or credit.
        for src in inbox.whole.drain(..) {
            self.conns.note_peer(src);
        }
        for (src, c) in inbox.ctrl.drain(..) {
            self.on_control(src, c)?;
        }
        Ok(())
    }

    fn on_control(&mut self, src: usize, c: Control) -> Result<()> {
        match c {
            Control::ConnectReq { grant } => match self.conns.get(src).map(|e| e.state) {
                // Above the cap only when every slot is a connect still waiting for its
                // answer: deferring then can deadlock a cycle of full ranks.
                None if self.conns.has_room() || self.conns.all_connecting() => self.accept(src, grant)?,
                None | Some(EpState::Closing { .. }) => self.conns.deferred.push_back((src, grant)),
                Some(EpState::Connecting) => {
                    // Crossing connect requests: each side's request is the other's answer.
                    self.conns.get_mut(src).expect("endpoint").state = EpState::Open;
                    self.peers.entry(src).or_default().credits += grant;
                }
                Some(EpState::Open) => {
                    return Err(Error::Protocol(format!(
                        "connect request from rank {src} on an open endpoint"
                    )))
                }
            },
            Control::ConnectAck { grant } => {
                let ep = self
                    .conns
                    .get_mut(src)
                    .ok_or_else(|| Error::Protocol(format!("connect ack from rank {src} without request")))?;
                if ep.state == EpState::Connecting {
                    ep.state = EpState::Open;
                    self.peers.entry(src).or_default().credits += grant;
                }
            }
            Control::Close { sent } => {
                let ep = self
                    .conns
                    .get_mut(src)
                    .ok_or_else(|| Error::Protocol(format!("close from rank {src} without endpoint")))?;
                match ep.state {
                    EpState::Open => {
                        let mine = ep.sent;
                        self.conns.set_closing(src, Some(sent));
                        self.fabric.send_control(src, Control::Close { sent: mine })?;
                    }
                    EpState::Closing { peer_sent: None } => self.conns.set_closing(src, Some(sent)),
                    s => return Err(Error::Protocol(format!("close from rank {src} in state {s:?}"))),
                }
            }
            Control::Grant { credits } => {
                let p = self.peers.entry(src).or_default();
                p.credits += credits;
                p.requested = false;
            }
            Control::CreditRequest => {
                if !self.symmetric() || self.conns.get(src).map(|e| e.state) == Some(EpState::Open) {
                    self.bank.request(src);
                }
            }
            Control::Revoke => {
                let open = !self.symmetric() || self.conns.get(src).map(|e| e.state) == Some(EpState::Open);
                let p = self.peers.entry(src).or_default();
                if open && p.queue.is_empty() && p.credits > 0 {
                    let n = std::mem::take(&mut p.credits);
                    self.fabric.send_control(src, Control::Return { credits: n })?;
                }
            }
            Control::Return { credits } => self.bank.returned(src, credits),
        }
        Ok(())
    }

    /// Opens endpoint `key`: symmetric modes start the handshake, xrc opens at once.
    fn open_key(&mut self, key: usize) -> Result<()> {
        self.fabric.open_endpoint(key)?;
        if self.symmetric() {
            self.conns.insert(key, EpState::Connecting);
            self.conns.note_peer(key);
            let grant = self.bank.initial_grant(key);
            self.fabric.send_control(key, Control::ConnectReq { grant })?;
        } else {
            self.conns.insert(key, EpState::Open);
        }
        Ok(())
    }

    fn accept(&mut self, src: usize, grant: u32) -> Result<()> {
        self.fabric.open_endpoint(src)?;
        self.conns.insert(src, EpState::Open);
        self.conns.note_peer(src);
        self.peers.entry(src).or_default().credits += grant;
        let mine = self.bank.initial_grant(src);
        self.fabric.send_control(src, Control::ConnectAck { grant: mine })
    }

    fn is_idle(&self, key: usize) -> bool {
        if self.symmetric() {
            self.peers.get(&key).is_none_or(|p| p.queue.is_empty())
        } else {
            !self.active.iter().any(|&p| self.key_of(p) == key)
        }
    }

    fn start_close(&mut self, key: usize) -> Result<()> {
        self.conns.note_eviction();
        let symmetric = self.symmetric();
        if symmetric {
            let sent = self.conns.get(key).expect("endpoint").sent;
            self.conns.set_closing(key, None);
            self.fabric.send_control(key, Control::Close { sent })?;
        } else {
            self.conns.set_closing(key, Some(0));
        }
        Ok(())
    }

    /// Frees drained closing endpoints, accepts deferred connects, opens endpoints for
    /// queued data, evicts past the cap.
    fn manage_endpoints(&mut self) -> Result<bool> {
        let mut work = false;
        if self.conns.closing() > 0 {
            for key in self.conns.keys() {
                let ep = self.conns.get(key).expect("endpoint");
                if let EpState::Closing { peer_sent: Some(n) } = ep.state {
                    if ep.received == n && ep.inflight == 0 {
                        self.fabric.close_endpoint(key)?;
                        self.conns.remove(key);
                        if self.symmetric() {
                            let p = self.peers.entry(key).or_default();
                            p.credits = 0;
                            p.requested = false;
                            self.bank.reset_peer(key);
                        }
                        work = true;
                    }
                }
            }
        }
        let mut i = 0;
        while i < self.conns.deferred.len() && (self.conns.has_room() || self.conns.all_connecting()) {
            let (src, grant) = self.conns.deferred[i];
            if self.conns.get(src).is_none() {
                self.conns.deferred.remove(i);
                self.accept(src, grant)?;
                work = true;
            } else {
                i += 1;
            }
        }
        let mut need_room = !self.conns.deferred.is_empty();
        // `open_key` does not change `active`.
        for i in 0..self.active.0.len() {
            let key = self.key_of(self.active.0[i]);
            if self.conns.get(key).is_some() {
                continue;
            }
            if self.conns.has_room() {
                self.open_key(key)?;
                work = true;
            } else {
                need_room = true;
            }
        }
        if need_room && !self.conns.has_room() && self.conns.closing() == 0 {
            if let Some(v) = self.conns.victim(|k| self.is_idle(k)) {
                self.start_close(v)?;
                work = true;
            }
        } else if self.conns.over_cap() && self.conns.closing() == 0 {
            // Back under the cap after accepts above it, closing idle endpoints only.
            if let Some(v) = self.conns.victim(|k| self.is_idle(k)) {
                if self.conns.get(v).is_some_and(|e| e.inflight == 0) && self.is_idle(v) {
                    self.start_close(v)?;
                    work = true;
                }
            }
        }
        Ok(work)
    }

    fn request_credits(&mut self) -> Result<bool> {
        if self.cfg.recv_sharing == RecvSharing::PerPeer {
            return Ok(false);
        }
        let mut work = false;
        for &dest in self.active.iter() {
            let open = !self.symmetric() || self.conns.get(dest).map(|e| e.state) == Some(EpState::Open);
            let p = self.peers.get_mut(&dest).expect("active peer");
            if open && p.credits == 0 && !p.requested {
                p.requested = true;
                self.fabric.send_control(dest, Control::CreditRequest)?;
                work = true;
            }
        }
        Ok(work)
    }

    fn flush_credits(&mut self) -> Result<bool> {
        if !self.bank.has_pending() {
            return Ok(false);
        }
        let mut grants = std::mem::take(&mut self.scratch_grants);
        self.bank.take_grants_into(&mut grants);
        let sent = self.send_grants(&grants);
        self.scratch_grants = grants;
        sent?;
        for peer in self.bank.take_revokes() {
            if !self.symmetric() || self.conns.get(peer).map(|e| e.state) == Some(EpState::Open) {
                self.fabric.send_control(peer, Control::Revoke)?;
            }
        }
        Ok(true)
    }

    fn send_grants(&mut self, grants: &[(usize, u32)]) -> Result<()> {
        for &(peer, credits) in grants {
            if !self.symmetric() || self.conns.get(peer).map(|e| e.state) == Some(EpState::Open) {
                self.fabric.send_control(peer, Control::Grant { credits })?;
            }
        }
        Ok(())
    }

    fn pump(&mut self) -> Result<bool> {
        let mut work = false;
        let mut dests = std::mem::take(&mut self.scratch_dests);
        dests.clear();
        dests.extend(self.active.iter().copied());
        let mut pumped = Ok(());
        for &d in &dests {
            match self.pump_peer(d) {
                Ok(w) => work |= w,
                Err(e) => {
                    pumped = Err(e);
                    break;
                }
            }
        }
        self.scratch_dests = dests;
        pumped.map(|()| work)
    }

    /// Posts as many chunks to `dest` as endpoint state, credits and pool buffers allow.
    fn pump_peer(&mut self, dest: usize) -> Result<bool> {
        let key = self.key_of(dest);
        let mut work = false;
        while let Some(msg) = self.peers.get_mut(&dest).and_then(|p| p.queue.front_mut()) {
            if msg.direct {
                // No endpoint, credit or pool buffer needed: hand it over whole.
                let hdr = PacketHeader {
                    src: self.rank as u32,
                    tag: msg.tag,
                    total: msg.total as u64,
                    offset: 0,
                    len: 0,
                    more: false,
                };
                let (req, data) = (msg.req, std::mem::take(&mut msg.rest));
                let p = self.peers.get_mut(&dest).expect("peer");
                p.queue.pop_front();
                if p.queue.is_empty() {
                    self.active.remove(dest);
                }
                self.fabric.post_direct(dest, &hdr, data, DIRECT_WR | req)?;
                self.direct_inflight += 1;
                let s = self.sends.get_mut(&req).expect("send request");
                s.outstanding += 1;
                s.posted_all = true;
                work = true;
                continue;
            }
            match self.conns.get(key) {
                Some(ep) if ep.state == EpState::Open => {}
                _ => break,
            }
            let p = self.peers.get_mut(&dest).expect("peer");
            if p.credits == 0 {
                break;
            }
            let msg = p.queue.front_mut().expect("message");
            let bs = self.pool.buffer_size();
            let (id, len) = match msg.first.take() {
                Some(f) => f,
                None => {
                    let Some(id) = self.pool.acquire(self.fabric.as_mut())? else {
                        break;
                    };
                    let len = (msg.total - msg.offset).min(bs);
                    let from = msg.offset - bs; // `rest` starts after the first chunk
                    self.pool.buf_mut(id)[..len].copy_from_slice(&msg.rest[from..from + len]);
                    (id, len)
                }
            };
            // Re-borrow after the pool was used.
            let p = self.peers.get_mut(&dest).expect("peer");
            let queued = p.queue.len();
            let msg = p.queue.front_mut().expect("message");
            let hdr = PacketHeader {
                src: self.rank as u32,
                tag: msg.tag,
                total: msg.total as u64,
                offset: msg.offset as u64,
                len: len as u32,
                more: msg.offset + len < msg.total || queued > 1,
            };
            let req = msg.req;
            msg.offset += len;
            let finished = msg.offset >= msg.total;
            p.credits -= 1;
            if finished {
                p.queue.pop_front();
                if p.queue.is_empty() {
                    self.active.remove(dest);
                }
            }
            self.sync_wr_info();
            let outstanding = self.post_chunk(dest, key, &hdr, id, req)?;
            let s = self.sends.get_mut(&req).expect("send request");
            s.outstanding += u32::from(outstanding);
            if finished {
                s.posted_all = true;
            }
            work = true;
        }
        Ok(work)
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
        let model = self.fabric.memory_model();
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
        }
    }
}
