//! Hash maps and sets keyed by the runtime's own integers ([`IntMap`], [`IntSet`]).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Hasher for the runtime's own integer keys (request and message ids, ranks): one
/// multiply per key instead of SipHash. Not DoS-resistant, which keys that never come from
/// outside the process do not need.
#[derive(Clone, Copy, Default)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

/// A hash map keyed by the runtime's own integers (see [`IntHasher`]).
pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// A hash set of the runtime's own integers (see [`IntHasher`]).
pub type IntSet<K> = HashSet<K, BuildHasherDefault<IntHasher>>;
