//! Opcodes of globals and object construction: GLOBAL, STACK_GLOBAL, INST, OBJ, REDUCE,
//! NEWOBJ, NEWOBJ_EX and BUILD, interpreted against the allow-list ([`Global`]) as plain data
//! (an empty dict for `defaultdict`, a list of ints for `Vector`/`array.array`), never
//! imported or executed; any other global is refused with
//! [`BalancerError::DisallowedGlobal`], and so are BUILD with a state, persistent ids and
//! copyreg extension codes.
use std::rc::Rc;

use super::scalar::decode_fixed_int;
use super::value::{Global, TupleObj, Val};
use super::vm::{Vm, VmResult};
use crate::error::BalancerError;

impl Vm<'_> {
    #[inline(always)]
    pub(super) fn global_op(&mut self, at: usize) -> VmResult<()> {
        let module = self.line_str(at)?;
        let name = self.line_str(at)?;
        let g = self.global(module, name, at)?;
        self.push(g);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn stack_global(&mut self, at: usize) -> VmResult<()> {
        let name = self.pop(at)?;
        let module = self.pop(at)?;
        let (Val::Str(module), Val::Str(name)) = (&module, &name) else {
            return Err(self.err(at, "STACK_GLOBAL needs two str"));
        };
        let g = self.global(module, name, at)?;
        self.push(g);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn inst(&mut self, at: usize) -> VmResult<()> {
        let module = self.line_str(at)?;
        let name = self.line_str(at)?;
        let Val::Global(g) = self.global(module, name, at)? else {
            unreachable!()
        };
        let args = self.pop_mark(at)?;
        let v = self.call(g, &args, at)?;
        self.push(v);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn obj(&mut self, at: usize) -> VmResult<()> {
        let mut items = self.pop_mark(at)?;
        if items.is_empty() {
            return Err(self.err(at, "OBJ without a class"));
        }
        let cls = items.remove(0);
        let g = self.callable(&cls, at)?;
        let v = self.call(g, &items, at)?;
        self.push(v);
        Ok(())
    }

    /// REDUCE and NEWOBJ: `func(*args)`.
    #[inline(always)]
    pub(super) fn reduce(&mut self, at: usize) -> VmResult<()> {
        let args = self.pop(at)?;
        let func = self.pop(at)?;
        let g = self.callable(&func, at)?;
        let args = self.args(args, at)?;
        let v = self.call(g, &args.items, at)?;
        self.push(v);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn newobj_ex(&mut self, at: usize) -> VmResult<()> {
        let kwargs = self.pop(at)?;
        let args = self.pop(at)?;
        let cls = self.pop(at)?;
        match kwargs {
            Val::Dict(id) if self.dicts[id].entries.is_empty() => {}
            _ => return Err(self.err(at, "NEWOBJ_EX with keyword arguments")),
        }
        let g = self.callable(&cls, at)?;
        let args = self.args(args, at)?;
        let v = self.call(g, &args.items, at)?;
        self.push(v);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn build(&mut self, at: usize) -> VmResult<()> {
        let state = self.pop(at)?;
        self.top(at)?;
        if !self.is_empty_state(&state) {
            return Err(self.err(
                at,
                format!("BUILD with a non-empty state ({}) is not supported", state.kind()),
            ));
        }
        Ok(())
    }

    /// The error for PERSID and BINPERSID.
    #[cold]
    pub(super) fn persid(&self, at: usize) -> BalancerError {
        self.err(at, "persistent ids are not supported")
    }

    /// The error for EXT1, EXT2 and EXT4.
    #[cold]
    pub(super) fn ext(&self, at: usize) -> BalancerError {
        self.err(at, "copyreg extension codes are not supported")
    }

    fn global(&self, module: &str, name: &str, at: usize) -> VmResult<Val> {
        match Global::resolve(module, name) {
            Some(g) => Ok(Val::Global(g)),
            None => Err(BalancerError::DisallowedGlobal {
                path: self.path.to_path_buf(),
                module: module.to_string(),
                name: name.to_string(),
                offset: at as u64,
            }),
        }
    }

    fn callable(&self, v: &Val, at: usize) -> VmResult<Global> {
        match v {
            Val::Global(g) => Ok(*g),
            other => Err(self.err(at, format!("cannot call a {}", other.describe()))),
        }
    }

    fn args(&self, v: Val, at: usize) -> VmResult<Rc<TupleObj>> {
        match v {
            Val::Tuple(t) => Ok(t),
            other => Err(self.err(
                at,
                format!("call arguments must be a tuple, found {}", other.kind()),
            )),
        }
    }

    /// True for the states CPython writes for an object without attributes: `None`, `{}`,
    /// or `(dict_state, slots_state)` with each `None` or `{}`. Not recursive: a state tuple
    /// nests one level only, so a deep or shared tuple costs at most three visits.
    fn is_empty_state(&mut self, v: &Val) -> bool {
        let flat = |v: &Val| match v {
            Val::None => true,
            Val::Dict(id) => self.dicts[*id].entries.is_empty(),
            _ => false,
        };
        let (empty, visited) = match v {
            Val::Tuple(t) if t.items.len() == 2 => (t.items.iter().all(flat), 3),
            other => (flat(other), 1),
        };
        self.visits += visited;
        empty
    }

    /// The safe interpretation of calling allowed global `g` with `args`.
    fn call(&mut self, g: Global, args: &[Val], at: usize) -> VmResult<Val> {
        match g {
            Global::DefaultDict => {
                match args {
                    []
                    | [Val::None]
                    | [Val::Global(
                        Global::DefaultDictVector | Global::Vector | Global::ArrayArray | Global::DefaultDict,
                    )] => {}
                    [other] => {
                        return Err(self.err(
                            at,
                            format!(
                                "defaultdict factory must be an allowed type, found {}",
                                other.describe()
                            ),
                        ))
                    }
                    _ => return Err(self.err(at, "defaultdict takes only a factory argument here")),
                }
                Ok(self.new_dict())
            }
            Global::Getattr => match args {
                [Val::Global(Global::DryRunStats), Val::Str(s)] if &**s == "defaultdict_vector" => {
                    Ok(Val::Global(Global::DefaultDictVector))
                }
                _ => Err(self.err(
                    at,
                    "getattr is only allowed as getattr(DryRunStats, \"defaultdict_vector\")",
                )),
            },
            Global::Vector | Global::ArrayArray => {
                let (tc, init) = match args {
                    [Val::Str(tc)] => (tc.clone(), None),
                    [Val::Str(tc), init] => (tc.clone(), Some(init.clone())),
                    _ => {
                        return Err(self.err(
                            at,
                            format!("{}(...) expects (typecode[, list of ints])", g.name()),
                        ))
                    }
                };
                self.check_typecode(&tc, at)?;
                // Charge before copying, so a memoized list re-used many times is refused
                // before it is copied many times.
                let len = match &init {
                    Some(Val::List(id)) => self.lists[*id].len(),
                    Some(Val::Tuple(t)) => t.items.len(),
                    _ => 0,
                };
                self.charge(len, at)?;
                let items = match init {
                    None => Vec::new(),
                    Some(Val::List(id)) => self.lists[id].clone(),
                    Some(Val::Tuple(t)) => t.items.clone(),
                    Some(other) => {
                        return Err(self.err(
                            at,
                            format!(
                                "{}(...) initializer must be a list of ints, found {}",
                                g.name(),
                                other.kind()
                            ),
                        ))
                    }
                };
                if let Some(bad) = items.iter().find(|v| !matches!(v, Val::Int(_) | Val::BigInt)) {
                    return Err(self.err(
                        at,
                        format!(
                            "{}(...) initializer holds a {}, expected ints",
                            g.name(),
                            bad.kind()
                        ),
                    ));
                }
                Ok(self.new_list(items))
            }
            Global::ArrayReconstructor => {
                let [cls, Val::Str(tc), Val::Int(code), Val::Bytes(data)] = args else {
                    return Err(self.err(
                        at,
                        "_array_reconstructor expects (cls, typecode, mformat_code, bytes)",
                    ));
                };
                if !matches!(cls, Val::Global(Global::Vector | Global::ArrayArray)) {
                    return Err(self.err(
                        at,
                        format!(
                            "_array_reconstructor class must be Vector or array.array, found {}",
                            cls.describe()
                        ),
                    ));
                }
                self.check_typecode(tc, at)?;
                let (size, signed, big) = match *code {
                    0 => (1usize, false, false),
                    1 => (1, true, false),
                    c @ 2..=13 => {
                        let k = (c - 2) as usize;
                        (2usize << (k / 4), (k / 2) % 2 == 1, k % 2 == 1)
                    }
                    c => {
                        return Err(self.err(
                            at,
                            format!("array machine format code {c} is not an integer format"),
                        ))
                    }
                };
                if data.len() % size != 0 {
                    return Err(self.err(
                        at,
                        format!(
                            "array data of {} bytes is not a multiple of the item size {size}",
                            data.len()
                        ),
                    ));
                }
                self.charge(data.len() / size, at)?;
                let items = data
                    .chunks_exact(size)
                    .map(|c| decode_fixed_int(c, signed, big))
                    .collect();
                Ok(self.new_list(items))
            }
            Global::DefaultDictVector | Global::DryRunStats => Err(self.err(
                at,
                format!(
                    "`{}` may only be used as a defaultdict factory, not called",
                    g.name()
                ),
            )),
        }
    }

    fn check_typecode(&self, tc: &str, at: usize) -> VmResult<()> {
        if matches!(tc, "b" | "B" | "h" | "H" | "i" | "I" | "l" | "L" | "q" | "Q") {
            Ok(())
        } else {
            Err(self.err(at, format!("array typecode {tc:?} is not an integer type")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{b, msg, read};

    #[test]
    fn array_reconstructor_machine_formats() {
        // Vector via _array_reconstructor, big-endian signed 32 (code 9) and unsigned 16 LE (2).
        let build = |code: u8, data: &[u8]| {
            let mut p = b"\x80\x04}\x8c\x01P}K\x00K\x00\x86\x8c\x05array\x8c\x14_array_reconstructor\x93(\x8c\x17neurodamus.utils.compat\x8c\x06Vector\x93\x8c\x01I".to_vec();
            p.extend_from_slice(&[b'K', code, b'C', data.len() as u8]);
            p.extend_from_slice(data);
            p.extend_from_slice(b"tRss.");
            p
        };
        let got = read(&build(9, &[0, 0, 1, 0, 0, 0, 0, 7])).unwrap();
        assert_eq!(got[0].buckets[&b(0, 0)], vec![256, 7]);
        let got = read(&build(2, &[1, 1, 0xff, 0xff])).unwrap();
        assert_eq!(got[0].buckets[&b(0, 0)], vec![257, 65535]);
        let got = read(&build(11, &[0, 0, 0, 0, 0, 0, 0, 42])).unwrap();
        assert_eq!(got[0].buckets[&b(0, 0)], vec![42]);
        // Signed negative → a negative gid error, naming it.
        let m = msg(read(&build(8, &[0xff, 0xff, 0xff, 0xff])));
        assert!(m.contains("gid -1 is negative"), "{m}");
        // Length not a multiple of the item size.
        let m = msg(read(&build(6, &[1, 2, 3])));
        assert!(m.contains("not a multiple of the item size 4"), "{m}");
        // Float formats are refused.
        let m = msg(read(&build(16, &[0; 8])));
        assert!(m.contains("not an integer format"), "{m}");
    }

    #[test]
    fn build_with_state_and_disallowed_calls_are_errors() {
        // EMPTY_LIST then BUILD {'a': 1}
        let m = msg(read(b"\x80\x04]}\x8c\x01aK\x01sb."));
        assert!(m.contains("BUILD with a non-empty state"), "{m}");
        // defaultdict factory that is not allowed (an int).
        let m = msg(read(
            b"\x80\x04\x8c\x0bcollections\x8c\x0bdefaultdict\x93K\x05\x85R.",
        ));
        assert!(m.contains("defaultdict factory"), "{m}");
        // getattr on anything but DryRunStats.defaultdict_vector.
        let m = msg(read(
            b"\x80\x04\x8c\x08builtins\x8c\x07getattr\x93\x8c\x05array\x8c\x05array\x93\x8c\x04__eq\x86R.",
        ));
        assert!(m.contains("getattr is only allowed"), "{m}");
    }
}
