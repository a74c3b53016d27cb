//! `ballast rebalance-corenrn` on a `files.dat` laid out as CoreNEURON's `fscanf` accepts
//! it (the header on one line, several ids on a line, tabs, CRLF, `+`/leading zeros):
//! the same rebalanced `files.dat`, byte for byte, as from the file with one word per
//! line; and a word `%d` would misread refused, naming the file and line.
mod common;

use std::fs;
use std::path::Path;

use common::ballast;

/// Six cell groups of unequal sizes (`{id}_1.dat`, `{id}_2.dat`) in `dir`.
fn data_files(dir: &Path) {
    for (id, kib) in [(3, 40), (6, 10), (1, 25), (4, 5), (5, 30), (0, 15)] {
        fs::write(dir.join(format!("{id}_1.dat")), vec![0u8; 512]).unwrap();
        fs::write(dir.join(format!("{id}_2.dat")), vec![0u8; kib * 1024]).unwrap();
    }
}

/// The rebalanced `files.dat` bytes for `files_dat` text on 2 machines × 2 ranks with
/// `strategy`, or the error message.
fn rebalance(dir: &Path, name: &str, text: &str, strategy: &str) -> Result<Vec<u8>, String> {
    let input = dir.join(name);
    fs::write(&input, text).unwrap();
    let out = dir.join(format!("{name}.out"));
    let o = ballast()
        .args(["rebalance-corenrn", input.to_str().unwrap(), "2"])
        .args(["--ranks-per-node", "2", "--strategy", strategy])
        .arg("--output-file")
        .arg(&out)
        .current_dir(dir)
        .output()
        .unwrap();
    if o.status.success() {
        Ok(fs::read(&out).unwrap())
    } else {
        assert!(!out.exists(), "a refused input leaves no output");
        Err(String::from_utf8_lossy(&o.stderr).into_owned())
    }
}

#[test]
fn any_whitespace_layout_gives_the_same_rebalanced_file() {
    let tmp = tempfile::tempdir().unwrap();
    data_files(tmp.path());
    for (header, ids) in [
        ("1.8\n6\n", "3\n6\n1\n4\n5\n0\n"),
        ("1.8\n-1\n6\n", "3\n6\n1\n4\n5\n0\n"),
    ] {
        for strategy in ["ballast", "neurodamus"] {
            let plain = rebalance(tmp.path(), "plain.dat", &format!("{header}{ids}"), strategy).unwrap();
            let words: Vec<&str> = header.split_whitespace().chain(ids.split_whitespace()).collect();
            let layouts = [
                words.join(" "),
                words.join("\t") + "\n",
                words.join("\r\n") + "\r\n",
                format!(
                    "{} {}\n{}\n",
                    words[0],
                    words[1..words.len() - 6].join(" "),
                    words[words.len() - 6..].join("  ")
                ),
                format!("\n\n {}\n", words.join("\n\n\t")).replace("\t6", "\t+06"),
            ];
            for (i, text) in layouts.iter().enumerate() {
                let got = rebalance(tmp.path(), &format!("layout{i}.dat"), text, strategy)
                    .unwrap_or_else(|e| panic!("{text:?}: {e}"));
                assert_eq!(
                    String::from_utf8_lossy(&got),
                    String::from_utf8_lossy(&plain),
                    "{strategy}: {text:?}"
                );
            }
        }
    }
}

#[test]
fn a_word_fscanf_would_misread_is_refused_naming_its_line() {
    let tmp = tempfile::tempdir().unwrap();
    data_files(tmp.path());
    let e = rebalance(tmp.path(), "bad.dat", "1.8 6\r\n3 6 1\r\n4 5x 0\r\n", "ballast").unwrap_err();
    assert!(
        e.contains("bad.dat: line 3: \"5x\" is not a cell-group id (an int ≥ 0, or -1)"),
        "{e}"
    );
    let e = rebalance(tmp.path(), "extra.dat", "1.8 5 3 6 1 4 5 0", "ballast").unwrap_err();
    assert!(
        e.contains("extra.dat: the count line says 5 entries but 6 entry lines follow"),
        "{e}"
    );
}
