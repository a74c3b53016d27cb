//! Ping-pong between two Ballast ranks over the verbs transport (feature `verbs`): the
//! median half round-trip time per message size, 8 B to 64 KiB. Also built as the program
//! `verbs_pingpong`; `benches/verbs_pingpong.rs` includes it for `cargo bench`.
//!
//! - `cargo bench -p ballast-bench --features verbs --bench verbs_pingpong` (or the program
//!   with no launcher variables) starts two copies of itself on this machine, rank 0 on the
//!   first device of `--devices A,B` (default `$RXE_VM_DEV,$RXE_VM_DEV2`, else the
//!   automatic choice: `BALLAST_IB_DEVICE`, `BALLAST_IB_PORT`, `BALLAST_GID_INDEX` apply).
//! - Under a launcher (`BALLAST_ROOT` plus `BALLAST_RANK/SIZE`, `OMPI_COMM_WORLD_*`,
//!   `PMI_*` or `SLURM_*`), each process is one rank: two nodes, e.g.
//!   `BALLAST_ROOT=node1:7000 srun -N2 -n2 verbs_pingpong`.
//! - Without an RDMA device it prints why and exits 0.
//!
//! Options (`verbs_pingpong --help` describes each): `--quick`, `--breakdown`,
//! `--rounds R`, `--sizes a,b,..`, `--devices A,B`; diagnostics: `--one-way`,
//! `--quiet-us N`, `--raw-inside`. The two processes share one cycle counter (the TSC of
//! one machine), which is what makes the `--one-way` figures meaningful.
//! Rank 0 prints one line per size (typical = median half round trip, as perftest's
//! `t_typical`; mean = total time / 2n) and `ballast_verbs_8B_half_rtt_us=<typical>`. Each
//! round trip is timed with the cycle counter ([`verbs::cycles`], the TSC on x86-64), as
//! `ib_send_lat` does: in the soft-RoCE guest a clock read is a system call and an HPET read
//! (1.3-5 us), which the round trip it timed used to include.

use std::ffi::OsString;
use std::process::Command;
use std::time::Instant;

use ballast_runtime::bootstrap;
use ballast_runtime::{verbs, Communicator, RuntimeConfig, Source, TagMatch};
use clap::Parser;

/// Ping-pong between two Ballast ranks over the verbs transport: the median half round-trip
/// time per message size.
#[derive(Parser, Debug)]
#[command(
    name = "verbs_pingpong",
    bin_name = "verbs_pingpong",
    after_help = "With no launcher variables it starts two copies of itself on this machine, rank 0 on the \
                  first device of --devices (default $RXE_VM_DEV,$RXE_VM_DEV2, else the automatic choice: \
                  BALLAST_IB_DEVICE, BALLAST_IB_PORT, BALLAST_GID_INDEX apply). Under a launcher \
                  (BALLAST_ROOT plus BALLAST_RANK/SIZE, OMPI_COMM_WORLD_*, PMI_* or SLURM_*) each process \
                  is one rank. Without an RDMA device it prints why and exits 0."
)]
struct Args {
    /// Fewer iterations
    #[arg(long)]
    quick: bool,
    /// Time per iteration in isend, recv and send tests, and the fabric's counters per round trip (needs the `trace` feature)
    ///
    /// Each rank prints the median time per iteration in isend, recv and send tests, and per
    /// round trip the fabric's counters: posts, control frames, polls, control reads, CQ
    /// polls, completions. With BALLAST_VERBS_TRACE=1 also the time from the CQ poll that
    /// returned a receive to the next post, and the engine's handling of one arrival, timed
    /// with clock reads; with BALLAST_VERBS_TRACE=tsc instead the same path split in 9 steps
    /// by cycle-counter stamps, which cost next to nothing.
    #[arg(long)]
    breakdown: bool,
    /// Rounds per size (the printed figures are medians over rounds)
    #[arg(long, value_name = "R", default_value_t = 5, value_parser = at_least_one)]
    rounds: usize,
    /// Message sizes in bytes
    #[arg(
        long,
        value_name = "a,b,..",
        value_delimiter = ',',
        default_value = "8,64,1024,8192,65536"
    )]
    sizes: Vec<usize>,
    /// RDMA devices of rank 0 and rank 1 [default: $RXE_VM_DEV,$RXE_VM_DEV2, else the automatic choice]
    #[arg(long, value_name = "A,B", value_delimiter = ',')]
    devices: Vec<String>,
    /// Diagnostic: each rank prints the median one-way time of 8 B messages, sender's isend to its own recv returning
    ///
    /// Each 8 B message carries the sender's cycle counter: each rank prints the median time
    /// from the sender's `isend` to its own `recv` returning. With BALLAST_VERBS_TRACE=tsc also
    /// split into the sender's path to `ibv_post_send`, from there to the CQ poll that
    /// returned the receive, and from that poll to `recv` returning, plus how long the CQ had
    /// gone unpolled when the receive was seen and when the replying rank entered `recv`.
    #[arg(long)]
    one_way: bool,
    /// Diagnostic: each rank spins N us after a receive before it sends
    #[arg(long, value_name = "N", default_value_t = 0)]
    quiet_us: u64,
    /// Diagnostic: then run the raw-verbs ping-pong of verbs_raw_pingpong, with its own QPs, inside this process
    #[arg(long)]
    raw_inside: bool,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
    /// A filter `cargo bench` may pass along with `--bench`; ignored (refused without `--bench`).
    #[arg(hide = true)]
    bench_filter: Vec<String>,
}

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        r => r.map_err(|e| e.to_string()),
    }
}

/// `--one-way`: each 8 B message carries the sender's cycle counter read just before its
/// `isend`; the receiver keeps `now - stamp` when its `recv` returns (one counter for both
/// processes: the TSC of one machine).
static ONE_WAY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// `--quiet-us N`: each rank spins N us (cycle counter) after a receive before it sends, so
/// that every send meets a quiet peer (a diagnostic for the one-way split).
static QUIET_US: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
fn quiet() {
    let q = QUIET_US.load(std::sync::atomic::Ordering::Relaxed);
    if q > 0 {
        verbs::cycles::spin_us(q);
    }
}
static ONE_WAY_SAMPLES: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());
/// With `--one-way` and `BALLAST_VERBS_TRACE=tsc`: per message, the sender's stamp to its
/// `ibv_post_send` (sender side), the sender's stamp to the CQ poll that returned it and that
/// poll to `recv` returning (receiver side), in cycles.
static SPLIT: std::sync::Mutex<[Vec<u64>; 4]> =
    std::sync::Mutex::new([Vec::new(), Vec::new(), Vec::new(), Vec::new()]);

fn iters(size: usize, quick: bool) -> usize {
    let n = ((16usize << 20) / size.max(1)).clamp(20, 5_000);
    if quick {
        (n / 10).max(10)
    } else {
        n
    }
}

/// Runs `n` round trips of `size` bytes; returns (mean half round-trip, median half
/// round-trip) in seconds, timed per round trip on rank 0 (the median is what perftest's
/// `ib_send_lat` reports as `t_typical`).
fn half_rtt(
    comm: &mut Communicator,
    size: usize,
    n: usize,
    buf: &[u8],
) -> ballast_runtime::Result<(f64, f64)> {
    half_rtt_parts(comm, size, n, buf, None)
}

/// [`half_rtt`], optionally recording per iteration the time spent in `isend`, in the
/// receive and in the completion tests into `parts` (microseconds, this rank; `--breakdown`).
fn half_rtt_parts(
    comm: &mut Communicator,
    size: usize,
    n: usize,
    buf: &[u8],
    mut parts: Option<&mut [Vec<f64>; 3]>,
) -> ballast_runtime::Result<(f64, f64)> {
    let me = comm.rank();
    let peer = 1 - me;
    comm.barrier()?;
    let mut each = Vec::with_capacity(n);
    // Each round trip is timed with the cycle counter, as ib_send_lat does (a clock read
    // costs microseconds in the soft-RoCE guest); the mean uses the clock.
    let per_us = verbs::cycles::per_us();
    let mut pending = std::collections::VecDeque::new();
    let one_way = size == 8 && ONE_WAY.load(std::sync::atomic::Ordering::Relaxed);
    let mut stamped = buf[..size].to_vec();
    let mut samples = Vec::new();
    let t = Instant::now();
    // The breakdown's laps read the clock only with `--breakdown` (a clock read costs
    // microseconds in the guest).
    let timed = parts.is_some();
    let mut lap = |k: usize, t0: &mut Option<Instant>| {
        if let (Some(p), Some(t)) = (parts.as_deref_mut(), t0.as_mut()) {
            let now = Instant::now();
            p[k].push((now - *t).as_secs_f64() * 1e6);
            *t = now;
        }
    };
    for _ in 0..n {
        // The send is posted (its bytes copied into a pool buffer, so the caller's buffer is
        // free at once) and its completion, the RC acknowledgement, is collected later, as
        // perftest's ib_send_lat does not wait for it before the reply either.
        let mut tl = timed.then(Instant::now);
        if me == 0 {
            quiet();
            let t0 = verbs::cycles::now();
            if one_way {
                stamped[..8].copy_from_slice(&verbs::cycles::now().to_le_bytes());
            }
            pending.push_back(isend_retry(
                comm,
                peer,
                if one_way { &stamped[..size] } else { &buf[..size] },
            )?);
            if one_way {
                split_send(&stamped);
            }
            lap(0, &mut tl);
            let m = comm.recv(Source::Rank(peer), TagMatch::Tag(1))?;
            let t1 = verbs::cycles::now();
            each.push(t1.wrapping_sub(t0) as f64 / (2e6 * per_us));
            if one_way {
                samples.push(t1.wrapping_sub(u64::from_le_bytes(m.data[..8].try_into().expect("8 bytes"))));
                split_recv(&m.data, t1);
            }
            lap(1, &mut tl);
            assert_eq!(m.data.len(), size);
        } else {
            let e1 = verbs::cycles::now();
            let m = comm.recv(Source::Rank(peer), TagMatch::Tag(1))?;
            if one_way {
                let t1 = verbs::cycles::now();
                samples.push(t1.wrapping_sub(u64::from_le_bytes(m.data[..8].try_into().expect("8 bytes"))));
                split_recv(&m.data, t1);
                let s0 = u64::from_le_bytes(m.data[..8].try_into().expect("8 bytes"));
                SPLIT.lock().expect("split")[3].push((e1 as i64 - s0 as i64 + (1i64 << 40)) as u64);
            }
            lap(1, &mut tl);
            quiet();
            if one_way {
                stamped[..size].copy_from_slice(&m.data);
                stamped[..8].copy_from_slice(&verbs::cycles::now().to_le_bytes());
            }
            pending.push_back(isend_retry(
                comm,
                peer,
                if one_way { &stamped[..size] } else { &m.data },
            )?);
            if one_way {
                split_send(&stamped);
            }
            lap(0, &mut tl);
        }
        while let Some(r) = pending.front() {
            if !comm.test(r)? {
                break;
            }
            let r = pending.pop_front().expect("front");
            comm.wait(r)?;
        }
        lap(2, &mut tl);
    }
    for r in pending {
        comm.wait(r)?;
    }
    if one_way {
        ONE_WAY_SAMPLES.lock().expect("samples").extend(samples);
    }
    let mean = t.elapsed().as_secs_f64() / (2 * n) as f64;
    each.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
    Ok((mean, each.get(each.len() / 2).copied().unwrap_or(mean)))
}

#[cfg(feature = "trace")]
fn split_send(sent: &[u8]) {
    let s0 = u64::from_le_bytes(sent[..8].try_into().expect("8 bytes"));
    if let Some(row) = verbs::counters::last_row() {
        if row[8] > s0 {
            SPLIT.lock().expect("split")[0].push(row[8] - s0);
        }
    }
}

#[cfg(feature = "trace")]
fn split_recv(got: &[u8], t1: u64) {
    let s0 = u64::from_le_bytes(got[..8].try_into().expect("8 bytes"));
    let r1 = verbs::counters::row_now()[0];
    if r1 > s0 && t1 > r1 {
        let mut s = SPLIT.lock().expect("split");
        s[1].push(r1 - s0);
        s[2].push(t1 - r1);
    }
}

// Without the `trace` feature the fabric keeps no stamps to split the one-way time by.
#[cfg(not(feature = "trace"))]
fn split_send(_sent: &[u8]) {}
#[cfg(not(feature = "trace"))]
fn split_recv(_got: &[u8], _t1: u64) {}

/// `isend` that progresses while the pool is exhausted.
fn isend_retry(
    comm: &mut Communicator,
    peer: usize,
    data: &[u8],
) -> ballast_runtime::Result<ballast_runtime::Request> {
    loop {
        match comm.isend(peer, 1, data) {
            Err(e) if e.is_would_block() => {
                comm.progress()?;
            }
            r => return r,
        }
    }
}

fn rank_main(args: &Args) -> ballast_runtime::Result<()> {
    let quick = args.quick;
    let rounds = args.rounds;
    let sizes = &args.sizes;
    let cfg = RuntimeConfig::from_env()?;
    let mut boot = bootstrap::auto(&cfg)?.boot;
    let mut comm = verbs::communicator(boot.as_mut(), &cfg)?;
    if comm.world_size() != 2 {
        return Err(ballast_runtime::fabric::FabricError::InvalidRank {
            rank: 2,
            world_size: comm.world_size(),
        }
        .into());
    }
    let buf = vec![7u8; sizes.iter().copied().max().unwrap_or(8)];
    // Warm-up: connects the QPs.
    half_rtt(&mut comm, 8, 20, &buf)?;
    ONE_WAY.store(args.one_way, std::sync::atomic::Ordering::Relaxed);
    QUIET_US.store(args.quiet_us, std::sync::atomic::Ordering::Relaxed);
    if comm.rank() == 0 {
        println!(
            "verbs ping-pong: recv_sharing {}, buffer_size {} B, {rounds} rounds; typical = median round trip / 2 (as ib_send_lat's t_typical), mean = total time / 2n; medians over rounds",
            comm.config().recv_sharing,
            comm.config().buffer_size
        );
        // The per-round-trip timing costs two clock reads (perftest reads the TSC instead):
        // say what one costs here (under TCG with the HPET clock source, microseconds).
        let t = Instant::now();
        for _ in 0..1000 {
            std::hint::black_box(Instant::now());
        }
        println!("clock read (Instant::now): {:.2} us each; round trips are timed with the cycle counter ({:.0} ticks/us), as ib_send_lat does", t.elapsed().as_secs_f64() * 1e3, verbs::cycles::per_us());
        println!(
            "{:>10} {:>10} {:>12} {:>12} {:>12}",
            "bytes", "iters", "typical us", "mean us", "MB/s"
        );
    }
    for &size in sizes {
        let n = iters(size, quick);
        let mut means = Vec::new();
        let mut typs = Vec::new();
        for _ in 0..rounds {
            let (m, t) = half_rtt(&mut comm, size, n, &buf)?;
            means.push(m);
            typs.push(t);
        }
        means.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
        typs.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
        let (mean, typ) = (means[means.len() / 2], typs[typs.len() / 2]);
        if comm.rank() == 0 {
            println!(
                "{size:>10} {n:>10} {:>12.2} {:>12.2} {:>12.1}",
                typ * 1e6,
                mean * 1e6,
                size as f64 / mean / 1e6
            );
            if size == 8 {
                println!("ballast_verbs_8B_half_rtt_us={:.2}", typ * 1e6);
                println!("ballast_verbs_8B_mean_half_rtt_us={:.2}", mean * 1e6);
            }
        }
    }
    {
        let mut v = std::mem::take(&mut *ONE_WAY_SAMPLES.lock().expect("samples"));
        if !v.is_empty() {
            v.sort_unstable();
            let us = verbs::cycles::per_us();
            println!(
                "rank {} one-way isend -> recv returned 8 B, median {:.2} us, p10 {:.2} us over {}",
                comm.rank(),
                v[v.len() / 2] as f64 / us,
                v[v.len() / 10] as f64 / us,
                v.len()
            );
        }
        #[cfg(feature = "trace")]
        let mut g = verbs::counters::take_since_empty();
        #[cfg(feature = "trace")]
        if !g.is_empty() {
            g.sort_unstable();
            let us = verbs::cycles::per_us();
            println!(
                "rank {} receive seen, since the last empty CQ poll (p10/p50/p90): {:.2} / {:.2} / {:.2} us",
                comm.rank(),
                g[g.len() / 10] as f64 / us,
                g[g.len() / 2] as f64 / us,
                g[g.len() * 9 / 10] as f64 / us
            );
        }
        let mut s = std::mem::take(&mut *SPLIT.lock().expect("split"));
        if s[..3].iter().all(|v| !v.is_empty()) {
            let us = verbs::cycles::per_us();
            let m: Vec<f64> = s[..3]
                .iter_mut()
                .map(|v| {
                    v.sort_unstable();
                    v[v.len() / 2] as f64 / us
                })
                .collect();
            println!("rank {} one-way split (medians): sender stamp -> ibv_post_send {:.2} us (sent {}); sender stamp -> CQ poll returned it {:.2} us, that poll -> recv returned {:.2} us (received {})", comm.rank(), m[0], s[0].len(), m[1], m[2], s[1].len());
        }
        if !s[3].is_empty() {
            let us = verbs::cycles::per_us();
            let v = &mut s[3];
            v.sort_unstable();
            let at = |q: usize| (v[v.len() * q / 100] as i64 - (1i64 << 40)) as f64 / us;
            println!("rank {} responder entered recv at sender stamp + (p10/p50/p90) {:.2} / {:.2} / {:.2} us (negative: before the ping was sent)", comm.rank(), at(10), at(50), at(90));
        }
    }
    if args.raw_inside {
        // The raw-verbs ping-pong (its own QPs), run inside this process after Ballast's.
        let mut stream = if comm.rank() == 0 {
            let l = std::net::TcpListener::bind("127.0.0.1:7777").expect("bind 7777");
            comm.barrier()?;
            l.accept().expect("accept").0
        } else {
            comm.barrier()?;
            std::net::TcpStream::connect("127.0.0.1:7777").expect("connect 7777")
        };
        let o = ballast_bench::raw_pingpong::RawOptions {
            one_way: true,
            ..Default::default()
        };
        let out = ballast_bench::raw_pingpong::run(cfg.verbs(), &mut stream, comm.rank() == 0, &o)?;
        if comm.rank() == 0 {
            let mut v = out;
            v.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
            println!(
                "raw inside the Ballast process: typical {:.2} us",
                v[v.len() / 2] * 1e6
            );
        }
        comm.barrier()?;
    }
    #[cfg(feature = "trace")]
    if args.breakdown {
        let t = Instant::now();
        for _ in 0..10_000 {
            comm.progress()?;
        }
        println!(
            "rank {} idle progress call: {:.2} us",
            comm.rank(),
            t.elapsed().as_secs_f64() * 1e2
        );
        comm.barrier()?;
        let n = iters(8, quick);
        let mut parts: [Vec<f64>; 3] = Default::default();
        let c0 = verbs::counters::snapshot();
        half_rtt_parts(&mut comm, 8, n, &buf, Some(&mut parts))?;
        let c1 = verbs::counters::snapshot();
        let per: Vec<String> = verbs::counters::NAMES
            .iter()
            .zip(c0.iter().zip(c1.iter()))
            .map(|(name, (a, b))| format!("{name} {:.2}", (b - a) as f64 / n as f64))
            .collect();
        println!("rank {} per round trip: {}", comm.rank(), per.join(", "));
        let mut g = verbs::counters::take_gaps();
        if !g.is_empty() {
            g.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
            println!("rank {} receive seen -> next ibv_post_send (BALLAST_VERBS_TRACE): median {:.1} us, p10 {:.1} us over {}", comm.rank(), g[g.len() / 2], g[g.len() / 10], g.len());
        }
        let st = verbs::counters::take_stages();
        if !st.is_empty() {
            let med = |k: usize| {
                let mut v: Vec<f64> = st.iter().map(|x| x[k]).collect();
                v.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
                v[v.len() / 2]
            };
            println!("rank {} that gap in parts (medians): in the fabric's poll {:.1} us, engine and caller until the fabric's post_send {:.1} us, post_send until ibv_post_send {:.1} us", comm.rank(), med(0), med(1), med(2));
        }
        let rows = verbs::counters::take_rows();
        if !rows.is_empty() {
            let hz = verbs::cycles::per_us();
            // Stamp 0: the CQ poll returned a receive; step k runs from stamp k-1 to stamp k.
            let names = [
                "engine's arrival (matching)",
                "SRQ repost (deferred: a push)",
                "rest of the fabric poll",
                "engine settle",
                "rest of engine progress",
                "caller until isend",
                "isend until the fabric's post_send",
                "post_send until ibv_post_send",
                "ibv_post_send",
            ];
            let parts: Vec<String> = (1..verbs::counters::STAMP_SLOTS)
                .map(|k| {
                    let mut v: Vec<f64> = rows
                        .iter()
                        .filter(|r| r[k] != 0 && r[k - 1] != 0)
                        .map(|r| r[k].saturating_sub(r[k - 1]) as f64 / hz)
                        .collect();
                    v.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
                    format!(
                        "{} {:.2} ({})",
                        names[k - 1],
                        v.get(v.len() / 2).copied().unwrap_or(-1.0),
                        v.len()
                    )
                })
                .collect();
            let mut tot: Vec<f64> = rows
                .iter()
                .map(|r| r[9].saturating_sub(r[0]) as f64 / hz)
                .collect();
            tot.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
            println!(
                "rank {} receive -> reply by cycle-counter stamps ({hz:.0}/us), medians us: total {:.2}; {}",
                comm.rank(),
                tot[tot.len() / 2],
                parts.join(", ")
            );
        }
        let mut a = verbs::counters::take_arrivals();
        if !a.is_empty() {
            a.sort_by(|x, y| x.partial_cmp(y).expect("finite"));
            println!("rank {} engine handling of one arrival (BALLAST_VERBS_TRACE): median {:.1} us, p10 {:.1} us over {}", comm.rank(), a[a.len() / 2], a[a.len() / 10], a.len());
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
            v.get(v.len() / 2).copied().unwrap_or(0.0)
        };
        let [a, b, c] = &mut parts;
        println!(
            "rank {} 8 B breakdown, median per iteration: isend {:.1} us, recv {:.1} us, send tests {:.1} us",
            comm.rank(),
            med(a),
            med(b),
            med(c)
        );
    }
    verbs::finish(comm)
}

pub fn main() {
    // Parsed first, so that `--help` and bad switches are answered before anything else.
    let args = Args::parse();
    if let (false, Some(a)) = (args.bench, args.bench_filter.first()) {
        <Args as clap::CommandFactory>::command()
            .error(
                clap::error::ErrorKind::UnknownArgument,
                format!("unexpected argument '{a}' found"),
            )
            .exit();
    }
    if args.breakdown && !cfg!(feature = "trace") {
        <Args as clap::CommandFactory>::command()
            .error(
                clap::error::ErrorKind::InvalidValue,
                "--breakdown needs the verbs fabric's counters: build with `--features verbs,trace` (the bench's `trace` feature)",
            )
            .exit();
    }
    // Forwarded as given to the two ranks this process starts (which parse them again).
    let forward: Vec<OsString> = std::env::args_os().skip(1).collect();
    let cfg = RuntimeConfig::from_env().unwrap_or_else(|e| {
        eprintln!("verbs_pingpong: {e}");
        std::process::exit(2)
    });
    if cfg.bootstrap().root.is_some() && cfg.bootstrap().rank.is_some() {
        if let Err(e) = rank_main(&args) {
            eprintln!("verbs_pingpong rank {:?}: {e}", cfg.bootstrap().rank);
            std::process::exit(1);
        }
        return;
    }
    match verbs::device::device_names() {
        Ok(d) if !d.is_empty() => {}
        Ok(_) => {
            println!("verbs_pingpong: skipped: no RDMA device on this machine");
            return;
        }
        Err(e) => {
            println!("verbs_pingpong: skipped: {e}");
            return;
        }
    }
    let devices: Vec<String> = if args.devices.is_empty() {
        ["RXE_VM_DEV", "RXE_VM_DEV2"]
            .iter()
            .filter_map(|v| std::env::var(v).ok())
            .collect()
    } else {
        args.devices.clone()
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .port();
    let children: Vec<_> = (0..2)
        .map(|r| {
            let mut c = Command::new(std::env::current_exe().expect("own path"));
            c.args(&forward)
                .env("BALLAST_ROOT", format!("127.0.0.1:{port}"))
                .env("BALLAST_RANK", r.to_string())
                .env("BALLAST_SIZE", "2");
            if !devices.is_empty() {
                c.env("BALLAST_IB_DEVICE", &devices[r % devices.len()]);
            }
            if let Ok(g) = std::env::var("RXE_VM_GID") {
                c.env("BALLAST_GID_INDEX", g);
            }
            c.spawn().expect("spawn a rank")
        })
        .collect();
    let mut ok = true;
    for mut c in children {
        ok &= c.wait().map(|s| s.success()).unwrap_or(false);
    }
    std::process::exit(i32::from(!ok));
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli() {
        // The imports are in here: the `cargo bench` target compiles this module with
        // `cfg(test)` but without the test harness, which drops `#[test]` functions.
        use super::*;
        use clap::CommandFactory;
        Args::command().debug_assert();
        let a = Args::try_parse_from(["verbs_pingpong"]).expect("no switches");
        assert_eq!(
            (a.rounds, a.sizes.as_slice(), a.quiet_us),
            (5, &[8, 64, 1024, 8192, 65536][..], 0)
        );
        let a = Args::try_parse_from([
            "verbs_pingpong",
            "--sizes",
            "8,1024",
            "--devices",
            "a,b",
            "--one-way",
            "--bench",
        ])
        .expect("switches");
        assert_eq!(
            (a.sizes.as_slice(), a.devices.as_slice(), a.one_way),
            (&[8, 1024][..], &["a".to_string(), "b".to_string()][..], true)
        );
        // `cargo bench` appends `--bench`, after a filter if one is given.
        assert!(Args::try_parse_from(["verbs_pingpong", "filter", "--bench"]).is_ok());
        assert!(Args::try_parse_from(["verbs_pingpong", "--one_way"]).is_err());
        assert!(Args::try_parse_from(["verbs_pingpong", "--rounds", "0"]).is_err());
    }
}
