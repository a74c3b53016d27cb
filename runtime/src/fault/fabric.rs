//! [`FaultFabric`]: a [`Fabric`] wrapper that injects the faults of a [`Faults`] plan into
//! the rank's traffic, on the sending side, with its own seeded generator:
//!
//! - datagrams are dropped, duplicated, or held back for a while, so that they arrive
//!   late and out of order (the datagram path must recover from all three);
//! - packets and control messages of the reliable path are held back for a while, but
//!   kept in order per destination (local, MPI and RC deliver in order per peer, so a
//!   reordering within one peer is a fault no real fabric has; with `xrc`, per node: one
//!   endpoint serves all its ranks): messages to different peers are reordered;
//! - the rank stalls once (its thread sleeps in a poll): it is running, so no peer may
//!   report it gone, and everything is delivered once it runs again;
//! - the rank is killed: it stops for good without finishing. What it held back is lost,
//!   peers see it [`PeerEnd::Failed`], and its own calls fail with `FabricError::Aborted`.
//!
//! Everything held back is posted before the rank says it finished
//! ([`Fabric::mark_done`]), so a finished rank has delivered everything it sent, as on
//! the plain fabric.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{FaultWorld, Faults, KILLED_HERE};
use crate::core::config::{RecvSharing, TransportConfig};
use crate::core::footprint::MemoryModel;
use crate::core::pool::{Register, Registration};
use crate::fabric::error::{FabricError, Result};
use crate::fabric::{
    Capabilities, Control, DatagramPath, Event, Fabric, FabricBytes, Flow, OthersEnd, PacketHeader, PeerEnd,
    PeerKey,
};

/// Something the reliable path holds back toward one destination.
enum Held {
    Packet {
        key: PeerKey,
        hdr: PacketHeader,
        payload: Vec<u8>,
        wr_id: u64,
    },
    Control(Control),
}

/// The fault-injecting wrapper of one rank's fabric.
pub struct FaultFabric {
    inner: Box<dyn Fabric>,
    rank: usize,
    plan: Faults,
    world: Arc<FaultWorld>,
    rng: ChaCha8Rng,
    /// Held back on the reliable path, per lane (see `lane`), in posting order: (due,
    /// destination, what).
    reliable: Vec<VecDeque<(Instant, usize, Held)>>,
    /// Lanes with something in `reliable`.
    reliable_held: usize,
    /// Ranks per node when the receive sharing is `xrc` (one endpoint, so one order, per
    /// node), else None.
    xrc_node: Option<usize>,
    ranks_per_node: usize,
    /// Datagrams held back: (due, destination, bytes), released in any order once due.
    datagrams: Vec<(Instant, usize, Vec<u8>)>,
    /// The inner fabric's datagram path when it has one, as it was when wrapped: its
    /// datagram size and whether it may drop one.
    inner_datagrams: Option<(usize, bool)>,
    /// Polls so far (the stall and the kill come at a poll count of the plan).
    polls: u64,
    stalled: bool,
    killed: bool,
}

impl FaultFabric {
    /// Wraps rank `rank`'s `inner` fabric with the faults of `world`'s plan.
    pub(crate) fn new(
        mut inner: Box<dyn Fabric>,
        world: Arc<FaultWorld>,
        cfg: &TransportConfig,
    ) -> FaultFabric {
        let inner_datagrams = inner
            .datagrams()
            .map(|d| (d.datagram_mtu(), d.datagrams_can_drop()));
        let rank = inner.rank();
        let n = inner.world_size();
        let plan = world.plan;
        FaultFabric {
            inner,
            rank,
            plan,
            rng: ChaCha8Rng::seed_from_u64(plan.seed ^ (rank as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            world,
            reliable: (0..n).map(|_| VecDeque::new()).collect(),
            reliable_held: 0,
            xrc_node: None,
            ranks_per_node: cfg.ranks_per_node.max(1),
            datagrams: Vec::new(),
            inner_datagrams,
            polls: 0,
            stalled: false,
            killed: false,
        }
    }

    /// A delay of at most the plan's `max_delay`.
    fn delay(&mut self) -> Duration {
        let max = self.plan.max_delay.as_micros().max(1) as u64;
        Duration::from_micros(self.rng.random_range(0..=max))
    }

    /// Posts a datagram on the inner fabric's path (offered only when it has one).
    fn post_inner(&mut self, dest: usize, bytes: &[u8]) -> Result<()> {
        let transport = self.inner.capabilities().name;
        match self.inner.datagrams() {
            Some(path) => path.post_datagram(dest, bytes),
            None => Err(FabricError::NoDatagrams { transport }),
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.random_bool(p.min(1.0))
    }

    /// The order a real fabric keeps toward `dest`: per peer, or with `xrc` per node (one
    /// endpoint for all its ranks).
    fn lane(&self, dest: usize) -> usize {
        match self.xrc_node {
            Some(rpn) => dest / rpn,
            None => dest,
        }
    }

    /// Posts on the inner fabric what the reliable path held in `lane` and is due at
    /// `now` (everything when `now` is None), in order.
    fn release_reliable(&mut self, lane: usize, now: Option<Instant>) -> Result<bool> {
        let mut any = false;
        while let Some((due, _, _)) = self.reliable[lane].front() {
            if now.is_some_and(|t| *due > t) {
                break;
            }
            let (_, dest, held) = self.reliable[lane].pop_front().expect("front exists");
            match held {
                Held::Packet {
                    key,
                    hdr,
                    payload,
                    wr_id,
                } => self.inner.post_send(dest, key, &hdr, &payload, wr_id)?,
                Held::Control(c) => self.inner.send_control(dest, c)?,
            }
            any = true;
        }
        if any && self.reliable[lane].is_empty() {
            self.reliable_held -= 1;
        }
        Ok(any)
    }

    /// Releases what is due at `now` (everything when None): returns true if any.
    fn release(&mut self, now: Option<Instant>) -> Result<bool> {
        let mut any = false;
        if self.reliable_held > 0 {
            for d in 0..self.reliable.len() {
                any |= self.release_reliable(d, now)?;
            }
        }
        let mut i = 0;
        while i < self.datagrams.len() {
            if now.is_none_or(|t| self.datagrams[i].0 <= t) {
                let (_, dest, bytes) = self.datagrams.swap_remove(i);
                self.post_inner(dest, &bytes)?;
                any = true;
            } else {
                i += 1;
            }
        }
        Ok(any)
    }

    /// Holds `what` for `dest` on the reliable path if the plan says so, or if something
    /// is held for `dest` already (order per peer); else returns it to be posted now.
    fn hold_reliable(&mut self, dest: usize, what: Held) -> Option<Held> {
        let lane = self.lane(dest);
        let queued = !self.reliable[lane].is_empty();
        if !queued && !self.chance(self.plan.reliable_delay) {
            return Some(what);
        }
        let mut due = Instant::now() + self.delay();
        if let Some((last, _, _)) = self.reliable[lane].back() {
            due = due.max(*last);
        }
        if !queued {
            self.reliable_held += 1;
        }
        self.reliable[lane].push_back((due, dest, what));
        self.world.stats.held.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// The rank's stall and kill, at their poll counts.
    fn stall_or_kill(&mut self) {
        self.polls += 1;
        if let Some(s) = self.plan.stall.filter(|s| s.rank == self.rank && !self.stalled) {
            if self.polls >= s.after_polls {
                self.stalled = true;
                self.world.stats.stalls.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(s.duration);
            }
        }
        if let Some(k) = self.plan.kill.filter(|k| k.rank == self.rank && !self.killed) {
            if self.polls >= k.after_polls {
                self.kill();
            }
        }
    }

    /// Kills this rank: what it held is lost, peers see it failed, the launcher does not
    /// abort the others because of it ([`KILLED_HERE`]).
    fn kill(&mut self) {
        self.killed = true;
        KILLED_HERE.with(|k| k.set(true));
        for q in &mut self.reliable {
            q.clear();
        }
        self.reliable_held = 0;
        self.datagrams.clear();
        self.world.kill(self.rank);
        // Counted as done, so that the others' finish does not wait for it.
        self.inner.mark_done();
    }

    /// The soonest due time of what is held.
    fn next_due(&self) -> Option<Instant> {
        let r = self
            .reliable
            .iter()
            .filter_map(|q| q.front().map(|(t, _, _)| *t))
            .min();
        let d = self.datagrams.iter().map(|(t, _, _)| *t).min();
        r.into_iter().chain(d).min()
    }
}

impl Register for FaultFabric {
    type Error = FabricError;

    fn register(&mut self, region: &[u8], lock: bool) -> Result<Registration> {
        self.inner.register(region, lock)
    }
}

impl Fabric for FaultFabric {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.inner.world_size()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn setup_receive(&mut self, sharing: RecvSharing) -> Result<Option<String>> {
        self.xrc_node = (sharing == RecvSharing::Xrc).then_some(self.ranks_per_node);
        self.inner.setup_receive(sharing)
    }

    fn open_endpoint(&mut self, key: PeerKey) -> Result<()> {
        self.inner.open_endpoint(key)
    }

    fn close_endpoint(&mut self, key: PeerKey) -> Result<()> {
        self.inner.close_endpoint(key)
    }

    fn post_send(
        &mut self,
        dest: usize,
        key: PeerKey,
        header: &PacketHeader,
        payload: &[u8],
        wr_id: u64,
    ) -> Result<()> {
        if self.killed {
            return Ok(());
        }
        let held = Held::Packet {
            key,
            hdr: *header,
            payload: payload.to_vec(),
            wr_id,
        };
        match self.hold_reliable(dest, held) {
            Some(_) => self.inner.post_send(dest, key, header, payload, wr_id),
            None => Ok(()),
        }
    }

    fn send_control(&mut self, dest: usize, msg: Control) -> Result<()> {
        if self.killed {
            return Ok(());
        }
        match self.hold_reliable(dest, Held::Control(msg)) {
            Some(_) => self.inner.send_control(dest, msg),
            None => Ok(()),
        }
    }

    fn poll(&mut self, on_event: &mut dyn FnMut(Event<'_>) -> Flow) -> Result<usize> {
        self.stall_or_kill();
        if self.killed {
            return Ok(0);
        }
        let released = self.release(Some(Instant::now()))?;
        let n = self.inner.poll(on_event)?;
        Ok(n + usize::from(released))
    }

    fn bytes(&self) -> FabricBytes {
        self.inner.bytes()
    }

    fn memory_model(&self) -> MemoryModel {
        self.inner.memory_model()
    }

    fn aborted(&self) -> bool {
        self.killed || self.inner.aborted()
    }

    fn abort_job(&mut self, code: i32) -> Result<()> {
        if self.killed {
            return Ok(());
        }
        self.inner.abort_job(code)
    }

    fn mark_done(&mut self) {
        if self.killed {
            return;
        }
        // A finished rank has delivered everything it sent.
        if let Err(e) = self.release(None) {
            // Posting what was held failed: the rank cannot finish cleanly; its peers
            // must not take it for finished with messages missing.
            self.world.note_error(self.rank, e.into());
            self.kill();
            return;
        }
        self.inner.mark_done();
    }

    fn all_done(&self) -> bool {
        self.inner.all_done()
    }

    fn peer_end(&self, peer: usize) -> Option<PeerEnd> {
        if self.world.is_killed(peer) {
            return Some(PeerEnd::Failed);
        }
        self.inner.peer_end(peer)
    }

    fn others_end(&self) -> Option<OthersEnd> {
        if let Some(rank) = self.world.killed_other_than(self.rank) {
            return Some(OthersEnd::Failed { rank });
        }
        self.inner.others_end()
    }

    fn blocks_when_idle(&self) -> bool {
        self.inner.blocks_when_idle()
    }

    fn wait_for_arrival(&self, timeout: Duration) {
        let timeout = match self.next_due() {
            Some(due) => timeout.min(due.saturating_duration_since(Instant::now())),
            None => timeout,
        };
        if !timeout.is_zero() {
            self.inner.wait_for_arrival(timeout);
        }
    }

    fn copies_payload(&self) -> bool {
        self.inner.copies_payload()
    }

    fn standing_credits(&self, depth: u32) -> u32 {
        self.inner.standing_credits(depth)
    }

    fn datagrams(&mut self) -> Option<&mut dyn DatagramPath> {
        if self.inner_datagrams.is_some() {
            Some(self)
        } else {
            None
        }
    }
}

impl DatagramPath for FaultFabric {
    fn datagram_mtu(&self) -> usize {
        self.inner_datagrams.map_or(0, |(mtu, _)| mtu)
    }

    fn datagrams_can_drop(&self) -> bool {
        self.plan.datagram_drop > 0.0 || self.inner_datagrams.is_none_or(|(_, drops)| drops)
    }

    fn post_datagram(&mut self, dest: usize, bytes: &[u8]) -> Result<()> {
        if self.killed {
            return Ok(());
        }
        let world = self.world.clone();
        let stats = &world.stats;
        if self.chance(self.plan.datagram_drop) {
            stats.dropped.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let copies = if self.chance(self.plan.datagram_duplicate) {
            stats.duplicated.fetch_add(1, Ordering::Relaxed);
            2
        } else {
            1
        };
        for _ in 0..copies {
            if self.chance(self.plan.datagram_delay) {
                let due = Instant::now() + self.delay();
                self.datagrams.push((due, dest, bytes.to_vec()));
                self.world.stats.held.fetch_add(1, Ordering::Relaxed);
            } else {
                self.post_inner(dest, bytes)?;
            }
        }
        Ok(())
    }
}
