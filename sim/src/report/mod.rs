//! Outputs of a run: `out.dat` (spikes in NEURON/neurodamus' text layout), `report.json`
//! and the per-rank table (cells, memory estimated and allocated, transport footprint
//! predicted and measured, peers predicted and connected, spikes, process memory).
//!
//! `out.dat` layout, as NEURON's and neurodamus' spike output: a first line `/scatter`,
//! then one `time\tgid` line per spike, time in ms with 3 decimals, sorted by time then
//! gid. Gids are 1-based, as neurodamus writes them: global cell index + 1, where the
//! global index is the population's offset (populations in circuit order) + node id.
//! Both files are written to a temporary file in the output directory and renamed into
//! place, so a failed run leaves no partial file.
use std::path::{Path, PathBuf};

use ballast_runtime::{Footprint, LockStatus, MemoryLock, RecvSharing, TransportConfig, TransportKind};
use serde::Serialize;

use crate::exchange::Spike;
use crate::run::RankOutcome;
use crate::SimError;

mod build;
pub use build::{build_report, describe_source, mismatches, Mismatches};

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename
/// ([`ballast_balancer::atomic::write_file`]: readable like any new file, 0666 less the umask).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), SimError> {
    Ok(ballast_balancer::atomic::write_file(path, bytes)?)
}

/// The text of `out.dat` for `spikes` (sorted by (step, global index)) with step `dt_ms`.
pub fn out_dat(spikes: &[Spike], dt_ms: f64) -> String {
    let mut text = String::with_capacity(16 + spikes.len() * 16);
    text.push_str("/scatter\n");
    for spike in spikes {
        text.push_str(&format!(
            "{:.3}\t{}\n",
            spike.step as f64 * dt_ms,
            spike.source as u64 + 1
        ));
    }
    text
}

/// One rank's row.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RankRow {
    pub rank: usize,
    pub cells: usize,
    /// Estimated memory of its cells (metype + synapses), KB.
    pub estimated_kb: f64,
    /// Cell state really allocated (estimated × memory scale), KB.
    pub allocated_kb: f64,
    /// Transport footprint the balancer's model predicts for its peers, bytes.
    pub footprint_predicted_bytes: u64,
    /// Transport footprint the communicator accounts after the run, bytes.
    pub footprint_measured_bytes: u64,
    /// Peers predicted by the balancer (`Network::peers`).
    pub peers_predicted: usize,
    /// Peers the communicator actually connected.
    pub peers_connected: u64,
    /// Of those, the peers it reached over the datagram path (`endpoint_overflow=datagram`
    /// past `max_endpoints`; 0 otherwise).
    pub datagram_peers: u64,
    /// Endpoints live at the end of the run.
    pub endpoints_live: u64,
    /// Endpoints opened during the run (closed since: opened − live).
    pub endpoints_opened: u64,
    pub spikes_sent: u64,
    pub spikes_received: u64,
    /// Spike messages sent to other ranks (p2p: one per out-peer per window; allgather:
    /// ranks − 1 per window).
    pub messages_sent: u64,
    /// Ballast's own accounting for this rank: state blocks + transport, KB.
    pub ballast_kb: f64,
    /// VmRSS / VmHWM of the process holding the rank at its end, KB (with `local`, the
    /// whole process: all ranks).
    pub vm_rss_kb: u64,
    pub vm_hwm_kb: u64,
    /// (measured − predicted) / predicted footprint, percent.
    pub footprint_diff_pct: f64,
    /// Why the measured footprint differs from the prediction, from the footprints
    /// themselves (`Footprint::differences`: the counts that differ and their cause, then
    /// the byte kinds); `None` when they are equal.
    pub footprint_diff_reason: Option<String>,
    /// The process holding the rank (see [`ProcessRow`]).
    pub process: usize,
    /// What the process' VmRSS / VmLck / VmPin grew by from before its communicator(s) to
    /// this rank's end, KB (the whole process: every rank it holds, cell state included).
    pub vm_rss_delta_kb: i64,
    pub vm_lck_delta_kb: i64,
    pub vm_pin_delta_kb: i64,
}

/// Largest |footprint measured − predicted| / predicted accepted by the verbs check, percent.
pub const FOOTPRINT_TOLERANCE_PCT: f64 = 10.0;

/// One process of a run: the kernel's view of what its ranks registered.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProcessRow {
    /// Process index: 0 when the ranks are threads of one process, else the process' rank.
    pub process: usize,
    /// The ranks it held.
    pub ranks: Vec<usize>,
    /// Registered (pinned or locked) bytes the model predicts for those ranks together.
    pub registered_predicted_bytes: u64,
    /// Registered bytes Ballast accounted for them.
    pub registered_accounted_bytes: u64,
    /// What the kernel counted as pinned or locked from before the communicator(s) to the end:
    /// max(ΔVmPin, ΔVmLck) × 1024 (verbs registrations count in VmPin, the local
    /// transport's mlock in VmLck; the larger avoids counting memory that is both twice).
    pub pinned_delta_bytes: i64,
    /// (pinned delta − predicted registered) / predicted registered, percent; `None` when
    /// the registered memory was not all pinned or locked (`lock_status` says why), so that
    /// there is nothing to compare against.
    pub pinned_diff_pct: Option<f64>,
    /// `pinned (registration)` (verbs), else the state of its ranks' `mlock` requests
    /// (`locked`, `partially locked`, `not locked`; `not asked` with `lock_pool` off or over
    /// MPI, which locks nothing of Ballast's).
    pub lock_status: String,
    /// Bytes its ranks asked to lock (held at the end), and of them the bytes locked.
    pub lock_asked_bytes: u64,
    pub lock_locked_bytes: u64,
    /// Lock requests the OS refused, of `lock_requests`.
    pub lock_refused_requests: u64,
    pub lock_requests: u64,
    /// The soft RLIMIT_MEMLOCK at the first refusal, bytes (`u64::MAX`: unlimited); `None`
    /// without a refusal.
    pub memlock_limit_bytes: Option<u64>,
    /// The OS error of the first refusal.
    pub lock_error: Option<String>,
    /// ΔVmRSS, KB (transport, cell state blocks, routing tables: everything the run added).
    pub vm_rss_delta_kb: i64,
    /// Cell state blocks allocated by its ranks, KB (part of ΔVmRSS).
    pub state_kb: f64,
}

fn pct(measured: f64, predicted: f64) -> f64 {
    if predicted == 0.0 {
        if measured == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        (measured - predicted) / predicted * 100.0
    }
}

fn delta(end: u64, start: u64) -> i64 {
    end as i64 - start as i64
}

/// The footprint `config` predicts for a rank with `peers` peers (`peer_nodes` peer nodes,
/// used by `xrc`) in a world of `ranks`.
pub fn predicted_footprint(
    config: &TransportConfig,
    peers: usize,
    peer_nodes: usize,
    ranks: usize,
) -> Footprint {
    let counted = if config.recv_sharing == RecvSharing::Xrc {
        peer_nodes
    } else {
        peers
    };
    config.predict(counted, ranks, config.ranks_per_node)
}

/// `Footprint::differences` joined; when the peers connected differ (not `xrc`, whose
/// model counts peer nodes), says whether the model for the peers actually connected
/// gives the measured bytes, i.e. whether the peer count is the whole difference.
fn diff_reason(
    measured: &Footprint,
    predicted: &Footprint,
    config: &TransportConfig,
    ranks: usize,
) -> Option<String> {
    let why = measured.differences(predicted, config);
    if why.is_empty() {
        return None;
    }
    let mut s = why.join("; ");
    // Whether another prediction accounts for the measured bytes.
    let verdict = |alt: &Footprint| {
        if alt.total_bytes() == measured.total_bytes() {
            "exactly the measured bytes".to_string()
        } else {
            format!("{} B, not the measured bytes either", alt.total_bytes())
        }
    };
    if measured.peers_connected != predicted.peers_connected && config.recv_sharing != RecvSharing::Xrc {
        let alt = config.predict(measured.peers_connected as usize, ranks, config.ranks_per_node);
        s.push_str(&format!(
            "; the model for the {} peers actually connected gives {}",
            measured.peers_connected,
            verdict(&alt)
        ));
    }
    let split_differs = measured.endpoints_live != predicted.endpoints_live
        || measured.datagram_peers != predicted.datagram_peers;
    if split_differs && (measured.datagram_peers > 0 || predicted.datagram_peers > 0) {
        // The datagram path: which peers hold endpoints depends on the order of the
        // connects (refusals by full peers, promotions); the model's bytes for the split
        // this rank holds tell whether that split is the whole difference.
        let alt = config.predict_with(
            measured.peers_connected as usize,
            measured.endpoints_live as usize,
            measured.datagram_peers as usize,
            ranks,
        );
        s.push_str(&format!(
            "; the model for the split this rank holds ({} endpoints, {} peers with datagram state: TransportConfig::predict_with) gives {}",
            measured.endpoints_live,
            measured.datagram_peers,
            verdict(&alt)
        ));
    }
    Some(s)
}

/// Rows of `outcomes` (by rank) against the predicted peers and peer nodes per rank.
pub fn rows(
    outcomes: &[RankOutcome],
    peers: &[usize],
    peer_nodes: &[usize],
    config: &TransportConfig,
) -> Vec<RankRow> {
    let ranks = outcomes.len();
    outcomes
        .iter()
        .map(|o| {
            let predicted = predicted_footprint(config, peers[o.rank], peer_nodes[o.rank], ranks);
            RankRow {
                rank: o.rank,
                cells: o.cells,
                estimated_kb: o.estimated_kb,
                allocated_kb: o.state_bytes as f64 / 1024.0,
                footprint_predicted_bytes: predicted.total_bytes(),
                footprint_measured_bytes: o.footprint.total_bytes(),
                peers_predicted: peers[o.rank],
                peers_connected: o.footprint.peers_connected,
                datagram_peers: o.footprint.datagram_peers,
                endpoints_live: o.footprint.endpoints_live,
                endpoints_opened: o.footprint.endpoints_opened,
                spikes_sent: o.exchange.spikes_sent,
                spikes_received: o.exchange.spikes_received,
                messages_sent: o.exchange.messages_sent,
                ballast_kb: (o.state_bytes + o.footprint.total_bytes()) as f64 / 1024.0,
                vm_rss_kb: o.process.vm_rss_kb,
                vm_hwm_kb: o.process.vm_hwm_kb,
                footprint_diff_pct: pct(o.footprint.total_bytes() as f64, predicted.total_bytes() as f64),
                footprint_diff_reason: diff_reason(&o.footprint, &predicted, config, ranks),
                process: o.proc_index,
                vm_rss_delta_kb: delta(o.process.vm_rss_kb, o.process_start.vm_rss_kb),
                vm_lck_delta_kb: delta(o.process.vm_lck_kb, o.process_start.vm_lck_kb),
                vm_pin_delta_kb: delta(o.process.vm_pin_kb, o.process_start.vm_pin_kb),
            }
        })
        .collect()
}

/// One row per process of `outcomes` (by rank), the registered memory predicted for its
/// ranks (peers and peer nodes per rank as for [`rows`]) against the kernel's counters.
/// The peak resident set of the process holding rank 0, KB: the largest VmHWM it read,
/// `now_kb` (read at the end) or any of its ranks' readings at their end. The kernel's
/// VmHWM is not monotonic between readings: it is the larger of the current resident set
/// (exact) and the high-water mark recorded when memory is unmapped, which it counts with
/// approximate per-CPU counters, so a reading after the ranks' memory is freed can be some
/// pages below one taken while they ran.
pub fn process_peak_kb(outcomes: &[RankOutcome], now_kb: u64) -> u64 {
    let Some(p0) = outcomes.iter().find(|o| o.rank == 0).map(|o| o.proc_index) else {
        return now_kb;
    };
    outcomes
        .iter()
        .filter(|o| o.proc_index == p0)
        .map(|o| o.process.vm_hwm_kb)
        .fold(now_kb, u64::max)
}

/// The counters of a process are those of its last rank to finish (largest VmRSS).
pub fn process_rows(
    outcomes: &[RankOutcome],
    peers: &[usize],
    peer_nodes: &[usize],
    config: &TransportConfig,
) -> Vec<ProcessRow> {
    let ranks = outcomes.len();
    let mut procs: Vec<usize> = outcomes.iter().map(|o| o.proc_index).collect();
    procs.sort_unstable();
    procs.dedup();
    procs
        .into_iter()
        .map(|p| {
            let mine: Vec<&RankOutcome> = outcomes.iter().filter(|o| o.proc_index == p).collect();
            let predicted: u64 = mine
                .iter()
                .map(|o| {
                    predicted_footprint(config, peers[o.rank], peer_nodes[o.rank], ranks).registered_bytes
                })
                .sum();
            let last = mine
                .iter()
                .max_by_key(|o| (o.process.vm_rss_kb, o.rank))
                .expect("a process has a rank");
            let pinned = delta(last.process.vm_pin_kb, last.process_start.vm_pin_kb)
                .max(delta(last.process.vm_lck_kb, last.process_start.vm_lck_kb))
                * 1024;
            let mut lock = MemoryLock::default();
            mine.iter().for_each(|o| lock.add(&o.memory_lock));
            // Verbs registrations pin whatever `lock_pool` says; the local transport's only
            // when every mlock was granted. Otherwise there is no lock to compare against.
            let (compared, lock_status) = match config.kind {
                TransportKind::Verbs => (true, "pinned (registration)".to_string()),
                _ => (lock.status() == LockStatus::Locked, lock.status().to_string()),
            };
            ProcessRow {
                process: p,
                ranks: mine.iter().map(|o| o.rank).collect(),
                registered_predicted_bytes: predicted,
                registered_accounted_bytes: mine.iter().map(|o| o.footprint.registered_bytes).sum(),
                pinned_delta_bytes: pinned,
                pinned_diff_pct: compared.then(|| pct(pinned as f64, predicted as f64)),
                lock_status,
                lock_asked_bytes: lock.asked_bytes,
                lock_locked_bytes: lock.locked_bytes,
                lock_refused_requests: lock.refused,
                lock_requests: lock.requests,
                memlock_limit_bytes: lock.limit_bytes,
                lock_error: lock.error_text(),
                vm_rss_delta_kb: delta(last.process.vm_rss_kb, last.process_start.vm_rss_kb),
                state_kb: mine.iter().map(|o| o.state_bytes as f64 / 1024.0).sum(),
            }
        })
        .collect()
}

/// The whole report of a run (`report.json`).
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub circuit: String,
    pub lb_mode: String,
    pub exchange: String,
    pub transport: String,
    pub recv_sharing: String,
    /// The endpoint cap (`max_endpoints`, 0 = none).
    pub max_endpoints: usize,
    /// What happens past the cap (`endpoint_overflow`: datagram or evict; it has no
    /// effect without a cap).
    pub endpoint_overflow: String,
    pub ranks: usize,
    pub tstop_ms: f64,
    pub dt_ms: f64,
    pub window_ms: f64,
    pub seed: u64,
    pub memory_scale: f64,
    /// `read FILE` or `regenerated FILE` (Memory), absent for RoundRobin.
    pub allocation: Option<String>,
    pub spikes: usize,
    /// Spike messages all ranks sent in the whole run (the sum of `per_rank[].messages_sent`),
    /// to measure the cost per message: `seconds / messages_sent`.
    pub messages_sent: u64,
    pub seconds: f64,
    pub per_rank: Vec<RankRow>,
    /// Every rank's connected peers equal the prediction (meaningful for p2p).
    pub peers_match: bool,
    /// Why not, when `peers_match` is false: how many ranks differ, the first one's counts,
    /// and the cause when it is known (the allgather exchange).
    pub peers_mismatch: Option<String>,
    /// Every rank's measured footprint equals the prediction.
    pub footprint_match: bool,
    /// Why not, when `footprint_match` is false: how many ranks differ and the first one's
    /// `footprint_diff_reason`, with the cause when it is known.
    pub footprint_mismatch: Option<String>,
    /// Largest |measured − predicted| / predicted footprint over the ranks, percent.
    pub footprint_max_diff_pct: f64,
    /// Every rank's measured footprint is within [`FOOTPRINT_TOLERANCE_PCT`] of the prediction.
    pub footprint_within_tolerance: bool,
    /// Per process: registered memory predicted against the kernel's pinned/locked counters.
    pub processes: Vec<ProcessRow>,
    /// Every process' pinned/locked growth is within [`FOOTPRINT_TOLERANCE_PCT`] of the
    /// registered memory predicted for its ranks; `None` when some process was not compared
    /// (its `pinned_diff_pct` is `None`: the lock was refused, partial or not asked).
    pub pinned_within_tolerance: Option<bool>,
    /// Rank 0's process' peak resident set, KB (with `local`: all ranks together): the
    /// largest VmHWM it read, at the end or at a rank's end ([`process_peak_kb`]).
    pub process_vm_hwm_kb: u64,
    pub out_dat: PathBuf,
    /// Rank 0's communicator notes when each process is one rank (`mpi`, `verbs` under a
    /// launcher): e.g. whether the MPI native path carried the run and why not.
    pub transport_notes: Vec<String>,
    /// Every refused or partial memory lock, one per process: the bytes asked and locked,
    /// the limit and the OS error ([`lock_notes`]).
    pub notes: Vec<String>,
}

/// One note per process whose ranks' `mlock` requests were refused (some or all): the
/// bytes asked and locked, the limit and the error (`MemoryLock::note`).
pub fn lock_notes(outcomes: &[RankOutcome], processes: &[ProcessRow]) -> Vec<String> {
    processes
        .iter()
        .filter_map(|p| {
            let mut lock = MemoryLock::default();
            outcomes
                .iter()
                .filter(|o| o.proc_index == p.process)
                .for_each(|o| lock.add(&o.memory_lock));
            lock.note()
                .map(|n| format!("process {} (ranks {}): {n}", p.process, ranks_text(&p.ranks)))
        })
        .collect()
}

/// `3`, `0-15`, or `-`.
fn ranks_text(ranks: &[usize]) -> String {
    match ranks {
        [one] => one.to_string(),
        [first, .., last] => format!("{first}-{last}"),
        [] => "-".into(),
    }
}

/// The largest and smallest of a value over rows ([`max_min`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MaxMin {
    /// The largest (`f64::MIN` over no rows).
    pub max: f64,
    /// The smallest (`f64::MAX` over no rows).
    pub min: f64,
}

/// Largest and smallest of `f` over the rows.
pub fn max_min(rows: &[RankRow], f: impl Fn(&RankRow) -> f64) -> MaxMin {
    rows.iter().map(&f).fold(
        MaxMin {
            max: f64::MIN,
            min: f64::MAX,
        },
        |m, x| MaxMin {
            max: m.max.max(x),
            min: m.min.min(x),
        },
    )
}

/// Largest |x| of `f` over `items` (0 when empty).
pub fn max_abs<T>(items: &[T], f: impl Fn(&T) -> f64) -> f64 {
    items.iter().map(|x| f(x).abs()).fold(0.0, f64::max)
}

/// The printed per-process table: registered memory predicted against the kernel's counters.
/// Where the registered memory was not all pinned or locked, `diff %` gives the lock's
/// state (`not locked`, `partial`, `not asked`) instead of a comparison.
pub fn process_table(r: &RunReport) -> String {
    let mut s = format!(
        "{:>7} {:>9} {:>14} {:>14} {:>14} {:>10} {:>12} {:>10}\n",
        "process", "ranks", "reg pred B", "reg acct B", "pin/lck d B", "diff %", "VmRSS d KB", "state KB"
    );
    for p in &r.processes {
        let diff = match p.pinned_diff_pct {
            Some(d) => format!("{d:.1}"),
            None if p.lock_status == LockStatus::Partial.as_str() => "partial".to_string(),
            None => p.lock_status.clone(),
        };
        s.push_str(&format!(
            "{:>7} {:>9} {:>14} {:>14} {:>14} {:>10} {:>12} {:>10.0}\n",
            p.process,
            ranks_text(&p.ranks),
            p.registered_predicted_bytes,
            p.registered_accounted_bytes,
            p.pinned_delta_bytes,
            diff,
            p.vm_rss_delta_kb,
            p.state_kb
        ));
    }
    s
}

/// The printed per-rank table.
pub fn table(r: &RunReport) -> String {
    let mut s = format!(
        "{:>5} {:>7} {:>12} {:>11} {:>12} {:>12} {:>6} {:>6} {:>6} {:>9} {:>9} {:>11} {:>10} {:>10}\n",
        "rank",
        "cells",
        "est KB",
        "alloc KB",
        "tp pred B",
        "tp meas B",
        "diff %",
        "peers",
        "conn",
        "sent",
        "recv",
        "ballast KB",
        "VmRSS KB",
        "VmHWM KB"
    );
    for x in &r.per_rank {
        s.push_str(&format!(
            "{:>5} {:>7} {:>12.0} {:>11.0} {:>12} {:>12} {:>6.1} {:>6} {:>6} {:>9} {:>9} {:>11.0} {:>10} {:>10}\n",
            x.rank,
            x.cells,
            x.estimated_kb,
            x.allocated_kb,
            x.footprint_predicted_bytes,
            x.footprint_measured_bytes,
            x.footprint_diff_pct,
            x.peers_predicted,
            x.peers_connected,
            x.spikes_sent,
            x.spikes_received,
            x.ballast_kb,
            x.vm_rss_kb,
            x.vm_hwm_kb
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_runtime::{ProcStatus, RuntimeConfig, TransportKind};

    fn outcome(
        rank: usize,
        proc_index: usize,
        rss: (u64, u64),
        pin: (u64, u64),
        lck: (u64, u64),
        registered: u64,
    ) -> RankOutcome {
        RankOutcome {
            rank,
            cells: 1,
            estimated_kb: 100.0,
            state_bytes: 2048,
            spikes: Vec::new(),
            exchange: Default::default(),
            out_peers: 1,
            in_peers: 1,
            footprint: Footprint {
                registered_bytes: registered,
                ..Footprint::default()
            },
            memory_lock: MemoryLock::default(),
            process: ProcStatus {
                vm_rss_kb: rss.1,
                vm_pin_kb: pin.1,
                vm_lck_kb: lck.1,
                ..ProcStatus::default()
            },
            process_start: ProcStatus {
                vm_rss_kb: rss.0,
                vm_pin_kb: pin.0,
                vm_lck_kb: lck.0,
                ..ProcStatus::default()
            },
            proc_index,
            windows: 1,
        }
    }

    #[test]
    fn process_rows_sum_the_ranks_of_each_process_against_its_counters() {
        let cfg = RuntimeConfig::builder()
            .transport(TransportKind::Verbs)
            .build()
            .unwrap();
        let t = cfg.transport();
        let per_rank = predicted_footprint(t, 1, 0, 3).registered_bytes;
        assert_eq!(per_rank, 64 * 8192 + 64 * 8192, "pool + SRQ buffers");
        // Ranks 0 and 1 are threads of process 0 (rank 1 measured last: larger VmRSS);
        // rank 2 is process 1, whose registrations the kernel counts in VmLck (mlock).
        let outs = [
            outcome(0, 0, (1000, 5000), (0, 1000), (0, 0), per_rank),
            outcome(1, 0, (1000, 6000), (0, 2064), (0, 0), per_rank),
            outcome(2, 1, (900, 2000), (0, 0), (16, 1040), per_rank),
        ];
        let p = process_rows(&outs, &[1, 1, 1], &[0, 0, 0], t);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].ranks, vec![0, 1]);
        assert_eq!(p[0].registered_predicted_bytes, 2 * per_rank);
        assert_eq!(p[0].registered_accounted_bytes, 2 * per_rank);
        assert_eq!(p[0].pinned_delta_bytes, 2064 * 1024);
        let d0 = p[0].pinned_diff_pct.expect("verbs registrations pin: compared");
        assert!((d0 - 0.78125).abs() < 1e-9, "{d0}");
        assert_eq!((p[0].vm_rss_delta_kb, p[0].state_kb), (5000, 4.0));
        assert_eq!(
            (p[1].ranks.clone(), p[1].pinned_delta_bytes, p[1].vm_rss_delta_kb),
            (vec![2], 1024 * 1024, 1100)
        );
        assert_eq!(
            (p[1].pinned_diff_pct, p[1].lock_status.as_str()),
            (Some(0.0), "pinned (registration)")
        );
        let rows = rows(&outs, &[1, 1, 1], &[0, 0, 0], t);
        assert_eq!(
            (rows[1].process, rows[1].vm_pin_delta_kb, rows[2].vm_lck_delta_kb),
            (0, 2064, 1024)
        );
        assert_eq!(max_abs(&p, |x| x.pinned_diff_pct.unwrap_or(0.0)), d0);
    }

    #[test]
    fn a_refused_lock_is_not_compared_and_its_note_names_asked_locked_and_limit() {
        let cfg = RuntimeConfig::builder()
            .transport(TransportKind::Local)
            .build()
            .unwrap();
        let t = cfg.transport();
        let per_rank = predicted_footprint(t, 1, 0, 2).registered_bytes;
        let mut granted = MemoryLock::default();
        granted.record_locked(per_rank);
        let mut refused = MemoryLock::default();
        refused.record_refused(per_rank, Some(12), Some(per_rank));
        let mut outs = [
            outcome(0, 0, (1000, 5000), (0, 0), (0, 1024), per_rank),
            outcome(1, 0, (1000, 6000), (0, 0), (0, 2048), per_rank),
        ];
        outs[0].memory_lock = granted;
        outs[1].memory_lock = refused;
        let p = process_rows(&outs, &[1, 1], &[0, 0], t);
        assert_eq!(
            (p[0].pinned_diff_pct, p[0].lock_status.as_str()),
            (None, "partially locked")
        );
        assert_eq!(
            (
                p[0].lock_asked_bytes,
                p[0].lock_locked_bytes,
                p[0].lock_refused_requests,
                p[0].lock_requests
            ),
            (2 * per_rank, per_rank, 1, 2)
        );
        assert_eq!(
            (p[0].memlock_limit_bytes, p[0].lock_error.as_deref()),
            (Some(per_rank), Some("Cannot allocate memory (os error 12)"))
        );
        let notes = lock_notes(&outs, &p);
        assert_eq!(notes.len(), 1);
        let want = format!(
            "process 0 (ranks 0-1): memory partially locked: asked to lock {} B",
            2 * per_rank
        );
        assert!(
            notes[0].starts_with(&want) && notes[0].contains(&format!("locked {per_rank} B")),
            "{}",
            notes[0]
        );
        assert!(
            notes[0].contains(&format!("RLIMIT_MEMLOCK (soft) {per_rank} B")),
            "{}",
            notes[0]
        );
        // Every lock granted: compared. lock_pool off: nothing asked, not compared.
        outs[1].memory_lock = granted;
        let p = process_rows(&outs, &[1, 1], &[0, 0], t);
        assert_eq!(
            (p[0].pinned_diff_pct, p[0].lock_status.as_str()),
            (Some(0.0), "locked")
        );
        assert!(lock_notes(&outs, &p).is_empty());
        outs.iter_mut()
            .for_each(|o| o.memory_lock = MemoryLock::default());
        let p = process_rows(&outs, &[1, 1], &[0, 0], t);
        assert_eq!(
            (p[0].pinned_diff_pct, p[0].lock_status.as_str()),
            (None, "not asked")
        );
    }

    #[test]
    fn out_dat_is_neurodamus_layout() {
        let spike = |step, source| Spike { step, source };
        let s = out_dat(&[spike(4, 0), spike(4, 9), spike(41, 2)], 0.025);
        assert_eq!(s, "/scatter\n0.100\t1\n0.100\t10\n1.025\t3\n");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.dat");
        write_atomically(&p, s.as_bytes()).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), s);
    }
}
