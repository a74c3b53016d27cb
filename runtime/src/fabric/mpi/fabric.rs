//! The MPI fabric ([`MpiFabric`]): the [`Fabric`] of one Ballast rank over MPI
//! point-to-point on Ballast's own duplicate of the world communicator.
//!
//! Wire ([`crate::fabric::wire`]): every packet is one MPI message that starts with a 32-byte header
//! (the [`PacketHeader`] fields, a kind byte, for control messages the [`Control`] code and
//! value, and in byte 31 the number of piggybacked controls); data packets carry their
//! payload after it, then the piggybacked controls (9 bytes each: code, value). A packet is
//! at most `buffer_size + STAGING_EXTRA_BYTES` bytes (`buffer_size <= 1 GiB`), so no MPI
//! count overflows an `int`.
//!
//! Control messages (credit grants above all) wait in the fabric until the next packet to
//! the same rank, which carries up to [`MAX_PIGGYBACK`] of them after its payload, or until
//! the end of the next [`Fabric::poll`], which sends the rest (one MPI message per
//! destination, the others riding on it): a ping-pong costs one MPI message per direction
//! instead of two, and no control waits longer than one progress call.
//!
//! Direct path ([`DirectPath::direct_threshold`] = `buffer_size`): a larger message is a
//! header packet of kind `direct` on the normal tag (MPI's non-overtaking rule keeps it in
//! order with the sender's other packets), followed by its bytes as MPI messages of at most
//! `direct_part_bytes` (1 GiB by default, so no count overflows an `int`) on the
//! destination's direct tag ([`DIRECT_TAG_BASE`] + slot). A blocking send posts them
//! straight from the caller's slice (rsmpi scoped requests) and polls until they complete;
//! an `isend` posts an owned copy. The receiver, on the header, receives the parts
//! (`MPI_Mprobe`/`MPI_Mrecv`, blocking: the sender posted them with the header) straight
//! into the `Vec` that becomes the message. A process-wide lock around posting the header
//! and its parts keeps the parts of one sender process in header order when several of its
//! ranks (threads) send to the same rank. Direct messages use no pool buffer and no credit:
//! MPI does its own flow control for them.
//!
//! Datagrams (the engine's connectionless path past `max_endpoints`,
//! [`DatagramPath::post_datagram`], `datagram.rs`) are MPI messages of kind `datagram` on the destination's
//! normal tag, with no endpoint or handshake: on the normal tag rather than one of their
//! own so that the drain below counts and receives them with the rest (tags are scarce:
//! the direct tags take 16,000..32,000 below the guaranteed `MPI_TAG_UB` of 32,767). MPI
//! never drops one ([`DatagramPath::datagrams_can_drop`] is false: the engine sends one again
//! only after the longer timeout for a datagram its receiver dropped). A datagram is at most `buffer_size` bytes, so it fits the
//! staging buffer with its header and riders.
//!
//! Ballast ranks map onto MPI processes round-robin: rank `r` lives in process `r % P` as
//! slot `r / P`, and the MPI tag of a message is its destination slot. With one rank per
//! process (the normal case) rank = MPI rank and the tag is 0. More ranks than processes
//! (the conformance suite under `mpirun -n 1`) run as threads and need
//! `MPI_THREAD_MULTIPLE`.
//!
//! Finishing is a non-blocking barrier once every local rank is done; then, when the
//! communicator is dropped, an `MPI_Allreduce` of the messages sent to each rank (on the
//! normal tags) lets every process receive what is still addressed to it, with the parts of
//! direct messages, before `MPI_Comm_free`, so no stale message (a late credit grant) can
//! surface in a later duplicate that reuses the context (MPICH does reuse it). Dropping a
//! finished communicator is therefore collective.
//!
//! Receives go through `MPI_Improbe`/`MPI_Mrecv` into one staging buffer of
//! `buffer_size + STAGING_EXTRA_BYTES`; sends copy header and payload into an owned buffer
//! that `MPI_Isend` reads until it completes (kept for reuse). The credits of the engine
//! bound how many packets are in flight toward a rank, as for the other transports; MPI's
//! own queues hold them until they are probed (MPI's memory, measured by
//! [`super::Mpi::footprint`]).

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use rsmpi::collective::{CommunicatorCollectives as _, SystemOperation};
use rsmpi::datatype::traits::*;
use rsmpi::point_to_point::{Destination as _, Source as _};
use rsmpi::topology::{Communicator as _, SimpleCommunicator};

use super::abort::AbortNotices;
use super::ffi::{recv_append, Barrier, SendQueue, SharedComm};

mod datagram;
use crate::core::backoff::Backoff;
use crate::core::config::RecvSharing;
use crate::core::pool::{Register, Registration};
use crate::fabric::error::{FabricError, Result, Sender};
use crate::fabric::sizes::{MPI_ENDPOINT_BYTES, MPI_STAGING_EXTRA_BYTES};
use crate::fabric::wire::{
    self, HeaderExtra, WireHeader, KIND_CONTROL, KIND_DATA, KIND_DATAGRAM, KIND_DIRECT,
};
use crate::fabric::{
    go, poll_result, Capabilities, Control, DatagramPath, DirectPath, Event, Fabric, FabricBytes, Flow, Halt,
    PacketHeader, PeerKey,
};

/// Bytes of the header in front of every MPI message ([`wire::HEADER_BYTES`]).
pub const HEADER_BYTES: usize = wire::HEADER_BYTES;
/// MPI tag on which a failing process tells the others to stop.
pub(crate) const ABORT_TAG: i32 = 32_000;
/// Control messages carried at most by one packet.
pub const MAX_PIGGYBACK: usize = 16;
/// Bytes of one piggybacked control message ([`wire::CONTROL_BYTES`]).
const PIGGYBACK_BYTES: usize = wire::CONTROL_BYTES;
/// Bytes of the receive staging buffer (and of a kept send buffer) beyond `buffer_size`:
/// the header and the largest piggyback.
pub const STAGING_EXTRA_BYTES: usize = MPI_STAGING_EXTRA_BYTES as usize;
const _: () = assert!(STAGING_EXTRA_BYTES == HEADER_BYTES + MAX_PIGGYBACK * PIGGYBACK_BYTES);
/// The parts of direct messages to slot `s` travel on tag `DIRECT_TAG_BASE + s`.
pub const DIRECT_TAG_BASE: i32 = 16_000;
/// Default largest MPI message of a direct message's bytes (1 GiB < `i32::MAX`).
pub const DEFAULT_DIRECT_PART_BYTES: usize = 1 << 30;
/// Messages received per [`Fabric::poll`] call at most.
const POLL_BATCH: usize = 256;
/// `aborted()` probes for an abort notice once per this many calls.
const ABORT_PROBE_EVERY: u32 = 64;

/// State shared by the Ballast ranks of one process in one Ballast world.
pub(crate) struct Shared {
    comm: SharedComm,
    pub(crate) procs: usize,
    pub(crate) proc_rank: usize,
    pub(crate) world: usize,
    local_slots: usize,
    done_local: AtomicUsize,
    barrier: Mutex<Option<Barrier>>,
    all_done: AtomicBool,
    /// The abort protocol, on `comm` with [`ABORT_TAG`].
    abort: AbortNotices,
    /// Send queues of this process' dropped fabrics whose sends may still be in flight:
    /// waited for only after [`Shared::drain`] received what is addressed to this process'
    /// ranks (a send to a rank of the same process can complete only when it is received:
    /// MPICH's self-sends do, and the receiving rank may be gone already).
    orphans: Mutex<Vec<SendQueue>>,
    /// MPI messages sent by this process' ranks to each rank (index = destination rank).
    sent: Vec<AtomicU64>,
    /// MPI messages received by each of this process' ranks (index = rank).
    recvd: Vec<AtomicU64>,
    /// Held while posting a direct message's header and parts (see the module docs).
    direct_order: Mutex<()>,
    /// Largest MPI message of a direct message's bytes.
    part_bytes: usize,
}

impl Shared {
    /// Sets up a Ballast world of `world` ranks over `comm` (Ballast's duplicate).
    pub(crate) fn new(comm: SimpleCommunicator, world: usize, part_bytes: usize) -> Result<Arc<Shared>> {
        let procs = comm.size() as usize;
        let proc_rank = comm.rank() as usize;
        if world == 0 {
            return Err(FabricError::InvalidRank {
                rank: 0,
                world_size: 0,
            });
        }
        let local_slots = if proc_rank < world {
            (world - proc_rank).div_ceil(procs)
        } else {
            0
        };
        let Some(comm) = SharedComm::new(comm, local_slots) else {
            return Err(FabricError::MpiWorld {
                world,
                procs,
                what: "more ranks than processes need MPI_THREAD_MULTIPLE (initialise with Mpi::init_multithreaded)"
                    .into(),
            });
        };
        if local_slots > DIRECT_TAG_BASE as usize {
            return Err(FabricError::MpiWorld {
                world,
                procs,
                what: format!("more than {DIRECT_TAG_BASE} ranks per process"),
            });
        }
        let s = Arc::new(Shared {
            comm,
            procs,
            proc_rank,
            world,
            local_slots,
            done_local: AtomicUsize::new(0),
            barrier: Mutex::new(None),
            all_done: AtomicBool::new(false),
            abort: AbortNotices::new(),
            orphans: Mutex::new(Vec::new()),
            sent: (0..world).map(|_| AtomicU64::new(0)).collect(),
            recvd: (0..world).map(|_| AtomicU64::new(0)).collect(),
            direct_order: Mutex::new(()),
            part_bytes: part_bytes.clamp(1, i32::MAX as usize),
        });
        if local_slots == 0 {
            // A process without ranks of this world only takes part in the final barrier.
            *s.barrier.lock() = Some(s.comm.barrier());
        }
        Ok(s)
    }

    /// Ballast ranks hosted by this process.
    pub(crate) fn local_ranks(&self) -> Vec<usize> {
        (0..self.local_slots)
            .map(|s| s * self.procs + self.proc_rank)
            .collect()
    }

    /// Marks this process' ranks failed and tells the other processes (best effort).
    pub(crate) fn abort(&self) {
        self.abort.abort(&self.comm, ABORT_TAG);
    }

    /// Ends the job with `code` (`MPI_Abort`): never returns.
    pub(crate) fn abort_job(&self, code: i32) -> ! {
        self.abort.abort_job(&self.comm, code)
    }

    fn poll_abort(&self) -> bool {
        self.abort.poll(&self.comm, ABORT_TAG)
    }
}

impl Shared {
    /// Receives (and discards) every message still addressed to this process' ranks, so
    /// that none is left behind when the communicator is freed: MPI may reuse its context
    /// for the next duplicate, where a stale credit grant would be taken for a new one.
    /// Collective; only after every rank finished (no rank sends any more).
    fn drain(&self) {
        let sent: Vec<u64> = self.sent.iter().map(|c| c.load(Ordering::Acquire)).collect();
        let mut total = vec![0u64; self.world];
        self.comm
            .all_reduce_into(&sent[..], &mut total[..], SystemOperation::sum());
        let mut sink = Vec::new();
        let mut parts = Vec::new();
        for r in self.local_ranks() {
            let tag = (r / self.procs) as i32;
            while self.recvd[r].load(Ordering::Acquire) < total[r] {
                let (msg, status) = self.comm.any_process().matched_probe_with_tag(tag);
                sink.resize(status.count(u8::equivalent_datatype()) as usize, 0);
                msg.matched_receive_into(&mut sink[..]);
                self.recvd[r].fetch_add(1, Ordering::AcqRel);
                let head = sink.first_chunk::<HEADER_BYTES>().map(wire::decode_header);
                if let Some(WireHeader {
                    header: h,
                    extra: HeaderExtra {
                        kind: KIND_DIRECT, ..
                    },
                }) = head
                {
                    // A direct message's header: its parts follow on the direct tag.
                    let source = status.source_rank() as usize;
                    let Ok(total) = usize::try_from(h.total) else {
                        continue;
                    };
                    parts.clear();
                    parts.reserve(total.min(self.part_bytes));
                    let mut got = 0;
                    while got < total {
                        parts.clear();
                        match recv_append(&self.comm, r, source, DIRECT_TAG_BASE + tag, &mut parts) {
                            Ok(n) if n > 0 => got += n,
                            _ => break,
                        }
                    }
                }
            }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let barrier = self.barrier.lock().take();
        if rsmpi::environment::is_finalized() || self.abort.is_set() {
            // Too late to free MPI objects, or the other processes may never come (abort):
            // leak the barrier, the notices and the communicator (never freed, so never
            // reused).
            std::mem::forget(barrier);
            std::mem::forget(std::mem::take(&mut *self.orphans.lock()));
            return;
        }
        let finished = match barrier {
            Some(r) => {
                r.wait();
                true
            }
            None => self.all_done.load(Ordering::Acquire),
        };
        if !finished {
            // Dropped without finishing: peers may still send to it, and may never receive
            // what is in flight. Keep the communicator and the send buffers (leaked) so that
            // no later duplicate reuses its context and nothing waits forever.
            std::mem::forget(std::mem::take(&mut *self.orphans.lock()));
            return;
        }
        self.drain();
        // Everything addressed to this process is received: its own sends can complete.
        drop(std::mem::take(&mut *self.orphans.lock()));
        // MPI is still live: the duplicate is freed (MPI_Comm_free) with this struct.
        self.comm.free_on_drop();
    }
}

/// The MPI fabric of one Ballast rank.
pub struct MpiFabric {
    shared: Arc<Shared>,
    rank: usize,
    sends: SendQueue,
    rbuf: Vec<u8>,
    buffer_size: usize,
    endpoints: HashSet<usize>,
    marked_done: bool,
    completed: Vec<u64>,
    abort_countdown: Cell<u32>,
    /// Control messages not sent yet: (destination rank, message), in order.
    pending: Vec<(usize, Control)>,
    /// Controls piggybacked on the packet being handled.
    riders: Vec<Control>,
    /// A direct message whose memory could not be reserved: retried before anything else.
    deferred: Option<(PacketHeader, usize)>,
}

impl MpiFabric {
    /// The fabric of Ballast rank `rank` (hosted by this process) of the world in `shared`.
    pub(crate) fn new(shared: Arc<Shared>, rank: usize, buffer_size: usize, buffers: usize) -> MpiFabric {
        MpiFabric {
            shared,
            rank,
            sends: SendQueue::new(buffers, buffer_size + STAGING_EXTRA_BYTES),
            rbuf: Vec::new(),
            buffer_size,
            endpoints: HashSet::new(),
            marked_done: false,
            completed: Vec::new(),
            abort_countdown: Cell::new(0),
            pending: Vec::new(),
            riders: Vec::new(),
            deferred: None,
        }
    }

    fn proc_and_tag(&self, rank: usize) -> Result<(usize, i32)> {
        if rank >= self.shared.world {
            return Err(FabricError::InvalidRank {
                rank,
                world_size: self.shared.world,
            });
        }
        Ok((rank % self.shared.procs, (rank / self.shared.procs) as i32))
    }

    fn my_tag(&self) -> i32 {
        (self.rank / self.shared.procs) as i32
    }

    /// A packet for `dest`: header, payload, and up to [`MAX_PIGGYBACK`] of the controls
    /// pending for `dest` (the earliest, removed from `pending`).
    fn packet(&mut self, dest: usize, h: &PacketHeader, kind: u8, code: u8, payload: &[u8]) -> Vec<u8> {
        let riders = if self.pending.is_empty() {
            0
        } else {
            self.pending
                .iter()
                .filter(|(d, _)| *d == dest)
                .count()
                .min(MAX_PIGGYBACK)
        };
        let mut b = self
            .sends
            .buffer(HEADER_BYTES + payload.len() + riders * PIGGYBACK_BYTES);
        let extra = HeaderExtra {
            kind,
            code,
            riders: riders as u8,
        };
        b.extend_from_slice(&wire::encode_header(h, extra));
        b.extend_from_slice(payload);
        if riders > 0 {
            let mut taken = 0;
            self.pending.retain(|&(d, c)| {
                if d != dest || taken == riders {
                    return true;
                }
                b.extend_from_slice(&wire::encode_control(c));
                taken += 1;
                false
            });
        }
        b
    }

    /// Sends the pending control messages: one MPI message per destination carrying the
    /// first in its header and up to [`MAX_PIGGYBACK`] more.
    fn flush_controls(&mut self) -> Result<()> {
        while let Some(&(dest, first)) = self.pending.first() {
            self.pending.remove(0);
            let (proc_, tag) = self.proc_and_tag(dest)?;
            let WireHeader { header: h, extra } = wire::control_header(self.rank as u32, first, 0);
            let b = self.packet(dest, &h, KIND_CONTROL, extra.code, &[]);
            self.sends.post(&self.shared.comm, proc_, tag, b, u64::MAX)?;
            self.shared.sent[dest].fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Receives the `h.total` bytes of direct message `h` from process `source` (parts on
    /// this rank's direct tag); kept as `deferred` when they cannot be reserved (nor fit usize).
    fn recv_direct(&mut self, h: PacketHeader, source: usize) -> Result<Vec<u8>> {
        let (bytes, total) = (h.total, h.total);
        let mut data = Vec::new();
        if let Err(source_err) = data.try_reserve_exact(usize::try_from(total).unwrap_or(usize::MAX)) {
            self.deferred = Some((h, source));
            return Err(FabricError::MessageAlloc {
                rank: self.rank,
                peer: source,
                bytes,
                source: source_err,
            });
        }
        let total = total as usize;
        let tag = DIRECT_TAG_BASE + self.my_tag();
        while data.len() < total {
            if recv_append(&self.shared.comm, self.rank, source, tag, &mut data)? == 0 {
                return Err(FabricError::BadPacket {
                    rank: self.rank,
                    from: Sender::MpiProcess(source),
                    bytes: 0,
                    what: format!("empty direct-path part at {} of {total} bytes", data.len()),
                });
            }
        }
        Ok(data)
    }

    /// Receives (at most [`POLL_BATCH`]) packets for this rank and passes their events on.
    fn receive(&mut self, on_event: &mut dyn FnMut(Event<'_>) -> Flow) -> std::result::Result<usize, Halt> {
        let mut n = 0;
        let tag = self.my_tag();
        // It stays first in line (its parts wait in MPI): BALLAST_ENOMEM until it fits.
        if let Some((h, source)) = self.deferred.take() {
            let data = self.recv_direct(h, source)?;
            go(on_event(Event::Whole { header: h, data }))?;
        }
        for _ in 0..POLL_BATCH {
            let Some((msg, status)) = self
                .shared
                .comm
                .any_process()
                .immediate_matched_probe_with_tag(tag)
            else {
                break;
            };
            let count = status.count(u8::equivalent_datatype()) as usize;
            self.shared.recvd[self.rank].fetch_add(1, Ordering::AcqRel);
            let from = Sender::MpiProcess(status.source_rank() as usize);
            if count < HEADER_BYTES || count > self.rbuf.len() {
                // Receive it anyway so MPI's matched message is consumed, then fail.
                let mut sink = vec![0u8; count];
                msg.matched_receive_into(&mut sink[..]);
                return Err(Halt::Fail(FabricError::BadPacket {
                    rank: self.rank,
                    from,
                    bytes: count,
                    what: format!("outside {HEADER_BYTES}..={} bytes", self.rbuf.len()),
                }));
            }
            msg.matched_receive_into(&mut self.rbuf[..count]);
            let p = wire::split_packet(&self.rbuf[..count], MAX_PIGGYBACK, self.rank, from)?;
            let (h, src) = (p.header, p.header.src as usize);
            self.riders.clear();
            for c in p.riders() {
                self.riders.push(c?);
            }
            match p.extra.kind {
                KIND_DATA => go(on_event(Event::Arrival {
                    header: h,
                    payload: p.payload,
                }))?,
                KIND_CONTROL => go(on_event(Event::Control {
                    src,
                    msg: wire::header_control(&h, p.extra)?,
                }))?,
                KIND_DIRECT => match self.recv_direct(h, status.source_rank() as usize) {
                    Ok(data) => go(on_event(Event::Whole { header: h, data }))?,
                    Err(e) => {
                        for &c in &self.riders {
                            go(on_event(Event::Control { src, msg: c }))?;
                        }
                        return Err(e.into());
                    }
                },
                KIND_DATAGRAM => go(on_event(Event::Datagram {
                    src,
                    bytes: p.payload,
                }))?,
                k => {
                    return Err(Halt::Fail(FabricError::BadPacket {
                        rank: self.rank,
                        from: Sender::Rank(h.src as usize),
                        bytes: count,
                        what: format!("unknown message kind {k}"),
                    }))
                }
            }
            for &c in &self.riders {
                go(on_event(Event::Control { src, msg: c }))?;
            }
            n += 1;
        }
        Ok(n)
    }

    /// [`Fabric::poll`]'s work: send completions, received packets, then the controls
    /// that found no packet to ride on.
    fn poll_events(
        &mut self,
        on_event: &mut dyn FnMut(Event<'_>) -> Flow,
    ) -> std::result::Result<usize, Halt> {
        let mut n = 0;
        let completed = &mut self.completed;
        self.sends.test(&mut |id| {
            if id != u64::MAX {
                completed.push(id);
            }
        })?;
        for w in self.completed.drain(..) {
            go(on_event(Event::SendComplete(w)))?;
            n += 1;
        }
        n += self.receive(on_event)?;
        // Controls that found no packet to ride on since the last poll leave now.
        if !self.pending.is_empty() {
            self.flush_controls()?;
        }
        Ok(n)
    }
}

impl Drop for MpiFabric {
    fn drop(&mut self) {
        let sends = std::mem::replace(&mut self.sends, SendQueue::new(0, 0));
        if self.shared.abort.is_set() {
            // A failed peer may never receive what is in flight: leak the buffers (MPI may
            // still read them) rather than wait forever.
            std::mem::forget(sends);
        } else {
            // Waited for when the process' last fabric is gone, after the drain.
            self.shared.orphans.lock().push(sends);
        }
    }
}

impl Register for MpiFabric {
    type Error = FabricError;

    fn register(&mut self, region: &[u8], lock: bool) -> Result<Registration> {
        // MPI registers (pins) the memory it sends from itself; Ballast registers and locks
        // nothing here (so nothing is counted as registered).
        let _ = region;
        let note = lock.then(|| "the mpi transport does not lock Ballast's pool: MPI registers memory itself (measured in VmLck/VmPin)".to_string());
        Ok(Registration {
            bytes: 0,
            locked_bytes: 0,
            note,
            lock: Default::default(),
        })
    }
}

impl Fabric for MpiFabric {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.shared.world
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            name: "mpi",
            xrc: false,
        }
    }

    fn setup_receive(&mut self, _sharing: RecvSharing) -> Result<Option<String>> {
        self.rbuf = vec![0u8; self.buffer_size + STAGING_EXTRA_BYTES];
        Ok(None)
    }

    fn open_endpoint(&mut self, key: PeerKey) -> Result<()> {
        let key = key.index();
        if !self.endpoints.insert(key) {
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
        if !self.endpoints.remove(&key) {
            return Err(FabricError::Endpoint {
                rank: self.rank,
                key,
                what: "closed but not open",
            });
        }
        Ok(())
    }

    fn copies_payload(&self) -> bool {
        true
    }

    fn post_send(
        &mut self,
        dest: usize,
        _key: PeerKey,
        header: &PacketHeader,
        payload: &[u8],
        _wr_id: u64,
    ) -> Result<()> {
        let (proc_, tag) = self.proc_and_tag(dest)?;
        // The payload is copied into the packet: no completion is reported (copies_payload).
        let b = self.packet(dest, header, KIND_DATA, 0, payload);
        self.sends.post(&self.shared.comm, proc_, tag, b, u64::MAX)?;
        self.shared.sent[dest].fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    fn send_control(&mut self, dest: usize, msg: Control) -> Result<()> {
        self.proc_and_tag(dest)?;
        self.pending.push((dest, msg));
        Ok(())
    }

    fn poll(&mut self, on_event: &mut dyn FnMut(Event<'_>) -> Flow) -> Result<usize> {
        poll_result(self.poll_events(on_event))
    }

    fn memory_model(&self) -> crate::core::footprint::MemoryModel {
        crate::fabric::sizes::mpi_model()
    }

    fn bytes(&self) -> FabricBytes {
        // Ballast's own MPI-side memory: the receive staging buffer (shared by all peers)
        // and the send staging buffers. MPI's internal memory is measured, not modelled.
        // Send buffers include the owned copies of `isend` direct messages in flight.
        let endpoint_bytes = self.sends.bytes() + self.endpoints.len() as u64 * MPI_ENDPOINT_BYTES;
        FabricBytes {
            endpoint_bytes,
            srq_bytes: self.rbuf.capacity() as u64,
            recv_registered_bytes: 0,
            recv_locked_bytes: 0,
            recv_lock: Default::default(),
            ..FabricBytes::default()
        }
    }

    fn abort_job(&mut self, code: i32) -> Result<()> {
        self.shared.abort_job(code)
    }

    fn aborted(&self) -> bool {
        let c = self.abort_countdown.get();
        if c > 0 {
            self.abort_countdown.set(c - 1);
            return self.shared.abort.is_set();
        }
        self.abort_countdown.set(ABORT_PROBE_EVERY);
        self.shared.poll_abort()
    }

    fn mark_done(&mut self) {
        if self.marked_done {
            return;
        }
        self.marked_done = true;
        if self.shared.done_local.fetch_add(1, Ordering::AcqRel) + 1 == self.shared.local_slots {
            *self.shared.barrier.lock() = Some(self.shared.comm.barrier());
        }
    }

    fn all_done(&self) -> bool {
        if self.shared.all_done.load(Ordering::Acquire) {
            return true;
        }
        let mut slot = self.shared.barrier.lock();
        if slot.as_mut().is_some_and(Barrier::test) {
            *slot = None;
            self.shared.all_done.store(true, Ordering::Release);
        }
        self.shared.all_done.load(Ordering::Acquire)
    }

    fn direct(&mut self) -> Option<&mut dyn DirectPath> {
        Some(self)
    }

    fn datagrams(&mut self) -> Option<&mut dyn DatagramPath> {
        Some(self)
    }
}

impl DirectPath for MpiFabric {
    fn direct_threshold(&self) -> usize {
        self.buffer_size
    }

    fn send_direct(
        &mut self,
        dest: usize,
        header: &PacketHeader,
        data: &[u8],
        on_event: &mut dyn FnMut(Event<'_>) -> Flow,
    ) -> Result<()> {
        let (proc_, tag) = self.proc_and_tag(dest)?;
        let rts = self.packet(dest, header, KIND_DIRECT, 0, &[]);
        let shared = Arc::clone(&self.shared);
        rsmpi::request::scope(|scope| {
            let mut reqs = Vec::new();
            {
                let _order = shared.direct_order.lock();
                self.sends.post(&shared.comm, proc_, tag, rts, u64::MAX)?;
                shared.sent[dest].fetch_add(1, Ordering::AcqRel);
                let p = shared.comm.process_at_rank(proc_ as i32);
                for part in data.chunks(shared.part_bytes) {
                    reqs.push(Some(p.immediate_send_with_tag(
                        scope,
                        part,
                        DIRECT_TAG_BASE + tag,
                    )));
                }
            }
            // Serve incoming traffic until MPI no longer reads `data` (the peer may be
            // sending us a large message at the same time).
            let mut backoff = Backoff::new();
            let mut failed = None;
            loop {
                let mut open = false;
                for slot in reqs.iter_mut() {
                    if let Some(r) = slot.take() {
                        if let Err(r) = r.test() {
                            *slot = Some(r);
                            open = true;
                        }
                    }
                }
                if !open {
                    break;
                }
                if failed.is_some() {
                    // The caller's slice must outlive the transfer: wait for it before
                    // returning the error (as MPI_Send would block).
                    for r in reqs.iter_mut().filter_map(Option::take) {
                        r.wait();
                    }
                    break;
                }
                if self.aborted() {
                    failed = Some(Halt::Fail(FabricError::Aborted));
                    continue;
                }
                match self.poll_events(on_event) {
                    Ok(0) => backoff.snooze(),
                    Ok(_) => backoff.reset(),
                    Err(h) => failed = Some(h),
                }
            }
            match failed {
                None | Some(Halt::Stop) => Ok(()),
                Some(Halt::Fail(e)) => Err(e),
            }
        })
    }

    fn post_direct(&mut self, dest: usize, header: &PacketHeader, data: Vec<u8>, wr_id: u64) -> Result<()> {
        let (proc_, tag) = self.proc_and_tag(dest)?;
        let rts = self.packet(dest, header, KIND_DIRECT, 0, &[]);
        let _order = self.shared.direct_order.lock();
        self.sends.post(&self.shared.comm, proc_, tag, rts, u64::MAX)?;
        self.shared.sent[dest].fetch_add(1, Ordering::AcqRel);
        self.sends.post_parts(
            &self.shared.comm,
            proc_,
            DIRECT_TAG_BASE + tag,
            data,
            self.shared.part_bytes,
            wr_id,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fabric_struct_fits_the_model() {
        assert!(std::mem::size_of::<MpiFabric>() as u64 <= crate::fabric::sizes::MPI_FABRIC_BYTES);
    }
}
