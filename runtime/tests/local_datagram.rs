//! The conformance suite over the local transport's datagram path: `max_endpoints 2`,
//! `endpoint_overflow=datagram`, no datagram dropped.

/// (max_endpoints, datagram_drop_every)
const OVERLAY: (usize, usize) = (2, 0);

mod conformance;

include!("datagram/cases.rs");
