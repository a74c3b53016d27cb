//! The encoding of several byte parts in one collective message (`gather`, `all_to_allv`):
//! each part as its length (u64, little-endian) then its bytes, so that the lengths travel
//! with the data and no rank exchanges counts first. Reading checks every length against
//! the message: nothing is allocated from a length a peer gave.

use crate::comm::error::Result;
use crate::protocol::collective::Collective;

/// Bytes of a part's length.
pub(super) const LEN_BYTES: usize = 8;

/// The bytes `part` takes encoded.
pub(super) fn encoded(part: &[u8]) -> usize {
    LEN_BYTES + part.len()
}

/// Appends `part`, encoded, to `msg`.
pub(super) fn push(msg: &mut Vec<u8>, part: &[u8]) {
    msg.extend_from_slice(&(part.len() as u64).to_le_bytes());
    msg.extend_from_slice(part);
}

/// Reads `msg` as exactly `count` parts and gives each one's place in it, `(offset,
/// len)`, to `each` in order. Errors: [`ProtocolError::CollectiveMismatch`](crate::comm::error::ProtocolError::CollectiveMismatch) (from
/// `peer`, collective `c`'s `step`, found by `rank`) when `msg` is not `count` parts (the
/// ranks' calls differ, e.g. in their root).
pub(super) fn read(
    msg: &[u8],
    count: usize,
    (c, rank, peer, step): (&Collective, usize, usize, u32),
    mut each: impl FnMut(usize, usize),
) -> Result<()> {
    let mut at = 0usize;
    let mut parts = 0usize;
    while parts < count && msg.len() - at >= LEN_BYTES {
        let len = u64::from_le_bytes(msg[at..at + LEN_BYTES].try_into().expect("LEN_BYTES"));
        let start = at + LEN_BYTES;
        match usize::try_from(len) {
            Ok(len) if len <= msg.len() - start => {
                each(start, len);
                at = start + len;
                parts += 1;
            }
            _ => break,
        }
    }
    if parts == count && at == msg.len() {
        return Ok(());
    }
    Err(c
        .mismatch(
            rank,
            peer,
            step,
            format!(
                "a message of {} bytes that is not {count} parts (length, bytes) as this rank's call expects",
                msg.len()
            ),
        )
        .into())
}

/// The places `(offset, len)` of the parts of `msg`, a message [`read`] accepted.
pub(super) fn iter(msg: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let head = msg.get(at..at.checked_add(LEN_BYTES)?)?;
        let len = usize::try_from(u64::from_le_bytes(head.try_into().ok()?)).ok()?;
        let start = at + LEN_BYTES;
        (len <= msg.len() - start).then(|| {
            at = start + len;
            (start, len)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::collective::CollectiveKind;

    #[test]
    fn parts_read_back_as_written_and_a_short_or_long_message_is_refused() {
        let mut msg = Vec::new();
        for p in [&b"ab"[..], b"", b"cde"] {
            push(&mut msg, p);
        }
        assert_eq!(msg.len(), encoded(b"ab") + encoded(b"") + encoded(b"cde"));
        let c = Collective {
            kind: CollectiveKind::Gather,
            seq: 4,
        };
        let mut got = Vec::new();
        read(&msg, 3, (&c, 0, 1, 2), |o, l| got.push(msg[o..o + l].to_vec())).unwrap();
        assert_eq!(got, [b"ab".to_vec(), Vec::new(), b"cde".to_vec()]);
        let again: Vec<&[u8]> = iter(&msg).map(|(o, l)| &msg[o..o + l]).collect();
        assert_eq!(again, [&b"ab"[..], b"", b"cde"]);
        let e = read(&msg, 2, (&c, 0, 1, 2), |_, _| ()).unwrap_err().to_string();
        assert!(
            e.contains("gather (collective #4, step 2) got a message of 29 bytes that is not 2 parts"),
            "{e}"
        );
        assert!(read(&msg[..msg.len() - 1], 3, (&c, 0, 1, 2), |_, _| ()).is_err());
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.push(1);
        assert!(read(&huge, 1, (&c, 0, 1, 2), |_, _| ()).is_err());
    }
}
