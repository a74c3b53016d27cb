//! libballast: the C ABI of the Ballast runtime (issue #15). Opaque handles over the
//! runtime's `RuntimeConfig` ([`ballast_config`]), `Communicator` ([`ballast_comm`]), its
//! requests ([`ballast_request`]) and collective results ([`ballast_gathered`]); the
//! fixed negative error codes; handle validity (`handles`: a freed or stale handle is
//! refused, never followed); the calling thread's last error message
//! ([`ballast_last_error`]); and the panic boundary: a Rust panic never crosses into C, it
//! becomes [`BALLAST_EINTERNAL`] and poisons the communicator it happened on.
//!
//! The header `include/ballast.h` is generated from these sources by cbindgen (build.rs).
//! All the crate's `unsafe` code is here, at the boundary: dereferencing the pointers C
//! passes in, each block with its `// SAFETY:` reason. Threading: a communicator and its
//! requests are used by one thread at a time (every call checks it at entry: another
//! thread inside is BALLAST_EUNSUPPORTED, `comm::enter`); different communicators from
//! different threads.
#![allow(non_camel_case_types)]

mod abort;
mod collective;
mod comm;
mod completion;
mod config;
mod error;
mod gathered;
mod handles;
mod local_run;
#[cfg(feature = "mpi")]
mod mpi_ranks;
mod notes;
mod process;
mod rank_thread;
mod request;
#[cfg(feature = "bench-twin")]
mod twin;

pub use abort::*;
pub use collective::*;
pub use comm::*;
pub use completion::*;
pub use config::*;
pub use error::*;
pub use gathered::*;
pub use local_run::*;
#[cfg(feature = "mpi")]
pub use mpi_ranks::ballast_mpi_run_ranks;
pub use notes::*;
#[cfg(feature = "mpi")]
pub use process::mpi::ballast_comm_from_mpi;
pub use process::*;
pub use request::*;
#[cfg(feature = "bench-twin")]
pub use twin::ballast_bench_twin;

#[doc(hidden)]
pub use error::panic_in_boundary_for_tests;

use std::os::raw::c_int;

/// Bad argument: a NULL handle or pointer, a handle that is not live (freed already, of a
/// ballast_local_run that returned, a request of a freed communicator, never made) or of
/// another kind, an unknown key, a bad value, a rank or tag out of range, a length above
/// PTRDIFF_MAX, a call the handle does not allow.
pub const BALLAST_EINVAL: c_int = -1;
/// Out of memory: an allocation whose size comes from the caller or a peer (a message, a
/// pool or its growth under pool_growth, a queue, the ranks' threads) does not fit in the
/// machine or under `ulimit -v`; the message names what did not fit (a failed growth names
/// pool_growth and max_pool_bytes). Nothing is changed and the host lives on. A
/// collective (ballast_barrier, ballast_allgatherv, ballast_allreduce, ballast_bcast,
/// ballast_gather, ballast_alltoallv(_into), ballast_exchange_sparse) that returns it, e.g.
/// for an unrelated large message arriving meanwhile, is not finished: it keeps its number and what it
/// sent and received, and the next call of the same collective on the communicator
/// resumes it (nothing is sent twice; the other ranks wait in it meanwhile); a call of
/// another collective before that is BALLAST_EINVAL naming both. A blocking receive that
/// returns it gives back a message it had already matched, for a later receive.
pub const BALLAST_ENOMEM: c_int = -2;
/// Only from ballast_isend: every pool buffer is in flight (*out is NULL); call
/// ballast_progress and retry.
pub const BALLAST_EAGAIN: c_int = -3;
/// A peer rank died or the job was aborted.
pub const BALLAST_EPEER: c_int = -4;
/// Not supported by this build or this setup.
pub const BALLAST_EUNSUPPORTED: c_int = -5;
/// An internal error, or a panic inside the library (the communicator is then poisoned:
/// every later call on it returns BALLAST_EINTERNAL).
pub const BALLAST_EINTERNAL: c_int = -6;
/// The message is longer than the buffer (ballast_recv, ballast_irecv_into): nothing was
/// consumed.
pub const BALLAST_ETRUNC: c_int = -7;
/// A receive was cancelled (ballast_request_cancel): its status's error, and what
/// ballast_test and ballast_wait return for it. New in 0.3.
pub const BALLAST_ECANCELED: c_int = -8;

/// The version of the header (compare with ballast_version, the library's). 0.3 added the
/// collectives of issue 35 (listed at the top of this header); 0.4 the shm transport in
/// ballast_comm_from_env and ballast_footprint's shm fields.
pub const BALLAST_VERSION_MAJOR: c_int = 0;
/// See BALLAST_VERSION_MAJOR.
pub const BALLAST_VERSION_MINOR: c_int = 4;
/// See BALLAST_VERSION_MAJOR.
pub const BALLAST_VERSION_PATCH: c_int = 0;

/// Receive from any rank (ballast_irecv, ballast_recv, ballast_iprobe).
pub const BALLAST_ANY_SOURCE: c_int = -1;
/// Receive any user tag (ballast_irecv, ballast_recv, ballast_iprobe).
pub const BALLAST_ANY_TAG: i64 = -1;
/// The largest user tag: valid tags are 0 to 2^31 - 1 (the tags above are the runtime's).
pub const BALLAST_TAG_MAX: i64 = 0x7fff_ffff;

#[cfg(test)]
mod tests {
    #[test]
    fn the_header_version_is_the_crate_version() {
        let v = [
            super::BALLAST_VERSION_MAJOR,
            super::BALLAST_VERSION_MINOR,
            super::BALLAST_VERSION_PATCH,
        ]
        .map(|n| n.to_string())
        .join(".");
        assert_eq!(v, env!("CARGO_PKG_VERSION"));
    }
}
