//! Ballast communication runtime for parallel simulators: a fixed registered buffer
//! pool, lazily opened and capped endpoints, shared receive queues, credit flow control,
//! an in-process transport, and a footprint model that predicts per-rank transport memory.
//!
//! Layers, bottom to top; a module imports only from layers below it:
//!
//! | layer | modules | owns |
//! |---|---|---|
//! | core | `core::{config, memory, pool, backoff, intmap, procstatus, footprint}` | the pure configuration and its `ConfigError`, memory and memlock (`AllocError`), the registered pool, the footprint types |
//! | bootstrap | [`bootstrap`] | start-up all-gather: MPI, TCP rendezvous, in-process; its `BootstrapError` |
//! | fabric | [`fabric`]: the trait, `fabric::{error, wire, local, mpi, verbs}` | the transports below the protocol, their packet-header and control codec, each fabric's memory model, `FabricError` |
//! | protocol | `protocol::{engine, collective, connection, credit, datagram, error, matching, request}` | chunking, credits, handshakes, eviction, the datagram path, tag matching, request ids, the time passed in (`Engine::progress(now)`), `ProtocolError` |
//! | comm | [`comm`]: the [`Communicator`], `comm::{error, model, mpi_native}` | the embedding API over the engine or MPI's native path, the footprint prediction, `CommError` and the public [`Error`] its calls return (each layer's error wrapped, with the same messages; published as [`error`]) |
//! | select, launch | [`select`], [`launch`] | the `auto` choice of transport; starting ranks |
//! | fault (feature `fault`) | `fault` | the fault-injection harness: a fabric wrapper and its launcher |
//!
//! ```
//! use ballast_runtime::{launch::threads, RuntimeConfig, Source, TagMatch};
//! let cfg = RuntimeConfig::builder().buffer_count(8).build().unwrap();
//! let got = threads::run_ranks(2, &cfg, |comm| {
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
mod core;
pub mod fabric;
mod protocol;

#[cfg(feature = "fault")]
pub mod fault;
pub mod launch;
pub mod select;

// The public paths: a curated view of the layers.
pub use crate::core::{config, footprint, intmap, memory, pool, procstatus};
pub use comm::{error, model};
pub use fabric::wire;
pub use protocol::{connection, credit, datagram, engine, matching, request};

/// The MPI transport (feature `mpi`): its fabric and start-up ([`Mpi`](mpi::Mpi)), and MPI's
/// native path ([`native`](mpi::native)), a backend of the [`Communicator`] beside the engine.
#[cfg(feature = "mpi")]
pub mod mpi {
    pub use crate::comm::mpi_native as native;
    pub use crate::fabric::mpi::*;
}

/// The in-process transport (`local`): [`LocalFabric`](local::LocalFabric), and a world of one
/// rank owned by the caller ([`single`](local::single), [`finish`](local::finish)). Its ranks
/// as threads of this process are started by [`launch::threads::run_ranks`].
pub mod local {
    pub use crate::fabric::local::*;
    pub use crate::launch::local::{finish, single};
}

/// The verbs transport (feature `verbs`): its fabric, device probe and control channel,
/// [`communicator`](verbs::communicator) for one rank per process, and
/// [`run_ranks`](verbs::run_ranks) for several.
#[cfg(feature = "verbs")]
pub mod verbs {
    pub use crate::fabric::verbs::*;
    pub use crate::launch::verbs::{communicator, finish, run_ranks};
}

pub use comm::collective::{ReduceOp, ReduceSlice, ReduceType, Reducible};
pub use comm::{Communicator, Completion, Request};
pub use config::{
    BootstrapConfig, ConfigError, EndpointOverflow, RecvSharing, RuntimeConfig, RuntimeConfigBuilder,
    TransportConfig, TransportKind, ValueOrigin, VerbsConfig,
};
pub use error::{Error, Result};
pub use footprint::{Footprint, LockStatus, MemoryLock, MemoryModel};
pub use matching::{Envelope, Message, Source, Tag, TagMatch, RESERVED_TAG_BASE};
pub use procstatus::ProcStatus;
pub use request::RequestId;
pub use select::{decide_transport, resolve_transport, AutoInputs};

/// The Rust examples of `docs/EMBEDDING.md`, compiled and run as this crate's doctests
/// (`cargo test -p ballast-runtime --doc`), so that the guide cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../../docs/EMBEDDING.md")]
pub struct EmbeddingGuide;
