//! Ballast communication runtime: transports, the registered buffer pool, the
//! connection manager and the footprint model. (Filled in by the runtime-core issue.)
#![deny(unsafe_code)]
