//! What `dry-run` and `stats` print alike: counts in words ("1 rank", "2 ranks"),
//! neurodamus' per-population warning about buckets that hold none of a population's cells,
//! and a population's statistics as JSON ([`PopulationStats`]).
use ballast_balancer::{Allocation, LoadStats, PopulationLoad};
use serde::Serialize;

/// `n` and the noun, singular for 1: `count(1, "rank")` = "1 rank".
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// One warning per population that is not spread over every (rank, cycle) bucket, as
/// neurodamus warns ("Population P is not allocated across the full size of ranks and
/// cycles", `utils/memory.py`), with the count of buckets it leaves empty and of the ranks
/// that hold none of its cells in any cycle. Time and
/// memory are proportional to the allocation's buckets, not to ranks × cycles.
pub fn population_warnings(allocation: &Allocation) -> Vec<String> {
    let buckets = u64::from(allocation.ranks) * u64::from(allocation.cycles);
    allocation
        .populations
        .iter()
        .filter_map(|p| {
            let holding = || {
                p.buckets
                    .iter()
                    .filter(|(b, gids)| b.rank < allocation.ranks && b.cycle < allocation.cycles && !gids.is_empty())
            };
            let held = holding().count() as u64;
            // Ranks holding some of its cells (the buckets are in (rank, cycle) order).
            let mut ranks_held = 0u64;
            let mut last = None;
            for (b, _) in holding() {
                if last != Some(b.rank) {
                    ranks_held += 1;
                    last = Some(b.rank);
                }
            }
            let ranks_without = u64::from(allocation.ranks) - ranks_held;
            (held < buckets).then(|| {
                format!(
                    "population {} is not allocated across the full size of ranks and cycles: {} of {} hold none of its cells{}; consider fewer ranks or cycles",
                    p.name,
                    buckets - held,
                    count(buckets, "bucket"),
                    if ranks_without > 0 {
                        format!(" ({ranks_without} of {} hold none at all)", count(allocation.ranks, "rank"))
                    } else {
                        String::new()
                    }
                )
            })
        })
        .collect()
}

/// The KB figures of [`LoadStats`], in its order: null without a dry run (`stats` without
/// `--memory-usage`, whose loads are cell counts).
#[derive(Serialize)]
pub struct KbStats {
    pub total_kb: Option<f64>,
    pub max_bucket_kb: Option<f64>,
    pub mean_bucket_kb: Option<f64>,
    pub min_bucket_kb: Option<f64>,
    pub max_rank_kb: Option<f64>,
    pub mean_rank_kb: Option<f64>,
    pub min_rank_kb: Option<f64>,
    pub heaviest_cell_kb: Option<f64>,
    pub lower_bound_kb: Option<f64>,
}

impl KbStats {
    /// The KB figures of `s`, or nulls unless `with_kb`.
    pub fn new(s: &LoadStats, with_kb: bool) -> KbStats {
        let kb = |x: f64| with_kb.then_some(x);
        KbStats {
            total_kb: kb(s.total_kb),
            max_bucket_kb: kb(s.max_bucket_kb),
            mean_bucket_kb: kb(s.mean_bucket_kb),
            min_bucket_kb: kb(s.min_bucket_kb),
            max_rank_kb: kb(s.max_rank_kb),
            mean_rank_kb: kb(s.mean_rank_kb),
            min_rank_kb: kb(s.min_rank_kb),
            heaviest_cell_kb: kb(s.heaviest_cell_kb),
            lower_bound_kb: kb(s.lower_bound_kb),
        }
    }
}

/// A population's statistics with its name, as `dry-run --json` and `stats --json` both
/// list populations: the fields of [`LoadStats`] in its order after the name.
#[derive(Serialize)]
pub struct PopulationStats {
    pub name: String,
    pub cells: usize,
    #[serde(flatten)]
    pub kb: KbStats,
    pub imbalance: f64,
    pub ratio_to_lower_bound: f64,
}

impl PopulationStats {
    /// From a summary's entry of a population; the KB figures null unless `with_kb`.
    pub fn new(p: &PopulationLoad, with_kb: bool) -> PopulationStats {
        let s = &p.stats;
        PopulationStats {
            name: p.name.clone(),
            cells: s.cells,
            kb: KbStats::new(s, with_kb),
            imbalance: s.imbalance,
            ratio_to_lower_bound: s.ratio_to_lower_bound,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_balancer::{Bucket, PopulationAllocation};

    #[test]
    fn counts_and_population_warnings() {
        assert_eq!(count(1u32, "rank"), "1 rank");
        assert_eq!(count(0u32, "rank"), "0 ranks");
        assert_eq!(count(4u32, "cycle"), "4 cycles");
        let pop = |name: &str, ranks: &[u32]| PopulationAllocation {
            name: name.into(),
            buckets: ranks
                .iter()
                .map(|&r| (Bucket { rank: r, cycle: 0 }, vec![r]))
                .collect(),
        };
        let a = Allocation {
            ranks: 3,
            cycles: 1,
            populations: vec![pop("full", &[0, 1, 2]), pop("small", &[1])],
        };
        let w = population_warnings(&a);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("population small is not allocated across the full size")
                && w[0].contains("2 of 3 buckets hold none of its cells (2 of 3 ranks hold none at all)"),
            "{}",
            w[0]
        );
        // Two cycles: a population on both cycles of rank 0 and one of rank 1 leaves
        // buckets empty but no rank without it; one on rank 0 alone leaves rank 1.
        let pop2 = |name: &str, b: &[(u32, u32)]| PopulationAllocation {
            name: name.into(),
            buckets: b
                .iter()
                .map(|&(rank, cycle)| (Bucket { rank, cycle }, vec![rank]))
                .collect(),
        };
        let a = Allocation {
            ranks: 2,
            cycles: 2,
            populations: vec![pop2("p", &[(0, 0), (0, 1), (1, 0)]), pop2("q", &[(0, 0), (0, 1)])],
        };
        let w = population_warnings(&a);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].contains("1 of 4 buckets hold none of its cells; consider"),
            "{}",
            w[0]
        );
        assert!(
            w[1].contains("2 of 4 buckets hold none of its cells (1 of 2 ranks hold none at all)"),
            "{}",
            w[1]
        );
    }
}
