//! Ballast's memory load balancer: reads neurodamus' dry-run output
//! (`cell_memory_usage.json`), assigns every cell to a (rank, cycle) bucket and reads and
//! writes neurodamus' allocation files (`allocation_r{R}_c{C}.pkl.gz`).
#![deny(unsafe_code)]

mod allocation;
pub mod arena;
pub mod atomic;
pub mod circuit;
pub mod corenrn;
mod dry_run;
mod error;
mod files;
pub mod files_dat;
pub mod gid_map;
pub mod limits;
pub mod network;
pub mod node_fit;
pub mod node_suggest;
pub mod pickle;
mod progress;
pub mod quote;
pub mod read_file;
#[cfg(feature = "sonata")]
pub mod sonata;
pub mod spawn;
mod strategy;
mod summary;
pub mod synthetic;

// One public path per item (ci/public_paths.py checks the rustdoc output): the modules above
// that are private publish their items here, once.
pub use allocation::{
    Allocation, Bucket, GidProblems, PopulationAllocation, PopulationBucket, PopulationGid, ProblemSite,
};
pub use dry_run::{
    CostError, CostField, DryRun, DryRunWithNotes, GidMetype, Metype, MetypeGids, Population, KNOWN_KEYS,
    MAX_TOTAL_KB, SYNAPSE_KB,
};
pub use error::{BalancerError, Result};
pub use files::{
    allocation_file_name, load_or_generate, read_allocation, sidecar_file_name, stage_allocation,
    write_allocation, AllocationCosts, AllocationSource, CostInputs, LoadedAllocation,
};
pub use progress::Progress;
pub use strategy::{
    balance, balance_charged, neurodamus, transport_aware, Balanced, BalancerConfig, BalancerConfigBuilder,
    Strategy,
};
pub use summary::{BucketLoad, GidTables, LoadStats, PopulationLoad, Summary};
