//! Receiver-side credit accounting: how many packets each sender may post into this
//! rank's receive buffers, so that a packet never arrives without a posted buffer (no
//! receiver-not-ready), also under many-to-one traffic.
//!
//! * `per-peer`: each endpoint's `recv_depth` buffers are its sender's credits; every
//!   consumed packet is given back to the same sender ([`CreditBank::consumed`]).
//! * `shared`/`xrc`: the `srq_depth` buffers of the shared queue are handed out in fair
//!   shares (half the free buffers split among the waiting senders, at least one). A
//!   sender with data and no credit asks ([`Control::CreditRequest`]); waiting
//!   senders are served round-robin as buffers are consumed; a sender that says it has
//!   more queued (`PacketHeader::more`) goes to the back of the queue; an idle sender keeps
//!   a standing share while nobody waits (so ping-pong needs no request), and is asked
//!   to give it back ([`Control::Revoke`]) when others wait and no buffer is free. The
//!   share is one credit, given back at each consumed packet, unless the fabric asks for
//!   more ([`crate::fabric::Fabric::standing_credits`], at most the queue over the peers,
//!   so that every peer can hold its share at once): then it is topped up only once half
//!   of it was used, one grant per half share instead of one per packet (shm, where a
//!   grant is a control cell and a bell, a third of an 8 B round trip).
//!
//! Requests and data travel apart (local polls data before controls, verbs sends controls
//! on TCP), so a request can arrive after packets its sender posted later: one from a
//! sender that still holds credits counts only once they are consumed, and a packet that
//! says no more takes its sender out of the queue (an idle sender left there would get
//! shares it sits on, and a waiting holder is never revoked).
//!
//! Invariant (checked in tests): `free + sum(outstanding) == depth` for the shared queue.
//!
//! [`Control::CreditRequest`]: crate::fabric::Control::CreditRequest
//! [`Control::Revoke`]: crate::fabric::Control::Revoke

use std::collections::VecDeque;

use crate::core::intmap::IntMap;

#[derive(Default, Clone, Copy, Debug)]
pub(crate) struct CreditHolder {
    outstanding: u32,
    revoked: bool,
    waiting: bool,
    /// It asked for credit while it still held some (see `CreditBank::request`).
    deferred: bool,
}

/// Credits given to one sender, decided by the bank and not yet sent to it
/// ([`CreditBank::take_grants_into`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The sender, by rank.
    pub peer: usize,
    /// The credits it is given.
    pub credits: u32,
}

/// Credit accounting of one rank's receive side.
#[derive(Debug)]
pub struct CreditBank {
    shared: bool,
    depth: u32,
    free: u32,
    holders: IntMap<usize, CreditHolder>,
    waiters: VecDeque<usize>,
    /// Grants decided but not sent yet, by peer (drained in peer order; a hash map keeps
    /// its allocation across drains).
    grants: IntMap<usize, u32>,
    revokes: Vec<usize>,
    /// The standing share of an idle sender (shared queue), at least 1.
    standing: u32,
}

impl CreditBank {
    /// A bank for a shared queue of `depth` buffers (`shared = true`), or for per-endpoint
    /// queues of `depth` buffers each (`shared = false`).
    pub fn new(shared: bool, depth: u32) -> CreditBank {
        CreditBank {
            shared,
            depth,
            free: depth,
            holders: IntMap::default(),
            waiters: VecDeque::new(),
            grants: IntMap::default(),
            revokes: Vec::new(),
            standing: 1,
        }
    }

    /// The bank with a standing share of `n` credits per idle sender (shared queue;
    /// clamped to 1..=depth): see the module.
    pub fn with_standing(mut self, n: u32) -> CreditBank {
        self.standing = n.clamp(1, self.depth.max(1));
        self
    }

    /// Credits handed to a newly connected peer: the whole per-endpoint queue, or the
    /// standing share of the shared queue (as much of it as is free) if a buffer is free
    /// and nobody waits.
    pub fn initial_grant(&mut self, peer: usize) -> u32 {
        if !self.shared {
            self.holders.entry(peer).or_default().outstanding = self.depth;
            return self.depth;
        }
        if self.free > 0 && self.waiters.is_empty() && self.outstanding(peer) == 0 {
            let n = self.standing.min(self.free);
            self.free -= n;
            let h = self.holders.entry(peer).or_default();
            h.outstanding += n;
            h.revoked = false;
            n
        } else {
            0
        }
    }

    /// A packet from `peer` was consumed and its buffer reposted.
    pub fn consumed(&mut self, peer: usize, more: bool) {
        let h = self.holders.entry(peer).or_default();
        h.outstanding = h.outstanding.saturating_sub(1);
        if !self.shared {
            h.outstanding += 1;
            *self.grants.entry(peer).or_default() += 1;
            return;
        }
        let asked = h.outstanding == 0 && std::mem::take(&mut h.deferred);
        if !more && self.waiters.is_empty() {
            // An idle sender's share is topped up once half of it is used (the consumed
            // buffer first back to `free`): one grant per half share; a share of one comes
            // straight back at each packet. With nobody waiting there is nothing to
            // distribute, and a sender asking (`asked`: none left) is served by the top-up.
            self.free += 1;
            if h.outstanding * 2 <= self.standing {
                let n = (self.standing - h.outstanding).min(self.free);
                self.free -= n;
                give(h, &mut self.grants, peer, n);
            } else {
                h.revoked = false;
            }
            return;
        }
        if !more {
            // The sender's queue was empty when it posted this: it waits for nothing (a
            // waiting holder is never revoked, and one left in the queue would get shares
            // it sits on while others wait), and a revoke it ignored while busy can be
            // sent again now that it may be idle.
            h.revoked = false;
            if std::mem::take(&mut h.waiting) {
                self.waiters.retain(|&p| p != peer);
            }
        }
        self.free += 1;
        if more || asked {
            self.enqueue(peer);
        }
        self.distribute();
    }

    /// `peer` asks for credit (shared modes).
    pub fn request(&mut self, peer: usize) {
        // While `peer` holds credits, the request overtook packets it sent before it
        // (controls and data travel apart) or a grant is on its way to it: it counts once
        // those credits are consumed (`consumed`). Queued now, an idle sender could sit
        // on its shares while others wait (a waiting holder is not revoked).
        if self.shared && self.outstanding(peer) > 0 {
            self.holders.entry(peer).or_default().deferred = true;
            return;
        }
        if self.shared {
            self.enqueue(peer);
            self.distribute();
        }
    }

    /// `peer` gave back `n` unused credits.
    pub fn returned(&mut self, peer: usize, n: u32) {
        let h = self.holders.entry(peer).or_default();
        let n = n.min(h.outstanding);
        h.outstanding -= n;
        h.revoked = false;
        if self.shared {
            self.free += n;
            self.distribute();
        }
    }

    /// The endpoint to `peer` was closed after all its traffic drained: its unused credits
    /// come back (and so do grants not yet sent).
    pub fn reset_peer(&mut self, peer: usize) {
        if let Some(h) = self.holders.remove(&peer) {
            if self.shared {
                self.free += h.outstanding;
            }
        }
        self.grants.remove(&peer);
        self.waiters.retain(|&p| p != peer);
        self.revokes.retain(|&p| p != peer);
        self.distribute();
    }

    fn enqueue(&mut self, peer: usize) {
        let h = self.holders.entry(peer).or_default();
        if !h.waiting {
            h.waiting = true;
            self.waiters.push_back(peer);
        }
    }

    fn grant_n(&mut self, peer: usize, n: u32) {
        self.free -= n;
        let h = self.holders.entry(peer).or_default();
        give(h, &mut self.grants, peer, n);
    }

    fn distribute(&mut self) {
        while self.free > 0 {
            let Some(p) = self.waiters.pop_front() else { break };
            self.holders.entry(p).or_default().waiting = false;
            // A fair share: half of the free buffers split among the senders waiting now,
            // at least one. A lone busy sender gets a window of many buffers (pipelining);
            // under many-to-one traffic every waiter gets one in turn.
            let waiting = self.waiters.len() as u32 + 1;
            let n = (self.free / (2 * waiting)).max(1);
            self.grant_n(p, n);
        }
        if self.free == 0 && !self.waiters.is_empty() {
            for (&p, h) in self.holders.iter_mut() {
                if h.outstanding > 0 && !h.revoked && !h.waiting {
                    h.revoked = true;
                    self.revokes.push(p);
                }
            }
        }
    }

    /// Credits currently held by `peer`.
    pub fn outstanding(&self, peer: usize) -> u32 {
        self.holders.get(&peer).map_or(0, |h| h.outstanding)
    }

    /// Free buffers of the shared queue (not granted).
    pub fn free(&self) -> u32 {
        self.free
    }

    /// Grants decided but not yet sent, drained.
    #[cfg(test)]
    pub fn take_grants(&mut self) -> Vec<Grant> {
        let mut out = Vec::new();
        self.take_grants_into(&mut out);
        out
    }

    /// Grants decided but not yet sent, drained into `out` (cleared first) in peer order,
    /// without allocating once `out` and the bank have grown to the traffic.
    pub fn take_grants_into(&mut self, out: &mut Vec<Grant>) {
        out.clear();
        out.extend(self.grants.drain().map(|(peer, credits)| Grant { peer, credits }));
        out.sort_unstable_by_key(|g| g.peer);
    }

    /// Revocations decided but not yet sent, drained.
    pub fn take_revokes(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.revokes)
    }

    /// True when grants or revokes wait to be sent.
    pub fn has_pending(&self) -> bool {
        !self.grants.is_empty() || !self.revokes.is_empty()
    }

    /// `free + outstanding == depth` (shared queue only).
    pub fn is_consistent(&self) -> bool {
        !self.shared || self.free + self.holders.values().map(|h| h.outstanding).sum::<u32>() == self.depth
    }
}

/// `n` more credits for `peer` (holder `h`), to be sent.
fn give(h: &mut CreditHolder, grants: &mut IntMap<usize, u32>, peer: usize, n: u32) {
    h.outstanding += n;
    h.revoked = false;
    *grants.entry(peer).or_default() += n;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `credits` for `peer`.
    fn g(peer: usize, credits: u32) -> Grant {
        Grant { peer, credits }
    }

    #[test]
    fn shared_bank_serves_waiters_round_robin_and_never_overgrants() {
        let mut b = CreditBank::new(true, 2);
        for p in 1..=5 {
            b.request(p);
        }
        assert_eq!(b.take_grants(), vec![g(1, 1), g(2, 1)]);
        assert_eq!(b.free(), 0);
        assert!(b.is_consistent());
        // 1 consumed with more queued: goes behind 3, 4, 5.
        b.consumed(1, true);
        assert_eq!(b.take_grants(), vec![g(3, 1)]);
        b.consumed(2, false);
        assert_eq!(b.take_grants(), vec![g(4, 1)]);
        b.consumed(3, false);
        b.consumed(4, false);
        assert_eq!(b.take_grants(), vec![g(1, 1), g(5, 1)]);
        assert!(b.is_consistent());
        assert_eq!(b.free(), 0);
    }

    #[test]
    fn lone_busy_sender_gets_a_window_of_buffers() {
        let mut b = CreditBank::new(true, 64);
        b.request(3);
        assert_eq!(b.take_grants(), vec![g(3, 32)]);
        b.request(4);
        assert_eq!(b.take_grants(), vec![g(4, 16)]);
        b.consumed(3, true);
        assert_eq!(b.take_grants(), vec![g(3, 8)]);
        assert!(b.is_consistent());
    }

    #[test]
    fn a_request_that_overtook_the_senders_packets_counts_once_they_are_consumed() {
        // Found by the fault harness (seed 175): a credit request travels apart from the
        // data, so it can arrive after packets sent after it. Queued then, the sender sat
        // on its shares as a waiting holder (never revoked) while others waited: a hang.
        let mut b = CreditBank::new(true, 4);
        b.request(0);
        assert_eq!(b.take_grants(), vec![g(0, 2)]);
        b.request(0);
        assert!(b.take_grants().is_empty(), "0 still holds 2 credits: not queued");
        b.request(1);
        assert_eq!(b.take_grants(), vec![g(1, 1)]);
        b.consumed(0, false);
        assert!(b.take_grants().is_empty());
        // Its last credit consumed: the request counts now (nobody waits: one credit).
        b.consumed(0, false);
        assert_eq!(b.take_grants(), vec![g(0, 1)]);
        assert!(b.is_consistent());
    }

    #[test]
    fn a_sender_that_said_it_has_no_more_leaves_the_queue() {
        let mut b = CreditBank::new(true, 4);
        b.request(0);
        b.request(1);
        b.request(3);
        assert_eq!(b.take_grants(), vec![g(0, 2), g(1, 1), g(3, 1)]);
        b.request(2);
        // 0's packet says more: 0 queues behind 2, which gets the freed buffer.
        b.consumed(0, true);
        assert_eq!(b.take_grants(), vec![g(2, 1)]);
        // 0's last packet says no more (its queue emptied): it waits for nothing, so the
        // freed buffer stays free instead of going to an idle sender.
        b.consumed(0, false);
        assert!(b.take_grants().is_empty());
        assert_eq!(b.free(), 1);
        assert!(b.is_consistent());
    }

    #[test]
    fn idle_sender_keeps_one_standing_credit_until_revoked() {
        let mut b = CreditBank::new(true, 1);
        assert_eq!(b.initial_grant(7), 1);
        assert_eq!(b.initial_grant(8), 0);
        b.consumed(7, false);
        assert_eq!(
            b.take_grants(),
            vec![g(7, 1)],
            "standing credit back to the idle sender"
        );
        b.request(8);
        assert!(b.take_grants().is_empty());
        assert_eq!(b.take_revokes(), vec![7]);
        b.returned(7, 1);
        assert_eq!(b.take_grants(), vec![g(8, 1)]);
        assert!(b.is_consistent());
    }

    #[test]
    fn per_peer_bank_returns_each_consumed_credit_to_its_sender() {
        let mut b = CreditBank::new(false, 4);
        assert_eq!(b.initial_grant(3), 4);
        b.consumed(3, true);
        b.consumed(3, false);
        assert_eq!(b.take_grants(), vec![g(3, 2)]);
        b.reset_peer(3);
        assert_eq!(b.outstanding(3), 0);
    }

    #[test]
    fn reset_reclaims_unused_shared_credits() {
        let mut b = CreditBank::new(true, 3);
        b.request(1);
        b.request(1);
        b.request(2);
        let _ = b.take_grants();
        b.reset_peer(1);
        assert_eq!(b.free(), 2);
        assert!(b.is_consistent());
    }

    #[test]
    fn a_standing_share_is_topped_up_once_half_used() {
        // 3 peers over 12 buffers: a share of 4 each, all held at once.
        let mut b = CreditBank::new(true, 12).with_standing(4);
        assert_eq!(
            [b.initial_grant(1), b.initial_grant(2), b.initial_grant(3)],
            [4, 4, 4]
        );
        assert_eq!(b.free(), 0);
        assert_eq!(b.initial_grant(4), 0, "nothing free for a fourth");
        // Peer 1 idle-sends: nothing back after its first packet, 2 back after its second
        // (half its share used), then again every second packet.
        b.consumed(1, false);
        assert!(b.take_grants().is_empty());
        assert_eq!(b.outstanding(1), 3);
        b.consumed(1, false);
        assert_eq!(b.take_grants(), vec![g(1, 2)]);
        assert_eq!(b.outstanding(1), 4);
        assert!(b.is_consistent());
        for _ in 0..3 {
            b.consumed(1, false);
        }
        assert_eq!(b.take_grants(), vec![g(1, 2)], "at the second of the three");
        assert_eq!(b.outstanding(1), 3);
        assert!(b.is_consistent());
        // A sender with more queued goes the fair-share way, as with a share of 1.
        b.consumed(2, true);
        assert_eq!(b.take_grants(), vec![g(2, 1)]);
        // A share larger than the queue is clamped to it.
        let mut b = CreditBank::new(true, 3).with_standing(10);
        assert_eq!(b.initial_grant(1), 3);
        b.consumed(1, false);
        b.consumed(1, false);
        assert_eq!(b.take_grants(), vec![g(1, 2)]);
        assert!(b.is_consistent());
    }
}
