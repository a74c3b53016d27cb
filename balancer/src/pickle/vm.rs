//! The unpickler's machine: the [`Vm`] (input cursor, stack and marks, memo, the arenas of
//! lists, dicts and sets), its input and stack primitives, the work accounting behind
//! [`ReadStats`] (opcodes, value visits, the array-element budget), and the opcode loop,
//! which dispatches each opcode to its family's handler in the sibling files.
use std::collections::HashMap;
use std::path::Path;

use super::pickle_err;
use super::value::{DictObj, Val};
use crate::error::BalancerError;

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

/// The restricted unpickler's state during one read.
pub(super) struct Vm<'a> {
    pub(super) data: &'a [u8],
    pub(super) pos: usize,
    pub(super) path: &'a Path,
    pub(super) stack: Vec<Val>,
    pub(super) marks: Vec<usize>,
    pub(super) memo: HashMap<u32, Val>,
    pub(super) lists: Vec<Vec<Val>>,
    pub(super) dicts: Vec<DictObj>,
    pub(super) sets: Vec<Vec<Val>>,
    /// Elements materialized by array constructors, bounded by `2 × input + 1024` so that
    /// re-using one memoized list many times cannot blow up memory.
    pub(super) budget: usize,
    /// Total size of all dict keys hashed, bounded by `4 × input + 4096`.
    pub(super) key_work: usize,
    /// Opcodes executed and values visited ([`ReadStats`]).
    pub(super) opcodes: u64,
    pub(super) visits: u64,
}

pub(super) type VmResult<T> = std::result::Result<T, BalancerError>;

/// Opcode bytes (CPython's `pickletools` names).
pub(super) mod op {
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
    pub(super) fn new(data: &'a [u8], path: &'a Path) -> Self {
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

    pub(super) fn err(&self, at: usize, message: impl std::fmt::Display) -> BalancerError {
        pickle_err(self.path, format!("pickle byte {at}: {message}"))
    }

    pub(super) fn truncated(&self, at: usize, what: &str) -> BalancerError {
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

    #[inline(always)]
    pub(super) fn take(&mut self, n: u64, at: usize, what: &str) -> VmResult<&'a [u8]> {
        let left = (self.data.len() - self.pos) as u64;
        if n > left {
            return Err(self.truncated(at, &format!("{what} ({n} bytes, {left} left)")));
        }
        let s = &self.data[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    #[inline(always)]
    pub(super) fn u8(&mut self, at: usize) -> VmResult<u8> {
        Ok(self.take(1, at, "argument")?[0])
    }
    #[inline(always)]
    pub(super) fn u16(&mut self, at: usize) -> VmResult<u16> {
        Ok(u16::from_le_bytes(
            self.take(2, at, "argument")?.try_into().unwrap(),
        ))
    }
    #[inline(always)]
    pub(super) fn u32(&mut self, at: usize) -> VmResult<u32> {
        Ok(u32::from_le_bytes(
            self.take(4, at, "argument")?.try_into().unwrap(),
        ))
    }
    #[inline(always)]
    pub(super) fn i32(&mut self, at: usize) -> VmResult<i32> {
        Ok(i32::from_le_bytes(
            self.take(4, at, "argument")?.try_into().unwrap(),
        ))
    }
    #[inline(always)]
    pub(super) fn u64(&mut self, at: usize) -> VmResult<u64> {
        Ok(u64::from_le_bytes(
            self.take(8, at, "argument")?.try_into().unwrap(),
        ))
    }

    /// A text argument ending in `\n` (protocol 0 opcodes, GLOBAL), without the newline.
    #[inline(always)]
    pub(super) fn line(&mut self, at: usize) -> VmResult<&'a [u8]> {
        let rest = &self.data[self.pos..];
        match rest.iter().position(|&b| b == b'\n') {
            Some(n) => {
                self.pos += n + 1;
                Ok(&rest[..n])
            }
            None => Err(self.truncated(at, "text argument (no newline)")),
        }
    }

    #[inline(always)]
    pub(super) fn line_str(&mut self, at: usize) -> VmResult<&'a str> {
        let l = self.line(at)?;
        std::str::from_utf8(l).map_err(|_| self.err(at, "text argument is not valid UTF-8"))
    }

    // -- stack ----------------------------------------------------------------------

    #[inline(always)]
    pub(super) fn frame_start(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    #[inline(always)]
    pub(super) fn push(&mut self, v: Val) {
        self.stack.push(v);
    }

    #[inline(always)]
    pub(super) fn pop(&mut self, at: usize) -> VmResult<Val> {
        if self.stack.len() <= self.frame_start() {
            return Err(self.err(at, "stack underflow (corrupt pickle)"));
        }
        Ok(self.stack.pop().unwrap())
    }

    #[inline(always)]
    pub(super) fn top(&self, at: usize) -> VmResult<&Val> {
        if self.stack.len() <= self.frame_start() {
            return Err(self.err(at, "stack underflow (corrupt pickle)"));
        }
        Ok(self.stack.last().unwrap())
    }

    #[inline(always)]
    pub(super) fn pop_mark(&mut self, at: usize) -> VmResult<Vec<Val>> {
        let start = self
            .marks
            .pop()
            .ok_or_else(|| self.err(at, "no MARK on the stack"))?;
        Ok(self.stack.split_off(start))
    }

    #[inline(always)]
    pub(super) fn charge(&mut self, n: usize, at: usize) -> VmResult<()> {
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

    // -- the interpreter ------------------------------------------------------------

    /// Runs the pickle to its STOP and returns the value it leaves. One match on the opcode
    /// byte, each arm calling its family's handler (`protocol.rs`, `scalar.rs`,
    /// `container.rs`, `memo.rs`, `object.rs`), all `#[inline(always)]`, as are the input and stack
    /// primitives, so the loop compiles to one jump table with the handlers in its arms.
    pub(super) fn run(&mut self) -> VmResult<Val> {
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
                // framing and protocol (protocol.rs)
                op::PROTO => self.proto(at)?,
                op::FRAME => self.frame(at)?,
                op::STOP => return self.stop(at),
                op::READONLY_BUFFER => self.readonly_buffer(at)?,
                op::NEXT_BUFFER => return Err(self.next_buffer(at)),
                // stack and memo (memo.rs)
                op::MARK => self.mark(),
                op::POP => self.pop_op(at)?,
                op::POP_MARK => self.pop_mark_op(at)?,
                op::DUP => self.dup(at)?,
                op::PUT => self.put(at)?,
                op::BINPUT => self.binput(at)?,
                op::LONG_BINPUT => self.long_binput(at)?,
                op::MEMOIZE => self.memoize(at)?,
                op::GET => self.get(at)?,
                op::BINGET => self.binget(at)?,
                op::LONG_BINGET => self.long_binget(at)?,
                // ints, floats, strings and bytes (scalar.rs); None, True and False here
                op::BININT => self.binint(at)?,
                op::BININT1 => self.binint1(at)?,
                op::BININT2 => self.binint2(at)?,
                op::LONG1 => self.long1(at)?,
                op::LONG4 => self.long4(at)?,
                op::INT => self.int(at)?,
                op::LONG => self.long(at)?,
                op::BINFLOAT => self.binfloat(at)?,
                op::FLOAT => self.float(at)?,
                op::SHORT_BINUNICODE => self.short_binunicode(at)?,
                op::BINUNICODE => self.binunicode(at)?,
                op::BINUNICODE8 => self.binunicode8(at)?,
                op::UNICODE => self.unicode(at)?,
                op::SHORT_BINBYTES => self.short_binbytes(at)?,
                op::BINBYTES => self.binbytes(at)?,
                op::BINBYTES8 | op::BYTEARRAY8 => self.binbytes8(at)?,
                op::SHORT_BINSTRING => self.short_binstring(at)?,
                op::BINSTRING => self.binstring(at)?,
                op::STRING => self.string(at)?,
                op::NONE => self.push(Val::None),
                op::NEWTRUE => self.push(Val::Bool(true)),
                op::NEWFALSE => self.push(Val::Bool(false)),
                // dicts, lists, tuples and sets (container.rs)
                op::EMPTY_DICT => self.empty_dict(),
                op::DICT => self.dict(at)?,
                op::SETITEM => self.setitem(at)?,
                op::SETITEMS => self.setitems(at)?,
                op::EMPTY_LIST => self.empty_list(),
                op::LIST => self.list(at)?,
                op::APPEND => self.append(at)?,
                op::APPENDS => self.appends(at)?,
                op::EMPTY_TUPLE => self.empty_tuple(at)?,
                op::TUPLE => self.tuple(at)?,
                op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => self.tuple_n((code - op::TUPLE1 + 1) as usize, at)?,
                op::EMPTY_SET => self.empty_set(),
                op::ADDITEMS => self.additems(at)?,
                op::FROZENSET => self.frozenset(at)?,
                // globals, calls and object construction, and their refusals (object.rs)
                op::GLOBAL => self.global_op(at)?,
                op::STACK_GLOBAL => self.stack_global(at)?,
                op::INST => self.inst(at)?,
                op::OBJ => self.obj(at)?,
                op::REDUCE | op::NEWOBJ => self.reduce(at)?,
                op::NEWOBJ_EX => self.newobj_ex(at)?,
                op::BUILD => self.build(at)?,
                op::PERSID | op::BINPERSID => return Err(self.persid(at)),
                op::EXT1 | op::EXT2 | op::EXT4 => return Err(self.ext(at)),
                other => return Err(self.err(at, format!("unknown or unsupported opcode 0x{other:02x}"))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{msg, read};

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
}
