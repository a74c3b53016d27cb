//! The MPI transport's ranks: this process' [`Communicator`] over MPI (MPI's native path
//! when it is taken, else the engine over [`MpiFabric`]), the agreement of every process on
//! that choice, [`Mpi::run_ranks`] and [`Mpi::footprint`].

use std::sync::Arc;

use rsmpi::collective::CommunicatorCollectives as _;
use rsmpi::topology::Communicator as _;

use super::threads::{spawn, ThreadOpts};
use super::RankOutput;
use crate::comm::error::{Error, Result};
use crate::comm::mpi_native as native;
use crate::comm::Communicator;
use crate::core::config::{ConfigError, RuntimeConfig, TransportConfig, TransportKind};
use crate::core::procstatus::ProcStatus;
use crate::fabric::mpi::{Mpi, MpiFabric, MpiFootprint, NativePath, Shared, MPI_MEMORY_NOTE};

impl Mpi {
    /// Creates this process' [`Communicator`]: one Ballast rank per MPI process, rank =
    /// world rank, on a fresh duplicate of the world communicator. Collective: every
    /// process must call it. The effective transport kind is `mpi` whatever `config` says.
    /// Finish it with [`Mpi::finish`] on every process; the finish (or the drop of a finished
    /// communicator) is collective: it receives every message still addressed to this rank
    /// before freeing the duplicate. A communicator dropped unfinished is never freed (its
    /// peers may still send to it), so that no later duplicate can see its messages.
    pub fn communicator(&self, config: &RuntimeConfig) -> Result<Communicator> {
        let t = mpi_transport(config)?;
        let NativePath { taken, why_not } = self.use_native(&t, self.size())?;
        if taken {
            return self.native(&t).map(|n| Communicator::over(Box::new(n)));
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

    /// Checks that every process uses the same `buffer_size` (a packet or message is
    /// received into a buffer of that size plus a fixed header, so a larger one from a peer
    /// could not be received) and the same `collective_checks` (a checked collective starts
    /// with an `MPI_Allgather` that an unchecked one does not make), in one `MPI_Allgather`:
    /// otherwise every process fails with the same [`ConfigError::Var`] naming the first
    /// process that differs. Collective.
    fn agree_on_settings(&self, t: &TransportConfig) -> Result<()> {
        let mine = [t.buffer_size as u64, u64::from(t.collective_checks)];
        let mut all = vec![0u64; 2 * self.size()];
        self.world.all_gather_into(&mine[..], &mut all[..]);
        let first = [all[0], all[1]];
        let differs = all.chunks_exact(2).enumerate().find(|(_, p)| *p != first);
        let Some((r, other)) = differs else {
            return Ok(());
        };
        // The value is the disagreement, not this process's own (which may be the default,
        // set by nobody): the same message on every process.
        let (var, name, how, i) = if other[0] != first[0] {
            (
                "BALLAST_BUFFER_SIZE",
                "buffer_size",
                "BALLAST_BUFFER_SIZE (or --buffer-size)",
                0,
            )
        } else {
            (
                "BALLAST_COLLECTIVE_CHECKS",
                "collective_checks",
                "BALLAST_COLLECTIVE_CHECKS",
                1,
            )
        };
        let show = |v: u64| match i {
            0 => v.to_string(),
            _ => (if v == 1 { "on" } else { "off" }).to_string(),
        };
        Err(Error::Config(ConfigError::Var {
            var,
            value: format!(
                "{} on MPI rank 0, {} on MPI rank {r}",
                show(first[i]),
                show(other[i])
            ),
            reason: format!(
                "every process of an MPI job must use the same {name} (this is MPI rank {}, with {}): \
                 set {how} alike on every process, or on none",
                self.rank(),
                show(mine[i]),
            ),
        }))
    }

    /// Whether a communicator of one rank per process made now with `config` takes the
    /// MPI native path (see [`native`]), and, when it was asked for but would not be taken,
    /// why. Collective (every process must call it); errors as [`Mpi::communicator`]'s
    /// checks (different `buffer_size`s).
    pub fn native_path(&self, config: &RuntimeConfig) -> Result<NativePath> {
        self.use_native(&mpi_transport(config)?, self.size())
    }

    /// Returns the decision and, when the native path was asked for but not taken, why.
    /// Also checks [`Mpi::agree_on_settings`] first. Collective.
    fn use_native(&self, t: &TransportConfig, ranks: usize) -> Result<NativePath> {
        self.agree_on_settings(t)?;
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
            Some(format!("MPI native path not used: this MPI's MPI_TAG_UB is {tag_ub}, below Ballast's largest tag {}; the engine runs above MPI", crate::protocol::matching::RESERVED_TAG_BASE - 1))
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
        Ok(NativePath {
            taken: all == 1,
            why_not,
        })
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
        let NativePath { taken, why_not } = self.use_native(&t, n)?;
        let t = TransportConfig {
            mpi_native: taken,
            ..t
        };
        if taken {
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

    /// Runs `f` on `n` Ballast ranks spread over the MPI processes (rank `r` in process
    /// `r % size`; several per process run as threads and need
    /// [`Mpi::init_multithreaded`](crate::fabric::mpi::Mpi::init_multithreaded); one per
    /// process runs on the calling thread). Collective. Returns this process' results, a
    /// [`RankOutput`] per rank, in ascending rank order. If a rank fails, the others (in every process) stop with
    /// [`FabricError::Aborted`](crate::comm::error::FabricError::Aborted) and the first real error is returned.
    pub fn run_ranks<R, F>(&self, n: usize, config: &RuntimeConfig, f: F) -> Result<Vec<RankOutput<R>>>
    where
        F: Fn(&mut Communicator) -> R + Sync,
        R: Send,
    {
        let opts = ThreadOpts {
            name: None,
            inline_single: true,
        };
        match self.rank_world(n, config)? {
            RankWorld::Native { rank, native } => {
                let line = native.abort_line();
                spawn(
                    vec![(rank, native)],
                    opts,
                    &|| line.abort(),
                    |_, native| Ok(Communicator::over(native)),
                    &f,
                )
            }
            RankWorld::Engine { shared, t, why_not } => {
                let out = spawn(
                    shared.local_ranks().into_iter().map(|r| (r, ())).collect(),
                    opts,
                    &|| shared.abort(),
                    |r, ()| {
                        let fabric = MpiFabric::new(shared.clone(), r, t.buffer_size, t.buffer_count);
                        Ok(Communicator::new(Box::new(fabric), &t)?.with_note(why_not.clone()))
                    },
                    &f,
                );
                drop(shared);
                out
            }
        }
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

fn mpi_transport(config: &RuntimeConfig) -> Result<TransportConfig> {
    let mut t = *config.transport();
    t.kind = TransportKind::Mpi;
    t.validate()?;
    Ok(t)
}
