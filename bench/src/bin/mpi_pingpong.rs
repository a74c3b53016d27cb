//! Ping-pong between two MPI processes, Ballast-over-MPI against raw rsmpi send/receive in
//! the same run: `mpirun -n 2 mpi_pingpong [--rounds R] [--quick] [--size BYTES ...]`. For each message size
//! it alternates raw and Ballast measurements `R` times (default 7) and reports the median
//! half round-trip time of each and their ratio. Ballast runs with the configuration of the
//! environment (`BALLAST_*`, e.g. `BALLAST_BUFFER_SIZE`), on its own duplicate of
//! `MPI_COMM_WORLD`; raw rsmpi uses `MPI_COMM_WORLD` with preallocated buffers (blocking
//! `send`/`receive_into`, the baseline of the ratio).
//!
//! The Ballast column is the communicator the configuration gives: with the defaults and
//! one rank per process, the MPI native path (one MPI message per Ballast message). The
//! "Ballast, engine" column is a second communicator with `mpi_native` off (the progress
//! engine above MPI), measured in the same rounds.
//!
//! A third column ("raw, polled") is raw rsmpi with the non-blocking call pattern a
//! progress engine that serves any source must use, on another duplicate of the world:
//! `MPI_Isend` then `MPI_Test` until complete, `MPI_Improbe` until a message is there then
//! `MPI_Mrecv` into the preallocated buffer. Ballast minus this column is the engine's own
//! cost; this column minus the blocking one is what the call pattern costs inside MPI.

use std::time::Instant;

use ballast_runtime::mpi::rsmpi::collective::CommunicatorCollectives;
use ballast_runtime::mpi::rsmpi::point_to_point::{Destination, Source as _};
use ballast_runtime::mpi::rsmpi::request::scope;
use ballast_runtime::mpi::rsmpi::topology::{Communicator as _, SimpleCommunicator};
use ballast_runtime::mpi::Mpi;
use ballast_runtime::{Communicator, RuntimeConfig, Source, TagMatch};

const SIZES: [usize; 8] = [8, 64, 1 << 10, 8 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20];

/// Iterations for a size: about 64 MiB moved per direction, between 20 and 20,000.
fn iters(size: usize, quick: bool) -> usize {
    let n = ((64usize << 20) / size.max(1)).clamp(20, 20_000);
    if quick {
        (n / 20).max(5)
    } else {
        n
    }
}

fn raw(world: &SimpleCommunicator, size: usize, n: usize, buf: &mut [u8]) -> f64 {
    let me = world.rank();
    let peer = world.process_at_rank(1 - me);
    world.barrier();
    let t = Instant::now();
    for _ in 0..n {
        if me == 0 {
            peer.send_with_tag(&buf[..size], 1);
            peer.receive_into_with_tag(&mut buf[..size], 1);
        } else {
            peer.receive_into_with_tag(&mut buf[..size], 1);
            peer.send_with_tag(&buf[..size], 1);
        }
    }
    t.elapsed().as_secs_f64() / (2 * n) as f64
}

fn polled(comm: &SimpleCommunicator, size: usize, n: usize, buf: &mut [u8]) -> f64 {
    let me = comm.rank();
    let peer = comm.process_at_rank(1 - me);
    let send = |buf: &[u8]| {
        scope(|s| {
            let mut r = peer.immediate_send_with_tag(s, buf, 1);
            loop {
                match r.test() {
                    Ok(_) => break,
                    Err(q) => r = q,
                }
            }
        })
    };
    let recv = |buf: &mut [u8]| loop {
        if let Some((msg, _)) = comm.any_process().immediate_matched_probe_with_tag(1) {
            msg.matched_receive_into(buf);
            break;
        }
    };
    comm.barrier();
    let t = Instant::now();
    for _ in 0..n {
        if me == 0 {
            send(&buf[..size]);
            recv(&mut buf[..size]);
        } else {
            recv(&mut buf[..size]);
            send(&buf[..size]);
        }
    }
    t.elapsed().as_secs_f64() / (2 * n) as f64
}

fn ballast(comm: &mut Communicator, size: usize, n: usize, buf: &[u8]) -> ballast_runtime::Result<f64> {
    let me = comm.rank();
    let peer = 1 - me;
    comm.barrier()?;
    let t = Instant::now();
    for _ in 0..n {
        if me == 0 {
            comm.send(peer, 1, &buf[..size])?;
            let m = comm.recv(Source::Rank(peer), TagMatch::Tag(1))?;
            debug_assert_eq!(m.data.len(), size);
        } else {
            let m = comm.recv(Source::Rank(peer), TagMatch::Tag(1))?;
            comm.send(peer, 1, &m.data)?;
        }
    }
    Ok(t.elapsed().as_secs_f64() / (2 * n) as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mpi_pingpong: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Res<()> {
    let mut rounds = 7usize;
    let mut quick = false;
    let mut sizes: Vec<usize> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rounds" => rounds = args.next().ok_or("--rounds needs a value")?.parse()?,
            "--quick" => quick = true,
            "--size" => sizes.push(args.next().ok_or("--size needs a value")?.parse()?),
            "--help" | "-h" => {
                println!(
                    "usage: mpirun -n 2 mpi_pingpong [--rounds R (default 7)] [--quick] [--size BYTES ...]"
                );
                println!("ping-pong of raw rsmpi, raw polled, Ballast (the configuration of the environment) and Ballast's engine path; see docs/BENCHMARKS.md");
                return Ok(());
            }
            other => {
                return Err(
                    format!("unknown argument `{other}` (use --rounds R, --quick, --size BYTES)").into(),
                )
            }
        }
    }
    if rounds == 0 {
        return Err("--rounds must be at least 1".into());
    }
    let mpi = Mpi::init()?;
    if mpi.size() != 2 {
        return Err("run with exactly 2 processes: mpirun -n 2 mpi_pingpong".into());
    }
    let cfg = RuntimeConfig::from_env()?;
    let mut comm = mpi.communicator(&cfg)?;
    let mut engine = mpi.communicator(&cfg.to_builder().mpi_native(false).build()?)?;
    let world = mpi.world();
    let dup = world.duplicate();
    if sizes.is_empty() {
        sizes = SIZES.to_vec();
    }
    let max = *sizes.iter().max().ok_or("no sizes")?;
    let mut buf: Vec<u8> = (0..max).map(|i| i as u8).collect();
    // Warm-up: connect the endpoint, touch MPI's paths for both.
    raw(world, max, 3, &mut buf);
    polled(&dup, max, 3, &mut buf);
    ballast(&mut comm, max, 3, &buf)?;
    ballast(&mut engine, max, 3, &buf)?;
    let mut rows = Vec::new();
    for &size in &sizes {
        let n = iters(size, quick);
        let (mut r, mut p, mut b, mut e) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            r.push(raw(world, size, n, &mut buf));
            p.push(polled(&dup, size, n, &mut buf));
            b.push(ballast(&mut comm, size, n, &buf)?);
            e.push(ballast(&mut engine, size, n, &buf)?);
        }
        rows.push((size, n, median(r), median(p), median(b), median(e)));
    }
    if mpi.rank() == 0 {
        let t = comm.config();
        println!("{}", mpi.describe());
        println!(
            "ping-pong, 2 processes, median of {rounds} alternating rounds; Ballast: {}, buffer_size {} B; engine: {} buffers, recv_sharing {}",
            if comm.is_mpi_native() { "MPI native path" } else { "engine path (native not taken, see notes)" },
            t.buffer_size, t.buffer_count, t.recv_sharing
        );
        for note in comm.notes() {
            println!("note: {note}");
        }
        println!("| size | iterations | raw rsmpi (µs, half round trip) | raw, polled (µs) | Ballast (µs) | Ballast, engine (µs) | Ballast / raw | engine / raw |");
        println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        for (size, n, r, p, b, e) in rows {
            let s = if size >= 1 << 20 {
                format!("{} MiB", size >> 20)
            } else if size >= 1 << 10 {
                format!("{} KiB", size >> 10)
            } else {
                format!("{size} B")
            };
            println!(
                "| {s} | {n} | {:.3} | {:.3} | {:.3} | {:.3} | **{:.3}** | {:.3} |",
                r * 1e6,
                p * 1e6,
                b * 1e6,
                e * 1e6,
                b / r,
                e / r
            );
        }
    }
    Mpi::finish(comm)?;
    Mpi::finish(engine)?;
    Ok(())
}
