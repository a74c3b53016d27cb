//! `ballast fanout`: the classic investigation — rank 0 sends a few integers to every
//! other rank; prints rank 0's process memory counters and footprint before and after,
//! and the footprint the model predicts. The options are checked into a [`Plan`], which
//! runs the fanout over its transport into one [`Report`], printed as JSON or as text.

use anyhow::{bail, Context};
use ballast_runtime::{LockStatus, MemoryLock, ProcStatus, TransportKind};
use ballast_sim::{fanout::run_local, fanout::FanoutReport, fanout::Snapshot};
use serde::Serialize;

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
    /// Messages rank 0 sends to each other rank, at most 1073741824 (2^30).
    #[arg(long, default_value_t = 1, value_parser = crate::parse::whole::<usize>(0, 1 << 30), allow_negative_numbers = true)]
    pub messages: usize,
    /// 32-bit integers per message, at most 268435456 (a message of 1 GiB).
    #[arg(long, default_value_t = 10, value_parser = crate::parse::whole::<usize>(0, 1 << 28), allow_negative_numbers = true)]
    pub ints: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// `ballast fanout`'s options, checked, with the runtime configuration resolved.
struct Plan {
    cfg: ballast_runtime::RuntimeConfig,
    /// What `--transport auto` picked, and why.
    auto_note: Option<String>,
    ranks: Option<usize>,
    messages: usize,
    ints: usize,
    json: bool,
}

/// What the fanout gave on rank 0.
struct Outcome {
    report: FanoutReport,
    /// Messages all ranks sent (known over the local transport).
    messages_sent: Option<u64>,
    /// Per process, over verbs.
    #[cfg(feature = "verbs")]
    processes: Option<Vec<ballast_sim::fanout::verbs::ProcessMemory>>,
}

/// The process' counters (`start`: before the transport).
#[derive(Serialize)]
struct StatusReport {
    vm_rss_kb: u64,
    vm_hwm_kb: u64,
    vm_lck_kb: u64,
    vm_pin_kb: u64,
    vm_data_kb: u64,
}

/// A snapshot: the process' counters and the footprints of rank 0 and of all ranks.
#[derive(Serialize)]
struct SnapshotReport {
    vm_rss_kb: u64,
    vm_lck_kb: u64,
    vm_pin_kb: u64,
    vm_data_kb: u64,
    vm_hwm_kb: u64,
    footprint_bytes: u64,
    world_footprint_bytes: u64,
}

impl SnapshotReport {
    fn new(s: &Snapshot) -> SnapshotReport {
        SnapshotReport {
            vm_rss_kb: s.status.vm_rss_kb,
            vm_lck_kb: s.status.vm_lck_kb,
            vm_pin_kb: s.status.vm_pin_kb,
            vm_data_kb: s.status.vm_data_kb,
            vm_hwm_kb: s.status.vm_hwm_kb,
            footprint_bytes: s.footprint.total_bytes(),
            world_footprint_bytes: s.world_footprint_bytes,
        }
    }
}

/// The `memory_lock` object: all ranks of this process after the fanout.
#[derive(Serialize)]
struct LockReport {
    status: &'static str,
    asked_bytes: u64,
    locked_bytes: u64,
    requests: u64,
    refused_requests: u64,
    memlock_limit_bytes: Option<u64>,
    error: Option<String>,
}

/// One process of a verbs fanout: its footprint, what the kernel reports, and the problems
/// found against the model's bounds.
#[cfg(feature = "verbs")]
#[derive(Serialize)]
struct ProcessReport {
    rank: usize,
    footprint_bytes: u64,
    predicted_bytes: u64,
    pinned_expected_bytes: u64,
    vm_pin_growth_bytes: u64,
    vm_lck_change_kb: i64,
    vm_rss_growth_bytes: i64,
    vm_rss_after_kb: u64,
    vm_lck_after_kb: u64,
    vm_pin_after_kb: u64,
    bootstrap_kept_pin_kb: i64,
    bootstrap_kept_rss_kb: i64,
    problems: Vec<String>,
}

/// The result of `ballast fanout` (its `--json` keys in this order, documented in `--help`).
#[derive(Serialize)]
struct Report {
    ranks: usize,
    before: SnapshotReport,
    after: SnapshotReport,
    predicted_footprint_bytes: u64,
    endpoints_live: u64,
    peers_connected: u64,
    datagram_peers: u64,
    datagram_bytes: u64,
    model_matches_accounting: bool,
    notes: Vec<String>,
    before_taken: String,
    memory_lock: LockReport,
    start: StatusReport,
    #[cfg(feature = "verbs")]
    #[serde(skip_serializing_if = "Option::is_none")]
    processes: Option<Vec<ProcessReport>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    transport_note: Option<String>,
    transport: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    messages_sent: Option<u64>,
    /// Over verbs: whether every process' memory is within the model's bounds.
    #[serde(skip)]
    memory_ok: Option<bool>,
    /// What the text form prints from.
    #[serde(skip)]
    text: TextOnly,
}

struct TextOnly {
    fanout: FanoutReport,
    at_start: ProcStatus,
    transport: ballast_runtime::TransportConfig,
    /// Whether the ranks run one per process from a launcher (over verbs).
    launched: bool,
    messages: usize,
    ints: usize,
    #[cfg(feature = "verbs")]
    processes: Option<Vec<ballast_sim::fanout::verbs::ProcessMemory>>,
}

impl Report {
    fn new(plan: &Plan, at_start: ProcStatus, out: Outcome) -> Report {
        let r = &out.report;
        let l = &r.memory_lock;
        #[cfg(feature = "verbs")]
        let memory_ok = out.processes.as_deref().map(verbs_memory_ok);
        #[cfg(not(feature = "verbs"))]
        let memory_ok: Option<bool> = None;
        Report {
            ranks: r.ranks,
            before: SnapshotReport::new(&r.before),
            after: SnapshotReport::new(&r.after),
            predicted_footprint_bytes: r.predicted.total_bytes(),
            endpoints_live: r.after.footprint.endpoints_live,
            peers_connected: r.after.footprint.peers_connected,
            datagram_peers: r.after.footprint.datagram_peers,
            datagram_bytes: r.after.footprint.datagram_bytes,
            model_matches_accounting: r.all_ranks_match_model,
            notes: r.notes.clone(),
            before_taken: before_taken(r),
            memory_lock: LockReport {
                status: l.status().as_str(),
                asked_bytes: l.asked_bytes,
                locked_bytes: l.locked_bytes,
                requests: l.requests,
                refused_requests: l.refused,
                memlock_limit_bytes: l.limit_bytes,
                error: l.error_text(),
            },
            start: StatusReport {
                vm_rss_kb: at_start.vm_rss_kb,
                vm_hwm_kb: at_start.vm_hwm_kb,
                vm_lck_kb: at_start.vm_lck_kb,
                vm_pin_kb: at_start.vm_pin_kb,
                vm_data_kb: at_start.vm_data_kb,
            },
            #[cfg(feature = "verbs")]
            processes: out.processes.as_deref().map(processes_report),
            transport_note: plan.auto_note.clone(),
            transport: plan.cfg.transport().kind.as_str(),
            messages_sent: out.messages_sent,
            memory_ok,
            text: TextOnly {
                fanout: out.report,
                at_start,
                transport: *plan.cfg.transport(),
                launched: plan.cfg.bootstrap().rank.is_some(),
                messages: plan.messages,
                ints: plan.ints,
                #[cfg(feature = "verbs")]
                processes: out.processes,
            },
        }
    }
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
        (LockStatus::NotAsked, TransportKind::Shm) => "not locked (shm never locks)".to_string(),
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
    let plan = Plan::new(args)?;
    let Some(outcome) = plan.run()? else {
        return Ok(()); // only rank 0 prints
    };
    let report = Report::new(&plan, at_start, outcome);
    if plan.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        if report.memory_ok == Some(false) {
            bail!("the measured memory is outside the verbs model's bounds (see processes[].problems)");
        }
        return Ok(());
    }
    render(&report)?;
    if report.memory_ok == Some(false) {
        bail!("the measured memory is outside the verbs model's bounds (see above)");
    }
    Ok(())
}

impl Plan {
    /// Resolves the runtime configuration (printing, on rank 0, what `--transport auto`
    /// picked).
    fn new(args: &FanoutArgs) -> anyhow::Result<Plan> {
        let (cfg, auto_note) = args.runtime.to_config_resolved()?;
        if let Some(n) = &auto_note {
            if cfg.bootstrap().rank.unwrap_or(0) == 0 {
                eprintln!("ballast fanout: {n}");
            }
        }
        crate::runtime_args::check_not_one_of_many(&cfg, "fanout", auto_note.as_deref())?;
        Ok(Plan {
            cfg,
            auto_note,
            ranks: args.ranks,
            messages: args.messages,
            ints: args.ints,
            json: args.json,
        })
    }

    /// The fanout over the configured transport; `None` on ranks other than 0.
    fn run(&self) -> anyhow::Result<Option<Outcome>> {
        match self.cfg.transport().kind {
            TransportKind::Local => self.run_local().map(Some),
            #[cfg(feature = "mpi")]
            TransportKind::Mpi => self.run_mpi(),
            #[cfg(feature = "verbs")]
            TransportKind::Verbs => self.run_verbs(),
            TransportKind::Shm if self.cfg.bootstrap().rank.is_none() => self.run_local().map(Some),
            TransportKind::Shm => self.run_shm(),
            k => {
                crate::runtime_args::check_compiled_in(k)?;
                bail!("fanout cannot run over transport `{k}`")
            }
        }
    }

    /// The ranks as threads of this process.
    fn run_local(&self) -> anyhow::Result<Outcome> {
        let cfg = &self.cfg;
        let Some(ranks) = self.ranks else {
            bail!(
                "--ranks is required with --transport {} without a launcher",
                self.cfg.transport().kind
            )
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
        let r = crate::progress::with_progress(2 * ranks as u64, &steps, &message, || {
            run_local(ranks, cfg, self.messages, self.ints, Some(&steps))
        })?;
        Ok(Outcome {
            messages_sent: r.messages_sent,
            report: r,
            #[cfg(feature = "verbs")]
            processes: None,
        })
    }

    /// One rank per process of a launcher on this node, over shared memory.
    fn run_shm(&self) -> anyhow::Result<Option<Outcome>> {
        // Under mpirun without BALLAST_ROOT, MPI carries the start-up exchange (a build with
        // `mpi`); under srun, the node's socket named by the job step.
        let mut launch = ballast_runtime::launch::Launch::new(&self.cfg)?;
        let size = launch.size();
        let out = if self.ranks.is_some_and(|r| r != size) {
            Err(anyhow::anyhow!(
                "--ranks {} differs from the {size} processes of the launch",
                self.ranks.unwrap_or(0)
            ))
        } else {
            ballast_sim::fanout::process::shm(launch.bootstrap(), &self.cfg, self.messages, self.ints)
                .map_err(anyhow::Error::from)
        };
        let out = match out {
            Ok(v) => v,
            Err(e) => {
                launch.abandon();
                return Err(e);
            }
        };
        drop(launch); // frees an MPI bootstrap, then finalises the MPI it initialised
        Ok(out.map(|report| Outcome {
            report,
            messages_sent: None,
            #[cfg(feature = "verbs")]
            processes: None,
        }))
    }

    /// One rank per MPI process.
    #[cfg(feature = "mpi")]
    fn run_mpi(&self) -> anyhow::Result<Option<Outcome>> {
        let mpi = ballast_runtime::mpi::Mpi::init()?;
        let out = (|| -> anyhow::Result<_> {
            if mpi.size() < 2 {
                bail!("fanout over mpi needs at least 2 processes (mpirun -n N, N >= 2)");
            }
            if self.ranks.is_some_and(|r| r != mpi.size()) {
                bail!(
                    "--ranks {} differs from the {} MPI processes",
                    self.ranks.unwrap_or(0),
                    mpi.size()
                );
            }
            Ok(ballast_sim::fanout::mpi::fanout(
                &mpi,
                &self.cfg,
                self.messages,
                self.ints,
            )?)
        })();
        Ok(
            ballast_sim::launch::leave_mpi_on_error(mpi, out)?.map(|report| Outcome {
                report,
                messages_sent: None,
                #[cfg(feature = "verbs")]
                processes: None,
            }),
        )
    }

    /// One rank per process of a launcher, over verbs.
    #[cfg(feature = "verbs")]
    fn run_verbs(&self) -> anyhow::Result<Option<Outcome>> {
        let cfg = &self.cfg;
        if cfg.bootstrap().rank.is_none() {
            bail!("fanout over verbs runs one rank per process: start N processes with mpirun (a build with the `mpi` feature), or with BALLAST_ROOT=host:port and BALLAST_RANK/BALLAST_SIZE (or srun, whose rank variables are read too)")
        }
        // Under mpirun without BALLAST_ROOT, MPI carries the start-up exchange.
        let mut launch = ballast_runtime::launch::Launch::new(cfg)?;
        let out = (|| -> anyhow::Result<_> {
            let size = launch.size();
            if self.ranks.is_some_and(|r| r != size) {
                bail!(
                    "--ranks {} differs from the {size} processes of the launch",
                    self.ranks.unwrap_or(0)
                );
            }
            Ok(ballast_sim::fanout::verbs::fanout(
                launch.bootstrap(),
                cfg,
                self.messages,
                self.ints,
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
        Ok(out.map(|v| Outcome {
            report: v.report,
            messages_sent: None,
            processes: Some(v.processes),
        }))
    }
}

/// Prints the report as text: the table of counters before and after, the memory lock, the
/// prediction, the process at start, the notes, and per process over verbs.
fn render(report: &Report) -> anyhow::Result<()> {
    let r = &report.text.fanout;
    let t = &report.text.transport;
    let (messages, ints) = (report.text.messages, report.text.ints);
    if r.notes.iter().any(|n| n.starts_with("MPI native path:")) {
        outln!(
            "fanout: {} ranks, rank 0 sends {} x {} ints to each; MPI native path (MPI matches tags, no pool), buffer_size {} B",
            r.ranks, messages, ints, t.buffer_size
        );
    } else {
        outln!(
            "fanout: {} ranks, rank 0 sends {} x {} ints to each; recv_sharing={} buffer {} x {} B",
            r.ranks,
            messages,
            ints,
            t.recv_sharing,
            t.buffer_count,
            t.buffer_size
        );
    }
    counter_table(r)?;
    outln!("* {}", report.before_taken);
    outln!(
        "memory lock, all ranks of this process (after): {}",
        lock_line(&r.memory_lock, t.kind)
    );
    let rank0 = r.after.footprint.differences(&r.predicted, t);
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
    if let Some(m) = report.messages_sent {
        outln!("messages sent, all ranks (fanout and barriers): {m}");
    }
    // What "start" precedes, per transport: only MPI has an MPI_Init.
    let before = match t.kind {
        TransportKind::Mpi => "before MPI_Init, the bootstrap and the pool",
        TransportKind::Verbs if report.text.launched => "before the bootstrap and the pool",
        _ => "before the ranks, their communicators and pools",
    };
    let s = &report.text.at_start;
    outln!(
        "process at start ({before}): VmRSS {} KiB, VmLck {} KiB, VmPin {} KiB, VmData {} KiB",
        s.vm_rss_kb,
        s.vm_lck_kb,
        s.vm_pin_kb,
        s.vm_data_kb
    );
    for n in &r.notes {
        outln!("note: {n}");
    }
    #[cfg(feature = "verbs")]
    if let Some(p) = &report.text.processes {
        print_processes(p)?;
    }
    Ok(())
}

/// Rank 0's process counters and footprints before and after the fanout.
fn counter_table(r: &FanoutReport) -> anyhow::Result<()> {
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
    Ok(())
}

#[cfg(feature = "verbs")]
fn verbs_memory_ok(p: &[ballast_sim::fanout::verbs::ProcessMemory]) -> bool {
    p.iter().all(|m| m.check().is_empty())
}

#[cfg(feature = "verbs")]
fn processes_report(p: &[ballast_sim::fanout::verbs::ProcessMemory]) -> Vec<ProcessReport> {
    p.iter()
        .map(|m| ProcessReport {
            rank: m.rank,
            footprint_bytes: m.footprint.total_bytes(),
            predicted_bytes: m.predicted.total_bytes(),
            pinned_expected_bytes: m.pinned_expected,
            vm_pin_growth_bytes: m.pin_growth(),
            vm_lck_change_kb: m.lck_change_kib(),
            vm_rss_growth_bytes: m.rss_growth(),
            vm_rss_after_kb: m.after.vm_rss_kb,
            vm_lck_after_kb: m.after.vm_lck_kb,
            vm_pin_after_kb: m.after.vm_pin_kb,
            bootstrap_kept_pin_kb: m.bootstrap_kept.vm_pin_kb,
            bootstrap_kept_rss_kb: m.bootstrap_kept.vm_rss_kb,
            problems: m.check(),
        })
        .collect()
}

/// Per process (one rank each): the footprint predicted and accounted, and what the kernel
/// reports (VmPin, VmLck, VmRSS growth) with the bounds of `verbs::fanout`.
#[cfg(feature = "verbs")]
fn print_processes(p: &[ballast_sim::fanout::verbs::ProcessMemory]) -> anyhow::Result<()> {
    use ballast_sim::fanout::verbs::RSS_SLACK_KIB;
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
        let r = run_local(9, &cfg, 1, 10, Some(&steps)).unwrap();
        let sent = r.messages_sent.expect("known over local");
        // 8 fanout messages, and 4 dissemination barriers of ceil(log2 9) = 4 rounds, one
        // message per rank and round.
        assert_eq!(sent, 8 + 4 * 9 * 4);
        assert_eq!(
            steps.into_inner(),
            2 * 9,
            "each rank counts its setup and its end"
        );
        let plan = Plan {
            cfg: cfg.clone(),
            auto_note: None,
            ranks: Some(9),
            messages: 1,
            ints: 10,
            json: true,
        };
        let out = Outcome {
            report: r,
            messages_sent: Some(sent),
            #[cfg(feature = "verbs")]
            processes: None,
        };
        let report = Report::new(&plan, ProcStatus::read_self().unwrap(), out);
        let v = serde_json::to_value(&report).unwrap();
        assert_eq!(v["messages_sent"], sent);
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
