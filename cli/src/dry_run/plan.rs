//! The dry run's plan: its options checked once ([`Plan::new`], before any input is read),
//! then, with the input, the transport charge ([`Plan::charge`]) and the ranks to balance
//! for ([`Plan::size`]: given, or the suggested nodes × ranks per node).
use std::path::PathBuf;

use anyhow::{bail, Context};
use ballast_balancer::atomic;
use ballast_balancer::circuit::MetypeMemory;
use ballast_balancer::node_suggest::Suggestion;
use ballast_balancer::synthetic::SyntheticSpec;
use ballast_balancer::transport_aware::TransportCharge;
use ballast_balancer::{BalancerConfig, Strategy};
use ballast_runtime::RuntimeConfig;

use super::input::Input;
use super::{DryRunArgs, TransportModel};
use crate::exchange::Exchange;
use crate::node_suggest::{self, NodeMemory, RanksPerNode};
use crate::plot;

/// Where the cells come from.
pub(super) enum Source {
    /// neurodamus' dry-run file (`--memory-usage`).
    MemoryUsage(PathBuf),
    /// The built-in generator (`--synthetic`), a circuit with `synapses` when given.
    Synthetic {
        spec: SyntheticSpec,
        synapses: Option<u64>,
    },
    /// A SONATA circuit (`--circuit`), its metypes' memory measured (`--memory-usage`) or
    /// the KB per cell given (`--cell-kb`, `--point-cell-kb`, or their defaults).
    Circuit {
        config: PathBuf,
        memory_usage: Option<PathBuf>,
        cell_kb: Option<f64>,
        point_cell_kb: Option<f64>,
    },
}

/// `ballast dry-run`'s options, checked: what the run does.
pub(super) struct Plan {
    pub source: Source,
    /// The balancer's configuration: `--num-target-ranks` (1 until sized), cycles, strategy.
    pub config: BalancerConfig,
    /// The runtime configuration whose transport memory is charged.
    pub runtime: RuntimeConfig,
    pub transport_model: TransportModel,
    pub exchange: Option<Exchange>,
    /// The runtime options given that only shape the transport charge (a note without one).
    pub charge_options_given: Vec<&'static str>,
    pub endpoint_overflow_given: bool,
    pub num_target_ranks: Option<u32>,
    pub ranks_per_node: Option<usize>,
    pub node_memory_gb: Option<f64>,
    pub rank_overhead_mb: f64,
    pub plot: Option<PathBuf>,
    pub output_dir: PathBuf,
    /// Where the dry run is written (`--write-memory-usage`), resolved.
    pub memory_usage_out: Option<PathBuf>,
    pub json: bool,
    pub timings: bool,
}

/// The ranks the input is balanced for, and the node view.
pub(super) struct Sizing {
    /// [`Plan::config`] with the ranks to balance for.
    pub config: BalancerConfig,
    /// Ranks per node: given, or this machine's cores where nodes are counted.
    pub rpn: Option<RanksPerNode>,
    /// The node suggestion, without `--num-target-ranks`.
    pub suggestion: Option<(Suggestion, RanksPerNode, NodeMemory)>,
}

impl Plan {
    /// Checks the options (nothing read yet but the environment's runtime configuration).
    pub fn new(args: &DryRunArgs) -> anyhow::Result<Plan> {
        check_combinations(args)?;
        let config = BalancerConfig::builder()
            .ranks(args.num_target_ranks.unwrap_or(1))
            .cycles(args.cycles)
            .strategy(args.strategy)
            .build()?;
        let runtime = args.runtime.to_config()?;
        if let Some(p) = &args.plot {
            plot::check_path(p)?;
        }
        if let Some(Some(p)) = &args.write_memory_usage {
            atomic::refuse_special(p).context("--write-memory-usage")?;
        }
        Ok(Plan {
            source: source(args),
            config,
            runtime,
            transport_model: args.transport_model,
            exchange: args.exchange,
            charge_options_given: args.runtime.given_charge_options(),
            endpoint_overflow_given: args.runtime.endpoint_overflow.is_some(),
            num_target_ranks: args.num_target_ranks,
            ranks_per_node: args.runtime.ranks_per_node,
            node_memory_gb: args.node_memory_gb,
            rank_overhead_mb: args.rank_overhead_mb,
            plot: args.plot.clone(),
            output_dir: args.output_dir.clone(),
            memory_usage_out: args.write_memory_usage.as_ref().map(|p| {
                p.clone()
                    .unwrap_or_else(|| args.output_dir.join("cell_memory_usage.json"))
            }),
            json: args.json,
            timings: args.timings,
        })
    }

    /// The transport memory each rank is charged (`--transport-model ballast`), checked
    /// against the input; a note for the charge options given without it.
    pub fn charge(&self, input: &Input) -> anyhow::Result<Option<TransportCharge>> {
        Ok(match self.transport_model {
            TransportModel::None if self.exchange.is_some() => {
                bail!("--exchange chooses the peers the transport charge counts: it needs --transport-model ballast")
            }
            TransportModel::None => {
                let unused = &self.charge_options_given;
                if !unused.is_empty() {
                    eprintln!(
                        "note: {} {} no effect: without --transport-model ballast no transport memory is charged",
                        unused.join(", "),
                        if unused.len() == 1 { "has" } else { "have" }
                    );
                }
                None
            }
            TransportModel::Ballast => {
                if input.network.is_none() && self.exchange != Some(Exchange::Allgather) {
                    bail!("--transport-model ballast needs the circuit's connectivity: use --circuit, or --synthetic with --synapses ({} has none), or --exchange allgather", input.label);
                }
                if self.config.strategy == Strategy::Neurodamus {
                    bail!(
                        "--transport-model ballast balances with its own algorithm; drop --strategy neurodamus"
                    );
                }
                if self.runtime.transport().max_endpoints == 0 && self.endpoint_overflow_given {
                    eprintln!("note: --endpoint-overflow has no effect: max_endpoints is 0 (no cap)");
                }
                let mut charge = ballast_sim::transport_charge(self.runtime.transport());
                // On the MPI native path the all-gather is MPI's own: it opens no peer.
                charge.ring_partners = self.exchange == Some(Exchange::Multisend) && !self.mpi_collectives();
                Some(charge)
            }
        })
    }

    /// True when the charged transport runs the collectives as MPI's own (the MPI native
    /// path): Ballast's all-gather then connects no peer.
    pub fn mpi_collectives(&self) -> bool {
        let t = self.runtime.transport();
        t.kind == ballast_runtime::TransportKind::Mpi && t.mpi_native
    }

    /// The ranks to balance for: `--num-target-ranks`, or the nodes suggested for the input
    /// (with `balance_charge`) × ranks per node; checked against the input's size and, when
    /// `charged`, against the transport model's range.
    pub fn size(
        &self,
        input: &Input,
        balance_charge: Option<&TransportCharge>,
        charged: bool,
    ) -> anyhow::Result<Sizing> {
        let mut config = self.config.clone();
        // Ranks per node: given, or this machine's cores where nodes are to be counted.
        let rpn = node_suggest::ranks_per_node(
            self.ranks_per_node,
            self.num_target_ranks.is_none() || self.node_memory_gb.is_some(),
        );
        let suggestion = match (self.num_target_ranks, rpn) {
            (None, Some(rpn)) => {
                let memory = node_suggest::node_memory(self.node_memory_gb)?;
                let s = node_suggest::suggest(
                    &input.dry_run,
                    input.network.as_ref(),
                    &config,
                    balance_charge,
                    self.rank_overhead_mb,
                    rpn,
                    memory,
                )?;
                config.ranks = u32::try_from(s.nodes.saturating_mul(rpn.ranks as u64)).map_err(|_| {
                    anyhow::anyhow!(
                        "the suggested {} nodes × {} ranks are more than 2^32 - 1 ranks: is the node memory ({:.3} GiB) below its ranks' overhead ({} × {:.1} MiB, --rank-overhead-mb)?",
                        s.nodes,
                        rpn.ranks,
                        memory.mb / 1024.0,
                        rpn.ranks,
                        self.rank_overhead_mb
                    )
                })?;
                Some((s, rpn, memory))
            }
            _ => None,
        };
        let ranks_option = if suggestion.is_some() {
            "the suggested ranks"
        } else {
            "--num-target-ranks"
        };
        config
            .check_size(&input.dry_run)
            .with_context(|| format!("{ranks_option} {} --cycles {}", config.ranks, config.cycles))?;
        if charged {
            // The charge saturates where the model overflows 64 bits: refused here, named.
            ballast_sim::check_transport_charge(self.runtime.transport(), config.ranks as usize)
                .with_context(|| format!("{ranks_option} {}", config.ranks))?;
        }
        Ok(Sizing {
            config,
            rpn,
            suggestion,
        })
    }
}

/// The input the options name (clap has checked that exactly one is given).
fn source(args: &DryRunArgs) -> Source {
    if let Some(config) = &args.circuit {
        let d = MetypeMemory::default();
        return Source::Circuit {
            config: config.clone(),
            memory_usage: args.memory_usage.clone(),
            cell_kb: args.cell_kb.or(d.cell_kb),
            point_cell_kb: args.point_cell_kb.or(d.point_cell_kb),
        };
    }
    if let Some(cells) = args.synthetic {
        let d = SyntheticSpec::default();
        return Source::Synthetic {
            spec: SyntheticSpec {
                cells,
                metypes: args.metypes.unwrap_or(d.metypes),
                populations: args.populations.unwrap_or(d.populations),
                seed: args.seed.unwrap_or(d.seed),
            },
            synapses: args.synapses,
        };
    }
    Source::MemoryUsage(args.memory_usage.clone().expect("clap requires an input"))
}

/// Options that only make sense with another one (clap's `requires` is not enforced for
/// members of a satisfied argument group, so this checks it).
fn check_combinations(args: &DryRunArgs) -> anyhow::Result<()> {
    let synthetic_only = [
        ("--metypes", args.metypes.is_some()),
        ("--populations", args.populations.is_some()),
        ("--seed", args.seed.is_some()),
        ("--synapses", args.synapses.is_some()),
    ];
    if args.synthetic.is_none() {
        if let Some((name, _)) = synthetic_only.iter().find(|(_, given)| *given) {
            bail!("{name} describes the synthetic input: it needs --synthetic CELLS");
        }
    }
    if args.circuit.is_none() && (args.cell_kb.is_some() || args.point_cell_kb.is_some()) {
        bail!("--cell-kb and --point-cell-kb give circuit cells their memory: they need --circuit");
    }
    Ok(())
}
