//! Allocation files on disk: their names (`allocation_r{R}_c{C}.pkl.gz`), reading one into
//! an [`Allocation`], writing one, and neurodamus' `--lb-mode=Memory` rule: use the file for
//! this rank count when present, regenerate it otherwise ([`load_or_generate`]).
use std::path::{Path, PathBuf};

use crate::allocation::Allocation;
use crate::dryrun::DryRun;
use crate::error::{BalancerError, Result};
use crate::pickle;
use crate::strategy::{balance, BalancerConfig};

/// neurodamus' file name for an allocation of `ranks` ranks and `cycles` cycles.
pub fn allocation_file_name(ranks: u32, cycles: u32) -> String {
    format!("allocation_r{ranks}_c{cycles}.pkl.gz")
}

/// Reads an allocation file. Ranks and cycles come from the file name when it follows
/// neurodamus' pattern, otherwise from the largest (rank, cycle) key + 1. Buckets outside
/// the ranks and cycles of the name are an error.
///
/// Errors: those of [`pickle::read_allocation_file`]; a name with 0 ranks or 0 cycles; a
/// bucket outside the name's counts; without such a name, a rank or cycle key of
/// 4294967295 (the count would not fit in 32 bits). Nothing is allocated per bucket the
/// name or keys claim: an allocation costs memory in proportion to the file's content.
pub fn read_allocation(path: &Path) -> Result<Allocation> {
    let name = pickle::ranks_cycles_from_file_name(path);
    if let Some((r, c)) = name.filter(|&(r, c)| r == 0 || c == 0) {
        return Err(BalancerError::Pickle {
            path: path.to_owned(),
            message: format!("the file name says {r} ranks × {c} cycles: an allocation has at least 1 rank and 1 cycle"),
        });
    }
    let populations = pickle::read_allocation_file(path)?;
    let keys = populations.iter().flat_map(|p| p.buckets.keys());
    let span = keys.fold((0u64, 0u64), |(r, c), b| (r.max(b.rank as u64 + 1), c.max(b.cycle as u64 + 1)));
    let (ranks, cycles) = match name {
        Some((r, c)) => {
            if span.0 > r as u64 || span.1 > c as u64 {
                return Err(BalancerError::Pickle {
                    path: path.to_owned(),
                    message: format!(
                        "the file name says {r} ranks × {c} cycles but it holds bucket (rank {}, cycle {})",
                        span.0 - 1,
                        span.1 - 1
                    ),
                });
            }
            (r, c)
        }
        None => {
            let fit = |n: u64, what: &str| {
                u32::try_from(n.max(1)).map_err(|_| BalancerError::Pickle {
                    path: path.to_owned(),
                    message: format!("a bucket has {what} {}: the {what} count {n} does not fit in 32 bits", n - 1),
                })
            };
            (fit(span.0, "rank")?, fit(span.1, "cycle")?)
        }
    };
    Ok(Allocation { ranks, cycles, populations })
}

/// Writes `allocation` as `dir/allocation_r{R}_c{C}.pkl.gz` (atomically) and returns the path.
pub fn write_allocation(dir: &Path, allocation: &Allocation) -> Result<PathBuf> {
    let path = dir.join(allocation_file_name(allocation.ranks, allocation.cycles));
    pickle::write_allocation_file(&path, &allocation.populations)?;
    Ok(path)
}

/// Where [`load_or_generate`] got its allocation from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocationSource {
    /// Read from this existing file.
    File(PathBuf),
    /// The file for this rank count was absent: balanced anew and written here.
    Regenerated(PathBuf),
}

/// An allocation and where it came from.
#[derive(Debug, Clone)]
pub struct LoadedAllocation {
    pub allocation: Allocation,
    pub source: AllocationSource,
}

/// neurodamus' `--lb-mode=Memory` rule: use `dir/allocation_r{ranks}_c{cycles}.pkl.gz` when
/// present (it must hold every gid of `dry_run` exactly once, or this errors), otherwise
/// balance `dry_run` with `strategy` and write that file. The caller says "regenerated" to
/// the user when [`AllocationSource::Regenerated`] comes back.
pub fn load_or_generate(
    dir: &Path,
    ranks: u32,
    cycles: u32,
    dry_run: &DryRun,
    strategy: crate::strategy::Strategy,
) -> Result<LoadedAllocation> {
    let config = BalancerConfig::builder().ranks(ranks).cycles(cycles).strategy(strategy).build()?;
    config.check_size(dry_run)?;
    let path = dir.join(allocation_file_name(ranks, cycles));
    if path.exists() {
        let allocation = read_allocation(&path)?;
        allocation.validate(dry_run).map_err(|e| BalancerError::Pickle {
            path: path.clone(),
            message: format!(
                "{e}; the file was written for another circuit or dry run (its name keys only the rank and cycle counts): \
                 move it away to have it regenerated"
            ),
        })?;
        return Ok(LoadedAllocation { allocation, source: AllocationSource::File(path) });
    }
    let allocation = balance(dry_run, &config);
    let path = write_allocation(dir, &allocation)?;
    Ok(LoadedAllocation { allocation, source: AllocationSource::Regenerated(path) })
}
