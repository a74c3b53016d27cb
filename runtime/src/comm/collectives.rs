//! The collectives of [`Communicator`]: `barrier` (dissemination) and `all_gatherv`
//! (ring). Each message carries its collective's stamp (`protocol::collective`), so
//! ranks in different collectives get [`ProtocolError::CollectiveMismatch`](crate::error::ProtocolError::CollectiveMismatch) instead of a hang,
//! and a rank that ended before taking part is [`CommError::PeerGone`](crate::error::CommError::PeerGone) naming the call.
//!
//! [`ProtocolError::CollectiveMismatch`]: crate::error::ProtocolError::CollectiveMismatch
//! [`CommError::PeerGone`]: crate::error::CommError::PeerGone

use super::{Communicator, Request};
use crate::error::Result;
use crate::fabric::wire::STAMP_BYTES;
use crate::protocol::collective::{CollectiveKind, COLLECTIVE_TAG};
use crate::protocol::matching::{Source, TagMatch};

impl Communicator {
    /// Sends collective message `msg` to `dest`.
    fn coll_send(&mut self, dest: usize, msg: &[u8]) -> Result<Request> {
        Ok(Request {
            id: self.isend_retry(dest, COLLECTIVE_TAG, msg)?,
            recv: false,
            peer: Source::Rank(dest),
        })
    }

    /// Posts the receive of the next collective message from `src`.
    fn coll_recv(&mut self, src: usize) -> Result<Request> {
        Ok(Request {
            id: self.irecv_raw(Source::Rank(src), TagMatch::Tag(COLLECTIVE_TAG))?,
            recv: true,
            peer: Source::Rank(src),
        })
    }

    /// Blocks until every rank entered the barrier (dissemination algorithm,
    /// `ceil(log2 n)` rounds, talks to `2 * ceil(log2 n)` peers). Errors:
    /// [`ProtocolError::CollectiveMismatch`](crate::error::ProtocolError::CollectiveMismatch) when a peer is in
    /// another collective, [`CommError::PeerGone`](crate::error::CommError::PeerGone) when a peer ended
    /// without entering it, the transport's.
    pub fn barrier(&mut self) -> Result<()> {
        let c = self.collectives.begin(CollectiveKind::Barrier);
        let n = self.world_size();
        let r = self.rank();
        let mut k = 0u32;
        while (1usize << k) < n {
            let d = 1usize << k;
            let to = (r + d) % n;
            let from = (r + n - d) % n;
            let mut msg = Vec::with_capacity(STAMP_BYTES);
            c.seal(k, &mut msg);
            let s = self.coll_send(to, &msg)?;
            let rr = self.coll_recv(from)?;
            let mut got = self.wait_as(rr, "barrier")?.into_message().expect("receive").data;
            c.open(r, from, k, &mut got)?;
            self.wait_as(s, "barrier")?;
            k += 1;
        }
        Ok(())
    }

    /// Gathers every rank's `data` (any length) on every rank, ordered by rank (ring
    /// algorithm: `n - 1` steps, talks to 2 peers). Errors as [`Communicator::barrier`].
    pub fn all_gatherv(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let c = self.collectives.begin(CollectiveKind::AllGatherv);
        let n = self.world_size();
        let r = self.rank();
        let mut blocks: Vec<Vec<u8>> = vec![Vec::new(); n];
        blocks[r] = crate::core::memory::try_copy(data, || {
            format!("this rank's {} bytes of an all-gather", data.len())
        })?;
        let right = (r + 1) % n;
        let left = (r + n - 1) % n;
        for s in 0..n.saturating_sub(1) {
            let step = s as u32;
            let send_idx = (r + n - s) % n;
            let recv_idx = (r + 2 * n - s - 1) % n;
            let rr = self.coll_recv(left)?;
            let mut msg = crate::core::memory::try_buffer(blocks[send_idx].len() + STAMP_BYTES, || {
                format!("an all-gather part of {} bytes", blocks[send_idx].len())
            })?;
            msg.extend_from_slice(&blocks[send_idx]);
            c.seal(step, &mut msg);
            let sr = self.coll_send(right, &msg)?;
            let mut got = self
                .wait_as(rr, "all_gatherv")?
                .into_message()
                .expect("receive")
                .data;
            c.open(r, left, step, &mut got)?;
            blocks[recv_idx] = got;
            self.wait_as(sr, "all_gatherv")?;
        }
        Ok(blocks)
    }
}
