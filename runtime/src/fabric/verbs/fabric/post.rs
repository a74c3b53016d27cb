//! The verbs fabric's data path: posting a packet (`send_packet`: at once when the queue
//! pair is connected and has room, otherwise queued and flushed later), credit grants that
//! ride on packets as immediate data or leave on the control channel (`flush_grant`), the
//! deferred SRQ reposts, and polling (`poll_all`: control frames, then the CQ in batches).
//! In a build without the `trace` feature nothing here calls the trace counters.

use super::kept::{Kept, Taken};
use super::{Link, Queued, VerbsFabric, GRANT_HOLD_POLLS, HEADER_BYTES, POLL_BATCH, POLL_MAX, RECV_BIT};
use crate::core::config::RecvSharing;
use crate::fabric::error::{FabricError, Result};
use crate::fabric::verbs::control::{Frame, Kind, QpInfo};
use crate::fabric::verbs::ibv::{self, Qp, Rts, SendWr, Sge, Slots};
use crate::fabric::wire;
use crate::fabric::{go, Control, ControlWord, Event, Flow, Halt, PacketHeader, PeerKey};

#[cfg(feature = "trace")]
use crate::fabric::verbs::counters;

/// The fields of a work completion this fabric reads, owned: a completion whose arrival
/// was refused is kept (with those after it in its batch) until the next poll.
pub(super) struct Wc {
    wr_id: u64,
    status: ibv::sys::ibv_wc_status::Type,
    qp_num: u32,
    byte_len: u32,
    imm: Option<u32>,
}

impl Wc {
    fn of(wc: &ibv::sys::ibv_wc) -> Wc {
        Wc {
            wr_id: wc.wr_id,
            status: wc.status,
            qp_num: wc.qp_num,
            byte_len: wc.byte_len,
            imm: ibv::wc_imm(wc),
        }
    }
}

/// Posts `q` on `qp` with its header from `headers` (inline when header and payload fit
/// `max_inline`; `srqn`: the XRC destination SRQ). The caller counts it as outstanding.
#[inline]
fn post_wr(qp: &Qp<Rts>, headers: &Slots, max_inline: u32, srqn: Option<u32>, q: &Queued) -> Result<()> {
    let wr = SendWr {
        wr_id: q.wr_id,
        sges: [
            Sge {
                addr: headers.addr(q.wr_id as usize),
                len: HEADER_BYTES as u32,
                lkey: headers.lkey(),
            },
            Sge {
                addr: q.payload,
                len: q.len,
                lkey: q.lkey,
            },
        ],
        num_sge: if q.len == 0 { 1 } else { 2 },
        imm: (q.grant > 0).then_some(q.grant),
        signaled: true,
        inline: HEADER_BYTES as u32 + q.len <= max_inline,
        remote_srqn: srqn,
    };
    #[cfg(feature = "trace")]
    {
        counters::traced_post();
        counters::stamp(8);
    }
    // The header slot and the payload lie in registered memory that stays registered and
    // untouched until the completion of `wr_id` is reported (the engine owns the pool
    // buffer until then).
    let r = qp.post_send(&wr);
    #[cfg(feature = "trace")]
    {
        counters::stamp(9);
        counters::bump(&counters::POSTS, 1);
    }
    Ok(r?)
}

impl VerbsFabric {
    /// The engine's `post_send`: packet `header` + `payload` (in the registered pool) toward
    /// `dest` on endpoint `key`, completing as `wr_id`.
    pub(super) fn send_packet(
        &mut self,
        dest: usize,
        key: PeerKey,
        header: &PacketHeader,
        payload: &[u8],
        wr_id: u64,
    ) -> Result<()> {
        #[cfg(feature = "trace")]
        {
            counters::traced_send_entry();
            counters::stamp(7);
        }
        if self.sharing != RecvSharing::Xrc && dest != key.index() {
            return Err(FabricError::VerbsSend {
                rank: self.rank,
                dest,
                what: format!(
                    "endpoint {} is not the destination's (verbs endpoints are per rank)",
                    key.index()
                ),
            });
        }
        let key = self.slot(key);
        let headers = self.headers.as_mut().ok_or_else(|| FabricError::VerbsSend {
            rank: self.rank,
            dest,
            what: "sent before the pool was registered".into(),
        })?;
        let slot = wr_id as usize;
        if slot >= headers.count() {
            return Err(FabricError::VerbsSend {
                rank: self.rank,
                dest,
                what: format!("send id {wr_id} beyond the {} header slots", headers.count()),
            });
        }
        headers.bytes_mut()[slot * HEADER_BYTES..(slot + 1) * HEADER_BYTES]
            .copy_from_slice(&wire::encode_header(header, wire::HeaderExtra::DATA));
        let p = payload.as_ptr() as usize;
        let lkey = if payload.is_empty() {
            0
        } else {
            self.pool_mrs
                .iter()
                .find(|m| m.contains(p, payload.len()))
                .map(|m| m.lkey())
                .ok_or_else(|| FabricError::VerbsSend {
                    rank: self.rank,
                    dest,
                    what: "payload outside the registered pool (user buffers are never registered)".into(),
                })?
        };
        let peer = self.peers.get_mut(&key).ok_or_else(|| FabricError::VerbsSend {
            rank: self.rank,
            dest,
            what: format!("sent on unknown endpoint {key}"),
        })?;
        if peer.broken {
            // Completed (failed) at the next poll, which returns the buffer; the error
            // comes at the poll after it.
            self.failed_sends.push(wr_id);
            let who = self.who(key);
            self.pending_err.get_or_insert(FabricError::QueuePairBroken {
                rank: self.rank,
                peer: who,
            });
            return Ok(());
        }
        let mut grant = std::mem::take(&mut peer.grant_stash);
        if grant > 0 {
            peer.wants_credit = false;
        }
        if key == dest {
            let q = Queued {
                wr_id,
                payload: p as u64,
                len: payload.len() as u32,
                lkey,
                grant,
                dest: dest as u32,
            };
            // Nothing queued before it, the peer ready and room in the send queue (the
            // common case): posted at once, without a trip through the queue or another
            // look-up of the peer.
            if peer.queued.is_empty() && peer.remote_ready {
                if let Some(pq) = peer.qp.as_mut().filter(|pq| pq.outstanding < self.sq_depth) {
                    if let Some(Link::Rts(qp)) = &pq.link {
                        let headers = self.headers.as_ref().expect("checked above");
                        match post_wr(qp, headers, self.max_inline, None, &q) {
                            Ok(()) => pq.outstanding += 1,
                            Err(e) => return Err(ibv::at(e, self.rank, Some(key))),
                        }
                        return self.repost_srq();
                    }
                }
            }
            peer.queued.push_back(q);
            self.flush(key)?;
            return self.repost_srq();
        }
        // XRC: the endpoint is the node's INI QP; grants are held per rank.
        if let Some(d) = self.peers.get_mut(&dest) {
            grant = std::mem::take(&mut d.grant_stash);
            if grant > 0 {
                d.wants_credit = false;
            }
        }
        let peer = self.peers.get_mut(&key).expect("endpoint");
        peer.queued.push_back(Queued {
            wr_id,
            payload: p as u64,
            len: payload.len() as u32,
            lkey,
            grant,
            dest: dest as u32,
        });
        self.flush(key)
    }

    /// Posts `q` toward `key` and counts it as outstanding.
    fn post(&mut self, key: usize, q: Queued) -> Result<()> {
        let peer = self.rank_at(key);
        let srqn = if self.sharing == RecvSharing::Xrc {
            Some(
                *self
                    .srqns
                    .get(&(q.dest as usize))
                    .ok_or_else(|| FabricError::VerbsSend {
                        rank: self.rank,
                        dest: q.dest as usize,
                        what: "XRC send before its SRQ number arrived".into(),
                    })?,
            )
        } else {
            None
        };
        let headers = self.headers.as_ref().ok_or_else(|| FabricError::VerbsSend {
            rank: self.rank,
            dest: q.dest as usize,
            what: "sent before the pool was registered".into(),
        })?;
        let pq = self
            .peers
            .get_mut(&key)
            .and_then(|p| p.qp.as_mut())
            .ok_or_else(|| FabricError::VerbsSend {
                rank: self.rank,
                dest: q.dest as usize,
                what: format!("sent on a closed endpoint {key}"),
            })?;
        let qp = pq.rts().ok_or_else(|| FabricError::VerbsSend {
            rank: self.rank,
            dest: q.dest as usize,
            what: format!("sent on endpoint {key} before its queue pair connected"),
        })?;
        post_wr(qp, headers, self.max_inline, srqn, &q).map_err(|e| ibv::at(e, self.rank, peer))?;
        pq.outstanding += 1;
        Ok(())
    }

    /// Posts queued sends toward `key` while the peer is ready and the send queue has room.
    pub(super) fn flush(&mut self, key: usize) -> Result<()> {
        loop {
            let Some(p) = self.peers.get_mut(&key) else {
                return Ok(());
            };
            let room =
                p.qp.as_ref()
                    .is_some_and(|q| q.connected() && q.outstanding < self.sq_depth);
            if !p.remote_ready || !room {
                return Ok(());
            }
            if self.sharing == RecvSharing::Xrc {
                let Some(front) = p.queued.front() else {
                    return Ok(());
                };
                let d = front.dest as usize;
                if !self.srqns.contains_key(&d) {
                    return self.ask_srqn(d);
                }
            }
            let p = self.peers.get_mut(&key).expect("peer");
            let Some(q) = p.queued.pop_front() else {
                return Ok(());
            };
            self.post(key, q)?;
        }
    }

    /// Reposts the shared receive queue's consumed slots.
    fn repost_srq(&mut self) -> Result<()> {
        if self.srq_reposts.is_empty() {
            return Ok(());
        }
        let Some(s) = self.srq.as_ref() else {
            self.srq_reposts.clear();
            return Ok(());
        };
        let len = s.slots.slot();
        for &slot in &self.srq_reposts {
            s.srq
                .post_recv(&s.slots, slot * len, len, RECV_BIT | slot as u64)
                .map_err(|e| ibv::at(e, self.rank, None))?;
        }
        self.srq_reposts.clear();
        Ok(())
    }

    /// Sends the credits stashed for `dest` on the control channel.
    pub(super) fn flush_grant(&mut self, dest: usize) -> Result<()> {
        // The credits granted count on reposted slots.
        self.repost_srq()?;
        let Some(p) = self.peers.get_mut(&dest) else {
            return Ok(());
        };
        let credits = std::mem::take(&mut p.grant_stash);
        p.wants_credit = false;
        if credits == 0 {
            return Ok(());
        }
        let ControlWord { code, value } = Control::Grant { credits }.encode();
        self.mesh.send(
            dest,
            &Frame {
                kind: Kind::Control,
                code,
                src: self.rank as u32,
                value,
                qp: QpInfo::default(),
            },
        )
    }

    /// The engine's `poll`: a pending error first, then the failed sends' buffers, the held
    /// grants that are due, the control channel (when due) and the CQ.
    pub(super) fn poll_all(
        &mut self,
        on_event: &mut dyn FnMut(Event<'_>) -> Flow,
    ) -> std::result::Result<usize, Halt> {
        if let Some(e) = self.pending_err.take() {
            return Err(Halt::Fail(e));
        }
        self.polls = self.polls.wrapping_add(1);
        #[cfg(feature = "trace")]
        counters::bump(&counters::POLLS, 1);
        self.repost_srq()?;
        for w in std::mem::take(&mut self.failed_sends) {
            go(on_event(Event::SendComplete(w)))?;
        }
        // Grants that found no packet to ride on for GRANT_HOLD_POLLS calls (or that their
        // rank asked for) go on the control channel.
        if !self.stashed.is_empty() {
            let mut i = 0;
            while i < self.stashed.len() {
                let k = self.stashed[i];
                let (stash, since, wants) = self
                    .peers
                    .get(&k)
                    .map_or((0, 0, false), |p| (p.grant_stash, p.grant_since, p.wants_credit));
                if stash == 0 {
                    self.stashed.swap_remove(i);
                } else if wants || self.polls.wrapping_sub(since) >= GRANT_HOLD_POLLS {
                    self.stashed.swap_remove(i);
                    self.flush_grant(k)?;
                } else {
                    i += 1;
                }
            }
        }
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        if self.mesh.due() {
            #[cfg(feature = "trace")]
            counters::bump(&counters::MESH_READS, 1);
            if let Err(e) = self.mesh.poll(&mut frames) {
                for r in self.mesh.take_dead() {
                    self.peer_died(r, on_event)?;
                }
                return Err(Halt::Fail(e));
            }
        }
        let mut n = frames.len();
        for f in frames.drain(..) {
            self.on_frame(f, on_event)?;
        }
        self.frames = frames;
        n += self.poll_cq(on_event)?;
        n += self.poll_ud(on_event)?;
        #[cfg(feature = "trace")]
        {
            counters::traced_poll_end();
            counters::stamp(3);
        }
        Ok(n)
    }

    fn poll_cq(&mut self, on_event: &mut dyn FnMut(Event<'_>) -> Flow) -> std::result::Result<usize, Halt> {
        let mut touched = std::mem::take(&mut self.touched);
        touched.clear();
        // Out of the fabric while its completions are taken (taking borrows the fabric),
        // and always put back: its reserved room is what lets a refusal keep without
        // allocating.
        let mut kept = std::mem::take(&mut self.kept_wcs);
        let r = self.take_cq(&mut kept, on_event, &mut touched);
        self.kept_wcs = kept;
        let r = r.and_then(|(n, refused)| {
            touched.sort_unstable();
            touched.dedup();
            for &p in &touched {
                self.flush(p)?;
            }
            refused.map_or(Ok(n), Err)
        });
        self.touched = touched;
        r
    }

    /// Takes the completions kept by the last poll, then polls the CQ in batches (up to
    /// [`POLL_MAX`] completions) until an arrival is refused: how many were taken, and the
    /// refusal, if any (`kept` then holds the refused completion and the rest of its batch).
    fn take_cq(
        &mut self,
        kept: &mut Kept<Wc>,
        on_event: &mut dyn FnMut(Event<'_>) -> Flow,
        touched: &mut Vec<usize>,
    ) -> std::result::Result<(usize, Option<Halt>), Halt> {
        let mut n = 0;
        // Left uninitialised: zeroing 32 entries (1.5 KiB) on every poll, idle ones included,
        // costs measurable time under TCG; ibv_poll_cq writes the entries it returns.
        let mut wcs = [const { std::mem::MaybeUninit::<ibv::sys::ibv_wc>::uninit() }; POLL_BATCH];
        // Completions kept when an arrival was refused go first, in order.
        let mut refused = None;
        if !kept.is_empty() {
            refused = kept.replay(|w| {
                n += 1;
                self.take_one(w, &mut *on_event, &mut *touched)
            })?;
            #[cfg(feature = "trace")]
            {
                if refused.is_some() {
                    counters::bump(&counters::REFUSED, 1);
                }
            }
        }
        while refused.is_none() && n < POLL_MAX {
            let done = self.cq.poll(&mut wcs).map_err(|e| ibv::at(e, self.rank, None))?;
            let got = done.len();
            #[cfg(feature = "trace")]
            {
                counters::bump(&counters::CQ_POLLS, 1);
                if got > 0 {
                    counters::bump(&counters::CQES, got as u64);
                    if counters::tracing() && done.iter().any(|w| w.wr_id & RECV_BIT != 0) {
                        counters::traced_recv();
                        counters::polled_receive();
                    }
                } else {
                    counters::polled_empty();
                }
            }
            // A refused arrival is kept with the rest of its batch (taken out of the CQ
            // already).
            refused = kept.take_batch(done, Wc::of, |w| {
                n += 1;
                self.take_one(w, &mut *on_event, &mut *touched)
            })?;
            #[cfg(feature = "trace")]
            {
                if refused.is_some() {
                    counters::bump(&counters::REFUSED, 1);
                    counters::bump(&counters::KEPT, kept.len() as u64);
                }
            }
            if got < POLL_BATCH {
                break;
            }
        }
        Ok((n, refused))
    }

    /// [`Self::take_wc`] as [`Kept`] takes a completion: a refused arrival
    /// (`Flow::Break`) is `Ok(Err(Halt::Stop))`, a failure `Err`.
    fn take_one(
        &mut self,
        w: &Wc,
        on_event: &mut dyn FnMut(Event<'_>) -> Flow,
        touched: &mut Vec<usize>,
    ) -> Taken<Halt> {
        self.take_wc(w, on_event, touched)
            .map(|f| if f.is_break() { Err(Halt::Stop) } else { Ok(()) })
    }

    /// Takes work completion `wc`: a receive's arrival (its slot reposted) or a send's
    /// completion. `Ok(Flow::Break)`: the callback refused the arrival (its message could
    /// not be allocated); nothing was done with it, its slot is still its own: the caller
    /// keeps it to take again.
    fn take_wc(
        &mut self,
        wc: &Wc,
        on_event: &mut dyn FnMut(Event<'_>) -> Flow,
        touched: &mut Vec<usize>,
    ) -> std::result::Result<Flow, Halt> {
        let ok = wc.status == ibv::sys::ibv_wc_status::IBV_WC_SUCCESS;
        // The peer is looked up only where needed (not for a good SRQ receive).
        let peer_of = |f: &Self| f.qpn_peer.get(&wc.qp_num).copied();
        if wc.wr_id & RECV_BIT != 0 {
            if !ok {
                let peer = peer_of(self);
                // Flushed receives of a QP being destroyed (per-peer): nothing to do.
                if wc.status != ibv::sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR && self.pending_err.is_none() {
                    self.pending_err = Some(self.completion_error("receive", wc.status, peer));
                }
                return Ok(Flow::Continue(()));
            }
            let slot = (wc.wr_id & !RECV_BIT) as usize;
            let (slots, own) = match &self.srq {
                Some(s) => (&s.slots, None),
                None => {
                    let q = peer_of(self)
                        .and_then(|p| self.peers.get(&p))
                        .and_then(|p| p.qp.as_ref())
                        .ok_or_else(|| FabricError::VerbsReceive {
                            rank: self.rank,
                            qp: wc.qp_num,
                            what: "no queue pair of this rank has that number".into(),
                        })?;
                    (q.rq.as_ref().expect("per-peer receive queue"), q.link.as_ref())
                }
            };
            let len = wc.byte_len as usize;
            if len < HEADER_BYTES || slot >= slots.count() {
                return Err(Halt::Fail(FabricError::VerbsReceive {
                    rank: self.rank,
                    qp: wc.qp_num,
                    what: format!(
                        "packet of {len} bytes in receive slot {slot} (of {}, header {HEADER_BYTES} bytes)",
                        slots.count()
                    ),
                }));
            }
            let bytes = slots.get(slot, len);
            // (Bytes 29..32 are zero on this fabric: ignored, see `wire`.)
            let h = wire::decode_header(bytes.first_chunk().expect("checked above")).header;
            if HEADER_BYTES + h.len as usize != len {
                return Err(Halt::Fail(FabricError::BadPacket {
                    rank: self.rank,
                    from: crate::fabric::error::Sender::Rank(h.src as usize),
                    bytes: len,
                    what: format!("announces {} payload bytes", h.len),
                }));
            }
            #[cfg(feature = "trace")]
            let t = counters::trace_start();
            if on_event(Event::Arrival {
                header: h,
                payload: &bytes[HEADER_BYTES..],
            })
            .is_break()
            {
                // Refused (its message could not be allocated): kept, its slot not
                // reposted, and taken first at the next poll, as `local` does.
                return Ok(Flow::Break(()));
            }
            #[cfg(feature = "trace")]
            {
                counters::traced_arrival(t);
                counters::stamp(1);
            }
            match own {
                Some(link) => link
                    .post_recv(slots, slot)
                    .map_err(|e| ibv::at(e, self.rank, peer_of(self)))?,
                // Reposted once the reply is posted (see `srq_reposts`).
                None => self.srq_reposts.push(slot),
            }
            #[cfg(feature = "trace")]
            counters::stamp(2);
            if let Some(credits) = wc.imm {
                go(on_event(Event::Control {
                    src: h.src as usize,
                    msg: Control::Grant { credits },
                }))?;
            }
        } else {
            let peer = peer_of(self);
            if let Some(q) = peer
                .and_then(|p| self.peers.get_mut(&p))
                .and_then(|p| p.qp.as_mut())
            {
                q.outstanding = q.outstanding.saturating_sub(1);
            }
            // The buffer goes back to the pool whatever the status.
            go(on_event(Event::SendComplete(wc.wr_id)))?;
            if !ok && self.pending_err.is_none() {
                self.pending_err = Some(self.completion_error("send", wc.status, peer));
            }
            if !ok {
                // The queue pair is in the error state: sends still queued behind it
                // would never complete, so their buffers go back to the pool now.
                if let Some(pe) = peer.and_then(|p| self.peers.get_mut(&p)) {
                    pe.broken = true;
                    for q in std::mem::take(&mut pe.queued) {
                        go(on_event(Event::SendComplete(q.wr_id)))?;
                    }
                }
            } else if let Some(p) = peer {
                touched.push(p);
            }
        }
        Ok(Flow::Continue(()))
    }

    /// The [`FabricError::WorkCompletion`] of a failed `op` toward internal key `peer`.
    fn completion_error(
        &self,
        op: &'static str,
        status: ibv::sys::ibv_wc_status::Type,
        peer: Option<usize>,
    ) -> FabricError {
        FabricError::WorkCompletion {
            op,
            status,
            status_text: ibv::status_text(status).into(),
            rank: Some(self.rank),
            peer: peer.map(|p| self.who(p)),
        }
    }
}
