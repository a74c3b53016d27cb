//! The scan against serde_json on what is not the plain shape: random files and random
//! mutations of them (bytes changed, cut, inserted: escapes, odd numbers, deep nesting,
//! long tokens, whitespace), read whole, by small chunks and on two threads; each read
//! gives the reference's dry run, or its error (serde_json's message, line and column).
use std::collections::BTreeSet;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;

/// Escapes (and broken ones) put into strings.
const ESCAPES: [&str; 18] = [
    "\\n",
    "\\\"",
    "\\\\",
    "\\/",
    "\\b\\f\\r\\t",
    "\\u00e9",
    "\\u0041",
    "\\ud83d\\ude00",
    "\\uD83D\\uDE00",
    "\\ud800",
    "\\udc00",
    "\\ud800\\u0041",
    "\\ud800x",
    "\\ud800\\x",
    "\\x",
    "\\u12G4",
    "\\u12",
    "é\u{1F600}",
];

/// Numbers of every form, and what is not one.
const NUMBERS: [&str; 26] = [
    "-0",
    "0",
    "-0.0",
    "1e400",
    "-1e400",
    "1e-400",
    "0e999999999999",
    "1e999999999999",
    "123456789012345678901234567890",
    "12345678901234567890.5e-3",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "-9223372036854775809",
    "0.1000000000000000055511151231257827",
    "2.2250738585072011e-308",
    "1.7976931348623157e308",
    "1.",
    "01",
    "-",
    "1e+",
    "1E-5",
    ".5",
    "NaN",
    "Infinity",
    "-Infinity",
];

/// Bytes a change puts in: JSON's punctuation and odd bytes.
const BYTES: &[u8] = b"{}[],:\"\\ \n\r\t\x0c\x00\x1f-+.eE0123456789ntfu\x80\xff\xc3";

/// Nested arrays and objects, `n` deep, around `0`.
fn deep(rng: &mut ChaCha8Rng, n: usize) -> String {
    let objects = rng.random_range(0..2) == 0;
    let (open, close) = if objects { ("{\"k\": ", "}") } else { ("[", "]") };
    format!("{}0{}", open.repeat(n), close.repeat(n))
}

/// A random change to `text`.
fn mutate(rng: &mut ChaCha8Rng, text: &mut Vec<u8>) {
    let len = text.len();
    let at = rng.random_range(0..=len);
    match rng.random_range(0..12) {
        0 | 1 if len > 0 => {
            let b = match rng.random_range(0..3) {
                0 => rng.random(),
                _ => BYTES[rng.random_range(0..BYTES.len())],
            };
            text[at.min(len - 1)] = b;
        }
        2 => text.truncate(at),
        3 | 4 => {
            // An escape just inside a string, or anywhere.
            let quotes: Vec<usize> = (0..len).filter(|&i| text[i] == b'"').collect();
            let at = match quotes.len() {
                0 => at,
                n => quotes[rng.random_range(0..n)] + 1,
            };
            let e = ESCAPES[rng.random_range(0..ESCAPES.len())];
            text.splice(at..at, e.bytes());
        }
        5 | 6 => {
            // A number or a value replaced.
            let digits: Vec<usize> = (0..len).filter(|&i| text[i].is_ascii_digit()).collect();
            let Some(&start) = digits.get(rng.random_range(0..digits.len().max(1))) else {
                return;
            };
            let end = start + text[start..].iter().take_while(|b| b.is_ascii_digit()).count();
            let new = match rng.random_range(0..4) {
                0 => super::odd(rng),
                1 => {
                    let n = [1, 126, 127, 128, 129][rng.random_range(0..5)];
                    deep(rng, n)
                }
                _ => NUMBERS[rng.random_range(0..NUMBERS.len())].to_owned(),
            };
            text.splice(start..end, new.bytes());
        }
        7 => {
            let ws = [" ", "\n", "\r\n", "\t", "\x0c", "\u{a0}", "        "];
            text.splice(at..at, ws[rng.random_range(0..ws.len())].bytes());
        }
        8 if len > 0 => {
            let from = rng.random_range(0..len);
            let to = (from + rng.random_range(0..40)).min(len);
            let piece = text[from..to].to_vec();
            text.splice(at..at, piece);
        }
        9 if len > 0 => {
            let to = (at + rng.random_range(1..6)).min(len);
            text.drain(at.min(to)..to);
        }
        10 => {
            // A long token: a key, a string, a number or whitespace longer than a window.
            let n = rng.random_range(1..300);
            let token = match rng.random_range(0..4) {
                0 => format!("\"{}\"", "k".repeat(n)),
                1 => format!("\"{}\\n\"", "é".repeat(n)),
                2 => format!("0.{}", "7".repeat(n)),
                _ => " ".repeat(n),
            };
            text.splice(at..at, token.bytes());
        }
        _ => {
            let n = [126, 127, 128, 129][rng.random_range(0..4)];
            let d = deep(rng, n);
            text.splice(at..at, d.bytes());
        }
    }
}

/// The message of an error, without its place.
fn message(e: &BalancerError) -> String {
    match e {
        BalancerError::JsonSyntax { message, .. } => message.clone(),
        BalancerError::DryRun { message, .. } if message.contains("finite number") => "non-finite".into(),
        BalancerError::DryRun { message, .. } if message.starts_with("empty file") => "empty".into(),
        _ => "checks".into(),
    }
}

#[test]
fn mutated_files_read_as_serde_json_reads_them() {
    let path = Path::new("random.json");
    let mut seen = BTreeSet::new();
    let mut ok = 0;
    for seed in 0..30_000u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut text = super::dry_run_text(&mut rng).into_bytes();
        for _ in 0..rng.random_range(1..4) {
            mutate(&mut rng, &mut text);
        }
        let reference = read_via_value(&text, path);
        let what = || format!("seed {seed}: {}", String::from_utf8_lossy(&text));
        same(&read(&text, path), &reference, &what);
        match &reference {
            Ok(_) => ok += 1,
            Err(e) => {
                seen.insert(message(e));
            }
        }
        // Every token across chunk ends, and on two threads.
        if seed % 4 == 0 {
            for (chunk, keep, parallel_from) in [(7, 3, u64::MAX), (7, 3, 0), (1, 0, 0), (64, 16, 0)] {
                let window = scan::Window { chunk, keep };
                let parts = outcome(scan::root_with(&text, &|_| (), parallel_from, window), &text);
                same(&parts, &reference, &|| format!("{window:?}, {}", what()));
            }
        }
    }
    // Every message serde_json has for a text, met at least once.
    for m in [
        "EOF while parsing a list",
        "EOF while parsing an object",
        "EOF while parsing a string",
        "EOF while parsing a value",
        "expected `:`",
        "expected `,` or `]`",
        "expected `,` or `}`",
        "expected ident",
        "expected value",
        "invalid escape",
        "invalid number",
        "number out of range",
        "invalid unicode code point",
        "control character (\\u0000-\\u001F) found while parsing a string",
        "key must be a string",
        "lone leading surrogate in hex escape",
        "trailing comma",
        "trailing characters",
        "unexpected end of hex escape",
        "recursion limit exceeded",
        "non-finite",
        "checks",
    ] {
        assert!(seen.contains(m), "never met: {m}; met: {seen:?}");
    }
    assert!(ok > 500, "{ok} read");
}

/// The known parts of a dry-run file around `value` put in one place.
fn in_place(value: &str, place: usize) -> String {
    let known = |memory: &str, gids: &str| {
        format!(
            "{{\"metype_memory\": {{\"A\": {memory}}}, \"pop_metype_gids\": {{\"P\": {{\"A\": {gids}}}}}}}"
        )
    };
    match place {
        0 => value.to_owned(),
        1 => format!("{{\"x\": {value}, {}", &known("1", "[1]")[1..]),
        2 => known(value, "[1]"),
        3 => known("1", &format!("[1, {value}]")),
        4 => known("1", value),
        _ => known(
            &format!("1, {}: {value}", serde_json::to_string(&value).unwrap()),
            "[1]",
        ),
    }
}

#[test]
fn deep_nesting_long_tokens_and_every_kind_read_as_serde_json_reads_them() {
    let path = Path::new("random.json");
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut values: Vec<String> = Vec::new();
    for n in [1, 2, 124, 125, 126, 127, 128, 129, 500] {
        values.push(deep(&mut rng, n));
        values.push(deep(&mut rng, n));
    }
    for n in [1 << 16, (1 << 16) + 1, 1 << 20] {
        values.push(format!("\"{}\"", "k".repeat(n)));
        values.push(format!("\"{}\\u00e9{}\"", "k".repeat(n), "é".repeat(n)));
        values.push(format!("0.{}", "3".repeat(n)));
        values.push(format!("1{}", "0".repeat(n)));
        values.push(format!("[{}]", "1, ".repeat(n / 3) + "-1"));
        values.push(format!("{{\"{}\": 1}}", "q".repeat(n)));
    }
    values.extend(NUMBERS.iter().map(|n| n.to_string()));
    values.extend(ESCAPES.iter().map(|e| format!("\"{e}\"")));
    values.extend(
        [
            "null",
            "true",
            "false",
            "nul",
            "tru",
            "fals",
            "nulx",
            "[]",
            "{}",
            "[1,]",
            "{\"a\":1,}",
            "\"\u{1}\"",
        ]
        .map(String::from),
    );
    for value in &values {
        for place in 0..6 {
            let text = in_place(value, place);
            let t = text.as_bytes();
            let reference = read_via_value(t, path);
            let short = || format!("{place}: {}", crate::quote::shorten(&text));
            same(&read(t, path), &reference, &short);
            for (chunk, keep) in [(7, 3), (4096, 64)] {
                let window = scan::Window { chunk, keep };
                let parts = outcome(scan::root_with(t, &|_| (), 0, window), t);
                same(&parts, &reference, &short);
            }
        }
    }
}

#[test]
fn errors_name_serde_json_line_and_column() {
    let path = Path::new("e.json");
    for (text, want) in [
        ("", "e.json: $: empty file (expected neurodamus' JSON object)"),
        (" \n\x0c ", "e.json: $: empty file (expected neurodamus' JSON object)"),
        ("{\n  \"a\": 1\n    x", "e.json: invalid JSON: expected `,` or `}` at line 3 column 5"),
        ("{\"a\": [1, 2,]}", "e.json: invalid JSON: trailing comma at line 1 column 13"),
        ("{\"a\\q\": 1}", "e.json: invalid JSON: invalid escape at line 1 column 5"),
        ("{\"a\": 1e400}", "e.json: invalid JSON: number out of range at line 1 column 11"),
        ("{\"a\": 01}", "e.json: invalid JSON: invalid number at line 1 column 8"),
        ("{\"a\": nul}", "e.json: invalid JSON: expected ident at line 1 column 10"),
        ("{1: 2}", "e.json: invalid JSON: key must be a string at line 1 column 2"),
        ("{\"a\": \"\\ud800\"}", "e.json: invalid JSON: unexpected end of hex escape at line 1 column 14"),
        ("{} x", "e.json: invalid JSON: trailing characters at line 1 column 4"),
        (
            "{\"metype_memory\": {\"A\": NaN}}",
            "e.json: line 1 column 25: NaN is not a finite number (memory and synapse counts must be finite and >= 0)",
        ),
        // A byte order mark: serde_json's words, and what is wrong; elsewhere, no hint.
        (
            "\u{feff}{\"metype_memory\": {}, \"pop_metype_gids\": {}}",
            "e.json: invalid JSON: expected value at line 1 column 1 (the file starts with a UTF-8 \
             byte order mark, which JSON does not allow; save it without one)",
        ),
        (
            "\u{feff}",
            "e.json: invalid JSON: expected value at line 1 column 1 (the file starts with a UTF-8 \
             byte order mark, which JSON does not allow; save it without one)",
        ),
        ("x{}", "e.json: invalid JSON: expected value at line 1 column 1"),
        (" \u{feff}{}", "e.json: invalid JSON: expected value at line 1 column 2"),
        ("{\"a\": \u{feff}1}", "e.json: invalid JSON: expected value at line 1 column 7"),
    ] {
        let e = read(text.as_bytes(), path).unwrap_err().to_string();
        assert_eq!(e, want);
        assert_eq!(e, read_via_value(text.as_bytes(), path).unwrap_err().to_string());
    }
    // The same from a file, and serde_json's own words for it.
    let bom = "\u{feff}{\"metype_memory\": {\"A\": 1}, \"pop_metype_gids\": {\"P\": {\"A\": [0]}}}";
    let serde = serde_json::from_str::<serde_json::Value>(bom)
        .unwrap_err()
        .to_string();
    assert_eq!(serde, "expected value at line 1 column 1");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cell_memory_usage.json");
    std::fs::write(&file, bom).unwrap();
    let e = DryRun::from_json_file(&file).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: invalid JSON: {serde} (the file starts with a UTF-8 byte order mark, which JSON \
             does not allow; save it without one)",
            file.display()
        )
    );
}

#[test]
fn a_large_file_broken_anywhere_reads_as_serde_json_reads_it() {
    let text = large_text();
    assert!(text.len() as u64 >= scan::PARALLEL_FROM);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cm.json");
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for i in 0..12 {
        let mut t = text.to_vec();
        // In the first half, the second, or near the middle where the other thread starts.
        let at = match i % 3 {
            0 => rng.random_range(0..t.len() / 2),
            1 => rng.random_range(t.len() / 2..t.len()),
            _ => t.len() / 2 + rng.random_range(0..200),
        };
        let b = BYTES[rng.random_range(0..BYTES.len())];
        t[at] = b;
        std::fs::write(&path, &t).unwrap();
        let file = DryRun::from_json_file_with_notes(&path, None);
        let reference = read_via_value(&t, &path);
        same(&file, &reference, &|| format!("{b:?} at {at}"));
    }
}

/// A bad gid is quoted as the file writes it (not as serde_json writes the number back:
/// `1e+23` for both `1e23` and `100000000000000000000000`), a long one cut with its length,
/// an array or object as compact JSON: from a text, a file, and by chunks so small that
/// the token has left the buffer when it ends.
#[test]
fn a_bad_gid_is_quoted_as_the_file_writes_it() {
    let long = format!("1{}", "0".repeat(300));
    let long_string = format!("\"{}\"", "é".repeat(50_000));
    for (gid, quoted) in [
        ("1e23", "1e23".to_owned()),
        ("100000000000000000000000", "100000000000000000000000".into()),
        ("1E+23", "1E+23".into()),
        ("4294967296", "4294967296".into()),
        ("-1", "-1".into()),
        ("2.50", "2.50".into()),
        ("1.0e0", "1.0e0".into()),
        ("\"\\u0031\"", "\"\\u0031\"".into()),
        ("null", "null".into()),
        ("true", "true".into()),
        ("[1,  2]", "[1,2]".into()),
        ("{\"a\":\n 1}", "{\"a\":1}".into()),
        (&long, format!("1{}… (301 bytes)", "0".repeat(79))),
        (&long_string, format!("\"{}… (100002 bytes)", "é".repeat(79))),
    ] {
        let text = format!(
            "{{\"metype_memory\": {{\"A\": 1}}, \"pop_metype_gids\": {{\"P\": {{\"A\": [0, {gid}, 1]}}}}}}"
        );
        let t = text.as_bytes();
        let want = format!(
            "random.json: pop_metype_gids[\"P\"][\"A\"][1]: gid must be an integer in 0..2^32, got {quoted}"
        );
        let path = Path::new("random.json");
        assert_eq!(read(t, path).unwrap_err().to_string(), want);
        assert_eq!(read_via_value(t, path).unwrap_err().to_string(), want);
        for (chunk, keep) in [(7, 3), (1, 1)] {
            let window = scan::Window { chunk, keep };
            let parts = outcome(scan::root_with(t, &|_| (), 0, window), t);
            assert_eq!(parts.unwrap_err().to_string(), want, "{chunk} {keep}");
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("random.json");
        std::fs::write(&file, t).unwrap();
        let e = DryRun::from_json_file(&file).unwrap_err().to_string();
        assert_eq!(e, want.replacen("random.json", file.to_str().unwrap(), 1));
    }
}
