//! The one reader of neurodamus' `cell_memory_usage.json`: the file opened and read by
//! chunks, scanned as it is read ([`scan`]: any JSON, read as serde_json reads it and
//! refused with serde_json's errors, [`error`]), into what one set of checks turns into
//! the dry run or the error naming the field at fault ([`validate`]).
use std::fs;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{DryRun, DryRunWithNotes};
use crate::error::{BalancerError, Result};
use crate::progress::Progress;
use file::{check_read_memory, PARALLEL_READ_FROM};

mod error;
mod file;
mod scan;
mod seen;
#[cfg(test)]
mod tests;
mod types;
mod validate;

use validate::finish;

impl DryRun {
    /// Reads and validates a neurodamus `cell_memory_usage.json`.
    ///
    /// Errors name the file and the JSON path: invalid JSON, missing `metype_memory` or
    /// `pop_metype_gids`, negative/NaN/infinite memory or synapse counts, a metype used in
    /// `pop_metype_gids` but absent from `metype_memory`, a gid that is not a u32, a gid
    /// listed twice in a population.
    pub fn from_json_file(path: &Path) -> Result<DryRun> {
        Self::from_json_file_with_notes(path, None).map(|r| r.dry_run)
    }

    /// [`DryRun::from_json_file`], plus notes for the user: top-level keys that are not
    /// neurodamus' (a misspelt optional key such as `metype_cell_syn_average` would
    /// otherwise silently count 0 synapses). Counts its progress in `progress` when given
    /// (for a progress bar): the bytes read of the file, then the bytes parsed, up to twice
    /// the file's size once read.
    pub fn from_json_file_with_notes(path: &Path, progress: Option<&Progress>) -> Result<DryRunWithNotes> {
        let unwatched = Progress::new();
        let done = progress.unwrap_or(&unwatched);
        let io = |e| BalancerError::io(path, e);
        let mut file = fs::File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            // A pipe, FIFO or terminal (`--memory-usage /dev/stdin`, `<(zcat ...)`): no size
            // to read by offsets; read as it comes, its memory checked as it grows.
            let mut text = Vec::new();
            loop {
                let n = (&mut file).take(1 << 22).read_to_end(&mut text).map_err(io)?;
                if n == 0 {
                    break;
                }
                done.add(n as u64);
                check_read_memory(text.len(), path)?;
            }
            return read_counted(&text, path, done);
        }
        // The file's own size: what it holds, read in chunks so that `done` moves.
        let len = meta.len();
        let size = usize::try_from(len).unwrap_or(usize::MAX);
        // Refused up front when it would not fit: the scan does not hold the file, but its
        // gids take memory of that order.
        if size >= PARALLEL_READ_FROM {
            check_read_memory(size, path)?;
        }
        // Read by chunks and scanned as read.
        scan_file(&file, len, path, done)
    }

    /// The dry run in `text` (the file at `path`, named in messages), as
    /// [`DryRun::from_json_file_with_notes`] reads a file: the dry run and the notes on
    /// unknown top-level keys, or the same error.
    pub fn from_json_slice(text: &[u8], path: &Path) -> Result<DryRunWithNotes> {
        read_counted(text, path, &Progress::new())
    }
}

/// [`DryRun::from_json_slice`], adding to `done` the bytes parsed as it goes (all of `text` when it succeeds).
fn read_counted(text: &[u8], path: &Path, done: &Progress) -> Result<DryRunWithNotes> {
    let base = done.get();
    let root = scan::root(text, &|at| done.set(base + at as u64))
        .map_err(|fault| refused(fault, &text, text.len() as u64, path))?;
    done.set(base + text.len() as u64);
    finish(root, path)
}

/// The error for the `fault` that stopped the scan of the `size` bytes of `src` (the file
/// at `path`; a file that changed while read is [`scan_file`]'s to report).
fn refused(fault: scan::Fault, src: &dyn scan::Source, size: u64, path: &Path) -> BalancerError {
    match fault {
        scan::Fault::Changed => BalancerError::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the input ended before its size",
            ),
        ),
        scan::Fault::Io(e) => BalancerError::io(path, e),
        scan::Fault::Memory => file::out_of_memory(path),
        scan::Fault::Names => file::names_out_of_memory(path),
        scan::Fault::Syntax(e) => error::syntax_error(src, size, path, &e),
    }
}

/// Reads the dry run from `file` (of `size` bytes when opened) by chunks, scanning each as
/// it is read ([`scan`]); adds to `done` the bytes read and parsed as it goes (twice
/// `size` when it succeeds). An error when the file changed size while read (still being
/// written: [`file::changed`], also when what was read is not JSON), a read failed, the
/// text is not JSON, or from [`finish`].
fn scan_file(file: &std::fs::File, size: u64, path: &Path, done: &Progress) -> Result<DryRunWithNotes> {
    let base = done.get();
    // The scan tells positions; `done` counts the bytes read too, so it is told the steps.
    let parsed = AtomicU64::new(0);
    let progress = |at: usize| {
        let prev = parsed.fetch_max(at as u64, Ordering::Relaxed);
        done.add((at as u64).saturating_sub(prev));
    };
    let input = scan::Input {
        src: file,
        size,
        window: scan::WINDOW,
        read: done,
        parallel_from: scan::PARALLEL_FROM,
    };
    let scanned = scan::scan(input, &progress);
    if let Err(scan::Fault::Changed) = scanned {
        return Err(file::changed(file, size, path));
    }
    // Grown since it was opened (a file still being written may read as invalid JSON).
    let mut more = [0u8; 1];
    match std::os::unix::fs::FileExt::read_at(file, &mut more, size) {
        Ok(0) => {}
        Ok(_) => return Err(file::changed(file, size, path)),
        Err(e) => return Err(BalancerError::io(path, e)),
    }
    let root = scanned.map_err(|fault| refused(fault, file, size, path))?;
    done.set(base + 2 * size);
    finish(root, path)
}
