//! The dry run's outputs, every one or none: the allocation file and its sidecar, the dry
//! run (`--write-memory-usage`) and the plot (`--plot`), checked and weighed first.
use std::path::{Path, PathBuf};

use anyhow::Context;
use ballast_balancer::atomic::{self, AtomicFile};
use ballast_balancer::transport_aware::RankLoads;
use ballast_balancer::{stage_allocation, AllocationCosts};
use ballast_balancer::{Allocation, DryRun, GidTables, Summary};

use super::balance::BalanceStep;
use super::input::Input;
use super::plan::{Plan, Sizing, Source};
use crate::plot;

/// Creates the output directory and writes the outputs of `step` ([`write_outputs`]), the
/// sidecar's costs recording the strategy, the ranks and whether transport was `charged`.
pub(super) fn write_step(
    plan: &Plan,
    input: &Input,
    sizing: &Sizing,
    step: &BalanceStep,
    gid_tables: GidTables,
    charged: bool,
) -> anyhow::Result<(Vec<PathBuf>, Summary)> {
    let config = &sizing.config;
    if std::fs::metadata(&plan.output_dir).is_ok_and(|m| !m.is_dir()) {
        anyhow::bail!(
            "{} exists and is not a directory: --output-dir takes a directory (made if missing)",
            plan.output_dir.display()
        );
    }
    atomic::create_dir_all(&plan.output_dir).with_context(|| {
        format!(
            "cannot create output directory {} (--output-dir)",
            plan.output_dir.display()
        )
    })?;
    let costs = || {
        let mut costs = AllocationCosts::from_inputs(
            &step.cost_inputs,
            "ballast dry-run",
            config.ranks,
            config.cycles,
            &step.strategy_name,
            if charged { "ballast" } else { "none" },
        );
        if let Source::Circuit {
            cell_kb,
            point_cell_kb,
            ..
        } = &plan.source
        {
            costs.cell_kb_default = *cell_kb;
            costs.point_cell_kb_default = *point_cell_kb;
        }
        costs
    };
    write_outputs(
        plan,
        input,
        &step.allocation,
        gid_tables,
        costs,
        step.blind.as_ref(),
        step.loads.as_ref(),
    )
}

/// Checks the allocation and writes every output of the command or none. The allocation is
/// written unnamed while a second thread checks it (every cell in exactly one bucket),
/// weighs it ([`Summary::checked_with`], with `gid_tables` built beforehand) and computes
/// the sidecar's `costs`; then the plot is rendered,
/// `cell_memory_usage.json` (when asked) and the sidecar are written unnamed, and only then
/// all are put in place ([`atomic::commit_all`]: a failure there names what was written).
/// No output may be an input. Returns the paths written, the allocation first, and the
/// summary.
fn write_outputs(
    plan: &Plan,
    input: &Input,
    allocation: &Allocation,
    gid_tables: GidTables,
    costs: impl FnOnce() -> AllocationCosts + Send,
    blind: Option<&RankLoads>,
    loads: Option<&RankLoads>,
) -> anyhow::Result<(Vec<PathBuf>, Summary)> {
    let dir = &plan.output_dir;
    let in_dir = || {
        format!(
            "cannot write the outputs in {} (--output-dir chooses the directory)",
            dir.display()
        )
    };
    let memory_usage = plan.memory_usage_out.as_ref();
    let allocation_path = dir.join(ballast_balancer::allocation_file_name(
        allocation.ranks,
        allocation.cycles,
    ));
    let sidecar_path = dir.join(ballast_balancer::sidecar_file_name(
        allocation.ranks,
        allocation.cycles,
    ));
    check_outputs(plan, input, &allocation_path, &sidecar_path)?;
    let dry_run = &input.dry_run;
    // The allocation (pickled on this thread, compressed on another) beside the check, the
    // summary and the costs: none of them is needed to write it, and nothing is in place
    // before the check has passed.
    let (staged, (valid, summary, costs)) = std::thread::scope(|s| {
        let side = ballast_balancer::spawn::side(s, || {
            let (valid, summary) = Summary::checked_with(allocation, dry_run, gid_tables);
            (valid, summary, costs())
        });
        let staged = stage_allocation(dir, allocation);
        (staged, side.join())
    });
    valid.context("internal error: the balancer lost or duplicated a cell")?;
    let mut files: Vec<AtomicFile> = vec![staged.with_context(in_dir)?];
    let mut plot_file = None;
    if let Some(path) = &plan.plot {
        let lower = summary.overall.total_kb / allocation.ranks as f64;
        let series = rank_series(dry_run, allocation, blind, loads);
        plot_file = Some(plot::render(path, &series, lower)?);
    }
    if let Some(p) = memory_usage {
        files.push(
            input
                .dry_run
                .stage_json_file(p)
                .with_context(|| format!("cannot write {} (--write-memory-usage)", p.display()))?,
        );
    }
    files.push(costs.stage(dir).with_context(in_dir)?);
    files.extend(plot_file);
    Ok((atomic::commit_all(files)?, summary))
}

/// Refuses an output that is an input or not a regular file, and warns when the
/// allocation file about to be replaced is not Ballast's.
fn check_outputs(
    plan: &Plan,
    input: &Input,
    allocation_path: &Path,
    sidecar_path: &Path,
) -> anyhow::Result<()> {
    let outputs: Vec<&Path> = [
        Some(allocation_path),
        plan.memory_usage_out.as_deref(),
        Some(sidecar_path),
        plan.plot.as_deref(),
    ]
    .into_iter()
    .flatten()
    .collect();
    for out in &outputs {
        atomic::refuse_input(out, &input.files)?;
        atomic::refuse_special(out)?;
    }
    // An allocation file without Ballast's sidecar beside it is another tool's (neurodamus
    // writes its own into its dry run's directory): say that it is replaced.
    if allocation_path.exists() && !sidecar_path.exists() {
        eprintln!(
            "warning: replacing {}, which Ballast did not write (no {} beside it: neurodamus' own allocation?); give --output-dir another directory to keep it",
            allocation_path.display(),
            sidecar_path.file_name().unwrap_or_default().to_string_lossy()
        );
    }
    Ok(())
}

/// The series a plot draws: one or two results, per rank (cells, synapses, transport).
fn rank_series(
    dry_run: &DryRun,
    allocation: &Allocation,
    blind: Option<&RankLoads>,
    loads: Option<&RankLoads>,
) -> Vec<plot::Series> {
    let from_loads = |title: &str, l: &RankLoads| plot::Series {
        title: title.to_owned(),
        cells_kb: l.cells_kb.clone(),
        synapses_kb: l.synapses_kb.clone(),
        transport_kb: l.transport_kb.clone(),
    };
    match (blind, loads) {
        (Some(b), Some(l)) => vec![from_loads("transport-blind", b), from_loads("transport-aware", l)],
        (None, Some(l)) => vec![from_loads("allocation", l)],
        _ => vec![plot::allocation_series("allocation", allocation, dry_run)],
    }
}
