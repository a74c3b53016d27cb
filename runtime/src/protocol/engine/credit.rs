//! The [`Engine`]'s credit messages: asking a destination for credits when its shared
//! receive queue gave none, and sending the grants and revokes the credit bank decided.

use crate::core::config::RecvSharing;
use crate::fabric::{Control, PeerKey};
use crate::protocol::connection::EndpointState;
use crate::protocol::credit::Grant;
use crate::protocol::error::Result;

use super::Engine;

impl Engine {
    pub(super) fn request_credits(&mut self) -> Result<bool> {
        if self.cfg.recv_sharing == RecvSharing::PerPeer {
            return Ok(false);
        }
        let mut work = false;
        for &dest in self.active.iter() {
            let open = !self.symmetric()
                || self.conns.get(PeerKey::Rank(dest)).map(|e| e.state) == Some(EndpointState::Open);
            let p = self.peers.get_mut(&dest).expect("active peer");
            if open && p.credits == 0 && !p.requested {
                p.requested = true;
                self.fabric.send_control(dest, Control::CreditRequest)?;
                work = true;
            }
        }
        Ok(work)
    }

    pub(super) fn flush_credits(&mut self) -> Result<bool> {
        if !self.bank.has_pending() {
            return Ok(false);
        }
        let mut grants = std::mem::take(&mut self.scratch_grants);
        self.bank.take_grants_into(&mut grants);
        let sent = self.send_grants(&grants);
        self.scratch_grants = grants;
        sent?;
        for peer in self.bank.take_revokes() {
            if !self.symmetric()
                || self.conns.get(PeerKey::Rank(peer)).map(|e| e.state) == Some(EndpointState::Open)
            {
                self.fabric.send_control(peer, Control::Revoke)?;
            }
        }
        Ok(true)
    }

    fn send_grants(&mut self, grants: &[Grant]) -> Result<()> {
        for &Grant { peer, credits } in grants {
            if !self.symmetric()
                || self.conns.get(PeerKey::Rank(peer)).map(|e| e.state) == Some(EndpointState::Open)
            {
                self.fabric.send_control(peer, Control::Grant { credits })?;
            }
        }
        Ok(())
    }
}
