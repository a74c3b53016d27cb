//! A receive ring in a shared segment: a bounded multi-producer, single-consumer queue of
//! fixed-size cells that every node-local peer of a rank writes into and only that rank
//! reads (Vyukov's bounded queue, with one consumer). A cell carries a packet's header and
//! up to `payload` bytes inline, so a send is one copy into the receiver's memory and the
//! receiver reads the payload where it lies.
//!
//! Layout at the ring's offset in the segment (bytes; all words little-endian, as the
//! machine's, since producer and consumer share one machine):
//! - `0..8`: `tail`, the next position a producer takes (`AtomicU64`), alone in its
//!   64-byte line;
//! - from 64: `depth` cells of [`Ring::cell_bytes`] each (a multiple of 64): `0..8` the
//!   cell's sequence word, `8..CELL_HEAD` its header ([`Cell`]), then its payload.
//!
//! A cell at position `p` (index `p % depth`) is free for the producer of position `p`
//! while its sequence is `p`; the producer writes it and stores `p + 1` (release); the
//! consumer reads it while its sequence is `p + 1` and gives it back by storing
//! `p + depth`. A producer that finds a sequence below its position has found the ring
//! full (the engine's credits keep data rings from filling; control rings are sized for
//! their traffic and their senders wait).

use std::sync::atomic::Ordering;

use super::ffi::Segment;

/// Bytes of a cell's head (sequence word and [`Cell`]), before its payload.
pub(crate) const CELL_HEAD: usize = 64;
/// Bytes before the first cell (the `tail` word's line).
pub(crate) const RING_HEAD: usize = 64;

/// What a cell holds besides its payload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cell {
    /// The sending rank.
    pub src: u32,
    /// What the cell is (a data packet, a control message, ...: the fabric's codes).
    pub kind: u8,
    /// A flag of the packet (the engine's `more`).
    pub more: bool,
    /// The message tag, or a control code.
    pub tag: u32,
    /// The message's total length, or a control value.
    pub total: u64,
    /// The payload's offset in its message.
    pub offset: u64,
    /// Payload bytes in this cell.
    pub len: u32,
}

impl Cell {
    fn encode(&self) -> [u8; CELL_HEAD - 8] {
        let mut b = [0u8; CELL_HEAD - 8];
        b[0..4].copy_from_slice(&self.src.to_le_bytes());
        b[4..8].copy_from_slice(&self.tag.to_le_bytes());
        b[8..16].copy_from_slice(&self.total.to_le_bytes());
        b[16..24].copy_from_slice(&self.offset.to_le_bytes());
        b[24..28].copy_from_slice(&self.len.to_le_bytes());
        b[28] = self.kind;
        b[29] = u8::from(self.more);
        b
    }

    fn decode(b: &[u8]) -> Cell {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        Cell {
            src: u32_at(0),
            tag: u32_at(4),
            total: u64_at(8),
            offset: u64_at(16),
            len: u32_at(24),
            kind: b[28],
            more: b[29] != 0,
        }
    }
}

/// Why a ring operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RingError {
    /// Every cell is taken (the producer may retry once the consumer gave some back).
    Full,
    /// The payload is longer than a cell holds.
    TooLong,
    /// The ring's words are not where its layout says (a segment too small: a bug or a
    /// peer's broken segment).
    Layout,
    /// A published cell claims more payload than a cell holds (a broken or hostile peer).
    BadCell,
}

/// One ring's place in a segment. Producers and the consumer each hold one (the same
/// numbers: the consumer made the ring; a producer read them from the segment's header
/// and checked them with [`Ring::new`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ring {
    /// Offset of the `tail` word.
    at: usize,
    depth: u64,
    cell_bytes: usize,
}

impl Ring {
    /// The cell size for `payload` bytes of payload: the head plus the payload, rounded up
    /// to 64 bytes (a cache line, so that two producers never share one).
    pub(crate) fn cell_bytes(payload: usize) -> Option<usize> {
        CELL_HEAD.checked_add(payload)?.checked_next_multiple_of(64)
    }

    /// Bytes of a ring of `depth` cells of `payload` bytes.
    pub(crate) fn bytes(depth: usize, payload: usize) -> Option<usize> {
        Ring::cell_bytes(payload)?
            .checked_mul(depth)?
            .checked_add(RING_HEAD)
    }

    /// The ring at offset `at` (a multiple of 64) of `depth` cells of `payload` bytes, if
    /// it lies in `seg`. `None` when it does not (or `depth` is below 2).
    pub(crate) fn new(seg: &Segment, at: usize, depth: usize, payload: usize) -> Option<Ring> {
        let end = at.checked_add(Ring::bytes(depth, payload)?)?;
        // One cell cannot tell "published at p" from "free for p + 1" (both `p + 1`).
        if depth < 2 || !at.is_multiple_of(64) || end > seg.len() {
            return None;
        }
        Some(Ring {
            at,
            depth: depth as u64,
            cell_bytes: Ring::cell_bytes(payload)?,
        })
    }

    /// Sets every cell free, for a new ring (the owner, before any peer maps it).
    pub(crate) fn init(&self, seg: &Segment) -> Result<(), RingError> {
        seg.u64_at(self.at)
            .ok_or(RingError::Layout)?
            .store(0, Ordering::Relaxed);
        for p in 0..self.depth {
            self.seq(seg, p)?.store(p, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Payload bytes a cell holds.
    pub(crate) fn payload(&self) -> usize {
        self.cell_bytes - CELL_HEAD
    }

    fn cell_at(&self, pos: u64) -> usize {
        self.at + RING_HEAD + (pos % self.depth) as usize * self.cell_bytes
    }

    fn seq<'s>(&self, seg: &'s Segment, pos: u64) -> Result<&'s std::sync::atomic::AtomicU64, RingError> {
        seg.u64_at(self.cell_at(pos)).ok_or(RingError::Layout)
    }

    /// Writes one cell: `cell` and `payload` (at most [`Ring::payload`] bytes; `cell.len`
    /// is set to its length), published to the consumer. Errors: [`RingError::Full`],
    /// nothing written; [`RingError::TooLong`]; [`RingError::Layout`].
    pub(crate) fn push(&self, seg: &Segment, cell: Cell, payload: &[u8]) -> Result<(), RingError> {
        if payload.len() > self.payload() {
            return Err(RingError::TooLong);
        }
        let tail = seg.u64_at(self.at).ok_or(RingError::Layout)?;
        let mut pos = tail.load(Ordering::Relaxed);
        // Producers that race for a cell retry a few times; a ring that never settles (a
        // broken or hostile owner) is reported full rather than spun on for ever.
        for tries in 0u32.. {
            if tries == 1 << 20 {
                return Err(RingError::Full);
            }
            let seq = self.seq(seg, pos)?.load(Ordering::Acquire);
            let ahead = seq.wrapping_sub(pos) as i64;
            if ahead == 0 {
                match tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(now) => pos = now,
                }
            } else if ahead < 0 {
                return Err(RingError::Full);
            } else {
                // Another producer took this position: try the next.
                pos = tail.load(Ordering::Relaxed);
            }
        }
        let at = self.cell_at(pos);
        let cell = Cell {
            len: payload.len() as u32,
            ..cell
        };
        seg.write(at + 8, &cell.encode()).ok_or(RingError::Layout)?;
        seg.write(at + CELL_HEAD, payload).ok_or(RingError::Layout)?;
        self.seq(seg, pos)?.store(pos.wrapping_add(1), Ordering::Release);
        Ok(())
    }
}

/// The consumer's side of a ring: the ring and the next position to read.
pub(crate) struct Reader {
    ring: Ring,
    head: u64,
}

impl Reader {
    /// The consumer of `ring` (made and [`Ring::init`]ed by this rank).
    pub(crate) fn new(ring: Ring) -> Reader {
        Reader { ring, head: 0 }
    }

    /// Whether the next cell is published.
    #[inline]
    pub(crate) fn ready(&self, seg: &Segment) -> bool {
        matches!(self.ring.seq(seg, self.head), Ok(s) if s.load(Ordering::Acquire) == self.head + 1)
    }

    /// The next published cell and its payload, read in place, without giving it back:
    /// `Ok(None)` when none is published. Errors: [`RingError::BadCell`] (a length above
    /// the cell's room; the cell stays), [`RingError::Layout`].
    #[inline]
    pub(crate) fn peek<'s>(&self, seg: &'s Segment) -> Result<Option<(Cell, &'s [u8])>, RingError> {
        if !self.ready(seg) {
            return Ok(None);
        }
        let at = self.ring.cell_at(self.head);
        let cell = Cell::decode(seg.bytes(at + 8, CELL_HEAD - 8).ok_or(RingError::Layout)?);
        if cell.len as usize > self.ring.payload() {
            return Err(RingError::BadCell);
        }
        let payload = seg
            .bytes(at + CELL_HEAD, cell.len as usize)
            .ok_or(RingError::Layout)?;
        Ok(Some((cell, payload)))
    }

    /// The position of the next cell to read.
    pub(crate) fn position(&self) -> u64 {
        self.head
    }

    /// The positions producers have claimed so far (published or still being written): a
    /// cell whose push happened before the caller's acquire of another cell is below it.
    pub(crate) fn claimed(&self, seg: &Segment) -> Result<u64, RingError> {
        Ok(seg
            .u64_at(self.ring.at)
            .ok_or(RingError::Layout)?
            .load(Ordering::Acquire))
    }

    /// Gives the cell [`Reader::peek`] returned back to the producers and moves on.
    #[inline]
    pub(crate) fn advance(&mut self, seg: &Segment) -> Result<(), RingError> {
        let pos = self.head;
        self.ring
            .seq(seg, pos)?
            .store(pos.wrapping_add(self.ring.depth), Ordering::Release);
        self.head += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(depth: usize, payload: usize) -> (Segment, Ring) {
        let seg = Segment::create("ballast-test-ring", 64 + Ring::bytes(depth, payload).unwrap()).unwrap();
        let ring = Ring::new(&seg, 64, depth, payload).unwrap();
        ring.init(&seg).unwrap();
        (seg, ring)
    }

    #[test]
    fn cells_come_out_in_order_with_their_headers_and_the_ring_refills() {
        let (seg, r) = ring(3, 100);
        assert_eq!(r.payload(), 128, "64 + 100 bytes round up to a 192-byte cell");
        let mut rd = Reader::new(r);
        assert_eq!(rd.peek(&seg).unwrap(), None);
        for round in 0..5u64 {
            for i in 0..3u64 {
                let c = Cell {
                    src: 7,
                    kind: 2,
                    more: i == 1,
                    tag: 40 + i as u32,
                    total: round * 10 + i,
                    offset: u64::MAX - i,
                    len: 0,
                };
                r.push(&seg, c, &vec![i as u8; 10 * i as usize + 1]).unwrap();
            }
            assert_eq!(
                r.push(&seg, Cell::default(), b"x"),
                Err(RingError::Full),
                "3 cells"
            );
            for i in 0..3u64 {
                let (c, p) = rd.peek(&seg).unwrap().unwrap();
                assert_eq!((c.src, c.kind, c.more, c.tag), (7, 2, i == 1, 40 + i as u32));
                assert_eq!(
                    (c.total, c.offset, c.len),
                    (round * 10 + i, u64::MAX - i, 10 * i as u32 + 1)
                );
                assert_eq!(p, &vec![i as u8; 10 * i as usize + 1][..]);
                rd.advance(&seg).unwrap();
            }
            assert_eq!(rd.peek(&seg).unwrap(), None);
        }
        assert_eq!(r.push(&seg, Cell::default(), &[0; 200]), Err(RingError::TooLong));
    }

    #[test]
    fn a_ring_outside_its_segment_is_refused() {
        let seg = Segment::create("ballast-test-ring", 4096).unwrap();
        assert!(Ring::new(&seg, 64, 1000, 64).is_none());
        assert!(Ring::new(&seg, 8, 1, 64).is_none(), "not 64-aligned");
        assert!(Ring::new(&seg, 0, 0, 64).is_none(), "no cells");
        assert!(Ring::new(&seg, 0, 1, 64).is_none(), "one cell");
        assert!(Ring::new(&seg, usize::MAX - 63, 1, 64).is_none());
        assert!(Ring::new(&seg, 0, usize::MAX / 2, 64).is_none());
    }

    #[test]
    fn a_cell_that_claims_more_than_its_room_is_refused_and_stays() {
        let (seg, r) = ring(2, 64);
        r.push(&seg, Cell::default(), b"ok").unwrap();
        // A hostile peer rewrites the length after publishing: 65 > 64.
        seg.write(64 + RING_HEAD + 8 + 24, &65u32.to_le_bytes()).unwrap();
        let rd = Reader::new(r);
        assert_eq!(rd.peek(&seg), Err(RingError::BadCell));
        assert_eq!(rd.peek(&seg), Err(RingError::BadCell));
    }

    #[test]
    fn many_producers_one_consumer_lose_nothing_and_keep_each_producers_order() {
        const PRODUCERS: u32 = 4;
        const EACH: u64 = 20_000;
        let (seg, r) = ring(16, 16);
        let seg = &seg;
        std::thread::scope(|s| {
            for src in 0..PRODUCERS {
                s.spawn(move || {
                    for i in 0..EACH {
                        let c = Cell {
                            src,
                            total: i,
                            ..Cell::default()
                        };
                        loop {
                            match r.push(seg, c, &i.to_le_bytes()) {
                                Ok(()) => break,
                                Err(RingError::Full) => std::thread::yield_now(),
                                Err(e) => panic!("{e:?}"),
                            }
                        }
                    }
                });
            }
            let mut rd = Reader::new(r);
            let mut next = [0u64; PRODUCERS as usize];
            let mut got = 0;
            while got < PRODUCERS as u64 * EACH {
                let Some((c, p)) = rd.peek(seg).unwrap() else {
                    std::thread::yield_now();
                    continue;
                };
                assert_eq!(c.total, next[c.src as usize], "producer {}'s order", c.src);
                assert_eq!(p, &c.total.to_le_bytes());
                next[c.src as usize] += 1;
                rd.advance(seg).unwrap();
                got += 1;
            }
            assert_eq!(next, [EACH; PRODUCERS as usize]);
        });
    }
}
