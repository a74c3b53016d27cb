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
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::allocation::{Allocation, Bucket, PopulationAllocation};
use crate::dryrun::DryRun;
use crate::strategy::{BalancerConfig, Lightest};

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
            for (m, gids) in &pop.metype_gids {
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

/// Runs the LPT strategy. Panics when the dry run has 2^32 - 1 cells or more
/// ([`BalancerConfig::check_size`] refuses them first).
pub fn balance(dry_run: &DryRun, config: &BalancerConfig) -> Allocation {
    balance_counted(dry_run, config, &AtomicU64::new(0))
}

/// [`balance`], adding to `done` every cell once when it is placed and once when its gid
/// is in its bucket's list (twice the cell count in the end), for a progress bar.
pub fn balance_counted(dry_run: &DryRun, config: &BalancerConfig, done: &AtomicU64) -> Allocation {
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
    done: &AtomicU64,
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
    done.fetch_add(order.len as u64, Ordering::Relaxed);
    (loads, gathered)
}

/// (bucket, population, gids ascending) for every non-empty list of a bucket.
type Gathered = Vec<(usize, usize, Vec<u32>)>;

/// A bucket index as stored in the tables of [`gather`].
trait Slot: Copy + Default + Send + Sync {
    fn from_bucket(b: usize) -> Self;
    fn bucket(self) -> usize;
}

impl Slot for u16 {
    #[inline]
    fn from_bucket(b: usize) -> u16 {
        b as u16
    }
    #[inline]
    fn bucket(self) -> usize {
        self as usize
    }
}

impl Slot for u32 {
    #[inline]
    fn from_bucket(b: usize) -> u32 {
        b as u32
    }
    #[inline]
    fn bucket(self) -> usize {
        self as usize
    }
}

/// Per population of the order: its cells and gid span (a segment's gids are ascending: its
/// last is its largest), and whether its gids are dense (largest gid below twice its cells
/// plus 4096).
struct Spans {
    cells: Vec<usize>,
    span: Vec<usize>,
}

impl Spans {
    fn new(order: &Order, populations: usize) -> Spans {
        let mut cells = vec![0usize; populations];
        let mut span = vec![0usize; populations];
        for s in &order.segments {
            let p = s.population as usize;
            cells[p] += s.gids.len();
            if let Some(&last) = s.gids.last() {
                span[p] = span[p].max(last as usize + 1);
            }
        }
        Spans { cells, span }
    }

    fn dense(&self, p: usize) -> bool {
        self.span[p] <= self.cells[p].saturating_mul(2).saturating_add(4096)
    }

    /// Bytes of the dense populations' [`GidTable`]s.
    fn table_bytes<S>(&self, nbuckets: usize) -> usize {
        (0..self.span.len())
            .filter(|&p| self.dense(p))
            .map(|p| self.span[p] * (std::mem::size_of::<S>() + 1) + nbuckets * 8)
            .sum()
    }

    /// Threads gathering side by side: the machine's cores, at most one per population,
    /// and 1 when the tables together would take more than [`PARALLEL_TABLES`] bytes.
    fn threads<S>(&self, nbuckets: usize) -> usize {
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(self.span.len());
        if self.table_bytes::<S>(nbuckets) > PARALLEL_TABLES {
            1
        } else {
            threads
        }
    }
}

/// A dense population's gids by gid: each one's bucket, which are present, and the count
/// per bucket.
struct GidTable<S> {
    bucket: Vec<S>,
    present: Vec<u64>,
    counts: Vec<usize>,
}

impl<S: Slot> GidTable<S> {
    /// Population `p`'s table from `assign` (each position's bucket), `span` its gid span.
    fn new(order: &Order, assign: &[S], p: usize, span: usize, nbuckets: usize) -> GidTable<S> {
        let mut bucket: Vec<S> = vec![S::default(); span];
        let mut present: Vec<u64> = vec![0; span.div_ceil(64)];
        let mut counts = vec![0usize; nbuckets];
        for s in order.segments.iter().filter(|s| s.population as usize == p) {
            for (&gid, &slot) in s.gids.iter().zip(&assign[s.start..s.start + s.gids.len()]) {
                bucket[gid as usize] = slot;
                present[gid as usize >> 6] |= 1 << (gid & 63);
                counts[slot.bucket()] += 1;
            }
        }
        GidTable {
            bucket,
            present,
            counts,
        }
    }

    /// Moves `gid` from its bucket to bucket `to`.
    fn reassign(&mut self, gid: u32, to: usize) {
        let slot = &mut self.bucket[gid as usize];
        self.counts[slot.bucket()] -= 1;
        self.counts[to] += 1;
        *slot = S::from_bucket(to);
    }

    /// Every bucket's list, gids ascending: a pass over the gids in ascending order deals
    /// them to their buckets' lists, each allocated at its exact length.
    fn lists(self) -> Vec<Vec<u32>> {
        let mut lists: Vec<Vec<u32>> = self.counts.iter().map(|&n| Vec::with_capacity(n)).collect();
        for (w, &word) in self.present.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let gid = (w << 6) | bits.trailing_zeros() as usize;
                bits &= bits - 1;
                lists[self.bucket[gid].bucket()].push(gid as u32);
            }
        }
        lists
    }
}

/// Population `p`'s lists, gids ascending, where its gids are sparse: dealt straight to the
/// lists, each then sorted.
fn sparse_lists<S: Slot>(order: &Order, assign: &[S], p: usize, nbuckets: usize) -> Vec<Vec<u32>> {
    let mut lists = vec![Vec::new(); nbuckets];
    for s in order.segments.iter().filter(|s| s.population as usize == p) {
        for (&gid, &slot) in s.gids.iter().zip(&assign[s.start..s.start + s.gids.len()]) {
            lists[slot.bucket()].push(gid);
        }
    }
    for l in &mut lists {
        l.sort_unstable();
        l.shrink_to_fit();
    }
    lists
}

/// (bucket, population, gids) for every non-empty list of population `p`: from its
/// [`GidTable`] where its gids are dense, else dealt from `assign` ([`sparse_lists`]).
fn lists_of<S: Slot>(
    order: &Order,
    assign: &[S],
    p: usize,
    table: Option<GidTable<S>>,
    nbuckets: usize,
) -> Gathered {
    let lists = match table {
        Some(table) => table.lists(),
        None => sparse_lists(order, assign, p, nbuckets),
    };
    lists
        .into_iter()
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
        .map(|(b, l)| (b, p, l))
        .collect()
}

/// The gids of every bucket, per population, ascending, from `assign` (each position's
/// bucket): (bucket, population, gids) for every non-empty list.
///
/// Population by population, one pass over the positions in order reads each gid beside
/// its bucket (no pass reads the gids in a bucket's order, which jumps across the dry run's
/// arrays). A population whose gids are dense notes them in a [`GidTable`] indexed by gid;
/// other populations' gids are dealt straight to the lists and each list sorted. Several
/// populations are gathered side by side on the machine's cores while their tables together
/// take at most [`PARALLEL_TABLES`] bytes (beyond that, one at a time: memory first).
#[cfg(test)]
fn gather<S: Slot>(order: &Order, assign: &[S], nbuckets: usize, populations: usize) -> Gathered {
    let mut assign = assign.to_vec();
    gather_beside(order, &mut assign, nbuckets, populations, Vec::new)
}

/// [`gather`] of `assign` once `refine` has run, which returns the (position, bucket) moves
/// to make in `assign` (in order; a position may move more than once). Where the populations
/// are gathered side by side, their tables are built from `assign` as it is on another
/// thread while `refine` runs on this one (it reads only the order: the second core is
/// otherwise idle then), and the moves are made in both afterwards.
fn gather_beside<S: Slot>(
    order: &Order,
    assign: &mut [S],
    nbuckets: usize,
    populations: usize,
    refine: impl FnOnce() -> Vec<(u32, usize)>,
) -> Gathered {
    let spans = Spans::new(order, populations);
    let threads = spans.threads::<S>(nbuckets);
    if threads < 2 {
        for (i, b) in refine() {
            assign[i as usize] = S::from_bucket(b);
        }
        let assign = &*assign;
        return (0..populations)
            .flat_map(|p| {
                let table = spans
                    .dense(p)
                    .then(|| GidTable::new(order, assign, p, spans.span[p], nbuckets));
                lists_of(order, assign, p, table, nbuckets)
            })
            .collect();
    }
    // The tables from `assign` as the greedy left it: claimed population by population by
    // the other thread while `refine` runs, and by this one too once it is done.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let claim = |before: &[S]| {
        let mut built = Vec::new();
        loop {
            let p = next.fetch_add(1, Ordering::Relaxed);
            if p >= populations {
                return built;
            }
            if spans.dense(p) {
                built.push((p, GidTable::new(order, before, p, spans.span[p], nbuckets)));
            }
        }
    };
    let (moved, built) = std::thread::scope(|s| {
        let before = &*assign;
        let claim = &claim;
        let side = crate::spawn::side(s, move || claim(before));
        let moved = refine();
        let mut built = claim(before);
        built.extend(side.join());
        (moved, built)
    });
    let mut tables: Vec<Option<GidTable<S>>> = (0..populations).map(|_| None).collect();
    for (p, table) in built {
        tables[p] = Some(table);
    }
    for (i, b) in moved {
        let k = order.segment_of(i);
        let s = &order.segments[k];
        if let Some(table) = &mut tables[s.population as usize] {
            table.reassign(s.gids[i as usize - s.start], b);
        }
        assign[i as usize] = S::from_bucket(b);
    }
    let assign = &*assign;
    // A spawned thread's lists come from its own allocator arena: grown at once.
    let warm = (0..populations)
        .map(|p| spans.cells[p] * 4 + nbuckets * 32)
        .max()
        .unwrap_or(0);
    let mut parts: Vec<Vec<(usize, Option<GidTable<S>>)>> = (0..threads).map(|_| Vec::new()).collect();
    for (p, table) in tables.into_iter().enumerate() {
        parts[p % threads].push((p, table));
    }
    let spawned = threads - 1;
    each_on_a_thread(parts.into_iter().enumerate().collect(), |(t, part)| {
        if t < spawned {
            crate::arena::warm(warm);
        }
        part.into_iter()
            .flat_map(|(p, table)| lists_of(order, assign, p, table, nbuckets))
            .collect::<Vec<_>>()
    })
    .concat()
}

/// Largest total of [`gather`]'s per-population tables gathered side by side (each thread
/// also allocates its populations' lists in its own allocator arena, which at whole-brain
/// sizes would keep the memory the buckets' lists freed from being reused).
const PARALLEL_TABLES: usize = 64 << 20;

/// Most threads of [`members_of`].
const MAX_THREADS: usize = 8;

/// `f` of each item, each on a thread of its own (the last on this one), in item order.
fn each_on_a_thread<T: Send, R: Send>(mut items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let Some(last) = items.pop() else {
        return Vec::new();
    };
    if items.is_empty() {
        return vec![f(last)];
    }
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = items
            .into_iter()
            .map(|t| crate::spawn::side(s, move || f(t)))
            .collect();
        let mine = f(last);
        let mut out: Vec<R> = handles.into_iter().map(crate::spawn::Side::join).collect();
        out.push(mine);
        out
    })
}

/// A list per bucket, as long as its counts over all parts (`counts[part][bucket]`).
fn exact_lists(counts: &[Vec<u32>], nbuckets: usize) -> Vec<Vec<u32>> {
    (0..nbuckets)
        .map(|b| vec![0u32; counts.iter().map(|c| c[b] as usize).sum()])
        .collect()
}

/// `lists` cut at `counts`: per part, its slice of each bucket's list, in part order.
fn split_lists<'a>(lists: &'a mut [Vec<u32>], counts: &[Vec<u32>]) -> Vec<Vec<&'a mut [u32]>> {
    let mut parts: Vec<Vec<&mut [u32]>> = counts.iter().map(|_| Vec::with_capacity(lists.len())).collect();
    for (b, list) in lists.iter_mut().enumerate() {
        let mut rest: &mut [u32] = list;
        for (part, c) in parts.iter_mut().zip(counts) {
            let (mine, tail) = rest.split_at_mut(c[b] as usize);
            part.push(mine);
            rest = tail;
        }
    }
    parts
}

/// LPT list scheduling. Returns bucket loads and, per bucket, the positions of its cells in
/// ascending order (descending KB, the order they were placed in).
///
/// Every cell goes onto the lightest bucket, ties to the lowest index. The buckets are kept
/// as two sequences, each sorted by (load, index): `fresh`, those not yet picked during the
/// current segment, and `placed`, a queue of those that were, in the order they were
/// picked. The lightest bucket is the lighter of the two heads, so a cell costs one
/// comparison instead of a heap or tree update. Within a segment every cell weighs the
/// same and the picks come in non-decreasing (load, index) order, so a picked bucket's new
/// load is at least the queue's last (adding one weight is monotone under rounding); when
/// rounding makes it equal to a higher index's, it is moved back to its place. Both
/// sequences stay sorted, so the result is exactly that of a priority queue over (load,
/// index). At the end of a segment the two are merged into the next segment's `fresh`.
#[cfg(test)]
fn greedy(order: &Order, nbuckets: usize, done: &AtomicU64) -> (Vec<f64>, Vec<Vec<u32>>) {
    let mut assign = vec![0u32; order.len];
    let loads = greedy_noting(order, nbuckets, done, &mut assign);
    (loads, members_of(&assign, nbuckets))
}

/// [`greedy`]'s loads, noting each position's bucket in `assign` (`order.len` long) instead
/// of appending it to its bucket's list: the lists are built afterwards on all cores
/// ([`members_of`]), which halves the time of this loop, the one that cannot be shared.
#[inline(never)]
fn greedy_noting<S: Slot>(order: &Order, nbuckets: usize, done: &AtomicU64, assign: &mut [S]) -> Vec<f64> {
    assert_eq!(assign.len(), order.len, "a bucket slot per position");
    let mut loads = vec![0.0; nbuckets];
    // All loads are 0: index order.
    let mut fresh: Vec<u32> = (0..nbuckets as u32).collect();
    let mut placed = Ring::new(nbuckets);
    let mut merged: Vec<u32> = Vec::with_capacity(nbuckets);
    for s in &order.segments {
        let w = s.kb;
        if w == 0.0 {
            // Placed by count below ([`spread_weightless`]); no load changes.
            continue;
        }
        let mut next = 0;
        for slot in &mut assign[s.start..s.start + s.gids.len()] {
            let from_fresh =
                next < fresh.len() && placed.front().is_none_or(|q| lighter(&loads, fresh[next], q));
            let b = if from_fresh {
                next += 1;
                fresh[next - 1]
            } else {
                placed.pop_front()
            };
            loads[b as usize] += w;
            *slot = S::from_bucket(b as usize);
            placed.push_sorted(&loads, b);
        }
        // The next segment's fresh sequence: both merged by (load, index).
        merged.clear();
        let rest = &fresh[next..];
        // The buckets not picked that are lighter than every picked one, at once.
        let mut j = placed
            .front()
            .map_or(rest.len(), |q| rest.partition_point(|&b| lighter(&loads, b, q)));
        let mut k = 0;
        merged.extend_from_slice(&rest[..j]);
        while j < rest.len() && k < placed.len {
            if lighter(&loads, rest[j], placed.get(k)) {
                merged.push(rest[j]);
                j += 1;
            } else {
                merged.push(placed.get(k));
                k += 1;
            }
        }
        merged.extend_from_slice(&rest[j..]);
        merged.extend((k..placed.len).map(|k| placed.get(k)));
        std::mem::swap(&mut fresh, &mut merged);
        placed.clear();
        done.fetch_add(s.gids.len() as u64, Ordering::Relaxed);
    }
    if order.segments.iter().any(|s| s.kb == 0.0) {
        spread_weightless(order, &loads, done, assign);
    }
    loads
}

/// Places the cells of 0 KB (metype memory 0, or a figure below the smallest f64), which
/// change no load: by (load, index) alone they would all go to one bucket, leaving others
/// empty. Each goes instead to a bucket with the fewest cells (ties: lightest, then lowest
/// index), as `rebalance-corenrn` spreads groups of 0 bytes. Only called when there are
/// such cells: the greedy's order for every other cell is unchanged.
#[cold]
fn spread_weightless<S: Slot>(order: &Order, loads: &[f64], done: &AtomicU64, assign: &mut [S]) {
    let mut count = vec![0u32; loads.len()];
    for s in order.segments.iter().filter(|s| s.kb != 0.0) {
        for slot in &assign[s.start..s.start + s.gids.len()] {
            count[slot.bucket()] += 1;
        }
    }
    // Loads are sums of non-negative KB: their bits order them.
    let mut heap: BinaryHeap<std::cmp::Reverse<(u32, u64, u32)>> = (0..loads.len())
        .map(|b| std::cmp::Reverse((count[b], loads[b].to_bits(), b as u32)))
        .collect();
    for s in order.segments.iter().filter(|s| s.kb == 0.0) {
        for slot in &mut assign[s.start..s.start + s.gids.len()] {
            let std::cmp::Reverse((n, load, b)) = heap.pop().expect("at least one bucket");
            *slot = S::from_bucket(b as usize);
            heap.push(std::cmp::Reverse((n + 1, load, b)));
        }
        done.fetch_add(s.gids.len() as u64, Ordering::Relaxed);
    }
}

/// Each bucket's positions, ascending, from `assign` (each position's bucket): what the
/// greedy would have appended, list by list. The positions are cut into one range per core;
/// each range's cells are counted per bucket, every list is allocated at its exact length and
/// split at those counts, and each range fills its parts on its own thread.
fn members_of<S: Slot>(assign: &[S], nbuckets: usize) -> Vec<Vec<u32>> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_THREADS)
        .min(assign.len() / MEMBERS_PER_THREAD + 1);
    let size = assign.len().div_ceil(threads).max(1);
    let ranges: Vec<(usize, &[S])> = assign
        .chunks(size)
        .enumerate()
        .map(|(k, r)| (k * size, r))
        .collect();
    let counts = each_on_a_thread(ranges.clone(), |(_, range)| {
        let mut counts = vec![0u32; nbuckets];
        for s in range {
            counts[s.bucket()] += 1;
        }
        counts
    });
    let mut members = exact_lists(&counts, nbuckets);
    let dests = split_lists(&mut members, &counts);
    each_on_a_thread(
        ranges.into_iter().zip(dests).collect(),
        |((start, range), mut dest)| {
            let mut next = vec![0u32; nbuckets];
            for (i, s) in range.iter().enumerate() {
                let b = s.bucket();
                dest[b][next[b] as usize] = (start + i) as u32;
                next[b] += 1;
            }
        },
    );
    members
}

/// Fewest positions per thread of [`members_of`] (below, a thread costs more than it saves).
const MEMBERS_PER_THREAD: usize = 1 << 16;

/// Whether bucket `a` comes before bucket `b` in (load, index) order.
#[inline]
fn lighter(loads: &[f64], a: u32, b: u32) -> bool {
    let (x, y) = (loads[a as usize], loads[b as usize]);
    x < y || (x == y && a < b)
}

/// A queue of bucket indices sorted by (load, index), in a ring of fixed capacity (every
/// bucket is in it at most once).
struct Ring {
    buf: Vec<u32>,
    head: usize,
    len: usize,
}

impl Ring {
    fn new(capacity: usize) -> Ring {
        Ring {
            buf: vec![0; capacity.max(1)],
            head: 0,
            len: 0,
        }
    }

    #[inline]
    fn slot(&self, k: usize) -> usize {
        let i = self.head + k;
        if i >= self.buf.len() {
            i - self.buf.len()
        } else {
            i
        }
    }

    #[inline]
    fn get(&self, k: usize) -> u32 {
        self.buf[self.slot(k)]
    }

    #[inline]
    fn front(&self) -> Option<u32> {
        (self.len > 0).then(|| self.buf[self.head])
    }

    #[inline]
    fn pop_front(&mut self) -> u32 {
        let b = self.buf[self.head];
        self.head = self.slot(1);
        self.len -= 1;
        b
    }

    /// Appends `b`, then moves it back past the entries it comes before in (load, index)
    /// order.
    #[inline]
    fn push_sorted(&mut self, loads: &[f64], b: u32) {
        let mut k = self.len;
        self.len += 1;
        while k > 0 {
            let prev = self.get(k - 1);
            if lighter(loads, prev, b) {
                break;
            }
            let at = self.slot(k);
            self.buf[at] = prev;
            k -= 1;
        }
        let at = self.slot(k);
        self.buf[at] = b;
    }

    fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }
}

/// The heaviest and the lightest bucket (the first of several equal ones, as a scan from
/// bucket 0 finds them), kept in two tournament trees updated in O(log B) per change.
struct Extremes {
    size: usize,
    /// Node `n` holds the index of the heaviest (lightest) bucket below it; leaves from `size`.
    max: Vec<u32>,
    min: Vec<u32>,
}

impl Extremes {
    fn new(loads: &[f64]) -> Extremes {
        let size = loads.len().next_power_of_two();
        let mut e = Extremes {
            size,
            max: vec![u32::MAX; 2 * size],
            min: vec![u32::MAX; 2 * size],
        };
        for b in 0..loads.len() {
            e.max[size + b] = b as u32;
            e.min[size + b] = b as u32;
        }
        for n in (1..size).rev() {
            e.pull(loads, n);
        }
        e
    }

    /// The winner of two children: the heavier (lighter), the left one on a tie.
    fn pull(&mut self, loads: &[f64], n: usize) {
        let pick = |a: u32, b: u32, better: fn(f64, f64) -> bool| -> u32 {
            match (a, b) {
                (u32::MAX, x) | (x, u32::MAX) => x,
                (a, b) if better(loads[b as usize], loads[a as usize]) => b,
                (a, _) => a,
            }
        };
        self.max[n] = pick(self.max[2 * n], self.max[2 * n + 1], |x, y| x > y);
        self.min[n] = pick(self.min[2 * n], self.min[2 * n + 1], |x, y| x < y);
    }

    fn update(&mut self, loads: &[f64], b: usize) {
        let mut n = (self.size + b) / 2;
        while n >= 1 {
            self.pull(loads, n);
            n /= 2;
        }
    }

    fn heaviest(&self) -> usize {
        self.max[1] as usize
    }

    fn lightest(&self) -> usize {
        self.min[1] as usize
    }
}

/// The best transfer found from the heaviest bucket to the lightest.
#[derive(Clone, Copy)]
enum Transfer {
    /// Move the cell at this position of the heavy bucket.
    Move(usize),
    /// Swap the cells at these positions (heavy, light).
    Swap(usize, usize),
}

/// The best transfer offered so far: the smallest `|d - half|` among useful ones, the
/// lowest `key` (the scan's order) among equal ones. Offered in the scan's order, that is
/// the scan's rule: a later candidate wins only when strictly closer.
struct Best {
    half: f64,
    gap: f64,
    eps: f64,
    /// (`|d - half|`, key, d, transfer).
    found: Option<(f64, u64, f64, Transfer)>,
}

impl Best {
    /// Whether transferring `d` lowers the heavier of the two buckets (by more than noise).
    #[inline]
    fn useful(&self, d: f64) -> bool {
        d > self.eps && d < self.gap - self.eps
    }

    #[inline]
    fn offer(&mut self, d: f64, key: u64, t: Transfer) {
        if !self.useful(d) {
            return;
        }
        let f = (d - self.half).abs();
        if self
            .found
            .is_none_or(|(bf, bk, _, _)| f < bf || (f == bf && key < bk))
        {
            self.found = Some((f, key, d, t));
        }
    }
}

/// The first index of `v` (ascending) whose value is at least `x`, as `partition_point`
/// gives, for values spread about evenly over `0..total` (a bucket's positions are): a
/// guess from `x`'s share of `total`, then a galloping search from it. A few probes near
/// the guess instead of a binary search's dozen scattered ones, each a cache miss on a
/// bucket not read lately.
fn partition_near(v: &[u32], x: u32, total: usize) -> usize {
    let guess = ((x as u64 * v.len() as u64) / total.max(1) as u64).min(v.len() as u64) as usize;
    if guess < v.len() && v[guess] < x {
        // Everything before `lo` is below `x`.
        let (mut lo, mut step) = (guess + 1, 1);
        while lo + step <= v.len() && v[lo + step - 1] < x {
            lo += step;
            step *= 2;
        }
        let hi = (lo + step).min(v.len());
        lo + v[lo..hi].partition_point(|&y| y < x)
    } else {
        // Everything from `hi` on is at least `x`.
        let (mut hi, mut step) = (guess, 1);
        while hi >= step && v[hi - step] >= x {
            hi -= step;
            step *= 2;
        }
        let lo = hi.saturating_sub(step);
        lo + v[lo..hi].partition_point(|&y| y < x)
    }
}

/// Offers the two moves: the cells of the heavy bucket on either side of half the gap
/// (key 0, before every swap).
fn offer_moves(order: &Order, heavy: &[u32], best: &mut Best) {
    let lighter_than_half = order.first_at_most(best.half);
    let pos = partition_near(heavy, lighter_than_half, order.len);
    for p in [pos.wrapping_sub(1), pos] {
        if let Some(&c) = heavy.get(p) {
            best.offer(order.kb(c), 0, Transfer::Move(p));
        }
    }
}

/// Offers every swap by a scan of both buckets: for each distinct KB `a` in the heavy
/// bucket, the light cell `b` closest to `a - half`, so the transfer `a - b` is closest to
/// half the gap. The light cells' KB are listed first (descending, in `light_kb`); `a`
/// falls along the heavy bucket, so the first light cell of KB <= `a - half` only moves
/// forward. Keys increase along the scan.
fn offer_swaps_by_scan(
    order: &Order,
    heavy: &[u32],
    light: &[u32],
    light_kb: &mut Vec<f64>,
    best: &mut Best,
) {
    light_kb.clear();
    light_kb.extend(light.iter().map(|&c| order.kbs[order.segment_of(c)]));
    let (mut p, mut q) = (0, 0);
    let mut key = 1;
    while p < heavy.len() {
        let k = order.segment_of(heavy[p]);
        let a = order.kbs[k];
        let target = a - best.half;
        while q < light_kb.len() && light_kb[q] > target {
            q += 1;
        }
        for q in [q.wrapping_sub(1), q] {
            if let Some(&b) = light_kb.get(q) {
                best.offer(a - b, key, Transfer::Swap(p, q));
            }
            key += 1;
        }
        // Past the cells of KB `a` (contiguous positions).
        let end = order.kb_end[k] as u32;
        p += 1;
        while p < heavy.len() && heavy[p] < end {
            p += 1;
        }
    }
}

/// Refinement's index of swaps by the KB they transfer. A class is a run of equal KB in
/// the order (contiguous positions: several populations or metypes); a swap trades a cell
/// of class `i` for one of a lighter class `j` and transfers `kb[i] - kb[j]`. Every pair
/// of classes whose difference is below `limit` is listed, binned by that difference, so
/// a step looks only at the pairs near half its gap instead of scanning both buckets.
/// Gaps never grow, so half a step's gap is at most half the first one's, and `limit`
/// leaves a margin above that for the search to reach.
struct SwapIndex {
    /// `start[c]..start[c + 1]`: the positions of class `c` (`start[C]` = cell count).
    start: Vec<u32>,
    /// `kb[c]`: its KB, strictly decreasing.
    kb: Vec<f64>,
    /// Pairs differing by `limit` or more are not listed.
    limit: f64,
    /// The bin of a difference `d` is `(d * scale) as usize`, capped at the last: monotone
    /// in `d`, so a later bin holds only larger differences.
    scale: f64,
    /// `pairs[bins[k]..bins[k + 1]]`: the pairs `[i, j]` (`i < j`) of bin `k`.
    bins: Vec<u32>,
    pairs: Vec<[u16; 2]>,
}

/// Class ids are `u16`.
const MAX_CLASSES: usize = 1 << 16;

/// Pairs the index may hold: a quarter per cell (5 bytes a pair with the bins: 1.25 bytes
/// per cell), or 2^21 (10 MB) for small inputs.
fn max_pairs(cells: usize) -> usize {
    (cells / 4).max(1 << 21)
}

impl SwapIndex {
    /// The index for a first gap of `gap`, or `None` when the classes are too many for
    /// `u16` ids, their pairs too many for [`max_pairs`] (cells of one metype that differ:
    /// nearly every cell is its own class), or a KB is not finite, or one class's KB differ
    /// in sign of zero (then the scan, which reads each cell's own KB, decides).
    fn new(order: &Order, gap: f64) -> Option<SwapIndex> {
        // Half the gap, and a sixteenth of it for the search around it.
        let limit = gap * (9.0 / 16.0);
        if !(limit.is_finite() && limit > 0.0) {
            return None;
        }
        let mut classes = 0;
        for (k, s) in order.segments.iter().enumerate() {
            if !s.kb.is_finite() {
                return None;
            }
            match k.checked_sub(1).map(|k| order.segments[k].kb) {
                Some(prev) if prev == s.kb => {
                    if prev.to_bits() != s.kb.to_bits() {
                        return None;
                    }
                }
                _ => {
                    classes += 1;
                    if classes > MAX_CLASSES {
                        return None;
                    }
                }
            }
        }
        let mut start = Vec::with_capacity(classes + 1);
        let mut kb = Vec::with_capacity(classes);
        for (k, s) in order.segments.iter().enumerate() {
            if k == 0 || order.segments[k - 1].kb != s.kb {
                start.push(s.start as u32);
                kb.push(s.kb);
            }
        }
        start.push(order.len as u32);
        // `ends[i]`: past the last class `j` with `kb[i] - kb[j] < limit` (differences
        // grow along `j`).
        let mut npairs = 0;
        let mut ends = Vec::with_capacity(classes);
        for i in 0..classes {
            let n = kb[i + 1..].partition_point(|&b| kb[i] - b < limit);
            npairs += n;
            if npairs > max_pairs(order.len) {
                return None;
            }
            ends.push(i + 1 + n);
        }
        // A counting sort of the pairs by bin.
        let nbins = npairs / 4 + 1;
        let mut index = SwapIndex {
            limit,
            scale: nbins as f64 / limit,
            bins: vec![0; nbins + 1],
            pairs: vec![[0, 0]; npairs],
            start,
            kb,
        };
        let kb = &index.kb;
        for (i, &end) in ends.iter().enumerate() {
            for j in i + 1..end {
                let k = index.bin(kb[i] - kb[j]);
                index.bins[k + 1] += 1;
            }
        }
        for k in 0..nbins {
            index.bins[k + 1] += index.bins[k];
        }
        let mut next: Vec<u32> = index.bins[..nbins].to_vec();
        for (i, &end) in ends.iter().enumerate() {
            for j in i + 1..end {
                let k = index.bin(kb[i] - kb[j]);
                index.pairs[next[k] as usize] = [i as u16, j as u16];
                next[k] += 1;
            }
        }
        Some(index)
    }

    /// The cell count.
    #[inline]
    fn len(&self) -> usize {
        self.start[self.kb.len()] as usize
    }

    #[inline]
    fn bin(&self, d: f64) -> usize {
        ((d * self.scale) as usize).min(self.bins.len() - 2)
    }

    /// The pairs of bin `k`.
    #[inline]
    fn pairs_of(&self, k: usize) -> &[[u16; 2]] {
        &self.pairs[self.bins[k] as usize..self.bins[k + 1] as usize]
    }

    /// The differences of the pairs of bin `k`.
    fn differences(&self, k: usize) -> impl Iterator<Item = f64> + '_ {
        self.pairs_of(k)
            .iter()
            .map(|&[i, j]| self.kb[i as usize] - self.kb[j as usize])
    }

    /// Offers every swap the scan would offer, by the pairs in bins of increasing distance
    /// from half the gap, until the next bin's nearest difference is farther from it than
    /// the best so far (then it offers nothing better, nor an equal one). Visits at most
    /// `budget` pairs, and gives up when it would need pairs beyond `limit`: returns false
    /// then (and `best` is incomplete).
    fn offer_swaps(&self, heavy: &[u32], light: &[u32], best: &mut Best, budget: usize) -> bool {
        let (half, gap, eps) = (best.half, best.gap, best.eps);
        let nbins = self.bins.len() - 1;
        let mut visited = 0;
        let mut visit = |k: usize, best: &mut Best| -> bool {
            for &[i, j] in self.pairs_of(k) {
                visited += 1;
                if visited > budget {
                    return false;
                }
                self.offer_pair(i as usize, j as usize, heavy, light, best);
            }
            true
        };
        // Bins below `k0` hold only differences below half, bins above only above.
        let k0 = self.bin(half);
        if !visit(k0, best) {
            return false;
        }
        // The next non-empty bin each way, and its difference nearest half the gap (`None`:
        // none left that can be useful). Past the last bin, the bound is `limit`'s.
        let (mut up, mut down) = (k0 + 1, k0);
        let next_up = |up: &mut usize| -> Option<f64> {
            while *up < nbins && self.bins[*up] == self.bins[*up + 1] {
                *up += 1;
            }
            let lo = if *up < nbins {
                self.differences(*up).fold(f64::INFINITY, f64::min)
            } else {
                self.limit
            };
            (lo < gap - eps).then(|| (lo - half).abs())
        };
        let next_down = |down: &mut usize| -> Option<f64> {
            while *down > 0 && self.bins[*down - 1] == self.bins[*down] {
                *down -= 1;
            }
            let hi = if *down > 0 {
                self.differences(*down - 1).fold(f64::NEG_INFINITY, f64::max)
            } else {
                f64::NEG_INFINITY
            };
            (hi > eps).then(|| (hi - half).abs())
        };
        let (mut up_bound, mut down_bound) = (next_up(&mut up), next_down(&mut down));
        loop {
            let (bound, go_up) = match (up_bound, down_bound) {
                (None, None) => return true,
                (Some(u), None) => (u, true),
                (None, Some(d)) => (d, false),
                (Some(u), Some(d)) => (u.min(d), u <= d),
            };
            if best.found.is_some_and(|(bf, ..)| bound > bf) {
                return true;
            }
            if go_up {
                if up == nbins || !visit(up, best) {
                    return false;
                }
                up += 1;
                up_bound = next_up(&mut up);
            } else {
                down -= 1;
                if !visit(down, best) {
                    return false;
                }
                down_bound = next_down(&mut down);
            }
        }
    }

    /// Offers swapping a cell of class `i` for one of class `j`, if the scan would: the
    /// heavy bucket holds class `i`, and `j` is the light bucket's lowest class above
    /// `kb[i] - half` or its highest at or below it (the scan's `q - 1` and `q`).
    #[inline]
    fn offer_pair(&self, i: usize, j: usize, heavy: &[u32], light: &[u32], best: &mut Best) {
        let d = self.kb[i] - self.kb[j];
        if !best.useful(d) {
            return;
        }
        if best.found.is_some_and(|(bf, ..)| (d - best.half).abs() > bf) {
            return;
        }
        let p = partition_near(heavy, self.start[i], self.len());
        if heavy.get(p).is_none_or(|&x| x >= self.start[i + 1]) {
            return;
        }
        // `above`: the first class of KB <= `kb[i] - half` (near `j`, as `d` is near half).
        let target = self.kb[i] - best.half;
        let mut above = j;
        if self.kb[above] > target {
            while above < self.kb.len() && self.kb[above] > target {
                above += 1;
            }
        } else {
            while above > 0 && self.kb[above - 1] <= target {
                above -= 1;
            }
        }
        // The light cells above the target are those before position `start[above]`.
        let q = partition_near(light, self.start[above], self.len());
        let (q, side) = if j < above { (q.wrapping_sub(1), 0) } else { (q, 1) };
        if light
            .get(q)
            .is_some_and(|&x| x >= self.start[j] && x < self.start[j + 1])
        {
            best.offer(d, 1 + 2 * i as u64 + side, Transfer::Swap(p, q));
        }
    }
}

/// Pairs a step's index search may visit before it hands the step to the scan, for heavy
/// and light buckets of `cells` cells together: a pair costs two short searches of the
/// buckets, about what the scan spends on eight cells.
fn search_budget(cells: usize) -> usize {
    cells / 8 + 8
}

/// Buckets must average this many cells for the swap index to pay: below, a scan of both
/// buckets costs less than the index's searches per pair.
const INDEX_MIN_CELLS_PER_BUCKET: usize = 256;

/// Moves and swaps between the heaviest and the lightest bucket while that lowers the
/// heavier of the two. `members[b]` stays sorted (by descending KB).
#[cfg(test)]
fn refine(order: &Order, loads: &mut [f64], members: &mut [Vec<u32>]) {
    refine_tracked(order, loads, members, &mut Vec::new());
}

/// [`refine`], appending to `moved` (position, new bucket) for every cell it moves.
fn refine_tracked(order: &Order, loads: &mut [f64], members: &mut [Vec<u32>], moved: &mut Vec<(u32, usize)>) {
    let indexed = order.len >= INDEX_MIN_CELLS_PER_BUCKET * loads.len();
    refine_with(order, loads, members, indexed, search_budget, moved);
}

/// [`refine`], with the swap index when `indexed` (and the order allows one), and
/// `budget(cells)` pairs per step.
fn refine_with(
    order: &Order,
    loads: &mut [f64],
    members: &mut [Vec<u32>],
    indexed: bool,
    budget: fn(usize) -> usize,
    moved: &mut Vec<(u32, usize)>,
) {
    if loads.len() < 2 {
        return;
    }
    let mut extremes = Extremes::new(loads);
    let index = if indexed {
        SwapIndex::new(order, loads[extremes.heaviest()] - loads[extremes.lightest()])
    } else {
        None
    };
    let mut light_kb: Vec<f64> = Vec::new();
    let max_steps = 4 * loads.len() + 1000;
    for _ in 0..max_steps {
        let (h, l) = (extremes.heaviest(), extremes.lightest());
        let gap = loads[h] - loads[l];
        // Tolerance so float noise cannot make two buckets trade the same cell forever.
        let eps = 1e-9 * loads[h].abs().max(1.0);
        if gap <= 2.0 * eps {
            break;
        }
        let mut best = Best {
            half: gap / 2.0,
            gap,
            eps,
            found: None,
        };
        let (heavy, light) = (&members[h], &members[l]);
        offer_moves(order, heavy, &mut best);
        let moves = best.found;
        let done = index.as_ref().is_some_and(|index| {
            gap.is_finite() && index.offer_swaps(heavy, light, &mut best, budget(heavy.len() + light.len()))
        });
        if !done {
            best.found = moves;
            offer_swaps_by_scan(order, heavy, light, &mut light_kb, &mut best);
        }
        let Some((_, _, d, transfer)) = best.found else {
            break;
        };
        let insert_sorted = |v: &mut Vec<u32>, c: u32| {
            let at = partition_near(v, c, order.len);
            v.insert(at, c);
        };
        match transfer {
            Transfer::Move(p) => {
                let i = members[h].remove(p);
                insert_sorted(&mut members[l], i);
                moved.push((i, l));
            }
            Transfer::Swap(p, q) => {
                let i = members[h].remove(p);
                let j = members[l].remove(q);
                insert_sorted(&mut members[l], i);
                insert_sorted(&mut members[h], j);
                moved.extend([(i, l), (j, h)]);
            }
        }
        loads[h] -= d;
        loads[l] += d;
        extremes.update(loads, h);
        extremes.update(loads, l);
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

    fn order(kbs: &[f64]) -> Order<'static> {
        // One population, gid = position; `kbs` must be non-increasing.
        let segments = kbs
            .iter()
            .enumerate()
            .map(|(g, &kb)| Segment {
                start: g,
                kb,
                population: 0,
                gids: Cow::Owned(vec![g as u32]),
            })
            .collect();
        Order::finish(segments, kbs.len())
    }

    /// LPT list scheduling with a tournament tree, one update per cell (the reference the
    /// queue-based [`super::greedy`] must match). Returns bucket loads and, per bucket, the positions of its cells in
    /// ascending order (descending KB, the order they were placed in).
    /// The references' bucket for a cell of 0 KB: fewest cells, then lightest, then lowest
    /// index.
    fn fewest_cells<T>(members: &[Vec<T>], loads: &[f64]) -> usize {
        (0..members.len())
            .min_by(|&a, &b| {
                (members[a].len(), loads[a])
                    .partial_cmp(&(members[b].len(), loads[b]))
                    .unwrap()
                    .then(a.cmp(&b))
            })
            .unwrap()
    }

    fn greedy_tree(order: &Order, nbuckets: usize) -> (Vec<f64>, Vec<Vec<u32>>) {
        let mut loads = vec![0.0; nbuckets];
        let mut lightest = LightestTree::new(nbuckets);
        let mut members = vec![Vec::new(); nbuckets];
        for s in order.segments.iter().filter(|s| s.kb != 0.0) {
            for i in s.start..s.start + s.gids.len() {
                let b = lightest.top();
                loads[b] += s.kb;
                members[b].push(i as u32);
                lightest.update(&loads, b);
            }
        }
        // Cells of 0 KB: to the bucket of fewest cells, then lightest, then lowest index.
        for s in order.segments.iter().filter(|s| s.kb == 0.0) {
            for i in s.start..s.start + s.gids.len() {
                let b = fewest_cells(&members, &loads);
                members[b].push(i as u32);
            }
        }
        for m in &mut members {
            m.sort_unstable();
        }
        (loads, members)
    }

    /// The lightest bucket, ties to the lowest index (the order of a min-heap of
    /// [`Lightest`] entries keyed by bucket index): a tournament tree over the loads, where a
    /// change of one load replays only its path to the root (one comparison per level).
    struct LightestTree {
        size: usize,
        /// Node `n` holds the lightest bucket below it (`u32::MAX`: none); leaves from `size`.
        win: Vec<u32>,
    }

    impl LightestTree {
        /// A tree over `n` buckets of load 0.
        fn new(n: usize) -> LightestTree {
            let size = n.next_power_of_two();
            let mut win = vec![u32::MAX; 2 * size];
            for b in 0..n {
                win[size + b] = b as u32;
            }
            // All loads are 0: the left child always wins.
            for node in (1..size).rev() {
                win[node] = if win[2 * node] != u32::MAX {
                    win[2 * node]
                } else {
                    win[2 * node + 1]
                };
            }
            LightestTree { size, win }
        }

        #[inline]
        fn top(&self) -> usize {
            self.win[1] as usize
        }

        /// Replays the path of bucket `b` after its load changed.
        #[inline]
        fn update(&mut self, loads: &[f64], b: usize) {
            let mut node = (self.size + b) / 2;
            while node >= 1 {
                let (l, r) = (self.win[2 * node], self.win[2 * node + 1]);
                self.win[node] = if r == u32::MAX || (l != u32::MAX && loads[l as usize] <= loads[r as usize])
                {
                    l
                } else {
                    r
                };
                node /= 2;
            }
        }
    }

    /// An order of runs: `(kb, count)` each, one population, gid = position; KB must not
    /// increase.
    fn order_of_runs(runs: &[(f64, usize)]) -> Order<'static> {
        let mut start = 0;
        let segments = runs
            .iter()
            .map(|&(kb, n)| {
                let s = Segment {
                    start,
                    kb,
                    population: 0,
                    gids: Cow::Owned((start as u32..(start + n) as u32).collect()),
                };
                start += n;
                s
            })
            .collect();
        Order::finish(segments, start)
    }

    #[test]
    fn queue_greedy_matches_the_tree_on_random_runs() {
        use rand::{Rng, SeedableRng};
        // Weights that make float addition round to ties (large loads, fractional and
        // tiny weights, zeros), runs longer and shorter than the bucket count.
        for seed in 0..300u64 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let nbuckets = [1, 2, 3, 7, 64, 100, 1024][seed as usize % 7];
            let scale = [1.0, 1e15, 1e16, 3e17][(seed / 7) as usize % 4];
            let mut kbs: Vec<f64> = (0..rng.random_range(1..40))
                .map(|_| match rng.random_range(0..6) {
                    0 => 0.0,
                    1 => rng.random_range(0..5) as f64 * 0.1,
                    2 => rng.random::<f64>() * 3.0,
                    3 => scale * rng.random::<f64>(),
                    4 => rng.random_range(1..4) as f64,
                    _ => 1.0 / 3.0 * rng.random_range(1..10) as f64,
                })
                .collect();
            kbs.sort_by(|a, b| b.total_cmp(a));
            let runs: Vec<(f64, usize)> = kbs
                .iter()
                .map(|&kb| (kb, rng.random_range(1..3 * nbuckets + 2)))
                .collect();
            let o = order_of_runs(&runs);
            assert_eq!(
                greedy(&o, nbuckets, &AtomicU64::new(0)),
                greedy_tree(&o, nbuckets),
                "seed {seed}"
            );
        }
    }

    #[test]
    fn progress_counts_every_cell_twice() {
        let d = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
            cells: 10_000,
            metypes: 30,
            populations: 2,
            seed: 4,
        })
        .unwrap();
        let config = BalancerConfig::builder().ranks(17).cycles(2).build().unwrap();
        let done = AtomicU64::new(0);
        assert_eq!(balance_counted(&d, &config, &done), balance(&d, &config));
        assert_eq!(done.load(Ordering::Relaxed), 20_000);
    }

    /// The lists built from the noted buckets, on one thread or several (from 2^16
    /// positions a thread), are those the greedy appended to, position by position.
    #[test]
    fn members_of_gives_the_lists_of_appends() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for (n, nbuckets) in [
            (0, 3),
            (1, 1),
            (5, 9),
            (300_001, 7),
            (200_000, 1000),
            (70_000, 70_000),
        ] {
            let assign: Vec<u32> = (0..n).map(|_| rng.random_range(0..nbuckets) as u32).collect();
            let mut expected = vec![Vec::new(); nbuckets];
            for (i, &b) in assign.iter().enumerate() {
                expected[b as usize].push(i as u32);
            }
            assert_eq!(
                members_of(&assign, nbuckets),
                expected,
                "{n} positions, {nbuckets} buckets"
            );
            let narrow: Vec<u16> = assign.iter().map(|&b| b as u16).collect();
            if nbuckets <= 1 << 16 {
                assert_eq!(members_of(&narrow, nbuckets), expected, "{n} positions, u16");
            }
        }
    }

    #[test]
    fn gather_is_the_same_with_either_slot_width() {
        let d = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
            cells: 20_000,
            metypes: 40,
            populations: 3,
            seed: 9,
        })
        .unwrap();
        let order = Order::new(&d);
        let (mut narrow, mut wide) = (vec![0u16; order.len], vec![0u32; order.len]);
        greedy_noting(&order, 300, &AtomicU64::new(0), &mut narrow);
        greedy_noting(&order, 300, &AtomicU64::new(0), &mut wide);
        let narrow = gather(&order, &narrow, 300, 3);
        let wide = gather(&order, &wide, 300, 3);
        assert_eq!(narrow, wide);
        assert_eq!(narrow.iter().map(|(_, _, g)| g.len()).sum::<usize>(), 20_000);
        assert!(narrow.iter().all(|(b, p, g)| *b < 300 && *p < 3 && g.is_sorted()));
    }

    /// The moves made in the tables built beside the refinement (a position moved several
    /// times included) give what gathering after the moves gives, and `assign` ends moved.
    #[test]
    fn moves_made_beside_the_tables_are_those_made_before() {
        use rand::{Rng, SeedableRng};
        let d = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
            cells: 20_000,
            metypes: 40,
            populations: 3,
            seed: 3,
        })
        .unwrap();
        let order = Order::new(&d);
        let mut assign = vec![0u16; order.len];
        greedy_noting(&order, 300, &AtomicU64::new(0), &mut assign);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut moves: Vec<(u32, usize)> = (0..3000)
            .map(|_| (rng.random_range(0..order.len as u32), rng.random_range(0..300)))
            .collect();
        let again: Vec<(u32, usize)> = moves[..500]
            .iter()
            .map(|&(i, _)| (i, rng.random_range(0..300)))
            .collect();
        moves.extend(again);
        let mut applied = assign.clone();
        for &(i, b) in &moves {
            applied[i as usize] = b as u16;
        }
        let expected = gather(&order, &applied, 300, 3);
        assert_ne!(
            expected,
            gather(&order, &assign, 300, 3),
            "the moves change buckets"
        );
        let beside = gather_beside(&order, &mut assign, 300, 3, || moves);
        assert_eq!(beside, expected);
        assert_eq!(assign, applied);
    }

    #[test]
    fn refinement_fixes_what_greedy_leaves() {
        // LPT on {3,3,2,2,2} into 2 buckets gives 7 / 5; the optimum is 6 / 6.
        let o = order(&[3.0, 3.0, 2.0, 2.0, 2.0]);
        let (mut loads, mut members) = greedy(&o, 2, &AtomicU64::new(0));
        let mut sorted = loads.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(sorted, vec![5.0, 7.0]);
        refine(&o, &mut loads, &mut members);
        assert_eq!(loads, vec![6.0, 6.0]);
        for (b, m) in members.iter().enumerate() {
            assert_eq!(m.iter().map(|&c| o.kb(c)).sum::<f64>(), loads[b]);
        }
    }

    #[test]
    fn extremes_are_the_first_heaviest_and_lightest() {
        let mut loads = vec![3.0, 5.0, 1.0, 5.0, 1.0, 2.0];
        let mut e = Extremes::new(&loads);
        assert_eq!((e.heaviest(), e.lightest()), (1, 2));
        loads[1] = 0.5;
        e.update(&loads, 1);
        assert_eq!((e.heaviest(), e.lightest()), (3, 1));
        loads[0] = 9.0;
        e.update(&loads, 0);
        assert_eq!(e.heaviest(), 0);
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

    /// The scan-only refinement as it was before the swap index (the reference
    /// [`super::refine_with`] must match at every step).
    mod refine_reference {
        use super::super::{Extremes, Order};

        /// The best transfer found from the heaviest bucket to the lightest.
        enum Transfer {
            /// Move the cell at this position of the heavy bucket.
            Move(usize),
            /// Swap the cells at these positions (heavy, light).
            Swap(usize, usize),
        }

        /// Moves and swaps between the heaviest and the lightest bucket while that lowers the
        /// heavier of the two. `members[b]` stays sorted (by descending KB).
        #[inline(never)]
        pub(super) fn refine(order: &Order, loads: &mut [f64], members: &mut [Vec<u32>]) {
            if loads.len() < 2 {
                return;
            }
            let kb = |i: &u32| order.kb(*i);
            let mut extremes = Extremes::new(loads);
            let mut light_kb: Vec<f64> = Vec::new();
            let max_steps = 4 * loads.len() + 1000;
            for _ in 0..max_steps {
                let (h, l) = (extremes.heaviest(), extremes.lightest());
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
                let lighter_than_half = order.first_at_most(half);
                let pos = heavy.partition_point(|&c| c < lighter_than_half);
                for p in [pos.wrapping_sub(1), pos] {
                    if let Some(c) = heavy.get(p) {
                        consider(kb(c), Transfer::Move(p));
                    }
                }
                // Swap: for each distinct KB `a` in the heavy bucket, the light cell `b` closest to
                // `a - half`, so the transfer `a - b` is closest to half the gap. The light cells'
                // KB are listed first (descending); `a` falls along the heavy bucket, so the first
                // light cell of KB <= `a - half` only moves forward.
                let light = &members[l];
                light_kb.clear();
                light_kb.extend(light.iter().map(|&c| order.kbs[order.segment_of(c)]));
                let (mut p, mut q) = (0, 0);
                while p < heavy.len() {
                    let k = order.segment_of(heavy[p]);
                    let a = order.kbs[k];
                    let target = a - half;
                    while q < light_kb.len() && light_kb[q] > target {
                        q += 1;
                    }
                    for q in [q.wrapping_sub(1), q] {
                        if let Some(&b) = light_kb.get(q) {
                            consider(a - b, Transfer::Swap(p, q));
                        }
                    }
                    // Past the cells of KB `a` (contiguous positions).
                    let end = order.kb_end[k] as u32;
                    p += 1;
                    while p < heavy.len() && heavy[p] < end {
                        p += 1;
                    }
                }
                let Some((d, transfer)) = best else { break };
                let insert_sorted = |v: &mut Vec<u32>, c: u32| {
                    let at = v.partition_point(|&x| x < c);
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
                extremes.update(loads, h);
                extremes.update(loads, l);
            }
        }
    }

    /// A random order for the refinement tests: runs of equal KB (several runs of one KB
    /// make a class of several segments), or nearly every cell its own KB; KB on a 0.1
    /// grid (as dry runs report), small integers (many equal differences), or tiny, huge
    /// and zero weights.
    fn random_order(rng: &mut rand_chacha::ChaCha8Rng) -> Order<'static> {
        use rand::Rng;
        let kind = rng.random_range(0..5);
        let nruns = rng.random_range(1..300);
        let mut kbs: Vec<f64> = (0..nruns)
            .map(|_| match kind {
                0 => (rng.random_range(10_000..400_000) as f64) / 10.0,
                1 => rng.random_range(0..12) as f64,
                2 => match rng.random_range(0..5) {
                    0 => 0.0,
                    1 => 1e-300 * rng.random::<f64>(),
                    2 => 3e17 * rng.random::<f64>(),
                    3 => 1.0 / 3.0 * rng.random_range(1..10) as f64,
                    _ => rng.random::<f64>(),
                },
                _ => 1000.0 + 9000.0 * rng.random::<f64>(),
            })
            .collect();
        kbs.sort_by(|a, b| b.total_cmp(a));
        let per_cell = kind == 4;
        let runs: Vec<(f64, usize)> = kbs
            .iter()
            .map(|&kb| {
                let n = if per_cell {
                    1
                } else {
                    let most = [3, 40, 400][rng.random_range(0..3)];
                    rng.random_range(1..most)
                };
                (kb, n)
            })
            .collect();
        order_of_runs(&runs)
    }

    #[test]
    fn indexed_refinement_matches_the_scan_on_random_orders() {
        use rand::{Rng, SeedableRng};
        let budgets: [fn(usize) -> usize; 3] = [search_budget, |n| n % 5, |_| usize::MAX];
        for seed in 0..400u64 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let o = random_order(&mut rng);
            let nbuckets = match rng.random_range(0..4) {
                0 => rng.random_range(1..8),
                1 => rng.random_range(8..100),
                2 => rng.random_range(100..2001),
                _ => (o.len / rng.random_range(2..50)).clamp(1, 2000),
            };
            // Greedy's buckets (few, small steps), or cells dealt at random (many).
            let (loads, members) = if rng.random_bool(0.5) {
                greedy(&o, nbuckets, &AtomicU64::new(0))
            } else {
                let mut members = vec![Vec::new(); nbuckets];
                for i in 0..o.len as u32 {
                    members[rng.random_range(0..nbuckets)].push(i);
                }
                let loads = members.iter().map(|m| m.iter().map(|&c| o.kb(c)).sum()).collect();
                (loads, members)
            };
            let (mut want_loads, mut want_members) = (loads.clone(), members.clone());
            refine_reference::refine(&o, &mut want_loads, &mut want_members);
            let budget = budgets[seed as usize % budgets.len()];
            let (mut got_loads, mut got_members) = (loads, members);
            refine_with(
                &o,
                &mut got_loads,
                &mut got_members,
                true,
                budget,
                &mut Vec::new(),
            );
            assert_eq!(got_members, want_members, "seed {seed}");
            assert_eq!(
                got_loads.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                want_loads.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                "seed {seed}"
            );
        }
    }

    #[test]
    fn partition_near_is_partition_point() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for _ in 0..2000 {
            let total = rng.random_range(1..5000u32);
            // Even, clustered, or empty: the guess may be far off.
            let n = rng.random_range(0..200);
            let (lo, hi) = match rng.random_range(0..3) {
                0 => (0, total),
                1 => (0, total.div_ceil(7)),
                _ => (total - total.div_ceil(5), total),
            };
            let mut v: Vec<u32> = (0..n).map(|_| rng.random_range(lo..hi)).collect();
            v.sort_unstable();
            v.dedup();
            for x in 0..=total {
                assert_eq!(
                    partition_near(&v, x, total as usize),
                    v.partition_point(|&y| y < x),
                    "{v:?} {x} {total}"
                );
            }
        }
    }

    #[test]
    fn swap_index_refuses_too_many_classes() {
        let kbs: Vec<f64> = (0..MAX_CLASSES + 1).rev().map(|k| k as f64).collect();
        assert!(SwapIndex::new(&order(&kbs), 10.0).is_none());
        assert!(SwapIndex::new(&order(&kbs[1..]), 10.0).is_some());
        // Pairs closer than the limit (9/16 of the gap, here 9) are listed.
        let index = SwapIndex::new(&order(&kbs[1..]), 16.0).unwrap();
        assert_eq!(index.pairs.len(), 8 * MAX_CLASSES - 36);
    }

    /// The straightforward implementation (cells by value, a scan for the heaviest and
    /// lightest bucket each step, a map lookup per cell), as the optimised one must match.
    mod reference {
        use std::collections::{BTreeMap, BinaryHeap};

        use crate::allocation::{Allocation, PopulationAllocation};
        use crate::dryrun::DryRun;
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
    }

    #[test]
    fn matches_the_reference_implementation_on_random_dry_runs() {
        use crate::synthetic::{generate, generate_circuit, CircuitSpec, SyntheticSpec};
        for seed in 0..24u64 {
            let spec = SyntheticSpec {
                cells: 300 + 1733 * seed as usize,
                metypes: 2 + 11 * seed as usize,
                populations: 1 + seed as usize % 4,
                seed,
            };
            let mut dry_run = if seed % 4 == 3 {
                generate_circuit(&CircuitSpec {
                    dry_run: spec,
                    synapses: 50_000,
                    ..CircuitSpec::default()
                })
                .unwrap()
                .dry_run
            } else {
                generate(&spec).unwrap()
            };
            if seed % 4 == 1 {
                // Equal KB across metypes (runs merged across metypes), and gids out of
                // order within a metype.
                let n = dry_run.metypes.len();
                for (i, m) in dry_run.metypes.iter_mut().enumerate() {
                    m.memory_kb = (i % 3) as f64 * 100.0;
                    m.synapses_per_cell = if i == n - 1 { 0.5 } else { 0.0 };
                }
                for p in &mut dry_run.populations {
                    for (_, g) in &mut p.metype_gids {
                        g.reverse();
                    }
                }
            }
            if seed % 4 == 2 {
                // Sparse gids in the first population (gathered by sorting), dense in the
                // others (gathered through the gid table).
                for (_, g) in &mut dry_run.populations[0].metype_gids {
                    for x in g.iter_mut() {
                        *x = *x * 1013 + 7;
                    }
                }
            }
            for (ranks, cycles) in [(1, 1), (3, 1), (16, 4), (97, 1), (256, 2), (4000, 1)] {
                let config = BalancerConfig::builder()
                    .ranks(ranks)
                    .cycles(cycles)
                    .build()
                    .unwrap();
                assert_eq!(
                    balance(&dry_run, &config),
                    reference::balance(&dry_run, &config),
                    "seed {seed}, {ranks} × {cycles}"
                );
            }
        }
    }
}
