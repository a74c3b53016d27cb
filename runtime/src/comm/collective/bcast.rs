//! The engine's `bcast`: a binomial tree rooted at `root`. With `v = (rank - root) mod n`
//! a rank's place in the tree, in round `k` (`ceil(log2 n)` rounds) every rank with `v <
//! 2^k` that has the data sends it to `v + 2^k` (when in the world), which receives it
//! from `v - 2^k`. Partners per rank: its parent (none for the root) and its children
//! (`ceil(log2 n)` for the root), at most `ceil(log2 n)` in all.
//!
//! A non-root rank keeps what it received in `u.blocks[0]` and writes the caller's buffer
//! at the end; the root sends from its buffer.

use super::mismatch::{self, Body, LengthMismatch};
use super::Unfinished;
use crate::comm::error::Result;
use crate::comm::Communicator;
use crate::core::memory::try_buffer;
use crate::fabric::wire::STAMP_BYTES;
use crate::protocol::collective::CollectiveKind;

/// Rounds of a binomial tree over `n` ranks: `ceil(log2 n)`.
pub(super) fn tree_rounds(n: usize) -> u32 {
    n.next_power_of_two().trailing_zeros()
}

/// Place `v` (relative to the root)'s partners in round `k` of a broadcast of `n` ranks:
/// (receive from, send to), as places.
fn plan(n: usize, v: usize, k: u32) -> (Option<usize>, Option<usize>) {
    let d = 1usize << k;
    if v < d {
        (None, (v + d < n).then_some(v + d))
    } else if v < 2 * d {
        (Some(v - d), None)
    } else {
        (None, None)
    }
}

impl Communicator {
    /// The engine's `bcast` (see the module). After a retryable error the next `bcast`
    /// resumes it (the root's `buf` is read again: pass the same). Errors:
    /// [`CommError::CollectiveLength`](crate::comm::error::CommError::CollectiveLength) when a
    /// rank's length differs from the root's, on that rank and every rank below it in the
    /// tree (the finder's, passed on: see `mismatch`), else as `barrier`.
    pub(super) fn engine_bcast(&mut self, root: usize, buf: &mut [u8]) -> Result<()> {
        let n = self.world_size();
        let r = self.rank();
        let v = (r + n - root) % n;
        let len = buf.len();
        let u = self.coll_start(CollectiveKind::Bcast, |_| Ok(()))?;
        let src: &[u8] = buf;
        let u = self.coll_run(u, |c, u| {
            while u.step < tree_rounds(n) {
                let (from, to) = plan(n, v, u.step);
                let real = |p: usize| (p + root) % n;
                let msg = |u: &Unfinished| {
                    let data = match (&u.mismatch, v) {
                        (Some(_), _) => &[][..],
                        (None, 0) => src,
                        (None, _) => &u.blocks[0][..],
                    };
                    let mut m = try_buffer(data.len() + mismatch::ROOM + STAMP_BYTES, || {
                        format!("a bcast message of {} bytes", data.len())
                    })?;
                    match &u.mismatch {
                        Some(lm) => lm.put(&mut m),
                        None => {
                            m.extend_from_slice(data);
                            m.push(mismatch::DATA);
                        }
                    }
                    u.c.seal(u.step, &mut m);
                    Ok(m)
                };
                let got = |u: &mut Unfinished, peer: usize, m: Vec<u8>| {
                    match mismatch::read(m, (&u.c, r, peer, u.step))? {
                        Body::Mismatch(lm) => u.mismatch = Some(lm),
                        Body::Data(m) if m.len() != len => {
                            u.mismatch = Some(LengthMismatch::new(r, peer, len, m.len()))
                        }
                        Body::Data(m) => u.blocks = vec![m],
                    }
                    Ok(())
                };
                c.coll_step(u, (from.map(real), to.map(real), "bcast"), msg, got)?;
            }
            Ok(())
        })?;
        if let Some(lm) = u.mismatch {
            return Err(lm.error(&u.c, r, 1, "bytes"));
        }
        if v != 0 {
            buf.copy_from_slice(&u.blocks[0]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every place but the root receives exactly once, from a place that had the data
    /// in an earlier round, and the root's children number `ceil(log2 n)`.
    #[test]
    fn every_place_receives_once_after_its_parent() {
        for n in 1..70 {
            let mut has = vec![false; n];
            has[0] = true;
            for k in 0..tree_rounds(n) {
                let before = has.clone();
                for v in 0..n {
                    let (from, to) = plan(n, v, k);
                    if let Some(f) = from {
                        assert!(before[f] && !before[v], "n {n} round {k}: {f} -> {v}");
                        assert_eq!(plan(n, f, k).1, Some(v));
                        has[v] = true;
                    }
                    if to.is_some() {
                        assert!(before[v]);
                    }
                }
            }
            assert!(has.iter().all(|&h| h), "n {n}");
            let root_children = (0..tree_rounds(n)).filter(|&k| plan(n, 0, k).1.is_some()).count();
            assert_eq!(root_children as u32, tree_rounds(n));
        }
    }
}
