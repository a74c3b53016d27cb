//!
//! A scanner for the plain shape neurodamus writes: the three known top-level keys, each
//! at most once, with objects of numbers and of gid arrays, keys without escapes, gids as
//! plain decimal integers below 2^32. It returns what the serde reader would for such a
//! text, and `None` on anything else (another key, an escape, a value of another kind, any
//! invalid JSON), which the serde reader then reads or refuses with its own message.
//!
//! It reads its input (a file, or a text in memory) in chunks into a small reused buffer,
//! scanning each while it is in cache: a large file is never held whole, so its pages are
//! not faulted in, copied out of the page cache into a fresh buffer and freed again. A token
//! cut by a chunk's end is carried to the buffer's start before the next chunk is read.
use std::io;

use serde::Deserialize;

use super::{Entries, Gids, Number, Object, Root, RootObject};
use crate::progress::Progress;

/// Eight spaces, as one word.
const SPACES: u64 = u64::from_ne_bytes(*b"        ");

/// Where scanned bytes come from: a file or a text in memory, read at offsets.
pub(super) trait Source: Sync {
    /// Copies the bytes from `offset` into `buf`: how many (0 at the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
}

impl Source for &[u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let rest = usize::try_from(offset)
            .ok()
            .and_then(|o| self.get(o..))
            .unwrap_or_default();
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        Ok(n)
    }
}

impl Source for std::fs::File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, offset)
    }
}

/// How much is read at a time, and the longest token carried from one chunk to the next
/// (a longer one makes the scan give up: the serde reader then reads the file).
#[derive(Clone, Copy, Debug)]
pub(super) struct Window {
    pub(super) chunk: usize,
    pub(super) keep: usize,
}

/// Chunks that stay in L2 cache between the read and the scan.
pub(super) const WINDOW: Window = Window {
    chunk: 256 << 10,
    keep: 64 << 10,
};

/// Why a scan stopped without reading its input to the end.
#[derive(Debug)]
pub(super) enum Fault {
    /// The source ended before its size: it changed while read.
    Changed,
    /// A read failed.
    Io(io::Error),
    /// A token longer than [`Window::keep`].
    Long,
    /// A gid array could not grow (`try_reserve`: `ulimit -v`, or the machine's memory).
    Memory,
    /// An object's keys (metype, population names) could not grow (`try_reserve`).
    Names,
}

/// What a scan reads: `size` bytes of `src`, in chunks of `window`; the bytes read are
/// added to `read` (the file's first half only when its second half is read by another
/// thread, so that each byte counts once); texts from `parallel_from` bytes have their
/// populations scanned on two threads.
#[derive(Clone, Copy)]
pub(super) struct Input<'a> {
    pub(super) src: &'a dyn Source,
    pub(super) size: u64,
    pub(super) window: Window,
    pub(super) read: &'a Progress,
    pub(super) parallel_from: u64,
}

struct Scanner<'a> {
    input: Input<'a>,
    /// The bytes from offset `base`, valid up to `filled`; the scan is at `at`.
    buf: Vec<u8>,
    base: u64,
    filled: usize,
    at: usize,
    /// Bytes read below this offset are counted in `input.read`.
    count_below: u64,
    /// Told the position after each gid array.
    progress: &'a dyn Fn(usize),
    /// Set once a read could not go on; every later read then stops too.
    fault: Option<Fault>,
    /// The gids of the array being read.
    scratch: Vec<u32>,
}

impl<'a> Scanner<'a> {
    fn new(input: Input<'a>, from: u64, count_below: u64, progress: &'a dyn Fn(usize)) -> Self {
        let len = (input.window.chunk + input.window.keep).min(input.size.saturating_sub(from) as usize);
        Scanner {
            input,
            buf: vec![0; len],
            base: from,
            filled: 0,
            at: 0,
            count_below,
            progress,
            fault: None,
            scratch: Vec::new(),
        }
    }

    /// The offset of the scan in the input.
    #[inline]
    fn pos(&self) -> u64 {
        self.base + self.at as u64
    }

    /// Goes on from `to`, forgetting what is buffered.
    fn seek(&mut self, to: u64) {
        (self.base, self.filled, self.at) = (to, 0, 0);
    }

    /// The bytes buffered.
    #[inline]
    fn text(&self) -> &[u8] {
        &self.buf[..self.filled]
    }

    /// Reads the next chunk, keeping the buffered bytes from `at` (moved to the start);
    /// false at the end of the input or once a read could not go on ([`Fault`]).
    #[cold]
    #[inline(never)]
    fn more(&mut self) -> bool {
        let next = self.base + self.filled as u64;
        if next >= self.input.size || self.fault.is_some() {
            return false;
        }
        let pending = self.filled - self.at;
        if pending > self.input.window.keep {
            self.fault = Some(Fault::Long);
            return false;
        }
        self.buf.copy_within(self.at..self.filled, 0);
        (self.base, self.at, self.filled) = (self.base + self.at as u64, 0, pending);
        let want = (self.input.size - next).min((self.buf.len() - pending) as u64) as usize;
        let mut got = 0;
        while got < want {
            match self
                .input
                .src
                .read_at(&mut self.buf[pending + got..pending + want], next + got as u64)
            {
                Ok(0) => {
                    self.fault = Some(Fault::Changed);
                    return false;
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.fault = Some(Fault::Io(e));
                    return false;
                }
            }
        }
        let counted = self.count_below.saturating_sub(next).min(got as u64);
        self.input.read.add(counted);
        self.filled = pending + got;
        true
    }

    /// Tries to have `n` bytes buffered from `at` (fewer at the end of the input).
    #[inline]
    fn fill(&mut self, n: usize) {
        while self.filled - self.at < n && self.more() {}
    }

    #[inline]
    fn ws(&mut self) {
        loop {
            let (text, mut at) = (self.text(), self.at);
            while let Some(b' ' | b'\n' | b'\r' | b'\t') = text.get(at) {
                // Indentation eight spaces at a time.
                match text
                    .get(at..at + 8)
                    .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")))
                {
                    Some(SPACES) => at += 8,
                    _ => at += 1,
                }
            }
            self.at = at;
            if at < self.filled || !self.more() {
                return;
            }
        }
    }

    #[inline]
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.text().get(self.at).copied()
    }

    #[inline]
    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// The length of the run of bytes from `at` that `keep` accepts, reading on as
    /// needed; the run may end at the end of the input.
    fn run(&mut self, keep: impl Fn(u8) -> bool) -> usize {
        let mut len = 0;
        loop {
            let rest = &self.text()[self.at + len..];
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

    /// A string without escapes or control characters.
    fn string(&mut self) -> Option<String> {
        self.eat(b'"')?;
        let len = self.run(|b| b != b'"' && b != b'\\' && b >= 0x20);
        let start = self.at;
        // The closing quote right after (a control character in a key is invalid JSON).
        if self.text().get(start + len) != Some(&b'"') {
            return None;
        }
        self.at = start + len + 1;
        let key = std::str::from_utf8(&self.text()[start..start + len]).ok()?;
        let key = super::file::try_string(key);
        if key.is_none() {
            self.fault = Some(Fault::Names);
        }
        key
    }

    /// `list.push(item)`, or [`Fault::Names`] when the memory cannot be had.
    fn push<T>(&mut self, list: &mut Vec<T>, item: T) -> Option<()> {
        if list.try_reserve(1).is_err() {
            self.fault = Some(Fault::Names);
            return None;
        }
        list.push(item);
        Some(())
    }

    /// `entries.insert(key, value)`, or [`Fault::Names`] when the memory cannot be had.
    fn insert<V>(&mut self, entries: &mut Entries<V>, key: String, value: V) -> Option<()> {
        let done = entries.insert(key, value);
        if done.is_none() {
            self.fault = Some(Fault::Names);
        }
        done
    }

    /// An object of `value`s; `None` when it is not one.
    fn object<V>(&mut self, mut value: impl FnMut(&mut Self) -> Option<V>) -> Option<Entries<V>> {
        self.eat(b'{')?;
        let mut entries = Entries::new();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(entries);
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            let v = value(self)?;
            self.insert(&mut entries, key, v)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(entries);
                }
                _ => return None,
            }
        }
    }

    /// A number, read by serde_json itself (so it is the same f64).
    fn number(&mut self) -> Option<Number> {
        self.ws();
        let len = self.run(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'));
        let start = self.at;
        self.at = start + len;
        let mut de = serde_json::Deserializer::from_slice(&self.text()[start..start + len]);
        let n = Number::deserialize(&mut de).ok()?;
        de.end().ok()?;
        n.0.is_some().then_some(n)
    }

    /// An array of decimal integers below 2^32 without leading zeros.
    fn gids(&mut self) -> Option<Gids> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.at += 1;
            return Some(Gids::Array {
                gids: Vec::new(),
                bad: None,
            });
        }
        // Gathered in the reused `scratch`, then copied once into a vector of their
        // number (instead of a vector grown, copied and freed by doubling).
        let mut gids = std::mem::take(&mut self.scratch);
        gids.clear();
        let done = loop {
            self.ws();
            // A gid and what tells where it ends, in one piece.
            self.fill(16);
            let Some((gid, len)) = gid(&self.text()[self.at..]) else {
                break false;
            };
            self.at += len;
            if gids.len() == gids.capacity() && gids.try_reserve(gids.len().max(64)).is_err() {
                self.fault = Some(Fault::Memory);
                break false;
            }
            gids.push(gid);
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    break true;
                }
                _ => break false,
            }
        };
        let array = done.then(|| super::file::try_copy(&gids));
        self.scratch = gids;
        let Some(array) = array? else {
            self.fault = Some(Fault::Memory);
            return None;
        };
        (self.progress)(self.pos() as usize);
        Some(Gids::Array {
            gids: array,
            bad: None,
        })
    }
}

/// The decimal integer below 2^32 without leading zeros (at most 10 digits) at the start
/// of `text`, and its length; `None` when there is none, or more digits follow.
#[inline]
pub(super) fn gid(text: &[u8]) -> Option<(u32, usize)> {
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

/// What a scan from the middle of `pop_metype_gids` read.
struct Tail {
    /// The rest of the population it started in: `"metype": [gids]`, in order.
    rest: Vec<(String, Gids)>,
    /// The populations after it, read whole (on the scan's own thread).
    populations: Vec<(String, Entries<Gids>)>,
    /// Where `pop_metype_gids` ends: the scan from the start goes on from there.
    end: u64,
}

impl Scanner<'_> {
    /// A scan from here, assumed to be a metype key inside a population object after a
    /// comma, to the end of `pop_metype_gids`; `None` when the text does not read that
    /// way from here (this was not such a place, or the shape is another).
    fn scan_from(&mut self) -> Option<Tail> {
        let mut rest = Vec::new();
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            let gids = self.gids()?;
            self.push(&mut rest, (key, gids))?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => break,
                _ => return None,
            }
        }
        self.at += 1;
        // The next populations (possibly empty ones), then the end.
        let mut populations = Vec::new();
        loop {
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    let end = self.pos() + 1;
                    return Some(Tail {
                        rest,
                        populations,
                        end,
                    });
                }
                _ => return None,
            }
            let name = self.string()?;
            self.eat(b':')?;
            let metypes = self.object(Scanner::gids)?;
            self.push(&mut populations, (name, metypes))?;
        }
    }

    /// The first place from here from which [`Scanner::scan_from`] may read: a `]` , `"`
    /// sequence (the end of a gid array and the next metype key), at its `"`. Only a
    /// guess: the scan from the start takes it when it gets there in that state.
    fn split(&mut self) -> Option<u64> {
        loop {
            loop {
                match self.text()[self.at..].iter().position(|&b| b == b']') {
                    Some(p) => {
                        self.at += p;
                        break;
                    }
                    None => {
                        self.at = self.filled;
                        if !self.more() {
                            return None;
                        }
                    }
                }
            }
            self.at += 1;
            if self.peek() == Some(b',') {
                self.at += 1;
                if self.peek() == Some(b'"') {
                    return Some(self.pos());
                }
            }
        }
    }
}

/// Files from this size are scanned on two threads.
pub(super) const PARALLEL_FROM: u64 = 1 << 22;

/// A progress callback that ignores its position.
fn ignore(_: usize) {}

/// How many scans took the other thread's result.
#[cfg(test)]
pub(super) static HANDOFFS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Scanner<'_> {
    /// `pop_metype_gids`: an object of objects of gid arrays. A large input's second half
    /// is read and scanned by another thread from a guessed place ([`Scanner::split`]
    /// from the middle); when this scan reaches that place between two metypes of a
    /// population, it takes the other thread's result from there (what it would have
    /// read itself) and goes on after it, else it reads on itself.
    fn populations(&mut self) -> Option<Entries<Object<Gids>>> {
        let input = self.input;
        let mid = input.size / 2;
        let parallel = input.size >= input.parallel_from;
        std::thread::scope(|scope| {
            let (guess_tx, guess_rx) = std::sync::mpsc::channel();
            let mut other = parallel.then(|| {
                // `Some(None)` when no thread can start: its sender is dropped, so
                // this scan reads on itself.
                crate::spawn::scoped(scope, move || {
                    // Its gid arrays come from this thread's allocator arena: grown
                    // at once for about what the half holds (4 B per gid of at least
                    // 6 B of text: "1234,\n"; the arrays are exact).
                    crate::arena::warm(usize::try_from((input.size - mid) / 6 * 4).unwrap_or(usize::MAX));
                    let mut s = Scanner::new(input, mid, u64::MAX, &ignore);
                    let guess = s.split();
                    // The receiver waits for this, or is gone.
                    let _ = guess_tx.send(guess);
                    guess?;
                    let tail = s.scan_from()?;
                    s.fault.is_none().then_some(tail)
                })
            });
            // Where the other scan started, once this one is past the middle.
            let mut guess: Option<Option<u64>> = None;
            self.eat(b'{')?;
            let mut pops = Entries::new();
            if self.peek()? == b'}' {
                self.at += 1;
                return Some(pops);
            }
            loop {
                let name = self.string()?;
                self.eat(b':')?;
                self.eat(b'{')?;
                let mut metypes = Entries::new();
                if self.peek()? != b'}' {
                    loop {
                        let key = self.string()?;
                        self.eat(b':')?;
                        let gids = self.gids()?;
                        self.insert(&mut metypes, key, gids)?;
                        match self.peek()? {
                            b',' => {
                                self.at += 1;
                                let Some(handle) = &mut other else { continue };
                                if self.peek()? != b'"' || self.pos() < mid {
                                    continue;
                                }
                                let at = *guess.get_or_insert_with(|| guess_rx.recv().ok().flatten());
                                if at != Some(self.pos()) {
                                    continue;
                                }
                                let tail = handle.take().and_then(|h| h.join().ok()).flatten();
                                let Some(tail) = tail else {
                                    other = None;
                                    continue;
                                };
                                #[cfg(test)]
                                HANDOFFS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                for (k, g) in tail.rest {
                                    self.insert(&mut metypes, k, g)?;
                                }
                                self.insert(&mut pops, name, Object::Entries(metypes))?;
                                for (name, metypes) in tail.populations {
                                    self.insert(&mut pops, name, Object::Entries(metypes))?;
                                }
                                self.seek(tail.end);
                                (self.progress)(tail.end as usize);
                                return Some(pops);
                            }
                            b'}' => break,
                            _ => return None,
                        }
                    }
                }
                self.at += 1;
                self.insert(&mut pops, name, Object::Entries(metypes))?;
                match self.peek()? {
                    b',' => self.at += 1,
                    b'}' => {
                        self.at += 1;
                        return Some(pops);
                    }
                    _ => return None,
                }
            }
        })
    }
}

/// The top level of `text`, or `None` when it is not of the plain shape; `progress` is
/// told how far it got after each gid array.
pub(super) fn root(text: &[u8], progress: &dyn Fn(usize)) -> Option<Root> {
    root_with(text, progress, PARALLEL_FROM, WINDOW)
}

/// [`root`], on two threads from `parallel_from` bytes, reading `text` by `window`.
pub(super) fn root_with(
    text: &[u8],
    progress: &dyn Fn(usize),
    parallel_from: u64,
    window: Window,
) -> Option<Root> {
    let input = Input {
        src: &text,
        size: text.len() as u64,
        window,
        read: &Progress::new(),
        parallel_from,
    };
    scan(input, progress).ok().flatten()
}

/// The top level of `input`: `Ok(None)` when it is not of the plain shape, and the
/// fault when it could not be read to its end.
pub(super) fn scan(input: Input, progress: &dyn Fn(usize)) -> Result<Option<Root>, Fault> {
    let count_below = if input.size >= input.parallel_from {
        input.size / 2
    } else {
        u64::MAX
    };
    let mut s = Scanner::new(input, 0, count_below, progress);
    let root = root_of(&mut s);
    match s.fault {
        Some(fault) => Err(fault),
        None => Ok(root),
    }
}

fn root_of(s: &mut Scanner) -> Option<Root> {
    let mut keys: Vec<String> = Vec::new();
    let (mut memory, mut synapses, mut populations) = (None, None, None);
    s.eat(b'{')?;
    if s.peek()? != b'}' {
        loop {
            let key = s.string()?;
            s.eat(b':')?;
            match key.as_str() {
                "metype_memory" if memory.is_none() => {
                    memory = Some(Object::Entries(s.object(Scanner::number)?))
                }
                "metype_cell_syn_average" if synapses.is_none() => {
                    synapses = Some(Object::Entries(s.object(Scanner::number)?))
                }
                "pop_metype_gids" if populations.is_none() => {
                    populations = Some(Object::Entries(s.populations()?))
                }
                _ => return None,
            }
            keys.push(key);
            match s.peek()? {
                b',' => s.at += 1,
                b'}' => break,
                _ => return None,
            }
        }
    }
    s.at += 1;
    // Nothing but whitespace after.
    s.peek().is_none().then(|| {
        Root::Object(Box::new(RootObject {
            keys,
            unknown_more: 0,
            memory,
            synapses,
            populations,
        }))
    })
}
