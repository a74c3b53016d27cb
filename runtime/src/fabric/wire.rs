//! The wire codec shared by the transports that put bytes on a network (MPI, verbs): the
//! 32-byte packet header, the 9-byte control message, and the trailer of control
//! messages that ride after a packet's payload. One layout, little-endian throughout:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | [`PacketHeader::src`] (u32) |
//! | 4..8 | [`PacketHeader::tag`] (u32) |
//! | 8..16 | [`PacketHeader::total`] (u64) |
//! | 16..24 | [`PacketHeader::offset`] (u64) |
//! | 24..28 | [`PacketHeader::len`] (u32) |
//! | 28 | [`PacketHeader::more`] (0 or 1) |
//! | 29 | [`HeaderExtra::kind`] ([`KIND_DATA`], [`KIND_CONTROL`], [`KIND_DIRECT`], [`KIND_DATAGRAM`]) |
//! | 30 | [`HeaderExtra::code`]: a control message's code ([`Control::encode`]) |
//! | 31 | [`HeaderExtra::riders`]: control messages in the trailer |
//!
//! The two fabrics differ only in bytes 29–31, the [`HeaderExtra`] parameter: the verbs
//! fabric sends data packets only (its controls ride as immediate data or go on its
//! control channel) and writes [`HeaderExtra::DATA`] (all three zero), ignoring them on
//! receipt; the MPI fabric uses all three (a control message travels as a header of kind
//! [`KIND_CONTROL`] whose `total` is the control's value, see [`control_header`]). A
//! control message in the trailer is its code (u8) then its value (u64), [`CONTROL_BYTES`].
//!
//! Every message of a collective (on every transport, the MPI native path included) ends
//! with its 16-byte stamp ([`encode_stamp`], read by `protocol::collective`): the
//! collective's number on its communicator (u64, from 1), its step (u32), its kind (u8),
//! then three zero bytes.

use crate::fabric::error::{FabricError, Result, Sender};
use crate::fabric::{Control, ControlWord, PacketHeader};

/// Bytes of the packet header.
pub const HEADER_BYTES: usize = 32;
/// Bytes of one control message in a trailer (code u8, value u64).
pub const CONTROL_BYTES: usize = 9;
/// Header kind: a data packet (header, payload, trailer).
pub const KIND_DATA: u8 = 0;
/// Header kind: a control message in the header itself (code in byte 30, value in `total`).
pub const KIND_CONTROL: u8 = 1;
/// Header kind: the announcement of a message sent on a transport's direct path.
pub const KIND_DIRECT: u8 = 2;
/// Header kind: a datagram of the connectionless path (its bytes as the payload, `len` of
/// them; `protocol::datagram` reads them).
pub const KIND_DATAGRAM: u8 = 3;

/// Bytes 29..32 of the header: what the packet is and how many controls ride on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeaderExtra {
    /// [`KIND_DATA`], [`KIND_CONTROL`] or [`KIND_DIRECT`].
    pub kind: u8,
    /// The control code of a [`KIND_CONTROL`] header, else 0.
    pub code: u8,
    /// Control messages in the trailer after the payload.
    pub riders: u8,
}

impl HeaderExtra {
    /// A data packet without riders: bytes 29..32 all zero (the verbs fabric's header).
    pub const DATA: HeaderExtra = HeaderExtra {
        kind: KIND_DATA,
        code: 0,
        riders: 0,
    };
}

/// A header as read from its 32 bytes ([`decode_header`]): the protocol's part and bytes
/// 29..32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireHeader {
    /// Bytes 0..29: the packet header the protocol reads.
    pub header: PacketHeader,
    /// Bytes 29..32.
    pub extra: HeaderExtra,
}

/// The header's 32 bytes.
#[inline]
pub fn encode_header(h: &PacketHeader, extra: HeaderExtra) -> [u8; HEADER_BYTES] {
    let mut b = [0u8; HEADER_BYTES];
    b[0..4].copy_from_slice(&h.src.to_le_bytes());
    b[4..8].copy_from_slice(&h.tag.to_le_bytes());
    b[8..16].copy_from_slice(&h.total.to_le_bytes());
    b[16..24].copy_from_slice(&h.offset.to_le_bytes());
    b[24..28].copy_from_slice(&h.len.to_le_bytes());
    b[28] = h.more as u8;
    b[29] = extra.kind;
    b[30] = extra.code;
    b[31] = extra.riders;
    b
}

/// Inverse of [`encode_header`] (any non-zero byte 28 is `more`).
#[inline]
pub fn decode_header(b: &[u8; HEADER_BYTES]) -> WireHeader {
    let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
    let h = PacketHeader {
        src: u32_at(0),
        tag: u32_at(4),
        total: u64_at(8),
        offset: u64_at(16),
        len: u32_at(24),
        more: b[28] != 0,
    };
    WireHeader {
        header: h,
        extra: HeaderExtra {
            kind: b[29],
            code: b[30],
            riders: b[31],
        },
    }
}

/// The header of control message `c` from rank `src` sent on its own (kind
/// [`KIND_CONTROL`]): its value in `total`, its code in byte 30; the other fields zero.
#[inline]
pub fn control_header(src: u32, c: Control, riders: u8) -> WireHeader {
    let ControlWord { code, value } = c.encode();
    let h = PacketHeader {
        src,
        tag: 0,
        total: value,
        offset: 0,
        len: 0,
        more: false,
    };
    WireHeader {
        header: h,
        extra: HeaderExtra {
            kind: KIND_CONTROL,
            code,
            riders,
        },
    }
}

/// The control message of a [`KIND_CONTROL`] header. Errors: [`FabricError::ControlDecode`].
#[inline]
pub fn header_control(h: &PacketHeader, extra: HeaderExtra) -> Result<Control> {
    Control::decode(extra.code, h.total)
}

/// One control message's trailer bytes.
#[inline]
pub fn encode_control(c: Control) -> [u8; CONTROL_BYTES] {
    let ControlWord { code, value } = c.encode();
    let mut b = [0u8; CONTROL_BYTES];
    b[0] = code;
    b[1..].copy_from_slice(&value.to_le_bytes());
    b
}

/// Inverse of [`encode_control`]. Errors: [`FabricError::ControlDecode`].
#[inline]
pub fn decode_control(b: &[u8; CONTROL_BYTES]) -> Result<Control> {
    Control::decode(b[0], u64::from_le_bytes(b[1..].try_into().expect("8 bytes")))
}

/// A received packet, split: header, payload and trailer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The header.
    pub header: PacketHeader,
    /// Bytes 29..32 of the header.
    pub extra: HeaderExtra,
    /// The payload (`header.len` bytes for [`KIND_DATA`], else empty).
    pub payload: &'a [u8],
    /// The trailer: `extra.riders` control messages of [`CONTROL_BYTES`].
    pub trailer: &'a [u8],
}

impl Packet<'_> {
    /// The control messages of the trailer, in order. Errors: [`FabricError::ControlDecode`].
    pub fn riders(&self) -> impl Iterator<Item = Result<Control>> + '_ {
        self.trailer
            .chunks_exact(CONTROL_BYTES)
            .map(|c| decode_control(c.try_into().expect("CONTROL_BYTES")))
    }
}

/// Splits the packet `b` received by rank `rank` from `from`, checking that its length is
/// the header's, its payload's (data packets only) and its trailer's, with at most
/// `max_riders` controls. Errors: [`FabricError::BadPacket`] otherwise.
pub fn split_packet(b: &[u8], max_riders: usize, rank: usize, from: Sender) -> Result<Packet<'_>> {
    let bad = |what: String| FabricError::BadPacket {
        rank,
        from,
        bytes: b.len(),
        what,
    };
    let Some(head) = b.first_chunk::<HEADER_BYTES>() else {
        return Err(bad(format!("shorter than the {HEADER_BYTES}-byte header")));
    };
    let WireHeader { header, extra } = decode_header(head);
    let len = if extra.kind == KIND_DATA || extra.kind == KIND_DATAGRAM {
        header.len as usize
    } else {
        0
    };
    let riders = extra.riders as usize;
    if riders > max_riders || HEADER_BYTES + len + riders * CONTROL_BYTES != b.len() {
        return Err(bad(format!(
            "announces {len} payload bytes and {riders} controls (at most {max_riders})"
        )));
    }
    let end = HEADER_BYTES + len;
    Ok(Packet {
        header,
        extra,
        payload: &b[HEADER_BYTES..end],
        trailer: &b[end..],
    })
}

/// Bytes of a collective's stamp, at the end of each of its messages.
pub const STAMP_BYTES: usize = 16;

/// A collective's stamp, as read from its bytes ([`decode_stamp`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The collective's kind (`protocol::collective::CollectiveKind`'s code).
    pub kind: u8,
    /// The collective's number on its communicator, from 1.
    pub seq: u64,
    /// The step of the collective the message belongs to.
    pub step: u32,
}

/// A collective's stamp: `seq` (bytes 0..8), `step` (8..12), `kind` (12), then zeros.
#[inline]
pub fn encode_stamp(kind: u8, seq: u64, step: u32) -> [u8; STAMP_BYTES] {
    let mut b = [0u8; STAMP_BYTES];
    b[0..8].copy_from_slice(&seq.to_le_bytes());
    b[8..12].copy_from_slice(&step.to_le_bytes());
    b[12] = kind;
    b
}

/// Inverse of [`encode_stamp`], or `None` when bytes 13..16 are not zero (not a stamp).
#[inline]
pub fn decode_stamp(b: &[u8; STAMP_BYTES]) -> Option<Stamp> {
    if b[13..] != [0, 0, 0] {
        return None;
    }
    let seq = u64::from_le_bytes(b[0..8].try_into().expect("8 bytes"));
    let step = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
    Some(Stamp {
        kind: b[12],
        seq,
        step,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_golden_bytes() {
        let golden: [u8; STAMP_BYTES] = [
            0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // seq
            0x0d, 0x0c, 0x0b, 0x0a, // step
            2,    // kind
            0, 0, 0,
        ];
        assert_eq!(encode_stamp(2, 0x0102_0304_0506_0708, 0x0a0b_0c0d), golden);
        assert_eq!(
            decode_stamp(&golden),
            Some(Stamp {
                kind: 2,
                seq: 0x0102_0304_0506_0708,
                step: 0x0a0b_0c0d
            })
        );
        let mut bad = golden;
        bad[15] = 1;
        assert_eq!(decode_stamp(&bad), None, "not a stamp");
        assert_eq!(
            encode_stamp(1, 1, 0),
            [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]
        );
    }

    fn sample() -> PacketHeader {
        PacketHeader {
            src: 7,
            tag: 0x7fff_fffe,
            total: 1 << 40,
            offset: 12345,
            len: 8192,
            more: true,
        }
    }

    /// The bytes both fabrics put on the wire for `sample()` (taken from their codecs
    /// before this one replaced them): verbs with bytes 29..32 zero, MPI with kind,
    /// control code and rider count there.
    const GOLDEN_DATA: [u8; 32] = [
        7, 0, 0, 0, // src
        0xfe, 0xff, 0xff, 0x7f, // tag
        0, 0, 0, 0, 0, 1, 0, 0, // total = 2^40
        0x39, 0x30, 0, 0, 0, 0, 0, 0, // offset = 12345
        0, 0x20, 0, 0, // len = 8192
        1, 0, 0, 0, // more, kind data, code 0, no riders
    ];

    #[test]
    fn header_golden_bytes_verbs_form() {
        assert_eq!(encode_header(&sample(), HeaderExtra::DATA), GOLDEN_DATA);
        assert_eq!(
            decode_header(&GOLDEN_DATA),
            WireHeader {
                header: sample(),
                extra: HeaderExtra::DATA
            }
        );
    }

    #[test]
    fn header_golden_bytes_mpi_form() {
        let extra = HeaderExtra {
            kind: KIND_CONTROL,
            code: 3,
            riders: 5,
        };
        let mut golden = GOLDEN_DATA;
        golden[29..32].copy_from_slice(&[1, 3, 5]);
        assert_eq!(encode_header(&sample(), extra), golden);
        assert_eq!(
            decode_header(&golden),
            WireHeader {
                header: sample(),
                extra
            }
        );
        // `more` is any non-zero byte.
        golden[28] = 0xff;
        assert!(decode_header(&golden).header.more);
    }

    #[test]
    fn control_golden_bytes() {
        assert_eq!(
            encode_control(Control::Grant { credits: 0x0102_0304 }),
            [3, 4, 3, 2, 1, 0, 0, 0, 0]
        );
        assert_eq!(
            encode_control(Control::Close { sent: u64::MAX - 1 }),
            [2, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(encode_control(Control::Revoke), [5, 0, 0, 0, 0, 0, 0, 0, 0]);
        for c in [
            Control::ConnectReq { grant: 5 },
            Control::ConnectAck { grant: 0 },
            Control::Close { sent: u64::MAX - 1 },
            Control::Grant { credits: u32::MAX },
            Control::CreditRequest,
            Control::Revoke,
            Control::Return { credits: 9 },
        ] {
            assert_eq!(decode_control(&encode_control(c)).unwrap(), c);
        }
        assert!(matches!(
            decode_control(&[9, 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(FabricError::ControlDecode { code: 9, .. })
        ));
        assert!(matches!(
            decode_control(&[0, 0, 0, 0, 0, 2, 0, 0, 0]),
            Err(FabricError::ControlDecode {
                code: 0,
                value: 0x2_0000_0000,
                ..
            })
        ));
    }

    #[test]
    fn control_header_carries_the_value_in_total() {
        let WireHeader { header: h, extra } = control_header(4, Control::Close { sent: 77 }, 2);
        let b = encode_header(&h, extra);
        assert_eq!(&b[..4], &[4, 0, 0, 0]);
        assert_eq!(&b[8..16], &77u64.to_le_bytes());
        assert_eq!(&b[29..32], &[KIND_CONTROL, 2, 2]);
        let WireHeader {
            header: h2,
            extra: e2,
        } = decode_header(&b);
        assert_eq!(header_control(&h2, e2).unwrap(), Control::Close { sent: 77 });
    }

    #[test]
    fn split_packet_checks_lengths() {
        let mut h = sample();
        h.len = 3;
        let extra = HeaderExtra {
            kind: KIND_DATA,
            code: 0,
            riders: 2,
        };
        let mut b = encode_header(&h, extra).to_vec();
        b.extend_from_slice(b"abc");
        b.extend_from_slice(&encode_control(Control::Grant { credits: 4 }));
        b.extend_from_slice(&encode_control(Control::CreditRequest));
        let p = split_packet(&b, 16, 0, Sender::Rank(7)).unwrap();
        assert_eq!((p.header, p.extra, p.payload), (h, extra, &b"abc"[..]));
        let riders: Vec<Control> = p.riders().map(|c| c.unwrap()).collect();
        assert_eq!(riders, [Control::Grant { credits: 4 }, Control::CreditRequest]);
        // Too many riders for the limit, a truncated trailer, a short header.
        let e = split_packet(&b, 1, 2, Sender::MpiProcess(1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "protocol error: rank 2: packet of 53 bytes from MPI process 1: announces 3 payload bytes and 2 controls (at most 1)"
        );
        assert!(split_packet(&b[..b.len() - 1], 16, 0, Sender::Rank(7)).is_err());
        assert!(split_packet(&b[..31], 16, 0, Sender::Rank(7))
            .unwrap_err()
            .to_string()
            .contains("shorter than the 32-byte header"));
        // A control header has no payload whatever `len` says.
        let WireHeader {
            header: ch,
            extra: ce,
        } = control_header(1, Control::Revoke, 0);
        let mut cb = encode_header(&PacketHeader { len: 99, ..ch }, ce);
        let p = split_packet(&cb, 16, 0, Sender::Rank(1)).unwrap();
        assert!(p.payload.is_empty() && p.trailer.is_empty());
        cb[29] = KIND_DATA;
        assert!(split_packet(&cb, 16, 0, Sender::Rank(1)).is_err());
    }
}
