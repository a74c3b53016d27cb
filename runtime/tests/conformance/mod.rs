//! Transport conformance suite, written once and generic over a [`Launcher`]; each
//! transport instantiates it (`local_conformance.rs` for the in-process transport).
//! This file owns the [`Launcher`] trait and the shared helpers (payloads, checksums,
//! configuration); the cases are grouped by topic in `matching.rs` (order, any-source and
//! any-tag, message sizes), `completion.rs` (limited receives, cancel), `resources.rs` (back-pressure, pool growth, endpoint caps,
//! footprint), `scale.rs` (many ranks, collectives, bad input) and `large.rs` (messages
//! above the buffer size); `exchange.rs` carries results between processes.
#![allow(dead_code)]

use ballast_runtime::{Communicator, RecvSharing, Result, RuntimeConfig};

mod completion;
mod exchange;
mod large;
mod matching;
mod resources;
mod scale;

// Each test binary runs the groups its transport supports (verbs has no large-message
// cases), so a re-export may be unused in one of them.
#[allow(unused_imports)]
pub use {completion::*, exchange::*, large::*, matching::*, resources::*, scale::*};

/// Starts `n` ranks of one transport and runs `f` on each.
pub trait Launcher: Sync {
    /// Transport name (for messages).
    fn name(&self) -> &'static str;
    /// Runs `f` on `n` ranks; results by rank (on every process, for multi-process
    /// transports: hence [`Exchange`]).
    fn run<R: Send + Exchange, F: Fn(&mut Communicator) -> R + Sync>(
        &self,
        n: usize,
        cfg: &RuntimeConfig,
        f: F,
    ) -> Result<Vec<R>>;
}

/// FNV-1a 64-bit checksum.
pub fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Deterministic payload of `len` bytes depending on `seed` (xorshift).
pub fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn enc(a: u64, b: u64) -> Vec<u8> {
    let mut v = a.to_le_bytes().to_vec();
    v.extend_from_slice(&b.to_le_bytes());
    v
}

fn dec(d: &[u8]) -> (u64, u64) {
    (
        u64::from_le_bytes(d[0..8].try_into().unwrap()),
        u64::from_le_bytes(d[8..16].try_into().unwrap()),
    )
}

/// The datagram overlay of a test binary that runs the suite over the datagram path:
/// `(max_endpoints, datagram_drop_every)` applied by [`cfg`] to every case (a case that sets
/// its own cap overrides it). `None`: the suite's own settings. Process-wide: a binary
/// sets it for all its cases (local) or around a sequence of cases (MPI, one at a time).
pub static DATAGRAM_OVERLAY: std::sync::RwLock<Option<(usize, usize)>> = std::sync::RwLock::new(None);

/// Sets the [`DATAGRAM_OVERLAY`].
pub fn set_datagram_overlay(o: Option<(usize, usize)>) {
    *DATAGRAM_OVERLAY.write().unwrap() = o;
}

/// The seed of the test drop model's pattern (`datagram_drop_seed`) that [`cfg`] gives
/// every case: 0 (the default) is the drop model's default pattern.
pub static DATAGRAM_DROP_SEED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Sets the [`DATAGRAM_DROP_SEED`] from `BALLAST_DATAGRAM_DROP_SEED` (through the runtime's
/// own reading of the environment) and prints it when it is set, so that a failing
/// pattern can be run again; returns it.
pub fn datagram_drop_seed_from_env() -> u64 {
    let seed = RuntimeConfig::from_env()
        .expect("BALLAST_* variables")
        .transport()
        .datagram_drop_seed;
    if seed != 0 {
        println!("datagram drop pattern: BALLAST_DATAGRAM_DROP_SEED={seed}");
    }
    DATAGRAM_DROP_SEED.store(seed, std::sync::atomic::Ordering::Relaxed);
    seed
}

fn cfg(sharing: RecvSharing) -> ballast_runtime::RuntimeConfigBuilder {
    let b = RuntimeConfig::builder()
        .recv_sharing(sharing)
        .lock_pool(false)
        .datagram_drop_seed(DATAGRAM_DROP_SEED.load(std::sync::atomic::Ordering::Relaxed));
    match *DATAGRAM_OVERLAY.read().unwrap() {
        Some((cap, drop)) => b
            .max_endpoints(cap)
            .endpoint_overflow(ballast_runtime::EndpointOverflow::Datagram)
            .datagram_drop_every(drop),
        None => b,
    }
}
