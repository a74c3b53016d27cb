//! The allocation: which gids of each population go to which (rank, cycle) bucket.
use std::collections::BTreeMap;

/// One (rank, cycle) bucket. Ordered by rank, then cycle, like neurodamus' `(rank, cycle)` keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bucket {
    pub rank: u32,
    pub cycle: u32,
}

/// The gids of one population, per bucket, in the order they were assigned.
/// Buckets that got no cell may be absent (neurodamus only writes buckets with cells).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PopulationAllocation {
    pub name: String,
    pub buckets: BTreeMap<Bucket, Vec<u32>>,
}

/// A whole allocation: `ranks × cycles` buckets, populations in input order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub ranks: u32,
    pub cycles: u32,
    pub populations: Vec<PopulationAllocation>,
}

use crate::dry_run::DryRun;
use crate::error::{BalancerError, Result};
use crate::gid_map::GidSet;

/// What is wrong with the gids of an allocation, per population.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GidProblems {
    /// (population, gid) listed more than once.
    pub duplicated: Vec<(String, u32)>,
    /// (population, gid) of the dry run that no bucket holds (only with a dry run).
    pub missing: Vec<(String, u32)>,
    /// (population, gid) in the allocation but not in the dry run (only with a dry run).
    pub unknown: Vec<(String, u32)>,
    /// Populations of the dry run absent from the allocation, and vice versa.
    pub missing_populations: Vec<String>,
    pub unknown_populations: Vec<String>,
    /// Buckets outside `ranks × cycles`.
    pub out_of_range: Vec<(String, Bucket)>,
}

impl GidProblems {
    /// True when every gid is present exactly once and every bucket is in range.
    pub fn is_empty(&self) -> bool {
        self.duplicated.is_empty()
            && self.missing.is_empty()
            && self.unknown.is_empty()
            && self.missing_populations.is_empty()
            && self.unknown_populations.is_empty()
            && self.out_of_range.is_empty()
    }

    /// The population and gid of the first problem (in the order of [`GidProblems::describe`];
    /// no gid for a whole population; empty and `None` when there is none).
    pub fn first(&self) -> (String, Option<u32>) {
        let gid = |v: &[(String, u32)]| v.first().map(|(p, g)| (p.clone(), Some(*g)));
        gid(&self.duplicated)
            .or_else(|| gid(&self.missing))
            .or_else(|| gid(&self.unknown))
            .or_else(|| self.missing_populations.first().map(|p| (p.clone(), None)))
            .or_else(|| self.unknown_populations.first().map(|p| (p.clone(), None)))
            .or_else(|| self.out_of_range.first().map(|(p, _)| (p.clone(), None)))
            .unwrap_or_default()
    }

    /// One line per kind of problem, with up to 5 examples each.
    pub fn describe(&self) -> Vec<String> {
        fn list<T: std::fmt::Debug>(what: &str, v: &[T]) -> Option<String> {
            (!v.is_empty()).then(|| {
                let shown: Vec<String> = v.iter().take(5).map(|x| format!("{x:?}")).collect();
                let more = if v.len() > 5 {
                    format!(" and {} more", v.len() - 5)
                } else {
                    String::new()
                };
                format!("{} {what}: {}{more}", v.len(), shown.join(", "))
            })
        }
        [
            list("duplicated gids (population, gid)", &self.duplicated),
            list(
                "gids of the dry run missing from the allocation (population, gid)",
                &self.missing,
            ),
            list("gids not in the dry run (population, gid)", &self.unknown),
            list(
                "populations of the dry run missing from the allocation",
                &self.missing_populations,
            ),
            list("populations not in the dry run", &self.unknown_populations),
            list(
                "buckets outside ranks × cycles (population, bucket)",
                &self.out_of_range,
            ),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

impl Allocation {
    /// Number of (rank, cycle) buckets (`ranks × cycles`, which always fits in a u64).
    pub fn bucket_count(&self) -> u64 {
        self.ranks as u64 * self.cycles as u64
    }

    /// Checks the gids: duplicates and out-of-range buckets always; with a dry run also
    /// missing and unknown gids and populations.
    pub fn gid_problems(&self, dry_run: Option<&DryRun>) -> GidProblems {
        let mut problems = GidProblems::default();
        for pop in &self.populations {
            let expected = dry_run.and_then(|d| d.populations.iter().find(|p| p.name == pop.name));
            if dry_run.is_some() && expected.is_none() {
                problems.unknown_populations.push(pop.name.clone());
            }
            let count: usize = pop.buckets.values().map(Vec::len).sum();
            let span = pop
                .buckets
                .values()
                .flatten()
                .map(|&g| g as usize + 1)
                .max()
                .unwrap_or(0);
            let in_dry_run = expected.map(|p| {
                let mut set = GidSet::for_span(p.gid_span(), p.cell_count());
                for (g, _) in p.cells() {
                    set.insert(g);
                }
                set
            });
            let mut seen = GidSet::for_span(span, count);
            for (&bucket, gids) in &pop.buckets {
                if bucket.rank >= self.ranks || bucket.cycle >= self.cycles {
                    problems.out_of_range.push((pop.name.clone(), bucket));
                }
                for &g in gids {
                    if !seen.insert(g) {
                        problems.duplicated.push((pop.name.clone(), g));
                    } else if dry_run.is_some() && !in_dry_run.as_ref().is_some_and(|s| s.contains(g)) {
                        problems.unknown.push((pop.name.clone(), g));
                    }
                }
            }
            if let Some(p) = expected {
                problems.missing.extend(
                    p.cells()
                        .filter(|&(g, _)| !seen.contains(g))
                        .map(|(g, _)| (pop.name.clone(), g)),
                );
            }
        }
        if let Some(d) = dry_run {
            for p in &d.populations {
                if p.cell_count() > 0 && !self.populations.iter().any(|a| a.name == p.name) {
                    problems.missing_populations.push(p.name.clone());
                }
            }
        }
        problems
    }

    /// Errors unless every gid of `dry_run` is in exactly one bucket within range and no
    /// other gid is present.
    pub fn validate(&self, dry_run: &DryRun) -> Result<()> {
        let problems = self.gid_problems(Some(dry_run));
        if problems.is_empty() {
            Ok(())
        } else {
            let (population, gid) = problems.first();
            Err(BalancerError::Mismatch {
                file: None,
                population,
                gid,
                what: problems.describe().join("; "),
            })
        }
    }
}
