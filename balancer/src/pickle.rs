//! Reading and writing neurodamus allocation files (`allocation_r{R}_c{C}.pkl.gz`): gzip of
//! a Python pickle of `{population: {(rank, cycle): [gids]}}`.
//!
//! * Writing uses `serde-pickle` (protocol 3, plain `dict`/`tuple`/`list`/`int` only), so the
//!   file loads with a bare `pickle.load(gzip.open(f))` and with neurodamus' loader.
//!   Population order is preserved: we serialize through serde's map interface, which
//!   `serde-pickle` writes in iteration order (its `Value::Dict` is a `BTreeMap` and would
//!   sort populations by name, so we do not build a `Value`).
//! * Reading uses a small restricted unpickler (a pickle VM for protocols 0..=5) because
//!   neurodamus' own files contain `collections.defaultdict`, a `DryRunStats.defaultdict_vector`
//!   factory and `neurodamus.utils.compat.Vector` (an `array.array` subclass) objects, which
//!   `serde-pickle` cannot read. Nothing is ever imported, executed or instantiated: globals
//!   are resolved against a fixed allow-list and mapped to plain data; any other global is
//!   refused at once with [`BalancerError::DisallowedGlobal`].
//!
//! Allowed globals and their interpretation:
//!
//! | global | interpretation |
//! |---|---|
//! | `collections.defaultdict` | called with `()` or `(factory,)`: an empty dict |
//! | `neurodamus.utils.memory.DryRunStats.defaultdict_vector` | only as a defaultdict factory |
//! | `neurodamus.utils.memory.DryRunStats` | only as `getattr(DryRunStats, "defaultdict_vector")` (protocols < 4 pickle nested names that way) |
//! | `builtins.getattr` / `__builtin__.getattr` | only for the line above |
//! | `neurodamus.utils.compat.Vector`, `array.array` | `(typecode[, [ints]])` (protocols < 3): a list of ints; as factory; as the class for `_array_reconstructor` |
//! | `array._array_reconstructor` | `(cls, typecode, mformat_code, bytes)` (protocols >= 3): a list of ints |
//!
//! `BUILD` with an empty state (`None`, `{}`, `(None, {})`) is a no-op — CPython writes
//! `BUILD {}` after an `array.array` subclass instance that has a `__dict__`; any other
//! state is an error. `copyreg._reconstructor` and `builtins.list` are not needed
//! (`array.array` subclasses pickle through `array.__reduce_ex__`) and are refused.
//!
//! Every file is accepted or refused in work linear in its size: gunzip output is bounded by
//! [`MAX_GZIP_RATIO`] × the file, each opcode runs once, and every walk over unpickled values
//! (dict key hashing, BUILD states, array initializers, the final conversion) is charged to a
//! budget proportional to the pickle's bytes, so shared structure (a tuple doubled with DUP,
//! a list or dict referenced many times through the memo) is refused, never expanded.
//! [`ReadStats`] reports the work done.
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::path::Path;
use std::rc::Rc;

use flate2::read::MultiGzDecoder;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use crate::allocation::{Bucket, PopulationAllocation};
use crate::error::{BalancerError, Result};

/// Largest decompressed pickle we accept (a gzip bomb guard): 4 GiB.
pub const MAX_PICKLE_BYTES: u64 = 4 << 30;

/// Largest expansion accepted from gzip, besides [`MAX_PICKLE_BYTES`]: a decompressed pickle
/// may be at most this many times its file plus 1 MiB. Allocation files expand 2 to 5 times
/// (gids are distinct); deflate allows about 1032, so a small bomb would otherwise allocate
/// a thousand times its size.
pub const MAX_GZIP_RATIO: u64 = 256;

/// Deepest tuple nesting accepted (CPython cannot pickle much deeper either).
const MAX_TUPLE_DEPTH: u32 = 256;

/// Reads an allocation file (gzip + pickle protocols 2..=5; 0 and 1 work too), ours or
/// neurodamus' (`defaultdict`s of `Vector`s).
///
/// Returns the populations in the pickle's dict order, each with its
/// `{(rank, cycle): [gids]}` buckets (gids in stored order).
///
/// Errors: [`BalancerError::Io`] if the file cannot be read; [`BalancerError::Pickle`] if it
/// is not gzip, is truncated (message contains "truncated"), is corrupt, or is not of the shape
/// `{str: {(int, int): [int]}}` (message names population, key and what was found);
/// [`BalancerError::DisallowedGlobal`] if the pickle names a global outside the allow-list.
pub fn read_allocation_file(path: &Path) -> Result<Vec<PopulationAllocation>> {
    let compressed = std::fs::read(path).map_err(|e| BalancerError::io(path, e))?;
    read_allocation_gzip_with_stats(&compressed, path).0
}

/// The work one read did, to check that it stays linear in the input's size: every file is
/// accepted or refused after at most a constant times as many steps as it has bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Bytes of gzip read (0 when the pickle was given directly).
    pub compressed_bytes: u64,
    /// Bytes of pickle (after gunzip).
    pub pickle_bytes: u64,
    /// Pickle opcodes executed.
    pub opcodes: u64,
    /// Values visited by every walk over unpickled values: tuple items collected, dict key
    /// nodes hashed (a shared sub-tuple counts once per use, as hashing it does), BUILD
    /// states inspected, array elements materialized, populations, buckets and gids
    /// converted.
    pub visits: u64,
}

impl ReadStats {
    /// Opcodes plus value visits.
    pub fn work(&self) -> u64 {
        self.opcodes + self.visits
    }
}

/// [`read_allocation_file`] on the bytes of a gzip file (`path` is only used in messages),
/// with the work done, whether it succeeded or not.
pub fn read_allocation_gzip_with_stats(
    compressed: &[u8],
    path: &Path,
) -> (Result<Vec<PopulationAllocation>>, ReadStats) {
    let mut stats = ReadStats {
        compressed_bytes: compressed.len() as u64,
        ..ReadStats::default()
    };
    let bytes = match gunzip(compressed, path) {
        Ok(b) => b,
        Err(e) => return (Err(e), stats),
    };
    let (result, inner) = read_allocation_pickle_with_stats(&bytes, path);
    stats.pickle_bytes = inner.pickle_bytes;
    stats.opcodes = inner.opcodes;
    stats.visits = inner.visits;
    (result, stats)
}

/// Gunzips an allocation file's bytes, refusing non-gzip data, corrupt or truncated streams
/// and more than [`MAX_PICKLE_BYTES`], or [`MAX_GZIP_RATIO`] times the input plus 1 MiB, of
/// output.
fn gunzip(compressed: &[u8], path: &Path) -> Result<Vec<u8>> {
    if compressed.len() < 2 || compressed[..2] != [0x1f, 0x8b] {
        let hint = if compressed.first() == Some(&0x80) {
            " (it looks like an uncompressed pickle)"
        } else if compressed.is_empty() {
            " (the file is empty)"
        } else {
            ""
        };
        return Err(pickle_err(path, format!("not a gzip file{hint}")));
    }
    let limit = MAX_PICKLE_BYTES.min(
        (compressed.len() as u64)
            .saturating_mul(MAX_GZIP_RATIO)
            .saturating_add(1 << 20),
    );
    let mut bytes = Vec::new();
    let mut decoder = MultiGzDecoder::new(compressed).take(limit + 1);
    if let Err(e) = decoder.read_to_end(&mut bytes) {
        let message = match e.kind() {
            std::io::ErrorKind::UnexpectedEof => format!(
                "gzip stream truncated after {} decompressed bytes (the file was cut short)",
                bytes.len()
            ),
            _ => format!("corrupt gzip stream: {e}"),
        };
        return Err(pickle_err(path, message));
    }
    if bytes.len() as u64 > limit {
        return Err(pickle_err(
            path,
            format!(
                "decompressed pickle exceeds {limit} bytes (at most {MAX_GZIP_RATIO} times the file's {} bytes plus 1 MiB, \
                 and at most {MAX_PICKLE_BYTES}); refusing (a gzip bomb?)",
                compressed.len()
            ),
        ));
    }
    Ok(bytes)
}

/// Same as [`read_allocation_file`] from raw (already gunzipped) pickle bytes; `path` is only
/// used in error messages.
pub fn read_allocation_pickle(bytes: &[u8], path: &Path) -> Result<Vec<PopulationAllocation>> {
    read_allocation_pickle_with_stats(bytes, path).0
}

/// [`read_allocation_pickle`] with the work done ([`ReadStats`]), whether it succeeded or not.
pub fn read_allocation_pickle_with_stats(
    bytes: &[u8],
    path: &Path,
) -> (Result<Vec<PopulationAllocation>>, ReadStats) {
    let mut vm = Vm::new(bytes, path);
    let result = vm.run().and_then(|root| vm.populations(&root));
    let stats = ReadStats {
        compressed_bytes: 0,
        pickle_bytes: bytes.len() as u64,
        opcodes: vm.opcodes,
        visits: vm.visits,
    };
    (result, stats)
}

/// Writes `populations` as gzip (level 1) of a pickle (protocol 3, serde-pickle's default) of
/// `{population: {(rank, cycle): [gids]}}` using plain Python types only (dict, tuple, list,
/// int), populations in slice order and buckets in (rank, cycle) order.
///
/// Written through an [`crate::atomic::AtomicFile`] (unnamed until linked or renamed into
/// place, fsynced), so `path` is either untouched or completely written. Errors: [`BalancerError::InvalidParameter`]
/// for a duplicated population name (a dict would silently merge them),
/// [`BalancerError::Io`] for OS failures, [`BalancerError::Pickle`] if serialization fails.
pub fn write_allocation_file(path: &Path, populations: &[PopulationAllocation]) -> Result<()> {
    stage_allocation_file(path, populations)?.commit()
}

/// [`write_allocation_file`] up to the commit: the file written and synced but not in
/// place (see [`crate::atomic`]), so that a command can commit all its outputs together.
pub fn stage_allocation_file(
    path: &Path,
    populations: &[PopulationAllocation],
) -> Result<crate::atomic::AtomicFile> {
    let mut seen = HashSet::new();
    for p in populations {
        if !seen.insert(p.name.as_str()) {
            return Err(BalancerError::InvalidParameter(format!(
                "duplicate population `{}` in allocation to write to {}",
                p.name,
                path.display()
            )));
        }
    }
    let pickle = serde_pickle::to_vec(&PopulationsSer(populations), serde_pickle::SerOptions::new())
        .map_err(|e| pickle_err(path, format!("cannot serialize allocation: {e}")))?;

    // Unnamed until committed, mode 0666 less the umask (neurodamus run by another user of
    // the group can read it).
    let mut tmp = crate::atomic::AtomicFile::create(path)?;
    {
        let writer = std::io::BufWriter::new(tmp.file());
        // Level 1: on 5M gids it is ~25x faster than the default level 6 (0.15 s vs 3.9 s)
        // for a file <0.5% larger; the BININT stream barely compresses better.
        let mut encoder = flate2::write::GzEncoder::new(writer, flate2::Compression::fast());
        encoder
            .write_all(&pickle)
            .map_err(|e| BalancerError::io(path, e))?;
        let mut writer = encoder.finish().map_err(|e| BalancerError::io(path, e))?;
        writer.flush().map_err(|e| BalancerError::io(path, e))?;
    }
    Ok(tmp)
}

/// Parses `allocation_r{R}_c{C}.pkl.gz` (the file name only; directories are ignored) into
/// `Some((R, C))`; anything else (other names, signs, non-digits, overflow) gives `None`.
pub fn ranks_cycles_from_file_name(path: &Path) -> Option<(u32, u32)> {
    let name = path.file_name()?.to_str()?;
    let rest = name.strip_prefix("allocation_r")?.strip_suffix(".pkl.gz")?;
    let (r, c) = rest.split_once("_c")?;
    let parse = |s: &str| -> Option<u32> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    Some((parse(r)?, parse(c)?))
}

fn pickle_err(path: &Path, message: String) -> BalancerError {
    BalancerError::Pickle {
        path: path.to_path_buf(),
        message,
    }
}

// ---------------------------------------------------------------------------------------
// Writing: serde views that keep population order.

struct PopulationsSer<'a>(&'a [PopulationAllocation]);
struct BucketsSer<'a>(&'a BTreeMap<Bucket, Vec<u32>>);

impl Serialize for PopulationsSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for p in self.0 {
            map.serialize_entry(p.name.as_str(), &BucketsSer(&p.buckets))?;
        }
        map.end()
    }
}

impl Serialize for BucketsSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (b, gids) in self.0 {
            // A Rust tuple serializes as a pickle tuple: hashable, usable as dict key.
            map.serialize_entry(&(b.rank, b.cycle), gids)?;
        }
        map.end()
    }
}

// ---------------------------------------------------------------------------------------
// Reading: the restricted unpickler.

/// Allowed globals, as inert tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Global {
    DefaultDict,
    DefaultDictVector,
    DryRunStats,
    Getattr,
    Vector,
    ArrayArray,
    ArrayReconstructor,
}

impl Global {
    fn resolve(module: &str, name: &str) -> Option<Global> {
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

    fn name(self) -> &'static str {
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

struct TupleObj {
    depth: u32,
    /// [`key_cost`] of this tuple, computed once from its items' so that a tuple built by
    /// doubling a shared sub-tuple costs O(items) to size, not O(its expansion).
    key_cost: usize,
    items: Vec<Val>,
}

/// A value on the VM stack. Immutable values are shared through `Rc`; mutable containers
/// (list, dict, set) live in arenas and are referenced by index, so `GET` of a memoized list
/// and a later `APPENDS` see the same object, as in Python, and no `Rc` cycle can form.
#[derive(Clone)]
enum Val {
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
    fn kind(&self) -> &'static str {
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

    fn describe(&self) -> String {
        match self {
            Val::Global(g) => format!("global `{}`", g.name()),
            Val::Int(i) => format!("int {i}"),
            Val::BigInt => "int too large for 64 bits".to_string(),
            Val::Str(s) if s.chars().count() <= 40 => format!("str {s:?}"),
            v => v.kind().to_string(),
        }
    }

    fn tuple_depth(&self) -> u32 {
        match self {
            Val::Tuple(t) => t.depth,
            _ => 0,
        }
    }
}

/// A hashable dict key, normalized like Python's equality (`True == 1 == 1.0`).
#[derive(Hash, PartialEq, Eq)]
enum HKey {
    None,
    Int(i64),
    Float(u64),
    Str(Rc<str>),
    Bytes(Rc<[u8]>),
    Tuple(Vec<HKey>),
}

#[derive(Default)]
struct DictObj {
    entries: Vec<(Val, Val)>,
    index: HashMap<HKey, usize>,
}

struct Vm<'a> {
    data: &'a [u8],
    pos: usize,
    path: &'a Path,
    stack: Vec<Val>,
    marks: Vec<usize>,
    memo: HashMap<u32, Val>,
    lists: Vec<Vec<Val>>,
    dicts: Vec<DictObj>,
    sets: Vec<Vec<Val>>,
    /// Elements materialized by array constructors, bounded by `2 × input + 1024` so that
    /// re-using one memoized list many times cannot blow up memory.
    budget: usize,
    /// Total size of all dict keys hashed, bounded by `4 × input + 4096`.
    key_work: usize,
    /// Opcodes executed and values visited ([`ReadStats`]).
    opcodes: u64,
    visits: u64,
}

type VmResult<T> = std::result::Result<T, BalancerError>;

mod op {
    pub const MARK: u8 = b'(';
    pub const STOP: u8 = b'.';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const DUP: u8 = b'2';
    pub const FLOAT: u8 = b'F';
    pub const INT: u8 = b'I';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const LONG: u8 = b'L';
    pub const BININT2: u8 = b'M';
    pub const NONE: u8 = b'N';
    pub const PERSID: u8 = b'P';
    pub const BINPERSID: u8 = b'Q';
    pub const REDUCE: u8 = b'R';
    pub const STRING: u8 = b'S';
    pub const BINSTRING: u8 = b'T';
    pub const SHORT_BINSTRING: u8 = b'U';
    pub const UNICODE: u8 = b'V';
    pub const BINUNICODE: u8 = b'X';
    pub const APPEND: u8 = b'a';
    pub const BUILD: u8 = b'b';
    pub const GLOBAL: u8 = b'c';
    pub const DICT: u8 = b'd';
    pub const EMPTY_DICT: u8 = b'}';
    pub const APPENDS: u8 = b'e';
    pub const GET: u8 = b'g';
    pub const BINGET: u8 = b'h';
    pub const INST: u8 = b'i';
    pub const LONG_BINGET: u8 = b'j';
    pub const LIST: u8 = b'l';
    pub const EMPTY_LIST: u8 = b']';
    pub const OBJ: u8 = b'o';
    pub const PUT: u8 = b'p';
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const SETITEM: u8 = b's';
    pub const TUPLE: u8 = b't';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const SETITEMS: u8 = b'u';
    pub const BINFLOAT: u8 = b'G';
    pub const PROTO: u8 = 0x80;
    pub const NEWOBJ: u8 = 0x81;
    pub const EXT1: u8 = 0x82;
    pub const EXT2: u8 = 0x83;
    pub const EXT4: u8 = 0x84;
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const LONG1: u8 = 0x8a;
    pub const LONG4: u8 = 0x8b;
    pub const BINBYTES: u8 = b'B';
    pub const SHORT_BINBYTES: u8 = b'C';
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE8: u8 = 0x8d;
    pub const BINBYTES8: u8 = 0x8e;
    pub const EMPTY_SET: u8 = 0x8f;
    pub const ADDITEMS: u8 = 0x90;
    pub const FROZENSET: u8 = 0x91;
    pub const NEWOBJ_EX: u8 = 0x92;
    pub const STACK_GLOBAL: u8 = 0x93;
    pub const MEMOIZE: u8 = 0x94;
    pub const FRAME: u8 = 0x95;
    pub const BYTEARRAY8: u8 = 0x96;
    pub const NEXT_BUFFER: u8 = 0x97;
    pub const READONLY_BUFFER: u8 = 0x98;
}

impl<'a> Vm<'a> {
    fn new(data: &'a [u8], path: &'a Path) -> Self {
        Vm {
            data,
            pos: 0,
            path,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
            lists: Vec::new(),
            dicts: Vec::new(),
            sets: Vec::new(),
            budget: 0,
            key_work: 0,
            opcodes: 0,
            visits: 0,
        }
    }

    fn err(&self, at: usize, message: impl std::fmt::Display) -> BalancerError {
        pickle_err(self.path, format!("pickle byte {at}: {message}"))
    }

    fn truncated(&self, at: usize, what: &str) -> BalancerError {
        pickle_err(
            self.path,
            format!(
                "pickle truncated: {what} of the opcode at byte {at} runs past the end of the \
                 data ({} bytes) before STOP",
                self.data.len()
            ),
        )
    }

    // -- input ----------------------------------------------------------------------

    fn take(&mut self, n: u64, at: usize, what: &str) -> VmResult<&'a [u8]> {
        let left = (self.data.len() - self.pos) as u64;
        if n > left {
            return Err(self.truncated(at, &format!("{what} ({n} bytes, {left} left)")));
        }
        let s = &self.data[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn u8(&mut self, at: usize) -> VmResult<u8> {
        Ok(self.take(1, at, "argument")?[0])
    }
    fn u16(&mut self, at: usize) -> VmResult<u16> {
        Ok(u16::from_le_bytes(
            self.take(2, at, "argument")?.try_into().unwrap(),
        ))
    }
    fn u32(&mut self, at: usize) -> VmResult<u32> {
        Ok(u32::from_le_bytes(
            self.take(4, at, "argument")?.try_into().unwrap(),
        ))
    }
    fn i32(&mut self, at: usize) -> VmResult<i32> {
        Ok(i32::from_le_bytes(
            self.take(4, at, "argument")?.try_into().unwrap(),
        ))
    }
    fn u64(&mut self, at: usize) -> VmResult<u64> {
        Ok(u64::from_le_bytes(
            self.take(8, at, "argument")?.try_into().unwrap(),
        ))
    }

    /// A text argument ending in `\n` (protocol 0 opcodes, GLOBAL), without the newline.
    fn line(&mut self, at: usize) -> VmResult<&'a [u8]> {
        let rest = &self.data[self.pos..];
        match rest.iter().position(|&b| b == b'\n') {
            Some(n) => {
                self.pos += n + 1;
                Ok(&rest[..n])
            }
            None => Err(self.truncated(at, "text argument (no newline)")),
        }
    }

    fn line_str(&mut self, at: usize) -> VmResult<&'a str> {
        let l = self.line(at)?;
        std::str::from_utf8(l).map_err(|_| self.err(at, "text argument is not valid UTF-8"))
    }

    // -- stack ----------------------------------------------------------------------

    fn frame_start(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn push(&mut self, v: Val) {
        self.stack.push(v);
    }

    fn pop(&mut self, at: usize) -> VmResult<Val> {
        if self.stack.len() <= self.frame_start() {
            return Err(self.err(at, "stack underflow (corrupt pickle)"));
        }
        Ok(self.stack.pop().unwrap())
    }

    fn top(&self, at: usize) -> VmResult<&Val> {
        if self.stack.len() <= self.frame_start() {
            return Err(self.err(at, "stack underflow (corrupt pickle)"));
        }
        Ok(self.stack.last().unwrap())
    }

    fn pop_mark(&mut self, at: usize) -> VmResult<Vec<Val>> {
        let start = self
            .marks
            .pop()
            .ok_or_else(|| self.err(at, "no MARK on the stack"))?;
        Ok(self.stack.split_off(start))
    }

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

    fn new_list(&mut self, items: Vec<Val>) -> Val {
        self.lists.push(items);
        Val::List(self.lists.len() - 1)
    }

    fn new_dict(&mut self) -> Val {
        self.dicts.push(DictObj::default());
        Val::Dict(self.dicts.len() - 1)
    }

    fn charge(&mut self, n: usize, at: usize) -> VmResult<()> {
        self.budget = self.budget.saturating_add(n);
        if self.budget > 2 * self.data.len() + 1024 {
            return Err(self.err(
                at,
                "arrays materialize far more elements than the pickle has bytes (hostile file?)",
            ));
        }
        self.visits += n as u64;
        Ok(())
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

    fn memo_get(&self, idx: u32, at: usize) -> VmResult<Val> {
        self.memo
            .get(&idx)
            .cloned()
            .ok_or_else(|| self.err(at, format!("memo key {idx} not found")))
    }

    fn memo_put(&mut self, idx: u32, at: usize) -> VmResult<()> {
        let v = self.top(at)?.clone();
        self.memo.insert(idx, v);
        Ok(())
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

    // -- the interpreter ------------------------------------------------------------

    fn run(&mut self) -> VmResult<Val> {
        if self.data.is_empty() {
            return Err(pickle_err(self.path, "pickle truncated: no data at all".into()));
        }
        loop {
            let at = self.pos;
            let Some(&code) = self.data.get(at) else {
                return Err(pickle_err(
                    self.path,
                    format!("pickle truncated: data ends at byte {at} before the STOP opcode"),
                ));
            };
            self.pos += 1;
            self.opcodes += 1;
            match code {
                op::PROTO => {
                    let v = self.u8(at)?;
                    if v > 5 {
                        return Err(self.err(at, format!("unsupported pickle protocol {v}")));
                    }
                }
                op::FRAME => {
                    let n = self.u64(at)?;
                    let left = (self.data.len() - self.pos) as u64;
                    if n > left {
                        return Err(self.truncated(at, &format!("frame ({n} bytes, {left} left)")));
                    }
                }
                op::STOP => {
                    let v = self.pop(at)?;
                    if self.pos != self.data.len() {
                        return Err(self.err(
                            at,
                            format!(
                                "trailing garbage: {} bytes after the STOP opcode",
                                self.data.len() - self.pos
                            ),
                        ));
                    }
                    return Ok(v);
                }
                op::MARK => self.marks.push(self.stack.len()),
                op::POP => {
                    if self.stack.len() > self.frame_start() {
                        self.stack.pop();
                    } else {
                        self.pop_mark(at)?;
                    }
                }
                op::POP_MARK => {
                    self.pop_mark(at)?;
                }
                op::DUP => {
                    let v = self.top(at)?.clone();
                    self.push(v);
                }
                // ints
                op::BININT => {
                    let v = self.i32(at)?;
                    self.push(Val::Int(v as i64));
                }
                op::BININT1 => {
                    let v = self.u8(at)?;
                    self.push(Val::Int(v as i64));
                }
                op::BININT2 => {
                    let v = self.u16(at)?;
                    self.push(Val::Int(v as i64));
                }
                op::LONG1 => {
                    let n = self.u8(at)? as u64;
                    let b = self.take(n, at, "LONG1 bytes")?;
                    self.push(decode_long(b));
                }
                op::LONG4 => {
                    let n = self.i32(at)?;
                    if n < 0 {
                        return Err(self.err(at, "LONG4 with negative byte count"));
                    }
                    let b = self.take(n as u64, at, "LONG4 bytes")?;
                    self.push(decode_long(b));
                }
                op::INT => {
                    let l = self.line_str(at)?;
                    let v = match l {
                        "00" => Val::Bool(false),
                        "01" => Val::Bool(true),
                        s => parse_decimal(s).ok_or_else(|| self.err(at, format!("bad INT {s:?}")))?,
                    };
                    self.push(v);
                }
                op::LONG => {
                    let l = self.line_str(at)?;
                    let s = l.strip_suffix('L').unwrap_or(l);
                    let v = parse_decimal(s).ok_or_else(|| self.err(at, format!("bad LONG {l:?}")))?;
                    self.push(v);
                }
                // floats
                op::BINFLOAT => {
                    let b = self.take(8, at, "argument")?;
                    self.push(Val::Float(f64::from_be_bytes(b.try_into().unwrap())));
                }
                op::FLOAT => {
                    let l = self.line_str(at)?;
                    let f: f64 = l
                        .trim()
                        .parse()
                        .map_err(|_| self.err(at, format!("bad FLOAT {l:?}")))?;
                    self.push(Val::Float(f));
                }
                // strings and bytes
                op::SHORT_BINUNICODE => {
                    let n = self.u8(at)? as u64;
                    let v = self.utf8(n, at)?;
                    self.push(v);
                }
                op::BINUNICODE => {
                    let n = self.u32(at)? as u64;
                    let v = self.utf8(n, at)?;
                    self.push(v);
                }
                op::BINUNICODE8 => {
                    let n = self.u64(at)?;
                    let v = self.utf8(n, at)?;
                    self.push(v);
                }
                op::UNICODE => {
                    let l = self.line(at)?;
                    let s = raw_unicode_escape(l)
                        .ok_or_else(|| self.err(at, "bad raw-unicode-escape text in UNICODE"))?;
                    self.push(Val::Str(s.into()));
                }
                op::SHORT_BINBYTES => {
                    let n = self.u8(at)? as u64;
                    let b = self.take(n, at, "bytes")?;
                    self.push(Val::Bytes(b.into()));
                }
                op::BINBYTES => {
                    let n = self.u32(at)? as u64;
                    let b = self.take(n, at, "bytes")?;
                    self.push(Val::Bytes(b.into()));
                }
                op::BINBYTES8 | op::BYTEARRAY8 => {
                    let n = self.u64(at)?;
                    let b = self.take(n, at, "bytes")?;
                    self.push(Val::Bytes(b.into()));
                }
                op::SHORT_BINSTRING => {
                    let n = self.u8(at)? as u64;
                    let b = self.take(n, at, "string")?;
                    self.push(py2_str(b));
                }
                op::BINSTRING => {
                    let n = self.i32(at)?;
                    if n < 0 {
                        return Err(self.err(at, "BINSTRING with negative length"));
                    }
                    let b = self.take(n as u64, at, "string")?;
                    self.push(py2_str(b));
                }
                op::STRING => {
                    let l = self.line(at)?;
                    let b = unquote_string(l).ok_or_else(|| self.err(at, "bad quoted text in STRING"))?;
                    self.push(py2_str(&b));
                }
                // constants
                op::NONE => self.push(Val::None),
                op::NEWTRUE => self.push(Val::Bool(true)),
                op::NEWFALSE => self.push(Val::Bool(false)),
                // dicts
                op::EMPTY_DICT => {
                    let d = self.new_dict();
                    self.push(d);
                }
                op::DICT => {
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
                }
                op::SETITEM => {
                    let v = self.pop(at)?;
                    let k = self.pop(at)?;
                    let id = self.target_dict(at)?;
                    self.set_item(id, k, v, at)?;
                }
                op::SETITEMS => {
                    let items = self.pop_mark(at)?;
                    if items.len() % 2 != 0 {
                        return Err(self.err(at, "SETITEMS with an odd number of items"));
                    }
                    let id = self.target_dict(at)?;
                    let mut it = items.into_iter();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        self.set_item(id, k, v, at)?;
                    }
                }
                // lists
                op::EMPTY_LIST => {
                    let l = self.new_list(Vec::new());
                    self.push(l);
                }
                op::LIST => {
                    let items = self.pop_mark(at)?;
                    let l = self.new_list(items);
                    self.push(l);
                }
                op::APPEND => {
                    let v = self.pop(at)?;
                    let id = self.target_list(at)?;
                    self.lists[id].push(v);
                }
                op::APPENDS => {
                    let items = self.pop_mark(at)?;
                    let id = self.target_list(at)?;
                    self.lists[id].extend(items);
                }
                // tuples
                op::EMPTY_TUPLE => {
                    let t = self.make_tuple(Vec::new(), at)?;
                    self.push(t);
                }
                op::TUPLE => {
                    let items = self.pop_mark(at)?;
                    let t = self.make_tuple(items, at)?;
                    self.push(t);
                }
                op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                    let n = (code - op::TUPLE1 + 1) as usize;
                    if self.stack.len() < self.frame_start() + n {
                        return Err(self.err(at, "stack underflow (corrupt pickle)"));
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    let t = self.make_tuple(items, at)?;
                    self.push(t);
                }
                // sets
                op::EMPTY_SET => {
                    self.sets.push(Vec::new());
                    self.push(Val::Set(self.sets.len() - 1));
                }
                op::ADDITEMS => {
                    let items = self.pop_mark(at)?;
                    match self.top(at)? {
                        Val::Set(id) => {
                            let id = *id;
                            self.sets[id].extend(items);
                        }
                        other => return Err(self.err(at, format!("ADDITEMS on a {}", other.kind()))),
                    }
                }
                op::FROZENSET => {
                    let items = self.pop_mark(at)?;
                    self.sets.push(items);
                    self.push(Val::Set(self.sets.len() - 1));
                }
                // memo
                op::PUT => {
                    let l = self.line_str(at)?;
                    let idx = l
                        .parse()
                        .map_err(|_| self.err(at, format!("bad PUT index {l:?}")))?;
                    self.memo_put(idx, at)?;
                }
                op::BINPUT => {
                    let idx = self.u8(at)? as u32;
                    self.memo_put(idx, at)?;
                }
                op::LONG_BINPUT => {
                    let idx = self.u32(at)?;
                    self.memo_put(idx, at)?;
                }
                op::MEMOIZE => {
                    let idx = self.memo.len() as u32;
                    self.memo_put(idx, at)?;
                }
                op::GET => {
                    let l = self.line_str(at)?;
                    let idx = l
                        .parse()
                        .map_err(|_| self.err(at, format!("bad GET index {l:?}")))?;
                    let v = self.memo_get(idx, at)?;
                    self.push(v);
                }
                op::BINGET => {
                    let idx = self.u8(at)? as u32;
                    let v = self.memo_get(idx, at)?;
                    self.push(v);
                }
                op::LONG_BINGET => {
                    let idx = self.u32(at)?;
                    let v = self.memo_get(idx, at)?;
                    self.push(v);
                }
                // globals and calls
                op::GLOBAL => {
                    let module = self.line_str(at)?;
                    let name = self.line_str(at)?;
                    let g = self.global(module, name, at)?;
                    self.push(g);
                }
                op::STACK_GLOBAL => {
                    let name = self.pop(at)?;
                    let module = self.pop(at)?;
                    let (Val::Str(module), Val::Str(name)) = (&module, &name) else {
                        return Err(self.err(at, "STACK_GLOBAL needs two str"));
                    };
                    let g = self.global(module, name, at)?;
                    self.push(g);
                }
                op::INST => {
                    let module = self.line_str(at)?;
                    let name = self.line_str(at)?;
                    let Val::Global(g) = self.global(module, name, at)? else {
                        unreachable!()
                    };
                    let args = self.pop_mark(at)?;
                    let v = self.call(g, &args, at)?;
                    self.push(v);
                }
                op::OBJ => {
                    let mut items = self.pop_mark(at)?;
                    if items.is_empty() {
                        return Err(self.err(at, "OBJ without a class"));
                    }
                    let cls = items.remove(0);
                    let g = self.callable(&cls, at)?;
                    let v = self.call(g, &items, at)?;
                    self.push(v);
                }
                op::REDUCE | op::NEWOBJ => {
                    let args = self.pop(at)?;
                    let func = self.pop(at)?;
                    let g = self.callable(&func, at)?;
                    let args = self.args(args, at)?;
                    let v = self.call(g, &args.items, at)?;
                    self.push(v);
                }
                op::NEWOBJ_EX => {
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
                }
                op::BUILD => {
                    let state = self.pop(at)?;
                    self.top(at)?;
                    if !self.is_empty_state(&state) {
                        return Err(self.err(
                            at,
                            format!("BUILD with a non-empty state ({}) is not supported", state.kind()),
                        ));
                    }
                }
                op::READONLY_BUFFER => {
                    self.top(at)?;
                }
                op::NEXT_BUFFER => {
                    return Err(self.err(at, "out-of-band buffers (NEXT_BUFFER) are not supported"))
                }
                op::PERSID | op::BINPERSID => return Err(self.err(at, "persistent ids are not supported")),
                op::EXT1 | op::EXT2 | op::EXT4 => {
                    return Err(self.err(at, "copyreg extension codes are not supported"))
                }
                other => return Err(self.err(at, format!("unknown or unsupported opcode 0x{other:02x}"))),
            }
        }
    }

    fn utf8(&mut self, n: u64, at: usize) -> VmResult<Val> {
        let b = self.take(n, at, "string")?;
        let s = std::str::from_utf8(b).map_err(|_| self.err(at, "string is not valid UTF-8"))?;
        Ok(Val::Str(s.into()))
    }

    fn target_dict(&self, at: usize) -> VmResult<usize> {
        match self.top(at)? {
            Val::Dict(id) => Ok(*id),
            other => Err(self.err(at, format!("SETITEM(S) on a {}, not a dict", other.describe()))),
        }
    }

    fn target_list(&self, at: usize) -> VmResult<usize> {
        match self.top(at)? {
            Val::List(id) => Ok(*id),
            other => Err(self.err(at, format!("APPEND(S) on a {}, not a list", other.describe()))),
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

    // -- conversion -----------------------------------------------------------------

    /// Converts the unpickled root into populations, counting its visits.
    fn populations(&mut self, root: &Val) -> Result<Vec<PopulationAllocation>> {
        let mut visits = 0;
        let result = self.convert(root, &mut visits);
        self.visits += visits;
        result
    }

    /// Walks the root dict, each population's dict once per population entry, and each
    /// bucket's gids: populations, buckets and gids visited are each bounded by the input
    /// size (each costs at least one byte unless shared through the memo), so a dict or list
    /// aliased many times is refused instead of walked many times.
    fn convert(&self, root: &Val, visits: &mut u64) -> Result<Vec<PopulationAllocation>> {
        let path = self.path;
        let e = |m: String| pickle_err(path, m);
        let Val::Dict(root_id) = root else {
            return Err(e(format!(
                "top level: expected a dict {{population: {{(rank, cycle): [gids]}}}}, found {}",
                root.describe()
            )));
        };
        // Each gid costs at least one input byte; more means aliased lists (amplification).
        let max_gids = self.data.len();
        let mut total = 0usize;
        let mut entries = 0usize;
        let mut out = Vec::with_capacity(self.dicts[*root_id].entries.len());
        for (i, (k, v)) in self.dicts[*root_id].entries.iter().enumerate() {
            *visits += 1;
            let Val::Str(name) = k else {
                return Err(e(format!(
                    "population key #{i}: expected a str population name, found {}",
                    k.describe()
                )));
            };
            let Val::Dict(bid) = v else {
                return Err(e(format!(
                    "population `{name}`: expected a dict {{(rank, cycle): [gids]}}, found {}",
                    v.describe()
                )));
            };
            entries = entries.saturating_add(self.dicts[*bid].entries.len());
            if entries > self.data.len() {
                return Err(e(format!(
                    "population `{name}`: more buckets than the pickle has bytes (one dict shared \
                     between populations?); refusing"
                )));
            }
            let mut buckets = BTreeMap::new();
            for (key, gids_val) in &self.dicts[*bid].entries {
                *visits += 1;
                let bucket = bucket_key(key).map_err(|m| e(format!("population `{name}`, key {m}")))?;
                let where_ = format!("population `{name}`, key ({}, {})", bucket.rank, bucket.cycle);
                let items: &[Val] = match gids_val {
                    Val::List(id) => &self.lists[*id],
                    Val::Tuple(t) => &t.items,
                    other => {
                        return Err(e(format!(
                            "{where_}: expected a list of gids, found {}",
                            other.describe()
                        )))
                    }
                };
                total = total.saturating_add(items.len());
                if total > max_gids {
                    return Err(e(format!(
                        "{where_}: more gids than the pickle has bytes (lists shared between \
                         buckets?); refusing"
                    )));
                }
                let mut gids = Vec::with_capacity(items.len());
                *visits += items.len() as u64;
                for (j, g) in items.iter().enumerate() {
                    match g {
                        Val::Int(x) if (0..=u32::MAX as i64).contains(x) => gids.push(*x as u32),
                        Val::Int(x) if *x < 0 => {
                            return Err(e(format!("{where_}, item {j}: gid {x} is negative")))
                        }
                        Val::Int(_) | Val::BigInt => {
                            return Err(e(format!(
                                "{where_}, item {j}: {} does not fit a u32 gid",
                                g.describe()
                            )))
                        }
                        other => {
                            return Err(e(format!(
                                "{where_}, item {j}: expected an int gid, found {}",
                                other.describe()
                            )))
                        }
                    }
                }
                buckets.insert(bucket, gids);
            }
            out.push(PopulationAllocation {
                name: name.to_string(),
                buckets,
            });
        }
        Ok(out)
    }
}

fn bucket_key(key: &Val) -> std::result::Result<Bucket, String> {
    let Val::Tuple(t) = key else {
        return Err(format!("{}: expected a (rank, cycle) tuple", key.describe()));
    };
    let part = |v: &Val, what: &str| -> std::result::Result<u32, String> {
        match v {
            Val::Int(x) if (0..=u32::MAX as i64).contains(x) => Ok(*x as u32),
            other => Err(format!(
                "{what} must be a non-negative int, found {}",
                other.describe()
            )),
        }
    };
    match t.items.as_slice() {
        [r, c] => {
            let rank = part(r, "rank").map_err(|m| format!("(.., ..): {m}"))?;
            let cycle = part(c, "cycle").map_err(|m| format!("({rank}, ..): {m}"))?;
            Ok(Bucket { rank, cycle })
        }
        items => Err(format!("tuple of {} items: expected (rank, cycle)", items.len())),
    }
}

/// Size of a dict key for the hashing budget (nodes plus string bytes, a shared sub-tuple
/// counted at every use, saturating). O(1): a tuple's is computed when it is built.
fn key_cost(v: &Val) -> usize {
    match v {
        Val::Str(s) => 1 + s.len(),
        Val::Bytes(b) => 1 + b.len(),
        Val::Tuple(t) => t.key_cost,
        _ => 1,
    }
}

/// Little-endian two's complement, as LONG1/LONG4 store it.
fn decode_long(b: &[u8]) -> Val {
    if b.is_empty() {
        return Val::Int(0);
    }
    let neg = b[b.len() - 1] & 0x80 != 0;
    let fill = if neg { 0xff } else { 0 };
    // Strip redundant sign-extension bytes.
    let mut n = b.len();
    while n > 1 && b[n - 1] == fill && (b[n - 2] & 0x80 != 0) == neg {
        n -= 1;
    }
    if n > 8 {
        return Val::BigInt;
    }
    let mut buf = [fill; 8];
    buf[..n].copy_from_slice(&b[..n]);
    Val::Int(i64::from_le_bytes(buf))
}

fn decode_fixed_int(c: &[u8], signed: bool, big: bool) -> Val {
    let mut buf = [0u8; 8];
    let n = c.len();
    if big {
        for (i, &x) in c.iter().rev().enumerate() {
            buf[i] = x;
        }
    } else {
        buf[..n].copy_from_slice(c);
    }
    if signed && buf[n - 1] & 0x80 != 0 {
        for x in &mut buf[n..] {
            *x = 0xff;
        }
        return Val::Int(i64::from_le_bytes(buf));
    }
    let u = u64::from_le_bytes(buf);
    i64::try_from(u).map(Val::Int).unwrap_or(Val::BigInt)
}

fn parse_decimal(s: &str) -> Option<Val> {
    let s = s.trim();
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.parse::<i64>().map(Val::Int).unwrap_or(Val::BigInt))
}

/// Python 2 `str` (BINSTRING & co.): ASCII becomes str; anything else stays bytes.
fn py2_str(b: &[u8]) -> Val {
    if b.is_ascii() {
        Val::Str(std::str::from_utf8(b).unwrap().into())
    } else {
        Val::Bytes(b.into())
    }
}

/// Decodes `raw-unicode-escape` (protocol 0 UNICODE): latin-1 plus `\uXXXX` / `\UXXXXXXXX`.
fn raw_unicode_escape(b: &[u8]) -> Option<String> {
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() && (b[i + 1] == b'u' || b[i + 1] == b'U') {
            let n = if b[i + 1] == b'u' { 4 } else { 8 };
            let hex = b.get(i + 2..i + 2 + n)?;
            let cp = u32::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
            out.push(char::from_u32(cp)?);
            i += 2 + n;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    Some(out)
}

/// Decodes a protocol 0 STRING argument: a quoted Python 2 `repr` with backslash escapes.
fn unquote_string(l: &[u8]) -> Option<Vec<u8>> {
    let l = l.strip_suffix(b"\r").unwrap_or(l);
    if l.len() < 2 || l[0] != l[l.len() - 1] || !(l[0] == b'\'' || l[0] == b'"') {
        return None;
    }
    let b = &l[1..l.len() - 1];
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let c = *b.get(i + 1)?;
        i += 2;
        match c {
            b'\\' | b'\'' | b'"' => out.push(c),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'a' => out.push(7),
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'v' => out.push(11),
            b'\n' => {}
            b'x' => {
                let hex = b.get(i..i + 2)?;
                out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
                i += 2;
            }
            b'0'..=b'7' => {
                let mut v = (c - b'0') as u32;
                let mut k = 0;
                while k < 2 && i < b.len() && (b'0'..=b'7').contains(&b[i]) {
                    v = v * 8 + (b[i] - b'0') as u32;
                    i += 1;
                    k += 1;
                }
                out.push(v as u8);
            }
            other => {
                out.push(b'\\');
                out.push(other);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(b: &[u8]) -> Result<Vec<PopulationAllocation>> {
        read_allocation_pickle(b, Path::new("t.pkl"))
    }

    fn msg(r: Result<Vec<PopulationAllocation>>) -> String {
        match r {
            Err(e @ BalancerError::Pickle { .. }) => e.to_string(),
            other => panic!("expected a Pickle error, got {other:?}"),
        }
    }

    fn b(rank: u32, cycle: u32) -> Bucket {
        Bucket { rank, cycle }
    }

    #[test]
    fn serde_pickle_value_dict_sorts_keys_but_our_writer_keeps_order() {
        use serde_pickle::{HashableValue as H, Value as V};
        let mut d = BTreeMap::new();
        d.insert(H::String("zeta".into()), V::List(vec![]));
        d.insert(H::String("alpha".into()), V::List(vec![]));
        let bytes = serde_pickle::value_to_vec(&V::Dict(d), Default::default()).unwrap();
        let z = bytes.windows(4).position(|w| w == b"zeta").unwrap();
        let a = bytes.windows(5).position(|w| w == b"alpha").unwrap();
        assert!(a < z, "Value::Dict is a BTreeMap: populations come out sorted");

        let pops = vec![
            PopulationAllocation {
                name: "zeta".into(),
                buckets: BTreeMap::from([(b(0, 0), vec![1])]),
            },
            PopulationAllocation {
                name: "alpha".into(),
                buckets: BTreeMap::new(),
            },
        ];
        let bytes = serde_pickle::to_vec(&PopulationsSer(&pops), Default::default()).unwrap();
        assert_eq!(&bytes[..2], b"\x80\x03", "serde-pickle writes protocol 3");
        assert_eq!(read(&bytes).unwrap(), pops);
    }

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
    fn decode_longs() {
        assert!(matches!(decode_long(&[]), Val::Int(0)));
        assert!(matches!(decode_long(&[0xff]), Val::Int(-1)));
        assert!(matches!(
            decode_long(&[0xff, 0xff, 0xff, 0xff, 0x00]),
            Val::Int(4294967295)
        ));
        assert!(matches!(decode_long(&[0x00, 0x80]), Val::Int(-32768)));
        assert!(matches!(
            decode_long(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            Val::Int(1)
        ));
        assert!(matches!(decode_long(&[0, 0, 0, 0, 0, 0, 0, 0, 1]), Val::BigInt));
        assert!(matches!(decode_fixed_int(&[0xff; 8], false, false), Val::BigInt));
        assert!(matches!(
            decode_fixed_int(&[0x80, 0], true, true),
            Val::Int(-32768)
        ));
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

    #[test]
    fn hostile_structure_limits() {
        // Aliasing: one 100-int list used for 50 buckets via BINGET → amplification refused.
        let mut p = b"\x80\x04}\x8c\x01P}".to_vec();
        p.extend_from_slice(b"(");
        p.extend_from_slice(b"K\x00K\x00\x86](");
        for _ in 0..100 {
            p.extend_from_slice(b"K\x01");
        }
        p.extend_from_slice(b"e\x94");
        for i in 1..50u8 {
            p.extend_from_slice(&[b'K', i, b'K', 0, 0x86, b'h', 0]);
        }
        p.extend_from_slice(b"us.");
        let m = msg(read(&p));
        assert!(m.contains("more gids than the pickle has bytes"), "{m}");
        // A memoized 1000-byte key re-used for 2000 SETITEMs: hashing work is bounded.
        let mut p = b"\x80\x04}X\xe8\x03\x00\x00".to_vec();
        p.extend_from_slice(&[b'a'; 1000]);
        p.extend_from_slice(b"\x94K\x01s");
        for _ in 0..2000 {
            p.extend_from_slice(b"h\x00K\x01s");
        }
        p.push(b'.');
        let m = msg(read(&p));
        assert!(m.contains("dict keys are re-used"), "{m}");
        // Deep tuple nesting.
        let mut p = b"\x80\x04K\x01".to_vec();
        p.extend_from_slice(&[0x85; 1000]);
        p.push(b'.');
        assert!(msg(read(&p)).contains("nested deeper"));
        // Huge declared lengths don't allocate: truncated.
        let m = msg(read(b"\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7fabc"));
        assert!(m.contains("truncated"), "{m}");
        let m = msg(read(b"\x80\x04\x95\xff\xff\xff\xff\xff\xff\x00\x00}."));
        assert!(m.contains("truncated"), "{m}");
        // Unknown memo key, stack underflow, empty input, unsupported protocol.
        assert!(msg(read(b"\x80\x04h\x05.")).contains("memo key 5 not found"));
        assert!(msg(read(b"\x80\x04s.")).contains("stack underflow"));
        assert!(msg(read(b"")).contains("truncated"));
        assert!(msg(read(b"\x80\x06}.")).contains("unsupported pickle protocol 6"));
        // SETITEMS on a list.
        assert!(msg(read(b"\x80\x04](K\x01K\x02u.")).contains("not a dict"));
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

    #[test]
    fn protocol0_text_opcodes() {
        // {'A': {(1, 2): [3, 4L]}} in protocol 0 with STRING, INT, LONG, UNICODE.
        let p = b"(dp0\nS'A'\np1\n(dp2\n(I1\nI2\ntp3\n(lp4\nI3\naL4L\nassV\\u00e9\n(dsS'B\\x41'\n(ds.";
        let got = read(p).unwrap();
        let names: Vec<_> = got.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, vec!["A", "\u{e9}", "BA"]);
        assert_eq!(got[0].buckets[&b(1, 2)], vec![3, 4]);
    }

    #[test]
    fn write_rejects_duplicate_populations() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allocation_r1_c1.pkl.gz");
        let p = PopulationAllocation {
            name: "A".into(),
            buckets: BTreeMap::new(),
        };
        let e = write_allocation_file(&path, &[p.clone(), p]).unwrap_err();
        assert!(
            matches!(e, BalancerError::InvalidParameter(ref m) if m.contains("duplicate population `A`"))
        );
        assert!(!path.exists());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "no temp file left"
        );
    }

    #[test]
    fn write_into_missing_directory_is_io_error() {
        let e = write_allocation_file(Path::new("/nonexistent-dir-xyz/a.pkl.gz"), &[]).unwrap_err();
        assert!(matches!(e, BalancerError::Io { .. }), "{e:?}");
    }
}
