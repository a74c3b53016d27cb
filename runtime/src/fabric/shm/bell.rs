//! Waking a rank that sleeps for want of arrivals: a futex word (the bell) and a flag, on
//! the job's board. A producer rings after publishing a cell; the owner, before it sleeps, sets
//! the flag, reads the bell and checks its rings once more, then sleeps only if the bell
//! has not moved (`FUTEX_WAIT` compares it in the kernel). The futex is not private: the
//! word is in memory that other processes map (`futex(2)`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use rustix::thread::futex;

use super::ffi::Segment;

/// A bell at two 4-byte words of a segment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bell {
    /// Offset of the bell word (a count of rings).
    bell: usize,
    /// Offset of the flag: nonzero while the owner may be asleep.
    sleeping: usize,
}

impl Bell {
    /// The bell at `bell` and its flag at `sleeping` (4-byte aligned offsets in `seg`), if
    /// both are in the segment.
    pub(crate) fn new(seg: &Segment, bell: usize, sleeping: usize) -> Option<Bell> {
        seg.u32_at(bell)?;
        seg.u32_at(sleeping)?;
        Some(Bell { bell, sleeping })
    }

    /// Rings: wakes the owner if it sleeps. Call after publishing what it should see.
    #[inline]
    pub(crate) fn ring(&self, seg: &Segment) {
        let (Some(bell), Some(sleeping)) = (seg.u32_at(self.bell), seg.u32_at(self.sleeping)) else {
            return;
        };
        // SeqCst on both sides (here and in `sleep`): either the owner's read of the bell
        // sees this ring, or this read of the flag sees the owner asleep.
        bell.fetch_add(1, Ordering::SeqCst);
        if sleeping.load(Ordering::SeqCst) != 0 {
            // An error (none is documented for a wake) leaves the owner to its timeout.
            // (The count is an int in the kernel: `i32::MAX`, all.)
            let _ = futex::wake(bell, futex::Flags::empty(), i32::MAX as u32);
        }
    }

    /// The owner's sleep: at most `timeout`, and not at all if `idle()` (the owner's last
    /// look at its rings) finds work. Returns early on a ring (or spuriously: the caller
    /// looks again).
    pub(crate) fn sleep(&self, seg: &Segment, timeout: Duration, idle: impl FnOnce() -> bool) {
        let (Some(bell), Some(sleeping)) = (seg.u32_at(self.bell), seg.u32_at(self.sleeping)) else {
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
            return;
        };
        sleeping.store(1, Ordering::SeqCst);
        let seen = bell.load(Ordering::SeqCst);
        if idle() {
            let ts = rustix::time::Timespec {
                tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
                tv_nsec: i64::from(timeout.subsec_nanos()),
            };
            // EAGAIN (the bell moved), EINTR and ETIMEDOUT all mean: look again.
            let _ = futex::wait(bell, futex::Flags::empty(), seen, Some(&ts));
        }
        sleeping.store(0, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    #[test]
    fn a_ring_wakes_the_sleeper_and_a_ring_before_the_sleep_is_not_lost() {
        let seg = Segment::create("ballast-test-bell", 4096).unwrap();
        let bell = Bell::new(&seg, 64, 68).unwrap();
        assert!(Bell::new(&seg, 4096, 0).is_none());
        assert!(Bell::new(&seg, 2, 68).is_none(), "unaligned");
        let work = AtomicBool::new(false);
        let long = Duration::from_secs(60);
        // Work published before the sleep: `idle` sees it, no sleep at all.
        work.store(true, Ordering::SeqCst);
        bell.ring(&seg);
        let t = Instant::now();
        bell.sleep(&seg, long, || !work.load(Ordering::SeqCst));
        assert!(t.elapsed() < long / 2, "slept with work pending");
        // A sleeper woken by a ring from another thread, well before its timeout.
        work.store(false, Ordering::SeqCst);
        std::thread::scope(|s| {
            let (seg, work) = (&seg, &work);
            let sleeper = s.spawn(move || {
                let t = Instant::now();
                while !work.load(Ordering::SeqCst) {
                    bell.sleep(seg, long, || !work.load(Ordering::SeqCst));
                }
                t.elapsed()
            });
            std::thread::sleep(Duration::from_millis(20));
            work.store(true, Ordering::SeqCst);
            bell.ring(seg);
            assert!(sleeper.join().unwrap() < long / 2, "not woken by the ring");
        });
    }
}
