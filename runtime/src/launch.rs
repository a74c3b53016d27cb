//! Starting ranks: [`Launch`], the start-up of a job of one rank per process (the
//! bootstrap together with the MPI it may have initialised for it, dropped in the order MPI
//! needs: the bootstrap's communicator before `MPI_Finalize`), and [`threads`], the one
//! launcher of ranks as threads of this process, used by every transport's `run_ranks`,
//! the command line and the tests.

use crate::core::config::RuntimeConfig;
use crate::core::error::Result;
use crate::core::procstatus::ProcStatus;
use crate::oob::{auto, Bootstrap, BootstrapKind};

/// The start-up exchange of a job of one rank per process ([`Launch::new`]), owning the MPI
/// it initialised for it, if any. Dropping it frees the bootstrap first, then finalises that
/// MPI (a communicator freed after `MPI_Finalize` aborts the process in Open MPI).
pub struct Launch {
    // Declared first: dropped before `mpi`, so an MPI bootstrap's duplicate communicator is
    // freed while MPI is still initialised.
    boot: Box<dyn Bootstrap>,
    kind: BootstrapKind,
    #[cfg(feature = "mpi")]
    mpi: Option<crate::transport::mpi::Mpi>,
    at_start: ProcStatus,
}

impl Launch {
    /// Meets the other processes of this job. In a build with the `mpi` feature, a process
    /// started by `mpirun`/`mpiexec` (`OMPI_COMM_WORLD_RANK` or `PMI_RANK` set) without
    /// `BALLAST_ROOT` initialises MPI (unless the host program did) and exchanges through it;
    /// otherwise as [`crate::oob::auto`]. Errors: those of [`crate::oob::auto`] and of [`crate::transport::mpi::Mpi::init`].
    pub fn new(config: &RuntimeConfig) -> Result<Launch> {
        let at_start = ProcStatus::read_self().unwrap_or_default();
        #[cfg(feature = "mpi")]
        let mpi = if mpi_launch(config) {
            Some(crate::transport::mpi::Mpi::init()?)
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

    /// The exchange, for [`crate::transport::verbs::communicator`] and the like (see
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

#[cfg(test)]
mod tests {
    use super::*;

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
