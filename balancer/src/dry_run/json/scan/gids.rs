//! Gid arrays: plain decimal integers read eight bytes at a time and gathered in a reused
//! array, any other element read as serde_json reads it (and kept as the first bad gid's
//! text when it is not a u32: its text in the file, shortened), the array's punctuation as
//! serde_json checks it.
use super::lex::{
    EOF_WHILE_PARSING_LIST, EOF_WHILE_PARSING_VALUE, EXPECTED_LIST_COMMA_OR_END, TRAILING_COMMA,
};
use super::{Fault, Scanner};
use crate::dry_run::json::types::Gids;
use crate::quote::{shorten, shorten_head, QUOTE_BYTES};

/// The first element of a gid array that is not a u32: its index and text
/// ([`Scanner::element`]).
type Bad = (usize, String);

impl Scanner<'_> {
    /// A value that should be a gid array: the array, or another kind (read, then dropped).
    pub(super) fn gids_value(&mut self) -> Option<Gids> {
        match self.peek() {
            Some(b'[') => self.gids(),
            _ => {
                self.any(false)?;
                Some(Gids::Other)
            }
        }
    }

    /// The gid array whose `[` is peeked.
    fn gids(&mut self) -> Option<Gids> {
        self.enter()?;
        match self.peek() {
            None => return self.peek_error(EOF_WHILE_PARSING_LIST),
            Some(b']') => {
                self.leave();
                return Some(Gids::Array {
                    gids: Vec::new(),
                    bad: None,
                });
            }
            Some(_) => {}
        }
        // Gathered in the reused `scratch`, then copied once into a vector of their
        // number (instead of a vector grown, copied and freed by doubling).
        let mut gids = std::mem::take(&mut self.scratch);
        gids.clear();
        let read = self.elements(&mut gids);
        let array = read.map(|bad| (super::super::file::try_copy(&gids), bad));
        self.scratch = gids;
        let (array, bad) = array?;
        let Some(array) = array else {
            return self.fail(Fault::Memory);
        };
        self.leave();
        (self.progress)(self.pos() as usize);
        Some(Gids::Array { gids: array, bad })
    }

    /// The elements of a gid array, the first one peeked, up to its `]` (peeked): the gids
    /// into `gids` up to the first bad one, returned.
    fn elements(&mut self, gids: &mut Vec<u32>) -> Option<Option<Bad>> {
        loop {
            // A gid and what tells where it ends, in one piece.
            self.fill(16);
            let start = self.at;
            let len = match gid(&self.text()[start..]) {
                Some((gid, len)) => {
                    self.at = start + len;
                    if gids.len() == gids.capacity() && gids.try_reserve(gids.len().max(64)).is_err() {
                        return self.fail(Fault::Memory);
                    }
                    gids.push(gid);
                    len
                }
                None => {
                    if let Some(bad) = self.element(gids)? {
                        return self.rest(bad);
                    }
                    0
                }
            };
            let end = self.pos();
            match self.peek() {
                Some(b',') => {
                    self.at += 1;
                    match self.peek() {
                        Some(b']') => return self.peek_error(TRAILING_COMMA),
                        Some(_) => {}
                        None => return self.peek_error(EOF_WHILE_PARSING_VALUE),
                    }
                }
                Some(b']') => return Some(None),
                next => return self.number_goes_on(next, end, len, gids),
            }
        }
    }

    /// After a gid read as digits, `next` instead of `,` or `]`: the digits begin a number
    /// with a fraction or an exponent (a bad gid, read again whole), or the error.
    #[cold]
    #[inline(never)]
    fn number_goes_on(
        &mut self,
        next: Option<u8>,
        end: u64,
        len: usize,
        gids: &mut Vec<u32>,
    ) -> Option<Option<Bad>> {
        let Some(next) = next else {
            return self.peek_error(EOF_WHILE_PARSING_LIST);
        };
        // Right after the digits, still buffered (no whitespace was skipped).
        if len > 0 && matches!(next, b'.' | b'e' | b'E') && self.pos() == end && self.at >= len {
            self.at -= len;
            gids.pop();
            // Always bad: such a number is an f64.
            if let Some(bad) = self.element(gids)? {
                return self.rest(bad);
            }
            return match self.peek() {
                Some(b']') => Some(None),
                // The rest as if the number were a gid: its `,` and the elements after.
                Some(b',') => self.elements_after(gids),
                Some(_) => self.peek_error(EXPECTED_LIST_COMMA_OR_END),
                None => self.peek_error(EOF_WHILE_PARSING_LIST),
            };
        }
        self.peek_error(EXPECTED_LIST_COMMA_OR_END)
    }

    /// [`Scanner::elements`] from a `,` (peeked).
    #[cold]
    fn elements_after(&mut self, gids: &mut Vec<u32>) -> Option<Option<Bad>> {
        self.at += 1;
        match self.peek() {
            Some(b']') => self.peek_error(TRAILING_COMMA),
            Some(_) => self.elements(gids),
            None => self.peek_error(EOF_WHILE_PARSING_VALUE),
        }
    }

    /// An element that is not a plain gid (peeked), read as serde_json reads it: a gid
    /// pushed onto `gids`, or the first bad one: its index and its text, shortened
    /// ([`shorten`]). A number, string or literal is quoted as the file writes it (`1e23`,
    /// `100000000000000000000000`, not serde_json's `1e+23`); an array or object, which
    /// may span lines, as compact JSON.
    #[cold]
    #[inline(never)]
    fn element(&mut self, gids: &mut Vec<u32>) -> Option<Option<Bad>> {
        let index = gids.len();
        self.peek();
        let start = self.pos();
        let value = self.any(true)?;
        match value.as_u64().and_then(|g| u32::try_from(g).ok()) {
            Some(g) => {
                if gids.try_reserve(1).is_err() {
                    return self.fail(Fault::Memory);
                }
                gids.push(g);
                Some(None)
            }
            None if value.is_array() || value.is_object() => Some(Some((index, shorten(&value.to_string())))),
            None => Some(Some((index, self.token_text(start)?))),
        }
    }

    /// The input's text from offset `start` to the scan, shortened ([`shorten_head`]): from
    /// the buffer, or read again from the source when the token began before it.
    #[cold]
    fn token_text(&mut self, start: u64) -> Option<String> {
        let len = self.pos() - start;
        let want = len.min(QUOTE_BYTES as u64) as usize;
        if let Some(from) = start.checked_sub(self.base) {
            let from = from as usize;
            return Some(shorten_head(&self.text()[from..from + want], len as usize));
        }
        let mut head = [0u8; QUOTE_BYTES];
        let mut got = 0;
        while got < want {
            match self.input.src.read_at(&mut head[got..want], start + got as u64) {
                Ok(0) => return self.fail(Fault::Changed),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return self.fail(Fault::Io(e)),
            }
        }
        Some(shorten_head(&head[..got], len as usize))
    }

    /// The elements after the first bad one (read as serde_json reads them, then dropped),
    /// up to the array's `]` (peeked); `bad`.
    #[cold]
    #[inline(never)]
    fn rest(&mut self, bad: Bad) -> Option<Option<Bad>> {
        let mut first = false;
        while self.next_element(&mut first)? {
            self.any(false)?;
        }
        Some(Some(bad))
    }
}

/// The decimal integer below 2^32 without leading zeros (at most 10 digits) at the start
/// of `text`, and its length; `None` when there is none, or more digits follow.
#[inline]
pub(crate) fn gid(text: &[u8]) -> Option<(u32, usize)> {
    let Some(word) = text.get(..8) else {
        return gid_bytewise(text);
    };
    // Eight bytes at once: a byte is a digit when both its high nibble and that of the
    // byte + 6 are 3. A carry out of a byte only spoils the bytes after it, which come
    // after the first non-digit.
    let x = u64::from_le_bytes(word.try_into().expect("8 bytes"));
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const THREES: u64 = 0x3030_3030_3030_3030;
    let other = ((x & HIGH) ^ THREES) | ((x.wrapping_add(0x0606_0606_0606_0606) & HIGH) ^ THREES);
    let n = (other.trailing_zeros() / 8) as usize;
    if n == 0 || (n > 1 && text[0] == b'0') {
        return None;
    }
    // The n digits at the top of the word (zeros before them), then combined in pairs,
    // fours and eights.
    let v = (x & 0x0F0F_0F0F_0F0F_0F0F) << (8 * (8 - n));
    let v = v.wrapping_mul(10).wrapping_add(v >> 8);
    const PAIRS: u64 = 0x0000_00FF_0000_00FF;
    let v = ((v & PAIRS)
        .wrapping_mul(100 + (1_000_000 << 32))
        .wrapping_add(((v >> 16) & PAIRS).wrapping_mul(1 + (10_000 << 32))))
        >> 32;
    if n < 8 {
        return Some((v as u32, n));
    }
    let (mut g, mut len) = (v, 8);
    while let Some(&d) = text.get(len).filter(|d| d.is_ascii_digit()) {
        if len == 10 {
            return None;
        }
        g = g * 10 + (d - b'0') as u64;
        len += 1;
    }
    Some((u32::try_from(g).ok()?, len))
}

/// [`gid`] a byte at a time (at the end of the input).
fn gid_bytewise(text: &[u8]) -> Option<(u32, usize)> {
    let len = text
        .iter()
        .position(|d| !d.is_ascii_digit())
        .unwrap_or(text.len());
    if len == 0 || len > 10 || (len > 1 && text[0] == b'0') {
        return None;
    }
    let g = text[..len].iter().fold(0u64, |g, &d| g * 10 + (d - b'0') as u64);
    Some((u32::try_from(g).ok()?, len))
}
