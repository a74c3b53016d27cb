//! The serde reader of a dry-run file: typed visitors that read any JSON straight into
//! per-metype gid arrays (no `serde_json::Value` tree), keeping serde_json's
//! `preserve_order` semantics: an object's keys come in first-seen order and a repeated key
//! replaces its value in place. Values of the wrong kind are kept as "other" (and drained
//! through the same deserializer, so nesting and number limits are enforced as when
//! building a `Value`), and reported when validation reaches them. Everything read grows
//! with the file: no size is taken from the input.
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::file;
use crate::quote::shorten;

/// Entries of one JSON object in first-seen key order; a repeated key replaces its value in
/// place (as serde_json's `Map` with `preserve_order`).
pub(super) struct Entries<V> {
    pub(super) list: Vec<(String, V)>,
    index: HashMap<String, usize>,
}

impl<V> Entries<V> {
    pub(super) fn new() -> Self {
        Entries {
            list: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// Inserts or replaces `key`'s value; `None` when the memory for a new key cannot be
    /// had (the list, the index and the key's copy grow with `try_reserve`, so millions of
    /// names under `ulimit -v` end the read with an error instead of an abort).
    #[must_use]
    pub(super) fn insert(&mut self, key: String, value: V) -> Option<()> {
        match self.index.get(&key) {
            Some(&i) => self.list[i].1 = value,
            None => {
                self.list.try_reserve(1).ok()?;
                self.index.try_reserve(1).ok()?;
                let copy = file::try_string(&key)?;
                self.index.insert(copy, self.list.len());
                self.list.push((key, value));
            }
        }
        Some(())
    }

    pub(super) fn get(&self, key: &str) -> Option<&V> {
        self.index.get(key).map(|&i| &self.list[i].1)
    }
}

/// A value that should be an object: its entries, or something else.
pub(super) enum Object<V> {
    Entries(Entries<V>),
    Other,
}

/// A value that should be a number (as `Value::as_f64` reads it), or something else.
pub(super) struct Number(pub(super) Option<f64>);

/// A value that should be an array of gids: the gids up to the first element that is not a
/// u32, that element's index and JSON text; or something else than an array.
pub(super) enum Gids {
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
                file::try_string(v)
                    .map(Key)
                    .ok_or_else(|| E::custom(file::NAMES_OUT_OF_MEMORY))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> std::result::Result<Key, E> {
                Ok(Key(v))
            }
        }
        d.deserialize_string(V)
    }
}

/// The top level of the file.
pub(super) enum Root {
    Object(Box<RootObject>),
    Other,
}

/// The top-level object's keys and the values of the known ones.
pub(super) struct RootObject {
    /// The top-level keys, first-seen order: the known ones and the first
    /// [`UNKNOWN_KEYS_NAMED`](super::validate::UNKNOWN_KEYS_NAMED) unknown ones.
    pub(super) keys: Vec<String>,
    /// Unknown keys beyond those (a repeated one counted each time).
    pub(super) unknown_more: u64,
    pub(super) memory: Option<Object<Number>>,
    pub(super) synapses: Option<Object<Number>>,
    pub(super) populations: Option<Object<Object<Gids>>>,
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
                                    return Err(serde::de::Error::custom(file::OUT_OF_MEMORY));
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
                        .ok_or_else(|| serde::de::Error::custom(file::NAMES_OUT_OF_MEMORY))?;
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
                            if unknown == super::validate::UNKNOWN_KEYS_NAMED {
                                unknown_more += 1;
                                continue;
                            }
                            unknown += 1;
                        }
                    }
                    keys.insert(key, ())
                        .ok_or_else(|| serde::de::Error::custom(file::NAMES_OUT_OF_MEMORY))?;
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
