//! Unit tests of the engine driven by a clock of the test's own (no sleeping).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Engine;
use crate::core::config::RuntimeConfig;
use crate::fabric::local::{LocalFabric, World};
use crate::protocol::clock::Clock;
use crate::protocol::datagram::RTO_RELIABLE;
use crate::protocol::error::ProtocolError;
use crate::protocol::request::RequestId;

/// A clock that moves only when the test moves it.
#[derive(Clone)]
struct TestClock(Arc<Mutex<Instant>>);

impl TestClock {
    fn advance(&self, by: Duration) {
        *self.0.lock().unwrap() += by;
    }
}

impl Clock for TestClock {
    fn now(&self) -> Instant {
        *self.0.lock().unwrap()
    }
}

#[test]
fn an_unacknowledged_datagram_goes_again_when_the_clock_passes_its_timeout() {
    // Rank 0 of 3, with one endpoint: the first peer (1) takes it, the second (2) is
    // reached by datagram. Ranks 1 and 2 never run, so nothing is acknowledged.
    let cfg = *RuntimeConfig::builder()
        .buffer_count(8)
        .lock_pool(false)
        .max_endpoints(1)
        .build()
        .unwrap()
        .transport();
    let (world, mut parkers) = World::new(3);
    let parker = parkers.remove(0);
    let fabric = LocalFabric::new(0, Arc::new(world), &cfg, parker);
    let clock = TestClock(Arc::new(Mutex::new(Instant::now())));
    let mut e = Engine::new(Box::new(fabric), &cfg, Box::new(clock.clone())).unwrap();
    let _endpoint = e.isend(1, 7, b"to one").unwrap();
    let _datagram = e.isend(2, 7, b"to two").unwrap();
    e.progress().unwrap();
    let stats = || e.datagram_stats().expect("the datagram path runs");
    assert_eq!((stats().sent, stats().resent), (1, 0));
    // The local fabric never drops a datagram: the first timeout is RTO_RELIABLE.
    clock.advance(RTO_RELIABLE - Duration::from_millis(1));
    e.progress().unwrap();
    assert_eq!(e.datagram_stats().unwrap().resent, 0, "before the timeout");
    clock.advance(Duration::from_millis(2));
    e.progress().unwrap();
    assert_eq!(e.datagram_stats().unwrap().resent, 1, "once past the timeout");
    e.progress().unwrap();
    assert_eq!(
        e.datagram_stats().unwrap().resent,
        1,
        "the clock did not move: no second timeout"
    );
}

/// A send id the engine does not know (never made, or completed and forgotten) is an
/// `UnknownRequest` holding that `RequestId`, shown as its number as before.
#[test]
fn an_unknown_send_is_an_error_naming_its_request_id() {
    let cfg = *RuntimeConfig::builder()
        .buffer_count(8)
        .lock_pool(false)
        .build()
        .unwrap()
        .transport();
    let (world, mut parkers) = World::new(2);
    let parker = parkers.remove(0);
    let fabric = LocalFabric::new(0, Arc::new(world), &cfg, parker);
    let clock = TestClock(Arc::new(Mutex::new(Instant::now())));
    let mut e = Engine::new(Box::new(fabric), &cfg, Box::new(clock)).unwrap();
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
