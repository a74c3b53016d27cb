//! What reading a dry-run file may run out of, said in the user's terms: the memory
//! checked first, the errors for gids or names that do not fit, for a file that changed
//! while read (still being written: not read on as it grows), and the copies made with
//! `try_reserve`.
use std::fs;
use std::path::Path;

use crate::error::{BalancerError, Result};

/// Files from this size have their memory checked before they are read.
pub(crate) const PARALLEL_READ_FROM: usize = 1 << 22;

/// Errors unless the `size` bytes of the file at `path` fit in the memory available.
pub(crate) fn check_read_memory(size: usize, path: &Path) -> Result<()> {
    crate::limits::check_memory(
        &format!("reading {}", path.display()),
        size as u64,
        crate::limits::available_memory(),
    )
}

/// The error for a file that is no longer the `at_open` bytes it was when opened.
pub(crate) fn changed(file: &fs::File, at_open: u64, path: &Path) -> BalancerError {
    crate::read_file::changed(file, at_open).at(path)
}

/// The start of the error for gids that do not fit in memory.
pub(crate) const OUT_OF_MEMORY: &str = "not enough memory to hold its gids";

/// The error for a dry-run file whose gids do not fit in the memory this process can get:
/// arrays grow with `try_reserve`, so `ulimit -v` or the machine's memory ends the read
/// with this instead of an abort. Two bytes of text (`1,`) are a 4-byte gid.
pub(crate) fn out_of_memory(path: &Path) -> BalancerError {
    BalancerError::io(
        path,
        std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            format!(
                "{OUT_OF_MEMORY} (4 bytes each, and a copy of the array being read: up to 4 times the file's size for gids of one digit); available: {} (MemAvailable, or ulimit -v)",
                crate::limits::available_memory().map_or("unknown".into(), crate::limits::human_bytes)
            ),
        ),
    )
}

/// The start of the error for a dry-run file whose metype or population names (the keys of
/// its objects) do not fit in the memory this process can get.
pub(crate) const NAMES_OUT_OF_MEMORY: &str = "not enough memory to hold its metype and population names";

/// The error for a dry-run file with more distinct names than fit in memory: the maps and
/// lists of names grow with `try_reserve`, so `ulimit -v` or the machine's memory ends the
/// read with this instead of an abort. A 6-byte entry (`"a":1,`) costs some 150 bytes
/// (the name twice, its list entry, its index entry, its metype).
pub(crate) fn names_out_of_memory(path: &Path) -> BalancerError {
    BalancerError::io(
        path,
        std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            format!(
                "{NAMES_OUT_OF_MEMORY} (about 150 bytes per name, however short); available: {} (MemAvailable, or ulimit -v)",
                crate::limits::available_memory().map_or("unknown".into(), crate::limits::human_bytes)
            ),
        ),
    )
}

/// A copy of `text`, or `None` when the memory cannot be had.
pub(crate) fn try_string(text: &str) -> Option<String> {
    let mut copy = String::new();
    copy.try_reserve_exact(text.len()).ok()?;
    copy.push_str(text);
    Some(copy)
}

/// A copy of `gids` in a vector of their length, or `None` when the memory cannot be had.
pub(crate) fn try_copy(gids: &[u32]) -> Option<Vec<u32>> {
    let mut copy = Vec::new();
    copy.try_reserve_exact(gids.len()).ok()?;
    copy.extend_from_slice(gids);
    Some(copy)
}
