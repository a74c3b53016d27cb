//! XRC (`recv_sharing=xrc` on a device that reports `IBV_DEVICE_XRC`): the resources and
//! the verbs calls; the protocol around them lives in the fabric.
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

use std::fs::File;
use std::os::fd::AsRawFd;

use rdma_sys::*;

use crate::core::error::{Error, Result};

/// `O_CREAT` of Linux (fcntl.h), for the domain file.
const O_CREAT: i32 = 0o100;

fn verr(what: String) -> Error {
    Error::Verbs(format!("{what}: {}", std::io::Error::last_os_error()))
}

/// An XRC domain opened through a file shared by the ranks of a node. Closed on drop,
/// after every SRQ and QP made in it (the owner's field order).
pub(crate) struct Xrcd {
    pub(crate) xrcd: *mut ibv_xrcd,
    _file: File,
}

impl Drop for Xrcd {
    fn drop(&mut self) {
        // SAFETY: opened in Xrcd::open, closed once, after the SRQ and QPs that use it.
        unsafe { ibv_close_xrcd(self.xrcd) };
    }
}

impl Xrcd {
    /// Opens (creating it if needed) the node's domain through the file at `path`.
    pub(crate) fn open(ctx: *mut ibv_context, path: &std::path::Path) -> Result<Xrcd> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::Verbs(format!("XRC domain file {}: {e}", path.display())))?;
        let mut attr = ibv_xrcd_init_attr {
            comp_mask: (ibv_xrcd_init_attr_mask::IBV_XRCD_INIT_ATTR_FD.0
                | ibv_xrcd_init_attr_mask::IBV_XRCD_INIT_ATTR_OFLAGS.0),
            fd: file.as_raw_fd(),
            oflags: O_CREAT,
        };
        // SAFETY: ctx is an open context; attr is initialised and lives across the call; the
        // file stays open as long as the domain (it is kept in the returned value).
        let x = unsafe { ibv_open_xrcd(ctx, &mut attr) };
        match x {
            Some(p) if !p.is_null() => Ok(Xrcd { xrcd: p, _file: file }),
            _ => Err(verr(format!("ibv_open_xrcd({})", path.display()))),
        }
    }
}

/// Creates an XRC SRQ of `depth` work requests in `xrcd`, its completions on `cq`.
pub(crate) fn create_srq(
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    xrcd: &Xrcd,
    cq: *mut ibv_cq,
    depth: u32,
) -> Result<(*mut ibv_srq, u32)> {
    // SAFETY: plain-data struct; zero is valid for the fields not set.
    let mut a: ibv_srq_init_attr_ex = unsafe { std::mem::zeroed() };
    a.attr.max_wr = depth;
    a.attr.max_sge = 1;
    a.comp_mask = ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_TYPE.0
        | ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_PD.0
        | ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_XRCD.0
        | ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_CQ.0;
    a.srq_type = ibv_srq_type::IBV_SRQT_XRC;
    a.pd = pd;
    a.xrcd = xrcd.xrcd;
    a.cq = cq;
    // SAFETY: ctx, pd, xrcd and cq are live; `a` is initialised for the fields in comp_mask.
    let srq = unsafe { ibv_create_srq_ex(ctx, &mut a) };
    let srq = match srq {
        Some(s) if !s.is_null() => s,
        _ => return Err(verr(format!("ibv_create_srq_ex(XRC, {depth} entries)"))),
    };
    let mut num = 0u32;
    // SAFETY: srq is a live XRC SRQ; num is a valid out-pointer.
    let rc = unsafe { ibv_get_srq_num(srq, &mut num) };
    if rc != 0 {
        // SAFETY: created above, destroyed once.
        unsafe { ibv_destroy_srq(srq) };
        return Err(Error::Verbs(format!(
            "ibv_get_srq_num: {}",
            std::io::Error::from_raw_os_error(rc)
        )));
    }
    Ok((srq, num))
}

/// Creates an XRC send (INI) QP with `sq_depth` sends of up to 2 gathered pieces, its
/// completions on `cq`; the inline limit actually granted is returned too.
pub(crate) fn create_ini(
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    sq_depth: u32,
    inline: u32,
) -> Result<(*mut ibv_qp, u32)> {
    // SAFETY: plain-data struct; zero is valid for the fields not set.
    let mut a: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    a.send_cq = cq;
    a.recv_cq = cq;
    a.qp_type = ibv_qp_type::IBV_QPT_XRC_SEND;
    a.cap = ibv_qp_cap {
        max_send_wr: sq_depth,
        max_recv_wr: 0,
        max_send_sge: 2,
        max_recv_sge: 0,
        max_inline_data: inline,
    };
    a.comp_mask = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
    a.pd = pd;
    // SAFETY: ctx, pd and cq are live; `a` is initialised for the fields in comp_mask.
    match unsafe { ibv_create_qp_ex(ctx, &mut a) } {
        Some(q) if !q.is_null() => Ok((q, a.cap.max_inline_data)),
        _ => Err(verr("ibv_create_qp_ex(XRC_SEND)".into())),
    }
}

/// Creates an XRC receive (TGT) QP in `xrcd` (no CQ: its packets complete on the target
/// SRQs' CQs).
pub(crate) fn create_tgt(ctx: *mut ibv_context, xrcd: &Xrcd) -> Result<*mut ibv_qp> {
    // SAFETY: plain-data struct; zero is valid for the fields not set.
    let mut a: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    a.qp_type = ibv_qp_type::IBV_QPT_XRC_RECV;
    a.comp_mask = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_XRCD.0;
    a.xrcd = xrcd.xrcd;
    // SAFETY: ctx and xrcd are live; `a` is initialised for the fields in comp_mask.
    match unsafe { ibv_create_qp_ex(ctx, &mut a) } {
        Some(q) if !q.is_null() => Ok(q),
        _ => Err(verr("ibv_create_qp_ex(XRC_RECV)".into())),
    }
}

/// A TGT QP created for a remote INI QP; destroyed on drop (before the domain).
pub(crate) struct Tgt(pub(crate) *mut ibv_qp);

impl Drop for Tgt {
    fn drop(&mut self) {
        // SAFETY: created by create_tgt, destroyed once, before the XRC domain closes.
        unsafe { ibv_destroy_qp(self.0) };
    }
}
