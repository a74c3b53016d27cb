//! The conformance suite over the local transport's datagram path with the test drop
//! model: every 7th datagram a rank sends is dropped (data and acknowledgements alike),
//! and `max_endpoints 1` so that even the suite's 3- and 4-rank cases use datagrams.
//! Nothing may be lost or reordered.

/// (max_endpoints, datagram_drop_every)
const OVERLAY: (usize, usize) = (1, 7);

mod conformance;

include!("datagram/cases.rs");
