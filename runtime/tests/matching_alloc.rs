//! Tag matching when a message's memory is refused (issue 33: a receive that failed with
//! out of memory lost its message on `local`): the refused first chunk changes nothing, so
//! the receive stays posted (a failed wait withdraws it) and the fabric, which keeps the
//! chunk, delivers it again to whichever receive is then posted.

use ballast_runtime::fabric::PacketHeader;
use ballast_runtime::{matching::Matcher, Source, TagMatch};
use ballast_runtime::{Error, RequestId};

fn chunk(src: u32, tag: u32, total: u64, len: u32) -> PacketHeader {
    PacketHeader {
        src,
        tag,
        total,
        offset: 0,
        len,
        more: u64::from(len) < total,
    }
}

#[test]
fn a_first_chunk_refused_for_memory_leaves_the_receive_posted() {
    let mut m = Matcher::default();
    m.post(RequestId::new(1), Source::Any, TagMatch::Tag(5));
    // 2^62 bytes: no allocator gives them, whatever the limits.
    let huge = 1u64 << 62;
    let err = Error::from(m.on_chunk(&chunk(0, 5, huge, 8), &[7; 8]).unwrap_err());
    assert!(matches!(&err, Error::Alloc(a) if a.bytes == huge), "{err}");
    // Nothing was bound or started: the receive takes the next matching message, and
    // rank 0 may start a message (no half-started one in the way).
    m.on_chunk(&chunk(2, 5, 3, 3), b"abc").unwrap();
    assert!(
        m.is_complete(RequestId::new(1)),
        "the receive was dropped with the refused chunk"
    );
    let got = m.take_completed(RequestId::new(1)).expect("completed");
    assert_eq!((got.source, got.tag, got.data), (2, 5, b"abc".to_vec()));
    m.on_chunk(&chunk(0, 5, 4, 4), b"wxyz").unwrap();
    let next = m.try_take(Source::Rank(0), TagMatch::Tag(5)).expect("queued");
    assert_eq!(next.data, b"wxyz".to_vec());
}

#[test]
fn the_refused_message_delivered_again_goes_to_the_receive_still_posted() {
    let mut m = Matcher::default();
    m.post(RequestId::new(1), Source::Rank(0), TagMatch::Tag(5));
    assert!(m.on_chunk(&chunk(0, 5, 1 << 62, 8), &[7; 8]).is_err());
    // Delivered again once it fits (a smaller message stands in for it here), with the
    // receive still waiting (no failed wait withdrew it): that receive takes it.
    m.on_chunk(&chunk(0, 5, 8, 8), &[7; 8]).unwrap();
    assert!(
        m.is_complete(RequestId::new(1)),
        "the message went past its receive"
    );
    assert_eq!(
        m.take_completed(RequestId::new(1)).expect("completed").data,
        vec![7; 8]
    );
    // Withdrawn instead (a failed wait: Engine::cancel_recv), a later receive takes it.
    m.post(RequestId::new(2), Source::Rank(0), TagMatch::Tag(5));
    assert!(m.on_chunk(&chunk(0, 5, 1 << 62, 8), &[7; 8]).is_err());
    m.cancel(RequestId::new(2), None).unwrap();
    m.post(RequestId::new(3), Source::Rank(0), TagMatch::Tag(5));
    m.on_chunk(&chunk(0, 5, 8, 8), &[9; 8]).unwrap();
    assert!(!m.is_complete(RequestId::new(2)));
    assert_eq!(
        m.take_completed(RequestId::new(3)).expect("completed").data,
        vec![9; 8]
    );
}
