//! The [`Engine`]'s datagram path (`endpoint_overflow=datagram`, past `max_endpoints`):
//! which destinations go over it, posting message chunks as datagrams (each kept in a pool
//! buffer until acknowledged, at most `datagram::WINDOW` per peer), taking received
//! datagrams (in sequence into tag matching, out-of-order ones held in pool buffers,
//! duplicates dropped), retransmission on timeouts and duplicate acknowledgements, the
//! acknowledgements owed, and the promotion of active datagram peers to endpoints. The
//! per-peer reliability state machine is `protocol::datagram`.
//!
//! Ordering across the two paths of one peer: a datagram carries how many endpoint packets
//! its sender sent the receiver before it (on endpoints closed since), and the receiver
//! takes it only once all of them arrived (until then it is dropped unacknowledged and
//! comes again); the sender posts on an endpoint only once every datagram to that peer is
//! acknowledged, and a datagram is acknowledged only after it went to tag matching.

use std::time::Instant;

use crate::core::intmap::IntMap;
use crate::core::memory::AllocError;
use crate::core::pool::{BufId, BufferPool};
use crate::fabric::error::FabricError;
use crate::fabric::{DatagramPath, PacketHeader, PeerKey};
use crate::protocol::connection::{Activity, ConnectionTable, EndpointState};
use crate::protocol::datagram::{DatagramHeader, DatagramPeer, Rx, HEADER_BYTES, KIND_ACK, KIND_DATA};
use crate::protocol::error::{ProtocolError, Result};
use crate::protocol::matching::{Matcher, RecvInto};

use super::Engine;

/// Data datagrams sent and received before the promotion policy looks at the peers'
/// activity again.
pub const PROMOTE_EVERY: u32 = 512;
/// A datagram peer is promoted when its activity exceeds the least active endpoint's by
/// this many packets (and by half of it).
pub const PROMOTE_MARGIN: u64 = 64;

/// Counters of the datagram path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DatagramStats {
    /// Data datagrams posted (first transmissions).
    pub sent: u64,
    /// Data datagrams posted again (timeouts, duplicate acknowledgements).
    pub resent: u64,
    /// Acknowledgement-only datagrams posted.
    pub acks: u64,
    /// Data datagrams received that were duplicates, beyond the window, or early.
    pub dropped: u64,
    /// Datagram peers promoted to an endpoint.
    pub promoted: u64,
}

/// The rank's datagram state.
pub(super) struct Datagrams {
    pub(super) peers: IntMap<usize, DatagramPeer>,
    /// Payload bytes per datagram.
    pub(super) chunk: usize,
    /// Peers with datagrams in flight (sorted).
    waiting: Vec<usize>,
    /// Peers owed an acknowledgement.
    acks: Vec<usize>,
    /// Peers whose oldest datagram goes again now.
    resend: Vec<usize>,
    /// Peers whose state appeared in a poll (to be counted as connected).
    fresh: Vec<usize>,
    scratch: Vec<BufId>,
    /// Out-of-order arrivals held, all peers: (peer, sequence number, pool buffer). At
    /// most one entry per pool buffer; usually empty (a linear search finds one).
    held: Vec<(usize, u32, BufId)>,
    /// The time of the round running ([`Engine::progress`]'s `now`, microseconds since
    /// `epoch`); `None` outside a round: a datagram sent or acknowledged then (by `isend`,
    /// or while a direct send polls) has its deadline armed by the next round.
    pub(super) now_us: Option<u64>,
    /// The latest round time given (microseconds since `epoch`): a round whose `now` is
    /// earlier runs at this one instead, so the path's time never runs backwards.
    latest_us: u64,
    /// The zero of the peers' times (`DatagramPeer` keeps microseconds since it): the `now`
    /// given to [`Engine::new`].
    epoch: Instant,
    since_check: u32,
    /// A datagram peer chosen for the next free endpoint slot.
    promote: Option<usize>,
    /// The fabric never drops a datagram (MPI, local without the drop model): only the
    /// receiver does, rarely, so the retransmission timeout is longer.
    reliable: bool,
    pub(super) stats: DatagramStats,
}

impl Datagrams {
    /// The state of a datagram path whose times count from `epoch`.
    pub(super) fn new(chunk: usize, reliable: bool, epoch: Instant) -> Datagrams {
        Datagrams {
            peers: IntMap::default(),
            chunk,
            waiting: Vec::new(),
            acks: Vec::new(),
            resend: Vec::new(),
            fresh: Vec::new(),
            scratch: Vec::new(),
            held: Vec::new(),
            now_us: None,
            latest_us: 0,
            epoch,
            since_check: 0,
            promote: None,
            reliable,
            stats: DatagramStats::default(),
        }
    }

    /// A round at `now` starts (`None`: it ended). It runs at the latest time given so far
    /// when `now` is earlier (and at 0 when `now` is before `epoch`).
    #[inline]
    pub(super) fn set_round(&mut self, now: Option<Instant>) {
        self.now_us = now.map(|t| {
            let us = t.saturating_duration_since(self.epoch).as_micros() as u64;
            self.latest_us = self.latest_us.max(us);
            self.latest_us
        });
    }

    /// True when datagrams to `peer` are not all acknowledged.
    #[inline]
    pub(super) fn is_waiting(&self, peer: usize) -> bool {
        self.waiting.binary_search(&peer).is_ok()
    }

    /// True when nothing sent is unacknowledged.
    pub(super) fn drained(&self) -> bool {
        self.waiting.is_empty()
    }

    fn peer(&mut self, peer: usize) -> &mut DatagramPeer {
        let rto = self.rto();
        let fresh = &mut self.fresh;
        self.peers.entry(peer).or_insert_with(|| {
            fresh.push(peer);
            DatagramPeer::with_rto(rto)
        })
    }

    /// The first retransmission timeout of this fabric's datagrams.
    pub(super) fn rto(&self) -> std::time::Duration {
        if self.reliable {
            crate::protocol::datagram::RTO_RELIABLE
        } else {
            crate::protocol::datagram::RTO_BASE
        }
    }

    /// Records the packets of a closed endpoint to `peer` (the ordering counters).
    pub(super) fn endpoint_closed(&mut self, peer: usize, sent: u64, received: u64) {
        let p = self.peer(peer);
        p.ep_sent += sent;
        p.ep_received += received;
    }

    /// `peer` refused a connect request: reach it by datagram.
    pub(super) fn refused(&mut self, peer: usize) {
        self.peer(peer).refused = true;
    }

    /// True when `peer` is to be reached by datagram even with room for an endpoint.
    #[inline]
    pub(super) fn refused_by(&self, peer: usize) -> bool {
        self.peers.get(&peer).is_some_and(|p| p.refused)
    }
}

/// What a fabric poll needs to take a datagram, borrowed beside the fabric.
pub(super) struct DatagramRx<'a> {
    pub(super) dg: Option<&'a mut Datagrams>,
    pub(super) pool: &'a mut BufferPool,
    pub(super) conns: &'a ConnectionTable,
    pub(super) rank: usize,
    /// The waiting blocking receive's buffer, if one is lent ([`RecvInto`]).
    pub(super) into: Option<RecvInto<'a>>,
}

fn deliver(
    matcher: &mut Matcher,
    src: usize,
    h: &DatagramHeader,
    payload: &[u8],
    into: Option<&mut RecvInto<'_>>,
) -> Result<()> {
    matcher.on_chunk_into(
        &PacketHeader {
            src: src as u32,
            tag: h.tag,
            total: h.total,
            offset: h.offset,
            len: h.len,
            more: h.more,
        },
        payload,
        into,
    )
}

/// Bytes of the datagram kept in `buf` (header + payload).
fn held_len(buf: &[u8]) -> usize {
    HEADER_BYTES + u32::from_le_bytes(buf[16..20].try_into().expect("4 bytes")) as usize
}

impl DatagramRx<'_> {
    /// Takes datagram `bytes` from `src`: its acknowledgement, then its data.
    pub(super) fn take(&mut self, matcher: &mut Matcher, src: usize, bytes: &[u8]) -> Result<()> {
        let rank = self.rank;
        let Some(dg) = self.dg.as_deref_mut() else {
            return Err(ProtocolError::Fabric(FabricError::BadPacket {
                rank,
                from: crate::fabric::error::Sender::Rank(src),
                bytes: bytes.len(),
                what: "a datagram, but this rank runs no datagram path (endpoint_overflow or max_endpoints differ between ranks?)".into(),
            }));
        };
        let h = DatagramHeader::decode(bytes, rank, src)?;
        let pool = &mut *self.pool;
        dg.peer(src);
        let Datagrams {
            peers,
            waiting,
            acks,
            resend,
            held,
            now_us,
            since_check,
            stats,
            ..
        } = dg;
        let p = peers.get_mut(&src).expect("datagram peer");
        if p.in_flight() > 0 {
            if p.on_ack(h.ack, *now_us, &mut |b| pool.release(b)) {
                resend.push(src);
            }
            if p.in_flight() == 0 {
                if let Ok(i) = waiting.binary_search(&src) {
                    waiting.remove(i);
                }
            }
        }
        if h.kind == KIND_ACK {
            return Ok(());
        }
        p.activity = p.activity.saturating_add(1);
        *since_check = since_check.saturating_add(1);
        let got = p.ep_received + self.conns.get(PeerKey::Rank(src)).map_or(0, |e| e.received);
        if got < h.ep_sent {
            // Endpoint packets sent before it are still on their way: it comes again.
            stats.dropped += 1;
            return Ok(());
        }
        let was_due = p.ack_due;
        let r = take_data(
            p,
            held,
            pool,
            matcher,
            &mut self.into,
            src,
            rank,
            &h,
            bytes,
            stats,
        );
        // Owed even when the delivery failed: the sender must learn what did arrive.
        if !was_due && p.ack_due {
            acks.push(src);
        }
        r
    }
}

/// [`DatagramRx::take`] for data datagram `bytes` (header `h`) from `src`, with peer state `p`:
/// delivered in sequence, held when early, dropped when a duplicate. A delivery refused
/// (out of memory) changes nothing: an in-sequence arrival is not counted as received
/// (the fabric or the sender's retransmission brings it again), a held one stays held, in
/// its buffer, and is delivered first when anything next arrives from `src`.
#[allow(clippy::too_many_arguments)]
fn take_data(
    p: &mut DatagramPeer,
    held: &mut Vec<(usize, u32, BufId)>,
    pool: &mut BufferPool,
    matcher: &mut Matcher,
    into: &mut Option<RecvInto<'_>>,
    src: usize,
    rank: usize,
    h: &DatagramHeader,
    bytes: &[u8],
    stats: &mut DatagramStats,
) -> Result<()> {
    deliver_held(p, held, pool, matcher, into, src, rank)?;
    match p.on_data(h.seq) {
        Rx::Deliver => {
            deliver(matcher, src, h, &bytes[HEADER_BYTES..], into.as_mut())?;
            p.advance();
            deliver_held(p, held, pool, matcher, into, src, rank)?;
        }
        Rx::Hold => {
            // Without a free buffer (or room in one) it is dropped: it comes again.
            if bytes.len() <= pool.buffer_size() {
                if let Some(id) = pool.take_free() {
                    pool.buf_mut(id)[..bytes.len()].copy_from_slice(bytes);
                    p.hold(h.seq);
                    held.push((src, h.seq, id));
                }
            }
        }
        Rx::Duplicate | Rx::Beyond => stats.dropped += 1,
    }
    Ok(())
}

/// Delivers the held datagrams from `src` that are next in sequence, in order; one
/// refused stays held (its buffer kept, the sequence not advanced past it).
fn deliver_held(
    p: &mut DatagramPeer,
    held: &mut Vec<(usize, u32, BufId)>,
    pool: &mut BufferPool,
    matcher: &mut Matcher,
    into: &mut Option<RecvInto<'_>>,
    src: usize,
    rank: usize,
) -> Result<()> {
    while let Some(seq) = p.next_held() {
        let i = held
            .iter()
            .position(|&(k, s, _)| k == src && s == seq)
            .expect("a held datagram is in the list");
        let id = held[i].2;
        let b = pool.buf(id);
        let b = &b[..held_len(b)];
        let hh = DatagramHeader::decode(b, rank, src)?;
        deliver(matcher, src, &hh, &b[HEADER_BYTES..], into.as_mut())?;
        held.swap_remove(i);
        pool.release(id);
        p.held_delivered();
    }
    Ok(())
}

/// Posts the datagram kept in pool buffer `id` to `peer` again, with the current
/// acknowledgement.
fn post_copy(
    path: &mut dyn DatagramPath,
    pool: &mut BufferPool,
    p: &mut DatagramPeer,
    peer: usize,
    id: BufId,
) -> Result<()> {
    let b = pool.buf_mut(id);
    b[8..12].copy_from_slice(&p.ack_value().to_le_bytes());
    p.ack_due = false;
    let n = held_len(b);
    Ok(path.post_datagram(peer, &pool.buf(id)[..n])?)
}

impl Engine {
    /// True when `dest` (without an endpoint) is reached over the datagram path: it runs,
    /// and the endpoints are at the cap or `dest` refused one.
    #[inline]
    pub(super) fn datagram_route(&self, dest: usize) -> bool {
        self.dg
            .as_ref()
            .is_some_and(|d| !self.conns.has_room() || d.refused_by(dest))
    }

    /// Posts the next chunk of the first message queued for `dest` as a datagram, if the
    /// window and the pool allow; returns whether it did.
    pub(super) fn post_datagram_chunk(&mut self, dest: usize) -> Result<bool> {
        let dg = self.dg.as_deref_mut().expect("datagram path");
        let chunk = dg.chunk;
        if !dg.peer(dest).can_send() {
            return Ok(false);
        }
        let p = self.peers.get_mut(&dest).expect("peer");
        let msg = p.queue.front_mut().expect("message");
        let (id, len) = match msg.first.take() {
            Some((id, flen)) => {
                // Copied at offset 0 for an endpoint: make room for the header. What does
                // not fit one datagram is in `rest` too (`isend` starts it at `chunk`).
                let len = flen.min(chunk);
                if msg.rest_from > len {
                    // Not from `isend` (it starts `rest` at `len` at the latest): the tail
                    // goes back in front of `rest`, reserved without aborting.
                    let tail = msg.rest_from - len;
                    if let Err(e) = msg.rest.try_reserve_exact(tail) {
                        msg.first = Some((id, flen));
                        return Err(ProtocolError::Alloc(AllocError {
                            bytes: (msg.rest.len() + tail) as u64,
                            what: format!("the rest of a message of {} bytes to rank {dest}", msg.total),
                            error: std::io::Error::new(std::io::ErrorKind::OutOfMemory, e.to_string()),
                        }));
                    }
                    let b = self.pool.buf(id);
                    msg.rest.splice(0..0, b[len..msg.rest_from].iter().copied());
                    msg.rest_from = len;
                }
                self.pool.buf_mut(id).copy_within(0..len, HEADER_BYTES);
                (id, len)
            }
            None => {
                let Some(id) = self.pool.acquire(self.fabric.as_mut())? else {
                    return Ok(false);
                };
                Self::sync_wr_info(&mut self.wr_info, &mut self.pool, id)?;
                let p = self.peers.get_mut(&dest).expect("peer");
                let msg = p.queue.front_mut().expect("message");
                let len = (msg.total - msg.offset).min(chunk);
                let from = msg.offset - msg.rest_from;
                self.pool.buf_mut(id)[HEADER_BYTES..HEADER_BYTES + len]
                    .copy_from_slice(&msg.rest[from..from + len]);
                (id, len)
            }
        };
        let p = self.peers.get_mut(&dest).expect("peer");
        let queued = p.queue.len();
        let msg = p.queue.front_mut().expect("message");
        let dg = self.dg.as_deref_mut().expect("datagram path");
        let d = dg.peers.get_mut(&dest).expect("datagram peer");
        let seq = d.push_sent(id, dg.now_us);
        let h = DatagramHeader {
            kind: KIND_DATA,
            more: msg.offset + len < msg.total || queued > 1,
            seq,
            ack: d.ack_value(),
            tag: msg.tag,
            len: len as u32,
            total: msg.total as u64,
            offset: msg.offset as u64,
            ep_sent: d.ep_sent,
        };
        d.ack_due = false;
        d.activity = d.activity.saturating_add(1);
        dg.since_check = dg.since_check.saturating_add(1);
        if let Err(i) = dg.waiting.binary_search(&dest) {
            dg.waiting.insert(i, dest);
        }
        dg.stats.sent += 1;
        let b = self.pool.buf_mut(id);
        h.encode(b);
        let (req, chunked) = (msg.req, msg.chunked);
        msg.offset += len;
        if msg.offset >= msg.total {
            self.chunked_queued -= usize::from(chunked);
            p.queue.pop_front();
            if p.queue.is_empty() {
                self.active.remove(dest);
            }
            if let Some(s) = self.sends.get_mut(&req) {
                s.posted_all = true;
            }
        }
        super::datagram_path(self.fabric.as_mut())?
            .post_datagram(dest, &self.pool.buf(id)[..HEADER_BYTES + len])?;
        Ok(true)
    }

    /// Retransmissions (duplicate acknowledgements, timeouts) and the acknowledgements
    /// owed; peers new to the datagram path counted as connected; the promotion policy.
    /// Runs in a timed round: the deadlines left unarmed (datagrams sent or acknowledged
    /// outside one) are armed from its time first, so none is ever due from a stale time.
    pub(super) fn service_datagrams(&mut self) -> Result<bool> {
        let Some(dg) = self.dg.as_deref_mut() else {
            return Ok(false);
        };
        let mut work = false;
        for peer in dg.fresh.drain(..) {
            self.conns.note_peer(peer);
        }
        let fabric = super::datagram_path(self.fabric.as_mut())?;
        let pool = &mut self.pool;
        if !dg.waiting.is_empty() {
            // (Set: this runs only in a round, `Engine::progress_into`.)
            let now = dg.now_us;
            let Datagrams {
                peers,
                waiting,
                resend,
                scratch,
                stats,
                ..
            } = &mut *dg;
            for peer in resend.drain(..) {
                let p = peers.get_mut(&peer).expect("datagram peer");
                if let Some(id) = p.oldest() {
                    post_copy(fabric, pool, p, peer, id)?;
                    stats.resent += 1;
                    work = true;
                }
            }
            for &peer in waiting.iter() {
                let Some(now) = now else { break };
                let p = peers.get_mut(&peer).expect("datagram peer");
                // Armed now (sent or acknowledged since the last round): not due yet.
                if !p.arm(now) && p.timed_out(now) {
                    scratch.clear();
                    p.on_timeout(now, &mut |id| scratch.push(id));
                    for &id in scratch.iter() {
                        post_copy(fabric, pool, p, peer, id)?;
                        stats.resent += 1;
                    }
                    work = true;
                }
            }
        } else {
            dg.resend.clear();
        }
        if !dg.acks.is_empty() {
            let mut a = [0u8; HEADER_BYTES];
            for peer in dg.acks.drain(..) {
                let p = dg.peers.get_mut(&peer).expect("datagram peer");
                if p.ack_due {
                    p.ack_due = false;
                    DatagramHeader::ack(p.ack_value()).encode(&mut a);
                    fabric.post_datagram(peer, &a)?;
                    dg.stats.acks += 1;
                }
            }
            work = true;
        }
        if dg.since_check >= PROMOTE_EVERY {
            dg.since_check = 0;
            self.promotion_check()?;
        }
        Ok(work)
    }

    /// The promotion policy: the most active datagram peer (data datagrams both ways since
    /// the last check) takes the endpoint of the least active open endpoint peer (packets both
    /// ways since the last check) when it exceeds it by [`PROMOTE_MARGIN`] and by half;
    /// that endpoint is closed gracefully (when idle) and the peer gets the next free slot.
    /// Both activities then start again from 0, so they count the same interval: a decayed
    /// datagram activity (history included) against an endpoint's last interval would see
    /// evenly spread traffic as twice as busy on datagrams, and promote in turns. Ties go
    /// to the lower rank: deterministic.
    fn promotion_check(&mut self) -> Result<()> {
        let dg = self.dg.as_deref_mut().expect("datagram path");
        let best = dg
            .peers
            .iter()
            .filter(|(&k, _)| self.conns.get(PeerKey::Rank(k)).is_none())
            .max_by_key(|(&k, p)| (p.activity, std::cmp::Reverse(k)))
            .map(|(&k, p)| (k, p.activity as u64));
        for p in dg.peers.values_mut() {
            p.activity = 0;
        }
        let least = self.conns.least_active();
        self.conns.mark_activity();
        let (
            Some((peer, act)),
            Some(Activity {
                key: victim,
                packets: ep_act,
            }),
        ) = (best, least)
        else {
            return Ok(());
        };
        if act > ep_act + PROMOTE_MARGIN && act > ep_act + ep_act / 2 && self.conns.closing() == 0 {
            let idle = self.is_idle(victim) && self.conns.get(victim).is_some_and(|e| e.inflight == 0);
            if idle {
                let dg = self.dg.as_deref_mut().expect("datagram path");
                dg.promote = Some(peer);
                if let Some(p) = dg.peers.get_mut(&peer) {
                    p.refused = false;
                }
                dg.stats.promoted += 1;
                self.start_close(victim)?;
            }
        }
        Ok(())
    }

    /// Opens the endpoint of a promoted datagram peer once a slot is free.
    pub(super) fn open_promoted(&mut self) -> Result<bool> {
        let Some(peer) = self.dg.as_deref().and_then(|d| d.promote) else {
            return Ok(false);
        };
        if !self.conns.has_room() {
            return Ok(false);
        }
        self.dg.as_deref_mut().expect("datagram path").promote = None;
        let key = PeerKey::Rank(peer);
        if self.conns.get(key).is_some() {
            return Ok(false);
        }
        self.open_key(key)?;
        Ok(true)
    }

    /// Answers a connect request from `src` with a refusal (at the cap, datagram mode).
    pub(super) fn refuse(&mut self, src: usize) -> Result<()> {
        Ok(self.fabric.send_control(src, crate::fabric::Control::Refuse)?)
    }

    /// `src` refused our connect request: drop the connecting endpoint, reach it by
    /// datagram.
    pub(super) fn on_refuse(&mut self, src: usize) -> Result<()> {
        let key = PeerKey::Rank(src);
        if self.conns.get(key).map(|e| e.state) != Some(EndpointState::Connecting) {
            return Ok(());
        }
        self.fabric.close_endpoint(key)?;
        self.conns.remove(key);
        let p = self.peers.entry(src).or_default();
        p.credits = 0;
        p.requested = false;
        self.bank.reset_peer(src);
        if let Some(dg) = self.dg.as_deref_mut() {
            dg.refused(src);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::TransportConfig;
    use crate::core::pool::{Register, Registration};
    use crate::protocol::matching::{Source, TagMatch};

    struct NoRegister;

    impl Register for NoRegister {
        type Error = ProtocolError;

        fn register(&mut self, region: &[u8], _lock: bool) -> Result<Registration> {
            Ok(Registration::unlocked(region.len() as u64))
        }
    }

    /// Data datagram `seq` from rank 1: the first chunk of a message of `total` bytes.
    fn datagram(seq: u32, tag: u32, total: u64, payload: &[u8]) -> Vec<u8> {
        let mut d = vec![0u8; HEADER_BYTES];
        DatagramHeader {
            kind: KIND_DATA,
            more: false,
            seq,
            ack: 0,
            tag,
            len: payload.len() as u32,
            total,
            offset: 0,
            ep_sent: 0,
        }
        .encode(&mut d);
        d.extend_from_slice(payload);
        d
    }

    /// Issue 33: a held (early) datagram whose delivery is refused for memory, after the
    /// one before it was delivered, was released and the sequence was past nothing to
    /// bring it back but a retransmission; and the acknowledgement owed was never queued.
    /// Now it stays held, in its buffer, with the acknowledgement queued, and goes first,
    /// in order, when anything next arrives from its sender.
    #[test]
    fn a_held_datagram_refused_for_memory_is_kept_and_delivered_first() {
        let cfg = TransportConfig {
            buffer_count: 4,
            buffer_size: 256,
            lock_pool: false,
            ..Default::default()
        };
        let mut pool = BufferPool::new(&cfg, &mut NoRegister).unwrap();
        let conns = ConnectionTable::new(1);
        let mut dg = Datagrams::new(128, true, Instant::now());
        let mut matcher = Matcher::default();
        let free = pool.stats().free;
        let mut take = |dg: &mut Datagrams, pool: &mut BufferPool, d: &[u8]| {
            DatagramRx {
                dg: Some(dg),
                pool,
                conns: &conns,
                rank: 0,
                into: None,
            }
            .take(&mut matcher, 1, d)
        };
        // Seq 1 first (held): a message of 2^62 bytes, which no allocator gives.
        take(&mut dg, &mut pool, &datagram(1, 5, 1 << 62, &[7; 8])).unwrap();
        assert_eq!(dg.held.len(), 1);
        let err = take(&mut dg, &mut pool, &datagram(0, 4, 3, b"abc")).unwrap_err();
        assert!(matches!(err, ProtocolError::Alloc(_)), "{err}");
        assert_eq!(dg.held.len(), 1, "the refused datagram was dropped");
        assert_eq!(pool.stats().free, free - 1, "its buffer was released");
        let p = &dg.peers[&1];
        assert_eq!((p.ack_value(), p.next_held()), (1, Some(1)));
        assert_eq!(dg.acks, [1], "the acknowledgement of seq 0 was not queued");
        // The next arrival tries it first: still refused, nothing else changes.
        let seq2 = datagram(2, 6, 2, b"yz");
        assert!(take(&mut dg, &mut pool, &seq2).is_err());
        assert_eq!((dg.held.len(), dg.peers[&1].ack_value()), (1, 1));
        // Once it fits (8 bytes stand in for it here), it goes first, then seq 2.
        let id = dg.held[0].2;
        pool.buf_mut(id)[24..32].copy_from_slice(&8u64.to_le_bytes());
        take(&mut dg, &mut pool, &seq2).unwrap();
        assert!(dg.held.is_empty());
        assert_eq!(pool.stats().free, free);
        assert_eq!(dg.peers[&1].ack_value(), 3);
        let got = |m: &mut Matcher, tag| m.try_take(Source::Rank(1), TagMatch::Tag(tag)).map(|m| m.data);
        assert_eq!(got(&mut matcher, 4), Some(b"abc".to_vec()));
        assert_eq!(got(&mut matcher, 5), Some(vec![7; 8]));
        assert_eq!(got(&mut matcher, 6), Some(b"yz".to_vec()));
    }
}
