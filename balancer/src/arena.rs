//! A hint to the allocator (glibc's, where the process has it) before many allocations on a
//! new thread: growing the thread's arena at once.
//!
//! glibc gives each thread that allocates its own arena, a heap it grows with one
//! `mprotect` per step the top of the heap needs: a thread making a thousand 2 KiB lists
//! (a population's buckets, a population's gid arrays) makes about a thousand system calls,
//! each also splitting and merging the kernel's memory map, and it is the slower of the
//! threads that the caller waits for. The heap only ever `mprotect`s the part beyond what it
//! made accessible before, even after freeing, so allocating about as much in a few pieces
//! first and freeing them leaves the later allocations without system calls (`warm`).
//!
//! With another allocator it only allocates and frees. (The other hint, keeping freed memory
//! for the rest of the process, is the program's to give: `ballast dry-run` gives it, in
//! `cli/src/arena.rs`.)

/// Bytes per piece: below glibc's smallest threshold for serving an allocation by its own
/// `mmap` (128 KiB), so the pieces come from the arena's heap.
const PIECE: usize = 64 << 10;

/// Most bytes grown at once (a heap of a glibc arena holds at most 64 MiB).
const MOST: usize = 32 << 20;

/// Grows the calling thread's arena by about `bytes` (at most [`MOST`]) and frees it again:
/// call it at the start of a spawned thread that is about to allocate that much in small
/// pieces. Nothing stays allocated; the pages are not touched.
/// A hint only: it stops at the first piece the memory (`ulimit -v`) refuses, never aborts.
pub(crate) fn warm(bytes: usize) {
    let mut pieces: Vec<Vec<u8>> = Vec::new();
    for _ in 0..bytes.min(MOST).div_ceil(PIECE) {
        let mut piece = Vec::new();
        if pieces.try_reserve(1).is_err() || piece.try_reserve_exact(PIECE).is_err() {
            break;
        }
        pieces.push(piece);
    }
    // Kept until here: the pieces must all be allocated before any is freed.
    drop(std::hint::black_box(pieces));
}

#[cfg(test)]
mod tests {
    /// A glibc arena's heap on 64-bit: 64 MiB, aligned to its size (`HEAP_MAX_SIZE`,
    /// glibc's malloc/arena.c), made accessible from its start as it grows.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    const HEAP: usize = 64 << 20;

    /// The mapping of this process holding `address`: its start, end and permissions, from
    /// `/proc/self/maps` ("start-end perms ...", hexadecimal).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn mapping_of(address: usize) -> (usize, usize, String) {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .find_map(|line| {
                let mut fields = line.split_whitespace();
                let (start, end) = fields.next()?.split_once('-')?;
                let start = usize::from_str_radix(start, 16).ok()?;
                let end = usize::from_str_radix(end, 16).ok()?;
                (start..end)
                    .contains(&address)
                    .then(|| (start, end, fields.next().unwrap_or("").to_string()))
            })
            .expect("a mapping holds the allocation")
    }

    /// The bytes of the heap holding `address` (a thread arena's allocation) made
    /// accessible so far: from the heap's start to the end of the read-write mapping holding
    /// `address`.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn heap_grown(address: usize) -> usize {
        let (_, end, perms) = mapping_of(address);
        assert!(perms.starts_with("rw"), "{perms}");
        end - (address & !(HEAP - 1))
    }

    /// After warming, a new thread's small allocations come from a heap already grown to
    /// the warmed size (without warming it is the heap's first 132 KiB or so, grown step by
    /// step), and the pieces were freed: about as many bytes again in small lists fit in it
    /// without growing it by half (kept pieces would make it twice the size).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_warmed_thread_allocates_from_a_grown_heap() {
        const WARMED: usize = 8 << 20;
        std::thread::spawn(|| {
            super::warm(WARMED);
            let small = vec![7u32; 500];
            let grown = heap_grown(small.as_ptr() as usize);
            assert!(grown >= WARMED, "{grown} bytes grown");
            // 2,000 lists of 4,000 B and their chunk headers: 8.03 MB, under 8 MiB.
            let lists: Vec<Vec<u32>> = (0..2000).map(|i| vec![i; 1000]).collect();
            let after = heap_grown(lists[1999].as_ptr() as usize);
            // An arena freed by an earlier thread may be reused, grown further before.
            let bound = grown.max(WARMED) + WARMED / 2;
            assert!(
                after < bound,
                "{after} bytes grown after the lists, {grown} before"
            );
            assert_eq!(lists.iter().map(|l| l.len()).sum::<usize>(), 2_000_000);
        })
        .join()
        .unwrap();
    }

    /// Sizes beyond the cap and zero are taken (the cap bounds what is allocated).
    #[test]
    fn any_size_is_taken() {
        std::thread::spawn(|| {
            super::warm(usize::MAX);
            super::warm(0);
        })
        .join()
        .unwrap();
    }
}
