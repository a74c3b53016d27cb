//! Bad input quoted in messages, shortened: a 20 MB line or JSON value is named by its
//! first [`QUOTE_CHARS`] characters and its length, not copied whole to stderr.

/// Characters of a bad input quoted at most.
pub const QUOTE_CHARS: usize = 80;

/// `text` in Rust debug quotes when at most [`QUOTE_CHARS`] characters, else its first
/// [`QUOTE_CHARS`] characters quoted, `…`, and its length in bytes:
/// `"abc…" (20000000 bytes)`.
pub fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_CHARS) {
        None => format!("{text:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes)", &text[..cut], text.len()),
    }
}

/// `text` as it is (JSON text of a value, say) when at most [`QUOTE_CHARS`] characters,
/// else shortened as [`quote`] does, without the quotes.
pub fn shorten(text: &str) -> String {
    match text.char_indices().nth(QUOTE_CHARS) {
        None => text.to_owned(),
        Some((cut, _)) => format!("{}… ({} bytes)", &text[..cut], text.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_are_cut_with_their_length() {
        assert_eq!(quote("abc"), "\"abc\"");
        let exact = "é".repeat(QUOTE_CHARS);
        assert_eq!(quote(&exact), format!("{exact:?}"));
        let long = "é".repeat(10 * QUOTE_CHARS);
        assert_eq!(
            quote(&long),
            format!("{:?}… ({} bytes)", "é".repeat(QUOTE_CHARS), 20 * QUOTE_CHARS)
        );
        assert_eq!(shorten("[1, 2]"), "[1, 2]");
        assert!(shorten(&"x".repeat(1 << 20)).ends_with("… (1048576 bytes)"));
        assert!(shorten(&"x".repeat(1 << 20)).len() < 120);
    }
}
