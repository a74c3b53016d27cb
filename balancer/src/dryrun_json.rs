//! The streaming reader of neurodamus' `cell_memory_usage.json`: typed serde visitors that
//! read the file straight into per-metype gid arrays (no `serde_json::Value` tree), then
//! validate them with the same checks, in the same order and with the same messages as
//! [`DryRun::from_json_value`], which stays the reference.
//!
//! serde_json's `preserve_order` semantics are kept: an object's keys come in first-seen
//! order and a repeated key replaces its value in place. Values of the wrong kind are kept
//! as "other" (and drained through the same deserializer, so nesting and number limits are
//! enforced as when building a `Value`), and reported when validation reaches them.
//! Everything read grows with the file: no size is taken from the input.
//!
//! The plain shape neurodamus writes is first tried by a hand-written scanner ([`scan`]),
//! which reads a file by chunks as it scans ([`scan_file`]) and gives up on anything else;
//! the file is then read whole and the serde reader reads it, so that both give the same
//! result and the same errors.
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::dryrun::{DryRun, Metype, Population, KNOWN_KEYS};
use crate::error::{BalancerError, Result};
use crate::quote::{quote, shorten};
use crate::seen::{Seen, Sparse};

/// Entries of one JSON object in first-seen key order; a repeated key replaces its value in
/// place (as serde_json's `Map` with `preserve_order`).
struct Entries<V> {
    list: Vec<(String, V)>,
    index: HashMap<String, usize>,
}

impl<V> Entries<V> {
    fn new() -> Self {
        Entries {
            list: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// Inserts or replaces `key`'s value; `None` when the memory for a new key cannot be
    /// had (the list, the index and the key's copy grow with `try_reserve`, so millions of
    /// names under `ulimit -v` end the read with an error instead of an abort).
    #[must_use]
    fn insert(&mut self, key: String, value: V) -> Option<()> {
        match self.index.get(&key) {
            Some(&i) => self.list[i].1 = value,
            None => {
                self.list.try_reserve(1).ok()?;
                self.index.try_reserve(1).ok()?;
                let copy = crate::dryrun_read::try_string(&key)?;
                self.index.insert(copy, self.list.len());
                self.list.push((key, value));
            }
        }
        Some(())
    }

    fn get(&self, key: &str) -> Option<&V> {
        self.index.get(key).map(|&i| &self.list[i].1)
    }
}

/// A value that should be an object: its entries, or something else.
enum Object<V> {
    Entries(Entries<V>),
    Other,
}

/// A value that should be a number (as `Value::as_f64` reads it), or something else.
struct Number(Option<f64>);

/// A value that should be an array of gids: the gids up to the first element that is not a
/// u32, that element's index and JSON text; or something else than an array.
enum Gids {
    Array {
        gids: Vec<u32>,
        bad: Option<(usize, String)>,
    },
    Other,
}

/// One element of a gid array.
enum Gid {
    Ok(u32),
    Bad(Value),
}

/// Any JSON value, read and dropped through `deserialize_any` (so that the deserializer's
/// nesting limit and number checks apply, as when a `Value` is built).
struct Drain;

/// An object's key, its `String` allocated with `try_reserve` (a clean error, not an abort,
/// when millions of keys exhaust `ulimit -v`).
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Key, E> {
                crate::dryrun_read::try_string(v)
                    .map(Key)
                    .ok_or_else(|| E::custom(crate::dryrun_read::NAMES_OUT_OF_MEMORY))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> std::result::Result<Key, E> {
                Ok(Key(v))
            }
        }
        d.deserialize_string(V)
    }
}

/// The top level of the file.
enum Root {
    Object(Box<RootObject>),
    Other,
}

/// The top-level object's keys and the values of the known ones.
struct RootObject {
    /// The top-level keys, first-seen order: the known ones and the first
    /// [`UNKNOWN_KEYS_NAMED`] unknown ones.
    keys: Vec<String>,
    /// Unknown keys beyond those (a repeated one counted each time).
    unknown_more: u64,
    memory: Option<Object<Number>>,
    synapses: Option<Object<Number>>,
    populations: Option<Object<Object<Gids>>>,
}

/// Visitor methods that drain a value of the wrong kind and return `$other`.
macro_rules! other_kinds {
    ($other:expr; $($skip:ident),*) => {
        other_kinds!(@each $other; $($skip),*);
    };
    (@each $other:expr; $($skip:ident),*) => {
        $(other_kinds!(@one $other; $skip);)*
    };
    (@one $other:expr; bool) => {
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> std::result::Result<Self::Value, E> { Ok($other) }
    };
    (@one $other:expr; i64) => {
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> std::result::Result<Self::Value, E> { Ok($other) }
    };
    (@one $other:expr; u64) => {
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> std::result::Result<Self::Value, E> { Ok($other) }
    };
    (@one $other:expr; f64) => {
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> std::result::Result<Self::Value, E> { Ok($other) }
    };
    (@one $other:expr; str) => {
        fn visit_str<E: serde::de::Error>(self, _: &str) -> std::result::Result<Self::Value, E> { Ok($other) }
    };
    (@one $other:expr; unit) => {
        fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<Self::Value, E> { Ok($other) }
    };
    (@one $other:expr; seq) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self::Value, A::Error> {
            while seq.next_element::<Drain>()?.is_some() {}
            Ok($other)
        }
    };
    (@one $other:expr; map) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Self::Value, A::Error> {
            while map.next_entry::<Drain, Drain>()?.is_some() {}
            Ok($other)
        }
    };
}

impl<'de> Deserialize<'de> for Drain {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Drain;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            other_kinds!(Drain; bool, i64, u64, f64, str, unit, seq, map);
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Number;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<Number, E> {
                Ok(Number(Some(v as f64)))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<Number, E> {
                Ok(Number(Some(v as f64)))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<Number, E> {
                Ok(Number(Some(v)))
            }
            other_kinds!(Number(None); bool, str, unit, seq, map);
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Gid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Gid;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<Gid, E> {
                Ok(u32::try_from(v).map_or(Gid::Bad(Value::from(v)), Gid::Ok))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<Gid, E> {
                Ok(Gid::Bad(Value::from(v)))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<Gid, E> {
                Ok(Gid::Bad(Value::from(v)))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> std::result::Result<Gid, E> {
                Ok(Gid::Bad(Value::Bool(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Gid, E> {
                Ok(Gid::Bad(Value::String(v.to_owned())))
            }
            fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<Gid, E> {
                Ok(Gid::Bad(Value::Null))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> std::result::Result<Gid, A::Error> {
                Value::deserialize(SeqAccessDeserializer::new(seq)).map(Gid::Bad)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<Gid, A::Error> {
                Value::deserialize(MapAccessDeserializer::new(map)).map(Gid::Bad)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Gids {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Gids;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Gids, A::Error> {
                let mut gids = Vec::new();
                let mut bad = None;
                let mut i = 0usize;
                while let Some(g) = seq.next_element::<Gid>()? {
                    if bad.is_none() {
                        match g {
                            Gid::Ok(g) => {
                                if gids.len() == gids.capacity()
                                    && gids.try_reserve(gids.len().max(64)).is_err()
                                {
                                    return Err(serde::de::Error::custom(crate::dryrun_read::OUT_OF_MEMORY));
                                }
                                gids.push(g)
                            }
                            Gid::Bad(v) => bad = Some((i, shorten(&v.to_string()))),
                        }
                    }
                    i += 1;
                }
                Ok(Gids::Array { gids, bad })
            }
            other_kinds!(Gids::Other; bool, i64, u64, f64, str, unit, map);
        }
        d.deserialize_any(V)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Object<T>, A::Error> {
                let mut entries = Entries::new();
                while let Some(Key(key)) = map.next_key::<Key>()? {
                    let value = map.next_value::<T>()?;
                    entries
                        .insert(key, value)
                        .ok_or_else(|| serde::de::Error::custom(crate::dryrun_read::NAMES_OUT_OF_MEMORY))?;
                }
                Ok(Object::Entries(entries))
            }
            other_kinds!(Object::Other; bool, i64, u64, f64, str, unit, seq);
        }
        d.deserialize_any(V(PhantomData))
    }
}

impl<'de> Deserialize<'de> for Root {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Root;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Root, A::Error> {
                // Each key once, first-seen order: the known ones and the first unknown
                // ones; the others only counted (millions of keys keep nothing).
                let mut keys: Entries<()> = Entries::new();
                let (mut unknown, mut unknown_more) = (0, 0u64);
                let (mut memory, mut synapses, mut populations) = (None, None, None);
                while let Some(Key(key)) = map.next_key::<Key>()? {
                    match key.as_str() {
                        "metype_memory" => memory = Some(map.next_value()?),
                        "metype_cell_syn_average" => synapses = Some(map.next_value()?),
                        "pop_metype_gids" => populations = Some(map.next_value()?),
                        _ => {
                            map.next_value::<Drain>()?;
                            if keys.get(&key).is_some() {
                                continue;
                            }
                            if unknown == UNKNOWN_KEYS_NAMED {
                                unknown_more += 1;
                                continue;
                            }
                            unknown += 1;
                        }
                    }
                    keys.insert(key, ())
                        .ok_or_else(|| serde::de::Error::custom(crate::dryrun_read::NAMES_OUT_OF_MEMORY))?;
                }
                Ok(Root::Object(Box::new(RootObject {
                    keys: keys.list.into_iter().map(|(k, ())| k).collect(),
                    unknown_more,
                    memory,
                    synapses,
                    populations,
                })))
            }
            other_kinds!(Root::Other; bool, i64, u64, f64, str, unit, seq);
        }
        d.deserialize_any(V)
    }
}

/// Reads `text` (the file at `path`, named in messages) as [`DryRun::from_json_file_with_notes`]
/// does: the dry run and the notes on unknown top-level keys, or the same error.
#[cfg(test)]
pub(crate) fn read(text: &[u8], path: &Path) -> Result<(DryRun, Vec<String>)> {
    read_counted(text, path, &AtomicU64::new(0))
}

/// [`read`], adding to `done` the bytes parsed as it goes (all of `text` when it succeeds).
pub(crate) fn read_counted(text: &[u8], path: &Path, done: &AtomicU64) -> Result<(DryRun, Vec<String>)> {
    let base = done.load(Ordering::Relaxed);
    let root = match scan::root(text, &|at| done.store(base + at as u64, Ordering::Relaxed)) {
        Some(root) => root,
        None => read_serde(text, path)?,
    };
    done.store(base + text.len() as u64, Ordering::Relaxed);
    finish(root, path)
}

/// Reads the dry run from `file` (of `size` bytes when opened) by chunks, scanning each as
/// it is read, when it is of the plain shape neurodamus writes ([`scan`]); adds to `done`
/// the bytes read and parsed as it goes (twice `size` when it succeeds). `Ok(None)` when
/// the scan gives up (the caller then reads it whole); an error when the file changed size
/// while read (still being written: [`crate::dryrun_read::changed`]), a read failed, or from
/// [`finish`].
pub(crate) fn scan_file(
    file: &std::fs::File,
    size: u64,
    path: &Path,
    done: &AtomicU64,
) -> Result<Option<(DryRun, Vec<String>)>> {
    let base = done.load(Ordering::Relaxed);
    // The scan tells positions; `done` counts the bytes read too, so it is told the steps.
    let parsed = AtomicU64::new(0);
    let progress = |at: usize| {
        let prev = parsed.fetch_max(at as u64, Ordering::Relaxed);
        done.fetch_add((at as u64).saturating_sub(prev), Ordering::Relaxed);
    };
    let input = scan::Input {
        src: file,
        size,
        window: scan::WINDOW,
        read: done,
        parallel_from: scan::PARALLEL_FROM,
    };
    let root = match scan::scan(input, &progress) {
        Ok(Some(root)) => root,
        Ok(None) | Err(scan::Fault::Long) => return Ok(None),
        Err(scan::Fault::Changed) => return Err(crate::dryrun_read::changed(file, size, path)),
        Err(scan::Fault::Io(e)) => return Err(BalancerError::io(path, e)),
        Err(scan::Fault::Memory) => return Err(crate::dryrun_read::out_of_memory(path)),
        Err(scan::Fault::Names) => return Err(crate::dryrun_read::names_out_of_memory(path)),
    };
    // Grown since it was opened.
    let mut more = [0u8; 1];
    match std::os::unix::fs::FileExt::read_at(file, &mut more, size) {
        Ok(0) => {}
        Ok(_) => return Err(crate::dryrun_read::changed(file, size, path)),
        Err(e) => return Err(BalancerError::io(path, e)),
    }
    done.store(base + 2 * size, Ordering::Relaxed);
    finish(root, path).map(Some)
}

/// The top level of `text` through serde_json: any JSON, and serde_json's error on invalid
/// JSON.
fn read_serde(text: &[u8], path: &Path) -> Result<Root> {
    let mut de = serde_json::Deserializer::from_slice(text);
    Root::deserialize(&mut de)
        .and_then(|r| de.end().map(|()| r))
        .map_err(|source| crate::jsonerror::json_error(text, path, source))
}

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

/// Validates what was read into the dry run and the notes on unknown keys.
fn finish(root: Root, path: &Path) -> Result<(DryRun, Vec<String>)> {
    match validate(root, path) {
        Ok(r) => Ok(r),
        Err(Fail::Error(e)) => Err(e),
        Err(Fail::Names) => Err(crate::dryrun_read::names_out_of_memory(path)),
        Err(Fail::Gids) => Err(crate::dryrun_read::out_of_memory(path)),
    }
}

/// [`finish`]'s work; what it read is dropped when it returns.
fn validate(root: Root, path: &Path) -> std::result::Result<(DryRun, Vec<String>), Fail> {
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
            name: crate::dryrun_read::try_string(name).ok_or_else(names)?,
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
                    Gids::Array { gids, .. } => (m, gids),
                    Gids::Other => unreachable!("checked above"),
                }),
        );
        populations.push(Population {
            name: pop,
            metype_gids,
            cell_synapses: None,
        });
    }
    let dry_run = DryRun::checked(metypes, populations).map_err(|(field, message)| err(field, message))?;
    Ok((dry_run, notes))
}

/// A scanner for the plain shape neurodamus writes: the three known top-level keys, each
/// at most once, with objects of numbers and of gid arrays, keys without escapes, gids as
/// plain decimal integers below 2^32. It returns what the serde reader would for such a
/// text, and `None` on anything else (another key, an escape, a value of another kind, any
/// invalid JSON), which the serde reader then reads or refuses with its own message.
///
/// It reads its input (a file, or a text in memory) in chunks into a small reused buffer,
/// scanning each while it is in cache: a large file is never held whole, so its pages are
/// not faulted in, copied out of the page cache into a fresh buffer and freed again. A token
/// cut by a chunk's end is carried to the buffer's start before the next chunk is read.
mod scan {
    use std::io;
    use std::sync::atomic::{AtomicU64, Ordering};

    use serde::Deserialize;

    use super::{Entries, Gids, Number, Object, Root, RootObject};

    /// Eight spaces, as one word.
    const SPACES: u64 = u64::from_ne_bytes(*b"        ");

    /// Where scanned bytes come from: a file or a text in memory, read at offsets.
    pub(super) trait Source: Sync {
        /// Copies the bytes from `offset` into `buf`: how many (0 at the end).
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    }

    impl Source for &[u8] {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            let rest = usize::try_from(offset)
                .ok()
                .and_then(|o| self.get(o..))
                .unwrap_or_default();
            let n = rest.len().min(buf.len());
            buf[..n].copy_from_slice(&rest[..n]);
            Ok(n)
        }
    }

    impl Source for std::fs::File {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            std::os::unix::fs::FileExt::read_at(self, buf, offset)
        }
    }

    /// How much is read at a time, and the longest token carried from one chunk to the next
    /// (a longer one makes the scan give up: the serde reader then reads the file).
    #[derive(Clone, Copy, Debug)]
    pub(super) struct Window {
        pub(super) chunk: usize,
        pub(super) keep: usize,
    }

    /// Chunks that stay in L2 cache between the read and the scan.
    pub(super) const WINDOW: Window = Window {
        chunk: 256 << 10,
        keep: 64 << 10,
    };

    /// Why a scan stopped without reading its input to the end.
    #[derive(Debug)]
    pub(super) enum Fault {
        /// The source ended before its size: it changed while read.
        Changed,
        /// A read failed.
        Io(io::Error),
        /// A token longer than [`Window::keep`].
        Long,
        /// A gid array could not grow (`try_reserve`: `ulimit -v`, or the machine's memory).
        Memory,
        /// An object's keys (metype, population names) could not grow (`try_reserve`).
        Names,
    }

    /// What a scan reads: `size` bytes of `src`, in chunks of `window`; the bytes read are
    /// added to `read` (the file's first half only when its second half is read by another
    /// thread, so that each byte counts once); texts from `parallel_from` bytes have their
    /// populations scanned on two threads.
    #[derive(Clone, Copy)]
    pub(super) struct Input<'a> {
        pub(super) src: &'a dyn Source,
        pub(super) size: u64,
        pub(super) window: Window,
        pub(super) read: &'a AtomicU64,
        pub(super) parallel_from: u64,
    }

    struct Scanner<'a> {
        input: Input<'a>,
        /// The bytes from offset `base`, valid up to `filled`; the scan is at `at`.
        buf: Vec<u8>,
        base: u64,
        filled: usize,
        at: usize,
        /// Bytes read below this offset are counted in `input.read`.
        count_below: u64,
        /// Told the position after each gid array.
        progress: &'a dyn Fn(usize),
        /// Set once a read could not go on; every later read then stops too.
        fault: Option<Fault>,
        /// The gids of the array being read.
        scratch: Vec<u32>,
    }

    impl<'a> Scanner<'a> {
        fn new(input: Input<'a>, from: u64, count_below: u64, progress: &'a dyn Fn(usize)) -> Self {
            let len = (input.window.chunk + input.window.keep).min(input.size.saturating_sub(from) as usize);
            Scanner {
                input,
                buf: vec![0; len],
                base: from,
                filled: 0,
                at: 0,
                count_below,
                progress,
                fault: None,
                scratch: Vec::new(),
            }
        }

        /// The offset of the scan in the input.
        #[inline]
        fn pos(&self) -> u64 {
            self.base + self.at as u64
        }

        /// Goes on from `to`, forgetting what is buffered.
        fn seek(&mut self, to: u64) {
            (self.base, self.filled, self.at) = (to, 0, 0);
        }

        /// The bytes buffered.
        #[inline]
        fn text(&self) -> &[u8] {
            &self.buf[..self.filled]
        }

        /// Reads the next chunk, keeping the buffered bytes from `at` (moved to the start);
        /// false at the end of the input or once a read could not go on ([`Fault`]).
        #[cold]
        #[inline(never)]
        fn more(&mut self) -> bool {
            let next = self.base + self.filled as u64;
            if next >= self.input.size || self.fault.is_some() {
                return false;
            }
            let pending = self.filled - self.at;
            if pending > self.input.window.keep {
                self.fault = Some(Fault::Long);
                return false;
            }
            self.buf.copy_within(self.at..self.filled, 0);
            (self.base, self.at, self.filled) = (self.base + self.at as u64, 0, pending);
            let want = (self.input.size - next).min((self.buf.len() - pending) as u64) as usize;
            let mut got = 0;
            while got < want {
                match self
                    .input
                    .src
                    .read_at(&mut self.buf[pending + got..pending + want], next + got as u64)
                {
                    Ok(0) => {
                        self.fault = Some(Fault::Changed);
                        return false;
                    }
                    Ok(n) => got += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        self.fault = Some(Fault::Io(e));
                        return false;
                    }
                }
            }
            let counted = self.count_below.saturating_sub(next).min(got as u64);
            self.input.read.fetch_add(counted, Ordering::Relaxed);
            self.filled = pending + got;
            true
        }

        /// Tries to have `n` bytes buffered from `at` (fewer at the end of the input).
        #[inline]
        fn fill(&mut self, n: usize) {
            while self.filled - self.at < n && self.more() {}
        }

        #[inline]
        fn ws(&mut self) {
            loop {
                let (text, mut at) = (self.text(), self.at);
                while let Some(b' ' | b'\n' | b'\r' | b'\t') = text.get(at) {
                    // Indentation eight spaces at a time.
                    match text
                        .get(at..at + 8)
                        .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")))
                    {
                        Some(SPACES) => at += 8,
                        _ => at += 1,
                    }
                }
                self.at = at;
                if at < self.filled || !self.more() {
                    return;
                }
            }
        }

        #[inline]
        fn peek(&mut self) -> Option<u8> {
            self.ws();
            self.text().get(self.at).copied()
        }

        #[inline]
        fn eat(&mut self, byte: u8) -> Option<()> {
            (self.peek()? == byte).then(|| self.at += 1)
        }

        /// The length of the run of bytes from `at` that `keep` accepts, reading on as
        /// needed; the run may end at the end of the input.
        fn run(&mut self, keep: impl Fn(u8) -> bool) -> usize {
            let mut len = 0;
            loop {
                let rest = &self.text()[self.at + len..];
                match rest.iter().position(|&b| !keep(b)) {
                    Some(p) => return len + p,
                    None => {
                        len += rest.len();
                        if !self.more() {
                            return len;
                        }
                    }
                }
            }
        }

        /// A string without escapes or control characters.
        fn string(&mut self) -> Option<String> {
            self.eat(b'"')?;
            let len = self.run(|b| b != b'"' && b != b'\\' && b >= 0x20);
            let start = self.at;
            // The closing quote right after (a control character in a key is invalid JSON).
            if self.text().get(start + len) != Some(&b'"') {
                return None;
            }
            self.at = start + len + 1;
            let key = std::str::from_utf8(&self.text()[start..start + len]).ok()?;
            let key = crate::dryrun_read::try_string(key);
            if key.is_none() {
                self.fault = Some(Fault::Names);
            }
            key
        }

        /// `list.push(item)`, or [`Fault::Names`] when the memory cannot be had.
        fn push<T>(&mut self, list: &mut Vec<T>, item: T) -> Option<()> {
            if list.try_reserve(1).is_err() {
                self.fault = Some(Fault::Names);
                return None;
            }
            list.push(item);
            Some(())
        }

        /// `entries.insert(key, value)`, or [`Fault::Names`] when the memory cannot be had.
        fn insert<V>(&mut self, entries: &mut Entries<V>, key: String, value: V) -> Option<()> {
            let done = entries.insert(key, value);
            if done.is_none() {
                self.fault = Some(Fault::Names);
            }
            done
        }

        /// An object of `value`s; `None` when it is not one.
        fn object<V>(&mut self, mut value: impl FnMut(&mut Self) -> Option<V>) -> Option<Entries<V>> {
            self.eat(b'{')?;
            let mut entries = Entries::new();
            if self.peek()? == b'}' {
                self.at += 1;
                return Some(entries);
            }
            loop {
                let key = self.string()?;
                self.eat(b':')?;
                let v = value(self)?;
                self.insert(&mut entries, key, v)?;
                match self.peek()? {
                    b',' => self.at += 1,
                    b'}' => {
                        self.at += 1;
                        return Some(entries);
                    }
                    _ => return None,
                }
            }
        }

        /// A number, read by serde_json itself (so it is the same f64).
        fn number(&mut self) -> Option<Number> {
            self.ws();
            let len = self.run(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'));
            let start = self.at;
            self.at = start + len;
            let mut de = serde_json::Deserializer::from_slice(&self.text()[start..start + len]);
            let n = Number::deserialize(&mut de).ok()?;
            de.end().ok()?;
            n.0.is_some().then_some(n)
        }

        /// An array of decimal integers below 2^32 without leading zeros.
        fn gids(&mut self) -> Option<Gids> {
            self.eat(b'[')?;
            if self.peek()? == b']' {
                self.at += 1;
                return Some(Gids::Array {
                    gids: Vec::new(),
                    bad: None,
                });
            }
            // Gathered in the reused `scratch`, then copied once into a vector of their
            // number (instead of a vector grown, copied and freed by doubling).
            let mut gids = std::mem::take(&mut self.scratch);
            gids.clear();
            let done = loop {
                self.ws();
                // A gid and what tells where it ends, in one piece.
                self.fill(16);
                let Some((gid, len)) = gid(&self.text()[self.at..]) else {
                    break false;
                };
                self.at += len;
                if gids.len() == gids.capacity() && gids.try_reserve(gids.len().max(64)).is_err() {
                    self.fault = Some(Fault::Memory);
                    break false;
                }
                gids.push(gid);
                match self.peek() {
                    Some(b',') => self.at += 1,
                    Some(b']') => {
                        self.at += 1;
                        break true;
                    }
                    _ => break false,
                }
            };
            let array = done.then(|| crate::dryrun_read::try_copy(&gids));
            self.scratch = gids;
            let Some(array) = array? else {
                self.fault = Some(Fault::Memory);
                return None;
            };
            (self.progress)(self.pos() as usize);
            Some(Gids::Array {
                gids: array,
                bad: None,
            })
        }
    }

    /// The decimal integer below 2^32 without leading zeros (at most 10 digits) at the start
    /// of `text`, and its length; `None` when there is none, or more digits follow.
    #[inline]
    pub(super) fn gid(text: &[u8]) -> Option<(u32, usize)> {
        let Some(word) = text.get(..8) else {
            return gid_bytewise(text);
        };
        // Eight bytes at once: a byte is a digit when both its high nibble and that of the
        // byte + 6 are 3. A carry out of a byte only spoils the bytes after it, which come
        // after the first non-digit.
        let x = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
        const THREES: u64 = 0x3030_3030_3030_3030;
        let other = ((x & HIGH) ^ THREES) | ((x.wrapping_add(0x0606_0606_0606_0606) & HIGH) ^ THREES);
        let n = (other.trailing_zeros() / 8) as usize;
        if n == 0 || (n > 1 && text[0] == b'0') {
            return None;
        }
        // The n digits at the top of the word (zeros before them), then combined in pairs,
        // fours and eights.
        let v = (x & 0x0F0F_0F0F_0F0F_0F0F) << (8 * (8 - n));
        let v = v.wrapping_mul(10).wrapping_add(v >> 8);
        const PAIRS: u64 = 0x0000_00FF_0000_00FF;
        let v = ((v & PAIRS)
            .wrapping_mul(100 + (1_000_000 << 32))
            .wrapping_add(((v >> 16) & PAIRS).wrapping_mul(1 + (10_000 << 32))))
            >> 32;
        if n < 8 {
            return Some((v as u32, n));
        }
        let (mut g, mut len) = (v, 8);
        while let Some(&d) = text.get(len).filter(|d| d.is_ascii_digit()) {
            if len == 10 {
                return None;
            }
            g = g * 10 + (d - b'0') as u64;
            len += 1;
        }
        Some((u32::try_from(g).ok()?, len))
    }

    /// [`gid`] a byte at a time (at the end of the input).
    fn gid_bytewise(text: &[u8]) -> Option<(u32, usize)> {
        let len = text
            .iter()
            .position(|d| !d.is_ascii_digit())
            .unwrap_or(text.len());
        if len == 0 || len > 10 || (len > 1 && text[0] == b'0') {
            return None;
        }
        let g = text[..len].iter().fold(0u64, |g, &d| g * 10 + (d - b'0') as u64);
        Some((u32::try_from(g).ok()?, len))
    }

    /// What a scan from the middle of `pop_metype_gids` read.
    struct Tail {
        /// The rest of the population it started in: `"metype": [gids]`, in order.
        rest: Vec<(String, Gids)>,
        /// The populations after it, read whole (on the scan's own thread).
        populations: Vec<(String, Entries<Gids>)>,
        /// Where `pop_metype_gids` ends: the scan from the start goes on from there.
        end: u64,
    }

    impl Scanner<'_> {
        /// A scan from here, assumed to be a metype key inside a population object after a
        /// comma, to the end of `pop_metype_gids`; `None` when the text does not read that
        /// way from here (this was not such a place, or the shape is another).
        fn scan_from(&mut self) -> Option<Tail> {
            let mut rest = Vec::new();
            loop {
                let key = self.string()?;
                self.eat(b':')?;
                let gids = self.gids()?;
                self.push(&mut rest, (key, gids))?;
                match self.peek()? {
                    b',' => self.at += 1,
                    b'}' => break,
                    _ => return None,
                }
            }
            self.at += 1;
            // The next populations (possibly empty ones), then the end.
            let mut populations = Vec::new();
            loop {
                match self.peek()? {
                    b',' => self.at += 1,
                    b'}' => {
                        let end = self.pos() + 1;
                        return Some(Tail {
                            rest,
                            populations,
                            end,
                        });
                    }
                    _ => return None,
                }
                let name = self.string()?;
                self.eat(b':')?;
                let metypes = self.object(Scanner::gids)?;
                self.push(&mut populations, (name, metypes))?;
            }
        }

        /// The first place from here from which [`Scanner::scan_from`] may read: a `]` , `"`
        /// sequence (the end of a gid array and the next metype key), at its `"`. Only a
        /// guess: the scan from the start takes it when it gets there in that state.
        fn split(&mut self) -> Option<u64> {
            loop {
                loop {
                    match self.text()[self.at..].iter().position(|&b| b == b']') {
                        Some(p) => {
                            self.at += p;
                            break;
                        }
                        None => {
                            self.at = self.filled;
                            if !self.more() {
                                return None;
                            }
                        }
                    }
                }
                self.at += 1;
                if self.peek() == Some(b',') {
                    self.at += 1;
                    if self.peek() == Some(b'"') {
                        return Some(self.pos());
                    }
                }
            }
        }
    }

    /// Files from this size are scanned on two threads.
    pub(super) const PARALLEL_FROM: u64 = 1 << 22;

    /// A progress callback that ignores its position.
    fn ignore(_: usize) {}

    /// How many scans took the other thread's result.
    #[cfg(test)]
    pub(super) static HANDOFFS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    impl Scanner<'_> {
        /// `pop_metype_gids`: an object of objects of gid arrays. A large input's second half
        /// is read and scanned by another thread from a guessed place ([`Scanner::split`]
        /// from the middle); when this scan reaches that place between two metypes of a
        /// population, it takes the other thread's result from there (what it would have
        /// read itself) and goes on after it, else it reads on itself.
        fn populations(&mut self) -> Option<Entries<Object<Gids>>> {
            let input = self.input;
            let mid = input.size / 2;
            let parallel = input.size >= input.parallel_from;
            std::thread::scope(|scope| {
                let (guess_tx, guess_rx) = std::sync::mpsc::channel();
                let mut other = parallel.then(|| {
                    // `Some(None)` when no thread can start: its sender is dropped, so
                    // this scan reads on itself.
                    crate::spawn::scoped(scope, move || {
                        // Its gid arrays come from this thread's allocator arena: grown
                        // at once for about what the half holds (4 B per gid of at least
                        // 6 B of text: "1234,\n"; the arrays are exact).
                        crate::arena::warm(usize::try_from((input.size - mid) / 6 * 4).unwrap_or(usize::MAX));
                        let mut s = Scanner::new(input, mid, u64::MAX, &ignore);
                        let guess = s.split();
                        // The receiver waits for this, or is gone.
                        let _ = guess_tx.send(guess);
                        guess?;
                        let tail = s.scan_from()?;
                        s.fault.is_none().then_some(tail)
                    })
                });
                // Where the other scan started, once this one is past the middle.
                let mut guess: Option<Option<u64>> = None;
                self.eat(b'{')?;
                let mut pops = Entries::new();
                if self.peek()? == b'}' {
                    self.at += 1;
                    return Some(pops);
                }
                loop {
                    let name = self.string()?;
                    self.eat(b':')?;
                    self.eat(b'{')?;
                    let mut metypes = Entries::new();
                    if self.peek()? != b'}' {
                        loop {
                            let key = self.string()?;
                            self.eat(b':')?;
                            let gids = self.gids()?;
                            self.insert(&mut metypes, key, gids)?;
                            match self.peek()? {
                                b',' => {
                                    self.at += 1;
                                    let Some(handle) = &mut other else { continue };
                                    if self.peek()? != b'"' || self.pos() < mid {
                                        continue;
                                    }
                                    let at = *guess.get_or_insert_with(|| guess_rx.recv().ok().flatten());
                                    if at != Some(self.pos()) {
                                        continue;
                                    }
                                    let tail = handle.take().and_then(|h| h.join().ok()).flatten();
                                    let Some(tail) = tail else {
                                        other = None;
                                        continue;
                                    };
                                    #[cfg(test)]
                                    HANDOFFS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                    for (k, g) in tail.rest {
                                        self.insert(&mut metypes, k, g)?;
                                    }
                                    self.insert(&mut pops, name, Object::Entries(metypes))?;
                                    for (name, metypes) in tail.populations {
                                        self.insert(&mut pops, name, Object::Entries(metypes))?;
                                    }
                                    self.seek(tail.end);
                                    (self.progress)(tail.end as usize);
                                    return Some(pops);
                                }
                                b'}' => break,
                                _ => return None,
                            }
                        }
                    }
                    self.at += 1;
                    self.insert(&mut pops, name, Object::Entries(metypes))?;
                    match self.peek()? {
                        b',' => self.at += 1,
                        b'}' => {
                            self.at += 1;
                            return Some(pops);
                        }
                        _ => return None,
                    }
                }
            })
        }
    }

    /// The top level of `text`, or `None` when it is not of the plain shape; `progress` is
    /// told how far it got after each gid array.
    pub(super) fn root(text: &[u8], progress: &dyn Fn(usize)) -> Option<Root> {
        root_with(text, progress, PARALLEL_FROM, WINDOW)
    }

    /// [`root`], on two threads from `parallel_from` bytes, reading `text` by `window`.
    pub(super) fn root_with(
        text: &[u8],
        progress: &dyn Fn(usize),
        parallel_from: u64,
        window: Window,
    ) -> Option<Root> {
        let input = Input {
            src: &text,
            size: text.len() as u64,
            window,
            read: &AtomicU64::new(0),
            parallel_from,
        };
        scan(input, progress).ok().flatten()
    }

    /// The top level of `input`: `Ok(None)` when it is not of the plain shape, and the
    /// fault when it could not be read to its end.
    pub(super) fn scan(input: Input, progress: &dyn Fn(usize)) -> Result<Option<Root>, Fault> {
        let count_below = if input.size >= input.parallel_from {
            input.size / 2
        } else {
            u64::MAX
        };
        let mut s = Scanner::new(input, 0, count_below, progress);
        let root = root_of(&mut s);
        match s.fault {
            Some(fault) => Err(fault),
            None => Ok(root),
        }
    }

    fn root_of(s: &mut Scanner) -> Option<Root> {
        let mut keys: Vec<String> = Vec::new();
        let (mut memory, mut synapses, mut populations) = (None, None, None);
        s.eat(b'{')?;
        if s.peek()? != b'}' {
            loop {
                let key = s.string()?;
                s.eat(b':')?;
                match key.as_str() {
                    "metype_memory" if memory.is_none() => {
                        memory = Some(Object::Entries(s.object(Scanner::number)?))
                    }
                    "metype_cell_syn_average" if synapses.is_none() => {
                        synapses = Some(Object::Entries(s.object(Scanner::number)?))
                    }
                    "pop_metype_gids" if populations.is_none() => {
                        populations = Some(Object::Entries(s.populations()?))
                    }
                    _ => return None,
                }
                keys.push(key);
                match s.peek()? {
                    b',' => s.at += 1,
                    b'}' => break,
                    _ => return None,
                }
            }
        }
        s.at += 1;
        // Nothing but whitespace after.
        s.peek().is_none().then(|| {
            Root::Object(Box::new(RootObject {
                keys,
                unknown_more: 0,
                memory,
                synapses,
                populations,
            }))
        })
    }
}

/// The gid arrays of a population's entries.
fn arrays(per_metype: &[(String, Gids)]) -> impl Iterator<Item = &[u32]> + Clone {
    per_metype.iter().filter_map(|(_, g)| match g {
        Gids::Array { gids, .. } => Some(gids.as_slice()),
        Gids::Other => None,
    })
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// A random JSON object text: `entries` (key, value text) with keys possibly repeated.
    fn object(entries: Vec<(String, String)>) -> String {
        let body: Vec<String> = entries
            .into_iter()
            .map(|(k, v)| format!("{}: {v}", serde_json::to_string(&k).unwrap()))
            .collect();
        format!("{{{}}}", body.join(", "))
    }

    /// A value of the wrong kind or an edge case, sometimes.
    fn odd(rng: &mut ChaCha8Rng) -> String {
        let odd = [
            "null",
            "true",
            "\"7\"",
            "-3",
            "1.5",
            "1e308",
            "5000000000",
            "[1, [2, {\"a\": 3}]]",
            "{\"a\": 1, \"a\": [2]}",
            "-0.0",
            "4294967295",
            "4294967296",
            "99999999999999999999",
            "[]",
            "{}",
        ];
        odd[rng.random_range(0..odd.len())].to_owned()
    }

    fn number(rng: &mut ChaCha8Rng, clean: bool) -> String {
        match rng.random_range(0..10) {
            0 if !clean => odd(rng),
            1 => format!("{}", rng.random_range(0..5000u32)),
            _ => format!("{:?}", rng.random_range(0.0..5000.0f64)),
        }
    }

    fn name(rng: &mut ChaCha8Rng, n: usize) -> String {
        name_of(rng.random_range(0..n))
    }

    fn name_of(i: usize) -> String {
        ["A", "B", "C", "D", "E", "F\"q", "G"][i].to_owned()
    }

    /// A gid array; when `clean`, of gids counted up from `next` (distinct).
    fn gids(rng: &mut ChaCha8Rng, sparse: bool, clean: bool, next: &mut u32) -> String {
        if !clean && rng.random_range(0..25) == 0 {
            return odd(rng);
        }
        let n = rng.random_range(0..12);
        let items: Vec<String> = (0..n)
            .map(|_| match rng.random_range(0..40) {
                0 if !clean => odd(rng),
                _ if clean => {
                    *next = next.saturating_add(if sparse {
                        rng.random_range(1..40_000_000)
                    } else {
                        1
                    });
                    format!("{next}")
                }
                _ if sparse => format!("{}", rng.random_range(0..u32::MAX)),
                _ => format!("{}", rng.random_range(0..60u32)),
            })
            .collect();
        format!("[{}]", items.join(",\n        "))
    }

    fn dry_run_text(rng: &mut ChaCha8Rng) -> String {
        let sparse = rng.random_range(0..4) == 0;
        let clean = rng.random_range(0..2) == 0;
        let mut next = 0u32;
        let mut root = Vec::new();
        let keys = rng.random_range(1..6);
        for k in 0..keys + 3 * clean as usize {
            // Clean files have all three keys (and their metypes) after any random ones.
            let key = match if k >= keys {
                9 + k - keys
            } else {
                rng.random_range(0..12)
            } {
                0 => "other".to_owned(),
                1 => "metype_cell_syn_averag".to_owned(),
                2..=4 | 10 => "metype_memory".to_owned(),
                5..=6 | 9 => "metype_cell_syn_average".to_owned(),
                _ => "pop_metype_gids".to_owned(),
            };
            let value = if !clean && rng.random_range(0..30) == 0 {
                odd(rng)
            } else {
                match key.as_str() {
                    "metype_memory" if k >= keys => {
                        object((0..6).map(|i| (name_of(i), number(rng, clean))).collect())
                    }
                    "metype_memory" | "metype_cell_syn_average" => object(
                        (0..rng.random_range(0..7))
                            .map(|_| (name(rng, 6), number(rng, clean)))
                            .collect(),
                    ),
                    "pop_metype_gids" => object(
                        (0..rng.random_range(0..4))
                            .map(|_| {
                                let pop = ["P", "Q", "R"][rng.random_range(0..3)].to_owned();
                                next = 0;
                                let per = if !clean && rng.random_range(0..30) == 0 {
                                    odd(rng)
                                } else {
                                    object(
                                        (0..rng.random_range(0..6))
                                            .map(|_| {
                                                (
                                                    name(rng, 7 - clean as usize),
                                                    gids(rng, sparse, clean, &mut next),
                                                )
                                            })
                                            .collect(),
                                    )
                                };
                                (pop, per)
                            })
                            .collect(),
                    ),
                    _ => odd(rng),
                }
            };
            root.push((key, value));
        }
        let mut text = if !clean && rng.random_range(0..40) == 0 {
            odd(rng)
        } else {
            object(root)
        };
        match rng.random_range(0..if clean { 1000 } else { 30 }) {
            0 => text.truncate(rng.random_range(0..text.len())),
            1 => text = text.replacen("1.5", "NaN", 1),
            2 => text.push_str(" x"),
            3 => text = format!("{}{text}{}", "[".repeat(130), "]".repeat(130)),
            _ => {}
        }
        text
    }

    #[test]
    fn streaming_reader_matches_the_value_tree_reader_on_random_files() {
        let path = Path::new("random.json");
        let (mut ok, mut failed) = (0, 0);
        for seed in 0..20_000u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let text = dry_run_text(&mut rng);
            let fast = read(text.as_bytes(), path);
            let reference = DryRun::read_via_value(text.as_bytes(), path);
            match (&fast, &reference) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a, b, "seed {seed}: {text}");
                    ok += 1;
                }
                (Err(a), Err(b)) => {
                    assert_eq!(a.to_string(), b.to_string(), "seed {seed}: {text}");
                    failed += 1;
                }
                _ => panic!("seed {seed}: {fast:?} vs {reference:?} on {text}"),
            }
        }
        // Both outcomes are exercised in number.
        assert!(ok > 1000 && failed > 1000, "{ok} read, {failed} refused");
    }

    #[test]
    fn scanner_reads_what_serde_reads() {
        let path = Path::new("random.json");
        let (mut scanned, mut declined) = (0, 0);
        for seed in 0..20_000u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let text = dry_run_text(&mut rng);
            let Some(root) = scan::root(text.as_bytes(), &|_| ()) else {
                declined += 1;
                continue;
            };
            scanned += 1;
            let serde = read_serde(text.as_bytes(), path)
                .unwrap_or_else(|e| panic!("seed {seed}: scanned, but serde: {e}"));
            match (finish(root, path), finish(serde, path)) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "seed {seed}: {text}"),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "seed {seed}: {text}"),
                (a, b) => panic!("seed {seed}: {a:?} vs {b:?} on {text}"),
            }
        }
        assert!(
            scanned > 500 && declined > 2000,
            "{scanned} scanned, {declined} declined"
        );
        // What neurodamus and Ballast write is scanned; anything else is declined.
        let d = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
            cells: 5_000,
            metypes: 20,
            populations: 2,
            seed: 3,
        })
        .unwrap();
        let text = serde_json::to_vec_pretty(&d.to_json_value()).unwrap();
        assert!(scan::root(&text, &|_| ()).is_some());
        assert!(scan::root(&serde_json::to_vec(&d.to_json_value()).unwrap(), &|_| ()).is_some());
        for bad in [
            "01",
            "-1",
            "1.0",
            "1e2",
            "4294967296",
            "12345678901",
            "\"1\"",
            "1 2",
            "1,",
            "null",
        ] {
            let t = String::from_utf8(text.clone()).unwrap();
            let at = t.rfind(|c: char| c.is_ascii_digit()).unwrap();
            let start = t[..=at].rfind(|c: char| !c.is_ascii_digit()).unwrap() + 1;
            let t = format!("{}{bad}{}", &t[..start], &t[at + 1..]);
            assert!(scan::root(t.as_bytes(), &|_| ()).is_none(), "{bad}");
        }
        assert!(scan::root(&[&text[..], b" x"].concat(), &|_| ()).is_none());
        assert!(scan::root(&text[..text.len() - 2], &|_| ()).is_none());
    }

    #[test]
    fn progress_counts_the_bytes_read_then_parsed() {
        let d = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
            cells: 3_000,
            metypes: 10,
            populations: 2,
            seed: 2,
        })
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cm.json");
        let text = serde_json::to_vec_pretty(&d.to_json_value()).unwrap();
        std::fs::write(&path, &text).unwrap();
        let done = AtomicU64::new(0);
        let (counted, _) = DryRun::from_json_file_counted(&path, &done).unwrap();
        assert!(counted == read(&text, &path).unwrap().0);
        assert_eq!(counted.cell_count(), 3_000);
        assert_eq!(done.load(Ordering::Relaxed), 2 * text.len() as u64);
        // A file read in two halves, scanned on two threads.
        let big = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
            cells: 300_000,
            metypes: 60,
            populations: 2,
            seed: 8,
        })
        .unwrap();
        let big_text = serde_json::to_vec_pretty(&big.to_json_value()).unwrap();
        assert!(big_text.len() > 1 << 22, "{} bytes", big_text.len());
        std::fs::write(&path, &big_text).unwrap();
        let done = AtomicU64::new(0);
        let (counted, _) = DryRun::from_json_file_counted(&path, &done).unwrap();
        assert!(counted == read(&big_text, &path).unwrap().0);
        assert_eq!(counted.cell_count(), 300_000);
        assert_eq!(done.load(Ordering::Relaxed), 2 * big_text.len() as u64);
        // Truncated: refused with serde's message, as when read in one piece.
        std::fs::write(&path, &big_text[..big_text.len() - 10]).unwrap();
        let e = DryRun::from_json_file_counted(&path, &AtomicU64::new(0)).unwrap_err();
        let one_piece = read(&big_text[..big_text.len() - 10], &path).unwrap_err();
        assert_eq!(e.to_string(), one_piece.to_string());
        // The serde reader's files (here: an unknown key) are counted too.
        let other = [b"{\"x\": 1, ".as_slice(), &text[1..]].concat();
        std::fs::write(&path, &other).unwrap();
        let done = AtomicU64::new(0);
        DryRun::from_json_file_counted(&path, &done).unwrap();
        assert_eq!(done.load(Ordering::Relaxed), 2 * other.len() as u64);
    }

    #[test]
    fn two_thread_scan_reads_what_one_thread_reads() {
        let path = Path::new("random.json");
        let before = scan::HANDOFFS.load(Ordering::Relaxed);
        let mut both = 0;
        for seed in 0..20_000u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let text = dry_run_text(&mut rng);
            let one = scan::root_with(text.as_bytes(), &|_| (), u64::MAX, scan::WINDOW);
            let two = scan::root_with(text.as_bytes(), &|_| (), 0, scan::WINDOW);
            match (one, two) {
                (None, None) => {}
                (Some(a), Some(b)) => {
                    both += 1;
                    match (finish(a, path), finish(b, path)) {
                        (Ok(a), Ok(b)) => assert_eq!(a, b, "seed {seed}: {text}"),
                        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "seed {seed}"),
                        (a, b) => panic!("seed {seed}: {a:?} vs {b:?} on {text}"),
                    }
                }
                (a, b) => panic!("seed {seed}: {} vs {} on {text}", a.is_some(), b.is_some()),
            }
        }
        // A large file, split across populations and within them.
        let d = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
            cells: 20_000,
            metypes: 40,
            populations: 3,
            seed: 9,
        })
        .unwrap();
        let text = serde_json::to_vec_pretty(&d.to_json_value()).unwrap();
        let a = finish(
            scan::root_with(&text, &|_| (), u64::MAX, scan::WINDOW).unwrap(),
            path,
        )
        .unwrap();
        let b = finish(scan::root_with(&text, &|_| (), 0, scan::WINDOW).unwrap(), path).unwrap();
        assert!(a == b);
        let handoffs = scan::HANDOFFS.load(Ordering::Relaxed) - before;
        assert!(
            both > 500 && handoffs > 100,
            "{both} scanned, {handoffs} handed off"
        );
    }

    /// The same dry run or the same error from two scans, or both declined.
    fn same_scan(a: Option<Root>, b: Option<Root>, what: &dyn Fn() -> String) {
        let path = Path::new("random.json");
        match (a, b) {
            (None, None) => {}
            (Some(a), Some(b)) => match (finish(a, path), finish(b, path)) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{}", what()),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{}", what()),
                (a, b) => panic!("{}: {a:?} vs {b:?}", what()),
            },
            (a, b) => panic!("{}: {} vs {}", what(), a.is_some(), b.is_some()),
        }
    }

    #[test]
    fn gid_reads_eight_bytes_at_once_as_the_definition_says() {
        // The definition: the leading run of digits, 1 to 10 of them, no leading zero, < 2^32.
        fn reference(text: &[u8]) -> Option<(u32, usize)> {
            let len = text.iter().take_while(|d| d.is_ascii_digit()).count();
            if len == 0 || len > 10 || (len > 1 && text[0] == b'0') {
                return None;
            }
            let g: u64 = std::str::from_utf8(&text[..len]).unwrap().parse().unwrap();
            Some((u32::try_from(g).ok()?, len))
        }
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        for _ in 0..200_000 {
            let len = rng.random_range(0..20);
            let text: Vec<u8> = (0..len)
                .map(|_| match rng.random_range(0..4) {
                    0 => rng.random(),
                    1 => b"/:,] \n0"[rng.random_range(0..7)],
                    _ => b'0' + rng.random_range(0..10),
                })
                .collect();
            assert_eq!(scan::gid(&text), reference(&text), "{text:?}");
        }
        for text in [
            &b"4294967295,"[..],
            b"4294967296,",
            b"9999999999,",
            b"99999999999",
            b"12345678,",
            b"123456789]",
            b"0,      ",
            b"00,     ",
            b"07,     ",
            b"1",
            b"4294967295",
        ] {
            assert_eq!(scan::gid(text), reference(text), "{text:?}");
        }
    }

    #[test]
    fn scan_by_small_chunks_reads_what_one_chunk_reads() {
        let whole = |len: usize| scan::Window {
            chunk: len.max(1),
            keep: len,
        };
        for seed in 0..4_000u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let text = dry_run_text(&mut rng);
            let t = text.as_bytes();
            let one = || scan::root_with(t, &|_| (), u64::MAX, whole(t.len()));
            // Chunk ends fall everywhere: in keys, escapes, numbers, gids and whitespace.
            for chunk in [1, 2, 3, 5, 8, 13] {
                let window = scan::Window { chunk, keep: t.len() };
                for parallel_from in [u64::MAX, 0] {
                    let parts = scan::root_with(t, &|_| (), parallel_from, window);
                    same_scan(one(), parts, &|| format!("seed {seed}, {window:?}: {text}"));
                }
            }
            // A token longer than what is kept across chunks: declined, or read the same.
            let window = scan::Window { chunk: 4, keep: 12 };
            if let Some(parts) = scan::root_with(t, &|_| (), 0, window) {
                same_scan(one(), Some(parts), &|| format!("seed {seed}: {text}"));
            }
        }
        let d = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
            cells: 20_000,
            metypes: 40,
            populations: 3,
            seed: 11,
        })
        .unwrap();
        let text = serde_json::to_vec_pretty(&d.to_json_value()).unwrap();
        let one = scan::root_with(&text, &|_| (), u64::MAX, whole(text.len()));
        for chunk in [1, 7, 4093, 65536] {
            let window = scan::Window { chunk, keep: 64 };
            let parts = scan::root_with(&text, &|_| (), 0, window);
            assert!(parts.is_some(), "{window:?}");
            let one = finish(
                scan::root_with(&text, &|_| (), u64::MAX, whole(text.len())).unwrap(),
                Path::new("s"),
            );
            assert!(one.unwrap() == finish(parts.unwrap(), Path::new("s")).unwrap());
        }
        assert!(one.is_some());
    }

    #[test]
    fn scan_declines_a_control_character_in_a_key() {
        // Invalid JSON (serde refuses it), not a key without its newline.
        let text = b"{\"metype_memory\": {\"A\n\": 1.0}, \"pop_metype_gids\": {\"P\": {\"A\": [1]}}}";
        assert!(scan::root(text, &|_| ()).is_none());
        let path = Path::new("c.json");
        assert_eq!(
            read(text, path).unwrap_err().to_string(),
            DryRun::read_via_value(text, path).unwrap_err().to_string()
        );
    }

    /// A source that ends early after `ok` bytes, or fails there.
    struct Faulty<'a> {
        text: &'a [u8],
        ok: u64,
        fail: bool,
    }

    impl scan::Source for Faulty<'_> {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            if offset >= self.ok {
                return match self.fail {
                    true => Err(std::io::Error::other("disk on fire")),
                    false => Ok(0),
                };
            }
            let n = buf.len().min((self.ok - offset) as usize);
            scan::Source::read_at(&self.text, &mut buf[..n], offset)
        }
    }

    #[test]
    fn a_file_that_changes_size_while_read_is_not_taken_from_the_scan() {
        let d = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
            cells: 300_000,
            metypes: 60,
            populations: 2,
            seed: 8,
        })
        .unwrap();
        let text = serde_json::to_vec_pretty(&d.to_json_value()).unwrap();
        let len = text.len() as u64;
        assert!(len >= scan::PARALLEL_FROM);
        // Shorter than its size, in either half (so on either thread), or failing there.
        for (ok, fail) in [
            (len / 4, false),
            (3 * len / 4, false),
            (len - 1, false),
            (len / 4, true),
            (3 * len / 4, true),
        ] {
            let src = Faulty {
                text: &text,
                ok,
                fail,
            };
            let input = scan::Input {
                src: &src,
                size: len,
                window: scan::WINDOW,
                read: &AtomicU64::new(0),
                parallel_from: scan::PARALLEL_FROM,
            };
            match (scan::scan(input, &|_| ()), fail) {
                (Err(scan::Fault::Changed), false) => {}
                (Err(scan::Fault::Io(e)), true) => assert_eq!(e.to_string(), "disk on fire"),
                (r, _) => panic!("{ok} {fail}: {:?}", r.map(|r| r.is_some())),
            }
        }
        // A file longer than the size it had (it grew) or shorter (it shrank): an error that
        // says so (it was read on as it grew); of the size it has, read by the scan.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cm.json");
        std::fs::write(&path, [&text[..], b"\n"].concat()).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let done = AtomicU64::new(0);
        for at_open in [len, len + 2] {
            let e = scan_file(&file, at_open, &path, &done).unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "the file changed while it was read ({at_open} bytes when opened, {} bytes now)",
                    len + 1
                )),
                "{e}"
            );
        }
        let (scanned, _) = scan_file(&file, len + 1, &path, &done).unwrap().unwrap();
        assert!(scanned == read(&text, &path).unwrap().0);
        assert_eq!(scanned.cell_count(), d.cell_count());
    }

    #[test]
    fn a_population_found_sparse_midway_finds_the_first_repeat() {
        // Compact gids first (a bitmap), then one beyond it (sorted, then a hash set).
        let path = Path::new("sparse.json");
        for (pop, want) in [
            (r#"{"A": [1, 2, 3], "B": [5, 4000000000, 2]}"#, Some("[\"B\"][2]")),
            (r#"{"A": [1, 2, 3], "B": [2, 4000000000]}"#, Some("[\"B\"][0]")),
            (
                r#"{"A": [1, 2], "B": [3, 4000000000], "C": [4000000000]}"#,
                Some("[\"C\"][0]"),
            ),
            (r#"{"A": [4000000000, 1], "B": [1]}"#, Some("[\"B\"][0]")),
            (r#"{"A": [1, 2], "B": [3, 4000000000], "C": [7]}"#, None),
        ] {
            let text = format!(
                r#"{{"metype_memory": {{"A": 1.0, "B": 2.0, "C": 3.0}}, "pop_metype_gids": {{"P": {pop}}}}}"#
            );
            let fast = read(text.as_bytes(), path);
            let reference = DryRun::read_via_value(text.as_bytes(), path);
            match (&fast, want) {
                (Err(e), Some(at)) => {
                    assert!(e.to_string().contains(at), "{e} for {pop}");
                    assert_eq!(e.to_string(), reference.unwrap_err().to_string());
                }
                (Ok(a), None) => assert_eq!(a, &reference.unwrap()),
                _ => panic!("{fast:?} for {pop}"),
            }
        }
    }

    #[test]
    fn streaming_reader_matches_on_a_large_synthetic_file() {
        let d = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
            cells: 20_000,
            metypes: 50,
            populations: 3,
            seed: 5,
        })
        .unwrap();
        let text = serde_json::to_vec_pretty(&d.to_json_value()).unwrap();
        let path = Path::new("s.json");
        let fast = read(&text, path).unwrap();
        assert_eq!(fast, DryRun::read_via_value(&text, path).unwrap());
        assert_eq!(fast.0.cell_count(), 20_000);
    }
}
