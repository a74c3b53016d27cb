//! Bad input quoted in messages, shortened: a 20 MB line or JSON value is named by its
//! first [`QUOTE_CHARS`] characters and its length, not copied whole to stderr.

/// Characters of a bad input quoted at most.
pub(crate) const QUOTE_CHARS: usize = 80;

/// `text` in Rust debug quotes when at most [`QUOTE_CHARS`] characters, else its first
/// [`QUOTE_CHARS`] characters quoted, `…`, and its length in bytes:
/// `"abc…" (20000000 bytes)`.
pub(crate) fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_CHARS) {
        None => format!("{text:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes)", &text[..cut], text.len()),
    }
}

/// `text` as it is (JSON text of a value, say) when at most [`QUOTE_CHARS`] characters,
/// else shortened as [`quote`] does, without the quotes.
pub(crate) fn shorten(text: &str) -> String {
    match text.char_indices().nth(QUOTE_CHARS) {
        None => text.to_owned(),
        Some((cut, _)) => format!("{}… ({} bytes)", &text[..cut], text.len()),
    }
}

/// Bytes of a text enough to shorten it as [`shorten`] does: [`QUOTE_CHARS`] characters
/// and one more, of up to 4 bytes each.
pub(crate) const QUOTE_BYTES: usize = 4 * (QUOTE_CHARS + 1);

/// [`shorten`] for a text of `len` bytes known by its first bytes, `head`: all of it, or at
/// least its first [`QUOTE_BYTES`] (a character cut at the end of `head` is left out). The
/// same as [`shorten`] on the whole text, without holding it.
pub(crate) fn shorten_head(head: &[u8], len: usize) -> String {
    let valid = match std::str::from_utf8(head) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default(),
    };
    if valid.len() == len {
        return shorten(valid);
    }
    match valid.char_indices().nth(QUOTE_CHARS) {
        Some((cut, _)) => format!("{}… ({len} bytes)", &valid[..cut]),
        None => format!("{valid}… ({len} bytes)"),
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

    /// [`shorten_head`] on a text's first [`QUOTE_BYTES`] says what [`shorten`] says on the
    /// whole text, for every length around the cut and characters of 1 to 4 bytes, the
    /// head cut inside a character or not.
    #[test]
    fn a_head_shortens_as_the_whole_text() {
        for unit in ["x", "é", "€", "𝄞", "x€"] {
            for n in [0, 1, QUOTE_CHARS - 1, QUOTE_CHARS, QUOTE_CHARS + 1, 100, 400] {
                for tail in ["", "x", "é", "𝄞"] {
                    let text = unit.repeat(n) + tail;
                    let head = &text.as_bytes()[..text.len().min(QUOTE_BYTES)];
                    assert_eq!(shorten_head(head, text.len()), shorten(&text), "{text}");
                }
            }
        }
        assert_eq!(shorten_head(b"1e23", 4), "1e23");
        assert_eq!(
            shorten_head(&[b'7'; QUOTE_BYTES], 1 << 20),
            format!("{}… (1048576 bytes)", "7".repeat(QUOTE_CHARS))
        );
    }
}
