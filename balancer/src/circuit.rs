//! A SONATA circuit as balancer input: its placed cells as a [`DryRun`] (per-cell cost =
//! metype memory + 1.9 KB × the cell's own afferent synapses, counted from the edges) and
//! their connectivity as a [`Network`].
//!
//! Metype memory comes from [`MetypeMemory`]: measured per metype, else one default for
//! detailed cells ([`MetypeMemory::DEFAULT_CELL_KB`]) and one for point neurons
//! ([`MetypeMemory::DEFAULT_POINT_CELL_KB`]); `ballast dry-run --circuit` and `ballast run
//! --circuit` share them. Building from a circuit needs the `sonata` feature.
//!
//! Placed populations are the non-virtual node populations, in circuit order; each becomes
//! a dry-run population whose gids are its node ids. Virtual populations are not placed:
//! their edges add synapses to their targets but no peers.
use std::collections::HashMap;

#[cfg(feature = "sonata")]
use crate::dry_run::{DryRun, Metype, MetypeGids, Population};
use crate::error::{BalancerError, Result};
#[cfg(feature = "sonata")]
use crate::network::Network;
#[cfg(feature = "sonata")]
use crate::sonata::Circuit;

/// Where metype memory (KB per cell, without synapses) comes from.
///
/// [`MetypeMemory::default`] has no measurements and the two documented defaults.
#[derive(Debug, Clone)]
pub struct MetypeMemory {
    /// Per metype key, from a neurodamus `cell_memory_usage.json` (`metype_memory`).
    pub measured: HashMap<String, f64>,
    /// Default for metypes not measured whose nodes are detailed (`biophysical`), KB;
    /// `None` makes such a metype an error.
    pub cell_kb: Option<f64>,
    /// Default for metypes not measured whose nodes are point neurons (`point_process`,
    /// `point_neuron`, ...), KB; falls back to `cell_kb`.
    pub point_cell_kb: Option<f64>,
}

impl Default for MetypeMemory {
    fn default() -> Self {
        MetypeMemory {
            measured: HashMap::new(),
            cell_kb: Some(Self::DEFAULT_CELL_KB),
            point_cell_kb: Some(Self::DEFAULT_POINT_CELL_KB),
        }
    }
}

impl MetypeMemory {
    /// KB of a detailed cell (without synapses) whose metype is not measured: the order of
    /// a neurodamus dry run's `metype_memory` for cortical detailed cells.
    pub const DEFAULT_CELL_KB: f64 = 3000.0;
    /// KB of a point neuron (without synapses) whose metype is not measured.
    pub const DEFAULT_POINT_CELL_KB: f64 = 40.0;

    #[cfg_attr(not(feature = "sonata"), allow(dead_code))]
    fn kb(&self, metype: &str, model_type: &str, population: &str) -> Result<f64> {
        if let Some(&kb) = self.measured.get(metype) {
            return Ok(kb);
        }
        let point = model_type.starts_with("point");
        let default = if point {
            self.point_cell_kb.or(self.cell_kb)
        } else {
            self.cell_kb
        };
        default.ok_or_else(|| {
            BalancerError::InvalidParameter(format!(
                "population `{population}`: metype `{metype}` (model_type {model_type}) has no measured memory and no default: pass --memory-usage with it, or --cell-kb{}",
                if point { " / --point-cell-kb" } else { "" }
            ))
        })
    }
}

/// Builds the dry run and network of `circuit`'s placed cells.
#[cfg(feature = "sonata")]
pub fn dry_run_from_circuit(circuit: &Circuit, memory: &MetypeMemory) -> Result<(DryRun, Network)> {
    let placed: Vec<usize> = (0..circuit.node_populations.len())
        .filter(|&i| !circuit.node_populations[i].is_virtual)
        .collect();
    let mut offsets = vec![0usize];
    let mut metypes: Vec<Metype> = Vec::new();
    let mut metype_index: HashMap<String, usize> = HashMap::new();
    let mut populations = Vec::with_capacity(placed.len());
    let mut synapse_sums: Vec<(u64, u64)> = Vec::new();
    for &i in &placed {
        let pop = &circuit.node_populations[i];
        let synapses = circuit.afferent_counts(&pop.name)?;
        let mut per_metype: Vec<Vec<u32>> = vec![Vec::new(); pop.metypes.len()];
        for id in 0..pop.len() as u32 {
            per_metype[pop.node_metype[id as usize] as usize].push(id);
        }
        let mut metype_gids = Vec::new();
        for (local, gids) in per_metype.into_iter().enumerate() {
            if gids.is_empty() {
                continue;
            }
            let key = &pop.metypes[local];
            let m = match metype_index.get(key) {
                Some(&m) => m,
                None => {
                    let kb = memory.kb(key, pop.model_type_of(gids[0]), &pop.name)?;
                    metypes.push(Metype {
                        name: key.clone(),
                        memory_kb: kb,
                        synapses_per_cell: 0.0,
                    });
                    synapse_sums.push((0, 0));
                    metype_index.insert(key.clone(), metypes.len() - 1);
                    metypes.len() - 1
                }
            };
            for &g in &gids {
                synapse_sums[m].0 += synapses[g as usize] as u64;
                synapse_sums[m].1 += 1;
            }
            metype_gids.push(MetypeGids { metype: m, gids });
        }
        offsets.push(offsets.last().unwrap() + pop.len());
        populations.push(Population {
            name: pop.name.clone(),
            metype_gids,
            cell_synapses: Some(synapses),
        });
    }
    for (m, (sum, n)) in metypes.iter_mut().zip(synapse_sums) {
        m.synapses_per_cell = if n > 0 { sum as f64 / n as f64 } else { 0.0 };
    }

    let offset_of: HashMap<&str, usize> = placed
        .iter()
        .enumerate()
        .map(|(k, &i)| (circuit.node_populations[i].name.as_str(), offsets[k]))
        .collect();
    let mut pairs = Vec::new();
    for e in &circuit.edge_populations {
        let (Some(&so), Some(&to)) = (offset_of.get(e.source.as_str()), offset_of.get(e.target.as_str()))
        else {
            continue; // a virtual source (or target): synapses only, no peers
        };
        pairs.extend(
            e.source_ids
                .iter()
                .zip(&e.target_ids)
                .map(|(&s, &t)| ((so + s as usize) as u32, (to + t as usize) as u32)),
        );
    }
    if populations.iter().all(|p: &Population| p.cell_count() == 0) {
        return Err(BalancerError::InvalidParameter(format!(
            "{}: the circuit has no cells to place (no non-virtual node population with nodes)",
            circuit.config.display()
        )));
    }
    let dry_run = DryRun { metypes, populations };
    dry_run.check_costs().map_err(|e| {
        BalancerError::InvalidParameter(format!(
            "{}: metype `{}`: {}",
            circuit.config.display(),
            dry_run.metypes[e.metype].name,
            e.message
        ))
    })?;
    let network = Network::from_pairs(offsets, &pairs)?;
    Ok((dry_run, network))
}
