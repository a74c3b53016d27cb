//! A progress counter a caller watches while a long step runs (for a progress bar): the
//! dry-run reader counts bytes (read, then parsed: twice the file's size in the end), LPT
//! counts cells (placed, then gathered: twice the cell count in the end).
use std::sync::atomic::{AtomicU64, Ordering};

/// A count that a balancer step raises as it goes and another thread may read at any
/// time. Steps take an `Option<&Progress>`: `None` when nobody watches.
#[derive(Debug, Default)]
pub struct Progress(AtomicU64);

impl Progress {
    /// A counter at 0.
    pub fn new() -> Progress {
        Progress(AtomicU64::new(0))
    }

    /// The count now (units as the step that counts documents them).
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Adds `n` to the count.
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Sets the count to `n`.
    #[inline]
    pub(crate) fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }
}
