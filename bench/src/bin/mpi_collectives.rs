//! Ballast's collectives on the MPI native path against raw MPI (rsmpi's blocking
//! collectives) in the same run: `mpirun -n N mpi_collectives [--rounds R] [--quick]`.
//! For each operation it alternates raw and Ballast measurements `R` times (default 11;
//! which goes first alternates too), each a timed loop of back-to-back calls after a
//! barrier, the time of a round being the slowest rank's; it reports the medians (µs per
//! call) and their ratio. Ballast runs with the configuration of the environment
//! (`BALLAST_*`) on its own duplicates of `MPI_COMM_WORLD`; raw MPI on another duplicate,
//! with buffers allocated once.
//!
//! Operations (what raw MPI does for the same result):
//! - `allreduce 1 double`, `allreduce 1000 doubles`: `MPI_Allreduce` (`MPI_SUM`);
//! - `barrier`: `MPI_Barrier`;
//! - `alltoallv 64 B`, `alltoallv 64 KiB` (per pair): `MPI_Alltoall` of the counts then
//!   `MPI_Alltoallv` (the receiver does not know the counts: Arbor's spike exchange);
//! - `sparse exchange, 3 destinations` (64 B to each of the next 3 ranks, fewer when the
//!   world is smaller): NBX with rsmpi (`MPI_Issend`, `MPI_Improbe` + `MPI_Mrecv`,
//!   `MPI_Ibarrier`).

use std::time::Instant;

use ballast_runtime::mpi::rsmpi::collective::{CommunicatorCollectives, SystemOperation};
use ballast_runtime::mpi::rsmpi::datatype::{Partition, PartitionMut};
use ballast_runtime::mpi::rsmpi::point_to_point::{Destination, Source as _};
use ballast_runtime::mpi::rsmpi::request::scope;
use ballast_runtime::mpi::rsmpi::topology::{Communicator as _, SimpleCommunicator};
use ballast_runtime::mpi::rsmpi::Count;
use ballast_runtime::mpi::Mpi;
use ballast_runtime::{Communicator, ReduceOp, RuntimeConfig};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The operations measured.
#[derive(Clone, Copy)]
enum Op {
    AllReduce(usize),
    Barrier,
    AllToAllv(usize),
    Sparse(usize),
}

impl Op {
    fn name(self) -> String {
        match self {
            Op::AllReduce(1) => "allreduce 1 double".into(),
            Op::AllReduce(n) => format!("allreduce {n} doubles"),
            Op::Barrier => "barrier".into(),
            Op::AllToAllv(b) if b >= 1024 => format!("alltoallv {} KiB per pair", b >> 10),
            Op::AllToAllv(b) => format!("alltoallv {b} B per pair"),
            Op::Sparse(b) => format!("sparse exchange, 3 destinations, {b} B"),
        }
    }
    fn iters(self, quick: bool) -> usize {
        let n = match self {
            Op::AllReduce(1) | Op::Barrier => 5000,
            Op::AllReduce(_) | Op::AllToAllv(64) | Op::Sparse(_) => 2000,
            Op::AllToAllv(_) => 200,
        };
        if quick {
            n / 20
        } else {
            n
        }
    }
}

const OPS: [Op; 6] = [
    Op::AllReduce(1),
    Op::AllReduce(1000),
    Op::Barrier,
    Op::AllToAllv(64),
    Op::AllToAllv(64 << 10),
    Op::Sparse(64),
];

/// The destinations of rank `me` in the sparse exchange: the next (up to) 3 ranks.
fn dests(me: usize, n: usize) -> Vec<usize> {
    (1..n.min(4)).map(|k| (me + k) % n).collect()
}

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
            Op::AllToAllv(b) => {
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

fn ballast(comm: &mut Communicator, op: Op, iters: usize, send: &[u8]) -> ballast_runtime::Result<()> {
    let (n, me) = (comm.world_size(), comm.rank());
    match op {
        Op::AllReduce(k) => {
            let mut x = vec![1.0f64; k];
            for _ in 0..iters {
                comm.all_reduce(&mut x, ReduceOp::Sum)?;
            }
        }
        Op::Barrier => {
            for _ in 0..iters {
                comm.barrier()?;
            }
        }
        Op::AllToAllv(b) => {
            let parts: Vec<&[u8]> = (0..n).map(|d| &send[d * b..(d + 1) * b]).collect();
            for _ in 0..iters {
                let got = comm.all_to_allv(&parts)?;
                debug_assert_eq!(got.len(), n);
            }
        }
        Op::Sparse(b) => {
            let to: Vec<(usize, &[u8])> = dests(me, n).into_iter().map(|d| (d, &send[..b])).collect();
            for _ in 0..iters {
                comm.exchange_sparse(&to)?;
            }
        }
    }
    Ok(())
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
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
    let mut comm = mpi.communicator(&cfg)?;
    let world = mpi.world();
    let big = n * (64 << 10);
    let mut raw = Raw {
        comm: world.duplicate(),
        send: (0..big).map(|i| i as u8).collect(),
        recv: vec![0; big],
        xs: vec![1.0; 1000],
        ys: vec![0.0; 1000],
    };
    let send = raw.send.clone();
    let mut rows = Vec::new();
    for op in OPS {
        let iters = op.iters(quick).max(1);
        // Warm-up: MPI's paths and Ballast's first calls.
        raw.run(op, iters / 10 + 1, 0);
        ballast(&mut comm, op, iters / 10 + 1, &send)?;
        let (mut r, mut b) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let one_raw = |raw: &mut Raw| timed(world, iters, || raw.run(op, iters, round + 1));
            if round % 2 == 0 {
                r.push(one_raw(&mut raw));
            }
            let mut err = None;
            b.push(timed(world, iters, || {
                err = ballast(&mut comm, op, iters, &send).err()
            }));
            if let Some(e) = err {
                return Err(e.into());
            }
            if round % 2 == 1 {
                r.push(one_raw(&mut raw));
            }
        }
        rows.push((op, iters, median(r), median(b)));
    }
    if mpi.rank() == 0 {
        println!("{}", mpi.describe());
        println!(
            "collectives, {n} processes, median of {rounds} interleaved rounds (slowest rank per round); Ballast: {}",
            if comm.is_mpi_native() { "MPI native path" } else { "engine path (native not taken, see notes)" },
        );
        for note in comm.notes() {
            println!("note: {note}");
        }
        println!("| operation | calls per round | raw MPI (µs) | Ballast (µs) | Ballast / raw |");
        println!("| --- | ---: | ---: | ---: | ---: |");
        for (op, iters, r, b) in rows {
            println!(
                "| {} | {iters} | {:.2} | {:.2} | **{:.3}** |",
                op.name(),
                r * 1e6,
                b * 1e6,
                b / r
            );
        }
    }
    Mpi::finish(comm)?;
    Ok(())
}
