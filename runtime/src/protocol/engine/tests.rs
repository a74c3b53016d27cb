//! Unit tests of the engine, its time passed in directly (`progress(now)` with instants the
//! test computes from one `Instant::now()` of its own: no waiting, no sleeping), and its
//! direct-send contract.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Engine;
use crate::core::config::{RuntimeConfig, TransportConfig};
use crate::core::footprint::MemoryModel;
use crate::core::pool::{Register, Registration};
use crate::fabric::error::FabricError;
use crate::fabric::local::{LocalFabric, World};
use crate::fabric::{
    Capabilities, Control, DatagramPath, DirectPath, Event, Fabric, FabricBytes, Flow, PacketHeader, PeerKey,
};
use crate::protocol::datagram::RTO_RELIABLE;
use crate::protocol::error::ProtocolError;
use crate::protocol::request::RequestId;

const MS: Duration = Duration::from_millis(1);

/// The config of these tests (8 unlocked buffers; `max_endpoints` 0: no cap) and the local
/// fabric of rank 0 in a world of `n`, whose other ranks never run.
fn rank0_of(n: usize, max_endpoints: usize) -> (TransportConfig, LocalFabric) {
    let cfg = *RuntimeConfig::builder()
        .buffer_count(8)
        .lock_pool(false)
        .max_endpoints(max_endpoints)
        .build()
        .unwrap()
        .transport();
    let (world, mut parkers) = World::new(n);
    let parker = parkers.remove(0);
    let fabric = LocalFabric::new(0, Arc::new(world), &cfg, parker);
    (cfg, fabric)
}

/// Rank 0 of 3 with one endpoint, made at `start`: the first peer (1) takes the endpoint,
/// the second (2) is reached by datagram. Ranks 1 and 2 never run, so nothing is
/// acknowledged. The local fabric never drops a datagram: the first timeout is
/// `RTO_RELIABLE`.
fn datagram_rank(start: Instant) -> Engine {
    let (cfg, fabric) = rank0_of(3, 1);
    let e = Engine::new(Box::new(fabric), &cfg, start).unwrap();
    assert!(e.uses_time(), "the datagram path runs");
    e
}

/// (sent, resent) of the datagram path.
fn sent_resent(e: &Engine) -> (u64, u64) {
    let s = e.datagram_stats().expect("the datagram path runs");
    (s.sent, s.resent)
}

#[test]
fn an_unacknowledged_datagram_goes_again_once_its_timeout_passes() {
    let start = Instant::now();
    let mut e = datagram_rank(start);
    let _endpoint = e.isend(1, 7, b"to one").unwrap();
    let _datagram = e.isend(2, 7, b"to two").unwrap();
    // Posted in the first round, once the endpoint to rank 1 took the only slot.
    assert_eq!(sent_resent(&e), (0, 0));
    e.progress(start).unwrap();
    assert_eq!(sent_resent(&e), (1, 0));
    assert_eq!(e.dg.as_deref().unwrap().now_us, None, "no time outside a round");
    e.progress(start + RTO_RELIABLE - MS).unwrap();
    assert_eq!(sent_resent(&e).1, 0, "before the timeout");
    e.progress(start + RTO_RELIABLE + MS).unwrap();
    assert_eq!(sent_resent(&e).1, 1, "once past the timeout");
    e.progress(start + RTO_RELIABLE + MS).unwrap();
    assert_eq!(sent_resent(&e).1, 1, "the time did not move: no second timeout");
    // The next timeout is twice as long, from the resend.
    e.progress(start + 3 * RTO_RELIABLE).unwrap();
    assert_eq!(sent_resent(&e).1, 1, "before the doubled timeout");
    e.progress(start + 3 * RTO_RELIABLE + 2 * MS).unwrap();
    assert_eq!(sent_resent(&e).1, 2, "past the doubled timeout");
}

/// A rank whose datagram to rank 2 was posted by `isend` outside a round, after a round at
/// `start`, and the round that came 10 s later (far past the post, and the last round's
/// time); returns the engine and that later time.
fn posted_between_rounds() -> (Engine, Instant) {
    let start = Instant::now();
    let mut e = datagram_rank(start);
    let _endpoint = e.isend(1, 7, b"to one").unwrap();
    // The endpoint to rank 1 takes the only slot: rank 2 is reached by datagram.
    e.progress(start).unwrap();
    let _datagram = e.isend(2, 7, b"to two").unwrap();
    assert_eq!(sent_resent(&e), (1, 0), "posted by isend, outside a round");
    let later = start + Duration::from_secs(10);
    e.progress(later).unwrap();
    (e, later)
}

/// A datagram `isend` posts outside a round, long after the last round, is timed from the
/// next round, not from the last round's (stale) time: no spurious timeout after a long
/// gap between calls.
#[test]
fn a_datagram_posted_between_rounds_is_timed_from_the_next_round() {
    let (mut e, later) = posted_between_rounds();
    assert_eq!(
        sent_resent(&e).1,
        0,
        "the round that arms its deadline resends nothing"
    );
    e.progress(later + RTO_RELIABLE - MS).unwrap();
    assert_eq!(
        sent_resent(&e).1,
        0,
        "within the timeout of the round that armed it"
    );
}

/// ... and it goes again once that armed deadline passes, once.
#[test]
fn a_datagram_posted_between_rounds_goes_again_once_its_armed_deadline_passes() {
    let (mut e, later) = posted_between_rounds();
    e.progress(later + RTO_RELIABLE).unwrap();
    assert_eq!(sent_resent(&e), (1, 1), "at its armed deadline");
    e.progress(later + RTO_RELIABLE + MS).unwrap();
    assert_eq!(sent_resent(&e), (1, 1), "once");
}

/// A round whose `now` is earlier than the last round's runs at the last round's time (the
/// engine keeps the latest `now`): a datagram posted between rounds and armed by such a
/// round is timed from that latest time, not from the stale one, so it does not time out
/// early; it goes again at the deadline the latest time gives, once.
#[test]
fn a_now_going_backwards_does_not_time_a_datagram_out_early() {
    let start = Instant::now();
    let mut e = datagram_rank(start);
    let _endpoint = e.isend(1, 7, b"to one").unwrap();
    // The endpoint to rank 1 takes the only slot: rank 2 is reached by datagram.
    e.progress(start).unwrap();
    let later = start + Duration::from_secs(10);
    e.progress(later).unwrap();
    let _datagram = e.isend(2, 7, b"to two").unwrap();
    assert_eq!(sent_resent(&e), (1, 0), "posted by isend, outside a round");
    // The round that arms its deadline has a `now` 9 s before the last round's.
    e.progress(later - Duration::from_secs(9)).unwrap();
    assert_eq!(sent_resent(&e).1, 0, "the arming round resends nothing");
    e.progress(later + RTO_RELIABLE - MS).unwrap();
    assert_eq!(
        sent_resent(&e).1,
        0,
        "1 ms before the timeout from the latest time (the one from the stale time passed 9 s ago)"
    );
    e.progress(later + RTO_RELIABLE).unwrap();
    assert_eq!(sent_resent(&e), (1, 1), "at the deadline from the latest time");
}

/// ... and a round whose `now` goes back neither times out a datagram that is not due nor
/// delays it: it goes again at its deadline, once.
#[test]
fn a_now_going_backwards_neither_fires_nor_delays_a_timeout() {
    let start = Instant::now();
    let mut e = datagram_rank(start);
    let _endpoint = e.isend(1, 7, b"to one").unwrap();
    let _datagram = e.isend(2, 7, b"to two").unwrap();
    e.progress(start).unwrap();
    assert_eq!(sent_resent(&e), (1, 0), "sent in the round at `start`");
    e.progress(start + RTO_RELIABLE - MS).unwrap();
    e.progress(start).unwrap();
    e.progress(start + RTO_RELIABLE / 2).unwrap();
    assert_eq!(sent_resent(&e).1, 0, "rounds going back fire nothing");
    e.progress(start + RTO_RELIABLE).unwrap();
    assert_eq!(sent_resent(&e), (1, 1), "at its deadline, not later");
    e.progress(start + RTO_RELIABLE - MS).unwrap();
    assert_eq!(sent_resent(&e), (1, 1), "once");
}

/// An engine without the datagram path has no timers: it reads no time, so a caller may
/// give it the same instant for ever.
#[test]
fn an_engine_without_datagrams_uses_no_time() {
    let (cfg, fabric) = rank0_of(2, 0);
    let start = Instant::now();
    let mut e = Engine::new(Box::new(fabric), &cfg, start).unwrap();
    assert!(!e.uses_time());
    assert_eq!(e.datagram_stats(), None);
    e.isend(1, 7, b"to one").unwrap();
    assert!(e.progress(start).unwrap(), "the connect request went");
}

/// A send id the engine does not know (never made, or completed and forgotten) is an
/// `UnknownRequest` holding that `RequestId`, shown as its number as before.
#[test]
fn an_unknown_send_is_an_error_naming_its_request_id() {
    let (cfg, fabric) = rank0_of(2, 0);
    let mut e = Engine::new(Box::new(fabric), &cfg, Instant::now()).unwrap();
    let sent = e.isend(1, 7, b"to one").unwrap();
    let never = RequestId::new(sent.get() + 100);
    match e.send_done(never) {
        Err(ProtocolError::UnknownRequest(id)) => assert_eq!(id, never),
        other => panic!("expected UnknownRequest({never}), got {other:?}"),
    }
    assert_eq!(
        e.send_done(never).unwrap_err().to_string(),
        format!("unknown or already completed request {}", never.get())
    );
    assert!(e.send_done(sent).is_ok(), "the send made is known");
}

/// The local fabric with a direct path of threshold [`DIRECT_AT`] that takes every direct
/// send at once and counts it (in a counter the test keeps a handle of).
struct DirectLocal {
    inner: LocalFabric,
    sent_direct: Arc<AtomicUsize>,
}

const DIRECT_AT: usize = 64;

impl Register for DirectLocal {
    type Error = FabricError;
    fn register(&mut self, region: &[u8], lock: bool) -> Result<Registration, FabricError> {
        self.inner.register(region, lock)
    }
}

impl DirectPath for DirectLocal {
    fn direct_threshold(&self) -> usize {
        DIRECT_AT
    }
    fn send_direct(
        &mut self,
        _dest: usize,
        _header: &PacketHeader,
        _data: &[u8],
        _on_event: &mut dyn FnMut(Event<'_>) -> Flow,
    ) -> crate::fabric::error::Result<()> {
        self.sent_direct.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn post_direct(
        &mut self,
        _: usize,
        _: &PacketHeader,
        _: Vec<u8>,
        _: u64,
    ) -> crate::fabric::error::Result<()> {
        unreachable!("no direct message is queued in these tests")
    }
}

impl Fabric for DirectLocal {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn world_size(&self) -> usize {
        self.inner.world_size()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn setup_receive(
        &mut self,
        sharing: crate::core::config::RecvSharing,
    ) -> crate::fabric::error::Result<Option<String>> {
        self.inner.setup_receive(sharing)
    }
    fn open_endpoint(&mut self, key: PeerKey) -> crate::fabric::error::Result<()> {
        self.inner.open_endpoint(key)
    }
    fn close_endpoint(&mut self, key: PeerKey) -> crate::fabric::error::Result<()> {
        self.inner.close_endpoint(key)
    }
    fn post_send(
        &mut self,
        dest: usize,
        key: PeerKey,
        header: &PacketHeader,
        payload: &[u8],
        wr_id: u64,
    ) -> crate::fabric::error::Result<()> {
        self.inner.post_send(dest, key, header, payload, wr_id)
    }
    fn send_control(&mut self, dest: usize, msg: Control) -> crate::fabric::error::Result<()> {
        self.inner.send_control(dest, msg)
    }
    fn poll(&mut self, on_event: &mut dyn FnMut(Event<'_>) -> Flow) -> crate::fabric::error::Result<usize> {
        self.inner.poll(on_event)
    }
    fn bytes(&self) -> FabricBytes {
        self.inner.bytes()
    }
    fn memory_model(&self) -> MemoryModel {
        self.inner.memory_model()
    }
    fn aborted(&self) -> bool {
        self.inner.aborted()
    }
    fn mark_done(&mut self) {
        self.inner.mark_done()
    }
    fn all_done(&self) -> bool {
        self.inner.all_done()
    }
    fn direct(&mut self) -> Option<&mut dyn DirectPath> {
        Some(self)
    }
    fn datagrams(&mut self) -> Option<&mut dyn DatagramPath> {
        self.inner.datagrams()
    }
}

/// The engine does not wait for its queues to drain: a direct send while messages to the same
/// rank are still queued is refused, naming both ranks, and changes nothing; the caller
/// progresses until `queued_for` is false (the communicator does).
#[test]
fn a_direct_send_behind_queued_messages_is_refused() {
    let (cfg, inner) = rank0_of(3, 0);
    let sent_direct = Arc::new(AtomicUsize::new(0));
    let fabric = DirectLocal {
        inner,
        sent_direct: sent_direct.clone(),
    };
    let mut e = Engine::new(Box::new(fabric), &cfg, Instant::now()).unwrap();
    let big = [5u8; DIRECT_AT + 1];
    assert!(e.goes_direct(1, big.len()) && !e.goes_direct(1, DIRECT_AT));
    // Rank 1 never answers the connect request: the small message stays queued.
    assert!(!e.queued_for(1));
    e.isend(1, 7, b"small").unwrap();
    assert!(e.queued_for(1));
    let err = e.send_direct(1, 8, &big).unwrap_err();
    assert!(
        matches!(err, ProtocolError::QueuedBeforeDirect { rank: 0, dest: 1 }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "protocol error: rank 0: a direct send to rank 1 while messages to it are still queued"
    );
    assert!(e.queued_for(1), "the queued message is still there");
    // Nothing is queued for rank 2: it goes.
    assert!(!e.queued_for(2));
    assert_eq!(
        sent_direct.load(Ordering::Relaxed),
        0,
        "the refused send never reached the fabric"
    );
    e.send_direct(2, 8, &big).unwrap();
    assert_eq!(sent_direct.load(Ordering::Relaxed), 1);
}

/// The send record of a pool buffer in flight (`InFlight`: request id and endpoint key)
/// costs what the bare tuple `(u64, usize)` did, so the memory model and the footprints it
/// predicts are unchanged (docs/CONFIG.md: 24 bytes per pool buffer).
#[test]
fn the_send_record_costs_what_the_tuple_did() {
    assert_eq!(
        super::WR_INFO_BYTES,
        std::mem::size_of::<Option<(u64, usize)>>() as u64
    );
    assert_eq!(super::WR_INFO_BYTES, 24);
}
