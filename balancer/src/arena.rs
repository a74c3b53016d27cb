//! Growing a new thread's allocator arena at once, before it makes many small allocations.
//!
//! glibc gives each thread that allocates its own arena, a heap it grows with one
//! `mprotect` per step the top of the heap needs: a thread making a thousand 2 KiB lists
//! (a population's buckets, a population's gid arrays) makes about a thousand system calls,
//! each also splitting and merging the kernel's memory map, and it is the slower of the
//! threads that the caller waits for. The heap only ever `mprotect`s the part beyond what it
//! made accessible before, even after freeing, so allocating about as much in a few pieces
//! first and freeing them leaves the later allocations without system calls (at 1M cells,
//! 1,087 `mprotect` calls became 172, docs/BENCHMARKS.md "Dry run end to end"). With
//! another allocator this only allocates and frees.

/// Bytes per piece: below glibc's smallest threshold for serving an allocation by its own
/// `mmap` (128 KiB), so the pieces come from the arena's heap.
const PIECE: usize = 64 << 10;

/// Most bytes grown at once (a heap of a glibc arena holds at most 64 MiB).
const MOST: usize = 32 << 20;

/// Grows the calling thread's arena by about `bytes` (at most [`MOST`]) and frees it again:
/// call it at the start of a spawned thread that is about to allocate that much in small
/// pieces. Nothing stays allocated; the pages are not touched.
pub(crate) fn warm(bytes: usize) {
    let pieces: Vec<Vec<u8>> = (0..bytes.min(MOST).div_ceil(PIECE))
        .map(|_| Vec::with_capacity(PIECE))
        .collect();
    // Kept until here: the pieces must all be allocated before any is freed.
    drop(std::hint::black_box(pieces));
}

#[cfg(test)]
mod tests {
    /// It allocates and frees on any thread, large requests included, leaving the thread
    /// able to allocate what it was warmed for.
    #[test]
    fn warming_allocates_and_frees() {
        std::thread::spawn(|| {
            super::warm(3 << 20);
            super::warm(usize::MAX);
            super::warm(0);
            let lists: Vec<Vec<u32>> = (0..1000).map(|i| vec![i; 500]).collect();
            assert_eq!(lists.iter().map(|l| l.len()).sum::<usize>(), 500_000);
        })
        .join()
        .unwrap();
    }
}
