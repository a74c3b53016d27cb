//! Opcodes of containers: dicts (EMPTY_DICT, DICT, SETITEM, SETITEMS, with Python's key
//! equality and a hashing budget bounded by the input), lists (EMPTY_LIST, LIST, APPEND,
//! APPENDS), tuples (EMPTY_TUPLE, TUPLE, TUPLE1..3, depth-limited) and sets (EMPTY_SET,
//! ADDITEMS, FROZENSET).
use std::rc::Rc;

use super::value::{key_cost, DictObj, HKey, TupleObj, Val};
use super::vm::{Vm, VmResult};

/// Deepest tuple nesting accepted (CPython cannot pickle much deeper either).
const MAX_TUPLE_DEPTH: u32 = 256;

impl Vm<'_> {
    #[inline(always)]
    pub(super) fn empty_dict(&mut self) {
        let d = self.new_dict();
        self.push(d);
    }

    #[inline(always)]
    pub(super) fn dict(&mut self, at: usize) -> VmResult<()> {
        let items = self.pop_mark(at)?;
        if items.len() % 2 != 0 {
            return Err(self.err(at, "DICT with an odd number of items"));
        }
        let d = self.new_dict();
        let Val::Dict(id) = d else { unreachable!() };
        let mut it = items.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            self.set_item(id, k, v, at)?;
        }
        self.push(d);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn setitem(&mut self, at: usize) -> VmResult<()> {
        let v = self.pop(at)?;
        let k = self.pop(at)?;
        let id = self.target_dict(at)?;
        self.set_item(id, k, v, at)
    }

    #[inline(always)]
    pub(super) fn setitems(&mut self, at: usize) -> VmResult<()> {
        let items = self.pop_mark(at)?;
        if items.len() % 2 != 0 {
            return Err(self.err(at, "SETITEMS with an odd number of items"));
        }
        let id = self.target_dict(at)?;
        let mut it = items.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            self.set_item(id, k, v, at)?;
        }
        Ok(())
    }

    #[inline(always)]
    pub(super) fn empty_list(&mut self) {
        let l = self.new_list(Vec::new());
        self.push(l);
    }

    #[inline(always)]
    pub(super) fn list(&mut self, at: usize) -> VmResult<()> {
        let items = self.pop_mark(at)?;
        let l = self.new_list(items);
        self.push(l);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn append(&mut self, at: usize) -> VmResult<()> {
        let v = self.pop(at)?;
        let id = self.target_list(at)?;
        self.lists[id].push(v);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn appends(&mut self, at: usize) -> VmResult<()> {
        let items = self.pop_mark(at)?;
        let id = self.target_list(at)?;
        self.lists[id].extend(items);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn empty_tuple(&mut self, at: usize) -> VmResult<()> {
        let t = self.make_tuple(Vec::new(), at)?;
        self.push(t);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn tuple(&mut self, at: usize) -> VmResult<()> {
        let items = self.pop_mark(at)?;
        let t = self.make_tuple(items, at)?;
        self.push(t);
        Ok(())
    }

    /// TUPLE1, TUPLE2 and TUPLE3: a tuple of the top `n` values.
    #[inline(always)]
    pub(super) fn tuple_n(&mut self, n: usize, at: usize) -> VmResult<()> {
        if self.stack.len() < self.frame_start() + n {
            return Err(self.err(at, "stack underflow (corrupt pickle)"));
        }
        let items = self.stack.split_off(self.stack.len() - n);
        let t = self.make_tuple(items, at)?;
        self.push(t);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn empty_set(&mut self) {
        self.sets.push(Vec::new());
        self.push(Val::Set(self.sets.len() - 1));
    }

    #[inline(always)]
    pub(super) fn additems(&mut self, at: usize) -> VmResult<()> {
        let items = self.pop_mark(at)?;
        match self.top(at)? {
            Val::Set(id) => {
                let id = *id;
                self.sets[id].extend(items);
            }
            other => return Err(self.err(at, format!("ADDITEMS on a {}", other.kind()))),
        }
        Ok(())
    }

    #[inline(always)]
    pub(super) fn frozenset(&mut self, at: usize) -> VmResult<()> {
        let items = self.pop_mark(at)?;
        self.sets.push(items);
        self.push(Val::Set(self.sets.len() - 1));
        Ok(())
    }

    #[inline(always)]
    fn make_tuple(&mut self, items: Vec<Val>, at: usize) -> VmResult<Val> {
        self.visits += items.len() as u64;
        let depth = 1 + items.iter().map(Val::tuple_depth).max().unwrap_or(0);
        if depth > MAX_TUPLE_DEPTH {
            return Err(self.err(at, format!("tuples nested deeper than {MAX_TUPLE_DEPTH}")));
        }
        let key_cost = items.iter().fold(1usize, |n, v| n.saturating_add(key_cost(v)));
        Ok(Val::Tuple(Rc::new(TupleObj {
            depth,
            key_cost,
            items,
        })))
    }

    #[inline(always)]
    pub(super) fn new_list(&mut self, items: Vec<Val>) -> Val {
        self.lists.push(items);
        Val::List(self.lists.len() - 1)
    }

    #[inline(always)]
    pub(super) fn new_dict(&mut self) -> Val {
        self.dicts.push(DictObj::default());
        Val::Dict(self.dicts.len() - 1)
    }

    fn hkey(&self, v: &Val, at: usize) -> VmResult<HKey> {
        Ok(match v {
            Val::None => HKey::None,
            Val::Bool(b) => HKey::Int(*b as i64),
            Val::Int(i) => HKey::Int(*i),
            Val::Float(f) => {
                if f.fract() == 0.0 && f.abs() < 9.2e18 {
                    HKey::Int(*f as i64)
                } else {
                    HKey::Float(f.to_bits())
                }
            }
            Val::Str(s) => HKey::Str(s.clone()),
            Val::Bytes(b) => HKey::Bytes(b.clone()),
            Val::Tuple(t) => HKey::Tuple(
                t.items
                    .iter()
                    .map(|v| self.hkey(v, at))
                    .collect::<VmResult<_>>()?,
            ),
            other => return Err(self.err(at, format!("unsupported dict key type {}", other.kind()))),
        })
    }

    fn set_item(&mut self, dict: usize, k: Val, v: Val, at: usize) -> VmResult<()> {
        // Hashing a key costs its size (a shared sub-tuple counts at every use, as Python
        // hashes it again); a memoized huge key re-used via GET for many items, or a tuple
        // doubled with DUP, would make that quadratic or exponential, so the total is
        // bounded by the input size, and checked before any hashing.
        let cost = key_cost(&k);
        let work = self.key_work.saturating_add(cost);
        if work > 4 * self.data.len() + 4096 {
            return Err(self.err(
                at,
                format!(
                    "dict keys are re-used far more than the pickle size allows (this key has {cost} \
                     nodes counting shared sub-tuples; hostile file?)"
                ),
            ));
        }
        self.key_work = work;
        self.visits += cost as u64;
        let key = self.hkey(&k, at)?;
        let d = &mut self.dicts[dict];
        match d.index.get(&key) {
            // Python keeps the original key and position, replaces the value.
            Some(&i) => d.entries[i].1 = v,
            None => {
                d.index.insert(key, d.entries.len());
                d.entries.push((k, v));
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn target_dict(&self, at: usize) -> VmResult<usize> {
        match self.top(at)? {
            Val::Dict(id) => Ok(*id),
            other => Err(self.err(at, format!("SETITEM(S) on a {}, not a dict", other.describe()))),
        }
    }

    #[inline(always)]
    fn target_list(&self, at: usize) -> VmResult<usize> {
        match self.top(at)? {
            Val::List(id) => Ok(*id),
            other => Err(self.err(at, format!("APPEND(S) on a {}, not a list", other.describe()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::test_support::{b, msg, read};

    #[test]
    fn plain_protocol2_dict() {
        // {'A': {(1, 2): [3, 300, 70000]}} written by hand, protocol 2.
        let p = b"\x80\x02}q\x00(X\x01\x00\x00\x00Aq\x01}q\x02K\x01K\x02\x86q\x03]q\x04(K\x03M,\x01J\x70\x11\x01\x00esu.";
        let got = read(p).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].name, "A");
        assert_eq!(got[0].buckets[&b(1, 2)], vec![3, 300, 70000]);
    }

    #[test]
    fn dict_semantics_match_python() {
        // {'A': {(0, 0): [1]}, 'B': {}, 'A': {(1, 1): [2]}}: the later value wins, the first
        // position is kept.
        let p = b"\x80\x04}(\x8c\x01A}K\x00K\x00\x86]K\x01as\x8c\x01B}\x8c\x01A}K\x01K\x01\x86]K\x02asu.";
        let got = read(p).unwrap();
        assert_eq!(
            got.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            vec!["A", "B"]
        );
        assert_eq!(got[0].buckets, BTreeMap::from([(b(1, 1), vec![2])]));
        assert!(got[1].buckets.is_empty());
        // {(1, 0): [1], (True, 0): [2]}: one key, (1, 0) (original key kept), value [2].
        let p = b"\x80\x04}\x8c\x01A}(K\x01K\x00\x86]K\x01a\x88K\x00\x86]K\x02aus.";
        let got = read(p).unwrap();
        assert_eq!(got[0].buckets, BTreeMap::from([(b(1, 0), vec![2])]));
        // A bool rank on its own is refused.
        let p = b"\x80\x04}\x8c\x01A}\x88K\x00\x86]K\x02ass.";
        let m = msg(read(p));
        assert!(
            m.contains("population `A`, key (.., ..): rank must be a non-negative int, found bool"),
            "{m}"
        );
    }
}
