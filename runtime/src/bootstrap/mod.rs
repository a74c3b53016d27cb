//! Start-up data exchange between the ranks of a job ([`Bootstrap`]: an all-gather of byte
//! strings), used before any transport is up, e.g. by the verbs transport to exchange its
//! connection data. Three implementations, chosen by [`auto`]: through MPI ([`MpiBootstrap`],
//! feature `mpi`, when MPI is initialised); through the launcher's environment plus a TCP
//! rendezvous at rank 0 ([`TcpBootstrap`], `BALLAST_ROOT`); in-process for ranks that are
//! threads ([`LocalBootstrap`], the `local` transport). [`Launch`] is the bootstrap of a job of
//! one rank per process together with the MPI it may have initialised for it, dropped in the
//! order MPI needs (the bootstrap's communicator before `MPI_Finalize`).

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
use crate::procstatus::ProcStatus;

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

/// The start-up exchange of a job of one rank per process ([`Launch::new`]), owning the MPI
/// it initialised for it, if any. Dropping it frees the bootstrap first, then finalises that
/// MPI (a communicator freed after `MPI_Finalize` aborts the process in Open MPI).
pub struct Launch {
    // Declared first: dropped before `mpi`, so an MPI bootstrap's duplicate communicator is
    // freed while MPI is still initialised.
    boot: Box<dyn Bootstrap>,
    kind: BootstrapKind,
    #[cfg(feature = "mpi")]
    mpi: Option<crate::mpi::Mpi>,
    at_start: ProcStatus,
}

impl Launch {
    /// Meets the other processes of this job. In a build with the `mpi` feature, a process
    /// started by `mpirun`/`mpiexec` (`OMPI_COMM_WORLD_RANK` or `PMI_RANK` set) without
    /// `BALLAST_ROOT` initialises MPI (unless the host program did) and exchanges through it;
    /// otherwise as [`auto`]. Errors: those of [`auto`] and of [`crate::mpi::Mpi::init`].
    pub fn new(config: &RuntimeConfig) -> Result<Launch> {
        let at_start = ProcStatus::read_self().unwrap_or_default();
        #[cfg(feature = "mpi")]
        let mpi = if mpi_launch(config) {
            Some(crate::mpi::Mpi::init()?)
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

    /// The exchange, for [`crate::verbs::communicator`] and the like (see
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
