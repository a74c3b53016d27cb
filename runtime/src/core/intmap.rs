//! Hash maps and sets keyed by the runtime's own integers ([`IntMap`], [`IntSet`]):
//! rustc-hash's Fx hasher (one multiply per key instead of SipHash). Not DoS-resistant,
//! which keys that never come from outside the process (request and message ids, ranks,
//! queue numbers) do not need.

/// A hash map keyed by the runtime's own integers (`rustc_hash::FxHashMap`).
pub type IntMap<K, V> = rustc_hash::FxHashMap<K, V>;

/// A hash set of the runtime's own integers (`rustc_hash::FxHashSet`).
pub type IntSet<K> = rustc_hash::FxHashSet<K>;
