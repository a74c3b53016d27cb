//! SONATA edge populations: `source_node_id`/`target_node_id` read in bulk (chunked) into
//! `u32` ids, with their node populations taken from the `node_population` attributes and
//! every id checked against that population's size.
use std::collections::HashMap;
use std::path::Path;

use super::config::EdgesEntry;
use super::h5::{self, Ctx};
use super::EdgePopulation;
use crate::error::Result;

/// Reads every population of one `networks.edges[]` entry. `node_sizes` maps each node
/// population of the circuit to its node count.
pub(crate) fn read_entry(
    entry: &EdgesEntry,
    config: &Path,
    node_sizes: &HashMap<String, usize>,
) -> Result<Vec<EdgePopulation>> {
    let file = h5::open_file(&entry.edges_file, config, &format!("{}.edges_file", entry.field))?;
    let path = entry.edges_file.as_path();
    let top = Ctx {
        file: path,
        population: "",
    };
    let root = h5::group(&top, &file, "edges")?;
    let names = h5::members(&top, &root)?;
    for name in &entry.populations {
        if !names.contains(name) {
            return Err(top.err(
                format!("/edges/{name}"),
                format!(
                    "population named by {} in {} is not in the file (it has: {})",
                    entry.field,
                    config.display(),
                    names.join(", ")
                ),
            ));
        }
    }
    let mut known: Vec<&str> = node_sizes.keys().map(String::as_str).collect();
    known.sort_unstable();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let ctx = Ctx {
            file: path,
            population: &name,
        };
        let pop = h5::group(&ctx, &root, &name)?;
        let mut ends = Vec::with_capacity(2);
        for dataset in ["source_node_id", "target_node_id"] {
            let ds = h5::dataset(&ctx, &pop, dataset)?;
            let node_pop = h5::read_str_attr(&ctx, &ds, "node_population")?;
            let Some(&size) = node_sizes.get(&node_pop) else {
                return Err(ctx.err(
                    format!("{}@node_population", ds.name()),
                    format!(
                        "names node population `{node_pop}`, which is not among the circuit's node populations ({})",
                        known.join(", ")
                    ),
                ));
            };
            let what = format!("node population `{node_pop}` ({size} nodes)");
            let ids = h5::read_u32(&ctx, &ds, size as u64, &what)?;
            ends.push((node_pop, ids));
        }
        let (target, target_ids) = ends.pop().expect("two ends");
        let (source, source_ids) = ends.pop().expect("two ends");
        if source_ids.len() != target_ids.len() {
            return Err(ctx.err(
                format!("{}/target_node_id", pop.name()),
                format!(
                    "has {} entries but source_node_id has {}",
                    target_ids.len(),
                    source_ids.len()
                ),
            ));
        }
        let delays = read_delays(&ctx, &pop, source_ids.len())?;
        out.push(EdgePopulation {
            name,
            file: path.to_path_buf(),
            source,
            target,
            source_ids,
            target_ids,
            delays,
        });
    }
    Ok(out)
}

/// `0/delay` (ms) of a population whose only edge group is `0`, when present with one
/// value per edge; `None` for other layouts (delays then come from elsewhere).
fn read_delays(ctx: &Ctx, pop: &hdf5_metno::Group, edges: usize) -> Result<Option<Vec<f32>>> {
    let members = h5::members(ctx, pop)?;
    let groups: Vec<&String> = members.iter().filter(|m| m.parse::<u32>().is_ok()).collect();
    if groups.len() != 1 || groups[0] != "0" {
        return Ok(None);
    }
    let group = h5::group(ctx, pop, "0")?;
    let Some(ds) = h5::optional_dataset(ctx, &group, "delay")? else {
        return Ok(None);
    };
    let values: Vec<f64> = ds
        .read_raw::<f64>()
        .map_err(|e| ctx.err(format!("{}/delay", group.name()), format!("cannot read: {e}")))?;
    if values.len() != edges {
        return Ok(None);
    }
    Ok(Some(values.into_iter().map(|v| v as f32).collect()))
}
