//! The fanout investigation over verbs (`ballast fanout --transport verbs` under a launcher:
//! one rank per process): the generic [`super::exchange`], plus each process' own
//! memory counters (`/proc/self/status`) at start (before the communicator), after the
//! setup and after the fanout, compared with what the verbs footprint model says:
//!
//! - **VmPin** (what `ibv_reg_mr` pins) must grow by exactly the registered bytes, each
//!   registration in whole pages: the pool, the send headers, the SRQ's slots (shared) or
//!   each queue pair's receive slots (per-peer).
//! - **VmLck** (mlock) must not change: registrations pin, they do not lock.
//! - **VmRSS** must grow by at most the model's total plus [`RSS_SLACK_KIB`] (no lower
//!   bound: the pinned pages are resident, but the process' RSS can lose other pages
//!   meanwhile, and in the soft-RoCE guest it grew less than the pinned bytes): the model counts the pool, queue and
//!   control memory; the process also maps libibverbs' provider and grows its heap (the
//!   engine's maps, the TCP control streams' buffers), which the model does not count.
//!   The slack is a bound measured on soft-RoCE (see docs/TESTING.md), not a derivation.
//!
//! What the bootstrap's own library kept during the setup ([`Bootstrap::kept`]: under
//! `mpirun`, MPI connecting to peers and registering its buffers inside the start-up
//! exchange) is not the transport's: it is taken off the VmPin and VmRSS growth.

use ballast_runtime::bootstrap::{Bootstrap, Kept};
use ballast_runtime::fabric::FabricError;
use ballast_runtime::verbs::{self, communicator, HEADER_BYTES};
use ballast_runtime::{
    Error, Footprint, ProcStatus, RecvSharing, RuntimeConfig, TransportConfig, TransportKind,
};

use super::{exchange, FanoutReport, Snapshot};
use crate::SimError;

/// What VmRSS may grow beyond the model's total, KiB (provider library, heap, stacks).
pub const RSS_SLACK_KIB: u64 = 4096;

const PAGE: u64 = 4096;

fn pages(b: u64) -> u64 {
    b.div_ceil(PAGE) * PAGE
}

/// One process' (= rank's) memory around the fanout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessMemory {
    /// The rank (= process).
    pub rank: usize,
    /// Counters before the communicator was created.
    pub start: ProcStatus,
    /// Counters after the setup, before the fanout.
    pub before: ProcStatus,
    /// Counters after the fanout.
    pub after: ProcStatus,
    /// The rank's accounted footprint after the fanout.
    pub footprint: Footprint,
    /// The model's footprint for the peers this rank connected.
    pub predicted: Footprint,
    /// Bytes pinned by the registrations, each in whole pages.
    pub pinned_expected: u64,
    /// What the bootstrap's library kept during the setup (taken off the growths).
    pub bootstrap_kept: Kept,
}

impl ProcessMemory {
    /// VmPin growth since the start, bytes, less what the bootstrap's library kept.
    pub fn pin_growth(&self) -> u64 {
        self.after
            .vm_pin_kb
            .saturating_sub(self.bootstrap_kept.shift(&self.start).vm_pin_kb)
            * 1024
    }
    /// VmLck change after the setup, KiB (signed).
    pub fn lck_change_kib(&self) -> i64 {
        self.after.vm_lck_kb as i64 - self.before.vm_lck_kb as i64
    }
    /// VmRSS growth since the start, bytes (signed), less what the bootstrap's library kept.
    pub fn rss_growth(&self) -> i64 {
        (self.after.vm_rss_kb as i64 - self.bootstrap_kept.shift(&self.start).vm_rss_kb as i64) * 1024
    }
    /// The checks of the module docs, with a line saying what failed (empty when all hold).
    pub fn check(&self) -> Vec<String> {
        let mut bad = Vec::new();
        if self.pin_growth() != self.pinned_expected {
            bad.push(format!(
                "VmPin grew {} KiB, registrations pin {} KiB",
                self.pin_growth() / 1024,
                self.pinned_expected / 1024
            ));
        }
        if self.lck_change_kib() != 0 {
            bad.push(format!(
                "VmLck changed by {} KiB after the setup",
                self.lck_change_kib()
            ));
        }
        // Only an upper bound on VmRSS: the pinned pages are resident (VmPin proves them), but
        // the process' whole RSS can meanwhile lose other pages (the guest's kernel reclaims
        // file pages), so its growth was seen below the pinned bytes.
        let (rss, model) = (self.rss_growth(), self.predicted.total_bytes() as i64);
        if rss > model + RSS_SLACK_KIB as i64 * 1024 {
            bad.push(format!(
                "VmRSS grew {} KiB: above {} KiB model + {RSS_SLACK_KIB} KiB",
                rss / 1024,
                model / 1024
            ));
        }
        bad
    }
}

/// Result of [`fanout`] on rank 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerbsFanout {
    /// The same report as the other transports' fanouts (rank 0's counters).
    pub report: FanoutReport,
    /// Every process' memory, by rank.
    pub processes: Vec<ProcessMemory>,
}

fn put(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}

fn put_status(v: &mut Vec<u8>, s: &ProcStatus) {
    for x in [
        s.vm_rss_kb,
        s.vm_hwm_kb,
        s.vm_lck_kb,
        s.vm_pin_kb,
        s.vm_data_kb,
        s.vm_size_kb,
    ] {
        put(v, x);
    }
}

fn get_status(x: &[u64]) -> ProcStatus {
    ProcStatus {
        vm_rss_kb: x[0],
        vm_hwm_kb: x[1],
        vm_lck_kb: x[2],
        vm_pin_kb: x[3],
        vm_data_kb: x[4],
        vm_size_kb: x[5],
    }
}

fn put_fp(v: &mut Vec<u8>, f: &Footprint) {
    for field in f.fields() {
        put(v, field.value);
    }
}

fn get_fp(x: &[u64]) -> Footprint {
    Footprint::from_fields(x)
}

/// The fanout over verbs, one rank per process of `boot` (collective): rank 0 sends
/// `messages` messages of `ints` 32-bit integers to every other rank. Returns the report on
/// rank 0, `None` elsewhere. Errors: those of [`communicator`] and of the exchange
/// ([`SimError::Runtime`]), [`SimError::FanoutReport`] when a rank's report has the wrong
/// length.
pub fn fanout(
    boot: &mut dyn Bootstrap,
    config: &RuntimeConfig,
    messages: usize,
    ints: usize,
) -> Result<Option<VerbsFanout>, SimError> {
    let n = boot.size();
    if n < 2 {
        return Err(FabricError::InvalidRank {
            rank: n,
            world_size: n,
        }
        .into());
    }
    let start = ProcStatus::read_self().map_err(Error::from)?;
    let kept0 = boot.kept();
    let mut comm = communicator(boot, config)?;
    let kept = boot.kept().since(&kept0);
    let t = TransportConfig {
        kind: TransportKind::Verbs,
        ..*comm.config()
    };
    let rpn = t.ranks_per_node;
    let x = exchange(&mut comm, messages, ints)?;
    let (bp, ap) = (
        t.predict(x.before.peers_connected as usize, n, rpn),
        t.predict(x.after.peers_connected as usize, n, rpn),
    );
    let slot = (HEADER_BYTES + t.buffer_size) as u64;
    let b = t.buffer_size as u64;
    let header_slots = if t.pool_growth {
        t.max_pool_bytes / b
    } else {
        t.buffer_count as u64
    };
    let pinned = pages(x.after.pool_bytes)
        + pages(header_slots * HEADER_BYTES as u64)
        + if t.recv_sharing == RecvSharing::PerPeer {
            x.after.endpoints_live * pages(t.recv_depth as u64 * slot)
        } else {
            pages(t.srq_depth as u64 * slot)
        };
    let mut row = Vec::new();
    for s in [&start, &x.status_before, &x.status_after] {
        put_status(&mut row, s);
    }
    for f in [&x.before, &x.after, &bp, &ap] {
        put_fp(&mut row, f);
    }
    put(&mut row, pinned);
    put(&mut row, kept.vm_pin_kb as u64);
    put(&mut row, kept.vm_rss_kb as u64);
    let notes = comm.notes().to_vec();
    let all = comm.all_gatherv(&row)?;
    verbs::finish(comm)?;
    if boot.rank() != 0 {
        return Ok(None);
    }
    let rows: Vec<Vec<u64>> = all
        .iter()
        .map(|b| {
            b.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect()
        })
        .collect();
    let nf = Footprint::default().fields().len();
    let report_words = 18 + 4 * nf + 3;
    if let Some((peer, r)) = rows.iter().enumerate().find(|(_, r)| r.len() != report_words) {
        return Err(SimError::FanoutReport {
            rank: boot.rank(),
            peer,
            words: r.len(),
            expected: report_words,
        });
    }
    let fp = |r: &Vec<u64>, k: usize| get_fp(&r[18 + k * nf..18 + (k + 1) * nf]);
    let processes: Vec<ProcessMemory> = rows
        .iter()
        .enumerate()
        .map(|(rank, r)| ProcessMemory {
            rank,
            start: get_status(&r[0..6]),
            before: get_status(&r[6..12]),
            after: get_status(&r[12..18]),
            footprint: fp(r, 1),
            predicted: fp(r, 3),
            pinned_expected: r[18 + 4 * nf],
            bootstrap_kept: Kept {
                vm_pin_kb: r[19 + 4 * nf] as i64,
                vm_rss_kb: r[20 + 4 * nf] as i64,
            },
        })
        .collect();
    let sum = |k: usize| rows.iter().map(|r| fp(r, k).total_bytes()).sum::<u64>();
    let same = |a: Footprint, p: Footprint| a == p;
    let report = FanoutReport {
        // Registration pins (a refusal is an error): no mlock request.
        memory_lock: Default::default(),
        messages_sent: None,
        ranks: n,
        before: Snapshot {
            status: x.status_before,
            footprint: x.before,
            world_footprint_bytes: sum(0),
            world_predicted_bytes: sum(2),
        },
        after: Snapshot {
            status: x.status_after,
            footprint: x.after,
            world_footprint_bytes: sum(1),
            world_predicted_bytes: sum(3),
        },
        predicted: ap,
        all_ranks_match_model: rows
            .iter()
            .all(|r| same(fp(r, 0), fp(r, 2)) && same(fp(r, 1), fp(r, 3))),
        notes,
    };
    Ok(Some(VerbsFanout { report, processes }))
}
