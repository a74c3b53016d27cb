//! Communicators of one rank per process, owned by C: [`ballast_comm_from_env`] (started
//! by a launcher, over the configured transport), [`ballast_comm_from_mpi`] (feature `mpi`:
//! over the host's initialised MPI and a communicator it gives), and their collective
//! finish in `ballast_comm_free` ([`free_owned`]). Owns what each such communicator lives
//! on (the MPI state, the verbs launch) and, under MPI, the check of the host's thread
//! level and of the MPI family the library was built with.

use std::os::raw::c_int;

use ballast_runtime::{local, resolve_transport, Communicator, RuntimeConfig, TransportKind};

use crate::comm::ballast_comm;
use crate::config::ballast_config;
use crate::config::config_or_default;
use crate::error::{boundary, Fail};
use crate::handles::{self, Kind};
use crate::{BALLAST_EINTERNAL, BALLAST_EINVAL, BALLAST_ENOMEM, BALLAST_EUNSUPPORTED};

/// What an owned communicator lives on, dropped after it in [`free_owned`].
pub(crate) enum Owned {
    /// A world of one rank over `local`.
    Single,
    /// MPI: the runtime's MPI state (which finalises MPI on drop only if Ballast
    /// initialised it) and the thread rule of the host's thread level.
    #[cfg(feature = "mpi")]
    Mpi(Box<mpi::MpiOwned>),
    /// Verbs or shared memory: the start-up exchange (and the MPI it may have initialised
    /// for it), and the transport's collective finish.
    #[cfg(any(feature = "verbs", target_os = "linux"))]
    Launched(Box<ballast_runtime::launch::Launch>, Finish),
}

/// A transport's collective finish (`verbs::finish`, `shm::finish`).
#[cfg(any(feature = "verbs", target_os = "linux"))]
type Finish = fn(Communicator) -> ballast_runtime::Result<()>;

/// A transport's communicator over a bootstrap (`verbs::communicator`, `shm::communicator`).
#[cfg(any(feature = "verbs", target_os = "linux"))]
type Connect = fn(
    &mut dyn ballast_runtime::bootstrap::Bootstrap,
    &RuntimeConfig,
) -> ballast_runtime::Result<Communicator>;

/// One rank per process of the launcher over the transport of `connect` and `finish`
/// (verbs, shm): the start-up exchange through [`ballast_runtime::launch::Launch`], left
/// unfinalised after an error.
#[cfg(any(feature = "verbs", target_os = "linux"))]
fn launched(
    func: &str,
    cfg: &RuntimeConfig,
    connect: Connect,
    finish: Finish,
) -> Result<*mut ballast_comm, Fail> {
    let mut launch = ballast_runtime::launch::Launch::new(cfg).map_err(|e| Fail::runtime(func, &e))?;
    match connect(launch.bootstrap(), cfg) {
        Ok(comm) => handle(func, comm, Owned::Launched(Box::new(launch), finish)),
        Err(e) => {
            launch.abandon();
            Err(Fail::runtime(func, &e))
        }
    }
}

impl Owned {
    /// Checked before every call on the communicator: under MPI below
    /// `MPI_THREAD_MULTIPLE`, the calling thread must be the one that made it.
    #[cfg_attr(not(feature = "mpi"), allow(unused_variables))]
    pub(crate) fn enter(&self, func: &str) -> Result<(), Fail> {
        match self {
            #[cfg(feature = "mpi")]
            Owned::Mpi(m) => m.enter(func),
            _ => Ok(()),
        }
    }
}

/// Wraps `comm` and what it lives on in a new handle for C. Errors: BALLAST_ENOMEM when
/// no handle can be had (the communicator is then dropped unfinished).
fn handle(func: &str, comm: Communicator, owned: Owned) -> Result<*mut ballast_comm, Fail> {
    let p = Box::into_raw(Box::new(ballast_comm::owned(Box::new(comm), owned)));
    match handles::register(Kind::Comm, p.cast()) {
        Some(h) => Ok(h as *mut ballast_comm),
        None => {
            // SAFETY: the box just made, never handed out.
            let (comm, owned) = unsafe { Box::from_raw(p) }.into_owned();
            leave_unfinished(*comm, owned);
            Err(Fail::new(
                BALLAST_ENOMEM,
                format!("{func}: no handle for the communicator (out of memory)"),
            ))
        }
    }
}

/// One rank per process, started by a launcher: the rank and world size come from the
/// launcher's variables (`OMPI_COMM_WORLD_RANK`/`SIZE`, `PMI_RANK`/`SIZE`,
/// `SLURM_PROCID`/`NTASKS` or `BALLAST_RANK`/`SIZE`), and the configured transport is
/// used (`auto` resolved as the runtime does):
/// - `mpi` (an `mpi` build): MPI is initialised unless the host did it
///   (`MPI_THREAD_SERIALIZED`), and, when Ballast initialised it, finalised by
///   ballast_comm_free (MPI cannot be initialised again in that process);
/// - `verbs` (a `verbs` build): the addresses are exchanged through `BALLAST_ROOT`
///   (`host:port` of rank 0), or through MPI under mpirun in a build with `mpi`;
/// - `shm` (Linux): every process on this node; they meet through MPI under mpirun in a
///   build with `mpi`, `BALLAST_ROOT`, or the node's socket named by the launcher's job
///   step (`SLURM_JOB_ID`.`SLURM_STEP_ID` under srun, Open MPI's job id under its mpirun):
///   no MPI call moves data. New in 0.4.
/// - `local`: only for a world of one process (no launcher, or a launcher of size 1).
///
/// A NULL `config` is the defaults and the BALLAST_* environment (what
/// ballast_config_new gives). Free the communicator with ballast_comm_free on every rank.
/// Errors: BALLAST_EINVAL for NULL `out`, a configuration that does not validate, `local` with a world of
/// more than one process, missing launcher variables; BALLAST_EUNSUPPORTED for a
/// transport not built in, or an MPI other than the library's (see
/// ballast_comm_from_mpi); the runtime's errors (e.g. BALLAST_EPEER when a peer does not
/// arrive within `BALLAST_BOOTSTRAP_TIMEOUT`).
///
/// # Safety
/// `config` must be NULL or a ballast_config handle, not freed by another thread during the
/// call (a freed one is refused); `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_comm_from_env(
    config: *const ballast_config,
    out: *mut *mut ballast_comm,
) -> c_int {
    const F: &str = "ballast_comm_from_env";
    boundary(F, || {
        let cfg = config_or_default(F, config)?;
        // SAFETY: NULL or writable (the contract).
        let out = unsafe { out.as_mut() }.ok_or_else(|| Fail::null(F, "out"))?;
        *out = std::ptr::null_mut();
        cfg.transport()
            .validate()
            .map_err(|e| Fail::inval(format!("{F}: {e}")))?;
        let kind = resolve_transport(&cfg).kind;
        // What the rank allocates at start must fit (ulimit -v, the machine) before it is made.
        ballast_runtime::launch::check_ranks_fit(1, cfg.transport()).map_err(|e| Fail::runtime(F, &e))?;
        let resolved = cfg
            .to_builder()
            .transport(kind)
            .build()
            .map_err(|e| Fail::inval(format!("{F}: {e}")))?;
        *out = from_env(F, &resolved, kind)?;
        Ok(0)
    })
}

fn from_env(func: &str, cfg: &RuntimeConfig, kind: TransportKind) -> Result<*mut ballast_comm, Fail> {
    match kind {
        TransportKind::Local => {
            let size = cfg.bootstrap().size.unwrap_or(1);
            if size != 1 {
                return Err(Fail::inval(format!(
                    "{func}: the transport is local (ranks as threads of one process), but this process was \
                     launched as one of {size} (from {}): use transport shm (every rank on this node), mpi or verbs, or \
                     ballast_local_run",
                    cfg.bootstrap().rank_var.unwrap_or("the launcher's variables")
                )));
            }
            let comm = local::single(cfg).map_err(|e| Fail::runtime(func, &e))?;
            handle(func, comm, Owned::Single)
        }
        #[cfg(feature = "mpi")]
        TransportKind::Mpi => mpi::from_env(func, cfg),
        #[cfg(feature = "verbs")]
        TransportKind::Verbs => launched(
            func,
            cfg,
            ballast_runtime::verbs::communicator,
            ballast_runtime::verbs::finish,
        ),
        #[cfg(target_os = "linux")]
        TransportKind::Shm => launched(func, cfg, ballast_runtime::shm::communicator, ballast_runtime::shm::finish),
        other => Err(Fail::new(
            BALLAST_EUNSUPPORTED,
            format!("{func}: transport {other} is not built into this libballast (build it with --features mpi,verbs)"),
        )),
    }
}

/// The collective finish of an owned communicator `c` (its handle already taken back from
/// C): cancels its live requests, finishes the communicator and drops what it lived on.
/// Returns 0, or BALLAST_EINVAL when requests were still live (cancelled, and the
/// communicator still finished), or the finish's error; the handle is freed in every case.
pub(crate) fn free_owned(func: &str, mut c: ballast_comm) -> Result<c_int, Fail> {
    let live = c.cancel_requests();
    let poisoned = c.poisoned.take();
    let (comm, owned) = c.into_owned();
    if let Some(why) = poisoned {
        // Its state is not known to be whole: dropped unfinished (the peers see it go).
        leave_unfinished(*comm, owned);
        return Err(Fail::new(
            BALLAST_EINTERNAL,
            format!("{func}: communicator poisoned, dropped without the collective finish: {why}"),
        ));
    }
    let finished = match owned {
        Owned::Single => local::finish(*comm),
        #[cfg(feature = "mpi")]
        Owned::Mpi(m) => return mpi::free(func, *comm, m, live),
        #[cfg(any(feature = "verbs", target_os = "linux"))]
        Owned::Launched(launch, finish) => match finish(*comm) {
            Ok(()) => Ok(()),
            Err(e) => {
                launch.abandon();
                return Err(Fail::runtime(func, &e));
            }
        },
    };
    finished.map_err(|e| Fail::runtime(func, &e))?;
    cancelled(func, live)
}

/// BALLAST_EINVAL when `live` requests were cancelled by the free.
fn cancelled(func: &str, live: usize) -> Result<c_int, Fail> {
    if live > 0 {
        return Err(Fail::new(
            BALLAST_EINVAL,
            format!("{func}: {live} request(s) still live were cancelled (the communicator was finished and freed)"),
        ));
    }
    Ok(0)
}

/// Drops a communicator that cannot be finished, and what it lived on, without
/// finalising an MPI that others may still be waiting in.
fn leave_unfinished(comm: Communicator, owned: Owned) {
    drop(comm);
    match owned {
        Owned::Single => {}
        #[cfg(feature = "mpi")]
        Owned::Mpi(m) => (*m).leave(),
        #[cfg(any(feature = "verbs", target_os = "linux"))]
        Owned::Launched(launch, _) => launch.abandon(),
    }
}

// The MPI families (pure, so tested in every build; used by the `mpi` build).

/// The family of an `MPI_Get_library_version` string: `Open MPI`, or `MPICH` for the
/// MPICH ABI (MPICH, Intel MPI, MVAPICH, Cray MPICH), else `None`.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) fn family(version: &str) -> Option<&'static str> {
    if version.contains("Open MPI") {
        Some("Open MPI")
    } else if ["MPICH", "Intel(R) MPI", "MVAPICH", "CRAY MPICH"]
        .iter()
        .any(|k| version.contains(k))
    {
        Some("MPICH")
    } else {
        None
    }
}

/// Checks that `running` (the library version string of the MPI in this process) is
/// of the family `built` the library was compiled with: `MPI_Comm` and the other
/// handles are pointers in Open MPI and integers in MPICH, so a mix would misread them.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) fn same_family(func: &str, built: &str, running: &str) -> Result<(), Fail> {
    let line = running.lines().next().unwrap_or("").trim();
    match family(running) {
        Some(f) if f == built => Ok(()),
        Some(f) => Err(Fail::new(
            BALLAST_EUNSUPPORTED,
            format!(
                "{func}: libballast was built with {built}, but this process runs {f} ({line}): \
                 MPI handles differ between the two; rebuild libballast with the host's MPI"
            ),
        )),
        None if built == "unknown" => Ok(()),
        None => Err(Fail::new(
            BALLAST_EUNSUPPORTED,
            format!("{func}: libballast was built with {built}; this process runs an MPI it does not know ({line})"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_of_library_version_strings() {
        assert_eq!(
            family("Open MPI v4.1.4, package: Debian OpenMPI"),
            Some("Open MPI")
        );
        assert_eq!(
            family("MPICH Version:      4.0.2\nMPICH Release date: ..."),
            Some("MPICH")
        );
        assert_eq!(family("Intel(R) MPI Library 2021.6 for Linux* OS"), Some("MPICH"));
        assert_eq!(family("MVAPICH2 Version      :\t2.3.7"), Some("MPICH"));
        assert_eq!(family("Spectrum-X"), None);
    }

    #[test]
    fn a_different_family_is_unsupported_and_named() {
        assert!(same_family("f", "Open MPI", "Open MPI v4.1.4").is_ok());
        let e = same_family("f", "Open MPI", "MPICH Version: 4.0.2\nmore").unwrap_err();
        assert_eq!(e.code, BALLAST_EUNSUPPORTED);
        assert_eq!(
            e.msg,
            "f: libballast was built with Open MPI, but this process runs MPICH (MPICH Version: 4.0.2): \
             MPI handles differ between the two; rebuild libballast with the host's MPI"
        );
        assert_eq!(
            same_family("f", "MPICH", "Open MPI v5").unwrap_err().code,
            BALLAST_EUNSUPPORTED
        );
        assert_eq!(
            same_family("f", "Open MPI", "Unknown MPI 1").unwrap_err().code,
            BALLAST_EUNSUPPORTED
        );
        assert!(same_family("f", "unknown", "Unknown MPI 1").is_ok());
    }
}

#[cfg(feature = "mpi")]
pub(crate) mod mpi {
    //! Ballast over the host's MPI: the thread rule and the MPI family check.

    use std::os::raw::c_int;

    use ballast_runtime::mpi::rsmpi::{self, ffi, Threading};
    use ballast_runtime::mpi::Mpi;
    use ballast_runtime::{Communicator, RuntimeConfig};

    use super::{cancelled, handle, same_family, Owned};
    use crate::comm::ballast_comm;
    use crate::config::ballast_config;
    use crate::error::{boundary, Fail};
    use crate::BALLAST_EUNSUPPORTED;

    /// The family of the MPI this library was built with (capi/build.rs).
    pub(crate) const BUILT_WITH: &str = env!("BALLAST_MPI_FAMILY");

    /// An MPI communicator's context.
    pub(crate) struct MpiOwned {
        mpi: Mpi,
        level: Threading,
        /// The thread that made the communicator (`pthread_self`): the only one that may
        /// call on it below `MPI_THREAD_MULTIPLE`.
        creator: libc::pthread_t,
    }

    /// The calling thread, as the C library's threads know it. `pthread_self` reads the
    /// thread pointer; a `thread_local!` in a shared library costs a `__tls_get_addr`
    /// call on every call on the communicator. A value may be reused once its thread has
    /// exited, which only lets a later thread of a serialised program through.
    #[inline(always)]
    fn this_thread() -> libc::pthread_t {
        // SAFETY: pthread_self has no preconditions and cannot fail.
        unsafe { libc::pthread_self() }
    }

    impl MpiOwned {
        #[cfg_attr(not(feature = "mpi"), allow(unused_variables))]
        pub(crate) fn enter(&self, func: &str) -> Result<(), Fail> {
            if self.level != Threading::Multiple && this_thread() != self.creator {
                return Err(self.other_thread(func));
            }
            Ok(())
        }

        /// The error of a call from another thread (out of line: `enter` is on every
        /// call's hot path).
        #[cold]
        #[inline(never)]
        fn other_thread(&self, func: &str) -> Fail {
            Fail::new(
                BALLAST_EUNSUPPORTED,
                format!(
                    "{func}: called from another thread than the one that made the communicator, but MPI was \
                     initialised with {:?}: initialise MPI with MPI_THREAD_MULTIPLE to use communicators from several threads",
                    self.level
                ),
            )
        }

        /// Leaves MPI as it is (never finalised here): after an error, `MPI_Finalize`
        /// would wait for processes that may be waiting for this one.
        pub(crate) fn leave(self) {
            std::mem::forget(self.mpi);
        }
    }

    /// `MPI_Get_library_version` into a buffer larger than any MPI's
    /// `MPI_MAX_LIBRARY_VERSION_STRING` (Open MPI 256, MPICH 8192): when the MPI running is
    /// not the one this library was built with, the call resolves to the other library,
    /// which writes up to its own maximum (rsmpi sizes the buffer with the built one's).
    fn library_version() -> String {
        const ROOM: usize = 1 << 16;
        let mut buf = vec![0u8; ROOM];
        let mut len: c_int = 0;
        // SAFETY: MPI is initialised (the caller checked); `buf` holds ROOM bytes, more than
        // any implementation writes, and `len` is writable.
        let rc = unsafe { ffi::MPI_Get_library_version(buf.as_mut_ptr().cast(), &mut len) };
        if rc != 0 {
            return String::new();
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(ROOM);
        String::from_utf8_lossy(&buf[..end]).into_owned()
    }

    /// The checks of an initialised MPI before Ballast uses it: not finalised, of the
    /// library's family, a thread level whose rule the caller's thread meets.
    pub(crate) fn check_running(func: &str) -> Result<Threading, Fail> {
        if !rsmpi::environment::is_initialized() || rsmpi::environment::is_finalized() {
            return Err(Fail::inval(format!(
                "{func}: MPI is not initialised (or already finalised): call MPI_Init_thread first"
            )));
        }
        let running = library_version();
        same_family(func, BUILT_WITH, &running)?;
        let level = rsmpi::environment::threading_support();
        let mut main: c_int = 0;
        // SAFETY: MPI is initialised (checked above); `main` is writable.
        unsafe { ffi::MPI_Is_thread_main(&mut main) };
        if matches!(level, Threading::Single | Threading::Funneled) && main == 0 {
            return Err(Fail::new(
                BALLAST_EUNSUPPORTED,
                format!("{func}: MPI was initialised with {level:?}, so only its main thread may call MPI; call from it, or initialise MPI with MPI_THREAD_MULTIPLE"),
            ));
        }
        Ok(level)
    }

    fn wrap(func: &str, mpi: Mpi, cfg: &RuntimeConfig) -> Result<*mut ballast_comm, Fail> {
        let level = rsmpi::environment::threading_support();
        let comm = mpi.communicator(cfg).map_err(|e| Fail::runtime(func, &e))?;
        let owned = MpiOwned {
            mpi,
            level,
            creator: this_thread(),
        };
        handle(func, comm, Owned::Mpi(Box::new(owned)))
    }

    /// `ballast_comm_from_env` over MPI.
    pub(super) fn from_env(func: &str, cfg: &RuntimeConfig) -> Result<*mut ballast_comm, Fail> {
        if rsmpi::environment::is_finalized() {
            return Err(Fail::inval(format!(
                "{func}: MPI was already finalised in this process (it cannot be initialised again)"
            )));
        }
        let mpi = Mpi::init().map_err(|e| Fail::runtime(func, &e.into()))?;
        check_running(func)?;
        wrap(func, mpi, cfg)
    }

    /// Finishes an MPI communicator: BALLAST_EINVAL without calling MPI when the host
    /// already finalised it (its MPI state is then abandoned, not finished; the handle is
    /// ended all the same).
    pub(super) fn free(func: &str, comm: Communicator, m: Box<MpiOwned>, live: usize) -> Result<c_int, Fail> {
        if rsmpi::environment::is_finalized() {
            std::mem::forget(comm);
            (*m).leave();
            return Err(Fail::inval(format!(
                "{func}: MPI was finalised before ballast_comm_free: call ballast_comm_free before MPI_Finalize (the communicator's MPI state was abandoned, not finished; its handle is ended: any further call on it is refused)"
            )));
        }
        m.enter(func)?;
        match Mpi::finish(comm) {
            Ok(()) => {
                drop(m); // finalises MPI only if Ballast initialised it
                cancelled(func, live)
            }
            Err(e) => {
                (*m).leave();
                Err(Fail::runtime(func, &e))
            }
        }
    }

    /// Ballast over the host's initialised MPI, on the ranks of `comm` (`MPI_COMM_WORLD`
    /// or a sub-communicator of it): collective over `comm`. Ballast duplicates `comm`
    /// (its traffic never matches the host's messages) and never finalises MPI.
    /// ballast_comm_free must come before the host's MPI_Finalize; after it, it returns
    /// BALLAST_EINVAL instead of calling MPI. Below MPI_THREAD_MULTIPLE
    /// (`MPI_Query_thread`), a communicator may only be used from the thread that made it
    /// (BALLAST_EUNSUPPORTED otherwise), and under MPI_THREAD_SINGLE or FUNNELED that must
    /// be MPI's main thread. A NULL `config` is the defaults and the BALLAST_* environment
    /// (what ballast_config_new gives). Errors: BALLAST_EINVAL for NULL `out`,
    /// `MPI_COMM_NULL`, an inter-communicator, MPI not initialised or already finalised;
    /// BALLAST_EUNSUPPORTED when the MPI running in this process is not of the family
    /// (Open MPI, or MPICH and its derivatives) libballast was built with, whose MPI_Comm
    /// differs; the runtime's errors.
    ///
    /// # Safety
    /// `comm` must be a valid communicator handle of the MPI libballast was built with;
    /// `config` NULL or a ballast_config handle; `out` NULL or writable.
    #[no_mangle]
    pub unsafe extern "C" fn ballast_comm_from_mpi(
        comm: ffi::MPI_Comm,
        config: *const ballast_config,
        out: *mut *mut ballast_comm,
    ) -> c_int {
        const F: &str = "ballast_comm_from_mpi";
        boundary(F, || {
            let cfg = crate::config::config_or_default(F, config)?;
            // SAFETY: NULL or writable (the contract).
            let out = unsafe { out.as_mut() }.ok_or_else(|| Fail::null(F, "out"))?;
            *out = std::ptr::null_mut();
            check_running(F)?;
            // SAFETY: reading the constant MPI_COMM_NULL of the shim compiled with this MPI.
            if comm == unsafe { ffi::RSMPI_COMM_NULL } {
                return Err(Fail::inval(format!("{F}: comm is MPI_COMM_NULL")));
            }
            let mut inter: c_int = 0;
            // SAFETY: `comm` is a valid communicator (the contract); `inter` is writable.
            let rc = unsafe { ffi::MPI_Comm_test_inter(comm, &mut inter) };
            if rc != 0 || inter != 0 {
                return Err(Fail::inval(format!(
                    "{F}: comm is an inter-communicator (or not a communicator): give an intra-communicator such as MPI_COMM_WORLD"
                )));
            }
            let cfg = cfg
                .to_builder()
                .transport(ballast_runtime::TransportKind::Mpi)
                .build()
                .map_err(|e| Fail::inval(format!("{F}: {e}")))?;
            // What the rank allocates at start must fit (ulimit -v, the machine) first.
            ballast_runtime::launch::check_ranks_fit(1, cfg.transport()).map_err(|e| Fail::runtime(F, &e))?;
            // rsmpi's wrapper of a raw handle must not be given MPI_COMM_WORLD or
            // MPI_COMM_SELF (a debug assertion, a panic, in debug builds): those have their own.
            // SAFETY: reading the constants of the shim compiled with this MPI.
            let (world, me) = unsafe { (ffi::RSMPI_COMM_WORLD, ffi::RSMPI_COMM_SELF) };
            let host = if comm == world {
                rsmpi::topology::SimpleCommunicator::world()
            } else if comm == me {
                rsmpi::topology::SimpleCommunicator::self_comm()
            } else {
                // SAFETY: `comm` is a valid intra-communicator (checked above), not a system
                // one; the wrapper is only used to duplicate it and then forgotten, so the
                // host's handle is never freed by Ballast.
                unsafe { <rsmpi::topology::SimpleCommunicator as rsmpi::raw::FromRaw>::from_raw(comm) }
            };
            let mpi = Mpi::from_communicator(&host);
            std::mem::forget(host);
            let mpi = mpi.map_err(|e| Fail::runtime(F, &e.into()))?;
            *out = wrap(F, mpi, &cfg)?;
            Ok(0)
        })
    }
}
