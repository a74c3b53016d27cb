//! A rank whose thread cannot be started (issue 33, finding 5): 3000 local ranks under a
//! 4 GiB address-space limit (`ulimit -v`, set here with RLIMIT_AS: this test binary holds
//! this one test, as the limit is the process'). `threads::run_ranks` returns
//! `Error::ThreadStart` naming the rank, the ranks asked for and the stack size, not the
//! `Aborted` of the ranks started before it; and the process lives on.

use ballast_runtime::{launch::threads, Error, RuntimeConfig};

#[test]
fn a_thread_that_cannot_start_is_the_error_with_its_rank_and_stack() {
    let limit = 4u64 << 30;
    rlimit::setrlimit(rlimit::Resource::AS, limit, limit).expect("set RLIMIT_AS");
    let cfg = RuntimeConfig::builder()
        .buffer_count(4)
        .buffer_size(4096)
        .srq_depth(4)
        .lock_pool(false)
        .build()
        .unwrap();
    let stack = ballast_runtime::memory::rank_stack_bytes();
    let n = 3000;
    assert!(
        n as u64 * stack as u64 > limit,
        "the stacks must not fit for this test"
    );
    match threads::run_ranks(n, &cfg, |comm| comm.barrier()) {
        Err(e @ Error::ThreadStart { .. }) => {
            let Error::ThreadStart {
                rank,
                ranks,
                stack_bytes,
                ..
            } = &e
            else {
                unreachable!()
            };
            assert_eq!((*ranks, *stack_bytes), (n, stack));
            assert!(*rank > 0 && *rank < n, "{e}");
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!(
                    "cannot start the thread of rank {rank} of 3000 (stack {stack} bytes, from ulimit -s): "
                )),
                "{msg}"
            );
        }
        other => panic!("expected the thread start error, got {other:?}"),
    }
    // The process lives on: a run that fits still runs.
    let got = threads::run_ranks(4, &cfg, |comm| comm.barrier().map(|_| comm.rank())).unwrap();
    assert_eq!(
        got.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
}
