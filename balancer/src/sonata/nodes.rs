//! SONATA node populations: `node_type_id`, node groups (`node_group_id`/`node_group_index`),
//! attributes stored as strings, as `@library` indices or in the node-types CSV, and from them
//! each node's model type and metype key.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use hdf5_metno as hdf5;

use super::config::{NodesEntry, PopulationType};
use super::h5::{self, Ctx};
use super::NodePopulation;
use crate::error::{BalancerError, Result};
use crate::read_file::RegularFile;

/// "No value" in per-node interned-string columns.
const NONE: u32 = u32::MAX;

/// The node-types CSV (space-separated, header row, one row per `node_type_id`).
pub(crate) struct NodeTypes {
    path: PathBuf,
    columns: HashMap<String, usize>,
    /// Values per `node_type_id`; `NULL` and empty cells are `None`.
    rows: HashMap<i64, Vec<Option<String>>>,
}

fn csv_err(path: &Path, field: impl Into<String>, message: impl Into<String>) -> BalancerError {
    BalancerError::Sonata {
        path: path.to_path_buf(),
        population: String::new(),
        field: field.into(),
        message: message.into(),
    }
}

impl NodeTypes {
    pub(crate) fn read(path: &Path, config: &Path, field: &str) -> Result<NodeTypes> {
        if !path.exists() {
            return Err(csv_err(
                path,
                "",
                format!("no such file (named by {field} in {})", config.display()),
            ));
        }
        // A regular file only (a FIFO would block, a device be read without end), read
        // to its size when opened ([`crate::read_file`]).
        let RegularFile { file, size } = crate::read_file::open_regular(path).map_err(|e| {
            csv_err(
                path,
                "",
                format!("{e} (named by {field} in {})", config.display()),
            )
        })?;
        let mut reader = csv::ReaderBuilder::new()
            .delimiter(b' ')
            .trim(csv::Trim::All)
            .from_reader(std::io::Read::take(file, size));
        let header: Vec<String> = reader
            .headers()
            .map_err(|e| csv_err(path, "header", e.to_string()))?
            .iter()
            .map(str::to_owned)
            .collect();
        let columns: HashMap<String, usize> =
            header.iter().enumerate().map(|(i, c)| (c.clone(), i)).collect();
        let id_col = *columns
            .get("node_type_id")
            .ok_or_else(|| csv_err(path, "node_type_id", "missing column (the header must name it)"))?;
        let mut rows = HashMap::new();
        for (line, record) in reader.records().enumerate() {
            let record = record.map_err(|e| csv_err(path, format!("line {}", line + 2), e.to_string()))?;
            let raw = record.get(id_col).unwrap_or("");
            let id: i64 = raw.parse().map_err(|_| {
                csv_err(
                    path,
                    format!("line {}: node_type_id", line + 2),
                    format!("{raw:?} is not an integer"),
                )
            })?;
            let values = record
                .iter()
                .map(|v| {
                    if v.is_empty() || v == "NULL" {
                        None
                    } else {
                        Some(v.to_owned())
                    }
                })
                .collect();
            if rows.insert(id, values).is_some() {
                return Err(csv_err(
                    path,
                    format!("line {}: node_type_id", line + 2),
                    format!("{id} is listed twice"),
                ));
            }
        }
        Ok(NodeTypes {
            path: path.to_path_buf(),
            columns,
            rows,
        })
    }
}

/// Strings interned to `u32` ids.
#[derive(Default)]
struct Interner {
    strings: Vec<String>,
    index: HashMap<String, u32>,
}

impl Interner {
    fn id(&mut self, s: &str) -> u32 {
        if s.is_empty() {
            return NONE;
        }
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.strings.len() as u32;
        self.strings.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

/// Node ↔ group mapping of one population.
struct Groups {
    /// `(group id, group)` for every numeric sub-group used.
    groups: Vec<(u32, hdf5::Group)>,
    /// Per node: position in `groups` and row within it; `None` when there is no group at all.
    node_group: Option<(Vec<u32>, Vec<u32>)>,
}

/// Reads every population of one `networks.nodes[]` entry.
pub(crate) fn read_entry(entry: &NodesEntry, config: &Path) -> Result<Vec<NodePopulation>> {
    let file_field = format!("{}.nodes_file", entry.field);
    let file = h5::open_file(&entry.nodes_file, config, &file_field)?;
    let types = match &entry.node_types_file {
        Some(p) => Some(NodeTypes::read(
            p,
            config,
            &format!("{}.node_types_file", entry.field),
        )?),
        None => None,
    };
    let path = entry.nodes_file.as_path();
    let top = Ctx {
        file: path,
        population: "",
    };
    let root = h5::group(&top, &file, "nodes")?;
    let names = h5::members(&top, &root)?;
    for PopulationType { name, .. } in &entry.populations {
        if !names.contains(name) {
            return Err(top.err(
                format!("/nodes/{name}"),
                format!(
                    "population named by {} in {} is not in the file (it has: {})",
                    entry.field,
                    config.display(),
                    names.join(", ")
                ),
            ));
        }
    }
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let config_type = entry
            .populations
            .iter()
            .find(|p| p.name == name)
            .and_then(|p| p.model_type.clone());
        let ctx = Ctx {
            file: path,
            population: &name,
        };
        let pop = h5::group(&ctx, &root, &name)?;
        out.push(read_population(
            &ctx,
            &pop,
            types.as_ref(),
            config_type.as_deref(),
        )?);
    }
    Ok(out)
}

fn read_population(
    ctx: &Ctx,
    pop: &hdf5::Group,
    types: Option<&NodeTypes>,
    config_type: Option<&str>,
) -> Result<NodePopulation> {
    let node_type_id = h5::read_i64(ctx, &h5::dataset(ctx, pop, "node_type_id")?)?;
    let n = node_type_id.len();
    if n as u64 > u64::from(u32::MAX) {
        return Err(ctx.err(
            format!("{}/node_type_id", pop.name()),
            format!("{n} nodes: more than 2^32 - 1 are not supported"),
        ));
    }
    // Node types: every id (other than -1, "none") must be in the CSV when there is one.
    if let Some(t) = types {
        if let Some(i) = (0..n).find(|&i| node_type_id[i] != -1 && !t.rows.contains_key(&node_type_id[i])) {
            return Err(ctx.err(
                format!("{}/node_type_id", pop.name()),
                format!(
                    "node {i} has node_type_id {}, which is not in {}",
                    node_type_id[i],
                    t.path.display()
                ),
            ));
        }
    }
    // Old (pre-1.0) files may carry explicit ids in `node_id`; edges index nodes by position,
    // so anything but 0..n would be misread.
    if let Some(ds) = h5::optional_dataset(ctx, pop, "node_id")? {
        let ids = h5::read_u32(ctx, &ds, 1 << 32, "node ids")?;
        if let Some(i) = ids
            .iter()
            .enumerate()
            .position(|(i, &id)| id as usize != i)
            .or((ids.len() != n).then_some(ids.len()))
        {
            return Err(ctx.err(
                ds.name(),
                format!("explicit node ids that are not 0..{n} (first difference at index {i}) are not supported: SONATA node ids are positions"),
            ));
        }
    }
    let groups = read_groups(ctx, pop, n)?;
    let mut strings = Interner::default();
    let column = |attr: &str, strings: &mut Interner| -> Result<Vec<u32>> {
        let csv = types.and_then(|t| t.columns.get(attr).map(|&c| (t, node_type_id.as_slice(), c)));
        attribute(ctx, &groups, n, attr, csv, strings)
    };
    let model_type = column("model_type", &mut strings)?;
    let mtype = column("mtype", &mut strings)?;
    let etype = column("etype", &mut strings)?;
    let model_name = column("model_name", &mut strings)?;
    let model_template = column("model_template", &mut strings)?;

    // Model type per node: attribute, CSV, then the config's `populations.<pop>.type`.
    let config_type_id = config_type.map(|t| strings.id(t)).unwrap_or(NONE);
    let mut model_types: Vec<String> = Vec::new();
    let mut model_type_index: HashMap<u32, u32> = HashMap::new();
    let mut node_model_type = Vec::with_capacity(n);
    let virtual_id = strings.index.get("virtual").copied();
    let mut node_is_virtual = Vec::with_capacity(n);
    for (i, &own) in model_type.iter().enumerate() {
        let t = if own != NONE { own } else { config_type_id };
        if t == NONE {
            return Err(ctx.err(
                "model_type",
                format!("node {i} has no model_type: not in the node attributes, the node types CSV, nor the circuit config's populations.{}.type", ctx.population),
            ));
        }
        let next = model_types.len() as u32;
        let idx = *model_type_index.entry(t).or_insert_with(|| {
            model_types.push(strings.strings[t as usize].clone());
            next
        });
        node_model_type.push(idx);
        node_is_virtual.push(Some(t) == virtual_id);
    }

    // Metype key per node: "{mtype}-{etype}", else model_name, else model_template.
    let mut metypes: Vec<String> = Vec::new();
    let mut key_index: HashMap<(u8, u32, u32), u32> = HashMap::new();
    let mut node_metype = Vec::with_capacity(n);
    for i in 0..n {
        let key = if mtype[i] != NONE && etype[i] != NONE {
            (0, mtype[i], etype[i])
        } else if model_name[i] != NONE {
            (1, model_name[i], 0)
        } else if model_template[i] != NONE {
            (2, model_template[i], 0)
        } else if node_is_virtual[i] {
            (3, 0, 0)
        } else {
            return Err(ctx.err(
                "mtype/etype/model_name/model_template",
                format!("node {i} has no usable metype key: it needs mtype and etype, or model_name, or model_template (as node attributes or node types CSV columns)"),
            ));
        };
        let next = metypes.len() as u32;
        let idx = *key_index.entry(key).or_insert_with(|| {
            let s = &strings.strings;
            metypes.push(match key.0 {
                0 => format!("{}-{}", s[key.1 as usize], s[key.2 as usize]),
                3 => "virtual".to_owned(),
                _ => s[key.1 as usize].clone(),
            });
            next
        });
        node_metype.push(idx);
    }

    let is_virtual = if n == 0 {
        config_type == Some("virtual")
    } else {
        node_is_virtual.iter().all(|&v| v)
    };
    let model_type = match model_types.len() {
        0 => config_type.unwrap_or("").to_owned(),
        1 => model_types[0].clone(),
        _ => "mixed".to_owned(),
    };
    Ok(NodePopulation {
        name: ctx.population.to_owned(),
        file: ctx.file.to_path_buf(),
        model_type,
        is_virtual,
        metypes,
        node_metype,
        model_types,
        node_model_type,
    })
}

fn read_groups(ctx: &Ctx, pop: &hdf5::Group, n: usize) -> Result<Groups> {
    let mut numeric: Vec<u32> = h5::members(ctx, pop)?
        .iter()
        .filter_map(|m| m.parse().ok())
        .collect();
    numeric.sort_unstable();
    let open = |g: u32| h5::group(ctx, pop, &g.to_string());
    let has_ids = pop.link_exists("node_group_id");
    if !has_ids {
        // No explicit mapping: node i is row i of group 0 (when there is one).
        let groups = if numeric.contains(&0) {
            vec![(0, open(0)?)]
        } else {
            Vec::new()
        };
        let node_group = if groups.is_empty() {
            None
        } else {
            Some((vec![0; n], (0..n as u32).collect()))
        };
        return Ok(Groups { groups, node_group });
    }
    let id_ds = h5::dataset(ctx, pop, "node_group_id")?;
    let index_ds = h5::dataset(ctx, pop, "node_group_index")?;
    let ids = h5::read_u32(ctx, &id_ds, 1 << 32, "group ids")?;
    let index = h5::read_u32(ctx, &index_ds, 1 << 32, "group rows")?;
    for (ds, len) in [(&id_ds, ids.len()), (&index_ds, index.len())] {
        if len != n {
            return Err(ctx.err(ds.name(), format!("has {len} entries but node_type_id has {n}")));
        }
    }
    let mut groups: Vec<(u32, hdf5::Group)> = Vec::new();
    let mut position: HashMap<u32, u32> = HashMap::new();
    let mut node_group = Vec::with_capacity(n);
    for (i, &g) in ids.iter().enumerate() {
        let p = match position.get(&g) {
            Some(&p) => p,
            None => {
                if !numeric.contains(&g) {
                    return Err(ctx.err(
                        id_ds.name(),
                        format!("node {i} is in group {g}, which does not exist"),
                    ));
                }
                let p = groups.len() as u32;
                groups.push((g, open(g)?));
                position.insert(g, p);
                p
            }
        };
        node_group.push(p);
    }
    Ok(Groups {
        groups,
        node_group: Some((node_group, index)),
    })
}

/// One attribute for every node, as interned string ids (`NONE` when absent): from the
/// node's group (strings, or indices into `@library/<attr>`), else from the CSV column
/// `csv = (node types, node_type_id per node, column)`.
fn attribute(
    ctx: &Ctx,
    groups: &Groups,
    n: usize,
    attr: &str,
    csv: Option<(&NodeTypes, &[i64], usize)>,
    strings: &mut Interner,
) -> Result<Vec<u32>> {
    // Per group: the column's values, if the group has the attribute.
    let mut columns: Vec<Option<(Vec<u32>, String)>> = Vec::with_capacity(groups.groups.len());
    for (_, group) in &groups.groups {
        columns.push(group_column(ctx, group, attr, strings)?);
    }
    let mut out = vec![NONE; n];
    if let Some((group_of, row_of)) = &groups.node_group {
        for i in 0..n {
            if let Some((col, field)) = &columns[group_of[i] as usize] {
                let row = row_of[i] as usize;
                let v = *col.get(row).ok_or_else(|| {
                    ctx.err(
                        field.clone(),
                        format!(
                            "node {i} is row {row} of its group (node_group_index), but {field} has {} rows",
                            col.len()
                        ),
                    )
                })?;
                out[i] = v;
            }
        }
    }
    if let Some((types, type_ids, c)) = csv {
        let by_type: HashMap<i64, u32> = types
            .rows
            .iter()
            .map(|(&id, row)| {
                (
                    id,
                    row.get(c)
                        .and_then(|v| v.as_deref())
                        .map_or(NONE, |v| strings.id(v)),
                )
            })
            .collect();
        for (value, id) in out.iter_mut().zip(type_ids) {
            if *value == NONE {
                *value = by_type.get(id).copied().unwrap_or(NONE);
            }
        }
    }
    Ok(out)
}

fn group_column(
    ctx: &Ctx,
    group: &hdf5::Group,
    attr: &str,
    strings: &mut Interner,
) -> Result<Option<(Vec<u32>, String)>> {
    let Some(ds) = h5::optional_dataset(ctx, group, attr)? else {
        return Ok(None);
    };
    let field = ds.name();
    if h5::is_string(&ds) {
        let values = h5::read_strings(ctx, &ds)?;
        return Ok(Some((values.iter().map(|s| strings.id(s)).collect(), field)));
    }
    let has_library = group.link_exists("@library")
        && group
            .group("@library")
            .map(|lib| lib.link_exists(attr))
            .unwrap_or(false);
    if !has_library {
        return Err(ctx.err(
            field,
            format!(
                "holds neither strings nor indices into {}/@library/{attr} (absent)",
                group.name()
            ),
        ));
    }
    let lib = h5::group(ctx, group, "@library")?;
    let lib_ds = h5::dataset(ctx, &lib, attr)?;
    let library: Vec<u32> = h5::read_strings(ctx, &lib_ds)?
        .iter()
        .map(|s| strings.id(s))
        .collect();
    let what = format!("{} ({} entries)", lib_ds.name(), library.len());
    let indices = h5::read_u32(ctx, &ds, library.len() as u64, &what)?;
    Ok(Some((
        indices.iter().map(|&k| library[k as usize]).collect(),
        field,
    )))
}
