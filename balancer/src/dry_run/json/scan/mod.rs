//! The one reader of a dry-run file's JSON: a streaming scan that reads any JSON text as
//! serde_json reads it (the same values, the same errors at the same line and column) and
//! keeps only what the checks need ([`Root`]), with fast paths for the plain shape
//! neurodamus writes: gid arrays of plain decimal integers, indentation eight spaces at a
//! time, and a large file's populations scanned on two threads.
//!
//! It reads its input (a file, or a text in memory) in chunks into a small reused buffer,
//! scanning each while it is in cache: a large file is never held whole, so its pages are
//! not faulted in, copied out of the page cache into a fresh buffer and freed again. A token
//! cut by a chunk's end is carried to the buffer's start before the next chunk is read; a
//! token longer than the buffer grows it (up to the input's size).
//!
//! Submodules: [`lex`] (strings, numbers, literals, any value read or skipped, the object
//! and array punctuation), [`gids`] (gid arrays), [`shape`] (the dry run's objects and the
//! two-thread scan of `pop_metype_gids`).
use std::borrow::Cow;
use std::io;

use super::types::Root;
use crate::progress::Progress;

mod gids;
mod lex;
mod shape;

#[cfg(test)]
pub(super) use gids::gid;
#[cfg(test)]
pub(super) use shape::HANDOFFS;

/// Eight spaces, as one word.
const SPACES: u64 = u64::from_ne_bytes(*b"        ");

/// serde_json's nesting limit: the 128th array or object open at once is refused.
const DEPTH: u8 = 128;

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

/// How much is read at a time, and how much of a token cut by a chunk's end is carried
/// into a buffer of that size (a longer token grows the buffer while it is read).
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
    /// A gid array, or the buffer for a long token, could not grow (`try_reserve`:
    /// `ulimit -v`, or the machine's memory).
    Memory,
    /// An object's keys (metype, population names) could not grow (`try_reserve`).
    Names,
    /// The text is not JSON: serde_json's error.
    Syntax(Syntax),
}

/// Invalid JSON as serde_json reports it: its message, and the offset in the input whose
/// line and column serde_json names, `back` bytes before it on its line (serde_json's
/// column of an invalid UTF-8 byte in a string). The line and column are only counted
/// when the error is reported ([`super::error::syntax_error`]).
#[derive(Debug)]
pub(super) struct Syntax {
    pub(super) message: Cow<'static, str>,
    pub(super) at: u64,
    pub(super) back: usize,
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
    /// Set once the scan cannot go on (the first cause is kept); every later read then
    /// stops too.
    fault: Option<Fault>,
    /// The gids of the array being read.
    scratch: Vec<u32>,
    /// Arrays and objects that may still open (serde_json's recursion limit).
    depth: u8,
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
            depth: DEPTH,
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

    /// Reads the next chunk, keeping the buffered bytes from `at` (moved to the start, the
    /// buffer grown when they leave no room for a chunk); false at the end of the input or
    /// once the scan cannot go on ([`Fault`]).
    #[cold]
    #[inline(never)]
    fn more(&mut self) -> bool {
        let next = self.base + self.filled as u64;
        if next >= self.input.size || self.fault.is_some() {
            return false;
        }
        let pending = self.filled - self.at;
        self.buf.copy_within(self.at..self.filled, 0);
        (self.base, self.at, self.filled) = (self.base + self.at as u64, 0, pending);
        let Window { chunk, keep } = self.input.window;
        let normal = chunk + keep;
        if pending > keep {
            // A long token: room for a chunk after it, and never more than the input's rest.
            let rest = usize::try_from(self.input.size - self.base).unwrap_or(usize::MAX);
            let len = pending.saturating_add(chunk.max(1)).min(rest);
            if len > self.buf.len() {
                if self.buf.try_reserve_exact(len - self.buf.len()).is_err() {
                    self.fault = Some(Fault::Memory);
                    return false;
                }
                self.buf.resize(len, 0);
            }
        } else if self.buf.len() > normal {
            // Back to the usual size once a long token is behind.
            self.buf.truncate(normal);
            self.buf.shrink_to_fit();
        }
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

    /// Skips JSON whitespace (as serde_json: space, tab, newline, carriage return).
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

    /// The next byte after whitespace, not taken; `None` at the end of the input.
    #[inline]
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.text().get(self.at).copied()
    }

    /// The byte at the scan, not taken (whitespace included); `None` at the end.
    #[inline]
    fn byte(&mut self) -> Option<u8> {
        self.fill(1);
        self.text().get(self.at).copied()
    }

    /// Stops the scan for `fault`, unless it already stopped (the first cause is kept).
    #[cold]
    fn fail<T>(&mut self, fault: Fault) -> Option<T> {
        if self.fault.is_none() {
            self.fault = Some(fault);
        }
        None
    }

    /// Stops the scan for invalid JSON at `at` (serde_json's `error`: the offset after the
    /// bytes taken).
    #[cold]
    fn error<T>(&mut self, message: &'static str) -> Option<T> {
        let at = self.pos();
        self.fail(Fault::Syntax(Syntax {
            message: Cow::Borrowed(message),
            at,
            back: 0,
        }))
    }

    /// Stops the scan for invalid JSON at the byte peeked (serde_json's `peek_error`: the
    /// offset after it, at most the input's size).
    #[cold]
    fn peek_error<T>(&mut self, message: &'static str) -> Option<T> {
        let at = (self.pos() + 1).min(self.input.size);
        self.fail(Fault::Syntax(Syntax {
            message: Cow::Borrowed(message),
            at,
            back: 0,
        }))
    }

    /// Opens an array or object (its bracket peeked), within serde_json's nesting limit.
    #[inline]
    fn enter(&mut self) -> Option<()> {
        self.depth -= 1;
        if self.depth == 0 {
            return self.peek_error(lex::RECURSION_LIMIT_EXCEEDED);
        }
        self.at += 1;
        Some(())
    }

    /// Closes an array or object (its bracket peeked).
    #[inline]
    fn leave(&mut self) {
        self.depth += 1;
        self.at += 1;
    }
}

/// Files from this size are scanned on two threads.
pub(super) const PARALLEL_FROM: u64 = 1 << 22;

/// The top level of `text`, or why it cannot be read; `progress` is told how far it got
/// after each gid array.
pub(super) fn root(text: &[u8], progress: &dyn Fn(usize)) -> Result<Root, Fault> {
    root_with(text, progress, PARALLEL_FROM, WINDOW)
}

/// [`root`], on two threads from `parallel_from` bytes, reading `text` by `window`.
pub(super) fn root_with(
    text: &[u8],
    progress: &dyn Fn(usize),
    parallel_from: u64,
    window: Window,
) -> Result<Root, Fault> {
    let input = Input {
        src: &text,
        size: text.len() as u64,
        window,
        read: &Progress::new(),
        parallel_from,
    };
    scan(input, progress)
}

/// The top level of `input`, or the fault that stopped the scan.
pub(super) fn scan(input: Input, progress: &dyn Fn(usize)) -> Result<Root, Fault> {
    let count_below = if input.size >= input.parallel_from {
        input.size / 2
    } else {
        u64::MAX
    };
    let mut s = Scanner::new(input, 0, count_below, progress);
    let root = s.root();
    match (s.fault, root) {
        (None, Some(root)) => Ok(root),
        (Some(fault), _) => Err(fault),
        // Every stop sets its fault; were one missed, the text is refused all the same.
        (None, None) => Err(Fault::Syntax(Syntax {
            message: Cow::Borrowed(lex::EXPECTED_VALUE),
            at: s.base + s.at as u64,
            back: 0,
        })),
    }
}
