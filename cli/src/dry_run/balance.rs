//! The dry run's balancing step: the strategy on the input, neurodamus' result on the same
//! input beside it (for comparison), and the fewest nodes that fit when a node size is
//! given.
use std::time::Instant;

use ballast_balancer::node_fit::{fewest_nodes, Fit, NodeFitError};
use ballast_balancer::transport_aware::{Candidate, RankLoads, TransportCharge};
use ballast_balancer::CostInputs;
use ballast_balancer::{
    balance_charged, Allocation, Balanced, BalancerConfig, GidTables, LoadStats, Progress, Strategy,
};

use super::input::Input;
use super::plan::{Plan, Sizing};

/// What the balancing step gives: the result, neurodamus' on the same input (when another
/// strategy ran) and the fewest nodes that fit (when a node size is given).
pub(super) struct BalanceStep {
    pub allocation: Allocation,
    pub blind: Option<RankLoads>,
    pub loads: Option<RankLoads>,
    pub tried: Vec<Candidate>,
    pub strategy_name: String,
    pub seconds: f64,
    pub baseline: Option<LoadStats>,
    /// The dry run's part of the sidecar.
    pub cost_inputs: CostInputs,
    pub fit: Option<Fit>,
}

/// Balances the input for `sizing`'s ranks with `charge`, progress counted in `placed`;
/// also gives the summary's gid tables, built beside the balancing.
pub(super) fn balance_step(
    plan: &Plan,
    input: &Input,
    sizing: &Sizing,
    charge: Option<&TransportCharge>,
    placed: &Progress,
) -> anyhow::Result<(BalanceStep, GidTables)> {
    let config = &sizing.config;
    let dry_run = &input.dry_run;
    // On a second thread while the strategy runs: neurodamus' result on the same input,
    // for comparison (one greedy pass), and what the sidecar takes from the dry run.
    let (balanced, seconds, (baseline, cost_inputs, gid_tables)) = std::thread::scope(|s| {
        let side = ballast_balancer::spawn::side(s, || {
            let baseline = (config.strategy != Strategy::Neurodamus).then(|| {
                let nd = BalancerConfig {
                    strategy: Strategy::Neurodamus,
                    ..config.clone()
                };
                ballast_balancer::neurodamus::overall_stats(dry_run, &nd)
            });
            // The summary's gid tables too, while they are small (at whole-brain sizes they
            // would add to the balancing's peak memory).
            (
                baseline,
                CostInputs::new(dry_run),
                GidTables::new(dry_run, 64 << 20),
            )
        });
        let start = Instant::now();
        let balanced = balance_charged(dry_run, input.network.as_ref(), config, charge, Some(placed));
        let seconds = start.elapsed().as_secs_f64();
        (balanced, seconds, side.join())
    });
    let Balanced {
        allocation,
        blind,
        loads,
        tried,
        strategy_name,
    } = balanced;
    // The fewest nodes that fit, when a node size is given (before any output is written:
    // no fit is an error).
    let fit = match (plan.node_memory_gb, sizing.rpn.map(|r| r.ranks)) {
        (Some(gib), Some(k)) => Some(
            fewest_nodes(
                &input.dry_run,
                input.network.as_ref(),
                config,
                charge,
                k,
                gib * 1024.0 * 1024.0,
            )
            .map_err(|e| match e {
                e @ NodeFitError::NoFit { .. } => anyhow::Error::new(e),
                e => anyhow::Error::new(e).context("--node-memory-gb"),
            })?,
        ),
        _ => None,
    };

    let step = BalanceStep {
        allocation,
        blind,
        loads,
        tried,
        strategy_name,
        seconds,
        baseline,
        cost_inputs,
        fit,
    };
    Ok((step, gid_tables))
}
