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
use crate::dryrun::DryRun;
use crate::strategy::{BalancerConfig, Lightest};

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
            for &m in &order {
                for (_, gids) in pop.metype_gids.iter().filter(|(pm, _)| *pm == m) {
                    for &gid in gids {
                        batch.push(gid);
                        batch_kb += kb[m];
                        if batch.len() == size {
                            assign(&mut batch, &mut batch_kb);
                        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_size_matches_python() {
        // max(1, ceil(240 / 8 / 10)) = 3 ; max(1, ceil(120 / 8 / 10)) = 2 ; tiny → 1
        assert_eq!(batch_size(240, 8), 3);
        assert_eq!(batch_size(120, 8), 2);
        assert_eq!(batch_size(3, 64), 1);
        assert_eq!(batch_size(1000, 10), 10);
    }
}
