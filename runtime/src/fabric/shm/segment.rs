//! A rank's segment: a header that describes it, then its data ring (packets, `depth`
//! cells of `buffer_size` bytes: the shared receive queue) and its control ring (small
//! cells, no payload). Made by its rank ([`RankSegment::create`]), mapped by its peers from
//! the descriptor they fetched ([`RankSegment::open`], every number checked against the
//! segment's length).
//!
//! Header (bytes): `0..8` magic, `8..12` version, `12..16` rank, `16..24` data cells,
//! `24..32` data payload bytes per cell, `32..40` control cells; the data ring at
//! [`SEG_HEAD`], the control ring after it (64-byte aligned).

use super::ffi::{Segment, SegmentError};
use super::ring::Ring;

const MAGIC: u64 = u64::from_le_bytes(*b"BLSTSEG1");
const VERSION: u32 = 1;
/// Bytes of the header, before the data ring.
pub(crate) const SEG_HEAD: usize = 64;

/// A mapped rank segment and its two rings.
pub(crate) struct RankSegment {
    pub seg: Segment,
    pub data: Ring,
    pub control: Ring,
}

/// The two rings' places for `data_depth` cells of `payload` bytes and `control_depth`
/// control cells; the segment's length.
fn layout(data_depth: usize, payload: usize, control_depth: usize) -> Option<(usize, usize)> {
    let control_at = SEG_HEAD.checked_add(Ring::bytes(data_depth, payload)?)?;
    let len = control_at.checked_add(Ring::bytes(control_depth, 0)?)?;
    Some((control_at, len))
}

impl RankSegment {
    /// A new segment of `rank`, named `name`, with its rings made empty. Errors: the
    /// segment's; [`SegmentError::Refused`] for sizes that do not fit.
    pub(crate) fn create(
        name: &str,
        rank: usize,
        data_depth: usize,
        payload: usize,
        control_depth: usize,
    ) -> Result<RankSegment, SegmentError> {
        let sizes = || format!("{data_depth} cells of {payload} bytes and {control_depth} control cells");
        let (control_at, len) =
            layout(data_depth, payload, control_depth).ok_or_else(|| SegmentError::Refused(sizes()))?;
        let seg = Segment::create(name, len)?;
        let mut head = [0u8; 40];
        head[..8].copy_from_slice(&MAGIC.to_le_bytes());
        head[8..12].copy_from_slice(&VERSION.to_le_bytes());
        head[12..16].copy_from_slice(&(rank as u32).to_le_bytes());
        head[16..24].copy_from_slice(&(data_depth as u64).to_le_bytes());
        head[24..32].copy_from_slice(&(payload as u64).to_le_bytes());
        head[32..40].copy_from_slice(&(control_depth as u64).to_le_bytes());
        seg.write(0, &head)
            .ok_or_else(|| SegmentError::Refused(sizes()))?;
        let data =
            Ring::new(&seg, SEG_HEAD, data_depth, payload).ok_or_else(|| SegmentError::Refused(sizes()))?;
        let control =
            Ring::new(&seg, control_at, control_depth, 0).ok_or_else(|| SegmentError::Refused(sizes()))?;
        for r in [&data, &control] {
            r.init(&seg)
                .map_err(|e| SegmentError::Refused(format!("{}: {e:?}", sizes())))?;
        }
        Ok(RankSegment { seg, data, control })
    }

    /// Rank `rank`'s segment from the descriptor it passed: its header read and checked
    /// (magic, version, rank), and its rings within its length. Errors:
    /// [`SegmentError::Refused`] naming what does not match, the mapping's.
    pub(crate) fn open(fd: std::os::fd::OwnedFd, rank: usize) -> Result<RankSegment, SegmentError> {
        let seg = Segment::open(fd, SEG_HEAD)?;
        let h = seg
            .bytes(0, 40)
            .ok_or_else(|| SegmentError::Refused("no header".into()))?;
        let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap_or_default());
        let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().unwrap_or_default());
        let (magic, version, owner) = (u64_at(0), u32_at(8), u32_at(12) as usize);
        if magic != MAGIC || version != VERSION || owner != rank {
            return Err(SegmentError::Refused(format!(
                "not rank {rank}'s segment (magic {magic:#x}, version {version}, rank {owner})"
            )));
        }
        let big = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        let (data_depth, payload, control_depth) = (big(u64_at(16)), big(u64_at(24)), big(u64_at(32)));
        let bad = || {
            SegmentError::Refused(format!(
                "rank {rank}'s rings ({data_depth} cells of {payload} bytes, {control_depth} control cells) \
                 do not fit its {} bytes",
                seg.len()
            ))
        };
        let (control_at, _) = layout(data_depth, payload, control_depth).ok_or_else(bad)?;
        let data = Ring::new(&seg, SEG_HEAD, data_depth, payload).ok_or_else(bad)?;
        let control = Ring::new(&seg, control_at, control_depth, 0).ok_or_else(bad)?;
        Ok(RankSegment { seg, data, control })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_maps_the_rings_its_owner_made_and_refuses_a_lie() {
        let own = RankSegment::create("ballast-test-seg", 5, 4, 1000, 8).unwrap();
        assert_eq!(own.seg.len(), 64 + (64 + 4 * 1088) + (64 + 8 * 64));
        // The model's size of a segment (with the fabric's control ring) is the real one.
        for (depth, b) in [(2, 64), (8, 1000), (512, 8192), (3, 0)] {
            let real = RankSegment::create(
                "ballast-test-seg",
                0,
                depth,
                b,
                super::super::fabric::CONTROL_DEPTH,
            )
            .unwrap()
            .seg
            .len();
            assert_eq!(
                Some(real as u64),
                crate::fabric::sizes::shm_segment_bytes(depth as u64, b as u64)
            );
        }
        let fd = || own.seg.fd().unwrap().try_clone_to_owned().unwrap();
        let peer = RankSegment::open(fd(), 5).unwrap();
        assert_eq!((peer.data.payload(), peer.control.payload()), (1024, 0));
        let e = RankSegment::open(fd(), 4).err().unwrap().to_string();
        assert!(e.contains("not rank 4's segment"), "{e}");
        // The owner claims more cells than its segment holds: refused, nothing read past it.
        own.seg.write(16, &(1u64 << 40).to_le_bytes()).unwrap();
        let e = RankSegment::open(fd(), 5).err().unwrap().to_string();
        assert!(e.contains("do not fit"), "{e}");
    }
}
