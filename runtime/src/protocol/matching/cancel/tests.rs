//! Unit tests of withdrawn receives (issue 33: a receive withdrawn mid-message lost its
//! message): the message bound to it goes back in its place.

use super::super::*;

fn hdr(src: u32, tag: Tag, total: u64, offset: u64, len: u32) -> PacketHeader {
    PacketHeader {
        src,
        tag,
        total,
        offset,
        len,
        more: offset + u64::from(len) < total,
    }
}

fn req(n: u64) -> RequestId {
    RequestId::new(n)
}

/// Feeds a chunk with receive `r`'s buffer `buf` lent.
fn lend(m: &mut Matcher, r: u64, h: &PacketHeader, p: &[u8], buf: &mut [u8]) {
    m.on_chunk_into(h, p, Some(&mut RecvInto { req: req(r), buf }))
        .unwrap()
}

#[test]
fn a_message_half_arrived_goes_to_the_next_receive() {
    for (src, tag) in [(Source::Rank(1), TagMatch::Tag(5)), (Source::Any, TagMatch::Any)] {
        let mut m = Matcher::default();
        m.post(req(1), src, tag);
        m.on_chunk(&hdr(1, 5, 4, 0, 2), &[1, 2]).unwrap();
        m.cancel(req(1), None).unwrap();
        m.on_chunk(&hdr(1, 5, 4, 2, 2), &[3, 4]).unwrap();
        assert!(!m.is_complete(req(1)), "the withdrawn receive completed");
        m.post(req(2), src, tag);
        assert_eq!(
            m.take_completed(req(2)),
            Some(Message {
                source: 1,
                tag: 5,
                data: vec![1, 2, 3, 4]
            }),
            "{src:?} {tag:?}: the message bound to the withdrawn receive was lost"
        );
        assert_eq!(m.take_completed(req(1)), None);
    }
}

#[test]
fn a_receive_posted_after_the_withdrawal_binds_before_the_rest_arrives() {
    let mut m = Matcher::default();
    m.post(req(1), Source::Rank(1), TagMatch::Tag(5));
    m.on_chunk(&hdr(1, 5, 6, 0, 2), &[1, 2]).unwrap();
    m.cancel(req(1), None).unwrap();
    m.post(req(2), Source::Any, TagMatch::Tag(5));
    assert!(!m.is_complete(req(2)), "4 bytes still to come");
    m.on_chunk(&hdr(1, 5, 6, 2, 2), &[3, 4]).unwrap();
    m.on_chunk(&hdr(1, 5, 6, 4, 2), &[5, 6]).unwrap();
    assert_eq!(m.take_completed(req(2)).unwrap().data, vec![1, 2, 3, 4, 5, 6]);
}

#[test]
fn a_complete_message_not_taken_goes_back_before_later_ones() {
    let mut m = Matcher::default();
    m.post(req(1), Source::Rank(1), TagMatch::Tag(5));
    m.on_chunk(&hdr(1, 5, 1, 0, 1), b"A").unwrap();
    assert!(m.is_complete(req(1)));
    m.on_chunk(&hdr(1, 5, 1, 0, 1), b"B").unwrap();
    m.on_whole(&hdr(1, 5, 1, 0, 0), b"C".to_vec()).unwrap();
    // Another completed receive, taken after: its message stays its own.
    m.post(req(9), Source::Rank(2), TagMatch::Any);
    m.on_chunk(&hdr(2, 1, 1, 0, 1), b"Z").unwrap();
    m.cancel(req(1), None).unwrap();
    assert!(!m.is_complete(req(1)));
    assert_eq!(m.take_completed(req(1)), None);
    m.post(req(2), Source::Rank(1), TagMatch::Tag(5));
    assert_eq!(
        m.take_completed(req(2)).unwrap().data,
        b"A",
        "first of its source and tag"
    );
    assert_eq!(m.try_take(Source::Rank(1), TagMatch::Tag(5)).unwrap().data, b"B");
    assert_eq!(m.try_take(Source::Any, TagMatch::Any).unwrap().data, b"C");
    assert_eq!(m.take_completed(req(9)).unwrap().data, b"Z");
}

#[test]
fn two_messages_of_one_source_and_tag_keep_their_order() {
    // The first bound to the withdrawn receive mid-message, the second queued after it.
    let mut m = Matcher::default();
    m.post(req(1), Source::Rank(3), TagMatch::Tag(7));
    m.on_chunk(&hdr(3, 7, 3, 0, 1), b"f").unwrap();
    m.cancel(req(1), None).unwrap();
    m.on_chunk(&hdr(3, 7, 3, 1, 2), b"ir").unwrap();
    m.on_chunk(&hdr(3, 7, 6, 0, 3), b"sec").unwrap();
    m.on_chunk(&hdr(3, 7, 6, 3, 3), b"ond").unwrap();
    m.post(req(2), Source::Rank(3), TagMatch::Tag(7));
    m.post(req(3), Source::Rank(3), TagMatch::Tag(7));
    assert_eq!(m.take_completed(req(2)).unwrap().data, b"fir");
    assert_eq!(m.take_completed(req(3)).unwrap().data, b"second");
}

#[test]
fn an_any_source_message_goes_back_before_a_later_arrival_of_another_source() {
    let mut m = Matcher::default();
    m.post(req(1), Source::Any, TagMatch::Any);
    m.on_chunk(&hdr(1, 4, 2, 0, 1), b"a").unwrap();
    m.on_chunk(&hdr(2, 4, 1, 0, 1), b"c").unwrap();
    m.cancel(req(1), None).unwrap();
    m.post(req(2), Source::Any, TagMatch::Any);
    assert!(!m.is_complete(req(2)), "bound to the earlier, incomplete message");
    m.on_chunk(&hdr(1, 4, 2, 1, 1), b"b").unwrap();
    assert_eq!(m.take_completed(req(2)).unwrap().data, b"ab");
    assert_eq!(m.try_take(Source::Any, TagMatch::Any).unwrap().data, b"c");
}

#[test]
fn the_message_goes_to_the_earliest_receive_already_posted_that_accepts_it() {
    let mut m = Matcher::default();
    m.post(req(1), Source::Rank(1), TagMatch::Tag(5));
    m.post(req(2), Source::Rank(2), TagMatch::Any);
    m.post_within(req(3), Source::Any, TagMatch::Tag(5), 2);
    m.post(req(4), Source::Any, TagMatch::Any);
    m.on_chunk(&hdr(1, 5, 4, 0, 2), &[1, 2]).unwrap();
    m.cancel(req(1), None).unwrap();
    // Receive 3 is the earliest that accepts it, but holds 2 bytes: refused, as at an
    // arrival, and the message is queued (receive 4 is not looked at, as at an arrival).
    assert_eq!(
        m.take_refused(req(3)),
        Some(Envelope {
            source: 1,
            tag: 5,
            len: 4
        })
    );
    m.on_chunk(&hdr(1, 5, 4, 2, 2), &[3, 4]).unwrap();
    assert!(!m.is_complete(req(4)));
    assert_eq!(
        m.try_take(Source::Rank(1), TagMatch::Any).unwrap().data,
        vec![1, 2, 3, 4]
    );
    // Bound to receive 4 (the earliest that accepts it), then given back: receive 5,
    // posted since, takes it, rest and all.
    m.on_chunk(&hdr(1, 6, 2, 0, 1), &[8]).unwrap();
    m.post(req(5), Source::Rank(1), TagMatch::Tag(6));
    m.cancel(req(4), None).unwrap();
    m.on_chunk(&hdr(1, 6, 2, 1, 1), &[9]).unwrap();
    assert_eq!(m.take_completed(req(5)).map(|m| m.data), Some(vec![8, 9]));
    assert!(!m.is_complete(req(4)));
    assert!(!m.is_complete(req(2)));
}

#[test]
fn what_a_lent_buffer_holds_is_copied_back_mid_message() {
    let mut m = Matcher::default();
    let mut buf = [0u8; 8];
    m.post_within(req(1), Source::Rank(2), TagMatch::Tag(5), buf.len());
    lend(&mut m, 1, &hdr(2, 5, 5, 0, 2), &[1, 2], &mut buf);
    // A later message of the same tag from another source, queued after it.
    m.on_chunk(&hdr(4, 5, 1, 0, 1), &[7]).unwrap();
    m.cancel(req(1), Some(&buf)).unwrap();
    // The buffer is the caller's again: what it writes there is not the message.
    buf.fill(0xEE);
    lend(&mut m, 1, &hdr(2, 5, 5, 2, 3), &[3, 4, 5], &mut buf);
    assert_eq!(buf, [0xEE; 8], "written into the withdrawn receive's buffer");
    assert_eq!(m.take_into_done(req(1)), None);
    m.post(req(2), Source::Any, TagMatch::Tag(5));
    assert_eq!(
        m.take_completed(req(2)),
        Some(Message {
            source: 2,
            tag: 5,
            data: vec![1, 2, 3, 4, 5]
        })
    );
    m.post(req(3), Source::Any, TagMatch::Tag(5));
    assert_eq!(m.take_completed(req(3)).unwrap().data, vec![7]);
}

#[test]
fn a_message_all_in_a_lent_buffer_is_copied_back_in_its_place() {
    // Whole in its first chunk, and in three chunks.
    for chunks in [&[(0, 4)][..], &[(0, 1), (1, 3), (3, 4)][..]] {
        let mut m = Matcher::default();
        let mut buf = [0u8; 4];
        let data = *b"wxyz";
        m.on_chunk(&hdr(1, 5, 1, 0, 1), b"0").unwrap();
        m.post_within(req(1), Source::Any, TagMatch::Tag(6), buf.len());
        for &(from, to) in chunks {
            let h = hdr(1, 6, 4, from as u64, (to - from) as u32);
            lend(&mut m, 1, &h, &data[from..to], &mut buf);
        }
        m.on_chunk(&hdr(1, 6, 1, 0, 1), b"9").unwrap();
        // The wait failed before it took the message (`take_into_done`).
        m.cancel(req(1), Some(&buf)).unwrap();
        assert_eq!(m.take_into_done(req(1)), None, "ended");
        buf.fill(0);
        assert_eq!(m.try_take(Source::Any, TagMatch::Tag(5)).unwrap().data, b"0");
        assert_eq!(m.try_take(Source::Any, TagMatch::Tag(6)).unwrap().data, b"wxyz");
        assert_eq!(m.try_take(Source::Any, TagMatch::Tag(6)).unwrap().data, b"9");
    }
}

#[test]
fn bytes_in_a_buffer_not_given_back_drop_the_message_with_an_error() {
    let mut m = Matcher::default();
    let mut buf = [0u8; 8];
    m.post_within(req(1), Source::Rank(2), TagMatch::Tag(5), buf.len());
    lend(&mut m, 1, &hdr(2, 5, 5, 0, 2), &[1, 2], &mut buf);
    let err = m.cancel(req(1), None).unwrap_err();
    assert!(
        matches!(
            err,
            Error::BadChunk {
                peer: 2,
                tag: 5,
                total: 5,
                offset: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("dropped"), "{err}");
    // The rest of it is not kept; the next message of that source is whole.
    m.on_chunk(&hdr(2, 5, 5, 2, 3), &[3, 4, 5]).unwrap();
    assert_eq!(m.peek(Source::Any, TagMatch::Any), None);
    m.on_chunk(&hdr(2, 5, 1, 0, 1), &[6]).unwrap();
    assert_eq!(m.try_take(Source::Any, TagMatch::Any).unwrap().data, vec![6]);
    assert_eq!(m.unexpected_bytes(), 0);
}
