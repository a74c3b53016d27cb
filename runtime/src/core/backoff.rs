//! The idle-wait policy of blocking calls ([`Backoff`]): spin, yield, then sleep or block.

/// Idle-wait policy of blocking calls: spin briefly ([`SPIN_POLLS`] polls), then yield the
/// core for up to [`YIELD_FOR`] of idleness, then sleep in short steps (ranks may outnumber
/// cores). The yield phase is bounded by time, not by a count: with a fast fabric poll, a
/// count ran out within one network round trip and the sleep (a whole timer tick on some
/// kernels, 4 ms in the soft-RoCE guest) then dominated the latency.
///
/// On a fabric that can block (`Fabric::blocks_when_idle`, the local transport), the
/// same spin polls come first, then yields for up to [`BLOCK_AFTER`], then the rank blocks
/// in `Fabric::wait_for_arrival` (woken by the next arrival) and uses no core while it
/// waits: thousands of waiting ranks on a few cores leave those cores to the ranks with
/// work.
pub(crate) struct Backoff {
    idle: u32,
    since: Option<std::time::Instant>,
    sleeping: bool,
    /// How long [`Backoff::snooze_on`] yields before it blocks ([`BLOCK_AFTER`] unless
    /// made [`Backoff::patient`]).
    block_after: std::time::Duration,
}

/// How long a blocking call yields before it starts sleeping: long enough to cover a
/// round trip of the slowest fabric (soft-RoCE), whose replies a sleep would delay by a
/// whole timer tick (docs/BENCHMARKS.md, "Soft-RoCE in the QEMU guest").
const YIELD_FOR: std::time::Duration = std::time::Duration::from_millis(200);

/// Idle polls run back to back before a blocking call yields or blocks.
pub(crate) const SPIN_POLLS: u32 = 64;

/// How long a blocking call on a fabric that can block yields before it blocks: a wake-up
/// from a block costs more than a yield, so a reply that comes within a round trip of the
/// local transport is caught by polling.
const BLOCK_AFTER: std::time::Duration = std::time::Duration::from_micros(50);

/// Longest single block in `Fabric::wait_for_arrival`: arrivals wake the rank earlier;
/// this only bounds how long a missed wake-up could delay it.
const BLOCK_FOR: std::time::Duration = std::time::Duration::from_millis(100);

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff {
            idle: 0,
            since: None,
            sleeping: false,
            block_after: BLOCK_AFTER,
        }
    }

    /// A backoff that yields `longer` more before it blocks: for a wait whose end another
    /// rank is working towards for about that long (shm: a peer copying this rank's large
    /// message by CMA). Blocking there costs a wake-up (tens of microseconds when the
    /// waiting core went idle in a VM) on every message, where yielding costs nothing to a
    /// rank with work: it gives the core away.
    pub(crate) fn patient(longer: std::time::Duration) -> Backoff {
        Backoff {
            block_after: BLOCK_AFTER.saturating_add(longer),
            ..Backoff::new()
        }
    }
    pub(crate) fn reset(&mut self) {
        self.idle = 0;
        self.since = None;
        self.sleeping = false;
    }
    pub(crate) fn snooze(&mut self) {
        self.idle = self.idle.saturating_add(1);
        if self.idle < SPIN_POLLS {
            // No PAUSE (`spin_loop`) between these polls: one progress call already lasts
            // longer than a PAUSE on hardware, and the 8 B verbs ping-pong is faster without
            // it (docs/BENCHMARKS.md, "Soft-RoCE in the QEMU guest").
            return;
        }
        // The clock is read once per 64 idle polls, not per poll: in the soft-RoCE guest
        // (TCG, HPET clock source) one read costs 1.3-5 us, a large part of a round trip.
        if self.idle.is_multiple_of(64) || self.since.is_none() {
            let since = *self.since.get_or_insert_with(std::time::Instant::now);
            self.sleeping = since.elapsed() >= YIELD_FOR;
        }
        if self.sleeping {
            std::thread::sleep(std::time::Duration::from_micros(50));
        } else {
            std::thread::yield_now();
        }
    }

    /// [`Backoff::snooze`] for a rank on a fabric: the same spin polls, then, on a fabric
    /// that can block (`blocks`), yields for up to [`BLOCK_AFTER`] and calls `wait` (block
    /// until an arrival, at most the given time) after that; otherwise exactly
    /// [`Backoff::snooze`].
    pub(crate) fn snooze_on(&mut self, blocks: bool, wait: impl FnOnce(std::time::Duration)) {
        if self.idle + 1 < SPIN_POLLS || !blocks {
            return self.snooze();
        }
        self.idle = self.idle.saturating_add(1);
        // Read on every idle call: with many runnable ranks one yield can last a time
        // slice, and counting yields would keep a rank runnable for many of them.
        let since = *self.since.get_or_insert_with(std::time::Instant::now);
        if since.elapsed() < self.block_after {
            std::thread::yield_now();
        } else {
            wait(BLOCK_FOR);
        }
    }
}
