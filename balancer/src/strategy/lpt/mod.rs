//! Ballast's default balancing: LPT greedy, move/swap refinement, then rank dealing.
//!
//! 1. **Greedy** (Graham's LPT, "Bounds on multiprocessing timing anomalies", SIAM J. Appl.
//!    Math. 17(2), 1969): every cell of every population, heaviest first (ties: population
//!    index, then gid), goes onto the currently lightest of the `ranks × cycles` buckets
//!    (ties: lowest (rank, cycle), as a min-heap gives). Guarantees largest bucket ≤ total/B +
//!    heaviest cell. Populations are balanced jointly: a bucket's load is the sum over
//!    populations. Runs of equal cells are placed in O(1) per cell (see `greedy`); O(M log M)
//!    to order the M metypes, then O(n + B) per run.
//! 2. **Refinement**: while the heaviest bucket can be lowered, move one of its cells to the
//!    lightest bucket, or swap one of its cells with a lighter cell of the lightest bucket,
//!    choosing the transfer closest to half the gap. Each step strictly lowers the heavier of
//!    the two, so the largest bucket never grows. Bounded by `4 × B + 1000` steps. A step
//!    finds its swaps in an index of the pairs of KB classes (runs of equal KB) binned by
//!    their difference, built once in O(C log C + P) for C classes and the P pairs closer
//!    than 9/16 of the first gap: it looks only at the pairs near half its gap, with a few
//!    searches of the two buckets each (galloping from where a position should fall).
//!    Where the index would not pay or fit (buckets under 256 cells on average; over 2^16
//!    classes or too many pairs, as with per-cell synapse counts, where nearly every cell
//!    is its own class), or a step's search exceeds its budget, the step scans both
//!    buckets instead, O(cells of the two).
//! 3. **Rank dealing**: bucket labels are free, so buckets (heaviest first) are dealt to the
//!    rank with the smallest total that still has a free cycle: rank totals — what a rank
//!    holds once all its cycles are built — come out even without touching the buckets.
//!
//! Within a bucket, gids are written in ascending order. Fully deterministic.
use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::allocation::{Allocation, PopulationAllocation};
use crate::dry_run::{DryRun, MetypeGids};
use crate::progress::Progress;
use crate::strategy::BalancerConfig;

mod deal;
mod gather;
mod greedy;
mod refine;
#[cfg(test)]
mod tests;

use deal::deal_to_ranks;
use gather::{gather_beside, Gathered, Slot};
use greedy::{greedy_noting, members_of};
use refine::refine_tracked;

/// One cell to place (the input of [`Order::from_cells`]).
#[derive(Debug, Clone, Copy)]
struct Cell {
    kb: f64,
    population: u32,
    gid: u32,
}

/// A run of cells of equal KB and population in the heaviest-first order, gids ascending.
#[derive(Debug)]
struct Segment<'a> {
    /// Position of its first cell in the order.
    start: usize,
    kb: f64,
    population: u32,
    gids: Cow<'a, [u32]>,
}

/// Every cell, heaviest first; ties by population index, then gid. A cell is named by its
/// position in this order (a `u32`), so that the buckets' lists cost 4 bytes per cell and
/// the order of positions is the order of (KB descending, population, gid). The gids are
/// borrowed from the dry run where a run is one metype's gids, already ascending.
#[derive(Debug)]
struct Order<'a> {
    segments: Vec<Segment<'a>>,
    /// `starts[k] = segments[k].start`.
    starts: Vec<usize>,
    /// `kb_end[k]`: the end position of the cells of `segments[k]`'s KB (runs of one KB are
    /// contiguous: several populations, or several metypes of one KB).
    kb_end: Vec<usize>,
    /// `block[j]`: the segment holding position `j << BLOCK_SHIFT`, so that finding a
    /// position's segment is a short scan (refinement looks KB up in its binary searches).
    block: Vec<u32>,
    /// `kbs[k] = segments[k].kb` (non-increasing).
    kbs: Vec<f64>,
    len: usize,
}

/// Positions per entry of [`Order::block`].
const BLOCK_SHIFT: u32 = 6;

impl<'a> Order<'a> {
    fn new(dry_run: &'a DryRun) -> Order<'a> {
        if dry_run.has_cell_synapses() {
            return Self::per_cell(dry_run);
        }
        // Cells of one metype weigh the same: sort metypes (few), and merge the gids of
        // equal-KB metypes of one population only where there are several.
        let kb = dry_run.metype_cell_kb();
        let mut order: Vec<usize> = (0..kb.len()).collect();
        order.sort_by(|&a, &b| kb[b].total_cmp(&kb[a]));
        // Per population, per metype: its gid lists (a dry run built in code may list a
        // metype twice).
        let mut lists: Vec<Vec<Vec<&'a [u32]>>> = dry_run
            .populations
            .iter()
            .map(|_| vec![Vec::new(); kb.len()])
            .collect();
        for (p, pop) in dry_run.populations.iter().enumerate() {
            for MetypeGids { metype: m, gids } in &pop.metype_gids {
                lists[p][*m].push(gids);
            }
        }
        let mut segments = Vec::new();
        let mut len = 0;
        for group in order.chunk_by(|&a, &b| kb[a] == kb[b]) {
            for (p, lists) in lists.iter().enumerate() {
                let parts: Vec<&[u32]> = group.iter().flat_map(|&m| lists[m].iter().copied()).collect();
                let gids: Cow<[u32]> = match parts.as_slice() {
                    [] => continue,
                    [one] if one.windows(2).all(|w| w[0] < w[1]) => Cow::Borrowed(one),
                    _ => {
                        let mut all = parts.concat();
                        all.sort_unstable();
                        Cow::Owned(all)
                    }
                };
                if gids.is_empty() {
                    continue;
                }
                let n = gids.len();
                segments.push(Segment {
                    start: len,
                    kb: kb[group[0]],
                    population: p as u32,
                    gids,
                });
                len += n;
            }
        }
        Self::finish(segments, len)
    }

    /// Cells of one metype differ: a plain sort, then runs of equal KB and population.
    fn per_cell(dry_run: &DryRun) -> Order<'static> {
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
        let mut segments = Vec::new();
        let mut start = 0;
        for run in cells.chunk_by(|a, b| a.kb.to_bits() == b.kb.to_bits() && a.population == b.population) {
            segments.push(Segment {
                start,
                kb: run[0].kb,
                population: run[0].population,
                gids: Cow::Owned(run.iter().map(|c| c.gid).collect()),
            });
            start += run.len();
        }
        Order::finish(segments, start)
    }

    fn finish(segments: Vec<Segment<'a>>, len: usize) -> Order<'a> {
        let starts: Vec<usize> = segments.iter().map(|s| s.start).collect();
        let mut kb_end = vec![len; segments.len()];
        for k in (0..segments.len().saturating_sub(1)).rev() {
            let next = &segments[k + 1];
            kb_end[k] = if next.kb == segments[k].kb {
                kb_end[k + 1]
            } else {
                next.start
            };
        }
        let mut block = Vec::with_capacity((len >> BLOCK_SHIFT) + 1);
        let mut k = 0;
        for j in 0..len.div_ceil(1 << BLOCK_SHIFT) {
            while k + 1 < starts.len() && starts[k + 1] <= j << BLOCK_SHIFT {
                k += 1;
            }
            block.push(k as u32);
        }
        Order {
            kbs: segments.iter().map(|s| s.kb).collect(),
            segments,
            starts,
            kb_end,
            block,
            len,
        }
    }

    /// The segment holding the cell at position `i`.
    #[inline]
    fn segment_of(&self, i: u32) -> usize {
        let mut k = self.block[(i >> BLOCK_SHIFT) as usize] as usize;
        while k + 1 < self.starts.len() && self.starts[k + 1] <= i as usize {
            k += 1;
        }
        k
    }

    #[inline]
    fn kb(&self, i: u32) -> f64 {
        self.segments[self.segment_of(i)].kb
    }

    /// The first position whose KB is at most `x` (`len` when none): position `i` weighs
    /// more than `x` exactly when `i` is below it.
    fn first_at_most(&self, x: f64) -> u32 {
        let k = self.kbs.partition_point(|&kb| kb > x);
        self.starts.get(k).map_or(self.len, |&s| s) as u32
    }
}

/// Runs the LPT strategy, adding to `progress` (when given, for a progress bar) every cell
/// once when it is placed and once when its gid is in its bucket's list (twice the cell
/// count in the end). Panics when the dry run has 2^32 - 1 cells or more
/// ([`BalancerConfig::check_size`] refuses them first).
pub fn balance(dry_run: &DryRun, config: &BalancerConfig, progress: Option<&Progress>) -> Allocation {
    let unwatched = Progress::new();
    let done = progress.unwrap_or(&unwatched);
    let order = Order::new(dry_run);
    assert!(
        order.len < u32::MAX as usize,
        "lpt balances fewer than 2^32 cells"
    );

    let nbuckets = config.buckets();
    let npop = dry_run.populations.len();
    let (loads, gathered) = if nbuckets <= 1 << 16 {
        place::<u16>(&order, nbuckets, npop, done)
    } else {
        place::<u32>(&order, nbuckets, npop, done)
    };
    let labels = deal_to_ranks(&loads, config.ranks, config.cycles);

    let mut populations: Vec<PopulationAllocation> = dry_run
        .populations
        .iter()
        .map(|p| PopulationAllocation {
            name: p.name.clone(),
            buckets: BTreeMap::new(),
        })
        .collect();
    for (bucket, p, gids) in gathered {
        populations[p].buckets.insert(labels[bucket], gids);
    }
    Allocation {
        ranks: config.ranks,
        cycles: config.cycles,
        populations,
    }
}

/// Greedy and refinement, then the gids of every bucket: bucket loads, and (bucket,
/// population, gids ascending) for every non-empty list. Each position's bucket is noted
/// as `S` (which must hold every bucket index) while it is placed and moved, so gathering
/// the gids needs no pass over the buckets' lists, which are freed first.
fn place<S: Slot>(
    order: &Order,
    nbuckets: usize,
    populations: usize,
    done: &Progress,
) -> (Vec<f64>, Gathered) {
    let mut assign: Vec<S> = vec![S::default(); order.len];
    let mut loads = greedy_noting(order, nbuckets, done, &mut assign);
    let mut members = members_of(&assign, nbuckets);
    let gathered = gather_beside(order, &mut assign, nbuckets, populations, || {
        let mut moved = Vec::new();
        refine_tracked(order, &mut loads, &mut members, &mut moved);
        drop(members);
        moved
    });
    done.add(order.len as u64);
    (loads, gathered)
}
