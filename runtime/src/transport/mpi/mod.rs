//! The MPI transport (feature `mpi`): Ballast over any MPI library (Open MPI, MPICH) through
//! rsmpi, with the same [`Communicator`] API as `local`. It owns MPI start-up and
//! shut-down ([`Mpi`]: initialise MPI or reuse the host program's, never finalise what
//! Ballast did not initialise), Ballast's own duplicate of the world communicator (so that
//! Ballast's tags never collide with the host's), the fabric ([`MpiFabric`]) and the MPI
//! footprint ([`MpiFootprint`]: Ballast's own bytes plus measured process deltas, because
//! MPI's internal memory cannot be seen from outside the library).
//!
//! ```no_run
//! use ballast_runtime::{mpi::Mpi, RuntimeConfig, Source, TagMatch};
//! let mpi = Mpi::init()?; // under mpirun -n 2
//! let cfg = RuntimeConfig::from_env()?;
//! let got = mpi.run(&cfg, |comm| -> ballast_runtime::Result<Vec<u8>> {
//!     if comm.rank() == 0 {
//!         comm.send(1, 7, b"spikes")?;
//!         Ok(Vec::new())
//!     } else {
//!         Ok(comm.recv(Source::Any, TagMatch::Tag(7))?.data)
//!     }
//! })??;
//! # Ok::<(), ballast_runtime::Error>(())
//! ```

mod fabric;
pub mod native;
mod raw;

use std::sync::Arc;

pub use fabric::{
    MpiFabric, DEFAULT_DIRECT_PART_BYTES, DIRECT_TAG_BASE, HEADER_BYTES, MAX_PIGGYBACK, STAGING_EXTRA_BYTES,
};
/// The rsmpi crate this transport is built on (for host programs and benchmarks that call
/// MPI themselves with the same version).
pub use rsmpi;
use rsmpi::collective::CommunicatorCollectives as _;
use rsmpi::topology::{Communicator as _, SimpleCommunicator};
use rsmpi::Threading;

use crate::core::config::{RuntimeConfig, TransportConfig, TransportKind};
use crate::core::error::{Error, Result};
use crate::core::footprint::Footprint;
use crate::core::procstatus::ProcStatus;
use crate::transport::comm::Communicator;
use fabric::Shared;

/// What [`Mpi::footprint`] says about MPI's own memory.
pub const MPI_MEMORY_NOTE: &str =
    "MPI's internal memory (eager and unexpected-message buffers, its registrations) is measured as process deltas (VmRSS, VmPin, VmLck), not modelled";

/// MPI as Ballast uses it: initialised by Ballast (and finalised when this is dropped) or
/// by the host program (then left alone). Drop every [`Communicator`] made from it first.
pub struct Mpi {
    // Declared first: finalised (when owned) after nothing else of ours needs MPI.
    universe: Option<rsmpi::environment::Universe>,
    world: SimpleCommunicator,
    baseline: ProcStatus,
    direct_part_bytes: usize,
}

impl Mpi {
    /// Initialises MPI (`MPI_Init_thread`, serialized) unless the host program already did,
    /// in which case its MPI is reused and never finalised by Ballast.
    /// Errors: [`Error::MpiState`] if MPI was already finalised.
    pub fn init() -> Result<Mpi> {
        Self::init_with(Threading::Serialized)
    }

    /// Like [`Mpi::init`] but asks for `MPI_THREAD_MULTIPLE`, needed to host several Ballast
    /// ranks per process as threads ([`Mpi::run_ranks`] with more ranks than processes).
    pub fn init_multithreaded() -> Result<Mpi> {
        Self::init_with(Threading::Multiple)
    }

    fn init_with(level: Threading) -> Result<Mpi> {
        if rsmpi::environment::is_finalized() {
            return Err(Error::MpiState {
                op: "Mpi::init",
                what: "MPI was already finalised in this process",
            });
        }
        let baseline = ProcStatus::read_self().unwrap_or_default();
        let universe = rsmpi::initialize_with_threading(level).map(|(u, _)| u);
        Ok(Mpi {
            universe,
            world: SimpleCommunicator::world(),
            baseline,
            direct_part_bytes: DEFAULT_DIRECT_PART_BYTES,
        })
    }

    /// Ballast over a communicator of the host program (a simulator that initialised MPI
    /// itself and gives Ballast `MPI_COMM_WORLD` or a sub-communicator): Ballast's ranks
    /// are `comm`'s ranks, and all of its traffic goes over duplicates of `comm`
    /// (`MPI_Comm_dup`, collective over `comm`), so it never matches the host's messages.
    /// MPI is never finalised by Ballast. Errors: [`Error::MpiState`] when MPI is not
    /// initialised yet or already finalised.
    pub fn from_communicator<C: rsmpi::topology::Communicator>(comm: &C) -> Result<Mpi> {
        if !rsmpi::environment::is_initialized() || rsmpi::environment::is_finalized() {
            return Err(Error::MpiState {
                op: "Mpi::from_communicator",
                what: "MPI must be initialised by the host program (and not finalised) before Ballast uses its communicator",
            });
        }
        Ok(Mpi {
            universe: None,
            baseline: ProcStatus::read_self().unwrap_or_default(),
            world: comm.duplicate(),
            direct_part_bytes: DEFAULT_DIRECT_PART_BYTES,
        })
    }

    /// Sets the largest MPI message the bytes of a direct-path message (one larger than
    /// `buffer_size`) are split into for communicators made afterwards: default
    /// [`DEFAULT_DIRECT_PART_BYTES`] (1 GiB), clamped to `1..=i32::MAX` so no MPI count
    /// overflows. Every process must use the same value only for clarity: receivers take
    /// the parts as they come. Smaller values exercise the split of messages over 2 GiB.
    pub fn with_direct_part_bytes(mut self, bytes: usize) -> Mpi {
        self.direct_part_bytes = bytes.clamp(1, i32::MAX as usize);
        self
    }

    /// True when Ballast initialised MPI (and will finalise it on drop).
    pub fn initialized_by_ballast(&self) -> bool {
        self.universe.is_some()
    }

    /// This process' rank in the base communicator (`MPI_COMM_WORLD`, or the host's
    /// communicator given to [`Mpi::from_communicator`]).
    pub fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    /// Number of processes in the base communicator.
    pub fn size(&self) -> usize {
        self.world.size() as usize
    }

    /// The base communicator: `MPI_COMM_WORLD`, or Ballast's duplicate of the host's
    /// communicator given to [`Mpi::from_communicator`] (Ballast's traffic never uses it
    /// directly, only its duplicates).
    pub fn world(&self) -> &SimpleCommunicator {
        &self.world
    }

    /// The threading level MPI provides.
    pub fn threading(&self) -> Threading {
        rsmpi::environment::threading_support()
    }

    /// Creates this process' [`Communicator`]: one Ballast rank per MPI process, rank =
    /// world rank, on a fresh duplicate of the world communicator. Collective: every
    /// process must call it. The effective transport kind is `mpi` whatever `config` says.
    /// Finish it with [`Mpi::finish`] on every process; the finish (or the drop of a finished
    /// communicator) is collective: it receives every message still addressed to this rank
    /// before freeing the duplicate. A communicator dropped unfinished is never freed (its
    /// peers may still send to it), so that no later duplicate can see its messages.
    pub fn communicator(&self, config: &RuntimeConfig) -> Result<Communicator> {
        let t = mpi_transport(config)?;
        let (native, why_not) = self.use_native(&t, self.size())?;
        if native {
            return self.native(&t).map(Communicator::native);
        }
        // The effective configuration says the engine path (predictions follow it).
        let t = TransportConfig {
            mpi_native: false,
            ..t
        };
        let shared = Shared::new(self.world.duplicate(), self.size(), self.direct_part_bytes)?;
        let fabric = MpiFabric::new(shared, self.rank(), t.buffer_size, t.buffer_count);
        Ok(Communicator::new(Box::new(fabric), &t)?.with_note(why_not))
    }

    /// True when a world of `ranks` ranks takes the native path (see [`native`]): asked
    /// for, one rank per process, and `MPI_TAG_UB` large enough for Ballast's tags. Agreed
    /// on by every process (`MPI_Allreduce`, minimum), so that all of them make the same
    /// communicators. Collective.
    /// Checks that every process uses the same `buffer_size` (`MPI_Allgather`; a packet or
    /// message is received into a buffer of that size plus a fixed header, so a larger one
    /// from a peer could not be received): otherwise every process fails with the same
    /// [`Error::Config`] naming the first process that differs. Collective.
    fn agree_on_buffer_size(&self, t: &TransportConfig) -> Result<()> {
        let mine = t.buffer_size as u64;
        let mut all = vec![0u64; self.size()];
        self.world.all_gather_into(&mine, &mut all[..]);
        let first = all[0];
        if let Some((r, &other)) = all.iter().enumerate().find(|(_, &b)| b != first) {
            return Err(Error::Config {
                var: "BALLAST_BUFFER_SIZE",
                value: mine.to_string(),
                reason: format!("process 0 uses {first}, process {r} uses {other}: every process of an MPI job must use the same buffer_size"),
            });
        }
        Ok(())
    }

    /// Whether a communicator of one rank per process made now with `config` takes the
    /// MPI native path (see [`native`]), and, when it was asked for but would not be taken,
    /// why. Collective (every process must call it); errors as [`Mpi::communicator`]'s
    /// checks (different `buffer_size`s).
    pub fn native_path(&self, config: &RuntimeConfig) -> Result<(bool, Option<String>)> {
        self.use_native(&mpi_transport(config)?, self.size())
    }

    /// Returns the decision and, when the native path was asked for but not taken, why.
    /// Also checks [`Mpi::agree_on_buffer_size`] first. Collective.
    fn use_native(&self, t: &TransportConfig, ranks: usize) -> Result<(bool, Option<String>)> {
        self.agree_on_buffer_size(t)?;
        let procs = self.size();
        let tag_ub = native::tag_ub(&self.world)?;
        let why_not = if !t.mpi_native {
            Some(
                "MPI native path off (BALLAST_MPI_NATIVE / mpi_native): the engine runs above MPI"
                    .to_string(),
            )
        } else if ranks != procs {
            Some(format!("MPI native path not used: {ranks} Ballast ranks on {procs} MPI processes (it needs one rank per process); the engine runs above MPI"))
        } else if !native::tags_fit(tag_ub) {
            Some(format!("MPI native path not used: this MPI's MPI_TAG_UB is {tag_ub}, below Ballast's largest tag {}; the engine runs above MPI", crate::RESERVED_TAG_BASE - 1))
        } else {
            None
        };
        let mine = u8::from(t.mpi_native && why_not.is_none());
        let mut all = 0u8;
        self.world
            .all_reduce_into(&mine, &mut all, rsmpi::collective::SystemOperation::min());
        let why_not = match (mine, all) {
            (1, 0) => Some("MPI native path not used: another process has it off (BALLAST_MPI_NATIVE) or cannot use it; the engine runs above MPI".to_string()),
            _ => why_not,
        };
        Ok((all == 1, why_not))
    }

    fn native(&self, t: &TransportConfig) -> Result<native::MpiNative> {
        let line = native::AbortLine::new(self.world.duplicate());
        native::MpiNative::new(&self.world, t, self.direct_part_bytes, line)
    }

    /// Delivers `comm`'s own sends, keeps serving the other ranks until every rank
    /// finished (a non-blocking barrier on Ballast's communicator), then frees it.
    pub fn finish(mut comm: Communicator) -> Result<()> {
        comm.finalize()
    }

    /// Creates the communicator, runs `f` on it and finishes it (collective).
    pub fn run<R>(&self, config: &RuntimeConfig, f: impl FnOnce(&mut Communicator) -> R) -> Result<R> {
        let mut comm = self.communicator(config)?;
        let out = f(&mut comm);
        Self::finish(comm)?;
        Ok(out)
    }

    /// Prepares this process' part of a job of `n` Ballast ranks for
    /// [`Mpi::run_ranks`] (in `crate::launch`): the native path's communicator when it is
    /// taken (see [`Mpi::native_path`]), otherwise the world the engine-path ranks share.
    /// Collective.
    pub(crate) fn rank_world(&self, n: usize, config: &RuntimeConfig) -> Result<RankWorld> {
        let t = mpi_transport(config)?;
        let (native, why_not) = self.use_native(&t, n)?;
        let t = TransportConfig {
            mpi_native: native,
            ..t
        };
        if native {
            return Ok(RankWorld::Native {
                rank: self.rank(),
                native: Box::new(self.native(&t)?),
            });
        }
        let shared = Shared::new(self.world.duplicate(), n, self.direct_part_bytes)?;
        Ok(RankWorld::Engine { shared, t, why_not })
    }

    /// The footprint of `comm` under MPI: Ballast's own bytes (pool, staging buffers,
    /// protocol state) plus the process' memory deltas since [`Mpi::init`]. Errors:
    /// [`Error::Io`] when `/proc/self/status` cannot be read.
    pub fn footprint(&self, comm: &Communicator) -> Result<MpiFootprint> {
        let now = ProcStatus::read_self()?;
        let d = |a: u64, b: u64| a as i64 - b as i64;
        Ok(MpiFootprint {
            ballast: comm.footprint(),
            baseline: self.baseline,
            now,
            rss_delta_kb: d(now.vm_rss_kb, self.baseline.vm_rss_kb),
            lck_delta_kb: d(now.vm_lck_kb, self.baseline.vm_lck_kb),
            pin_delta_kb: d(now.vm_pin_kb, self.baseline.vm_pin_kb),
            note: MPI_MEMORY_NOTE,
        })
    }
}

/// This process' part of a [`Mpi::run_ranks`] job ([`Mpi::rank_world`]).
pub(crate) enum RankWorld {
    /// One rank per process on the native path: this process' rank and its native side.
    Native {
        /// The rank (= this process' MPI rank).
        rank: usize,
        /// The rank's native communicator, not started yet (boxed: it is large).
        native: Box<native::MpiNative>,
    },
    /// Ranks on the engine path, as threads over one shared world.
    Engine {
        /// The world of the `n` ranks (its `local_ranks` are this process').
        shared: Arc<Shared>,
        /// The effective transport configuration (`mpi_native` off).
        t: TransportConfig,
        /// Why the native path was not taken, when it was asked for.
        why_not: Option<String>,
    },
}

/// Footprint of one rank over MPI: what Ballast accounts itself, and what the process
/// measurably grew by since [`Mpi::init`] (which includes MPI's internal memory; when the
/// host initialised MPI, the baseline is taken after its `MPI_Init`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MpiFootprint {
    /// Ballast's own bytes, as for every transport.
    pub ballast: Footprint,
    /// Process counters at [`Mpi::init`].
    pub baseline: ProcStatus,
    /// Process counters now.
    pub now: ProcStatus,
    /// VmRSS now minus at init, KiB.
    pub rss_delta_kb: i64,
    /// VmLck now minus at init, KiB.
    pub lck_delta_kb: i64,
    /// VmPin now minus at init, KiB.
    pub pin_delta_kb: i64,
    /// [`MPI_MEMORY_NOTE`].
    pub note: &'static str,
}

fn mpi_transport(config: &RuntimeConfig) -> Result<TransportConfig> {
    let mut t = *config.transport();
    t.kind = TransportKind::Mpi;
    t.validate()?;
    Ok(t)
}
