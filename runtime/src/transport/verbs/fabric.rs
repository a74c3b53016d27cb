//! The verbs fabric ([`VerbsFabric`]): the [`Fabric`] of one Ballast rank over RC queue
//! pairs on an InfiniBand or RoCE device.
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
//!   [`Error::Verbs`] naming the peer. A peer whose control connection ends before it
//!   finished is an error too, and its queue pair is moved to the error state so that the
//!   device flushes the sends still posted to it (their buffers come back with the flush
//!   completions; soft-RoCE was seen not to give up retrying toward a destroyed QP within
//!   30 s). A queue pair dropped before it finished connecting (any state) is destroyed and
//!   its registrations released: tested in the guest (`--killed-peer`,
//!   `--unanswered-connect`, `--dead-peer` of the verbs conformance binary).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rdma_sys::*;

use super::control::{Frame, Kind, Mesh, QpInfo};
use super::device::{self, Context};
use super::xrc;
use crate::core::config::{RecvSharing, RuntimeConfig, TransportConfig};
use crate::core::error::{Error, Result};
use crate::core::footprint::MemoryModel;
use crate::core::intmap::IntMap;
use crate::core::memory::AlignedRegion;
use crate::core::pool::{Register, Registration};
use crate::fabric::{Capabilities, Control, Event, Fabric, FabricBytes, PacketHeader};
use crate::protocol::wire;
use crate::transport::model::{VERBS_CQ_ENTRIES, VERBS_SQ_DEPTH};

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
/// RC ACK timeout exponent: 4.096 us x 2^16 = 268 ms per try (generous for soft-RoCE).
const ACK_TIMEOUT: u8 = 16;
/// RC retries before a send fails (7 = the maximum).
const RETRY_COUNT: u8 = 7;
/// A credit grant waits this many [`Fabric::poll`] calls for a packet to the same rank to
/// ride on (as immediate data) before it leaves on the control channel; at once if that
/// rank asked for credit. A ping-pong reply is always posted within a few calls, so its
/// grant never costs a TCP message (nor the peer a wait for its next control-channel read).
const GRANT_HOLD_POLLS: u64 = 32;

fn verr(what: String) -> Error {
    Error::Verbs(format!("{what}: {}", std::io::Error::last_os_error()))
}

fn rc_err(what: String, rc: i32) -> Error {
    Error::Verbs(format!("{what}: {}", std::io::Error::from_raw_os_error(rc.abs())))
}

/// A registered memory region.
struct Mr {
    mr: *mut ibv_mr,
    addr: usize,
    len: usize,
}

impl Mr {
    fn register(pd: *mut ibv_pd, mem: &[u8]) -> Result<Mr> {
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as i32;
        // SAFETY: `mem` is live memory owned by the caller, which keeps it alive and in place
        // until this Mr is dropped (the owners declare the Mr before the memory); the device
        // only writes to it through receive work requests the fabric posts.
        let mr = unsafe { ibv_reg_mr(pd, mem.as_ptr() as *mut _, mem.len(), access) };
        if mr.is_null() {
            return Err(verr(format!("ibv_reg_mr({} bytes)", mem.len())));
        }
        Ok(Mr {
            mr,
            addr: mem.as_ptr() as usize,
            len: mem.len(),
        })
    }

    fn lkey(&self) -> u32 {
        // SAFETY: mr is a valid registration until drop.
        unsafe { (*self.mr).lkey }
    }

    fn contains(&self, p: usize, len: usize) -> bool {
        p >= self.addr && p + len <= self.addr + self.len
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered in Mr::register, deregistered once; no posted work request uses
        // it any more (QPs and the SRQ are destroyed first by field order).
        unsafe { ibv_dereg_mr(self.mr) };
    }
}

/// A registered area of `count` slots of `slot` bytes (receive buffers, send headers).
struct Slots {
    mr: Mr, // before `mem`: deregistered before the memory is freed
    mem: AlignedRegion,
    slot: usize,
    count: usize,
}

impl Slots {
    fn new(pd: *mut ibv_pd, count: usize, slot: usize) -> Result<Slots> {
        let mem = AlignedRegion::new(count, slot, "verbs send-header slots")?;
        let mr = Mr::register(pd, mem.as_slice())?;
        Ok(Slots { mr, mem, slot, count })
    }

    fn addr(&self, i: usize) -> u64 {
        (self.mem.as_slice().as_ptr() as usize + i * self.slot) as u64
    }

    fn get(&self, i: usize, len: usize) -> &[u8] {
        &self.mem.as_slice()[i * self.slot..i * self.slot + len]
    }
}

fn post_recv_wr(slots: &Slots, i: usize, qp: *mut ibv_qp, srq: *mut ibv_srq) -> Result<()> {
    let mut sge = ibv_sge {
        addr: slots.addr(i),
        length: slots.slot as u32,
        lkey: slots.mr.lkey(),
    };
    let mut wr = ibv_recv_wr {
        wr_id: RECV_BIT | i as u64,
        next: std::ptr::null_mut(),
        sg_list: &mut sge,
        num_sge: 1,
    };
    let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
    // SAFETY: wr and sge live across the call; the slot lies in registered memory that stays
    // registered while the queue exists; exactly one of qp/srq is used.
    let rc = unsafe {
        if srq.is_null() {
            ibv_post_recv(qp, &mut wr, &mut bad)
        } else {
            ibv_post_srq_recv(srq, &mut wr, &mut bad)
        }
    };
    if rc != 0 {
        return Err(rc_err("ibv_post_recv".into(), rc));
    }
    Ok(())
}

struct Cq(*mut ibv_cq);

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: created in VerbsFabric::new, destroyed once after every QP using it.
        unsafe { ibv_destroy_cq(self.0) };
    }
}

struct Srq {
    srq: *mut ibv_srq,
    slots: Slots,
}

impl Drop for Srq {
    fn drop(&mut self) {
        // SAFETY: destroyed once, after every QP attached to it (field order); its buffers
        // are deregistered afterwards when `slots` drops.
        unsafe { ibv_destroy_srq(self.srq) };
    }
}

/// One RC queue pair toward a peer, with its own receive buffers in `per-peer` mode.
struct Qp {
    qp: *mut ibv_qp,
    rq: Option<Slots>,
    psn: u32,
    connected: bool,
    outstanding: u32,
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created in open_endpoint and destroyed once, in any state (a QP that never
        // finished connecting included); its receive buffers are deregistered after this.
        unsafe { ibv_destroy_qp(self.qp) };
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
    qp: Option<Qp>,
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

/// The verbs fabric of one rank. Field order is teardown order: QPs, then the SRQ, then the
/// memory regions, then the CQ, then the device.
pub struct VerbsFabric {
    /// Per peer rank; in `xrc` mode the INI queue pairs are kept under `world + node`.
    peers: IntMap<usize, Peer>,
    /// XRC: TGT queue pairs this rank created for remote INI QPs (as its node's first rank).
    tgts: Vec<xrc::Tgt>,
    srq: Option<Srq>,
    /// XRC: the node's shared domain (after the SRQ and the QPs made in it).
    xrcd: Option<xrc::Xrcd>,
    headers: Option<Slots>,
    pool_mrs: Vec<Mr>,
    cq: Cq,
    dev: Context,
    qpn_peer: IntMap<u32, usize>,
    /// Peers whose send queue got room back in the last CQ poll (scratch).
    touched: Vec<usize>,
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
    pending_err: Option<Error>,
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
}

// SAFETY: every raw handle is owned by this value and used only by the thread that owns it
// (a fabric is driven by one thread); libibverbs objects may be used from any thread.
unsafe impl Send for VerbsFabric {}

impl VerbsFabric {
    /// Opens the device chosen by `config.verbs()` and creates the completion queue for rank
    /// `rank` of `world`, whose control channel is `mesh`; `abort` is raised by the launcher
    /// when another rank of this process failed. Errors: [`Error::Verbs`] (device, CQ).
    pub(crate) fn new(
        rank: usize,
        world: usize,
        config: &RuntimeConfig,
        mesh: Mesh,
        abort: Arc<AtomicBool>,
    ) -> Result<VerbsFabric> {
        let cfg = *config.transport();
        let dev = device::open(config.verbs())?;
        if std::env::var("BALLAST_VERBS_TRACE").is_ok_and(|v| v == "1") {
            super::counters::TRACE.store(true, Ordering::Relaxed);
        }
        if std::env::var("BALLAST_VERBS_TRACE").is_ok_and(|v| v == "tsc") {
            super::counters::STAMPING.store(true, Ordering::Relaxed);
        }
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
        // SAFETY: ctx is open; no completion channel; the CQ is destroyed in Cq::drop.
        let cq = unsafe {
            ibv_create_cq(
                dev.ctx,
                cq_entries as i32,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if cq.is_null() {
            return Err(verr(format!(
                "ibv_create_cq({cq_entries} entries) on {}",
                dev.caps.name
            )));
        }
        let sq_depth = (VERBS_SQ_DEPTH as u32).min(dev.caps.max_qp_wr.max(1));
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        Ok(VerbsFabric {
            peers: IntMap::default(),
            tgts: Vec::new(),
            xrcd: None,
            srq: None,
            headers: None,
            pool_mrs: Vec::new(),
            cq: Cq(cq),
            dev,
            qpn_peer: IntMap::default(),
            touched: Vec::new(),
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
            memlock_limit: crate::transport::local::memlock_limit_bytes(),
            bytes: FabricBytes::default(),
            model: MemoryModel::verbs(),
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
        })
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

    /// Fails unless `more` bytes can be pinned on top of what is pinned already. The limit
    /// is per process: with several ranks as threads of one process their registrations
    /// add up, so the process' VmPin counts (this rank's own count if /proc is unreadable).
    fn check_memlock(&self, more: u64) -> Result<()> {
        let process = crate::core::procstatus::ProcStatus::read_self()
            .map(|s| s.vm_pin_kb * 1024)
            .unwrap_or(0);
        let need = self.pinned.max(process) + more;
        match self.memlock_limit {
            Some(limit) if limit != u64::MAX && need > limit => Err(Error::MemlockTooLow {
                needed_kib: need.div_ceil(1024),
                limit_kib: limit / 1024,
            }),
            _ => Ok(()),
        }
    }

    fn next_psn(&mut self) -> u32 {
        let mut x = self.psn_seed;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.psn_seed = x;
        (x & 0x00ff_ffff) as u32
    }

    fn local_info(&self, key: usize) -> Result<QpInfo> {
        let qp = self
            .peers
            .get(&key)
            .and_then(|p| p.qp.as_ref())
            .ok_or_else(|| Error::Protocol(format!("no queue pair toward rank {key}")))?;
        // SAFETY: qp is a live QP; qp_num is set at creation.
        let qpn = unsafe { (*qp.qp).qp_num };
        Ok(QpInfo {
            qpn,
            psn: qp.psn,
            lid: self.dev.lid,
            gid: self.dev.gid,
        })
    }

    fn create_qp(&mut self, inline: u32) -> *mut ibv_qp {
        let per_peer = self.sharing == RecvSharing::PerPeer;
        // SAFETY: plain-data struct; zero is valid for every field not set below.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = self.cq.0;
        init.recv_cq = self.cq.0;
        init.srq = self.srq.as_ref().map_or(std::ptr::null_mut(), |s| s.srq);
        init.qp_type = ibv_qp_type::IBV_QPT_RC;
        init.sq_sig_all = 0;
        init.cap = ibv_qp_cap {
            max_send_wr: self.sq_depth,
            max_recv_wr: if per_peer { self.cfg.recv_depth as u32 } else { 0 },
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: inline,
        };
        // SAFETY: pd is live, init is fully initialised; NULL on failure.
        let qp = unsafe { ibv_create_qp(self.dev.pd, &mut init) };
        if !qp.is_null() {
            self.max_inline = init.cap.max_inline_data;
        }
        qp
    }

    fn modify(
        &self,
        qp: *mut ibv_qp,
        attr: &mut ibv_qp_attr,
        mask: u32,
        what: &str,
        peer: usize,
    ) -> Result<()> {
        // SAFETY: qp is live; attr is initialised for every field named in `mask`.
        let rc = unsafe { ibv_modify_qp(qp, attr, mask as i32) };
        if rc != 0 {
            return Err(rc_err(
                format!("rank {}: moving the QP toward rank {peer} to {what}", self.rank),
                rc,
            ));
        }
        Ok(())
    }

    /// INIT -> RTR toward `remote` (`recv`: the QP receives, so it gets the responder
    /// attributes; an XRC INI QP does not).
    fn rtr(&self, qp: *mut ibv_qp, remote: QpInfo, recv: bool, key: usize) -> Result<()> {
        // SAFETY: plain-data struct; zero is valid for the fields not set.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTR;
        a.path_mtu = self.dev.mtu;
        a.dest_qp_num = remote.qpn;
        a.rq_psn = remote.psn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.dlid = remote.lid;
        a.ah_attr.port_num = self.dev.caps.port;
        a.ah_attr.sl = 0;
        if self.dev.ethernet || remote.lid == 0 {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid.raw = remote.gid;
            a.ah_attr.grh.sgid_index = self.dev.caps.gid_index as u8;
            a.ah_attr.grh.hop_limit = 64;
        }
        use ibv_qp_attr_mask as M;
        let mut mask = M::IBV_QP_STATE.0
            | M::IBV_QP_AV.0
            | M::IBV_QP_PATH_MTU.0
            | M::IBV_QP_DEST_QPN.0
            | M::IBV_QP_RQ_PSN.0;
        if recv {
            mask |= M::IBV_QP_MAX_DEST_RD_ATOMIC.0 | M::IBV_QP_MIN_RNR_TIMER.0;
        }
        self.modify(qp, &mut a, mask, "RTR", key)
    }

    /// RTR -> RTS with our send PSN `psn`.
    fn rts(&self, qp: *mut ibv_qp, psn: u32, key: usize) -> Result<()> {
        // SAFETY: plain-data struct; zero is valid for the fields not set.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTS;
        a.sq_psn = psn;
        a.timeout = ACK_TIMEOUT;
        a.retry_cnt = RETRY_COUNT;
        a.rnr_retry = 7;
        a.max_rd_atomic = 1;
        use ibv_qp_attr_mask as M;
        let mask = M::IBV_QP_STATE.0
            | M::IBV_QP_SQ_PSN.0
            | M::IBV_QP_TIMEOUT.0
            | M::IBV_QP_RETRY_CNT.0
            | M::IBV_QP_RNR_RETRY.0
            | M::IBV_QP_MAX_QP_RD_ATOMIC.0;
        self.modify(qp, &mut a, mask, "RTS", key)
    }

    /// INIT with our port (every QP kind starts so).
    fn init(&self, qp: *mut ibv_qp, key: usize) -> Result<()> {
        // SAFETY: plain-data struct; zero is valid for the fields not set.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = self.dev.caps.port;
        a.qp_access_flags = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        use ibv_qp_attr_mask as M;
        self.modify(
            qp,
            &mut a,
            M::IBV_QP_STATE.0 | M::IBV_QP_PKEY_INDEX.0 | M::IBV_QP_PORT.0 | M::IBV_QP_ACCESS_FLAGS.0,
            "INIT",
            key,
        )
    }

    /// INIT -> RTR -> RTS with the peer's data, then tells the peer our side can receive.
    fn connect(&mut self, key: usize, remote: QpInfo) -> Result<()> {
        let (qp, psn) = {
            let q = self
                .peers
                .get(&key)
                .and_then(|p| p.qp.as_ref())
                .expect("queue pair");
            (q.qp, q.psn)
        };
        self.rtr(qp, remote, true, key)?;
        self.rts(qp, psn, key)?;
        self.peers
            .get_mut(&key)
            .and_then(|p| p.qp.as_mut())
            .expect("queue pair")
            .connected = true;
        self.mesh.send(key, &Frame::simple(Kind::Ready, self.rank))
    }

    /// The internal key of engine endpoint `key`: the peer rank, or in `xrc` mode (where
    /// the engine's endpoints are remote nodes) `world + node`.
    fn ep_key(&self, key: usize) -> usize {
        if self.sharing == RecvSharing::Xrc {
            self.world + key
        } else {
            key
        }
    }

    /// Names an internal key in messages.
    fn who(&self, key: usize) -> String {
        if key >= self.world {
            format!("node {}", key - self.world)
        } else {
            format!("rank {key}")
        }
    }

    /// XRC: asks rank `dest` for its SRQ number (once).
    fn ask_srqn(&mut self, dest: usize) -> Result<()> {
        if self.srqn_asked.insert(dest, ()).is_none() {
            self.mesh.send(dest, &Frame::simple(Kind::SrqReq, self.rank))?;
        }
        Ok(())
    }

    /// XRC: as the first rank of this node, creates a TGT QP in the node's domain for the
    /// INI QP described by `f` and answers with its connection data.
    fn accept_xrc(&mut self, f: &Frame) -> Result<()> {
        let src = f.src as usize;
        let xrcd = self
            .xrcd
            .as_ref()
            .ok_or_else(|| Error::Protocol(format!("XRC connect from rank {src} without an XRC domain")))?;
        let tgt = xrc::Tgt(xrc::create_tgt(self.dev.ctx, xrcd)?);
        self.init(tgt.0, src)?;
        self.rtr(tgt.0, f.qp, true, src)?;
        let psn = self.next_psn();
        // SAFETY: tgt.0 is a live QP; qp_num is set at creation.
        let qpn = unsafe { (*tgt.0).qp_num };
        self.tgts.push(tgt);
        let qp = QpInfo {
            qpn,
            psn,
            lid: self.dev.lid,
            gid: self.dev.gid,
        };
        self.mesh.send(
            src,
            &Frame {
                kind: Kind::XrcAccept,
                code: 0,
                src: self.rank as u32,
                value: f.value,
                qp,
            },
        )
    }

    fn post(&mut self, key: usize, q: Queued) -> Result<()> {
        let qp = self
            .peers
            .get(&key)
            .and_then(|p| p.qp.as_ref())
            .ok_or_else(|| Error::Protocol(format!("send on a closed endpoint toward rank {key}")))?
            .qp;
        self.post_wr(qp, key, q)?;
        self.peers
            .get_mut(&key)
            .and_then(|p| p.qp.as_mut())
            .expect("queue pair")
            .outstanding += 1;
        Ok(())
    }

    /// Posts `q` on queue pair `qp` (toward `key`); the caller counts it as outstanding.
    fn post_wr(&self, qp: *mut ibv_qp, key: usize, q: Queued) -> Result<()> {
        let headers = self
            .headers
            .as_ref()
            .ok_or_else(|| Error::Protocol("send before the pool was registered".into()))?;
        let mut sges = [
            ibv_sge {
                addr: headers.addr(q.wr_id as usize),
                length: HEADER_BYTES as u32,
                lkey: headers.mr.lkey(),
            },
            ibv_sge {
                addr: q.payload,
                length: q.len,
                lkey: q.lkey,
            },
        ];
        let mut flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        if HEADER_BYTES as u32 + q.len <= self.max_inline {
            flags |= ibv_send_flags::IBV_SEND_INLINE.0;
        }
        // SAFETY: plain-data struct (with unions of plain data); zero is valid.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = q.wr_id;
        wr.sg_list = sges.as_mut_ptr();
        wr.num_sge = if q.len == 0 { 1 } else { 2 };
        wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
        if q.grant > 0 {
            wr.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_IMM;
            wr.imm_data_invalidated_rkey_union.imm_data = q.grant.to_be();
        }
        wr.send_flags = flags;
        if self.sharing == RecvSharing::Xrc {
            let srqn = *self.srqns.get(&(q.dest as usize)).ok_or_else(|| {
                Error::Protocol(format!("XRC send to rank {} before its SRQ number", q.dest))
            })?;
            wr.qp_type.xrc = xrc_t { remote_srqn: srqn };
        }
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        super::counters::traced_post();
        super::counters::stamp(8);
        // SAFETY: qp is live and in RTS; wr and sges live across the call; the header slot and
        // the payload lie in registered memory that stays registered and untouched until the
        // completion of `wr_id` is reported (the engine owns the pool buffer until then).
        let rc = unsafe { ibv_post_send(qp, &mut wr, &mut bad) };
        super::counters::stamp(9);
        super::counters::bump(&super::counters::POSTS, 1);
        if rc != 0 {
            return Err(rc_err(
                format!("rank {}: ibv_post_send toward rank {key}", self.rank),
                rc,
            ));
        }
        Ok(())
    }

    /// Posts queued sends toward `key` while the peer is ready and the send queue has room.
    fn flush(&mut self, key: usize) -> Result<()> {
        loop {
            let Some(p) = self.peers.get_mut(&key) else {
                return Ok(());
            };
            let room =
                p.qp.as_ref()
                    .is_some_and(|q| q.connected && q.outstanding < self.sq_depth);
            if !p.remote_ready || !room {
                return Ok(());
            }
            if self.sharing == RecvSharing::Xrc {
                let Some(front) = p.queued.front() else {
                    return Ok(());
                };
                let d = front.dest as usize;
                if !self.srqns.contains_key(&d) {
                    return self.ask_srqn(d);
                }
            }
            let p = self.peers.get_mut(&key).expect("peer");
            let Some(q) = p.queued.pop_front() else {
                return Ok(());
            };
            self.post(key, q)?;
        }
    }

    /// Reposts the shared receive queue's consumed slots.
    fn repost_srq(&mut self) -> Result<()> {
        if self.srq_reposts.is_empty() {
            return Ok(());
        }
        let Some(srq) = self.srq.as_ref() else {
            self.srq_reposts.clear();
            return Ok(());
        };
        for &slot in &self.srq_reposts {
            post_recv_wr(&srq.slots, slot, std::ptr::null_mut(), srq.srq)?;
        }
        self.srq_reposts.clear();
        Ok(())
    }

    fn flush_grant(&mut self, dest: usize) -> Result<()> {
        // The credits granted count on reposted slots.
        self.repost_srq()?;
        let Some(p) = self.peers.get_mut(&dest) else {
            return Ok(());
        };
        let credits = std::mem::take(&mut p.grant_stash);
        p.wants_credit = false;
        if credits == 0 {
            return Ok(());
        }
        let (code, value) = Control::Grant { credits }.encode();
        self.mesh.send(
            dest,
            &Frame {
                kind: Kind::Control,
                code,
                src: self.rank as u32,
                value,
                qp: QpInfo::default(),
            },
        )
    }

    fn on_frame(&mut self, f: Frame, on_event: &mut dyn FnMut(Event<'_>) -> Result<()>) -> Result<()> {
        let src = f.src as usize;
        if src >= self.world {
            return Err(Error::Protocol(format!(
                "control frame from rank {src} outside the world"
            )));
        }
        match f.kind {
            Kind::Control => {
                let c = Control::decode(f.code, f.value)?;
                if matches!(c, Control::ConnectReq { .. } | Control::ConnectAck { .. }) {
                    let p = self.peers.entry(src).or_default();
                    if p.qp.as_ref().is_some_and(|q| !q.connected) {
                        self.connect(src, f.qp)?;
                    } else {
                        p.pending = Some(f.qp);
                    }
                }
                if c == Control::CreditRequest {
                    self.peers.entry(src).or_default().wants_credit = true;
                }
                on_event(Event::Control(src, c))
            }
            Kind::Ready => {
                self.peers.entry(src).or_default().remote_ready = true;
                self.flush(src)
            }
            Kind::XrcConnect => self.accept_xrc(&f),
            Kind::XrcAccept => {
                let ik = self.world + src / self.cfg.ranks_per_node;
                let (qp, psn) = match self.peers.get(&ik).and_then(|p| p.qp.as_ref()) {
                    Some(q) => (q.qp, q.psn),
                    None => return Ok(()), // closed meanwhile
                };
                self.rtr(qp, f.qp, false, ik)?;
                self.rts(qp, psn, ik)?;
                let p = self.peers.get_mut(&ik).expect("peer");
                p.qp.as_mut().expect("queue pair").connected = true;
                p.remote_ready = true;
                self.flush(ik)
            }
            Kind::SrqReq => self.mesh.send(
                src,
                &Frame {
                    kind: Kind::SrqNum,
                    code: 0,
                    src: self.rank as u32,
                    value: self.my_srqn as u64,
                    qp: QpInfo::default(),
                },
            ),
            Kind::SrqNum => {
                let n = u32::try_from(f.value)
                    .map_err(|_| Error::Protocol(format!("SRQ number {} from rank {src}", f.value)))?;
                self.srqns.insert(src, n);
                self.flush(self.world + src / self.cfg.ranks_per_node)
            }
            Kind::Hello | Kind::Done => Ok(()),
        }
    }

    /// XRC: the INI QP toward node `node` (the engine's endpoint), connected through the
    /// node's first rank, which creates the TGT QP.
    fn open_xrc(&mut self, node: usize) -> Result<()> {
        let leader = node * self.cfg.ranks_per_node;
        if leader >= self.world {
            return Err(Error::InvalidRank {
                rank: leader,
                world_size: self.world,
            });
        }
        let ik = self.world + node;
        if self.peers.get(&ik).is_some_and(|p| p.qp.is_some()) {
            return Err(Error::Protocol(format!(
                "XRC endpoint to node {node} opened twice"
            )));
        }
        let (qp, inline) =
            match xrc::create_ini(self.dev.ctx, self.dev.pd, self.cq.0, self.sq_depth, INLINE_BYTES) {
                Ok(x) => x,
                Err(_) => xrc::create_ini(self.dev.ctx, self.dev.pd, self.cq.0, self.sq_depth, 0)?,
            };
        self.max_inline = inline;
        let psn = self.next_psn();
        let q = Qp {
            qp,
            rq: None,
            psn,
            connected: false,
            outstanding: 0,
        };
        self.init(qp, ik)?;
        self.bytes.endpoint_bytes += self.model.endpoint_fixed_bytes;
        // SAFETY: qp is live.
        let qpn = unsafe { (*qp).qp_num };
        self.qpn_peer.insert(qpn, ik);
        let p = self.peers.entry(ik).or_default();
        p.qp = Some(q);
        p.remote_ready = false;
        p.broken = false;
        let info = QpInfo {
            qpn,
            psn,
            lid: self.dev.lid,
            gid: self.dev.gid,
        };
        self.mesh.send(
            leader,
            &Frame {
                kind: Kind::XrcConnect,
                code: 0,
                src: self.rank as u32,
                value: node as u64,
                qp: info,
            },
        )
    }

    /// Rank `r` died (its control connection ended early): its queue pair goes to the error
    /// state, so that the device flushes every send still posted to it (their completions,
    /// with IBV_WC_WR_FLUSH_ERR, return the pool buffers at the next polls instead of waiting
    /// for the transport's retries, which soft-RoCE may never give up), and the sends queued
    /// behind it return their buffers now.
    fn peer_died(&mut self, r: usize, on_event: &mut dyn FnMut(Event<'_>) -> Result<()>) -> Result<()> {
        let Some(p) = self.peers.get_mut(&r) else {
            return Ok(());
        };
        p.broken = true;
        for q in std::mem::take(&mut p.queued) {
            on_event(Event::SendComplete(q.wr_id))?;
        }
        if let Some(q) = p.qp.as_ref() {
            let qp = q.qp;
            // SAFETY: plain-data struct; zero is valid for the fields not set.
            let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
            a.qp_state = ibv_qp_state::IBV_QPS_ERR;
            self.modify(qp, &mut a, ibv_qp_attr_mask::IBV_QP_STATE.0, "ERR", r)?;
        }
        Ok(())
    }

    fn poll_cq(&mut self, on_event: &mut dyn FnMut(Event<'_>) -> Result<()>) -> Result<usize> {
        let mut n = 0;
        // Left uninitialised: zeroing 32 entries (1.5 KiB) on every poll, idle ones included,
        // cost measurable time under TCG; ibv_poll_cq writes the entries it returns.
        let mut wcs = [const { std::mem::MaybeUninit::<ibv_wc>::uninit() }; POLL_BATCH];
        let mut touched = std::mem::take(&mut self.touched);
        touched.clear();
        while n < POLL_MAX {
            // SAFETY: cq is live; wcs has room for POLL_BATCH entries (MaybeUninit<ibv_wc> has
            // ibv_wc's layout).
            let got = unsafe { ibv_poll_cq(self.cq.0, POLL_BATCH as i32, wcs.as_mut_ptr().cast::<ibv_wc>()) };
            if got < 0 {
                return Err(Error::Verbs(format!(
                    "rank {}: ibv_poll_cq failed ({got})",
                    self.rank
                )));
            }
            // SAFETY: ibv_poll_cq initialised the first `got` (0..=POLL_BATCH) entries.
            let done: &[ibv_wc] =
                unsafe { std::slice::from_raw_parts(wcs.as_ptr().cast::<ibv_wc>(), got as usize) };
            super::counters::bump(&super::counters::CQ_POLLS, 1);
            if got > 0 {
                super::counters::bump(&super::counters::CQES, got as u64);
                if super::counters::tracing() && done.iter().any(|w| w.wr_id & RECV_BIT != 0) {
                    super::counters::traced_recv();
                    super::counters::polled_receive();
                }
            } else {
                super::counters::polled_empty();
            }
            for wc in done {
                n += 1;
                let ok = wc.status == ibv_wc_status::IBV_WC_SUCCESS;
                // The peer is looked up only where needed (not for a good SRQ receive).
                let peer_of = |f: &Self| f.qpn_peer.get(&wc.qp_num).copied();
                if wc.wr_id & RECV_BIT != 0 {
                    if !ok {
                        let peer = peer_of(self);
                        // Flushed receives of a QP being destroyed (per-peer): nothing to do.
                        if wc.status != ibv_wc_status::IBV_WC_WR_FLUSH_ERR && self.pending_err.is_none() {
                            self.pending_err = Some(Error::Verbs(format!(
                                "rank {}: receive from rank {peer:?} failed: {}",
                                self.rank,
                                status_str(wc.status)
                            )));
                        }
                        continue;
                    }
                    let slot = (wc.wr_id & !RECV_BIT) as usize;
                    let (slots, qp, srq) = match &self.srq {
                        Some(s) => (&s.slots, std::ptr::null_mut(), s.srq),
                        None => {
                            let q = peer_of(self)
                                .and_then(|p| self.peers.get(&p))
                                .and_then(|p| p.qp.as_ref())
                                .ok_or_else(|| {
                                    Error::Protocol(format!("receive completion on unknown QP {}", wc.qp_num))
                                })?;
                            (
                                q.rq.as_ref().expect("per-peer receive queue"),
                                q.qp,
                                std::ptr::null_mut(),
                            )
                        }
                    };
                    let len = wc.byte_len as usize;
                    if len < HEADER_BYTES || slot >= slots.count {
                        return Err(Error::Protocol(format!(
                            "packet of {len} bytes in receive slot {slot}"
                        )));
                    }
                    let bytes = slots.get(slot, len);
                    // (Bytes 29..32 are zero on this fabric: ignored, see `wire`.)
                    let h = wire::decode_header(bytes.first_chunk().expect("checked above")).0;
                    if HEADER_BYTES + h.len as usize != len {
                        return Err(Error::Protocol(format!(
                            "packet of {len} bytes announces {} payload bytes",
                            h.len
                        )));
                    }
                    let t = super::counters::trace_start();
                    on_event(Event::Arrival(h, &bytes[HEADER_BYTES..]))?;
                    super::counters::traced_arrival(t);
                    super::counters::stamp(1);
                    if srq.is_null() {
                        post_recv_wr(slots, slot, qp, srq)?;
                    } else {
                        // Reposted once the reply is posted (see `srq_reposts`).
                        self.srq_reposts.push(slot);
                    }
                    super::counters::stamp(2);
                    if wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0 {
                        // SAFETY: with IBV_WC_WITH_IMM set, the union holds the immediate data.
                        let credits = u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data });
                        on_event(Event::Control(h.src as usize, Control::Grant { credits }))?;
                    }
                } else {
                    let peer = peer_of(self);
                    if let Some(q) = peer
                        .and_then(|p| self.peers.get_mut(&p))
                        .and_then(|p| p.qp.as_mut())
                    {
                        q.outstanding = q.outstanding.saturating_sub(1);
                    }
                    // The buffer goes back to the pool whatever the status.
                    on_event(Event::SendComplete(wc.wr_id))?;
                    if !ok && self.pending_err.is_none() {
                        let who = peer.map_or_else(|| "an unknown rank".to_string(), |p| self.who(p));
                        self.pending_err = Some(Error::Verbs(format!(
                            "rank {}: send to {who} failed: {} (the peer died or its queue pair broke)",
                            self.rank,
                            status_str(wc.status)
                        )));
                    }
                    if !ok {
                        // The queue pair is in the error state: sends still queued behind it
                        // would never complete, so their buffers go back to the pool now.
                        if let Some(pe) = peer.and_then(|p| self.peers.get_mut(&p)) {
                            pe.broken = true;
                            for q in std::mem::take(&mut pe.queued) {
                                on_event(Event::SendComplete(q.wr_id))?;
                            }
                        }
                    } else if let Some(p) = peer {
                        touched.push(p);
                    }
                }
            }
            if (got as usize) < POLL_BATCH {
                break;
            }
        }
        touched.sort_unstable();
        touched.dedup();
        for &p in &touched {
            self.flush(p)?;
        }
        self.touched = touched;
        Ok(n)
    }
}

fn status_str(s: ibv_wc_status::Type) -> String {
    // SAFETY: ibv_wc_status_str returns a static NUL-terminated string for any value.
    let c = unsafe { std::ffi::CStr::from_ptr(ibv_wc_status_str(s)) };
    format!("{} (status {s})", c.to_string_lossy())
}

impl Register for VerbsFabric {
    fn register(&mut self, region: &[u8], _lock: bool) -> Result<Registration> {
        let first = self.headers.is_none();
        let mut more = region.len() as u64;
        if first {
            more += (self.header_slots * HEADER_BYTES) as u64;
            if self.requested != RecvSharing::PerPeer {
                more += (self.cfg.srq_depth * self.slot_bytes()) as u64;
            }
        }
        self.check_memlock(more)?;
        let mr = Mr::register(self.dev.pd, region)?;
        self.pinned += region.len() as u64;
        self.pool_mrs.push(mr);
        if first {
            let h = Slots::new(self.dev.pd, self.header_slots, HEADER_BYTES)?;
            self.pinned += h.mem.len() as u64;
            self.headers = Some(h);
        }
        // Registration pins the pages: they are locked whatever `lock_pool` says.
        Ok(Registration {
            bytes: region.len() as u64,
            locked_bytes: region.len() as u64,
            note: None,
            lock: Default::default(),
        })
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
        self.sharing = sharing;
        let note = (self.requested == RecvSharing::Xrc && sharing != RecvSharing::Xrc).then(|| {
            format!("device {} does not support XRC (IBV_DEVICE_XRC not in device_cap_flags): recv_sharing=xrc falls back to shared", self.dev.caps.name)
        });
        if sharing == RecvSharing::PerPeer {
            return Ok(note);
        }
        if !self.dev.caps.srq {
            return Err(Error::Verbs(format!(
                "device {} has no shared receive queues (max_srq 0): use BALLAST_RECV_SHARING=per-peer",
                self.dev.caps.name
            )));
        }
        let depth = self.cfg.srq_depth;
        if depth as u32 > self.dev.caps.max_srq_wr {
            return Err(Error::Verbs(format!(
                "BALLAST_SRQ_DEPTH={depth} exceeds the device's max_srq_wr {}",
                self.dev.caps.max_srq_wr
            )));
        }
        let bytes = (depth * self.slot_bytes()) as u64;
        self.check_memlock(bytes)?;
        let srq = if sharing == RecvSharing::Xrc {
            // One domain per node, through a file named after the job and the node.
            let dir = if std::path::Path::new("/dev/shm").is_dir() {
                "/dev/shm"
            } else {
                "/tmp"
            };
            let node = self.rank / self.cfg.ranks_per_node;
            let path =
                std::path::PathBuf::from(format!("{dir}/ballast-xrcd-{}-node{node}", self.mesh.job_tag()));
            let xrcd = xrc::Xrcd::open(self.dev.ctx, &path)?;
            let (srq, num) = xrc::create_srq(self.dev.ctx, self.dev.pd, &xrcd, self.cq.0, depth as u32)?;
            self.xrcd = Some(xrcd);
            self.my_srqn = num;
            srq
        } else {
            // SAFETY: plain-data struct; zero is valid for the fields not set.
            let mut init: ibv_srq_init_attr = unsafe { std::mem::zeroed() };
            init.attr.max_wr = depth as u32;
            init.attr.max_sge = 1;
            // SAFETY: pd is live; the SRQ is destroyed in Srq::drop.
            let srq = unsafe { ibv_create_srq(self.dev.pd, &mut init) };
            if srq.is_null() {
                return Err(verr(format!(
                    "ibv_create_srq({depth} entries) on {}",
                    self.dev.caps.name
                )));
            }
            srq
        };
        let slots = match Slots::new(self.dev.pd, depth, self.slot_bytes()) {
            Ok(s) => s,
            Err(e) => {
                // SAFETY: created just above, destroyed once.
                unsafe { ibv_destroy_srq(srq) };
                return Err(e);
            }
        };
        let s = Srq { srq, slots };
        for i in 0..depth {
            post_recv_wr(&s.slots, i, std::ptr::null_mut(), s.srq)?;
        }
        self.srq = Some(s);
        self.pinned += bytes;
        let b = self.cfg.buffer_size as u64;
        self.bytes.srq_bytes += self.model.srq_fixed_bytes + depth as u64 * (b + self.model.srq_wqe_bytes);
        self.bytes.recv_registered_bytes += depth as u64 * b;
        self.bytes.recv_locked_bytes += depth as u64 * b;
        Ok(note)
    }

    fn open_endpoint(&mut self, key: usize) -> Result<()> {
        if self.sharing == RecvSharing::Xrc {
            return self.open_xrc(key);
        }
        if key >= self.world || key == self.rank {
            return Err(Error::InvalidRank {
                rank: key,
                world_size: self.world,
            });
        }
        if self.peers.get(&key).is_some_and(|p| p.qp.is_some()) {
            return Err(Error::Protocol(format!("endpoint {key} opened twice")));
        }
        let per_peer = self.sharing == RecvSharing::PerPeer;
        let depth = self.cfg.recv_depth;
        if per_peer {
            let live = self.peers.values().filter(|p| p.qp.is_some()).count() + 1;
            if live * depth + self.header_slots > self.cq_entries as usize {
                return Err(Error::Verbs(format!(
                    "{live} queue pairs x {depth} receives + {} sends exceed the completion queue ({} entries, device max_cqe {}): lower BALLAST_RECV_DEPTH or set BALLAST_MAX_ENDPOINTS",
                    self.header_slots, self.cq_entries, self.dev.caps.max_cqe
                )));
            }
            self.check_memlock((depth * self.slot_bytes()) as u64)?;
        }
        let mut qp = self.create_qp(INLINE_BYTES);
        if qp.is_null() {
            qp = self.create_qp(0);
        }
        if qp.is_null() {
            return Err(verr(format!(
                "rank {}: ibv_create_qp toward rank {key} on {}",
                self.rank, self.dev.caps.name
            )));
        }
        let psn = self.next_psn();
        let mut q = Qp {
            qp,
            rq: None,
            psn,
            connected: false,
            outstanding: 0,
        };
        // SAFETY: plain-data struct; zero is valid for the fields not set.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = self.dev.caps.port;
        a.qp_access_flags = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        use ibv_qp_attr_mask as M;
        self.modify(
            qp,
            &mut a,
            M::IBV_QP_STATE.0 | M::IBV_QP_PKEY_INDEX.0 | M::IBV_QP_PORT.0 | M::IBV_QP_ACCESS_FLAGS.0,
            "INIT",
            key,
        )?;
        let b = self.cfg.buffer_size as u64;
        if per_peer {
            // Receives are posted now, in INIT, before the QP can reach RTR.
            let slots = Slots::new(self.dev.pd, depth, self.slot_bytes())?;
            for i in 0..depth {
                post_recv_wr(&slots, i, qp, std::ptr::null_mut())?;
            }
            self.pinned += slots.mem.len() as u64;
            q.rq = Some(slots);
            self.bytes.endpoint_bytes +=
                self.model.rq_fixed_bytes + depth as u64 * (b + self.model.rq_wqe_bytes);
            self.bytes.recv_registered_bytes += depth as u64 * b;
            self.bytes.recv_locked_bytes += depth as u64 * b;
        }
        self.bytes.endpoint_bytes += self.model.endpoint_fixed_bytes;
        // SAFETY: qp is live.
        self.qpn_peer.insert(unsafe { (*qp).qp_num }, key);
        let p = self.peers.entry(key).or_default();
        p.qp = Some(q);
        p.remote_ready = false;
        p.broken = false;
        if let Some(remote) = p.pending.take() {
            self.connect(key, remote)?;
        }
        Ok(())
    }

    fn close_endpoint(&mut self, key: usize) -> Result<()> {
        let key = self.ep_key(key);
        let p = self
            .peers
            .get_mut(&key)
            .ok_or_else(|| Error::Protocol(format!("closing unknown endpoint {key}")))?;
        let q =
            p.qp.take()
                .ok_or_else(|| Error::Protocol(format!("closing unknown endpoint {key}")))?;
        p.remote_ready = false;
        p.queued.clear();
        p.grant_stash = 0;
        // SAFETY: the QP is live until `q` drops below.
        self.qpn_peer.remove(&unsafe { (*q.qp).qp_num });
        self.bytes.endpoint_bytes -= self.model.endpoint_fixed_bytes;
        if let Some(rq) = &q.rq {
            let b = self.cfg.buffer_size as u64;
            let d = rq.count as u64;
            self.bytes.endpoint_bytes -= self.model.rq_fixed_bytes + d * (b + self.model.rq_wqe_bytes);
            self.bytes.recv_registered_bytes -= d * b;
            self.bytes.recv_locked_bytes -= d * b;
            self.pinned -= rq.mem.len() as u64;
        }
        drop(q); // destroys the QP, then deregisters and frees its receive buffers
        Ok(())
    }

    fn post_send(
        &mut self,
        dest: usize,
        key: usize,
        header: &PacketHeader,
        payload: &[u8],
        wr_id: u64,
    ) -> Result<()> {
        super::counters::traced_send_entry();
        super::counters::stamp(7);
        if self.sharing != RecvSharing::Xrc && dest != key {
            return Err(Error::Protocol(format!(
                "verbs endpoints are per rank (dest {dest}, key {key})"
            )));
        }
        let key = self.ep_key(key);
        let headers = self
            .headers
            .as_mut()
            .ok_or_else(|| Error::Protocol("send before the pool was registered".into()))?;
        let slot = wr_id as usize;
        if slot >= headers.count {
            return Err(Error::Protocol(format!(
                "send id {wr_id} beyond the {} header slots",
                headers.count
            )));
        }
        headers.mem.as_mut_slice()[slot * HEADER_BYTES..(slot + 1) * HEADER_BYTES]
            .copy_from_slice(&wire::encode_header(header, wire::HeaderExtra::DATA));
        let p = payload.as_ptr() as usize;
        let lkey = if payload.is_empty() {
            0
        } else {
            self.pool_mrs
                .iter()
                .find(|m| m.contains(p, payload.len()))
                .map(|m| m.lkey())
                .ok_or_else(|| {
                    Error::Protocol(
                        "send payload outside the registered pool (user buffers are never registered)".into(),
                    )
                })?
        };
        let peer = self
            .peers
            .get_mut(&key)
            .ok_or_else(|| Error::Protocol(format!("send on unknown endpoint {key}")))?;
        if peer.broken {
            // Completed (failed) at the next poll, which returns the buffer; the error
            // comes at the poll after it.
            self.failed_sends.push(wr_id);
            self.pending_err.get_or_insert(Error::Verbs(format!(
                "rank {}: the queue pair toward rank {key} broke (an earlier send failed)",
                self.rank
            )));
            return Ok(());
        }
        let mut grant = std::mem::take(&mut peer.grant_stash);
        if grant > 0 {
            peer.wants_credit = false;
        }
        if key == dest {
            let q = Queued {
                wr_id,
                payload: p as u64,
                len: payload.len() as u32,
                lkey,
                grant,
                dest: dest as u32,
            };
            // Nothing queued before it, the peer ready and room in the send queue (the
            // common case): posted at once, without a trip through the queue or another
            // look-up of the peer.
            if peer.queued.is_empty() && peer.remote_ready {
                if let Some(qp) = peer
                    .qp
                    .as_mut()
                    .filter(|qp| qp.connected && qp.outstanding < self.sq_depth)
                {
                    qp.outstanding += 1;
                    let raw = qp.qp;
                    let posted = self.post_wr(raw, key, q);
                    if posted.is_err() {
                        if let Some(qp) = self.peers.get_mut(&key).and_then(|p| p.qp.as_mut()) {
                            qp.outstanding -= 1;
                        }
                    }
                    posted?;
                    return self.repost_srq();
                }
            }
            peer.queued.push_back(q);
            self.flush(key)?;
            return self.repost_srq();
        }
        // XRC: the endpoint is the node's INI QP; grants are held per rank.
        if let Some(d) = self.peers.get_mut(&dest) {
            grant = std::mem::take(&mut d.grant_stash);
            if grant > 0 {
                d.wants_credit = false;
            }
        }
        let peer = self.peers.get_mut(&key).expect("endpoint");
        peer.queued.push_back(Queued {
            wr_id,
            payload: p as u64,
            len: payload.len() as u32,
            lkey,
            grant,
            dest: dest as u32,
        });
        self.flush(key)
    }

    fn send_control(&mut self, dest: usize, msg: Control) -> Result<()> {
        if dest >= self.world {
            return Err(Error::InvalidRank {
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
        // Keep the engine's order: grants decided before this message leave before it.
        self.flush_grant(dest)?;
        let (code, value) = msg.encode();
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

    fn poll(&mut self, on_event: &mut dyn FnMut(Event<'_>) -> Result<()>) -> Result<usize> {
        if let Some(e) = self.pending_err.take() {
            return Err(e);
        }
        self.polls = self.polls.wrapping_add(1);
        super::counters::bump(&super::counters::POLLS, 1);
        self.repost_srq()?;
        for w in std::mem::take(&mut self.failed_sends) {
            on_event(Event::SendComplete(w))?;
        }
        // Grants that found no packet to ride on for GRANT_HOLD_POLLS calls (or that their
        // rank asked for) go on the control channel.
        if !self.stashed.is_empty() {
            let mut i = 0;
            while i < self.stashed.len() {
                let k = self.stashed[i];
                let (stash, since, wants) = self
                    .peers
                    .get(&k)
                    .map_or((0, 0, false), |p| (p.grant_stash, p.grant_since, p.wants_credit));
                if stash == 0 {
                    self.stashed.swap_remove(i);
                } else if wants || self.polls.wrapping_sub(since) >= GRANT_HOLD_POLLS {
                    self.stashed.swap_remove(i);
                    self.flush_grant(k)?;
                } else {
                    i += 1;
                }
            }
        }
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        if self.mesh.due() {
            super::counters::bump(&super::counters::MESH_READS, 1);
            if let Err(e) = self.mesh.poll(&mut frames) {
                for r in self.mesh.take_dead() {
                    self.peer_died(r, on_event)?;
                }
                return Err(e);
            }
        }
        let mut n = frames.len();
        for f in frames.drain(..) {
            self.on_frame(f, on_event)?;
        }
        self.frames = frames;
        n += self.poll_cq(on_event)?;
        super::counters::traced_poll_end();
        super::counters::stamp(3);
        Ok(n)
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let b: [u8; HEADER_BYTES] = wire::encode_header(&h, wire::HeaderExtra::DATA);
        assert_eq!(&b[28..], &[1, 0, 0, 0]);
        assert_eq!(wire::decode_header(&b).0, h);
    }
}
