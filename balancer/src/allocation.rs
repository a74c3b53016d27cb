//! The allocation: which gids of each population go to which (rank, cycle) bucket.
use std::collections::BTreeMap;

/// One (rank, cycle) bucket. Ordered by rank, then cycle, like neurodamus' `(rank, cycle)` keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bucket {
    pub rank: u32,
    pub cycle: u32,
}

/// The gids of one population, per bucket, in the order they were assigned.
/// Buckets that got no cell may be absent (neurodamus only writes buckets with cells).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PopulationAllocation {
    pub name: String,
    pub buckets: BTreeMap<Bucket, Vec<u32>>,
}

/// A whole allocation: `ranks × cycles` buckets, populations in input order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub ranks: u32,
    pub cycles: u32,
    pub populations: Vec<PopulationAllocation>,
}
