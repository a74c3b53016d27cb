//! The shared-memory transport (`shm`, issue 36): ranks in separate
//! processes of one node, each with one segment that holds its receive rings, which all its
//! node-local peers write into (design: docs/fabrics/shm.md). The segment ([`ffi`], the
//! only unsafe code), its rings ([`ring`]) and layout ([`segment`]), the bell that wakes a
//! sleeping rank ([`bell`]), the job's board ([`board`]), the rendezvous that passes a
//! segment to a peer ([`rendezvous`]), the thread that serves it and watches for dead
//! ranks ([`watch`]), the fabric over them ([`fabric`]) and its large messages by CMA
//! ([`direct`]).

pub(crate) mod bell;
pub(crate) mod board;
pub(crate) mod direct;
pub(crate) mod fabric;
#[allow(unsafe_code)] // the shared segment's view, behind bounds-checked safe functions
pub(crate) mod ffi;
pub(crate) mod rendezvous;
pub(crate) mod ring;
pub(crate) mod segment;
pub(crate) mod watch;

pub(crate) use board::Board;
pub(crate) use fabric::memory_model;
pub(crate) use fabric::Job;
pub use fabric::ShmFabric;
