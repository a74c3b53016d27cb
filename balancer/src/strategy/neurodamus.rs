//! neurodamus' batched greedy, reproduced exactly so users can compare
//! (`DryRunStats.distribute_cells` / `distribute_cells_with_validation` in
//! `neurodamus/utils/memory.py`).
//!
//! Per population, on its own: metypes sorted by per-cell KB descending (stable, in
//! `metype_memory` order); the population's gids walked metype by metype; every
//! `batch_size = max(1, ceil(cells / (ranks × cycles) / 10))` cells form a batch that goes
//! onto the bucket at the top of a min-heap of `(load, (rank, cycle))`. Loads are summed in
//! the same order as Python does, so the result is identical to the last bit.
use std::collections::{BTreeMap, BinaryHeap};

use crate::allocation::{Allocation, Bucket, PopulationAllocation};
use crate::dry_run::{DryRun, MetypeGids};
use crate::strategy::{BalancerConfig, Lightest};
use crate::summary::LoadStats;

/// neurodamus' `MAX_ALLOCATION_STEPS`: a batch is about a tenth of a bucket's cells.
pub const MAX_ALLOCATION_STEPS: f64 = 10.0;

/// neurodamus' batch size for a population of `cells` cells.
pub fn batch_size(cells: usize, buckets: usize) -> usize {
    let average = cells as f64 / buckets as f64;
    ((average / MAX_ALLOCATION_STEPS).ceil() as usize).max(1)
}

/// Runs neurodamus' algorithm. Returns the allocation (gids in assignment order).
pub fn balance(dry_run: &DryRun, config: &BalancerConfig) -> Allocation {
    let kb = dry_run.metype_cell_kb();
    let mut order: Vec<usize> = (0..kb.len()).collect();
    // Python's sorted(..., reverse=True) is stable: equal keys keep their input order.
    order.sort_by(|&a, &b| kb[b].total_cmp(&kb[a]));
    let buckets = config.buckets();

    let populations = dry_run
        .populations
        .iter()
        .map(|pop| {
            let size = batch_size(pop.cell_count(), buckets);
            // Python's heap of `(load, (rank, cycle))` tuples pops the same entries.
            let mut heap: BinaryHeap<Lightest<Bucket>> = (0..config.ranks)
                .flat_map(|rank| (0..config.cycles).map(move |cycle| Bucket { rank, cycle }))
                .map(|key| Lightest { load: 0.0, key })
                .collect();
            let mut alloc: BTreeMap<Bucket, Vec<u32>> = BTreeMap::new();
            let mut batch = Vec::with_capacity(size);
            let mut batch_kb = 0.0;
            let mut assign = |batch: &mut Vec<u32>, batch_kb: &mut f64| {
                let mut top = heap.pop().expect("at least one bucket");
                alloc.entry(top.key).or_default().append(batch);
                top.load += *batch_kb;
                *batch_kb = 0.0;
                heap.push(top);
            };
            for e in walk(pop, &order) {
                let MetypeGids { metype: m, gids } = &pop.metype_gids[e];
                for &gid in gids {
                    batch.push(gid);
                    batch_kb += kb[*m];
                    if batch.len() == size {
                        assign(&mut batch, &mut batch_kb);
                    }
                }
            }
            if !batch.is_empty() {
                assign(&mut batch, &mut batch_kb);
            }
            PopulationAllocation {
                name: pop.name.clone(),
                buckets: alloc,
            }
        })
        .collect();
    Allocation {
        ranks: config.ranks,
        cycles: config.cycles,
        populations,
    }
}

/// Indices into `pop.metype_gids` in neurodamus' walk: metype by metype in `order`, a
/// metype's lists in their file order (one sort, not a scan of the lists per metype).
fn walk(pop: &crate::dry_run::Population, order: &[usize]) -> Vec<usize> {
    let mut rank = vec![0usize; order.len()];
    for (i, &m) in order.iter().enumerate() {
        rank[m] = i;
    }
    // A list of a metype not in `order` (none in a checked dry run) is not walked, as by a
    // scan of the lists per metype. Stable: a metype's lists keep their order.
    let mut entries: Vec<usize> = (0..pop.metype_gids.len())
        .filter(|&e| pop.metype_gids[e].metype < rank.len())
        .collect();
    entries.sort_by_key(|&e| rank[pop.metype_gids[e].metype]);
    entries
}

/// The overall statistics that [`crate::Summary::new`] gives for [`balance`]'s allocation
/// (every figure to the last bit: cells are summed in the same order), computed without
/// building the allocation: memory per bucket, not per cell. For the comparison with
/// neurodamus that `ballast dry-run` prints.
pub fn overall_stats(dry_run: &DryRun, config: &BalancerConfig) -> LoadStats {
    let kb = dry_run.metype_cell_kb();
    let mut order: Vec<usize> = (0..kb.len()).collect();
    order.sort_by(|&a, &b| kb[b].total_cmp(&kb[a]));
    let buckets = config.buckets();
    let cycles = config.cycles as usize;
    let index = |b: Bucket| b.rank as usize * cycles + b.cycle as usize;
    let (mut all_cells, mut all_kb) = (vec![0usize; buckets], vec![0.0f64; buckets]);
    let mut heaviest = 0.0f64;
    for pop in &dry_run.populations {
        let size = batch_size(pop.cell_count(), buckets);
        let mut heap: BinaryHeap<Lightest<Bucket>> = (0..config.ranks)
            .flat_map(|rank| (0..config.cycles).map(move |cycle| Bucket { rank, cycle }))
            .map(|key| Lightest { load: 0.0, key })
            .collect();
        // This population's cells and KB per bucket, each bucket's cells summed in the order
        // the allocation lists them (batches in the order they were assigned).
        let (mut cells, mut pop_kb) = (vec![0usize; buckets], vec![0.0f64; buckets]);
        // The weights of the batch's cells as the summary weighs them (their own synapses
        // when known), as runs of (KB, cells), beside the batch's cell count and its load as
        // neurodamus sums it (metype averages).
        let mut runs: Vec<(f64, usize)> = Vec::new();
        let (mut batch_len, mut batch_kb) = (0usize, 0.0f64);
        let mut assign = |runs: &mut Vec<(f64, usize)>, batch_len: &mut usize, batch_kb: &mut f64| {
            let mut top = heap.pop().expect("at least one bucket");
            let b = index(top.key);
            // Cell by cell, as the summary sums the bucket's list.
            let mut sum = pop_kb[b];
            for &(w, n) in runs.iter() {
                for _ in 0..n {
                    sum += w;
                }
            }
            pop_kb[b] = sum;
            cells[b] += *batch_len;
            runs.clear();
            *batch_len = 0;
            top.load += *batch_kb;
            *batch_kb = 0.0;
            heap.push(top);
        };
        for e in walk(pop, &order) {
            let MetypeGids { metype: m, gids } = &pop.metype_gids[e];
            let m = *m;
            match pop.cell_synapses {
                // Every cell weighs its metype's KB: a batch's share of the list at once.
                None => {
                    let w = kb[m];
                    if !gids.is_empty() {
                        heaviest = heaviest.max(w);
                    }
                    let mut left = gids.len();
                    while left > 0 {
                        let take = left.min(size - batch_len);
                        for _ in 0..take {
                            batch_kb += w;
                        }
                        runs.push((w, take));
                        batch_len += take;
                        left -= take;
                        if batch_len == size {
                            assign(&mut runs, &mut batch_len, &mut batch_kb);
                        }
                    }
                }
                Some(_) => {
                    for &gid in gids {
                        let w = dry_run.cell_kb(pop, gid, m);
                        heaviest = heaviest.max(w);
                        runs.push((w, 1));
                        batch_len += 1;
                        batch_kb += kb[m];
                        if batch_len == size {
                            assign(&mut runs, &mut batch_len, &mut batch_kb);
                        }
                    }
                }
            }
        }
        if batch_len > 0 {
            assign(&mut runs, &mut batch_len, &mut batch_kb);
        }
        for b in 0..buckets {
            if cells[b] > 0 {
                all_cells[b] += cells[b];
                all_kb[b] += pop_kb[b];
            }
        }
    }
    let loads: Vec<(Bucket, f64)> = (0..buckets)
        .filter(|&b| all_cells[b] > 0)
        .map(|b| {
            let bucket = Bucket {
                rank: (b / cycles) as u32,
                cycle: (b % cycles) as u32,
            };
            (bucket, all_kb[b])
        })
        .collect();
    LoadStats::from_loads(
        config.ranks,
        config.cycles,
        &loads,
        all_cells.iter().sum(),
        heaviest,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overall_stats_are_the_summary_of_the_allocation() {
        use crate::synthetic::{generate, generate_circuit, CircuitSpec, SyntheticSpec};
        for seed in 0..12u64 {
            let spec = SyntheticSpec {
                cells: 500 + 997 * seed as usize,
                metypes: 3 + 7 * seed as usize,
                populations: 1 + seed as usize % 3,
                seed,
            };
            let dry_run = if seed % 3 == 2 {
                // Per-cell synapse counts: the summary weighs cells by their own.
                let d = generate_circuit(&CircuitSpec {
                    dry_run: spec,
                    synapses: 20_000,
                    ..CircuitSpec::default()
                })
                .unwrap()
                .dry_run;
                assert!(d.has_cell_synapses());
                d
            } else {
                generate(&spec).unwrap()
            };
            for (ranks, cycles) in [(1, 1), (7, 3), (64, 1), (1000, 2)] {
                let config = BalancerConfig::builder()
                    .ranks(ranks)
                    .cycles(cycles)
                    .strategy(crate::Strategy::Neurodamus)
                    .build()
                    .unwrap();
                let expected = crate::Summary::new(&balance(&dry_run, &config), &dry_run).overall;
                assert_eq!(
                    overall_stats(&dry_run, &config),
                    expected,
                    "seed {seed}, {ranks} × {cycles}"
                );
            }
        }
    }

    #[test]
    fn batch_size_matches_python() {
        // max(1, ceil(240 / 8 / 10)) = 3 ; max(1, ceil(120 / 8 / 10)) = 2 ; tiny → 1
        assert_eq!(batch_size(240, 8), 3);
        assert_eq!(batch_size(120, 8), 2);
        assert_eq!(batch_size(3, 64), 1);
        assert_eq!(batch_size(1000, 10), 10);
    }
}
