//! The verbs fabric's datagram path ([`Fabric::post_datagram`](crate::fabric::Fabric)):
//! one UD queue pair per rank when the datagram path is on (`max_endpoints` set,
//! `endpoint_overflow=datagram`, not `xrc`), made on first use: by the rank's first datagram,
//! or by the first peer asking for its address (so a rank whose peers all fit under the cap
//! never pays for it), with its own registered
//! rings: [`VERBS_UD_RECV_DEPTH`] receive slots of `40 + 4 + min(buffer_size, 4096)` bytes
//! (the device writes the 40-byte GRH in front of every UD receive; the fabric prepends the
//! sender's rank, 4 bytes little endian) and [`VERBS_UD_SEND_SLOTS`] send slots, each send
//! signalled and its slot recycled by its completion. Sends and receives complete on two
//! CQs of their own, so that a send may wait for a free slot without consuming arrivals.
//!
//! - **Addresses.** A rank learns a peer's UD address (QPN, LID, GID, queue key) on the
//!   control channel on first use: the first datagram to a peer sends a [`Kind::UdReq`]
//!   carrying this rank's own address and is dropped (the protocol sends it again); the
//!   peer records the asker's address and answers with a [`Kind::UdAddr`]. So a rank
//!   always knows the address of a rank that sends it datagrams before the first one
//!   arrives, and nothing is exchanged for runs that never use the path. The address handle
//!   is created when the address arrives and kept (per peer, [`UdPeer`]) until the fabric
//!   drops, after the UD QP.
//! - **Drops.** A datagram is dropped, which is not an error on this path (the protocol
//!   acknowledges and retransmits), when the peer's address is not known yet, or when no
//!   send slot is free after one poll of the send CQ; the device drops one that finds no
//!   posted receive.
//! - **Sizes.** The datagram size is the port's active MTU (the UD payload limit; the GRH
//!   is not part of it) less the 4-byte rank, at most the slot payload.
//! - **Memory.** The UD QP, its CQs and rings are charged as shared receive memory
//!   (`srq_bytes`, the rings also as registered and locked), each peer's entry and address
//!   handle as datagram state ([`crate::fabric::sizes::VERBS_UD_PEER_BYTES`]), as the
//!   model predicts.

use super::VerbsFabric;
use crate::core::intmap::IntMap;
use crate::fabric::error::{FabricError, Result};
use crate::fabric::sizes::{
    verbs_ud_fixed_bytes, verbs_ud_payload, verbs_ud_ring_bytes, VERBS_UD_GRH_BYTES, VERBS_UD_PEER_BYTES,
    VERBS_UD_RANK_BYTES, VERBS_UD_RECV_DEPTH, VERBS_UD_SEND_SLOTS,
};
use crate::fabric::verbs::control::{Frame, Kind, QpInfo};
use crate::fabric::verbs::device::Device;
use crate::fabric::verbs::ibv::{self, attr, Ah, Cq, Qp, QpCaps, Rts, SendWr, Sge, Slots};
use crate::fabric::{go, Event, Flow, Halt};

const GRH: usize = VERBS_UD_GRH_BYTES as usize;
const RANK: usize = VERBS_UD_RANK_BYTES as usize;

/// What the fabric keeps per datagram peer: the address handle toward it and its UD QPN
/// (`ah` `None` with `asked`: its address was asked for and has not come yet).
pub(super) struct UdPeer {
    ah: Option<Ah>,
    qpn: u32,
    asked: bool,
}

/// The rank's UD queue pair, its rings and the peers' addresses. Field order: the QP drops
/// before the address handles its sends named, and before its rings.
pub(super) struct Ud {
    qp: Qp<Rts>,
    peers: IntMap<usize, UdPeer>,
    recv: Slots,
    send: Slots,
    free: Vec<usize>,
    send_cq: Cq,
    recv_cq: Cq,
    qkey: u32,
    /// The datagram size offered, bytes.
    pub(super) mtu: usize,
    /// Some peer knows this rank's address (or this rank a peer's): arrivals are possible,
    /// so the receive CQ is polled.
    active: bool,
}

/// The queue key of a job: 31 bits of a hash of its tag (keys with the top bit set are
/// privileged), so that a stray datagram of another job on the same device is refused by
/// the device.
fn qkey_of(job: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in job.bytes() {
        h = (h ^ b as u32).wrapping_mul(0x0100_0193);
    }
    (h & 0x7fff_ffff).max(1)
}

impl Ud {
    /// The datagram size on `dev` for `buffer_size` `b`: the port's active MTU less the
    /// rank, at most a slot's payload; `None` when that leaves no room.
    pub(super) fn mtu(dev: &Device, b: usize) -> Option<usize> {
        let payload = verbs_ud_payload(b as u64) as usize;
        Some((dev.caps.active_mtu as usize).saturating_sub(RANK).min(payload)).filter(|&m| m > 0)
    }

    /// The UD QP on `dev` in RTS with every receive posted, for `buffer_size` `b` and
    /// datagram size `mtu` ([`Ud::mtu`]); `job` names the job (its queue key), `psn` is the
    /// send PSN.
    pub(super) fn new(dev: &Device, b: usize, mtu: usize, job: &str, psn: u32) -> Result<Ud> {
        let payload = verbs_ud_payload(b as u64) as usize;
        let send_cq = dev.ctx.create_cq(VERBS_UD_SEND_SLOTS as u32)?;
        let recv_cq = dev.ctx.create_cq(VERBS_UD_RECV_DEPTH as u32)?;
        let caps = QpCaps {
            max_send_wr: VERBS_UD_SEND_SLOTS as u32,
            max_recv_wr: VERBS_UD_RECV_DEPTH as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline: 0,
        };
        let qkey = qkey_of(job);
        let qp = Qp::create_ud(&dev.ctx, &dev.pd, &send_cq, &recv_cq, caps)?;
        let qp = qp.init(&attr::init_ud(dev.caps.port, qkey))?;
        let recv = Slots::new(
            &dev.pd,
            VERBS_UD_RECV_DEPTH as usize,
            GRH + RANK + payload,
            "the UD receive ring",
        )?;
        for i in 0..recv.count() {
            qp.post_recv(&recv, i * recv.slot(), recv.slot(), i as u64)?;
        }
        let qp = qp.rtr(&attr::rtr_ud())?.rts(&attr::rts_ud(psn))?;
        let send = Slots::new(
            &dev.pd,
            VERBS_UD_SEND_SLOTS as usize,
            RANK + payload,
            "the UD send ring",
        )?;
        Ok(Ud {
            qp,
            peers: IntMap::default(),
            free: (0..send.count()).rev().collect(),
            recv,
            send,
            send_cq,
            recv_cq,
            qkey,
            mtu,
            active: false,
        })
    }

    /// Bytes charged for the QP, its CQs and rings (`srq_bytes`), and the registered rings.
    pub(super) fn fixed_bytes(b: usize) -> (u64, u64) {
        (verbs_ud_fixed_bytes(b as u64), verbs_ud_ring_bytes(b as u64))
    }

    fn info(&self, dev: &Device) -> QpInfo {
        QpInfo {
            qpn: self.qp.qpn(),
            psn: 0,
            lid: dev.lid,
            gid: dev.gid,
        }
    }

    /// Reads the send CQ: completed sends give their slots back. A failed send is an error
    /// (the UD QP's send queue is in error then).
    fn reap_sends(&mut self, rank: usize) -> Result<()> {
        let mut wcs = [const { std::mem::MaybeUninit::<ibv::sys::ibv_wc>::uninit() }; 16];
        loop {
            let done = self.send_cq.poll(&mut wcs).map_err(|e| ibv::at(e, rank, None))?;
            let got = done.len();
            for wc in done {
                self.free.push(wc.wr_id as usize);
                if wc.status != ibv::sys::ibv_wc_status::IBV_WC_SUCCESS {
                    return Err(FabricError::WorkCompletion {
                        op: "UD send",
                        status: wc.status,
                        status_text: ibv::status_text(wc.status).into(),
                        rank: Some(rank),
                        peer: None,
                    });
                }
            }
            if got < wcs.len() {
                return Ok(());
            }
        }
    }
}

// The fabric's entry per datagram peer is within what the model charges for it.
const _: () = assert!(
    (std::mem::size_of::<UdPeer>() + std::mem::size_of::<usize>()) as u64
        <= crate::fabric::sizes::VERBS_UD_ENTRY_BYTES
);

impl VerbsFabric {
    /// Turns the datagram path on when the engine uses it (`wanted`: the datagram size),
    /// checking now that the locked-memory limit leaves room for its rings; the UD QP is
    /// made on first use ([`VerbsFabric::ensure_ud`]).
    pub(super) fn setup_ud(&mut self, wanted: bool) -> Result<()> {
        if !wanted {
            return Ok(());
        }
        self.ud_mtu = Ud::mtu(&self.dev, self.cfg.buffer_size);
        if self.ud_mtu.is_some() {
            self.check_memlock(Ud::fixed_bytes(self.cfg.buffer_size).1)?;
        }
        Ok(())
    }

    /// Makes (and charges) the UD QP if the datagram path is on and it does not exist yet.
    fn ensure_ud(&mut self) -> Result<()> {
        let Some(mtu) = self.ud_mtu else {
            return Ok(());
        };
        if self.ud.is_none() {
            let (fixed, ring) = Ud::fixed_bytes(self.cfg.buffer_size);
            self.check_memlock(ring)?;
            let psn = self.next_psn();
            let at = |e: FabricError| ibv::at(e, self.rank, None);
            let ud = Ud::new(&self.dev, self.cfg.buffer_size, mtu, &self.mesh.job_tag(), psn).map_err(at)?;
            self.pinned += ring;
            self.bytes.srq_bytes += fixed;
            self.bytes.recv_registered_bytes += ring;
            self.bytes.recv_locked_bytes += ring;
            self.ud = Some(ud);
        }
        Ok(())
    }

    /// The engine's `post_datagram` (see the module doc for when it drops `bytes`).
    pub(super) fn send_datagram(&mut self, dest: usize, bytes: &[u8]) -> Result<()> {
        if dest >= self.world {
            return Err(FabricError::InvalidRank {
                rank: dest,
                world_size: self.world,
            });
        }
        let rank = self.rank;
        self.ensure_ud()?;
        let Some(ud) = self.ud.as_mut() else {
            return Err(FabricError::NoDatagrams { transport: "verbs" });
        };
        if bytes.len() > ud.mtu {
            return Err(FabricError::VerbsSend {
                rank,
                dest,
                what: format!(
                    "datagram of {} bytes exceeds the datagram size {}",
                    bytes.len(),
                    ud.mtu
                ),
            });
        }
        let known = ud.peers.get(&dest).and_then(|p| p.ah.as_ref().map(|_| ()));
        if known.is_none() {
            if !ud.peers.get(&dest).is_some_and(|p| p.asked) {
                if !ud.peers.contains_key(&dest) {
                    self.bytes.datagram_bytes += VERBS_UD_PEER_BYTES;
                }
                ud.peers.insert(
                    dest,
                    UdPeer {
                        ah: None,
                        qpn: 0,
                        asked: true,
                    },
                );
                ud.active = true;
                let f = Frame {
                    kind: Kind::UdReq,
                    code: 0,
                    src: rank as u32,
                    value: ud.qkey as u64,
                    qp: ud.info(&self.dev),
                };
                self.mesh.send(dest, &f)?;
            }
            return Ok(()); // dropped: sent again by the protocol once the address is here
        }
        if ud.free.is_empty() {
            ud.reap_sends(rank)?;
        }
        let Some(slot) = ud.free.pop() else {
            return Ok(()); // dropped: the send ring is full
        };
        let b = ud.send.bytes_mut();
        let off = slot * (RANK + verbs_ud_payload(self.cfg.buffer_size as u64) as usize);
        b[off..off + RANK].copy_from_slice(&(rank as u32).to_le_bytes());
        b[off + RANK..off + RANK + bytes.len()].copy_from_slice(bytes);
        let wr = SendWr {
            wr_id: slot as u64,
            sges: [
                Sge {
                    addr: ud.send.addr(slot),
                    len: (RANK + bytes.len()) as u32,
                    lkey: ud.send.lkey(),
                },
                Sge {
                    addr: 0,
                    len: 0,
                    lkey: 0,
                },
            ],
            num_sge: 1,
            imm: None,
            signaled: true,
            inline: false,
            remote_srqn: None,
        };
        let p = ud.peers.get(&dest).expect("known above");
        let ah = p.ah.as_ref().expect("known above");
        // The slot lies in the registered send ring and is not written again before its
        // completion gives it back; the address handle lives until the fabric drops.
        if let Err(e) = ud.qp.post_ud(&wr, ah, p.qpn, ud.qkey) {
            ud.free.push(slot);
            return Err(ibv::at(e, rank, Some(dest)));
        }
        Ok(())
    }

    /// A [`Kind::UdReq`] or [`Kind::UdAddr`] from `src`: records its address (and creates
    /// the address handle toward it); answers a request with this rank's address.
    pub(super) fn on_ud_frame(&mut self, src: usize, f: &Frame) -> Result<()> {
        let rank = self.rank;
        self.ensure_ud()?;
        let Some(ud) = self.ud.as_mut() else {
            return Err(FabricError::ControlFrame {
                rank: Some(rank),
                from: Some(src),
                what: "a UD address frame, but this rank has no datagram path (the ranks' settings differ)"
                    .into(),
            });
        };
        if f.value != ud.qkey as u64 {
            return Err(FabricError::ControlFrame {
                rank: Some(rank),
                from: Some(src),
                what: format!(
                    "UD queue key {:#x}, this rank's is {:#x} (another job's frame?)",
                    f.value, ud.qkey
                ),
            });
        }
        ud.active = true;
        if ud.peers.get(&src).is_none_or(|p| p.ah.is_none()) {
            let av = attr::ud_address(&self.dev.local(), f.qp.lid, f.qp.gid);
            let ah = Ah::create(&self.dev.pd, &av).map_err(|e| ibv::at(e, rank, Some(src)))?;
            if !ud.peers.contains_key(&src) {
                self.bytes.datagram_bytes += VERBS_UD_PEER_BYTES;
            }
            ud.peers.insert(
                src,
                UdPeer {
                    ah: Some(ah),
                    qpn: f.qp.qpn,
                    asked: true,
                },
            );
        }
        if f.kind == Kind::UdReq {
            let reply = Frame {
                kind: Kind::UdAddr,
                code: 0,
                src: rank as u32,
                value: ud.qkey as u64,
                qp: ud.info(&self.dev),
            };
            self.mesh.send(src, &reply)?;
        }
        Ok(())
    }

    /// Polls the UD QP's CQs (once some peer knows its address): send slots come back,
    /// arrivals go to `on_event` as [`Event::Datagram`] and their slots are reposted.
    /// Returns the arrivals handled.
    pub(super) fn poll_ud(
        &mut self,
        on_event: &mut dyn FnMut(Event<'_>) -> Flow,
    ) -> std::result::Result<usize, Halt> {
        let rank = self.rank;
        let world = self.world;
        let Some(ud) = self.ud.as_mut().filter(|u| u.active) else {
            return Ok(0);
        };
        if ud.free.len() < ud.send.count() {
            ud.reap_sends(rank)?;
        }
        let mut wcs = [const { std::mem::MaybeUninit::<ibv::sys::ibv_wc>::uninit() }; 16];
        let done = ud.recv_cq.poll(&mut wcs).map_err(|e| ibv::at(e, rank, None))?;
        let n = done.len();
        for wc in done {
            let slot = wc.wr_id as usize;
            if wc.status != ibv::sys::ibv_wc_status::IBV_WC_SUCCESS {
                if wc.status == ibv::sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
                    continue;
                }
                return Err(Halt::Fail(FabricError::WorkCompletion {
                    op: "UD receive",
                    status: wc.status,
                    status_text: ibv::status_text(wc.status).into(),
                    rank: Some(rank),
                    peer: None,
                }));
            }
            let grh = if wc.wc_flags & ibv::sys::ibv_wc_flags::IBV_WC_GRH.0 != 0 {
                GRH
            } else {
                0
            };
            let len = (wc.byte_len as usize).saturating_sub(grh);
            if slot >= ud.recv.count() || len < RANK || GRH + len > ud.recv.slot() {
                return Err(Halt::Fail(FabricError::VerbsReceive {
                    rank,
                    qp: wc.qp_num,
                    what: format!(
                        "datagram of {} bytes (GRH {grh}) in UD receive slot {slot} (of {}, {} bytes each)",
                        wc.byte_len,
                        ud.recv.count(),
                        ud.recv.slot()
                    ),
                }));
            }
            let b = ud.recv.get(slot, GRH + len);
            let src = u32::from_le_bytes(b[GRH..GRH + RANK].try_into().expect("4 bytes")) as usize;
            if src >= world {
                return Err(Halt::Fail(FabricError::VerbsReceive {
                    rank,
                    qp: wc.qp_num,
                    what: format!("datagram from rank {src}, outside the world of {world}"),
                }));
            }
            go(on_event(Event::Datagram {
                src,
                bytes: &b[GRH + RANK..],
            }))?;
            ud.qp
                .post_recv(&ud.recv, slot * ud.recv.slot(), ud.recv.slot(), slot as u64)
                .map_err(|e| ibv::at(e, rank, None))?;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_keys_are_31_bits_and_differ_per_job() {
        let (a, b) = (qkey_of("10.77.0.1-40001"), qkey_of("10.77.0.1-40002"));
        assert_ne!(a, b);
        for k in [a, b, qkey_of("")] {
            assert!(k != 0 && k & 0x8000_0000 == 0, "{k:#x}");
        }
        assert_eq!(a, qkey_of("10.77.0.1-40001"));
    }
}
