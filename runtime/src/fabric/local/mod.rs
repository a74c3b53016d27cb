//! The in-process transport (`local`, the embedded default): N ranks as threads of one
//! process, started by `launch::threads::run_ranks`. It implements the
//! fabric with real memory: every receive queue (per endpoint in `per-peer` mode, per rank
//! in `shared`/`xrc` mode) is a real region of `depth * buffer_size` bytes with `depth`
//! posted slots, a send copies the pool buffer into a slot posted by the receiver (the
//! "DMA"), and registration locks memory with `mlock` when `lock_pool` is on, so its
//! footprint is measurable.
//!
//! A rank with nothing to do blocks ([`Fabric::wait_for_arrival`]: it parks its thread)
//! and is woken by whatever can give it work: a packet or control message pushed to its
//! port, another rank's failure, the last rank finishing. Ranks may thus far outnumber
//! cores: waiting ones use none.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crossbeam::queue::{ArrayQueue, SegQueue};
use crossbeam::sync::{Parker, Unparker};
use parking_lot::Mutex;

use crate::core::config::{RecvSharing, TransportConfig};
use crate::core::footprint::{MemoryLock, MemoryModel};
use crate::core::memory::{memlock_limit_bytes, AlignedRegion};
use crate::core::pool::{Register, Registration};
use crate::fabric::error::{FabricError, Result};
use crate::fabric::{
    go, poll_result, Capabilities, Control, DatagramPath, Event, Fabric, FabricBytes, Flow, Halt, OthersEnd,
    PacketHeader, PeerEnd, PeerKey,
};

pub(crate) mod drop_model;

/// Arrivals handled per [`Fabric::poll`] call at most.
const POLL_BATCH: usize = 256;

/// Largest datagram of the local fabric, bytes (the datagram path chunks messages to
/// `min(buffer_size, this)` less its header).
pub const DATAGRAM_MTU: usize = 64 << 10;

/// Bytes of one entry of a receive queue's index of posted slots (crossbeam's
/// `ArrayQueue<u32>` slot: a stamp and the index).
const SLOT_BYTES: u64 = std::mem::size_of::<(usize, u32)>() as u64;

/// Address space kept free beside a receive queue's slots when they are checked
/// ([`RecvQueue::new`]): the allocator's own mappings and the rank's other small allocations.
const SLOT_MARGIN_BYTES: u64 = 16 << 20;

/// Held while a receive queue's slots are checked and allocated ([`RecvQueue::new`]).
static QUEUE_ALLOC: Mutex<()> = Mutex::new(());

/// A receive queue: one region of `depth` slots of `buffer_size` bytes, and the indices
/// of the posted (free) slots.
pub(crate) struct RecvQueue {
    // Before `region`: the lock ends before the memory is freed.
    _lock: Option<region::LockGuard>,
    region: Mutex<AlignedRegion>,
    posted: ArrayQueue<u32>,
    buffer_size: usize,
}

impl RecvQueue {
    /// `what` names the queue and its sizing settings in an allocation error.
    fn new(
        depth: usize,
        buffer_size: usize,
        lock: bool,
        what: &str,
    ) -> Result<(Arc<RecvQueue>, Registration)> {
        // One queue at a time from region to slots, so that two ranks connecting at once do
        // not both pass the check on the same room.
        let one_at_a_time = QUEUE_ALLOC.lock();
        let mem = AlignedRegion::new(depth, buffer_size, what)?;
        // crossbeam allocates the queue's slots infallibly: check them, with a margin,
        // against what this process may still map and the machine before it does.
        let slots = (depth as u64).saturating_mul(SLOT_BYTES);
        crate::core::memory::check_room(
            slots.saturating_add(slots / 16 + SLOT_MARGIN_BYTES),
            slots,
            || format!("the slots of {what} ({SLOT_BYTES} bytes per entry)"),
        )?;
        let (guard, reg) = lock_region(mem.as_slice(), lock);
        let posted = ArrayQueue::new(depth);
        drop(one_at_a_time);
        for i in 0..depth as u32 {
            posted.push(i).expect("queue sized to depth");
        }
        Ok((
            Arc::new(RecvQueue {
                _lock: guard,
                region: Mutex::new(mem),
                posted,
                buffer_size,
            }),
            reg,
        ))
    }

    /// Bytes accounted for a queue of `len` buffer bytes and `depth` slots.
    fn accounted(len: usize, depth: usize, m: &MemoryModel) -> u64 {
        m.rq_fixed_bytes + len as u64 + depth as u64 * m.rq_wqe_bytes
    }
}

/// Locks `mem` with mlock if asked; a refusal is recorded in the registration's
/// [`MemoryLock`] (bytes, OS error, the soft RLIMIT_MEMLOCK), not an error.
pub(crate) fn lock_region(mem: &[u8], lock: bool) -> (Option<region::LockGuard>, Registration) {
    let bytes = mem.len() as u64;
    if !lock {
        return (None, Registration::unlocked(bytes));
    }
    let mut outcome = MemoryLock::default();
    match region::lock(mem.as_ptr(), mem.len()) {
        Ok(g) => {
            outcome.record_locked(bytes);
            (
                Some(g),
                Registration {
                    bytes,
                    locked_bytes: bytes,
                    note: None,
                    lock: outcome,
                },
            )
        }
        Err(e) => {
            let errno = match &e {
                region::Error::SystemCall(io) => io.raw_os_error(),
                _ => None,
            };
            outcome.record_refused(bytes, errno, memlock_limit_bytes());
            (
                None,
                Registration {
                    bytes,
                    locked_bytes: 0,
                    note: None,
                    lock: outcome,
                },
            )
        }
    }
}

struct Arrival {
    hdr: PacketHeader,
    rq: Arc<RecvQueue>,
    slot: u32,
}

/// What other ranks can reach of one rank: its arrival and control queues, its receive
/// queues, and the handle that wakes it when it blocks.
pub(crate) struct RankPort {
    data: SegQueue<Arrival>,
    ctrl: SegQueue<(usize, Control)>,
    /// Datagrams to this rank (sender, bytes): the connectionless path. Bounded by the
    /// senders' windows (each keeps at most `datagram::WINDOW` unacknowledged per peer).
    datagrams: SegQueue<(usize, Vec<u8>)>,
    srq: OnceLock<Arc<RecvQueue>>,
    rqs: Mutex<HashMap<usize, Arc<RecvQueue>>>,
    /// Wakes the rank from [`Fabric::wait_for_arrival`]; called after every push to its
    /// queues (one atomic swap when the rank is not blocked; an unpark before the block
    /// makes the block return at once, so no arrival is missed).
    waker: Unparker,
}

/// The ranks of one `launch::threads::run_ranks`.
pub(crate) struct World {
    ports: Vec<RankPort>,
    abort: AtomicBool,
    /// The job's abort (`Fabric::abort_job`): the rank that aborted and its code, given to
    /// every other rank's poll as a [`Control::Abort`] from that rank. One record for the
    /// world rather than a message per rank, so that a rank whose error follows the abort
    /// (and raises `abort`) cannot reach a rank before the notice does.
    notice: OnceLock<(usize, i32)>,
    done: AtomicUsize,
    /// Each rank's [`Fabric::mark_done`], set after everything it sent was delivered.
    finished: Vec<AtomicBool>,
}

impl World {
    /// A world of `n` ranks and the parker of each rank (by rank), to be moved into its
    /// thread.
    pub(crate) fn new(n: usize) -> (World, Vec<Parker>) {
        let parkers: Vec<Parker> = (0..n).map(|_| Parker::new()).collect();
        let world = World {
            ports: parkers
                .iter()
                .map(|p| RankPort {
                    data: SegQueue::new(),
                    ctrl: SegQueue::new(),
                    datagrams: SegQueue::new(),
                    srq: OnceLock::new(),
                    rqs: Mutex::new(HashMap::new()),
                    waker: p.unparker().clone(),
                })
                .collect(),
            abort: AtomicBool::new(false),
            notice: OnceLock::new(),
            done: AtomicUsize::new(0),
            finished: (0..n).map(|_| AtomicBool::new(false)).collect(),
        };
        (world, parkers)
    }

    /// Tells every rank that waiting is pointless, waking those that block.
    pub(crate) fn abort(&self) {
        self.abort.store(true, Ordering::SeqCst);
        self.wake_all();
    }

    fn wake_all(&self) {
        for p in &self.ports {
            p.waker.unpark();
        }
    }
}

/// Fabric-side state of one endpoint.
pub(crate) struct LocalEndpoint {
    own_rq: Option<Arc<RecvQueue>>,
    remote_rq: Option<Arc<RecvQueue>>,
}

/// The in-process fabric of one rank.
pub struct LocalFabric {
    rank: usize,
    world: Arc<World>,
    cfg: TransportConfig,
    sharing: RecvSharing,
    endpoints: HashMap<usize, LocalEndpoint>,
    completions: VecDeque<u64>,
    locks: Vec<region::LockGuard>,
    bytes: FabricBytes,
    model: MemoryModel,
    marked_done: bool,
    /// Blocks this rank's thread in [`Fabric::wait_for_arrival`].
    parker: Parker,
    /// The test drop model (`datagram_drop_every`, `datagram_drop_seed`).
    drops: drop_model::DropModel,
    /// An arrival whose event failed (its message could not be allocated): kept with its
    /// slot, it is delivered first at the next poll, so nothing is lost (the engine's error
    /// repeats until it fits, as on MPI's engine path).
    held: Option<Arrival>,
    /// The world's abort notice was given to this rank's poll (or was its own).
    notice_seen: bool,
}

/// The sizes of the structures this fabric allocates (see [`MemoryModel`]): its side only,
/// the engine adds its own (`protocol::engine::with_engine`).
pub(crate) fn memory_model() -> MemoryModel {
    use std::mem::size_of;
    let arc = 2 * size_of::<usize>() as u64;
    let rq_fixed = size_of::<RecvQueue>() as u64 + arc;
    let wqe = SLOT_BYTES; // ArrayQueue slot: stamp + index
    MemoryModel {
        endpoint_fixed_bytes: size_of::<LocalEndpoint>() as u64 + size_of::<usize>() as u64,
        engine_endpoint_bytes: 0,
        rq_fixed_bytes: rq_fixed,
        rq_wqe_bytes: wqe,
        srq_fixed_bytes: rq_fixed,
        srq_wqe_bytes: wqe,
        control_fixed_bytes: fabric_fixed_bytes(),
        per_peer_control_bytes: 0,
    }
}

/// The per-rank bytes of this fabric's own structures (the fabric and its port), part of
/// `control_fixed_bytes`.
pub(crate) fn fabric_fixed_bytes() -> u64 {
    (std::mem::size_of::<LocalFabric>() + std::mem::size_of::<RankPort>()) as u64
}

impl LocalFabric {
    pub(crate) fn new(rank: usize, world: Arc<World>, cfg: &TransportConfig, parker: Parker) -> LocalFabric {
        LocalFabric {
            rank,
            world,
            cfg: *cfg,
            sharing: cfg.recv_sharing,
            endpoints: HashMap::new(),
            completions: VecDeque::new(),
            locks: Vec::new(),
            bytes: FabricBytes::default(),
            model: memory_model(),
            marked_done: false,
            parker,
            drops: drop_model::DropModel::new(cfg.datagram_drop_every, cfg.datagram_drop_seed, rank),
            held: None,
            notice_seen: false,
        }
    }

    fn add_recv(&mut self, rq: &RecvQueue, reg: &Registration, depth: usize, shared: bool) {
        let acc = RecvQueue::accounted(rq.region.lock().len(), depth, &self.model);
        if shared {
            self.bytes.srq_bytes += acc;
        } else {
            self.bytes.endpoint_bytes += acc;
        }
        self.bytes.recv_registered_bytes += reg.bytes;
        self.bytes.recv_locked_bytes += reg.locked_bytes;
        self.bytes.recv_lock.add(&reg.lock);
    }

    /// [`Fabric::poll`]'s work: completions, arrivals (a stopped one held, first at the
    /// next poll), controls, datagrams.
    fn poll_events(
        &mut self,
        on_event: &mut dyn FnMut(Event<'_>) -> Flow,
    ) -> std::result::Result<usize, Halt> {
        let mut n = 0;
        if !self.notice_seen {
            if let Some(&(by, code)) = self.world.notice.get() {
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
        while let Some(w) = self.completions.pop_front() {
            go(on_event(Event::SendComplete(w)))?;
            n += 1;
        }
        let port = &self.world.ports[self.rank];
        for _ in 0..POLL_BATCH {
            // The held arrival first; tested before it is taken, so that an empty poll (the
            // spin of a blocking wait) moves no `Option<Arrival>`.
            let next = if self.held.is_some() {
                self.held.take()
            } else {
                port.data.pop()
            };
            let Some(a) = next else {
                break;
            };
            let taken = {
                let g = a.rq.region.lock();
                let off = a.slot as usize * a.rq.buffer_size;
                on_event(Event::Arrival {
                    header: a.hdr,
                    payload: &g.as_slice()[off..off + a.hdr.len as usize],
                })
            };
            if taken.is_break() {
                // First in line again at the next poll (packets of a peer stay in order).
                self.held = Some(a);
                return Err(Halt::Stop);
            }
            a.rq.posted.push(a.slot).map_err(|_| FabricError::ReceiveQueue {
                rank: self.rank,
                what: "overflow (a buffer reposted beyond the queue's depth)",
            })?;
            n += 1;
        }
        while let Some((src, c)) = port.ctrl.pop() {
            go(on_event(Event::Control { src, msg: c }))?;
            n += 1;
        }
        for _ in 0..POLL_BATCH {
            let Some((src, d)) = port.datagrams.pop() else {
                break;
            };
            go(on_event(Event::Datagram { src, bytes: &d }))?;
            n += 1;
        }
        Ok(n)
    }
}

impl Register for LocalFabric {
    type Error = FabricError;

    fn register(&mut self, region: &[u8], lock: bool) -> Result<Registration> {
        let (guard, reg) = lock_region(region, lock);
        self.locks.extend(guard);
        Ok(reg)
    }
}

impl Fabric for LocalFabric {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world.ports.len()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            name: "local",
            xrc: true,
        }
    }

    fn setup_receive(&mut self, sharing: RecvSharing) -> Result<Option<String>> {
        self.sharing = sharing;
        if sharing == RecvSharing::PerPeer {
            return Ok(None);
        }
        let (rq, reg) = RecvQueue::new(
            self.cfg.srq_depth,
            self.cfg.buffer_size,
            self.cfg.lock_pool,
            "the shared receive queue (srq_depth x buffer_size: BALLAST_SRQ_DEPTH, BALLAST_BUFFER_SIZE)",
        )?;
        self.add_recv(&rq, &reg, self.cfg.srq_depth, true);
        self.world.ports[self.rank]
            .srq
            .set(rq)
            .map_err(|_| FabricError::ReceiveQueue {
                rank: self.rank,
                what: "the shared receive queue was set up twice",
            })?;
        Ok(reg.note)
    }

    fn open_endpoint(&mut self, key: PeerKey) -> Result<()> {
        let key = key.index();
        let own_rq = if self.sharing == RecvSharing::PerPeer {
            let (rq, reg) = RecvQueue::new(
                self.cfg.recv_depth,
                self.cfg.buffer_size,
                self.cfg.lock_pool,
                "a per-peer receive queue (recv_depth x buffer_size: BALLAST_RECV_DEPTH, BALLAST_BUFFER_SIZE)",
            )?;
            self.add_recv(&rq, &reg, self.cfg.recv_depth, false);
            self.world.ports[self.rank].rqs.lock().insert(key, rq.clone());
            Some(rq)
        } else {
            None
        };
        self.bytes.endpoint_bytes += self.model.endpoint_fixed_bytes;
        if self
            .endpoints
            .insert(
                key,
                LocalEndpoint {
                    own_rq,
                    remote_rq: None,
                },
            )
            .is_some()
        {
            return Err(FabricError::Endpoint {
                rank: self.rank,
                key,
                what: "opened twice",
            });
        }
        Ok(())
    }

    fn close_endpoint(&mut self, key: PeerKey) -> Result<()> {
        let key = key.index();
        let ep = self.endpoints.remove(&key).ok_or(FabricError::Endpoint {
            rank: self.rank,
            key,
            what: "closed but not open",
        })?;
        self.bytes.endpoint_bytes -= self.model.endpoint_fixed_bytes;
        if let Some(rq) = ep.own_rq {
            self.world.ports[self.rank].rqs.lock().remove(&key);
            let len = rq.region.lock().len();
            self.bytes.endpoint_bytes -= RecvQueue::accounted(len, self.cfg.recv_depth, &self.model);
            self.bytes.recv_registered_bytes -= len as u64;
            if rq._lock.is_some() {
                self.bytes.recv_locked_bytes -= len as u64;
            }
            if self.cfg.lock_pool {
                self.bytes.recv_lock.release(len as u64, rq._lock.is_some());
            }
        }
        Ok(())
    }

    fn post_send(
        &mut self,
        dest: usize,
        key: PeerKey,
        hdr: &PacketHeader,
        payload: &[u8],
        wr_id: u64,
    ) -> Result<()> {
        let key = key.index();
        let port = &self.world.ports[dest];
        let rq = if self.sharing == RecvSharing::PerPeer {
            let ep = self.endpoints.get_mut(&key).ok_or(FabricError::Endpoint {
                rank: self.rank,
                key,
                what: "used for a send but not open",
            })?;
            if ep.remote_rq.is_none() {
                ep.remote_rq = port.rqs.lock().get(&self.rank).cloned();
            }
            ep.remote_rq.clone()
        } else {
            port.srq.get().cloned()
        };
        let rq = rq.ok_or(FabricError::ReceiverNotReady { dest })?;
        let slot = rq.posted.pop().ok_or(FabricError::ReceiverNotReady { dest })?;
        {
            let mut g = rq.region.lock();
            let off = slot as usize * rq.buffer_size;
            g.as_mut_slice()[off..off + payload.len()].copy_from_slice(payload);
        }
        port.data.push(Arrival { hdr: *hdr, rq, slot });
        port.waker.unpark();
        self.completions.push_back(wr_id);
        Ok(())
    }

    fn send_control(&mut self, dest: usize, msg: Control) -> Result<()> {
        let port = &self.world.ports[dest];
        port.ctrl.push((self.rank, msg));
        port.waker.unpark();
        Ok(())
    }

    fn poll(&mut self, on_event: &mut dyn FnMut(Event<'_>) -> Flow) -> Result<usize> {
        poll_result(self.poll_events(on_event))
    }

    fn bytes(&self) -> FabricBytes {
        self.bytes
    }

    fn datagrams(&mut self) -> Option<&mut dyn DatagramPath> {
        Some(self)
    }

    fn memory_model(&self) -> MemoryModel {
        self.model
    }

    fn aborted(&self) -> bool {
        // Acquire: the control messages pushed before the abort (an abort notice) are seen
        // by the poll that follows.
        self.world.abort.load(Ordering::Acquire)
    }

    /// The world's notice (the first abort wins), then every rank woken.
    fn abort_job(&mut self, code: i32) -> Result<()> {
        let _ = self.world.notice.set((self.rank, code));
        self.world.wake_all();
        Ok(())
    }

    fn mark_done(&mut self) {
        if !self.marked_done {
            self.marked_done = true;
            // Released after every push of this rank: a peer that reads it, then polls,
            // has all this rank sent (`peer_end`).
            self.world.finished[self.rank].store(true, Ordering::Release);
            if self.world.done.fetch_add(1, Ordering::AcqRel) + 1 == self.world.ports.len() {
                // The others may be blocked in their finish, waiting for this.
                self.world.wake_all();
            }
        }
    }

    fn all_done(&self) -> bool {
        self.world.done.load(Ordering::Acquire) == self.world.ports.len()
    }

    fn peer_end(&self, peer: usize) -> Option<PeerEnd> {
        let done = self.world.finished.get(peer)?.load(Ordering::Acquire);
        done.then_some(PeerEnd::Finished)
    }

    fn others_end(&self) -> Option<OthersEnd> {
        let others = self.world.done.load(Ordering::Acquire) - usize::from(self.marked_done);
        (others + 1 >= self.world.ports.len()).then_some(OthersEnd::AllFinished)
    }

    fn blocks_when_idle(&self) -> bool {
        true
    }

    fn wait_for_arrival(&self, timeout: std::time::Duration) {
        self.parker.park_timeout(timeout);
    }
}

impl DatagramPath for LocalFabric {
    fn datagram_mtu(&self) -> usize {
        DATAGRAM_MTU
    }

    fn datagrams_can_drop(&self) -> bool {
        self.drops.active()
    }

    fn post_datagram(&mut self, dest: usize, bytes: &[u8]) -> Result<()> {
        if self.drops.drops(dest) {
            return Ok(()); // the test drop model: lost on the way
        }
        let port = &self.world.ports[dest];
        port.datagrams.push((self.rank, bytes.to_vec()));
        port.waker.unpark();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_ranks(cfg: &TransportConfig) -> (LocalFabric, LocalFabric) {
        let (world, mut parkers) = World::new(2);
        let world = Arc::new(world);
        let p1 = parkers.pop().unwrap();
        let p0 = parkers.pop().unwrap();
        let f1 = LocalFabric::new(1, Arc::clone(&world), cfg, p1);
        (LocalFabric::new(0, world, cfg, p0), f1)
    }

    #[test]
    fn a_poll_stopped_by_its_callback_gives_the_arrival_again_first() {
        let cfg = TransportConfig::default();
        let (mut f0, mut f1) = two_ranks(&cfg);
        f1.setup_receive(RecvSharing::Shared).unwrap();
        f0.setup_receive(RecvSharing::Shared).unwrap();
        f0.open_endpoint(PeerKey::Rank(1)).unwrap();
        let hdr = |tag| PacketHeader {
            src: 0,
            tag,
            total: 3,
            offset: 0,
            len: 3,
            more: false,
        };
        f0.post_send(1, PeerKey::Rank(1), &hdr(1), b"one", 10).unwrap();
        f0.post_send(1, PeerKey::Rank(1), &hdr(2), b"two", 11).unwrap();
        let mut seen = Vec::new();
        // Refused (the callback stops): the poll ends there, without an error of its own.
        let n = f1
            .poll(&mut |ev| match ev {
                Event::Arrival {
                    header: h,
                    payload: p,
                } => {
                    seen.push((h.tag, p.to_vec()));
                    Flow::Break(())
                }
                _ => Flow::Continue(()),
            })
            .unwrap();
        assert_eq!(n, 0);
        assert_eq!(seen, vec![(1, b"one".to_vec())]);
        // The next poll gives the refused arrival first, then the next one.
        seen.clear();
        let n = f1
            .poll(&mut |ev| {
                if let Event::Arrival {
                    header: h,
                    payload: p,
                } = ev
                {
                    seen.push((h.tag, p.to_vec()));
                }
                Flow::Continue(())
            })
            .unwrap();
        assert_eq!(n, 2);
        assert_eq!(seen, vec![(1, b"one".to_vec()), (2, b"two".to_vec())]);
        // The sender's completions stop the same way: the first stops the poll.
        let mut done = Vec::new();
        f0.poll(&mut |ev| {
            if let Event::SendComplete(w) = ev {
                done.push(w);
            }
            Flow::Break(())
        })
        .unwrap();
        assert_eq!(done, vec![10]);
    }

    #[test]
    fn datagrams_are_a_capability_and_the_direct_path_is_not_offered() {
        let cfg = TransportConfig::default();
        let (mut f0, mut f1) = two_ranks(&cfg);
        assert!(f0.direct().is_none());
        let path = f0.datagrams().expect("local has datagrams");
        assert_eq!(path.datagram_mtu(), DATAGRAM_MTU);
        assert!(!path.datagrams_can_drop());
        path.post_datagram(1, b"hello").unwrap();
        let mut got = Vec::new();
        f1.poll(&mut |ev| {
            if let Event::Datagram { src, bytes } = ev {
                got.push((src, bytes.to_vec()));
            }
            Flow::Continue(())
        })
        .unwrap();
        assert_eq!(got, vec![(0, b"hello".to_vec())]);

        let lossy = TransportConfig {
            datagram_drop_every: 2,
            ..cfg
        };
        let (mut f0, _f1) = two_ranks(&lossy);
        assert!(f0.datagrams().unwrap().datagrams_can_drop());
    }
}
