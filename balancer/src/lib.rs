//! Ballast's memory load balancer: reads neurodamus' dry-run output
//! (`cell_memory_usage.json`), assigns every cell to a (rank, cycle) bucket and reads and
//! writes neurodamus' allocation files (`allocation_r{R}_c{C}.pkl.gz`).
#![deny(unsafe_code)]

pub mod allocation;
pub mod error;

pub use allocation::{Allocation, Bucket, PopulationAllocation};
pub use error::{BalancerError, Result};
