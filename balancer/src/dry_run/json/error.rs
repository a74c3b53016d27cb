//! The error for a dry-run file serde_json cannot read, said in the user's terms: an empty
//! file, a Python non-finite literal, or serde_json's own message with its line and column.
use std::path::Path;

use crate::error::BalancerError;

/// The error for a file that serde_json cannot read: an empty file (or only whitespace)
/// named as such rather than "EOF while parsing", a Python non-finite literal (`NaN`,
/// `Infinity`, which Python's json.dump writes for non-finite floats) named as such,
/// otherwise serde_json's message with its line and column.
pub(crate) fn json_error(text: &[u8], path: &Path, source: serde_json::Error) -> BalancerError {
    if text.iter().all(u8::is_ascii_whitespace) {
        return BalancerError::DryRun {
            path: path.to_owned(),
            field: "$".into(),
            message: "empty file (expected neurodamus' JSON object)".into(),
        };
    }
    if source.is_data() && source.to_string().starts_with(super::file::OUT_OF_MEMORY) {
        return super::file::out_of_memory(path);
    }
    if source.is_data() && source.to_string().starts_with(super::file::NAMES_OUT_OF_MEMORY) {
        return super::file::names_out_of_memory(path);
    }
    match non_finite_literal(text, source.line(), source.column()) {
        Some(lit) => BalancerError::DryRun {
            path: path.to_owned(),
            field: format!("line {} column {}", source.line(), source.column()),
            message: format!(
                "{lit} is not a finite number (memory and synapse counts must be finite and >= 0)"
            ),
        },
        None => BalancerError::Json {
            path: path.to_owned(),
            error: source,
        },
    }
}

/// The Python non-finite literal (`NaN`, `Infinity`, `-Infinity`) at a 1-based line and
/// column of `text`, if one starts there (serde_json reports the column of its first byte,
/// or one past it).
fn non_finite_literal(text: &[u8], line: usize, column: usize) -> Option<&'static str> {
    let line_text = text.split(|&b| b == b'\n').nth(line.checked_sub(1)?)?;
    let from = column.saturating_sub(2);
    let rest = line_text.get(from..)?;
    let rest = &rest[rest.iter().position(|b| !b.is_ascii_whitespace() && *b != b':')?..];
    ["NaN", "-Infinity", "Infinity"]
        .into_iter()
        .find(|lit| rest.starts_with(lit.as_bytes()))
}
