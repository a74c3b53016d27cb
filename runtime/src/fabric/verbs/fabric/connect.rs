//! The verbs fabric's queue pairs and their connection protocol: RC queue pairs created on
//! the first message to or from a peer (`open_rc`), brought INIT -> RTR -> RTS with the
//! peer's connection data from the control channel (`connect`, `on_frame`), closed with
//! their receive buffers (`close`); in `xrc` mode the INI queue pair per remote node and the
//! TGT queue pairs of this node's first rank (`open_xrc`, `accept_xrc`); a dead peer's
//! queue pair moved to ERR (`peer_died`).

use super::{Link, PeerQp, VerbsFabric, INLINE_BYTES, RECV_BIT};
use crate::core::config::RecvSharing;
use crate::fabric::error::{FabricError, Result};
use crate::fabric::verbs::control::{Frame, Kind, QpInfo};
use crate::fabric::verbs::ibv::attr::{self, Remote, Retry};
use crate::fabric::verbs::ibv::{self, Init, Qp, QpCaps, Slots};
use crate::fabric::verbs::ibv::{Failed, QpKind, Reset};
use crate::fabric::{go, Control, Event, Flow, Halt, PeerKey};

fn remote(i: QpInfo) -> Remote {
    Remote {
        qpn: i.qpn,
        psn: i.psn,
        lid: i.lid,
        gid: i.gid,
    }
}

impl VerbsFabric {
    /// Our connection data for the queue pair toward `key`.
    pub(super) fn local_info(&self, key: usize) -> Result<QpInfo> {
        let qp = self
            .peers
            .get(&key)
            .and_then(|p| p.qp.as_ref())
            .ok_or(FabricError::Endpoint {
                rank: self.rank,
                key,
                what: "has no queue pair (its connection data was asked for)",
            })?;
        Ok(QpInfo {
            qpn: qp.qpn(),
            psn: qp.psn,
            lid: self.dev.lid,
            gid: self.dev.gid,
        })
    }

    fn create_rc(&self, inline: u32) -> Result<Qp<Reset>> {
        let per_peer = self.sharing == RecvSharing::PerPeer;
        let caps = QpCaps {
            max_send_wr: self.sq_depth,
            max_recv_wr: if per_peer { self.cfg.recv_depth as u32 } else { 0 },
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline: inline,
        };
        let srq = self.srq.as_ref().map(|s| &s.srq);
        Ok(Qp::create_rc(
            &self.dev.ctx,
            &self.dev.pd,
            &self.cq,
            &self.cq,
            srq,
            caps,
        )?)
    }

    /// The RC queue pair toward rank `key`, in INIT with its receives posted (per-peer);
    /// connected at once if the peer's connection data came first.
    pub(super) fn open_rc(&mut self, key: usize) -> Result<()> {
        if key >= self.world || key == self.rank {
            return Err(FabricError::InvalidRank {
                rank: key,
                world_size: self.world,
            });
        }
        if self.peers.get(&key).is_some_and(|p| p.qp.is_some()) {
            return Err(FabricError::Endpoint {
                rank: self.rank,
                key,
                what: "opened twice",
            });
        }
        let per_peer = self.sharing == RecvSharing::PerPeer;
        let depth = self.cfg.recv_depth;
        if per_peer {
            let live = self.peers.values().filter(|p| p.qp.is_some()).count() + 1;
            if live * depth + self.header_slots > self.cq_entries as usize {
                return Err(FabricError::VerbsDevice {
                    device: Some(self.dev.caps.name.clone()),
                    reason: format!(
                        "rank {}: {live} queue pairs x {depth} receives + {} sends exceed the completion queue ({} entries, device max_cqe {}): lower BALLAST_RECV_DEPTH or set BALLAST_MAX_ENDPOINTS",
                        self.rank, self.header_slots, self.cq_entries, self.dev.caps.max_cqe
                    ),
                });
            }
            self.check_memlock((depth * self.slot_bytes()) as u64)?;
        }
        let qp = self
            .create_rc(INLINE_BYTES)
            .or_else(|_| self.create_rc(0))
            .map_err(|e| self.at(e, key))?;
        self.max_inline = qp.max_inline();
        let qp = qp
            .init(&attr::init(self.dev.caps.port))
            .map_err(|f| self.at(f.error, key))?;
        let b = self.cfg.buffer_size as u64;
        let rq = if per_peer {
            // Receives are posted now, in INIT, before the QP can reach RTR.
            let slots = Slots::new(
                &self.dev.pd,
                depth,
                self.slot_bytes(),
                "a per-peer receive queue's slots",
            )
            .map_err(|e| self.at(e, key))?;
            for i in 0..depth {
                qp.post_recv(&slots, i * slots.slot(), slots.slot(), RECV_BIT | i as u64)
                    .map_err(|e| self.at(e, key))?;
            }
            self.pinned += slots.len() as u64;
            self.bytes.endpoint_bytes +=
                self.model.rq_fixed_bytes + depth as u64 * (b + self.model.rq_wqe_bytes);
            self.bytes.recv_registered_bytes += depth as u64 * b;
            self.bytes.recv_locked_bytes += depth as u64 * b;
            Some(slots)
        } else {
            None
        };
        let psn = self.next_psn();
        self.install(key, qp, rq, psn)
    }

    /// Records the new INIT queue pair toward `key` and connects it if the peer's data waits.
    fn install(&mut self, key: usize, qp: Qp<Init>, rq: Option<Slots>, psn: u32) -> Result<()> {
        self.bytes.endpoint_bytes += self.model.endpoint_fixed_bytes;
        self.qpn_peer.insert(qp.qpn(), key);
        let p = self.peers.entry(key).or_default();
        p.qp = Some(PeerQp {
            link: Some(Link::Init(qp)),
            rq,
            psn,
            outstanding: 0,
        });
        p.remote_ready = false;
        p.broken = false;
        if let Some(remote) = p.pending.take() {
            self.connect(key, remote)?;
        }
        Ok(())
    }

    /// Closes the endpoint in slot `key`: destroys its queue pair, then frees its receive
    /// buffers.
    pub(super) fn close(&mut self, key: usize) -> Result<()> {
        let p = self.peers.get_mut(&key).ok_or(FabricError::Endpoint {
            rank: self.rank,
            key,
            what: "closed but unknown",
        })?;
        let q = p.qp.take().ok_or(FabricError::Endpoint {
            rank: self.rank,
            key,
            what: "closed but has no queue pair",
        })?;
        p.remote_ready = false;
        p.queued.clear();
        p.grant_stash = 0;
        self.qpn_peer.remove(&q.qpn());
        self.bytes.endpoint_bytes -= self.model.endpoint_fixed_bytes;
        if let Some(rq) = &q.rq {
            let b = self.cfg.buffer_size as u64;
            let d = rq.count() as u64;
            self.bytes.endpoint_bytes -= self.model.rq_fixed_bytes + d * (b + self.model.rq_wqe_bytes);
            self.bytes.recv_registered_bytes -= d * b;
            self.bytes.recv_locked_bytes -= d * b;
            self.pinned -= rq.len() as u64;
        }
        drop(q); // destroys the QP, then deregisters and frees its receive buffers
        Ok(())
    }

    /// INIT -> RTR -> RTS of the queue pair toward `key` with the peer's data (`responder`
    /// attributes unless it is an XRC send QP). On failure the queue pair is kept in the
    /// state it reached (and released as usual when the endpoint closes).
    fn bring_up(&mut self, key: usize, remote_info: QpInfo) -> Result<()> {
        let local = self.dev.local();
        let (rank, peer) = (self.rank, self.rank_at(key));
        let at = |e: ibv::IbvError| ibv::at(e, rank, peer);
        let q = self
            .peers
            .get_mut(&key)
            .and_then(|p| p.qp.as_mut())
            .ok_or(FabricError::Endpoint {
                rank: self.rank,
                key,
                what: "got connection data but is closed",
            })?;
        let qp = match q.link.take() {
            Some(Link::Init(qp)) => qp,
            other => {
                q.link = other;
                return Err(FabricError::Endpoint {
                    rank: self.rank,
                    key,
                    what: "got connection data for a queue pair not in INIT",
                });
            }
        };
        let rtr = attr::rtr(&local, &remote(remote_info), qp.kind());
        let qp = match qp.rtr(&rtr) {
            Ok(qp) => qp,
            Err(f) => {
                let Failed { qp, error } = *f;
                q.link = Some(Link::Init(qp));
                return Err(at(error));
            }
        };
        match qp.rts(&attr::rts(q.psn, Retry::FABRIC)) {
            Ok(qp) => {
                q.link = Some(Link::Rts(qp));
                Ok(())
            }
            Err(f) => {
                let Failed { qp, error } = *f;
                q.link = Some(Link::Rtr(qp));
                Err(at(error))
            }
        }
    }

    /// Connects the RC queue pair toward `key`, then tells the peer our side can receive.
    fn connect(&mut self, key: usize, remote: QpInfo) -> Result<()> {
        self.bring_up(key, remote)?;
        self.mesh.send(key, &Frame::simple(Kind::Ready, self.rank))
    }

    /// XRC: asks rank `dest` for its SRQ number (once).
    pub(super) fn ask_srqn(&mut self, dest: usize) -> Result<()> {
        if self.srqn_asked.insert(dest, ()).is_none() {
            self.mesh.send(dest, &Frame::simple(Kind::SrqReq, self.rank))?;
        }
        Ok(())
    }

    /// XRC: as the first rank of this node, creates a TGT QP in the node's domain for the
    /// INI QP described by `f` and answers with its connection data.
    fn accept_xrc(&mut self, f: &Frame) -> Result<()> {
        let src = f.src as usize;
        let xrcd = self.xrcd.as_ref().ok_or(FabricError::Endpoint {
            rank: self.rank,
            key: src,
            what: "got an XRC connect but this rank has no XRC domain",
        })?;
        let at = |e: ibv::IbvError| ibv::at(e, self.rank, Some(src));
        let tgt = Qp::create_xrc_recv(&self.dev.ctx, xrcd).map_err(at)?;
        let tgt = tgt
            .init(&attr::init(self.dev.caps.port))
            .map_err(|f| at(f.error))?;
        let tgt = tgt
            .rtr(&attr::rtr(&self.dev.local(), &remote(f.qp), QpKind::XrcRecv))
            .map_err(|f| at(f.error))?;
        let psn = self.next_psn();
        let qp = QpInfo {
            qpn: tgt.qpn(),
            psn,
            lid: self.dev.lid,
            gid: self.dev.gid,
        };
        self.tgts.push(tgt);
        self.mesh.send(
            src,
            &Frame {
                kind: Kind::XrcAccept,
                code: 0,
                src: self.rank as u32,
                value: f.value,
                qp,
            },
        )
    }

    /// One control-channel frame from rank `f.src`.
    pub(super) fn on_frame(
        &mut self,
        f: Frame,
        on_event: &mut dyn FnMut(Event<'_>) -> Flow,
    ) -> std::result::Result<(), Halt> {
        let src = f.src as usize;
        if src >= self.world {
            return Err(Halt::Fail(FabricError::ControlFrame {
                rank: Some(self.rank),
                from: Some(src),
                what: format!("rank outside the world of {}", self.world),
            }));
        }
        let done: Result<()> = match f.kind {
            Kind::Control => {
                let c = Control::decode(f.code, f.value)?;
                if matches!(c, Control::ConnectReq { .. } | Control::ConnectAck { .. }) {
                    let p = self.peers.entry(src).or_default();
                    if p.qp
                        .as_ref()
                        .is_some_and(|q| matches!(q.link, Some(Link::Init(_))))
                    {
                        self.connect(src, f.qp)?;
                    } else {
                        p.pending = Some(f.qp);
                    }
                }
                if c == Control::CreditRequest {
                    self.peers.entry(src).or_default().wants_credit = true;
                }
                return go(on_event(Event::Control { src, msg: c }));
            }
            Kind::Ready => {
                self.peers.entry(src).or_default().remote_ready = true;
                self.flush(src)
            }
            Kind::XrcConnect => self.accept_xrc(&f),
            Kind::XrcAccept => {
                let ik = self.slot(PeerKey::Node(src / self.cfg.ranks_per_node));
                if self.peers.get(&ik).and_then(|p| p.qp.as_ref()).is_none() {
                    return Ok(()); // closed meanwhile
                }
                self.bring_up(ik, f.qp)?;
                let p = self.peers.get_mut(&ik).expect("peer");
                p.remote_ready = true;
                self.flush(ik)
            }
            Kind::SrqReq => self.mesh.send(
                src,
                &Frame {
                    kind: Kind::SrqNum,
                    code: 0,
                    src: self.rank as u32,
                    value: self.my_srqn as u64,
                    qp: QpInfo::default(),
                },
            ),
            Kind::SrqNum => {
                let n = u32::try_from(f.value).map_err(|_| FabricError::ControlFrame {
                    rank: Some(self.rank),
                    from: Some(src),
                    what: format!("SRQ number {} does not fit 32 bits", f.value),
                })?;
                self.srqns.insert(src, n);
                self.flush(self.slot(PeerKey::Node(src / self.cfg.ranks_per_node)))
            }
            Kind::UdReq | Kind::UdAddr => self.on_ud_frame(src, &f),
            Kind::Hello | Kind::Done => Ok(()),
        };
        done.map_err(Halt::Fail)
    }

    /// XRC: the INI QP toward node `node` (the engine's endpoint), connected through the
    /// node's first rank, which creates the TGT QP.
    pub(super) fn open_xrc(&mut self, node: usize) -> Result<()> {
        let leader = node * self.cfg.ranks_per_node;
        if leader >= self.world {
            return Err(FabricError::InvalidRank {
                rank: leader,
                world_size: self.world,
            });
        }
        let ik = self.slot(PeerKey::Node(node));
        if self.peers.get(&ik).is_some_and(|p| p.qp.is_some()) {
            return Err(FabricError::Endpoint {
                rank: self.rank,
                key: node,
                what: "(the XRC endpoint to that node) opened twice",
            });
        }
        let caps = |inline| QpCaps {
            max_send_wr: self.sq_depth,
            max_recv_wr: 0,
            max_send_sge: 2,
            max_recv_sge: 0,
            max_inline: inline,
        };
        let (ctx, pd, cq) = (&self.dev.ctx, &self.dev.pd, &self.cq);
        let qp = Qp::create_xrc_send(ctx, pd, cq, caps(INLINE_BYTES))
            .or_else(|_| Qp::create_xrc_send(ctx, pd, cq, caps(0)))
            .map_err(|e| self.at(e, ik))?;
        self.max_inline = qp.max_inline();
        let qp = qp
            .init(&attr::init(self.dev.caps.port))
            .map_err(|f| self.at(f.error, ik))?;
        let psn = self.next_psn();
        let qpn = qp.qpn();
        self.bytes.endpoint_bytes += self.model.endpoint_fixed_bytes;
        self.qpn_peer.insert(qpn, ik);
        let p = self.peers.entry(ik).or_default();
        p.qp = Some(PeerQp {
            link: Some(Link::Init(qp)),
            rq: None,
            psn,
            outstanding: 0,
        });
        p.remote_ready = false;
        p.broken = false;
        let info = QpInfo {
            qpn,
            psn,
            lid: self.dev.lid,
            gid: self.dev.gid,
        };
        self.mesh.send(
            leader,
            &Frame {
                kind: Kind::XrcConnect,
                code: 0,
                src: self.rank as u32,
                value: node as u64,
                qp: info,
            },
        )
    }

    /// Rank `r` died (its control connection ended early): its queue pair goes to the error
    /// state, so that the device flushes every send still posted to it (their completions,
    /// with IBV_WC_WR_FLUSH_ERR, return the pool buffers at the next polls instead of waiting
    /// for the transport's retries, which soft-RoCE may never give up), and the sends queued
    /// behind it return their buffers now.
    pub(super) fn peer_died(
        &mut self,
        r: usize,
        on_event: &mut dyn FnMut(Event<'_>) -> Flow,
    ) -> std::result::Result<(), Halt> {
        let Some(p) = self.peers.get_mut(&r) else {
            return Ok(());
        };
        p.broken = true;
        for q in std::mem::take(&mut p.queued) {
            go(on_event(Event::SendComplete(q.wr_id)))?;
        }
        if let Some(link) = p.qp.as_ref().and_then(|q| q.link.as_ref()) {
            link.set_error().map_err(|e| ibv::at(e, self.rank, Some(r)))?;
        }
        Ok(())
    }
}
