//! The fault-injection harness (feature `fault`; the engine's own Jepsen): [`run`] starts
//! ranks as threads over the local transport with each rank's fabric wrapped in a
//! [`FaultFabric`], which drops, duplicates, reorders and delays packets, stalls a rank and
//! kills one, as a seeded [`Faults`] plan says. The property test
//! `runtime/tests/fault_property.rs` runs random traffic over it for thousands of seeds.
//! Not for production: it exists to find the protocol's bugs.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::comm::error::{Error, FabricError, Result};
use crate::comm::Communicator;
use crate::core::config::{ConfigError, RuntimeConfig, TransportKind};
use crate::fabric::local::{LocalFabric, World};
use crate::launch::threads::{spawn, ThreadOpts};

mod fabric;

pub use fabric::FaultFabric;

/// A rank's stall: after `after_polls` polls, rank `rank`'s thread sleeps `duration` once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    /// The rank that stalls.
    pub rank: usize,
    /// Its poll count when it stalls.
    pub after_polls: u64,
    /// How long it sleeps.
    pub duration: Duration,
}

/// A rank's death: after `after_polls` polls, rank `rank` stops without finishing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kill {
    /// The rank killed.
    pub rank: usize,
    /// Its poll count when it dies.
    pub after_polls: u64,
}

/// The faults of a run: probabilities per datagram or per packet (0 to 1), the longest
/// delay, and at most one stall and one kill. Every random choice comes from generators
/// seeded with `seed` (one per rank), so a plan is replayable up to thread timing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Faults {
    /// The seed of every rank's generator.
    pub seed: u64,
    /// A datagram is lost.
    pub datagram_drop: f64,
    /// A datagram is sent twice.
    pub datagram_duplicate: f64,
    /// A datagram (each copy) is held up to `max_delay`, so it may overtake or be
    /// overtaken by later ones.
    pub datagram_delay: f64,
    /// A packet or control message of the reliable path is held up to `max_delay`
    /// (with everything after it toward the same peer: order per peer is kept).
    pub reliable_delay: f64,
    /// The longest a held packet waits.
    pub max_delay: Duration,
    /// A rank that stalls once.
    pub stall: Option<Stall>,
    /// A rank that dies.
    pub kill: Option<Kill>,
}

/// Counts of the faults injected in a run (every rank's).
#[derive(Debug, Default)]
pub struct FaultStats {
    /// Datagrams lost.
    pub dropped: AtomicU64,
    /// Datagrams sent twice.
    pub duplicated: AtomicU64,
    /// Packets, control messages and datagrams held back.
    pub held: AtomicU64,
    /// Stalls that happened.
    pub stalls: AtomicU64,
}

/// The plan and what happened, shared by the ranks of one [`run`].
pub(crate) struct FaultWorld {
    plan: Faults,
    killed: Vec<AtomicBool>,
    kill_time: Mutex<Option<Instant>>,
    stats: FaultStats,
    errors: Mutex<Vec<(usize, Error)>>,
}

impl FaultWorld {
    fn kill(&self, rank: usize) {
        self.kill_time.lock().get_or_insert_with(Instant::now);
        self.killed[rank].store(true, Ordering::Release);
    }

    fn is_killed(&self, rank: usize) -> bool {
        self.killed.get(rank).is_some_and(|k| k.load(Ordering::Acquire))
    }

    fn killed_other_than(&self, rank: usize) -> Option<usize> {
        let k = self.plan.kill?.rank;
        (k != rank && self.is_killed(k)).then_some(k)
    }

    fn note_error(&self, rank: usize, e: Error) {
        self.errors.lock().push((rank, e));
    }
}

thread_local! {
    /// Set on the thread of a rank the plan killed: its failure is not another rank's
    /// reason to abort (a dead process tells nobody).
    static KILLED_HERE: Cell<bool> = const { Cell::new(false) };
}

/// What a [`run`] gave: each rank's result (None: the rank's function did not return,
/// it panicked), when the killed rank died, the faults injected, and the error of the
/// launcher when a rank failed to finish (after a kill: a survivor whose sends to the
/// dead rank could not be delivered; every other rank sees `FabricError::Aborted` then).
#[derive(Debug)]
pub struct FaultRun<R> {
    /// Each rank's result, by rank.
    pub results: Vec<Option<R>>,
    /// When the killed rank died (None: no kill, or it finished before its poll count).
    pub killed_at: Option<Instant>,
    /// Faults injected.
    pub stats: FaultStats,
    /// The first error of a rank's finish, if any (see above).
    pub finish_error: Option<Error>,
}

/// Runs `f` on `n` ranks as threads over the local transport, each fabric wrapped in a
/// [`FaultFabric`] of `faults`. A rank that fails (other than the killed one) aborts the
/// others, as in [`crate::launch::threads::run_ranks`]. Errors: those of `run_ranks`'
/// checks; a rank's error at start-up. A rank's failure to finish is in
/// [`FaultRun::finish_error`].
pub fn run<R, F>(n: usize, config: &RuntimeConfig, faults: &Faults, f: F) -> Result<FaultRun<R>>
where
    F: Fn(&mut Communicator) -> R + Sync,
    R: Send,
{
    let cfg = *config.transport();
    if n == 0 {
        return Err(Error::Fabric(FabricError::InvalidRank {
            rank: 0,
            world_size: 0,
        }));
    }
    if cfg.kind != TransportKind::Local {
        return Err(Error::Config(ConfigError::TransportUnavailable {
            transport: cfg.kind,
            why: "fault::run runs transport=local only",
        }));
    }
    cfg.validate()?;
    let (world, parkers) = World::new(n);
    let world = Arc::new(world);
    let fw = Arc::new(FaultWorld {
        plan: *faults,
        killed: (0..n).map(|_| AtomicBool::new(false)).collect(),
        kill_time: Mutex::new(None),
        stats: FaultStats::default(),
        errors: Mutex::new(Vec::new()),
    });
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..n).map(|_| None).collect());
    let opts = ThreadOpts {
        name: Some("ballast-fault"),
        inline_single: false,
    };
    let out = spawn(
        parkers.into_iter().enumerate().collect(),
        opts,
        &|| {
            if !KILLED_HERE.with(|k| k.get()) {
                world.abort();
            }
        },
        |r, parker| {
            let local = LocalFabric::new(r, world.clone(), &cfg, parker);
            let fabric = FaultFabric::new(Box::new(local), fw.clone(), &cfg);
            Communicator::new(Box::new(fabric), &cfg)
        },
        &|comm: &mut Communicator| {
            let r = comm.rank();
            let out = f(comm);
            results.lock()[r] = Some(out);
        },
    );
    let fw = Arc::into_inner(fw).expect("the ranks' fabrics are gone");
    let finish_error = match out {
        Ok(_) => fw.errors.into_inner().into_iter().next().map(|(_, e)| e),
        Err(Error::Fabric(FabricError::Aborted)) if fw.kill_time.lock().is_some() => None,
        Err(e) if fw.kill_time.lock().is_some() => Some(e),
        Err(e) => return Err(e),
    };
    Ok(FaultRun {
        results: results.into_inner(),
        killed_at: fw.kill_time.into_inner(),
        stats: fw.stats,
        finish_error,
    })
}
