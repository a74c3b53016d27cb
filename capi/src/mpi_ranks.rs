//! Several ranks per MPI process from C (feature `mpi`): [`ballast_mpi_run_ranks`], the C
//! face of `Mpi::run_ranks`, with the rank function, failures and result of
//! `ballast_local_run` (`crate::local_run`).

use std::os::raw::{c_int, c_void};

use parking_lot::Mutex;

use ballast_runtime::mpi::rsmpi::{self, Threading};
use ballast_runtime::mpi::Mpi;
use ballast_runtime::TransportKind;

use crate::config::{ballast_config, config_of};
use crate::error::{boundary, Fail};
use crate::local_run::{ballast_rank_main, outcome, run_rank, Failures, UserPtr};
use crate::process::mpi::check_running;
use crate::BALLAST_EUNSUPPORTED;

/// Runs `rank_main(comm, user)` on `nranks` Ballast ranks spread over the processes of
/// MPI_COMM_WORLD, as Rust's `Mpi::run_ranks`: rank r runs in the process of MPI rank
/// `r % size`, on a thread of its own when that process holds several (a process holds
/// ceil((nranks - its MPI rank) / size) ranks, none when its MPI rank is `nranks` or
/// above; one runs on the calling thread). Collective: every process of MPI_COMM_WORLD
/// calls it with the same `nranks` and configuration. The communicators always run on the
/// engine path over MPI (Ballast's pool, credits and endpoints; ballast_comm_notes says
/// `path: engine`), also with one rank per process, and belong to this call as those of
/// ballast_local_run do: finished after rank_main returns (ballast_comm_free on one is
/// BALLAST_EINVAL), their requests not freed by then cancelled (that rank fails with
/// BALLAST_EINVAL). A rank that fails (returns non-zero) aborts the others, in every
/// process: their blocking and waiting calls return BALLAST_EPEER. ballast_abort on one of
/// these communicators is MPI_Abort.
///
/// MPI: initialised by this call at MPI_THREAD_MULTIPLE unless the host initialised it, and
/// then finalised before it returns (MPI cannot be initialised again: call it once per
/// process), except when the call itself fails (a negative code from its checks or the
/// launcher, not a rank's result): another process may then still wait for this one, so
/// MPI is left as it is and the process should exit. A host's MPI is reused and never
/// finalised; with more ranks than processes it must provide MPI_THREAD_MULTIPLE.
///
/// Returns, in each process, 0 when every rank of this process succeeded, else the non-zero
/// result of its lowest-numbered failing rank, as ballast_local_run (a rank that failed
/// only with BALLAST_EPEER counts only when no rank of the process failed otherwise), with
/// that rank's message. Errors: BALLAST_EINVAL for a NULL argument, `nranks` < 1, a
/// configuration that does not validate over MPI, MPI finalised already; BALLAST_ENOMEM
/// when this process' ranks do not fit (as ballast_local_run); BALLAST_EUNSUPPORTED when
/// the host initialised MPI below MPI_THREAD_MULTIPLE and a process holds several ranks,
/// when a host at MPI_THREAD_SINGLE or FUNNELED calls from another thread than MPI's main
/// one, or when the MPI running is not of the family libballast was built with; the
/// runtime's.
///
/// # Safety
/// `config` must be NULL or a ballast_config handle; `rank_main` must be safe to call from
/// several threads at once with `user`.
#[no_mangle]
pub unsafe extern "C" fn ballast_mpi_run_ranks(
    nranks: c_int,
    config: *const ballast_config,
    rank_main: ballast_rank_main,
    user: *mut c_void,
) -> c_int {
    const F: &str = "ballast_mpi_run_ranks";
    boundary(F, || {
        // SAFETY: NULL or a ballast_config handle (the contract).
        let cfg = unsafe { &*config_of(F, config)? };
        let main = rank_main.ok_or_else(|| Fail::null(F, "rank_main"))?;
        let n = usize::try_from(nranks)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| Fail::inval(format!("{F}: nranks is {nranks}, must be at least 1")))?;
        let cfg = cfg
            .cfg
            .to_builder()
            .transport(TransportKind::Mpi)
            .mpi_native(false)
            .build()
            .map_err(|e| Fail::inval(format!("{F}: {e}")))?;
        if rsmpi::environment::is_finalized() {
            return Err(Fail::inval(format!(
                "{F}: MPI was already finalised in this process (it cannot be initialised again)"
            )));
        }
        let mpi = Mpi::init_multithreaded().map_err(|e| Fail::runtime(F, &e.into()))?;
        let ran = run(F, &mpi, n, &cfg, main, user);
        if mpi.initialized_by_ballast() && ran.is_err() {
            // Another process may still wait for this one: MPI_Finalize could hang. The
            // process ends without it (mpirun reports that and exits non-zero).
            std::mem::forget(mpi);
        }
        ran
    })
}

/// The part of [`ballast_mpi_run_ranks`] after MPI is initialised.
fn run(
    func: &str,
    mpi: &Mpi,
    n: usize,
    cfg: &ballast_runtime::RuntimeConfig,
    main: unsafe extern "C" fn(*mut crate::comm::ballast_comm, *mut c_void) -> c_int,
    user: *mut c_void,
) -> Result<c_int, Fail> {
    let level = check_running(func)?;
    let (procs, me) = (mpi.size(), mpi.rank());
    let here = if me < n { (n - me).div_ceil(procs) } else { 0 };
    if here > 1 && level != Threading::Multiple {
        return Err(Fail::new(
            BALLAST_EUNSUPPORTED,
            format!(
                "{func}: {n} ranks on {procs} MPI processes put {here} ranks (threads) in MPI process {me}, but the host \
                 initialised MPI with {level:?}: initialise MPI with MPI_THREAD_MULTIPLE (or let Ballast initialise it)"
            ),
        ));
    }
    ballast_runtime::launch::check_ranks_fit(here.max(1), cfg.transport())
        .map_err(|e| Fail::runtime(func, &e))?;
    let user = UserPtr(user);
    let user = &user;
    let failures: Failures = Mutex::new(Vec::new());
    let failures_ref = &failures;
    let ran = mpi.run_ranks(n, cfg, move |comm| run_rank(comm, main, user.get(), failures_ref));
    outcome(func, ran.map(drop), failures)
}
