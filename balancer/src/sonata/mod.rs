//! Reading SONATA circuits (feature `sonata`): node populations with each node's metype key
//! and model type, and edge populations as source/target id arrays, so the balancer can
//! weigh cells by metype and afferent synapse count.
//!
//! ```no_run
//! # fn main() -> ballast_balancer::Result<()> {
//! let circuit = ballast_balancer::sonata::Circuit::open("circuit_config.json".as_ref())?;
//! for pop in circuit.node_populations.iter().filter(|p| !p.is_virtual) {
//!     let synapses = circuit.afferent_counts(&pop.name)?;
//!     println!("{}: {} cells, {} synapses", pop.name, pop.len(), synapses.iter().map(|&s| u64::from(s)).sum::<u64>());
//! }
//! # Ok(()) }
//! ```
//!
//! What is read:
//! - the circuit config (versions 1 and 2; a simulation config's `network` is followed):
//!   `manifest` variables (`$NAME`, `${NAME}`, recursively; `$BASE_DIR` defaults to the
//!   config's directory), `networks.nodes[]` (`nodes_file`, `node_types_file`,
//!   `populations.<pop>.type`) and `networks.edges[]` (`edges_file`). Relative paths are
//!   relative to the config's directory; other fields are ignored.
//! - every population of every nodes file: `node_type_id`, node groups (`node_group_id` /
//!   `node_group_index` when present, else group `0`), and the attributes `model_type`,
//!   `mtype`, `etype`, `model_name`, `model_template`, each from the node's group (strings,
//!   or indices into `<group>/@library/<attr>`), else from the node-types CSV column for
//!   its `node_type_id` (`NULL` and empty cells are absent).
//! - every population of every edges file: `source_node_id`, `target_node_id` and their
//!   `node_population` attributes.

mod config;
mod edges;
mod h5;
mod nodes;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::{BalancerError, Result};

/// The HDF5 crate this module reads with, re-exported so that callers (and the tests, which
/// write small circuits) use the same version.
pub use hdf5_metno;

/// A SONATA circuit: its node and edge populations, in config order (populations of one
/// file in HDF5 name order).
#[derive(Debug, Clone)]
pub struct Circuit {
    /// The config that was read (for a simulation config, the circuit config it names).
    pub config: PathBuf,
    pub node_populations: Vec<NodePopulation>,
    pub edge_populations: Vec<EdgePopulation>,
}

/// One node population. Node ids are `0..len()`, the index into every per-node vector.
#[derive(Debug, Clone)]
pub struct NodePopulation {
    pub name: String,
    /// The nodes file it was read from.
    pub file: PathBuf,
    /// The population's model type (`biophysical`, `point_process`, `point_neuron`,
    /// `virtual`, ...) when all nodes share it, else `"mixed"`.
    pub model_type: String,
    /// Every node is `virtual` (an input source only: not placed on ranks, but the source of
    /// edges). An empty population is virtual when its config `type` says so.
    pub is_virtual: bool,
    /// Distinct metype keys in order of first appearance: neurodamus' `"{mtype}-{etype}"`
    /// when a node has both, else its `model_name`, else its `model_template`; virtual nodes
    /// with none of these get `"virtual"`.
    pub metypes: Vec<String>,
    /// Per node id: index into `metypes`.
    pub node_metype: Vec<u32>,
    /// Distinct model types in order of first appearance.
    pub model_types: Vec<String>,
    /// Per node id: index into `model_types`. A node's model type comes from its group's
    /// `model_type` attribute, else the node-types CSV, else the config's
    /// `populations.<pop>.type`.
    pub node_model_type: Vec<u32>,
}

impl NodePopulation {
    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.node_metype.len()
    }

    /// Whether the population has no nodes.
    pub fn is_empty(&self) -> bool {
        self.node_metype.is_empty()
    }

    /// Number of nodes per metype key, aligned with `metypes`.
    pub fn metype_counts(&self) -> Vec<u32> {
        let mut counts = vec![0u32; self.metypes.len()];
        for &m in &self.node_metype {
            counts[m as usize] += 1;
        }
        counts
    }

    /// The metype key of node `id`.
    pub fn metype_of(&self, id: u32) -> &str {
        &self.metypes[self.node_metype[id as usize] as usize]
    }

    /// The model type of node `id`.
    pub fn model_type_of(&self, id: u32) -> &str {
        &self.model_types[self.node_model_type[id as usize] as usize]
    }
}

/// One edge population (for neurodamus: one edge = one synapse).
#[derive(Debug, Clone)]
pub struct EdgePopulation {
    pub name: String,
    /// The edges file it was read from.
    pub file: PathBuf,
    /// Node population of the source ids (`source_node_id`'s `node_population` attribute).
    pub source: String,
    /// Node population of the target ids.
    pub target: String,
    /// Per edge: source node id within `source` (checked in range).
    pub source_ids: Vec<u32>,
    /// Per edge: target node id within `target` (checked in range).
    pub target_ids: Vec<u32>,
    /// Per edge: synaptic delay, ms, when the population has a single edge group `0` with
    /// a `delay` dataset of one value per edge (neurodamus circuits); `None` otherwise.
    pub delays: Option<Vec<f32>>,
}

impl EdgePopulation {
    /// Number of edges.
    pub fn len(&self) -> usize {
        self.source_ids.len()
    }

    /// Whether there are no edges.
    pub fn is_empty(&self) -> bool {
        self.source_ids.is_empty()
    }
}

impl Circuit {
    /// Reads the circuit config at `config`, all its node populations, then all its edge
    /// populations. Errors name the file, population and field at fault: a missing file or
    /// dataset, a population in the config but not in its file, two populations of the same
    /// name, an edge `node_population` absent from the nodes, a node id out of its
    /// population's range, a node without a model type or a usable metype key.
    pub fn open(config: &Path) -> Result<Circuit> {
        let cfg = config::load(config)?;
        let mut node_populations: Vec<NodePopulation> = Vec::new();
        for entry in &cfg.nodes {
            for pop in nodes::read_entry(entry, &cfg.path)? {
                if let Some(first) = node_populations.iter().find(|p| p.name == pop.name) {
                    return Err(BalancerError::Sonata {
                        path: pop.file,
                        population: pop.name,
                        field: entry.field.clone(),
                        message: format!("node population defined twice (also in {})", first.file.display()),
                    });
                }
                node_populations.push(pop);
            }
        }
        let sizes: HashMap<String, usize> = node_populations
            .iter()
            .map(|p| (p.name.clone(), p.len()))
            .collect();
        let mut edge_populations: Vec<EdgePopulation> = Vec::new();
        for entry in &cfg.edges {
            for pop in edges::read_entry(entry, &cfg.path, &sizes)? {
                if let Some(first) = edge_populations.iter().find(|p| p.name == pop.name) {
                    return Err(BalancerError::Sonata {
                        path: pop.file,
                        population: pop.name,
                        field: entry.field.clone(),
                        message: format!("edge population defined twice (also in {})", first.file.display()),
                    });
                }
                edge_populations.push(pop);
            }
        }
        Ok(Circuit {
            config: cfg.path,
            node_populations,
            edge_populations,
        })
    }

    /// The node population called `name`.
    pub fn node_population(&self, name: &str) -> Option<&NodePopulation> {
        self.node_populations.iter().find(|p| p.name == name)
    }

    /// The edge population called `name`.
    pub fn edge_population(&self, name: &str) -> Option<&EdgePopulation> {
        self.edge_populations.iter().find(|p| p.name == name)
    }

    /// Afferent synapse (edge) count per node id of `population`, summed over all edge
    /// populations targeting it (virtual sources included). One pass over the target ids.
    pub fn afferent_counts(&self, population: &str) -> Result<Vec<u32>> {
        let pop = self.node_population(population).ok_or_else(|| {
            BalancerError::InvalidParameter(format!(
                "no node population `{population}` in {} (it has: {})",
                self.config.display(),
                self.node_populations
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let mut counts = vec![0u32; pop.len()];
        for edges in self.edge_populations.iter().filter(|e| e.target == population) {
            for &t in &edges.target_ids {
                counts[t as usize] = counts[t as usize].saturating_add(1);
            }
        }
        Ok(counts)
    }
}
