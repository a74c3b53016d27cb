//! Ballast's memory load balancer: reads neurodamus' dry-run output
//! (`cell_memory_usage.json`), assigns every cell to a (rank, cycle) bucket and reads and
//! writes neurodamus' allocation files (`allocation_r{R}_c{C}.pkl.gz`).
#![deny(unsafe_code)]

pub mod allocation;
pub mod arena;
pub mod atomic;
pub mod circuit;
pub mod corenrn;
pub mod dry_run;
pub mod error;
pub mod files;
pub mod files_dat;
pub mod gid_map;
pub mod limits;
pub mod network;
pub mod node_fit;
pub mod node_suggest;
pub mod pickle;
pub mod progress;
pub mod quote;
pub mod read_file;
#[cfg(feature = "sonata")]
pub mod sonata;
pub mod spawn;
pub mod strategy;
pub mod summary;
pub mod synthetic;

pub use allocation::{Allocation, Bucket, GidProblems, PopulationAllocation};
pub use dry_run::DryRun;
pub use error::{BalancerError, Result};
pub use files::{
    allocation_file_name, load_or_generate, read_allocation, write_allocation, AllocationSource,
    LoadedAllocation,
};
pub use progress::Progress;
pub use strategy::{balance, balance_charged, transport_aware, Balanced, BalancerConfig, Strategy};
pub use summary::{GidTables, LoadStats, Summary};
