//! Building the report of a finished run: per-rank and per-process rows, the checks of
//! peers and footprint against the predictions and why they differ, the run's settings.
use std::path::Path;

use ballast_balancer::AllocationSource;
use ballast_runtime::{RuntimeConfig, TransportKind};

use super::{
    lock_notes, max_abs, process_peak_kb, process_rows, rows, RankRow, RunReport, FOOTPRINT_TOLERANCE_PCT,
};
use crate::exchange::ExchangeKind;
use crate::input::SimInput;
use crate::placement::{LbMode, Placement};
use crate::run::{RankOutcome, SimParams};
use crate::SimError;

/// Says where a `Memory` allocation came from.
pub fn describe_source(p: &Placement) -> Option<String> {
    p.source.as_ref().map(|s| match s {
        AllocationSource::File(f) => format!("read {}", f.display()),
        AllocationSource::Regenerated(f) => format!(
            "regenerated {} (no allocation file for this rank count)",
            f.display()
        ),
    })
}

/// Builds the report of a finished run.
#[allow(clippy::too_many_arguments)]
pub fn build_report(
    input: &SimInput,
    placement: &Placement,
    outcomes: &[RankOutcome],
    cfg: &RuntimeConfig,
    params: &SimParams,
    lb_mode: LbMode,
    seconds: f64,
    out_dat: &Path,
) -> Result<RunReport, SimError> {
    let ranks = outcomes.len();
    let net = &input.circuit.network;
    let sets = net.peers(&placement.rank_of, ranks);
    let peers: Vec<usize> = (0..ranks).map(|r| sets.count(r)).collect();
    let peer_nodes = net.peer_nodes(&sets, cfg.transport().ranks_per_node.max(1));
    let rows = rows(outcomes, &peers, &peer_nodes, cfg.transport());
    let processes = process_rows(outcomes, &peers, &peer_nodes, cfg.transport());
    let footprint_max_diff_pct = max_abs(&rows, |r| r.footprint_diff_pct);
    let pinned_max_diff_pct = max_abs(&processes, |p| p.pinned_diff_pct.unwrap_or(0.0));
    let notes = lock_notes(outcomes, &processes);
    let Mismatches {
        peers: peers_mismatch,
        footprint: footprint_mismatch,
    } = mismatches(&rows, params.exchange, cfg.transport());
    let window = params.steps(&input.circuit.delays)?.window;
    Ok(RunReport {
        circuit: input.label.clone(),
        lb_mode: lb_mode.to_string(),
        exchange: params.exchange.to_string(),
        transport: cfg.transport().kind.to_string(),
        // On the MPI native path MPI owns the receive resources: no sharing mode applies.
        recv_sharing: if cfg.transport().kind == TransportKind::Mpi && cfg.transport().mpi_native {
            "native".to_string()
        } else {
            cfg.transport().recv_sharing.to_string()
        },
        max_endpoints: cfg.transport().max_endpoints,
        endpoint_overflow: cfg.transport().endpoint_overflow.to_string(),
        ranks,
        tstop_ms: params.tstop_ms,
        dt_ms: params.dt_ms,
        window_ms: window as f64 * params.dt_ms,
        seed: params.seed,
        memory_scale: params.memory_scale,
        allocation: describe_source(placement),
        spikes: outcomes.iter().map(|o| o.spikes.len()).sum(),
        messages_sent: outcomes.iter().map(|o| o.exchange.messages_sent).sum(),
        seconds,
        peers_match: peers_mismatch.is_none(),
        peers_mismatch,
        footprint_match: footprint_mismatch.is_none(),
        footprint_mismatch,
        footprint_max_diff_pct,
        footprint_within_tolerance: footprint_max_diff_pct <= FOOTPRINT_TOLERANCE_PCT,
        // Null unless every process' pinned growth was compared (a lock that was refused,
        // partial or not asked leaves nothing to compare).
        pinned_within_tolerance: processes
            .iter()
            .all(|p| p.pinned_diff_pct.is_some())
            .then_some(pinned_max_diff_pct <= FOOTPRINT_TOLERANCE_PCT),
        processes,
        process_vm_hwm_kb: process_peak_kb(
            outcomes,
            ballast_runtime::ProcStatus::read_self()
                .map(|p| p.vm_hwm_kb)
                .unwrap_or(0),
        ),
        per_rank: rows,
        out_dat: out_dat.to_owned(),
        transport_notes: Vec::new(),
        notes,
    })
}

/// Why the peers connected and the footprints measured differ from the predictions
/// ([`mismatches`]), each `None` when every rank matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatches {
    /// Why the peers connected differ from the predicted ones.
    pub peers: Option<String>,
    /// Why the footprints measured differ from the predicted ones.
    pub footprint: Option<String>,
}

/// Why the peers connected and the footprints measured differ from the predictions, when
/// they do (`None` when every rank matches): how many ranks differ, the first one's counts
/// or `footprint_diff_reason`, and the cause when the run's settings give it.
pub fn mismatches(
    rows: &[RankRow],
    exchange: ExchangeKind,
    t: &ballast_runtime::TransportConfig,
) -> Mismatches {
    let ranks = rows.len();
    let ring = " (--exchange allgather: the ring all-gather connects each rank to its 2 ring neighbours, not to the circuit's peers that the balancer predicts)";
    let peers_off: Vec<&RankRow> = rows
        .iter()
        .filter(|r| r.peers_connected != r.peers_predicted as u64)
        .collect();
    let peers = peers_off.first().map(|r| {
        let cause = if exchange == ExchangeKind::Allgather && peers_off.iter().all(|r| r.peers_connected <= 2)
        {
            ring
        } else {
            ""
        };
        let s = if r.peers_connected == 1 { "" } else { "s" };
        format!(
            "{} of {ranks} ranks differ; rank {}: {} peer{s} connected, {} predicted{cause}",
            peers_off.len(),
            r.rank,
            r.peers_connected,
            r.peers_predicted
        )
    });
    let fp_off: Vec<&RankRow> = rows
        .iter()
        .filter(|r| r.footprint_measured_bytes != r.footprint_predicted_bytes)
        .collect();
    let footprint = fp_off.first().map(|r| {
        let reason = r.footprint_diff_reason.as_deref().unwrap_or("the totals differ");
        let cause = if peers.is_some() && exchange == ExchangeKind::Allgather && (reason.contains("peers connected") || reason.contains("peer connected")) {
            ring
        } else if t.kind == TransportKind::Mpi {
            " (the MPI engine path's model is an upper bound that counts every send buffer as kept, while the measurement is what Ballast holds at the end; MPI's own memory shows in VmRSS)"
        } else {
            ""
        };
        format!("{} of {ranks} ranks differ; rank {}: {reason}{cause}", fp_off.len(), r.rank)
    });
    Mismatches { peers, footprint }
}
