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

/// One gid of one population ([`GidProblems`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopulationGid {
    /// The population's name.
    pub population: String,
    /// The gid, as the allocation or the dry run lists it.
    pub gid: u32,
}

/// One bucket of one population's allocation ([`GidProblems::out_of_range`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopulationBucket {
    /// The population's name.
    pub population: String,
    /// The bucket, as the allocation lists it.
    pub bucket: Bucket,
}

/// Where the first of some [`GidProblems`] is ([`GidProblems::first`]): what
/// [`BalancerError::Mismatch`] names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProblemSite {
    /// The population at fault (empty when there is no problem).
    pub population: String,
    /// The gid at fault; `None` when the problem is a whole population or a bucket.
    pub gid: Option<u32>,
}

/// What is wrong with the gids of an allocation, per population.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GidProblems {
    /// Gids listed more than once.
    pub duplicated: Vec<PopulationGid>,
    /// Gids of the dry run that no bucket holds (only with a dry run).
    pub missing: Vec<PopulationGid>,
    /// Gids in the allocation but not in the dry run (only with a dry run).
    pub unknown: Vec<PopulationGid>,
    /// Populations of the dry run absent from the allocation, and vice versa.
    pub missing_populations: Vec<String>,
    pub unknown_populations: Vec<String>,
    /// Buckets outside `ranks × cycles`.
    pub out_of_range: Vec<PopulationBucket>,
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
    /// no gid for a whole population or a bucket; empty and `None` when there is none).
    pub fn first(&self) -> ProblemSite {
        let site = |population: &String, gid| ProblemSite {
            population: population.clone(),
            gid,
        };
        let gid = |v: &[PopulationGid]| v.first().map(|p| site(&p.population, Some(p.gid)));
        gid(&self.duplicated)
            .or_else(|| gid(&self.missing))
            .or_else(|| gid(&self.unknown))
            .or_else(|| self.missing_populations.first().map(|p| site(p, None)))
            .or_else(|| self.unknown_populations.first().map(|p| site(p, None)))
            .or_else(|| self.out_of_range.first().map(|b| site(&b.population, None)))
            .unwrap_or_default()
    }

    /// One line per kind of problem, with up to 5 examples each; an example as `("P", 3)`
    /// (population, gid), `("P", Bucket { rank: 4, cycle: 0 })` (population, bucket) or
    /// `"P"` (a population).
    pub fn describe(&self) -> Vec<String> {
        /// `(population, what)`, as the messages have always shown it.
        fn pair(population: &str, what: &dyn std::fmt::Debug) -> String {
            format!("({population:?}, {what:?})")
        }
        fn list<T>(what: &str, v: &[T], show: impl Fn(&T) -> String) -> Option<String> {
            (!v.is_empty()).then(|| {
                let shown: Vec<String> = v.iter().take(5).map(show).collect();
                let more = if v.len() > 5 {
                    format!(" and {} more", v.len() - 5)
                } else {
                    String::new()
                };
                format!("{} {what}: {}{more}", v.len(), shown.join(", "))
            })
        }
        let gid = |g: &PopulationGid| pair(&g.population, &g.gid);
        let name = |p: &String| format!("{p:?}");
        [
            list("duplicated gids (population, gid)", &self.duplicated, gid),
            list(
                "gids of the dry run missing from the allocation (population, gid)",
                &self.missing,
                gid,
            ),
            list("gids not in the dry run (population, gid)", &self.unknown, gid),
            list(
                "populations of the dry run missing from the allocation",
                &self.missing_populations,
                name,
            ),
            list("populations not in the dry run", &self.unknown_populations, name),
            list(
                "buckets outside ranks × cycles (population, bucket)",
                &self.out_of_range,
                |b| pair(&b.population, &b.bucket),
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
                for c in p.cells() {
                    set.insert(c.gid);
                }
                set
            });
            let mut seen = GidSet::for_span(span, count);
            for (&bucket, gids) in &pop.buckets {
                if bucket.rank >= self.ranks || bucket.cycle >= self.cycles {
                    problems.out_of_range.push(PopulationBucket {
                        population: pop.name.clone(),
                        bucket,
                    });
                }
                for &g in gids {
                    let at = || PopulationGid {
                        population: pop.name.clone(),
                        gid: g,
                    };
                    if !seen.insert(g) {
                        problems.duplicated.push(at());
                    } else if dry_run.is_some() && !in_dry_run.as_ref().is_some_and(|s| s.contains(g)) {
                        problems.unknown.push(at());
                    }
                }
            }
            if let Some(p) = expected {
                problems.missing.extend(
                    p.cells()
                        .filter(|c| !seen.contains(c.gid))
                        .map(|c| PopulationGid {
                            population: pop.name.clone(),
                            gid: c.gid,
                        }),
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
            let ProblemSite { population, gid } = problems.first();
            Err(BalancerError::Mismatch {
                file: None,
                population,
                gid,
                what: problems.describe().join("; "),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dry_run::{Metype, MetypeGids, Population};

    /// Every kind of problem, named in `first` and shown in `describe` as the messages
    /// always showed them: `("P", 3)`, `("P", Bucket { .. })`, `"Q"`.
    #[test]
    fn problems_are_listed_and_described() {
        let dry_run = DryRun {
            metypes: vec![Metype {
                name: "M".into(),
                memory_kb: 1.0,
                synapses_per_cell: 0.0,
            }],
            populations: ["P", "Q"]
                .map(|name| Population {
                    name: name.into(),
                    metype_gids: vec![MetypeGids {
                        metype: 0,
                        gids: vec![0, 1, 2],
                    }],
                    cell_synapses: None,
                })
                .into(),
        };
        let b = |rank, cycle| Bucket { rank, cycle };
        let allocation = Allocation {
            ranks: 2,
            cycles: 1,
            populations: vec![
                PopulationAllocation {
                    name: "P".into(),
                    buckets: BTreeMap::from([(b(0, 0), vec![0, 1, 1]), (b(4, 0), vec![9])]),
                },
                PopulationAllocation {
                    name: "R".into(),
                    buckets: BTreeMap::from([(b(0, 0), vec![0])]),
                },
            ],
        };
        let problems = allocation.gid_problems(Some(&dry_run));
        let at = |population: &str, gid| PopulationGid {
            population: population.into(),
            gid,
        };
        assert_eq!(problems.duplicated, [at("P", 1)]);
        assert_eq!(problems.missing, [at("P", 2)]);
        // A population not in the dry run: its gids are unknown too.
        assert_eq!(problems.unknown, [at("P", 9), at("R", 0)]);
        assert_eq!(problems.missing_populations, ["Q"]);
        assert_eq!(problems.unknown_populations, ["R"]);
        assert_eq!(
            problems.out_of_range,
            [PopulationBucket {
                population: "P".into(),
                bucket: b(4, 0),
            }]
        );
        assert_eq!(
            problems.first(),
            ProblemSite {
                population: "P".into(),
                gid: Some(1),
            }
        );
        assert_eq!(
            problems.describe(),
            [
                "1 duplicated gids (population, gid): (\"P\", 1)",
                "1 gids of the dry run missing from the allocation (population, gid): (\"P\", 2)",
                "2 gids not in the dry run (population, gid): (\"P\", 9), (\"R\", 0)",
                "1 populations of the dry run missing from the allocation: \"Q\"",
                "1 populations not in the dry run: \"R\"",
                "1 buckets outside ranks × cycles (population, bucket): (\"P\", Bucket { rank: 4, cycle: 0 })",
            ]
        );
        // Only whole populations and buckets left: no gid.
        let buckets = GidProblems {
            out_of_range: problems.out_of_range.clone(),
            ..GidProblems::default()
        };
        assert_eq!(buckets.first().gid, None);
        assert_eq!(buckets.first().population, "P");
        assert_eq!(GidProblems::default().first(), ProblemSite::default());
    }
}
