//! The fault-injection property test (feature `fault`; `ballast_runtime::fault`): for each
//! seed, a random world (2 to 8 local ranks, a random configuration: sharing mode, buffer
//! size and count, queue depths, an endpoint cap with datagram or evict overflow), random
//! faults (datagrams dropped, duplicated, delayed and reordered; reliable packets delayed
//! and reordered across peers; sometimes a rank stalled, sometimes one killed) and random
//! traffic (phases of point to point with specific-source, any-source, non-blocking and
//! `recv_into` receives, messages from 0 B to 64 KiB, so chunked; barriers; all-gathers).
//!
//! Checked: every message is delivered exactly once, in order per (source, tag), with the
//! right bytes; collectives give every rank's block; no call fails without a kill (a
//! stalled rank is never reported gone); after a kill, every failing call is a peer error
//! (`PeerGone`, `Aborted`) and comes within 1 s of the death; nothing hangs (a watchdog
//! fails the binary naming the seed).
//!
//! Seeds: 2,000 by default (0..2000); `BALLAST_FAULT_SEEDS=A..B` runs another range,
//! `BALLAST_FAULT_SEED=N` one seed with its plan printed. A failing seed is printed with
//! the command that re-runs it; seeds that found bugs are kept in `REGRESSION_SEEDS`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ballast_runtime::fault::{self, Faults, Kill, Stall};
use ballast_runtime::{fabric::FabricError, CommError};
use ballast_runtime::{Communicator, EndpointOverflow, Error, RecvSharing, RuntimeConfig, Source, TagMatch};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Seeds that once failed; run first by `random_traffic_over_faults`. 14, 17, 147, 175,
/// 217, 431, 460, 478: shared/xrc queues hung under delays (a credit request that
/// overtook the sender's packets queued an idle sender, whose shares never came back).
/// 157, 786, 1040: a killed rank left survivors waiting (a busy rank never idle; an
/// endpoint to the dead rank kept by a live or finished one, at its cap).
const REGRESSION_SEEDS: &[u64] = &[14, 17, 147, 157, 175, 217, 431, 460, 478, 786, 1040];

/// A seed taking longer than this is a hang.
const SEED_DEADLINE: Duration = Duration::from_secs(30);

/// The longest a survivor's failing call may come after the kill.
const KILL_NOTICE: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
struct Msg {
    src: usize,
    dst: usize,
    tag: u32,
    len: usize,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum RecvMode {
    /// `recv` or `recv_into` per (source, tag), in order.
    Specific,
    /// `recv(Any, tag)` as many times as messages of that tag are due.
    AnySource,
    /// `irecv` of every message first, then `wait` in reverse order.
    NonBlocking,
}

#[derive(Clone, Debug)]
enum Phase {
    P2p { msgs: Vec<Msg>, mode: RecvMode },
    Barrier,
    Gather { lens: Vec<usize> },
}

#[derive(Clone, Debug)]
struct Plan {
    seed: u64,
    n: usize,
    cfg: RuntimeConfig,
    faults: Faults,
    phases: Vec<Phase>,
}

fn msg_len(rng: &mut ChaCha8Rng) -> usize {
    match rng.random_range(0..10) {
        0..=6 => rng.random_range(0..64),
        7 | 8 => rng.random_range(64..2048),
        _ => rng.random_range(2048..=65536),
    }
}

fn plan(seed: u64) -> Plan {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = rng.random_range(2..=8usize);
    let sharing = [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc][rng.random_range(0..3)];
    let mut b = RuntimeConfig::builder()
        .lock_pool(false)
        .recv_sharing(sharing)
        .buffer_size([256, 512, 1024, 4096][rng.random_range(0..4)])
        .buffer_count(rng.random_range(4..=24))
        .recv_depth(rng.random_range(2..=8))
        .srq_depth(rng.random_range(4..=32))
        .ranks_per_node(rng.random_range(1..=4));
    match rng.random_range(0..10) {
        0..=4 => {}
        5..=7 => {
            b = b
                .max_endpoints(rng.random_range(1..n.max(2)))
                .endpoint_overflow(EndpointOverflow::Datagram)
        }
        _ => {
            b = b
                .max_endpoints(rng.random_range(1..n.max(2)))
                .endpoint_overflow(EndpointOverflow::Evict)
        }
    }
    let cfg = b.build().expect("a valid configuration");
    let mut faults = Faults {
        seed,
        datagram_drop: rng.random_range(0.0..0.1),
        datagram_duplicate: rng.random_range(0.0..0.1),
        datagram_delay: rng.random_range(0.0..0.3),
        reliable_delay: rng.random_range(0.0..0.3),
        max_delay: Duration::from_micros(rng.random_range(0..2000)),
        stall: None,
        kill: None,
    };
    match rng.random_range(0..10) {
        0 => {
            faults.stall = Some(Stall {
                rank: rng.random_range(0..n),
                after_polls: rng.random_range(1..2000),
                duration: Duration::from_millis(rng.random_range(20..80)),
            })
        }
        1 => {
            faults.kill = Some(Kill {
                rank: rng.random_range(0..n),
                after_polls: rng.random_range(1..3000),
            })
        }
        _ => {}
    }
    let phases = (0..rng.random_range(2..=6u32))
        .map(|p| match rng.random_range(0..10) {
            0..=5 => {
                let msgs = (0..rng.random_range(0..=4 * n))
                    .map(|_| Msg {
                        src: rng.random_range(0..n),
                        dst: rng.random_range(0..n),
                        // Tags of their own per phase: a receive of any source in one
                        // phase cannot take a message of the next.
                        tag: 3 * p + rng.random_range(0..3),
                        len: msg_len(&mut rng),
                    })
                    .collect();
                let mode =
                    [RecvMode::Specific, RecvMode::AnySource, RecvMode::NonBlocking][rng.random_range(0..3)];
                Phase::P2p { msgs, mode }
            }
            6 | 7 => Phase::Barrier,
            _ => Phase::Gather {
                lens: (0..n).map(|_| msg_len(&mut rng).min(4096)).collect(),
            },
        })
        .collect();
    Plan {
        seed,
        n,
        cfg,
        faults,
        phases,
    }
}

/// The bytes of the `k`-th message from `src` to `dst` with `tag` in phase `p`.
fn content(seed: u64, p: usize, src: usize, dst: usize, tag: u32, k: usize, len: usize) -> Vec<u8> {
    let mut x = seed
        ^ (p as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ ((src as u64) << 40)
        ^ ((dst as u64) << 48)
        ^ ((tag as u64) << 56)
        ^ (k as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x |= 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// How one rank's script ended.
#[derive(Debug)]
struct Report {
    /// The first failing call: (what, the error, when).
    error: Option<(String, Error, Instant)>,
    /// Wrong, lost, duplicated or reordered data: a bug whatever the faults.
    wrong: Vec<String>,
}

/// Runs `plan`'s script on one rank.
fn script(plan: &Plan, comm: &mut Communicator) -> Report {
    WHO.set((plan.seed, comm.rank()));
    let mut rep = Report {
        error: None,
        wrong: Vec::new(),
    };
    if let Err(failed) = script_steps(plan, comm, &mut rep.wrong) {
        let (what, e) = *failed;
        rep.error = Some((what, e, Instant::now()));
    }
    rep
}

/// A step's result: its error with what the step was (boxed: a failing step is rare).
type Step<T> = std::result::Result<T, Box<(String, Error)>>;

fn at<T>(what: impl Fn() -> String, r: ballast_runtime::Result<T>) -> Step<T> {
    if TRACE.load(Ordering::Relaxed) {
        eprintln!("{:?}: done {}", std::thread::current().name(), what());
    }
    let (seed, rank) = WHO.get();
    LAST.lock()
        .unwrap()
        .get_or_insert_default()
        .insert((seed, rank), what());
    r.map_err(|e| Box::new((what(), e)))
}

thread_local! {
    /// The seed and rank this thread runs.
    static WHO: std::cell::Cell<(u64, usize)> = const { std::cell::Cell::new((0, 0)) };
}

/// The last step each (seed, rank) finished, for the watchdog's report.
static LAST: Mutex<Option<HashMap<(u64, usize), String>>> = Mutex::new(None);

/// Set for a single seed's re-run: every step is printed.
static TRACE: AtomicBool = AtomicBool::new(false);

fn script_steps(plan: &Plan, comm: &mut Communicator, wrong: &mut Vec<String>) -> Step<()> {
    let me = comm.rank();
    let seed = plan.seed;
    for (p, phase) in plan.phases.iter().enumerate() {
        match phase {
            Phase::Barrier => at(|| format!("phase {p}: barrier"), comm.barrier())?,
            Phase::Gather { lens } => {
                let mine = content(seed, p, me, me, 99, 0, lens[me]);
                let all = at(|| format!("phase {p}: all_gatherv"), comm.all_gatherv(&mine))?;
                for (r, block) in all.iter().enumerate() {
                    if *block != content(seed, p, r, r, 99, 0, lens[r]) {
                        wrong.push(format!("phase {p}: all_gatherv: rank {r}'s block is wrong"));
                    }
                }
            }
            Phase::P2p { msgs, mode } => p2p(seed, p, msgs, *mode, comm, wrong)?,
        }
    }
    // Exactly once: after a last barrier, nothing more is queued for this rank.
    at(|| "final barrier".into(), comm.barrier())?;
    if let Some(e) = at(|| "final iprobe".into(), comm.iprobe(Source::Any, TagMatch::Any))? {
        wrong.push(format!("a message more than sent: {e:?}"));
    }
    Ok(())
}

fn p2p(
    seed: u64,
    p: usize,
    msgs: &[Msg],
    mode: RecvMode,
    comm: &mut Communicator,
    wrong: &mut Vec<String>,
) -> Step<()> {
    let me = comm.rank();
    // Sends, in script order, with their index per (src, dst, tag).
    let mut count: HashMap<(usize, usize, u32), usize> = HashMap::new();
    let mut incoming: Vec<(usize, u32, usize, usize)> = Vec::new(); // (src, tag, k, len)
    let mut sends = Vec::new();
    for m in msgs {
        let k = {
            let c = count.entry((m.src, m.dst, m.tag)).or_default();
            *c += 1;
            *c - 1
        };
        if m.src == me {
            let data = content(seed, p, me, m.dst, m.tag, k, m.len);
            let r = comm.isend_waiting(m.dst, m.tag, &data);
            sends.push(at(|| format!("phase {p}: isend to {} tag {}", m.dst, m.tag), r)?);
        }
        if m.dst == me {
            incoming.push((m.src, m.tag, k, m.len));
        }
    }
    let check = |wrong: &mut Vec<String>, src: usize, tag: u32, k: usize, data: &[u8], len: usize| {
        if data != content(seed, p, src, me, tag, k, len).as_slice() {
            wrong.push(format!(
                "phase {p}: message {k} from rank {src} tag {tag}: {} bytes, expected {len}, or wrong bytes",
                data.len()
            ));
        }
    };
    match mode {
        RecvMode::Specific => {
            for (i, &(src, tag, k, len)) in incoming.iter().enumerate() {
                let what = || format!("phase {p}: recv from {src} tag {tag} (#{k})");
                if i % 2 == 0 {
                    let m = at(what, comm.recv(src, tag))?;
                    check(wrong, src, tag, k, &m.data, len);
                } else {
                    let mut buf = vec![0u8; len + 7];
                    match at(what, comm.recv_into(Source::Rank(src), tag, &mut buf))? {
                        Ok(env) => check(wrong, src, tag, k, &buf[..env.len], len),
                        Err(env) => wrong.push(format!(
                            "phase {p}: recv_into refused {env:?} (buffer {})",
                            len + 7
                        )),
                    }
                }
            }
        }
        RecvMode::AnySource => {
            // Receives of any source, with the phase's tags in turn.
            let mut expect: HashMap<(usize, u32), Vec<(usize, usize)>> = HashMap::new();
            for &(src, tag, k, len) in &incoming {
                expect.entry((src, tag)).or_default().push((k, len));
            }
            let mut next: HashMap<(usize, u32), usize> = HashMap::new();
            for (i, &(_, tag, _, _)) in incoming.iter().enumerate() {
                let r = comm.recv(Source::Any, tag);
                let m = at(|| format!("phase {p}: recv any source tag {tag} (#{i})"), r)?;
                let key = (m.source, m.tag);
                let j = next.entry(key).or_default();
                match expect.get(&key).and_then(|v| v.get(*j)) {
                    Some(&(k, len)) => check(wrong, m.source, m.tag, k, &m.data, len),
                    None => wrong.push(format!(
                        "phase {p}: unexpected message from {} tag {}",
                        m.source, m.tag
                    )),
                }
                *j += 1;
            }
        }
        RecvMode::NonBlocking => {
            let mut reqs = Vec::new();
            for &(src, tag, k, len) in &incoming {
                let r = at(|| format!("phase {p}: irecv from {src}"), comm.irecv(src, tag))?;
                reqs.push((r, src, tag, k, len));
            }
            while let Some((r, src, tag, k, len)) = reqs.pop() {
                let c = at(
                    || format!("phase {p}: wait recv from {src} tag {tag} (#{k})"),
                    comm.wait(r),
                )?;
                let m = c.into_message().expect("a receive");
                check(wrong, src, tag, k, &m.data, len);
            }
        }
    }
    for s in sends {
        at(|| format!("phase {p}: wait send"), comm.wait(s))?;
    }
    Ok(())
}

/// Runs one seed: `Err(why)` when a property fails.
fn run_seed(seed: u64, verbose: bool) -> std::result::Result<fault::FaultRun<Report>, String> {
    let plan = plan(seed);
    if verbose {
        println!("seed {seed}: {plan:?}");
        TRACE.store(true, Ordering::Relaxed);
    }
    let out = fault::run(plan.n, &plan.cfg, &plan.faults, |comm| script(&plan, comm))
        .map_err(|e| format!("the run failed: {e}"))?;
    let mut bad = Vec::new();
    for (r, rep) in out.results.iter().enumerate() {
        let Some(rep) = rep else {
            bad.push(format!("rank {r}: its function did not return"));
            continue;
        };
        bad.extend(rep.wrong.iter().map(|w| format!("rank {r}: {w}")));
        let killed_rank = plan
            .faults
            .kill
            .filter(|_| out.killed_at.is_some())
            .map(|k| k.rank);
        if let Some((what, e, when)) = &rep.error {
            match out.killed_at {
                None => bad.push(format!("rank {r}: {what}: {e} (no rank was killed)")),
                Some(_) if killed_rank == Some(r) => {}
                Some(t) => {
                    if !matches!(
                        e,
                        Error::Comm(CommError::PeerGone { .. }) | Error::Fabric(FabricError::Aborted)
                    ) {
                        bad.push(format!("rank {r}: {what}: {e}: not a peer error after the kill"));
                    }
                    let late = when.saturating_duration_since(t);
                    if late > KILL_NOTICE {
                        bad.push(format!(
                            "rank {r}: {what} failed {late:?} after the kill (more than {KILL_NOTICE:?})"
                        ));
                    }
                }
            }
        }
    }
    if out.killed_at.is_none() {
        if let Some(e) = &out.finish_error {
            bad.push(format!("a rank's finish failed without a kill: {e}"));
        }
    }
    if bad.is_empty() {
        Ok(out)
    } else {
        Err(bad.join("\n"))
    }
}

/// The seeds to run: `BALLAST_FAULT_SEED=N` (one, verbose), `BALLAST_FAULT_SEEDS=A..B`,
/// else the regression seeds then 0..2000.
fn seeds() -> (Vec<u64>, bool) {
    if let Ok(s) = std::env::var("BALLAST_FAULT_SEED") {
        return (
            vec![s.trim().parse().expect("BALLAST_FAULT_SEED: a seed (u64)")],
            true,
        );
    }
    let range = match std::env::var("BALLAST_FAULT_SEEDS") {
        Ok(r) => {
            let (a, b) = r.trim().split_once("..").expect("BALLAST_FAULT_SEEDS: A..B");
            a.parse().expect("BALLAST_FAULT_SEEDS: A")..b.parse().expect("BALLAST_FAULT_SEEDS: B")
        }
        Err(_) => 0..2000,
    };
    (REGRESSION_SEEDS.iter().copied().chain(range).collect(), false)
}

/// Seeds run at once (the machine's 2 cores: each seed's ranks mostly block).
const WORKERS: usize = 2;

/// A worker's seed under way and when it started.
type UnderWay = Mutex<Option<(u64, Instant)>>;

#[test]
fn random_traffic_over_faults() {
    let (seeds, verbose) = seeds();
    let seeds = Arc::new(seeds);
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(Mutex::new(Vec::<(u64, String)>::new()));
    // Dropped, duplicated, held, stalls, kills, finishes failed after a kill.
    let totals = Arc::new(Mutex::new([0u64; 6]));
    // Each worker's seed under way and its start, for the watchdog.
    let current: Arc<Vec<UnderWay>> = Arc::new((0..WORKERS).map(|_| Mutex::new(None)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let dog = {
        let (current, stop) = (current.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for c in current.iter() {
                    if let Some((seed, t)) = *c.lock().unwrap() {
                        if t.elapsed() > SEED_DEADLINE {
                            eprintln!(
                                "fault_property: seed {seed} HUNG ({:?}); re-run it with \
                                 BALLAST_FAULT_SEED={seed} cargo test -p ballast-runtime --features fault \
                                 --test fault_property",
                                t.elapsed()
                            );
                            let last = LAST.lock().unwrap();
                            let mut steps: Vec<_> =
                                last.iter().flatten().filter(|((s, _), _)| *s == seed).collect();
                            steps.sort();
                            for ((_, r), what) in steps {
                                eprintln!("  rank {r}: last step done: {what}");
                            }
                            std::process::exit(1);
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    let start = Instant::now();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (seeds, next, failed, totals, current) =
                (seeds.clone(), next.clone(), failed.clone(), totals.clone(), current.clone());
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&seed) = seeds.get(i) else { break };
                *current[w].lock().unwrap() = Some((seed, Instant::now()));
                match run_seed(seed, verbose) {
                    Ok(out) => {
                        let mut t = totals.lock().unwrap();
                        t[0] += out.stats.dropped.load(Ordering::Relaxed);
                        t[1] += out.stats.duplicated.load(Ordering::Relaxed);
                        t[2] += out.stats.held.load(Ordering::Relaxed);
                        t[3] += out.stats.stalls.load(Ordering::Relaxed);
                        t[4] += u64::from(out.killed_at.is_some());
                        t[5] += u64::from(out.finish_error.is_some());
                    }
                    Err(why) => {
                        eprintln!(
                            "fault_property: seed {seed} FAILED:\n{why}\nre-run it with BALLAST_FAULT_SEED={seed} \
                             cargo test -p ballast-runtime --features fault --test fault_property"
                        );
                        failed.lock().unwrap().push((seed, why));
                    }
                }
                *current[w].lock().unwrap() = None;
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    dog.join().unwrap();
    let t = *totals.lock().unwrap();
    println!(
        "fault_property: {} seeds in {:.1} s: {} datagrams dropped, {} duplicated, {} packets held back, \
         {} stalls, {} kills ({} finishes failed after a kill)",
        seeds.len(),
        start.elapsed().as_secs_f64(),
        t[0],
        t[1],
        t[2],
        t[3],
        t[4],
        t[5]
    );
    let failed = failed.lock().unwrap();
    assert!(
        failed.is_empty(),
        "failing seeds: {:?}",
        failed.iter().map(|f| f.0).collect::<Vec<_>>()
    );
    if !verbose && seeds.len() >= 1000 {
        // The faults really happen: every kind, many times over the default seeds.
        assert!(
            t[0] > 100 && t[1] > 100 && t[2] > 1000,
            "too few faults injected: {t:?}"
        );
        assert!(t[3] > 20 && t[4] > 20, "too few stalls or kills: {t:?}");
    }
}

fn small() -> RuntimeConfig {
    RuntimeConfig::builder()
        .buffer_count(8)
        .buffer_size(256)
        .lock_pool(false)
        .build()
        .unwrap()
}

#[test]
fn a_killed_rank_ends_its_peers_waits_within_a_second() {
    let faults = Faults {
        seed: 1,
        kill: Some(Kill {
            rank: 1,
            after_polls: 1,
        }),
        ..Faults::default()
    };
    let out = fault::run(3, &small(), &faults, |comm| {
        let got = comm.recv(Source::Rank((comm.rank() + 1) % 3), 4);
        (got.map(|m| m.data), Instant::now())
    })
    .unwrap();
    let t = out.killed_at.expect("rank 1 died at its first poll");
    for (r, res) in out.results.into_iter().enumerate() {
        let (got, when) = res.unwrap();
        let e = got.unwrap_err();
        match r {
            1 => assert!(
                matches!(e, Error::Fabric(FabricError::Aborted)),
                "the dead rank's own call: {e}"
            ),
            _ => {
                // Rank 0 waits on rank 1 itself: it names rank 1. Rank 2 waits on rank 0,
                // alive but waiting on the dead one: it names rank 1 too, or rank 0 if that
                // has returned (with its error) by then.
                let (peer, failed) = match e {
                    Error::Comm(CommError::PeerGone { peer, failed, .. }) => (peer, failed),
                    other => panic!("rank {r}: {other}"),
                };
                assert!(
                    (peer, failed) == (Some(1), true) || (r == 2 && (peer, failed) == (Some(0), false)),
                    "rank {r}: peer {peer:?} failed {failed}"
                );
                assert!(
                    when.duration_since(t) < KILL_NOTICE,
                    "rank {r} took {:?}",
                    when.duration_since(t)
                );
            }
        }
    }
}

#[test]
fn a_stalled_rank_is_never_gone_and_delivers_when_it_runs_again() {
    let faults = Faults {
        seed: 2,
        stall: Some(Stall {
            rank: 1,
            after_polls: 1,
            duration: Duration::from_millis(300),
        }),
        ..Faults::default()
    };
    let t0 = Instant::now();
    let out = fault::run(2, &small(), &faults, |comm| {
        if comm.rank() == 1 {
            comm.progress().unwrap(); // the stall
            comm.send(0, 3, &[7u8; 3000]).map(|_| Vec::new())
        } else {
            comm.recv(1, 3).map(|m| m.data)
        }
    })
    .unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(300), "the stall happened");
    assert_eq!(out.stats.stalls.load(Ordering::Relaxed), 1);
    let got: Vec<Vec<u8>> = out.results.into_iter().map(|r| r.unwrap().unwrap()).collect();
    assert_eq!(got, [vec![7u8; 3000], Vec::new()]);
}
