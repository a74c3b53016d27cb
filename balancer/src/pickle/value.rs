//! The unpickler's values: [`Val`] (what the VM stack, memo and containers hold), the
//! allow-listed [`Global`] tokens, tuples with their precomputed hashing cost, and dict
//! storage with Python-equal keys ([`HKey`]).
use std::collections::HashMap;
use std::rc::Rc;

/// Allowed globals, as inert tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Global {
    DefaultDict,
    DefaultDictVector,
    DryRunStats,
    Getattr,
    Vector,
    ArrayArray,
    ArrayReconstructor,
}

impl Global {
    pub(super) fn resolve(module: &str, name: &str) -> Option<Global> {
        let module = match module {
            "__builtin__" => "builtins",
            m => m,
        };
        Some(match (module, name) {
            ("collections", "defaultdict") => Global::DefaultDict,
            ("neurodamus.utils.memory", "DryRunStats.defaultdict_vector") => Global::DefaultDictVector,
            ("neurodamus.utils.memory", "DryRunStats") => Global::DryRunStats,
            ("builtins", "getattr") => Global::Getattr,
            ("neurodamus.utils.compat", "Vector") => Global::Vector,
            ("array", "array") => Global::ArrayArray,
            ("array", "_array_reconstructor") => Global::ArrayReconstructor,
            _ => return None,
        })
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Global::DefaultDict => "collections.defaultdict",
            Global::DefaultDictVector => "neurodamus.utils.memory.DryRunStats.defaultdict_vector",
            Global::DryRunStats => "neurodamus.utils.memory.DryRunStats",
            Global::Getattr => "builtins.getattr",
            Global::Vector => "neurodamus.utils.compat.Vector",
            Global::ArrayArray => "array.array",
            Global::ArrayReconstructor => "array._array_reconstructor",
        }
    }
}

pub(super) struct TupleObj {
    pub(super) depth: u32,
    /// [`key_cost`] of this tuple, computed once from its items' so that a tuple built by
    /// doubling a shared sub-tuple costs O(items) to size, not O(its expansion).
    pub(super) key_cost: usize,
    pub(super) items: Vec<Val>,
}

/// A value on the VM stack. Immutable values are shared through `Rc`; mutable containers
/// (list, dict, set) live in arenas and are referenced by index, so `GET` of a memoized list
/// and a later `APPENDS` see the same object, as in Python, and no `Rc` cycle can form.
#[derive(Clone)]
pub(super) enum Val {
    None,
    Bool(bool),
    Int(i64),
    /// An int outside i64 (its value is never needed).
    BigInt,
    Float(f64),
    Str(Rc<str>),
    Bytes(Rc<[u8]>),
    Tuple(Rc<TupleObj>),
    List(usize),
    Dict(usize),
    Set(usize),
    Global(Global),
}

impl Val {
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Val::None => "None",
            Val::Bool(_) => "bool",
            Val::Int(_) | Val::BigInt => "int",
            Val::Float(_) => "float",
            Val::Str(_) => "str",
            Val::Bytes(_) => "bytes",
            Val::Tuple(_) => "tuple",
            Val::List(_) => "list",
            Val::Dict(_) => "dict",
            Val::Set(_) => "set",
            Val::Global(_) => "global",
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Val::Global(g) => format!("global `{}`", g.name()),
            Val::Int(i) => format!("int {i}"),
            Val::BigInt => "int too large for 64 bits".to_string(),
            Val::Str(s) if s.chars().count() <= 40 => format!("str {s:?}"),
            v => v.kind().to_string(),
        }
    }

    pub(super) fn tuple_depth(&self) -> u32 {
        match self {
            Val::Tuple(t) => t.depth,
            _ => 0,
        }
    }
}

/// A hashable dict key, normalized like Python's equality (`True == 1 == 1.0`).
#[derive(Hash, PartialEq, Eq)]
pub(super) enum HKey {
    None,
    Int(i64),
    Float(u64),
    Str(Rc<str>),
    Bytes(Rc<[u8]>),
    Tuple(Vec<HKey>),
}

#[derive(Default)]
pub(super) struct DictObj {
    pub(super) entries: Vec<(Val, Val)>,
    pub(super) index: HashMap<HKey, usize>,
}

/// Size of a dict key for the hashing budget (nodes plus string bytes, a shared sub-tuple
/// counted at every use, saturating). O(1): a tuple's is computed when it is built.
pub(super) fn key_cost(v: &Val) -> usize {
    match v {
        Val::Str(s) => 1 + s.len(),
        Val::Bytes(b) => 1 + b.len(),
        Val::Tuple(t) => t.key_cost,
        _ => 1,
    }
}
