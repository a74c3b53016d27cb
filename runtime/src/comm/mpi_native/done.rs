//! The native path's completed requests waiting for their wait ([`Done`]): a map from
//! request id with its newest entry kept out of the hash table, so that a loop of one
//! request at a time (a ping-pong's receive, its send) inserts and removes without hashing.

use crate::core::intmap::IntMap;
use crate::protocol::request::RequestId;

/// Completed requests by id, each with its value (a received message; `()` for a send).
pub(super) struct Done<V> {
    /// The newest entry, while it is the only one or was inserted after the map's.
    front: Option<(RequestId, V)>,
    /// The others.
    rest: IntMap<RequestId, V>,
}

impl<V> Default for Done<V> {
    fn default() -> Self {
        Done {
            front: None,
            rest: IntMap::default(),
        }
    }
}

impl<V> Done<V> {
    /// Records `v` for `id` (replacing an earlier value of `id`).
    #[inline]
    pub(super) fn insert(&mut self, id: RequestId, v: V) {
        match &mut self.front {
            Some((f, fv)) if *f == id => *fv = v,
            _ => {
                if let Some((f, fv)) = self.front.replace((id, v)) {
                    self.rest.insert(f, fv);
                }
                // An id is in one place only.
                if !self.rest.is_empty() {
                    self.rest.remove(&id);
                }
            }
        }
    }

    /// Takes the value of `id`.
    #[inline]
    pub(super) fn remove(&mut self, id: &RequestId) -> Option<V> {
        match &self.front {
            Some((f, _)) if f == id => self.front.take().map(|(_, v)| v),
            _ if self.rest.is_empty() => None,
            _ => self.rest.remove(id),
        }
    }

    /// The value of `id`.
    #[inline]
    pub(super) fn get(&self, id: &RequestId) -> Option<&V> {
        match &self.front {
            Some((f, v)) if f == id => Some(v),
            _ if self.rest.is_empty() => None,
            _ => self.rest.get(id),
        }
    }

    /// True when `id` is recorded.
    #[inline]
    pub(super) fn contains_key(&self, id: &RequestId) -> bool {
        self.get(id).is_some()
    }

    /// True when nothing is recorded.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.front.is_none() && self.rest.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a plain map: every operation, in an order that moves entries between the
    /// front and the map, replaces values and removes missing ids.
    #[test]
    fn behaves_as_a_map() {
        let mut d: Done<u64> = Done::default();
        let mut m: IntMap<RequestId, u64> = IntMap::default();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let id = RequestId::new(x % 23);
            match x >> 60 {
                0..=6 => {
                    d.insert(id, step);
                    m.insert(id, step);
                }
                7..=11 => assert_eq!(d.remove(&id), m.remove(&id), "remove {id:?} at {step}"),
                _ => assert_eq!(d.get(&id), m.get(&id), "get {id:?} at {step}"),
            }
            assert_eq!(d.contains_key(&id), m.contains_key(&id));
            assert_eq!(d.is_empty(), m.is_empty(), "is_empty at {step}");
        }
    }
}
