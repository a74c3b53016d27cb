//! The verbs fabric's own unsafe code, each call behind a safe function: the time-stamp
//! counter read of [`super::cycles`] and the registration of the pool's regions (the rest
//! of the FFI to libibverbs is the `ballast-ibv` crate's).

use super::ibv::{IbvError, Mr, Pd};

/// The x86-64 time-stamp counter (`rdtsc`).
#[cfg(target_arch = "x86_64")]
#[inline]
pub(super) fn rdtsc() -> u64 {
    // SAFETY: rdtsc reads a register; it has no memory effects and every x86-64 CPU has it.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Registers `region`, a region of the fabric's buffer pool, in `pd`.
///
/// Only for the pool's regions, handed to the fabric through
/// [`crate::core::pool::Register`]: the pool owns `region` and keeps it allocated and in
/// place until the fabric, which keeps the returned [`Mr`], is dropped. Not sound for any
/// other memory (the device reads and writes it by address while the `Mr` lives).
pub(super) fn register_pool_region(pd: &Pd, region: &[u8]) -> Result<Mr, IbvError> {
    // SAFETY: by the Register contract above, `region` stays allocated and in place for as
    // long as the Mr lives (the fabric drops its Mrs before the pool frees its regions).
    unsafe { Mr::register(pd, region) }
}
