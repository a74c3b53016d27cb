//! The transports, a closed set: `local` (ranks as threads of one process), `mpi` (feature
//! `mpi`) and `verbs` (feature `verbs`), and the [`comm::Communicator`] over them. Each
//! transport owns its fabric and its memory model; unsafe code of the crate lives only in
//! `mpi` and `verbs`.

pub mod comm;
mod drop_model;
pub mod local;
pub mod model;
#[cfg(feature = "mpi")]
#[allow(unsafe_code)] // raw MPI_Isend of owned buffers and Send for MPI handles; see `mpi` docs
pub mod mpi;
#[cfg(feature = "verbs")]
#[allow(unsafe_code)] // FFI to libibverbs: the only unsafe code of the crate besides `mpi`; see `verbs` docs
pub mod verbs;
