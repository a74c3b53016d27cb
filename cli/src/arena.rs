//! A hint to the allocator (glibc's, where the process has it) before `dry-run` reads a large
//! input: keep freed memory for reuse, for the rest of the process.
//!
//! glibc serves each allocation of 128 KiB or more by a `mmap` of its own, unmapped when
//! freed, and gives the top of a heap back to the kernel once 128 KiB of it are free: memory
//! a step frees (the reader's bitmaps, the greedy's lists) is then faulted in again, page by
//! page, by the next step's allocations. Both thresholds rise when a mapped chunk is freed
//! (mallopt(3), "M_MMAP_THRESHOLD": to that chunk's size, the trim threshold to twice it),
//! which [`keep_freed`] does once. Counts: docs/BENCHMARKS.md, "Dry run end to end". With
//! another allocator it only allocates and frees.
//!
//! The process's allocator is the program's choice, not the balancer's: a library changing it
//! for its caller would change every later allocation of the caller too. So the command calls
//! this; the balancer's own hint, growing a helper thread's arena at once, is in the
//! balancer (`balancer/src/arena.rs`).

/// Bytes of the chunk [`keep_freed`] allocates and frees: at most glibc's largest dynamic
/// mmap threshold (`DEFAULT_MMAP_THRESHOLD_MAX`, 32 MiB on 64-bit, glibc's malloc/malloc.c),
/// so that freeing it raises the thresholds; half of it, so that at most 32 MiB of freed
/// memory stay with the process.
const KEPT: usize = 16 << 20;

/// Has allocations below 16 MiB served from the heap, and up to 32 MiB freed at its top kept,
/// for the rest of the process: call it once, before the allocations of a large input.
/// Nothing stays allocated; the pages are not touched.
/// A hint only: nothing happens when the memory (`ulimit -v`) refuses the chunk.
pub fn keep_freed() {
    let mut chunk = Vec::<u8>::new();
    let _ = chunk.try_reserve_exact(KEPT);
    drop(std::hint::black_box(chunk));
}

#[cfg(test)]
mod tests {
    /// The start of the mapping of this process holding `address`, from `/proc/self/maps`
    /// ("start-end perms ...", hexadecimal).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn mapping_start(address: usize) -> usize {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .find_map(|line| {
                let (start, end) = line.split_whitespace().next()?.split_once('-')?;
                let start = usize::from_str_radix(start, 16).ok()?;
                let end = usize::from_str_radix(end, 16).ok()?;
                (start..end).contains(&address).then_some(start)
            })
            .expect("a mapping holds the allocation")
    }

    /// After [`super::keep_freed`], a 4 MiB allocation comes from a heap instead of a
    /// mapping of its own (one that starts at the chunk's 16-byte header, glibc's mmapped
    /// chunk, in `/proc/self/maps`). Run in a process of its own: the thresholds are the
    /// process's (the test binary re-runs itself with this one test).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn kept_memory_comes_from_the_heap() {
        const CHILD: &str = "KEEP_FREED_TEST_CHILD";
        let mapped_alone = |v: &Vec<u8>| mapping_start(v.as_ptr() as usize) == v.as_ptr() as usize - 16;
        if std::env::var_os(CHILD).is_none() {
            let me = std::env::current_exe().unwrap();
            let out = std::process::Command::new(me)
                .args([
                    "--exact",
                    "arena::tests::kept_memory_comes_from_the_heap",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let text =
                String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{text}");
            assert!(text.contains("1 passed"), "{text}");
            return;
        }
        let before: Vec<u8> = Vec::with_capacity(4 << 20);
        assert!(mapped_alone(&before), "4 MiB is mapped on its own by default");
        // `before` is kept: freeing it would raise the thresholds too.
        super::keep_freed();
        let after: Vec<u8> = Vec::with_capacity(4 << 20);
        assert!(!mapped_alone(&after), "4 MiB comes from a heap once kept");
        drop(before);
    }
}
