//! The files `ballast dry-run` and `ballast stats` write: never an input, all or none of a
//! command's outputs (a plot on a full disk writes no allocation), the same mode for every
//! file, the sidecar, the plot's content, and the words of the output (signals while
//! writing: `interrupts.rs`).
mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::ballast;
use common::cmd::{files_in, run, stderr};
use serde_json::Value;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The md5 of a file (`md5sum`), or its bytes when md5sum is absent.
fn digest(path: &Path) -> String {
    match Command::new("md5sum").arg(path).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_owned(),
        _ => format!("{:?}", fs::read(path).unwrap()),
    }
}

const DRY_RUN: &str = r#"{"metype_memory": {"A": 100.0, "B": 50.0}, "metype_cell_syn_average": {"A": 10.0},
 "pop_metype_gids": {"P": {"A": [0, 1, 2, 3, 4, 5], "B": [6, 7, 8, 9]}}}"#;

/// Rule 1: `--write-memory-usage` never replaces the dry run it read, by the same path, a
/// `./` spelling or a hard link; the refusal comes before any file is written.
#[test]
fn the_memory_usage_input_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("cell_memory_usage.json"), DRY_RUN).unwrap();
    fs::hard_link(d.join("cell_memory_usage.json"), d.join("link.json")).unwrap();
    let before = digest(&d.join("cell_memory_usage.json"));
    for target in [
        "--write-memory-usage",
        "--write-memory-usage=./cell_memory_usage.json",
        "--write-memory-usage=link.json",
    ] {
        let o = run(
            &[
                "dry-run",
                "--memory-usage",
                "cell_memory_usage.json",
                "--num-target-ranks",
                "2",
                target,
            ],
            d,
        );
        assert!(!o.status.success(), "{target}: {}", stdout(&o));
        let e = stderr(&o);
        assert!(
            e.contains("refusing to write")
                && e.contains("it is the input cell_memory_usage.json (--memory-usage)"),
            "{target}: {e}"
        );
        assert_eq!(
            digest(&d.join("cell_memory_usage.json")),
            before,
            "{target} changed the input"
        );
        assert_eq!(
            files_in(d),
            ["cell_memory_usage.json", "link.json"],
            "{target} wrote something"
        );
    }
    // Another path is written, and said.
    let o = run(
        &[
            "dry-run",
            "--memory-usage",
            "cell_memory_usage.json",
            "--num-target-ranks",
            "2",
            "--write-memory-usage=copy.json",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("wrote copy.json\n"), "{}", stdout(&o));
    assert_eq!(digest(&d.join("cell_memory_usage.json")), before);
}

/// Rule 1 with the issue's exact command: `dry-run --circuit C --memory-usage
/// cell_memory_usage.json --cell-kb 3000 --num-target-ranks 4` in the directory of the file
/// leaves it unchanged (and writes no cell_memory_usage.json unasked).
#[cfg(feature = "sonata")]
#[test]
fn a_circuit_dry_run_leaves_its_memory_usage_file_unchanged() {
    let Some(circuit) = common::shared_data("sonata/allen-layer4_sample") else {
        return;
    };
    let config = circuit.join("circuit_config.json");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A measured file for this circuit: its metypes, with other figures than Ballast's.
    let o = run(
        &[
            "dry-run",
            "--circuit",
            config.to_str().unwrap(),
            "--num-target-ranks",
            "2",
            "--write-memory-usage=m.json",
            "--output-dir",
            "gen",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let mut measured: Value = serde_json::from_slice(&fs::read(d.join("m.json")).unwrap()).unwrap();
    for (_, v) in measured["metype_memory"].as_object_mut().unwrap() {
        *v = serde_json::json!(1234.5);
    }
    fs::write(
        d.join("cell_memory_usage.json"),
        serde_json::to_vec_pretty(&measured).unwrap(),
    )
    .unwrap();
    let before = digest(&d.join("cell_memory_usage.json"));
    let args = [
        "dry-run",
        "--circuit",
        config.to_str().unwrap(),
        "--memory-usage",
        "cell_memory_usage.json",
        "--cell-kb",
        "3000",
        "--num-target-ranks",
        "4",
    ];
    let o = run(&args, d);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(digest(&d.join("cell_memory_usage.json")), before);
    assert!(!stdout(&o).contains("cell_memory_usage.json"), "{}", stdout(&o));
    // Asked to write it there: refused, naming the input.
    let o = run(&[&args[..], &["--write-memory-usage"]].concat(), d);
    assert!(
        !o.status.success() && stderr(&o).contains("refusing to write ./cell_memory_usage.json"),
        "{}",
        stderr(&o)
    );
    assert_eq!(digest(&d.join("cell_memory_usage.json")), before);
}

/// A tmpfs mounted for the test, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        let o = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "tmpfs",
                dir.to_str().unwrap(),
            ])
            .output();
        match o {
            Ok(o) if o.status.success() => Ok(Tmpfs(dir.to_owned())),
            Ok(o) => Err(format!(
                "mount -t tmpfs failed (not root, or no CAP_SYS_ADMIN): {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => Err(format!("cannot run mount: {e}")),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Rule 6: the plot on a full disk fails the command before anything is put in place: no
/// allocation, and the error names the plot file and the cause.
#[test]
fn a_plot_on_a_full_disk_writes_no_allocation_and_names_the_plot() {
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full");
    fs::create_dir(&full).unwrap();
    let _mount = match Tmpfs::mount(&full, "64k") {
        Ok(m) => m,
        Err(reason) => {
            eprintln!("SKIP: {reason}");
            return;
        }
    };
    // Fill it.
    let mut filler = fs::File::create(full.join("filler")).unwrap();
    let chunk = vec![0u8; 4096];
    while std::io::Write::write_all(&mut filler, &chunk).is_ok() {}
    drop(filler);
    let out = dir.path().join("out");
    for plot in ["p.png", "p.svg"] {
        let plot = full.join(plot);
        let o = run(
            &[
                "dry-run",
                "--synthetic",
                "2000",
                "--num-target-ranks",
                "16",
                "--plot",
                plot.to_str().unwrap(),
                "--output-dir",
                out.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert!(!o.status.success(), "{}", stdout(&o));
        let e = stderr(&o);
        assert!(
            e.contains(&format!("cannot write the plot {}", plot.display()))
                && e.contains("No space left on device"),
            "{e}"
        );
        assert!(!e.contains("BackendError"), "{e}");
        assert!(
            !out.exists() || files_in(&out).is_empty(),
            "written: {:?}",
            files_in(&out)
        );
        assert_eq!(files_in(&full), ["filler"]);
    }
}

/// The x-axis labels of an SVG plot: the texts on the row of the label "0" that are numbers.
fn rank_labels(svg: &str) -> Vec<String> {
    let texts: Vec<(String, String)> = svg
        .split("<text ")
        .skip(1)
        .filter_map(|t| {
            let y = t.split("y=\"").nth(1)?.split('"').next()?.to_owned();
            let body = t.split('>').nth(1)?.split('<').next()?.trim().to_owned();
            Some((y, body))
        })
        .collect();
    // The rank labels are the lowest row of numbers (the largest y).
    let row = texts
        .iter()
        .filter(|(_, b)| b.parse::<f64>().is_ok())
        .map(|(y, _)| y.parse::<f64>().unwrap())
        .fold(0.0, f64::max);
    texts
        .into_iter()
        .filter(|(y, b)| y.parse::<f64>().ok() == Some(row) && b.parse::<f64>().is_ok())
        .map(|(_, b)| b)
        .collect()
}

/// Rule 11: ranks are labelled once each by integers; `dry-run --plot` splits cells from
/// synapses as `stats --plot` does (the same bars); plots get the allocation's mode.
#[test]
fn plots_label_each_rank_once_split_synapses_and_share_the_allocation_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = run(
        &[
            "dry-run",
            "--synthetic",
            "400",
            "--num-target-ranks",
            "4",
            "--write-memory-usage",
            "--plot",
            "dry.svg",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for f in [
        "allocation_r4_c1.pkl.gz",
        "allocation_r4_c1.json",
        "cell_memory_usage.json",
        "dry.svg",
    ] {
        assert!(
            stdout(&o).contains(&format!(
                "wrote {}",
                if f.ends_with("svg") {
                    f.to_owned()
                } else {
                    format!("./{f}")
                }
            )),
            "{f}: {}",
            stdout(&o)
        );
    }
    let svg = fs::read_to_string(d.join("dry.svg")).unwrap();
    assert_eq!(rank_labels(&svg), ["0", "1", "2", "3"]);
    // Synapse bars (their colour) are drawn: the synthetic input has synapses.
    let synapse_bars = svg.matches("fill=\"#F4A460\"").count();
    assert!(
        synapse_bars >= 5,
        "{synapse_bars} synapse rectangles (4 bars and the legend)"
    );
    let o = run(
        &[
            "stats",
            "allocation_r4_c1.pkl.gz",
            "--memory-usage",
            "cell_memory_usage.json",
            "--plot",
            "stats.svg",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("wrote stats.svg"), "{}", stderr(&o));
    let stats_svg = fs::read_to_string(d.join("stats.svg")).unwrap();
    let bars = |s: &str| {
        s.lines()
            .filter(|l| l.starts_with("<rect") && (l.contains("#4682B4") || l.contains("#F4A460")))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        bars(&svg),
        bars(&stats_svg),
        "dry-run and stats draw the same cell and synapse bars"
    );
    let mode = |f: &str| fs::metadata(d.join(f)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode("dry.svg"), mode("allocation_r4_c1.pkl.gz"));
    assert_eq!(mode("stats.svg"), mode("allocation_r4_c1.pkl.gz"));
    // A PNG too (same renderer, in memory, then the PNG encoder).
    let o = run(
        &[
            "dry-run",
            "--synthetic",
            "400",
            "--num-target-ranks",
            "4",
            "--plot",
            "dry.png",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(&fs::read(d.join("dry.png")).unwrap()[..8], b"\x89PNG\r\n\x1a\n");
}

/// Rule 11: "1 rank", whole cell counts, populations as a list of objects with a name in
/// both `dry-run --json` and `stats --json`, and the per-population warning.
#[test]
fn words_counts_populations_and_per_population_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = run(&["dry-run", "--synthetic", "240", "--num-target-ranks", "1"], d);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("-> 1 rank × 1 cycle,"), "{}", stdout(&o));
    let o = run(&["stats", "allocation_r1_c1.pkl.gz"], d);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains(": 1 rank × 1 cycle, 2 populations, 240 cells"),
        "{out}"
    );
    let all = out.lines().find(|l| l.starts_with("ALL")).unwrap();
    // "ALL (joint buckets)", cells, total, max bucket, mean bucket (a mean has decimals), min bucket.
    let cols: Vec<&str> = all.split_whitespace().collect();
    assert_eq!(
        (cols[4], cols[5], cols[6], cols[7]),
        ("240", "240", "240.0", "240"),
        "{all}"
    );
    // Both JSON outputs list populations as objects with a name.
    let o = run(
        &[
            "dry-run",
            "--synthetic",
            "240",
            "--num-target-ranks",
            "2",
            "--json",
            "--write-memory-usage",
        ],
        d,
    );
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    let names = |j: &Value| {
        j["populations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&j), ["synthetic_neurons", "synthetic_neurons_1"]);
    assert_eq!(j["populations"][0]["cells"].as_u64(), Some(160));
    let o = run(
        &[
            "stats",
            "allocation_r2_c1.pkl.gz",
            "--json",
            "--memory-usage",
            "cell_memory_usage.json",
        ],
        d,
    );
    let s: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(names(&s), names(&j));
    assert_eq!(s["populations"][1]["total_kb"], j["populations"][1]["total_kb"]);
    // A population of 2 cells over 3 ranks leaves a rank without it: warned by name, in both.
    fs::write(
        d.join("small.json"),
        r#"{"metype_memory": {"A": 10.0, "B": 1.0}, "pop_metype_gids": {"big": {"A": [0, 1, 2, 3, 4, 5]}, "small": {"B": [0, 1]}}}"#,
    )
    .unwrap();
    let o = run(
        &[
            "dry-run",
            "--memory-usage",
            "small.json",
            "--num-target-ranks",
            "3",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let w = "population small is not allocated across the full size of ranks and cycles: 1 of 3 buckets hold none of its cells";
    assert!(
        stderr(&o).contains(w) && !stderr(&o).contains("population big"),
        "{}",
        stderr(&o)
    );
    let o = run(&["stats", "allocation_r3_c1.pkl.gz"], d);
    assert!(stderr(&o).contains(w), "{}", stderr(&o));
}

/// Rule 11: a directory the user cannot write names the directory and the option.
#[test]
fn an_unwritable_directory_names_itself_and_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // As an unprivileged user (root writes anywhere): the binary copied to a world-readable
    // directory, run as nobody in a directory it cannot write.
    let bin = d.join("ballast");
    fs::copy(env!("CARGO_BIN_EXE_ballast"), &bin).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    let probe = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "true"])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("SKIP: cannot run as nobody with setpriv (not root, or setpriv absent)");
        return;
    }
    let o = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(&bin)
        .args(["dry-run", "--synthetic", "100", "--num-target-ranks", "2"])
        .current_dir(d)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("cannot write the outputs in . (--output-dir chooses the directory)")
            && e.contains("Permission denied"),
        "{e}"
    );
    assert!(!e.contains(".tmp"), "{e}");
    // `ballast run --lb-mode=Memory` regenerating its allocation there: --allocation-dir.
    let out = d.join("w");
    fs::create_dir(&out).unwrap();
    assert!(Command::new("chown")
        .args(["nobody", out.to_str().unwrap()])
        .status()
        .unwrap()
        .success());
    let o = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(&bin)
        .args([
            "run",
            "--synthetic",
            "200",
            "--ranks",
            "2",
            "--tstop",
            "2",
            "--output",
            out.join("run").to_str().unwrap(),
        ])
        .current_dir(d)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("the allocation file in . (--allocation-dir chooses that directory)")
            && e.contains("Permission denied"),
        "{e}"
    );
    assert_eq!(files_in(d), ["ballast", "w"]);
    assert!(files_in(&out).is_empty(), "{:?}", files_in(&out));
    // An --output it cannot write: refused before the run and before the allocation file is
    // regenerated in the writable --allocation-dir, naming the option.
    let o = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(&bin)
        .args([
            "run",
            "--synthetic",
            "200",
            "--ranks",
            "2",
            "--tstop",
            "2",
            "--allocation-dir",
        ])
        .arg(&out)
        .current_dir(d)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("cannot write the outputs in ballast-run (--output chooses the directory)")
            && e.contains("Permission denied"),
        "{e}"
    );
    assert_eq!(files_in(d), ["ballast", "w"]);
    assert!(files_in(&out).is_empty(), "{:?}", files_in(&out));
}

/// Rule 8: `dry-run --circuit` and `run --lb-mode=Memory --circuit` share one cost model
/// and its defaults: the run's largest rank estimate is the dry-run's largest bucket, and a
/// file balanced with other costs is reused with a warning naming it and its sidecar.
#[cfg(feature = "sonata")]
#[test]
fn dry_run_and_run_share_the_cost_model_and_the_sidecar_tells_other_costs() {
    let Some(circuit) = common::shared_data("sonata/allen-layer4_sample") else {
        return;
    };
    let config = circuit.join("circuit_config.json");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let dry = |extra: &[&str]| {
        let o = run(
            &[
                &[
                    "dry-run",
                    "--circuit",
                    config.to_str().unwrap(),
                    "--num-target-ranks",
                    "8",
                    "--json",
                ][..],
                extra,
            ]
            .concat(),
            d,
        );
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()
    };
    let j = dry(&[]);
    let run_memory = || {
        let o = run(
            &[
                "run",
                "--lb-mode=Memory",
                "--circuit",
                config.to_str().unwrap(),
                "--ranks",
                "8",
                "--tstop",
                "5",
                "--json",
                "--output",
                "r",
            ],
            d,
        );
        assert!(o.status.success(), "{}", stderr(&o));
        (serde_json::from_slice::<Value>(&o.stdout).unwrap(), stderr(&o))
    };
    let (report, err) = run_memory();
    assert!(!err.contains("other costs"), "{err}");
    let run_max = report["per_rank"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["estimated_kb"].as_f64().unwrap())
        .fold(0.0, f64::max);
    let dry_max = j["max_bucket_kb"].as_f64().unwrap();
    assert!(
        (run_max - dry_max).abs() <= 1e-9 * dry_max,
        "run's largest rank {run_max} KB vs dry-run's largest bucket {dry_max} KB"
    );
    let sidecar: Value = serde_json::from_slice(&fs::read(d.join("allocation_r8_c1.json")).unwrap()).unwrap();
    assert_eq!(
        (
            sidecar["cell_kb_default"].as_f64(),
            sidecar["point_cell_kb_default"].as_f64()
        ),
        (Some(3000.0), Some(40.0))
    );
    // Balanced with another default: the run says so, naming the file, its sidecar and the difference.
    dry(&["--cell-kb", "2000"]);
    let (_, err) = run_memory();
    assert!(
        err.contains("allocation_r8_c1.pkl.gz was balanced with other costs")
            && err.contains("allocation_r8_c1.json"),
        "{err}"
    );
    assert!(
        err.contains("cell KB default 2000 vs") || err.contains("total "),
        "{err}"
    );
}

/// Rule 11: the top-level help describes the whole tool.
#[test]
fn the_help_describes_the_whole_tool() {
    let o = ballast().arg("--help").output().unwrap();
    let h = stdout(&o);
    for word in ["balancer", "runtime", "proxy simulation"] {
        assert!(h.contains(word), "{word} missing from: {h}");
    }
    // dry-run's help states the defaults `run` takes from the library.
    let help = |cmd: &str| {
        stdout(&ballast().args([cmd, "--help"]).output().unwrap())
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let (dry, run) = (help("dry-run"), help("run"));
    for (option, kb) in [("--cell-kb", "3000"), ("--point-cell-kb", "40")] {
        // The option's text: up to its closing "]".
        let after = |h: &str| {
            h.split(&format!("{option} <KB>"))
                .nth(1)
                .unwrap()
                .split(']')
                .next()
                .unwrap()
                .to_owned()
                + "]"
        };
        assert!(
            after(&run).contains(&format!("[default: {kb}]")),
            "run {option}: {}",
            after(&run)
        );
        assert!(
            after(&dry).contains(&format!("[default: {kb}, as ballast run]")),
            "dry-run {option}: {}",
            after(&dry)
        );
    }
}

/// An allocation file that Ballast did not write (no sidecar beside it, as neurodamus' own in
/// its dry-run directory) is replaced with a warning naming it; Ballast's own is replaced
/// silently.
#[test]
fn replacing_another_tools_allocation_file_is_warned_about() {
    let tmp = tempfile::tempdir().unwrap();
    let theirs = tmp.path().join("allocation_r2_c1.pkl.gz");
    fs::write(&theirs, b"neurodamus' own").unwrap();
    let args = [
        "dry-run",
        "--synthetic",
        "200",
        "--num-target-ranks",
        "2",
        "--output-dir",
        ".",
    ];
    let o = run(&args, tmp.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("warning: replacing ./allocation_r2_c1.pkl.gz, which Ballast did not write (no allocation_r2_c1.json beside it"),
        "{err}"
    );
    assert_ne!(fs::read(&theirs).unwrap(), b"neurodamus' own");
    let again = run(&args, tmp.path());
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        !stderr(&again).contains("warning: replacing"),
        "{}",
        stderr(&again)
    );
}
