//! The job's board: one small segment per node that every rank maps at start, holding what
//! each rank must know of every other without mapping its segment: its bell (so that any
//! rank can wake any other), whether it finished or failed, and the count of finished
//! ranks. 64 bytes per rank (a cache line each: a rank's words are written by the ranks
//! that ring it and read by every poll of its peers, and one line shared by four ranks made
//! every 8 B message pay for the others' traffic), so a node's board grows with its
//! processes, not their pairs.
//!
//! Layout (bytes): `0..8` magic, `8..12` version, `12..16` ranks; `16..24` finished count
//! (`AtomicU64`); `24..28` the first failed rank plus one (0: none); `32..40` the job's
//! abort notice (`Communicator::abort`: the rank plus one, shifted by 32, and its code;
//! 0: none, the first wins); then from
//! [`BOARD_HEAD`], [`PER_RANK`] bytes per rank: bell, sleeping flag, state ([`RUNNING`],
//! [`FINISHED`], [`FAILED`]), pid.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::bell::Bell;
use super::ffi::{Segment, SegmentError};

const MAGIC: u64 = u64::from_le_bytes(*b"BLSTBRD1");
/// 2: [`PER_RANK`] went from 16 to 64 bytes.
const VERSION: u32 = 2;
/// Bytes before the first rank's words.
pub(crate) const BOARD_HEAD: usize = 64;
/// Bytes per rank: one cache line (64 bytes on x86-64 and most aarch64), of which 16 are
/// used.
pub(crate) const PER_RANK: usize = 64;

/// A rank that has not ended.
pub(crate) const RUNNING: u32 = 0;
/// A rank that finished: everything it sent is in its receivers' rings.
pub(crate) const FINISHED: u32 = 1;
/// A rank that failed.
pub(crate) const FAILED: u32 = 2;

/// A mapped board of `ranks` ranks.
pub(crate) struct Board {
    seg: Segment,
    ranks: usize,
}

impl Board {
    /// Bytes of a board of `ranks` ranks.
    pub(crate) fn bytes(ranks: usize) -> Option<usize> {
        ranks.checked_mul(PER_RANK)?.checked_add(BOARD_HEAD)
    }

    /// A new board for `ranks` ranks, every rank running. Errors: the segment's.
    pub(crate) fn create(name: &str, ranks: usize) -> Result<Board, SegmentError> {
        let len = Board::bytes(ranks).ok_or_else(|| SegmentError::Refused(format!("{ranks} ranks")))?;
        let seg = Segment::create(name, len)?;
        let mut head = [0u8; 16];
        head[..8].copy_from_slice(&MAGIC.to_le_bytes());
        head[8..12].copy_from_slice(&VERSION.to_le_bytes());
        head[12..16].copy_from_slice(&(ranks as u32).to_le_bytes());
        seg.write(0, &head)
            .ok_or_else(|| SegmentError::Refused("a board too small".into()))?;
        Ok(Board { seg, ranks })
    }

    /// The board of `ranks` ranks made by another rank, from its descriptor. Errors:
    /// [`SegmentError::Refused`] when it is not a board of that many ranks.
    pub(crate) fn open(fd: std::os::fd::OwnedFd, ranks: usize) -> Result<Board, SegmentError> {
        let len = Board::bytes(ranks).ok_or_else(|| SegmentError::Refused(format!("{ranks} ranks")))?;
        let seg = Segment::open(fd, len)?;
        let head = seg
            .bytes(0, 16)
            .ok_or_else(|| SegmentError::Refused("no header".into()))?;
        let magic = u64::from_le_bytes(head[..8].try_into().unwrap_or_default());
        let version = u32::from_le_bytes(head[8..12].try_into().unwrap_or_default());
        let n = u32::from_le_bytes(head[12..16].try_into().unwrap_or_default());
        if magic != MAGIC || version != VERSION || n as usize != ranks {
            return Err(SegmentError::Refused(format!(
                "not a board of {ranks} ranks (magic {magic:#x}, version {version}, {n} ranks)"
            )));
        }
        Ok(Board { seg, ranks })
    }

    /// The board's segment (to pass to a rank; see [`Board::open`]).
    pub(crate) fn segment(&self) -> &Segment {
        &self.seg
    }

    /// Ranks on the board.
    pub(crate) fn ranks(&self) -> usize {
        self.ranks
    }

    fn word(&self, rank: usize, i: usize) -> Option<&AtomicU32> {
        if rank >= self.ranks {
            return None;
        }
        self.seg.u32_at(BOARD_HEAD + rank * PER_RANK + 4 * i)
    }

    /// Rank `rank`'s bell (`None` for a rank not on the board).
    pub(crate) fn bell(&self, rank: usize) -> Option<Bell> {
        let at = BOARD_HEAD + rank.checked_mul(PER_RANK)?;
        (rank < self.ranks).then_some(())?;
        Bell::new(&self.seg, at, at + 4)
    }

    /// Rings rank `rank`'s bell.
    #[inline]
    pub(crate) fn ring(&self, rank: usize) {
        if let Some(b) = self.bell(rank) {
            b.ring(&self.seg);
        }
    }

    /// Rings every rank's bell.
    pub(crate) fn ring_all(&self) {
        for r in 0..self.ranks {
            self.ring(r);
        }
    }

    /// Rank `rank` sleeps on its bell (see [`Bell::sleep`]).
    pub(crate) fn sleep(&self, rank: usize, timeout: std::time::Duration, idle: impl FnOnce() -> bool) {
        if let Some(b) = self.bell(rank) {
            b.sleep(&self.seg, timeout, idle);
        }
    }

    /// Records this process' `pid` for rank `rank`.
    pub(crate) fn set_pid(&self, rank: usize, pid: u32) {
        if let Some(w) = self.word(rank, 3) {
            w.store(pid, Ordering::Relaxed);
        }
    }

    /// Rank `rank`'s process id (0 when not recorded).
    pub(crate) fn pid(&self, rank: usize) -> u32 {
        self.word(rank, 3).map_or(0, |w| w.load(Ordering::Relaxed))
    }

    /// Rank `rank`'s state ([`RUNNING`] for a rank not on the board).
    pub(crate) fn state(&self, rank: usize) -> u32 {
        self.word(rank, 2).map_or(RUNNING, |w| w.load(Ordering::Acquire))
    }

    fn finished_count(&self) -> Option<&AtomicU64> {
        self.seg.u64_at(16)
    }

    /// Marks rank `rank` finished (once; release: everything it published before is seen
    /// by a rank that reads the state) and counts it; the last one rings every bell.
    pub(crate) fn finish(&self, rank: usize) {
        let (Some(w), Some(count)) = (self.word(rank, 2), self.finished_count()) else {
            return;
        };
        if w.compare_exchange(RUNNING, FINISHED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            && count.fetch_add(1, Ordering::AcqRel) + 1 == self.ranks as u64
        {
            self.ring_all();
        }
    }

    /// Ranks that finished.
    pub(crate) fn finished(&self) -> usize {
        self.finished_count()
            .map_or(0, |c| c.load(Ordering::Acquire) as usize)
    }

    /// Marks rank `rank` failed and the job failed (the first failure is kept), and rings
    /// every bell; nothing for a rank that ended or is not on the board.
    pub(crate) fn fail(&self, rank: usize) {
        if rank >= self.ranks {
            return;
        }
        // Only a rank that was running fails (one that finished meanwhile stays finished).
        let failed = self.word(rank, 2).is_some_and(|w| {
            w.compare_exchange(RUNNING, FAILED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        });
        if !failed {
            return;
        }
        if let Some(f) = self.seg.u32_at(24) {
            let _ = f.compare_exchange(0, rank as u32 + 1, Ordering::AcqRel, Ordering::Acquire);
        }
        self.ring_all();
    }

    /// Records the job's abort by `rank` with `code` (the first one wins) and rings every
    /// bell.
    pub(crate) fn abort(&self, rank: usize, code: i32) {
        if let Some(w) = self.seg.u64_at(32) {
            let v = (rank as u64 + 1) << 32 | u64::from(code as u32);
            let _ = w.compare_exchange(0, v, Ordering::AcqRel, Ordering::Acquire);
        }
        self.ring_all();
    }

    /// The job's abort notice: the rank that aborted and its code.
    pub(crate) fn notice(&self) -> Option<(usize, i32)> {
        let v = self.seg.u64_at(32)?.load(Ordering::Acquire);
        let by = ((v >> 32) as usize).checked_sub(1)?;
        (by < self.ranks).then_some((by, v as u32 as i32))
    }

    /// The first rank that failed, if one did.
    pub(crate) fn failed(&self) -> Option<usize> {
        let f = self.seg.u32_at(24)?.load(Ordering::Acquire);
        let r = (f as usize).checked_sub(1)?;
        (r < self.ranks).then_some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_board_counts_finished_ranks_once_and_keeps_the_first_failure() {
        let b = Board::create("ballast-test-board", 3).unwrap();
        assert_eq!(b.segment().len(), 64 + 3 * 64, "a cache line per rank");
        assert_eq!((b.finished(), b.failed(), b.state(1)), (0, None, RUNNING));
        b.finish(1);
        b.finish(1);
        assert_eq!((b.finished(), b.state(1)), (1, FINISHED));
        b.fail(1);
        assert_eq!(b.failed(), None, "a finished rank does not fail");
        b.fail(2);
        b.fail(0);
        assert_eq!((b.failed(), b.state(2), b.state(0)), (Some(2), FAILED, FAILED));
        b.fail(1);
        assert_eq!(b.state(1), FINISHED, "a finished rank stays finished");
        assert_eq!(b.notice(), None);
        b.abort(2, -7);
        b.abort(0, 1);
        assert_eq!(b.notice(), Some((2, -7)), "the first abort wins");
        assert_eq!(b.state(7), RUNNING, "off the board");
        assert!(b.bell(3).is_none());
        // Another mapping of the same board sees the same words.
        let fd = b.segment().fd().unwrap().try_clone_to_owned().unwrap();
        let other = Board::open(fd, 3).unwrap();
        assert_eq!((other.finished(), other.failed()), (1, Some(2)));
        let fd = b.segment().fd().unwrap().try_clone_to_owned().unwrap();
        assert!(Board::open(fd, 4).is_err(), "a board of 3 ranks is not one of 4");
    }
}
