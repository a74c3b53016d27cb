//! `ballast fanout`: the classic investigation — rank 0 sends a few integers to every
//! other rank; prints rank 0's process memory counters and footprint before and after,
//! and the footprint the model predicts.

use anyhow::{bail, Context};
use ballast_runtime::fanout::{run_local_counted, FanoutReport, Snapshot};
use ballast_runtime::{LockStatus, MemoryLock, ProcStatus, TransportKind};
use serde_json::json;

use crate::runtime_args::RuntimeArgs;

/// Arguments of `ballast fanout`.
#[derive(clap::Args, Debug)]
pub struct FanoutArgs {
    /// Number of ranks (rank 0 sends to ranks 1..N-1); required for `--transport local`.
    /// With `--transport mpi` the ranks are the MPI processes (`mpirun -n N ballast fanout
    /// --transport mpi`), with `--transport verbs` the processes of a launcher that sets
    /// BALLAST_ROOT and the rank/size variables; this, if given, must equal N.
    #[arg(long)]
    pub ranks: Option<usize>,
    /// Messages rank 0 sends to each other rank.
    #[arg(long, default_value_t = 1)]
    pub messages: usize,
    /// 32-bit integers per message.
    #[arg(long, default_value_t = 10)]
    pub ints: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

fn status_json(s: &ProcStatus) -> serde_json::Value {
    json!({
        "vm_rss_kb": s.vm_rss_kb,
        "vm_hwm_kb": s.vm_hwm_kb,
        "vm_lck_kb": s.vm_lck_kb,
        "vm_pin_kb": s.vm_pin_kb,
        "vm_data_kb": s.vm_data_kb,
    })
}

fn snap_json(s: &Snapshot) -> serde_json::Value {
    json!({
        "vm_rss_kb": s.status.vm_rss_kb,
        "vm_lck_kb": s.status.vm_lck_kb,
        "vm_pin_kb": s.status.vm_pin_kb,
        "vm_data_kb": s.status.vm_data_kb,
        "vm_hwm_kb": s.status.vm_hwm_kb,
        "footprint_bytes": s.footprint.total_bytes(),
        "world_footprint_bytes": s.world_footprint_bytes,
    })
}

/// The JSON form of a report (keys documented in the issue and `--help`).
pub fn report_json(r: &FanoutReport) -> serde_json::Value {
    json!({
        "ranks": r.ranks,
        "before": snap_json(&r.before),
        "after": snap_json(&r.after),
        "predicted_footprint_bytes": r.predicted.total_bytes(),
        "endpoints_live": r.after.footprint.endpoints_live,
        "peers_connected": r.after.footprint.peers_connected,
        "datagram_peers": r.after.footprint.datagram_peers,
        "datagram_bytes": r.after.footprint.datagram_bytes,
        "model_matches_accounting": r.all_ranks_match_model,
        "notes": r.notes,
        "before_taken": before_taken(r),
        "memory_lock": lock_json(&r.memory_lock),
    })
}

/// The `memory_lock` object: all ranks of this process after the fanout.
fn lock_json(l: &MemoryLock) -> serde_json::Value {
    json!({
        "status": l.status().as_str(),
        "asked_bytes": l.asked_bytes,
        "locked_bytes": l.locked_bytes,
        "requests": l.requests,
        "refused_requests": l.refused,
        "memlock_limit_bytes": l.limit_bytes,
        "error": l.error_text(),
    })
}

/// When the "before" snapshot is taken, and what that means for its counts.
fn before_taken(r: &FanoutReport) -> String {
    format!(
        "after the setup and 2 barriers (dissemination: each rank exchanges with ranks r +- 2^k), whose endpoints are open: rank 0 is already connected to {} peers",
        r.before.footprint.peers_connected
    )
}

/// The memory lock of all ranks after the fanout, for the table.
fn lock_line(l: &MemoryLock, kind: TransportKind) -> String {
    match (l.status(), kind) {
        (LockStatus::NotAsked, TransportKind::Verbs) => {
            "pinned by the verbs registrations (no mlock)".to_string()
        }
        (LockStatus::NotAsked, TransportKind::Mpi) => "not locked (MPI registers memory itself)".to_string(),
        (LockStatus::NotAsked, _) => "not locked (lock_pool off)".to_string(),
        (LockStatus::Locked, _) => format!("locked, {} B", l.locked_bytes),
        (s, _) => format!(
            "{s}: {} of {} B asked (see the note)",
            l.locked_bytes, l.asked_bytes
        ),
    }
}

/// Runs `ballast fanout`.
pub fn run(args: &FanoutArgs) -> anyhow::Result<()> {
    // Before the transport (MPI_Init, the bootstrap, the pool; the local ranks): what the whole
    // transport adds is after - start.
    let at_start = ProcStatus::read_self()?;
    let (cfg, auto_note) = args.runtime.to_config_resolved()?;
    if let Some(n) = &auto_note {
        if cfg.bootstrap().rank.unwrap_or(0) == 0 {
            eprintln!("ballast fanout: {n}");
        }
    }
    #[cfg(feature = "verbs")]
    let mut verbs_processes = None;
    // Messages all ranks sent (known over the local transport; in a build without mpi and
    // verbs every arm that does not fail sets it, hence the allow).
    #[allow(unused_assignments)]
    let mut messages_sent = None;
    let r = match cfg.transport().kind {
        TransportKind::Local => {
            let Some(ranks) = args.ranks else {
                bail!("--ranks is required with --transport local")
            };
            if ranks < 2 {
                bail!("--ranks must be at least 2");
            }
            // Before any rank starts: the ranks' transport memory at start (one peer each).
            ballast_sim::check::check_transport_memory(
                cfg.transport(),
                ranks,
                ranks,
                ballast_balancer::limits::available_memory(),
            )
            .with_context(|| format!("--ranks {ranks}"))?;
            crate::progress::warn_oversubscribed("fanout", ranks);
            let steps = std::sync::atomic::AtomicUsize::new(0);
            let message = |n: u64| {
                let n = n as usize;
                if n < ranks {
                    format!("{n} of {ranks} ranks set up")
                } else {
                    format!("{} of {ranks} ranks finished", n - ranks)
                }
            };
            let (r, sent) = crate::progress::with_progress(2 * ranks as u64, &steps, &message, || {
                run_local_counted(ranks, &cfg, args.messages, args.ints, &steps)
            })?;
            messages_sent = Some(sent);
            r
        }
        #[cfg(feature = "mpi")]
        TransportKind::Mpi => {
            let mpi = ballast_runtime::mpi::Mpi::init()?;
            let out = (|| -> anyhow::Result<_> {
                if mpi.size() < 2 {
                    bail!("fanout over mpi needs at least 2 processes (mpirun -n N, N >= 2)");
                }
                if args.ranks.is_some_and(|r| r != mpi.size()) {
                    bail!(
                        "--ranks {} differs from the {} MPI processes",
                        args.ranks.unwrap_or(0),
                        mpi.size()
                    );
                }
                Ok(mpi.fanout(&cfg, args.messages, args.ints)?)
            })();
            match ballast_sim::launch::leave_mpi_on_error(mpi, out)? {
                Some(r) => r,
                None => return Ok(()), // only rank 0 prints
            }
        }
        #[cfg(feature = "verbs")]
        TransportKind::Verbs => {
            if cfg.bootstrap().rank.is_none() {
                bail!("fanout over verbs runs one rank per process: start N processes with mpirun (a build with the `mpi` feature), or with BALLAST_ROOT=host:port and BALLAST_RANK/BALLAST_SIZE (or srun, whose rank variables are read too)")
            }
            // Under mpirun without BALLAST_ROOT, MPI carries the start-up exchange.
            let mut launch = ballast_runtime::bootstrap::Launch::new(&cfg)?;
            let out = (|| -> anyhow::Result<_> {
                let size = launch.size();
                if args.ranks.is_some_and(|r| r != size) {
                    bail!(
                        "--ranks {} differs from the {size} processes of the launch",
                        args.ranks.unwrap_or(0)
                    );
                }
                Ok(ballast_runtime::verbs::fanout::fanout(
                    launch.bootstrap(),
                    &cfg,
                    args.messages,
                    args.ints,
                )?)
            })();
            let out = match out {
                Ok(v) => v,
                Err(e) => {
                    launch.abandon();
                    return Err(e);
                }
            };
            drop(launch); // frees the MPI bootstrap, then finalises the MPI it initialised
            match out {
                Some(v) => {
                    verbs_processes = Some(v.processes);
                    v.report
                }
                None => return Ok(()), // only rank 0 prints
            }
        }
        k => {
            crate::runtime_args::check_compiled_in(k)?;
            bail!("fanout cannot run over transport `{k}`")
        }
    };
    let ranks = r.ranks;
    #[cfg(feature = "verbs")]
    let memory_ok = verbs_processes.as_deref().map(verbs_memory_ok);
    #[cfg(not(feature = "verbs"))]
    let memory_ok: Option<bool> = None;
    if args.json {
        let mut v = report_json(&r);
        v["start"] = status_json(&at_start);
        #[cfg(feature = "verbs")]
        if let Some(p) = &verbs_processes {
            v["processes"] = processes_json(p);
        }
        if let Some(n) = auto_note {
            v["transport_note"] = json!(n);
        }
        v["transport"] = json!(cfg.transport().kind.as_str());
        if let Some(m) = messages_sent {
            v["messages_sent"] = json!(m);
        }
        outln!("{}", serde_json::to_string_pretty(&v)?);
        if memory_ok == Some(false) {
            bail!("the measured memory is outside the verbs model's bounds (see processes[].problems)");
        }
        return Ok(());
    }
    let t = cfg.transport();
    if r.notes.iter().any(|n| n.starts_with("MPI native path:")) {
        outln!(
            "fanout: {} ranks, rank 0 sends {} x {} ints to each; MPI native path (MPI matches tags, no pool), buffer_size {} B",
            ranks, args.messages, args.ints, t.buffer_size
        );
    } else {
        outln!(
            "fanout: {} ranks, rank 0 sends {} x {} ints to each; recv_sharing={} buffer {} x {} B",
            ranks,
            args.messages,
            args.ints,
            t.recv_sharing,
            t.buffer_count,
            t.buffer_size
        );
    }
    outln!("{:<26} {:>14} {:>14} {:>14}", "", "before*", "after", "delta");
    let row = |name: &str, b: u64, a: u64| -> anyhow::Result<()> {
        outln!("{name:<26} {b:>14} {a:>14} {:>14}", a as i64 - b as i64);
        Ok(())
    };
    let (b, a) = (&r.before, &r.after);
    row("VmRSS (KiB, process)", b.status.vm_rss_kb, a.status.vm_rss_kb)?;
    row("VmHWM (KiB, process)", b.status.vm_hwm_kb, a.status.vm_hwm_kb)?;
    row("VmLck (KiB, process)", b.status.vm_lck_kb, a.status.vm_lck_kb)?;
    row("VmPin (KiB, process)", b.status.vm_pin_kb, a.status.vm_pin_kb)?;
    row("VmData (KiB, process)", b.status.vm_data_kb, a.status.vm_data_kb)?;
    row(
        "footprint rank 0 (B)",
        b.footprint.total_bytes(),
        a.footprint.total_bytes(),
    )?;
    row(
        "footprint all ranks (B)",
        b.world_footprint_bytes,
        a.world_footprint_bytes,
    )?;
    row(
        "predicted all ranks (B)",
        b.world_predicted_bytes,
        a.world_predicted_bytes,
    )?;
    row(
        "endpoints live rank 0",
        b.footprint.endpoints_live,
        a.footprint.endpoints_live,
    )?;
    row(
        "peers connected rank 0",
        b.footprint.peers_connected,
        a.footprint.peers_connected,
    )?;
    row(
        "datagram peers rank 0",
        b.footprint.datagram_peers,
        a.footprint.datagram_peers,
    )?;
    outln!("* {}", before_taken(&r));
    outln!(
        "memory lock, all ranks of this process (after): {}",
        lock_line(&r.memory_lock, t.kind)
    );
    let rank0 = a.footprint.differences(&r.predicted, t);
    outln!(
        "predicted footprint rank 0: {} B ({})",
        r.predicted.total_bytes(),
        if r.all_ranks_match_model {
            "the model matches the accounting on every rank".to_string()
        } else {
            format!(
                "the model differs from the accounting on some ranks{}: it is a bound (with max_endpoints or xrc the steady-state one; over MPI's engine path it counts every send buffer as kept), and fewer endpoints or buffers may be held at the snapshot",
                if rank0.is_empty() { String::new() } else { format!(", rank 0: {}", rank0.join("; ")) }
            )
        }
    );
    if let Some(m) = messages_sent {
        outln!("messages sent, all ranks (fanout and barriers): {m}");
    }
    // What "start" precedes, per transport: only MPI has an MPI_Init.
    let before = match cfg.transport().kind {
        TransportKind::Mpi => "before MPI_Init, the bootstrap and the pool",
        TransportKind::Verbs if cfg.bootstrap().rank.is_some() => "before the bootstrap and the pool",
        _ => "before the ranks, their communicators and pools",
    };
    outln!(
        "process at start ({before}): VmRSS {} KiB, VmLck {} KiB, VmPin {} KiB, VmData {} KiB",
        at_start.vm_rss_kb,
        at_start.vm_lck_kb,
        at_start.vm_pin_kb,
        at_start.vm_data_kb
    );
    for n in &r.notes {
        outln!("note: {n}");
    }
    #[cfg(feature = "verbs")]
    if let Some(p) = &verbs_processes {
        print_processes(p)?;
    }
    if memory_ok == Some(false) {
        bail!("the measured memory is outside the verbs model's bounds (see above)");
    }
    Ok(())
}

#[cfg(feature = "verbs")]
fn verbs_memory_ok(p: &[ballast_runtime::verbs::fanout::ProcessMemory]) -> bool {
    p.iter().all(|m| m.check().is_empty())
}

#[cfg(feature = "verbs")]
fn processes_json(p: &[ballast_runtime::verbs::fanout::ProcessMemory]) -> serde_json::Value {
    p.iter()
        .map(|m| {
            json!({
                "rank": m.rank,
                "footprint_bytes": m.footprint.total_bytes(),
                "predicted_bytes": m.predicted.total_bytes(),
                "pinned_expected_bytes": m.pinned_expected,
                "vm_pin_growth_bytes": m.pin_growth(),
                "vm_lck_change_kb": m.lck_change_kib(),
                "vm_rss_growth_bytes": m.rss_growth(),
                "vm_rss_after_kb": m.after.vm_rss_kb,
                "vm_lck_after_kb": m.after.vm_lck_kb,
                "vm_pin_after_kb": m.after.vm_pin_kb,
                "bootstrap_kept_pin_kb": m.bootstrap_kept.vm_pin_kb,
                "bootstrap_kept_rss_kb": m.bootstrap_kept.vm_rss_kb,
                "problems": m.check(),
            })
        })
        .collect()
}

/// Per process (one rank each): the footprint predicted and accounted, and what the kernel
/// reports (VmPin, VmLck, VmRSS growth) with the bounds of `verbs::fanout`.
#[cfg(feature = "verbs")]
fn print_processes(p: &[ballast_runtime::verbs::fanout::ProcessMemory]) -> anyhow::Result<()> {
    use ballast_runtime::verbs::fanout::RSS_SLACK_KIB;
    outln!(
        "per process (KiB): VmPin growth must equal the registrations (pages), VmLck stay constant after setup, VmRSS growth be at most model + {RSS_SLACK_KIB}"
    );
    outln!(
        "{:>5} {:>10} {:>10} {:>10} {:>10} {:>8} {:>10} {:>10} {:>10}  check",
        "rank",
        "predicted",
        "footprint",
        "pinned",
        "VmPin+",
        "VmLck+",
        "VmRSS+",
        "VmRSS",
        "VmLck"
    );
    for m in p {
        let bad = m.check();
        outln!(
            "{:>5} {:>10} {:>10} {:>10} {:>10} {:>8} {:>10} {:>10} {:>10}  {}",
            m.rank,
            m.predicted.total_bytes() / 1024,
            m.footprint.total_bytes() / 1024,
            m.pinned_expected / 1024,
            m.pin_growth() / 1024,
            m.lck_change_kib(),
            m.rss_growth() / 1024,
            m.after.vm_rss_kb,
            m.after.vm_lck_kb,
            if bad.is_empty() {
                "ok".to_string()
            } else {
                bad.join("; ")
            }
        );
    }
    if let Some(m) = p.iter().find(|m| m.bootstrap_kept != Default::default()) {
        outln!(
            "(the growths leave out what MPI kept inside the start-up exchange: e.g. rank {}: VmPin {} KiB, VmRSS {} KiB)",
            m.rank, m.bootstrap_kept.vm_pin_kb, m.bootstrap_kept.vm_rss_kb
        );
    }
    outln!(
        "memory checks: {}",
        if verbs_memory_ok(p) { "ok" } else { "FAILED" }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fanout_json_has_the_documented_keys_and_real_values() {
        let args = RuntimeArgs {
            buffer_count: Some(4),
            srq_depth: Some(4),
            lock_pool: Some(false),
            ..Default::default()
        };
        let cfg = args.to_config().unwrap();
        let steps = std::sync::atomic::AtomicUsize::new(0);
        let (r, sent) = run_local_counted(9, &cfg, 1, 10, &steps).unwrap();
        // 8 fanout messages, and 4 dissemination barriers of ceil(log2 9) = 4 rounds, one
        // message per rank and round.
        assert_eq!(sent, 8 + 4 * 9 * 4);
        assert_eq!(
            steps.into_inner(),
            2 * 9,
            "each rank counts its setup and its end"
        );
        let v = report_json(&r);
        for k in ["before", "after"] {
            for f in [
                "vm_rss_kb",
                "vm_lck_kb",
                "vm_pin_kb",
                "vm_data_kb",
                "footprint_bytes",
            ] {
                assert!(v[k][f].is_u64(), "{k}.{f} in {v}");
            }
        }
        assert_eq!(v["peers_connected"], 8);
        assert_eq!(v["endpoints_live"], 8);
        assert_eq!(
            v["predicted_footprint_bytes"],
            cfg.transport().predict(8, 9, 1).total_bytes()
        );
        assert!(v["after"]["footprint_bytes"].as_u64() > v["before"]["footprint_bytes"].as_u64());
    }

    #[test]
    fn options_override_and_bad_values_are_errors() {
        let args = RuntimeArgs {
            recv_sharing: Some(ballast_runtime::RecvSharing::Xrc),
            ranks_per_node: Some(0),
            ..Default::default()
        };
        let e = args.to_config().unwrap_err().to_string();
        assert!(e.contains("BALLAST_RANKS_PER_NODE"), "{e}");
        let args = RuntimeArgs {
            srq_depth: Some(7),
            ..Default::default()
        };
        let cfg = args.to_config().unwrap();
        let s = cfg
            .settings()
            .into_iter()
            .find(|s| s.name == "srq_depth")
            .unwrap();
        assert_eq!((s.value.as_str(), s.origin.as_str()), ("7", "option"));
    }
}
