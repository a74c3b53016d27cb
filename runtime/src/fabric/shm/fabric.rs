//! [`ShmFabric`]: one rank's side of the shared-memory transport. Its segment holds its
//! data ring (the shared receive queue: every peer's packets) and its control ring; a
//! thread of its own hands the segment's descriptor to each peer that connects and watches
//! for dead ranks ([`super::watch`]). A peer's segment is mapped the first time this rank
//! sends to it, and stays mapped. The job's board gives every rank's bell and end.
//!
//! A send copies the pool buffer into a cell of the receiver's data ring
//! ([`Fabric::copies_payload`]: no completion event); the engine's credits guarantee the
//! cell. A control message goes into the receiver's control ring, or, while that ring is
//! full, waits in this rank's queue, pushed again at each poll (never waiting for room: two
//! ranks whose rings are full cannot wait on each other). A message above the direct
//! threshold goes by CMA ([`super::direct`]: a descriptor in the control ring, one
//! `process_vm_readv` by the receiver) when the system allows it.

use std::collections::VecDeque;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::board::{Board, FAILED, FINISHED};
use super::direct::{Direct, Held, Out, KIND_DIRECT, KIND_DIRECT_DONE};
use super::rendezvous::{fetch, socket_name, Listener};
use super::ring::{Cell, Reader, Ring, RingError};
use super::segment::{RankSegment, SEG_HEAD};
use super::watch::{Serve, Watch};
use crate::core::backoff::Backoff;
use crate::core::config::{RecvSharing, ShmConfig, TransportConfig};
use crate::core::footprint::MemoryModel;
use crate::core::intmap::IntMap;
use crate::core::pool::{Register, Registration};
use crate::fabric::error::{FabricError, Result};
use crate::fabric::{
    go, poll_result, Capabilities, Control, DirectPath, Event, Fabric, FabricBytes, Flow, Halt, OthersEnd,
    PacketHeader, PeerEnd, PeerKey, RemoteRead,
};

mod cma;
use cma::CmaRead;

/// Cells handled per [`Fabric::poll`] call at most, per ring.
const POLL_BATCH: usize = 256;
/// Cells of a rank's control ring (64 bytes each).
pub(crate) const CONTROL_DEPTH: usize = crate::fabric::sizes::SHM_CONTROL_DEPTH as usize;
/// A cell's kind: a data packet.
const KIND_PACKET: u8 = 1;
/// A cell's kind: a control message (its code in `tag`, its value in `total`).
const KIND_CONTROL: u8 = 2;

/// What the ranks of one job share: its name (for the sockets), its board, how long a
/// rendezvous may wait, and the launcher's stop (ranks as threads of one process).
#[derive(Clone)]
pub(crate) struct Job {
    /// The job's identity in socket names.
    pub name: String,
    /// The board, mapped.
    pub board: Arc<Board>,
    /// How long to wait for a peer to listen.
    pub timeout: Duration,
    /// Set by the launcher when a rank of this process failed.
    pub stop: Arc<AtomicBool>,
}

/// An event taken while the poll was stopped ([`DirectPath::send_direct`]), given later.
enum Deferred {
    Control(usize, Control),
    Sent(u64),
}

/// A peer's mapped segment (the connection that gave it is closed: deaths are watched
/// through the board's connections, [`super::watch`]).
struct Peer {
    seg: RankSegment,
}

/// The sizes of the structures this fabric allocates (see [`MemoryModel`]): its side only,
/// the engine adds its own. Its one receive queue is the segment, which `predict` charges
/// whole from the configuration (`fabric::sizes::shm_segment_bytes`); here its fixed part
/// and a cell's head (a buffer size that is a multiple of 64 has no rounding).
pub(crate) fn memory_model() -> MemoryModel {
    let fixed =
        (SEG_HEAD + super::ring::RING_HEAD) as u64 + Ring::bytes(CONTROL_DEPTH, 0).unwrap_or(0) as u64;
    MemoryModel {
        endpoint_fixed_bytes: (std::mem::size_of::<Peer>() + std::mem::size_of::<usize>()) as u64,
        engine_endpoint_bytes: 0,
        rq_fixed_bytes: fixed,
        rq_wqe_bytes: super::ring::CELL_HEAD as u64,
        srq_fixed_bytes: fixed,
        srq_wqe_bytes: super::ring::CELL_HEAD as u64,
        control_fixed_bytes: (std::mem::size_of::<ShmFabric>() + super::board::PER_RANK) as u64,
        per_peer_control_bytes: 0,
    }
}

/// The shared-memory fabric of one rank.
pub struct ShmFabric {
    rank: usize,
    world: usize,
    job: Job,
    own: RankSegment,
    data: Reader,
    control: Reader,
    peers: IntMap<usize, Peer>,
    /// Control cells waiting for room in their receiver's control ring, in order.
    pending: VecDeque<(usize, Cell)>,
    /// Direct messages (CMA).
    direct: Direct,
    /// Events a blocking direct send took while its caller's poll was stopped, given first
    /// at the next poll.
    deferred: VecDeque<Deferred>,
    /// The blocking direct send waiting for its answer ([`DirectPath::send_direct`]): once
    /// answered, its poll leaves the next descriptor for the caller's own poll, whose
    /// receive may lend the buffer to read it into.
    sending: Option<u32>,
    _watch: Watch,
    bytes: FabricBytes,
    model: MemoryModel,
    /// The engine said this rank finished ([`Fabric::mark_done`]).
    marked_done: bool,
    /// ... and the board says so: once the control messages waiting for room are pushed
    /// (everything this rank sent is in its receivers' rings first, `peer_end`).
    finished: bool,
    notice_seen: bool,
}

impl ShmFabric {
    /// Rank `rank`'s fabric in a world of `world` ranks of `job`: its segment made (rings
    /// for `cfg`, never locked), its socket listening, its thread serving it and
    /// `serves` (the board's socket, on the first rank of a job of processes) and watching
    /// `watched` (connections to peers and their ranks). Errors: [`FabricError::Shm`] (the
    /// segment cannot be had, the socket name is taken).
    pub(crate) fn new(
        rank: usize,
        world: usize,
        cfg: &TransportConfig,
        shm: &ShmConfig,
        job: Job,
        mut serves: Vec<Serve>,
        watched: Vec<(UnixStream, u64)>,
    ) -> Result<ShmFabric> {
        let err = |what: String| FabricError::Shm {
            rank,
            peer: None,
            what,
        };
        let depth = crate::fabric::sizes::shm_data_depth(cfg, world) as usize;
        let mut own = RankSegment::create(
            &format!("ballast-shm-{rank}"),
            rank,
            depth,
            cfg.buffer_size,
            CONTROL_DEPTH,
        )
        .map_err(|e| {
            err(format!(
                "its segment ({depth} cells of {} bytes): {e}",
                cfg.buffer_size
            ))
        })?;
        let name = socket_name(&job.name, rank).map_err(|e| err(e.to_string()))?;
        let listener = Listener::bind(&name).map_err(|e| err(format!("listening on `{name}`: {e}")))?;
        let fd = own
            .seg
            .take_fd()
            .ok_or_else(|| err("its segment has no descriptor".into()))?;
        serves.insert(
            0,
            Serve {
                listener,
                fd,
                keep: false,
            },
        );
        let watch = Watch::start(rank, job.board.clone(), serves, watched)
            .map_err(|e| err(format!("starting its rendezvous thread: {e}")))?;
        job.board.set_pid(rank, std::process::id());
        let model = memory_model();
        // Never locked (nor the pool, `register`): `lock_pool` models RDMA registration on
        // `local`; no adapter reads shared memory, and pages never written stay off the
        // node's memory, as vader's and nemesis' do (issue 36's node memory).
        let bytes = FabricBytes {
            srq_bytes: own.seg.len() as u64,
            recv_registered_bytes: own.seg.len() as u64,
            shm_segment_bytes: own.seg.len() as u64,
            ..FabricBytes::default()
        };
        Ok(ShmFabric {
            rank,
            world,
            data: Reader::new(own.data),
            control: Reader::new(own.control),
            own,
            job,
            peers: IntMap::default(),
            pending: VecDeque::new(),
            direct: Direct::setup(shm.cma, cfg.buffer_size),
            deferred: VecDeque::new(),
            sending: None,
            _watch: watch,
            bytes,
            model,
            marked_done: false,
            finished: false,
            notice_seen: false,
        })
    }

    fn shm_err(&self, peer: Option<usize>, what: String) -> FabricError {
        FabricError::Shm {
            rank: self.rank,
            peer,
            what,
        }
    }

    /// Rank `dest`'s segment: this rank's own, or the peer's, fetched and mapped the first
    /// time.
    fn target(&mut self, dest: usize) -> Result<&RankSegment> {
        if dest == self.rank {
            return Ok(&self.own);
        }
        if dest >= self.world {
            return Err(FabricError::InvalidRank {
                rank: dest,
                world_size: self.world,
            });
        }
        if !self.peers.contains_key(&dest) {
            let name =
                socket_name(&self.job.name, dest).map_err(|e| self.shm_err(Some(dest), e.to_string()))?;
            let job = self.job.clone();
            let rank = self.rank;
            // A rank that failed never listens again: no waiting for it until the timeout.
            let give_up =
                || job.stop.load(Ordering::Acquire) || job.board.failed().is_some_and(|r| r != rank);
            let (_, fd, _) = match fetch(&name, self.job.timeout, self.rank as u64, &give_up) {
                Ok(got) => got,
                // A peer that failed no longer serves: stop as every rank does then.
                Err(_) if self.aborted() => return Err(FabricError::Aborted),
                Err(e) => {
                    return Err(self.shm_err(Some(dest), format!("fetching its segment from `{name}`: {e}")))
                }
            };
            let seg = RankSegment::open(fd, dest).map_err(|e| self.shm_err(Some(dest), e.to_string()))?;
            self.bytes.shm_peers_mapped += 1;
            self.bytes.shm_mapped_bytes += seg.seg.len() as u64;
            self.peers.insert(dest, Peer { seg });
        }
        Ok(&self.peers[&dest].seg)
    }

    /// Marks this rank finished on the board once the engine said so and no control
    /// message waits.
    fn finish_when_flushed(&mut self) {
        if self.marked_done && !self.finished && self.pending.is_empty() {
            self.finished = true;
            self.job.board.finish(self.rank);
        }
    }

    /// Pushes the waiting control messages, in order, until one finds its ring full.
    fn flush_controls(&mut self) -> Result<()> {
        while let Some(&(dest, cell)) = self.pending.front() {
            if !self.push_control(dest, cell)? {
                break;
            }
            self.pending.pop_front();
        }
        Ok(())
    }

    /// A control cell to `dest`: into its control ring, or, while that is full or others
    /// wait, into this rank's queue (in order).
    fn queue_control(&mut self, dest: usize, cell: Cell) -> Result<()> {
        if self.pending.is_empty() && self.push_control(dest, cell)? {
            return Ok(());
        }
        self.pending.push_back((dest, cell));
        Ok(())
    }

    /// One control cell into rank `dest`'s control ring: false when it is full.
    fn push_control(&mut self, dest: usize, cell: Cell) -> Result<bool> {
        let t = self.target(dest)?;
        match t.control.push(&t.seg, cell, &[]) {
            Ok(()) => {}
            Err(RingError::Full) => return Ok(false),
            Err(e) => return Err(self.shm_err(Some(dest), format!("its control ring: {e:?}"))),
        }
        self.job.board.ring(dest);
        Ok(true)
    }

    /// A packet into rank `dest`'s data ring (the engine's credits guarantee the cell).
    fn push_packet(&mut self, dest: usize, cell: Cell, payload: &[u8]) -> Result<()> {
        let t = self.target(dest)?;
        match t.data.push(&t.seg, cell, payload) {
            Ok(()) => {}
            Err(RingError::Full) => return Err(FabricError::ReceiverNotReady { dest }),
            Err(e) => return Err(self.shm_err(Some(dest), format!("its data ring: {e:?}"))),
        }
        self.job.board.ring(dest);
        Ok(())
    }

    fn bad(&self, what: String) -> FabricError {
        self.shm_err(None, what)
    }

    /// Up to `max` packets of the data ring, each given to `on_event`; a packet whose event
    /// stops the poll stays in the ring, first at the next poll. The number given.
    fn drain_data(
        &mut self,
        on_event: &mut dyn FnMut(Event<'_>) -> Flow,
        max: usize,
    ) -> std::result::Result<usize, Halt> {
        let mut n = 0;
        for _ in 0..max {
            let Some((c, payload)) = self
                .data
                .peek(&self.own.seg)
                .map_err(|e| self.bad(format!("{e:?}")))?
            else {
                break;
            };
            if c.kind != KIND_PACKET || c.src as usize >= self.world {
                return Err(self
                    .bad(format!("a data cell of kind {} from rank {}", c.kind, c.src))
                    .into());
            }
            let header = PacketHeader {
                src: c.src,
                tag: c.tag,
                total: c.total,
                offset: c.offset,
                len: c.len,
                more: c.more,
            };
            go(on_event(Event::Arrival { header, payload }))?;
            self.data
                .advance(&self.own.seg)
                .map_err(|e| self.bad(format!("{e:?}")))?;
            n += 1;
        }
        Ok(n)
    }

    /// [`Fabric::poll`]'s work: the abort notice, the waiting controls, then the data and
    /// control rings. A data cell whose event stops the poll stays in the ring, first at
    /// the next poll.
    fn poll_events(
        &mut self,
        on_event: &mut dyn FnMut(Event<'_>) -> Flow,
    ) -> std::result::Result<usize, Halt> {
        let mut n = 0;
        if !self.notice_seen {
            if let Some((by, code)) = self.job.board.notice().filter(|&(by, _)| by < self.world) {
                if by != self.rank {
                    go(on_event(Event::Control {
                        src: by,
                        msg: Control::Abort { code },
                    }))?;
                    n += 1;
                }
                self.notice_seen = true;
            }
        }
        if !self.pending.is_empty() {
            self.flush_controls()?;
            self.finish_when_flushed();
        }
        // What a blocking direct send took while its caller's poll was stopped.
        while let Some(ev) = self.deferred.pop_front() {
            n += 1;
            match ev {
                Deferred::Control(src, msg) => go(on_event(Event::Control { src, msg }))?,
                Deferred::Sent(w) => go(on_event(Event::SendComplete(w)))?,
            }
        }
        n += self.drain_data(on_event, POLL_BATCH)?;
        for _ in 0..POLL_BATCH {
            let Some((c, _)) = self
                .control
                .peek(&self.own.seg)
                .map_err(|e| self.bad(format!("{e:?}")))?
            else {
                break;
            };
            let src = c.src as usize;
            if src >= self.world {
                return Err(self
                    .bad(format!("a control cell of kind {} from rank {src}", c.kind))
                    .into());
            }
            if c.kind == KIND_DIRECT {
                if self.sending.is_some_and(|id| self.direct.is_answered(id)) {
                    // The blocking send polling here is done: this message is for the
                    // receive its caller posts next (read into that buffer, one copy).
                    break;
                }
                // Every earlier packet of its sender has its cell claimed in the data ring
                // (the claims happened before this descriptor was published): those first,
                // waiting for a cell still being written (by any sender).
                let upto = self
                    .data
                    .claimed(&self.own.seg)
                    .map_err(|e| self.bad(format!("{e:?}")))?;
                let mut backoff = Backoff::new();
                while (self.data.position().wrapping_sub(upto) as i64) < 0 {
                    if self.drain_data(on_event, POLL_BATCH)? == 0 {
                        if self.aborted() {
                            return Err(FabricError::Aborted.into());
                        }
                        backoff.snooze();
                    }
                }
                let header = PacketHeader {
                    src: c.src,
                    tag: c.tag,
                    total: c.total,
                    offset: 0,
                    len: 0,
                    more: c.more,
                };
                // The protocol reads it: into the waiting receive's buffer when it binds
                // there (one copy), else into a buffer of its own.
                let mut read = CmaRead::new(&self.job, self.rank, &c);
                let flow = on_event(Event::Remote {
                    header,
                    read: &mut read,
                });
                let outcome = read.outcome();
                self.settle_direct(&c, outcome)?;
                go(flow)?;
                n += 1;
                continue;
            }
            self.control
                .advance(&self.own.seg)
                .map_err(|e| self.bad(format!("{e:?}")))?;
            match c.kind {
                KIND_DIRECT_DONE => self.direct_answered(src, c.tag, on_event)?,
                KIND_CONTROL => {
                    let msg = Control::decode(u8::try_from(c.tag).unwrap_or(u8::MAX), c.total)?;
                    go(on_event(Event::Control { src, msg }))?;
                }
                k => {
                    return Err(self
                        .bad(format!("a control cell of kind {k} from rank {src}"))
                        .into())
                }
            }
            n += 1;
        }
        Ok(n)
    }
}

impl Drop for ShmFabric {
    /// A rank that ends without finishing failed: the others stop waiting for it.
    fn drop(&mut self) {
        if !self.finished {
            self.job.board.fail(self.rank);
        }
    }
}

impl Register for ShmFabric {
    type Error = FabricError;

    fn register(&mut self, region: &[u8], _lock: bool) -> Result<Registration> {
        // Never locked: see `ShmFabric::new`.
        Ok(Registration::unlocked(region.len() as u64))
    }
}

impl Fabric for ShmFabric {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            name: "shm",
            xrc: false,
        }
    }

    /// The rings were made with the fabric; the note says when large messages do not go
    /// by CMA, and why.
    fn setup_receive(&mut self, _sharing: RecvSharing) -> Result<Option<String>> {
        Ok(self.direct.note.clone())
    }

    fn open_endpoint(&mut self, key: PeerKey) -> Result<()> {
        self.target(key.index())?;
        self.bytes.endpoint_bytes += self.model.endpoint_fixed_bytes;
        Ok(())
    }

    /// The peer's mapping stays (a control message may still go to it); its count goes.
    fn close_endpoint(&mut self, _key: PeerKey) -> Result<()> {
        self.bytes.endpoint_bytes = self
            .bytes
            .endpoint_bytes
            .saturating_sub(self.model.endpoint_fixed_bytes);
        Ok(())
    }

    fn post_send(
        &mut self,
        dest: usize,
        _key: PeerKey,
        h: &PacketHeader,
        payload: &[u8],
        _wr_id: u64,
    ) -> Result<()> {
        let cell = Cell {
            src: h.src,
            kind: KIND_PACKET,
            more: h.more,
            tag: h.tag,
            total: h.total,
            offset: h.offset,
            len: 0,
        };
        if self.direct.blocked(dest) {
            // Behind a direct message not read yet: in order, after its answer.
            let mut copy = Vec::new();
            copy.try_reserve_exact(payload.len())
                .map_err(|source| FabricError::MessageAlloc {
                    rank: self.rank,
                    peer: dest,
                    bytes: payload.len() as u64,
                    source,
                })?;
            copy.extend_from_slice(payload);
            self.direct.hold(dest, Held::Packet(cell, copy));
            return Ok(());
        }
        self.push_packet(dest, cell, payload)
    }

    fn send_control(&mut self, dest: usize, msg: Control) -> Result<()> {
        let w = msg.encode();
        let cell = Cell {
            src: self.rank as u32,
            kind: KIND_CONTROL,
            tag: u32::from(w.code),
            total: w.value,
            ..Cell::default()
        };
        self.queue_control(dest, cell)
    }

    fn poll(&mut self, on_event: &mut dyn FnMut(Event<'_>) -> Flow) -> Result<usize> {
        poll_result(self.poll_events(on_event))
    }

    fn bytes(&self) -> FabricBytes {
        self.bytes
    }

    fn memory_model(&self) -> MemoryModel {
        self.model
    }

    fn aborted(&self) -> bool {
        self.job.stop.load(Ordering::Acquire) || self.job.board.failed().is_some_and(|r| r != self.rank)
    }

    /// The board's notice (the first abort wins), then every rank woken.
    fn abort_job(&mut self, code: i32) -> Result<()> {
        self.job.board.abort(self.rank, code);
        Ok(())
    }

    /// On the board at once, or, while control messages wait for room, at the poll that
    /// pushes the last of them (the engine polls until every rank finished).
    fn mark_done(&mut self) {
        self.marked_done = true;
        self.finish_when_flushed();
    }

    fn all_done(&self) -> bool {
        self.job.board.finished() == self.world
    }

    fn peer_end(&self, peer: usize) -> Option<PeerEnd> {
        match self.job.board.state(peer) {
            FINISHED => Some(PeerEnd::Finished),
            FAILED => Some(PeerEnd::Failed),
            _ => None,
        }
    }

    fn others_end(&self) -> Option<OthersEnd> {
        if let Some(rank) = self.job.board.failed().filter(|&r| r != self.rank) {
            return Some(OthersEnd::Failed { rank });
        }
        let others = self
            .job
            .board
            .finished()
            .saturating_sub(usize::from(self.finished));
        (others + 1 >= self.world).then_some(OthersEnd::AllFinished)
    }

    fn blocks_when_idle(&self) -> bool {
        true
    }

    fn direct(&mut self) -> Option<&mut dyn DirectPath> {
        if self.direct.threshold.is_some() {
            Some(self)
        } else {
            None
        }
    }

    fn wait_for_arrival(&self, timeout: Duration) {
        let seg = &self.own.seg;
        self.job.board.sleep(self.rank, timeout, || {
            !self.data.ready(seg)
                && !self.control.ready(seg)
                && self.pending.is_empty()
                && self.deferred.is_empty()
                && !self.aborted()
                && !self.all_done()
                && self.job.board.notice().is_none_or(|_| self.notice_seen)
        });
    }

    fn copies_payload(&self) -> bool {
        true
    }

    /// An equal share of the ring per peer: a grant is a control cell and a bell, which
    /// cost a third of an 8 B round trip when sent for every packet (issue 36's profile).
    fn standing_credits(&self, depth: u32) -> u32 {
        let peers = u32::try_from(self.world.saturating_sub(1).max(1)).unwrap_or(u32::MAX);
        (depth / peers).max(1)
    }
}
