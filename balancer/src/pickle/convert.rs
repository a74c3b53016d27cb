//! The unpickled root to [`PopulationAllocation`]s: checks the shape
//! `{str: {(int, int): [int]}}`, naming population, key and item in every error, and walks
//! each value once within bounds proportional to the input (shared dicts or lists are
//! refused, not expanded).
use std::collections::BTreeMap;

use super::pickle_err;
use super::value::Val;
use super::vm::Vm;
use crate::allocation::{Bucket, PopulationAllocation};
use crate::error::Result;

impl Vm<'_> {
    /// Converts the unpickled root into populations, counting its visits.
    pub(super) fn populations(&mut self, root: &Val) -> Result<Vec<PopulationAllocation>> {
        let mut visits = 0;
        let result = self.convert(root, &mut visits);
        self.visits += visits;
        result
    }

    /// Walks the root dict, each population's dict once per population entry, and each
    /// bucket's gids: populations, buckets and gids visited are each bounded by the input
    /// size (each costs at least one byte unless shared through the memo), so a dict or list
    /// aliased many times is refused instead of walked many times.
    fn convert(&self, root: &Val, visits: &mut u64) -> Result<Vec<PopulationAllocation>> {
        let path = self.path;
        let e = |m: String| pickle_err(path, m);
        let Val::Dict(root_id) = root else {
            return Err(e(format!(
                "top level: expected a dict {{population: {{(rank, cycle): [gids]}}}}, found {}",
                root.describe()
            )));
        };
        // Each gid costs at least one input byte; more means aliased lists (amplification).
        let max_gids = self.data.len();
        let mut total = 0usize;
        let mut entries = 0usize;
        let mut out = Vec::with_capacity(self.dicts[*root_id].entries.len());
        for (i, (k, v)) in self.dicts[*root_id].entries.iter().enumerate() {
            *visits += 1;
            let Val::Str(name) = k else {
                return Err(e(format!(
                    "population key #{i}: expected a str population name, found {}",
                    k.describe()
                )));
            };
            let Val::Dict(bid) = v else {
                return Err(e(format!(
                    "population `{name}`: expected a dict {{(rank, cycle): [gids]}}, found {}",
                    v.describe()
                )));
            };
            entries = entries.saturating_add(self.dicts[*bid].entries.len());
            if entries > self.data.len() {
                return Err(e(format!(
                    "population `{name}`: more buckets than the pickle has bytes (one dict shared \
                     between populations?); refusing"
                )));
            }
            let mut buckets = BTreeMap::new();
            for (key, gids_val) in &self.dicts[*bid].entries {
                *visits += 1;
                let bucket = bucket_key(key).map_err(|m| e(format!("population `{name}`, key {m}")))?;
                let where_ = format!("population `{name}`, key ({}, {})", bucket.rank, bucket.cycle);
                let items: &[Val] = match gids_val {
                    Val::List(id) => &self.lists[*id],
                    Val::Tuple(t) => &t.items,
                    other => {
                        return Err(e(format!(
                            "{where_}: expected a list of gids, found {}",
                            other.describe()
                        )))
                    }
                };
                total = total.saturating_add(items.len());
                if total > max_gids {
                    return Err(e(format!(
                        "{where_}: more gids than the pickle has bytes (lists shared between \
                         buckets?); refusing"
                    )));
                }
                let mut gids = Vec::with_capacity(items.len());
                *visits += items.len() as u64;
                for (j, g) in items.iter().enumerate() {
                    match g {
                        Val::Int(x) if (0..=u32::MAX as i64).contains(x) => gids.push(*x as u32),
                        Val::Int(x) if *x < 0 => {
                            return Err(e(format!("{where_}, item {j}: gid {x} is negative")))
                        }
                        Val::Int(_) | Val::BigInt => {
                            return Err(e(format!(
                                "{where_}, item {j}: {} does not fit a u32 gid",
                                g.describe()
                            )))
                        }
                        other => {
                            return Err(e(format!(
                                "{where_}, item {j}: expected an int gid, found {}",
                                other.describe()
                            )))
                        }
                    }
                }
                buckets.insert(bucket, gids);
            }
            out.push(PopulationAllocation {
                name: name.to_string(),
                buckets,
            });
        }
        Ok(out)
    }
}

fn bucket_key(key: &Val) -> std::result::Result<Bucket, String> {
    let Val::Tuple(t) = key else {
        return Err(format!("{}: expected a (rank, cycle) tuple", key.describe()));
    };
    let part = |v: &Val, what: &str| -> std::result::Result<u32, String> {
        match v {
            Val::Int(x) if (0..=u32::MAX as i64).contains(x) => Ok(*x as u32),
            other => Err(format!(
                "{what} must be a non-negative int, found {}",
                other.describe()
            )),
        }
    };
    match t.items.as_slice() {
        [r, c] => {
            let rank = part(r, "rank").map_err(|m| format!("(.., ..): {m}"))?;
            let cycle = part(c, "cycle").map_err(|m| format!("({rank}, ..): {m}"))?;
            Ok(Bucket { rank, cycle })
        }
        items => Err(format!("tuple of {} items: expected (rank, cycle)", items.len())),
    }
}
