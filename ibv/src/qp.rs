//! The typestate queue pair: `Qp<Reset> -> Qp<Init> -> Qp<Rtr> -> Qp<Rts>`, of four kinds
//! ([`QpKind`]: RC, XRC send (INI), XRC receive (TGT) and UD). A transition consumes the QP and
//! applies the attributes built by [`super::attr`]; on failure it gives the QP back in its
//! old state with the error ([`Failed`]), so that its owner keeps it (and releases it as
//! usual) or drops it (`?` converts a boxed [`Failed`] into its error, destroying the QP).
//! Receives can be posted from INIT on, sends only in RTS. [`Qp::set_error`] moves a QP of
//! any state to ERR without changing its type: the device then flushes what is posted, and
//! the owner stops posting (the fabric marks the peer broken).

use std::marker::PhantomData;

use rdma_sys::*;

use super::attr::{QpAttr, State};
use super::{recv_wr, Ah, Context, Cq, IbvError, Pd, Result, Slots, Srq, Xrcd};

/// The kind of a queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpKind {
    /// Reliable connected.
    Rc,
    /// XRC send (initiator) QP: sends to any SRQ of a remote XRC domain.
    XrcSend,
    /// XRC receive (target) QP: receives into the SRQs of its domain, sends nothing.
    XrcRecv,
    /// Unreliable datagram: one QP reaches any remote UD QP through an address handle
    /// ([`super::Ah`]); every receive has 40 bytes for the GRH in front of the payload.
    Ud,
}

/// Created, not usable yet.
pub struct Reset;
/// Bound to a port; receives may be posted.
pub struct Init;
/// Ready to receive.
pub struct Rtr;
/// Ready to send.
pub struct Rts;

/// Queue sizes asked at creation (the device may grant a smaller inline limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline: u32,
}

struct Handle {
    qp: *mut ibv_qp,
    qpn: u32,
    kind: QpKind,
    max_inline: u32,
    _pd: Option<Pd>,
    _cqs: [Option<Cq>; 2],
    _srq: Option<Srq>,
    _xrcd: Option<Xrcd>,
    _ctx: Context,
}

// SAFETY: a QP is a handle into thread-safe libibverbs; it is used by its owner's thread.
unsafe impl Send for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: created by one of the Qp::create_* functions and destroyed once, in any
        // state; its CQs, SRQ, PD and domain outlive it (reference counts held above).
        unsafe { ibv_destroy_qp(self.qp) };
    }
}

/// A queue pair in state `S`; destroyed on drop, in any state.
pub struct Qp<S> {
    h: Handle,
    _s: PhantomData<S>,
}

/// A failed transition: the QP, still in its old state, and the error.
pub struct Failed<S> {
    pub qp: Qp<S>,
    pub error: IbvError,
}

impl<S> From<Box<Failed<S>>> for IbvError {
    fn from(f: Box<Failed<S>>) -> IbvError {
        f.error
    }
}

impl<S> std::fmt::Debug for Failed<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Failed(QP {}: {:?})", self.qp.qpn(), self.error)
    }
}

impl<S> Qp<S> {
    /// The QP number.
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.h.qpn
    }

    /// The kind given at creation.
    #[inline]
    pub fn kind(&self) -> QpKind {
        self.h.kind
    }

    /// The inline data limit the device granted, bytes.
    #[inline]
    pub fn max_inline(&self) -> u32 {
        self.h.max_inline
    }

    fn modify(&self, a: &QpAttr) -> Result<()> {
        let mut raw = a.raw();
        // SAFETY: the QP is live; `raw` is initialised for every field named in the mask.
        let rc = unsafe { ibv_modify_qp(self.h.qp, &mut raw, a.mask as i32) };
        if rc != 0 {
            return Err(IbvError::rc(
                "ibv_modify_qp",
                format!("QP {} to {}", self.h.qpn, a.state.name()),
                rc,
            ));
        }
        Ok(())
    }

    fn step<T>(self, a: &QpAttr, to: State) -> std::result::Result<Qp<T>, Box<Failed<S>>> {
        debug_assert_eq!(a.state, to, "attributes of another transition");
        match self.modify(a) {
            Ok(()) => Ok(Qp {
                h: self.h,
                _s: PhantomData,
            }),
            Err(error) => Err(Box::new(Failed { qp: self, error })),
        }
    }

    /// Moves the QP to ERR (attributes [`super::attr::error`]); see the module doc.
    pub fn set_error(&self) -> Result<()> {
        self.modify(&super::attr::error())
    }
}

impl Qp<Reset> {
    #[allow(clippy::too_many_arguments)]
    fn wrap(
        qp: *mut ibv_qp,
        kind: QpKind,
        max_inline: u32,
        ctx: &Context,
        pd: Option<&Pd>,
        cqs: [Option<&Cq>; 2],
        srq: Option<&Srq>,
        xrcd: Option<&Xrcd>,
    ) -> Qp<Reset> {
        // SAFETY: qp is a live QP just created; qp_num is set at creation.
        let qpn = unsafe { (*qp).qp_num };
        Qp {
            h: Handle {
                qp,
                qpn,
                kind,
                max_inline,
                _pd: pd.cloned(),
                _cqs: cqs.map(|c| c.cloned()),
                _srq: srq.cloned(),
                _xrcd: xrcd.cloned(),
                _ctx: ctx.clone(),
            },
            _s: PhantomData,
        }
    }

    /// An RC QP in `pd`, sends completing on `send_cq` and receives on `recv_cq` (or into
    /// `srq`), every send signalled only when asked (`sq_sig_all` 0).
    pub fn create_rc(
        ctx: &Context,
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        srq: Option<&Srq>,
        caps: QpCaps,
    ) -> Result<Qp<Reset>> {
        Self::create_plain(ctx, pd, send_cq, recv_cq, srq, QpKind::Rc, caps)
    }

    /// A UD QP in `pd`, sends completing on `send_cq` and receives on `recv_cq`, every send
    /// signalled only when asked.
    pub fn create_ud(ctx: &Context, pd: &Pd, send_cq: &Cq, recv_cq: &Cq, caps: QpCaps) -> Result<Qp<Reset>> {
        Self::create_plain(ctx, pd, send_cq, recv_cq, None, QpKind::Ud, caps)
    }

    /// `ibv_create_qp` of an RC or UD QP (`kind`), for [`Qp::create_rc`] and
    /// [`Qp::create_ud`].
    fn create_plain(
        ctx: &Context,
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        srq: Option<&Srq>,
        kind: QpKind,
        caps: QpCaps,
    ) -> Result<Qp<Reset>> {
        let (qp_type, name) = match kind {
            QpKind::Rc => (ibv_qp_type::IBV_QPT_RC, "RC"),
            QpKind::Ud => (ibv_qp_type::IBV_QPT_UD, "UD"),
            QpKind::XrcSend | QpKind::XrcRecv => unreachable!("XRC QPs are made by create_xrc_*"),
        };
        // SAFETY: plain-data struct; zero is valid for every field not set below.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = send_cq.raw();
        init.recv_cq = recv_cq.raw();
        init.srq = srq.map_or(std::ptr::null_mut(), |s| s.raw());
        init.qp_type = qp_type;
        init.sq_sig_all = 0;
        init.cap = ibv_qp_cap {
            max_send_wr: caps.max_send_wr,
            max_recv_wr: caps.max_recv_wr,
            max_send_sge: caps.max_send_sge,
            max_recv_sge: caps.max_recv_sge,
            max_inline_data: caps.max_inline,
        };
        // SAFETY: PD, CQs and SRQ are live; init is fully initialised; NULL on failure.
        let qp = unsafe { ibv_create_qp(pd.raw(), &mut init) };
        if qp.is_null() {
            return Err(IbvError::last(
                "ibv_create_qp",
                format!(
                    "{name}, {} sends, {} receives, {} B inline",
                    caps.max_send_wr, caps.max_recv_wr, caps.max_inline
                ),
            ));
        }
        Ok(Self::wrap(
            qp,
            kind,
            init.cap.max_inline_data,
            ctx,
            Some(pd),
            [Some(send_cq), Some(recv_cq)],
            srq,
            None,
        ))
    }

    /// An XRC send (INI) QP with `caps.max_send_wr` sends of up to `caps.max_send_sge`
    /// pieces, its completions on `cq`.
    pub fn create_xrc_send(ctx: &Context, pd: &Pd, cq: &Cq, caps: QpCaps) -> Result<Qp<Reset>> {
        // SAFETY: plain-data struct; zero is valid for the fields not set.
        let mut a: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
        a.send_cq = cq.raw();
        a.recv_cq = cq.raw();
        a.qp_type = ibv_qp_type::IBV_QPT_XRC_SEND;
        a.cap = ibv_qp_cap {
            max_send_wr: caps.max_send_wr,
            max_recv_wr: 0,
            max_send_sge: caps.max_send_sge,
            max_recv_sge: 0,
            max_inline_data: caps.max_inline,
        };
        a.comp_mask = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
        a.pd = pd.raw();
        // SAFETY: context, PD and CQ are live; `a` is initialised for the fields in comp_mask.
        match unsafe { ibv_create_qp_ex(ctx.raw(), &mut a) } {
            Some(q) if !q.is_null() => Ok(Self::wrap(
                q,
                QpKind::XrcSend,
                a.cap.max_inline_data,
                ctx,
                Some(pd),
                [Some(cq), None],
                None,
                None,
            )),
            _ => Err(IbvError::last(
                "ibv_create_qp_ex",
                format!("XRC_SEND, {} B inline", caps.max_inline),
            )),
        }
    }

    /// An XRC receive (TGT) QP in `xrcd` (no CQ: its packets complete on the target SRQs').
    pub fn create_xrc_recv(ctx: &Context, xrcd: &Xrcd) -> Result<Qp<Reset>> {
        // SAFETY: plain-data struct; zero is valid for the fields not set.
        let mut a: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
        a.qp_type = ibv_qp_type::IBV_QPT_XRC_RECV;
        a.comp_mask = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_XRCD.0;
        a.xrcd = xrcd.raw();
        // SAFETY: context and domain are live; `a` is initialised for the fields in comp_mask.
        match unsafe { ibv_create_qp_ex(ctx.raw(), &mut a) } {
            Some(q) if !q.is_null() => Ok(Self::wrap(
                q,
                QpKind::XrcRecv,
                0,
                ctx,
                None,
                [None, None],
                None,
                Some(xrcd),
            )),
            _ => Err(IbvError::last("ibv_create_qp_ex", "XRC_RECV")),
        }
    }

    /// RESET -> INIT with `a` ([`super::attr::init`]).
    pub fn init(self, a: &QpAttr) -> std::result::Result<Qp<Init>, Box<Failed<Reset>>> {
        self.step(a, State::Init)
    }
}

impl Qp<Init> {
    /// INIT -> RTR with `a` ([`super::attr::rtr`]).
    pub fn rtr(self, a: &QpAttr) -> std::result::Result<Qp<Rtr>, Box<Failed<Init>>> {
        self.step(a, State::Rtr)
    }
}

impl Qp<Rtr> {
    /// RTR -> RTS with `a` ([`super::attr::rts`]).
    pub fn rts(self, a: &QpAttr) -> std::result::Result<Qp<Rts>, Box<Failed<Rtr>>> {
        self.step(a, State::Rts)
    }
}

/// States in which receives may be posted to a QP's own receive queue.
pub trait Receiving {}
impl Receiving for Init {}
impl Receiving for Rtr {}
impl Receiving for Rts {}

impl<S: Receiving> Qp<S> {
    /// Posts a receive of `len` bytes at `offset` of `slots` to this QP's own receive queue
    /// (not for a QP on an SRQ), completing as `wr_id`. Errors: the range outside `slots`,
    /// or `ibv_post_recv`'s.
    #[inline]
    pub fn post_recv(&self, slots: &Slots, offset: usize, len: usize, wr_id: u64) -> Result<()> {
        let (mut sge, mut wr) = recv_wr(slots, offset, len, wr_id)?;
        wr.sg_list = &mut sge;
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: wr and sge live across the call; the range lies in `slots`' registered
        // memory, which stays registered while it is allocated (Slots' field order).
        let rc = unsafe { ibv_post_recv(self.h.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(IbvError::rc("ibv_post_recv", format!("QP {}", self.h.qpn), rc));
        }
        Ok(())
    }
}

/// One gathered piece of a send: `len` bytes at `addr` of the region with key `lkey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
}

/// A send work request (SEND, or SEND_WITH_IMM with `imm`), as plain values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    pub sges: [Sge; 2],
    /// Pieces used (1 or 2).
    pub num_sge: usize,
    /// Immediate data (host order).
    pub imm: Option<u32>,
    /// A completion is reported.
    pub signaled: bool,
    /// The data is copied into the work request (it must fit the QP's inline limit).
    pub inline: bool,
    /// XRC: the destination SRQ number.
    pub remote_srqn: Option<u32>,
}

impl SendWr {
    /// The `ibv_send_wr` of this request, its pieces written to `sges` (which it points to).
    #[inline]
    pub fn raw(&self, sges: &mut [ibv_sge; 2]) -> ibv_send_wr {
        for (r, s) in sges.iter_mut().zip(&self.sges) {
            *r = ibv_sge {
                addr: s.addr,
                length: s.len,
                lkey: s.lkey,
            };
        }
        // SAFETY: plain-data struct (with unions of plain data); zero is valid.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = self.wr_id;
        wr.sg_list = sges.as_mut_ptr();
        wr.num_sge = self.num_sge.min(2) as i32;
        wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
        if let Some(imm) = self.imm {
            wr.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_IMM;
            wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        }
        let mut flags = 0;
        if self.signaled {
            flags |= ibv_send_flags::IBV_SEND_SIGNALED.0;
        }
        if self.inline {
            flags |= ibv_send_flags::IBV_SEND_INLINE.0;
        }
        wr.send_flags = flags;
        if let Some(srqn) = self.remote_srqn {
            wr.qp_type.xrc = xrc_t { remote_srqn: srqn };
        }
        wr
    }

    /// The `ibv_send_wr` of this request sent on a UD QP to QP `remote_qpn` with queue key
    /// `qkey` through address handle `ah` (only stored, not read here).
    #[inline]
    pub fn raw_ud(
        &self,
        sges: &mut [ibv_sge; 2],
        ah: *mut ibv_ah,
        remote_qpn: u32,
        qkey: u32,
    ) -> ibv_send_wr {
        let mut wr = self.raw(sges);
        wr.wr.ud = ud_t {
            ah,
            remote_qpn,
            remote_qkey: qkey,
        };
        wr
    }
}

impl Qp<Rts> {
    /// Posts `wr`. Its pieces must lie in registered memory ([`super::Mr`], [`Slots`]) that
    /// the caller leaves untouched until the completion of `wr.wr_id` (the device reads it
    /// by key; an unregistered range fails with a protection error).
    #[inline]
    pub fn post_send(&self, wr: &SendWr) -> Result<()> {
        let mut sges = [ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        }; 2];
        let mut raw = wr.raw(&mut sges);
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the QP is live and in RTS; raw and sges live across the call; the device
        // reads only memory of the regions named by the keys.
        let rc = unsafe { ibv_post_send(self.h.qp, &mut raw, &mut bad) };
        if rc != 0 {
            return Err(IbvError::rc("ibv_post_send", format!("QP {}", self.h.qpn), rc));
        }
        Ok(())
    }

    /// Posts `wr` on this UD QP toward QP `remote_qpn` (queue key `qkey`) at the address of
    /// `ah`, which must be in this QP's protection domain. The memory rule of
    /// [`Qp::post_send`] applies, and `ah` must outlive the send (some providers, rxe among
    /// them, look the handle up when the send is processed: the fabric keeps its handles
    /// until it drops, after its UD QP).
    #[inline]
    pub fn post_ud(&self, wr: &SendWr, ah: &Ah, remote_qpn: u32, qkey: u32) -> Result<()> {
        debug_assert_eq!(self.h.kind, QpKind::Ud, "a UD send on another kind of QP");
        let mut sges = [ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        }; 2];
        let mut raw = wr.raw_ud(&mut sges, ah.raw(), remote_qpn, qkey);
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the QP is live and in RTS; raw and sges live across the call; the address
        // handle is live and kept by the caller past the send; the device reads only memory of the
        // regions named by the keys.
        let rc = unsafe { ibv_post_send(self.h.qp, &mut raw, &mut bad) };
        if rc != 0 {
            return Err(IbvError::rc("ibv_post_send", format!("UD QP {}", self.h.qpn), rc));
        }
        Ok(())
    }
}
