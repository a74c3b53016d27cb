//! Reading the dry-run file of `--memory-usage` (dry-run, run, stats): neurodamus'
//! `cell_memory_usage.json`, with a message that says so when it was given an allocation
//! pickle (`allocation_r{N}_c{C}.pkl.gz`, gzip data) instead of a bare JSON error.
use std::io::Read;
use std::path::Path;

use ballast_balancer::{BalancerError, DryRun, DryRunWithNotes, Progress};

/// Reads the dry-run file `path` ([`DryRun::from_json_file_with_notes`], its progress
/// counted in `progress` when given) and its notes. Errors: the reader's (one that could
/// not open or read the file names the option: `--memory-usage: PATH: OS error`); when it fails and
/// `path` is a regular file starting with gzip's magic bytes (1f 8b), an error naming it
/// as an allocation pickle and the command that reads one.
pub fn read(path: &Path, progress: Option<&Progress>) -> anyhow::Result<DryRunWithNotes> {
    DryRun::from_json_file_with_notes(path, progress).map_err(|e| {
        if is_gzip(path) {
            anyhow::anyhow!(
                "{} is gzip data, which looks like an allocation pickle (allocation_r{{N}}_c{{C}}.pkl.gz), \
                 not a dry-run file: --memory-usage takes neurodamus' cell_memory_usage.json; \
                 `ballast stats ALLOCATION` reads an allocation",
                path.display()
            )
        } else if matches!(e, BalancerError::Io { .. }) {
            anyhow::Error::new(e).context("--memory-usage")
        } else {
            e.into()
        }
    })
}

/// `path` is a regular file whose first two bytes are gzip's magic (RFC 1952: 1f 8b). A
/// pipe or FIFO is not read again (its bytes were the reader's).
fn is_gzip(path: &Path) -> bool {
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut magic = [0u8; 2];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| magic == [0x1f, 0x8b])
}
