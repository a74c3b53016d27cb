//! The shm transport through the C API (issue 36): tests/c/shm_processes.c built under the
//! sanitizers and started as 1, 2, 3, 4 and 7 processes with srun's variables set here
//! (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_JOB_ID`, `SLURM_STEP_ID`) and
//! `BALLAST_TRANSPORT=shm`: no MPI, the ranks meet at the node's abstract socket; each count
//! twice, with large messages by CMA and with `BALLAST_SHM_CMA=off` (through the rings).
//! Every process must pass every check. (Under mpirun: ci/capi.sh.) Skips with a printed reason
//! when no C compiler is found, except under CI=true.

mod common;

use common::{build, compiler, SANITIZE};
use std::path::Path;
use std::process::{Command, Stdio};

#[test]
fn c_program_over_shm_at_1_2_3_4_and_7_processes() {
    let Some(cc) = compiler() else { return };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/shm_processes.c");
    let prog = build(&cc, &src, &SANITIZE);
    let runs = [1usize, 2, 3, 4, 7]
        .into_iter()
        .flat_map(|n| [(n, "on"), (n, "off")]);
    for (n, cma) in runs {
        let job = format!("capi-test-{}-{n}-{cma}", std::process::id());
        let children: Vec<_> = (0..n)
            .map(|r| {
                Command::new(&prog.exe)
                    .env("BALLAST_TRANSPORT", "shm")
                    .env("BALLAST_SHM_CMA", cma)
                    .env("SLURM_PROCID", r.to_string())
                    .env("SLURM_NTASKS", n.to_string())
                    .env("SLURM_JOB_ID", &job)
                    .env("SLURM_STEP_ID", "0")
                    .env("BALLAST_BOOTSTRAP_TIMEOUT", "60")
                    .env("BALLAST_LOCK_POOL", "off")
                    .env_remove("BALLAST_ROOT")
                    .env_remove("OMPI_COMM_WORLD_RANK")
                    .env_remove("PMI_RANK")
                    .env_remove("BALLAST_RANK")
                    .env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:exitcode=23")
                    .env("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1:exitcode=24")
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("start a rank")
            })
            .collect();
        for (r, c) in children.into_iter().enumerate() {
            let out = c.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains(&format!("capi shm rank {r} of {n}: ")),
                "{n} processes, CMA {cma}, rank {r}: {:?}\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            let line = stdout.lines().find(|l| l.starts_with("capi shm rank")).unwrap();
            assert!(line.ends_with(" passed, 0 failed"), "{line}");
            let passed: usize = line
                .rsplit(": ")
                .next()
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert!(
                passed >= 30,
                "{n} processes, rank {r}: only {passed} checks: {line}"
            );
        }
        println!("capi shm: {n} processes, CMA {cma}, passed");
    }
}
