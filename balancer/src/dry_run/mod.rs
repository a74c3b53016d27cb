//! The dry-run input: neurodamus' `cell_memory_usage.json` (memory per metype, synapses per
//! cell, gids per population and metype), validated, with the per-cell cost in KB.
//!
//! Per-cell cost (KB) = `metype_memory[metype] + 1.9 × metype_cell_syn_average[metype]`.
//! The 1.9 KB per synapse is neurodamus' `SynapseMemoryUsage` constant for chemical
//! synapses ("average between 1.7 (AMPA) and 2.0 (GABAAB)"), in
//! `neurodamus/utils/memory.py`. A metype absent from `metype_cell_syn_average` counts 0
//! synapses, as in neurodamus (its `Counter` drops zero counts).
use std::io::Write;
use std::path::Path;

use crate::error::{BalancerError, Result};
use crate::gid_map::GidMap;
use crate::quote::quote;

mod json;

/// Top-level keys of neurodamus' `cell_memory_usage.json`.
pub const KNOWN_KEYS: [&str; 3] = ["metype_memory", "metype_cell_syn_average", "pop_metype_gids"];

/// KB of memory per chemical synapse (neurodamus `SynapseMemoryUsage`, `memory.py`).
pub const SYNAPSE_KB: f64 = 1.9;

/// Largest total KB of a dry run accepted (all cells together): far above any machine
/// (10^300 KB), and far enough below `f64::MAX` that every bucket, rank and node sum, mean
/// and ratio computed from it stays finite.
pub const MAX_TOTAL_KB: f64 = 1e300;

/// One metype (morphological-electrical cell type) of the dry run.
#[derive(Debug, Clone, PartialEq)]
pub struct Metype {
    /// Name as written by neurodamus, e.g. `L5_TPC:A-cADpyr`.
    pub name: String,
    /// Cell memory in KB per cell (`metype_memory`).
    pub memory_kb: f64,
    /// Average synapses per cell (`metype_cell_syn_average`; 0 when absent).
    pub synapses_per_cell: f64,
}

/// Which figure of a metype a cost error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CostField {
    /// Its memory, KB per cell.
    Memory,
    /// Its synapses per cell.
    Synapses,
}

impl CostField {
    /// The key of the figure in neurodamus' JSON (`metype_memory`, `metype_cell_syn_average`).
    pub fn json_key(self) -> &'static str {
        match self {
            CostField::Memory => "metype_memory",
            CostField::Synapses => "metype_cell_syn_average",
        }
    }
}

impl Metype {
    /// Cost of one cell of this metype in KB: memory + 1.9 KB × synapses.
    pub fn cell_kb(&self) -> f64 {
        self.memory_kb + self.synapses_per_cell * SYNAPSE_KB
    }
}

/// [`DryRun::check_costs`]' error: the metype at fault, the figure at fault and what is
/// wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("metype {metype}: {}: {message}", field.json_key())]
pub struct CostError {
    /// Index into [`DryRun::metypes`].
    pub metype: usize,
    /// Its memory, or its synapses when their KB is the larger term of a total too large.
    pub field: CostField,
    /// What is wrong, for a message (without the metype's name).
    pub message: String,
}

/// The cells of one metype in one population: an entry of [`Population::metype_gids`]
/// (`pop_metype_gids[population][metype]` in neurodamus' file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetypeGids {
    /// Index into [`DryRun::metypes`].
    pub metype: usize,
    /// The gids of the population's cells of that metype, in file order.
    pub gids: Vec<u32>,
}

/// One cell of a population ([`Population::cells`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidMetype {
    /// The cell's gid in its population.
    pub gid: u32,
    /// Its metype: index into [`DryRun::metypes`].
    pub metype: usize,
}

/// The gids of one population, grouped by metype in the order of the input file.
#[derive(Debug, Clone, PartialEq)]
pub struct Population {
    pub name: String,
    /// The population's cells, metype by metype, in file order.
    pub metype_gids: Vec<MetypeGids>,
    /// Afferent synapses of each cell, indexed by gid, when known cell by cell (circuit
    /// input); `None` = every cell counts its metype's average (neurodamus' dry-run file).
    pub cell_synapses: Option<Vec<u32>>,
}

impl Population {
    /// Number of cells of this population.
    pub fn cell_count(&self) -> usize {
        self.metype_gids.iter().map(|e| e.gids.len()).sum()
    }

    /// Iterates over every cell of the population, metype by metype, in file order.
    pub fn cells(&self) -> impl Iterator<Item = GidMetype> + '_ {
        self.metype_gids.iter().flat_map(|e| {
            e.gids.iter().map(move |&gid| GidMetype {
                gid,
                metype: e.metype,
            })
        })
    }

    /// The largest gid plus one (0 for an empty population).
    pub fn gid_span(&self) -> usize {
        // List by list: a max over a slice vectorises (a tenth of the time of one over the
        // flattened cells on a million gids).
        self.metype_gids
            .iter()
            .filter_map(|e| e.gids.iter().max())
            .max()
            .map_or(0, |&g| g as usize + 1)
    }
}

/// A dry run as read from a file, with the notes for the user on what was ignored
/// ([`DryRun::from_json_file_with_notes`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DryRunWithNotes {
    /// The validated dry run.
    pub dry_run: DryRun,
    /// One line per note (top-level keys that are not neurodamus'), for warnings.
    pub notes: Vec<String>,
}

/// A validated dry run: metypes (in `metype_memory` order) and populations (in file order).
#[derive(Debug, Clone, PartialEq)]
pub struct DryRun {
    pub metypes: Vec<Metype>,
    pub populations: Vec<Population>,
}

impl DryRun {
    /// Total number of cells over all populations.
    pub fn cell_count(&self) -> usize {
        self.populations.iter().map(Population::cell_count).sum()
    }

    /// Global cell numbering: population `p`'s gid `g` is cell `offsets[p] + g`
    /// (`len = populations + 1`, spans by [`Population::gid_span`]).
    pub fn offsets(&self) -> Vec<usize> {
        std::iter::once(0)
            .chain(self.populations.iter().scan(0, |acc, p| {
                *acc += p.gid_span();
                Some(*acc)
            }))
            .collect()
    }

    /// Checks the costs before anything is balanced: every metype's memory and synapse
    /// count finite and >= 0, and the total KB of all cells (each metype's cells × its KB per
    /// cell, summed in order) at most [`MAX_TOTAL_KB`], so that no sum can become infinite
    /// or NaN. Returns the total KB, or the metype at fault, the figure at fault (its
    /// memory, or its synapses when their KB is the larger term) and what is wrong.
    pub fn check_costs(&self) -> std::result::Result<f64, CostError> {
        for (i, m) in self.metypes.iter().enumerate() {
            for (field, what, x) in [
                (CostField::Memory, "KB per cell", m.memory_kb),
                (CostField::Synapses, "synapses per cell", m.synapses_per_cell),
            ] {
                if !x.is_finite() || x < 0.0 {
                    return Err(CostError {
                        metype: i,
                        field,
                        message: format!("{what} must be finite and >= 0, got {x}"),
                    });
                }
            }
        }
        let mut total = 0.0f64;
        for p in &self.populations {
            for MetypeGids { metype: m, gids } in &p.metype_gids {
                let kb = match &p.cell_synapses {
                    Some(_) => gids.iter().fold(0.0, |t, &g| t + self.cell_kb(p, g, *m)),
                    None => gids.len() as f64 * self.metypes[*m].cell_kb(),
                };
                total += kb;
                if total.is_nan() || total > MAX_TOTAL_KB {
                    let metype = &self.metypes[*m];
                    // The synapses are at fault when their KB outweighs the memory's.
                    let memory = gids.len() as f64 * metype.memory_kb;
                    let synapses = match &p.cell_synapses {
                        Some(syn) => gids
                            .iter()
                            .fold(0.0, |t, &g| t + syn[g as usize] as f64 * SYNAPSE_KB),
                        None => gids.len() as f64 * metype.synapses_per_cell * SYNAPSE_KB,
                    };
                    let field = if synapses > memory {
                        CostField::Synapses
                    } else {
                        CostField::Memory
                    };
                    return Err(CostError {
                        metype: *m,
                        field,
                        message: format!(
                            "{} cell{} of {} KB each ({} KB memory + {SYNAPSE_KB} KB × {} synapses) in population {} bring the total to {} KB, \
                             above the {MAX_TOTAL_KB:e} KB that keeps every sum finite (memory figures are KB per cell)",
                            gids.len(),
                            if gids.len() == 1 { "" } else { "s" },
                            short(metype.cell_kb()),
                            short(metype.memory_kb),
                            short(metype.synapses_per_cell),
                            quote(&p.name),
                            short(total)
                        ),
                    });
                }
            }
        }
        Ok(total)
    }

    /// Per-cell cost in KB of every metype, indexed like [`DryRun::metypes`].
    pub fn metype_cell_kb(&self) -> Vec<f64> {
        self.metypes.iter().map(Metype::cell_kb).collect()
    }

    /// KB of one cell of metype `metype` in `population`: the metype's memory plus 1.9 KB
    /// per synapse, counting the cell's own afferent synapses when known, else the
    /// metype's average.
    pub fn cell_kb(&self, population: &Population, gid: u32, metype: usize) -> f64 {
        let m = &self.metypes[metype];
        match &population.cell_synapses {
            Some(syn) => m.memory_kb + syn[gid as usize] as f64 * SYNAPSE_KB,
            None => m.cell_kb(),
        }
    }

    /// True when some population has per-cell synapse counts (then cells of one metype
    /// may weigh differently).
    pub fn has_cell_synapses(&self) -> bool {
        self.populations.iter().any(|p| p.cell_synapses.is_some())
    }

    /// Per-cell KB of every gid, per population (`table[pop].get(gid)`; `None` for gids
    /// not in the dry run). Used to weigh an allocation read from a file.
    pub fn gid_kb_table(&self) -> Vec<GidMap<f64>> {
        self.populations
            .iter()
            .map(|p| {
                let mut t = GidMap::for_span(p.gid_span(), p.cell_count());
                for GidMetype { gid, metype } in p.cells() {
                    t.insert(gid, self.cell_kb(p, gid, metype));
                }
                t
            })
            .collect()
    }

    /// Metype index of every gid of `population` (4 bytes per gid when dense).
    pub(crate) fn gid_metype_index(&self, population: &Population) -> crate::gid_map::GidIndex {
        let mut t = crate::gid_map::GidIndex::for_span(population.gid_span(), population.cell_count());
        for e in &population.metype_gids {
            for &g in &e.gids {
                t.insert(g, e.metype as u32);
            }
        }
        t
    }

    /// Metype index of every gid, per population (`table[pop].get(gid)`).
    pub fn gid_metype_table(&self) -> Vec<GidMap<usize>> {
        self.populations
            .iter()
            .map(|p| {
                let mut t = GidMap::for_span(p.gid_span(), p.cell_count());
                for GidMetype { gid, metype } in p.cells() {
                    t.insert(gid, metype);
                }
                t
            })
            .collect()
    }

    /// The dry run as neurodamus' JSON layout (keys sorted, as neurodamus' `json.dump(...,
    /// sort_keys=True)` writes them; a key given twice keeps its last value): what
    /// [`DryRun::write_json_file`] writes, as a value tree. For tests, which build their
    /// input files from it and check the streamed file against it.
    #[cfg(test)]
    pub(crate) fn to_json_value(&self) -> serde_json::Value {
        serde_json::to_value(JsonView(self)).expect("string keys, numbers and arrays make a value")
    }

    /// Writes the dry run as `cell_memory_usage.json` (4-space indent, like neurodamus),
    /// atomically ([`crate::atomic`]).
    pub fn write_json_file(&self, path: &Path) -> Result<()> {
        self.stage_json_file(path)?.commit()
    }

    /// [`DryRun::write_json_file`] up to the commit. The bytes are neurodamus' JSON layout
    /// (keys sorted, as neurodamus' `json.dump(..., sort_keys=True)` writes them; a key given
    /// twice keeps its last value) pretty-printed with a 4-space indent, then a newline,
    /// streamed to the file (no value tree, no copy of the text in memory).
    pub fn stage_json_file(&self, path: &Path) -> Result<crate::atomic::AtomicFile> {
        let mut file = crate::atomic::AtomicFile::create(path)?;
        let json = |error| BalancerError::Json {
            path: path.to_owned(),
            error,
        };
        {
            let mut out = std::io::BufWriter::with_capacity(1 << 16, file.file());
            let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
            let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
            serde::Serialize::serialize(&JsonView(self), &mut ser).map_err(json)?;
            out.write_all(b"\n").map_err(|e| BalancerError::io(path, e))?;
            out.flush().map_err(|e| BalancerError::io(path, e))?;
        }
        Ok(file)
    }
}

/// A dry run serialised in neurodamus' layout (what `DryRun::to_json_value` holds in tests):
/// the keys in sorted order with their values, written straight from the dry run's arrays.
struct JsonView<'a>(&'a DryRun);

/// Entries sorted by key, a repeated key keeping its last value (what collecting them into
/// an ordered map of keys keeps).
struct SortedEntries<'a, V>(Vec<(&'a str, V)>);

impl<'a, V> SortedEntries<'a, V> {
    fn new(mut entries: Vec<(&'a str, V)>) -> Self {
        entries.sort_by(|a, b| a.0.cmp(b.0));
        let mut kept: Vec<(&'a str, V)> = Vec::with_capacity(entries.len());
        for e in entries {
            match kept.last_mut() {
                Some(last) if last.0 == e.0 => *last = e,
                _ => kept.push(e),
            }
        }
        SortedEntries(kept)
    }
}

impl<V: serde::Serialize> serde::Serialize for SortedEntries<'_, V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl serde::Serialize for JsonView<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let d = self.0;
        let memory = SortedEntries::new(d.metypes.iter().map(|m| (m.name.as_str(), m.memory_kb)).collect());
        let syn = SortedEntries::new(
            d.metypes
                .iter()
                .filter(|m| m.synapses_per_cell > 0.0)
                .map(|m| (m.name.as_str(), m.synapses_per_cell))
                .collect(),
        );
        let pops = SortedEntries::new(
            d.populations
                .iter()
                .map(|p| {
                    let per = p
                        .metype_gids
                        .iter()
                        .map(|e| (d.metypes[e.metype].name.as_str(), e.gids.as_slice()))
                        .collect();
                    (p.name.as_str(), SortedEntries::new(per))
                })
                .collect(),
        );
        let mut map = s.serialize_map(Some(3))?;
        map.serialize_entry("metype_cell_syn_average", &syn)?;
        map.serialize_entry("metype_memory", &memory)?;
        map.serialize_entry("pop_metype_gids", &pops)?;
        map.end()
    }
}

/// `x` as a whole number or to 1 decimal, or in exponent notation when large (1e308 rather
/// than 309 digits).
fn short(x: f64) -> String {
    if x.abs() >= 1e15 {
        format!("{x:e}")
    } else if x.fract() == 0.0 {
        format!("{x}")
    } else {
        format!("{x:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map, Value};

    fn parse(v: Value) -> Result<DryRun> {
        DryRun::from_json_slice(&serde_json::to_vec(&v).unwrap(), Path::new("x.json")).map(|r| r.dry_run)
    }

    #[test]
    fn per_cell_cost_adds_synapse_memory() {
        let d = parse(json!({
            "metype_memory": {"A": 100.0, "B": 10.0},
            "metype_cell_syn_average": {"A": 10.0},
            "pop_metype_gids": {"P": {"A": [0, 2], "B": [1]}}
        }))
        .unwrap();
        assert_eq!(d.metype_cell_kb(), vec![100.0 + 19.0, 10.0]);
        assert_eq!(d.cell_count(), 3);
        let cell = |gid, metype| GidMetype { gid, metype };
        assert_eq!(
            d.populations[0].cells().collect::<Vec<_>>(),
            [cell(0, 0), cell(2, 0), cell(1, 1)],
            "metype by metype, in file order"
        );
        let t = d.gid_kb_table();
        assert_eq!(
            [0, 1, 2, 3].map(|g| t[0].get(g)),
            [Some(119.0), Some(10.0), Some(119.0), None]
        );
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse(json!({"metype_memory": {"A": -1.0}, "pop_metype_gids": {}})).unwrap_err();
        assert!(e.to_string().contains("metype_memory[\"A\"]"), "{e}");
        let e =
            parse(json!({"metype_memory": {"A": 1.0}, "pop_metype_gids": {"P": {"Z": [1]}}})).unwrap_err();
        assert!(
            e.to_string()
                .contains("metype \"Z\" is absent from metype_memory"),
            "{e}"
        );
        let e =
            parse(json!({"metype_memory": {"A": 1.0}, "pop_metype_gids": {"P": {"A": [1, 1]}}})).unwrap_err();
        assert!(e.to_string().contains("gid 1 is listed twice"), "{e}");
        let e =
            parse(json!({"metype_memory": {"A": 1.0}, "pop_metype_gids": {"P": {"A": [-3]}}})).unwrap_err();
        assert!(e.to_string().contains("[\"A\"][0]"), "{e}");
        let e = parse(json!({"pop_metype_gids": {}})).unwrap_err();
        assert!(e.to_string().contains("metype_memory: missing"), "{e}");
        // A total that overflows names the figure that makes it overflow.
        let e = parse(
            json!({"metype_memory": {"X": 1.0}, "metype_cell_syn_average": {"X": 1e308},
            "pop_metype_gids": {"P": {"X": [0]}}}),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains(": metype_cell_syn_average[\"X\"]: 1 cell of inf KB"),
            "{e}"
        );
        let e = parse(
            json!({"metype_memory": {"X": 1e308}, "metype_cell_syn_average": {"X": 1.0},
            "pop_metype_gids": {"P": {"X": [0]}}}),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains(": metype_memory[\"X\"]: 1 cell of "),
            "{e}"
        );
        // Figures are printed to 1 decimal below 1e15, in exponent notation above.
        let e = parse(
            json!({"metype_memory": {"X": 1e300}, "metype_cell_syn_average": {"X": 148.05405405405406},
            "pop_metype_gids": {"P": {"X": [0, 1]}}}),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("2 cells of 1e300 KB each (1e300 KB memory + 1.9 KB × 148.1 synapses)"),
            "{e}"
        );
    }

    /// [`DryRun::check_costs`]' error names the metype by index, the figure and what is
    /// wrong.
    #[test]
    fn cost_errors_name_the_metype_and_the_figure() {
        let metype = |name: &str, memory_kb, synapses_per_cell| Metype {
            name: name.into(),
            memory_kb,
            synapses_per_cell,
        };
        let mut d = DryRun {
            metypes: vec![metype("A", 1.0, 0.0), metype("B", 1.0, -2.0)],
            populations: vec![Population {
                name: "P".into(),
                metype_gids: vec![MetypeGids {
                    metype: 1,
                    gids: vec![0, 1],
                }],
                cell_synapses: None,
            }],
        };
        let e = d.check_costs().unwrap_err();
        assert_eq!(
            e,
            CostError {
                metype: 1,
                field: CostField::Synapses,
                message: "synapses per cell must be finite and >= 0, got -2".into(),
            }
        );
        assert_eq!(
            e.to_string(),
            "metype 1: metype_cell_syn_average: synapses per cell must be finite and >= 0, got -2"
        );
        d.metypes[1] = metype("B", 1e300, 0.0);
        let e = d.check_costs().unwrap_err();
        assert_eq!((e.metype, e.field), (1, CostField::Memory));
        assert!(e.message.starts_with("2 cells of 1e300 KB each"), "{e}");
        d.metypes[1] = metype("B", 3.0, 0.0);
        assert_eq!(d.check_costs(), Ok(6.0));
    }

    #[test]
    fn json_round_trip() {
        let d = parse(json!({
            "metype_memory": {"B": 1.5, "A": 100.0},
            "metype_cell_syn_average": {"A": 10.0},
            "pop_metype_gids": {"Q": {"B": [3]}, "P": {"A": [0, 2], "B": [1]}}
        }))
        .unwrap();
        let back = parse(d.to_json_value()).unwrap();
        // Same content; the written file has sorted keys, like neurodamus writes it.
        assert_eq!(
            back.metypes.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
            ["A", "B"]
        );
        assert_eq!(back.populations[0].name, "P");
        assert_eq!(back.cell_count(), 4);
        assert_eq!(back.metype_cell_kb(), vec![119.0, 1.5]);
    }

    /// The streamed file is, byte for byte, the value tree pretty-printed with neurodamus'
    /// 4-space indent: on a synthetic dry run, and on one built in code with a metype listed
    /// twice in a population, a repeated metype name, a population name repeated, a
    /// non-finite figure and an empty population.
    #[test]
    fn the_streamed_json_file_is_the_value_tree() {
        // The tree built on its own, entry by entry (the reference the streamed file and
        // `to_json_value` must match).
        fn tree(this: &DryRun) -> Value {
            let mut memory: Vec<&Metype> = this.metypes.iter().collect();
            memory.sort_by(|a, b| a.name.cmp(&b.name));
            let metype_memory: Map<String, Value> = memory
                .iter()
                .map(|m| (m.name.clone(), Value::from(m.memory_kb)))
                .collect();
            let syn: Map<String, Value> = memory
                .iter()
                .filter(|m| m.synapses_per_cell > 0.0)
                .map(|m| (m.name.clone(), Value::from(m.synapses_per_cell)))
                .collect();
            let mut pops: Vec<&Population> = this.populations.iter().collect();
            pops.sort_by(|a, b| a.name.cmp(&b.name));
            let pop_metype_gids: Map<String, Value> = pops
                .iter()
                .map(|p| {
                    let mut per: Vec<(&str, &Vec<u32>)> = p
                        .metype_gids
                        .iter()
                        .map(|e| (this.metypes[e.metype].name.as_str(), &e.gids))
                        .collect();
                    per.sort_by(|a, b| a.0.cmp(b.0));
                    let obj: Map<String, Value> = per
                        .into_iter()
                        .map(|(n, g)| (n.to_owned(), Value::from(g.clone())))
                        .collect();
                    (p.name.clone(), Value::Object(obj))
                })
                .collect();
            let mut root = Map::new();
            root.insert("metype_cell_syn_average".into(), Value::Object(syn));
            root.insert("metype_memory".into(), Value::Object(metype_memory));
            root.insert("pop_metype_gids".into(), Value::Object(pop_metype_gids));
            Value::Object(root)
        }
        let reference = |d: &DryRun| {
            let mut buf = Vec::new();
            let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
            let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
            serde::Serialize::serialize(&tree(d), &mut ser).unwrap();
            buf.push(b'\n');
            buf
        };
        let metype = |name: &str, kb: f64, syn: f64| Metype {
            name: name.into(),
            memory_kb: kb,
            synapses_per_cell: syn,
        };
        let pop = |name: &str, metype_gids: Vec<(usize, Vec<u32>)>| Population {
            name: name.into(),
            metype_gids: metype_gids
                .into_iter()
                .map(|(metype, gids)| MetypeGids { metype, gids })
                .collect(),
            cell_synapses: None,
        };
        let synthetic = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
            cells: 5_000,
            metypes: 30,
            populations: 3,
            seed: 4,
        })
        .unwrap();
        let odd = DryRun {
            metypes: vec![
                metype("b", 2.5, 0.0),
                metype("a", 1e300, 148.05405405405406),
                metype("b", 7.0, 3.0),
                metype("c", f64::NAN, 1.0),
            ],
            populations: vec![
                pop(
                    "Q",
                    vec![(2, vec![9, 8]), (1, vec![1, 4_000_000_000]), (0, vec![7])],
                ),
                pop("P", vec![]),
                pop("Q", vec![(3, vec![5])]),
            ],
        };
        let dir = tempfile::tempdir().unwrap();
        for (k, d) in [synthetic, odd].iter().enumerate() {
            let path = dir.path().join(format!("cell_memory_usage_{k}.json"));
            d.write_json_file(&path).unwrap();
            let written = std::fs::read(&path).unwrap();
            assert!(written == reference(d), "{}", String::from_utf8_lossy(&written));
            assert_eq!(d.to_json_value(), tree(d));
        }
    }
}
