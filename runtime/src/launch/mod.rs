//! Starting ranks: [`Launch`], the start-up of a job of one rank per process (the
//! bootstrap together with the MPI it may have initialised for it, dropped in the order MPI
//! needs: the bootstrap's communicator before `MPI_Finalize`), and the one launcher of
//! ranks as threads of this process (`threads`) with each transport's use of it:
//! [`local_threads`] (`local::run`), [`verbs_threads`] (`verbs::run_ranks`, feature `verbs`) and
//! [`Mpi::run_ranks`](crate::fabric::mpi::Mpi::run_ranks) (feature `mpi`). The
//! command line and the tests start their threaded ranks through these.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::comm::Communicator;
use crate::core::config::{ConfigError, RuntimeConfig, TransportKind};
use crate::core::error::{first_error, panic_message, Error, Result};
use crate::core::procstatus::ProcStatus;
use crate::oob::{auto, Bootstrap, BootstrapKind};

#[cfg(feature = "mpi")]
mod mpi;
#[cfg(feature = "verbs")]
mod verbs;
use crate::fabric::local::{LocalFabric, World};
#[cfg(feature = "verbs")]
pub use verbs::{communicator as verbs_communicator, finish as verbs_finish, verbs_threads};

/// The start-up exchange of a job of one rank per process ([`Launch::new`]), owning the MPI
/// it initialised for it, if any. Dropping it frees the bootstrap first, then finalises that
/// MPI (a communicator freed after `MPI_Finalize` aborts the process in Open MPI).
pub struct Launch {
    // Declared first: dropped before `mpi`, so an MPI bootstrap's duplicate communicator is
    // freed while MPI is still initialised.
    boot: Box<dyn Bootstrap>,
    kind: BootstrapKind,
    #[cfg(feature = "mpi")]
    mpi: Option<crate::fabric::mpi::Mpi>,
    at_start: ProcStatus,
}

impl Launch {
    /// Meets the other processes of this job. In a build with the `mpi` feature, a process
    /// started by `mpirun`/`mpiexec` (`OMPI_COMM_WORLD_RANK` or `PMI_RANK` set) without
    /// `BALLAST_ROOT` initialises MPI (unless the host program did) and exchanges through it;
    /// otherwise as [`crate::oob::auto`]. Errors: those of [`crate::oob::auto`] and of [`crate::fabric::mpi::Mpi::init`].
    pub fn new(config: &RuntimeConfig) -> Result<Launch> {
        let at_start = ProcStatus::read_self().unwrap_or_default();
        #[cfg(feature = "mpi")]
        let mpi = if mpi_launch(config) {
            Some(crate::fabric::mpi::Mpi::init()?)
        } else {
            None
        };
        let (kind, boot) = auto(config)?;
        Ok(Launch {
            boot,
            kind,
            #[cfg(feature = "mpi")]
            mpi,
            at_start,
        })
    }

    /// This process' rank.
    pub fn rank(&self) -> usize {
        self.boot.rank()
    }

    /// Number of processes (= ranks).
    pub fn size(&self) -> usize {
        self.boot.size()
    }

    /// Which exchange is used.
    pub fn kind(&self) -> BootstrapKind {
        self.kind
    }

    /// The process' memory counters before [`Launch::new`] initialised MPI or connected
    /// (zeros when `/proc/self/status` could not be read).
    pub fn at_start(&self) -> ProcStatus {
        self.at_start
    }

    /// The exchange, for [`crate::fabric::verbs::communicator`] and the like (see
    /// [`Bootstrap::kept`] for what MPI kept during it).
    pub fn bootstrap(&mut self) -> &mut dyn Bootstrap {
        self.boot.as_mut()
    }

    /// Ends the launch after an error without finalising MPI: `MPI_Finalize` waits for every
    /// process, and the others may be waiting for this one, so the job would hang with the
    /// error unprinted; exiting non-zero instead makes the launcher end the job.
    pub fn abandon(self) {
        #[cfg(feature = "mpi")]
        {
            let Launch { boot, mpi, .. } = self;
            drop(boot);
            std::mem::forget(mpi);
        }
    }
}

/// True when [`Launch::new`] initialises MPI for the exchange: no `BALLAST_ROOT`, and the
/// rank came from an MPI launcher's variables.
#[cfg(feature = "mpi")]
fn mpi_launch(config: &RuntimeConfig) -> bool {
    let b = config.bootstrap();
    b.root.is_none() && matches!(b.rank_var, Some("OMPI_COMM_WORLD_RANK" | "PMI_RANK"))
}

/// How [`threads`] starts the threads of its ranks.
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
/// `abort`, which must make the others stop with [`Error::Aborted`]. A thread that cannot
/// be started ends the spawning: `abort` is called and [`Error::ThreadStart`] (naming the
/// rank, the ranks asked for and the stack size) is the error, over the failures of the
/// ranks started before it (which the abort caused).
///
/// Returns `(rank, result)` in the order of `ranks`, or the first real error in that
/// order (a rank's own failure wins over the `Aborted` of the others).
pub(crate) fn threads<S, R, F>(
    ranks: Vec<(usize, S)>,
    opts: ThreadOpts,
    abort: &(dyn Fn() + Sync),
    make: impl Fn(usize, S) -> Result<Communicator> + Sync,
    f: &F,
) -> Result<Vec<(usize, R)>>
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
        return one(r, state).map(|v| vec![(r, v)]);
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
    first_error(results.into_iter().map(|(r, res)| res.map(|v| (r, v))))
}

/// Runs `f` on `n` ranks, each a thread of this process (named `ballast-rank-{r}`) with its
/// own [`Communicator`] over the in-process transport, and returns the results by rank
/// (`ballast_runtime::local::run`).
///
/// After `f` returns, each rank keeps progressing until its sends are delivered and all
/// ranks are finished (like `MPI_Finalize`). If a rank panics or fails, the others stop
/// with [`Error::Aborted`] and the first real error is returned. Errors also:
/// [`Error::InvalidRank`] for `n == 0`, [`ConfigError::TransportUnavailable`] when the
/// configuration's transport is not `local`, the configuration's validation errors.
pub fn local_threads<R, F>(n: usize, config: &RuntimeConfig, f: F) -> Result<Vec<R>>
where
    F: Fn(&mut Communicator) -> R + Sync,
    R: Send,
{
    if n == 0 {
        return Err(Error::InvalidRank {
            rank: 0,
            world_size: 0,
        });
    }
    let cfg = *config.transport();
    if cfg.kind != TransportKind::Local {
        return Err(Error::Config(ConfigError::TransportUnavailable {
            transport: cfg.kind,
            why: "local::run runs transport=local only",
        }));
    }
    cfg.validate()?;
    check_ranks_fit(n, &cfg)?;
    let (world, parkers) = World::new(n);
    let world = Arc::new(world);
    let opts = ThreadOpts {
        name: Some("ballast-rank"),
        inline_single: false,
    };
    let out = threads(
        parkers.into_iter().enumerate().collect(),
        opts,
        &|| world.abort(),
        |r, parker| {
            let fabric = LocalFabric::new(r, world.clone(), &cfg, parker);
            Communicator::new(Box::new(fabric), &cfg)
        },
        &f,
    )?;
    Ok(out.into_iter().map(|(_, v)| v).collect())
}

/// Bytes of a rank's own structures outside the memory model (a local rank's port in the
/// world, its parker, its result slot): an upper bound, for [`check_ranks_fit`].
const LOCAL_RANK_STATE_BYTES: u64 = 4096;

/// Checks, before anything is allocated, that `n` ranks of `cfg` in this process fit (the
/// local launcher's ranks; or the one rank of a process, `ballast_comm_from_env` and
/// `ballast_comm_from_mpi` of the C ABI): their thread stacks in the address space, and
/// what each allocates at start (the memory model with no
/// peer: pool, its free list of 4 B per buffer, shared receive queue, control state) in
/// what this process may map (`ulimit -v`), and what of it is written or locked at start
/// (all but the buffers of an unlocked pool) in the machine. Errors: [`Error::ModelOverflow`],
/// [`Error::Alloc`] naming the ranks and the sizes.
pub fn check_ranks_fit(n: usize, cfg: &crate::core::config::TransportConfig) -> Result<()> {
    let stack = crate::core::memory::rank_stack_bytes() as u64;
    let fp = cfg.try_predict(0, n, cfg.ranks_per_node)?;
    let per_rank = fp
        .total_bytes()
        .saturating_add(cfg.buffer_count as u64 * 4 + LOCAL_RANK_STATE_BYTES);
    // The buffers (pool, receive buffers) are mapped lazily: touched at start only when
    // locked; the bookkeeping (free lists, queue slots) is written at once.
    let lazy = if cfg.lock_pool { 0 } else { fp.registered_bytes };
    let touched = per_rank.saturating_sub(lazy);
    let what = |what: &str, each: u64| format!("{what} of {n} rank(s) ({each} bytes each)");
    match (n as u64).checked_mul(stack) {
        Some(s) if s <= crate::core::memory::ADDRESS_SPACE_BYTES => {}
        s => {
            return Err(Error::Alloc {
                what: what("the thread stacks", stack),
                bytes: s.unwrap_or(u64::MAX),
                error: std::io::Error::new(
                    std::io::ErrorKind::OutOfMemory,
                    "more than the 2^47-byte address space",
                ),
            })
        }
    }
    let (mapped, touched) = (
        (n as u64).saturating_mul(per_rank),
        (n as u64).saturating_mul(touched),
    );
    crate::core::memory::check_room(mapped, touched, || {
        what(
            "the pools, receive queues and state (buffer_count x buffer_size, srq_depth x buffer_size, ...)",
            per_rank,
        )
    })
}

/// A world of one rank over the local transport, owned by the caller (for a program
/// that embeds Ballast and runs as a single process: `ballast_comm_from_env` of the C
/// ABI). Finish it with [`local_finish`]. Errors: [`ConfigError::TransportUnavailable`] when the
/// configuration's transport is not `local`, the configuration's validation errors.
pub fn local_single(config: &RuntimeConfig) -> Result<Communicator> {
    let cfg = *config.transport();
    if cfg.kind != TransportKind::Local {
        return Err(Error::Config(ConfigError::TransportUnavailable {
            transport: cfg.kind,
            why: "local::single runs transport=local only",
        }));
    }
    cfg.validate()?;
    check_ranks_fit(1, &cfg)?;
    let (world, mut parkers) = World::new(1);
    let parker = parkers.pop().expect("World::new(1) gives one parker");
    let fabric = LocalFabric::new(0, Arc::new(world), &cfg, parker);
    Communicator::new(Box::new(fabric), &cfg)
}

/// Finishes a communicator of [`local_single`]: delivers its own sends to itself.
pub fn local_finish(mut comm: Communicator) -> Result<()> {
    comm.finalize()
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
        let got = local_threads(4, &small(), |comm| {
            (comm.rank(), std::thread::current().name().map(str::to_string))
        })
        .unwrap();
        let want: Vec<_> = (0..4).map(|r| (r, Some(format!("ballast-rank-{r}")))).collect();
        assert_eq!(got, want);
        assert!(matches!(
            local_threads(0, &small(), |_| ()),
            Err(Error::InvalidRank {
                rank: 0,
                world_size: 0
            })
        ));
    }

    #[test]
    fn a_panicking_rank_aborts_the_others_and_its_panic_is_the_error() {
        // Ranks 0 and 2 wait for a message that never comes: only the abort ends them.
        let out = local_threads(3, &small(), |comm| {
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
        let out = threads(
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
                if matches!(got, Err(Error::Aborted)) {
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
            let got = threads(
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
            assert_eq!(got, vec![(0, (inline_single, name))]);
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
        let got = local_threads(2, &cfg, |comm| big_frame(comm.rank())).unwrap();
        assert_eq!(got, vec![1, 2]);
    }

    #[cfg(feature = "mpi")]
    #[test]
    fn mpi_initialised_for_the_bootstrap_only_under_an_mpi_launcher_without_root() {
        let cfg = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> =
                vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            RuntimeConfig::from_vars(move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
                .unwrap()
        };
        assert!(mpi_launch(&cfg(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "4")
        ])));
        assert!(mpi_launch(&cfg(&[("PMI_RANK", "0"), ("PMI_SIZE", "2")])));
        assert!(!mpi_launch(&cfg(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("BALLAST_ROOT", "127.0.0.1:4000")
        ])));
        assert!(!mpi_launch(&cfg(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "4")])));
        assert!(!mpi_launch(&cfg(&[])));
    }
}
