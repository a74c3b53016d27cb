//! LPT's greedy placement: every cell onto the currently lightest bucket, runs of equal
//! cells in O(1) per cell, then the buckets' lists built from the noted buckets on all cores.
use std::collections::BinaryHeap;

use super::gather::{each_on_a_thread, exact_lists, split_lists, Slot, MAX_THREADS};
use super::Order;
use crate::progress::Progress;

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
pub(super) fn greedy(order: &Order, nbuckets: usize, done: &Progress) -> (Vec<f64>, Vec<Vec<u32>>) {
    let mut assign = vec![0u32; order.len];
    let loads = greedy_noting(order, nbuckets, done, &mut assign);
    (loads, members_of(&assign, nbuckets))
}

/// [`greedy`]'s loads, noting each position's bucket in `assign` (`order.len` long) instead
/// of appending it to its bucket's list: the lists are built afterwards on all cores
/// ([`members_of`]), which halves the time of this loop, the one that cannot be shared.
#[inline(never)]
pub(super) fn greedy_noting<S: Slot>(
    order: &Order,
    nbuckets: usize,
    done: &Progress,
    assign: &mut [S],
) -> Vec<f64> {
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
        done.add(s.gids.len() as u64);
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
pub(super) fn spread_weightless<S: Slot>(order: &Order, loads: &[f64], done: &Progress, assign: &mut [S]) {
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
        done.add(s.gids.len() as u64);
    }
}

/// Each bucket's positions, ascending, from `assign` (each position's bucket): what the
/// greedy would have appended, list by list. The positions are cut into one range per core;
/// each range's cells are counted per bucket, every list is allocated at its exact length and
/// split at those counts, and each range fills its parts on its own thread.
pub(super) fn members_of<S: Slot>(assign: &[S], nbuckets: usize) -> Vec<Vec<u32>> {
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
pub(super) const MEMBERS_PER_THREAD: usize = 1 << 16;

/// Whether bucket `a` comes before bucket `b` in (load, index) order.
#[inline]
pub(super) fn lighter(loads: &[f64], a: u32, b: u32) -> bool {
    let (x, y) = (loads[a as usize], loads[b as usize]);
    x < y || (x == y && a < b)
}

/// A queue of bucket indices sorted by (load, index), in a ring of fixed capacity (every
/// bucket is in it at most once).
pub(super) struct Ring {
    pub(super) buf: Vec<u32>,
    pub(super) head: usize,
    pub(super) len: usize,
}

impl Ring {
    pub(super) fn new(capacity: usize) -> Ring {
        Ring {
            buf: vec![0; capacity.max(1)],
            head: 0,
            len: 0,
        }
    }

    #[inline]
    pub(super) fn slot(&self, k: usize) -> usize {
        let i = self.head + k;
        if i >= self.buf.len() {
            i - self.buf.len()
        } else {
            i
        }
    }

    #[inline]
    pub(super) fn get(&self, k: usize) -> u32 {
        self.buf[self.slot(k)]
    }

    #[inline]
    pub(super) fn front(&self) -> Option<u32> {
        (self.len > 0).then(|| self.buf[self.head])
    }

    #[inline]
    pub(super) fn pop_front(&mut self) -> u32 {
        let b = self.buf[self.head];
        self.head = self.slot(1);
        self.len -= 1;
        b
    }

    /// Appends `b`, then moves it back past the entries it comes before in (load, index)
    /// order.
    #[inline]
    pub(super) fn push_sorted(&mut self, loads: &[f64], b: u32) {
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

    pub(super) fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }
}
