//! Ballast's collectives on the MPI native path against raw MPI (rsmpi's blocking
//! collectives) in the same run: `mpirun -n N mpi_collectives [--rounds R] [--quick]`.
//! For each operation it alternates raw and Ballast measurements `R` times (default 11;
//! which goes first alternates too), each a timed loop of back-to-back calls after a
//! barrier, the time of a round being the slowest rank's; it reports the medians (µs per
//! call) and their ratio. Ballast runs with the configuration of the environment
//! (`BALLAST_*`; `BALLAST_MPI_NATIVE=off` measures the engine path above MPI) on a fresh
//! communicator per operation (its own duplicates of `MPI_COMM_WORLD`); raw MPI on another
//! duplicate, with buffers allocated once.
//!
//! After the table, the partners per rank each operation opened on the Ballast side: the
//! most over ranks of `Footprint::peers_connected` after the operation's runs (warm-up
//! and rounds) on its fresh communicator, beside the most its doc comment promises
//! ([`Op::partners_bound`]). On the native path MPI's own collectives run and count none;
//! the sparse exchange (point-to-point messages there too) counts the ranks it received
//! from.
//!
//! Operations (what raw MPI does for the same result):
//! - `allreduce 1 double`, `allreduce 1000 doubles`: `MPI_Allreduce` (`MPI_SUM`);
//! - `barrier`: `MPI_Barrier`;
//! - `alltoallv 64 B`, `alltoallv 64 KiB` (per pair): `MPI_Alltoall` of the counts then
//!   `MPI_Alltoallv` (the receiver does not know the counts: Arbor's spike exchange) into
//!   one receive buffer; Ballast's `all_to_allv_into` with one `out` kept likewise, and
//!   (`..., new parts each call`) `all_to_allv`, which returns new parts every call;
//! - `sparse exchange, 3 destinations` (64 B to each of the next 3 ranks, fewer when the
//!   world is smaller): NBX with rsmpi (`MPI_Issend`, `MPI_Improbe` + `MPI_Mrecv`,
//!   `MPI_Ibarrier`).

use std::time::Instant;

use ballast_bench::collectives::{dests, median, run_op, send_bytes, Op, OPS};
use ballast_runtime::mpi::rsmpi::collective::{CommunicatorCollectives, SystemOperation};
use ballast_runtime::mpi::rsmpi::datatype::{Partition, PartitionMut};
use ballast_runtime::mpi::rsmpi::point_to_point::{Destination, Source as _};
use ballast_runtime::mpi::rsmpi::request::scope;
use ballast_runtime::mpi::rsmpi::topology::{Communicator as _, SimpleCommunicator};
use ballast_runtime::mpi::rsmpi::Count;
use ballast_runtime::mpi::Mpi;
use ballast_runtime::RuntimeConfig;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Raw MPI's buffers, allocated once.
struct Raw {
    comm: SimpleCommunicator,
    send: Vec<u8>,
    recv: Vec<u8>,
    xs: Vec<f64>,
    ys: Vec<f64>,
}

impl Raw {
    fn run(&mut self, op: Op, iters: usize, round: usize) {
        let (n, me) = (self.comm.size() as usize, self.comm.rank() as usize);
        match op {
            Op::AllReduce(k) => {
                for _ in 0..iters {
                    self.comm
                        .all_reduce_into(&self.xs[..k], &mut self.ys[..k], SystemOperation::sum());
                }
            }
            Op::Barrier => {
                for _ in 0..iters {
                    self.comm.barrier();
                }
            }
            Op::AllToAllv(b, _) => {
                let scounts = vec![b as Count; n];
                let sdispls: Vec<Count> = (0..n).map(|d| (d * b) as Count).collect();
                let mut rcounts = vec![0 as Count; n];
                let mut rdispls = vec![0 as Count; n];
                for _ in 0..iters {
                    self.comm.all_to_all_into(&scounts[..], &mut rcounts[..]);
                    let mut at = 0;
                    for (d, c) in rdispls.iter_mut().zip(&rcounts) {
                        *d = at;
                        at += c;
                    }
                    let s = Partition::new(&self.send[..n * b], &scounts[..], &sdispls[..]);
                    let mut r = PartitionMut::new(&mut self.recv[..at as usize], &rcounts[..], &rdispls[..]);
                    self.comm.all_to_all_varcount_into(&s, &mut r);
                }
            }
            Op::Sparse(b) => {
                let to = dests(me, n);
                for i in 0..iters {
                    let tag = ((round * iters + i) % 2) as i32;
                    self.nbx(&to, b, tag);
                }
            }
        }
    }

    /// One NBX exchange of `b` bytes to each of `to`, with `tag`.
    fn nbx(&mut self, to: &[usize], b: usize, tag: i32) {
        let comm = &self.comm;
        let send = &self.send[..b];
        let recv = &mut self.recv;
        scope(|s| {
            let mut reqs: Vec<_> = to
                .iter()
                .map(|&d| {
                    comm.process_at_rank(d as i32)
                        .immediate_synchronous_send_with_tag(s, send, tag)
                })
                .collect();
            let mut barrier = None;
            loop {
                if let Some((msg, _)) = comm.any_process().immediate_matched_probe_with_tag(tag) {
                    msg.matched_receive_into(&mut recv[..b]);
                    continue;
                }
                match barrier.take() {
                    None => {
                        let mut left = Vec::new();
                        for r in reqs.drain(..) {
                            if let Err(r) = r.test() {
                                left.push(r);
                            }
                        }
                        reqs = left;
                        if reqs.is_empty() {
                            barrier = Some(comm.immediate_barrier());
                        }
                    }
                    Some(q) => match q.test() {
                        Ok(_) => break,
                        Err(q) => barrier = Some(q),
                    },
                }
            }
        });
    }
}

/// The slowest rank's seconds per call of `f` run `iters` times, after a barrier.
fn timed(world: &SimpleCommunicator, iters: usize, f: impl FnOnce()) -> f64 {
    world.barrier();
    let t = Instant::now();
    f();
    let mine = t.elapsed().as_secs_f64() / iters as f64;
    let mut max = 0.0;
    world.all_reduce_into(&mine, &mut max, SystemOperation::max());
    max
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mpi_collectives: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Res<()> {
    let mut rounds = 11usize;
    let mut quick = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rounds" => rounds = args.next().ok_or("--rounds needs a value")?.parse()?,
            "--quick" => quick = true,
            "--help" | "-h" => {
                println!("usage: mpirun -n N mpi_collectives [--rounds R (default 11)] [--quick]");
                println!("Ballast's collectives (MPI native path) against raw MPI's; see docs/BENCHMARKS.md");
                return Ok(());
            }
            other => return Err(format!("unknown argument `{other}` (use --rounds R, --quick)").into()),
        }
    }
    if rounds == 0 {
        return Err("--rounds must be at least 1".into());
    }
    let mpi = Mpi::init()?;
    let n = mpi.size();
    let cfg = RuntimeConfig::from_env()?;
    let world = mpi.world();
    let mut raw = Raw {
        comm: world.duplicate(),
        send: send_bytes(n),
        recv: vec![0; n * (64 << 10)],
        xs: vec![1.0; 1000],
        ys: vec![0.0; 1000],
    };
    let send = raw.send.clone();
    let mut rows = Vec::new();
    let mut about = None;
    for op in OPS {
        let iters = op.iters(quick).max(1);
        // A fresh communicator per operation: its partners are this operation's alone.
        let mut comm = mpi.communicator(&cfg)?;
        let before = comm.footprint().peers_connected;
        // Warm-up: MPI's paths and Ballast's first calls.
        raw.run(op, iters / 10 + 1, 0);
        run_op(&mut comm, op, iters / 10 + 1, &send)?;
        let (mut r, mut b) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let one_raw = |raw: &mut Raw| timed(world, iters, || raw.run(op, iters, round + 1));
            if round % 2 == 0 {
                r.push(one_raw(&mut raw));
            }
            let mut err = None;
            b.push(timed(world, iters, || {
                err = run_op(&mut comm, op, iters, &send).err()
            }));
            if let Some(e) = err {
                return Err(e.into());
            }
            if round % 2 == 1 {
                r.push(one_raw(&mut raw));
            }
        }
        let opened = comm.footprint().peers_connected - before;
        let mut partners = 0u64;
        world.all_reduce_into(&opened, &mut partners, SystemOperation::max());
        rows.push((op, iters, median(r), median(b), partners));
        about.get_or_insert_with(|| (comm.is_mpi_native(), comm.notes()));
        Mpi::finish(comm)?;
    }
    if mpi.rank() == 0 {
        let (native, notes) = about.unwrap_or_default();
        println!("{}", mpi.describe());
        println!(
            "collectives, {n} processes, median of {rounds} interleaved rounds (slowest rank per round); Ballast: {}",
            if native { "MPI native path" } else { "engine path (native not taken, see notes)" },
        );
        for note in notes {
            println!("note: {note}");
        }
        println!("| operation | calls per round | raw MPI (µs) | Ballast (µs) | Ballast / raw |");
        println!("| --- | ---: | ---: | ---: | ---: |");
        for &(op, iters, r, b, _) in &rows {
            println!(
                "| {} | {iters} | {:.2} | {:.2} | **{:.3}** |",
                op.name(),
                r * 1e6,
                b * 1e6,
                b / r
            );
        }
        println!();
        println!(
            "partners per rank (Ballast, {}; a fresh communicator per operation, most over ranks of footprint().peers_connected after its runs)",
            if native {
                "MPI native path: MPI's own collectives count none, the sparse exchange the ranks it received from"
            } else {
                "engine path"
            },
        );
        println!("| operation | partners per rank | at most (doc comment) |");
        println!("| --- | ---: | ---: |");
        for &(op, _, _, _, partners) in &rows {
            println!("| {} | {partners} | {} |", op.name(), op.partners_bound(n));
        }
    }
    Ok(())
}
