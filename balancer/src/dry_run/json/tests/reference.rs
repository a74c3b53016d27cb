//! The reference the dry-run reader is tested against: the file parsed into a
//! `serde_json::Value` tree, then checked field by field on the tree, written on its own
//! (the reader must give the same dry run, notes and errors).
use std::collections::HashSet;
use std::path::Path;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::dry_run::{DryRun, DryRunWithNotes, Metype, MetypeGids, Population, KNOWN_KEYS};
use crate::error::{BalancerError, Result};
use crate::quote::{quote, shorten};

/// [`DryRun::from_json_slice`] through a `serde_json::Value` tree and [`from_json_value`]:
/// the reference the reader is tested against.
pub(super) fn read_via_value(text: &[u8], path: &Path) -> Result<DryRunWithNotes> {
    let value: Value = serde_json::from_slice(text)
        .map_err(|source| crate::dry_run::json::error::json_error(text, path, source))?;
    let notes = match value.as_object() {
        Some(root) => {
            let unknown = || root.keys().filter(|k| !KNOWN_KEYS.contains(&k.as_str()));
            let named = crate::dry_run::json::validate::UNKNOWN_KEYS_NAMED;
            let more = unknown().count().saturating_sub(named) as u64;
            crate::dry_run::json::validate::unknown_key_notes(path, unknown().take(named), more)
        }
        None => Vec::new(),
    };
    Ok(DryRunWithNotes {
        dry_run: from_json_value(&value, text, path)?,
        notes,
    })
}

/// Validates the dry-run JSON value parsed from `text`; `path` is used in messages only.
fn from_json_value(value: &Value, text: &[u8], path: &Path) -> Result<DryRun> {
    let err = |field: String, message: String| BalancerError::DryRun {
        path: path.to_owned(),
        field,
        message,
    };
    let root = value
        .as_object()
        .ok_or_else(|| err("$".into(), "expected a JSON object".into()))?;
    let object_field = |key: &str, required: bool| -> Result<Option<&Map<String, Value>>> {
        match root.get(key) {
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(_) => Err(err(key.into(), "expected a JSON object".into())),
            None if required => Err(err(key.into(), "missing".into())),
            None => Ok(None),
        }
    };
    let memory = object_field("metype_memory", true)?.expect("required");
    let syn_average = object_field("metype_cell_syn_average", false)?;
    let pop_gids = object_field("pop_metype_gids", true)?.expect("required");

    let number = |v: &Value, field: String, what: &str| -> Result<f64> {
        let x = v
            .as_f64()
            .ok_or_else(|| err(field.clone(), format!("expected a number ({what})")))?;
        if !x.is_finite() || x < 0.0 {
            return Err(err(field, format!("{what} must be finite and >= 0, got {x}")));
        }
        Ok(x)
    };

    let mut metypes = Vec::with_capacity(memory.len());
    let mut index = std::collections::HashMap::with_capacity(memory.len());
    for (name, v) in memory {
        let memory_kb = number(v, format!("metype_memory[{}]", quote(name)), "KB per cell")?;
        let synapses_per_cell = match syn_average.and_then(|m| m.get(name)) {
            Some(s) => number(
                s,
                format!("metype_cell_syn_average[{}]", quote(name)),
                "synapses per cell",
            )?,
            None => 0.0,
        };
        index.insert(name.as_str(), metypes.len());
        metypes.push(Metype {
            name: name.clone(),
            memory_kb,
            synapses_per_cell,
        });
    }
    if let Some(avg) = syn_average {
        for (name, v) in avg {
            // Validate entries for metypes without memory too (they are otherwise unused).
            number(
                v,
                format!("metype_cell_syn_average[{}]", quote(name)),
                "synapses per cell",
            )?;
        }
    }

    let mut populations = Vec::with_capacity(pop_gids.len());
    for (pop, per_metype) in pop_gids {
        let per_metype = per_metype.as_object().ok_or_else(|| {
            err(
                format!("pop_metype_gids[{}]", quote(pop)),
                "expected an object {metype: [gid, ...]}".into(),
            )
        })?;
        let mut seen = HashSet::new();
        let mut metype_gids = Vec::with_capacity(per_metype.len());
        for (metype, gids) in per_metype {
            let field = format!("pop_metype_gids[{}][{}]", quote(pop), quote(metype));
            let &m = index.get(metype.as_str()).ok_or_else(|| {
                err(
                    field.clone(),
                    format!("metype {} is absent from metype_memory", quote(metype)),
                )
            })?;
            let gids = gids
                .as_array()
                .ok_or_else(|| err(field.clone(), "expected an array of gids".into()))?;
            let mut list = Vec::with_capacity(gids.len());
            for (i, g) in gids.iter().enumerate() {
                let gid = g.as_u64().and_then(|g| u32::try_from(g).ok()).ok_or_else(|| {
                    err(
                        format!("{field}[{i}]"),
                        format!(
                            "gid must be an integer in 0..2^32, got {}",
                            bad_gid_text(text, g, pop, metype, i)
                        ),
                    )
                })?;
                if !seen.insert(gid) {
                    return Err(err(
                        format!("{field}[{i}]"),
                        format!("gid {gid} is listed twice in population {}", quote(pop)),
                    ));
                }
                list.push(gid);
            }
            metype_gids.push(MetypeGids {
                metype: m,
                gids: list,
            });
        }
        populations.push(Population {
            name: pop.clone(),
            metype_gids,
            cell_synapses: None,
        });
    }
    crate::dry_run::json::validate::checked(metypes, populations)
        .map_err(|(field, message)| err(field, message))
}

/// How a message quotes the bad gid `g`, element `i` of `pop_metype_gids[pop][metype]` in
/// `text`: a number, string or literal as the file writes it (serde_json's `RawValue`: a
/// repeated key keeps its last value, as in the tree), an array or object as compact
/// JSON; shortened.
fn bad_gid_text(text: &[u8], g: &Value, pop: &str, metype: &str, i: usize) -> String {
    if g.is_array() || g.is_object() {
        return shorten(&g.to_string());
    }
    type Object<'a> = std::collections::HashMap<String, &'a RawValue>;
    let root: Object = serde_json::from_slice(text).expect("parsed as a tree");
    let pops: Object = serde_json::from_str(root["pop_metype_gids"].get()).expect("an object");
    let per_metype: Object = serde_json::from_str(pops[pop].get()).expect("an object");
    let gids: Vec<&RawValue> = serde_json::from_str(per_metype[metype].get()).expect("an array");
    shorten(gids[i].get())
}
