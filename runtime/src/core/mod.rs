//! The runtime's foundation, imported by every layer above and importing none of them:
//! errors, the configuration (pure: it knows transport kinds but no transport), memory
//! mapping and memlock, the registered buffer pool, the idle-wait policy, integer hash
//! maps, the process' own memory counters, the footprint model (given each transport's
//! [`footprint::MemoryModel`]) and request ids (named by the errors).

pub mod backoff;
pub mod config;
pub mod error;
pub mod footprint;
pub mod intmap;
pub mod memory;
pub mod pool;
pub mod procstatus;
pub mod request;
