//! Maps and sets of the gids of one population: dense (a vector or a bitmap indexed by gid)
//! when the gids are compact, as neurodamus numbers them, a hash map or set (FxHash) when
//! they are sparse, so that one huge gid costs memory in proportion to the cells, not to the
//! gid. [`GidMap`] holds any small value; [`GidIndex`] holds a `u32` in 4 bytes per gid;
//! [`GidSet`] is 1 bit per gid. Only [`GidMap`] is public (at the crate root): the dry run's
//! per-population tables are made of it; the index and the set serve the balancer's checks.

use std::collections::HashMap;

use rustc_hash::{FxHashMap, FxHashSet};

/// True when `span` (largest gid + 1) is compact enough for `count` gids to be stored
/// densely: at most 4 slots per gid, plus 4096.
fn dense(span: usize, count: usize) -> bool {
    span <= count.saturating_mul(4).saturating_add(4096)
}

/// gid → `T`, for the gids of one population: a vector indexed by gid when the gids are
/// compact (`max gid < 4 × cells + 4096`, as neurodamus numbers them), else a hash map, so
/// that one huge gid costs memory in proportion to the cells, not to the gid. Returned by
/// [`DryRun::gid_kb_table`](crate::DryRun::gid_kb_table) and
/// [`DryRun::gid_metype_table`](crate::DryRun::gid_metype_table), one per population.
#[derive(Debug, Clone, PartialEq)]
pub enum GidMap<T> {
    /// Slot `gid` holds the gid's value.
    Dense(Vec<Option<T>>),
    /// The gids that have a value.
    Sparse(HashMap<u32, T>),
}

impl<T: Copy> GidMap<T> {
    /// An empty map for about `count` gids below `span`.
    pub fn for_span(span: usize, count: usize) -> GidMap<T> {
        if dense(span, count) {
            GidMap::Dense(vec![None; span])
        } else {
            GidMap::Sparse(HashMap::with_capacity(count))
        }
    }

    /// The value of `gid`, if any.
    pub fn get(&self, gid: u32) -> Option<T> {
        match self {
            GidMap::Dense(v) => v.get(gid as usize).copied().flatten(),
            GidMap::Sparse(m) => m.get(&gid).copied(),
        }
    }

    /// Sets `gid` to `value`; returns the previous value. A dense map grows as needed.
    pub fn insert(&mut self, gid: u32, value: T) -> Option<T> {
        match self {
            GidMap::Dense(v) => {
                if gid as usize >= v.len() {
                    v.resize(gid as usize + 1, None);
                }
                v[gid as usize].replace(value)
            }
            GidMap::Sparse(m) => m.insert(gid, value),
        }
    }
}

/// gid → `u32` (a metype index, a position), `u32::MAX` excluded: dense (4 bytes per slot,
/// `u32::MAX` = absent) under the same rule as [`GidMap`], else an FxHash map.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum GidIndex {
    Dense(Vec<u32>),
    Sparse(FxHashMap<u32, u32>),
}

impl GidIndex {
    const ABSENT: u32 = u32::MAX;

    /// An empty index for about `count` gids below `span`.
    pub(crate) fn for_span(span: usize, count: usize) -> GidIndex {
        if dense(span, count) {
            GidIndex::Dense(vec![Self::ABSENT; span])
        } else {
            GidIndex::Sparse(FxHashMap::with_capacity_and_hasher(count, Default::default()))
        }
    }

    /// The value of `gid`, if any.
    #[inline]
    pub(crate) fn get(&self, gid: u32) -> Option<u32> {
        match self {
            GidIndex::Dense(v) => v.get(gid as usize).copied().filter(|&x| x != Self::ABSENT),
            GidIndex::Sparse(m) => m.get(&gid).copied(),
        }
    }

    /// Sets `gid` to `value` (< `u32::MAX`); a dense index grows as needed.
    #[inline]
    pub(crate) fn insert(&mut self, gid: u32, value: u32) {
        debug_assert!(value != Self::ABSENT);
        match self {
            GidIndex::Dense(v) => {
                if gid as usize >= v.len() {
                    v.resize(gid as usize + 1, Self::ABSENT);
                }
                v[gid as usize] = value;
            }
            GidIndex::Sparse(m) => {
                m.insert(gid, value);
            }
        }
    }
}

/// A set of gids: a bitmap under the same rule as [`GidMap`] (1 bit per slot), else an
/// FxHash set.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum GidSet {
    Bitmap(Vec<u64>),
    Sparse(FxHashSet<u32>),
}

impl GidSet {
    /// An empty set for about `count` gids below `span`.
    pub(crate) fn for_span(span: usize, count: usize) -> GidSet {
        if dense(span, count) {
            GidSet::Bitmap(vec![0; span.div_ceil(64)])
        } else {
            GidSet::Sparse(FxHashSet::with_capacity_and_hasher(count, Default::default()))
        }
    }

    /// True when `gid` is in the set.
    #[inline]
    pub(crate) fn contains(&self, gid: u32) -> bool {
        match self {
            GidSet::Bitmap(b) => b
                .get(gid as usize / 64)
                .is_some_and(|w| w & (1 << (gid % 64)) != 0),
            GidSet::Sparse(s) => s.contains(&gid),
        }
    }

    /// Adds `gid`; false when it was already there. A bitmap grows as needed.
    #[inline]
    pub(crate) fn insert(&mut self, gid: u32) -> bool {
        match self {
            GidSet::Bitmap(b) => {
                let w = gid as usize / 64;
                if w >= b.len() {
                    b.resize(w + 1, 0);
                }
                let bit = 1u64 << (gid % 64);
                let fresh = b[w] & bit == 0;
                b[w] |= bit;
                fresh
            }
            GidSet::Sparse(s) => s.insert(gid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_and_sparse_behave_alike() {
        let mut d: GidMap<f64> = GidMap::for_span(10, 10);
        let mut s: GidMap<f64> = GidMap::for_span(u32::MAX as usize + 1, 2);
        assert!(matches!(d, GidMap::Dense(_)) && matches!(s, GidMap::Sparse(_)));
        for m in [&mut d, &mut s] {
            assert_eq!(m.insert(3, 1.5), None);
            assert_eq!(m.insert(3, 2.5), Some(1.5));
            assert_eq!(m.get(3), Some(2.5));
            assert_eq!(m.get(4), None);
            assert_eq!(m.get(u32::MAX), None);
        }
        assert_eq!(s.insert(u32::MAX, 7.0), None);
        assert_eq!(s.get(u32::MAX), Some(7.0));
    }

    #[test]
    fn index_and_set_dense_and_sparse_behave_alike() {
        for (span, count) in [(100, 100), (u32::MAX as usize + 1, 2)] {
            let mut i = GidIndex::for_span(span, count);
            let mut s = GidSet::for_span(span, count);
            assert_eq!(matches!(i, GidIndex::Dense(_)), span == 100);
            assert_eq!(matches!(s, GidSet::Bitmap(_)), span == 100);
            for g in [3, 64, 99, 1000, u32::MAX] {
                assert_eq!(i.get(g), None);
                i.insert(g, g / 2);
                assert_eq!(i.get(g), Some(g / 2));
                assert!(!s.contains(g));
                assert!(s.insert(g));
                assert!(!s.insert(g));
                assert!(s.contains(g));
            }
            assert_eq!(i.get(4), None);
            assert!(!s.contains(4) && !s.contains(63) && !s.contains(65));
        }
    }
}
