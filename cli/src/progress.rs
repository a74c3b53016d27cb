//! What `run` and `fanout` print while ranks run as threads of this process: a warning when
//! the ranks outnumber the cores several-fold, and a progress bar (indicatif, on stderr,
//! hidden when stderr is not a terminal) for runs that last more than a few seconds.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Ranks per core above which [`oversubscription_warning`] warns.
pub const RANKS_PER_CORE_WARN: usize = 4;

/// How long a run goes without a progress bar (short runs print nothing).
const SHOW_AFTER: Duration = Duration::from_secs(2);

/// The warning for `ranks` ranks as threads of one process on `cores` cores, when they
/// exceed [`RANKS_PER_CORE_WARN`] per core.
pub fn oversubscription_warning(ranks: usize, cores: usize) -> Option<String> {
    let cores = cores.max(1);
    (ranks > RANKS_PER_CORE_WARN * cores).then(|| {
        format!(
            "{ranks} ranks run as threads on {cores} core{} ({} per core): waiting ranks block and use no core, but the ranks' work shares the cores, so the run takes about as long as all of it done on {cores} core{}",
            if cores == 1 { "" } else { "s" },
            ranks.div_ceil(cores),
            if cores == 1 { "" } else { "s" },
        )
    })
}

/// The cores this process may use (1 when unknown).
pub fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// Prints the [`oversubscription_warning`] for `ranks` threads on this machine, if any.
pub fn warn_oversubscribed(command: &str, ranks: usize) {
    if let Some(w) = oversubscription_warning(ranks, cores()) {
        eprintln!("ballast {command}: warning: {w}");
    }
}

/// A count that grows to a known total while `f` runs.
pub trait Counter: Sync {
    /// The count now.
    fn get(&self) -> u64;
}

impl Counter for AtomicU64 {
    fn get(&self) -> u64 {
        self.load(Ordering::Relaxed)
    }
}

impl Counter for AtomicUsize {
    fn get(&self) -> u64 {
        self.load(Ordering::Relaxed) as u64
    }
}

/// Runs `f` on this thread while another one shows, after [`SHOW_AFTER`], a progress bar of
/// `counter` towards `total` on stderr (only when stderr is a terminal), with `message(count)`
/// beside it; the bar is cleared when `f` returns.
pub fn with_progress<T>(
    total: u64,
    counter: &dyn Counter,
    message: &(dyn Fn(u64) -> String + Sync),
    f: impl FnOnce() -> T,
) -> T {
    let finished = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let start = Instant::now();
            let mut bar: Option<ProgressBar> = None;
            while !finished.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(100));
                let n = counter.get();
                if bar.is_none() && start.elapsed() >= SHOW_AFTER {
                    let style = ProgressStyle::with_template(
                        "{elapsed_precise} [{bar:25}] {percent:>3}% {msg}, eta {eta}",
                    )
                    .expect("a valid template")
                    .progress_chars("=> ");
                    // Style, message and position set before the bar is drawn (hidden, then
                    // the terminal), so that its first frame has them all.
                    let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden())
                        .with_style(style)
                        .with_message(message(n))
                        .with_position(n)
                        .with_elapsed(start.elapsed());
                    b.set_draw_target(ProgressDrawTarget::stderr());
                    bar = Some(b);
                }
                if let Some(b) = &bar {
                    b.set_message(message(n));
                    b.set_position(n);
                }
            }
            if let Some(b) = bar {
                b.finish_and_clear();
            }
        });
        // Stops the bar also when `f` panics (the scope then waits for the bar's thread).
        struct Finish<'a>(&'a AtomicBool);
        impl Drop for Finish<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        let _finish = Finish(&finished);
        f()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warns_only_past_four_ranks_per_core() {
        assert_eq!(oversubscription_warning(8, 2), None);
        let w = oversubscription_warning(9, 2).unwrap();
        assert!(
            w.starts_with("9 ranks run as threads on 2 cores (5 per core)"),
            "{w}"
        );
        assert!(oversubscription_warning(5, 1)
            .unwrap()
            .contains("on 1 core (5 per core)"));
        assert_eq!(oversubscription_warning(3, 0), None, "0 cores is read as 1");
    }
}
