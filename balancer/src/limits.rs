//! Sizes checked before allocating: how many (rank, cycle) buckets an input justifies, what
//! balancing them needs in memory, and whether this machine has it (`MemAvailable`).
//!
//! The rule: a bucket per cell, plus up to [`MAX_EMPTY_BUCKETS`] buckets that stay empty.
//! neurodamus accepts more ranks than cells (it warns that a population is "not allocated
//! across the full size"), so a small test circuit on a large allocation is fine; a billion
//! ranks for three cells is not a run anybody means, and each bucket costs memory (about
//! [`BYTES_PER_BUCKET`]) before a single cell is placed.
//!
//! Why this is public: these are the balancer's refusals, and a caller meets them before
//! any work. [`check_buckets`] is the check that
//! [`BalancerConfig::check_size`](crate::BalancerConfig::check_size) makes, for a caller
//! with counts but no dry run (`ballast stats` sizes its per-rank tables of an allocation
//! file read back). [`available_memory`] is the figure the memory checks compare against:
//! this one's, `corenrn::rebalance`'s and the proxy simulation's each take it from their
//! caller (`None`: not checked). [`human_bytes`] is how their messages state sizes, for a
//! caller that prints figures beside them. What only the balancer checks (the address space
//! left under `ulimit -v` for a thread, the memory a generator or reader allocates) stays
//! crate-private.
use crate::error::{BalancerError, Result};

/// Cells balanced at most, plus one: 2^32 - 1 (LPT names a cell by a `u32` position).
pub const MAX_CELLS: u64 = u32::MAX as u64;

/// Buckets allowed beyond one per cell (2^20 = 1,048,576).
pub const MAX_EMPTY_BUCKETS: u64 = 1 << 20;

/// Upper estimate of the bytes balancing takes per (rank, cycle) bucket: the greedy's heap
/// and per-bucket cell lists and loads, the rank dealing's order, labels and rank heap,
/// neurodamus' heap for the comparison, and the per-rank loads of the report. (Measured
/// with `ballast dry-run`: 88 B per empty bucket.)
pub const BYTES_PER_BUCKET: u64 = 128;

/// Upper estimate of the bytes balancing takes per cell on top of the input: the buckets'
/// members (4 B per cell, up to twice that as their lists grow), the allocation (4 B), the
/// summary's gid table of one population (4 B) and the check's bitmaps, and, when every
/// bucket holds a cell or few, a bucket entry per cell. (Measured with `ballast dry-run`:
/// about 10 B per cell on top of the input's 4 B for 10^7 cells into 65,536 ranks; 222 B
/// per bucket + cell when each of 10^6 buckets holds one of 10^6 cells, which the two
/// constants together cover.)
pub const BYTES_PER_CELL: u64 = 96;

/// Bytes needed to balance `cells` cells into `buckets` buckets.
pub fn balancing_bytes(buckets: u64, cells: u64) -> u64 {
    buckets
        .saturating_mul(BYTES_PER_BUCKET)
        .saturating_add(cells.saturating_mul(BYTES_PER_CELL))
}

/// A `key: N kB` field of a /proc file, in bytes; `None` where it cannot be read.
fn proc_kb_field(file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let kb: u64 = text
        .lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb.saturating_mul(1024))
}

/// The process's address-space limit (`ulimit -v`, "Max address space" of
/// /proc/self/limits), in bytes; `None` when unlimited or unreadable.
fn address_space_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    limits
        .lines()
        .find(|l| l.starts_with("Max address space"))?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

/// Address space left under the process's limit (`address_space_limit`) above its
/// current size (`VmSize` of /proc/self/status), in bytes; `None` without a limit or where
/// they cannot be read.
pub(crate) fn address_space_left() -> Option<u64> {
    let size = proc_kb_field("/proc/self/status", "VmSize:")?;
    Some(address_space_limit()?.saturating_sub(size))
}

/// The memory this process can still get, in bytes: `MemAvailable` of /proc/meminfo, or
/// less when an address-space limit (`ulimit -v`, "Max address space" of /proc/self/limits)
/// leaves less above the current `VmSize`; `None` where neither can be read.
pub fn available_memory() -> Option<u64> {
    let meminfo = proc_kb_field("/proc/meminfo", "MemAvailable:");
    let address_space = address_space_limit()
        .map(|limit| limit.saturating_sub(proc_kb_field("/proc/self/status", "VmSize:").unwrap_or(0)));
    match (meminfo, address_space) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `bytes` in B, KiB, MiB, GiB or TiB with one decimal.
pub fn human_bytes(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut x = bytes as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < units.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{x:.1} {}", units[u])
    }
}

/// Errors unless `bytes` fit in `available` (`None`: not checked); the message names `what`
/// and both figures.
pub(crate) fn check_memory(what: &str, bytes: u64, available: Option<u64>) -> Result<()> {
    match available {
        Some(avail) if bytes > avail => Err(BalancerError::InvalidParameter(format!(
            "{what} would need about {} but only {} are available (MemAvailable, or ulimit -v)",
            human_bytes(bytes),
            human_bytes(avail)
        ))),
        _ => Ok(()),
    }
}

/// `n` and the noun, singular for 1: `count(1, "cycle")` = "1 cycle", `count(0, "rank")` =
/// "0 ranks".
pub(crate) fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Checks `ranks × cycles` buckets for `cells` cells (fewer than [`MAX_CELLS`]) against the
/// rule of this module and against `available` bytes (`None`: not checked). Errors with
/// [`BalancerError::InvalidParameter`] naming the numbers and the memory they would need.
pub fn check_buckets(ranks: u32, cycles: u32, cells: u64, available: Option<u64>) -> Result<()> {
    let what = || {
        format!(
            "{} × {} = {} for {}",
            count(ranks as u64, "rank"),
            count(cycles as u64, "cycle"),
            count(ranks as u64 * cycles as u64, "bucket"),
            count(cells, "cell"),
        )
    };
    if ranks == 0 || cycles == 0 {
        return Err(BalancerError::InvalidParameter(format!(
            "{}: ranks and cycles must each be at least 1",
            what()
        )));
    }
    if cells >= MAX_CELLS {
        return Err(BalancerError::InvalidParameter(format!(
            "{}: at most {} cells can be balanced (a cell is named by a 32-bit position)",
            what(),
            MAX_CELLS - 1
        )));
    }
    let buckets = ranks as u64 * cycles as u64;
    let needed = balancing_bytes(buckets, cells);
    let allowed = cells.saturating_add(MAX_EMPTY_BUCKETS);
    if buckets > allowed {
        return Err(BalancerError::InvalidParameter(format!(
            "{}: at most {allowed} buckets are allowed (one per cell plus {MAX_EMPTY_BUCKETS} empty ones); \
             balancing them would need about {} ({BYTES_PER_BUCKET} B per bucket): use fewer ranks or cycles",
            what(),
            human_bytes(needed)
        )));
    }
    if let Some(avail) = available {
        if needed > avail {
            return Err(BalancerError::InvalidParameter(format!(
                "{}: balancing needs about {} ({BYTES_PER_BUCKET} B per bucket + {BYTES_PER_CELL} B per cell) \
                 but only {} are available (MemAvailable, or ulimit -v): use fewer ranks or cycles, or a larger machine",
                what(),
                human_bytes(needed),
                human_bytes(avail)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_beyond_cells_and_memory_are_refused() {
        // Empty buckets are fine up to 2^20 beyond the cells.
        check_buckets(5, 1, 3, None).unwrap();
        check_buckets(1 << 20, 1, 3, None).unwrap();
        check_buckets(1024, 1024, 0, None).unwrap();
        let e = check_buckets(1_000_000_000, 1, 3, None).unwrap_err().to_string();
        assert!(
            e.contains("1000000000 ranks × 1 cycle = 1000000000 buckets for 3 cells"),
            "{e}"
        );
        assert!(
            e.contains("at most 1048579 buckets") && e.contains("about 119.2 GiB"),
            "{e}"
        );
        let e = check_buckets(65536, 65535, 10_000_000, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("4294901760 buckets for 10000000 cells") && e.contains("512.9 GiB"),
            "{e}"
        );
        // Within the rule, the machine decides: 10^7 buckets and cells need 2.1 GiB.
        check_buckets(10_000_000, 1, 10_000_000, Some(4 << 30)).unwrap();
        let e = check_buckets(10_000_000, 1, 10_000_000, Some(2 << 30))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("needs about 2.1 GiB") && e.contains("only 2.0 GiB are available"),
            "{e}"
        );
        let e = check_buckets(1, 1, u32::MAX as u64, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most 4294967294 cells can be balanced"), "{e}");
        check_buckets(1, 1, u32::MAX as u64 - 1, None).unwrap();
        assert!(check_buckets(0, 1, 3, None)
            .unwrap_err()
            .to_string()
            .contains("0 ranks × 1 cycle"));
        assert!(check_buckets(2, 0, 3, None)
            .unwrap_err()
            .to_string()
            .contains("2 ranks × 0 cycles"));
    }

    #[test]
    fn memory_over_the_available_is_refused() {
        check_memory("x", 1 << 30, None).unwrap();
        check_memory("x", 1 << 30, Some(1 << 30)).unwrap();
        let e = check_memory("a synthetic input of 10 cells", 3 << 30, Some(1 << 30))
            .unwrap_err()
            .to_string();
        assert!(e.contains("a synthetic input of 10 cells would need about 3.0 GiB but only 1.0 GiB are available (MemAvailable, or ulimit -v)"), "{e}");
    }

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(128 << 30), "128.0 GiB");
    }
}
