//! The verbs transport (feature `verbs`): Ballast over InfiniBand or RoCE RC queue pairs
//! through the system libibverbs, with the same [`Communicator`] API as `local` and `mpi`.
//! The libibverbs calls sit in the crate `ballast-ibv` (resources with `Drop`, a typestate
//! queue pair, transition attributes built by pure functions; it owns the `rdma-sys`
//! bindings and their unsafe code), which the fabric, XRC and the raw ping-pong use; `ibv`
//! here is its view with the runtime's errors.
//!
//! It owns: the errors of the safe layer with rank and peer (`ibv`), device selection and the capability probe ([`device`]:
//! `BALLAST_IB_DEVICE`, `BALLAST_IB_PORT`, `BALLAST_GID_INDEX`), the control channel ([`control`]: a TCP mesh
//! whose addresses are exchanged with the [`crate::bootstrap`]), and the fabric
//! ([`VerbsFabric`]: one memory region for the pool registered once, RC queue pairs created
//! lazily, an SRQ per rank in `shared` mode or a receive queue per QP in `per-peer` mode,
//! and with `max_endpoints` and `endpoint_overflow=datagram` one UD queue pair per rank
//! for the peers beyond the cap, whose addresses are asked on the control channel on first
//! use).
//!
//! **Connection data.** Queue pairs are created on the first message to or from a peer; their
//! QPN, PSN, LID and GID travel on the control channel attached to the engine's connect
//! request and acknowledgement (no all-to-all exchange at start, no RDMA CM: the bootstrap
//! only exchanges the control listeners' addresses). RDMA CM was not used because it would
//! add a second connection state machine beside the engine's, and it needs IP routes to
//! every device (which the two-device soft-RoCE test bed only has for raw verbs).
//!
//! **XRC** (`recv_sharing=xrc`) is used where the device reports `IBV_DEVICE_XRC`: a node-shared
//! XRC domain, an XRC SRQ per rank, one XRC send QP per remote node and TGT QPs created by
//! each node's first rank (see `xrc.rs`). It is compiled but has never run (soft-RoCE has no
//! XRC; no other device was available). Elsewhere `xrc` falls back to `shared` with a note
//! naming the reason (on soft-RoCE: the device reports no XRC), which is tested.
//!
//! ```no_run
//! use ballast_runtime::{bootstrap, verbs, RuntimeConfig, Source, TagMatch};
//! // Under any launcher that sets BALLAST_ROOT and the rank/size variables:
//! let cfg = RuntimeConfig::from_env()?;
//! let mut boot = bootstrap::auto(&cfg)?.boot;
//! let mut comm = verbs::communicator(boot.as_mut(), &cfg)?;
//! if comm.rank() == 0 {
//!     comm.send(1, 7, b"spikes")?;
//! } else if comm.rank() == 1 {
//!     let m = comm.recv(Source::Any, TagMatch::Tag(7))?;
//!     assert_eq!(m.data, b"spikes");
//! }
//! verbs::finish(comm)?;
//! # Ok::<(), ballast_runtime::Error>(())
//! ```

pub mod control;
pub mod device;
mod fabric;
#[allow(unsafe_code)] // rdtsc and registering the pool, each behind a safe function
mod ffi;
mod ibv;
mod xrc;

use std::net::{IpAddr, SocketAddr, UdpSocket};

use control::ControlListener;

/// Process-wide counters of what the verbs fabric did (diagnostics, only in a build with the
/// `trace` feature: `verbs_pingpong --breakdown` prints them): ibv_post_send calls,
/// control-channel frames sent, fabric polls, control-channel reads, ibv_poll_cq calls and
/// completions; and the arrivals refused and completions kept (`refusals`, which the verbs
/// conformance binary's `--refused-arrival` checks). Summed over the ranks of a process (relaxed atomics); the
/// `BALLAST_VERBS_TRACE` timings and cycle stamps assume one rank per process.
#[cfg(feature = "trace")]
pub mod counters {
    use std::sync::atomic::{AtomicU64, Ordering};
    /// Switches the timings on from the runtime configuration's `BALLAST_VERBS_TRACE`
    /// (`1`: clock-read timings, `tsc`: cycle stamps only); called when a fabric is created.
    pub(crate) fn enable_from_env() {
        match crate::core::config::verbs_trace().as_deref() {
            Some("1") => TRACE.store(true, Ordering::Relaxed),
            Some("tsc") => STAMPING.store(true, Ordering::Relaxed),
            _ => {}
        }
    }
    pub(crate) static POSTS: AtomicU64 = AtomicU64::new(0);
    pub(crate) static MESH_SENDS: AtomicU64 = AtomicU64::new(0);
    pub(crate) static POLLS: AtomicU64 = AtomicU64::new(0);
    pub(crate) static MESH_READS: AtomicU64 = AtomicU64::new(0);
    pub(crate) static CQ_POLLS: AtomicU64 = AtomicU64::new(0);
    pub(crate) static CQES: AtomicU64 = AtomicU64::new(0);
    pub(crate) fn bump(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
    /// The counters now, in the order above.
    pub fn snapshot() -> [u64; 6] {
        [&POSTS, &MESH_SENDS, &POLLS, &MESH_READS, &CQ_POLLS, &CQES].map(|c| c.load(Ordering::Relaxed))
    }
    pub(crate) static REFUSED: AtomicU64 = AtomicU64::new(0);
    pub(crate) static KEPT: AtomicU64 = AtomicU64::new(0);
    /// The refused arrivals now: how many times a CQ poll ended on an arrival the engine
    /// refused (out of memory; a kept one refused again counts again), and how many work
    /// completions were kept from fresh CQ batches (each refused one with the rest of its
    /// batch) to be taken first at the next poll.
    pub fn refusals() -> [u64; 2] {
        [&REFUSED, &KEPT].map(|c| c.load(Ordering::Relaxed))
    }
    /// With `BALLAST_VERBS_TRACE=1` (read when a fabric is created): the time from the
    /// `ibv_poll_cq` call that returned a receive to the next `ibv_post_send` of this
    /// process, per such pair, microseconds (two clock reads each: a diagnostic only).
    pub(crate) static TRACE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    pub(crate) static LAST_RECV: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    pub(crate) static GAPS: std::sync::Mutex<Vec<f64>> = std::sync::Mutex::new(Vec::new());
    /// True with `BALLAST_VERBS_TRACE=1` or `=tsc`.
    pub(crate) fn tracing() -> bool {
        TRACE.load(Ordering::Relaxed) || STAMPING.load(Ordering::Relaxed)
    }
    pub(crate) fn traced_recv() {
        stamp(0);
        if TRACE.load(Ordering::Relaxed) {
            *LAST_RECV.lock().expect("trace") = Some(std::time::Instant::now());
        }
    }
    pub(crate) fn traced_post() {
        if TRACE.load(Ordering::Relaxed) {
            if let Some(t) = LAST_RECV.lock().expect("trace").take() {
                let now = std::time::Instant::now();
                GAPS.lock().expect("trace").push((now - t).as_secs_f64() * 1e6);
                let mut st = STAGES.lock().expect("trace");
                if let (Some(p), Some(e)) = (st.0.take(), st.1.take()) {
                    let us = |a: std::time::Instant, b: std::time::Instant| {
                        b.saturating_duration_since(a).as_secs_f64() * 1e6
                    };
                    st.2.push([us(t, p), us(p, e), us(e, now)]);
                }
            }
        }
    }
    /// With tracing, the receive-to-post gap in three parts: (end of the fabric poll that saw
    /// the receive, entry of the next fabric `post_send`, the parts in microseconds: inside
    /// the fabric's poll, between the poll's return and `post_send` (engine and caller),
    /// inside `post_send` up to `ibv_post_send`).
    #[allow(clippy::type_complexity)]
    pub(crate) static STAGES: std::sync::Mutex<(
        Option<std::time::Instant>,
        Option<std::time::Instant>,
        Vec<[f64; 3]>,
    )> = std::sync::Mutex::new((None, None, Vec::new()));
    pub(crate) fn traced_poll_end() {
        if TRACE.load(Ordering::Relaxed) && LAST_RECV.lock().expect("trace").is_some() {
            let mut st = STAGES.lock().expect("trace");
            if st.0.is_none() {
                st.0 = Some(std::time::Instant::now());
            }
        }
    }
    pub(crate) fn traced_send_entry() {
        if TRACE.load(Ordering::Relaxed) {
            let mut st = STAGES.lock().expect("trace");
            if st.0.is_some() && st.1.is_none() {
                st.1 = Some(std::time::Instant::now());
            }
        }
    }
    /// Takes the three-part split of the receive-to-post gaps (see `STAGES`).
    pub fn take_stages() -> Vec<[f64; 3]> {
        std::mem::take(&mut STAGES.lock().expect("trace").2)
    }
    /// With tracing: time spent in the engine's handling of each arrived packet (the fabric's
    /// `Event::Arrival` callback), microseconds.
    pub(crate) static ARRIVALS: std::sync::Mutex<Vec<f64>> = std::sync::Mutex::new(Vec::new());
    pub(crate) fn trace_start() -> Option<std::time::Instant> {
        TRACE.load(Ordering::Relaxed).then(std::time::Instant::now)
    }
    pub(crate) fn traced_arrival(t: Option<std::time::Instant>) {
        if let Some(t) = t {
            ARRIVALS
                .lock()
                .expect("trace")
                .push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    /// Takes the engine's per-arrival handling times recorded so far (`BALLAST_VERBS_TRACE`).
    pub fn take_arrivals() -> Vec<f64> {
        std::mem::take(&mut *ARRIVALS.lock().expect("trace"))
    }
    /// Takes the receive-to-post gaps recorded so far (see `BALLAST_VERBS_TRACE`).
    pub fn take_gaps() -> Vec<f64> {
        std::mem::take(&mut *GAPS.lock().expect("trace"))
    }
    /// Time-stamp counter stamps along the receive-to-reply path (`BALLAST_VERBS_TRACE`):
    /// slot 0 is set when a CQ poll returns a receive and clears the others; later slots
    /// keep their first stamp; slot 9 (after `ibv_post_send`) closes the row.
    pub const STAMP_SLOTS: usize = 10;
    thread_local! {
        static ROW: std::cell::Cell<[u64; STAMP_SLOTS]> = const { std::cell::Cell::new([0; STAMP_SLOTS]) };
    }
    pub(crate) static ROWS: std::sync::Mutex<Vec<[u64; STAMP_SLOTS]>> = std::sync::Mutex::new(Vec::new());
    fn tsc() -> u64 {
        super::cycles::now()
    }
    /// Set by `BALLAST_VERBS_TRACE=tsc`: the stamps only, without the clock-read traces.
    pub(crate) static STAMPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    pub(crate) fn stamp(k: usize) {
        if !STAMPING.load(Ordering::Relaxed) {
            return;
        }
        ROW.with(|r| {
            let mut row = r.get();
            if k == 0 {
                row = [0; STAMP_SLOTS];
                row[0] = tsc();
            } else if row[0] != 0 && row[k] == 0 {
                row[k] = tsc();
                if k == STAMP_SLOTS - 1 {
                    ROWS.lock().expect("trace").push(row);
                    row = [0; STAMP_SLOTS];
                }
            }
            r.set(row);
        });
    }
    /// With `BALLAST_VERBS_TRACE=tsc`: the cycle counter at the last `ibv_poll_cq` that
    /// returned nothing, and per returned receive the cycles since that empty poll (how long
    /// the CQ went unpolled before the receive was seen, at most).
    pub(crate) static LAST_EMPTY: AtomicU64 = AtomicU64::new(0);
    pub(crate) static SINCE_EMPTY: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());
    pub(crate) fn polled_empty() {
        if STAMPING.load(Ordering::Relaxed) {
            LAST_EMPTY.store(tsc(), Ordering::Relaxed);
        }
    }
    pub(crate) fn polled_receive() {
        if STAMPING.load(Ordering::Relaxed) {
            let last = LAST_EMPTY.load(Ordering::Relaxed);
            if last != 0 {
                SINCE_EMPTY
                    .lock()
                    .expect("trace")
                    .push(tsc().saturating_sub(last));
            }
        }
    }
    /// Takes the cycles-since-the-last-empty-poll samples (see `SINCE_EMPTY`).
    pub fn take_since_empty() -> Vec<u64> {
        std::mem::take(&mut *SINCE_EMPTY.lock().expect("trace"))
    }
    /// The stamps of the row in progress on this thread (`--one-way` diagnostics).
    pub fn row_now() -> [u64; STAMP_SLOTS] {
        ROW.with(|r| r.get())
    }
    /// The last completed stamp row (`--one-way` diagnostics).
    pub fn last_row() -> Option<[u64; STAMP_SLOTS]> {
        ROWS.lock().expect("trace").last().copied()
    }
    /// Takes the stamp rows so far.
    pub fn take_rows() -> Vec<[u64; STAMP_SLOTS]> {
        std::mem::take(&mut *ROWS.lock().expect("trace"))
    }
    /// Names of [`snapshot`]'s entries.
    pub const NAMES: [&str; 6] = [
        "posts",
        "control sends",
        "fabric polls",
        "control reads",
        "ibv_poll_cq calls",
        "completions",
    ];
}
/// A cheap cycle counter for timing single round trips (what perftest's `ib_send_lat` times
/// with): on x86-64 the time-stamp counter, elsewhere nanoseconds from a process-wide start.
/// In the soft-RoCE guest a clock read (`Instant::now`) is a system call and an HPET read,
/// 1.3-5 us, a measurable part of the round trip it times; `rdtsc` is not.
pub mod cycles {
    /// The counter now.
    pub fn now() -> u64 {
        #[cfg(target_arch = "x86_64")]
        {
            super::ffi::rdtsc()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
            START.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
        }
    }

    /// Spins (no system call, no PAUSE) for `us` microseconds of the counter.
    pub fn spin_us(us: u64) {
        let until = now() + (us as f64 * per_us()) as u64;
        while now() < until {}
    }

    /// Ticks of [`now`] per microsecond, measured once against the clock over 50 ms.
    pub fn per_us() -> f64 {
        static RATE: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
        *RATE.get_or_init(|| {
            let (t, c) = (std::time::Instant::now(), now());
            std::thread::sleep(std::time::Duration::from_millis(50));
            now().wrapping_sub(c) as f64 / (t.elapsed().as_secs_f64() * 1e6)
        })
    }
}
pub use fabric::{VerbsFabric, HEADER_BYTES};

use crate::bootstrap::Bootstrap;
use crate::core::config::{BootstrapConfig, RuntimeConfig, TransportConfig, TransportKind};
use crate::fabric::error::{FabricError, Result};

/// The address the control listeners bind to: loopback when the bootstrap root is on this
/// machine (or unset), otherwise this machine's address on the route to the root.
pub fn control_host(cfg: &BootstrapConfig) -> IpAddr {
    let loopback = IpAddr::from([127, 0, 0, 1]);
    let Some(root) = cfg.root.as_deref() else {
        return loopback;
    };
    let Ok(mut addrs) = std::net::ToSocketAddrs::to_socket_addrs(root) else {
        return loopback;
    };
    let Some(a) = addrs.next() else { return loopback };
    if a.ip().is_loopback() {
        return loopback;
    }
    // A connected UDP socket sends nothing; it only asks the kernel for the source address.
    UdpSocket::bind(SocketAddr::new(IpAddr::from([0, 0, 0, 0]), 0))
        .and_then(|s| s.connect(a).and_then(|_| s.local_addr()))
        .map(|l| l.ip())
        .unwrap_or(loopback)
}

/// Bytes the verbs transport registers (and so pins) when a communicator starts: the pool
/// (`buffer_count x buffer_size`), the send headers ([`HEADER_BYTES`] per pool buffer, per
/// buffer of the largest pool with `pool_growth`) and, unless `per-peer`, the shared receive
/// queue's slots (`srq_depth x (HEADER_BYTES + buffer_size)`). What `RLIMIT_MEMLOCK` must
/// allow ([`FabricError::MemlockTooLow`] otherwise); per-peer receive queues add
/// `recv_depth x (HEADER_BYTES + buffer_size)` per queue pair later.
pub fn locked_at_start(t: &TransportConfig) -> u64 {
    let b = t.buffer_size as u64;
    let headers = if t.pool_growth {
        t.max_pool_bytes / b.max(1)
    } else {
        t.buffer_count as u64
    };
    let srq = if t.recv_sharing == crate::core::config::RecvSharing::PerPeer {
        0
    } else {
        t.srq_depth as u64 * (HEADER_BYTES as u64 + b)
    };
    t.buffer_count as u64 * b + headers * HEADER_BYTES as u64 + srq
}

pub(crate) fn verbs_config(config: &RuntimeConfig) -> crate::core::config::ConfigResult<RuntimeConfig> {
    // to_builder keeps the bootstrap and device selection; build() validates.
    config.to_builder().transport(TransportKind::Verbs).build()
}

/// Binds listeners for `local` ranks, all-gathers every rank's address over `boot`, and
/// returns the listeners with the address table of all `n` ranks.
pub(crate) fn exchange_addresses(
    boot: &mut dyn Bootstrap,
    n: usize,
    local: &[usize],
    host: IpAddr,
) -> Result<(Vec<ControlListener>, Vec<SocketAddr>)> {
    let listeners: Vec<ControlListener> = local
        .iter()
        .map(|_| ControlListener::bind(host))
        .collect::<Result<_>>()?;
    let mine: String = local
        .iter()
        .zip(&listeners)
        .map(|(r, l)| format!("{r}={};", l.addr()))
        .collect();
    let me = boot.rank();
    let all = boot.all_gather(mine.as_bytes())?;
    let mut addrs: Vec<Option<SocketAddr>> = vec![None; n];
    for blob in all {
        for item in String::from_utf8_lossy(&blob)
            .split(';')
            .filter(|s| !s.is_empty())
        {
            let (r, a) = item
                .split_once('=')
                .ok_or_else(|| FabricError::ControlAddresses {
                    rank: me,
                    what: format!("bad control address `{item}`"),
                })?;
            let r: usize = r.parse().map_err(|_| FabricError::ControlAddresses {
                rank: me,
                what: format!("bad rank in control address `{item}`"),
            })?;
            let a: SocketAddr = a.parse().map_err(|_| FabricError::ControlAddresses {
                rank: me,
                what: format!("bad address in control address `{item}`"),
            })?;
            if r >= n {
                return Err(FabricError::ControlAddresses {
                    rank: me,
                    what: format!("control address for rank {r} of a world of {n}"),
                });
            }
            addrs[r] = Some(a);
        }
    }
    let addrs = addrs
        .into_iter()
        .enumerate()
        .map(|(r, a)| {
            a.ok_or_else(|| FabricError::ControlAddresses {
                rank: me,
                what: format!("no control address for rank {r}"),
            })
        })
        .collect::<Result<_>>()?;
    Ok((listeners, addrs))
}
