//! Ballast's default balancing: LPT greedy, move/swap refinement, then rank dealing.
//!
//! 1. **Greedy** (Graham's LPT, "Bounds on multiprocessing timing anomalies", SIAM J. Appl.
//!    Math. 17(2), 1969): every cell of every population, heaviest first (ties: population
//!    index, then gid), goes onto the currently lightest of the `ranks × cycles` buckets
//!    (min-heap; ties: lowest (rank, cycle)). Guarantees largest bucket ≤ total/B + heaviest
//!    cell. Populations are balanced jointly: a bucket's load is the sum over populations.
//!    O(n log n + n log B).
//! 2. **Refinement**: while the heaviest bucket can be lowered, move one of its cells to the
//!    lightest bucket, or swap one of its cells with a lighter cell of the lightest bucket,
//!    choosing the transfer closest to half the gap. Each step strictly lowers the heavier of
//!    the two, so the largest bucket never grows. Bounded by `4 × B + 1000` steps.
//! 3. **Rank dealing**: bucket labels are free, so buckets (heaviest first) are dealt to the
//!    rank with the smallest total that still has a free cycle: rank totals — what a rank
//!    holds once all its cycles are built — come out even without touching the buckets.
//!
//! Within a bucket, gids are written in ascending order. Fully deterministic.
use std::collections::{BTreeMap, BinaryHeap};

use crate::allocation::{Allocation, Bucket, PopulationAllocation};
use crate::dryrun::DryRun;
use crate::strategy::{BalancerConfig, Lightest};

/// One cell to place.
#[derive(Debug, Clone, Copy)]
struct Cell {
    kb: f64,
    population: u32,
    gid: u32,
}

/// Runs the LPT strategy.
pub fn balance(dry_run: &DryRun, config: &BalancerConfig) -> Allocation {
    let cells = cells_heaviest_first(dry_run);

    let nbuckets = config.buckets();
    let (mut loads, mut members) = greedy(&cells, nbuckets);
    refine(&mut loads, &mut members);
    let labels = deal_to_ranks(&loads, config.ranks, config.cycles);

    let mut populations: Vec<PopulationAllocation> = dry_run
        .populations
        .iter()
        .map(|p| PopulationAllocation {
            name: p.name.clone(),
            buckets: BTreeMap::new(),
        })
        .collect();
    for (b, items) in members.iter().enumerate() {
        for c in items {
            populations[c.population as usize]
                .buckets
                .entry(labels[b])
                .or_default()
                .push(c.gid);
        }
    }
    for p in &mut populations {
        for gids in p.buckets.values_mut() {
            gids.sort_unstable();
        }
    }
    Allocation {
        ranks: config.ranks,
        cycles: config.cycles,
        populations,
    }
}

/// Every cell, heaviest first; ties by population index, then gid. Cells of one metype
/// weigh the same, so this sorts metypes (few) and only the cells of equal-KB metypes
/// among themselves, instead of comparison-sorting millions of cells.
fn cells_heaviest_first(dry_run: &DryRun) -> Vec<Cell> {
    if dry_run.has_cell_synapses() {
        // Cells of one metype differ: a plain sort.
        let mut cells: Vec<Cell> = Vec::with_capacity(dry_run.cell_count());
        for (p, pop) in dry_run.populations.iter().enumerate() {
            cells.extend(pop.cells().map(|(gid, m)| Cell {
                kb: dry_run.cell_kb(pop, gid, m),
                population: p as u32,
                gid,
            }));
        }
        cells.sort_unstable_by(|a, b| {
            b.kb.total_cmp(&a.kb)
                .then(a.population.cmp(&b.population))
                .then(a.gid.cmp(&b.gid))
        });
        return cells;
    }
    let kb = dry_run.metype_cell_kb();
    let mut per_metype: Vec<Vec<Cell>> = vec![Vec::new(); kb.len()];
    for (p, pop) in dry_run.populations.iter().enumerate() {
        for (m, gids) in &pop.metype_gids {
            per_metype[*m].extend(gids.iter().map(|&gid| Cell {
                kb: kb[*m],
                population: p as u32,
                gid,
            }));
        }
    }
    let mut order: Vec<usize> = (0..kb.len()).collect();
    order.sort_by(|&a, &b| kb[b].total_cmp(&kb[a]));
    let mut cells = Vec::with_capacity(dry_run.cell_count());
    for group in order.chunk_by(|&a, &b| kb[a] == kb[b]) {
        let start = cells.len();
        for &m in group {
            cells.append(&mut per_metype[m]);
        }
        cells[start..].sort_unstable_by_key(|c| (c.population, c.gid));
    }
    cells
}

/// LPT list scheduling. Returns bucket loads and, per bucket, its cells in descending KB
/// order (the order they were placed in). Cells are stored by value so that refinement
/// scans contiguous memory.
fn greedy(cells: &[Cell], nbuckets: usize) -> (Vec<f64>, Vec<Vec<Cell>>) {
    let mut heap: BinaryHeap<Lightest<usize>> =
        (0..nbuckets).map(|key| Lightest { load: 0.0, key }).collect();
    let mut members = vec![Vec::new(); nbuckets];
    for c in cells {
        let mut top = heap.peek_mut().expect("at least one bucket");
        top.load += c.kb;
        members[top.key].push(*c);
    }
    let mut loads = vec![0.0; nbuckets];
    for e in heap {
        loads[e.key] = e.load;
    }
    (loads, members)
}

/// The best transfer found from the heaviest bucket to the lightest.
enum Transfer {
    /// Move the cell at this position of the heavy bucket.
    Move(usize),
    /// Swap the cells at these positions (heavy, light).
    Swap(usize, usize),
}

/// Moves and swaps between the heaviest and the lightest bucket while that lowers the
/// heavier of the two. `members[b]` stays sorted by descending KB.
fn refine(loads: &mut [f64], members: &mut [Vec<Cell>]) {
    if loads.len() < 2 {
        return;
    }
    let kb = |c: &Cell| c.kb;
    let max_steps = 4 * loads.len() + 1000;
    for _ in 0..max_steps {
        let (mut h, mut l) = (0, 0);
        for b in 1..loads.len() {
            if loads[b] > loads[h] {
                h = b;
            }
            if loads[b] < loads[l] {
                l = b;
            }
        }
        let gap = loads[h] - loads[l];
        // Tolerance so float noise cannot make two buckets trade the same cell forever.
        let eps = 1e-9 * loads[h].abs().max(1.0);
        if gap <= 2.0 * eps {
            break;
        }
        let half = gap / 2.0;
        let useful = |d: f64| d > eps && d < gap - eps;
        let mut best: Option<(f64, Transfer)> = None;
        let mut consider = |d: f64, t: Transfer| {
            if useful(d)
                && best
                    .as_ref()
                    .is_none_or(|(bd, _)| (d - half).abs() < (bd - half).abs())
            {
                best = Some((d, t));
            }
        };
        // Move: the cell of the heavy bucket closest to half the gap.
        let heavy = &members[h];
        let pos = heavy.partition_point(|c| kb(c) > half);
        for p in [pos.wrapping_sub(1), pos] {
            if let Some(c) = heavy.get(p) {
                consider(kb(c), Transfer::Move(p));
            }
        }
        // Swap: for each distinct KB `a` in the heavy bucket, the light cell `b` closest to
        // `a - half`, so the transfer `a - b` is closest to half the gap.
        let light = &members[l];
        let mut p = 0;
        while p < heavy.len() {
            let a = kb(&heavy[p]);
            let target = a - half;
            let q = light.partition_point(|c| kb(c) > target);
            for q in [q.wrapping_sub(1), q] {
                if let Some(c) = light.get(q) {
                    consider(a - kb(c), Transfer::Swap(p, q));
                }
            }
            while p < heavy.len() && kb(&heavy[p]) == a {
                p += 1;
            }
        }
        let Some((d, transfer)) = best else { break };
        let insert_sorted = |v: &mut Vec<Cell>, c: Cell| {
            let key = |x: &Cell| (std::cmp::Reverse(x.kb.to_bits()), x.population, x.gid);
            let at = v.partition_point(|x| key(x) < key(&c));
            v.insert(at, c);
        };
        match transfer {
            Transfer::Move(p) => {
                let i = members[h].remove(p);
                insert_sorted(&mut members[l], i);
            }
            Transfer::Swap(p, q) => {
                let i = members[h].remove(p);
                let j = members[l].remove(q);
                insert_sorted(&mut members[l], i);
                insert_sorted(&mut members[h], j);
            }
        }
        loads[h] -= d;
        loads[l] += d;
    }
}

/// Deals buckets (heaviest first) to the rank with the smallest total that still has a free
/// cycle. Returns the (rank, cycle) label of every bucket.
fn deal_to_ranks(loads: &[f64], ranks: u32, cycles: u32) -> Vec<Bucket> {
    let mut order: Vec<usize> = (0..loads.len()).collect();
    order.sort_by(|&a, &b| loads[b].total_cmp(&loads[a]).then(a.cmp(&b)));
    let mut heap: BinaryHeap<Lightest<usize>> = (0..ranks as usize)
        .map(|key| Lightest { load: 0.0, key })
        .collect();
    let mut used = vec![0u32; ranks as usize];
    let mut labels = vec![Bucket { rank: 0, cycle: 0 }; loads.len()];
    for b in order {
        let mut top = heap.pop().expect("a rank with a free cycle");
        labels[b] = Bucket {
            rank: top.key as u32,
            cycle: used[top.key],
        };
        used[top.key] += 1;
        top.load += loads[b];
        if used[top.key] < cycles {
            heap.push(top);
        }
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(kbs: &[f64]) -> Vec<Cell> {
        kbs.iter()
            .enumerate()
            .map(|(g, &kb)| Cell {
                kb,
                population: 0,
                gid: g as u32,
            })
            .collect()
    }

    #[test]
    fn refinement_fixes_what_greedy_leaves() {
        // LPT on {3,3,2,2,2} into 2 buckets gives 7 / 5; the optimum is 6 / 6.
        let c = cells(&[3.0, 3.0, 2.0, 2.0, 2.0]);
        let (mut loads, mut members) = greedy(&c, 2);
        let mut sorted = loads.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(sorted, vec![5.0, 7.0]);
        refine(&mut loads, &mut members);
        assert_eq!(loads, vec![6.0, 6.0]);
        for (b, m) in members.iter().enumerate() {
            assert_eq!(m.iter().map(|c| c.kb).sum::<f64>(), loads[b]);
        }
    }

    #[test]
    fn dealing_evens_rank_totals() {
        // Buckets 10, 9, 2, 1 into 2 ranks × 2 cycles: {10, 1} and {9, 2}.
        let labels = deal_to_ranks(&[10.0, 9.0, 2.0, 1.0], 2, 2);
        assert_eq!(labels[0].rank, labels[3].rank);
        assert_eq!(labels[1].rank, labels[2].rank);
        assert_ne!(labels[0].rank, labels[1].rank);
        assert_ne!(labels[0].cycle, labels[3].cycle);
    }
}
