//! A length that differs between ranks in `all_reduce` or `bcast`, passed on: every
//! message of those ends with a flag byte, [`DATA`] after the data or [`MISMATCH`] after
//! a [`LengthMismatch`] in its place. The rank that finds a length differing from its own
//! does not stop: it runs the rest of the algorithm sending the mismatch instead of data,
//! and so does every rank that receives it, so each rank that would have waited for data
//! from it ends with the same error instead of waiting for ever, on every transport
//! (MPI and verbs do not tell a rank that a peer returned).

use crate::comm::error::{CommError, Error};
use crate::protocol::collective::Collective;

/// The flag of a message with data.
pub(super) const DATA: u8 = 0;
/// The flag of a message with a [`LengthMismatch`].
pub(super) const MISMATCH: u8 = 1;

/// The most bytes a message adds to its data: a [`LengthMismatch`] and its flag.
pub(super) const ROOM: usize = LengthMismatch::BYTES + 1;

/// Rank `found_by` received `theirs` bytes from rank `peer` where it had `mine`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LengthMismatch {
    found_by: usize,
    peer: usize,
    mine: usize,
    theirs: usize,
}

impl LengthMismatch {
    /// Bytes on the wire (four u64, little-endian).
    const BYTES: usize = 32;

    /// Found by `found_by`: `theirs` bytes from `peer` where it had `mine`.
    pub(super) fn new(found_by: usize, peer: usize, mine: usize, theirs: usize) -> LengthMismatch {
        LengthMismatch {
            found_by,
            peer,
            mine,
            theirs,
        }
    }

    /// Appends it and its flag to `msg`.
    pub(super) fn put(&self, msg: &mut Vec<u8>) {
        for x in [self.found_by, self.peer, self.mine, self.theirs] {
            msg.extend_from_slice(&(x as u64).to_le_bytes());
        }
        msg.push(MISMATCH);
    }

    /// The error rank `rank`, which found it or learnt of it, returns: the rank reporting,
    /// the finder, the peer, both lengths in `unit`s (e.g. elements of 8 bytes).
    pub(super) fn error(&self, c: &Collective, rank: usize, unit: usize, unit_name: &str) -> Error {
        let say = |b: usize| match b % unit {
            0 => format!("{} {unit_name}", b / unit),
            _ => format!("{b} bytes"),
        };
        CommError::CollectiveLength {
            rank,
            found_by: self.found_by,
            peer: self.peer,
            op: c.kind.name(),
            seq: c.seq,
            mine: say(self.mine),
            theirs: say(self.theirs),
        }
        .into()
    }
}

/// What a received message (its stamp off) holds.
pub(super) enum Body {
    /// Data (its flag taken off).
    Data(Vec<u8>),
    /// A mismatch found upstream.
    Mismatch(LengthMismatch),
}

/// Reads message `m` from `peer` of collective `c`'s `step`, received by `rank`. Errors:
/// [`ProtocolError::CollectiveMismatch`](crate::comm::error::ProtocolError::CollectiveMismatch) for a message without a valid flag.
pub(super) fn read(
    mut m: Vec<u8>,
    (c, rank, peer, step): (&Collective, usize, usize, u32),
) -> Result<Body, Error> {
    match m.pop() {
        Some(DATA) => return Ok(Body::Data(m)),
        Some(MISMATCH) if m.len() == LengthMismatch::BYTES => {
            let w = |i: usize| u64::from_le_bytes(m[8 * i..8 * i + 8].try_into().expect("8 bytes"));
            let v = |i: usize| usize::try_from(w(i)).unwrap_or(usize::MAX);
            return Ok(Body::Mismatch(LengthMismatch::new(v(0), v(1), v(2), v(3))));
        }
        _ => {}
    }
    Err(c
        .mismatch(
            rank,
            peer,
            step,
            format!("a message of {} bytes without a valid flag", m.len() + 1),
        )
        .into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::collective::CollectiveKind;

    #[test]
    fn a_mismatch_reads_back_and_names_the_reporter_and_the_finder() {
        let c = Collective {
            kind: CollectiveKind::AllReduce,
            seq: 3,
        };
        let lm = LengthMismatch::new(2, 3, 32, 24);
        let mut m = Vec::new();
        lm.put(&mut m);
        let Body::Mismatch(back) = read(m, (&c, 0, 2, 1)).unwrap() else {
            panic!("not a mismatch")
        };
        assert_eq!(back, lm);
        assert_eq!(
            back.error(&c, 2, 8, "elements").to_string(),
            "rank 2: all_reduce (collective #3): rank 3 passed 3 elements where rank 2 passed 4 elements: \
             every rank must pass the same length"
        );
        // Passed on to rank 0: it reports, naming the finder and the peer.
        assert_eq!(
            back.error(&c, 0, 8, "elements").to_string(),
            "rank 0: all_reduce (collective #3): rank 3 passed 3 elements where rank 2 passed 4 elements: \
             every rank must pass the same length"
        );
        let Body::Data(d) = read(vec![5, 6, DATA], (&c, 0, 2, 1)).unwrap() else {
            panic!("not data")
        };
        assert_eq!(d, [5, 6]);
        assert!(read(vec![5, MISMATCH], (&c, 0, 2, 1)).is_err());
        assert!(read(Vec::new(), (&c, 0, 2, 1)).is_err());
    }
}
