//! The JSON tokens of the scan, each read as serde_json reads it (its `Deserializer` over a
//! slice, `deserialize_any`): strings with their escapes and UTF-8 check, numbers (converted
//! by serde_json itself, so they are the same u64, i64 or f64), the literals, any value
//! read whole or skipped, and the punctuation of arrays and objects, each error with
//! serde_json's message at the offset serde_json reports.
use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{Fault, Scanner, Syntax};

// serde_json's messages (its `ErrorCode`s' `Display`).
pub(super) const EOF_WHILE_PARSING_LIST: &str = "EOF while parsing a list";
pub(super) const EOF_WHILE_PARSING_OBJECT: &str = "EOF while parsing an object";
pub(super) const EOF_WHILE_PARSING_STRING: &str = "EOF while parsing a string";
pub(super) const EOF_WHILE_PARSING_VALUE: &str = "EOF while parsing a value";
pub(super) const EXPECTED_COLON: &str = "expected `:`";
pub(super) const EXPECTED_LIST_COMMA_OR_END: &str = "expected `,` or `]`";
pub(super) const EXPECTED_OBJECT_COMMA_OR_END: &str = "expected `,` or `}`";
pub(super) const EXPECTED_SOME_IDENT: &str = "expected ident";
pub(super) const EXPECTED_VALUE: &str = "expected value";
pub(super) const INVALID_ESCAPE: &str = "invalid escape";
pub(super) const INVALID_UNICODE_CODE_POINT: &str = "invalid unicode code point";
pub(super) const CONTROL_CHARACTER: &str = "control character (\\u0000-\\u001F) found while parsing a string";
pub(super) const KEY_MUST_BE_A_STRING: &str = "key must be a string";
pub(super) const LONE_LEADING_SURROGATE: &str = "lone leading surrogate in hex escape";
pub(super) const TRAILING_COMMA: &str = "trailing comma";
pub(super) const TRAILING_CHARACTERS: &str = "trailing characters";
pub(super) const UNEXPECTED_END_OF_HEX_ESCAPE: &str = "unexpected end of hex escape";
pub(super) const RECURSION_LIMIT_EXCEEDED: &str = "recursion limit exceeded";

/// A byte of a string that needs no care: not its end, an escape or a control character.
#[inline]
fn plain(b: u8) -> bool {
    b != b'"' && b != b'\\' && b >= 0x20
}

impl Scanner<'_> {
    /// The length of the run of bytes from `at` that `keep` accepts, reading on as
    /// needed (the buffer grows to hold it); the run may end at the end of the input.
    pub(super) fn run(&mut self, keep: impl Fn(u8) -> bool) -> usize {
        let mut len = 0;
        loop {
            let rest = self.text().get(self.at + len..).unwrap_or_default();
            match rest.iter().position(|&b| !keep(b)) {
                Some(p) => return len + p,
                None => {
                    len += rest.len();
                    if !self.more() {
                        return len;
                    }
                }
            }
        }
    }

    /// The string whose `"` is peeked: escapes decoded, checked as serde_json checks it.
    pub(super) fn string(&mut self) -> Option<String> {
        self.at += 1;
        let len = self.run(plain);
        let start = self.at;
        let end = start + len;
        if self.text().get(end) != Some(&b'"') {
            // An escape, a control character or the end of the input: byte by byte.
            let mut content = Vec::new();
            if content.try_reserve(len).is_err() {
                return self.fail(Fault::Names);
            }
            content.extend_from_slice(self.text().get(start..end).unwrap_or_default());
            self.at = end;
            return self.string_rest(content);
        }
        self.at = end + 1;
        let checked = std::str::from_utf8(self.text().get(start..end).unwrap_or_default())
            .map(crate::dry_run::json::file::try_string);
        match checked {
            Ok(Some(s)) => Some(s),
            Ok(None) => self.fail(Fault::Names),
            Err(e) => self.invalid_utf8(len - e.valid_up_to()),
        }
    }

    /// The rest of a string from `at`, `content` what it holds so far.
    #[cold]
    #[inline(never)]
    fn string_rest(&mut self, mut content: Vec<u8>) -> Option<String> {
        loop {
            let rest = self.text().get(self.at..).unwrap_or_default();
            let n = rest.iter().position(|&b| !plain(b)).unwrap_or(rest.len());
            if content.try_reserve(n).is_err() {
                return self.fail(Fault::Names);
            }
            content.extend_from_slice(&rest[..n]);
            self.at += n;
            match self.byte() {
                None => return self.error(EOF_WHILE_PARSING_STRING),
                Some(b'"') => {
                    self.at += 1;
                    break;
                }
                Some(b'\\') => {
                    self.at += 1;
                    self.escape(&mut content)?;
                }
                // More of the string, after a chunk's end.
                Some(b) if plain(b) => {}
                Some(_) => {
                    self.at += 1;
                    return self.error(CONTROL_CHARACTER);
                }
            }
        }
        match String::from_utf8(content) {
            Ok(s) => Some(s),
            Err(e) => {
                let back = e.as_bytes().len() - e.utf8_error().valid_up_to();
                self.invalid_utf8(back)
            }
        }
    }

    /// serde_json's error for invalid UTF-8 in a string just read: at its closing quote's
    /// column less the bytes of its content from the first invalid one.
    #[cold]
    fn invalid_utf8<T>(&mut self, back: usize) -> Option<T> {
        let at = self.pos();
        self.fail(Fault::Syntax(Syntax {
            message: Cow::Borrowed(INVALID_UNICODE_CODE_POINT),
            at,
            back,
        }))
    }

    /// The escape after a `\` (taken), decoded into `content`.
    fn escape(&mut self, content: &mut Vec<u8>) -> Option<()> {
        let Some(c) = self.byte() else {
            return self.error(EOF_WHILE_PARSING_STRING);
        };
        self.at += 1;
        let b = match c {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => b'\x08',
            b'f' => b'\x0c',
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => return self.unicode_escape(content),
            _ => return self.error(INVALID_ESCAPE),
        };
        if content.try_reserve(1).is_err() {
            return self.fail(Fault::Names);
        }
        content.push(b);
        Some(())
    }

    /// Four hex digits (after `\u`).
    fn hex4(&mut self) -> Option<u16> {
        self.fill(4);
        let Some(&[a, b, c, d]) = self.text().get(self.at..self.at + 4) else {
            self.at = self.filled;
            return self.error(EOF_WHILE_PARSING_STRING);
        };
        self.at += 4;
        let digit = |x: u8| (x as char).to_digit(16);
        match (digit(a), digit(b), digit(c), digit(d)) {
            (Some(a), Some(b), Some(c), Some(d)) => Some((a << 12 | b << 8 | c << 4 | d) as u16),
            _ => self.error(INVALID_ESCAPE),
        }
    }

    /// A `\u` escape (taken), a surrogate pair as one, decoded into `content`.
    fn unicode_escape(&mut self, content: &mut Vec<u8>) -> Option<()> {
        let n = self.hex4()?;
        let c = match n {
            0xDC00..=0xDFFF => return self.error(LONE_LEADING_SURROGATE),
            0xD800..=0xDBFF => {
                for expected in [b'\\', b'u'] {
                    match self.byte() {
                        None => return self.error(EOF_WHILE_PARSING_STRING),
                        Some(b) => {
                            self.at += 1;
                            if b != expected {
                                return self.error(UNEXPECTED_END_OF_HEX_ESCAPE);
                            }
                        }
                    }
                }
                let n2 = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&n2) {
                    return self.error(LONE_LEADING_SURROGATE);
                }
                (((n as u32 - 0xD800) << 10) | (n2 as u32 - 0xDC00)) + 0x1_0000
            }
            n => n as u32,
        };
        // Never a surrogate here: always a char.
        let c = char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER);
        if content.try_reserve(4).is_err() {
            return self.fail(Fault::Names);
        }
        content.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
        Some(())
    }

    /// The number whose first byte (`-` or a digit) is peeked, converted by serde_json.
    pub(super) fn number(&mut self) -> Option<serde_json::Number> {
        let len = self.run(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'));
        let start = self.at;
        // serde_json reads no byte past this run but the one after it (and may take it:
        // `1e` then a newline), so the run and that byte are read as the whole text is.
        let token = self
            .text()
            .get(start..(start + len + 1).min(self.filled))
            .unwrap_or_default();
        let mut de = serde_json::Deserializer::from_slice(token);
        match serde_json::Number::deserialize(&mut de) {
            Ok(n) => {
                self.at = start + number_len(token);
                Some(n)
            }
            Err(e) => {
                // Its offset in `token`: on its first line, or just after a newline that
                // follows the run.
                let offset = match e.line() {
                    1 => e.column(),
                    _ => len + 1 + e.column(),
                };
                let suffix = format!(" at line {} column {}", e.line(), e.column());
                let text = e.to_string();
                let message = text.strip_suffix(&suffix).unwrap_or(&text).to_owned();
                let at = self.base + (start + offset) as u64;
                self.fail(Fault::Syntax(Syntax {
                    message: Cow::Owned(message),
                    at,
                    back: 0,
                }))
            }
        }
    }

    /// `null`, `true` or `false`, its first byte peeked; the value it is.
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.at += 1;
        for &expected in word.get(1..).unwrap_or_default() {
            let Some(b) = self.byte() else {
                return self.error(EOF_WHILE_PARSING_VALUE);
            };
            self.at += 1;
            if b != expected {
                return self.error(EXPECTED_SOME_IDENT);
            }
        }
        Some(())
    }

    /// Any value from here: read and checked as serde_json reads it, and its
    /// `serde_json::Value` when `keep` (else `Null`, nothing kept).
    pub(super) fn any(&mut self, keep: bool) -> Option<Value> {
        let Some(b) = self.peek() else {
            return self.peek_error(EOF_WHILE_PARSING_VALUE);
        };
        Some(match b {
            b'n' => {
                self.literal(b"null")?;
                Value::Null
            }
            b't' => {
                self.literal(b"true")?;
                Value::Bool(true).then_if(keep)
            }
            b'f' => {
                self.literal(b"false")?;
                Value::Bool(false).then_if(keep)
            }
            b'-' | b'0'..=b'9' => Value::Number(self.number()?).then_if(keep),
            b'"' => Value::String(self.string()?).then_if(keep),
            b'[' => {
                let mut items = Vec::new();
                self.seq(&mut |s| {
                    let v = s.any(keep)?;
                    if keep {
                        items.push(v);
                    }
                    Some(())
                })?;
                Value::Array(items)
            }
            b'{' => {
                let mut map = Map::new();
                self.map(&mut |s, k| {
                    let v = s.any(keep)?;
                    if keep {
                        map.insert(k, v);
                    }
                    Some(())
                })?;
                Value::Object(map)
            }
            _ => return self.peek_error(EXPECTED_VALUE),
        })
    }

    /// The array whose `[` is peeked, each element read by `element`.
    pub(super) fn seq(&mut self, element: &mut dyn FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.enter()?;
        let mut first = true;
        while self.next_element(&mut first)? {
            element(self)?;
        }
        self.leave();
        Some(())
    }

    /// Whether an array has another element (peeked, after its `,` unless `first`), or
    /// ends (its `]` peeked, not taken).
    pub(super) fn next_element(&mut self, first: &mut bool) -> Option<bool> {
        let Some(b) = self.peek() else {
            return self.peek_error(EOF_WHILE_PARSING_LIST);
        };
        if b == b']' {
            return Some(false);
        }
        if *first {
            *first = false;
            return Some(true);
        }
        if b != b',' {
            return self.peek_error(EXPECTED_LIST_COMMA_OR_END);
        }
        self.at += 1;
        match self.peek() {
            Some(b']') => self.peek_error(TRAILING_COMMA),
            Some(_) => Some(true),
            None => self.peek_error(EOF_WHILE_PARSING_VALUE),
        }
    }

    /// The object whose `{` is peeked, each entry's value read by `entry` given its key.
    pub(super) fn map(&mut self, entry: &mut dyn FnMut(&mut Self, String) -> Option<()>) -> Option<()> {
        self.enter()?;
        let mut first = true;
        while self.next_key(&mut first)? {
            let key = self.string()?;
            self.colon()?;
            entry(self, key)?;
        }
        self.leave();
        Some(())
    }

    /// Whether an object has another entry (its key's `"` peeked, after its `,` unless
    /// `first`), or ends (its `}` peeked, not taken).
    pub(super) fn next_key(&mut self, first: &mut bool) -> Option<bool> {
        let Some(b) = self.peek() else {
            return self.peek_error(EOF_WHILE_PARSING_OBJECT);
        };
        if b == b'}' {
            return Some(false);
        }
        if *first {
            *first = false;
            return match b {
                b'"' => Some(true),
                _ => self.peek_error(KEY_MUST_BE_A_STRING),
            };
        }
        if b != b',' {
            return self.peek_error(EXPECTED_OBJECT_COMMA_OR_END);
        }
        self.at += 1;
        match self.peek() {
            Some(b'"') => Some(true),
            Some(b'}') => self.peek_error(TRAILING_COMMA),
            Some(_) => self.peek_error(KEY_MUST_BE_A_STRING),
            None => self.peek_error(EOF_WHILE_PARSING_VALUE),
        }
    }

    /// The `:` after a key.
    pub(super) fn colon(&mut self) -> Option<()> {
        match self.peek() {
            Some(b':') => {
                self.at += 1;
                Some(())
            }
            Some(_) => self.peek_error(EXPECTED_COLON),
            None => self.peek_error(EOF_WHILE_PARSING_OBJECT),
        }
    }
}

/// A value kept only when asked for (else `Null`).
trait ThenIf {
    fn then_if(self, keep: bool) -> Self;
}

impl ThenIf for Value {
    #[inline]
    fn then_if(self, keep: bool) -> Value {
        if keep {
            self
        } else {
            Value::Null
        }
    }
}

/// The length of the JSON number at the start of `token` (which serde_json read as one):
/// `-`, `0` or digits, a fraction, an exponent, as far as each goes.
fn number_len(token: &[u8]) -> usize {
    let digits = |from: usize| {
        from + token
            .get(from..)
            .unwrap_or_default()
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    let mut i = usize::from(token.first() == Some(&b'-'));
    i = match token.get(i) {
        Some(b'0') => i + 1,
        _ => digits(i),
    };
    if token.get(i) == Some(&b'.') {
        i = digits(i + 1);
    }
    if let Some(b'e' | b'E') = token.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = token.get(i) {
            i += 1;
        }
        i = digits(i);
    }
    i
}
