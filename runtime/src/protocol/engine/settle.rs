//! What one fabric poll brought to the [`Engine`]: the events are collected in an [`Inbox`]
//! while the fabric is borrowed (data goes to tag matching at once), then settled: send
//! completions free pool buffers or finish direct sends, arrivals are counted against
//! credits and endpoints, control messages (handshakes, close, credits) are answered.

use crate::core::pool::BufId;
use crate::fabric::error::FabricError;
use crate::fabric::{Control, Event, Flow, PeerKey};
use crate::protocol::connection::{DeferredConnect, EndpointState};
use crate::protocol::error::{ProtocolError, Result};
use crate::protocol::matching::Matcher;
use crate::protocol::request::RequestId;

use super::{DatagramRx, Engine, InFlight, DIRECT_WR};

/// Events of one fabric poll, collected while the fabric is borrowed and handled after.
#[derive(Default)]
pub(super) struct Inbox {
    done: Vec<u64>,
    arrivals: Vec<(usize, bool)>,
    ctrl: Vec<(usize, Control)>,
    whole: Vec<usize>,
    /// The error an event met, which stopped the poll ([`Flow::Break`]): the engine's own,
    /// kept here rather than carried through the fabric; taken by the poll's caller.
    pub(super) failed: Option<ProtocolError>,
}

impl Inbox {
    /// The control messages collected and not settled yet.
    pub(super) fn ctrl(&self) -> &[(usize, Control)] {
        &self.ctrl
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.done.is_empty() && self.arrivals.is_empty() && self.ctrl.is_empty() && self.whole.is_empty()
    }

    /// Takes one fabric event (the fabric's poll callback): data goes to the matcher at
    /// once (it must see packets in arrival order), the rest is kept for `Engine::settle`.
    /// An error stops the poll; it is kept in [`Inbox::failed`].
    #[inline]
    pub(super) fn take(&mut self, matcher: &mut Matcher, rx: &mut DatagramRx<'_>, ev: Event<'_>) -> Flow {
        match self.take_event(matcher, rx, ev) {
            Ok(()) => Flow::Continue(()),
            Err(e) => {
                self.failed = Some(e);
                Flow::Break(())
            }
        }
    }

    #[inline]
    fn take_event(&mut self, matcher: &mut Matcher, rx: &mut DatagramRx<'_>, ev: Event<'_>) -> Result<()> {
        match ev {
            Event::Datagram { src, bytes } => rx.take(matcher, src, bytes)?,
            Event::SendComplete(w) => self.done.push(w),
            Event::Arrival { header: h, payload } => {
                matcher.on_chunk_into(&h, payload, rx.into.as_mut())?;
                self.arrivals.push((h.src as usize, h.more));
            }
            Event::Control { src, msg: c } => self.ctrl.push((src, c)),
            Event::Whole { header: h, data } => {
                matcher.on_whole(&h, data)?;
                self.whole.push(h.src as usize);
            }
            Event::Remote { header: h, read } => {
                matcher.on_remote(&h, read, rx.into.as_mut())?;
                self.whole.push(h.src as usize);
            }
        }
        Ok(())
    }
}

impl Engine {
    /// Handles what a poll collected: completions free pool buffers (or finish direct
    /// sends), arrivals are counted against credits and endpoints, controls are answered.
    pub(super) fn settle(&mut self, inbox: &mut Inbox) -> Result<()> {
        for w in inbox.done.drain(..) {
            if w & DIRECT_WR != 0 {
                let s = self.sends.get_mut(&RequestId::new(w & !DIRECT_WR)).ok_or(
                    ProtocolError::UnknownCompletion {
                        rank: self.rank,
                        wr: w,
                        direct: true,
                    },
                )?;
                s.outstanding -= 1;
                self.direct_inflight -= 1;
                continue;
            }
            let InFlight { req, key } =
                self.wr_info[w as usize]
                    .take()
                    .ok_or(ProtocolError::UnknownCompletion {
                        rank: self.rank,
                        wr: w,
                        direct: false,
                    })?;
            self.pool.release(w as BufId);
            if let Some(s) = self.sends.get_mut(&req) {
                s.outstanding -= 1;
            }
            if let Some(ep) = self.conns.get_mut(key) {
                ep.inflight -= 1;
            }
        }
        for (src, more) in inbox.arrivals.drain(..) {
            self.bank.consumed(src, more);
            if !self.symmetric() {
                self.conns.note_peer(src);
            } else {
                // The endpoint exists (checked here), and opening it noted the peer.
                let ep = self
                    .conns
                    .get_touched(PeerKey::Rank(src))
                    .ok_or(FabricError::Endpoint {
                        rank: self.rank,
                        key: src,
                        what: "received data but is not open",
                    })?;
                ep.received += 1;
            }
        }
        // Direct messages use no endpoint, receive buffer or credit.
        for src in inbox.whole.drain(..) {
            self.conns.note_peer(src);
        }
        for (src, c) in inbox.ctrl.drain(..) {
            self.on_control(src, c)?;
        }
        Ok(())
    }

    fn on_control(&mut self, src: usize, c: Control) -> Result<()> {
        // Connect, close and credit control go between ranks with endpoints of their own
        // (`per-peer`, `shared`); in `xrc` mode only credit control comes.
        let key = PeerKey::Rank(src);
        match c {
            Control::ConnectReq { grant } => match self.conns.get(key).map(|e| e.state) {
                None if self.conns.has_room() => self.accept(src, grant)?,
                // At the cap with the datagram path: no endpoint, the peer uses datagrams.
                None if self.dg.is_some() => self.refuse(src)?,
                // Above the cap only when every slot is a connect still waiting for its
                // answer: deferring then can deadlock a cycle of full ranks.
                None if self.conns.all_connecting() => self.accept(src, grant)?,
                None | Some(EndpointState::Closing { .. }) => self
                    .conns
                    .deferred
                    .push_back(DeferredConnect { peer: src, grant }),
                Some(EndpointState::Connecting) => {
                    // Crossing connect requests: each side's request is the other's answer.
                    self.conns.get_mut(key).expect("endpoint").state = EndpointState::Open;
                    self.peers.entry(src).or_default().credits += grant;
                }
                Some(EndpointState::Open) => {
                    return Err(ProtocolError::Fabric(FabricError::Endpoint {
                        rank: self.rank,
                        key: src,
                        what: "got a connect request from its peer while open",
                    }))
                }
            },
            Control::ConnectAck { grant } => {
                let ep = self.conns.get_mut(key).ok_or(FabricError::Endpoint {
                    rank: self.rank,
                    key: src,
                    what: "got a connect ack from its peer without a request",
                })?;
                if ep.state == EndpointState::Connecting {
                    ep.state = EndpointState::Open;
                    self.peers.entry(src).or_default().credits += grant;
                }
            }
            Control::Close { sent } => {
                let ep = self.conns.get_mut(key).ok_or(FabricError::Endpoint {
                    rank: self.rank,
                    key: src,
                    what: "got a close from its peer but does not exist",
                })?;
                match ep.state {
                    EndpointState::Open => {
                        let mine = ep.sent;
                        self.conns.set_closing(key, Some(sent));
                        self.fabric.send_control(src, Control::Close { sent: mine })?;
                    }
                    EndpointState::Closing { peer_sent: None } => self.conns.set_closing(key, Some(sent)),
                    s => {
                        return Err(ProtocolError::Fabric(FabricError::Endpoint {
                            rank: self.rank,
                            key: src,
                            what: if s == EndpointState::Connecting {
                                "got a close from its peer while connecting"
                            } else {
                                "got a second close from its peer"
                            },
                        }))
                    }
                }
            }
            Control::Grant { credits } => {
                let p = self.peers.entry(src).or_default();
                p.credits += credits;
                p.requested = false;
            }
            Control::CreditRequest => {
                if !self.symmetric() || self.conns.get(key).map(|e| e.state) == Some(EndpointState::Open) {
                    self.bank.request(src);
                }
            }
            Control::Revoke => {
                let open =
                    !self.symmetric() || self.conns.get(key).map(|e| e.state) == Some(EndpointState::Open);
                let p = self.peers.entry(src).or_default();
                if open && p.queue.is_empty() && p.credits > 0 {
                    let n = std::mem::take(&mut p.credits);
                    self.fabric.send_control(src, Control::Return { credits: n })?;
                }
            }
            Control::Return { credits } => self.bank.returned(src, credits),
            Control::Refuse => self.on_refuse(src)?,
            Control::Abort { code } => {
                // The first abort known is the one every call names.
                self.aborted_by.get_or_insert(super::Abort { rank: src, code });
            }
        }
        Ok(())
    }
}
