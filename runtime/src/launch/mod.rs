//! Starting ranks: [`Launch`], the start-up of a job of one rank per process (the
//! bootstrap together with the MPI it may have initialised for it, dropped in the order MPI
//! needs: the bootstrap's communicator before `MPI_Finalize`), and the one launcher of
//! ranks as threads of this process ([`threads`]) with each transport's use of it:
//! [`threads::run_ranks`] (the `local` transport), `shm::run_ranks` (`launch/shm.rs`, ranks
//! as threads with a segment each), `verbs::run_ranks` (`launch/verbs.rs`, feature
//! `verbs`) and [`Mpi::run_ranks`](crate::fabric::mpi::Mpi::run_ranks) (feature
//! `mpi`). The command line and the tests start their threaded ranks through these. The
//! launchers of one transport are published under that transport's name only
//! (`ballast_runtime::local::single`, `ballast_runtime::verbs::communicator`, ...): one
//! spelling each.

use crate::bootstrap::{auto, AutoBootstrap, Bootstrap, BootstrapKind};
use crate::comm::error::{Error, Result};
use crate::core::config::RuntimeConfig;
use crate::core::procstatus::ProcStatus;

pub(crate) mod local;
#[cfg(feature = "mpi")]
mod mpi;
#[cfg(target_os = "linux")]
pub(crate) mod shm;
pub mod threads;
#[cfg(feature = "verbs")]
pub(crate) mod verbs;

/// One rank's result from a launcher of this process' part of a job
/// ([`Mpi::run_ranks`](crate::fabric::mpi::Mpi::run_ranks), `verbs::run_ranks`): the rank
/// and what the caller's function returned on it. ([`threads::run_ranks`] runs every rank
/// of its job here and returns the results alone, indexed by rank.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankOutput<R> {
    /// The rank.
    pub rank: usize,
    /// What the function returned on it.
    pub output: R,
}

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
    /// otherwise as [`crate::bootstrap::auto`]. Errors: those of [`crate::bootstrap::auto`] and of [`crate::fabric::mpi::Mpi::init`].
    pub fn new(config: &RuntimeConfig) -> Result<Launch> {
        let at_start = ProcStatus::read_self().unwrap_or_default();
        #[cfg(feature = "mpi")]
        let mpi = if mpi_launch(config) {
            Some(crate::fabric::mpi::Mpi::init()?)
        } else {
            None
        };
        let AutoBootstrap { kind, boot } = auto(config)?;
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

    /// The exchange, for `crate::fabric::verbs::communicator` and the like (see
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

/// Bytes of a rank's own structures outside the memory model (a local rank's port in the
/// world, its parker, its result slot): an upper bound, for [`check_ranks_fit`].
const LOCAL_RANK_STATE_BYTES: u64 = 4096;

/// The margin of [`check_ranks_fit`] on what it counts per rank: 1/`MARGIN_DIVISOR` of it
/// (page rounding, allocator headers, the short-lived allocations of start).
const MARGIN_DIVISOR: u64 = 16;

/// Address space of one glibc malloc arena (`HEAP_MAX_SIZE` on 64-bit: reserved, not
/// touched, when a new thread first allocates; it counts against `ulimit -v`). Added to
/// what [`check_ranks_fit`] maps once per rank thread, up to glibc's 8 arenas per core.
const ARENA_BYTES: u64 = 64 << 20;

/// Checks, before anything is allocated, that `n` ranks of `cfg` in this process fit (the
/// local launcher's ranks; or the one rank of a process, `ballast_comm_from_env` and
/// `ballast_comm_from_mpi` of the C ABI): their thread stacks in the address space, and
/// what each allocates at start (the memory model with no peer: pool, shared receive queue
/// and its 16 B queue slot per entry, control state; per buffer, the pool's free list of 4 B
/// and the engine's table of sends in flight of 24 B; plus 1/16, and a malloc arena per
/// rank thread up to 8 per core) in
/// what this process may map (`ulimit -v`), and what of it is written or locked at start
/// (all but the buffers of an unlocked pool) in the machine. Errors: [`CommError::ModelOverflow`](crate::comm::error::CommError::ModelOverflow),
/// [`Error::Alloc`] naming the ranks and the sizes.
pub fn check_ranks_fit(n: usize, cfg: &crate::core::config::TransportConfig) -> Result<()> {
    let stack = crate::core::memory::rank_stack_bytes() as u64;
    let fp = cfg.try_predict(0, n, cfg.ranks_per_node)?;
    let per_buffer = crate::core::pool::FREE_LIST_BYTES + crate::protocol::engine::WR_INFO_BYTES;
    let exact = fp
        .total_bytes()
        .saturating_add((cfg.buffer_count as u64).saturating_mul(per_buffer))
        .saturating_add(LOCAL_RANK_STATE_BYTES);
    let per_rank = exact.saturating_add(exact / MARGIN_DIVISOR);
    // The buffers (pool, receive buffers) are mapped lazily: touched at start only when
    // locked; the bookkeeping (free lists, queue slots) is written at once.
    let lazy = if cfg.lock_pool { 0 } else { fp.registered_bytes };
    let touched = per_rank.saturating_sub(lazy);
    // glibc makes at most 8 arenas per core; threads beyond share them.
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let arenas = (n.min(8 * cores) as u64).saturating_mul(ARENA_BYTES);
    let what = |what: &str, each: u64| format!("{what} of {n} rank(s) ({each} bytes each)");
    match (n as u64).checked_mul(stack) {
        Some(s) if s <= crate::core::memory::ADDRESS_SPACE_BYTES => {}
        s => {
            return Err(Error::Alloc(crate::core::memory::AllocError {
                what: what("the thread stacks", stack),
                bytes: s.unwrap_or(u64::MAX),
                error: std::io::Error::new(
                    std::io::ErrorKind::OutOfMemory,
                    "more than the 2^47-byte address space",
                ),
            }))
        }
    }
    let (mapped, touched) = (
        (n as u64).saturating_mul(per_rank).saturating_add(arenas),
        (n as u64).saturating_mul(touched),
    );
    Ok(crate::core::memory::check_room(mapped, touched, || {
        what(
            "the pools, receive queues and state (buffer_count x buffer_size, srq_depth x buffer_size, ...)",
            per_rank,
        )
    })?)
}

#[cfg(all(test, feature = "mpi"))]
mod tests {
    use super::*;

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
