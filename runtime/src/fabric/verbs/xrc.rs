//! XRC (`recv_sharing=xrc` on a device that reports `IBV_DEVICE_XRC`): the node's shared
//! domain file; the XRC SRQ and queue pairs are made by the [`super::ibv`] layer
//! (`Srq::create_xrc`, `Qp::create_xrc_send`, `Qp::create_xrc_recv`), the protocol around
//! them lives in the fabric (`fabric/xrc.rs`).
//!
//! **Compiled, never run.** Soft-RoCE (the only RDMA device this project could test on) has
//! no XRC, so there `xrc` falls back to `shared` with a logged reason; this path is
//! selected only by a device that reports XRC, and it has not been run on one. Expect to
//! debug it on first contact with a ConnectX.
//!
//! Design (as MPI libraries use XRC): the ranks of one node (`ranks_per_node` consecutive
//! ranks, all on the same device) open one XRC domain through a shared file
//! (`ibv_open_xrcd` with the file's descriptor), and each rank creates its XRC SRQ in it
//! (`ibv_create_srq_ex`, `IBV_SRQT_XRC`) with `srq_depth` slots; its SRQ number goes to the
//! senders on request. A rank sends to a remote *node* through one XRC send (INI) QP
//! (`ibv_create_qp_ex`, `IBV_QPT_XRC_SEND`), the engine's endpoint for that node, connected
//! to an XRC receive (TGT) QP that the node's first rank creates in the shared domain when
//! asked (`IBV_QPT_XRC_RECV`); every send names the destination rank's SRQ number
//! (`remote_srqn`), so one INI QP reaches every rank of the node and the number of send QPs
//! per rank is the number of remote nodes, not of remote ranks. TGT QPs live until the
//! fabric drops.

use std::path::{Path, PathBuf};

use super::ibv;
use crate::fabric::error::{FabricError, Result};

/// The file through which the ranks of node `node` of the job named `job` share their XRC
/// domain: in `/dev/shm` (or `/tmp` without it).
pub(crate) fn domain_path(job: &str, node: usize) -> PathBuf {
    let dir = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    PathBuf::from(format!("{dir}/ballast-xrcd-{job}-node{node}"))
}

/// Opens (creating it if needed) the node's domain through the file at `path`. Errors:
/// [`FabricError::VerbsCall`] (`open` of the file, or `ibv_open_xrcd`).
pub(crate) fn open_domain(ctx: &ibv::Context, path: &Path) -> Result<ibv::Xrcd> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|source| FabricError::VerbsCall {
            verb: "open",
            object: format!("XRC domain file {}", path.display()).into(),
            rank: None,
            peer: None,
            source,
        })?;
    Ok(ctx.open_xrcd(file, &path.display().to_string())?)
}
