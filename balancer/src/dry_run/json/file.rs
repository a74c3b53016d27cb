//! Reading a dry-run file's bytes: the memory checked first, two halves on two threads for
//! a large file, one piece for a small one, and never more than the file's size when it was
//! opened: a file still being written (its size changed while read) is an error that says
//! so, not read on as it grows.
use std::fs;
use std::io::{Read, Seek};
use std::path::Path;

use crate::error::{BalancerError, Result};
use crate::progress::Progress;

/// Files from this size are read in two halves on two threads.
pub(crate) const PARALLEL_READ_FROM: usize = 1 << 22;

/// Errors unless the `size` bytes of the file at `path` fit in the memory available.
pub(crate) fn check_read_memory(size: usize, path: &Path) -> Result<()> {
    crate::limits::check_memory(
        &format!("reading {}", path.display()),
        size as u64,
        crate::limits::available_memory(),
    )
}

/// Reads the `size` bytes of `file` as two halves on two threads (the copies and page faults
/// of a large file shared by two cores), adding to `done` as chunks arrive. Errors: the
/// memory is not available, a read fails, or the file is no longer `size` bytes long
/// ([`changed`]).
pub(crate) fn read_halves(file: &fs::File, size: usize, path: &Path, done: &Progress) -> Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    check_read_memory(size, path)?;
    let mut text = vec![0u8; size];
    let (first, second) = text.split_at_mut(size / 2);
    let read = |part: &mut [u8], offset: usize| -> std::io::Result<()> {
        for (i, chunk) in part.chunks_mut(1 << 22).enumerate() {
            file.read_exact_at(chunk, (offset + (i << 22)) as u64)?;
            done.add(chunk.len() as u64);
        }
        Ok(())
    };
    let (a, b) = std::thread::scope(|s| {
        let b = crate::spawn::side(s, || read(second, size / 2));
        (read(first, 0), b.join())
    });
    match a.and(b) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(changed(file, size as u64, path))
        }
        Err(e) => return Err(BalancerError::io(path, e)),
    }
    // Grown since.
    let mut more = [0u8; 1];
    match file.read_at(&mut more, size as u64) {
        Ok(0) => Ok(text),
        Ok(_) => Err(changed(file, size as u64, path)),
        Err(e) => Err(BalancerError::io(path, e)),
    }
}

/// Reads the `size` bytes of `file` (its size when opened) from the start in one piece,
/// adding to `done` as chunks arrive; at most `size` + 1 bytes are read, and a file of
/// another size by then is an error ([`changed`]): a file still being written is not read
/// on as it grows.
pub(crate) fn read_size(file: &fs::File, size: u64, path: &Path, done: &Progress) -> Result<Vec<u8>> {
    let io = |e| BalancerError::io(path, e);
    let mut text = Vec::new();
    text.try_reserve_exact(usize::try_from(size).unwrap_or(usize::MAX))
        .map_err(|_| io(std::io::Error::from(std::io::ErrorKind::OutOfMemory)))?;
    let mut start = file;
    start.seek(std::io::SeekFrom::Start(0)).map_err(io)?;
    let mut rest = std::io::Read::take(file, size.saturating_add(1));
    loop {
        let n = (&mut rest).take(1 << 22).read_to_end(&mut text).map_err(io)?;
        if n == 0 {
            break;
        }
        done.add(n as u64);
    }
    if text.len() as u64 != size {
        return Err(changed(file, size, path));
    }
    Ok(text)
}

/// The error for a file that is no longer the `at_open` bytes it was when opened.
pub(crate) fn changed(file: &fs::File, at_open: u64, path: &Path) -> BalancerError {
    crate::read_file::changed(file, at_open).at(path)
}

/// The message of a gid array that could not grow (serde's custom error, recognised by
/// [`super::error::json_error`]).
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Finding 9 of issue 33: a file longer or shorter than its size at open is an error
    /// naming both sizes, not read on (it was read to its end, growing without bound).
    #[test]
    fn a_file_of_another_size_than_at_open_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cm.json");
        std::fs::write(&path, vec![b' '; 100]).unwrap();
        let file = fs::File::open(&path).unwrap();
        let done = Progress::new();
        assert_eq!(read_size(&file, 100, &path, &done).unwrap().len(), 100);
        assert_eq!(done.get(), 100);
        for at_open in [40, 160] {
            let e = read_size(&file, at_open, &path, &done).unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "the file changed while it was read ({at_open} bytes when opened, 100 bytes now)"
                )),
                "{e}"
            );
        }
        // The same from the two-thread read.
        let big = 1 << 16;
        std::fs::write(&path, vec![b' '; big]).unwrap();
        let file = fs::File::open(&path).unwrap();
        assert_eq!(read_halves(&file, big, &path, &done).unwrap().len(), big);
        for at_open in [big - 1, big + 1] {
            let e = read_halves(&file, at_open, &path, &done).unwrap_err().to_string();
            assert!(e.contains("the file changed while it was read"), "{e}");
        }
    }
}
