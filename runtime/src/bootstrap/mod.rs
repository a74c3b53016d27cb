//! Start-up data exchange between the ranks of a job ([`Bootstrap`]: an all-gather of byte
//! strings), used before any transport is up, e.g. by the verbs transport to exchange its
//! connection data. Three implementations, chosen by [`auto`]: through MPI ([`MpiBootstrap`],
//! feature `mpi`, when MPI is initialised); through the launcher's environment plus a TCP
//! rendezvous at rank 0 ([`TcpBootstrap`], `BALLAST_ROOT`); the same rendezvous over a
//! node-local abstract socket named by the launcher's job step ([`NodeBootstrap`], the
//! `shm` transport without `BALLAST_ROOT`); in-process for ranks that are threads
//! ([`LocalBootstrap`], the `local` transport). The launch of a job of one rank per
//! process around a bootstrap is `launch::Launch`.

pub(crate) mod error;
mod local;
#[cfg(feature = "mpi")]
mod mpi;
#[cfg(target_os = "linux")]
pub(crate) mod node;
mod tcp;

pub use error::BootstrapError;
pub use local::LocalBootstrap;
#[cfg(feature = "mpi")]
pub use mpi::MpiBootstrap;
#[cfg(target_os = "linux")]
pub use node::NodeBootstrap;
pub use tcp::TcpBootstrap;

use crate::core::config::RuntimeConfig;
use crate::core::procstatus::ProcStatus;
use error::Result;

/// All-gather of byte strings across the ranks of a job.
pub trait Bootstrap {
    /// This rank, `0..size()`.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// Every rank contributes `data` (any length, may differ by rank); returns all ranks'
    /// data ordered by rank. Collective: every rank must call it, the same number of times.
    /// Errors: [`BootstrapError::Timeout`], [`BootstrapError::Io`] and the other bootstrap
    /// variants naming the rank that failed or did not show up in time,
    /// [`BootstrapError::MpiCall`].
    fn all_gather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// What this process' memory grew by inside [`Bootstrap::all_gather`] so far: memory the
    /// exchange's own library kept (e.g. MPI connecting to more peers and registering its
    /// buffers), which is not the transport's. Zero for the bootstraps that keep nothing.
    fn kept(&self) -> Kept {
        Kept::default()
    }
}

/// Growth of the process' counters inside a bootstrap's exchanges ([`Bootstrap::kept`]), KiB
/// (signed: a counter may also shrink).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Kept {
    /// VmPin growth (registered memory), KiB.
    pub vm_pin_kb: i64,
    /// VmRSS growth, KiB.
    pub vm_rss_kb: i64,
}

impl Kept {
    /// Adds the growth from `before` to `after`.
    pub fn add(&mut self, before: &ProcStatus, after: &ProcStatus) {
        self.vm_pin_kb += after.vm_pin_kb as i64 - before.vm_pin_kb as i64;
        self.vm_rss_kb += after.vm_rss_kb as i64 - before.vm_rss_kb as i64;
    }

    /// The growth since `earlier` (a previous value of the same bootstrap's [`Bootstrap::kept`]).
    pub fn since(&self, earlier: &Kept) -> Kept {
        Kept {
            vm_pin_kb: self.vm_pin_kb - earlier.vm_pin_kb,
            vm_rss_kb: self.vm_rss_kb - earlier.vm_rss_kb,
        }
    }

    /// `start` with this growth added: the baseline against which what the transport itself
    /// added is measured, when this growth happened after `start`.
    pub fn shift(&self, start: &ProcStatus) -> ProcStatus {
        let add = |v: u64, d: i64| (v as i64 + d).max(0) as u64;
        ProcStatus {
            vm_pin_kb: add(start.vm_pin_kb, self.vm_pin_kb),
            vm_rss_kb: add(start.vm_rss_kb, self.vm_rss_kb),
            ..*start
        }
    }
}

/// Which implementation [`auto`] picked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootstrapKind {
    /// Through MPI.
    Mpi,
    /// Through the launcher's environment and a TCP rendezvous at rank 0.
    Tcp,
    /// Through the launcher's environment and rank 0's socket on this node.
    Node,
}

/// The bootstrap [`auto`] picked, and which kind it is.
pub struct AutoBootstrap {
    /// Which exchange it is.
    pub kind: BootstrapKind,
    /// The bootstrap.
    pub boot: Box<dyn Bootstrap>,
}

/// What the shm transport misses to meet without `BALLAST_ROOT`, by the variable that gave
/// the rank (`None`: no rank at all).
fn shm_missing(rank_var: Option<&'static str>) -> &'static str {
    match rank_var {
        None => {
            "the shm transport's processes meet at this node's socket named by the launcher's job step, and need \
             their rank and size: none is set (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE, SLURM_PROCID/NTASKS or \
             BALLAST_RANK/SIZE); run under mpirun or srun, or set BALLAST_ROOT=host:port with BALLAST_RANK/SIZE"
        }
        Some(v) if v.starts_with("SLURM") => {
            "the shm transport's processes meet at this node's socket named by Slurm's job step: SLURM_PROCID is \
             set but SLURM_JOB_ID or SLURM_STEP_ID is not (srun sets both); set them, or BALLAST_ROOT=host:port"
        }
        Some(v) if v.starts_with("OMPI") => {
            "the shm transport's processes meet at this node's socket named by Open MPI's job id: \
             OMPI_COMM_WORLD_RANK is set but neither PMIX_NAMESPACE nor OMPI_MCA_ess_base_jobid is (mpirun sets \
             them); or set BALLAST_ROOT=host:port"
        }
        Some(_) => {
            "the shm transport's processes meet at this node's socket named by the launcher's job step, and \
             BALLAST_RANK or PMI_RANK comes with no job id (SLURM_JOB_ID and SLURM_STEP_ID, PMIX_NAMESPACE or \
             OMPI_MCA_ess_base_jobid): set BALLAST_ROOT=host:port"
        }
    }
}

/// Picks the bootstrap for this process: MPI when the `mpi` feature is on and MPI is
/// initialised, otherwise TCP from `config.bootstrap()` (`BALLAST_ROOT` plus the rank and
/// size of the launcher), otherwise, for the `shm` transport (every rank on this node),
/// [`NodeBootstrap`] named by the launcher's job step. Errors: [`BootstrapError::Env`] when
/// none is available, and the errors of [`TcpBootstrap::connect`] and
/// [`NodeBootstrap::connect`].
pub fn auto(config: &RuntimeConfig) -> Result<AutoBootstrap> {
    #[cfg(feature = "mpi")]
    if rsmpi::environment::is_initialized() && !rsmpi::environment::is_finalized() {
        return Ok(AutoBootstrap {
            kind: BootstrapKind::Mpi,
            boot: Box::new(MpiBootstrap::new()?),
        });
    }
    let b = config.bootstrap();
    #[cfg(target_os = "linux")]
    if b.root.is_none()
        && b.rank.is_some()
        && b.job.is_some()
        && config.transport().kind == crate::core::config::TransportKind::Shm
    {
        return Ok(AutoBootstrap {
            kind: BootstrapKind::Node,
            boot: Box::new(NodeBootstrap::connect(b)?),
        });
    }
    if b.root.is_none() && config.transport().kind == crate::core::config::TransportKind::Shm {
        return Err(BootstrapError::Env {
            what: shm_missing(b.rank_var),
        });
    }
    if b.root.is_none() || b.rank.is_none() {
        return Err(BootstrapError::Env {
            what: "no initialised MPI and no rendezvous: set BALLAST_ROOT=host:port and the rank and size \
                   (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE, SLURM_PROCID/NTASKS or BALLAST_RANK/SIZE)",
        });
    }
    Ok(AutoBootstrap {
        kind: BootstrapKind::Tcp,
        boot: Box::new(TcpBootstrap::connect(b)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_growth_shifts_the_baseline() {
        let s = |pin, rss| ProcStatus {
            vm_pin_kb: pin,
            vm_rss_kb: rss,
            vm_data_kb: 7,
            ..ProcStatus::default()
        };
        let mut k = Kept::default();
        k.add(&s(100, 5000), &s(10340, 9000));
        k.add(&s(10340, 9000), &s(10340, 8000));
        assert_eq!(
            k,
            Kept {
                vm_pin_kb: 10240,
                vm_rss_kb: 3000
            }
        );
        let earlier = Kept {
            vm_pin_kb: 240,
            vm_rss_kb: 4000,
        };
        assert_eq!(
            k.since(&earlier),
            Kept {
                vm_pin_kb: 10000,
                vm_rss_kb: -1000
            }
        );
        // The baseline moves by the growth; other counters are kept; it never goes below 0.
        assert_eq!(k.since(&earlier).shift(&s(50, 600)), s(10050, 0));
        assert_eq!(k.shift(&s(1, 2)), s(10241, 3002));
    }
}
