//! Page-aligned memory regions for registration: a region never shares a page with
//! another allocation, so locking (mlock) or registering it pins exactly its own pages,
//! and unlocking it never unlocks a neighbour's.

/// Memory for a region (a pool, a receive queue, slots, a message, a table) could not be
/// had: the allocator or the kernel refused it, or it would not fit (see [`check_room`]).
/// Every layer that allocates raises it as it is; the public error shows it unchanged.
#[derive(Debug, thiserror::Error)]
#[error("cannot allocate {bytes} bytes for {what}: {error}")]
pub struct AllocError {
    /// What the region was for, with the settings that size it.
    pub what: String,
    /// Bytes asked for.
    pub bytes: u64,
    /// The kernel's answer (shown in the message, not chained as a source).
    pub error: std::io::Error,
}

/// Result of the memory functions.
pub type Result<T, E = AllocError> = std::result::Result<T, E>;

/// A zeroed, page-aligned region of `count` slots of `size` bytes: an anonymous private mapping
/// (`memmap2::MmapMut::map_anon`), so its pages are touched only when used, and an
/// allocation the kernel refuses is an error instead of an abort.
pub struct AlignedRegion {
    map: memmap2::MmapMut,
    len: usize,
}

/// The system page size in bytes.
pub fn page_size() -> usize {
    region::page::size()
}

impl AlignedRegion {
    /// Maps `count` × `size` zeroed bytes starting on a page boundary, for `what` (named in
    /// the error, with the settings that size it, e.g. "the buffer pool (buffer_count x
    /// buffer_size)"). Errors: [`AllocError`] when `count` × `size` overflows or the
    /// kernel refuses the mapping (on Linux with the default overcommit heuristic: more
    /// than RAM + swap).
    pub fn new(count: usize, size: usize, what: &str) -> Result<AlignedRegion> {
        let alloc_error = |bytes: u64, error| AllocError {
            what: what.to_string(),
            bytes,
            error,
        };
        let len = count.checked_mul(size).ok_or_else(|| {
            alloc_error(
                u64::MAX,
                std::io::Error::other(format!("{count} x {size} bytes overflows")),
            )
        })?;
        let map = memmap2::MmapMut::map_anon(len.max(1)).map_err(|error| alloc_error(len as u64, error))?;
        Ok(AlignedRegion { map, len })
    }

    /// The region's bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.map[..self.len]
    }

    /// The region's bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.map[..self.len]
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The soft RLIMIT_MEMLOCK in bytes (`u64::MAX` = unlimited), if it can be read.
pub fn memlock_limit_bytes() -> Option<u64> {
    rlimit::getrlimit(rlimit::Resource::MEMLOCK)
        .ok()
        .map(|(soft, _)| if soft == rlimit::INFINITY { u64::MAX } else { soft })
}

/// The stack size of a rank's thread: the process' soft `RLIMIT_STACK` (`ulimit -s`, what
/// the main thread gets; 8 MiB by default on Linux), kept between 2 MiB (Rust's default for
/// threads) and 1 GiB; 8 MiB when the limit is unlimited or cannot be read. Simulator code
/// run on a rank's thread (`ballast_local_run` from C) expects the main thread's stack.
pub fn rank_stack_bytes() -> usize {
    const DEFAULT: u64 = 8 << 20;
    let soft = rlimit::getrlimit(rlimit::Resource::STACK)
        .ok()
        .map(|(soft, _)| soft)
        .filter(|&s| s != rlimit::INFINITY)
        .unwrap_or(DEFAULT);
    soft.clamp(2 << 20, 1 << 30) as usize
}

/// Buffers up to this many bytes are allocated directly by [`try_buffer`] (a failure to
/// allocate so little leaves the process nothing to run on); larger ones are reserved.
/// Direct allocation keeps the small-message path short: `try_reserve_exact` goes through
/// the vector's out-of-line growth path (about 50 instructions more per message).
pub const SMALL_BUFFER_BYTES: usize = 64 << 10;

/// An empty buffer with room for `cap` bytes, for `what` (named in the error): above
/// [`SMALL_BUFFER_BYTES`] reserved with `try_reserve_exact`. Errors: [`AllocError`] when
/// the allocator refuses it (the process is out of memory or at `ulimit -v`), never an
/// abort.
#[inline(always)]
pub fn try_buffer(cap: usize, what: impl FnOnce() -> String) -> Result<Vec<u8>> {
    if cap <= SMALL_BUFFER_BYTES {
        return Ok(Vec::with_capacity(cap));
    }
    reserve(cap, what)
}

#[cold]
#[inline(never)]
fn reserve(cap: usize, what: impl FnOnce() -> String) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    if let Err(e) = v.try_reserve_exact(cap) {
        return Err(AllocError {
            what: what(),
            bytes: cap as u64,
            error: std::io::Error::new(std::io::ErrorKind::OutOfMemory, e.to_string()),
        });
    }
    Ok(v)
}

/// Reserves room for `more` elements in `v` with `try_reserve_exact`, for `what` (named in
/// the error): for bookkeeping sized by the caller (a pool's free list, the engine's table
/// of one entry per buffer). Errors: [`AllocError`] with the bytes asked for, never an
/// abort.
pub fn try_reserve_for<T>(v: &mut Vec<T>, more: usize, what: impl FnOnce() -> String) -> Result<()> {
    v.try_reserve_exact(more).map_err(|e| AllocError {
        what: what(),
        bytes: (more as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        error: std::io::Error::new(std::io::ErrorKind::OutOfMemory, e.to_string()),
    })
}

/// Makes `bufs` one empty buffer per length of `lens`, each with room for its length:
/// the buffers already there are kept (emptied) where their capacity holds it, so that a
/// caller passing the previous call's parts again allocates nothing; extra ones are
/// dropped, missing or too small ones got with [`try_buffer`]. For `what` (named in the
/// errors). Errors: as [`try_buffer`]; after one, `bufs` holds unspecified buffers.
pub(crate) fn try_reuse_parts(
    bufs: &mut Vec<Vec<u8>>,
    lens: impl ExactSizeIterator<Item = usize>,
    what: &str,
) -> Result<()> {
    let n = lens.len();
    bufs.truncate(n);
    let more = n - bufs.len();
    try_reserve_for(bufs, more, || format!("{what}: {n} parts"))?;
    bufs.resize_with(n, Vec::new);
    for (b, len) in bufs.iter_mut().zip(lens) {
        b.clear();
        if b.capacity() < len {
            *b = try_buffer(len, || format!("{what}: a part of {len} bytes"))?;
        }
    }
    Ok(())
}

/// A copy of `data`, its memory got with [`try_buffer`]. Errors: as [`try_buffer`].
pub fn try_copy(data: &[u8], what: impl FnOnce() -> String) -> Result<Vec<u8>> {
    let mut v = try_buffer(data.len(), what)?;
    v.extend_from_slice(data);
    Ok(v)
}

/// The user address space of x86-64 and aarch64 Linux with 4-level page tables (2^47
/// bytes): no process maps more, whatever its limits.
pub const ADDRESS_SPACE_BYTES: u64 = 1 << 47;

/// The bytes this process may still map: the soft `RLIMIT_AS` (`ulimit -v`) less what it
/// maps now (`VmSize`), at most [`ADDRESS_SPACE_BYTES`] less that.
pub fn address_space_room() -> u64 {
    let mapped = crate::core::procstatus::ProcStatus::read_self()
        .map(|s| s.vm_size_kb.saturating_mul(1024))
        .unwrap_or(0);
    let limit = rlimit::getrlimit(rlimit::Resource::AS)
        .ok()
        .map(|(soft, _)| soft)
        .filter(|&s| s != rlimit::INFINITY)
        .unwrap_or(ADDRESS_SPACE_BYTES)
        .min(ADDRESS_SPACE_BYTES);
    limit.saturating_sub(mapped)
}

/// The machine's memory and swap (`MemTotal + SwapTotal` of `/proc/meminfo`), bytes;
/// `u64::MAX` when it cannot be read. The default overcommit heuristic refuses a single
/// mapping above about this.
pub fn machine_bytes() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/meminfo") else {
        return u64::MAX;
    };
    let kib = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    match (kib("MemTotal:"), kib("SwapTotal:")) {
        (Some(m), s) => m.saturating_add(s.unwrap_or(0)).saturating_mul(1024),
        _ => u64::MAX,
    }
}

/// Checks, before allocating, that `mapped` bytes for `what` fit in what this process may
/// still map ([`address_space_room`]), and that the `touched` of them (written or locked
/// at once; an anonymous mapping costs nothing until touched) fit in the machine
/// ([`machine_bytes`]). Errors: [`AllocError`] naming `what`, the bytes and the bound.
pub fn check_room(mapped: u64, touched: u64, what: impl FnOnce() -> String) -> Result<()> {
    let (room, machine) = (address_space_room(), machine_bytes());
    if mapped <= room && touched <= machine {
        return Ok(());
    }
    let bytes = if mapped > room { mapped } else { touched };
    let why = if mapped > room {
        format!("{room} bytes of address space are left (ulimit -v, or the 2^47-byte address space)")
    } else {
        format!("the machine has {machine} bytes of memory and swap")
    };
    Err(AllocError {
        what: what(),
        bytes,
        error: std::io::Error::new(std::io::ErrorKind::OutOfMemory, why),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_stacks_follow_the_stack_limit_within_bounds() {
        let b = rank_stack_bytes();
        assert!((2 << 20..=1 << 30).contains(&b), "{b}");
        if let Ok((soft, _)) = rlimit::getrlimit(rlimit::Resource::STACK) {
            if soft != rlimit::INFINITY && (2 << 20..=1 << 30).contains(&soft) {
                assert_eq!(b as u64, soft);
            }
        }
    }

    #[test]
    fn regions_start_on_a_page_and_have_their_length() {
        for len in [1usize, 4096, 10_000, 1 << 20] {
            let mut r = AlignedRegion::new(len, 1, "a test region").unwrap();
            assert_eq!(r.as_slice().as_ptr() as usize % page_size(), 0);
            assert_eq!(r.as_slice().len(), len);
            r.as_mut_slice()[len - 1] = 7;
            assert_eq!(r.as_slice()[len - 1], 7);
            assert!(r.as_slice()[..len - 1].iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn a_region_larger_than_memory_is_an_error_naming_it() {
        // 2^62 bytes: more than any machine's RAM + swap, refused by the kernel.
        let err = AlignedRegion::new(1 << 62, 1, "the buffer pool (buffer_count x buffer_size)")
            .err()
            .expect("refused");
        let msg = err.to_string();
        assert!(
            msg.contains("4611686018427387904 bytes")
                && msg.contains("the buffer pool (buffer_count x buffer_size)"),
            "{msg}"
        );
        // A product that overflows is the same error, not a panic.
        let err = AlignedRegion::new(usize::MAX, 2, "a test region")
            .err()
            .expect("refused");
        assert!(err.to_string().contains("overflows"), "{err}");
    }
}
