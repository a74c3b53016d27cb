//! What the scan reads of a dry-run file and the checks take: the top-level object's known
//! values, kept by kind (a value of the wrong kind is kept as "other", named when the
//! checks reach it), each object's entries in serde_json's `preserve_order` order.
use std::collections::HashMap;

use super::file;

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
            Some(&i) => {
                if let Some(entry) = self.list.get_mut(i) {
                    entry.1 = value;
                }
            }
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
        self.index
            .get(key)
            .and_then(|&i| self.list.get(i))
            .map(|(_, v)| v)
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
/// u32, that element's index and text (as the file writes it, shortened); or something else
/// than an array.
pub(super) enum Gids {
    Array {
        gids: Vec<u32>,
        bad: Option<(usize, String)>,
    },
    Other,
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
