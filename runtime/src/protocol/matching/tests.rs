//! Unit tests of tag matching and reassembly.

use super::*;

fn hdr(src: u32, tag: Tag, total: u64, offset: u64, len: u32) -> PacketHeader {
    PacketHeader {
        src,
        tag,
        total,
        offset,
        len,
        more: false,
    }
}

#[test]
fn peek_tells_what_try_take_takes_and_leaves_it() {
    let mut m = Matcher::default();
    m.on_chunk(&hdr(1, 4, 4, 0, 2), &[1, 2]).unwrap();
    m.on_chunk(&hdr(2, 5, 3, 0, 3), &[7, 8, 9]).unwrap();
    assert_eq!(
        m.peek(Source::Any, TagMatch::Any),
        None,
        "incomplete earliest match"
    );
    let e = Envelope {
        source: 2,
        tag: 5,
        len: 3,
    };
    assert_eq!(m.peek(Source::Rank(2), TagMatch::Any), Some(e));
    assert_eq!(m.peek(Source::Any, TagMatch::Tag(5)), Some(e), "peeking twice");
    assert_eq!(m.peek(Source::Rank(3), TagMatch::Any), None);
    assert_eq!(
        m.try_take(Source::Any, TagMatch::Tag(5)).unwrap().data,
        vec![7, 8, 9]
    );
    assert_eq!(m.peek(Source::Any, TagMatch::Tag(5)), None, "taken");
    m.on_chunk(&hdr(1, 4, 4, 2, 2), &[3, 4]).unwrap();
    let e = m.peek(Source::Any, TagMatch::Any).unwrap();
    assert_eq!((e.source, e.tag, e.len), (1, 4, 4));
    assert_eq!(m.try_take(Source::Any, TagMatch::Any).unwrap().data.len(), e.len);
}

#[test]
fn a_limited_receive_refuses_a_longer_message_and_leaves_it_in_place() {
    let env = |source, tag, len| Envelope { source, tag, len };
    let mut m = Matcher::default();
    // Posted first, then a longer message arrives (in two chunks): refused at its
    // first chunk; it is assembled as unexpected.
    m.post_within(RequestId::new(1), Source::Any, TagMatch::Any, 3);
    m.on_chunk(&hdr(2, 5, 4, 0, 2), &[1, 2]).unwrap();
    assert!(!m.is_complete(RequestId::new(1)));
    assert_eq!(m.take_refused(RequestId::new(1)), Some(env(2, 5, 4)));
    assert_eq!(m.take_refused(RequestId::new(1)), None, "told once");
    m.on_chunk(&hdr(2, 5, 4, 2, 2), &[3, 4]).unwrap();
    // A later message of the same source that would fit does not overtake it.
    m.on_chunk(&hdr(2, 6, 1, 0, 1), &[9]).unwrap();
    m.post_within(RequestId::new(2), Source::Rank(2), TagMatch::Any, 3);
    assert_eq!(
        m.take_refused(RequestId::new(2)),
        Some(env(2, 5, 4)),
        "refused while unexpected too"
    );
    assert_eq!(
        m.peek(Source::Any, TagMatch::Any),
        Some(env(2, 5, 4)),
        "still first"
    );
    // Exactly the limit fits; then the refused message goes to a receive without one.
    m.post_within(RequestId::new(3), Source::Any, TagMatch::Tag(6), 1);
    assert_eq!(m.take_completed(RequestId::new(3)).unwrap().data, vec![9]);
    m.post(RequestId::new(4), Source::Any, TagMatch::Any);
    assert_eq!(
        m.take_completed(RequestId::new(4)).unwrap().data,
        vec![1, 2, 3, 4]
    );
    // An earlier receive without a limit takes a long message before a limited one.
    m.post(RequestId::new(5), Source::Rank(2), TagMatch::Tag(7));
    m.post_within(RequestId::new(6), Source::Any, TagMatch::Any, 0);
    m.on_chunk(&hdr(2, 7, 2, 0, 2), &[5, 6]).unwrap();
    assert_eq!(m.take_completed(RequestId::new(5)).unwrap().data, vec![5, 6]);
    assert_eq!(m.take_refused(RequestId::new(6)), None);
    m.on_chunk(&hdr(3, 1, 0, 0, 0), &[]).unwrap();
    assert_eq!(
        m.take_completed(RequestId::new(6)).unwrap().data,
        Vec::<u8>::new(),
        "0 bytes into 0"
    );
    // A withdrawn receive (its wait failed) binds nothing more: the message stays
    // unexpected for the next receive.
    m.post_within(RequestId::new(7), Source::Any, TagMatch::Any, 8);
    m.cancel(RequestId::new(7), None).unwrap();
    m.on_chunk(&hdr(4, 2, 1, 0, 1), &[3]).unwrap();
    assert!(!m.is_complete(RequestId::new(7)));
    assert_eq!(m.peek(Source::Any, TagMatch::Any), Some(env(4, 2, 1)));
}

#[test]
fn a_lent_buffer_takes_its_message_chunk_by_chunk() {
    let mut m = Matcher::default();
    let mut buf = [0xAAu8; 8];
    // Posted with the buffer's length; an unrelated message first stays unexpected.
    m.post_within(RequestId::new(1), Source::Rank(2), TagMatch::Tag(5), buf.len());
    let lend = |m: &mut Matcher, h: &PacketHeader, p: &[u8], buf: &mut [u8]| {
        m.on_chunk_into(
            h,
            p,
            Some(&mut RecvInto {
                req: RequestId::new(1),
                buf,
            }),
        )
        .unwrap()
    };
    lend(&mut m, &hdr(3, 5, 2, 0, 2), &[8, 8], &mut buf);
    lend(&mut m, &hdr(2, 5, 5, 0, 2), &[1, 2], &mut buf);
    assert_eq!(m.take_into_done(RequestId::new(1)), None, "2 of 5 bytes");
    lend(&mut m, &hdr(2, 5, 5, 2, 3), &[3, 4, 5], &mut buf);
    let e = m
        .take_into_done(RequestId::new(1))
        .expect("all 5 bytes in the buffer");
    assert_eq!((e.source, e.tag, e.len), (2, 5, 5));
    assert_eq!(buf, [1, 2, 3, 4, 5, 0xAA, 0xAA, 0xAA]);
    assert!(!m.is_complete(RequestId::new(1)), "no message of its own");
    assert_eq!(m.take_completed(RequestId::new(1)), None);
    assert_eq!(m.peek(Source::Any, TagMatch::Any).map(|e| e.source), Some(3));
    // Chunks of a message bound to a lent buffer, fed without it while its receive is
    // still bound (the engine lends it to every progress of the wait, and withdraws the
    // receive with it when the wait fails: `cancel`), are counted and not kept; the next
    // message of the same source is whole.
    m.post_within(RequestId::new(2), Source::Rank(2), TagMatch::Any, buf.len());
    lend(&mut m, &hdr(2, 6, 4, 0, 2), &[1, 1], &mut buf);
    m.on_chunk(&hdr(2, 6, 4, 2, 2), &[1, 1]).unwrap();
    assert_eq!(m.take_into_done(RequestId::new(2)), None);
    m.post(RequestId::new(3), Source::Rank(2), TagMatch::Any);
    m.on_chunk(&hdr(2, 7, 1, 0, 1), &[9]).unwrap();
    assert_eq!(m.take_completed(RequestId::new(3)).unwrap().data, vec![9]);
}

#[test]
fn posted_receive_matches_in_post_order_with_wildcards() {
    let mut m = Matcher::default();
    m.post(RequestId::new(1), Source::Rank(2), TagMatch::Tag(5));
    m.post(RequestId::new(2), Source::Any, TagMatch::Any);
    m.on_chunk(&hdr(3, 5, 1, 0, 1), &[9]).unwrap();
    assert!(!m.is_complete(RequestId::new(1)));
    assert_eq!(
        m.take_completed(RequestId::new(2)).unwrap(),
        Message {
            source: 3,
            tag: 5,
            data: vec![9]
        }
    );
    m.on_chunk(&hdr(2, 5, 1, 0, 1), &[7]).unwrap();
    assert_eq!(m.take_completed(RequestId::new(1)).unwrap().data, vec![7]);
}

#[test]
fn chunks_reassemble_and_any_tag_skips_reserved_tags() {
    let mut m = Matcher::default();
    m.on_chunk(&hdr(1, RESERVED_TAG_BASE + 1, 2, 0, 2), &[1, 2])
        .unwrap();
    m.on_chunk(&hdr(1, 4, 4, 0, 2), &[1, 2]).unwrap();
    assert_eq!(
        m.try_take(Source::Any, TagMatch::Any),
        None,
        "incomplete message is not taken"
    );
    m.on_chunk(&hdr(1, 4, 4, 2, 2), &[3, 4]).unwrap();
    assert_eq!(
        m.try_take(Source::Any, TagMatch::Any).unwrap().data,
        vec![1, 2, 3, 4]
    );
    assert_eq!(m.try_take(Source::Any, TagMatch::Any), None);
    assert!(m
        .try_take(Source::Rank(1), TagMatch::Tag(RESERVED_TAG_BASE + 1))
        .is_some());
}

#[test]
fn out_of_order_chunk_is_a_protocol_error() {
    let mut m = Matcher::default();
    m.on_chunk(&hdr(1, 4, 4, 0, 2), &[1, 2]).unwrap();
    assert!(m.on_chunk(&hdr(1, 4, 4, 3, 1), &[3]).is_err());
    assert!(m.on_chunk(&hdr(2, 4, 4, 2, 2), &[3, 4]).is_err());
    assert!(
        m.on_whole(&hdr(1, 4, 2, 0, 0), vec![5, 6]).is_err(),
        "whole message inside a chunked one"
    );
}

#[test]
fn whole_messages_keep_order_and_wildcards_with_chunked_ones() {
    let mut m = Matcher::default();
    let any = Source::Any;
    m.post(RequestId::new(1), any, TagMatch::Tag(7));
    // A whole message for the posted receive, then unexpected ones in order.
    m.on_whole(&hdr(2, 7, 3, 0, 0), vec![1, 2, 3]).unwrap();
    assert_eq!(
        m.take_completed(RequestId::new(1)).unwrap(),
        Message {
            source: 2,
            tag: 7,
            data: vec![1, 2, 3]
        }
    );
    m.on_chunk(&hdr(2, 8, 1, 0, 1), &[4]).unwrap();
    m.on_whole(&hdr(3, 8, 2, 0, 0), vec![5, 6]).unwrap();
    m.on_whole(&hdr(2, 8, 2, 0, 0), vec![7, 8]).unwrap();
    assert_eq!(m.try_take(any, TagMatch::Tag(8)).unwrap().data, vec![4]);
    assert_eq!(
        m.try_take(Source::Rank(2), TagMatch::Any).unwrap().data,
        vec![7, 8]
    );
    m.post(RequestId::new(2), any, TagMatch::Any);
    assert_eq!(
        m.take_completed(RequestId::new(2)).unwrap(),
        Message {
            source: 3,
            tag: 8,
            data: vec![5, 6]
        }
    );
    assert!(
        m.on_whole(&hdr(3, 8, 5, 0, 0), vec![1]).is_err(),
        "length differs from the header"
    );
}

/// A reader of a message that records how it was read (`Event::Remote`'s).
#[derive(Debug, Default)]
struct FakeRemote {
    data: Vec<u8>,
    into: usize,
    vec: usize,
}

impl crate::fabric::RemoteRead for FakeRemote {
    fn read_into(&mut self, buf: &mut [u8]) -> crate::fabric::error::Result<()> {
        assert_eq!(
            buf.len(),
            self.data.len(),
            "read into exactly the message's bytes"
        );
        buf.copy_from_slice(&self.data);
        self.into += 1;
        Ok(())
    }

    fn read_vec(&mut self) -> crate::fabric::error::Result<Vec<u8>> {
        self.vec += 1;
        Ok(self.data.clone())
    }
}

#[test]
fn a_remote_message_is_read_into_the_lent_buffer_it_binds_to_else_into_its_own() {
    let mut m = Matcher::default();
    let mut buf = [0xAAu8; 6];
    let remote = |bytes: &[u8]| FakeRemote {
        data: bytes.to_vec(),
        ..FakeRemote::default()
    };
    // Bound to the waiting receive whose buffer is lent: read once, into it.
    m.post_within(RequestId::new(1), Source::Rank(2), TagMatch::Tag(5), buf.len());
    let mut r = remote(&[1, 2, 3, 4]);
    let lent = RecvInto {
        req: RequestId::new(1),
        buf: &mut buf,
    };
    m.on_remote(&hdr(2, 5, 4, 0, 0), &mut r, Some(&mut { lent }))
        .unwrap();
    assert_eq!((r.into, r.vec), (1, 0));
    let e = m.take_into_done(RequestId::new(1)).expect("in the buffer");
    assert_eq!((e.source, e.tag, e.len), (2, 5, 4));
    assert_eq!(buf, [1, 2, 3, 4, 0xAA, 0xAA]);
    // No receive posted: a buffer of its own, queued; the next receive takes it.
    let mut r = remote(&[7; 9]);
    m.on_remote(&hdr(3, 6, 9, 0, 0), &mut r, None).unwrap();
    assert_eq!((r.into, r.vec), (0, 1));
    assert_eq!(
        m.try_take(Source::Rank(3), TagMatch::Any).unwrap().data,
        vec![7; 9]
    );
    // Lent for another receive than the one it binds to: its own buffer, that receive's.
    m.post(RequestId::new(2), Source::Rank(2), TagMatch::Any);
    m.post_within(RequestId::new(3), Source::Any, TagMatch::Any, buf.len());
    let mut r = remote(&[5, 5]);
    let lent = RecvInto {
        req: RequestId::new(3),
        buf: &mut buf,
    };
    m.on_remote(&hdr(2, 8, 2, 0, 0), &mut r, Some(&mut { lent }))
        .unwrap();
    assert_eq!((r.into, r.vec), (0, 1));
    assert_eq!(m.take_completed(RequestId::new(2)).unwrap().data, vec![5, 5]);
    // Longer than the lent buffer (its limit): refused, the message stays queued whole.
    let mut r = remote(&[9; 8]);
    let lent = RecvInto {
        req: RequestId::new(3),
        buf: &mut buf,
    };
    m.on_remote(&hdr(4, 1, 8, 0, 0), &mut r, Some(&mut { lent }))
        .unwrap();
    assert_eq!((r.into, r.vec), (0, 1));
    assert_eq!(m.take_refused(RequestId::new(3)).map(|e| e.len), Some(8));
    assert_eq!(
        m.try_take(Source::Rank(4), TagMatch::Any).unwrap().data,
        vec![9; 8]
    );
}
