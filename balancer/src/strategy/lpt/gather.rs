//! Gathering the gids of every bucket from each position's noted bucket: per-population
//! tables built beside the refinement (dense populations) or lists sorted afterwards (sparse
//! ones), on several threads when they fit.
use std::sync::atomic::Ordering;

use super::Order;

/// (bucket, population, gids ascending) for every non-empty list of a bucket.
pub(super) type Gathered = Vec<(usize, usize, Vec<u32>)>;

/// A bucket index as stored in the tables of [`gather`].
pub(super) trait Slot: Copy + Default + Send + Sync {
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
pub(super) struct Spans {
    pub(super) cells: Vec<usize>,
    pub(super) span: Vec<usize>,
}

impl Spans {
    pub(super) fn new(order: &Order, populations: usize) -> Spans {
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

    pub(super) fn dense(&self, p: usize) -> bool {
        self.span[p] <= self.cells[p].saturating_mul(2).saturating_add(4096)
    }

    /// Bytes of the dense populations' [`GidTable`]s.
    pub(super) fn table_bytes<S>(&self, nbuckets: usize) -> usize {
        (0..self.span.len())
            .filter(|&p| self.dense(p))
            .map(|p| self.span[p] * (std::mem::size_of::<S>() + 1) + nbuckets * 8)
            .sum()
    }

    /// Threads gathering side by side: the machine's cores, at most one per population,
    /// and 1 when the tables together would take more than [`PARALLEL_TABLES`] bytes.
    pub(super) fn threads<S>(&self, nbuckets: usize) -> usize {
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
pub(super) struct GidTable<S> {
    pub(super) bucket: Vec<S>,
    pub(super) present: Vec<u64>,
    pub(super) counts: Vec<usize>,
}

impl<S: Slot> GidTable<S> {
    /// Population `p`'s table from `assign` (each position's bucket), `span` its gid span.
    pub(super) fn new(order: &Order, assign: &[S], p: usize, span: usize, nbuckets: usize) -> GidTable<S> {
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
    pub(super) fn reassign(&mut self, gid: u32, to: usize) {
        let slot = &mut self.bucket[gid as usize];
        self.counts[slot.bucket()] -= 1;
        self.counts[to] += 1;
        *slot = S::from_bucket(to);
    }

    /// Every bucket's list, gids ascending: a pass over the gids in ascending order deals
    /// them to their buckets' lists, each allocated at its exact length.
    pub(super) fn lists(self) -> Vec<Vec<u32>> {
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
pub(super) fn sparse_lists<S: Slot>(order: &Order, assign: &[S], p: usize, nbuckets: usize) -> Vec<Vec<u32>> {
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
pub(super) fn lists_of<S: Slot>(
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
pub(super) fn gather<S: Slot>(order: &Order, assign: &[S], nbuckets: usize, populations: usize) -> Gathered {
    let mut assign = assign.to_vec();
    gather_beside(order, &mut assign, nbuckets, populations, Vec::new)
}

/// [`gather`] of `assign` once `refine` has run, which returns the (position, bucket) moves
/// to make in `assign` (in order; a position may move more than once). Where the populations
/// are gathered side by side, their tables are built from `assign` as it is on another
/// thread while `refine` runs on this one (it reads only the order: the second core is
/// otherwise idle then), and the moves are made in both afterwards.
pub(super) fn gather_beside<S: Slot>(
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
pub(super) const PARALLEL_TABLES: usize = 64 << 20;

/// Most threads of [`members_of`].
pub(super) const MAX_THREADS: usize = 8;

/// `f` of each item, each on a thread of its own (the last on this one), in item order.
pub(super) fn each_on_a_thread<T: Send, R: Send>(mut items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
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
pub(super) fn exact_lists(counts: &[Vec<u32>], nbuckets: usize) -> Vec<Vec<u32>> {
    (0..nbuckets)
        .map(|b| vec![0u32; counts.iter().map(|c| c[b] as usize).sum()])
        .collect()
}

/// `lists` cut at `counts`: per part, its slice of each bucket's list, in part order.
pub(super) fn split_lists<'a>(lists: &'a mut [Vec<u32>], counts: &[Vec<u32>]) -> Vec<Vec<&'a mut [u32]>> {
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
