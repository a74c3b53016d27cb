//! The memory models of the transports and the prediction from them
//! ([`TransportConfig::predict`], the formula the balancer charges per rank). Compiled in
//! every build, whatever the features: the balancer predicts any transport's footprint.
//! The local transport's sizes are those of its own structures
//! (`crate::fabric::local`); the verbs and MPI sizes are below.
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
//! | datagram state | with `endpoint_overflow=datagram` on a transport with datagrams (`local`, MPI's engine path, verbs): `(keys - e) * PEER_STATE_BYTES` (`protocol::datagram`), the peers beyond the cap; verbs adds `VERBS_UD_PEER_BYTES` per such peer (its address handle and the fabric's entry) |
//! | verbs UD QP | verbs with the datagram path on and at least one datagram peer (the UD QP is made on first use): `verbs_ud_fixed_bytes(B)` in the shared receive queue's row (QP context, WQEs, two CQs, the receive ring of `VERBS_UD_RECV_DEPTH` slots of `40 + 4 + min(B, 4096)` and the send ring of `VERBS_UD_SEND_SLOTS` slots of `4 + min(B, 4096)`), the rings also registered |
//! | registered | pool + receive buffers (`e * recv_depth * B` or `srq_depth * B`) + verbs UD rings |
//!
//! `total_bytes()` = pool + endpoints + shared receive queue (+ UD QP) + control + datagram state (registered and
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
//! send and one receive buffer of `B + 1` bytes, at least 9 (a large message's header;
//! [`mpi_native_kept_bytes`]) (as `srq_bytes`), and its structure
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

use crate::comm::error::{CommError, Error, Result};
use crate::core::config::{RecvSharing, TransportConfig, TransportKind};
use crate::core::footprint::{Footprint, MemoryModel};
pub use crate::fabric::sizes::*;
use crate::protocol::engine::with_engine;

// The bound: a datagram peer's fixed state is at most 256 B, the address handle
// included on verbs (the most a transport adds to the protocol's state).
const _: () = assert!(crate::protocol::datagram::PEER_STATE_BYTES + VERBS_UD_PEER_BYTES <= 256);

/// MPI native path (`mpi_native`, the default with one rank per process): upper bound of
/// its structure's size (checked by a unit test of the `mpi` feature).
pub const MPI_NATIVE_FIXED_BYTES: u64 = 1024;
/// MPI native path: per rank of the world, the counter of messages sent to it (u64) and
/// the flag saying it is a peer (bool). Nothing grows per connected peer.
pub const MPI_NATIVE_PER_RANK_BYTES: u64 = 9;
/// MPI native path: bytes of a large message's header (its length, u64, and a kind byte).
pub const MPI_NATIVE_LARGE_HEADER_BYTES: u64 = 9;

/// MPI native path: bytes of each kept buffer (send and receive) and of every posted
/// receive with buffers of `buffer_size` bytes: a whole message and its kind byte
/// (`buffer_size + 1`), or a large message's header ([`MPI_NATIVE_LARGE_HEADER_BYTES`]),
/// whichever is longer (a receive shorter than the header would be truncated).
pub const fn mpi_native_kept_bytes(buffer_size: u64) -> u64 {
    let whole = buffer_size.saturating_add(1);
    if whole > MPI_NATIVE_LARGE_HEADER_BYTES {
        whole
    } else {
        MPI_NATIVE_LARGE_HEADER_BYTES
    }
}

impl MemoryModel {
    /// Sizes of the in-process transport: the sizes of the structures it really allocates.
    pub fn local() -> MemoryModel {
        with_engine(crate::fabric::local::memory_model())
    }

    /// Sizes of the verbs transport (mlx5); see the module docs for sources.
    pub fn verbs() -> MemoryModel {
        with_engine(crate::fabric::sizes::verbs_model())
    }

    /// Sizes of the MPI transport: Ballast's own structures only (see the module docs).
    /// The receive staging and kept send buffers depend on the configuration and are
    /// added by `predict`.
    pub fn mpi() -> MemoryModel {
        with_engine(crate::fabric::sizes::mpi_model())
    }

    /// Sizes of the shared-memory transport (its segment is charged whole by `predict`,
    /// from the configuration: `fabric::sizes::shm_segment_bytes`).
    pub fn shm() -> MemoryModel {
        #[cfg(target_os = "linux")]
        let m = crate::fabric::shm::memory_model();
        #[cfg(not(target_os = "linux"))]
        let m = MemoryModel::default();
        with_engine(m)
    }

    /// The model of a transport kind.
    pub fn for_kind(kind: TransportKind) -> MemoryModel {
        match kind {
            TransportKind::Local => Self::local(),
            TransportKind::Verbs => Self::verbs(),
            TransportKind::Mpi => Self::mpi(),
            TransportKind::Shm => Self::shm(),
            // Unresolved `auto` (config::resolve_transport picks the real one): the verbs model.
            TransportKind::Auto => Self::verbs(),
        }
    }
}

impl TransportConfig {
    /// Predicts the footprint of a rank that talks to `peers` other ranks in a world of
    /// `world_size` ranks grouped `ranks_per_node` per node (used by `xrc`), from the
    /// configuration alone. Pure and O(1). See the module docs for the formula. A
    /// configuration whose prediction does not fit in 64 bits gives `u64::MAX` in every byte
    /// count ([`TransportConfig::try_predict`] says which term overflows).
    pub fn predict(&self, peers: usize, world_size: usize, ranks_per_node: usize) -> Footprint {
        let (c, e, dg) = self.counts(peers, world_size, ranks_per_node);
        self.predict_with(c, e, dg, world_size)
    }

    /// [`TransportConfig::predict`] in checked arithmetic. Errors:
    /// [`CommError::ModelOverflow`](crate::comm::error::CommError::ModelOverflow) naming the term (and its factors) that does not fit in 64
    /// bits, the total included.
    pub fn try_predict(&self, peers: usize, world_size: usize, ranks_per_node: usize) -> Result<Footprint> {
        let (c, e, dg) = self.counts(peers, world_size, ranks_per_node);
        self.try_predict_with(c, e, dg, world_size)
    }

    /// Peers connected, endpoints and datagram peers of [`TransportConfig::predict`].
    fn counts(&self, peers: usize, world_size: usize, ranks_per_node: usize) -> (usize, usize, usize) {
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
        // The peers beyond the cap on the datagram path (where this transport has one).
        (c as usize, e as usize, (keys - e) as usize)
    }

    /// The footprint of a rank that talks to `peers` other ranks (as
    /// [`TransportConfig::predict`] counts them: `peers_connected`), of which the traffic
    /// left it `endpoints` endpoints and `datagram_peers` peers on the datagram path, in a
    /// world of `world_size` ranks. [`TransportConfig::predict`] is this with
    /// `min(peers, max_endpoints)` endpoints and the rest datagram peers; a pattern that is
    /// not symmetric gives others (a rank 0 that fans out to every rank at the cap holds
    /// `max_endpoints` endpoints, so all but `max_endpoints` of its receivers reach it by
    /// datagram: one datagram peer and no endpoint each). A peer promoted to an endpoint
    /// counts in both (its datagram state stays: the ordering counters of both paths are in
    /// it). Without the datagram path (no cap, `evict`, or a transport without datagrams)
    /// `datagram_peers` is ignored. Pure and O(1). Saturates as [`TransportConfig::predict`].
    pub fn predict_with(
        &self,
        peers: usize,
        endpoints: usize,
        datagram_peers: usize,
        world_size: usize,
    ) -> Footprint {
        self.try_predict_with(peers, endpoints, datagram_peers, world_size)
            .unwrap_or_else(|_| saturated(peers, endpoints, datagram_peers))
    }

    /// [`TransportConfig::predict_with`] in checked arithmetic; errors as
    /// [`TransportConfig::try_predict`].
    pub fn try_predict_with(
        &self,
        peers: usize,
        endpoints: usize,
        datagram_peers: usize,
        world_size: usize,
    ) -> Result<Footprint> {
        let m = MemoryModel::for_kind(self.kind);
        let (c, e) = (peers as u64, endpoints as u64);
        let dg = match crate::protocol::datagram::chunk_for(self, datagram_mtu(self.kind)) {
            Ok(Some(_)) => datagram_peers as u64,
            _ => 0,
        };
        let dg_bytes = mul(
            dg,
            crate::protocol::datagram::PEER_STATE_BYTES,
            "datagram peers",
            "PEER_STATE_BYTES",
        )?;
        // Verbs: the UD QP exists once the rank has a datagram peer (it is made on first
        // use; its rings are fixed), and each datagram peer adds its address handle.
        let ud = self.kind == TransportKind::Verbs && dg > 0;
        let (ud_fixed, ud_ring, ud_peers) = if ud {
            let b = self.buffer_size as u64;
            (
                verbs_ud_fixed_bytes(b),
                verbs_ud_ring_bytes(b),
                mul(dg, VERBS_UD_PEER_BYTES, "datagram peers", "VERBS_UD_PEER_BYTES")?,
            )
        } else {
            (0, 0, 0)
        };
        let b = self.buffer_size as u64;
        let count = self.buffer_count as u64;
        let pool = mul(count, b, "buffer_count", "buffer_size")?;
        let control = add(
            m.control_fixed_bytes,
            mul(c, m.per_peer_control_bytes, "peers", "per-peer control bytes")?,
            "control bytes",
        )?;
        let per_endpoint = m.endpoint_fixed_bytes + m.engine_endpoint_bytes;
        let f = if self.kind == TransportKind::Mpi && self.mpi_native {
            // The kept send and receive buffers (`B + 1` each: payload and kind byte; at
            // least a large message's 9-byte header).
            Footprint {
                pool_bytes: 0,
                registered_bytes: 0,
                locked_bytes: 0,
                endpoint_bytes: 0,
                srq_bytes: 2 * mpi_native_kept_bytes(b),
                control_bytes: add(
                    MPI_NATIVE_FIXED_BYTES,
                    mul(
                        world_size as u64,
                        MPI_NATIVE_PER_RANK_BYTES,
                        "world_size",
                        "MPI_NATIVE_PER_RANK_BYTES",
                    )?,
                    "control bytes",
                )?,
                endpoints_live: 0,
                endpoints_peak: 0,
                endpoints_opened: 0,
                peers_connected: c,
                datagram_peers: 0,
                datagram_bytes: 0,
                shm_segment_bytes: 0,
                shm_peers_mapped: 0,
                shm_mapped_bytes: 0,
            }
        } else if self.kind == TransportKind::Shm {
            // One segment per rank, whatever the sharing mode: its rings, charged whole.
            let depth = crate::fabric::sizes::shm_data_depth(self, world_size);
            let seg = crate::fabric::sizes::shm_segment_bytes(depth, b).ok_or_else(|| {
                Error::Comm(CommError::ModelOverflow {
                    term: format!("the shm segment of {depth} cells of buffer_size ({b})"),
                })
            })?;
            let registered = add(pool, seg, "registered bytes")?;
            Footprint {
                pool_bytes: pool,
                registered_bytes: registered,
                // shm never locks (`lock_pool` is `local`'s).
                locked_bytes: 0,
                endpoint_bytes: mul(e, per_endpoint, "endpoints", "bytes per endpoint")?,
                srq_bytes: seg,
                control_bytes: control,
                endpoints_live: e,
                endpoints_peak: e,
                endpoints_opened: e,
                peers_connected: c,
                datagram_peers: 0,
                datagram_bytes: 0,
                shm_segment_bytes: seg,
                // Every rank of the job has a segment of the same size.
                shm_peers_mapped: c,
                shm_mapped_bytes: mul(c, seg, "peers", "the shm segment's bytes")?,
            }
        } else if self.kind == TransportKind::Mpi {
            let staging = b + MPI_STAGING_EXTRA_BYTES;
            Footprint {
                pool_bytes: pool,
                // Ballast registers nothing with MPI (MPI pins what it sends itself).
                registered_bytes: 0,
                locked_bytes: 0,
                endpoint_bytes: add(
                    mul(e, per_endpoint, "endpoints", "bytes per endpoint")?,
                    mul(
                        count,
                        staging,
                        "buffer_count",
                        "buffer_size + MPI_STAGING_EXTRA_BYTES",
                    )?,
                    "endpoint bytes",
                )?,
                srq_bytes: staging,
                control_bytes: control,
                endpoints_live: e,
                endpoints_peak: e,
                endpoints_opened: e,
                peers_connected: c,
                datagram_peers: dg,
                datagram_bytes: dg_bytes,
                shm_segment_bytes: 0,
                shm_peers_mapped: 0,
                shm_mapped_bytes: 0,
            }
        } else {
            let mut endpoint = mul(e, per_endpoint, "endpoints", "bytes per endpoint")?;
            let (srq, recv_buffers) = match self.recv_sharing {
                RecvSharing::PerPeer => {
                    let d = self.recv_depth as u64;
                    let per_queue = add(
                        m.rq_fixed_bytes,
                        mul(
                            d,
                            b + m.rq_wqe_bytes,
                            "recv_depth",
                            "buffer_size + receive WQE bytes",
                        )?,
                        "a receive queue's bytes",
                    )?;
                    let queues = mul(e, per_queue, "endpoints", "a receive queue's bytes")?;
                    endpoint = add(endpoint, queues, "endpoint bytes")?;
                    let per_peer_buffers = mul(e, d, "endpoints", "recv_depth")?;
                    (
                        0,
                        mul(per_peer_buffers, b, "endpoints x recv_depth", "buffer_size")?,
                    )
                }
                RecvSharing::Shared | RecvSharing::Xrc => {
                    let d = self.srq_depth as u64;
                    let srq = add(
                        m.srq_fixed_bytes,
                        mul(d, b + m.srq_wqe_bytes, "srq_depth", "buffer_size + SRQ WQE bytes")?,
                        "shared receive queue bytes",
                    )?;
                    (srq, mul(d, b, "srq_depth", "buffer_size")?)
                }
            };
            let registered = add(
                add(pool, recv_buffers, "registered bytes")?,
                ud_ring,
                "registered bytes",
            )?;
            Footprint {
                pool_bytes: pool,
                registered_bytes: registered,
                locked_bytes: if self.lock_pool { registered } else { 0 },
                endpoint_bytes: endpoint,
                srq_bytes: add(srq, ud_fixed, "shared receive queue bytes")?,
                control_bytes: control,
                endpoints_live: e,
                endpoints_peak: e,
                endpoints_opened: e,
                peers_connected: c,
                datagram_peers: dg,
                datagram_bytes: add(dg_bytes, ud_peers, "datagram bytes")?,
                shm_segment_bytes: 0,
                shm_peers_mapped: 0,
                shm_mapped_bytes: 0,
            }
        };
        [
            f.pool_bytes,
            f.endpoint_bytes,
            f.srq_bytes,
            f.control_bytes,
            f.datagram_bytes,
        ]
        .into_iter()
        .try_fold(0u64, |sum, v| add(sum, v, "the total"))?;
        Ok(f)
    }
}

/// `a * b` of the model, or [`CommError::ModelOverflow`](crate::comm::error::CommError::ModelOverflow) naming the term by its factors.
fn mul(a: u64, b: u64, what_a: &str, what_b: &str) -> Result<u64> {
    a.checked_mul(b).ok_or_else(|| {
        Error::Comm(CommError::ModelOverflow {
            term: format!("{what_a} ({a}) x {what_b} ({b})"),
        })
    })
}

/// `a + b` of the model, or [`CommError::ModelOverflow`](crate::comm::error::CommError::ModelOverflow) naming the sum.
fn add(a: u64, b: u64, what: &str) -> Result<u64> {
    a.checked_add(b).ok_or_else(|| {
        Error::Comm(CommError::ModelOverflow {
            term: format!("{what} ({a} + {b})"),
        })
    })
}

/// The prediction of a configuration that overflows: every byte count `u64::MAX`.
fn saturated(peers: usize, endpoints: usize, datagram_peers: usize) -> Footprint {
    Footprint {
        pool_bytes: u64::MAX,
        registered_bytes: u64::MAX,
        locked_bytes: u64::MAX,
        endpoint_bytes: u64::MAX,
        srq_bytes: u64::MAX,
        control_bytes: u64::MAX,
        endpoints_live: endpoints as u64,
        endpoints_peak: endpoints as u64,
        endpoints_opened: endpoints as u64,
        peers_connected: peers as u64,
        datagram_peers: datagram_peers as u64,
        datagram_bytes: u64::MAX,
        shm_segment_bytes: u64::MAX,
        shm_peers_mapped: peers as u64,
        shm_mapped_bytes: u64::MAX,
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
    fn another_split_of_the_same_bytes_still_differs() {
        // local, shared: an endpoint and a datagram peer weigh the same.
        let t = TransportConfig {
            max_endpoints: 2,
            ..Default::default()
        };
        let p = t.predict(15, 16, 1);
        let m = t.predict_with(15, 0, 15, 16);
        assert_eq!(m.total_bytes(), p.total_bytes(), "same bytes: {m:?} {p:?}");
        let d = m.differences(&p, &t).join("; ");
        assert!(d.contains("15 peers with datagram state, 13 predicted"), "{d}");
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
        assert_eq!(d[0], "1 endpoint live, 2 predicted (endpoint_overflow=datagram, max_endpoints=2: 5 endpoints opened, 4 closed: connects refused by full peers and endpoints given up to promoted datagram peers, so this rank holds fewer than the cap; the model counts the cap)");
        // With evict the closes are evictions.
        let te = TransportConfig {
            endpoint_overflow: crate::core::config::EndpointOverflow::Evict,
            ..t
        };
        let pe = te.predict(7, 8, 1);
        let me = Footprint {
            endpoints_live: 1,
            endpoints_opened: 5,
            endpoint_bytes: pe.endpoint_bytes - 80,
            ..pe
        };
        assert_eq!(me.differences(&pe, &te)[0], "1 endpoint live, 2 predicted (max_endpoints=2 evicts: 5 endpoints opened, 4 closed, so fewer than the cap are live when measured; the model counts the cap)");
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
    fn datagram_peers_beyond_the_cap_are_charged_their_fixed_state() {
        use crate::core::config::EndpointOverflow;
        use crate::protocol::datagram::PEER_STATE_BYTES;
        let t = TransportConfig {
            max_endpoints: 4,
            ..Default::default()
        };
        assert_eq!(t.endpoint_overflow, EndpointOverflow::Datagram, "the default");
        let f = t.predict(10, 16, 1);
        assert_eq!(
            (f.endpoints_live, f.datagram_peers, f.datagram_bytes),
            (4, 6, 6 * PEER_STATE_BYTES)
        );
        let evict = TransportConfig {
            endpoint_overflow: EndpointOverflow::Evict,
            ..t
        }
        .predict(10, 16, 1);
        assert_eq!((evict.endpoints_live, evict.datagram_peers), (4, 0));
        assert_eq!(f.total_bytes() - evict.total_bytes(), 6 * PEER_STATE_BYTES);
        // Within the cap, uncapped and xrc (no datagrams: evict): no datagram peer.
        assert_eq!(t.predict(3, 16, 1).datagram_peers, 0);
        let none = [
            TransportConfig {
                max_endpoints: 0,
                ..t
            },
            TransportConfig {
                recv_sharing: RecvSharing::Xrc,
                ..t
            },
        ];
        for c in none {
            assert_eq!(c.predict(10, 16, 1).datagram_bytes, 0, "{c:?}");
        }
    }

    #[test]
    fn verbs_datagram_path_charges_the_ud_qp_and_an_address_handle_per_peer() {
        use crate::core::config::EndpointOverflow;
        use crate::protocol::datagram::PEER_STATE_BYTES;
        for sharing in [RecvSharing::PerPeer, RecvSharing::Shared] {
            let t = TransportConfig {
                kind: TransportKind::Verbs,
                recv_sharing: sharing,
                max_endpoints: 2,
                buffer_size: 1024,
                ..Default::default()
            };
            let evict = TransportConfig {
                endpoint_overflow: EndpointOverflow::Evict,
                ..t
            };
            let (f, e) = (t.predict(7, 8, 1), evict.predict(7, 8, 1));
            assert_eq!((f.endpoints_live, f.datagram_peers), (2, 5));
            assert_eq!(e.datagram_peers, 0);
            // Receive ring: 64 x (40 GRH + 4 rank + 1024); send ring: 16 x (4 + 1024).
            let ring = 64 * (40 + 4 + 1024) + 16 * (4 + 1024);
            assert_eq!(verbs_ud_ring_bytes(1024), ring);
            let fixed = VERBS_QP_CONTEXT_BYTES + 16 * 64 + 64 * 16 + (16 + 64) * 64 + ring;
            assert_eq!(verbs_ud_fixed_bytes(1024), fixed);
            assert_eq!(f.srq_bytes - e.srq_bytes, fixed);
            assert_eq!(f.registered_bytes - e.registered_bytes, ring);
            assert_eq!(
                f.datagram_bytes,
                5 * (PEER_STATE_BYTES + VERBS_UD_ENTRY_BYTES + 136)
            );
            assert_eq!(
                f.total_bytes() - e.total_bytes(),
                fixed + 5 * (PEER_STATE_BYTES + VERBS_UD_PEER_BYTES)
            );
            // The UD QP is made on first use: a rank whose peers fit under the cap has none.
            assert_eq!(t.predict(2, 8, 1), evict.predict(2, 8, 1));
            assert_eq!(t.predict(1, 8, 1).srq_bytes, evict.predict(1, 8, 1).srq_bytes);
        }
        // The slots hold at most 4096 B of payload whatever buffer_size is.
        assert_eq!(verbs_ud_ring_bytes(1 << 20), verbs_ud_ring_bytes(4096));
        let xrc = TransportConfig {
            kind: TransportKind::Verbs,
            recv_sharing: RecvSharing::Xrc,
            max_endpoints: 2,
            ..Default::default()
        };
        assert_eq!(xrc.predict(7, 8, 1).datagram_bytes, 0);
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
        // Below 8 B the kept buffers still hold a large message's 9-byte header.
        let tiny = TransportConfig { buffer_size: 1, ..t }.predict(1, 2, 1);
        assert_eq!(tiny.srq_bytes, 2 * 9);
        assert_eq!(mpi_native_kept_bytes(7), 9);
        assert_eq!(mpi_native_kept_bytes(8), 9);
        assert_eq!(mpi_native_kept_bytes(9), 10);
    }
}
