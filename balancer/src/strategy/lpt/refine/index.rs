//! Refinement's index of swaps by the KB they transfer (pairs of KB classes binned by
//! their difference).
use super::{partition_near, Best, Transfer};
use crate::strategy::lpt::Order;

/// Refinement's index of swaps by the KB they transfer. A class is a run of equal KB in
/// the order (contiguous positions: several populations or metypes); a swap trades a cell
/// of class `i` for one of a lighter class `j` and transfers `kb[i] - kb[j]`. Every pair
/// of classes whose difference is below `limit` is listed, binned by that difference, so
/// a step looks only at the pairs near half its gap instead of scanning both buckets.
/// Gaps never grow, so half a step's gap is at most half the first one's, and `limit`
/// leaves a margin above that for the search to reach.
pub(in crate::strategy::lpt) struct SwapIndex {
    /// `start[c]..start[c + 1]`: the positions of class `c` (`start[C]` = cell count).
    pub(in crate::strategy::lpt) start: Vec<u32>,
    /// `kb[c]`: its KB, strictly decreasing.
    pub(in crate::strategy::lpt) kb: Vec<f64>,
    /// Pairs differing by `limit` or more are not listed.
    pub(in crate::strategy::lpt) limit: f64,
    /// The bin of a difference `d` is `(d * scale) as usize`, capped at the last: monotone
    /// in `d`, so a later bin holds only larger differences.
    pub(in crate::strategy::lpt) scale: f64,
    /// `pairs[bins[k]..bins[k + 1]]`: the pairs `[i, j]` (`i < j`) of bin `k`.
    pub(in crate::strategy::lpt) bins: Vec<u32>,
    pub(in crate::strategy::lpt) pairs: Vec<[u16; 2]>,
}

/// Class ids are `u16`.
pub(in crate::strategy::lpt) const MAX_CLASSES: usize = 1 << 16;

/// Pairs the index may hold: a quarter per cell (5 bytes a pair with the bins: 1.25 bytes
/// per cell), or 2^21 (10 MB) for small inputs.
pub(in crate::strategy::lpt) fn max_pairs(cells: usize) -> usize {
    (cells / 4).max(1 << 21)
}

impl SwapIndex {
    /// The index for a first gap of `gap`, or `None` when the classes are too many for
    /// `u16` ids, their pairs too many for [`max_pairs`] (cells of one metype that differ:
    /// nearly every cell is its own class), or a KB is not finite, or one class's KB differ
    /// in sign of zero (then the scan, which reads each cell's own KB, decides).
    pub(in crate::strategy::lpt) fn new(order: &Order, gap: f64) -> Option<SwapIndex> {
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
    pub(in crate::strategy::lpt) fn len(&self) -> usize {
        self.start[self.kb.len()] as usize
    }

    #[inline]
    pub(in crate::strategy::lpt) fn bin(&self, d: f64) -> usize {
        ((d * self.scale) as usize).min(self.bins.len() - 2)
    }

    /// The pairs of bin `k`.
    #[inline]
    pub(in crate::strategy::lpt) fn pairs_of(&self, k: usize) -> &[[u16; 2]] {
        &self.pairs[self.bins[k] as usize..self.bins[k + 1] as usize]
    }

    /// The differences of the pairs of bin `k`.
    pub(in crate::strategy::lpt) fn differences(&self, k: usize) -> impl Iterator<Item = f64> + '_ {
        self.pairs_of(k)
            .iter()
            .map(|&[i, j]| self.kb[i as usize] - self.kb[j as usize])
    }

    /// Offers every swap the scan would offer, by the pairs in bins of increasing distance
    /// from half the gap, until the next bin's nearest difference is farther from it than
    /// the best so far (then it offers nothing better, nor an equal one). Visits at most
    /// `budget` pairs, and gives up when it would need pairs beyond `limit`: returns false
    /// then (and `best` is incomplete).
    pub(in crate::strategy::lpt) fn offer_swaps(
        &self,
        heavy: &[u32],
        light: &[u32],
        best: &mut Best,
        budget: usize,
    ) -> bool {
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
    pub(in crate::strategy::lpt) fn offer_pair(
        &self,
        i: usize,
        j: usize,
        heavy: &[u32],
        light: &[u32],
        best: &mut Best,
    ) {
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
