//! The footprint: transport memory of one rank by kind, as accounted by a running
//! communicator ([`crate::Communicator::footprint`]) and as predicted from the
//! configuration alone ([`TransportConfig::predict`]), the formula the balancer charges
//! per rank.
//!
//! # The model
//!
//! With `c` = peers connected (all `world_size - 1` when `lazy_connect` is off), `e` =
//! live endpoints = `c` (per-peer, shared) or `min(c, ceil(world_size / ranks_per_node))`
//! (xrc: one send endpoint per remote node), capped at `max_endpoints` when set, `B` =
//! `buffer_size`, and the per-object sizes of [`MemoryModel`]:
//!
//! | kind | bytes |
//! |---|---|
//! | pool | `buffer_count * B` (initial; with `pool_growth` at most `max_pool_bytes`) |
//! | endpoints | `e * (endpoint_fixed + engine_endpoint)` + per-peer only: `e * (rq_fixed + recv_depth * (B + rq_wqe))` |
//! | shared receive queue | shared/xrc only: `srq_fixed + srq_depth * (B + srq_wqe)` |
//! | control | `control_fixed + c * per_peer_control` |
//! | registered | pool + receive buffers (`e * recv_depth * B` or `srq_depth * B`) |
//!
//! `total_bytes()` = pool + endpoints + shared receive queue + control (registered and
//! locked are views of the same memory, not added).
//!
//! In `xrc` mode only senders open endpoints, so for a rank that only receives the model
//! over-counts (it charges one endpoint per peer node); it never under-counts.
//!
//! # Sizes used for the verbs transport (mlx5, ConnectX-4 and later)
//!
//! From rdma-core `providers/mlx5/mlx5dv.h` (and `providers/mlx5/wqe.h` in older trees):
//! a send WQE basic block is `MLX5_SEND_WQE_BB = 64` bytes; a receive data segment
//! `struct mlx5_wqe_data_seg` is 16 bytes (one scatter entry per receive WQE); an SRQ
//! WQE adds `struct mlx5_wqe_srq_next_seg` (16 bytes), so 32 bytes; a completion entry
//! `struct mlx5_cqe64` is 64 bytes. Per QP we charge a send ring of
//! [`VERBS_SQ_DEPTH`] basic blocks plus [`VERBS_QP_CONTEXT_BYTES`] for the QP context the
//! driver gives the HCA (firmware ICM) and the user/kernel QP structures: this last
//! number is an estimate (rdma-core and the kernel do not state one size), to be replaced
//! by a measurement when the verbs transport lands. The CQ is [`VERBS_CQ_ENTRIES`] x 64 B.
//!
//! # The MPI transport: Ballast's own bytes only
//!
//! On the native path (`mpi_native`, the default with one rank per process; see
//! `mpi::native`) Ballast has no pool, endpoints or receive queues above MPI: it keeps one
//! send and one receive buffer of `B + 1` bytes (as `srq_bytes`), and its structure
//! ([`MPI_NATIVE_FIXED_BYTES`]) with a counter and a peer flag per rank of the world
//! ([`MPI_NATIVE_PER_RANK_BYTES`]) (as `control_bytes`); nothing grows per peer. Buffers of requests in flight
//! (posted receives, `isend` copies) are accounted while held (they are the application's
//! traffic, not a fixed cost), so the accounted figure equals the prediction whenever no
//! request is in flight; messages that arrived before their receive was posted are not
//! counted (the application's data, as in the engine's matcher and MPI's own queue). The rest of this section is the engine path
//! over MPI (`mpi_native` off, or several ranks per process).
//!
//! Ballast cannot see inside the MPI library (its eager and unexpected-message buffers,
//! its registrations): those are measured as process deltas by `Mpi::footprint`, not
//! modelled. [`MemoryModel::mpi`] and `predict` for `kind = mpi` count what Ballast itself
//! allocates: the pool (`buffer_count * B`, never registered or locked by Ballast: MPI
//! registers what it sends itself), one receive staging buffer of `B + MPI_STAGING_EXTRA_BYTES` (as `srq_bytes`,
//! in every sharing mode: MPI has no per-peer receive queues), the send buffers the fabric
//! keeps for reuse (as `endpoint_bytes`: at most `buffer_count` of `B +
//! MPI_STAGING_EXTRA_BYTES`; the accounted figure is what is really held, so it stays at or
//! below the prediction except transiently, e.g. while an `isend` of a message larger than
//! `B` holds its one owned copy until MPI has sent it), per endpoint the fabric's endpoint
//! entry and the engine's, and the engine and fabric structures. Messages larger than `B`
//! take MPI's own path (no pool buffer, no staging); a blocking `send` of one uses the
//! caller's memory, and the received message's buffer is the caller's `Message`.

use crate::config::{RecvSharing, TransportConfig, TransportKind};

/// Send queue depth per verbs QP (WQE basic blocks of 64 B).
pub const VERBS_SQ_DEPTH: u64 = 64;
/// Estimated QP context + driver structures per verbs QP, bytes (see module docs).
pub const VERBS_QP_CONTEXT_BYTES: u64 = 1024;
/// Completion queue entries per rank in the verbs model.
pub const VERBS_CQ_ENTRIES: u64 = 1024;
/// `MLX5_SEND_WQE_BB`, bytes.
pub const MLX5_SEND_WQE_BB: u64 = 64;
/// `sizeof(struct mlx5_wqe_data_seg)`, bytes: one receive WQE with one scatter entry.
pub const MLX5_RECV_WQE_BYTES: u64 = 16;
/// `sizeof(struct mlx5_wqe_srq_next_seg) + sizeof(struct mlx5_wqe_data_seg)`, bytes.
pub const MLX5_SRQ_WQE_BYTES: u64 = 32;
/// `sizeof(struct mlx5_cqe64)`, bytes.
pub const MLX5_CQE_BYTES: u64 = 64;
/// MPI transport: bytes of a receive staging or kept send buffer beyond `buffer_size` (the
/// 32-byte header and up to 16 piggybacked controls of 9 bytes).
pub const MPI_STAGING_EXTRA_BYTES: u64 = 32 + 16 * 9;
/// MPI transport: the fabric's per-endpoint entry (a `usize` in a hash set, with its
/// control byte).
pub const MPI_ENDPOINT_BYTES: u64 = std::mem::size_of::<usize>() as u64 + 1;
/// MPI transport: upper bound of the fabric structure's size (checked by a unit test of
/// the `mpi` feature).
pub const MPI_FABRIC_BYTES: u64 = 512;

/// MPI native path (`mpi_native`, the default with one rank per process): upper bound of
/// its structure's size (checked by a unit test of the `mpi` feature).
pub const MPI_NATIVE_FIXED_BYTES: u64 = 1024;
/// MPI native path: per rank of the world, the counter of messages sent to it (u64) and
/// the flag saying it is a peer (bool). Nothing grows per connected peer.
pub const MPI_NATIVE_PER_RANK_BYTES: u64 = 9;

/// Per-object sizes of one transport, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryModel {
    /// Per endpoint, transport side (the QP: send ring, context).
    pub endpoint_fixed_bytes: u64,
    /// Per endpoint, protocol side (the endpoint table entry).
    pub engine_endpoint_bytes: u64,
    /// Per per-peer receive queue, excluding its buffers and WQEs.
    pub rq_fixed_bytes: u64,
    /// Per receive WQE of a per-peer receive queue, beyond the buffer itself.
    pub rq_wqe_bytes: u64,
    /// Per shared receive queue, excluding its buffers and WQEs.
    pub srq_fixed_bytes: u64,
    /// Per receive WQE of a shared receive queue, beyond the buffer itself.
    pub srq_wqe_bytes: u64,
    /// Per rank: protocol engine, transport object, completion queue.
    pub control_fixed_bytes: u64,
    /// Per connected peer: sender state and credit-bank entry.
    pub per_peer_control_bytes: u64,
}

impl MemoryModel {
    /// Sizes of the in-process transport: the sizes of the structures it really allocates.
    pub fn local() -> MemoryModel {
        crate::local::memory_model()
    }

    /// Sizes of the verbs transport (mlx5); see the module docs for sources.
    pub fn verbs() -> MemoryModel {
        let engine = crate::local::memory_model();
        MemoryModel {
            endpoint_fixed_bytes: VERBS_SQ_DEPTH * MLX5_SEND_WQE_BB + VERBS_QP_CONTEXT_BYTES,
            engine_endpoint_bytes: engine.engine_endpoint_bytes,
            rq_fixed_bytes: 0,
            rq_wqe_bytes: MLX5_RECV_WQE_BYTES,
            srq_fixed_bytes: VERBS_QP_CONTEXT_BYTES,
            srq_wqe_bytes: MLX5_SRQ_WQE_BYTES,
            control_fixed_bytes: VERBS_CQ_ENTRIES * MLX5_CQE_BYTES + engine.control_fixed_bytes,
            per_peer_control_bytes: engine.per_peer_control_bytes,
        }
    }

    /// Sizes of the MPI transport: Ballast's own structures only (see the module docs).
    /// The receive staging and kept send buffers depend on the configuration and are
    /// added by `predict`.
    pub fn mpi() -> MemoryModel {
        let engine = crate::local::memory_model();
        MemoryModel {
            endpoint_fixed_bytes: MPI_ENDPOINT_BYTES,
            engine_endpoint_bytes: engine.engine_endpoint_bytes,
            rq_fixed_bytes: 0,
            rq_wqe_bytes: 0,
            srq_fixed_bytes: 0,
            srq_wqe_bytes: 0,
            control_fixed_bytes: std::mem::size_of::<crate::engine::Engine>() as u64 + MPI_FABRIC_BYTES,
            per_peer_control_bytes: engine.per_peer_control_bytes,
        }
    }

    /// The model of a transport kind.
    pub fn for_kind(kind: TransportKind) -> MemoryModel {
        match kind {
            TransportKind::Local => Self::local(),
            TransportKind::Verbs => Self::verbs(),
            TransportKind::Mpi => Self::mpi(),
            // Unresolved `auto` (config::resolve_transport picks the real one): the verbs model.
            TransportKind::Auto => Self::verbs(),
        }
    }
}

/// Transport memory of one rank by kind (bytes) and endpoint counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Registered buffer pool.
    pub pool_bytes: u64,
    /// Registered memory: pool plus receive buffers (a view, not added to the total).
    pub registered_bytes: u64,
    /// Locked memory (a view, not added to the total; predicted as what would be locked).
    pub locked_bytes: u64,
    /// Per-endpoint structures and per-endpoint receive queues.
    pub endpoint_bytes: u64,
    /// Shared receive queues.
    pub srq_bytes: u64,
    /// Control state (engine, per-peer protocol state).
    pub control_bytes: u64,
    /// Endpoints live now.
    pub endpoints_live: u64,
    /// Most endpoints live at once.
    pub endpoints_peak: u64,
    /// Endpoints ever opened.
    pub endpoints_opened: u64,
    /// Distinct peers communicated with.
    pub peers_connected: u64,
}

impl Footprint {
    /// Pool + endpoints + shared receive queues + control, bytes.
    pub fn total_bytes(&self) -> u64 {
        self.pool_bytes + self.endpoint_bytes + self.srq_bytes + self.control_bytes
    }

    /// Field names and values, for tables and JSON.
    pub fn fields(&self) -> [(&'static str, u64); 10] {
        [
            ("pool_bytes", self.pool_bytes),
            ("registered_bytes", self.registered_bytes),
            ("locked_bytes", self.locked_bytes),
            ("endpoint_bytes", self.endpoint_bytes),
            ("srq_bytes", self.srq_bytes),
            ("control_bytes", self.control_bytes),
            ("endpoints_live", self.endpoints_live),
            ("endpoints_peak", self.endpoints_peak),
            ("endpoints_opened", self.endpoints_opened),
            ("peers_connected", self.peers_connected),
        ]
    }
}

/// What became of the memory Ballast asked the OS to lock: with `lock_pool` on, the `local`
/// transport locks every registered region (pool chunks, receive queues) with `mlock`, and
/// the OS may refuse (the soft `RLIMIT_MEMLOCK`, `ulimit -l`, of a user without
/// `CAP_IPC_LOCK`). A refusal is not fatal: the region stays registered but unlocked, and
/// is counted here. Verbs registrations pin instead (a refusal there is an error) and the
/// MPI transport locks nothing of Ballast's: both leave this empty. Bytes are of regions
/// held now (a closed endpoint's queue leaves); the request counts are since the start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryLock {
    /// Bytes held now that Ballast asked to lock.
    pub asked_bytes: u64,
    /// Of `asked_bytes`, the bytes the OS locked.
    pub locked_bytes: u64,
    /// Lock requests made (one per region), since the start.
    pub requests: u64,
    /// Lock requests the OS refused, since the start.
    pub refused: u64,
    /// The soft `RLIMIT_MEMLOCK` in bytes read at the first refusal (`u64::MAX`:
    /// unlimited); `None` without a refusal or when it could not be read.
    pub limit_bytes: Option<u64>,
    /// The OS error number (errno) of the first refusal.
    pub errno: Option<i32>,
}

/// The state of a [`MemoryLock`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockStatus {
    /// Nothing was asked to be locked (`lock_pool` off, or a transport that does not mlock).
    NotAsked,
    /// Everything asked is locked.
    Locked,
    /// Some of what was asked is locked, the rest was refused.
    Partial,
    /// Locking was asked and refused for all of it.
    NotLocked,
}

impl LockStatus {
    /// `not asked`, `locked`, `partially locked`, `not locked`.
    pub fn as_str(self) -> &'static str {
        match self {
            LockStatus::NotAsked => "not asked",
            LockStatus::Locked => "locked",
            LockStatus::Partial => "partially locked",
            LockStatus::NotLocked => "not locked",
        }
    }
}

impl std::fmt::Display for LockStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `1 peer`, `2 peers`.
fn count(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// `N B (x.y MiB)`.
fn bytes_text(b: u64) -> String {
    format!("{b} B ({:.1} MiB)", b as f64 / (1024.0 * 1024.0))
}

impl MemoryLock {
    /// Records a lock request of `bytes` that the OS granted.
    pub fn record_locked(&mut self, bytes: u64) {
        self.requests += 1;
        self.asked_bytes += bytes;
        self.locked_bytes += bytes;
    }

    /// Records a lock request of `bytes` that the OS refused with the error `errno` while
    /// the soft limit was `limit` bytes (`u64::MAX` = unlimited).
    pub fn record_refused(&mut self, bytes: u64, errno: Option<i32>, limit: Option<u64>) {
        if self.refused == 0 {
            self.errno = errno;
            self.limit_bytes = limit;
        }
        self.requests += 1;
        self.refused += 1;
        self.asked_bytes += bytes;
    }

    /// Forgets a region of `bytes` that is freed (`locked`: it had been locked).
    pub fn release(&mut self, bytes: u64, locked: bool) {
        self.asked_bytes = self.asked_bytes.saturating_sub(bytes);
        if locked {
            self.locked_bytes = self.locked_bytes.saturating_sub(bytes);
        }
    }

    /// Adds `other` (another rank's, or another part's): bytes and counts summed, the
    /// first refusal's limit and error kept.
    pub fn add(&mut self, other: &MemoryLock) {
        if self.refused == 0 && other.refused > 0 {
            self.errno = other.errno;
            self.limit_bytes = other.limit_bytes;
        }
        self.asked_bytes += other.asked_bytes;
        self.locked_bytes += other.locked_bytes;
        self.requests += other.requests;
        self.refused += other.refused;
    }

    /// What the bytes held now say.
    pub fn status(&self) -> LockStatus {
        if self.asked_bytes == 0 {
            LockStatus::NotAsked
        } else if self.locked_bytes >= self.asked_bytes {
            LockStatus::Locked
        } else if self.locked_bytes == 0 {
            LockStatus::NotLocked
        } else {
            LockStatus::Partial
        }
    }

    /// The OS error of the first refusal, as text (`Cannot allocate memory (os error 12)`).
    pub fn error_text(&self) -> Option<String> {
        (self.refused > 0).then(|| match self.errno {
            Some(e) => std::io::Error::from_raw_os_error(e).to_string(),
            None => "unknown error".to_string(),
        })
    }

    /// The limit as text: `8388608 B (8.0 MiB)`, `unlimited` or `unknown`.
    pub fn limit_text(&self) -> String {
        match self.limit_bytes {
            Some(u64::MAX) => "unlimited".to_string(),
            Some(b) => bytes_text(b),
            None => "unknown".to_string(),
        }
    }

    /// A sentence for a refused or partial lock, naming the bytes asked and locked and the
    /// limit; `None` when no request was refused.
    pub fn note(&self) -> Option<String> {
        if self.refused == 0 {
            return None;
        }
        let what = match self.status() {
            LockStatus::Partial => "memory partially locked",
            LockStatus::NotLocked => "memory not locked",
            // The refused regions are freed since (closed endpoints).
            LockStatus::Locked | LockStatus::NotAsked => "memory lock refused earlier",
        };
        Some(format!(
            "{what}: asked to lock {}, locked {}; RLIMIT_MEMLOCK (soft) {}; {} of {} mlock requests refused ({}): that memory is registered but not locked (raise `ulimit -l`, or set BALLAST_LOCK_POOL=off)",
            bytes_text(self.asked_bytes),
            bytes_text(self.locked_bytes),
            self.limit_text(),
            self.refused,
            self.requests,
            self.error_text().unwrap_or_default()
        ))
    }
}

impl Footprint {
    /// Why this (accounted) footprint differs from `predicted` for `cfg`, cause first: the
    /// counts that differ (peers connected, endpoints live, with what makes them differ),
    /// then the byte kinds that differ. Empty when the totals are equal.
    pub fn differences(&self, predicted: &Footprint, cfg: &TransportConfig) -> Vec<String> {
        let (m, p) = (self, predicted);
        let mut why = Vec::new();
        if m.total_bytes() == p.total_bytes() {
            return why;
        }
        if m.peers_connected != p.peers_connected {
            why.push(format!(
                "{} connected, {} predicted",
                count(m.peers_connected, "peer"),
                p.peers_connected
            ));
        }
        if m.endpoints_live != p.endpoints_live {
            let closed = m.endpoints_opened.saturating_sub(m.endpoints_live);
            let cause = if cfg.max_endpoints > 0 && closed > 0 {
                format!(
                    " (max_endpoints={} evicts: {} endpoints opened, {closed} closed, so fewer than the cap are live when measured; the model counts the cap)",
                    cfg.max_endpoints, m.endpoints_opened
                )
            } else if cfg.recv_sharing == RecvSharing::Xrc {
                " (xrc: the model charges one send endpoint per peer node, a rank that only receives opens none)".to_string()
            } else {
                String::new()
            };
            why.push(format!(
                "{} live, {} predicted{cause}",
                count(m.endpoints_live, "endpoint"),
                p.endpoints_live
            ));
        }
        if m.pool_bytes != p.pool_bytes {
            let cause = if cfg.pool_growth && m.pool_bytes > p.pool_bytes {
                " (pool_growth added chunks; the model counts the initial pool)"
            } else {
                ""
            };
            why.push(format!(
                "pool {} B, predicted {} B{cause}",
                m.pool_bytes, p.pool_bytes
            ));
        }
        for (name, a, b) in [
            ("endpoint", m.endpoint_bytes, p.endpoint_bytes),
            ("shared receive queue", m.srq_bytes, p.srq_bytes),
            ("control", m.control_bytes, p.control_bytes),
        ] {
            if a != b {
                why.push(format!("{name} {a} B, predicted {b} B"));
            }
        }
        why
    }
}

impl TransportConfig {
    /// Predicts the footprint of a rank that talks to `peers` other ranks in a world of
    /// `world_size` ranks grouped `ranks_per_node` per node (used by `xrc`), from the
    /// configuration alone. Pure and O(1). See the module docs for the formula.
    pub fn predict(&self, peers: usize, world_size: usize, ranks_per_node: usize) -> Footprint {
        let m = MemoryModel::for_kind(self.kind);
        let others = world_size.saturating_sub(1) as u64;
        let c = if self.lazy_connect {
            (peers as u64).min(others)
        } else {
            others
        };
        let rpn = ranks_per_node.max(1) as u64;
        let keys = match self.recv_sharing {
            RecvSharing::Xrc => c.min((world_size as u64).div_ceil(rpn)),
            _ => c,
        };
        let e = if self.max_endpoints > 0 {
            keys.min(self.max_endpoints as u64)
        } else {
            keys
        };
        let b = self.buffer_size as u64;
        let pool = self.buffer_count as u64 * b;
        if self.kind == TransportKind::Mpi && self.mpi_native {
            // The kept send and receive buffers (`B + 1` each: payload and kind byte).
            let kept = 2 * (b + 1);
            return Footprint {
                pool_bytes: 0,
                registered_bytes: 0,
                locked_bytes: 0,
                endpoint_bytes: 0,
                srq_bytes: kept,
                control_bytes: MPI_NATIVE_FIXED_BYTES + world_size as u64 * MPI_NATIVE_PER_RANK_BYTES,
                endpoints_live: 0,
                endpoints_peak: 0,
                endpoints_opened: 0,
                peers_connected: c,
            };
        }
        if self.kind == TransportKind::Mpi {
            let staging = b + MPI_STAGING_EXTRA_BYTES;
            return Footprint {
                pool_bytes: pool,
                // Ballast registers nothing with MPI (MPI pins what it sends itself).
                registered_bytes: 0,
                locked_bytes: 0,
                endpoint_bytes: e * (m.endpoint_fixed_bytes + m.engine_endpoint_bytes)
                    + self.buffer_count as u64 * staging,
                srq_bytes: staging,
                control_bytes: m.control_fixed_bytes + c * m.per_peer_control_bytes,
                endpoints_live: e,
                endpoints_peak: e,
                endpoints_opened: e,
                peers_connected: c,
            };
        }
        let mut endpoint = e * (m.endpoint_fixed_bytes + m.engine_endpoint_bytes);
        let (srq, recv_buffers) = match self.recv_sharing {
            RecvSharing::PerPeer => {
                let d = self.recv_depth as u64;
                endpoint += e * (m.rq_fixed_bytes + d * (b + m.rq_wqe_bytes));
                (0, e * d * b)
            }
            RecvSharing::Shared | RecvSharing::Xrc => {
                let d = self.srq_depth as u64;
                (m.srq_fixed_bytes + d * (b + m.srq_wqe_bytes), d * b)
            }
        };
        let registered = pool + recv_buffers;
        Footprint {
            pool_bytes: pool,
            registered_bytes: registered,
            locked_bytes: if self.lock_pool { registered } else { 0 },
            endpoint_bytes: endpoint,
            srq_bytes: srq,
            control_bytes: m.control_fixed_bytes + c * m.per_peer_control_bytes,
            endpoints_live: e,
            endpoints_peak: e,
            endpoints_opened: e,
            peers_connected: c,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_peer_grows_by_depth_times_buffer_per_peer_and_shared_does_not() {
        let pp = TransportConfig {
            recv_sharing: RecvSharing::PerPeer,
            recv_depth: 8,
            buffer_size: 8192,
            ..Default::default()
        };
        let d = pp.predict(11, 64, 1).total_bytes() - pp.predict(10, 64, 1).total_bytes();
        assert!((8 * 8192..8 * 8192 + 1024).contains(&d), "{d}");
        let sh = TransportConfig {
            recv_sharing: RecvSharing::Shared,
            ..pp
        };
        let d = sh.predict(11, 64, 1).total_bytes() - sh.predict(10, 64, 1).total_bytes();
        assert!(d > 0 && d <= 1024, "{d}");
    }

    #[test]
    fn memory_lock_counts_refusals_and_says_asked_locked_and_limit() {
        let mut l = MemoryLock::default();
        assert_eq!((l.status(), l.note()), (LockStatus::NotAsked, None));
        l.record_locked(4 << 20);
        assert_eq!((l.status(), l.note()), (LockStatus::Locked, None));
        l.record_refused(1 << 20, Some(12), Some(8 << 20));
        l.record_refused(1 << 20, Some(1), Some(1));
        assert_eq!(
            (l.asked_bytes, l.locked_bytes, l.requests, l.refused),
            (6 << 20, 4 << 20, 3, 2)
        );
        assert_eq!(
            (l.status(), l.errno, l.limit_bytes),
            (LockStatus::Partial, Some(12), Some(8 << 20)),
            "first refusal kept"
        );
        let n = l.note().unwrap();
        assert!(n.starts_with("memory partially locked: asked to lock 6291456 B (6.0 MiB), locked 4194304 B (4.0 MiB); RLIMIT_MEMLOCK (soft) 8388608 B (8.0 MiB); 2 of 3 mlock requests refused (Cannot allocate memory (os error 12))"), "{n}");
        // Summing ranks: the first refusal's limit and error are kept.
        let mut none = MemoryLock::default();
        none.record_refused(100, Some(12), Some(u64::MAX));
        assert_eq!(none.status(), LockStatus::NotLocked);
        assert!(
            none.note()
                .unwrap()
                .contains("memory not locked: asked to lock 100 B")
                && none.limit_text() == "unlimited"
        );
        let mut sum = MemoryLock::default();
        sum.add(&MemoryLock {
            asked_bytes: 5,
            locked_bytes: 5,
            requests: 1,
            ..Default::default()
        });
        sum.add(&none);
        sum.add(&l);
        assert_eq!(
            (
                sum.asked_bytes,
                sum.locked_bytes,
                sum.requests,
                sum.refused,
                sum.limit_bytes
            ),
            (105 + (6 << 20), 5 + (4 << 20), 5, 3, Some(u64::MAX))
        );
        // A refused region freed since: locked again, the refusal still told.
        none.release(100, false);
        assert_eq!(none.status(), LockStatus::NotAsked);
        assert!(none
            .note()
            .unwrap()
            .starts_with("memory lock refused earlier: asked to lock 0 B"));
    }

    #[test]
    fn differences_name_the_counts_and_their_cause() {
        let t = TransportConfig {
            max_endpoints: 2,
            ..Default::default()
        };
        let p = t.predict(7, 8, 1);
        assert!(p.differences(&p, &t).is_empty());
        let m = Footprint {
            endpoints_live: 1,
            endpoints_opened: 5,
            endpoint_bytes: p.endpoint_bytes - 80,
            ..p
        };
        let d = m.differences(&p, &t);
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(d[0], "1 endpoint live, 2 predicted (max_endpoints=2 evicts: 5 endpoints opened, 4 closed, so fewer than the cap are live when measured; the model counts the cap)");
        assert_eq!(
            d[1],
            format!(
                "endpoint {} B, predicted {} B",
                p.endpoint_bytes - 80,
                p.endpoint_bytes
            )
        );
        let u = TransportConfig::default();
        let (p7, p2) = (u.predict(7, 8, 1), u.predict(2, 8, 1));
        let d = p2.differences(&p7, &u);
        assert!(
            d[0] == "2 peers connected, 7 predicted" && d[1] == "2 endpoints live, 7 predicted",
            "{d:?}"
        );
    }

    #[test]
    fn xrc_counts_nodes_and_cap_limits_endpoints() {
        let x = TransportConfig {
            recv_sharing: RecvSharing::Xrc,
            ..Default::default()
        };
        assert_eq!(x.predict(1023, 1024, 32).endpoints_live, 32);
        assert_eq!(x.predict(5, 1024, 32).endpoints_live, 5);
        let capped = TransportConfig {
            max_endpoints: 64,
            ..Default::default()
        };
        let f = capped.predict(1000, 1024, 1);
        assert_eq!((f.endpoints_live, f.peers_connected), (64, 1000));
        let eager = TransportConfig {
            lazy_connect: false,
            ..Default::default()
        };
        assert_eq!(eager.predict(3, 100, 1).endpoints_live, 99);
    }

    #[test]
    fn verbs_model_uses_mlx5_sizes() {
        let v = TransportConfig {
            kind: TransportKind::Verbs,
            recv_sharing: RecvSharing::PerPeer,
            recv_depth: 4,
            buffer_size: 4096,
            ..Default::default()
        };
        let one = v.predict(1, 2, 1);
        let m = MemoryModel::verbs();
        assert_eq!(
            one.endpoint_bytes,
            VERBS_SQ_DEPTH * 64 + VERBS_QP_CONTEXT_BYTES + m.engine_endpoint_bytes + 4 * (4096 + 16)
        );
        assert_eq!(one.registered_bytes, 64 * 4096 + 4 * 4096);
    }

    #[test]
    fn mpi_model_counts_ballast_bytes_only() {
        let t = TransportConfig {
            kind: TransportKind::Mpi,
            buffer_size: 1024,
            buffer_count: 8,
            mpi_native: false,
            ..Default::default()
        };
        let staging = 1024 + MPI_STAGING_EXTRA_BYTES;
        for sharing in [RecvSharing::PerPeer, RecvSharing::Shared] {
            let f = TransportConfig {
                recv_sharing: sharing,
                ..t
            }
            .predict(3, 4, 1);
            let m = MemoryModel::mpi();
            assert_eq!(
                (f.pool_bytes, f.registered_bytes, f.locked_bytes, f.srq_bytes),
                (8 * 1024, 0, 0, staging)
            );
            assert_eq!(
                f.endpoint_bytes,
                3 * (MPI_ENDPOINT_BYTES + m.engine_endpoint_bytes) + 8 * staging
            );
            assert_eq!(
                f.control_bytes,
                m.control_fixed_bytes + 3 * m.per_peer_control_bytes
            );
        }
        // No verbs completion queue or QP context in it.
        assert!(MemoryModel::mpi().control_fixed_bytes < VERBS_CQ_ENTRIES * MLX5_CQE_BYTES);
    }

    #[test]
    fn mpi_native_model_has_no_pool_and_grows_only_per_peer_and_rank() {
        let t = TransportConfig {
            kind: TransportKind::Mpi,
            buffer_size: 1024,
            buffer_count: 8,
            ..Default::default()
        };
        assert!(t.mpi_native, "native is the default");
        for sharing in [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc] {
            let f = TransportConfig {
                recv_sharing: sharing,
                max_endpoints: 2,
                ..t
            }
            .predict(3, 4, 1);
            assert_eq!(
                (f.pool_bytes, f.registered_bytes, f.locked_bytes, f.endpoint_bytes),
                (0, 0, 0, 0)
            );
            assert_eq!(f.srq_bytes, 2 * 1025, "one kept send and one kept receive buffer");
            assert_eq!(
                f.control_bytes,
                MPI_NATIVE_FIXED_BYTES + 4 * MPI_NATIVE_PER_RANK_BYTES
            );
            assert_eq!((f.endpoints_live, f.peers_connected), (0, 3));
        }
        // 1,000 peers in a world of 4,096 ranks: about 40 KiB, the same as with 1 peer.
        let big = t.predict(1000, 4096, 1).total_bytes();
        assert_eq!(big, 2 * 1025 + MPI_NATIVE_FIXED_BYTES + 4096 * 9);
        assert_eq!(big, t.predict(1, 4096, 1).total_bytes());
    }
}
