//! `ballast demo`: the built-in end-to-end example. A synthetic circuit (20,000 cells by
//! default, realistic metype memory spread, distance-dependent connectivity) is balanced
//! for 16 ranks (the dry run, writing `allocation_r16_c1.pkl.gz`), then simulated on the
//! `local` transport with `RoundRobin` and with `--lb-mode=Memory`; the largest and
//! smallest rank memory of both, the transport footprint predicted under `per-peer`, under
//! `shared` + `max_endpoints` and under the configuration run, the footprint measured in
//! the runs, and the check that both runs produced identical spikes are printed side by
//! side (no run times: each mode runs once, RoundRobin first, so their times are not a
//! comparison; `docs/BENCHMARKS.md` has measured ones). The rows use the demo's own
//! settings, printed before the table: the built-in defaults and `--max-endpoints` (it
//! reads no `BALLAST_*` variable). Exits with an error when the check fails.
//!
//! The options become a [`Plan`] (the circuit, the simulation parameters, the runtime
//! configuration), which runs its steps (each with a spinner and its time on stderr; the
//! circuit and the files the dry run wrote on stdout as each step ends, on stderr with
//! `--json`) into the runs compared, and one [`Report`] of them, printed as the table or,
//! with `--json`, as one JSON object.
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use ballast_balancer::synthetic::{CircuitSpec, SyntheticSpec};
use ballast_balancer::{balance, BalancerConfig, Strategy};
use ballast_balancer::{stage_allocation, AllocationCosts};
use ballast_runtime::datagram::chunk_for;
use ballast_runtime::model::datagram_mtu;
use ballast_runtime::{RecvSharing, RuntimeConfig, TransportConfig};
use ballast_sim::outputs::write_outputs;
use ballast_sim::place;
use ballast_sim::{all_spikes, launch::run_local, LbMode, RankOutcome, SimInput, SimParams};
use ballast_sim::{report::build_report, report::max_min, report::predicted_footprint, report::RunReport};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// Arguments of `ballast demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Cells of the synthetic circuit.
    #[arg(long, default_value_t = 20_000)]
    cells: usize,
    /// Synapses per cell.
    #[arg(long, default_value_t = 300)]
    synapses_per_cell: u64,
    /// Ranks (threads of this process): at least 1, at most the cells + 2^20 (as dry-run).
    #[arg(long, default_value_t = 16, value_parser = crate::parse::whole::<u32>(1, u32::MAX.into()), allow_negative_numbers = true)]
    ranks: u32,
    /// Simulated time, ms (finite, 0 or more).
    #[arg(long, default_value_t = 100.0, value_parser = crate::parse::non_negative, allow_negative_numbers = true)]
    tstop: f64,
    /// Scale of each cell's estimated memory really allocated (a fraction for the demo; at
    /// most 1000000).
    #[arg(long, default_value_t = 0.002, value_parser = crate::parse::memory_scale, allow_negative_numbers = true)]
    memory_scale: f64,
    /// Cap on live endpoints for the `shared` + `max_endpoints` footprint.
    #[arg(long, default_value_t = 8)]
    max_endpoints: usize,
    /// Seed of the circuit and of the cells' drive.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the allocation file and each run's out.dat and report.json go.
    #[arg(long, default_value = "ballast-demo")]
    output: PathBuf,
    /// Print one JSON object instead of the table (the steps' lines go to stderr).
    #[arg(long)]
    json: bool,
}

/// A spinner for one step; finished with the step's time.
fn step<T>(what: &str, f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("valid template"));
    bar.set_message(what.to_owned());
    // Ticked by a thread of indicatif's, started only where one can start
    // (ballast_balancer::spawn).
    if ballast_balancer::spawn::fits(1, 0) {
        bar.enable_steady_tick(Duration::from_millis(120));
    }
    let start = Instant::now();
    let out = f();
    bar.finish_and_clear();
    eprintln!("ballast demo: {what}: {:.1} s", start.elapsed().as_secs_f64());
    out
}

fn mb(kb: f64) -> String {
    format!("{:.1}", kb / 1024.0)
}

/// `ballast demo`'s options, with what they give: the circuit to generate, the simulation's
/// parameters and the runtime configuration the runs use (the built-in defaults).
struct Plan<'a> {
    args: &'a DemoArgs,
    spec: CircuitSpec,
    params: SimParams,
    cfg: RuntimeConfig,
}

/// One run: its mode, report and per-rank outcomes.
type Run = (LbMode, RunReport, Vec<RankOutcome>);

/// A line of the comparison table: a heading, or a row with the RoundRobin and Memory
/// figures (as JSON `{"heading": …}` or `{"label": …, "round_robin": …, "memory": …}`).
#[derive(Serialize)]
#[serde(untagged)]
enum Line {
    Heading {
        heading: &'static str,
    },
    Row {
        label: String,
        round_robin: String,
        memory: String,
    },
}

/// The spikes of the RoundRobin and Memory runs.
#[derive(Serialize)]
struct Spikes {
    round_robin: usize,
    memory: usize,
}

/// The result of `ballast demo` (its `--json` keys in this order): the circuit, the files the
/// dry run wrote, the settings, the table comparing the two runs, the notes, the process'
/// peak memory, where the runs' outputs are and the checks.
#[derive(Serialize)]
struct Report {
    circuit: String,
    written: Vec<PathBuf>,
    settings: String,
    table: Vec<Line>,
    notes: Vec<String>,
    process_vm_hwm_kb: u64,
    outputs: PathBuf,
    spikes: Spikes,
    /// Whether the two runs' spikes are identical (and some).
    identical_spikes: bool,
    /// Peers and footprint as predicted in both runs.
    checks_ok: bool,
}

/// Runs `ballast demo`.
pub fn run(args: &DemoArgs) -> anyhow::Result<()> {
    let total = Instant::now();
    let plan = Plan::new(args)?;
    let report = plan.run()?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        render(&report)?;
    }
    plan.check(&report)?;
    plan.say(format!("demo done in {:.1} s", total.elapsed().as_secs_f64()))
}

impl Plan<'_> {
    fn new(args: &DemoArgs) -> anyhow::Result<Plan<'_>> {
        let synapses = (args.cells as u64).checked_mul(args.synapses_per_cell).ok_or_else(|| {
            anyhow::anyhow!(
                "--cells {} --synapses-per-cell {}: the circuit's synapses (cells x synapses per cell) do not fit in 64 bits",
                args.cells,
                args.synapses_per_cell
            )
        })?;
        Ok(Plan {
            args,
            spec: CircuitSpec {
                dry_run: SyntheticSpec {
                    cells: args.cells,
                    seed: args.seed,
                    ..SyntheticSpec::default()
                },
                synapses,
                ..CircuitSpec::default()
            },
            params: SimParams {
                tstop_ms: args.tstop,
                seed: args.seed,
                memory_scale: args.memory_scale,
                ..SimParams::default()
            },
            cfg: RuntimeConfig::default(),
        })
    }

    /// A line about a step: on stdout, or on stderr with `--json` (whose stdout is the
    /// report alone).
    fn say(&self, line: String) -> anyhow::Result<()> {
        if self.args.json {
            eprintln!("{line}");
        } else {
            outln!("{line}");
        }
        Ok(())
    }

    /// The steps: the circuit, the dry run, the two runs; then their report.
    fn run(&self) -> anyhow::Result<Report> {
        let args = self.args;
        self.check_outputs()?;
        std::fs::create_dir_all(&args.output)
            .with_context(|| format!("cannot create {}", args.output.display()))?;
        let input: SimInput = step(
            &format!("generating a synthetic circuit of {} cells", args.cells),
            || Ok(SimInput::synthetic(&self.spec)?),
        )?;
        self.say(format!("circuit: {}", input.label))?;
        let written = self.dry_run(&input)?;
        for path in &written {
            self.say(format!("dry run: wrote {}", path.display()))?;
        }
        let runs = self.runs(&input)?;
        Ok(self.report(&input, written, &runs))
    }

    /// Before anything runs (as `ballast run` does): every output that exists and is not a
    /// regular file (a FIFO, a device, a directory) is refused, naming it, and so is a run
    /// directory that exists and is not a directory; they would be refused, not replaced,
    /// only once both simulations had run.
    fn check_outputs(&self) -> anyhow::Result<()> {
        use ballast_balancer::atomic::refuse_special;
        use ballast_balancer::{allocation_file_name, sidecar_file_name};
        let out = &self.args.output;
        let ranks = self.args.ranks;
        refuse_special(&out.join(allocation_file_name(ranks, 1)))?;
        refuse_special(&out.join(sidecar_file_name(ranks, 1)))?;
        for mode in [LbMode::RoundRobin, LbMode::Memory] {
            let dir = out.join(mode.to_string().to_lowercase());
            if dir.exists() && !dir.is_dir() {
                bail!(
                    "refusing to write into {}: it exists and is not a directory",
                    dir.display()
                );
            }
            for name in ["out.dat", "report.json"] {
                refuse_special(&dir.join(name))?;
            }
        }
        Ok(())
    }

    /// The spike check and the prediction check of `report`: an error when either fails.
    fn check(&self, report: &Report) -> anyhow::Result<()> {
        let Spikes { round_robin, memory } = report.spikes;
        if round_robin == 0 && memory == 0 {
            self.say(format!(
                "check: identical spikes in the RoundRobin and Memory runs: FAILED (neither run spiked in --tstop {} ms)",
                self.args.tstop
            ))?;
            bail!(
                "neither run produced a spike in --tstop {} ms: nothing to compare; give a longer --tstop",
                self.args.tstop
            );
        }
        if !report.identical_spikes {
            self.say(format!(
                "check: identical spikes in the RoundRobin and Memory runs: FAILED ({round_robin} vs {memory} spikes)"
            ))?;
            bail!("the RoundRobin and Memory runs produced different spikes");
        }
        self.say(format!(
            "check: identical spikes in the RoundRobin and Memory runs ({round_robin} spikes): ok"
        ))?;
        if !report.checks_ok {
            bail!("peers or transport footprint differ from the prediction (see the table)");
        }
        Ok(())
    }

    /// The dry run: balance for N ranks and write the allocation file, as `ballast dry-run`.
    fn dry_run(&self, input: &SimInput) -> anyhow::Result<Vec<PathBuf>> {
        let args = self.args;
        step(&format!("dry run: balancing for {} ranks", args.ranks), || {
            let config = BalancerConfig::builder()
                .ranks(args.ranks)
                .cycles(1)
                .strategy(Strategy::Lpt)
                .build()?;
            // As dry-run: the buckets the cells justify, within the machine's memory.
            config.check_size(&input.dry_run)?;
            let allocation = balance(&input.dry_run, &config);
            // With its sidecar, as every allocation Ballast writes: both put in place together.
            let costs = AllocationCosts::new(
                "ballast demo",
                &input.dry_run,
                args.ranks,
                1,
                &Strategy::Lpt.to_string(),
                "none",
            );
            let files = vec![
                stage_allocation(&args.output, &allocation)?,
                costs.stage(&args.output)?,
            ];
            Ok(ballast_balancer::atomic::commit_all(files)?)
        })
    }

    /// The simulation with RoundRobin, then with Memory, each writing its outputs.
    fn runs(&self, input: &SimInput) -> anyhow::Result<Vec<Run>> {
        let (args, params) = (self.args, &self.params);
        let mut runs = Vec::new();
        for mode in [LbMode::RoundRobin, LbMode::Memory] {
            let placement = place(
                mode,
                &input.dry_run,
                &input.circuit.network.offsets,
                args.ranks,
                &args.output,
            )?;
            let (outcomes, seconds) = step(
                &format!(
                    "run --lb-mode={mode} on {} local ranks, {} ms",
                    args.ranks, args.tstop
                ),
                || {
                    let start = Instant::now();
                    let o = run_local(
                        &input.circuit,
                        &placement.rank_of,
                        args.ranks as usize,
                        &self.cfg,
                        params,
                        None,
                    )?;
                    Ok((o, start.elapsed().as_secs_f64()))
                },
            )?;
            let dir = args.output.join(mode.to_string().to_lowercase());
            let report = build_report(
                input,
                &placement,
                &outcomes,
                &self.cfg,
                params,
                mode,
                seconds,
                &dir.join("out.dat"),
            )?;
            write_outputs(&dir, &report, &outcomes, params.dt_ms)?;
            runs.push((mode, report, outcomes));
        }
        Ok(runs)
    }

    /// The comparison of the two runs.
    fn report(&self, input: &SimInput, written: Vec<PathBuf>, runs: &[Run]) -> Report {
        let t = self.cfg.transport();
        let shared_capped = TransportConfig {
            recv_sharing: RecvSharing::Shared,
            max_endpoints: self.args.max_endpoints,
            ..*t
        };
        let as_run = format!(
            "{}, {}",
            t.recv_sharing,
            if t.max_endpoints == 0 {
                "no endpoint cap".to_string()
            } else {
                format!("max_endpoints={} ({})", t.max_endpoints, t.endpoint_overflow)
            }
        );
        let mut table = self.memory_rows(runs);
        table.extend(self.transport_rows(runs, &as_run, shared_capped));
        let mut notes = Vec::new();
        for (mode, r, _) in runs {
            for why in [&r.footprint_mismatch, &r.peers_mismatch].into_iter().flatten() {
                notes.push(format!("why not ({mode}): {why}"));
            }
            for n in &r.notes {
                notes.push(format!("note ({mode}): {n}"));
            }
        }
        // The largest reading: the end's, or the runs' (VmHWM can read lower after memory is freed).
        let process_vm_hwm_kb = runs.iter().fold(
            ballast_runtime::ProcStatus::read_self()
                .map(|p| p.vm_hwm_kb)
                .unwrap_or(0),
            |m, (_, r, _)| m.max(r.process_vm_hwm_kb),
        );
        let (a, b) = (all_spikes(&runs[0].2), all_spikes(&runs[1].2));
        Report {
            circuit: input.label.clone(),
            written,
            settings: self.settings(&as_run, &shared_capped),
            table,
            notes,
            process_vm_hwm_kb,
            outputs: self.args.output.clone(),
            spikes: Spikes {
                round_robin: a.len(),
                memory: b.len(),
            },
            identical_spikes: a == b && !a.is_empty(),
            checks_ok: runs.iter().all(|r| r.1.peers_match && r.1.footprint_match),
        }
    }

    /// The settings line: the rows' settings are the demo's own, whatever the environment
    /// says.
    fn settings(&self, as_run: &str, shared_capped: &TransportConfig) -> String {
        let t = self.cfg.transport();
        let cap = self.args.max_endpoints;
        format!(
            "settings (fixed: the demo reads no BALLAST_* variable; ballast run and ballast info take them): \
             the runs use {}, {as_run}, buffer_count {} x buffer_size {} B; the capped row {}",
            t.kind,
            t.buffer_count,
            t.buffer_size,
            if cap > 0 {
                format!(
                    "shared + max_endpoints={cap} (--max-endpoints), endpoint_overflow={}",
                    shared_capped.endpoint_overflow
                )
            } else {
                "shared, no endpoint cap (--max-endpoints 0)".to_string()
            }
        )
    }

    /// The cell memory rows: largest and smallest rank, estimated and accounted, and peers.
    fn memory_rows(&self, runs: &[Run]) -> Vec<Line> {
        let row = |label: &str, f: &dyn Fn(&RunReport) -> String| Line::Row {
            label: label.to_owned(),
            round_robin: f(&runs[0].1),
            memory: f(&runs[1].1),
        };
        let scale = self.args.memory_scale;
        vec![
            row("largest rank, estimated cell memory (MB)", &|r| {
                mb(max_min(&r.per_rank, |x| x.estimated_kb).max)
            }),
            row("smallest rank, estimated cell memory (MB)", &|r| {
                mb(max_min(&r.per_rank, |x| x.estimated_kb).min)
            }),
            row("largest / mean", &|r| {
                let mean = r.per_rank.iter().map(|x| x.estimated_kb).sum::<f64>() / r.per_rank.len() as f64;
                format!("{:.3}", max_min(&r.per_rank, |x| x.estimated_kb).max / mean)
            }),
            row(
                &format!("largest rank, Ballast-accounted (MB, --memory-scale {scale})"),
                &|r| mb(max_min(&r.per_rank, |x| x.ballast_kb).max),
            ),
            row(
                &format!("smallest rank, Ballast-accounted (MB, --memory-scale {scale})"),
                &|r| mb(max_min(&r.per_rank, |x| x.ballast_kb).min),
            ),
            row("peers per rank, largest (connected)", &|r| {
                format!(
                    "{}",
                    r.per_rank.iter().map(|x| x.peers_connected).max().unwrap_or(0)
                )
            }),
        ]
    }

    /// The transport rows: predicted per-peer, capped and as run; measured; the checks and
    /// the spikes.
    fn transport_rows(&self, runs: &[Run], as_run: &str, shared_capped: TransportConfig) -> Vec<Line> {
        let t = self.cfg.transport();
        let per_peer = TransportConfig {
            recv_sharing: RecvSharing::PerPeer,
            max_endpoints: 0,
            ..*t
        };
        let row = |label: &str, f: &dyn Fn(&RunReport) -> String| Line::Row {
            label: label.to_owned(),
            round_robin: f(&runs[0].1),
            memory: f(&runs[1].1),
        };
        let tp = |c: TransportConfig| {
            move |r: &RunReport| {
                let kb = r
                    .per_rank
                    .iter()
                    .map(|x| predicted_footprint(&c, x.peers_predicted, 0, r.ranks).total_bytes())
                    .max()
                    .unwrap_or(0);
                format!("{:.0}", kb as f64 / 1024.0)
            }
        };
        vec![
            Line::Heading {
                heading: "transport per rank, largest (KB), predicted for the circuit's peers:",
            },
            row("  per-peer", &tp(per_peer)),
            row(
                &capped_label(runs, self.args.max_endpoints, &shared_capped),
                &tp(shared_capped),
            ),
            row(&format!("  {as_run} (the configuration run)"), &tp(*t)),
            Line::Heading {
                heading: "transport per rank, largest (KB), measured in the runs:",
            },
            row(&format!("  {as_run}"), &|r| {
                format!(
                    "{:.0}",
                    r.per_rank
                        .iter()
                        .map(|x| x.footprint_measured_bytes)
                        .max()
                        .unwrap_or(0) as f64
                        / 1024.0
                )
            }),
            row("transport measured = predicted, every rank", &|r| {
                (if r.footprint_match { "yes" } else { "no" }).to_string()
            }),
            row("peers connected = predicted, every rank", &|r| {
                (if r.peers_match { "yes" } else { "no" }).to_string()
            }),
            row("spikes", &|r| r.spikes.to_string()),
        ]
    }
}

/// The capped row's label: what the cap does for this circuit's peers.
fn capped_label(runs: &[Run], cap: usize, shared_capped: &TransportConfig) -> String {
    let most = runs
        .iter()
        .flat_map(|(_, r, _)| r.per_rank.iter().map(|x| x.peers_predicted))
        .max()
        .unwrap_or(0);
    if cap == 0 {
        "  shared, no endpoint cap (--max-endpoints 0)".to_string()
    } else if most <= cap {
        format!("  shared + max_endpoints={cap} (at most {most} peers: none past it)")
    } else {
        match chunk_for(shared_capped, datagram_mtu(shared_capped.kind)) {
            Ok(Some(_)) => format!(
                "  shared + max_endpoints={cap} (datagram, up to {} peers past it)",
                most - cap
            ),
            Ok(None) => format!("  shared + max_endpoints={cap} (evict)"),
            Err(_) => format!("  shared + max_endpoints={cap} (evict: datagram falls back)"),
        }
    }
}

/// Prints the settings, the table, the notes, the peak memory and where the outputs are.
fn render(report: &Report) -> anyhow::Result<()> {
    outln!("{}", report.settings);
    outln!();
    outln!("{:<60} {:>14} {:>14}", "", "RoundRobin", "Memory");
    for line in &report.table {
        match line {
            Line::Heading { heading } => outln!("{heading}"),
            Line::Row {
                label,
                round_robin,
                memory,
            } => outln!("{:<60} {:>14} {:>14}", label, round_robin, memory),
        }
    }
    for n in &report.notes {
        outln!("{n}");
    }
    outln!(
        "process VmHWM (all ranks, both runs): {} MB",
        report.process_vm_hwm_kb / 1024
    );
    outln!(
        "outputs: {}/{{roundrobin,memory}}/{{out.dat,report.json}}",
        report.outputs.display()
    );
    Ok(())
}
