//! What `run` and `fanout` print while ranks run as threads of this process: a warning when
//! the ranks outnumber the cores several-fold, and a progress bar (indicatif, on stderr,
//! hidden when stderr is not a terminal) for runs that last more than a few seconds; the
//! spinner or progress bar (when its total is known) of a step of `dry-run` that lasts more
//! than a second ([`step_counted`]), and the wall and CPU time of such steps
//! ([`Timings`]).

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

impl Counter for ballast_balancer::Progress {
    fn get(&self) -> u64 {
        ballast_balancer::Progress::get(self)
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
        // No bar when no thread can start (ballast_balancer::spawn).
        ballast_balancer::spawn::scoped(s, || {
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

/// How long a step of [`step_counted`] goes without a spinner or bar.
const STEP_SHOW_AFTER: Duration = Duration::from_secs(1);

/// Runs `f` while, after [`STEP_SHOW_AFTER`], a spinner with `label` and the elapsed time
/// turns on stderr (only when stderr is a terminal), or a progress bar of `counter` towards
/// `total` when `progress` is `Some((total, counter))`; cleared when `f` returns.
pub fn step_counted<T>(label: &str, progress: Option<(u64, &dyn Counter)>, f: impl FnOnce() -> T) -> T {
    let finished = AtomicBool::new(false);
    std::thread::scope(|s| {
        // No spinner when no thread can start (ballast_balancer::spawn).
        let spinner = ballast_balancer::spawn::scoped(s, || {
            let start = Instant::now();
            let mut bar: Option<ProgressBar> = None;
            while !finished.load(Ordering::Acquire) {
                // Woken at once when `f` returns (unpark), so a short step costs no wait.
                std::thread::park_timeout(Duration::from_millis(50));
                if finished.load(Ordering::Acquire) {
                    break;
                }
                if bar.is_none() && start.elapsed() >= STEP_SHOW_AFTER {
                    let (style, total) = match progress {
                        None => ("{spinner} {msg} ({elapsed})", None),
                        Some((total, _)) => (
                            "{msg} [{bar:25}] {percent:>3}% ({elapsed}, eta {eta})",
                            Some(total),
                        ),
                    };
                    let style = ProgressStyle::with_template(style)
                        .expect("a valid template")
                        .progress_chars("=> ");
                    let b = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden())
                        .with_style(style)
                        .with_message(label.to_owned())
                        .with_position(progress.map_or(0, |(_, c)| c.get()))
                        .with_elapsed(start.elapsed());
                    b.set_draw_target(ProgressDrawTarget::stderr());
                    bar = Some(b);
                }
                if let Some(b) = &bar {
                    match progress {
                        None => b.tick(),
                        Some((_, c)) => b.set_position(c.get()),
                    }
                }
            }
            if let Some(b) = bar {
                b.finish_and_clear();
            }
        });
        // Stops the spinner also when `f` panics (the scope then waits for its thread).
        struct Finish<'a>(&'a AtomicBool, Option<std::thread::Thread>);
        impl Drop for Finish<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
                if let Some(t) = &self.1 {
                    t.unpark();
                }
            }
        }
        let _finish = Finish(&finished, spinner.map(|h| h.thread().clone()));
        f()
    })
}

/// Wall and CPU time (of the whole process, all threads) of named steps, in order.
#[derive(Default)]
pub struct Timings {
    steps: Vec<(&'static str, f64, f64)>,
}

/// CPU seconds used by this process so far (all threads).
fn cpu_seconds() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

impl Timings {
    /// Runs `f` as step `name` (with a [`step_counted`] spinner labelled `label`), recording its
    /// wall and CPU time.
    pub fn time<T>(&mut self, name: &'static str, label: &str, f: impl FnOnce() -> T) -> T {
        self.time_counted(name, label, None, f)
    }

    /// [`Timings::time`] with a progress bar of a counter towards a total when `progress`
    /// gives them ([`step_counted`]).
    pub fn time_counted<T>(
        &mut self,
        name: &'static str,
        label: &str,
        progress: Option<(u64, &dyn Counter)>,
        f: impl FnOnce() -> T,
    ) -> T {
        let (wall, cpu) = (Instant::now(), cpu_seconds());
        let out = step_counted(label, progress, f);
        self.steps
            .push((name, wall.elapsed().as_secs_f64(), cpu_seconds() - cpu));
        out
    }

    /// One line: `timings: NAME WALL_S CPU_S ...` for every step, in order.
    pub fn line(&self) -> String {
        let mut out = String::from("timings:");
        for (name, wall, cpu) in &self.steps {
            out += &format!(" {name} {wall:.4} {cpu:.4}");
        }
        out
    }
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

    #[test]
    fn timings_record_each_step_in_order() {
        let mut t = Timings::default();
        let x = t.time("read", "reading", || {
            // Busy for a few ms, so that CPU time is counted.
            let start = Instant::now();
            let mut n = 0u64;
            while start.elapsed() < Duration::from_millis(20) {
                n = n.wrapping_add(1);
            }
            n
        });
        assert!(x > 0);
        t.time("write", "writing", || ());
        let line = t.line();
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(fields[0], "timings:");
        assert_eq!((fields[1], fields[4]), ("read", "write"), "{line}");
        let read_wall: f64 = fields[2].parse().unwrap();
        let read_cpu: f64 = fields[3].parse().unwrap();
        assert!(read_wall >= 0.02 && read_cpu > 0.0, "{line}");
    }
}
