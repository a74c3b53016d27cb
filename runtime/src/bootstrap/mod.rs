//! Start-up data exchange between the ranks of a job ([`Bootstrap`]: an all-gather of byte
//! strings), used before any transport is up, e.g. by the verbs transport to exchange its
//! connection data. Three implementations, chosen by [`auto`]: through MPI ([`MpiBootstrap`],
//! feature `mpi`, when MPI is initialised); through the launcher's environment plus a TCP
//! rendezvous at rank 0 ([`TcpBootstrap`], `BALLAST_ROOT`); in-process for ranks that are
//! threads ([`LocalBootstrap`], the `local` transport).

mod local;
#[cfg(feature = "mpi")]
mod mpi;
mod tcp;

pub use local::LocalBootstrap;
#[cfg(feature = "mpi")]
pub use mpi::MpiBootstrap;
pub use tcp::TcpBootstrap;

use crate::config::RuntimeConfig;
use crate::error::{Error, Result};

/// All-gather of byte strings across the ranks of a job.
pub trait Bootstrap {
    /// This rank, `0..size()`.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// Every rank contributes `data` (any length, may differ by rank); returns all ranks'
    /// data ordered by rank. Collective: every rank must call it, the same number of times.
    /// Errors: [`Error::Bootstrap`] naming the rank that failed or did not show up in time,
    /// [`Error::Mpi`].
    fn all_gather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>>;
}

/// Which implementation [`auto`] picked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootstrapKind {
    /// Through MPI.
    Mpi,
    /// Through the launcher's environment and a TCP rendezvous at rank 0.
    Tcp,
}

/// Picks the bootstrap for this process: MPI when the `mpi` feature is on and MPI is
/// initialised, otherwise TCP from `config.bootstrap()` (`BALLAST_ROOT` plus the rank and
/// size of the launcher). Errors: [`Error::Bootstrap`] when neither is available, and the
/// errors of [`TcpBootstrap::connect`].
pub fn auto(config: &RuntimeConfig) -> Result<(BootstrapKind, Box<dyn Bootstrap>)> {
    #[cfg(feature = "mpi")]
    if rsmpi::environment::is_initialized() && !rsmpi::environment::is_finalized() {
        return Ok((BootstrapKind::Mpi, Box::new(MpiBootstrap::new()?)));
    }
    let b = config.bootstrap();
    if b.root.is_none() || b.rank.is_none() {
        return Err(Error::Bootstrap(
            "no initialised MPI and no rendezvous: set BALLAST_ROOT=host:port and the rank and size \
             (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE, SLURM_PROCID/NTASKS or BALLAST_RANK/SIZE)"
                .into(),
        ));
    }
    Ok((BootstrapKind::Tcp, Box::new(TcpBootstrap::connect(b)?)))
}
