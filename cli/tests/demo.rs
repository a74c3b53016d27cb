//! `ballast demo` from the command line: it passes its check, and its capped row says how
//! many peers go past the cap, whatever the environment says.
mod common;

use common::ballast;

#[test]
fn demo_passes_its_check() {
    let dir = tempfile::tempdir().unwrap();
    let o = ballast()
        .current_dir(dir.path())
        .args(["demo", "--cells", "3000", "--ranks", "6", "--tstop", "30"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        stdout.lines().any(
            |l| l.starts_with("check: identical spikes in the RoundRobin and Memory runs (")
                && l.ends_with("): ok")
        ),
        "{stdout}"
    );
    // The labels say what each row is: the scale is --memory-scale, the measured row is
    // apart from the predicted ones and names the configuration run, no run-time row.
    assert!(
        stdout.contains("largest rank, Ballast-accounted (MB, --memory-scale 0.002)"),
        "{stdout}"
    );
    let measured = stdout
        .lines()
        .position(|l| l == "transport per rank, largest (KB), measured in the runs:")
        .expect("measured section");
    assert!(
        stdout
            .lines()
            .nth(measured + 1)
            .unwrap()
            .starts_with("  shared, no endpoint cap "),
        "{stdout}"
    );
    assert!(
        stdout.contains("  shared, no endpoint cap (the configuration run) "),
        "{stdout}"
    );
    assert!(!stdout.contains("run time"), "{stdout}");
    assert!(dir.path().join("ballast-demo/allocation_r6_c1.pkl.gz").exists());
    assert!(dir.path().join("ballast-demo/memory/out.dat").exists());
    // The allocation has its sidecar, and the Memory run reads the file without a warning
    // about other costs (the same digest as the run's).
    assert!(
        stdout.contains("dry run: wrote ballast-demo/allocation_r6_c1.pkl.gz\ndry run: wrote ballast-demo/allocation_r6_c1.json\n"),
        "{stdout}"
    );
    let sidecar: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("ballast-demo/allocation_r6_c1.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (
            sidecar["written_by"].as_str(),
            sidecar["ranks"].as_u64(),
            sidecar["cells"].as_u64()
        ),
        (Some("ballast demo"), Some(6), Some(3000)),
        "{sidecar}"
    );
    // The total is rounded to 0.001 KB (no last-bit noise of the sum).
    let t = sidecar["total_kb"].as_f64().unwrap();
    assert!(t > 0.0 && (t * 1000.0).round() / 1000.0 == t, "{sidecar}");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("other costs"), "{stderr}");
    // The rows' settings are printed; with 6 ranks no rank has more than 5 peers, so the
    // capped row says none goes past the cap of 8.
    assert!(
        stdout.contains(
            "settings (fixed: the demo reads no BALLAST_* variable; ballast run and ballast info take them): \
             the runs use local, shared, no endpoint cap, buffer_count 64 x buffer_size 8192 B; the capped row \
             shared + max_endpoints=8 (--max-endpoints), endpoint_overflow=datagram\n"
        ),
        "{stdout}"
    );
    assert_eq!(demo_most_peers(dir.path()), 5);
    assert!(
        stdout.contains("  shared + max_endpoints=8 (at most 5 peers: none past it) "),
        "{stdout}"
    );
    assert!(!stdout.contains("(datagram"), "{stdout}");
}

/// The largest `peers_predicted` of the demo's two runs (report.json).
fn demo_most_peers(dir: &std::path::Path) -> usize {
    ["roundrobin", "memory"]
        .iter()
        .flat_map(|m| {
            let r: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(dir.join("ballast-demo").join(m).join("report.json")).unwrap(),
            )
            .unwrap();
            let v: Vec<usize> = r["per_rank"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x["peers_predicted"].as_u64().unwrap() as usize)
                .collect();
            v
        })
        .max()
        .unwrap()
}

/// `ballast demo --max-endpoints 3` on 6 ranks: the capped row says how many peers go past
/// the cap over datagrams and its KB are the model's for the rank with the most peers;
/// `BALLAST_MAX_ENDPOINTS` and `BALLAST_ENDPOINT_OVERFLOW` do not change it (the demo's
/// settings are fixed, and printed).
#[test]
fn demo_capped_row_says_how_many_peers_go_past_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let o = ballast()
        .current_dir(dir.path())
        .env("BALLAST_MAX_ENDPOINTS", "1")
        .env("BALLAST_ENDPOINT_OVERFLOW", "evict")
        .args([
            "demo",
            "--cells",
            "3000",
            "--ranks",
            "6",
            "--tstop",
            "30",
            "--max-endpoints",
            "3",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        stdout.contains(
            "the capped row shared + max_endpoints=3 (--max-endpoints), endpoint_overflow=datagram\n"
        ),
        "{stdout}"
    );
    let most = demo_most_peers(dir.path());
    assert!(most > 3, "the circuit's peers: {most}");
    let label = format!(
        "  shared + max_endpoints=3 (datagram, up to {} peers past it)",
        most - 3
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&label))
        .unwrap_or_else(|| panic!("{label:?} in {stdout}"));
    let capped = ballast_runtime::TransportConfig {
        recv_sharing: ballast_runtime::RecvSharing::Shared,
        max_endpoints: 3,
        ..*ballast_runtime::RuntimeConfig::default().transport()
    }
    .predict(most, 6, 1);
    assert_eq!(capped.datagram_peers, (most - 3) as u64);
    let kb = format!("{:.0}", capped.total_bytes() as f64 / 1024.0);
    assert!(line.split_whitespace().any(|w| w == kb), "{kb} KB in {line:?}");
}

/// An output that exists and is not a regular file (here a FIFO at the Memory run's
/// out.dat) is refused before anything runs, naming it, as `ballast run` does: no circuit,
/// no allocation, no RoundRobin run first (issue 33, review item 11).
#[test]
fn demo_refuses_a_fifo_output_before_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ballast-demo");
    std::fs::create_dir_all(out.join("memory")).unwrap();
    let fifo = out.join("memory/out.dat");
    let s = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(s.success(), "mkfifo {}", fifo.display());
    let o = ballast()
        .current_dir(dir.path())
        .args(["demo", "--cells", "600", "--ranks", "2", "--tstop", "5"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("refusing to write ballast-demo/memory/out.dat: it exists and is a FIFO"),
        "{err}"
    );
    // Nothing was done: no allocation, no RoundRobin run; the FIFO is still a FIFO.
    assert!(!out.join("allocation_r2_c1.pkl.gz").exists());
    assert!(!out.join("roundrobin").exists());
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
}
