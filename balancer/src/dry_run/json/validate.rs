//! The one set of checks of a dry-run file: what a reader read ([`Root`]) becomes the dry
//! run, with the notes on unknown top-level keys, or the error naming the JSON field at
//! fault (in the order the fields are met).
use std::collections::HashMap;
use std::path::Path;

use super::seen::{Seen, Sparse};
use super::types::{Entries, Gids, Number, Object, Root, RootObject};
use crate::dry_run::{CostError, DryRun, DryRunWithNotes, Metype, MetypeGids, Population, KNOWN_KEYS};
use crate::error::{BalancerError, Result};
use crate::quote::quote;

/// Why [`validate`] failed: an error, or memory that could not be had (reported by
/// [`finish`] once what was read is freed: building the message needs memory too).
enum Fail {
    Error(BalancerError),
    /// A list or map of names could not be reserved.
    Names,
    /// A population's duplicate check could not be reserved.
    Gids,
}

impl From<BalancerError> for Fail {
    fn from(e: BalancerError) -> Self {
        Fail::Error(e)
    }
}

/// Validates what was read into the dry run and the notes on unknown keys.
pub(super) fn finish(root: Root, path: &Path) -> Result<DryRunWithNotes> {
    match validate(root, path) {
        Ok(r) => Ok(r),
        Err(Fail::Error(e)) => Err(e),
        Err(Fail::Names) => Err(super::file::names_out_of_memory(path)),
        Err(Fail::Gids) => Err(super::file::out_of_memory(path)),
    }
}

/// [`finish`]'s work; what it read is dropped when it returns.
/// Most unknown top-level keys named in notes; the others are counted in one more note.
pub(crate) const UNKNOWN_KEYS_NAMED: usize = 10;

/// The notes on unknown top-level keys: one per key in `named` (at most
/// [`UNKNOWN_KEYS_NAMED`] are given), and one counting `more` others when there are any.
pub(crate) fn unknown_key_notes<'a>(
    path: &Path,
    named: impl Iterator<Item = &'a String>,
    more: u64,
) -> Vec<String> {
    let mut notes: Vec<String> = named
        .map(|k| {
            format!(
                "{}: ignoring unknown key {} (known: {})",
                path.display(),
                quote(k),
                KNOWN_KEYS.join(", ")
            )
        })
        .collect();
    if more > 0 {
        notes.push(format!(
            "{}: ignoring {more} more unknown key{} (only the first {UNKNOWN_KEYS_NAMED} are named)",
            path.display(),
            if more == 1 { "" } else { "s" }
        ));
    }
    notes
}

fn validate(root: Root, path: &Path) -> std::result::Result<DryRunWithNotes, Fail> {
    let err = |field: String, message: String| {
        Fail::Error(BalancerError::DryRun {
            path: path.to_owned(),
            field,
            message,
        })
    };
    let Root::Object(root) = root else {
        return Err(err("$".into(), "expected a JSON object".into()));
    };
    let RootObject {
        keys,
        unknown_more,
        memory,
        synapses,
        populations,
    } = *root;
    let notes = unknown_key_notes(
        path,
        keys.iter().filter(|k| !KNOWN_KEYS.contains(&k.as_str())),
        unknown_more,
    );
    fn object<'a, T>(
        v: &'a Option<Object<T>>,
        key: &str,
        required: bool,
        err: &dyn Fn(String, String) -> Fail,
    ) -> std::result::Result<Option<&'a Entries<T>>, Fail> {
        match v {
            Some(Object::Entries(e)) => Ok(Some(e)),
            Some(Object::Other) => Err(err(key.into(), "expected a JSON object".into())),
            None if required => Err(err(key.into(), "missing".into())),
            None => Ok(None),
        }
    }
    let memory = object(&memory, "metype_memory", true, &err)?.expect("required");
    let syn_average = object(&synapses, "metype_cell_syn_average", false, &err)?;
    object(&populations, "pop_metype_gids", true, &err)?;
    let Some(Object::Entries(pop_gids)) = populations else {
        unreachable!("checked above")
    };

    let number = |v: &Number, field: &dyn Fn() -> String, what: &str| -> std::result::Result<f64, Fail> {
        let x =
            v.0.ok_or_else(|| err(field(), format!("expected a number ({what})")))?;
        if !x.is_finite() || x < 0.0 {
            return Err(err(field(), format!("{what} must be finite and >= 0, got {x}")));
        }
        Ok(x)
    };
    // Sized by the input's key counts, so reserved with `try_reserve` (millions of names).
    let names = || Fail::Names;
    let mut metypes = Vec::new();
    metypes
        .try_reserve_exact(memory.list.len())
        .map_err(|_| names())?;
    let mut index: HashMap<&str, usize> = HashMap::new();
    index.try_reserve(memory.list.len()).map_err(|_| names())?;
    for (name, v) in &memory.list {
        let memory_kb = number(v, &|| format!("metype_memory[{}]", quote(name)), "KB per cell")?;
        let synapses_per_cell = match syn_average.and_then(|m| m.get(name)) {
            Some(s) => number(
                s,
                &|| format!("metype_cell_syn_average[{}]", quote(name)),
                "synapses per cell",
            )?,
            None => 0.0,
        };
        index.insert(name.as_str(), metypes.len());
        metypes.push(Metype {
            name: super::file::try_string(name).ok_or_else(names)?,
            memory_kb,
            synapses_per_cell,
        });
    }
    if let Some(avg) = syn_average {
        for (name, v) in &avg.list {
            number(
                v,
                &|| format!("metype_cell_syn_average[{}]", quote(name)),
                "synapses per cell",
            )?;
        }
    }

    let mut populations = Vec::new();
    populations
        .try_reserve_exact(pop_gids.list.len())
        .map_err(|_| names())?;
    for (pop, per_metype) in pop_gids.list {
        let Object::Entries(per_metype) = per_metype else {
            return Err(err(
                format!("pop_metype_gids[{}]", quote(&pop)),
                "expected an object {metype: [gid, ...]}".into(),
            ));
        };
        let list = &per_metype.list;
        let mut seen = Seen::new(arrays(list).map(<[u32]>::len).sum()).ok_or(Fail::Gids)?;
        // Each entry's metype, checked in order before the gids are moved out.
        let mut metype_index = Vec::new();
        metype_index.try_reserve_exact(list.len()).map_err(|_| names())?;
        for (k, (metype, gids)) in list.iter().enumerate() {
            let field = || format!("pop_metype_gids[{}][{}]", quote(&pop), quote(metype));
            let &m = index.get(metype.as_str()).ok_or_else(|| {
                err(
                    field(),
                    format!("metype {} is absent from metype_memory", quote(metype)),
                )
            })?;
            let Gids::Array { gids, bad } = gids else {
                return Err(err(field(), "expected an array of gids".into()));
            };
            let repeat = match seen.first_repeat(gids) {
                Ok(repeat) => repeat,
                Err(Sparse) => {
                    seen = Seen::sparse(arrays(list), arrays(&list[..k])).ok_or(Fail::Gids)?;
                    seen.first_repeat(gids)
                        .expect("a sparse population's Seen takes any gid")
                }
            };
            if let Some(i) = repeat {
                return Err(err(
                    format!("{}[{i}]", field()),
                    format!("gid {} is listed twice in population {}", gids[i], quote(&pop)),
                ));
            }
            if let Some((i, text)) = bad {
                return Err(err(
                    format!("{}[{i}]", field()),
                    format!("gid must be an integer in 0..2^32, got {text}"),
                ));
            }
            metype_index.push(m);
        }
        let mut metype_gids = Vec::new();
        metype_gids.try_reserve_exact(list.len()).map_err(|_| names())?;
        metype_gids.extend(
            per_metype
                .list
                .into_iter()
                .zip(metype_index)
                .map(|((_, gids), m)| match gids {
                    Gids::Array { gids, .. } => MetypeGids { metype: m, gids },
                    Gids::Other => unreachable!("checked above"),
                }),
        );
        populations.push(Population {
            name: pop,
            metype_gids,
            cell_synapses: None,
        });
    }
    let dry_run = checked(metypes, populations).map_err(|(field, message)| err(field, message))?;
    Ok(DryRunWithNotes { dry_run, notes })
}

/// The gid arrays of a population's entries.
fn arrays(per_metype: &[(String, Gids)]) -> impl Iterator<Item = &[u32]> + Clone {
    per_metype.iter().filter_map(|(_, g)| match g {
        Gids::Array { gids, .. } => Some(gids.as_slice()),
        Gids::Other => None,
    })
}

/// The dry run of what a reader parsed, if it has cells and every cost is finite and in
/// range ([`DryRun::check_costs`]); else the JSON field at fault and what is wrong.
pub(super) fn checked(
    metypes: Vec<Metype>,
    populations: Vec<Population>,
) -> std::result::Result<DryRun, (String, String)> {
    if populations.iter().all(|p| p.cell_count() == 0) {
        return Err((
            "pop_metype_gids".into(),
            "no cells: there is nothing to balance".into(),
        ));
    }
    let dry_run = DryRun { metypes, populations };
    match dry_run.check_costs() {
        Ok(_) => Ok(dry_run),
        Err(CostError {
            metype,
            field,
            message,
        }) => Err((
            format!("{}[{}]", field.json_key(), quote(&dry_run.metypes[metype].name)),
            message,
        )),
    }
}
