//! Load statistics of an allocation: per bucket and per rank KB, imbalance, the lower bound,
//! per population and overall; and the text table the CLI prints.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::allocation::{Allocation, Bucket};
use crate::dry_run::{DryRun, MetypeGids};
use crate::gid_map::GidSet;

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
    /// Statistics of `ranks × cycles` buckets of which `loads` lists those holding cells
    /// (distinct, in (rank, cycle) order, KB each); every other bucket holds 0. Cost is
    /// O(`loads`), whatever the bucket count. With no bucket at all (0 ranks or cycles) the
    /// means are 0.
    pub fn from_loads(
        ranks: u32,
        cycles: u32,
        loads: &[(Bucket, f64)],
        cells: usize,
        heaviest_cell_kb: f64,
    ) -> LoadStats {
        let buckets = ranks as u64 * cycles as u64;
        let total = loads.iter().fold(0.0, |t, l| t + l.1);
        let some_empty = (loads.len() as u64) < buckets;
        let (mut max, mut min) = (f64::NEG_INFINITY, f64::INFINITY);
        for &(_, kb) in loads {
            max = max.max(kb);
            min = min.min(kb);
        }
        if some_empty || loads.is_empty() {
            max = max.max(0.0);
            min = 0.0;
        }
        // Rank sums: `loads` is ordered by rank, so each rank's buckets are consecutive.
        let (mut rmax, mut rmin, mut ranks_seen) = (0.0f64, f64::INFINITY, 0u64);
        for group in loads.chunk_by(|a, b| a.0.rank == b.0.rank) {
            let sum = group.iter().fold(0.0, |t, l| t + l.1);
            rmax = rmax.max(sum);
            rmin = rmin.min(sum);
            ranks_seen += 1;
        }
        if ranks_seen < ranks as u64 || ranks_seen == 0 {
            rmin = 0.0;
        }
        let mean = total / buckets.max(1) as f64;
        let lower_bound_kb = mean.max(heaviest_cell_kb);
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 1.0 };
        LoadStats {
            cells,
            total_kb: total,
            max_bucket_kb: max,
            mean_bucket_kb: mean,
            min_bucket_kb: min,
            max_rank_kb: rmax,
            mean_rank_kb: total / (ranks as f64).max(1.0),
            min_rank_kb: rmin,
            heaviest_cell_kb,
            lower_bound_kb,
            imbalance: ratio(max, mean),
            ratio_to_lower_bound: ratio(max, lower_bound_kb),
        }
    }
}

/// One population's own statistics in a [`Summary`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PopulationLoad {
    /// The population's name, as the allocation lists it.
    pub name: String,
    /// Its statistics over its own cells (KB, or cells when weighed by count).
    pub stats: LoadStats,
}

/// Dense populations' gid → metype tables for [`Summary::checked_with`], by population
/// index of the dry run (`None`: built when needed).
#[derive(Debug, Default)]
pub struct GidTables(Vec<Option<Vec<u16>>>);

impl GidTables {
    /// The tables of `dry_run`'s dense populations (2 bytes per gid of their span) when
    /// they take at most `max_bytes` together, else none.
    pub fn new(dry_run: &DryRun, max_bytes: usize) -> GidTables {
        let spans: Vec<usize> = dry_run.populations.iter().map(|p| p.gid_span()).collect();
        if spans
            .iter()
            .map(|s| s.saturating_mul(2))
            .fold(0usize, usize::saturating_add)
            > max_bytes
        {
            return GidTables::default();
        }
        GidTables(
            dry_run
                .populations
                .iter()
                .zip(spans)
                .map(|(p, span)| metype_table(dry_run, p, span))
                .collect(),
        )
    }
}

/// Dense, with few metypes: one table of 2 bytes per gid (`span` of them) holds each gid's
/// metype, then marks it seen; `None` otherwise.
fn metype_table(dry_run: &DryRun, pop: &crate::dry_run::Population, span: usize) -> Option<Vec<u16>> {
    if span > pop.cell_count().saturating_mul(2).saturating_add(4096)
        || dry_run.metypes.len() >= SEEN as usize
    {
        return None;
    }
    let mut table = vec![ABSENT; span];
    for MetypeGids { metype: m, gids } in &pop.metype_gids {
        for &g in gids {
            table[g as usize] = *m as u16;
        }
    }
    Some(table)
}

/// A population's gid → metype lookup in [`Summary::checked`], which also marks each gid
/// seen.
enum Index {
    /// Dense gids, metype indices below [`SEEN`]: one slot per gid.
    Table(Vec<u16>),
    /// Otherwise: the dry run's index and a set of the gids seen.
    Map(crate::gid_map::GidIndex, GidSet),
}

/// A [`Index::Table`] slot of a gid not in the dry run.
const ABSENT: u16 = u16::MAX;
/// A [`Index::Table`] slot of a gid already weighed.
const SEEN: u16 = u16::MAX - 1;

/// One bucket that holds cells: its cells and their KB, all populations together.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BucketLoad {
    pub rank: u32,
    pub cycle: u32,
    pub cells: usize,
    pub kb: f64,
}

/// The full picture of an allocation weighed with a dry run. Its size is proportional to
/// the buckets that hold cells, not to `ranks × cycles`: empty buckets are counted, not
/// stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub ranks: u32,
    pub cycles: u32,
    /// All populations together (a bucket's load is the sum over populations).
    pub overall: LoadStats,
    /// Each population's own statistics, in allocation order.
    pub populations: Vec<PopulationLoad>,
    /// The buckets that hold at least one cell, in (rank, cycle) order.
    pub buckets: Vec<BucketLoad>,
}

impl Summary {
    /// Weighs `allocation` with the per-cell KB of `dry_run`. Gids absent from the dry run
    /// weigh 0 (check [`Allocation::gid_problems`] first).
    pub fn new(allocation: &Allocation, dry_run: &DryRun) -> Summary {
        let metype_kb = dry_run.metype_cell_kb();
        Self::weighed(allocation, |name| {
            // One population's gid table at a time: memory of the largest population only.
            let pop = dry_run.populations.iter().find(|d| d.name == name);
            let index = pop.map(|p| dry_run.gid_metype_index(p));
            let metype_kb = &metype_kb;
            move |g: u32| -> f64 {
                match (pop, &index) {
                    (Some(p), Some(index)) => match index.get(g) {
                        Some(m) => match &p.cell_synapses {
                            Some(_) => dry_run.cell_kb(p, g, m as usize),
                            None => metype_kb[m as usize],
                        },
                        None => 0.0,
                    },
                    _ => 0.0,
                }
            }
        })
    }

    /// [`Allocation::validate`] and [`Summary::new`] in one pass over the gids: each gid's
    /// metype is looked up once, for its weight and to know it is the dry run's, and marked
    /// seen; with no gid unknown or repeated, every bucket in range, the populations those of
    /// the dry run and each one's gid count the dry run's, no gid is missing. When anything
    /// is off, both are computed apart, so the error and the summary are theirs.
    pub fn checked(allocation: &Allocation, dry_run: &DryRun) -> (crate::error::Result<()>, Summary) {
        Self::checked_with(allocation, dry_run, GidTables::default())
    }

    /// [`Summary::checked`] with some populations' gid → metype tables built beforehand
    /// ([`GidTables::new`], e.g. beside the balancing); the others are built here.
    pub fn checked_with(
        allocation: &Allocation,
        dry_run: &DryRun,
        tables: GidTables,
    ) -> (crate::error::Result<()>, Summary) {
        let mut tables = tables.0;
        let slow = || (allocation.validate(dry_run), Summary::new(allocation, dry_run));
        let names_match = allocation.populations.iter().enumerate().all(|(i, a)| {
            dry_run.populations.iter().any(|d| d.name == a.name)
                && !allocation.populations[..i].iter().any(|b| b.name == a.name)
        }) && dry_run
            .populations
            .iter()
            .all(|d| d.cell_count() == 0 || allocation.populations.iter().any(|a| a.name == d.name));
        if !names_match {
            return slow();
        }
        let metype_kb = dry_run.metype_cell_kb();
        let mut counts = Vec::new();
        let summary = Self::weighed_checked(allocation, true, |name| {
            let (pi, pop) = dry_run
                .populations
                .iter()
                .enumerate()
                .find(|(_, d)| d.name == name)
                .expect("names checked");
            let built = tables.get_mut(pi).and_then(Option::take);
            let span = pop.gid_span();
            let metype_kb = &metype_kb;
            counts.push(pop.cell_count());
            let weight = move |g: u32, m: usize| match &pop.cell_synapses {
                Some(_) => dry_run.cell_kb(pop, g, m),
                None => metype_kb[m],
            };
            let index = if let Some(table) = built.or_else(|| metype_table(dry_run, pop, span)) {
                Index::Table(table)
            } else {
                let mut index = crate::gid_map::GidIndex::for_span(span, pop.cell_count());
                for MetypeGids { metype: m, gids } in &pop.metype_gids {
                    for &g in gids {
                        index.insert(g, *m as u32);
                    }
                }
                Index::Map(index, GidSet::for_span(span, pop.cell_count()))
            };
            let mut index = index;
            move |g: u32| -> Option<f64> {
                match &mut index {
                    Index::Table(table) => {
                        let slot = table.get_mut(g as usize)?;
                        let m = *slot;
                        if m >= SEEN {
                            return None;
                        }
                        *slot = SEEN;
                        Some(weight(g, m as usize))
                    }
                    Index::Map(index, seen) => {
                        let m = index.get(g)? as usize;
                        seen.insert(g).then(|| weight(g, m))
                    }
                }
            }
        });
        match summary {
            Some(summary)
                if summary
                    .populations
                    .iter()
                    .zip(counts.iter())
                    .all(|(p, &n)| p.stats.cells == n) =>
            {
                (Ok(()), summary)
            }
            _ => slow(),
        }
    }

    /// Summary by cell count only (every cell weighs 1), for files without a dry run.
    pub fn by_cell_count(allocation: &Allocation) -> Summary {
        Self::weighed(allocation, |_| |_| 1.0)
    }

    /// `weigher(population name)` gives the KB of each gid of that population.
    fn weighed<W: Fn(u32) -> f64>(allocation: &Allocation, weigher: impl Fn(&str) -> W) -> Summary {
        Self::weighed_checked(allocation, false, |name| {
            let w = weigher(name);
            move |g| Some(w(g))
        })
        .expect("a weight for every gid")
    }

    /// [`Summary::weighed`] where a weight may be refused (`None`, which makes the result
    /// `None`); with `strict`, a bucket out of range is refused too (else it is skipped).
    fn weighed_checked<W: FnMut(u32) -> Option<f64>>(
        allocation: &Allocation,
        strict: bool,
        mut weigher: impl FnMut(&str) -> W,
    ) -> Option<Summary> {
        let (ranks, cycles) = (allocation.ranks, allocation.cycles);
        let mut all: BTreeMap<Bucket, (usize, f64)> = BTreeMap::new();
        let mut heaviest = 0.0f64;
        let mut populations = Vec::new();
        for pop in &allocation.populations {
            let mut weigh = weigher(&pop.name);
            let mut loads = Vec::new();
            let mut cells = 0;
            let mut pop_heaviest = 0.0f64;
            for (&b, gids) in &pop.buckets {
                if b.rank >= ranks || b.cycle >= cycles {
                    if strict {
                        return None;
                    }
                    continue;
                }
                if gids.is_empty() {
                    continue;
                }
                let mut kb = 0.0;
                // `pop_heaviest` in a local: `weigh` writes memory, so it would be stored
                // and reloaded at each gid.
                let mut heavy = pop_heaviest;
                for &g in gids {
                    let w = weigh(g)?;
                    kb += w;
                    // `f64::max` but for NaN, which no weight is.
                    if w > heavy {
                        heavy = w;
                    }
                }
                pop_heaviest = heavy;
                loads.push((b, kb));
                cells += gids.len();
                let t = all.entry(b).or_insert((0, 0.0));
                t.0 += gids.len();
                t.1 += kb;
            }
            heaviest = heaviest.max(pop_heaviest);
            populations.push(PopulationLoad {
                name: pop.name.clone(),
                stats: LoadStats::from_loads(ranks, cycles, &loads, cells, pop_heaviest),
            });
        }
        let loads: Vec<(Bucket, f64)> = all.iter().map(|(&b, &(_, kb))| (b, kb)).collect();
        let cells = all.values().map(|t| t.0).sum();
        Some(Summary {
            ranks,
            cycles,
            overall: LoadStats::from_loads(ranks, cycles, &loads, cells, heaviest),
            populations,
            buckets: all
                .into_iter()
                .map(|(b, (cells, kb))| BucketLoad {
                    rank: b.rank,
                    cycle: b.cycle,
                    cells,
                    kb,
                })
                .collect(),
        })
    }

    /// `ranks × cycles`.
    pub fn bucket_count(&self) -> u64 {
        self.ranks as u64 * self.cycles as u64
    }

    /// Number of buckets with no cell at all.
    pub fn empty_bucket_count(&self) -> u64 {
        self.bucket_count() - self.buckets.len() as u64
    }

    /// The first `limit` buckets with no cell, in (rank, cycle) order (O(buckets with cells
    /// + `limit`)).
    pub fn first_empty_buckets(&self, limit: usize) -> Vec<Bucket> {
        let c = self.cycles as u64;
        let mut out = Vec::new();
        let mut next = 0u64;
        let filled = self
            .buckets
            .iter()
            .map(|b| b.rank as u64 * c + b.cycle as u64)
            .chain([self.bucket_count()]);
        for upto in filled {
            while next < upto && out.len() < limit {
                out.push(Bucket {
                    rank: (next / c) as u32,
                    cycle: (next % c) as u32,
                });
                next += 1;
            }
            if out.len() == limit {
                break;
            }
            next = upto + 1;
        }
        out
    }

    /// KB per rank (all its cycles), `ranks` values: for callers that checked the rank
    /// count (the balancer, whose buckets [`crate::BalancerConfig::check_size`] bounds).
    pub fn rank_kb(&self) -> Vec<f64> {
        let mut v = vec![0.0; self.ranks as usize];
        for b in &self.buckets {
            v[b.rank as usize] += b.kb;
        }
        v
    }

    /// The summary table: one row per population and one for all, KB figures.
    pub fn table(&self, unit: &str) -> String {
        let mut out = format!(
            "{:<24} {:>9} {:>14} {:>13} {:>13} {:>13} {:>13} {:>13} {:>9} {:>8}\n",
            "population",
            "cells",
            format!("total {unit}"),
            "max bucket",
            "mean bucket",
            "min bucket",
            "max rank",
            "min rank",
            "imbalance",
            "max/LB"
        );
        // Cell counts are whole numbers (only means have decimals); KB have one decimal.
        let p = if unit == "cells" { 0 } else { 1 };
        let mut row = |name: &str, s: &LoadStats| {
            out +=
                &format!(
                "{:<24} {:>9} {:>14.p$} {:>13.p$} {:>13.1} {:>13.p$} {:>13.p$} {:>13.p$} {:>9.4} {:>8.4}\n",
                truncate(name, 24), s.cells, s.total_kb, s.max_bucket_kb, s.mean_bucket_kb, s.min_bucket_kb,
                s.max_rank_kb, s.min_rank_kb, s.imbalance, s.ratio_to_lower_bound
            );
        };
        for p in &self.populations {
            row(&p.name, &p.stats);
        }
        row("ALL (joint buckets)", &self.overall);
        out
    }

    /// One row per bucket that holds cells (rank, cycle, cells, KB when `with_kb`, load /
    /// mean), then one line counting the empty buckets, which are not listed.
    pub fn bucket_table(&self, with_kb: bool) -> String {
        let mut out = format!("{:>6} {:>6} {:>9}", "rank", "cycle", "cells");
        out += &if with_kb {
            format!(" {:>14} {:>9}\n", "KB", "/mean")
        } else {
            format!(" {:>9}\n", "/mean")
        };
        let mean = self.overall.mean_bucket_kb;
        for b in &self.buckets {
            let rel = if mean > 0.0 { b.kb / mean } else { 1.0 };
            out += &format!("{:>6} {:>6} {:>9}", b.rank, b.cycle, b.cells);
            out += &if with_kb {
                format!(" {:>14.1} {rel:>9.4}\n", b.kb)
            } else {
                format!(" {rel:>9.4}\n")
            };
        }
        let empty = self.empty_bucket_count();
        if empty > 0 {
            out += &format!(
                "({empty} of {} buckets hold no cell and are not listed)\n",
                self.bucket_count()
            );
        }
        out
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        s.chars().take(n - 1).collect::<String>() + "…"
    }
}

#[cfg(test)]
mod tests {
    /// `checked` gives what `validate` and `new` give, on correct allocations and on each
    /// kind of problem.
    #[test]
    fn checked_is_validate_and_new() {
        let dense = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
            cells: 3000,
            metypes: 17,
            populations: 3,
            seed: 5,
        })
        .unwrap();
        // Sparse gids: looked up through the dry run's index and a set.
        let mut sparse = dense.clone();
        for p in &mut sparse.populations {
            for e in &mut p.metype_gids {
                e.gids.iter_mut().for_each(|x| *x = *x * 1013 + 7);
            }
        }
        for d in [dense, sparse] {
            check_is_validate_and_new(&d);
        }
    }

    fn check_is_validate_and_new(d: &DryRun) {
        use crate::allocation::PopulationAllocation;
        let d = d.clone();
        let good = crate::strategy::balance(
            &d,
            &crate::BalancerConfig::builder()
                .ranks(7)
                .cycles(2)
                .build()
                .unwrap(),
        );
        let first = |a: &Allocation| *a.populations[1].buckets.values().next().unwrap().first().unwrap();
        type Change = fn(&mut Allocation, u32);
        let changes: [(&str, Change); 9] = [
            ("none", |_, _| {}),
            ("duplicated gid", |a, g| {
                a.populations[1].buckets.values_mut().last().unwrap().push(g)
            }),
            ("unknown gid", |a, _| {
                a.populations[0]
                    .buckets
                    .values_mut()
                    .next()
                    .unwrap()
                    .push(9_999_999)
            }),
            ("missing gid", |a, _| {
                a.populations[2].buckets.values_mut().next().unwrap().pop();
            }),
            ("bucket out of range", |a, _| {
                let gids = a.populations[0].buckets.pop_first().unwrap().1;
                a.populations[0]
                    .buckets
                    .insert(Bucket { rank: 7, cycle: 0 }, gids);
            }),
            ("missing population", |a, _| {
                a.populations.remove(1);
            }),
            ("unknown population", |a, _| {
                a.populations.push(PopulationAllocation {
                    name: "nobody".into(),
                    buckets: BTreeMap::from([(Bucket { rank: 0, cycle: 0 }, vec![1])]),
                })
            }),
            ("repeated population", |a, _| {
                let p = a.populations[2].clone();
                a.populations.push(p);
            }),
            ("moved gid", |a, g| {
                // Still valid: the gid in another bucket.
                for gids in a.populations[1].buckets.values_mut() {
                    gids.retain(|&x| x != g);
                }
                a.populations[1].buckets.values_mut().last().unwrap().push(g);
            }),
        ];
        for (what, change) in changes {
            let mut a = good.clone();
            change(&mut a, first(&good));
            let (valid, summary) = Summary::checked(&a, &d);
            assert_eq!(format!("{valid:?}"), format!("{:?}", a.validate(&d)), "{what}");
            assert_eq!(summary, Summary::new(&a, &d), "{what}");
            // The same with the tables built beforehand (and none when too large).
            for max in [usize::MAX, 0] {
                let (v, s) = Summary::checked_with(&a, &d, GidTables::new(&d, max));
                assert_eq!(
                    format!("{v:?}"),
                    format!("{valid:?}"),
                    "{what}, tables up to {max}"
                );
                assert_eq!(s, summary, "{what}, tables up to {max}");
            }
            // (A repeated population is checked copy by copy: validate passes it, and the
            // writer refuses its name.)
            assert_eq!(
                valid.is_ok(),
                matches!(what, "none" | "moved gid" | "repeated population"),
                "{what}"
            );
        }
    }

    use super::*;

    #[test]
    fn stats_of_known_buckets() {
        let b = |rank, cycle| Bucket { rank, cycle };
        // 2 ranks × 2 cycles, loads 4, 2 | 3, 3.
        let s = LoadStats::from_loads(
            2,
            2,
            &[(b(0, 0), 4.0), (b(0, 1), 2.0), (b(1, 0), 3.0), (b(1, 1), 3.0)],
            10,
            1.0,
        );
        assert_eq!(
            (s.max_bucket_kb, s.min_bucket_kb, s.mean_bucket_kb),
            (4.0, 2.0, 3.0)
        );
        assert_eq!((s.max_rank_kb, s.min_rank_kb, s.mean_rank_kb), (6.0, 6.0, 6.0));
        assert_eq!(s.lower_bound_kb, 3.0);
        assert_eq!(s.imbalance, 4.0 / 3.0);
        // A single heavy cell dominates the bound; the other bucket is empty (0).
        let s = LoadStats::from_loads(2, 1, &[(b(0, 0), 10.0)], 1, 10.0);
        assert_eq!(
            (
                s.lower_bound_kb,
                s.ratio_to_lower_bound,
                s.min_bucket_kb,
                s.min_rank_kb
            ),
            (10.0, 1.0, 0.0, 0.0)
        );
        // 10^8 ranks × 10^3 cycles with one bucket used: O(1) work, finite figures.
        let s = LoadStats::from_loads(100_000_000, 1000, &[(b(200_000, 999), 5.0)], 1, 5.0);
        assert_eq!(
            (s.max_bucket_kb, s.min_bucket_kb, s.max_rank_kb, s.min_rank_kb),
            (5.0, 0.0, 5.0, 0.0)
        );
        assert_eq!(s.mean_bucket_kb, 5.0 / 1e11);
        // No bucket at all: zeros, not NaN or infinities.
        let s = LoadStats::from_loads(0, 1, &[], 0, 0.0);
        assert_eq!(
            (
                s.max_bucket_kb,
                s.min_bucket_kb,
                s.mean_bucket_kb,
                s.mean_rank_kb,
                s.imbalance
            ),
            (0.0, 0.0, 0.0, 0.0, 1.0)
        );
    }

    #[test]
    fn sparse_buckets_count_and_list_the_empty_ones() {
        let alloc = Allocation {
            ranks: 200_001,
            cycles: 1000,
            populations: vec![crate::PopulationAllocation {
                name: "P".into(),
                buckets: [
                    (Bucket { rank: 0, cycle: 1 }, vec![1, 2]),
                    (
                        Bucket {
                            rank: 200_000,
                            cycle: 999,
                        },
                        vec![3],
                    ),
                ]
                .into_iter()
                .collect(),
            }],
        };
        let s = Summary::by_cell_count(&alloc);
        assert_eq!(s.buckets.len(), 2);
        assert_eq!(s.empty_bucket_count(), 200_001_000 - 2);
        let b = |rank, cycle| Bucket { rank, cycle };
        assert_eq!(s.first_empty_buckets(3), vec![b(0, 0), b(0, 2), b(0, 3)]);
        let table = s.bucket_table(false);
        assert_eq!(table.lines().count(), 4, "{table}");
        assert!(
            table.contains("(200000998 of 200001000 buckets hold no cell and are not listed)"),
            "{table}"
        );
        assert_eq!(
            (s.overall.max_rank_kb, s.overall.min_rank_kb, s.overall.cells),
            (2.0, 0.0, 3)
        );
        // 2 × 2: bucket (200000, 999) is out of range and not counted.
        let small = Summary::by_cell_count(&Allocation {
            ranks: 2,
            cycles: 2,
            ..alloc
        });
        assert_eq!(small.rank_kb(), vec![2.0, 0.0]);
        assert_eq!(small.first_empty_buckets(5), vec![b(0, 0), b(1, 0), b(1, 1)]);
    }
}
