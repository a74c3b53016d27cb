//! Load statistics of an allocation: per bucket and per rank KB, imbalance, the lower bound,
//! per population and overall; and the text table the CLI prints.
use serde::Serialize;

use crate::allocation::{Allocation, Bucket};
use crate::dryrun::DryRun;

/// Load statistics over one set of cells (one population, or all of them). KB values are
/// the per-cell costs of the dry run (memory + 1.9 KB × synapses).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadStats {
    pub cells: usize,
    pub total_kb: f64,
    pub max_bucket_kb: f64,
    pub mean_bucket_kb: f64,
    pub min_bucket_kb: f64,
    pub max_rank_kb: f64,
    pub mean_rank_kb: f64,
    pub min_rank_kb: f64,
    /// Heaviest single cell, KB.
    pub heaviest_cell_kb: f64,
    /// Lower bound on the largest bucket: max(total / (ranks × cycles), heaviest cell).
    pub lower_bound_kb: f64,
    /// Largest bucket / mean bucket (1.0 = perfect; 1.0 when there is no load).
    pub imbalance: f64,
    /// Largest bucket / lower bound (1.0 = optimal).
    pub ratio_to_lower_bound: f64,
}

impl LoadStats {
    /// Statistics of per-bucket loads (`bucket_kb[rank × cycles + cycle]`).
    pub fn from_buckets(bucket_kb: &[f64], cycles: usize, cells: usize, heaviest_cell_kb: f64) -> LoadStats {
        let (max, min, total) = min_max_sum(bucket_kb);
        let rank_kb: Vec<f64> = bucket_kb.chunks(cycles).map(|c| c.iter().sum()).collect();
        let (rmax, rmin, _) = min_max_sum(&rank_kb);
        let mean = total / bucket_kb.len() as f64;
        let lower_bound_kb = mean.max(heaviest_cell_kb);
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 1.0 };
        LoadStats {
            cells,
            total_kb: total,
            max_bucket_kb: max,
            mean_bucket_kb: mean,
            min_bucket_kb: min,
            max_rank_kb: rmax,
            mean_rank_kb: total / rank_kb.len() as f64,
            min_rank_kb: rmin,
            heaviest_cell_kb,
            lower_bound_kb,
            imbalance: ratio(max, mean),
            ratio_to_lower_bound: ratio(max, lower_bound_kb),
        }
    }
}

fn min_max_sum(v: &[f64]) -> (f64, f64, f64) {
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    (max, min, v.iter().sum())
}

/// The full picture of an allocation weighed with a dry run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub ranks: u32,
    pub cycles: u32,
    /// All populations together (a bucket's load is the sum over populations).
    pub overall: LoadStats,
    /// (population name, its own statistics).
    pub populations: Vec<(String, LoadStats)>,
    /// KB per bucket, all populations, row-major (`rank × cycles + cycle`).
    pub bucket_kb: Vec<f64>,
    /// Cells per bucket, all populations, row-major.
    pub bucket_cells: Vec<usize>,
}

impl Summary {
    /// Weighs `allocation` with the per-cell KB of `dry_run`. Gids absent from the dry run
    /// weigh 0 (check [`Allocation::gid_problems`] first).
    pub fn new(allocation: &Allocation, dry_run: &DryRun) -> Summary {
        let table = dry_run.gid_kb_table();
        let weigh = |p: &str, g: u32| -> f64 {
            dry_run
                .populations
                .iter()
                .position(|d| d.name == p)
                .and_then(|i| table[i].get(g))
                .unwrap_or(0.0)
        };
        Self::weighed(allocation, weigh)
    }

    /// Summary by cell count only (every cell weighs 1), for files without a dry run.
    pub fn by_cell_count(allocation: &Allocation) -> Summary {
        Self::weighed(allocation, |_, _| 1.0)
    }

    fn weighed(allocation: &Allocation, weigh: impl Fn(&str, u32) -> f64) -> Summary {
        let n = allocation.bucket_count();
        let cycles = allocation.cycles as usize;
        let mut bucket_kb = vec![0.0; n];
        let mut bucket_cells = vec![0usize; n];
        let mut heaviest = 0.0f64;
        let mut populations = Vec::new();
        for pop in &allocation.populations {
            let mut kb = vec![0.0; n];
            let mut cells = 0;
            let mut pop_heaviest = 0.0f64;
            for (&b, gids) in &pop.buckets {
                if b.rank >= allocation.ranks || b.cycle >= allocation.cycles {
                    continue;
                }
                let i = allocation.bucket_index(b);
                for &g in gids {
                    let w = weigh(&pop.name, g);
                    kb[i] += w;
                    pop_heaviest = pop_heaviest.max(w);
                }
                cells += gids.len();
                bucket_cells[i] += gids.len();
            }
            for (t, k) in bucket_kb.iter_mut().zip(&kb) {
                *t += k;
            }
            heaviest = heaviest.max(pop_heaviest);
            populations.push((pop.name.clone(), LoadStats::from_buckets(&kb, cycles, cells, pop_heaviest)));
        }
        let cells = bucket_cells.iter().sum();
        Summary {
            ranks: allocation.ranks,
            cycles: allocation.cycles,
            overall: LoadStats::from_buckets(&bucket_kb, cycles, cells, heaviest),
            populations,
            bucket_kb,
            bucket_cells,
        }
    }

    /// Buckets with no cell at all.
    pub fn empty_buckets(&self) -> Vec<Bucket> {
        let c = self.cycles as usize;
        (0..self.bucket_cells.len())
            .filter(|&i| self.bucket_cells[i] == 0)
            .map(|i| Bucket { rank: (i / c) as u32, cycle: (i % c) as u32 })
            .collect()
    }

    /// The summary table: one row per population and one for all, KB figures.
    pub fn table(&self, unit: &str) -> String {
        let mut out = format!(
            "{:<24} {:>9} {:>14} {:>13} {:>13} {:>13} {:>13} {:>13} {:>9} {:>8}\n",
            "population", "cells", format!("total {unit}"), "max bucket", "mean bucket", "min bucket",
            "max rank", "min rank", "imbalance", "max/LB"
        );
        // Cell counts are whole numbers (only means have decimals); KB have one decimal.
        let p = if unit == "cells" { 0 } else { 1 };
        let mut row = |name: &str, s: &LoadStats| {
            out += &format!(
                "{:<24} {:>9} {:>14.p$} {:>13.p$} {:>13.1} {:>13.p$} {:>13.p$} {:>13.p$} {:>9.4} {:>8.4}\n",
                truncate(name, 24), s.cells, s.total_kb, s.max_bucket_kb, s.mean_bucket_kb, s.min_bucket_kb,
                s.max_rank_kb, s.min_rank_kb, s.imbalance, s.ratio_to_lower_bound
            );
        };
        for (name, s) in &self.populations {
            row(name, s);
        }
        row("ALL (joint buckets)", &self.overall);
        out
    }

    /// One row per (rank, cycle): cells, KB (when `with_kb`) and load / mean.
    pub fn bucket_table(&self, with_kb: bool) -> String {
        let mut out = format!("{:>6} {:>6} {:>9}", "rank", "cycle", "cells");
        out += &if with_kb { format!(" {:>14} {:>9}\n", "KB", "/mean") } else { format!(" {:>9}\n", "/mean") };
        let mean = self.overall.mean_bucket_kb;
        let c = self.cycles as usize;
        for (i, (&kb, &cells)) in self.bucket_kb.iter().zip(&self.bucket_cells).enumerate() {
            let rel = if mean > 0.0 { kb / mean } else { 1.0 };
            out += &format!("{:>6} {:>6} {:>9}", i / c, i % c, cells);
            out += &if with_kb { format!(" {kb:>14.1} {rel:>9.4}\n") } else { format!(" {rel:>9.4}\n") };
        }
        out
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_owned() } else { s.chars().take(n - 1).collect::<String>() + "…" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_known_buckets() {
        // 2 ranks × 2 cycles, loads 4, 2 | 3, 3.
        let s = LoadStats::from_buckets(&[4.0, 2.0, 3.0, 3.0], 2, 10, 1.0);
        assert_eq!((s.max_bucket_kb, s.min_bucket_kb, s.mean_bucket_kb), (4.0, 2.0, 3.0));
        assert_eq!((s.max_rank_kb, s.min_rank_kb, s.mean_rank_kb), (6.0, 6.0, 6.0));
        assert_eq!(s.lower_bound_kb, 3.0);
        assert_eq!(s.imbalance, 4.0 / 3.0);
        // A single heavy cell dominates the bound.
        let s = LoadStats::from_buckets(&[10.0, 0.0], 1, 1, 10.0);
        assert_eq!((s.lower_bound_kb, s.ratio_to_lower_bound), (10.0, 1.0));
    }
}
