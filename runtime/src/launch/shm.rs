//! The shared-memory transport's ranks: one per process through the bootstrap
//! ([`communicator`], [`finish`]), or all as threads of this process ([`run_ranks`]: each
//! rank with its own segment, socket and rendezvous thread, as if it were a process of its
//! own, so that the whole fabric runs in one test process). Published as
//! `ballast_runtime::shm::{communicator, finish, run_ranks}`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::threads::{spawn, ThreadOpts};
use crate::bootstrap::Bootstrap;
use crate::comm::error::{Error, FabricError, Result};
use crate::comm::Communicator;
use crate::core::config::{RuntimeConfig, TransportConfig, TransportKind};
use crate::fabric::shm::rendezvous::{board_name, fetch, Listener};
use crate::fabric::shm::watch::Serve;
use crate::fabric::shm::{Board, Job, ShmFabric};

/// Jobs started by this process (a part of each job's name).
static JOBS: AtomicU64 = AtomicU64::new(0);

/// Runs `f` on `n` ranks over the shared-memory transport, each a thread of this process
/// (named `ballast-rank-{r}`), and returns the results by rank; as
/// [`threads::run_ranks`](super::threads::run_ranks) does for `local`, whose rules it
/// follows (each rank finishes like `MPI_Finalize`; a rank that fails or panics stops the
/// others with [`FabricError::Aborted`], and the first real error is returned). The
/// configuration's transport settings are used, with `transport=shm` whatever its own (its
/// communicators' `config().kind` and footprint model are shm's). Errors:
/// [`FabricError::InvalidRank`] for `n == 0`, the configuration's validation errors,
/// [`FabricError::Shm`] (a segment or socket that cannot be had).
pub fn run_ranks<R, F>(n: usize, config: &RuntimeConfig, f: F) -> Result<Vec<R>>
where
    F: Fn(&mut Communicator) -> R + Sync,
    R: Send,
{
    if n == 0 {
        return Err(Error::Fabric(FabricError::InvalidRank {
            rank: 0,
            world_size: 0,
        }));
    }
    let cfg = TransportConfig {
        kind: TransportKind::Shm,
        ..*config.transport()
    };
    cfg.validate()?;
    super::check_ranks_fit(n, &cfg)?;
    let board = Board::create("ballast-shm-board", n).map_err(|e| FabricError::Shm {
        rank: 0,
        peer: None,
        what: format!("the job's board for {n} ranks: {e}"),
    })?;
    let job = Job {
        name: format!("t{}-{}", std::process::id(), JOBS.fetch_add(1, Ordering::Relaxed)),
        board: Arc::new(board),
        timeout: config.bootstrap().timeout,
        stop: Arc::new(AtomicBool::new(false)),
    };
    let stop = || {
        job.stop.store(true, Ordering::Release);
        job.board.ring_all();
    };
    let opts = ThreadOpts {
        name: Some("ballast-rank"),
        inline_single: false,
    };
    let out = spawn(
        (0..n).map(|r| (r, ())).collect(),
        opts,
        &stop,
        |r, ()| {
            let fabric = ShmFabric::new(r, n, &cfg, config.shm(), job.clone(), Vec::new(), Vec::new())?;
            Communicator::new(Box::new(fabric), &cfg)
        },
        &f,
    )?;
    Ok(out.into_iter().map(|o| o.output).collect())
}

/// This process' node: `BALLAST_NODE` when set, else the host name and the kernel's boot
/// id (two machines, or one machine before and after a reboot, never share both).
fn node_id(config: &RuntimeConfig) -> String {
    if let Some(n) = &config.bootstrap().node {
        return n.trim().to_string();
    }
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    format!(
        "{}/{}",
        read("/proc/sys/kernel/hostname"),
        read("/proc/sys/kernel/random/boot_id")
    )
}

/// This process' [`Communicator`] over the shared-memory transport, one Ballast rank per
/// process (rank and size from `boot`), every rank on this node. Collective: every process
/// must call it. The first rank names the job (its pid and the time: two jobs on a node
/// never meet) and makes the board; each other rank fetches the board from it, and the
/// first rank's thread then watches every other rank's end (and theirs the first's): a
/// rank that dies makes the others' calls fail with [`FabricError::Aborted`] (`EPEER`).
/// Errors: the bootstrap's, [`FabricError::Shm`] (ranks on different nodes, named; a
/// segment, socket or board that cannot be had), the configuration's validation errors.
/// The configuration's transport settings are used, with `transport=shm`.
pub fn communicator(boot: &mut dyn Bootstrap, config: &RuntimeConfig) -> Result<Communicator> {
    let cfg = TransportConfig {
        kind: TransportKind::Shm,
        ..*config.transport()
    };
    cfg.validate()?;
    super::check_ranks_fit(1, &cfg)?;
    let (rank, n) = (boot.rank(), boot.size());
    let shm = |what: String| -> Error {
        FabricError::Shm {
            rank,
            peer: None,
            what,
        }
        .into()
    };
    let node = node_id(config);
    let nodes = boot.all_gather(node.as_bytes()).map_err(FabricError::from)?;
    if let Some((r, other)) = nodes
        .iter()
        .enumerate()
        .find(|(_, v)| v.as_slice() != node.as_bytes())
    {
        return Err(shm(format!(
            "the shm transport needs every rank on one node: this rank is on `{node}`, rank {r} on `{}` \
             (BALLAST_NODE, else the host name and boot id)",
            String::from_utf8_lossy(other)
        )));
    }
    // The first rank names the job, makes the board and listens for it before the others
    // learn the name; it joins the gather of the name even when that failed (an empty
    // name), so that nobody waits for it.
    let timeout = config.bootstrap().timeout;
    let mut first = None;
    let mut token = String::new();
    if rank == 0 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let name = format!("{:x}-{nanos:x}", std::process::id());
        first = Some(board_for(&name, n).map_err(shm));
        if matches!(first, Some(Ok(_))) {
            token = name;
        }
    }
    let names = boot.all_gather(token.as_bytes()).map_err(FabricError::from)?;
    let job_name = String::from_utf8_lossy(&names[0]).into_owned();
    let board = match first {
        Some(made) => made,
        None if job_name.is_empty() => Err(shm(
            "rank 0 could not make the job's board (its error is its own)".into(),
        )),
        None => fetch_board(&job_name, n, rank, timeout).map_err(shm),
    };
    // Every rank's fabric, then one more gather: a rank that could not start says so, and
    // nobody waits for it.
    let fabric = board.and_then(|(board, serves, watched)| {
        let job = Job {
            name: job_name,
            board: Arc::new(board),
            timeout,
            stop: Arc::new(AtomicBool::new(false)),
        };
        Ok(ShmFabric::new(rank, n, &cfg, config.shm(), job, serves, watched)?)
    });
    let started = boot
        .all_gather(&[u8::from(fabric.is_ok())])
        .map_err(FabricError::from)?;
    let fabric = fabric?;
    if let Some(r) = started.iter().position(|s| s.as_slice() != [1]) {
        return Err(shm(format!("rank {r} could not start (its error is its own)")));
    }
    Communicator::new(Box::new(fabric), &cfg)
}

/// What a rank's board is: the board, the sockets the rank serves and the connections it
/// watches.
type BoardParts = (Board, Vec<Serve>, Vec<(std::os::unix::net::UnixStream, u64)>);

/// The first rank's board for job `job` of `n` ranks, listened for.
fn board_for(job: &str, n: usize) -> std::result::Result<BoardParts, String> {
    let board = Board::create("ballast-shm-board", n).map_err(|e| format!("the job's board: {e}"))?;
    let name = board_name(job).map_err(|e| e.to_string())?;
    let listener = Listener::bind(&name).map_err(|e| format!("listening on `{name}`: {e}"))?;
    let fd = board
        .segment()
        .fd()
        .and_then(|f| f.try_clone_to_owned().ok())
        .ok_or_else(|| "the board's descriptor".to_string())?;
    let serve = Serve {
        listener,
        fd,
        keep: true,
    };
    Ok((board, vec![serve], Vec::new()))
}

/// Job `job`'s board fetched from its first rank by rank `rank`. The first rank listened
/// before it named the job: a refused connection means it is gone, at once an error.
fn fetch_board(
    job: &str,
    n: usize,
    rank: usize,
    timeout: std::time::Duration,
) -> std::result::Result<BoardParts, String> {
    let name = board_name(job).map_err(|e| e.to_string())?;
    let (conn, fd, _) = fetch(&name, timeout, rank as u64, &|| true)
        .map_err(|e| format!("fetching the job's board from `{name}`: {e}"))?;
    let board = Board::open(fd, n).map_err(|e| format!("the job's board: {e}"))?;
    Ok((board, Vec::new(), vec![(conn, 0)]))
}

/// Delivers `comm`'s sends, waits until every rank finished, then frees it.
pub fn finish(mut comm: Communicator) -> Result<()> {
    comm.finalize()
}
