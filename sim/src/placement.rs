//! Which rank simulates which cell: neurodamus' `--lb-mode=Memory` (the cells of each
//! rank's buckets in `allocation_r{N}_c1.pkl.gz`, regenerated when absent) or
//! `RoundRobin` (cells dealt in turn, by global index: cell `c` on rank `c mod N`).
use std::fmt;
use std::path::Path;
use std::str::FromStr;

use crate::SimError;
use ballast_balancer::transport_aware::rank_of_allocation;
use ballast_balancer::DryRun;
use ballast_balancer::Strategy;
use ballast_balancer::{load_or_generate, AllocationSource};

/// Load-balancing mode, spelled as neurodamus' `--lb-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LbMode {
    /// Cells dealt to ranks in turn.
    RoundRobin,
    /// Cells from the allocation file for this rank count.
    Memory,
}

impl fmt::Display for LbMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LbMode::RoundRobin => "RoundRobin",
            LbMode::Memory => "Memory",
        })
    }
}

impl FromStr for LbMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "roundrobin" | "rr" => Ok(LbMode::RoundRobin),
            "memory" => Ok(LbMode::Memory),
            _ => Err(format!("`{s}` is not an lb-mode: RoundRobin or Memory")),
        }
    }
}

/// A placement: the rank of every global cell, and (with `Memory`) the allocation file.
#[derive(Debug, Clone)]
pub struct Placement {
    /// Rank of each global cell.
    pub rank_of: Vec<u32>,
    /// Where the allocation came from (`Memory` only).
    pub source: Option<AllocationSource>,
    /// For the user, e.g. a reused file balanced with other costs (`Memory` only).
    pub warnings: Vec<String>,
}

/// Places the cells of `dry_run` (global indices by `offsets`) on `ranks` ranks. With
/// `Memory`, reads `dir/allocation_r{ranks}_c1.pkl.gz` or, when absent, balances (LPT) and
/// writes it; a file that does not hold every cell exactly once is an error.
pub fn place(
    mode: LbMode,
    dry_run: &DryRun,
    offsets: &[usize],
    ranks: u32,
    dir: &Path,
) -> Result<Placement, SimError> {
    if ranks == 0 {
        return Err(SimError::Input("0 ranks".into()));
    }
    let n = *offsets.last().unwrap_or(&0);
    match mode {
        LbMode::RoundRobin => Ok(Placement {
            rank_of: (0..n).map(|c| (c % ranks as usize) as u32).collect(),
            source: None,
            warnings: Vec::new(),
        }),
        LbMode::Memory => {
            let loaded = load_or_generate(dir, ranks, 1, dry_run, Strategy::Lpt)?;
            Ok(Placement {
                rank_of: rank_of_allocation(&loaded.allocation, offsets),
                source: Some(loaded.source),
                warnings: loaded.warnings,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_deals_in_turn_and_modes_parse() {
        let d = ballast_balancer::synthetic::generate(&ballast_balancer::synthetic::SyntheticSpec {
            cells: 10,
            metypes: 2,
            populations: 1,
            seed: 1,
        })
        .unwrap();
        let p = place(LbMode::RoundRobin, &d, &[0, 10], 3, Path::new("/nonexistent")).unwrap();
        assert_eq!(p.rank_of, vec![0, 1, 2, 0, 1, 2, 0, 1, 2, 0]);
        assert_eq!("memory".parse::<LbMode>(), Ok(LbMode::Memory));
        assert_eq!("RoundRobin".parse::<LbMode>(), Ok(LbMode::RoundRobin));
        assert!("WholeCell".parse::<LbMode>().is_err());
    }
}
