//! LPT's refinement: moves and swaps between the heaviest and the lightest bucket while
//! that lowers the heavier of the two, the swaps found in an index of KB classes
//! ([`index`]) or by a scan of both buckets.
use super::Order;

pub(super) mod index;

use index::SwapIndex;

/// The heaviest and the lightest bucket (the first of several equal ones, as a scan from
/// bucket 0 finds them), kept in two tournament trees updated in O(log B) per change.
pub(super) struct Extremes {
    pub(super) size: usize,
    /// Node `n` holds the index of the heaviest (lightest) bucket below it; leaves from `size`.
    pub(super) max: Vec<u32>,
    pub(super) min: Vec<u32>,
}

impl Extremes {
    pub(super) fn new(loads: &[f64]) -> Extremes {
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
    pub(super) fn pull(&mut self, loads: &[f64], n: usize) {
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

    pub(super) fn update(&mut self, loads: &[f64], b: usize) {
        let mut n = (self.size + b) / 2;
        while n >= 1 {
            self.pull(loads, n);
            n /= 2;
        }
    }

    pub(super) fn heaviest(&self) -> usize {
        self.max[1] as usize
    }

    pub(super) fn lightest(&self) -> usize {
        self.min[1] as usize
    }
}

/// The best transfer found from the heaviest bucket to the lightest.
#[derive(Clone, Copy)]
pub(super) enum Transfer {
    /// Move the cell at this position of the heavy bucket.
    Move(usize),
    /// Swap the cells at these positions (heavy, light).
    Swap(usize, usize),
}

/// The best transfer offered so far: the smallest `|d - half|` among useful ones, the
/// lowest `key` (the scan's order) among equal ones. Offered in the scan's order, that is
/// the scan's rule: a later candidate wins only when strictly closer.
pub(super) struct Best {
    pub(super) half: f64,
    pub(super) gap: f64,
    pub(super) eps: f64,
    /// (`|d - half|`, key, d, transfer).
    pub(super) found: Option<(f64, u64, f64, Transfer)>,
}

impl Best {
    /// Whether transferring `d` lowers the heavier of the two buckets (by more than noise).
    #[inline]
    pub(super) fn useful(&self, d: f64) -> bool {
        d > self.eps && d < self.gap - self.eps
    }

    #[inline]
    pub(super) fn offer(&mut self, d: f64, key: u64, t: Transfer) {
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
#[inline]
pub(super) fn partition_near(v: &[u32], x: u32, total: usize) -> usize {
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
pub(super) fn offer_moves(order: &Order, heavy: &[u32], best: &mut Best) {
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
pub(super) fn offer_swaps_by_scan(
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

/// Pairs a step's index search may visit before it hands the step to the scan, for heavy
/// and light buckets of `cells` cells together: a pair costs two short searches of the
/// buckets, about what the scan spends on eight cells.
pub(super) fn search_budget(cells: usize) -> usize {
    cells / 8 + 8
}

/// Buckets must average this many cells for the swap index to pay: below, a scan of both
/// buckets costs less than the index's searches per pair.
pub(super) const INDEX_MIN_CELLS_PER_BUCKET: usize = 256;

/// Moves and swaps between the heaviest and the lightest bucket while that lowers the
/// heavier of the two. `members[b]` stays sorted (by descending KB).
#[cfg(test)]
pub(super) fn refine(order: &Order, loads: &mut [f64], members: &mut [Vec<u32>]) {
    refine_tracked(order, loads, members, &mut Vec::new());
}

/// [`refine`], appending to `moved` (position, new bucket) for every cell it moves.
pub(super) fn refine_tracked(
    order: &Order,
    loads: &mut [f64],
    members: &mut [Vec<u32>],
    moved: &mut Vec<(u32, usize)>,
) {
    let indexed = order.len >= INDEX_MIN_CELLS_PER_BUCKET * loads.len();
    refine_with(order, loads, members, indexed, search_budget, moved);
}

/// [`refine`], with the swap index when `indexed` (and the order allows one), and
/// `budget(cells)` pairs per step.
pub(super) fn refine_with(
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
