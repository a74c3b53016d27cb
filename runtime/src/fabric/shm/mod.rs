//! The shared-memory transport (`shm`, issue 36), under construction: ranks in separate
//! processes of one node, each with one segment that holds its receive rings, which all its
//! node-local peers write into. This step holds the building blocks, each tested on its
//! own: the segment ([`ffi`]), the receive rings ([`ring`]), the bell that wakes a sleeping
//! rank ([`bell`]) and the rendezvous that passes a segment to a peer ([`rendezvous`]). The
//! fabric over them follows.

pub(crate) mod bell;
#[allow(unsafe_code)] // the shared segment's view, behind bounds-checked safe functions
pub(crate) mod ffi;
pub(crate) mod rendezvous;
pub(crate) mod ring;
