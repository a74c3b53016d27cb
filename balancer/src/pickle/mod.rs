//! Reading and writing neurodamus allocation files (`allocation_r{R}_c{C}.pkl.gz`): gzip of
//! a Python pickle of `{population: {(rank, cycle): [gids]}}`.
//!
//! * Writing uses `serde-pickle` (protocol 3, plain `dict`/`tuple`/`list`/`int` only), so the
//!   file loads with a bare `pickle.load(gzip.open(f))` and with neurodamus' loader.
//!   Population order is preserved: we serialize through serde's map interface, which
//!   `serde-pickle` writes in iteration order (its `Value::Dict` is a `BTreeMap` and would
//!   sort populations by name, so we do not build a `Value`).
//! * Reading uses a small restricted unpickler (a pickle VM for protocols 0..=5) because
//!   neurodamus' own files contain `collections.defaultdict`, a `DryRunStats.defaultdict_vector`
//!   factory and `neurodamus.utils.compat.Vector` (an `array.array` subclass) objects, which
//!   `serde-pickle` cannot read. Nothing is ever imported, executed or instantiated: globals
//!   are resolved against a fixed allow-list and mapped to plain data; any other global is
//!   refused at once with [`BalancerError::DisallowedGlobal`].
//!
//! Allowed globals and their interpretation:
//!
//! | global | interpretation |
//! |---|---|
//! | `collections.defaultdict` | called with `()` or `(factory,)`: an empty dict |
//! | `neurodamus.utils.memory.DryRunStats.defaultdict_vector` | only as a defaultdict factory |
//! | `neurodamus.utils.memory.DryRunStats` | only as `getattr(DryRunStats, "defaultdict_vector")` (protocols < 4 pickle nested names that way) |
//! | `builtins.getattr` / `__builtin__.getattr` | only for the line above |
//! | `neurodamus.utils.compat.Vector`, `array.array` | `(typecode[, [ints]])` (protocols < 3): a list of ints; as factory; as the class for `_array_reconstructor` |
//! | `array._array_reconstructor` | `(cls, typecode, mformat_code, bytes)` (protocols >= 3): a list of ints |
//!
//! `BUILD` with an empty state (`None`, `{}`, `(None, {})`) is a no-op — CPython writes
//! `BUILD {}` after an `array.array` subclass instance that has a `__dict__`; any other
//! state is an error. `copyreg._reconstructor` and `builtins.list` are not needed
//! (`array.array` subclasses pickle through `array.__reduce_ex__`) and are refused.
//!
//! Every file is accepted or refused in work linear in its size: gunzip output is bounded by
//! [`MAX_GZIP_RATIO`] × the file, each opcode runs once, and every walk over unpickled values
//! (dict key hashing, BUILD states, array initializers, the final conversion) is charged to a
//! budget proportional to the pickle's bytes, so shared structure (a tuple doubled with DUP,
//! a list or dict referenced many times through the memo) is refused, never expanded.
//! [`ReadStats`] reports the work done.
//!
//! Files: `vm.rs` (the machine: input, stack, memo, work accounting, the opcode loop),
//! one file per opcode family (`protocol.rs`, `scalar.rs`, `container.rs`, `memo.rs`,
//! `object.rs`), `value.rs` (the values), `convert.rs` (root to populations) and
//! `writer.rs` (with `serial_gzip.rs`, its stream on one thread); this file holds the public reading API and gunzip.
use std::io::Read;
use std::path::Path;

use flate2::read::MultiGzDecoder;

use crate::allocation::PopulationAllocation;
use crate::error::{BalancerError, Result};

mod container;
mod convert;
mod memo;
mod object;
mod protocol;
mod scalar;
mod serial_gzip;
mod value;
mod vm;
mod writer;

pub use vm::ReadStats;
pub use writer::{stage_allocation_file, write_allocation_file};

use vm::Vm;

/// Largest decompressed pickle we accept (a gzip bomb guard): 4 GiB.
pub const MAX_PICKLE_BYTES: u64 = 4 << 30;

/// Largest expansion accepted from gzip, besides [`MAX_PICKLE_BYTES`]: a decompressed pickle
/// may be at most this many times its file plus 1 MiB. Allocation files expand 2 to 5 times
/// (gids are distinct); deflate allows about 1032, so a small bomb would otherwise allocate
/// a thousand times its size.
pub const MAX_GZIP_RATIO: u64 = 256;

/// Reads an allocation file (gzip + pickle protocols 2..=5; 0 and 1 work too), ours or
/// neurodamus' (`defaultdict`s of `Vector`s).
///
/// Returns the populations in the pickle's dict order, each with its
/// `{(rank, cycle): [gids]}` buckets (gids in stored order).
///
/// Errors: [`BalancerError::Io`] if the file cannot be read; [`BalancerError::Pickle`] if it
/// is not gzip, is truncated (message contains "truncated"), is corrupt, or is not of the shape
/// `{str: {(int, int): [int]}}` (message names population, key and what was found);
/// [`BalancerError::DisallowedGlobal`] if the pickle names a global outside the allow-list.
pub fn read_allocation_file(path: &Path) -> Result<Vec<PopulationAllocation>> {
    // A regular file only (a FIFO would hang, a device be read without end), and no more
    // than its size when opened.
    let compressed = crate::read_file::read_regular(path, u64::MAX).map_err(|e| e.at(path))?;
    read_allocation_gzip_with_stats(&compressed, path).0
}

/// [`read_allocation_file`] on the bytes of a gzip file (`path` is only used in messages),
/// with the work done, whether it succeeded or not.
pub fn read_allocation_gzip_with_stats(
    compressed: &[u8],
    path: &Path,
) -> (Result<Vec<PopulationAllocation>>, ReadStats) {
    let mut stats = ReadStats {
        compressed_bytes: compressed.len() as u64,
        ..ReadStats::default()
    };
    let bytes = match gunzip(compressed, path) {
        Ok(b) => b,
        Err(e) => return (Err(e), stats),
    };
    let (result, inner) = read_allocation_pickle_with_stats(&bytes, path);
    stats.pickle_bytes = inner.pickle_bytes;
    stats.opcodes = inner.opcodes;
    stats.visits = inner.visits;
    (result, stats)
}

/// Gunzips an allocation file's bytes, refusing non-gzip data, corrupt or truncated streams
/// and more than [`MAX_PICKLE_BYTES`], or [`MAX_GZIP_RATIO`] times the input plus 1 MiB, of
/// output.
fn gunzip(compressed: &[u8], path: &Path) -> Result<Vec<u8>> {
    if compressed.len() < 2 || compressed[..2] != [0x1f, 0x8b] {
        let hint = if compressed.first() == Some(&0x80) {
            " (it looks like an uncompressed pickle)"
        } else if compressed.is_empty() {
            " (the file is empty)"
        } else {
            ""
        };
        return Err(pickle_err(path, format!("not a gzip file{hint}")));
    }
    let limit = MAX_PICKLE_BYTES.min(
        (compressed.len() as u64)
            .saturating_mul(MAX_GZIP_RATIO)
            .saturating_add(1 << 20),
    );
    let mut bytes = Vec::new();
    let mut decoder = MultiGzDecoder::new(compressed).take(limit + 1);
    if let Err(e) = decoder.read_to_end(&mut bytes) {
        let message = match e.kind() {
            std::io::ErrorKind::UnexpectedEof => format!(
                "gzip stream truncated after {} decompressed bytes (the file was cut short)",
                bytes.len()
            ),
            _ => format!("corrupt gzip stream: {e}"),
        };
        return Err(pickle_err(path, message));
    }
    if bytes.len() as u64 > limit {
        return Err(pickle_err(
            path,
            format!(
                "decompressed pickle exceeds {limit} bytes (at most {MAX_GZIP_RATIO} times the file's {} bytes plus 1 MiB, \
                 and at most {MAX_PICKLE_BYTES}); refusing (a gzip bomb?)",
                compressed.len()
            ),
        ));
    }
    Ok(bytes)
}

/// Same as [`read_allocation_file`] from raw (already gunzipped) pickle bytes; `path` is only
/// used in error messages.
pub fn read_allocation_pickle(bytes: &[u8], path: &Path) -> Result<Vec<PopulationAllocation>> {
    read_allocation_pickle_with_stats(bytes, path).0
}

/// [`read_allocation_pickle`] with the work done ([`ReadStats`]), whether it succeeded or not.
pub fn read_allocation_pickle_with_stats(
    bytes: &[u8],
    path: &Path,
) -> (Result<Vec<PopulationAllocation>>, ReadStats) {
    let mut vm = Vm::new(bytes, path);
    let result = vm.run().and_then(|root| vm.populations(&root));
    let stats = ReadStats {
        compressed_bytes: 0,
        pickle_bytes: bytes.len() as u64,
        opcodes: vm.opcodes,
        visits: vm.visits,
    };
    (result, stats)
}

/// The counts an allocation file's name gives ([`ranks_cycles_from_file_name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RanksCycles {
    /// `R` of `allocation_r{R}_c{C}.pkl.gz`: the rank count.
    pub ranks: u32,
    /// `C`: the cycle count.
    pub cycles: u32,
}

/// Parses `allocation_r{R}_c{C}.pkl.gz` (the file name only; directories are ignored) into
/// its counts; anything else (other names, signs, non-digits, overflow) gives `None`.
pub fn ranks_cycles_from_file_name(path: &Path) -> Option<RanksCycles> {
    let name = path.file_name()?.to_str()?;
    let rest = name.strip_prefix("allocation_r")?.strip_suffix(".pkl.gz")?;
    let (r, c) = rest.split_once("_c")?;
    let parse = |s: &str| -> Option<u32> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    Some(RanksCycles {
        ranks: parse(r)?,
        cycles: parse(c)?,
    })
}

fn pickle_err(path: &Path, message: String) -> BalancerError {
    BalancerError::Pickle {
        path: path.to_path_buf(),
        message,
    }
}

/// Helpers shared by the unit tests of the reader's files.
#[cfg(test)]
mod test_support {
    use super::*;
    use crate::allocation::Bucket;

    pub(super) fn read(b: &[u8]) -> Result<Vec<PopulationAllocation>> {
        read_allocation_pickle(b, Path::new("t.pkl"))
    }

    pub(super) fn msg(r: Result<Vec<PopulationAllocation>>) -> String {
        match r {
            Err(e @ BalancerError::Pickle { .. }) => e.to_string(),
            other => panic!("expected a Pickle error, got {other:?}"),
        }
    }

    pub(super) fn b(rank: u32, cycle: u32) -> Bucket {
        Bucket { rank, cycle }
    }
}
