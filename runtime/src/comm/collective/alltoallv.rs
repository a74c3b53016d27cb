//! The engine's `all_to_allv`: Bruck's algorithm (Bruck et al. 1997, "Efficient
//! algorithms for all-to-all communications in multiport message-passing systems"). Slot
//! `i` of rank `r` starts with its part for rank `r + i` (mod n); in round `k`
//! (`ceil(log2 n)` rounds) a rank sends every slot whose index has bit `k` set to rank
//! `r + 2^k` and takes the same slots from rank `r - 2^k`; at the end slot `i` holds the
//! part rank `r - i` sent to `r`. Each part travels with its length (`parts`): nobody exchanges
//! counts. Partners per rank: `2 * ceil(log2 n)` (one to send to, one to receive from per
//! round; fewer when they coincide). A part moves up to `ceil(log2 n)` times: the
//! algorithm suits small parts.
//!
//! `u.blocks[0]` is this rank's parts, concatenated; `u.blocks[1..]` the messages
//! received; `u.slots[i]` where slot `i`'s bytes are in them.

use super::parts;
use super::Unfinished;
use crate::comm::error::Result;
use crate::comm::Communicator;
use crate::core::memory::{try_buffer, try_reserve_for, try_reuse_parts};
use crate::fabric::wire::STAMP_BYTES;
use crate::protocol::collective::CollectiveKind;

/// Where a slot's bytes are: `blocks[block][off..off + len]`.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Slot {
    block: usize,
    off: usize,
    len: usize,
}

/// The slots below `n` sent in round `k` (bit `k` set), in increasing order.
fn round_slots(n: usize, k: u32) -> impl Iterator<Item = usize> {
    (0..n).filter(move |i| i & (1 << k) != 0)
}

impl Communicator {
    /// The engine's `all_to_allv` (see the module) into `out`, whose buffers take the parts
    /// where their capacity holds them (no allocation). After a retryable error the next
    /// `all_to_allv` resumes it (the retry's `parts` are not read). Errors: as `barrier`;
    /// [`ProtocolError::CollectiveMismatch`](crate::comm::error::ProtocolError::CollectiveMismatch)
    /// for a message that is not the parts expected.
    pub(super) fn engine_all_to_allv(&mut self, parts_in: &[&[u8]], out: &mut Vec<Vec<u8>>) -> Result<()> {
        let n = self.world_size();
        let r = self.rank();
        let u = self.coll_start(CollectiveKind::AllToAllv, |u| {
            let total: usize = parts_in.iter().map(|p| p.len()).sum();
            let mut own = try_buffer(total, || format!("this rank's {total} bytes of an all_to_allv"))?;
            let mut slots = Vec::new();
            try_reserve_for(&mut slots, n, || format!("the {n} slots of an all_to_allv"))?;
            for i in 0..n {
                let p = parts_in[(r + i) % n];
                slots.push(Slot {
                    block: 0,
                    off: own.len(),
                    len: p.len(),
                });
                own.extend_from_slice(p);
            }
            u.blocks = vec![own];
            u.slots = slots;
            Ok(())
        })?;
        let rounds = n.next_power_of_two().trailing_zeros();
        self.coll_run(u, |c, u| {
            while u.step < rounds {
                let k = u.step;
                let d = 1usize << k;
                let msg = |u: &Unfinished| {
                    let total: usize = round_slots(n, k).map(|i| parts::LEN_BYTES + u.slots[i].len).sum();
                    let mut m = try_buffer(total + STAMP_BYTES, || {
                        format!("an all_to_allv message of {total} bytes")
                    })?;
                    for i in round_slots(n, k) {
                        let s = &u.slots[i];
                        parts::push(&mut m, &u.blocks[s.block][s.off..s.off + s.len]);
                    }
                    u.c.seal(k, &mut m);
                    Ok(m)
                };
                let got = |u: &mut Unfinished, peer: usize, m: Vec<u8>| {
                    let count = round_slots(n, k).count();
                    parts::read(&m, count, (&u.c, r, peer, k), |_, _| ())?;
                    let block = u.blocks.len();
                    for (i, (off, len)) in round_slots(n, k).zip(parts::iter(&m)) {
                        u.slots[i] = Slot { block, off, len };
                    }
                    u.blocks.push(m);
                    Ok(())
                };
                let ends = (Some((r + n - d) % n), Some((r + d) % n), "all_to_allv");
                c.coll_step(u, ends, msg, got)?;
                // Drop the messages no slot points into any more.
                for b in 0..u.blocks.len() {
                    if !u.slots.iter().any(|s| s.block == b) {
                        u.blocks[b] = Vec::new();
                    }
                }
            }
            // Every source's part, by rank, into `out`'s buffers (`u.blocks` kept until all
            // are copied, so that a failed copy is retried): source `j`'s is slot `(r - j)
            // mod n`, and slot `i` goes to rank `(r - i) mod n`.
            try_reuse_parts(out, (0..n).map(|j| u.slots[(r + n - j) % n].len), "all_to_allv")?;
            for (i, s) in u.slots.iter().enumerate() {
                out[(r + n - i) % n].extend_from_slice(&u.blocks[s.block][s.off..s.off + s.len]);
            }
            Ok(())
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bruck's rounds, simulated on slot labels (source, destination): at the end slot
    /// `i` of rank `r` holds what rank `r - i` sent to `r`, for every world up to 40.
    #[test]
    fn bruck_rounds_deliver_every_part() {
        for n in 1..40usize {
            let mut slots: Vec<Vec<(usize, usize)>> = (0..n)
                .map(|r| (0..n).map(|i| (r, (r + i) % n)).collect())
                .collect();
            for k in 0..n.next_power_of_two().trailing_zeros() {
                let d = 1 << k;
                let before = slots.clone();
                for (r, rs) in slots.iter_mut().enumerate() {
                    for i in round_slots(n, k) {
                        rs[i] = before[(r + n - d) % n][i];
                    }
                }
            }
            for (r, rs) in slots.iter().enumerate() {
                for (i, &(src, dst)) in rs.iter().enumerate() {
                    assert_eq!((src, dst), ((r + n - i) % n, r), "n {n} rank {r} slot {i}");
                }
            }
        }
    }
}
