//! The conformance suite over the local transport's datagram path with the test drop
//! model: 1 in 7 datagrams is dropped at random (data and acknowledgements alike; the
//! pattern of `BALLAST_DATAGRAM_DROP_SEED`, printed when set),
//! and `max_endpoints 1` so that even the suite's 3- and 4-rank cases use datagrams.
//! Nothing may be lost or reordered.

/// (max_endpoints, datagram_drop_every)
const OVERLAY: (usize, usize) = (1, 7);

mod conformance;

include!("datagram/cases.rs");
