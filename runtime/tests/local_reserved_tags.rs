//! A receive on a reserved tag (`>= RESERVED_TAG_BASE`, the runtime's collectives) is
//! refused at once as a send's is: it could otherwise take a barrier's message (the
//! barrier then failing with a wrong "peer finished" error), or wait for ever.

use ballast_runtime::CommError;
use ballast_runtime::{launch::threads, Error, RuntimeConfig, Source, TagMatch, RESERVED_TAG_BASE};

fn reserved(r: Result<impl std::fmt::Debug, Error>, tag: u32) {
    match r {
        Err(Error::Comm(CommError::ReservedTag(t))) => assert_eq!(t, tag),
        other => panic!("tag {tag}: expected ReservedTag, got {other:?}"),
    }
}

#[test]
fn receives_on_reserved_tags_are_refused() {
    let cfg = RuntimeConfig::builder().lock_pool(false).build().unwrap();
    threads::run_ranks(2, &cfg, |comm| {
        let peer = 1 - comm.rank();
        for tag in [RESERVED_TAG_BASE, u32::MAX] {
            let t = TagMatch::Tag(tag);
            reserved(comm.irecv(Source::Rank(peer), t), tag);
            reserved(comm.recv(Source::Rank(peer), t), tag);
            reserved(comm.try_recv(Source::Any, t), tag);
            reserved(comm.iprobe(Source::Any, t), tag);
            reserved(comm.probe(Source::Rank(peer), t), tag);
            reserved(comm.recv_within(Source::Rank(peer), t, 8), tag);
            let mut buf = [0u8; 8];
            reserved(comm.recv_into(Source::Rank(peer), t, &mut buf), tag);
            reserved(comm.irecv_within(Source::Rank(peer), t, 8), tag);
        }
        // The collectives still work: nothing was posted on their tag.
        comm.barrier().unwrap();
        let mut v = [comm.rank() as i64 + 1];
        comm.all_reduce(&mut v, ballast_runtime::ReduceOp::Sum).unwrap();
        assert_eq!(v[0], 3);
    })
    .unwrap();
}
