//! `ballast run` and `ballast fanout` over the shared-memory transport (issue 36): as
//! threads (`--ranks`), and as one rank per process with srun's variables set here
//! (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_JOB_ID`, `SLURM_STEP_ID`: the processes meet at
//! the node's abstract socket named by the job step, no MPI). out.dat is identical to the
//! local transport's; the footprint equals the model on every rank. (Under `mpirun` and a
//! real `srun`: ci/test.sh and ci/slurm.sh.)
mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::ballast;

const RUN: [&str; 9] = [
    "run",
    "--synthetic",
    "800",
    "--synapses-per-cell",
    "150",
    "--tstop",
    "40",
    "--memory-scale",
    "0.001",
];

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `n` processes of `args` with srun's variables for job step `job`.0 on one node, their
/// outputs by rank.
fn slurm(dir: &Path, n: usize, job: &str, args: &[&str]) -> Vec<Output> {
    let children: Vec<_> = (0..n)
        .map(|r| {
            let mut c: Command = ballast();
            c.current_dir(dir)
                .args(args)
                .env("SLURM_PROCID", r.to_string())
                .env("SLURM_NTASKS", n.to_string())
                .env("SLURM_JOB_ID", job)
                .env("SLURM_STEP_ID", "0")
                .env("SLURM_STEP_NUM_NODES", "1")
                .env("BALLAST_BOOTSTRAP_TIMEOUT", "60")
                .env_remove("BALLAST_ROOT")
                .env_remove("OMPI_COMM_WORLD_RANK")
                .env_remove("PMI_RANK")
                .env_remove("BALLAST_RANK");
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect()
}

fn job(what: &str) -> String {
    format!("test-{}-{what}", std::process::id())
}

#[test]
fn run_over_shm_as_threads_and_processes_matches_local() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let read = |out: &str| std::fs::read(d.join(out).join("out.dat")).unwrap();
    ok(&ballast()
        .current_dir(d)
        .args(RUN)
        .args(["--ranks", "1", "--output", "ref"])
        .output()
        .unwrap());
    let stdout = ok(&ballast()
        .current_dir(d)
        .args(RUN)
        .args(["--ranks", "3", "--transport", "shm", "--output", "threads"])
        .output()
        .unwrap());
    assert!(stdout.contains("3 ranks over shm (shared)"), "{stdout}");
    assert!(stdout.contains("footprint measured = predicted: yes"), "{stdout}");
    assert_eq!(read("threads"), read("ref"));
    let outs = slurm(
        d,
        3,
        &job("run"),
        &[&RUN[..], &["--transport", "shm", "--output", "procs"]].concat(),
    );
    let stdout = ok(&outs[0]);
    assert!(stdout.contains("3 ranks over shm (shared)"), "{stdout}");
    assert!(stdout.contains("footprint measured = predicted: yes"), "{stdout}");
    for o in &outs[1..] {
        assert_eq!(ok(o), "", "only rank 0 prints");
    }
    assert_eq!(read("procs"), read("ref"));
    // `auto` without an RDMA device picks shm for processes that srun put on one node.
    let outs = slurm(
        d,
        2,
        &job("auto"),
        &[&RUN[..], &["--transport", "auto", "--output", "auto"]].concat(),
    );
    ok(&outs[1]);
    let stdout = ok(&outs[0]);
    let err = String::from_utf8_lossy(&outs[0].stderr);
    assert!(
        err.contains("; using shm (2 processes, all on this node by SLURM_STEP_NUM_NODES)"),
        "{err}"
    );
    assert!(stdout.contains("2 ranks over shm (shared)"), "{stdout}");
    assert_eq!(read("auto"), read("ref"));
    let auto: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("auto/report.json")).unwrap()).unwrap();
    let first = auto["transport_notes"][0].as_str().unwrap_or_default();
    assert!(first.contains("using shm (2 processes"), "{auto}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("procs/report.json")).unwrap()).unwrap();
    assert_eq!(report["transport"], "shm");
    assert_eq!(report["ranks"], 3);
    assert_eq!(report["footprint_match"], true);
}

#[test]
fn fanout_over_shm_processes_matches_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let outs = slurm(
        dir.path(),
        4,
        &job("fanout"),
        &["fanout", "--transport", "shm", "--json"],
    );
    let r: serde_json::Value = serde_json::from_str(&ok(&outs[0])).unwrap();
    assert_eq!(r["ranks"], 4);
    assert_eq!(r["peers_connected"], 3);
    assert_eq!(r["model_matches_accounting"], true);
    let fp = r["after"]["footprint_bytes"].as_u64().unwrap();
    assert_eq!(r["predicted_footprint_bytes"].as_u64().unwrap(), fp);
    assert_eq!(r["after"]["world_footprint_bytes"].as_u64().unwrap(), 4 * fp);
    for o in &outs[1..] {
        assert_eq!(ok(o), "", "only rank 0 prints");
    }
    // --ranks that differs from the launch is refused on every rank.
    let outs = slurm(
        dir.path(),
        2,
        &job("ranks"),
        &["fanout", "--transport", "shm", "--ranks", "3"],
    );
    for o in outs {
        assert_eq!(o.status.code(), Some(1));
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            e.contains("--ranks 3 differs from the 2 processes of the launch"),
            "{e}"
        );
    }
}
