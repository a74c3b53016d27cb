//! Balancing strategies: turn a [`DryRun`] into an [`Allocation`] of `ranks × cycles` buckets.
//!
//! - [`Strategy::Lpt`] (default): all populations jointly, largest cell first onto the
//!   lightest bucket, then a move/swap refinement, then buckets dealt to ranks so rank totals
//!   are even. See [`lpt`].
//! - [`Strategy::Neurodamus`]: neurodamus' batched greedy, reproduced exactly. See [`neurodamus`].
//! - Transport-aware balancing: LPT and locality cuts that minimise the largest rank total
//!   with each rank charged its transport memory by a caller's function of its peers
//!   ([`TransportCharge`]). See [`transport_aware`].
//!
//! [`balance`] runs a [`Strategy`] on the cells alone; [`balance_charged`] is the one entry
//! point that also knows the circuit's connectivity: transport-aware with a charge, else
//! the strategy, with every rank's loads (cells, synapses, transport, peers).
use std::cmp::Ordering;

use crate::allocation::Allocation;
use crate::dry_run::DryRun;
use crate::error::{BalancerError, Result};
use crate::network::Network;
use crate::progress::Progress;

pub(crate) mod lpt;
pub mod neurodamus;
pub mod transport_aware;

pub(crate) use transport_aware::{RankLoads, TransportCharge};

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

/// `lpt` or `neurodamus`, as `--strategy` spells it and allocation sidecars record it.
impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(match self {
            Strategy::Lpt => "lpt",
            Strategy::Neurodamus => "neurodamus",
        })
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
        Strategy::Lpt => lpt::balance(dry_run, config, None),
        Strategy::Neurodamus => neurodamus::balance(dry_run, config),
    }
}

/// What one balancing pass gives: the allocation and, with connectivity, per-rank loads.
#[derive(Debug, Clone)]
pub struct Balanced {
    /// The allocation (`ranks × cycles` buckets).
    pub allocation: Allocation,
    /// The transport-blind loads, when the transport charge chose between candidates.
    pub blind: Option<RankLoads>,
    /// The chosen allocation's loads (transport included when charged); `None` without a
    /// network.
    pub loads: Option<RankLoads>,
    /// The candidates tried by the transport-aware search, in order (none without it).
    pub tried: Vec<transport_aware::Candidate>,
    /// The strategy's name as allocation sidecars record it: `lpt+transport` when charged,
    /// else `config.strategy` as [`Strategy`]'s `Display` spells it.
    pub strategy_name: String,
}

/// Balances `dry_run` for `config`: with both a `network` and a `charge`, transport-aware
/// ([`transport_aware::balance_transport_aware`], `config.strategy` ignored: LPT
/// throughout); otherwise with `config.strategy`, the loads evaluated on `network` when
/// given (charged when `charge` is given too). Memory grows with the bucket count: call
/// [`BalancerConfig::check_size`] first when the counts come from a user.
///
/// Progress is counted in `progress` (when given, for a progress bar) where the strategy
/// knows it: [`Strategy::Lpt`] without a charge adds every cell once when it is placed and
/// once when its gid is gathered into its bucket's list, up to twice the cell count; the
/// others leave it as it is.
pub fn balance_charged(
    dry_run: &DryRun,
    network: Option<&Network>,
    config: &BalancerConfig,
    charge: Option<&TransportCharge>,
    progress: Option<&Progress>,
) -> Balanced {
    match (charge, network) {
        (Some(ch), Some(net)) => {
            let r = transport_aware::balance_transport_aware(dry_run, net, config, ch);
            Balanced {
                allocation: r.allocation,
                blind: Some(r.blind.loads),
                loads: Some(r.aware.loads),
                tried: r.tried,
                strategy_name: "lpt+transport".to_owned(),
            }
        }
        _ => {
            let allocation = match config.strategy {
                Strategy::Lpt => lpt::balance(dry_run, config, progress),
                Strategy::Neurodamus => neurodamus::balance(dry_run, config),
            };
            let loads = network.map(|net| {
                let costs = transport_aware::CellCosts::new(dry_run, &net.offsets);
                let rank_of = transport_aware::rank_of_allocation(&allocation, &net.offsets);
                transport_aware::evaluate(net, &costs, &rank_of, allocation.ranks as usize, charge)
            });
            Balanced {
                allocation,
                blind: None,
                loads,
                tried: Vec::new(),
                strategy_name: config.strategy.to_string(),
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each strategy is written as `--strategy` reads it.
    #[test]
    fn strategy_display_is_what_from_str_reads() {
        for (strategy, name) in [(Strategy::Lpt, "lpt"), (Strategy::Neurodamus, "neurodamus")] {
            assert_eq!(strategy.to_string(), name);
            assert_eq!(name.parse::<Strategy>().unwrap(), strategy);
        }
    }
}
