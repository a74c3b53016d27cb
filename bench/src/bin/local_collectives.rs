//! Ballast's collectives over the in-process transport (`local`: ranks as threads of this
//! process, `threads::run_ranks`) at several rank counts: `local_collectives [--rounds R]
//! [--quick] [--ranks 2,4,8]`. The operations and calls per round are
//! `mpi_collectives`' (see `ballast_bench::collectives`). For each operation and rank
//! count, one world of ranks (fresh, so its partners are this operation's alone) runs a
//! warm-up, then `R` rounds (default 11), each a timed loop of back-to-back calls after a
//! Ballast barrier; a round's time is the slowest rank's, and the median over the rounds
//! is reported (µs per call).
//!
//! There is no raw counterpart in one process; beside each figure stands its ratio to the
//! same operation at the first rank count (2 by default), so that 4/2 and 8/2 show how the
//! cost grows with the ranks (the machine's cores bound what runs at once: beyond them,
//! threads take turns). Partners per rank: the most over ranks of
//! `Footprint::peers_connected` after the warm-up's calls in a world of their own (in the
//! timed world the rounds' synchronising barriers would add theirs), beside the most the collective's doc
//! comment promises ([`Op::partners_bound`]).
//!
//! The configuration is the environment's (`BALLAST_*`) with the transport `local` and, unless
//! `BALLAST_LOCK_POOL` is set, pools left unlocked (8 ranks' pools would otherwise count
//! against one process' locked-memory limit).

use std::time::Instant;

use ballast_bench::collectives::{median, run_op, send_bytes, Op, OPS};
use ballast_runtime::launch::threads;
use ballast_runtime::{RuntimeConfig, TransportKind};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// One operation at one rank count.
struct Row {
    op: Op,
    ranks: usize,
    iters: usize,
    /// Median over the rounds of the slowest rank's seconds per call.
    secs: f64,
    /// The most partners over ranks.
    partners: u64,
}

/// Runs `op` on `n` ranks: the median over `rounds` rounds of the slowest rank's seconds
/// per call, and the most peers a rank connected to in another world of `n` ranks that
/// makes the warm-up's calls only (the local transport's finish sends no messages).
fn measure(cfg: &RuntimeConfig, n: usize, op: Op, iters: usize, rounds: usize) -> Res<Row> {
    let send = send_bytes(n);
    let per_rank = threads::run_ranks(n, cfg, |comm| -> ballast_runtime::Result<Vec<f64>> {
        run_op(comm, op, iters / 10 + 1, &send)?;
        let mut times = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            comm.barrier()?;
            let t = Instant::now();
            run_op(comm, op, iters, &send)?;
            times.push(t.elapsed().as_secs_f64() / iters as f64);
        }
        Ok(times)
    })?;
    let mut slowest = vec![0.0f64; rounds];
    for rank in per_rank {
        for (s, t) in slowest.iter_mut().zip(rank?) {
            *s = s.max(t);
        }
    }
    // In a world of their own: in the timed one, a rank that finished a round already
    // sends the next round's barrier to ranks still in the operation, which count it.
    let opened = threads::run_ranks(n, cfg, |comm| -> ballast_runtime::Result<u64> {
        let before = comm.footprint().peers_connected;
        run_op(comm, op, iters / 10 + 1, &send)?;
        Ok(comm.footprint().peers_connected - before)
    })?;
    let mut partners = 0;
    for rank in opened {
        partners = partners.max(rank?);
    }
    Ok(Row {
        op,
        ranks: n,
        iters,
        secs: median(slowest),
        partners,
    })
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("local_collectives: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Res<()> {
    let mut rounds = 11usize;
    let mut quick = false;
    let mut sizes = vec![2usize, 4, 8];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rounds" => rounds = args.next().ok_or("--rounds needs a value")?.parse()?,
            "--quick" => quick = true,
            "--ranks" => {
                let v = args.next().ok_or("--ranks needs a list, e.g. 2,4,8")?;
                sizes = v.split(',').map(str::parse).collect::<Result<_, _>>()?;
            }
            "--help" | "-h" => {
                println!("usage: local_collectives [--rounds R (default 11)] [--quick] [--ranks 2,4,8]");
                println!("Ballast's collectives over the local transport (ranks as threads); see docs/BENCHMARKS.md");
                return Ok(());
            }
            other => {
                return Err(
                    format!("unknown argument `{other}` (use --rounds R, --quick, --ranks LIST)").into(),
                )
            }
        }
    }
    if rounds == 0 {
        return Err("--rounds must be at least 1".into());
    }
    if sizes.is_empty() || sizes.contains(&0) {
        return Err("--ranks needs rank counts of at least 1".into());
    }
    let env = RuntimeConfig::from_env()?;
    let mut b = env.to_builder().transport(TransportKind::Local);
    if std::env::var_os("BALLAST_LOCK_POOL").is_none() {
        b = b.lock_pool(false);
    }
    let cfg = b.build()?;
    let mut rows = Vec::new();
    for op in OPS {
        let iters = op.iters(quick).max(1);
        for &n in &sizes {
            rows.push(measure(&cfg, n, op, iters, rounds)?);
        }
    }
    let cores = std::thread::available_parallelism().map_or(0, |c| c.get());
    let base = sizes[0];
    println!(
        "collectives over `local` (ranks as threads, {cores} cores available), median of {rounds} rounds (slowest rank per round); ratio to {base} ranks"
    );
    println!("| operation | ranks | calls per round | Ballast (µs) | / {base} ranks | partners per rank | at most (doc comment) |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in &rows {
        let at_base = rows
            .iter()
            .find(|b| b.op == r.op && b.ranks == base)
            .map_or(f64::NAN, |b| b.secs);
        println!(
            "| {} | {} | {} | {:.2} | **{:.2}** | {} | {} |",
            r.op.name(),
            r.ranks,
            r.iters,
            r.secs * 1e6,
            r.secs / at_base,
            r.partners,
            r.op.partners_bound(r.ranks),
        );
    }
    Ok(())
}
