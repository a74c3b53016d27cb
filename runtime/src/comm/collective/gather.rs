//! The engine's `gather`: a binomial tree rooted at `root`, the broadcast's reversed.
//! With `v = (rank - root) mod n`, in round `k` (`ceil(log2 n)` rounds) a rank with `v mod
//! 2^(k+1) = 2^k` sends everything it holds (places `v` to `v + 2^k - 1` that exist) to
//! `v - 2^k` and is done; the receiver appends it. Each part travels with its length
//! (`parts`), so ranks give any length and nobody exchanges counts. Partners per rank: at
//! most `ceil(log2 n)` (the root's children; a leaf has 1).
//!
//! `u.blocks[0]` is this rank's part, encoded; `u.blocks[1..]` what it received, in
//! round order, which is place order: their concatenation is the encoded parts of places
//! `v`, `v + 1`, …

use super::bcast::tree_rounds;
use super::parts;
use super::Unfinished;
use crate::comm::error::Result;
use crate::comm::Communicator;
use crate::core::memory::{try_buffer, try_copy, try_reserve_for};
use crate::fabric::wire::STAMP_BYTES;
use crate::protocol::collective::CollectiveKind;

/// Place `v`'s partners in round `k` of a gather of `n` ranks: (receive from and how
/// many parts, send to), as places.
fn plan(n: usize, v: usize, k: u32) -> (Option<(usize, usize)>, Option<usize>) {
    let d = 1usize << k;
    match v % (2 * d) {
        0 if v + d < n => (Some((v + d, d.min(n - v - d))), None),
        x if x == d => (None, Some(v - d)),
        _ => (None, None),
    }
}

impl Communicator {
    /// The engine's `gather` (see the module). After a retryable error the next `gather`
    /// resumes it (the retry's `data` is not read). Errors: as `barrier`;
    /// [`ProtocolError::CollectiveMismatch`](crate::comm::error::ProtocolError::CollectiveMismatch)
    /// for a message that is not the parts expected (e.g. ranks with different roots).
    pub(super) fn engine_gather(&mut self, root: usize, data: &[u8]) -> Result<Option<Vec<Vec<u8>>>> {
        let n = self.world_size();
        let r = self.rank();
        let v = (r + n - root) % n;
        let u = self.coll_start(CollectiveKind::Gather, |u| {
            let mut own = try_buffer(parts::encoded(data), || {
                format!("this rank's {} bytes of a gather", data.len())
            })?;
            parts::push(&mut own, data);
            u.blocks = vec![own];
            Ok(())
        })?;
        let real = |p: usize| (p + root) % n;
        let u = self.coll_run(u, |c, u| {
            while u.step < tree_rounds(n) {
                let (from, to) = plan(n, v, u.step);
                let msg = |u: &Unfinished| {
                    let total: usize = u.blocks.iter().map(Vec::len).sum();
                    let mut m = try_buffer(total + STAMP_BYTES, || {
                        format!("a gather message of {total} bytes")
                    })?;
                    u.blocks.iter().for_each(|b| m.extend_from_slice(b));
                    u.c.seal(u.step, &mut m);
                    Ok(m)
                };
                let count = from.map_or(0, |(_, count)| count);
                let got = |u: &mut Unfinished, peer: usize, m: Vec<u8>| {
                    parts::read(&m, count, (&u.c, r, peer, u.step), |_, _| ())?;
                    u.blocks.push(m);
                    Ok(())
                };
                let ends = (from.map(|(f, _)| real(f)), to.map(real), "gather");
                c.coll_step(u, ends, msg, got)?;
                if to.is_some() {
                    break;
                }
            }
            if v != 0 {
                return Ok(());
            }
            // The root: every place's part, by rank (`u.blocks` kept until all are
            // copied, so that a failed copy is retried).
            let mut out: Vec<Vec<u8>> = Vec::new();
            try_reserve_for(&mut out, n, || format!("the {n} parts of a gather"))?;
            out.resize_with(n, Vec::new);
            let mut place = 0usize;
            for b in &u.blocks {
                for (o, l) in parts::iter(b) {
                    out[real(place)] = try_copy(&b[o..o + l], || format!("a gathered part of {l} bytes"))?;
                    place += 1;
                }
            }
            u.blocks = out;
            Ok(())
        })?;
        Ok((v == 0).then_some(u.blocks))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every place but the root sends once, to a place that receives it in that round
    /// with the count of places it holds by then; the root ends with all `n`.
    #[test]
    fn every_place_sends_its_subtree_once_to_the_place_that_waits_for_it() {
        for n in 1..70 {
            let mut holds = vec![1usize; n];
            let mut sent = vec![false; n];
            for k in 0..tree_rounds(n) {
                let before = holds.clone();
                for v in 0..n {
                    let (from, to) = plan(n, v, k);
                    if let Some(t) = to {
                        assert!(!sent[v], "n {n}: place {v} sends twice");
                        sent[v] = true;
                        assert_eq!(
                            plan(n, t, k).0,
                            Some((v, before[v])),
                            "n {n} round {k}: {v} -> {t}"
                        );
                    }
                    if let Some((f, count)) = from {
                        assert_eq!(plan(n, f, k).1, Some(v));
                        holds[v] += count;
                    }
                }
            }
            assert_eq!(holds[0], n, "n {n}");
            assert!(sent.iter().skip(1).all(|&s| s) && !sent[0], "n {n}");
        }
    }
}
