//! The engine's `exchange_sparse`: NBX, the non-blocking consensus of Hoefler, Siebert and
//! Lumsdaine ("Scalable communication protocols for dynamic sparse data exchange", PPoPP
//! 2010). Each rank sends its data to its destinations (step [`DATA`]); the receiver
//! acknowledges each delivery with an empty message back (step [`ACK`]: the engine has no
//! synchronous send). Once all of a rank's sends are acknowledged it enters a
//! non-blocking dissemination barrier (round `k`: step `BARRIER + k` to rank `r + 2^k`,
//! from rank `r - 2^k`; `ceil(log2 n)` rounds) and keeps receiving data (and
//! acknowledging it) until the barrier completes: then every rank has entered it, so
//! every send anywhere was acknowledged, i.e. received. Partners per rank: its
//! destinations, its sources, and the barrier's `2 * ceil(log2 n)`.
//!
//! Its messages are taken from any source (the sources are not known in advance): one of
//! a later collective (a peer that finished this exchange and started the next) is kept
//! in the communicator's `early` list for that collective; one of another collective of
//! this number is [`ProtocolError::CollectiveMismatch`](crate::comm::error::ProtocolError::CollectiveMismatch). Its state is [`Nbx`], kept in
//! the unfinished collective after a retryable error.

use super::{Received, Unfinished};
use crate::comm::error::Result;
use crate::comm::gone::EndCheck;
use crate::comm::{Communicator, Request};
use crate::core::backoff::Backoff;
use crate::core::memory::try_buffer;
use crate::fabric::wire::STAMP_BYTES;
use crate::protocol::collective::{Arrival, CollectiveKind, COLLECTIVE_TAG};
use crate::protocol::matching::{Source, TagMatch};

/// The step of a data message.
const DATA: u32 = 0;
/// The step of an acknowledgement.
const ACK: u32 = 1;
/// The step of the barrier's round 0 (round `k` is `BARRIER + k`).
const BARRIER: u32 = 2;

/// A sparse exchange under way.
#[derive(Debug, Default)]
pub(super) struct Nbx {
    /// How many of the caller's sends were posted (in the caller's order).
    posted: usize,
    /// Destinations posted whose acknowledgement has not come.
    unacked: Vec<usize>,
    /// Sources whose data came and that are not acknowledged yet.
    owed: Vec<usize>,
    /// The parts received, with their sources, by arrival.
    got: Vec<Received>,
    /// The barrier's rounds sent.
    said: u32,
    /// The barrier's rounds whose message came (bit `k`).
    heard: u64,
    /// Sends not waited for yet: (request, destination).
    sends: Vec<(Request, usize)>,
}

impl Communicator {
    /// The engine's `exchange_sparse` (see the module). After a retryable error the next
    /// `exchange_sparse` resumes it: the parts already sent, received and acknowledged
    /// are kept, and the sends not yet posted are read from the retry's `sends`, which
    /// must be the same. Errors: as `barrier`;
    /// [`ProtocolError::CollectiveMismatch`](crate::comm::error::ProtocolError::CollectiveMismatch)
    /// for a message that does not belong here (e.g. data from a rank twice).
    pub(super) fn engine_exchange_sparse(&mut self, sends: &[(usize, &[u8])]) -> Result<Vec<Received>> {
        let u = self.coll_start(CollectiveKind::ExchangeSparse, |u| {
            u.nbx = Some(Box::default());
            Ok(())
        })?;
        let mut u = self.coll_run(u, |c, u| c.nbx_run(u, sends))?;
        let mut got = std::mem::take(&mut u.nbx.as_mut().expect("an exchange's state").got);
        got.sort_unstable_by_key(|r| r.source);
        Ok(got)
    }

    /// Runs the exchange `u` to its end.
    fn nbx_run(&mut self, u: &mut Unfinished, sends: &[(usize, &[u8])]) -> Result<()> {
        let n = self.world_size();
        let r = self.rank();
        let rounds = n.next_power_of_two().trailing_zeros();
        let mut off = Backoff::new();
        let mut check = EndCheck::default();
        loop {
            let c = u.c;
            let x = u.nbx.as_mut().expect("an exchange's state");
            while let Some(&(dest, data)) = sends.get(x.posted) {
                let mut m = try_buffer(data.len() + STAMP_BYTES, || {
                    format!("an exchange_sparse message of {} bytes", data.len())
                })?;
                m.extend_from_slice(data);
                c.seal(DATA, &mut m);
                x.sends.push((self.coll_send(dest, &m)?, dest));
                x.unacked.push(dest);
                x.posted += 1;
            }
            while let Some(&src) = x.owed.last() {
                let mut m = Vec::with_capacity(STAMP_BYTES);
                c.seal(ACK, &mut m);
                x.sends.push((self.coll_send(src, &m)?, src));
                x.owed.pop();
            }
            if x.unacked.is_empty() && x.posted == sends.len() {
                while x.said < rounds && (x.said == 0 || x.heard & (1 << (x.said - 1)) != 0) {
                    let to = (r + (1usize << x.said)) % n;
                    let mut m = Vec::with_capacity(STAMP_BYTES);
                    c.seal(BARRIER + x.said, &mut m);
                    x.sends.push((self.coll_send(to, &m)?, to));
                    x.said += 1;
                }
                if x.said == rounds && x.heard.count_ones() == rounds {
                    break;
                }
            }
            // The next message: one a sparse exchange took early, else one queued.
            if let Some(i) = self.early.iter().position(|(_, m)| c.stamped(m)) {
                let (src, m) = self.early.remove(i);
                self.nbx_take(u, src, m)?;
                continue;
            }
            let worked = self.backend.progress()?;
            let taken = self.backend.try_take(Source::Any, TagMatch::Tag(COLLECTIVE_TAG));
            let Some(msg) = taken else {
                if worked {
                    off.reset();
                }
                if self.nbx_idle(u, worked, &mut check)? {
                    self.backend.snooze(&mut off);
                }
                continue;
            };
            off.reset();
            self.nbx_take(u, msg.source, msg.data)?;
        }
        let x = u.nbx.as_mut().expect("an exchange's state");
        while let Some((s, to)) = x.sends.pop() {
            let id = s.id;
            if let Err(e) = self.wait_as(s, "exchange_sparse") {
                x.sends.push((
                    Request {
                        id,
                        recv: false,
                        peer: Source::Rank(to),
                        owner: self.owner,
                    },
                    to,
                ));
                return Err(e);
            }
        }
        Ok(())
    }

    /// Takes message `m` from `src`: this exchange's (data, acknowledgement, barrier
    /// round) into `u`'s state, a later collective's into `early`. Errors: a message
    /// that does not belong (see the module).
    fn nbx_take(&mut self, u: &mut Unfinished, src: usize, mut m: Vec<u8>) -> Result<()> {
        let n = self.world_size();
        let r = self.rank();
        let rounds = n.next_power_of_two().trailing_zeros();
        let x = u.nbx.as_mut().expect("an exchange's state");
        let waits = BARRIER + x.said.saturating_sub(1);
        let step = match u.c.sort(r, src, waits, &mut m)? {
            Arrival::Later => {
                self.early.push((src, m));
                return Ok(());
            }
            Arrival::Ours(step) => step,
        };
        let fits = match step {
            DATA if !x.got.iter().any(|r| r.source == src) => {
                x.got.push(Received { source: src, data: m });
                x.owed.push(src);
                true
            }
            ACK if m.is_empty() => match x.unacked.iter().position(|&d| d == src) {
                Some(i) => {
                    x.unacked.swap_remove(i);
                    true
                }
                None => false,
            },
            s if s >= BARRIER && s - BARRIER < rounds && m.is_empty() => {
                let k = s - BARRIER;
                let fresh = x.heard & (1 << k) == 0;
                x.heard |= 1 << k;
                fresh && src == (r + n - (1usize << k)) % n
            }
            _ => false,
        };
        if fits {
            return Ok(());
        }
        let what = match step {
            DATA => "data from a rank that sent data already".to_string(),
            ACK => "an acknowledgement of data this rank did not send it".to_string(),
            s => format!("a message of step {s} it does not expect from that rank"),
        };
        Err(u.c.mismatch(r, src, waits, what).into())
    }

    /// After a round of progress that `worked` (or not) and brought no message: whether
    /// to snooze (`Ok(true)`), or the [`CommError::PeerGone`](crate::comm::error::CommError::PeerGone)
    /// once a rank this exchange waits for (a destination's acknowledgement, the barrier
    /// round's sender) ended and nothing more is queued (see `gone`).
    fn nbx_idle(&mut self, u: &Unfinished, worked: bool, check: &mut EndCheck) -> Result<bool> {
        if !check.due(worked) {
            return Ok(!worked);
        }
        let n = self.world_size();
        let r = self.rank();
        let x = u.nbx.as_ref().expect("an exchange's state");
        let mut needed = x.unacked.clone();
        if x.unacked.is_empty() {
            let k = (!x.heard).trailing_zeros();
            if k < x.said {
                needed.push((r + n - (1usize << k)) % n);
            }
        }
        for p in needed {
            if let Some(g) = self.backend.gone(Source::Rank(p), true, "exchange_sparse") {
                let again = self.backend.progress()?;
                let queued = self
                    .backend
                    .peek(Source::Any, TagMatch::Tag(COLLECTIVE_TAG))
                    .is_some();
                if (g.sure || !again) && !queued {
                    return Err(g.error);
                }
                return Ok(false);
            }
        }
        Ok(!worked)
    }
}
