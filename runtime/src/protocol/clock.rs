//! The engine's clock, passed in (as quinn-proto takes `now`): the engine never reads the
//! system time itself, so a test can drive its timeouts without sleeping.

use std::time::Instant;

/// Where the engine gets the time: given to [`Engine::new`](crate::protocol::engine::Engine::new) by
/// its owner (the communicator passes the system clock). The engine reads it only where
/// the datagram path stamps a datagram it sends, takes an acknowledgement, or checks a
/// retransmission deadline, so reading it costs nothing on the endpoint path.
pub trait Clock: Send {
    /// The current time.
    fn now(&self) -> Instant;
}
