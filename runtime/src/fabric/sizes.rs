//! The object sizes of the fabrics that the memory model charges and the fabrics account
//! with (verbs: mlx5's WQE, CQE and address-handle sizes and the QP context estimate; MPI:
//! Ballast's staging and endpoint entries), and each transport kind's datagram size. Pure
//! constants, compiled in every build whatever the features: the balancer predicts any
//! transport's footprint (`model`, in `comm`). Sources: the module docs of `model`.

use crate::core::config::TransportKind;
use crate::core::footprint::MemoryModel;

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
/// Verbs datagram path: receives posted on the rank's UD QP (its receive ring).
pub const VERBS_UD_RECV_DEPTH: u64 = 64;
/// Verbs datagram path: send slots of the UD QP (its send ring, and its send queue depth).
pub const VERBS_UD_SEND_SLOTS: u64 = 16;
/// Verbs datagram path: the largest datagram payload a UD slot holds, bytes (the largest
/// IB path MTU); the slots hold `min(buffer_size, this)` (the device's active MTU may be
/// smaller: the fabric then offers less, `Fabric::datagram_mtu`).
pub const VERBS_UD_PAYLOAD_MAX: u64 = 4096;
/// Verbs datagram path: bytes of the GRH the device writes in front of every UD receive.
pub const VERBS_UD_GRH_BYTES: u64 = 40;
/// Verbs datagram path: bytes of the source rank the fabric prepends to every datagram.
pub const VERBS_UD_RANK_BYTES: u64 = 4;
/// Verbs datagram path: one address handle in the provider (mlx5: `struct mlx5_ah` of
/// rdma-core's `providers/mlx5/mlx5.h`: `struct ibv_ah` 24 B, `struct mlx5_wqe_av` 48 B,
/// a mutex 40 B, flags and a pointer, 136 B with padding).
pub const VERBS_AH_BYTES: u64 = 136;
/// Verbs datagram path: the fabric's entry per datagram peer (its key, the address
/// handle's pointer and the peer's UD QPN; checked against the real type by a test of the
/// `verbs` feature).
pub const VERBS_UD_ENTRY_BYTES: u64 = 32;

/// Verbs datagram path: bytes of one UD slot's payload for `buffer_size` `b`.
pub fn verbs_ud_payload(b: u64) -> u64 {
    b.min(VERBS_UD_PAYLOAD_MAX)
}

/// Verbs datagram path: the fixed bytes of the rank's UD QP for `buffer_size` `b`: its
/// context, send WQEs, receive WQEs, its two completion queues (send and receive) and its
/// rings (receive slots of GRH + rank + payload, send slots of rank + payload). Charged as
/// shared receive memory (`srq_bytes`), the rings also as registered.
pub fn verbs_ud_fixed_bytes(b: u64) -> u64 {
    VERBS_QP_CONTEXT_BYTES
        + VERBS_UD_SEND_SLOTS * MLX5_SEND_WQE_BB
        + VERBS_UD_RECV_DEPTH * MLX5_RECV_WQE_BYTES
        + (VERBS_UD_SEND_SLOTS + VERBS_UD_RECV_DEPTH) * MLX5_CQE_BYTES
        + verbs_ud_ring_bytes(b)
}

/// Verbs datagram path: the registered bytes of the UD rings for `buffer_size` `b`.
pub fn verbs_ud_ring_bytes(b: u64) -> u64 {
    let p = verbs_ud_payload(b);
    VERBS_UD_RECV_DEPTH * (VERBS_UD_GRH_BYTES + VERBS_UD_RANK_BYTES + p)
        + VERBS_UD_SEND_SLOTS * (VERBS_UD_RANK_BYTES + p)
}

/// Verbs datagram path: the fabric's bytes per datagram peer (entry and address handle),
/// beyond the protocol's `PEER_STATE_BYTES`.
pub const VERBS_UD_PEER_BYTES: u64 = VERBS_UD_ENTRY_BYTES + VERBS_AH_BYTES;
/// MPI transport: bytes of a receive staging or kept send buffer beyond `buffer_size` (the
/// 32-byte header and up to 16 piggybacked controls of 9 bytes).
pub const MPI_STAGING_EXTRA_BYTES: u64 = 32 + 16 * 9;
/// MPI transport: the fabric's per-endpoint entry (a `usize` in a hash set, with its
/// control byte).
pub const MPI_ENDPOINT_BYTES: u64 = std::mem::size_of::<usize>() as u64 + 1;
/// MPI transport: upper bound of the fabric structure's size (checked by a unit test of
/// the `mpi` feature).
pub const MPI_FABRIC_BYTES: u64 = 512;

/// MPI engine path: the largest datagram (datagrams are MPI messages; the fabric offers
/// `min(buffer_size, this)`, so that one fits its staging buffer).
pub const MPI_DATAGRAM_MTU: usize = 1 << 30;

/// The datagram size of a transport kind's fabric (`Fabric::datagram_mtu`), `None` where
/// it has no datagrams (its `endpoint_overflow=datagram` falls back to `evict`).
pub fn datagram_mtu(kind: TransportKind) -> Option<usize> {
    match kind {
        TransportKind::Local => Some(crate::fabric::local::DATAGRAM_MTU),
        TransportKind::Mpi => Some(MPI_DATAGRAM_MTU),
        // Verbs: the largest slot payload less the source rank (the fabric offers at most
        // this, less where the device's active MTU is smaller).
        TransportKind::Verbs => Some((VERBS_UD_PAYLOAD_MAX - VERBS_UD_RANK_BYTES) as usize),
        TransportKind::Shm | TransportKind::Auto => None,
    }
}

/// shm: bytes of a rank segment's header, of a ring's head (its `tail` word's line), and
/// of a cell's head (sequence word and packet header) before its payload.
pub const SHM_HEAD_BYTES: u64 = 64;
/// shm: cells of a rank's control ring (each one head, no payload).
pub const SHM_CONTROL_DEPTH: u64 = 256;

/// shm: the data ring's cells for `cfg` in a world of `world` ranks: `srq_depth`, or in
/// `per-peer` mode `recv_depth` per rank of the world (every peer's credits land in the one
/// ring); at least 2, the least a ring can be.
pub fn shm_data_depth(cfg: &crate::core::config::TransportConfig, world: usize) -> u64 {
    let d = match cfg.recv_sharing {
        crate::core::config::RecvSharing::PerPeer => {
            (cfg.recv_depth as u64).saturating_mul(world.max(1) as u64)
        }
        _ => cfg.srq_depth as u64,
    };
    d.max(2)
}

/// shm: a data cell's bytes for `buffer_size` bytes of payload: its head and the payload,
/// rounded up to 64 bytes (a cache line); `None` on overflow.
pub fn shm_cell_bytes(buffer_size: u64) -> Option<u64> {
    SHM_HEAD_BYTES
        .checked_add(buffer_size)?
        .checked_next_multiple_of(64)
}

/// shm: a rank segment's bytes: header, data ring (`depth` cells for `buffer_size`), control
/// ring; `None` on overflow.
pub fn shm_segment_bytes(depth: u64, buffer_size: u64) -> Option<u64> {
    let data = depth.checked_mul(shm_cell_bytes(buffer_size)?)?;
    (3 * SHM_HEAD_BYTES + SHM_CONTROL_DEPTH * SHM_HEAD_BYTES).checked_add(data)
}

/// The verbs fabric's side of its [`MemoryModel`] (the engine adds its own): mlx5's QP,
/// receive WQE and CQ sizes; its per-rank structure is charged at the local fabric's size.
pub fn verbs_model() -> MemoryModel {
    MemoryModel {
        endpoint_fixed_bytes: VERBS_SQ_DEPTH * MLX5_SEND_WQE_BB + VERBS_QP_CONTEXT_BYTES,
        engine_endpoint_bytes: 0,
        rq_fixed_bytes: 0,
        rq_wqe_bytes: MLX5_RECV_WQE_BYTES,
        srq_fixed_bytes: VERBS_QP_CONTEXT_BYTES,
        srq_wqe_bytes: MLX5_SRQ_WQE_BYTES,
        control_fixed_bytes: VERBS_CQ_ENTRIES * MLX5_CQE_BYTES + crate::fabric::local::fabric_fixed_bytes(),
        per_peer_control_bytes: 0,
    }
}

/// The MPI fabric's side of its [`MemoryModel`] (the engine adds its own): its endpoint
/// entry and its structure.
pub fn mpi_model() -> MemoryModel {
    MemoryModel {
        endpoint_fixed_bytes: MPI_ENDPOINT_BYTES,
        engine_endpoint_bytes: 0,
        rq_fixed_bytes: 0,
        rq_wqe_bytes: 0,
        srq_fixed_bytes: 0,
        srq_wqe_bytes: 0,
        control_fixed_bytes: MPI_FABRIC_BYTES,
        per_peer_control_bytes: 0,
    }
}
