//! The one launcher of ranks as threads of this process (`spawn`: a scope of named threads
//! with a large stack, each making its rank's communicator, running the caller's function
//! and finalising; one failure aborts the others), and [`run_ranks`], the ranks of the
//! in-process transport (`local`) as threads. The verbs and MPI launchers of threaded ranks
//! (`verbs::run_ranks`, `Mpi::run_ranks`) and `fault::run` use `spawn` too.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::RankOutput;
use crate::comm::error::{first_error, panic_message, Error, FabricError, Result};
use crate::comm::Communicator;
use crate::core::config::{ConfigError, RuntimeConfig, TransportKind};
use crate::fabric::local::{LocalFabric, World};

/// How [`spawn`] starts the threads of its ranks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ThreadOpts {
    /// Rank `r`'s thread is named `{name}-{r}`; None leaves the threads unnamed.
    pub name: Option<&'static str>,
    /// A single rank runs on the calling thread instead of a thread of its own.
    pub inline_single: bool,
}

/// The one launcher of ranks as threads: for every `(rank, state)` of `ranks`, in a
/// thread of one scope (see [`ThreadOpts`]), makes the rank's communicator with
/// `make(rank, state)`, runs `f` on it and finalises it (delivers its sends, waits until
/// every rank finished). A rank that fails or panics ([`Error::RankPanicked`]) calls
/// `abort`, which must make the others stop with [`FabricError::Aborted`](crate::comm::error::FabricError::Aborted). A thread that cannot
/// be started ends the spawning: `abort` is called and [`Error::ThreadStart`] (naming the
/// rank, the ranks asked for and the stack size) is the error, over the failures of the
/// ranks started before it (which the abort caused).
///
/// Returns a [`RankOutput`] per rank in the order of `ranks`, or the first real error in
/// that order (a rank's own failure wins over the `Aborted` of the others).
pub(crate) fn spawn<S, R, F>(
    ranks: Vec<(usize, S)>,
    opts: ThreadOpts,
    abort: &(dyn Fn() + Sync),
    make: impl Fn(usize, S) -> Result<Communicator> + Sync,
    f: &F,
) -> Result<Vec<RankOutput<R>>>
where
    S: Send,
    R: Send,
    F: Fn(&mut Communicator) -> R + Sync,
{
    let make = &make;
    let one = move |r: usize, state: S| -> Result<R> {
        let out = catch_unwind(AssertUnwindSafe(|| -> Result<R> {
            let mut comm = make(r, state)?;
            let out = f(&mut comm);
            comm.finalize()?;
            Ok(out)
        }))
        .unwrap_or_else(|p| {
            Err(Error::RankPanicked {
                rank: r,
                message: panic_message(p.as_ref()),
            })
        });
        if out.is_err() {
            abort();
        }
        out
    };
    if opts.inline_single && ranks.len() == 1 {
        let (r, state) = ranks.into_iter().next().expect("one rank");
        return one(r, state).map(|output| vec![RankOutput { rank: r, output }]);
    }
    // The main thread's stack (`ulimit -s`), not Rust's 2 MiB: simulator code runs here.
    let stack = crate::core::memory::rank_stack_bytes();
    let n = ranks.len();
    let results: Vec<(usize, Result<R>)> = std::thread::scope(|s| {
        let mut started = Vec::with_capacity(n);
        for (r, state) in ranks {
            let mut b = std::thread::Builder::new().stack_size(stack);
            if let Some(name) = opts.name {
                b = b.name(format!("{name}-{r}"));
            }
            match b.spawn_scoped(s, move || one(r, state)) {
                Ok(h) => started.push((r, Ok(h))),
                Err(error) => {
                    abort();
                    let ranks = n;
                    started.push((
                        r,
                        Err(Error::ThreadStart {
                            rank: r,
                            ranks,
                            stack_bytes: stack,
                            error,
                        }),
                    ));
                    break;
                }
            }
        }
        started
            .into_iter()
            .map(|(r, h)| {
                let res = h.and_then(|h| {
                    h.join().unwrap_or_else(|p| {
                        Err(Error::RankPanicked {
                            rank: r,
                            message: panic_message(p.as_ref()),
                        })
                    })
                });
                (r, res)
            })
            .collect()
    });
    // A rank that could not start is the cause of the others' failures (the abort).
    if results
        .iter()
        .any(|(_, res)| matches!(res, Err(Error::ThreadStart { .. })))
    {
        let start = results.into_iter().find_map(|(_, res)| match res {
            Err(e @ Error::ThreadStart { .. }) => Some(e),
            _ => None,
        });
        return Err(start.expect("a thread start error"));
    }
    first_error(
        results
            .into_iter()
            .map(|(rank, res)| res.map(|output| RankOutput { rank, output })),
    )
}

/// Runs `f` on `n` ranks, each a thread of this process (named `ballast-rank-{r}`) with its
/// own [`Communicator`] over the in-process transport, and returns the results by rank
/// (the C ABI's `ballast_local_run`).
///
/// After `f` returns, each rank keeps progressing until its sends are delivered and all
/// ranks are finished (like `MPI_Finalize`). If a rank panics or fails, the others stop
/// with [`FabricError::Aborted`] and the first real error is returned. Errors also:
/// [`FabricError::InvalidRank`] for `n == 0`, [`ConfigError::TransportUnavailable`] when the
/// configuration's transport is not `local`, the configuration's validation errors.
pub fn run_ranks<R, F>(n: usize, config: &RuntimeConfig, f: F) -> Result<Vec<R>>
where
    F: Fn(&mut Communicator) -> R + Sync,
    R: Send,
{
    if n == 0 {
        return Err(Error::Fabric(FabricError::InvalidRank {
            rank: 0,
            world_size: 0,
        }));
    }
    let cfg = *config.transport();
    if cfg.kind != TransportKind::Local {
        return Err(Error::Config(ConfigError::TransportUnavailable {
            transport: cfg.kind,
            why: "threads::run_ranks runs transport=local only",
        }));
    }
    cfg.validate()?;
    super::check_ranks_fit(n, &cfg)?;
    let (world, parkers) = World::new(n);
    let world = Arc::new(world);
    let opts = ThreadOpts {
        name: Some("ballast-rank"),
        inline_single: false,
    };
    let out = spawn(
        parkers.into_iter().enumerate().collect(),
        opts,
        &|| world.abort(),
        |r, parker| {
            let fabric = LocalFabric::new(r, world.clone(), &cfg, parker);
            Communicator::new(Box::new(fabric), &cfg)
        },
        &f,
    )?;
    Ok(out.into_iter().map(|o| o.output).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::matching::{Source, TagMatch};

    fn small() -> RuntimeConfig {
        RuntimeConfig::builder()
            .buffer_count(8)
            .lock_pool(false)
            .build()
            .unwrap()
    }

    #[test]
    fn local_ranks_run_on_named_threads_and_return_in_rank_order() {
        let got = run_ranks(4, &small(), |comm| {
            (comm.rank(), std::thread::current().name().map(str::to_string))
        })
        .unwrap();
        let want: Vec<_> = (0..4).map(|r| (r, Some(format!("ballast-rank-{r}")))).collect();
        assert_eq!(got, want);
        assert!(matches!(
            run_ranks(0, &small(), |_| ()),
            Err(Error::Fabric(FabricError::InvalidRank {
                rank: 0,
                world_size: 0
            }))
        ));
        // Another transport is refused, naming this launcher.
        let mpi = small()
            .to_builder()
            .transport(TransportKind::Mpi)
            .build()
            .unwrap();
        let e = run_ranks(2, &mpi, |_| ()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "transport `mpi` is unavailable: threads::run_ranks runs transport=local only"
        );
    }

    #[test]
    fn a_panicking_rank_aborts_the_others_and_its_panic_is_the_error() {
        // Ranks 0 and 2 wait for a message that never comes: only the abort ends them.
        let out = run_ranks(3, &small(), |comm| {
            if comm.rank() == 1 {
                panic!("rank one fails");
            }
            comm.recv(Source::Any, TagMatch::Tag(5)).map(|m| m.data)
        });
        match out {
            Err(Error::RankPanicked { rank: 1, message }) => assert_eq!(message, "rank one fails"),
            other => panic!("expected rank 1's panic, got {other:?}"),
        }
    }

    #[test]
    fn a_rank_that_cannot_start_wins_over_the_aborted_ranks_before_it() {
        let (world, parkers) = World::new(3);
        let world = Arc::new(world);
        let cfg = *small().transport();
        let opts = ThreadOpts {
            name: None,
            inline_single: false,
        };
        let waited = std::sync::atomic::AtomicUsize::new(0);
        let out = spawn(
            parkers.into_iter().enumerate().collect(),
            opts,
            &|| world.abort(),
            |r, parker| {
                if r == 2 {
                    return Err(Error::Io(std::io::Error::other("rank 2 cannot start")));
                }
                Communicator::new(Box::new(LocalFabric::new(r, world.clone(), &cfg, parker)), &cfg)
            },
            &|comm: &mut Communicator| {
                let got = comm.recv(Source::Any, TagMatch::Any);
                if matches!(got, Err(Error::Fabric(FabricError::Aborted))) {
                    waited.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            },
        );
        match out {
            Err(Error::Io(e)) => assert_eq!(e.to_string(), "rank 2 cannot start"),
            other => panic!("expected rank 2's error, got {other:?}"),
        }
        assert_eq!(waited.into_inner(), 2, "ranks 0 and 1 were ended by the abort");
    }

    #[test]
    fn a_single_rank_runs_on_the_calling_thread_when_asked() {
        let cfg = *small().transport();
        let caller = std::thread::current().id();
        let caller_name = std::thread::current().name().map(str::to_string);
        for inline_single in [true, false] {
            let (world, parkers) = World::new(1);
            let world = Arc::new(world);
            let opts = ThreadOpts {
                name: Some("ballast-test"),
                inline_single,
            };
            let got = spawn(
                parkers.into_iter().enumerate().collect(),
                opts,
                &|| world.abort(),
                |r, parker| {
                    Communicator::new(Box::new(LocalFabric::new(r, world.clone(), &cfg, parker)), &cfg)
                },
                &|_: &mut Communicator| {
                    let t = std::thread::current();
                    (t.id() == caller, t.name().map(str::to_string))
                },
            )
            .unwrap();
            let name = if inline_single {
                caller_name.clone()
            } else {
                Some("ballast-test-0".to_string())
            };
            assert_eq!(
                got,
                vec![RankOutput {
                    rank: 0,
                    output: (inline_single, name)
                }]
            );
        }
    }

    #[test]
    fn rank_threads_have_the_main_threads_stack() {
        // 4 MiB on a rank's stack: more than Rust's 2 MiB thread default, less than the 8 MiB
        // of `ulimit -s` (the test is meaningful only where the limit gives at least that).
        if crate::core::memory::rank_stack_bytes() < 6 << 20 {
            println!("SKIP: ulimit -s is below 6 MiB here");
            return;
        }
        let cfg = RuntimeConfig::builder().buffer_count(4).build().unwrap();
        #[inline(never)]
        fn big_frame(rank: usize) -> usize {
            let mut big = [0u8; 4 << 20];
            big[4 << 19] = rank as u8 + 1;
            std::hint::black_box(&mut big);
            big.iter().map(|&b| b as usize).sum::<usize>()
        }
        let got = run_ranks(2, &cfg, |comm| big_frame(comm.rank())).unwrap();
        assert_eq!(got, vec![1, 2]);
    }
}
