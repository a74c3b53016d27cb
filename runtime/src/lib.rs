//! Ballast communication runtime for parallel simulators: a fixed registered buffer
//! pool, lazily opened and capped endpoints, shared receive queues, credit flow control,
//! an in-process transport, and a footprint model that predicts per-rank transport memory.
//!
//! Layers, top to bottom: [`comm`] (the embedding API) → [`engine`] (the protocol:
//! chunking, credits, handshakes, eviction) using [`pool`], [`connection`], [`credit`],
//! [`matching`] → [`fabric`] (the transport trait) → [`local`] (in-process transport).
//! [`config`] holds the one [`RuntimeConfig`]; [`footprint`] the model;
//! [`procstatus`] reads the process' own memory counters.
//!
//! ```
//! use ballast_runtime::{local, RuntimeConfig, Source, TagMatch};
//! let cfg = RuntimeConfig::builder().buffer_count(8).build().unwrap();
//! let got = local::run(2, &cfg, |comm| {
//!     if comm.rank() == 0 {
//!         comm.send(1, 7, b"spikes").unwrap();
//!         Vec::new()
//!     } else {
//!         comm.recv(Source::Any, TagMatch::Tag(7)).unwrap().data
//!     }
//! })
//! .unwrap();
//! assert_eq!(got[1], b"spikes");
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod bootstrap;
pub mod comm;
pub mod config;
pub mod connection;
pub mod credit;
pub mod engine;
pub mod error;
pub mod fabric;
pub mod fanout;
pub mod footprint;
pub mod local;
pub mod matching;
pub mod memory;
#[cfg(feature = "mpi")]
#[allow(unsafe_code)] // raw MPI_Isend of owned buffers and Send for MPI handles; see `mpi` docs
pub mod mpi;
pub mod pool;
pub mod procstatus;
#[cfg(feature = "verbs")]
#[allow(unsafe_code)] // FFI to libibverbs: the only unsafe code of the crate besides `mpi`; see `verbs` docs
pub mod verbs;

pub use comm::{Communicator, Completion, Request};
pub use config::{
    decide_transport, resolve_transport, AutoInputs, BootstrapConfig, RecvSharing, RuntimeConfig,
    RuntimeConfigBuilder, TransportConfig, TransportKind, ValueOrigin, VerbsConfig,
};
pub use error::{Error, Result};
pub use footprint::{Footprint, LockStatus, MemoryLock, MemoryModel};
pub use matching::{Message, Source, Tag, TagMatch, RESERVED_TAG_BASE};
pub use procstatus::ProcStatus;
