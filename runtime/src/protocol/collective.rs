//! Collective sequence stamps: every message of a collective (barrier, all-gather, and
//! those to come) travels with one tag, [`COLLECTIVE_TAG`], and ends with a stamp of the
//! collective's kind, its number among its communicator's collectives and its step
//! (`wire::encode_stamp`). A sender's messages of one tag arrive in order on every
//! transport, so the next collective message from a peer is the one a rank expects unless
//! the ranks called different collectives (or the same in another order): then the stamp
//! differs and the rank gets [`ProtocolError::CollectiveMismatch`] instead of waiting for ever.
//!
//! A collective calls [`CollectiveSeq::begin`] once, [`Collective::seal`] on each message
//! it sends and [`Collective::open`] on each it receives.

use crate::fabric::wire::{decode_stamp, encode_stamp, Stamp, STAMP_BYTES};
use crate::protocol::error::{ProtocolError, Result};
use crate::protocol::matching::{Tag, RESERVED_TAG_BASE};

/// The one tag of every collective message.
pub const COLLECTIVE_TAG: Tag = RESERVED_TAG_BASE;

/// Which collective a message belongs to (its code is byte 12 of the stamp).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollectiveKind {
    /// `Communicator::barrier`.
    Barrier,
    /// `Communicator::all_gatherv`.
    AllGatherv,
    /// `Communicator::all_reduce`.
    AllReduce,
    /// `Communicator::bcast`.
    Bcast,
    /// `Communicator::gather`.
    Gather,
    /// `Communicator::all_to_allv`.
    AllToAllv,
    /// `Communicator::exchange_sparse`.
    ExchangeSparse,
}

/// The kinds, in code order (code `i + 1`).
const KINDS: [CollectiveKind; 7] = [
    CollectiveKind::Barrier,
    CollectiveKind::AllGatherv,
    CollectiveKind::AllReduce,
    CollectiveKind::Bcast,
    CollectiveKind::Gather,
    CollectiveKind::AllToAllv,
    CollectiveKind::ExchangeSparse,
];

impl CollectiveKind {
    /// The code in the stamp.
    pub fn code(self) -> u8 {
        match self {
            CollectiveKind::Barrier => 1,
            CollectiveKind::AllGatherv => 2,
            CollectiveKind::AllReduce => 3,
            CollectiveKind::Bcast => 4,
            CollectiveKind::Gather => 5,
            CollectiveKind::AllToAllv => 6,
            CollectiveKind::ExchangeSparse => 7,
        }
    }

    /// The kind of a stamp's code, if known.
    pub fn from_code(code: u8) -> Option<CollectiveKind> {
        KINDS.get(usize::from(code).checked_sub(1)?).copied()
    }

    /// The name of the call (as in the errors).
    pub fn name(self) -> &'static str {
        match self {
            CollectiveKind::Barrier => "barrier",
            CollectiveKind::AllGatherv => "all_gatherv",
            CollectiveKind::AllReduce => "all_reduce",
            CollectiveKind::Bcast => "bcast",
            CollectiveKind::Gather => "gather",
            CollectiveKind::AllToAllv => "all_to_allv",
            CollectiveKind::ExchangeSparse => "exchange_sparse",
        }
    }
}

/// A communicator's count of the collectives it started.
#[derive(Debug, Default)]
pub struct CollectiveSeq {
    last: u64,
}

impl CollectiveSeq {
    /// Starts the next collective, of `kind`.
    pub fn begin(&mut self, kind: CollectiveKind) -> Collective {
        self.last += 1;
        Collective { kind, seq: self.last }
    }

    /// The number the next collective will have (nothing started).
    pub fn next(&self) -> u64 {
        self.last + 1
    }
}

/// One collective under way: its kind and number (from 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Collective {
    /// What it is.
    pub kind: CollectiveKind,
    /// Its number among its communicator's collectives, from 1.
    pub seq: u64,
}

impl Collective {
    /// Appends the stamp of this collective's `step` to `msg`.
    pub fn seal(&self, step: u32, msg: &mut Vec<u8>) {
        msg.extend_from_slice(&encode_stamp(self.kind.code(), self.seq, step));
    }

    /// Checks that `msg`, received by `rank` from `peer`, is this collective's `step`, and
    /// takes its stamp off. Errors: [`ProtocolError::CollectiveMismatch`] saying what came instead.
    pub fn open(&self, rank: usize, peer: usize, step: u32, msg: &mut Vec<u8>) -> Result<()> {
        let at = msg.len().checked_sub(STAMP_BYTES);
        let stamp = at.and_then(|at| decode_stamp(msg[at..].try_into().expect("STAMP_BYTES")));
        let got = match stamp {
            Some(Stamp {
                kind: code,
                seq,
                step: s,
            }) if code == self.kind.code() && seq == self.seq && s == step => {
                msg.truncate(at.expect("a stamp was read"));
                return Ok(());
            }
            Some(Stamp {
                kind: code,
                seq,
                step: s,
            }) => match CollectiveKind::from_code(code) {
                Some(k) => format!("a message of {} (collective #{seq}, step {s})", k.name()),
                None => format!("a message of an unknown collective (code {code}, #{seq}, step {s})"),
            },
            None => format!("a message of {} bytes without a collective's stamp", msg.len()),
        };
        Err(self.mismatch(rank, peer, step, got))
    }

    /// [`ProtocolError::CollectiveMismatch`]: `rank`, in this collective's `step`, got
    /// `got` (said in words) from `peer`.
    pub fn mismatch(&self, rank: usize, peer: usize, step: u32, got: impl Into<Box<str>>) -> ProtocolError {
        ProtocolError::CollectiveMismatch {
            rank,
            peer,
            op: self.kind.name(),
            seq: self.seq,
            step,
            got: got.into(),
        }
    }
}

/// Where a message taken from any source belongs ([`Collective::sort`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// This collective's message of this step (its stamp taken off).
    Ours(u32),
    /// A message of a later collective on the communicator (its stamp kept): a peer that
    /// finished this one and started the next.
    Later,
}

impl Collective {
    /// True when `msg` ends with this collective's stamp (any step).
    pub fn stamped(&self, msg: &[u8]) -> bool {
        let at = msg.len().checked_sub(STAMP_BYTES);
        let stamp = at.and_then(|at| decode_stamp(msg[at..].try_into().expect("STAMP_BYTES")));
        matches!(stamp, Some(Stamp { kind, seq, .. }) if kind == self.kind.code() && seq == self.seq)
    }

    /// Sorts `msg`, taken by `rank` from any source (`peer`) while waiting for this
    /// collective's `step`: this collective's (its step; the stamp taken off) or a later
    /// one's (untouched). Errors: [`ProtocolError::CollectiveMismatch`] for another
    /// collective of this number or an earlier one, or a message without a stamp.
    pub fn sort(&self, rank: usize, peer: usize, step: u32, msg: &mut Vec<u8>) -> Result<Arrival> {
        let at = msg.len().checked_sub(STAMP_BYTES);
        let stamp = at.and_then(|at| decode_stamp(msg[at..].try_into().expect("STAMP_BYTES")));
        match stamp {
            Some(Stamp {
                kind: code,
                seq,
                step: s,
            }) if code == self.kind.code() && seq == self.seq => {
                msg.truncate(at.expect("a stamp was read"));
                Ok(Arrival::Ours(s))
            }
            Some(Stamp { kind: code, seq, .. })
                if seq > self.seq && CollectiveKind::from_code(code).is_some() =>
            {
                Ok(Arrival::Later)
            }
            _ => self.open(rank, peer, step, msg).map(|()| Arrival::Ours(step)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_message_opens_as_its_collective_and_step_only() {
        let mut seq = CollectiveSeq::default();
        let b = seq.begin(CollectiveKind::Barrier);
        let a = seq.begin(CollectiveKind::AllGatherv);
        assert_eq!((b.seq, a.seq), (1, 2));
        let mut msg = b"spikes".to_vec();
        a.seal(3, &mut msg);
        assert_eq!(msg.len(), 6 + STAMP_BYTES);
        let mut taken = msg.clone();
        a.open(0, 1, 3, &mut taken).unwrap();
        assert_eq!(taken, b"spikes");

        let err =
            |c: Collective, step: u32, m: &[u8]| c.open(4, 5, step, &mut m.to_vec()).unwrap_err().to_string();
        assert_eq!(
            err(b, 3, &msg),
            "rank 4: barrier (collective #1, step 3) got a message of all_gatherv (collective #2, step 3) \
             from rank 5: the ranks called different collectives"
        );
        let other_step = err(a, 2, &msg);
        assert!(
            other_step.contains(
                "all_gatherv (collective #2, step 2) got a message of all_gatherv (collective #2, step 3)"
            ),
            "{other_step}"
        );
        let later = Collective {
            kind: CollectiveKind::AllGatherv,
            seq: 3,
        };
        assert!(err(later, 3, &msg)
            .contains("(collective #3, step 3) got a message of all_gatherv (collective #2"));
        assert!(err(a, 3, b"short").contains("a message of 5 bytes without a collective's stamp"));
        let mut unknown = Vec::new();
        unknown.extend_from_slice(&encode_stamp(9, 2, 3));
        assert!(err(a, 3, &unknown).contains("an unknown collective (code 9, #2, step 3)"));
    }

    #[test]
    fn a_message_from_any_source_sorts_as_ours_later_or_a_mismatch() {
        let mut seq = CollectiveSeq::default();
        let x = seq.begin(CollectiveKind::ExchangeSparse);
        assert_eq!(seq.next(), 2);
        let next = seq.begin(CollectiveKind::Barrier);
        let sealed = |c: Collective, step: u32| {
            let mut m = b"ab".to_vec();
            c.seal(step, &mut m);
            m
        };
        let mut m = sealed(x, 4);
        assert!(x.stamped(&m) && !next.stamped(&m));
        assert_eq!(x.sort(0, 1, 2, &mut m).unwrap(), Arrival::Ours(4));
        assert_eq!(m, b"ab");
        let mut later = sealed(next, 0);
        assert_eq!(x.sort(0, 1, 2, &mut later).unwrap(), Arrival::Later);
        assert_eq!(later.len(), 2 + STAMP_BYTES, "a later message keeps its stamp");
        let other = Collective {
            kind: CollectiveKind::Gather,
            seq: 1,
        };
        let e = x.sort(0, 1, 2, &mut sealed(other, 0)).unwrap_err().to_string();
        assert!(
            e.contains(
                "exchange_sparse (collective #1, step 2) got a message of gather (collective #1, step 0)"
            ),
            "{e}"
        );
        assert!(
            next.sort(0, 1, 0, &mut sealed(x, 0)).is_err(),
            "an earlier collective's message"
        );
        assert!(x.sort(0, 1, 2, &mut b"short".to_vec()).is_err());
    }
}
