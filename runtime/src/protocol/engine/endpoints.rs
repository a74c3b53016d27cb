//! The [`Engine`]'s endpoints: opening them (the connect handshake, or at once in `xrc`
//! mode; every peer at start with `lazy_connect` off), accepting connect requests (deferred
//! past `max_endpoints`), and eviction: the least recently used idle endpoint is closed
//! gracefully (each side says how many packets it sent; freed once all arrived).

use std::collections::BTreeSet;
use std::time::Instant;

use crate::fabric::{Control, PeerKey};
use crate::protocol::connection::{DeferredConnect, EndpointState};
use crate::protocol::error::Result;

use super::Engine;

impl Engine {
    /// Connects every peer at start (`lazy_connect` off), progressing until the handshakes
    /// end. Every round runs at `now`, the time given to [`Engine::new`]: its loop may
    /// wait on peers for long with that time standing still, and that is sound, because no
    /// datagram is timed before `new` returns (data datagrams go only for messages
    /// `isend` accepted; the acknowledgements owed to an early peer have no timer).
    pub(super) fn connect_all(&mut self, now: Instant) -> Result<()> {
        let keys: BTreeSet<PeerKey> = (0..self.world)
            .filter(|&p| p != self.rank)
            .map(|p| self.key_of(p))
            .collect();
        for &k in &keys {
            if !self.conns.has_room() {
                break;
            }
            match k {
                // The lower rank initiates; the higher one accepts.
                PeerKey::Rank(peer) if peer < self.rank => {}
                // (xrc: at once.)
                _ => self.open_key(k)?,
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
                .any(|k| self.conns.get(k).map(|e| e.state) == Some(EndpointState::Connecting));
            let live = self.conns.stats().live as usize;
            if !connecting && (live >= want || self.cfg.max_endpoints != 0) {
                return Ok(());
            }
            if self.progress(now)? {
                backoff.reset();
            } else {
                backoff.snooze_on(self.fabric.blocks_when_idle(), |d| {
                    self.fabric.wait_for_arrival(d)
                });
            }
        }
    }

    /// Opens endpoint `key`: toward a rank (symmetric modes) it starts the handshake,
    /// toward a node (xrc) it opens at once.
    pub(super) fn open_key(&mut self, key: PeerKey) -> Result<()> {
        self.fabric.open_endpoint(key)?;
        match key {
            PeerKey::Rank(peer) => {
                self.conns.insert(key, EndpointState::Connecting);
                self.conns.note_peer(peer);
                let grant = self.bank.initial_grant(peer);
                self.fabric.send_control(peer, Control::ConnectReq { grant })?;
            }
            PeerKey::Node(_) => self.conns.insert(key, EndpointState::Open),
        }
        Ok(())
    }

    pub(super) fn accept(&mut self, src: usize, grant: u32) -> Result<()> {
        let key = PeerKey::Rank(src);
        self.fabric.open_endpoint(key)?;
        self.conns.insert(key, EndpointState::Open);
        self.conns.note_peer(src);
        self.peers.entry(src).or_default().credits += grant;
        let mine = self.bank.initial_grant(src);
        Ok(self
            .fabric
            .send_control(src, Control::ConnectAck { grant: mine })?)
    }

    /// True when nothing is queued for endpoint `key` (its rank, or any rank of its node).
    pub(super) fn is_idle(&self, key: PeerKey) -> bool {
        match key {
            PeerKey::Rank(peer) => self.peers.get(&peer).is_none_or(|p| p.queue.is_empty()),
            PeerKey::Node(_) => !self.active.iter().any(|&p| self.key_of(p) == key),
        }
    }

    pub(super) fn start_close(&mut self, key: PeerKey) -> Result<()> {
        self.conns.note_eviction();
        match key {
            PeerKey::Rank(peer) => {
                let sent = self.conns.get(key).expect("endpoint").sent;
                self.conns.set_closing(key, None);
                self.fabric.send_control(peer, Control::Close { sent })?;
            }
            PeerKey::Node(_) => self.conns.set_closing(key, Some(0)),
        }
        Ok(())
    }

    /// Frees drained closing endpoints, accepts deferred connects, opens endpoints for
    /// queued data, evicts past the cap.
    pub(super) fn manage_endpoints(&mut self) -> Result<bool> {
        let mut work = false;
        if self.conns.closing() > 0 {
            for key in self.conns.keys() {
                let ep = self.conns.get(key).expect("endpoint");
                if let EndpointState::Closing { peer_sent: Some(n) } = ep.state {
                    if ep.received == n && ep.inflight == 0 {
                        self.fabric.close_endpoint(key)?;
                        let ep = self.conns.remove(key);
                        if let PeerKey::Rank(peer) = key {
                            // (The datagram path runs only with endpoints toward ranks.)
                            if let (Some(ep), Some(dg)) = (ep, self.dg.as_deref_mut()) {
                                dg.endpoint_closed(peer, ep.sent, ep.received);
                            }
                            let p = self.peers.entry(peer).or_default();
                            p.credits = 0;
                            p.requested = false;
                            self.bank.reset_peer(peer);
                        }
                        work = true;
                    }
                }
            }
        }
        work |= self.open_promoted()?;
        if self.dg.is_some() && !self.conns.has_room() {
            // The datagram path never evicts for a deferred connect: refuse it.
            let mut i = 0;
            while i < self.conns.deferred.len() {
                let DeferredConnect { peer, .. } = self.conns.deferred[i];
                if self.conns.get(PeerKey::Rank(peer)).is_none() {
                    self.conns.deferred.remove(i);
                    self.refuse(peer)?;
                    work = true;
                } else {
                    i += 1;
                }
            }
        }
        let mut i = 0;
        while i < self.conns.deferred.len() && (self.conns.has_room() || self.conns.all_connecting()) {
            let DeferredConnect { peer, grant } = self.conns.deferred[i];
            if self.conns.get(PeerKey::Rank(peer)).is_none() {
                self.conns.deferred.remove(i);
                self.accept(peer, grant)?;
                work = true;
            } else {
                i += 1;
            }
        }
        let mut need_room = self.dg.is_none() && !self.conns.deferred.is_empty();
        // `open_key` does not change `active`.
        for i in 0..self.active.0.len() {
            let key = self.key_of(self.active.0[i]);
            if self.conns.get(key).is_some() {
                continue;
            }
            let dest = self.active.0[i];
            if self.dg.is_some() {
                // Room and not refused: an endpoint; otherwise the datagram path (no
                // eviction).
                if !self.datagram_route(dest) {
                    self.open_key(key)?;
                    work = true;
                }
            } else if self.conns.has_room() {
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
}
