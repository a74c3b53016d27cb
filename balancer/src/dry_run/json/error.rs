//! The error for a dry-run file that is not JSON, said in the user's terms: an empty file,
//! a Python non-finite literal, or serde_json's own message with its line and column
//! (counted from the input when the error is reported, not while it is scanned), with a
//! hint when the file starts with a UTF-8 byte order mark.
use std::path::Path;

use super::scan::{Source, Syntax};
use crate::error::BalancerError;

/// Bytes read at a time to count lines.
const STEP: usize = 1 << 20;

/// The UTF-8 byte order mark, which some Windows editors put at the start of a file.
const BOM: &[u8; 3] = b"\xEF\xBB\xBF";

/// The hint after serde_json's message for a file that starts with [`BOM`] (serde_json
/// says only `expected value at line 1 column 1`).
const BOM_HINT: &str =
    "the file starts with a UTF-8 byte order mark, which JSON does not allow; save it without one";

/// The error for the invalid JSON `e` in the `size` bytes of `src` (the file at `path`): an
/// empty file (or only whitespace) named as such rather than "EOF while parsing", a Python
/// non-finite literal (`NaN`, `Infinity`, which Python's json.dump writes for non-finite
/// floats) named as such, otherwise serde_json's message with its line and column (and
/// [`BOM_HINT`] when the file starts with a byte order mark).
pub(super) fn syntax_error(src: &dyn Source, size: u64, path: &Path, e: &Syntax) -> BalancerError {
    let io = |error| BalancerError::io(path, error);
    // The line (1-based) and the offset where it starts.
    let (mut line, mut line_start) = (1usize, 0u64);
    let mut buf = vec![0u8; STEP.min(usize::try_from(e.at).unwrap_or(usize::MAX))];
    let mut offset = 0u64;
    while offset < e.at {
        let want = ((e.at - offset) as usize).min(buf.len());
        let got = match read_some(src, &mut buf[..want], offset) {
            Ok(0) => break,
            Ok(n) => n,
            Err(error) => return io(error),
        };
        let part = &buf[..got];
        line += part.iter().filter(|&&b| b == b'\n').count();
        if let Some(p) = part.iter().rposition(|&b| b == b'\n') {
            line_start = offset + p as u64 + 1;
        }
        offset += got as u64;
    }
    let column = ((e.at - line_start) as usize).saturating_sub(e.back);
    match refused(src, size, path, &e.message, line, column, line_start) {
        Ok(e) => e,
        Err(error) => io(error),
    }
}

/// `src.read_at`, again when interrupted.
fn read_some(src: &dyn Source, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    loop {
        match src.read_at(buf, offset) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

/// The error for serde_json's `message` at `line` and `column` (its line starting at offset
/// `line_start`) in the `size` bytes of `src`.
fn refused(
    src: &dyn Source,
    size: u64,
    path: &Path,
    message: &str,
    line: usize,
    column: usize,
    line_start: u64,
) -> std::io::Result<BalancerError> {
    if all_whitespace(src, size)? {
        return Ok(BalancerError::DryRun {
            path: path.to_owned(),
            field: "$".into(),
            message: "empty file (expected neurodamus' JSON object)".into(),
        });
    }
    Ok(
        match non_finite_literal(src, line_start + column.saturating_sub(2) as u64)? {
            Some(lit) => BalancerError::DryRun {
                path: path.to_owned(),
                field: format!("line {line} column {column}"),
                message: format!(
                    "{lit} is not a finite number (memory and synapse counts must be finite and >= 0)"
                ),
            },
            None => BalancerError::JsonSyntax {
                path: path.to_owned(),
                message: message.to_owned(),
                line,
                column,
                hint: (line == 1 && column == 1 && starts_with_bom(src)?).then_some(BOM_HINT),
            },
        },
    )
}

/// Whether `src` starts with [`BOM`].
fn starts_with_bom(src: &dyn Source) -> std::io::Result<bool> {
    let mut head = [0u8; 3];
    let mut got = 0;
    while got < head.len() {
        match read_some(src, &mut head[got..], got as u64)? {
            0 => break,
            n => got += n,
        }
    }
    Ok(&head == BOM)
}

/// Whether the `size` bytes of `src` are all ASCII whitespace (read up to the first that
/// is not).
fn all_whitespace(src: &dyn Source, size: u64) -> std::io::Result<bool> {
    let mut buf = [0u8; 4096];
    let mut offset = 0u64;
    while offset < size {
        let want = ((size - offset) as usize).min(buf.len());
        let got = read_some(src, &mut buf[..want], offset)?;
        if got == 0 {
            break;
        }
        if !buf[..got].iter().all(u8::is_ascii_whitespace) {
            return Ok(false);
        }
        offset += got as u64;
    }
    Ok(true)
}

/// The Python non-finite literal (`NaN`, `Infinity`, `-Infinity`) that starts at offset
/// `from` of `src` after whitespace and colons on the same line, if there is one
/// (serde_json reports the column of its first byte, or one past it: `from` is two bytes
/// before).
fn non_finite_literal(src: &dyn Source, from: u64) -> std::io::Result<Option<&'static str>> {
    let mut buf = [0u8; 256];
    let mut offset = from;
    // The literal's first bytes, once whitespace and colons are behind.
    let mut word = Vec::new();
    loop {
        let got = read_some(src, &mut buf, offset)?;
        if got == 0 {
            break;
        }
        for &b in &buf[..got] {
            if b == b'\n' || word.len() == 9 {
                break;
            }
            if word.is_empty() && (b.is_ascii_whitespace() || b == b':') {
                continue;
            }
            word.push(b);
        }
        if word.len() == 9 || buf[..got].contains(&b'\n') {
            break;
        }
        offset += got as u64;
    }
    Ok(["NaN", "-Infinity", "Infinity"]
        .into_iter()
        .find(|lit| word.starts_with(lit.as_bytes())))
}

/// The error [`syntax_error`] gives for serde_json's error `source` on `text`: the
/// reference the scan's errors are tested against.
#[cfg(test)]
pub(crate) fn json_error(text: &[u8], path: &Path, source: serde_json::Error) -> BalancerError {
    let (line, column) = (source.line(), source.column());
    let suffix = format!(" at line {line} column {column}");
    let whole = source.to_string();
    let message = whole.strip_suffix(&suffix).unwrap_or(&whole);
    let line_start = text
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .nth(line.saturating_sub(2))
        .map_or(0, |(i, _)| i as u64 + 1);
    let line_start = if line <= 1 { 0 } else { line_start };
    refused(&text, text.len() as u64, path, message, line, column, line_start).expect("read from memory")
}
