//! Balancing strategies: turn a [`DryRun`] into an [`Allocation`] of `ranks × cycles` buckets.
//!
//! - [`Strategy::Lpt`] (default): all populations jointly, largest cell first onto the
//!   lightest bucket, then a move/swap refinement, then buckets dealt to ranks so rank totals
//!   are even. See [`lpt`].
//! - [`Strategy::Neurodamus`]: neurodamus' batched greedy, reproduced exactly. See [`neurodamus`].
use std::cmp::Ordering;

use crate::allocation::Allocation;
use crate::dryrun::DryRun;
use crate::error::{BalancerError, Result};

pub mod lpt;
pub mod neurodamus;

/// Which balancing algorithm to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Largest-processing-time-first greedy + refinement (Ballast's default).
    #[default]
    Lpt,
    /// neurodamus' batched greedy, per population (for comparison).
    Neurodamus,
}

impl std::str::FromStr for Strategy {
    type Err = BalancerError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "lpt" => Ok(Strategy::Lpt),
            "neurodamus" => Ok(Strategy::Neurodamus),
            other => Err(BalancerError::InvalidParameter(format!(
                "unknown strategy {other:?} (expected lpt or neurodamus)"
            ))),
        }
    }
}

/// The balancer's configuration: target ranks, cycles per rank, strategy.
/// Build with [`BalancerConfig::builder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BalancerConfig {
    /// Number of target ranks (`--num-target-ranks`), ≥ 1.
    pub ranks: u32,
    /// Model-building cycles per rank (`--cycles`, neurodamus' `ModelBuildingSteps`), ≥ 1.
    pub cycles: u32,
    pub strategy: Strategy,
}

impl BalancerConfig {
    /// A builder with 1 rank, 1 cycle, [`Strategy::Lpt`].
    pub fn builder() -> BalancerConfigBuilder {
        BalancerConfigBuilder(BalancerConfig {
            ranks: 1,
            cycles: 1,
            strategy: Strategy::Lpt,
        })
    }

    /// Number of buckets (`ranks × cycles`).
    pub fn buckets(&self) -> usize {
        self.ranks as usize * self.cycles as usize
    }

    /// Checks, before [`balance`] allocates, that `dry_run` justifies this many buckets (one
    /// per cell plus up to 2^20 empty ones) and that balancing fits in this machine's
    /// available memory ([`crate::limits::check_buckets`]). Errors with
    /// [`BalancerError::InvalidParameter`] naming ranks, cycles, cells and the memory needed.
    pub fn check_size(&self, dry_run: &DryRun) -> Result<()> {
        crate::limits::check_buckets(
            self.ranks,
            self.cycles,
            dry_run.cell_count() as u64,
            crate::limits::available_memory(),
        )
    }
}

/// Builder for [`BalancerConfig`]; [`BalancerConfigBuilder::build`] checks the values.
#[derive(Debug, Clone)]
pub struct BalancerConfigBuilder(BalancerConfig);

impl BalancerConfigBuilder {
    pub fn ranks(mut self, ranks: u32) -> Self {
        self.0.ranks = ranks;
        self
    }
    pub fn cycles(mut self, cycles: u32) -> Self {
        self.0.cycles = cycles;
        self
    }
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.0.strategy = strategy;
        self
    }
    /// Errors when ranks or cycles is 0, or ranks × cycles does not fit in memory indices.
    pub fn build(self) -> Result<BalancerConfig> {
        let c = self.0;
        if c.ranks == 0 {
            return Err(BalancerError::InvalidParameter(
                "the number of target ranks must be at least 1, got 0".into(),
            ));
        }
        if c.cycles == 0 {
            return Err(BalancerError::InvalidParameter(
                "the number of cycles must be at least 1, got 0".into(),
            ));
        }
        if (c.ranks as u64) * (c.cycles as u64) > u32::MAX as u64 {
            return Err(BalancerError::InvalidParameter(format!(
                "ranks × cycles = {} × {} is too large",
                c.ranks, c.cycles
            )));
        }
        Ok(c)
    }
}

/// Balances `dry_run` into `config.ranks × config.cycles` buckets with `config.strategy`.
/// Memory grows with the bucket count: call [`BalancerConfig::check_size`] first when the
/// counts come from a user.
pub fn balance(dry_run: &DryRun, config: &BalancerConfig) -> Allocation {
    match config.strategy {
        Strategy::Lpt => lpt::balance(dry_run, config),
        Strategy::Neurodamus => neurodamus::balance(dry_run, config),
    }
}

/// Min-heap entry of the greedy balancers (`BinaryHeap` is a max-heap, so the order is
/// reversed): the lightest `load` first, ties broken by the smallest `key` — a bucket index,
/// a rank, or a `(rank, cycle)` bucket, so that results are deterministic.
#[derive(Debug, PartialEq)]
pub(crate) struct Lightest<K> {
    pub load: f64,
    pub key: K,
}

impl<K: Ord> Eq for Lightest<K> {}

impl<K: Ord> Ord for Lightest<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .load
            .total_cmp(&self.load)
            .then_with(|| other.key.cmp(&self.key))
    }
}

impl<K: Ord> PartialOrd for Lightest<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
