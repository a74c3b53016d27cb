//! `all_to_allv` over `local` at 2 ranks by part size, beside a plain exchange of one
//! message of the same size each way (`irecv`, `send`, `wait`), in one world:
//! `local_alltoallv_sizes [--kept]`. For each size (8 KiB to 256 KiB per pair): 20 calls of
//! warm-up, then 200 timed calls of each, µs per call (rank 0's clock). With `--kept`,
//! `all_to_allv_into` with one `out` kept across calls, else `all_to_allv` (new parts each
//! call). What it shows (docs/BENCHMARKS.md): the engine's alltoallv of large parts costs
//! several exchanges when each call's buffers are new and freed, because glibc gives the
//! freed heap top back to the kernel (`GLIBC_TUNABLES=glibc.malloc.trim_threshold=...`
//! changes the figures).

use std::time::Instant;

use ballast_runtime::launch::threads;
use ballast_runtime::{Communicator, RuntimeConfig};

const SIZES: [usize; 6] = [8 << 10, 32 << 10, 64 << 10, 96 << 10, 128 << 10, 256 << 10];

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("local_alltoallv_sizes: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut kept = false;
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "--kept" => kept = true,
            "--help" | "-h" => {
                println!("usage: local_alltoallv_sizes [--kept]");
                return Ok(());
            }
            other => return Err(format!("unknown argument `{other}` (use --kept)").into()),
        }
    }
    let cfg = RuntimeConfig::from_env()?;
    println!(
        "local, 2 ranks, alltoallv ({}) beside one exchange of the same size, µs per call",
        if kept {
            "all_to_allv_into, out kept"
        } else {
            "all_to_allv, new parts each call"
        }
    );
    println!("| bytes per pair | alltoallv (µs) | exchange (µs) | alltoallv / exchange |");
    println!("| ---: | ---: | ---: | ---: |");
    for len in SIZES {
        let send = vec![7u8; 2 * len];
        let times = threads::run_ranks(
            2,
            &cfg,
            |comm: &mut Communicator| -> ballast_runtime::Result<(f64, f64)> {
                let peer = 1 - comm.rank();
                let parts: Vec<&[u8]> = (0..2).map(|d| &send[d * len..(d + 1) * len]).collect();
                let mut out = Vec::new();
                let mut a2a = |comm: &mut Communicator| -> ballast_runtime::Result<()> {
                    if kept {
                        comm.all_to_allv_into(&parts, &mut out)
                    } else {
                        comm.all_to_allv(&parts).map(drop)
                    }
                };
                for _ in 0..20 {
                    a2a(comm)?;
                }
                comm.barrier()?;
                let t = Instant::now();
                for _ in 0..200 {
                    a2a(comm)?;
                }
                let a = t.elapsed().as_secs_f64() / 200.0 * 1e6;
                comm.barrier()?;
                let t = Instant::now();
                for _ in 0..200 {
                    let q = comm.irecv(peer, 5)?;
                    comm.send(peer, 5, &send[..len])?;
                    comm.wait(q)?;
                }
                Ok((a, t.elapsed().as_secs_f64() / 200.0 * 1e6))
            },
        )?;
        let (a, x) = times.into_iter().next().ok_or("no rank 0")??;
        println!("| {len} | {a:.1} | {x:.1} | {:.2} |", a / x);
    }
    Ok(())
}
