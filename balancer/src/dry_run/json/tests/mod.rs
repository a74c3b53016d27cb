//! The dry-run reader against its reference (serde_json's `Value` tree, then checks of
//! their own), on random and synthetic files: chunked and two-thread scans, files that
//! change while read. Odd values and invalid JSON: [`kinds`].
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::types::Root;
use super::*;
use crate::dry_run::{DryRun, DryRunWithNotes};

mod kinds;
mod reference;
use reference::read_via_value;

/// What the scan of `text` gives once checked: the dry run and notes, or the error.
fn outcome(scanned: std::result::Result<Root, scan::Fault>, text: &[u8]) -> Result<DryRunWithNotes> {
    let path = Path::new("random.json");
    scanned
        .map_err(|fault| refused(fault, &text, text.len() as u64, path))
        .and_then(|root| finish(root, path))
}

/// The same dry run and notes, or the same error message.
fn same(a: &Result<DryRunWithNotes>, b: &Result<DryRunWithNotes>, what: &dyn Fn() -> String) {
    match (a, b) {
        (Ok(a), Ok(b)) => assert!(a == b, "{}: {a:?} vs {b:?}", what()),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{}", what()),
        (a, b) => panic!("{}: {a:?} vs {b:?}", what()),
    }
}

/// The reader on a text in memory.
fn read(text: &[u8], path: &Path) -> Result<DryRunWithNotes> {
    DryRun::from_json_slice(text, path)
}

/// Cells of [`large_text`]'s dry run.
const LARGE_CELLS: usize = 300_000;

/// The text of a synthetic dry run of [`LARGE_CELLS`] cells (60 metypes, 2 populations,
/// seed 8) as `serde_json::to_vec_pretty` writes it: over [`scan::PARALLEL_FROM`] bytes,
/// so scanned on two threads. Built once for the tests that share it.
fn large_text() -> &'static [u8] {
    static TEXT: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let d = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
            cells: LARGE_CELLS,
            metypes: 60,
            populations: 2,
            seed: 8,
        })
        .unwrap();
        serde_json::to_vec_pretty(&d.to_json_value()).unwrap()
    })
}

/// A random JSON object text: `entries` (key, value text) with keys possibly repeated.
fn object(entries: Vec<(String, String)>) -> String {
    let body: Vec<String> = entries
        .into_iter()
        .map(|(k, v)| format!("{}: {v}", serde_json::to_string(&k).unwrap()))
        .collect();
    format!("{{{}}}", body.join(", "))
}

/// A value of the wrong kind or an edge case, sometimes.
fn odd(rng: &mut ChaCha8Rng) -> String {
    let odd = [
        "null",
        "true",
        "\"7\"",
        "-3",
        "1.5",
        "1e308",
        "5000000000",
        "[1, [2, {\"a\": 3}]]",
        "{\"a\": 1, \"a\": [2]}",
        "-0.0",
        "4294967295",
        "4294967296",
        "99999999999999999999",
        "[]",
        "{}",
    ];
    odd[rng.random_range(0..odd.len())].to_owned()
}

fn number(rng: &mut ChaCha8Rng, clean: bool) -> String {
    match rng.random_range(0..10) {
        0 if !clean => odd(rng),
        1 => format!("{}", rng.random_range(0..5000u32)),
        _ => format!("{:?}", rng.random_range(0.0..5000.0f64)),
    }
}

fn name(rng: &mut ChaCha8Rng, n: usize) -> String {
    name_of(rng.random_range(0..n))
}

fn name_of(i: usize) -> String {
    ["A", "B", "C", "D", "E", "F\"q", "G"][i].to_owned()
}

/// A gid array; when `clean`, of gids counted up from `next` (distinct).
fn gids(rng: &mut ChaCha8Rng, sparse: bool, clean: bool, next: &mut u32) -> String {
    if !clean && rng.random_range(0..25) == 0 {
        return odd(rng);
    }
    let n = rng.random_range(0..12);
    let items: Vec<String> = (0..n)
        .map(|_| match rng.random_range(0..40) {
            0 if !clean => odd(rng),
            _ if clean => {
                *next = next.saturating_add(if sparse {
                    rng.random_range(1..40_000_000)
                } else {
                    1
                });
                format!("{next}")
            }
            _ if sparse => format!("{}", rng.random_range(0..u32::MAX)),
            _ => format!("{}", rng.random_range(0..60u32)),
        })
        .collect();
    format!("[{}]", items.join(",\n        "))
}

fn dry_run_text(rng: &mut ChaCha8Rng) -> String {
    let sparse = rng.random_range(0..4) == 0;
    let clean = rng.random_range(0..2) == 0;
    let mut next = 0u32;
    let mut root = Vec::new();
    let keys = rng.random_range(1..6);
    for k in 0..keys + 3 * clean as usize {
        // Clean files have all three keys (and their metypes) after any random ones.
        let key = match if k >= keys {
            9 + k - keys
        } else {
            rng.random_range(0..12)
        } {
            0 => "other".to_owned(),
            1 => "metype_cell_syn_averag".to_owned(),
            2..=4 | 10 => "metype_memory".to_owned(),
            5..=6 | 9 => "metype_cell_syn_average".to_owned(),
            _ => "pop_metype_gids".to_owned(),
        };
        let value = if !clean && rng.random_range(0..30) == 0 {
            odd(rng)
        } else {
            match key.as_str() {
                "metype_memory" if k >= keys => {
                    object((0..6).map(|i| (name_of(i), number(rng, clean))).collect())
                }
                "metype_memory" | "metype_cell_syn_average" => object(
                    (0..rng.random_range(0..7))
                        .map(|_| (name(rng, 6), number(rng, clean)))
                        .collect(),
                ),
                "pop_metype_gids" => object(
                    (0..rng.random_range(0..4))
                        .map(|_| {
                            let pop = ["P", "Q", "R"][rng.random_range(0..3)].to_owned();
                            next = 0;
                            let per = if !clean && rng.random_range(0..30) == 0 {
                                odd(rng)
                            } else {
                                object(
                                    (0..rng.random_range(0..6))
                                        .map(|_| {
                                            (
                                                name(rng, 7 - clean as usize),
                                                gids(rng, sparse, clean, &mut next),
                                            )
                                        })
                                        .collect(),
                                )
                            };
                            (pop, per)
                        })
                        .collect(),
                ),
                _ => odd(rng),
            }
        };
        root.push((key, value));
    }
    let mut text = if !clean && rng.random_range(0..40) == 0 {
        odd(rng)
    } else {
        object(root)
    };
    match rng.random_range(0..if clean { 1000 } else { 30 }) {
        0 => text.truncate(rng.random_range(0..text.len())),
        1 => text = text.replacen("1.5", "NaN", 1),
        2 => text.push_str(" x"),
        3 => text = format!("{}{text}{}", "[".repeat(130), "]".repeat(130)),
        _ => {}
    }
    text
}

#[test]
fn streaming_reader_matches_the_value_tree_reader_on_random_files() {
    let path = Path::new("random.json");
    let (mut ok, mut failed) = (0, 0);
    for seed in 0..20_000u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let text = dry_run_text(&mut rng);
        let fast = read(text.as_bytes(), path);
        let reference = read_via_value(text.as_bytes(), path);
        match (&fast, &reference) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a, b, "seed {seed}: {text}");
                ok += 1;
            }
            (Err(a), Err(b)) => {
                assert_eq!(a.to_string(), b.to_string(), "seed {seed}: {text}");
                failed += 1;
            }
            _ => panic!("seed {seed}: {fast:?} vs {reference:?} on {text}"),
        }
    }
    // Both outcomes are exercised in number.
    assert!(ok > 1000 && failed > 1000, "{ok} read, {failed} refused");
}

#[test]
fn what_neurodamus_writes_and_odd_gids_read_as_the_reference_reads_them() {
    let path = Path::new("random.json");
    let d = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
        cells: 5_000,
        metypes: 20,
        populations: 2,
        seed: 3,
    })
    .unwrap();
    let text = serde_json::to_vec_pretty(&d.to_json_value()).unwrap();
    for text in [text.clone(), serde_json::to_vec(&d.to_json_value()).unwrap()] {
        let read = read(&text, path).unwrap();
        assert_eq!(read.dry_run.cell_count(), d.cell_count());
        same(&Ok(read), &read_via_value(&text, path), &|| "synthetic".into());
    }
    // The last gid replaced: numbers that are not plain gids, other values, bad JSON.
    for bad in [
        "01",
        "-1",
        "1.0",
        "1e2",
        "1E+2",
        "12.5e-3",
        "4294967296",
        "12345678901",
        "\"1\"",
        "1 2",
        "1,",
        "null",
        "-0",
        "1.",
        "1e",
        "1-",
        "[1]",
        "{}",
        "true",
        "nul",
        "1 .5",
    ] {
        let t = String::from_utf8(text.clone()).unwrap();
        let at = t.rfind(|c: char| c.is_ascii_digit()).unwrap();
        let start = t[..=at].rfind(|c: char| !c.is_ascii_digit()).unwrap() + 1;
        let t = format!("{}{bad}{}", &t[..start], &t[at + 1..]);
        same(
            &read(t.as_bytes(), path),
            &read_via_value(t.as_bytes(), path),
            &|| bad.into(),
        );
    }
    for t in [[&text[..], b" x"].concat(), text[..text.len() - 2].to_vec()] {
        same(&read(&t, path), &read_via_value(&t, path), &|| "end".into());
    }
}

#[test]
fn progress_counts_the_bytes_read_then_parsed() {
    let d = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
        cells: 3_000,
        metypes: 10,
        populations: 2,
        seed: 2,
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cm.json");
    let text = serde_json::to_vec_pretty(&d.to_json_value()).unwrap();
    std::fs::write(&path, &text).unwrap();
    let done = Progress::new();
    let counted = DryRun::from_json_file_with_notes(&path, Some(&done))
        .unwrap()
        .dry_run;
    assert!(counted == read(&text, &path).unwrap().dry_run);
    assert_eq!(counted.cell_count(), 3_000);
    assert_eq!(done.get(), 2 * text.len() as u64);
    // A file read in two halves, scanned on two threads.
    let big_text = large_text();
    assert!(big_text.len() > 1 << 22, "{} bytes", big_text.len());
    std::fs::write(&path, big_text).unwrap();
    let done = Progress::new();
    let counted = DryRun::from_json_file_with_notes(&path, Some(&done))
        .unwrap()
        .dry_run;
    assert!(counted == read(big_text, &path).unwrap().dry_run);
    assert_eq!(counted.cell_count(), LARGE_CELLS);
    assert_eq!(done.get(), 2 * big_text.len() as u64);
    // Truncated: refused with serde's message, as when read in one piece.
    std::fs::write(&path, &big_text[..big_text.len() - 10]).unwrap();
    let e = DryRun::from_json_file_with_notes(&path, None).unwrap_err();
    let one_piece = read(&big_text[..big_text.len() - 10], &path).unwrap_err();
    assert_eq!(e.to_string(), one_piece.to_string());
    // Files of another shape (here: an unknown key) are counted too.
    let other = [b"{\"x\": 1, ".as_slice(), &text[1..]].concat();
    std::fs::write(&path, &other).unwrap();
    let done = Progress::new();
    DryRun::from_json_file_with_notes(&path, Some(&done)).unwrap();
    assert_eq!(done.get(), 2 * other.len() as u64);
}

#[test]
fn two_thread_scan_reads_what_one_thread_reads() {
    let path = Path::new("random.json");
    let before = scan::HANDOFFS.load(Ordering::Relaxed);
    let mut both = 0;
    for seed in 0..20_000u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let text = dry_run_text(&mut rng);
        let t = text.as_bytes();
        let one = outcome(scan::root_with(t, &|_| (), u64::MAX, scan::WINDOW), t);
        let two = outcome(scan::root_with(t, &|_| (), 0, scan::WINDOW), t);
        both += one.is_ok() as usize;
        same(&one, &two, &|| format!("seed {seed}: {text}"));
    }
    // A large file, split across populations and within them.
    let d = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
        cells: 20_000,
        metypes: 40,
        populations: 3,
        seed: 9,
    })
    .unwrap();
    let text = serde_json::to_vec_pretty(&d.to_json_value()).unwrap();
    let a = finish(
        scan::root_with(&text, &|_| (), u64::MAX, scan::WINDOW).unwrap(),
        path,
    )
    .unwrap();
    let b = finish(scan::root_with(&text, &|_| (), 0, scan::WINDOW).unwrap(), path).unwrap();
    assert!(a == b);
    let handoffs = scan::HANDOFFS.load(Ordering::Relaxed) - before;
    assert!(
        both > 500 && handoffs > 100,
        "{both} scanned, {handoffs} handed off"
    );
}

#[test]
fn gid_reads_eight_bytes_at_once_as_the_definition_says() {
    // The definition: the leading run of digits, 1 to 10 of them, no leading zero, < 2^32.
    fn reference(text: &[u8]) -> Option<(u32, usize)> {
        let len = text.iter().take_while(|d| d.is_ascii_digit()).count();
        if len == 0 || len > 10 || (len > 1 && text[0] == b'0') {
            return None;
        }
        let g: u64 = std::str::from_utf8(&text[..len]).unwrap().parse().unwrap();
        Some((u32::try_from(g).ok()?, len))
    }
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    for _ in 0..200_000 {
        let len = rng.random_range(0..20);
        let text: Vec<u8> = (0..len)
            .map(|_| match rng.random_range(0..4) {
                0 => rng.random(),
                1 => b"/:,] \n0"[rng.random_range(0..7)],
                _ => b'0' + rng.random_range(0..10),
            })
            .collect();
        assert_eq!(scan::gid(&text), reference(&text), "{text:?}");
    }
    for text in [
        &b"4294967295,"[..],
        b"4294967296,",
        b"9999999999,",
        b"99999999999",
        b"12345678,",
        b"123456789]",
        b"0,      ",
        b"00,     ",
        b"07,     ",
        b"1",
        b"4294967295",
    ] {
        assert_eq!(scan::gid(text), reference(text), "{text:?}");
    }
}

#[test]
fn scan_by_small_chunks_reads_what_one_chunk_reads() {
    let whole = |len: usize| scan::Window {
        chunk: len.max(1),
        keep: len,
    };
    for seed in 0..4_000u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let text = dry_run_text(&mut rng);
        let t = text.as_bytes();
        let one = outcome(scan::root_with(t, &|_| (), u64::MAX, whole(t.len())), t);
        // Chunk ends fall everywhere: in keys, escapes, numbers, gids and whitespace; and
        // tokens longer than what is kept grow the buffer.
        let n = t.len();
        for (chunk, keep) in [
            (1, n),
            (2, n),
            (3, n),
            (5, n),
            (8, n),
            (13, n),
            (7, 3),
            (4, 12),
            (1, 0),
        ] {
            let window = scan::Window { chunk, keep };
            for parallel_from in [u64::MAX, 0] {
                let parts = outcome(scan::root_with(t, &|_| (), parallel_from, window), t);
                same(&one, &parts, &|| format!("seed {seed}, {window:?}: {text}"));
            }
        }
    }
    let d = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
        cells: 20_000,
        metypes: 40,
        populations: 3,
        seed: 11,
    })
    .unwrap();
    let text = serde_json::to_vec_pretty(&d.to_json_value()).unwrap();
    let one = outcome(
        scan::root_with(&text, &|_| (), u64::MAX, whole(text.len())),
        &text,
    );
    assert!(one.is_ok());
    for (chunk, keep) in [(1, 64), (7, 64), (4093, 64), (65536, 64), (7, 3)] {
        let window = scan::Window { chunk, keep };
        let parts = outcome(scan::root_with(&text, &|_| (), 0, window), &text);
        same(&one, &parts, &|| format!("{window:?}"));
    }
}

#[test]
fn a_control_character_in_a_key_is_refused_as_serde_json_refuses_it() {
    let text = b"{\"metype_memory\": {\"A\n\": 1.0}, \"pop_metype_gids\": {\"P\": {\"A\": [1]}}}";
    let path = Path::new("c.json");
    let e = read(text, path).unwrap_err().to_string();
    assert_eq!(e, read_via_value(text, path).unwrap_err().to_string());
    assert!(e.contains("control character"), "{e}");
}

/// A source that ends early after `ok` bytes, or fails there.
struct Faulty<'a> {
    text: &'a [u8],
    ok: u64,
    fail: bool,
}

impl scan::Source for Faulty<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        if offset >= self.ok {
            return match self.fail {
                true => Err(std::io::Error::other("disk on fire")),
                false => Ok(0),
            };
        }
        let n = buf.len().min((self.ok - offset) as usize);
        scan::Source::read_at(&self.text, &mut buf[..n], offset)
    }
}

#[test]
fn a_file_that_changes_size_while_read_is_not_taken_from_the_scan() {
    let text = large_text();
    let len = text.len() as u64;
    assert!(len >= scan::PARALLEL_FROM);
    // Shorter than its size, in either half (so on either thread), or failing there.
    for (ok, fail) in [
        (len / 4, false),
        (3 * len / 4, false),
        (len - 1, false),
        (len / 4, true),
        (3 * len / 4, true),
    ] {
        let src = Faulty { text, ok, fail };
        let input = scan::Input {
            src: &src,
            size: len,
            window: scan::WINDOW,
            read: &Progress::new(),
            parallel_from: scan::PARALLEL_FROM,
        };
        match (scan::scan(input, &|_| ()), fail) {
            (Err(scan::Fault::Changed), false) => {}
            (Err(scan::Fault::Io(e)), true) => assert_eq!(e.to_string(), "disk on fire"),
            (r, _) => panic!("{ok} {fail}: {:?}", r.err()),
        }
    }
    // A file longer than the size it had (it grew) or shorter (it shrank): an error that
    // says so (it was read on as it grew); of the size it has, read by the scan.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cm.json");
    std::fs::write(&path, [text, b"\n"].concat()).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let done = Progress::new();
    for at_open in [len, len + 2] {
        let e = scan_file(&file, at_open, &path, &done).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "the file changed while it was read ({at_open} bytes when opened, {} bytes now)",
                len + 1
            )),
            "{e}"
        );
    }
    let scanned = scan_file(&file, len + 1, &path, &done).unwrap().dry_run;
    assert!(scanned == read(text, &path).unwrap().dry_run);
    assert_eq!(scanned.cell_count(), LARGE_CELLS);
}

#[test]
fn a_population_found_sparse_midway_finds_the_first_repeat() {
    // Compact gids first (a bitmap), then one beyond it (sorted, then a hash set).
    let path = Path::new("sparse.json");
    for (pop, want) in [
        (r#"{"A": [1, 2, 3], "B": [5, 4000000000, 2]}"#, Some("[\"B\"][2]")),
        (r#"{"A": [1, 2, 3], "B": [2, 4000000000]}"#, Some("[\"B\"][0]")),
        (
            r#"{"A": [1, 2], "B": [3, 4000000000], "C": [4000000000]}"#,
            Some("[\"C\"][0]"),
        ),
        (r#"{"A": [4000000000, 1], "B": [1]}"#, Some("[\"B\"][0]")),
        (r#"{"A": [1, 2], "B": [3, 4000000000], "C": [7]}"#, None),
    ] {
        let text = format!(
            r#"{{"metype_memory": {{"A": 1.0, "B": 2.0, "C": 3.0}}, "pop_metype_gids": {{"P": {pop}}}}}"#
        );
        let fast = read(text.as_bytes(), path);
        let reference = read_via_value(text.as_bytes(), path);
        match (&fast, want) {
            (Err(e), Some(at)) => {
                assert!(e.to_string().contains(at), "{e} for {pop}");
                assert_eq!(e.to_string(), reference.unwrap_err().to_string());
            }
            (Ok(a), None) => assert_eq!(a, &reference.unwrap()),
            _ => panic!("{fast:?} for {pop}"),
        }
    }
}

#[test]
fn streaming_reader_matches_on_a_large_synthetic_file() {
    let d = crate::synthetic::generate(&crate::synthetic::SyntheticSpec {
        cells: 20_000,
        metypes: 50,
        populations: 3,
        seed: 5,
    })
    .unwrap();
    let text = serde_json::to_vec_pretty(&d.to_json_value()).unwrap();
    let path = Path::new("s.json");
    let fast = read(&text, path).unwrap();
    assert_eq!(fast, read_via_value(&text, path).unwrap());
    assert_eq!(fast.dry_run.cell_count(), 20_000);
}
