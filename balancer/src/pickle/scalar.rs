//! Opcodes of scalars: ints (BININT*, LONG1/LONG4, protocol 0's INT and LONG), floats,
//! str (UTF-8, raw-unicode-escape), bytes, Python 2 strings (ASCII ones become str), and
//! the decoders they use (little-endian longs, the fixed-size ints of array machine formats,
//! quoted protocol 0 text). None/True/False are pushed by the opcode loop itself.
use super::value::Val;
use super::vm::{Vm, VmResult};

impl Vm<'_> {
    #[inline(always)]
    pub(super) fn binint(&mut self, at: usize) -> VmResult<()> {
        let v = self.i32(at)?;
        self.push(Val::Int(v as i64));
        Ok(())
    }

    #[inline(always)]
    pub(super) fn binint1(&mut self, at: usize) -> VmResult<()> {
        let v = self.u8(at)?;
        self.push(Val::Int(v as i64));
        Ok(())
    }

    #[inline(always)]
    pub(super) fn binint2(&mut self, at: usize) -> VmResult<()> {
        let v = self.u16(at)?;
        self.push(Val::Int(v as i64));
        Ok(())
    }

    #[inline(always)]
    pub(super) fn long1(&mut self, at: usize) -> VmResult<()> {
        let n = self.u8(at)? as u64;
        let b = self.take(n, at, "LONG1 bytes")?;
        self.push(decode_long(b));
        Ok(())
    }

    #[inline(always)]
    pub(super) fn long4(&mut self, at: usize) -> VmResult<()> {
        let n = self.i32(at)?;
        if n < 0 {
            return Err(self.err(at, "LONG4 with negative byte count"));
        }
        let b = self.take(n as u64, at, "LONG4 bytes")?;
        self.push(decode_long(b));
        Ok(())
    }

    #[inline(always)]
    pub(super) fn int(&mut self, at: usize) -> VmResult<()> {
        let l = self.line_str(at)?;
        let v = match l {
            "00" => Val::Bool(false),
            "01" => Val::Bool(true),
            s => parse_decimal(s).ok_or_else(|| self.err(at, format!("bad INT {s:?}")))?,
        };
        self.push(v);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn long(&mut self, at: usize) -> VmResult<()> {
        let l = self.line_str(at)?;
        let s = l.strip_suffix('L').unwrap_or(l);
        let v = parse_decimal(s).ok_or_else(|| self.err(at, format!("bad LONG {l:?}")))?;
        self.push(v);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn binfloat(&mut self, at: usize) -> VmResult<()> {
        let b = self.take(8, at, "argument")?;
        self.push(Val::Float(f64::from_be_bytes(b.try_into().unwrap())));
        Ok(())
    }

    #[inline(always)]
    pub(super) fn float(&mut self, at: usize) -> VmResult<()> {
        let l = self.line_str(at)?;
        let f: f64 = l
            .trim()
            .parse()
            .map_err(|_| self.err(at, format!("bad FLOAT {l:?}")))?;
        self.push(Val::Float(f));
        Ok(())
    }

    #[inline(always)]
    pub(super) fn short_binunicode(&mut self, at: usize) -> VmResult<()> {
        let n = self.u8(at)? as u64;
        let v = self.utf8(n, at)?;
        self.push(v);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn binunicode(&mut self, at: usize) -> VmResult<()> {
        let n = self.u32(at)? as u64;
        let v = self.utf8(n, at)?;
        self.push(v);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn binunicode8(&mut self, at: usize) -> VmResult<()> {
        let n = self.u64(at)?;
        let v = self.utf8(n, at)?;
        self.push(v);
        Ok(())
    }

    #[inline(always)]
    pub(super) fn unicode(&mut self, at: usize) -> VmResult<()> {
        let l = self.line(at)?;
        let s =
            raw_unicode_escape(l).ok_or_else(|| self.err(at, "bad raw-unicode-escape text in UNICODE"))?;
        self.push(Val::Str(s.into()));
        Ok(())
    }

    #[inline(always)]
    pub(super) fn short_binbytes(&mut self, at: usize) -> VmResult<()> {
        let n = self.u8(at)? as u64;
        let b = self.take(n, at, "bytes")?;
        self.push(Val::Bytes(b.into()));
        Ok(())
    }

    #[inline(always)]
    pub(super) fn binbytes(&mut self, at: usize) -> VmResult<()> {
        let n = self.u32(at)? as u64;
        let b = self.take(n, at, "bytes")?;
        self.push(Val::Bytes(b.into()));
        Ok(())
    }

    /// BINBYTES8 and BYTEARRAY8 (a bytearray is read as bytes).
    #[inline(always)]
    pub(super) fn binbytes8(&mut self, at: usize) -> VmResult<()> {
        let n = self.u64(at)?;
        let b = self.take(n, at, "bytes")?;
        self.push(Val::Bytes(b.into()));
        Ok(())
    }

    #[inline(always)]
    pub(super) fn short_binstring(&mut self, at: usize) -> VmResult<()> {
        let n = self.u8(at)? as u64;
        let b = self.take(n, at, "string")?;
        self.push(py2_str(b));
        Ok(())
    }

    #[inline(always)]
    pub(super) fn binstring(&mut self, at: usize) -> VmResult<()> {
        let n = self.i32(at)?;
        if n < 0 {
            return Err(self.err(at, "BINSTRING with negative length"));
        }
        let b = self.take(n as u64, at, "string")?;
        self.push(py2_str(b));
        Ok(())
    }

    #[inline(always)]
    pub(super) fn string(&mut self, at: usize) -> VmResult<()> {
        let l = self.line(at)?;
        let b = unquote_string(l).ok_or_else(|| self.err(at, "bad quoted text in STRING"))?;
        self.push(py2_str(&b));
        Ok(())
    }

    #[inline(always)]
    fn utf8(&mut self, n: u64, at: usize) -> VmResult<Val> {
        let b = self.take(n, at, "string")?;
        let s = std::str::from_utf8(b).map_err(|_| self.err(at, "string is not valid UTF-8"))?;
        Ok(Val::Str(s.into()))
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

pub(super) fn decode_fixed_int(c: &[u8], signed: bool, big: bool) -> Val {
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
    use super::super::test_support::{b, read};
    use super::*;

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
    fn protocol0_text_opcodes() {
        // {'A': {(1, 2): [3, 4L]}} in protocol 0 with STRING, INT, LONG, UNICODE.
        let p = b"(dp0\nS'A'\np1\n(dp2\n(I1\nI2\ntp3\n(lp4\nI3\naL4L\nassV\\u00e9\n(dsS'B\\x41'\n(ds.";
        let got = read(p).unwrap();
        let names: Vec<_> = got.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, vec!["A", "\u{e9}", "BA"]);
        assert_eq!(got[0].buckets[&b(1, 2)], vec![3, 4]);
    }
}
