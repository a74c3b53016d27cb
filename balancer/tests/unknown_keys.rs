//! Issue 33: a dry-run file with millions of unknown top-level keys kept a note (a warning)
//! per key, some 150 bytes each, collected without a limit. The first 10 are named and the
//! others counted in one more note, and the read keeps no key beyond those.
use ballast_balancer::{DryRun, DryRunWithNotes};
use std::fmt::Write;

/// A dry-run file of the serde shape (an unknown key first) with `n` unknown keys `k0`,
/// `k1`, …, the first one repeated twice.
fn with_unknown_keys(n: usize) -> String {
    let mut text = String::from("{");
    for i in 0..n {
        write!(text, "\"k{i}\": {i}, ").unwrap();
    }
    text.push_str(r#""k0": [1], "k0": {}, "#);
    text.push_str(r#""metype_memory": {"a": 2.5}, "pop_metype_gids": {"p": {"a": [1, 2]}}}"#);
    text
}

#[test]
fn a_million_unknown_keys_give_eleven_notes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cell_memory_usage.json");
    std::fs::write(&path, with_unknown_keys(1_000_000)).unwrap();
    let DryRunWithNotes { dry_run, notes } = DryRun::from_json_file_with_notes(&path, None).unwrap();
    assert_eq!(dry_run.metypes.len(), 1);
    assert_eq!(notes.len(), 11, "{:?}", &notes[..notes.len().min(12)]);
    for (i, note) in notes[..10].iter().enumerate() {
        assert!(note.contains(&format!("ignoring unknown key \"k{i}\"")), "{note}");
    }
    assert!(
        notes[10].ends_with("ignoring 999990 more unknown keys (only the first 10 are named)"),
        "{}",
        notes[10]
    );
}

#[test]
fn up_to_ten_unknown_keys_are_all_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cell_memory_usage.json");
    for n in [1, 10, 11] {
        std::fs::write(&path, with_unknown_keys(n)).unwrap();
        let notes = DryRun::from_json_file_with_notes(&path, None).unwrap().notes;
        assert_eq!(notes.len(), n.min(11), "{n}: {notes:?}");
        if n == 11 {
            assert!(
                notes[10].contains("ignoring 1 more unknown key (only"),
                "{}",
                notes[10]
            );
        }
    }
}
