//! The endpoint table of one rank (the connection manager's state): which endpoints (QP
//! analogues) are live and in which state, least-recently-used order for eviction past
//! `max_endpoints`, connect requests deferred while at the cap, and the endpoint counters
//! of the footprint (live, peak, ever opened, peers connected).
//!
//! Endpoints are keyed by [`PeerKey`]: `PeerKey::Rank` in `per-peer` and `shared` mode,
//! `PeerKey::Node` in `xrc` mode (one endpoint per remote node). The table knows which
//! ([`ConnectionTable::per_node`]) and is the one place that turns a peer rank into its key
//! ([`ConnectionTable::key_of`]).
//!
//! The handshakes that move endpoints between states are driven by the progress engine
//! ([`crate::protocol::engine`]); this module owns the bookkeeping and the eviction policy.

use std::collections::VecDeque;

use crate::core::intmap::{IntMap, IntSet};
use crate::fabric::PeerKey;

/// Life cycle of an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointState {
    /// Connect request sent, waiting for the peer's answer. No data may be posted.
    Connecting,
    /// Usable.
    Open,
    /// Close sent or received; no new data posted. `peer_sent` = the peer's data count
    /// once its close message arrived. Freed when everything it sent has arrived and our
    /// own sends completed.
    Closing {
        /// Packets the peer sent on this endpoint, once known.
        peer_sent: Option<u64>,
    },
}

/// One endpoint.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// State.
    pub state: EndpointState,
    /// Data packets posted on this incarnation.
    pub sent: u64,
    /// Data packets received on this incarnation.
    pub received: u64,
    /// Posted sends whose completion has not been polled yet.
    pub inflight: u32,
    last_use: u64,
    /// `sent + received` at the last promotion check (datagram mode's activity).
    mark: u64,
}

/// Endpoint counters reported in the footprint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Endpoints live now (including connecting and closing ones).
    pub live: u64,
    /// Most endpoints live at once.
    pub peak: u64,
    /// Endpoints ever opened (reopens count again).
    pub opened: u64,
    /// Endpoints closed by eviction.
    pub evicted: u64,
    /// Distinct peer ranks ever communicated with.
    pub peers_connected: u64,
}

/// A connect request received while at the cap, waiting for room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeferredConnect {
    /// The rank that asked.
    pub peer: usize,
    /// The credits it granted us.
    pub grant: u32,
}

/// An open endpoint's traffic since the last [`ConnectionTable::mark_activity`]
/// ([`ConnectionTable::least_active`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Activity {
    /// The endpoint.
    pub key: PeerKey,
    /// Packets sent and received on it since the mark.
    pub packets: u64,
}

/// The endpoint table.
pub struct ConnectionTable {
    /// The endpoints by their key's number ([`PeerKey::index`]). Every key of one table is
    /// of the same kind (ranks, or nodes with `per_node`), so the number alone keys the map,
    /// 8 bytes per entry as the memory model counts; `slot` and `key` convert.
    eps: IntMap<usize, Endpoint>,
    /// Ranks per node when the endpoints lead to nodes (`xrc`), else `None` (ranks).
    per_node: Option<usize>,
    max: usize,
    tick: u64,
    peers: IntSet<usize>,
    /// Endpoints in the closing state (kept by `insert`, `set_closing` and `remove`).
    closing: usize,
    protect_fresh: bool,
    /// Connect requests received while at the cap, in arrival order.
    pub deferred: VecDeque<DeferredConnect>,
    stats: EndpointStats,
}

impl ConnectionTable {
    /// A table with a cap of `max_endpoints` live endpoints (0 = none).
    pub fn new(max_endpoints: usize) -> ConnectionTable {
        ConnectionTable {
            eps: IntMap::default(),
            per_node: None,
            max: max_endpoints,
            tick: 0,
            closing: 0,
            protect_fresh: false,
            peers: IntSet::default(),
            deferred: VecDeque::new(),
            stats: EndpointStats::default(),
        }
    }

    /// Endpoints lead to nodes of `ranks_per_node` ranks (`xrc`): keys are
    /// `PeerKey::Node`, not `PeerKey::Rank`.
    pub fn per_node(mut self, ranks_per_node: usize) -> ConnectionTable {
        self.per_node = Some(ranks_per_node);
        self
    }

    /// The key of the endpoint toward rank `peer`: the rank, or (`per_node`) its node.
    #[inline]
    pub fn key_of(&self, peer: usize) -> PeerKey {
        match self.per_node {
            None => PeerKey::Rank(peer),
            Some(n) => PeerKey::Node(peer / n),
        }
    }

    /// The map's number of `key`; `None` for a key of the other kind, never in this table.
    #[inline]
    fn slot(&self, key: PeerKey) -> Option<usize> {
        match (key, self.per_node) {
            (PeerKey::Rank(r), None) => Some(r),
            (PeerKey::Node(n), Some(_)) => Some(n),
            _ => None,
        }
    }

    /// The key of the map's number `slot` (the inverse of `slot`).
    #[inline]
    fn key(&self, slot: usize) -> PeerKey {
        match self.per_node {
            None => PeerKey::Rank(slot),
            Some(_) => PeerKey::Node(slot),
        }
    }

    /// The endpoint `key`.
    #[inline]
    pub fn get(&self, key: PeerKey) -> Option<&Endpoint> {
        self.eps.get(&self.slot(key)?)
    }

    /// The endpoint `key`, mutable.
    #[inline]
    pub fn get_mut(&mut self, key: PeerKey) -> Option<&mut Endpoint> {
        let slot = self.slot(key)?;
        self.eps.get_mut(&slot)
    }

    /// True if a new endpoint may be created now.
    pub fn has_room(&self) -> bool {
        self.max == 0 || self.eps.len() < self.max
    }

    /// True when endpoints are live and every one is still connecting: none can be evicted
    /// to make room, so a connect request deferred for room could wait for ever when its
    /// sender is in the same position (full ranks connecting to each other in a cycle). The
    /// engine then accepts it above the cap and closes endpoints again once idle.
    pub fn all_connecting(&self) -> bool {
        !self.eps.is_empty() && self.eps.values().all(|e| e.state == EndpointState::Connecting)
    }

    /// True when more endpoints are live than the cap (after such an accept).
    pub fn over_cap(&self) -> bool {
        self.max != 0 && self.eps.len() > self.max
    }

    /// Creates endpoint `key` in `state` (a key of the table's kind: [`ConnectionTable::key_of`]).
    pub fn insert(&mut self, key: PeerKey, state: EndpointState) {
        let Some(slot) = self.slot(key) else {
            debug_assert!(false, "endpoint key {key:?} of the other kind");
            return;
        };
        self.tick += 1;
        let prev = self.eps.insert(
            slot,
            Endpoint {
                state,
                sent: 0,
                received: 0,
                inflight: 0,
                last_use: self.tick,
                mark: 0,
            },
        );
        debug_assert!(prev.is_none());
        if matches!(state, EndpointState::Closing { .. }) {
            self.closing += 1;
        }
        self.stats.opened += 1;
        self.stats.live = self.eps.len() as u64;
        self.stats.peak = self.stats.peak.max(self.stats.live);
    }

    /// Removes endpoint `key`.
    pub fn remove(&mut self, key: PeerKey) -> Option<Endpoint> {
        let ep = self.eps.remove(&self.slot(key)?);
        if ep
            .as_ref()
            .is_some_and(|e| matches!(e.state, EndpointState::Closing { .. }))
        {
            self.closing -= 1;
        }
        self.stats.live = self.eps.len() as u64;
        ep
    }

    /// Marks `key` as just used (LRU).
    pub fn touch(&mut self, key: PeerKey) {
        self.get_touched(key);
    }

    /// The endpoint `key`, mutable, marked as just used (LRU): `get_mut` + `touch` in one
    /// lookup.
    #[inline]
    pub fn get_touched(&mut self, key: PeerKey) -> Option<&mut Endpoint> {
        self.tick += 1;
        let slot = self.slot(key)?;
        let ep = self.eps.get_mut(&slot)?;
        ep.last_use = self.tick;
        Some(ep)
    }

    /// Records that `peer` was communicated with.
    pub fn note_peer(&mut self, peer: usize) {
        if self.peers.insert(peer) {
            self.stats.peers_connected = self.peers.len() as u64;
        }
    }

    /// Moves endpoint `key` to the closing state with the peer's data count if known.
    /// Endpoints enter the closing state only through here (the count is kept, not
    /// scanned for on every progress call).
    pub fn set_closing(&mut self, key: PeerKey, peer_sent: Option<u64>) {
        let slot = self.slot(key).expect("endpoint of the table's kind");
        let ep = self.eps.get_mut(&slot).expect("endpoint");
        if !matches!(ep.state, EndpointState::Closing { .. }) {
            self.closing += 1;
        }
        ep.state = EndpointState::Closing { peer_sent };
    }

    /// Number of endpoints in the closing state.
    pub fn closing(&self) -> usize {
        debug_assert_eq!(
            self.closing,
            self.eps
                .values()
                .filter(|e| matches!(e.state, EndpointState::Closing { .. }))
                .count()
        );
        self.closing
    }

    /// Protects endpoints that have not carried a packet yet from eviction (with lazy
    /// connects every endpoint is opened for queued data, so its first packet is coming).
    /// Without it, a rank at the cap with connect requests waiting closed an endpoint right
    /// after opening it, before either side sent, and the ranks cycled through connects and
    /// closes for ever (seen with `max_endpoints` 1 and an all-to-all exchange).
    pub fn protect_fresh(mut self, on: bool) -> ConnectionTable {
        self.protect_fresh = on;
        self
    }

    /// The least recently used open endpoint to evict, preferring idle ones
    /// (`is_idle(key)`: nothing queued for it, nothing in flight); never one that has not
    /// carried a packet yet when [`ConnectionTable::protect_fresh`] is on.
    pub fn victim(&self, is_idle: impl Fn(PeerKey) -> bool) -> Option<PeerKey> {
        let fresh = self.protect_fresh;
        let open = self
            .eps
            .iter()
            .filter(|(_, e)| e.state == EndpointState::Open && !(fresh && e.sent == 0 && e.received == 0));
        let idle = open
            .clone()
            .filter(|(&k, e)| e.inflight == 0 && is_idle(self.key(k)))
            .min_by_key(|(_, e)| e.last_use);
        idle.or_else(|| open.min_by_key(|(_, e)| e.last_use))
            .map(|(&k, _)| self.key(k))
    }

    /// The open endpoint with the fewest packets (both ways) since the last
    /// [`ConnectionTable::mark_activity`], and that count; ties go to the lower key.
    pub fn least_active(&self) -> Option<Activity> {
        self.eps
            .iter()
            .filter(|(_, e)| e.state == EndpointState::Open)
            .map(|(&k, e)| (k, (e.sent + e.received).saturating_sub(e.mark)))
            .min_by_key(|&(k, a)| (a, k))
            .map(|(k, packets)| Activity {
                key: self.key(k),
                packets,
            })
    }

    /// Starts a new activity interval for [`ConnectionTable::least_active`].
    pub fn mark_activity(&mut self) {
        for e in self.eps.values_mut() {
            e.mark = e.sent + e.received;
        }
    }

    /// Records an eviction.
    pub fn note_eviction(&mut self) {
        self.stats.evicted += 1;
    }

    /// True if any endpoint has a posted send not completed yet.
    pub fn any_inflight(&self) -> bool {
        self.eps.values().any(|e| e.inflight > 0)
    }

    /// Keys of all endpoints.
    pub fn keys(&self) -> Vec<PeerKey> {
        self.eps.keys().map(|&k| self.key(k)).collect()
    }

    /// Counters.
    pub fn stats(&self) -> EndpointStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_peak_and_lru_victim() {
        let mut t = ConnectionTable::new(2);
        let (k5, k6, k7) = (PeerKey::Rank(5), PeerKey::Rank(6), PeerKey::Rank(7));
        assert_eq!(t.key_of(5), k5);
        t.insert(k5, EndpointState::Open);
        t.insert(k6, EndpointState::Open);
        assert!(!t.has_room());
        t.touch(k5);
        assert_eq!(t.victim(|_| true), Some(k6), "least recently used");
        assert_eq!(t.victim(|k| k == k5), Some(k5), "idle preferred over busy");
        t.set_closing(k6, None);
        assert_eq!(t.victim(|_| true), Some(k5), "closing endpoints are not victims");
        assert_eq!(t.closing(), 1);
        t.remove(k6);
        t.insert(k7, EndpointState::Connecting);
        let s = t.stats();
        assert_eq!((s.live, s.peak, s.opened), (2, 2, 3));
    }

    /// In `xrc` mode the table's endpoints lead to nodes: a rank's key is its node, and
    /// every key the table gives back is a `PeerKey::Node`; a rank key is never one of its
    /// endpoints, even where its number is a node's (what a bare `usize` key could not tell).
    #[test]
    fn per_node_tables_key_by_node() {
        let mut t = ConnectionTable::new(0).per_node(4);
        assert_eq!(
            (t.key_of(0), t.key_of(3), t.key_of(9)),
            (PeerKey::Node(0), PeerKey::Node(0), PeerKey::Node(2))
        );
        t.insert(t.key_of(9), EndpointState::Open);
        t.insert(t.key_of(1), EndpointState::Open);
        assert!(t.get(PeerKey::Node(2)).is_some());
        assert!(t.get(PeerKey::Rank(2)).is_none(), "a rank is not a node");
        assert!(t.remove(PeerKey::Rank(0)).is_none());
        let mut keys = t.keys();
        keys.sort();
        assert_eq!(keys, [PeerKey::Node(0), PeerKey::Node(2)]);
        t.get_touched(PeerKey::Node(0)).expect("endpoint").sent += 1;
        assert_eq!(t.victim(|_| true), Some(PeerKey::Node(2)), "least recently used");
        assert_eq!(
            t.least_active(),
            Some(Activity {
                key: PeerKey::Node(2),
                packets: 0
            })
        );
        assert_eq!(t.stats().live, 2);
    }
}
