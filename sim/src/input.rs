//! Circuits to simulate: the built-in synthetic circuit (positions on a wrap-around sheet,
//! distance-dependent connectivity, distance-derived delays) or a SONATA circuit (feature
//! `sonata`; constant delay), each with its dry run (what the balancer balances) and a
//! [`SimCircuit`] (what the ranks simulate).
use crate::model::{DelayModel, SYNTHETIC_D_MIN_MS, SYNTHETIC_VELOCITY_UM_PER_MS};
use crate::run::SimCircuit;
use crate::SimError;
use ballast_balancer::network::Network;
use ballast_balancer::synthetic::{generate_circuit, CircuitSpec};
use ballast_balancer::transport_aware::CellCosts;
use ballast_balancer::DryRun;

/// A circuit with its dry run.
pub struct SimInput {
    /// Per-metype memory and gids, as the balancer reads them.
    pub dry_run: DryRun,
    /// The circuit to simulate.
    pub circuit: SimCircuit,
    /// Where it came from, for messages.
    pub label: String,
}

/// Estimated KB of every cell (cell + synapses), by global index.
fn cell_kb(dry_run: &DryRun, network: &Network) -> Vec<f64> {
    let costs = CellCosts::new(dry_run, &network.offsets);
    costs
        .cell_kb
        .iter()
        .zip(&costs.synapse_kb)
        .map(|(a, b)| a + b)
        .collect()
}

impl SimInput {
    /// The synthetic circuit of `spec`; delays from soma distance on the sheet (see
    /// [`crate::model`]).
    pub fn synthetic(spec: &CircuitSpec) -> Result<SimInput, SimError> {
        let c = generate_circuit(spec)?;
        let n = c.network.cell_count();
        // The generator's sheet side, µm (see `synthetic::generate_circuit`).
        let side_um = (n as f64 / spec.density_per_mm2).sqrt() * 1000.0;
        let positions = c.positions.iter().map(|&[x, y]| [x, y, 0.0]).collect();
        let delays = DelayModel::Distance {
            d_min_ms: SYNTHETIC_D_MIN_MS,
            velocity_um_per_ms: SYNTHETIC_VELOCITY_UM_PER_MS,
            period_um: Some(side_um),
            positions,
        };
        let kb = cell_kb(&c.dry_run, &c.network);
        let label = format!(
            "synthetic circuit ({n} cells, {} connections, seed {})",
            c.network.connection_count(),
            spec.dry_run.seed
        );
        Ok(SimInput {
            circuit: SimCircuit::new(c.network, kb, delays)?,
            dry_run: c.dry_run,
            label,
        })
    }

    /// A SONATA circuit (its placed populations) with a constant delay of `delay_ms`.
    #[cfg(feature = "sonata")]
    pub fn sonata(
        config: &std::path::Path,
        memory: &ballast_balancer::circuit::MetypeMemory,
        delay_ms: f64,
    ) -> Result<SimInput, SimError> {
        let circuit = ballast_balancer::sonata::Circuit::open(config)?;
        let (dry_run, network) = ballast_balancer::circuit::dry_run_from_circuit(&circuit, memory)?;
        let kb = cell_kb(&dry_run, &network);
        let delays = edge_delays(&circuit, &network, delay_ms);
        let label = format!(
            "{} ({} cells, {} connections)",
            config.display(),
            network.cell_count(),
            network.connection_count()
        );
        Ok(SimInput {
            circuit: SimCircuit::new(network, kb, delays)?,
            dry_run,
            label,
        })
    }
}

/// The circuit's per-edge delays between placed cells (global indices as in
/// `circuit::dry_run_from_circuit`: placed populations in circuit order), or the constant
/// `default_ms` when no edge population has them.
#[cfg(feature = "sonata")]
fn edge_delays(
    circuit: &ballast_balancer::sonata::Circuit,
    network: &Network,
    default_ms: f64,
) -> DelayModel {
    use crate::model::CellPair;
    use std::collections::HashMap;
    let offset_of: HashMap<&str, usize> = circuit
        .node_populations
        .iter()
        .filter(|p| !p.is_virtual)
        .enumerate()
        .map(|(k, p)| (p.name.as_str(), network.offsets[k]))
        .collect();
    let mut pairs: HashMap<CellPair, f32> = HashMap::new();
    for e in &circuit.edge_populations {
        let (Some(&so), Some(&to), Some(d)) = (
            offset_of.get(e.source.as_str()),
            offset_of.get(e.target.as_str()),
            e.delays.as_ref(),
        ) else {
            continue;
        };
        for ((&s, &t), &d) in e.source_ids.iter().zip(&e.target_ids).zip(d) {
            let key = CellPair {
                source: (so + s as usize) as u32,
                target: (to + t as usize) as u32,
            };
            let v = pairs.entry(key).or_insert(d);
            *v = v.min(d);
        }
    }
    if pairs.is_empty() {
        return DelayModel::Constant(default_ms);
    }
    let mut min_ms = pairs.values().fold(f64::INFINITY, |m, &d| m.min(d as f64));
    if pairs.len() < network.connection_count() {
        min_ms = min_ms.min(default_ms);
    }
    DelayModel::PerPair {
        pairs,
        default_ms,
        min_ms,
    }
}
