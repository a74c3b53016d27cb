//! Ballast communication runtime for parallel simulators: a fixed registered buffer
//! pool, lazily opened and capped endpoints, shared receive queues, credit flow control,
//! an in-process transport, and a footprint model that predicts per-rank transport memory.
//!
//! Layers of the source, bottom to top; a module imports only from layers below it:
//!
//! | layer | modules | owns |
//! |---|---|---|
//! | core | `core::{config, memory, pool, backoff, intmap, procstatus, footprint}` | the pure configuration and its `ConfigError`, memory and memlock (`AllocError`), the registered pool, the footprint types |
//! | bootstrap | [`bootstrap`] | start-up all-gather: MPI, TCP rendezvous, in-process; its `BootstrapError` |
//! | fabric | [`fabric`]: the trait, `fabric::{error, wire, local, mpi, verbs, shm}` | the transports below the protocol, their packet-header and control codec, each fabric's memory model, `FabricError` |
//! | protocol | `protocol::{engine, collective, connection, credit, datagram, error, matching, request}` | chunking, credits, handshakes, eviction, the datagram path, tag matching, request ids, the time passed in (`Engine::progress(now)`), `ProtocolError` |
//! | comm | `comm`: the [`Communicator`], `comm::{error, model, mpi_native}` | the embedding API over the engine or MPI's native path, the footprint prediction, `CommError` and the [`Error`] its calls return (each layer's error wrapped, with the same messages) |
//! | select, launch | `select`, [`launch`] | the `auto` choice of transport; starting ranks |
//! | fault (feature `fault`) | `fault` | the fault-injection harness: a fabric wrapper and its launcher |
//!
//! Every public item has one path (`ci/public_paths.py` checks it). The everyday API is at
//! the root: [`Communicator`], [`Request`], [`Completion`], [`RuntimeConfig`] and its
//! settings, [`Source`], [`TagMatch`], [`Message`], [`Error`] with [`CommError`],
//! [`ProtocolError`] and [`ConfigError`], [`Footprint`], the reductions, the sparse
//! exchange's [`Received`]. The rest is in
//! modules: [`bootstrap`], [`launch`] (ranks as threads: [`launch::threads`]), [`local`],
//! `shm` (Linux: ranks as processes of one node, large messages by CMA, or as threads),
//! `mpi` and `verbs` (the transports, features `mpi` and `verbs`), [`fabric`] (the trait below the protocol, with
//! [`FabricError`](fabric::FabricError)), [`engine`], [`matching`], [`connection`],
//! [`credit`], [`datagram`], [`wire`], [`model`] (the footprint prediction), [`memory`],
//! [`pool`] and [`env`](mod@env) (the `BALLAST_*` variables).
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
mod comm;
mod core;
pub mod fabric;
mod protocol;

#[cfg(feature = "fault")]
pub mod fault;
pub mod launch;
mod select;

// One public path per item (ci/public_paths.py checks it on the rustdoc output): a module
// that is public keeps its items; the items of the private layer modules that callers need
// are published once, below, as a module of their own or at the root.
pub use crate::core::pool;
pub use comm::model;
pub use protocol::{connection, credit, datagram, engine};

/// Memory: the registered region, page size, the memlock and address-space limits, and the
/// fallible buffers that every size from a caller or a peer goes through ([`AllocError`](memory::AllocError)).
pub mod memory {
    pub use crate::core::memory::{
        address_space_room, check_room, machine_bytes, memlock_limit_bytes, page_size, rank_stack_bytes,
        try_buffer, try_copy, try_reserve_for, AlignedRegion, AllocError, ADDRESS_SPACE_BYTES,
        SMALL_BUFFER_BYTES,
    };
}

/// Tag matching below the communicator: the [`Matcher`](matching::Matcher) and the buffer
/// a blocking receive lends it ([`RecvInto`](matching::RecvInto)). The envelope types
/// ([`Source`], [`TagMatch`], [`Message`], ...) are at the crate root.
pub mod matching {
    pub use crate::protocol::matching::{Matcher, RecvInto};
}

/// The `BALLAST_*` environment variables: the table of every setting
/// ([`SETTINGS`](env::SETTINGS)), the launchers' rank and size variables, the byte-size
/// parser and the debug switch. They are read in one place, [`RuntimeConfig::from_env`].
pub mod env {
    pub use crate::core::config::{debug, parse_bytes, LauncherVars, SettingVar, LAUNCHER_VARS, SETTINGS};
}

/// The packet-header and control codec of the fabrics (issue 34's wire formats, golden
/// tested byte for byte).
pub mod wire {
    pub use crate::fabric::wire::*;
}

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

/// The shared-memory transport (`shm`, Linux; issue 36): one rank per
/// process on one node ([`communicator`](shm::communicator), [`finish`](shm::finish)), or
/// ranks as threads of this process ([`run_ranks`](shm::run_ranks)).
#[cfg(target_os = "linux")]
pub mod shm {
    pub use crate::fabric::shm::ShmFabric;
    pub use crate::launch::shm::{communicator, finish, run_ranks};
}

/// The verbs transport (feature `verbs`): its fabric, device probe and control channel,
/// [`communicator`](verbs::communicator) for one rank per process, and
/// [`run_ranks`](verbs::run_ranks) for several.
#[cfg(feature = "verbs")]
pub mod verbs {
    pub use crate::fabric::verbs::*;
    pub use crate::launch::verbs::{communicator, finish, run_ranks};
}

// The everyday API, from the private layers: the communicator and its requests, the
// configuration, the envelope, the errors of the layers without a public module, the
// footprint, and the choice of transport.
pub use crate::core::config::{
    BootstrapConfig, ConfigError, EndpointOverflow, RecvSharing, RuntimeConfig, RuntimeConfigBuilder,
    Setting, ShmConfig, TransportConfig, TransportKind, ValueOrigin, VerbsConfig,
};
pub use crate::core::footprint::{Footprint, FootprintField, LockStatus, MemoryLock, MemoryModel};
pub use crate::core::procstatus::ProcStatus;
pub use comm::collective::{Received, ReduceOp, ReduceSlice, ReduceType, Reducible};
pub use comm::error::{CommError, Error, Result};
pub use comm::{Communicator, Completion, Request};
pub use protocol::error::ProtocolError;
pub use protocol::matching::{Envelope, Message, Source, Tag, TagMatch, RESERVED_TAG_BASE};
pub use protocol::request::RequestId;
pub use select::{decide_transport, resolve_transport, AutoChoice, AutoInputs, ResolvedTransport};

/// The Rust examples of `docs/EMBEDDING.md`, compiled and run as this crate's doctests
/// (`cargo test -p ballast-runtime --doc`), so that the guide cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../../docs/EMBEDDING.md")]
pub struct EmbeddingGuide;
