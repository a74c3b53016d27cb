//! The engine's `all_reduce`: recursive doubling. With `p` the largest power of two not
//! above the world size `n` and `rem = n - p`, rank `2i` (for `i < rem`) first folds its
//! data into rank `2i + 1` and waits; the `p` others (rank `2i + 1` as `i`, rank `r >= 2 *
//! rem` as `r - rem`) exchange their whole vectors with the partner `v XOR 2^j` in round
//! `j` (`log2 p` rounds); at the end rank `2i + 1` sends the result back to rank `2i`.
//! Every combination is `lower-rank block ⊕ higher-rank block`, so the result is one
//! fixed expression tree over the ranks' inputs in rank order, the same bits on every
//! rank. Partners per rank: `log2 p` plus 1 for a rank below `2 * rem`.
//!
//! `u.blocks[0]` holds the running result, little-endian; the caller's slice is read at
//! the start and written at the end only.

use super::mismatch::{self, Body, LengthMismatch};
use super::reduce::{ReduceOp, ReduceSlice, ReduceType};
use super::Unfinished;
use crate::comm::error::Result;
use crate::comm::Communicator;
use crate::core::memory::try_buffer;
use crate::fabric::wire::STAMP_BYTES;
use crate::protocol::collective::CollectiveKind;

/// What a rank does with the message of a step.
#[derive(Clone, Copy)]
enum Take {
    /// Combines it with its own: `mine ⊕ theirs` when `mine_first`, else `theirs ⊕ mine`.
    Combine { mine_first: bool },
    /// Takes it as the result.
    Replace,
}

/// Rank `r`'s step `step` of `n` ranks: (receive from, send to, what to do with what comes).
fn plan(n: usize, r: usize, step: u32) -> (Option<usize>, Option<usize>, Take) {
    let p = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let rem = n - p;
    let rounds = p.trailing_zeros();
    let folded = r < 2 * rem && r.is_multiple_of(2);
    let none = (None, None, Take::Replace);
    if step == 0 {
        return match (r < 2 * rem, folded) {
            (true, true) => (None, Some(r + 1), Take::Replace),
            (true, false) => (Some(r - 1), None, Take::Combine { mine_first: false }),
            _ => none,
        };
    }
    if step == rounds + 1 {
        return match (r < 2 * rem, folded) {
            (true, true) => (Some(r + 1), None, Take::Replace),
            (true, false) => (None, Some(r - 1), Take::Replace),
            _ => none,
        };
    }
    if folded {
        return none;
    }
    let v = if r < 2 * rem { r / 2 } else { r - rem };
    let w = v ^ (1usize << (step - 1));
    let q = if w < rem { 2 * w + 1 } else { w + rem };
    (Some(q), Some(q), Take::Combine { mine_first: r < q })
}

/// The steps of every rank (see [`plan`]).
fn steps(n: usize) -> u32 {
    let p = 1usize << (usize::BITS - 1 - n.leading_zeros());
    p.trailing_zeros() + 2
}

/// `acc[i] = f(acc[i], other[i])` (or `f(other[i], acc[i])` unless `mine_first`) over
/// little-endian elements of `W` bytes.
fn fold<T: Copy, const W: usize, F: Fn([u8; W]) -> T, G: Fn(T) -> [u8; W]>(
    acc: &mut [u8],
    other: &[u8],
    mine_first: bool,
    (from, to): (F, G),
    f: impl Fn(T, T) -> T,
) {
    for (a, b) in acc.chunks_exact_mut(W).zip(other.chunks_exact(W)) {
        let x = from(a.try_into().expect("W bytes"));
        let y = from(b.try_into().expect("W bytes"));
        let r = if mine_first { f(x, y) } else { f(y, x) };
        a.copy_from_slice(&to(r));
    }
}

/// The minimum of doubles `a ⊕ b`: a NaN operand gives NaN (`a`'s when both are); of
/// equal values (`-0.0`, `0.0`) `a`.
fn min_f64(a: f64, b: f64) -> f64 {
    if a.is_nan() || (!b.is_nan() && a <= b) {
        a
    } else {
        b
    }
}

/// The maximum of doubles, as [`min_f64`].
fn max_f64(a: f64, b: f64) -> f64 {
    if a.is_nan() || (!b.is_nan() && a >= b) {
        a
    } else {
        b
    }
}

/// Combines `other` into `acc` (both little-endian elements of `ty`) with `op`.
fn combine(ty: ReduceType, op: ReduceOp, acc: &mut [u8], other: &[u8], mine_first: bool) {
    use ReduceOp::{Max, Min, Sum};
    macro_rules! int {
        ($t:ty) => {{
            let io = (<$t>::from_le_bytes, <$t>::to_le_bytes);
            match op {
                Sum => fold(acc, other, mine_first, io, <$t>::wrapping_add),
                Min => fold(acc, other, mine_first, io, <$t>::min),
                Max => fold(acc, other, mine_first, io, <$t>::max),
            }
        }};
    }
    match ty {
        ReduceType::I32 => int!(i32),
        ReduceType::I64 => int!(i64),
        ReduceType::U64 => int!(u64),
        ReduceType::F64 => {
            let io = (f64::from_le_bytes, f64::to_le_bytes);
            match op {
                Sum => fold(acc, other, mine_first, io, |a, b| a + b),
                Min => fold(acc, other, mine_first, io, min_f64),
                Max => fold(acc, other, mine_first, io, max_f64),
            }
        }
    }
}

/// `data`'s elements, little-endian, into `out`.
fn put(data: &ReduceSlice<'_>, out: &mut Vec<u8>) {
    match data {
        ReduceSlice::I32(s) => s.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        ReduceSlice::I64(s) => s.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        ReduceSlice::U64(s) => s.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        ReduceSlice::F64(s) => s.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
    }
}

/// `bytes` (little-endian elements) into `data`.
fn get(bytes: &[u8], data: &mut ReduceSlice<'_>) {
    macro_rules! back {
        ($s:expr, $t:ty) => {
            for (x, b) in $s
                .iter_mut()
                .zip(bytes.chunks_exact(std::mem::size_of::<$t>()))
            {
                *x = <$t>::from_le_bytes(b.try_into().expect("element bytes"));
            }
        };
    }
    match data {
        ReduceSlice::I32(s) => back!(s, i32),
        ReduceSlice::I64(s) => back!(s, i64),
        ReduceSlice::U64(s) => back!(s, u64),
        ReduceSlice::F64(s) => back!(s, f64),
    }
}

impl Communicator {
    /// The engine's `all_reduce` (see the module). After a retryable error the next
    /// `all_reduce` resumes it with the running result kept (the retry's `data` is only
    /// written). Errors: [`CommError::CollectiveLength`](crate::comm::error::CommError::CollectiveLength)
    /// on every rank when two partners' lengths differ (the finder's, passed on: see
    /// `mismatch`), else as `barrier`.
    pub(super) fn engine_all_reduce(&mut self, mut data: ReduceSlice<'_>, op: ReduceOp) -> Result<()> {
        let n = self.world_size();
        let r = self.rank();
        let ty = data.ty();
        let count = data.len();
        let bytes = count * ty.size();
        let u = self.coll_start(CollectiveKind::AllReduce, |u| {
            let mut acc = try_buffer(bytes, || format!("the {count} elements of an all_reduce"))?;
            put(&data, &mut acc);
            u.blocks = vec![acc];
            Ok(())
        })?;
        let u = self.coll_run(u, |c, u| {
            while u.step < steps(n) {
                let (from, to, take) = plan(n, r, u.step);
                let msg = |u: &Unfinished| {
                    let acc = &u.blocks[0];
                    let mut m = try_buffer(acc.len() + mismatch::ROOM + STAMP_BYTES, || {
                        format!("an all_reduce message of {} bytes", acc.len())
                    })?;
                    match &u.mismatch {
                        Some(lm) => lm.put(&mut m),
                        None => {
                            m.extend_from_slice(acc);
                            m.push(mismatch::DATA);
                        }
                    }
                    u.c.seal(u.step, &mut m);
                    Ok(m)
                };
                let got = |u: &mut Unfinished, peer: usize, m: Vec<u8>| {
                    let m = match mismatch::read(m, (&u.c, r, peer, u.step))? {
                        Body::Mismatch(lm) => {
                            u.mismatch.get_or_insert(lm);
                            return Ok(());
                        }
                        Body::Data(m) => m,
                    };
                    if u.mismatch.is_some() {
                        return Ok(());
                    }
                    if m.len() != u.blocks[0].len() {
                        u.mismatch = Some(LengthMismatch::new(r, peer, u.blocks[0].len(), m.len()));
                        return Ok(());
                    }
                    match take {
                        Take::Combine { mine_first } => combine(ty, op, &mut u.blocks[0], &m, mine_first),
                        Take::Replace => u.blocks[0] = m,
                    }
                    Ok(())
                };
                c.coll_step(u, (from, to, "all_reduce"), msg, got)?;
            }
            Ok(())
        })?;
        if let Some(lm) = u.mismatch {
            return Err(lm.error(&u.c, r, ty.size(), "elements"));
        }
        get(&u.blocks[0], &mut data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rank's steps pair up: a send of step s from a to b is a receive of step s
    /// from a at b; every rank but the folded ones meets `log2 p` partners.
    #[test]
    fn the_steps_of_every_world_pair_up() {
        for n in 1..40 {
            for s in 0..steps(n) {
                for a in 0..n {
                    let (from, to, _) = plan(n, a, s);
                    if let Some(b) = to {
                        assert_eq!(plan(n, b, s).0, Some(a), "n {n} step {s}: {a} -> {b}");
                    }
                    if let Some(b) = from {
                        assert_eq!(plan(n, b, s).1, Some(a), "n {n} step {s}: {b} -> {a}");
                    }
                }
            }
        }
    }

    #[test]
    fn doubles_min_and_max_take_nan_and_keep_the_first_of_equals() {
        assert!(min_f64(f64::NAN, 1.0).is_nan() && min_f64(1.0, f64::NAN).is_nan());
        assert!(max_f64(f64::NAN, 1.0).is_nan() && max_f64(1.0, f64::NAN).is_nan());
        assert_eq!(min_f64(-0.0, 0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(max_f64(0.0, -0.0).to_bits(), 0.0f64.to_bits());
        assert_eq!((min_f64(2.0, -1.0), max_f64(2.0, -1.0)), (-1.0, 2.0));
    }
}
