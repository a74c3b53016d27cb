//! CoreNEURON's `files.dat` read as CoreNEURON reads it (`nrn_read_filesdat` in
//! `coreneuron/io/nrn_setup.cpp`, NEURON 9.0.2): `fscanf(fp, "%s\n", version)` into a
//! `char version[256]`, then `fscanf(fp, "%d\n", ...)` for the count (or `-1` and the
//! count) and each of `count` ids. `fscanf` skips any whitespace before each of them and
//! needs none after, so the file is a sequence of words, not of lines: blank lines, tabs,
//! CRLF, `1.8 5` on one line and several ids on a line all read the same as one word per
//! line. A version of more than 255 bytes would overflow CoreNEURON's buffer and is refused.
//! What CoreNEURON would misread is refused too: a word after the header that is not an
//! int ≥ -1 (`%d` would stop at it or read part of it), and (in [`FilesDat::entries`]) ids
//! beyond the count, which CoreNEURON silently ignores, unless `--max-entries` says how
//! many to take. The layout of the groups is [`crate::corenrn`]'s.
use std::path::Path;

use crate::corenrn::{CorenrnError, MAX_LINES};
use crate::quote::quote;

type Result<T> = std::result::Result<T, CorenrnError>;

/// Longest version CoreNEURON reads: its `char version[256]` less the terminating NUL.
pub const MAX_VERSION_BYTES: usize = 255;

/// One id of a `files.dat` after its header ([`FilesDat::lines`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilesDatEntry {
    /// The 1-based line it is on (several ids may share a line).
    pub line: usize,
    /// The id in decimal as CoreNEURON reads it with `%d` (`+7` and `007` are `7`): the
    /// name of its data files (`7_1.dat`).
    pub text: String,
    /// Its value; `-1` is the skip mark.
    pub id: i32,
}

/// A parsed `files.dat`: the header and every id after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilesDat {
    /// The version word (CoreNEURON checks it against its own).
    pub version: String,
    /// The count line was `-1` (gap junctions) and the count followed.
    pub gap_junctions: bool,
    /// The count line's value.
    pub count: u64,
    /// The ids after the header, in file order, skip marks included.
    pub lines: Vec<FilesDatEntry>,
}

impl FilesDat {
    /// Reads and parses `path` ([`FilesDat::parse`]). Memory and time are proportional to
    /// the file's size.
    pub fn read(path: &Path) -> Result<FilesDat> {
        let io = |error| CorenrnError::Io {
            path: path.to_owned(),
            error,
        };
        // A regular file, read to its size when opened (a FIFO would hang, a device be read
        // without end).
        let bytes = crate::read_file::read_regular(path, u64::MAX).map_err(|e| io(e.into_io()))?;
        let text = String::from_utf8(bytes).map_err(|_| {
            io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "not UTF-8 text: not a files.dat",
            ))
        })?;
        FilesDat::parse(&text, path)
    }

    /// Parses the text of a `files.dat` (`path` for messages) as CoreNEURON reads it: a
    /// sequence of words separated by any C whitespace (space, tab, newline, CR, VT, FF; a
    /// line break is not needed, CRLF is plain whitespace): the version (one word of at most
    /// [`MAX_VERSION_BYTES`] bytes), the count (or `-1` and the count), then one integer per
    /// word (ids ≥ 0, or the skip mark `-1`), any number on a line. Ids are kept as
    /// CoreNEURON reads them with `%d` (`+7` and `007` are `7`: CoreNEURON opens `7_1.dat`).
    /// Every word after the header must be an id; how many must agree with the count is
    /// [`FilesDat::entries`]' business. Bad input is quoted shortened: its first 80
    /// characters and its length in bytes.
    pub fn parse(text: &str, path: &Path) -> Result<FilesDat> {
        let format = |line: usize, message: String| CorenrnError::Format {
            path: path.to_owned(),
            line,
            message,
        };
        let mut words = words(text);
        // The line after the last one, for "missing" messages.
        let end = text.lines().count() + 1;
        let (n, version) = words.next().ok_or_else(|| {
            let what = if text.is_empty() {
                "the file is empty"
            } else {
                "the file holds only blank lines"
            };
            format(1, format!("no version line: {what}"))
        })?;
        if version.len() > MAX_VERSION_BYTES {
            return Err(format(
                n,
                format!(
                    "a version of {} bytes ({}): CoreNEURON reads it into char[256], at most {MAX_VERSION_BYTES} bytes",
                    version.len(),
                    quote(version)
                ),
            ));
        }
        let mut count_word = |what: &str| -> Result<(usize, i64)> {
            let (n, w) = words
                .next()
                .ok_or_else(|| format(end, format!("no {what} line after the version")))?;
            let v = w
                .parse::<i64>()
                .map_err(|_| format(n, format!("{} is not a {what} (an integer)", quote(w))))?;
            Ok((n, v))
        };
        let (n, first) = count_word("count")?;
        let (gap_junctions, (n, count)) = if first == -1 {
            (true, count_word("count (after the gap-junction mark -1)")?)
        } else {
            (false, (n, first))
        };
        if !(0..=MAX_LINES as i64).contains(&count) {
            return Err(format(
                n,
                format!("count {count}: give 0 to {MAX_LINES} (CoreNEURON reads it as an int)"),
            ));
        }
        let mut entries = Vec::new();
        for (n, w) in words {
            let id = w.parse::<i32>().ok().filter(|&v| v >= -1).ok_or_else(|| {
                format(
                    n,
                    format!("{} is not a cell-group id (an int ≥ 0, or -1)", quote(w)),
                )
            })?;
            entries.push(FilesDatEntry {
                line: n,
                text: id.to_string(),
                id,
            });
        }
        Ok(FilesDat {
            version: version.to_owned(),
            gap_junctions,
            count: count as u64,
            lines: entries,
        })
    }

    /// The cell groups to rebalance, in file order: the entry lines chosen by `max_entries`
    /// (neurodamus' `--max-entries`: `None`, the count line's, which must then agree with the
    /// lines; `Some(0)`, every line; `Some(n)`, the first `n`), without skip marks. Errors:
    /// a count that disagrees, `n` above the lines, a group listed twice.
    pub fn entries(&self, path: &Path, max_entries: Option<u64>) -> Result<Vec<FilesDatEntry>> {
        let lines = self.lines.len() as u64;
        let take = match max_entries {
            None if self.count != lines => {
                return Err(CorenrnError::CountMismatch {
                    path: path.to_owned(),
                    count: self.count,
                    lines,
                })
            }
            None | Some(0) => lines,
            Some(n) if n > lines => {
                return Err(CorenrnError::TooFewLines {
                    path: path.to_owned(),
                    asked: n,
                    lines,
                })
            }
            Some(n) => n,
        };
        let mut seen = std::collections::HashMap::new();
        let mut out = Vec::new();
        for e in &self.lines[..take as usize] {
            if e.id == -1 {
                continue;
            }
            if let Some(first) = seen.insert(e.id, e.line) {
                return Err(CorenrnError::Duplicate {
                    path: path.to_owned(),
                    line: e.line,
                    first,
                    id: e.id,
                });
            }
            out.push(e.clone());
        }
        Ok(out)
    }
}

/// Whitespace as C's `isspace` sees it in the "C" locale (what `fscanf` skips): space,
/// `\t`, `\n`, `\v`, `\f`, `\r`. Rust's `char::is_whitespace` would also split at
/// Unicode spaces, which `fscanf` reads as part of a word.
fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// The words of `text` as `fscanf("%s")` / `("%d")` find them, each with its 1-based line.
fn words(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut line = 1;
    let mut rest = text;
    std::iter::from_fn(move || {
        let start = rest.find(|c| !is_c_space(c))?;
        line += rest[..start].matches('\n').count();
        rest = &rest[start..];
        let len = rest.find(is_c_space).unwrap_or(rest.len());
        let (word, after) = rest.split_at(len);
        rest = after;
        Some((line, word))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(line: usize, text: &str, id: i32) -> FilesDatEntry {
        FilesDatEntry {
            line,
            text: text.into(),
            id,
        }
    }

    #[test]
    fn parses_plain_and_gap_junction_headers() {
        let p = Path::new("f.dat");
        let f = FilesDat::parse("1.8\n3\n3\n6\n-1\n", p).unwrap();
        assert_eq!(f.version, "1.8");
        assert!(!f.gap_junctions);
        assert_eq!(f.count, 3);
        assert_eq!(f.lines.iter().map(|l| l.id).collect::<Vec<_>>(), vec![3, 6, -1]);
        assert_eq!(f.entries(p, None).unwrap(), [entry(3, "3", 3), entry(4, "6", 6)]);
        // neurodamus' append mode pads the count with spaces.
        let f = FilesDat::parse("1.8\n-1\n         2\n4\n\n5\n", p).unwrap();
        assert!(f.gap_junctions);
        assert_eq!(f.count, 2);
        assert_eq!(f.lines.len(), 2);
    }

    #[test]
    fn refuses_bad_files() {
        let p = Path::new("f.dat");
        let err = |t: &str| FilesDat::parse(t, p).unwrap_err().to_string();
        assert_eq!(err(""), "f.dat: line 1: no version line: the file is empty");
        assert_eq!(err("1.8\n"), "f.dat: line 2: no count line after the version");
        assert_eq!(
            err("1.8\nx\n"),
            "f.dat: line 2: \"x\" is not a count (an integer)"
        );
        assert!(err("1.8\n-5\n").starts_with("f.dat: line 2: count -5: give 0 to"));
        assert_eq!(
            err("1.8\n2\n1\nabc\n"),
            "f.dat: line 4: \"abc\" is not a cell-group id (an int ≥ 0, or -1)"
        );
        assert!(err("1.8\n1\n-2\n").contains("line 3"));
        let f = FilesDat::parse("1.8\n3\n1\n2\n", p).unwrap();
        let e = f.entries(p, None).unwrap_err().to_string();
        assert!(
            e.contains("the count line says 3 entries but 2 entry lines follow"),
            "{e}"
        );
        assert_eq!(f.entries(p, Some(0)).unwrap().len(), 2);
        assert_eq!(f.entries(p, Some(1)).unwrap().len(), 1);
        assert!(f
            .entries(p, Some(3))
            .unwrap_err()
            .to_string()
            .contains("only 2 entry lines"));
        let f = FilesDat::parse("1.8\n3\n1\n2\n1\n", p).unwrap();
        assert_eq!(
            f.entries(p, None).unwrap_err().to_string(),
            "f.dat: line 5: cell group 1 already appears on line 3"
        );
    }

    /// Finding 15: blank lines (or spaces) before the version, the count, the count after
    /// the gap-junction mark are skipped, as `fscanf` does.
    #[test]
    fn blank_lines_before_the_header_are_read_as_coreneuron_does() {
        let p = Path::new("f.dat");
        let f = FilesDat::parse("\n\n  \n1.8\n\n\n2\n3\n4\n", p).unwrap();
        assert_eq!((f.version.as_str(), f.count, f.gap_junctions), ("1.8", 2, false));
        assert_eq!(f.lines, [entry(8, "3", 3), entry(9, "4", 4)]);
        let f = FilesDat::parse("\n1.8\n\n-1\n\n \n1\n5\n", p).unwrap();
        assert_eq!((f.count, f.gap_junctions), (1, true));
        assert_eq!(f.lines, [entry(8, "5", 5)]);
        let err = |t: &str| FilesDat::parse(t, p).unwrap_err().to_string();
        assert_eq!(
            err("\n \n"),
            "f.dat: line 1: no version line: the file holds only blank lines"
        );
        assert_eq!(err("1.8\n\n\n"), "f.dat: line 4: no count line after the version");
    }

    /// Finding 14: a version longer than CoreNEURON's buffer is refused, and bad lines are
    /// quoted shortened with their length.
    #[test]
    fn long_versions_are_refused_and_long_lines_quoted_short() {
        let p = Path::new("f.dat");
        let ok = "v".repeat(MAX_VERSION_BYTES);
        assert_eq!(FilesDat::parse(&format!("{ok}\n0\n"), p).unwrap().version, ok);
        let huge = "v".repeat(20 << 20);
        for version in ["v".repeat(MAX_VERSION_BYTES + 1), huge.clone()] {
            let e = FilesDat::parse(&format!("{version}\n0\n"), p)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!(
                    "f.dat: line 1: a version of {} bytes (\"vvv",
                    version.len()
                )) && e.ends_with("CoreNEURON reads it into char[256], at most 255 bytes"),
                "{}",
                &e[..e.len().min(300)]
            );
            assert!(e.len() < 300, "{} bytes", e.len());
        }
        for text in [
            format!("1.8\n{huge}\n"),
            format!("1.8\n1\n{huge}\n"),
            format!("{huge} x\n1\n"),
        ] {
            let e = FilesDat::parse(&text, p).unwrap_err().to_string();
            assert!(
                e.len() < 300 && e.contains("vvv\"… (2097"),
                "{}",
                &e[..e.len().min(300)]
            );
        }
    }

    /// CoreNEURON reads words, not lines (`fscanf` "%s" then "%d"): the header on one line,
    /// several ids on a line, tabs, CRLF, VT/FF and no final newline read as the file with
    /// one word per line; ids are read as `%d` reads them.
    #[test]
    fn any_whitespace_separates_words_as_fscanf_does() {
        let p = Path::new("f.dat");
        let values = |f: &FilesDat| {
            (
                f.version.clone(),
                f.gap_junctions,
                f.count,
                f.lines.iter().map(|l| (l.text.clone(), l.id)).collect::<Vec<_>>(),
            )
        };
        let plain = values(&FilesDat::parse("1.8\n4\n3\n6\n-1\n9\n", p).unwrap());
        for text in [
            "1.8 4\n3\n6\n-1\n9\n",
            "1.8 4 3 6 -1 9",
            "1.8\t4\n3\t6\t-1\t9\n",
            "1.8\r\n4\r\n3\r\n6\r\n-1\r\n9\r\n",
            " 1.8\x0b4\x0c3 \r 6\n\n\t-1 +9",
            "1.8\n4\n003 6\n-1 0009\n",
        ] {
            let f = FilesDat::parse(text, p).unwrap();
            assert_eq!(values(&f), plain, "{text:?}");
            assert_eq!(
                f.entries(p, None)
                    .unwrap()
                    .iter()
                    .map(|e| e.id)
                    .collect::<Vec<_>>(),
                vec![3, 6, 9]
            );
        }
        // Line numbers are those of each word, for messages.
        let f = FilesDat::parse("1.8 2\r\n\r\n5 7\r\n", p).unwrap();
        assert_eq!(f.lines, [entry(3, "5", 5), entry(3, "7", 7)]);
        let f = FilesDat::parse("1.8\n-1 2\n5 5\n", p).unwrap();
        assert!(f.gap_junctions);
        assert_eq!(
            f.entries(p, None).unwrap_err().to_string(),
            "f.dat: line 3: cell group 5 already appears on line 3"
        );
        // A Unicode space is not C whitespace: `fscanf` reads it as part of the word.
        let err = |t: &str| FilesDat::parse(t, p).unwrap_err().to_string();
        assert_eq!(
            err("1.8\n2\n1\u{a0}2\n"),
            "f.dat: line 3: \"1\\u{a0}2\" is not a cell-group id (an int ≥ 0, or -1)"
        );
        // What `%d` would stop at or read in part is refused, on the line where it is.
        assert_eq!(
            err("1.8 2 1 2x"),
            "f.dat: line 1: \"2x\" is not a cell-group id (an int ≥ 0, or -1)"
        );
        assert_eq!(
            err("1.8 2\n1 2\n\n3.5\n"),
            "f.dat: line 4: \"3.5\" is not a cell-group id (an int ≥ 0, or -1)"
        );
        assert_eq!(
            err("1.8 1 2147483648"),
            "f.dat: line 1: \"2147483648\" is not a cell-group id (an int ≥ 0, or -1)"
        );
        assert_eq!(
            err("1.8 two 1"),
            "f.dat: line 1: \"two\" is not a count (an integer)"
        );
        // Ids after the count, which CoreNEURON ignores, are refused unless asked for.
        let f = FilesDat::parse("1.8 2 1 2 3", p).unwrap();
        assert!(f
            .entries(p, None)
            .unwrap_err()
            .to_string()
            .contains("the count line says 2 entries but 3 entry lines follow"));
        assert_eq!(f.entries(p, Some(2)).unwrap().len(), 2);
    }
}
