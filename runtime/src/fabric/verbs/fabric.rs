//! The verbs fabric ([`VerbsFabric`]): the [`Fabric`] of one Ballast rank over RC queue
//! pairs on an InfiniBand or RoCE device, and over one UD queue pair for the datagram path
//! past `max_endpoints` ([`ud`]).
//!
//! - **Memory.** The pool is registered as it is handed over ([`Fabric::register`]: one
//!   memory region for the whole initial pool, plus one per growth chunk when
//!   `pool_growth` is on), once, and deregistered only when the fabric is dropped. Besides
//!   the pool the fabric registers, also once, a send-header area (32 B per pool buffer)
//!   and the shared receive queue's buffers; in `per-peer` mode each QP's receive buffers
//!   are registered when the QP is created and deregistered when it is destroyed (that
//!   growth is what `per-peer` costs). No user buffer is ever registered.
//! - **Wire.** A packet is one RC SEND of a 32-byte header (the [`PacketHeader`] fields,
//!   gathered from the header area) followed by the payload (gathered from the pool
//!   buffer), received into one slot of `32 + buffer_size` bytes. Packets that fit in the
//!   QP's inline limit are sent inline. Credit grants ride on the next packet to the same
//!   rank as immediate data (SEND_WITH_IMM), or leave on the control channel when no packet
//!   went there within [`GRANT_HOLD_POLLS`] polls (at once if that rank asked for credit).
//!   The control channel is read on one poll in 64 while control traffic flows and one in
//!   1024 otherwise (at least every ~2-8 ms: [`super::control::Mesh::due`]); nothing else
//!   on the per-poll path makes a system call or reads the clock.
//! - **Queue pairs** are created on the first message to or from a peer
//!   (`Fabric::open_endpoint`), with their receives posted (per-peer) or their SRQ already
//!   full before they reach RTR. Their connection data travels on the control channel
//!   ([`super::control`]) attached to the engine's connect request/acknowledgement; a side
//!   posts sends only once the peer said its QP reached RTR, so no packet meets a QP that
//!   cannot receive it.
//! - **Errors.** A failed send completion returns its pool buffer (as a normal completion
//!   would), marks the peer's queue pair broken (sends queued behind it return their
//!   buffers at once, later ones at the next poll) and fails the next `poll` with
//!   [`FabricError::WorkCompletion`] naming the peer ([`FabricError::QueuePairBroken`] for the sends
//!   refused after it). A peer whose control connection ends before it
//!   finished is an error too, and its queue pair is moved to the error state so that the
//!   device flushes the sends still posted to it (their buffers come back with the flush
//!   completions; soft-RoCE was seen not to give up retrying toward a destroyed QP within
//!   30 s). A queue pair dropped before it finished connecting (any state) is destroyed and
//!   its registrations released: tested in the guest (`--killed-peer`,
//!   `--unanswered-connect`, `--dead-peer` of the verbs conformance binary).

//!
//! The code is split by concept: this file holds the state and the [`Fabric`] impl;
//! [`connect`] the queue pairs and their connection protocol (RC and XRC), [`post`] posting
//! and polling, [`kept`] the completions a poll keeps when an arrival is refused,
//! [`memory`] the registrations (pool, send headers, shared receive queue), [`ud`] the
//! datagram path.

mod connect;
mod kept;
mod memory;
mod post;
mod ud;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::control::{Frame, Kind, Mesh, QpInfo};
use super::device::{self, Device};
use super::ibv::{self, Init, Mr, Qp, Rtr, Rts, Slots};
use crate::core::config::{RecvSharing, RuntimeConfig, TransportConfig};
use crate::core::footprint::MemoryModel;
use crate::core::intmap::IntMap;
use crate::fabric::error::{FabricError, Result, VerbsPeer};
use crate::fabric::sizes::{VERBS_CQ_ENTRIES, VERBS_SQ_DEPTH};
use crate::fabric::{
    Capabilities, Control, DatagramPath, Event, Fabric, FabricBytes, Flow, PacketHeader, PeerKey,
};

/// Bytes of the header in front of every packet.
pub const HEADER_BYTES: usize = 32;
/// Inline data asked for at QP creation, bytes (a smaller QP is made if the device refuses).
const INLINE_BYTES: u32 = 64;
/// Receive work requests are told apart from sends by this bit of `wr_id`.
const RECV_BIT: u64 = 1 << 63;
/// Completions read per `ibv_poll_cq` call.
const POLL_BATCH: usize = 32;
/// Completions handled per [`Fabric::poll`] call at most.
const POLL_MAX: usize = 256;
/// A credit grant waits this many [`Fabric::poll`] calls for a packet to the same rank to
/// ride on (as immediate data) before it leaves on the control channel; at once if that
/// rank asked for credit. A ping-pong reply is always posted within a few calls, so its
/// grant never costs a TCP message (nor the peer a wait for its next control-channel read).
const GRANT_HOLD_POLLS: u64 = 32;

/// The shared receive queue (plain or XRC) with its receive slots.
struct SharedRecv {
    srq: ibv::Srq,
    slots: Slots,
}

/// A queue pair in the state the connection protocol reached.
enum Link {
    /// Created and bound to the port (receives posted in `per-peer` mode); waiting for the
    /// peer's connection data.
    Init(Qp<Init>),
    /// An XRC receive (TGT) queue pair stays here; others pass through.
    Rtr(Qp<Rtr>),
    /// Connected: sends may be posted.
    Rts(Qp<Rts>),
}

impl Link {
    fn qpn(&self) -> u32 {
        match self {
            Link::Init(q) => q.qpn(),
            Link::Rtr(q) => q.qpn(),
            Link::Rts(q) => q.qpn(),
        }
    }

    fn set_error(&self) -> Result<()> {
        match self {
            Link::Init(q) => q.set_error(),
            Link::Rtr(q) => q.set_error(),
            Link::Rts(q) => q.set_error(),
        }
        .map_err(FabricError::from)
    }

    fn post_recv(&self, slots: &Slots, slot: usize) -> Result<()> {
        let (off, len, id) = (slot * slots.slot(), slots.slot(), RECV_BIT | slot as u64);
        match self {
            Link::Init(q) => q.post_recv(slots, off, len, id),
            Link::Rtr(q) => q.post_recv(slots, off, len, id),
            Link::Rts(q) => q.post_recv(slots, off, len, id),
        }
        .map_err(FabricError::from)
    }
}

/// One queue pair toward a peer, with its own receive buffers in `per-peer` mode (dropped
/// after the queue pair: field order).
struct PeerQp {
    /// `None` only while a transition is under way.
    link: Option<Link>,
    rq: Option<Slots>,
    psn: u32,
    outstanding: u32,
}

impl PeerQp {
    /// The queue pair if connected (RTS).
    #[inline]
    fn rts(&self) -> Option<&Qp<Rts>> {
        match &self.link {
            Some(Link::Rts(q)) => Some(q),
            _ => None,
        }
    }

    fn connected(&self) -> bool {
        self.rts().is_some()
    }

    fn qpn(&self) -> u32 {
        self.link.as_ref().map_or(0, Link::qpn)
    }
}

/// A send waiting for the peer's QP to reach RTR, or for room in the send queue.
#[derive(Clone, Copy)]
struct Queued {
    wr_id: u64,
    payload: u64,
    len: u32,
    lkey: u32,
    /// Credits granted to the peer, carried as immediate data (0 = none).
    grant: u32,
    /// Destination rank (XRC: whose SRQ number the send names).
    dest: u32,
}

#[derive(Default)]
struct Peer {
    qp: Option<PeerQp>,
    /// Connection data received before our QP existed (or while the previous one closes).
    pending: Option<QpInfo>,
    /// The peer's QP toward us reached RTR.
    remote_ready: bool,
    queued: VecDeque<Queued>,
    /// Credits granted to the peer and not sent yet: they ride on the next packet to it as
    /// immediate data, or leave on the control channel after [`GRANT_HOLD_POLLS`] calls.
    grant_stash: u32,
    /// The poll count when `grant_stash` became non-zero.
    grant_since: u64,
    /// A send to the peer failed: its queue pair is in the error state.
    broken: bool,
    /// The peer asked for credit (its grant leaves at the next poll).
    wants_credit: bool,
}

/// The verbs fabric of one rank. Every verbs object keeps what it was made from alive (see
/// `ibv`); the pool's memory regions are dropped with the fabric, before the pool.
pub struct VerbsFabric {
    /// By slot ([`VerbsFabric::slot`]): each rank's, and in `xrc` mode each node's INI queue
    /// pair after them.
    peers: IntMap<usize, Peer>,
    /// XRC: TGT queue pairs this rank created for remote INI QPs (as its node's first rank).
    tgts: Vec<Qp<Rtr>>,
    srq: Option<SharedRecv>,
    /// XRC: the node's shared domain.
    xrcd: Option<ibv::Xrcd>,
    headers: Option<Slots>,
    pool_mrs: Vec<Mr>,
    cq: ibv::Cq,
    dev: Device,
    qpn_peer: IntMap<u32, usize>,
    /// Peers whose send queue got room back in the last CQ poll (scratch).
    touched: Vec<usize>,
    /// Work completions kept from a CQ poll whose arrival was refused (out of memory):
    /// taken first at the next poll (`post::Wc`, [`kept`]).
    kept_wcs: kept::Kept<post::Wc>,
    mesh: Mesh,
    abort: Arc<AtomicBool>,
    rank: usize,
    world: usize,
    cfg: TransportConfig,
    requested: RecvSharing,
    sharing: RecvSharing,
    header_slots: usize,
    sq_depth: u32,
    cq_entries: u32,
    max_inline: u32,
    pinned: u64,
    memlock_limit: Option<u64>,
    bytes: FabricBytes,
    model: MemoryModel,
    pending_err: Option<FabricError>,
    marked_done: bool,
    psn_seed: u64,
    frames: Vec<Frame>,
    /// [`Fabric::poll`] calls so far (paces the control channel reads and grant flushes).
    polls: u64,
    /// Peers with a non-zero `grant_stash`.
    stashed: Vec<usize>,
    /// Shared-receive-queue slots consumed and not reposted yet: reposted after the next
    /// `ibv_post_send` (a ping-pong reply leaves without waiting for it), at the start of the
    /// next poll, and before a grant leaves on the control channel.
    srq_reposts: Vec<usize>,
    /// Sends refused because their queue pair broke, completed at the next poll.
    failed_sends: Vec<u64>,
    /// XRC: this rank's SRQ number, and the other ranks' (asked on first use).
    my_srqn: u32,
    srqns: IntMap<usize, u32>,
    srqn_asked: IntMap<usize, ()>,
    /// The datagram path's UD queue pair ([`ud`]), when it is on.
    ud: Option<ud::Ud>,
    /// The datagram size when the datagram path is on (the UD QP is made on first use).
    ud_mtu: Option<usize>,
}

impl VerbsFabric {
    /// Opens the device chosen by `config.verbs()` and creates the completion queue for rank
    /// `rank` of `world`, whose control channel is `mesh`; `abort` is raised by the launcher
    /// when another rank of this process failed; `datagrams` says whether the engine above
    /// will use the datagram path (then the fabric offers its UD QP). Errors:
    /// [`FabricError::VerbsDevice`] (no usable device), [`FabricError::VerbsCall`] (opening it, the CQ).
    pub(crate) fn new(
        rank: usize,
        world: usize,
        config: &RuntimeConfig,
        mesh: Mesh,
        abort: Arc<AtomicBool>,
        datagrams: bool,
    ) -> Result<VerbsFabric> {
        let cfg = *config.transport();
        let dev = device::open(config.verbs())?;
        #[cfg(feature = "trace")]
        super::counters::enable_from_env();
        let header_slots = if cfg.pool_growth {
            (cfg.max_pool_bytes / cfg.buffer_size as u64) as usize
        } else {
            cfg.buffer_count
        };
        let recvs = match cfg.recv_sharing {
            RecvSharing::PerPeer => {
                let eps = if cfg.max_endpoints > 0 {
                    cfg.max_endpoints
                } else {
                    world.saturating_sub(1)
                };
                eps * cfg.recv_depth
            }
            _ => cfg.srq_depth,
        };
        let cq_entries = (VERBS_CQ_ENTRIES as usize)
            .max(header_slots + recvs)
            .min(dev.caps.max_cqe as usize)
            .max(1) as u32;
        let cq = dev
            .ctx
            .create_cq(cq_entries)
            .map_err(|e| match FabricError::from(e) {
                FabricError::VerbsCall {
                    verb, object, source, ..
                } => FabricError::VerbsCall {
                    verb,
                    object: format!("{object} on {}", dev.caps.name).into(),
                    rank: Some(rank),
                    peer: None,
                    source,
                },
                e => e,
            })?;
        let sq_depth = (VERBS_SQ_DEPTH as u32).min(dev.caps.max_qp_wr.max(1));
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        let mut f = VerbsFabric {
            peers: IntMap::default(),
            tgts: Vec::new(),
            xrcd: None,
            srq: None,
            headers: None,
            pool_mrs: Vec::new(),
            cq,
            dev,
            qpn_peer: IntMap::default(),
            touched: Vec::new(),
            kept_wcs: kept::Kept::with_capacity(POLL_BATCH),
            mesh,
            abort,
            rank,
            world,
            cfg,
            requested: cfg.recv_sharing,
            sharing: cfg.recv_sharing,
            header_slots,
            sq_depth,
            cq_entries,
            max_inline: 0,
            pinned: 0,
            memlock_limit: crate::core::memory::memlock_limit_bytes(),
            bytes: FabricBytes::default(),
            model: crate::fabric::sizes::verbs_model(),
            pending_err: None,
            marked_done: false,
            psn_seed: seed ^ (rank as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            frames: Vec::new(),
            polls: 0,
            stashed: Vec::new(),
            failed_sends: Vec::new(),
            srq_reposts: Vec::new(),
            my_srqn: 0,
            srqns: IntMap::default(),
            srqn_asked: IntMap::default(),
            ud: None,
            ud_mtu: None,
        };
        f.setup_ud(datagrams)?;
        Ok(f)
    }

    /// What the device reports.
    pub fn device(&self) -> &device::DeviceCaps {
        &self.dev.caps
    }

    /// Completion queue entries.
    pub fn cq_entries(&self) -> u32 {
        self.cq_entries
    }

    fn slot_bytes(&self) -> usize {
        HEADER_BYTES + self.cfg.buffer_size
    }

    fn next_psn(&mut self) -> u32 {
        let mut x = self.psn_seed;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.psn_seed = x;
        (x & 0x00ff_ffff) as u32
    }

    /// The slot of endpoint `key` in `peers`: a rank's is the rank, a node's (`xrc`: the
    /// engine's endpoints are remote nodes) comes after every rank's, at `world + node`.
    /// With [`VerbsFabric::key_at`], the one place that maps keys to slots.
    fn slot(&self, key: PeerKey) -> usize {
        slot_of(self.world, key)
    }

    /// The endpoint key of slot `slot` in `peers` (the inverse of [`VerbsFabric::slot`]).
    fn key_at(&self, slot: usize) -> PeerKey {
        key_of_slot(self.world, slot)
    }

    /// The peer rank of slot `slot`; none for a node's.
    fn rank_at(&self, slot: usize) -> Option<usize> {
        match self.key_at(slot) {
            PeerKey::Rank(r) => Some(r),
            PeerKey::Node(_) => None,
        }
    }

    /// Names slot `slot` in errors: a rank, or (XRC) a node.
    fn who(&self, slot: usize) -> VerbsPeer {
        match self.key_at(slot) {
            PeerKey::Rank(r) => VerbsPeer::Rank(r),
            PeerKey::Node(n) => VerbsPeer::Node(n),
        }
    }

    /// `e` with this rank and the peer rank of slot `slot` (none for a node's).
    fn at(&self, e: impl Into<FabricError>, slot: usize) -> FabricError {
        ibv::at(e, self.rank, self.rank_at(slot))
    }
}

/// [`VerbsFabric::slot`] in a world of `world` ranks.
fn slot_of(world: usize, key: PeerKey) -> usize {
    match key {
        PeerKey::Rank(r) => r,
        PeerKey::Node(n) => world + n,
    }
}

/// [`VerbsFabric::key_at`] in a world of `world` ranks.
fn key_of_slot(world: usize, slot: usize) -> PeerKey {
    match slot.checked_sub(world) {
        Some(node) => PeerKey::Node(node),
        None => PeerKey::Rank(slot),
    }
}

impl Fabric for VerbsFabric {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn capabilities(&self) -> Capabilities {
        // XRC where the device reports it (the path in `xrc.rs`, compiled but never run: no
        // such device here); otherwise the engine falls back to `shared` and setup_receive
        // says why.
        Capabilities {
            name: "verbs",
            xrc: self.dev.caps.xrc,
        }
    }

    fn setup_receive(&mut self, sharing: RecvSharing) -> Result<Option<String>> {
        self.setup_shared_receive(sharing)
    }

    fn open_endpoint(&mut self, key: PeerKey) -> Result<()> {
        let key = key.index();
        if self.sharing == RecvSharing::Xrc {
            return self.open_xrc(key);
        }
        self.open_rc(key)
    }

    fn close_endpoint(&mut self, key: PeerKey) -> Result<()> {
        self.close(self.slot(key))
    }

    fn post_send(
        &mut self,
        dest: usize,
        key: PeerKey,
        header: &PacketHeader,
        payload: &[u8],
        wr_id: u64,
    ) -> Result<()> {
        self.send_packet(dest, key, header, payload, wr_id)
    }

    fn send_control(&mut self, dest: usize, msg: Control) -> Result<()> {
        if dest >= self.world {
            return Err(FabricError::InvalidRank {
                rank: dest,
                world_size: self.world,
            });
        }
        if let Control::Grant { credits } = msg {
            // Held back to ride on the next packet to `dest` (a ping-pong reply, typically).
            let p = self.peers.entry(dest).or_default();
            if p.grant_stash == 0 {
                p.grant_since = self.polls;
                self.stashed.push(dest);
            }
            p.grant_stash += credits;
            return Ok(());
        }
        if msg == Control::Refuse {
            // The refused request's connection data names a queue pair its sender destroys
            // now: a later endpoint toward `dest` (a promotion) must wait for fresh data.
            if let Some(p) = self.peers.get_mut(&dest) {
                p.pending = None;
            }
        }
        // Keep the engine's order: grants decided before this message leave before it.
        self.flush_grant(dest)?;
        let crate::fabric::ControlWord { code, value } = msg.encode();
        let qp = match msg {
            Control::ConnectReq { .. } | Control::ConnectAck { .. } => self.local_info(dest)?,
            _ => QpInfo::default(),
        };
        self.mesh.send(
            dest,
            &Frame {
                kind: Kind::Control,
                code,
                src: self.rank as u32,
                value,
                qp,
            },
        )
    }

    fn poll(&mut self, on_event: &mut dyn FnMut(Event<'_>) -> Flow) -> Result<usize> {
        crate::fabric::poll_result(self.poll_all(on_event))
    }

    fn bytes(&self) -> FabricBytes {
        self.bytes
    }

    fn memory_model(&self) -> MemoryModel {
        self.model
    }

    fn aborted(&self) -> bool {
        self.abort.load(Ordering::Relaxed)
    }

    fn mark_done(&mut self) {
        if !self.marked_done {
            self.marked_done = true;
            if let Err(e) = self.mesh.broadcast_done() {
                self.pending_err.get_or_insert(e);
            }
        }
    }

    fn all_done(&self) -> bool {
        self.mesh.all_done()
    }

    fn datagrams(&mut self) -> Option<&mut dyn DatagramPath> {
        // On once `setup_ud` found a datagram size (the engine uses the path, the port
        // has one).
        if self.ud_mtu.is_some() {
            Some(self)
        } else {
            None
        }
    }
}

impl DatagramPath for VerbsFabric {
    fn datagram_mtu(&self) -> usize {
        // `Some` whenever the path is offered (`datagrams`).
        self.ud_mtu.unwrap_or(0)
    }

    fn post_datagram(&mut self, dest: usize, bytes: &[u8]) -> Result<()> {
        self.send_datagram(dest, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank's slot is the rank and a node's comes after every rank's, both ways; the
    /// slots of ranks and nodes never meet.
    #[test]
    fn slots_of_ranks_and_nodes_round_trip() {
        let world = 6;
        for key in [
            PeerKey::Rank(0),
            PeerKey::Rank(5),
            PeerKey::Node(0),
            PeerKey::Node(2),
        ] {
            assert_eq!(key_of_slot(world, slot_of(world, key)), key);
        }
        assert_eq!(slot_of(world, PeerKey::Rank(5)), 5);
        assert_eq!(slot_of(world, PeerKey::Node(0)), 6);
        assert_eq!(key_of_slot(world, 7), PeerKey::Node(1));
    }

    #[test]
    fn header_is_the_wire_codec_data_form() {
        // (The header's and the control messages' bytes are tested in `wire`.)
        let h = PacketHeader {
            src: 7,
            tag: 0x7fff_fffe,
            total: 1 << 40,
            offset: 12345,
            len: 8192,
            more: true,
        };
        let b: [u8; HEADER_BYTES] =
            crate::fabric::wire::encode_header(&h, crate::fabric::wire::HeaderExtra::DATA);
        assert_eq!(&b[28..], &[1, 0, 0, 0]);
        assert_eq!(crate::fabric::wire::decode_header(&b).header, h);
    }
}
