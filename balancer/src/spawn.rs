//! Starting helper threads only when they can start: the balancer's own, and its caller's
//! beside it.
//!
//! Rust's standard library maps a spawned thread's stack before `spawn` returns, but the
//! thread's signal stack (for its stack-overflow message) in the new thread, before the
//! closure runs: when that mapping fails, as under `ulimit -v` once the process has
//! allocated most of its address space, the new thread panics where it cannot unwind and
//! the process aborts ("failed to allocate an alternative stack"). No caller can catch it.
//! So every helper thread is started here:
//! - before the spawn, the address space left under `RLIMIT_AS` (its soft limit in
//!   /proc/self/limits less `VmSize` of /proc/self/status) must hold the thread's stack,
//!   its guard page, its signal stack, the malloc arena its first allocation reserves
//!   (glibc: 64 MiB) and a margin ([`fits`]); when it does not, the work
//!   runs on the calling thread instead ([`Side::Here`]) or, where it is optional or cannot
//!   run inline, the caller is told ([`scoped`]; the balancer's own `detached`);
//! - after the spawn, the spawner waits until the new thread's first statement has run
//!   (it signals), so that the spawner cannot allocate the space the thread's start needs
//!   between the check and the start. Threads already running beside the spawner are not
//!   held back: one that allocates exactly the space left in that window can still take it.
//!
//! Why this is public: the balancer's long steps ([`balance_charged`](crate::balance_charged),
//! [`DryRun::from_json_file_with_notes`](crate::DryRun::from_json_file_with_notes)) run on
//! the caller's thread and report to a [`Progress`](crate::Progress) that another thread
//! reads, and a caller also has work of its own beside them. Started with
//! `std::thread::spawn` under `ulimit -v`, that thread can abort the process after the
//! balancer took care not to. [`scoped`] starts an optional thread (a progress display) only
//! when it can start, [`side`] runs side work on a thread or else on the calling thread with
//! the same result, and [`fits`] tells whether a thread can start (for a library that starts
//! its own, such as a progress bar's ticker). `ballast` starts its progress bars and side
//! work through them.
#![deny(unsafe_code)]

use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::thread::{Builder, JoinHandle, Scope, ScopedJoinHandle};

use crate::limits::address_space_left;

/// The standard library's default stack for a spawned thread (`RUST_MIN_STACK` when set is
/// used instead): 2 MiB (std::thread, "Stack size").
const DEFAULT_STACK: u64 = 2 << 20;

/// Address space a thread's start takes beyond its stack, rounded up: glibc's guard page
/// below the stack, the signal stack std maps (`SIGSTKSZ` or the kernel's
/// `AT_MINSIGSTKSZ`, a few KiB, and a guard page) and the thread's first small
/// allocations (its thread-locals, the start signal).
const START_OVERHEAD: u64 = 1 << 20;

/// Margin kept free beyond the threads' starts: the calling thread's small allocations
/// while the new threads start.
const MARGIN: u64 = 4 << 20;

/// Address space glibc's malloc reserves for a thread's own arena at the thread's first
/// allocation: one heap of `HEAP_MAX_SIZE`, 64 MiB on 64-bit (2 × `DEFAULT_MMAP_THRESHOLD_MAX`,
/// glibc's malloc/arena.c; mapped `PROT_NONE` and made accessible as it grows, but counted by
/// `ulimit -v` whole). A thread reuses the arena of one that ended, and past 8 arenas per
/// core threads share them, so this is the most a thread adds; counting it is what keeps the
/// threads' arenas from taking the address space the process's later allocations need
/// (which then abort: "memory allocation of N bytes failed"). Other allocators: 0.
const ARENA: u64 = if cfg!(all(target_os = "linux", target_env = "gnu")) {
    64 << 20
} else {
    0
};

/// Bytes of address space one more thread takes as it starts and allocates: its stack,
/// `START_OVERHEAD` and its malloc arena (`ARENA`).
pub(crate) fn thread_bytes() -> u64 {
    let stack = std::env::var("RUST_MIN_STACK")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(DEFAULT_STACK);
    stack.saturating_add(START_OVERHEAD).saturating_add(ARENA)
}

/// Whether `threads` more threads can start, with `extra` bytes more allocated by the
/// caller while they do, and `MARGIN` to spare. Always true without a limit.
pub fn fits(threads: usize, extra: u64) -> bool {
    fits_in(address_space_left(), threads, extra)
}

fn fits_in(left: Option<u64>, threads: usize, extra: u64) -> bool {
    let Some(left) = left else {
        return true;
    };
    let need = thread_bytes()
        .saturating_mul(threads as u64)
        .saturating_add(extra)
        .saturating_add(MARGIN);
    left >= need
}

/// Work for another thread of a scope, or for this one when no thread could start.
pub enum Side<'scope, T, F> {
    /// Running on a thread of its own.
    Thread(ScopedJoinHandle<'scope, T>),
    /// Not started: runs on the calling thread at [`Side::join`].
    Here(F),
}

impl<T, F: FnOnce() -> T> Side<'_, T, F> {
    /// The work's result: the thread's (a panic of the thread is resumed here), or `f` run
    /// now on the calling thread.
    pub fn join(self) -> T {
        match self {
            Side::Thread(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
            Side::Here(f) => f(),
        }
    }

    /// Whether the work runs on a thread of its own.
    pub fn on_a_thread(&self) -> bool {
        matches!(self, Side::Thread(_))
    }
}

/// `f` started on a thread of scope `s` when one can start ([`fits`], then the spawn), else
/// kept to run on this thread at [`Side::join`]: the same result either way. Returns once
/// the thread has started.
pub fn side<'scope, 'env, T, F>(s: &'scope Scope<'scope, 'env>, f: F) -> Side<'scope, T, F>
where
    T: Send + 'scope,
    F: FnOnce() -> T + Send + 'scope,
{
    if !fits(1, 0) {
        return Side::Here(f);
    }
    // The closure is handed over through `slot`, so that a spawn that fails gives it back.
    let slot = Arc::new(Mutex::new(Some(f)));
    let theirs = Arc::clone(&slot);
    let (started, wait) = mpsc::sync_channel::<()>(1);
    let spawned = Builder::new().spawn_scoped(s, move || {
        let _ = started.send(());
        let f = take(&theirs).expect("the work is handed over once");
        drop(theirs);
        f()
    });
    match spawned {
        Ok(h) => {
            // Sent by the thread's first statement (or gone with it).
            let _ = wait.recv();
            Side::Thread(h)
        }
        // The failed spawn dropped its copy of the closure: the work is back in `slot`.
        Err(_) => Side::Here(take(&slot).expect("a failed spawn leaves the work")),
    }
}

/// `f` started on a thread of scope `s` when one can start, after which this returns;
/// `None` (and `f` dropped) when none can: for work that is optional (a progress bar, a
/// second reader) or that the caller does another way.
pub fn scoped<'scope, 'env, T, F>(s: &'scope Scope<'scope, 'env>, f: F) -> Option<ScopedJoinHandle<'scope, T>>
where
    T: Send + 'scope,
    F: FnOnce() -> T + Send + 'scope,
{
    match side(s, f) {
        Side::Thread(h) => Some(h),
        Side::Here(_) => None,
    }
}

/// `f` started on a detached thread named `name` when one can start, after which this
/// returns. Errors (`OutOfMemory`, or the spawn's error) when it cannot start; `f` is
/// dropped then.
pub(crate) fn detached<F>(name: &str, f: F) -> std::io::Result<JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    if !fits(1, 0) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            format!(
                "no address space left to start the thread `{name}` ({} under the ulimit -v limit)",
                crate::limits::human_bytes(address_space_left().unwrap_or(0))
            ),
        ));
    }
    let (started, wait) = mpsc::sync_channel::<()>(1);
    let h = Builder::new().name(name.into()).spawn(move || {
        let _ = started.send(());
        f()
    })?;
    let _ = wait.recv();
    Ok(h)
}

fn take<F>(slot: &Mutex<Option<F>>) -> Option<F> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_need_is_the_threads_the_extra_and_the_margin() {
        let one = thread_bytes() + MARGIN;
        assert!(fits_in(None, 1000, u64::MAX));
        assert!(fits_in(Some(one), 1, 0));
        assert!(!fits_in(Some(one - 1), 1, 0));
        assert!(fits_in(Some(one + 5), 1, 5));
        assert!(!fits_in(Some(one + 5), 1, 6));
        assert!(!fits_in(Some(2 * one - MARGIN - 1), 2, 0));
        assert!(!fits_in(Some(u64::MAX - 1), usize::MAX, 0));
    }

    /// Room for a thread's stack but not for the malloc arena its first allocation
    /// reserves is not room for a thread (with glibc).
    #[test]
    fn a_start_counts_the_malloc_arena() {
        let stack_only = DEFAULT_STACK + START_OVERHEAD + MARGIN + (8 << 20);
        if cfg!(all(target_os = "linux", target_env = "gnu")) && std::env::var_os("RUST_MIN_STACK").is_none()
        {
            assert_eq!(thread_bytes(), DEFAULT_STACK + START_OVERHEAD + (64 << 20));
            assert!(!fits_in(Some(stack_only), 1, 0));
            assert!(fits_in(Some(stack_only + (64 << 20)), 1, 0));
        }
    }

    #[test]
    fn side_work_gives_its_result_on_a_thread() {
        let main = std::thread::current().id();
        let (on_thread, id) = std::thread::scope(|s| {
            let w = side(s, || std::thread::current().id());
            (w.on_a_thread(), w.join())
        });
        assert!(on_thread);
        assert_ne!(id, main);
    }

    #[test]
    fn a_detached_thread_runs() {
        let (tx, rx) = mpsc::channel();
        detached("ballast-test", move || tx.send(7).unwrap())
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(rx.recv().unwrap(), 7);
    }

    /// Under a limit that leaves less than a thread's start, [`side`] keeps the work on the
    /// calling thread, [`scoped`] starts nothing and [`detached`] errors, where a spawn
    /// would abort the process. The limit is set on a process of its own (the test binary
    /// re-runs itself with this one test), by prlimit(1) from util-linux.
    #[test]
    fn with_no_space_left_no_thread_is_started() {
        const CHILD: &str = "SPAWN_TEST_CHILD";
        if std::env::var_os(CHILD).is_none() {
            let me = std::env::current_exe().unwrap();
            let out = std::process::Command::new(me)
                .args([
                    "--exact",
                    "spawn::tests::with_no_space_left_no_thread_is_started",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            if text.contains("prlimit(1) not available") {
                eprintln!("skipped: prlimit(1) not available");
                return;
            }
            assert!(out.status.success(), "{text}");
            assert!(text.contains("1 passed"), "{text}");
            return;
        }
        let size = std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find(|l| l.starts_with("VmSize:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap()
            * 1024;
        // Half a thread's start above the current size (the soft limit; the hard one stays).
        let limit = size + thread_bytes() / 2;
        let set = std::process::Command::new("prlimit")
            .args([
                "--pid",
                &std::process::id().to_string(),
                &format!("--as={limit}:"),
            ])
            .status();
        if !set.is_ok_and(|s| s.success()) {
            println!("prlimit(1) not available");
            return;
        }
        assert!(address_space_left().unwrap() < thread_bytes());
        assert!(!fits(1, 0));
        let main = std::thread::current().id();
        let (on_thread, id, none) = std::thread::scope(|s| {
            let w = side(s, || std::thread::current().id());
            let none = scoped(s, || ()).is_none();
            (w.on_a_thread(), w.join(), none)
        });
        assert!(!on_thread);
        assert_eq!(id, main);
        assert!(none);
        let e = detached("ballast-test", || ()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::OutOfMemory);
        assert!(e.to_string().contains("ballast-test"), "{e}");
    }
}
