//! The attributes of each queue-pair transition (INIT, RTR with or without a GRH, RTS, ERR)
//! and of a send work request, built by pure functions into plain values ([`QpAttr`],
//! [`SendWr`](super::SendWr)), so that what the fabric, XRC and the raw ping-pong ask of
//! the device is unit-tested without one. [`QpAttr::raw`] makes the `ibv_qp_attr` that
//! `ibv_modify_qp` takes, with [`QpAttr::mask`] as its attribute mask.

use rdma_sys::*;

use super::qp::QpKind;

/// RC ACK timeout exponent of the fabric: 4.096 us x 2^16 = 268 ms per try (generous for
/// soft-RoCE).
pub const ACK_TIMEOUT: u8 = 16;
/// RC retries before a send fails (7 = the maximum).
pub const RETRY_COUNT: u8 = 7;
/// RNR retries (7 = retry for ever: a receive is always posted before the peer sends).
pub const RNR_RETRY: u8 = 7;
/// Minimum RNR NAK timer code (12 = 0.64 ms).
pub const MIN_RNR_TIMER: u8 = 12;
/// Outstanding RDMA reads/atomics, each way (none are used; 1 is the smallest valid value).
pub const RD_ATOMIC: u8 = 1;
/// GRH hop limit for RoCE and global IB routes.
pub const HOP_LIMIT: u8 = 64;

/// A target state of `ibv_modify_qp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Init,
    Rtr,
    Rts,
    Err,
}

impl State {
    fn raw(self) -> ibv_qp_state::Type {
        match self {
            State::Init => ibv_qp_state::IBV_QPS_INIT,
            State::Rtr => ibv_qp_state::IBV_QPS_RTR,
            State::Rts => ibv_qp_state::IBV_QPS_RTS,
            State::Err => ibv_qp_state::IBV_QPS_ERR,
        }
    }

    /// The state's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            State::Init => "INIT",
            State::Rtr => "RTR",
            State::Rts => "RTS",
            State::Err => "ERR",
        }
    }
}

/// The global route header of an address vector (RoCE, or IB without a LID).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grh {
    pub dgid: [u8; 16],
    pub sgid_index: u8,
    pub hop_limit: u8,
}

/// Where the remote QP is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressVector {
    pub dlid: u16,
    pub port: u8,
    pub sl: u8,
    pub grh: Option<Grh>,
}

/// The attributes of one `ibv_modify_qp` call: the fields `mask` names, the rest zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAttr {
    pub state: State,
    /// `ibv_qp_attr_mask` bits.
    pub mask: u32,
    pub pkey_index: u16,
    pub port: u8,
    /// `ibv_access_flags` bits.
    pub access: u32,
    /// `ibv_mtu` value.
    pub path_mtu: ibv_mtu::Type,
    pub dest_qpn: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub av: Option<AddressVector>,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub max_rd_atomic: u8,
    /// UD: the queue key of the QP (INIT).
    pub qkey: u32,
}

impl QpAttr {
    fn new(state: State, mask: u32) -> QpAttr {
        QpAttr {
            state,
            mask,
            pkey_index: 0,
            port: 0,
            access: 0,
            path_mtu: 0,
            dest_qpn: 0,
            rq_psn: 0,
            sq_psn: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            av: None,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            max_rd_atomic: 0,
            qkey: 0,
        }
    }

    /// The `ibv_qp_attr` of these attributes (its mask is [`QpAttr::mask`]).
    pub fn raw(&self) -> ibv_qp_attr {
        // SAFETY: plain-data struct (with unions of plain data); zero is valid for every field.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = self.state.raw();
        a.pkey_index = self.pkey_index;
        a.port_num = self.port;
        a.qp_access_flags = self.access;
        a.path_mtu = self.path_mtu;
        a.dest_qp_num = self.dest_qpn;
        a.rq_psn = self.rq_psn;
        a.sq_psn = self.sq_psn;
        a.max_dest_rd_atomic = self.max_dest_rd_atomic;
        a.min_rnr_timer = self.min_rnr_timer;
        if let Some(av) = self.av {
            a.ah_attr.dlid = av.dlid;
            a.ah_attr.port_num = av.port;
            a.ah_attr.sl = av.sl;
            if let Some(g) = av.grh {
                a.ah_attr.is_global = 1;
                a.ah_attr.grh.dgid.raw = g.dgid;
                a.ah_attr.grh.sgid_index = g.sgid_index;
                a.ah_attr.grh.hop_limit = g.hop_limit;
            }
        }
        a.timeout = self.timeout;
        a.retry_cnt = self.retry_cnt;
        a.rnr_retry = self.rnr_retry;
        a.max_rd_atomic = self.max_rd_atomic;
        a.qkey = self.qkey;
        a
    }
}

impl AddressVector {
    /// The `ibv_ah_attr` of this address vector (for `ibv_create_ah`; a UD send names the
    /// address handle made from it).
    pub fn raw_ah(&self) -> ibv_ah_attr {
        // SAFETY: plain-data struct (with a union of bytes); zero is valid for every field.
        let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
        a.dlid = self.dlid;
        a.port_num = self.port;
        a.sl = self.sl;
        if let Some(g) = self.grh {
            a.is_global = 1;
            a.grh.dgid.raw = g.dgid;
            a.grh.sgid_index = g.sgid_index;
            a.grh.hop_limit = g.hop_limit;
        }
        a
    }
}

/// This side's port, as the device reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Local {
    pub port: u8,
    /// Active path MTU (`ibv_mtu`).
    pub mtu: ibv_mtu::Type,
    pub gid_index: u8,
    /// RoCE (the link layer is Ethernet): every route needs a GRH.
    pub ethernet: bool,
}

/// The remote QP's connection data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remote {
    pub qpn: u32,
    pub psn: u32,
    pub lid: u16,
    pub gid: [u8; 16],
}

/// The send side's retry settings (RTS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    /// ACK timeout exponent.
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
}

impl Retry {
    /// The fabric's: [`ACK_TIMEOUT`], [`RETRY_COUNT`], [`RNR_RETRY`].
    pub const FABRIC: Retry = Retry {
        timeout: ACK_TIMEOUT,
        retry_cnt: RETRY_COUNT,
        rnr_retry: RNR_RETRY,
    };
}

use ibv_qp_attr_mask as M;

/// RESET -> INIT on `port`, local write access only (every QP kind starts so).
pub fn init(port: u8) -> QpAttr {
    let mut a = QpAttr::new(
        State::Init,
        M::IBV_QP_STATE.0 | M::IBV_QP_PKEY_INDEX.0 | M::IBV_QP_PORT.0 | M::IBV_QP_ACCESS_FLAGS.0,
    );
    a.pkey_index = 0;
    a.port = port;
    a.access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
    a
}

/// INIT -> RTR toward `remote`. A GRH (from the remote GID, our GID index) is set on RoCE
/// and when the remote has no LID. QPs that receive (RC, XRC TGT) also get the responder
/// attributes; an XRC send QP does not.
pub fn rtr(local: &Local, remote: &Remote, kind: QpKind) -> QpAttr {
    let mut mask =
        M::IBV_QP_STATE.0 | M::IBV_QP_AV.0 | M::IBV_QP_PATH_MTU.0 | M::IBV_QP_DEST_QPN.0 | M::IBV_QP_RQ_PSN.0;
    if kind != QpKind::XrcSend {
        mask |= M::IBV_QP_MAX_DEST_RD_ATOMIC.0 | M::IBV_QP_MIN_RNR_TIMER.0;
    }
    let mut a = QpAttr::new(State::Rtr, mask);
    a.path_mtu = local.mtu;
    a.dest_qpn = remote.qpn;
    a.rq_psn = remote.psn;
    a.max_dest_rd_atomic = RD_ATOMIC;
    a.min_rnr_timer = MIN_RNR_TIMER;
    a.av = Some(AddressVector {
        dlid: remote.lid,
        port: local.port,
        sl: 0,
        grh: (local.ethernet || remote.lid == 0).then_some(Grh {
            dgid: remote.gid,
            sgid_index: local.gid_index,
            hop_limit: HOP_LIMIT,
        }),
    });
    a
}

/// RTR -> RTS with our send PSN `psn`.
pub fn rts(psn: u32, retry: Retry) -> QpAttr {
    let mut a = QpAttr::new(
        State::Rts,
        M::IBV_QP_STATE.0
            | M::IBV_QP_SQ_PSN.0
            | M::IBV_QP_TIMEOUT.0
            | M::IBV_QP_RETRY_CNT.0
            | M::IBV_QP_RNR_RETRY.0
            | M::IBV_QP_MAX_QP_RD_ATOMIC.0,
    );
    a.sq_psn = psn;
    a.timeout = retry.timeout;
    a.retry_cnt = retry.retry_cnt;
    a.rnr_retry = retry.rnr_retry;
    a.max_rd_atomic = RD_ATOMIC;
    a
}

/// UD: RESET -> INIT on `port` with queue key `qkey` (a UD QP has no access flags).
pub fn init_ud(port: u8, qkey: u32) -> QpAttr {
    let mut a = QpAttr::new(
        State::Init,
        M::IBV_QP_STATE.0 | M::IBV_QP_PKEY_INDEX.0 | M::IBV_QP_PORT.0 | M::IBV_QP_QKEY.0,
    );
    a.pkey_index = 0;
    a.port = port;
    a.qkey = qkey;
    a
}

/// UD: INIT -> RTR (nothing but the state: a UD QP has no remote).
pub fn rtr_ud() -> QpAttr {
    QpAttr::new(State::Rtr, M::IBV_QP_STATE.0)
}

/// UD: RTR -> RTS with our send PSN `psn` (no retries: datagrams are unacknowledged).
pub fn rts_ud(psn: u32) -> QpAttr {
    let mut a = QpAttr::new(State::Rts, M::IBV_QP_STATE.0 | M::IBV_QP_SQ_PSN.0);
    a.sq_psn = psn;
    a
}

/// The address vector of an address handle toward a remote UD QP at `lid` / `gid` from
/// `local`'s port: a GRH (remote GID, our GID index, [`HOP_LIMIT`]) on RoCE and when the
/// remote has no LID, as for an RC route ([`rtr`]).
pub fn ud_address(local: &Local, lid: u16, gid: [u8; 16]) -> AddressVector {
    AddressVector {
        dlid: lid,
        port: local.port,
        sl: 0,
        grh: (local.ethernet || lid == 0).then_some(Grh {
            dgid: gid,
            sgid_index: local.gid_index,
            hop_limit: HOP_LIMIT,
        }),
    }
}

/// Any state -> ERR (the device flushes the posted work requests).
pub fn error() -> QpAttr {
    QpAttr::new(State::Err, M::IBV_QP_STATE.0)
}

#[cfg(test)]
mod tests {
    use super::super::qp::SendWr;
    use super::super::Sge;
    use super::*;

    const GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 1, 1];

    fn roce() -> Local {
        Local {
            port: 1,
            mtu: ibv_mtu::IBV_MTU_1024,
            gid_index: 1,
            ethernet: true,
        }
    }

    fn remote(lid: u16) -> Remote {
        Remote {
            qpn: 0x11,
            psn: 0x00ab_cdef,
            lid,
            gid: GID,
        }
    }

    #[test]
    fn init_sets_port_pkey_and_local_write() {
        let a = init(2);
        assert_eq!(a.state, State::Init);
        assert_eq!(a.mask, 0x1 | 0x10 | 0x20 | 0x8); // STATE | PKEY_INDEX | PORT | ACCESS_FLAGS
        assert_eq!(
            a.mask,
            M::IBV_QP_STATE.0 | M::IBV_QP_PKEY_INDEX.0 | M::IBV_QP_PORT.0 | M::IBV_QP_ACCESS_FLAGS.0
        );
        let raw = a.raw();
        assert_eq!(raw.qp_state, ibv_qp_state::IBV_QPS_INIT);
        assert_eq!(raw.port_num, 2);
        assert_eq!(raw.pkey_index, 0);
        assert_eq!(raw.qp_access_flags, ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0);
        assert_eq!(raw.qp_access_flags, 1);
    }

    #[test]
    fn rtr_on_roce_has_a_grh_from_the_remote_gid() {
        let a = rtr(&roce(), &remote(0), QpKind::Rc);
        assert_eq!(a.state, State::Rtr);
        // STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER
        assert_eq!(a.mask, 0x1 | 0x80 | 0x100 | 0x100000 | 0x1000 | 0x20000 | 0x8000);
        let raw = a.raw();
        assert_eq!(raw.qp_state, ibv_qp_state::IBV_QPS_RTR);
        assert_eq!(raw.path_mtu, ibv_mtu::IBV_MTU_1024);
        assert_eq!(raw.path_mtu, 3);
        assert_eq!(raw.dest_qp_num, 0x11);
        assert_eq!(raw.rq_psn, 0x00ab_cdef);
        assert_eq!(raw.max_dest_rd_atomic, 1);
        assert_eq!(raw.min_rnr_timer, 12);
        assert_eq!(raw.ah_attr.is_global, 1);
        assert_eq!(raw.ah_attr.port_num, 1);
        assert_eq!(raw.ah_attr.dlid, 0);
        assert_eq!(raw.ah_attr.sl, 0);
        // SAFETY: reading the byte view of a union of bytes.
        let dgid = unsafe { raw.ah_attr.grh.dgid.raw };
        assert_eq!(dgid, GID);
        assert_eq!(raw.ah_attr.grh.sgid_index, 1);
        assert_eq!(raw.ah_attr.grh.hop_limit, 64);
        // A RoCE route has a GRH even when the remote reports a LID.
        assert!(rtr(&roce(), &remote(7), QpKind::Rc).av.unwrap().grh.is_some());
    }

    #[test]
    fn rtr_on_infiniband_uses_the_lid_and_a_grh_only_without_one() {
        let ib = Local {
            ethernet: false,
            mtu: ibv_mtu::IBV_MTU_4096,
            ..roce()
        };
        let a = rtr(&ib, &remote(5), QpKind::Rc);
        let av = a.av.unwrap();
        assert_eq!(av.dlid, 5);
        assert_eq!(av.grh, None);
        let raw = a.raw();
        assert_eq!(raw.ah_attr.is_global, 0);
        assert_eq!(raw.ah_attr.dlid, 5);
        assert_eq!(raw.path_mtu, 5);
        let g = rtr(&ib, &remote(0), QpKind::Rc).av.unwrap().grh.unwrap();
        assert_eq!(
            g,
            Grh {
                dgid: GID,
                sgid_index: 1,
                hop_limit: 64
            }
        );
    }

    #[test]
    fn rtr_of_an_xrc_send_qp_has_no_responder_attributes() {
        let ini = rtr(&roce(), &remote(0), QpKind::XrcSend);
        let responder = M::IBV_QP_MAX_DEST_RD_ATOMIC.0 | M::IBV_QP_MIN_RNR_TIMER.0;
        assert_eq!(ini.mask & responder, 0);
        assert_eq!(ini.mask, 0x1 | 0x80 | 0x100 | 0x100000 | 0x1000);
        let tgt = rtr(&roce(), &remote(0), QpKind::XrcRecv);
        assert_eq!(tgt.mask & responder, responder);
        assert_eq!(tgt.mask, rtr(&roce(), &remote(0), QpKind::Rc).mask);
    }

    #[test]
    fn rts_uses_the_fabric_retry_constants() {
        let a = rts(0x0012_3456, Retry::FABRIC);
        // STATE | SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC
        assert_eq!(a.mask, 0x1 | 0x10000 | 0x200 | 0x400 | 0x800 | 0x2000);
        let raw = a.raw();
        assert_eq!(raw.qp_state, ibv_qp_state::IBV_QPS_RTS);
        assert_eq!(raw.sq_psn, 0x0012_3456);
        assert_eq!((raw.timeout, raw.retry_cnt, raw.rnr_retry), (16, 7, 7));
        assert_eq!(raw.max_rd_atomic, 1);
        // The raw ping-pong's perftest default timeout goes through unchanged.
        let p = rts(
            0x1234,
            Retry {
                timeout: 14,
                ..Retry::FABRIC
            },
        )
        .raw();
        assert_eq!((p.timeout, p.sq_psn), (14, 0x1234));
    }

    #[test]
    fn ud_transitions_name_the_qkey_and_the_psn_only() {
        let i = init_ud(1, 0x1234_5678);
        assert_eq!(i.state, State::Init);
        assert_eq!(i.mask, 0x1 | 0x10 | 0x20 | 0x40); // STATE | PKEY_INDEX | PORT | QKEY
        let raw = i.raw();
        assert_eq!(
            (raw.qp_state, raw.port_num, raw.pkey_index, raw.qkey),
            (ibv_qp_state::IBV_QPS_INIT, 1, 0, 0x1234_5678)
        );
        assert_eq!(raw.qp_access_flags, 0, "a UD QP takes no access flags");
        let r = rtr_ud();
        assert_eq!((r.state, r.mask), (State::Rtr, 0x1));
        assert_eq!(r.raw().qp_state, ibv_qp_state::IBV_QPS_RTR);
        let s = rts_ud(0x00ab_cdef);
        assert_eq!((s.state, s.mask), (State::Rts, 0x1 | 0x10000)); // STATE | SQ_PSN
        let raw = s.raw();
        assert_eq!(
            (raw.qp_state, raw.sq_psn),
            (ibv_qp_state::IBV_QPS_RTS, 0x00ab_cdef)
        );
        assert_eq!((raw.timeout, raw.retry_cnt, raw.rnr_retry), (0, 0, 0));
    }

    #[test]
    fn ud_address_handles_have_a_grh_on_roce_and_the_lid_on_infiniband() {
        let av = ud_address(&roce(), 0, GID);
        assert_eq!(
            av.grh,
            Some(Grh {
                dgid: GID,
                sgid_index: 1,
                hop_limit: 64
            })
        );
        let raw = av.raw_ah();
        assert_eq!((raw.is_global, raw.port_num, raw.dlid, raw.sl), (1, 1, 0, 0));
        // SAFETY: reading the byte view of a union of bytes.
        assert_eq!(unsafe { raw.grh.dgid.raw }, GID);
        assert_eq!((raw.grh.sgid_index, raw.grh.hop_limit), (1, 64));
        assert!(
            raw.grh.hop_limit >= 1,
            "hop limit 0 would not leave the port on RoCE"
        );
        // RoCE: a GRH even with a LID; IB: the LID alone, a GRH only without one.
        assert!(ud_address(&roce(), 7, GID).grh.is_some());
        let ib = Local {
            ethernet: false,
            ..roce()
        };
        let raw = ud_address(&ib, 5, GID).raw_ah();
        assert_eq!((raw.is_global, raw.dlid, raw.port_num), (0, 5, 1));
        assert!(ud_address(&ib, 0, GID).grh.is_some());
    }

    #[test]
    fn error_names_only_the_state() {
        let a = error();
        assert_eq!(a.mask, M::IBV_QP_STATE.0);
        assert_eq!(a.raw().qp_state, ibv_qp_state::IBV_QPS_ERR);
        assert_eq!(a.state.name(), "ERR");
    }

    #[test]
    fn send_work_requests() {
        let sges = [
            Sge {
                addr: 0x1000,
                len: 32,
                lkey: 9,
            },
            Sge {
                addr: 0x2000,
                len: 8,
                lkey: 10,
            },
        ];
        let w = SendWr {
            wr_id: 42,
            sges,
            num_sge: 2,
            imm: Some(3),
            signaled: true,
            inline: true,
            remote_srqn: None,
        };
        let mut raw_sges = [ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        }; 2];
        let raw = w.raw(&mut raw_sges);
        assert_eq!(raw.wr_id, 42);
        assert_eq!(raw.num_sge, 2);
        assert_eq!(raw.opcode, ibv_wr_opcode::IBV_WR_SEND_WITH_IMM);
        // SAFETY: reading the immediate data written by to_raw.
        assert_eq!(
            unsafe { raw.imm_data_invalidated_rkey_union.imm_data },
            3u32.to_be()
        );
        assert_eq!(
            raw.send_flags,
            ibv_send_flags::IBV_SEND_SIGNALED.0 | ibv_send_flags::IBV_SEND_INLINE.0
        );
        assert_eq!(
            (raw_sges[1].addr, raw_sges[1].length, raw_sges[1].lkey),
            (0x2000, 8, 10)
        );
        assert_eq!(raw.sg_list, raw_sges.as_mut_ptr());
        let plain = SendWr {
            imm: None,
            inline: false,
            num_sge: 1,
            remote_srqn: Some(77),
            ..w
        };
        let raw = plain.raw(&mut raw_sges);
        assert_eq!(raw.opcode, ibv_wr_opcode::IBV_WR_SEND);
        assert_eq!(raw.num_sge, 1);
        assert_eq!(raw.send_flags, ibv_send_flags::IBV_SEND_SIGNALED.0);
        // SAFETY: reading the XRC member written by to_raw.
        assert_eq!(unsafe { raw.qp_type.xrc.remote_srqn }, 77);
        // A UD send: the same request, plus the remote QP, queue key and address handle.
        let ud = SendWr {
            num_sge: 1,
            imm: None,
            inline: false,
            remote_srqn: None,
            ..w
        };
        let fake_ah = 0x40 as *mut ibv_ah; // only stored, never read
        let raw = ud.raw_ud(&mut raw_sges, fake_ah, 0x00ab_cdef, 0x1111_2222);
        assert_eq!(
            (raw.wr_id, raw.num_sge, raw.opcode),
            (42, 1, ibv_wr_opcode::IBV_WR_SEND)
        );
        // SAFETY: reading the UD member written by raw_ud.
        let u = unsafe { raw.wr.ud };
        assert_eq!(
            (u.ah, u.remote_qpn, u.remote_qkey),
            (fake_ah, 0x00ab_cdef, 0x1111_2222)
        );
        assert_eq!(raw.send_flags, ibv_send_flags::IBV_SEND_SIGNALED.0);
    }
}
