//! What the commands say when given the wrong kind of thing: an `--output-dir` that exists
//! and is not a directory (a regular file, a FIFO: never the real /dev), an allocation
//! pickle given as `--memory-usage`, a dry-run file saved with a UTF-8 byte order mark, and
//! `ballast info --transport mpi` in a build without MPI, `run` and `fanout` over shm without a way to meet. Each asserts the exact message and, for a refusal, a non-zero exit with the path
//! left as it was.
mod common;

use std::fs;
use std::path::Path;

use common::cmd::{files_in, run, stderr};

fn mkfifo(path: &Path) {
    let s = std::process::Command::new("mkfifo").arg(path).status().unwrap();
    assert!(s.success(), "mkfifo {}", path.display());
}

/// A regular file and a FIFO given as `--output-dir` are refused naming the path and
/// saying it is not a directory (before: `File exists (os error 17)`), and left as they
/// were.
#[test]
fn an_output_dir_that_is_not_a_directory_is_refused_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a_file");
    fs::write(&file, b"kept").unwrap();
    let fifo = dir.path().join("a_fifo");
    mkfifo(&fifo);
    for (name, path) in [("a_file", &file), ("a_fifo", &fifo)] {
        let o = run(
            &["dry-run", "--synthetic", "10", "--output-dir", name],
            dir.path(),
        );
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{name}: {err}");
        assert_eq!(
            err,
            format!(
                "ballast: error: {name} exists and is not a directory: --output-dir takes a directory (made if missing)\n"
            ),
            "{name}"
        );
        assert!(!path.is_dir(), "{name}");
    }
    assert_eq!(fs::read(&file).unwrap(), b"kept");
    assert_eq!(files_in(dir.path()), ["a_fifo", "a_file"]);
}

/// An allocation pickle (gzip data) given as `--memory-usage` is named as one, with the
/// option that takes a dry-run file and the command that reads an allocation (before: a
/// bare JSON syntax error), in dry-run and stats.
#[test]
fn an_allocation_pickle_as_memory_usage_is_named_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &["dry-run", "--synthetic", "10", "--num-target-ranks", "2"],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let pkl = "allocation_r2_c1.pkl.gz";
    assert_eq!(&fs::read(dir.path().join(pkl)).unwrap()[..2], [0x1f, 0x8b]);
    let want = format!(
        "ballast: error: {pkl} is gzip data, which looks like an allocation pickle (allocation_r{{N}}_c{{C}}.pkl.gz), \
         not a dry-run file: --memory-usage takes neurodamus' cell_memory_usage.json; \
         `ballast stats ALLOCATION` reads an allocation\n"
    );
    let before = files_in(dir.path());
    for args in [
        &["dry-run", "--memory-usage", pkl, "--output-dir", "out"][..],
        &["stats", pkl, "--memory-usage", pkl],
    ] {
        let o = run(args, dir.path());
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err, want, "{args:?}");
    }
    assert_eq!(files_in(dir.path()), before, "nothing written");
}

/// A `cell_memory_usage.json` that starts with a UTF-8 byte order mark (as some Windows
/// editors save it) is refused with serde_json's words and what is wrong (before: only
/// `expected value at line 1 column 1`): exit 1, the file named, nothing written.
#[test]
fn a_dry_run_file_with_a_byte_order_mark_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let name = "cell_memory_usage.json";
    let json = r#"{"metype_memory": {"A": 1}, "pop_metype_gids": {"P": {"A": [0, 1]}}}"#;
    fs::write(
        dir.path().join(name),
        [&b"\xEF\xBB\xBF"[..], json.as_bytes()].concat(),
    )
    .unwrap();
    let dry_run = || {
        run(
            &[
                "dry-run",
                "--memory-usage",
                name,
                "--num-target-ranks",
                "2",
                "--output-dir",
                "out",
            ],
            dir.path(),
        )
    };
    let o = dry_run();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(
        err,
        format!(
            "ballast: error: {name}: invalid JSON: expected value at line 1 column 1 (the file starts \
             with a UTF-8 byte order mark, which JSON does not allow; save it without one)\n"
        )
    );
    assert_eq!(o.stdout, b"");
    assert_eq!(files_in(dir.path()), [name], "nothing written");
    // Saved without one, the same file is read.
    fs::write(dir.path().join(name), json).unwrap();
    let o = dry_run();
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `ballast info --transport mpi` in a build without the `mpi` feature says so on stderr,
/// with the build command, and prints the model's report as before on stdout (the same
/// bytes as with the note absent: `info` alone says nothing on stderr).
#[test]
fn info_says_mpi_is_not_built_in() {
    if cfg!(feature = "mpi") {
        println!("SKIP: this ballast is built with the mpi feature");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let o = run(&["info", "--transport", "mpi"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let compiled: Vec<&str> = ballast_runtime::TransportKind::compiled_in()
        .iter()
        .map(|k| k.as_str())
        .collect();
    let compiled = compiled.join(", ");
    assert_eq!(
        stderr(&o),
        format!(
            "note: transport mpi (--transport or BALLAST_TRANSPORT) is not compiled into this ballast \
             (transports compiled in: {compiled}); build with `cargo build --release --bin ballast --features mpi` \
             (needs libopenmpi-dev libclang-dev) and launch with mpirun -n N; the report below is the \
             footprint model's prediction only\n"
        )
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!("transports compiled in: {compiled}\n")),
        "{out}"
    );
    let local = run(&["info"], dir.path());
    assert!(local.status.success());
    assert_eq!(stderr(&local), "", "no note for a transport that is built in");
}

/// `ballast run` over shm as one rank per process without a way to meet (srun's rank
/// variables but no job id, no `BALLAST_ROOT`, no MPI launch), and `ballast fanout` over
/// shm with neither a launcher nor `--ranks`: refused, saying what is missing.
#[test]
fn shm_without_a_way_to_meet_says_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let o = common::ballast()
        .args(["run", "--synthetic", "10", "--transport", "shm"])
        .env("SLURM_PROCID", "0")
        .env("SLURM_NTASKS", "2")
        .env_remove("SLURM_JOB_ID")
        .env_remove("PMIX_NAMESPACE")
        .env_remove("OMPI_MCA_ess_base_jobid")
        .env_remove("BALLAST_ROOT")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "ballast: error: bootstrap: the shm transport's processes meet at this node's socket named by Slurm's job \
         step: SLURM_PROCID is set but SLURM_JOB_ID or SLURM_STEP_ID is not (srun sets both); set them, or \
         BALLAST_ROOT=host:port\n"
    );
    let o = common::ballast()
        .args(["fanout"])
        .env("BALLAST_TRANSPORT", "shm")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--ranks is required with --transport shm without a launcher"),
        "{}",
        stderr(&o)
    );
}

/// `ballast run` and `ballast fanout` on the local transport in a process a launcher started
/// as one of several (here srun's variables: 2 tasks) are refused, each copy would run the
/// whole job alone; `ballast run --transport shm` with neither a launcher nor `--ranks` is
/// refused as fanout's is.
#[test]
fn local_under_a_launcher_and_shm_without_ranks_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for cmd in [&["run", "--synthetic", "10"][..], &["fanout"][..]] {
        let o = common::ballast()
            .args(cmd)
            .args(["--transport", "local"])
            .env("SLURM_PROCID", "0")
            .env("SLURM_NTASKS", "2")
            .env_remove("OMPI_COMM_WORLD_RANK")
            .env_remove("PMI_RANK")
            .env_remove("BALLAST_RANK")
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert_eq!(
            stderr(&o),
            format!(
                "ballast: error: ballast {}: the transport is local (ranks as threads of one process), but this \
                 process was launched as one of 2 (by SLURM_PROCID): each would run the whole job alone; use \
                 --transport shm (every rank on this node), mpi or verbs, or one process with --ranks 2\n",
                cmd[0]
            )
        );
        assert!(files_in(dir.path()).is_empty(), "nothing written");
    }
    let o = common::ballast()
        .args(["run", "--synthetic", "10", "--transport", "shm"])
        .env_remove("SLURM_PROCID")
        .env_remove("OMPI_COMM_WORLD_RANK")
        .env_remove("PMI_RANK")
        .env_remove("BALLAST_RANK")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--ranks is required with --transport shm without a launcher"),
        "{}",
        stderr(&o)
    );
}
