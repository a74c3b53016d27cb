//! Ballast's memory load balancer: reads neurodamus' dry-run output
//! (`cell_memory_usage.json`), assigns every cell to a (rank, cycle) bucket and reads and
//! writes neurodamus' allocation files (`allocation_r{R}_c{C}.pkl.gz`).
//!
//! # Example: the balancer from Rust
//!
//! A dry run read, balanced with a progress counter, checked and summarised, and written as
//! the allocation file neurodamus reads, with its sidecar (docs/BALANCER.md, "The balancer
//! from Rust", walks through it). Memory is in KB: `metype_memory` per cell, plus
//! [`SYNAPSE_KB`] (1.9 KB) per synapse; every error is a [`BalancerError`] naming the file,
//! field, population or gid at fault.
//!
//! ```
//! use ballast_balancer::atomic::commit_all;
//! use ballast_balancer::{
//!     balance_charged, read_allocation, stage_allocation, AllocationCosts, BalancerConfig, DryRun,
//!     Progress, Strategy, Summary,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! // neurodamus' `cell_memory_usage.json`: KB per cell of each metype, synapses per cell
//! // (absent: 0), the gids of each metype per population.
//! let input = dir.path().join("cell_memory_usage.json");
//! std::fs::write(
//!     &input,
//!     r#"{"metype_memory": {"L5_TTPC": 100.0, "L4_SS": 40.0},
//!         "metype_cell_syn_average": {"L5_TTPC": 20.0},
//!         "pop_metype_gids": {"All": {"L5_TTPC": [0, 1, 2], "L4_SS": [3, 4, 5, 6]}}}"#,
//! )?;
//! // BalancerError::Io, JsonSyntax or DryRun (the JSON path of the bad field).
//! let dry_run = DryRun::from_json_file(&input)?;
//! assert_eq!(dry_run.cell_count(), 7);
//!
//! // 2 ranks × 1 cycle. BalancerError::InvalidParameter for 0 ranks or cycles, and from
//! // check_size for more buckets than the cells justify or more memory than is available.
//! let config = BalancerConfig::builder().ranks(2).cycles(1).strategy(Strategy::Lpt).build()?;
//! config.check_size(&dry_run)?;
//!
//! // No connectivity, no transport charge. Another thread may read `placed` meanwhile (a
//! // progress bar, started with `spawn::scoped`): LPT counts each cell placed, then gathered.
//! let placed = Progress::new();
//! let balanced = balance_charged(&dry_run, None, &config, None, Some(&placed));
//! assert_eq!(placed.get(), 2 * 7);
//! let allocation = balanced.allocation;
//!
//! // Every gid exactly once, every bucket in range (else BalancerError::Mismatch); the loads
//! // in KB: 3 cells of 100 + 1.9 × 20 and 4 of 40 = 574 KB, at best 287 KB per rank.
//! let (valid, summary) = Summary::checked(&allocation, &dry_run);
//! valid?;
//! assert!((summary.overall.total_kb - 574.0).abs() < 1e-9);
//! assert!((summary.overall.lower_bound_kb - 287.0).abs() < 1e-9);
//! assert!((summary.overall.max_rank_kb - 298.0).abs() < 1e-9);
//! assert_eq!(summary.rank_kb().len(), 2);
//!
//! // The allocation file and its sidecar (the costs it was balanced with), put in place
//! // together or not at all (BalancerError::PartialWrite names what was written).
//! let costs = AllocationCosts::new("my-tool", &dry_run, 2, 1, &balanced.strategy_name, "none");
//! let written = commit_all(vec![stage_allocation(dir.path(), &allocation)?, costs.stage(dir.path())?])?;
//! assert_eq!(written[0], dir.path().join("allocation_r2_c1.pkl.gz"));
//! assert_eq!(written[1], dir.path().join("allocation_r2_c1.json"));
//! // What neurodamus --lb-mode=Memory reads: {population: {(rank, cycle): [gid, ...]}}.
//! assert_eq!(read_allocation(&written[0])?, allocation);
//! # Ok(())
//! # }
//! ```
#![deny(unsafe_code)]

mod allocation;
mod arena;
pub mod atomic;
pub mod circuit;
pub mod corenrn;
mod dry_run;
mod error;
mod files;
pub mod files_dat;
mod gid_map;
pub mod limits;
pub mod network;
pub mod node_fit;
pub mod node_suggest;
pub mod pickle;
mod progress;
mod quote;
mod read_file;
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
pub use gid_map::GidMap;
pub use progress::Progress;
pub use strategy::{
    balance, balance_charged, neurodamus, transport_aware, Balanced, BalancerConfig, BalancerConfigBuilder,
    Strategy,
};
pub use summary::{BucketLoad, GidTables, LoadStats, PopulationLoad, Summary};
