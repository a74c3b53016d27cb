//! `ballast dry-run --transport-model ballast` with a configuration whose memory model
//! overflows 64 bits (issue 33, finding 6): per-peer receive queues of `--recv-depth`
//! 2^20 buffers of 1 GiB. 16,383 peers (16,384 ranks) still fit; 16,384 peers do not, and
//! the run is refused naming the term, instead of charging a wrapped (small) number.
mod common;

use common::ballast;

fn dry_run(dir: &std::path::Path, ranks: &str) -> std::process::Output {
    ballast()
        .args([
            "dry-run",
            "--synthetic",
            "2000",
            "--synapses",
            "20000",
            "--transport-model",
            "ballast",
            "--recv-sharing",
            "per-peer",
            "--recv-depth",
            "1048576",
            "--buffer-size",
            "1G",
            "--lazy-connect",
            "off",
            "--num-target-ranks",
            ranks,
            "--output-dir",
        ])
        .arg(dir.join(ranks))
        .output()
        .expect("run ballast")
}

#[test]
fn a_transport_charge_that_overflows_is_refused_naming_the_term() {
    let dir = tempfile::tempdir().unwrap();
    let o = dry_run(dir.path(), "16385");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("--transport-model ballast: a rank of 16385 ranks cannot be charged")
            && err.contains("endpoints (16384) x a receive queue's bytes"),
        "{err}"
    );
    assert!(!dir.path().join("16385").exists(), "nothing written");
}
