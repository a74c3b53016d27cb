//! The MPI transport (feature `mpi`): Ballast over any MPI library (Open MPI, MPICH) through
//! rsmpi, with the same [`Communicator`] API as `local`. It owns MPI start-up and
//! shut-down ([`Mpi`]: initialise MPI or reuse the host program's, never finalise what
//! Ballast did not initialise), Ballast's own duplicate of the world communicator (so that
//! Ballast's tags never collide with the host's), the fabric ([`MpiFabric`]) and the MPI
//! footprint ([`MpiFootprint`]: Ballast's own bytes plus measured process deltas, because
//! MPI's internal memory cannot be seen from outside the library), and the result of the
//! choice of MPI's native path ([`NativePath`]).
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

pub(crate) mod abort;
mod describe;
mod fabric;
#[allow(unsafe_code)] // the raw MPI calls over owned buffers, each behind a safe function
pub(crate) mod ffi;

pub use fabric::{
    MpiFabric, DEFAULT_DIRECT_PART_BYTES, DIRECT_TAG_BASE, HEADER_BYTES, MAX_PIGGYBACK, STAGING_EXTRA_BYTES,
};
/// The rsmpi crate this transport is built on (for host programs and benchmarks that call
/// MPI themselves with the same version).
pub use rsmpi;
use rsmpi::topology::{Communicator as _, SimpleCommunicator};
use rsmpi::Threading;

use crate::core::footprint::Footprint;
use crate::core::procstatus::ProcStatus;
use crate::fabric::error::{FabricError, Result};
pub(crate) use fabric::Shared;

/// What [`Mpi::footprint`] says about MPI's own memory.
pub const MPI_MEMORY_NOTE: &str =
    "MPI's internal memory (eager and unexpected-message buffers, its registrations) is measured as process deltas (VmRSS, VmPin, VmLck), not modelled";

/// MPI as Ballast uses it: initialised by Ballast (and finalised when this is dropped) or
/// by the host program (then left alone). Drop every `Communicator` made from it first.
pub struct Mpi {
    // Declared first: finalised (when owned) after nothing else of ours needs MPI.
    universe: Option<rsmpi::environment::Universe>,
    pub(crate) world: SimpleCommunicator,
    pub(crate) baseline: ProcStatus,
    pub(crate) direct_part_bytes: usize,
}

impl Mpi {
    /// Initialises MPI (`MPI_Init_thread`, serialized) unless the host program already did,
    /// in which case its MPI is reused and never finalised by Ballast.
    /// Errors: [`FabricError::MpiState`] if MPI was already finalised.
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
            return Err(FabricError::MpiState {
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
    /// MPI is never finalised by Ballast. Errors: [`FabricError::MpiState`] when MPI is not
    /// initialised yet or already finalised.
    pub fn from_communicator<C: rsmpi::topology::Communicator>(comm: &C) -> Result<Mpi> {
        if !rsmpi::environment::is_initialized() || rsmpi::environment::is_finalized() {
            return Err(FabricError::MpiState {
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
}

/// Whether the communicators made now take the MPI native path (`Mpi::native_path`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativePath {
    /// The native path is taken (the same on every process).
    pub taken: bool,
    /// When it was asked for but is not taken, why (this process' reason).
    pub why_not: Option<String>,
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
