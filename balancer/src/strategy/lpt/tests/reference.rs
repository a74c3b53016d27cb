//! The straightforward implementation (cells by value, a scan for the heaviest and
//! lightest bucket each step, a map lookup per cell), as the optimised one must match.
use std::collections::{BTreeMap, BinaryHeap};

use crate::allocation::{Allocation, PopulationAllocation};
use crate::dry_run::{DryRun, MetypeGids};
use crate::strategy::{BalancerConfig, Lightest};

/// One cell to place.
#[derive(Debug, Clone, Copy)]
struct Cell {
    kb: f64,
    population: u32,
    gid: u32,
}

/// Runs the LPT strategy (the cell-by-cell implementation).
pub(super) fn balance(dry_run: &DryRun, config: &BalancerConfig) -> Allocation {
    let cells = cells_heaviest_first(dry_run);

    let nbuckets = config.buckets();
    let (mut loads, mut members) = greedy(&cells, nbuckets);
    refine(&mut loads, &mut members);
    let labels = super::super::deal_to_ranks(&loads, config.ranks, config.cycles);

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
            cells.extend(pop.cells().map(|c| Cell {
                kb: dry_run.cell_kb(pop, c.gid, c.metype),
                population: p as u32,
                gid: c.gid,
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
        for MetypeGids { metype: m, gids } in &pop.metype_gids {
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
    for c in cells.iter().filter(|c| c.kb != 0.0) {
        let mut top = heap.peek_mut().expect("at least one bucket");
        top.load += c.kb;
        members[top.key].push(*c);
    }
    let mut loads = vec![0.0; nbuckets];
    for e in heap {
        loads[e.key] = e.load;
    }
    // Cells of 0 KB: to the bucket of fewest cells, then lightest, then lowest index.
    for c in cells.iter().filter(|c| c.kb == 0.0) {
        let b = super::fewest_cells(&members, &loads);
        members[b].push(*c);
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
