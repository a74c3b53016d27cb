//! A map from gid to a value for one population: a dense vector when the gids are compact
//! (as neurodamus numbers them), a hash map when they are sparse, so that one huge gid costs
//! memory in proportion to the cells, not to the gid.

use std::collections::HashMap;

/// gid → `T` (see the module docs). Dense when `max gid < 4 × cells + 4096`.
#[derive(Debug, Clone, PartialEq)]
pub enum GidMap<T> {
    Dense(Vec<Option<T>>),
    Sparse(HashMap<u32, T>),
}

impl<T: Copy> GidMap<T> {
    /// An empty map for about `count` gids below `span`.
    pub fn for_span(span: usize, count: usize) -> GidMap<T> {
        if span <= 4 * count + 4096 {
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
}
