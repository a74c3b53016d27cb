//! The protocol over any [`crate::fabric::Fabric`]: the engine (chunking, eager and
//! rendezvous-free credit flow, handshakes, eviction), the endpoint table with its eviction
//! policy, the credit bank, the datagram path's reliability, the collectives' sequence stamps, tag matching, request ids and the packet-header codec. Transport-neutral:
//! nothing here imports a transport.

pub mod collective;
pub mod connection;
pub mod credit;
pub mod datagram;
pub mod engine;
pub mod error;
pub mod matching;
pub mod request;
