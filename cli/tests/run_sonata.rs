//! `ballast run` on the shared SONATA circuit `allen-layer4_sample` (feature `sonata`).
#![cfg(feature = "sonata")]
mod common;

/// `--memory-usage` from another circuit (the neurodamus fixture) names none of
/// allen-layer4's metypes: the run says so instead of silently using the defaults.
#[test]
fn a_memory_usage_file_that_misses_metypes_is_reported() {
    let Some(dir) = common::shared_data("sonata/allen-layer4_sample") else {
        return;
    };
    let Some(nd) = common::shared_data("nd-fixtures") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let o = common::ballast()
        .current_dir(work.path())
        .args(["run", "--circuit"])
        .arg(dir.join("circuit_config.json"))
        .arg("--memory-usage")
        .arg(nd.join("cell_memory_usage.json"))
        .args(["--ranks", "2", "--tstop", "5", "--memory-scale", "0.001"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("7 of the circuit's 7 metypes have no measured memory there"),
        "{err}"
    );
}
