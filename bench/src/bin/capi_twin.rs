//! The Rust half of bench/capi_pingpong.sh: the ping-pong loop of bench/c/pingpong.c
//! through the Rust API, so that the C ABI's cost is the ratio of the two.
//!
//! `capi_twin local SIZE ITERS BLOCKS [irecv]` (2 ranks as threads, `local::run`), or, in a build
//! with `mpi`, `mpirun -n 2 capi_twin mpi SIZE ITERS BLOCKS` (`Mpi::init`, then the
//! communicator over the world). Rank 0 sends SIZE bytes, rank 1 receives them (`recv`:
//! the message's own buffer; with `irecv`, `irecv` then `wait`, the calls the C half makes)
//! and sends them back; one warm-up round trip, then BLOCKS timed blocks of ITERS round trips. Prints
//! `rust <transport> <SIZE> <median block's half round trip in ns>` from rank 0. The
//! configuration is the environment's (`BALLAST_*`).

use std::time::Instant;

use anyhow::{bail, Context, Result};
use ballast_runtime::{Communicator, RuntimeConfig, TransportKind};

struct Plan {
    /// Receive with `irecv` + `wait` (as the C half) instead of `recv`.
    irecv: bool,
    size: usize,
    iters: u64,
    blocks: usize,
}

/// A receive from `peer` with tag 1: `recv`, or (`irecv`) `irecv` then `wait`, the
/// calls the C half makes.
fn recv(comm: &mut Communicator, peer: usize, irecv: bool) -> Result<Vec<u8>> {
    if irecv {
        let r = comm.irecv(peer, 1u32)?;
        Ok(comm.wait(r)?.into_message().expect("a receive").data)
    } else {
        Ok(comm.recv(peer, 1u32)?.data)
    }
}

/// One rank's loop; rank 0's block times in ns per half round trip. In a world of one
/// (`self`), the rank sends to itself and receives its own message: the per-call cost of
/// the API without a second thread's timing.
fn rank_main(comm: &mut Communicator, p: &Plan) -> Result<Vec<f64>> {
    let me = comm.rank();
    let peer = if comm.world_size() == 1 { 0 } else { 1 - me };
    let buf = vec![7u8; p.size];
    let mut ns = Vec::with_capacity(p.blocks);
    for b in 0..=p.blocks {
        let n = if b == 0 { 1 } else { p.iters };
        let t = Instant::now();
        for _ in 0..n {
            // Rank 0 (or the only rank, to itself) sends first.
            if me == 0 {
                comm.send(peer, 1, &buf)?;
                recv(comm, peer, p.irecv)?;
            } else {
                let m = recv(comm, peer, p.irecv)?;
                comm.send(peer, 1, &m)?;
            }
        }
        if b > 0 {
            let legs = if peer == me { 1 } else { 2 };
            ns.push(t.elapsed().as_secs_f64() * 1e9 / (legs * n) as f64);
        }
    }
    Ok(ns)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 && !(args.len() == 6 && args[5] == "irecv") {
        bail!("usage: capi_twin local|self|mpi SIZE ITERS BLOCKS [irecv]");
    }
    let p = Plan {
        irecv: args.len() == 6,
        size: args[2].parse().context("SIZE")?,
        iters: args[3].parse().context("ITERS")?,
        blocks: args[4].parse().context("BLOCKS")?,
    };
    if p.iters == 0 || p.blocks == 0 {
        bail!("ITERS and BLOCKS must be at least 1");
    }
    let env = RuntimeConfig::from_env()?;
    let mut ns = match args[1].as_str() {
        "local" | "self" => {
            let cfg = env.to_builder().transport(TransportKind::Local).build()?;
            let ranks = if args[1] == "self" { 1 } else { 2 };
            let mut out = ballast_runtime::local::run(ranks, &cfg, |comm| rank_main(comm, &p))?;
            out.swap_remove(0)?
        }
        #[cfg(feature = "mpi")]
        "mpi" => {
            let mpi = ballast_runtime::mpi::Mpi::init()?;
            let ns = mpi.run(&env, |comm| rank_main(comm, &p))??;
            if mpi.rank() != 0 {
                return Ok(());
            }
            ns
        }
        other => bail!("transport {other}: local, or mpi in a build with the mpi feature"),
    };
    ns.sort_by(f64::total_cmp);
    let who = if p.irecv { "rust-irecv" } else { "rust" };
    println!("{who} {} {} {:.1}", args[1], p.size, ns[p.blocks / 2]);
    Ok(())
}
