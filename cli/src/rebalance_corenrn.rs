//! `ballast rebalance-corenrn`: redistribute CoreNEURON's `files.dat` entries over machines
//! and their ranks by the size of their data files, and write the `files.dat` CoreNEURON
//! reads that assignment from (the layout and weight are documented in
//! [`ballast_balancer::corenrn`]).
use std::path::{Path, PathBuf};

use anyhow::Context;
use ballast_balancer::atomic;
use ballast_balancer::corenrn::{
    check_layout, histogram, rebalance, size_entries, EntryFiles, FilesDat, Layout, RebalanceStrategy,
    DEFAULT_RANKS_PER_MACHINE,
};
use ballast_balancer::limits::{available_memory, human_bytes};
use clap::{Args, ValueEnum};
use serde_json::json;

use crate::output::count;

#[derive(Args)]
pub struct RebalanceCorenrnArgs {
    /// CoreNEURON's files.dat (version line, count, one cell-group id per line).
    files_dat: PathBuf,
    /// Machines (nodes) the simulation will run on.
    #[arg(value_parser = clap::value_parser!(u32).range(1..))]
    n_machines: u32,
    /// Ranks per machine (neurodamus' name --ranks-per-machine is accepted).
    #[arg(long, alias = "ranks-per-machine", value_name = "K", default_value_t = DEFAULT_RANKS_PER_MACHINE,
          value_parser = clap::value_parser!(u32).range(1..))]
    ranks_per_node: u32,
    /// Directory of the {id}_{1,2,3}.dat files [default: the directory of FILES_DAT].
    #[arg(long, value_name = "DIR")]
    dat_path: Option<PathBuf>,
    /// Use only the first N entry lines; 0: every line, whatever the count line says
    /// [default: the count line, which must then agree with the lines].
    #[arg(long, value_name = "N")]
    max_entries: Option<u64>,
    /// ballast (machines then ranks, all data files weighed) or neurodamus (its
    /// rebalance-corenrn-data.py, reproduced byte for byte).
    #[arg(long, value_enum, default_value_t = StrategyArg::Ballast)]
    strategy: StrategyArg,
    /// The files.dat to write (relative to the working directory).
    #[arg(long, value_name = "PATH", default_value = "rebalanced-files.dat")]
    output_file: PathBuf,
    /// Also print histograms of the machine and rank totals.
    #[arg(long)]
    histogram: bool,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StrategyArg {
    Ballast,
    Neurodamus,
}

impl StrategyArg {
    fn strategy(self) -> RebalanceStrategy {
        match self {
            StrategyArg::Ballast => RebalanceStrategy::Ballast,
            StrategyArg::Neurodamus => RebalanceStrategy::Neurodamus,
        }
    }
    fn name(self) -> &'static str {
        match self {
            StrategyArg::Ballast => "ballast",
            StrategyArg::Neurodamus => "neurodamus",
        }
    }
}

/// Largest, mean and smallest of `v`.
fn spread(v: &[u64]) -> (u64, f64, u64) {
    let max = v.iter().copied().max().unwrap_or(0);
    let min = v.iter().copied().min().unwrap_or(0);
    let mean = v.iter().sum::<u64>() as f64 / v.len().max(1) as f64;
    (max, mean, min)
}

fn kib(b: impl Into<f64>) -> f64 {
    b.into() / 1024.0
}

pub fn run(args: &RebalanceCorenrnArgs) -> anyhow::Result<()> {
    let files_dat = &args.files_dat;
    // Before any work (and again when written): an output never replaces a FIFO or device.
    atomic::refuse_special(&args.output_file).context("--output-file")?;
    let parsed = FilesDat::read(files_dat)?;
    let chosen = parsed.entries(files_dat, args.max_entries)?;
    if let Some(n) = args
        .max_entries
        .filter(|&n| n > 0 && n < parsed.lines.len() as u64)
    {
        eprintln!(
            "warning: {}: using the first {n} of {} entry lines (--max-entries)",
            files_dat.display(),
            parsed.lines.len()
        );
    }
    let dir = args
        .dat_path
        .clone()
        .unwrap_or_else(|| atomic::parent_dir(files_dat).to_owned());
    let ids: Vec<String> = chosen.iter().map(|e| e.1.clone()).collect();
    let entries = size_entries(&dir, &ids, files_dat)?;
    let strategy = args.strategy.strategy();
    let layout = rebalance(
        &entries,
        args.n_machines,
        args.ranks_per_node,
        strategy,
        available_memory(),
    )?;
    check_layout(&layout, entries.len())
        .map_err(|e| anyhow::anyhow!("internal error: the rebalance lost or duplicated a group: {e}"))?;
    let text = layout.render(
        &parsed.version,
        parsed.gap_junctions,
        &entries,
        available_memory(),
    )?;
    atomic::refuse_input(&args.output_file, &[atomic::Input::new(files_dat, "FILES_DAT")])?;
    atomic::write_file(&args.output_file, text.as_bytes()).with_context(|| {
        format!(
            "cannot write {} (--output-file chooses where)",
            args.output_file.display()
        )
    })?;

    // The other strategy on the same input, weighed the same way, for comparison.
    let other_strategy = match args.strategy {
        StrategyArg::Ballast => StrategyArg::Neurodamus,
        StrategyArg::Neurodamus => StrategyArg::Ballast,
    };
    let other = rebalance(
        &entries,
        args.n_machines,
        args.ranks_per_node,
        other_strategy.strategy(),
        available_memory(),
    );
    let weight = |i: usize| entries[i].weight();
    let machines = layout.machine_totals(weight);
    let ranks = layout.rank_totals(weight);
    let empty_ranks = layout.ranks.iter().filter(|r| r.is_empty()).count();
    let nranks = layout.rank_count();
    if args.json {
        let stats = |l: &Layout| {
            let m = l.machine_totals(weight);
            let r = l.rank_totals(weight);
            json!({
                "max_machine_bytes": spread(&m).0, "max_rank_bytes": spread(&r).0,
                "min_rank_bytes": spread(&r).2,
            })
        };
        let mut value = json!({
            "files_dat": files_dat, "version": parsed.version, "gap_junctions": parsed.gap_junctions,
            "entries": entries.len(), "machines": args.n_machines, "ranks_per_machine": args.ranks_per_node,
            "ranks": nranks, "strategy": args.strategy.name(),
            "weight": "bytes of {id}_1.dat + {id}_2.dat + {id}_3.dat + {id}_gap.dat",
            "total_bytes": entries.iter().map(EntryFiles::weight).sum::<u64>(),
            "machine_bytes": machines, "rank_bytes": ranks,
            "machine_entries": layout.ranks.chunks(args.ranks_per_node as usize).map(|m| m.iter().map(Vec::len).sum::<usize>()).collect::<Vec<_>>(),
            "rank_entries": layout.ranks.iter().map(Vec::len).collect::<Vec<_>>(),
            "empty_ranks": empty_ranks, "rounds": layout.rounds(), "count_line": layout.count_line(),
            "output": args.output_file,
        });
        if let Ok(o) = &other {
            value[format!("{}_strategy", other_strategy.name())] = stats(o);
        }
        outln!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    outln!(
        "ballast rebalance-corenrn: {} ({}, version {}{}) -> {} × {} per machine = {}, strategy {}",
        count(entries.len() as u64, "cell group"),
        files_dat.display(),
        parsed.version,
        if parsed.gap_junctions {
            ", gap junctions"
        } else {
            ""
        },
        count(args.n_machines, "machine"),
        count(args.ranks_per_node, "rank"),
        count(nranks, "rank"),
        args.strategy.name()
    );
    outln!("weight of a group: bytes of {{id}}_1.dat + {{id}}_2.dat + {{id}}_3.dat + {{id}}_gap.dat (those present); total {}\n",
        human_bytes(entries.iter().map(EntryFiles::weight).sum()));
    outln!(
        "{:>8} {:>8} {:>14} {:>14} {:>14} {:>6}",
        "machine",
        "groups",
        "total KiB",
        "largest rank",
        "smallest rank",
        "empty"
    );
    let rpm = args.ranks_per_node as usize;
    for (m, total) in machines.iter().enumerate() {
        let r = &ranks[m * rpm..(m + 1) * rpm];
        let groups: usize = layout.ranks[m * rpm..(m + 1) * rpm].iter().map(Vec::len).sum();
        let empty = layout.ranks[m * rpm..(m + 1) * rpm]
            .iter()
            .filter(|r| r.is_empty())
            .count();
        outln!(
            "{:>8} {:>8} {:>14.1} {:>14.1} {:>14.1} {:>6}",
            m,
            groups,
            kib(*total as f64),
            kib(spread(r).0 as f64),
            kib(spread(r).2 as f64),
            empty
        );
    }
    let (mmax, mmean, mmin) = spread(&machines);
    let (rmax, rmean, rmin) = spread(&ranks);
    let ratio = |max: u64, mean: f64| if mean > 0.0 { max as f64 / mean } else { 1.0 };
    outln!(
        "\nmachines: largest {:.1} KiB, mean {:.1}, smallest {:.1} (largest/mean {:.4})",
        kib(mmax as f64),
        kib(mmean),
        kib(mmin as f64),
        ratio(mmax, mmean)
    );
    outln!(
        "ranks:    largest {:.1} KiB, mean {:.1}, smallest {:.1} (largest/mean {:.4}); {} of {} empty",
        kib(rmax as f64),
        kib(rmean),
        kib(rmin as f64),
        ratio(rmax, rmean),
        empty_ranks,
        count(nranks, "rank")
    );
    match &other {
        Ok(o) => outln!(
            "{} strategy on the same input, same weight: largest machine {:.1} KiB, largest rank {:.1} KiB",
            other_strategy.name(),
            kib(spread(&o.machine_totals(weight)).0 as f64),
            kib(spread(&o.rank_totals(weight)).0 as f64)
        ),
        Err(e) => outln!(
            "{} strategy on the same input: not possible ({e})",
            other_strategy.name()
        ),
    }
    if args.histogram {
        for (what, values) in [("machine", &machines), ("rank", &ranks)] {
            outln!("\n{what} totals (KiB), 40 bins, empty bins not shown:");
            let h = histogram(values, 40);
            let most = h.iter().map(|b| b.2).max().unwrap_or(1).max(1);
            for (start, end, n) in h.into_iter().filter(|b| b.2 > 0) {
                outln!(
                    "  [{:>10.1} - {:>10.1}]: {:>6} {}",
                    kib(start),
                    kib(end),
                    n,
                    "#".repeat((n * 40).div_ceil(most))
                );
            }
        }
    }
    if empty_ranks > 0 {
        eprintln!(
            "warning: {} of {} load no cell group",
            empty_ranks,
            count(nranks, "rank")
        );
    }
    outln!(
        "\nwrote {} (count line {} = {} × {}: every line written, padding included)",
        args.output_file.display(),
        layout.count_line(),
        count(layout.rounds(), "round"),
        count(nranks, "rank")
    );
    // CoreNEURON opens `-d` + "/" + `-f` (main1.cpp: `datpath + "/" + files_dat`), so `-f` is
    // the output's path relative to the data directory.
    let files_dat = relative_to(&dir, &args.output_file);
    outln!(
        "run CoreNEURON on exactly {nranks} ranks ({} × {}): mpirun -n {nranks} special-core --mpi -d {} -f {} (-f is read relative to -d; with any other rank count groups would be lost)",
        args.n_machines,
        args.ranks_per_node,
        dir.display(),
        files_dat.display()
    );
    Ok(())
}

/// `path` relative to directory `dir` (with `..` where they part), both made absolute
/// first; `path` itself when either cannot be made absolute.
fn relative_to(dir: &Path, path: &Path) -> PathBuf {
    let abs = |p: &Path| -> Option<PathBuf> {
        let p = if p.is_absolute() {
            p.to_path_buf()
        } else {
            std::env::current_dir().ok()?.join(p)
        };
        // The file itself may not be there yet: canonicalise its directory.
        match (p.parent(), p.file_name()) {
            (Some(d), Some(f)) => Some(
                std::fs::canonicalize(if d.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    d
                })
                .ok()?
                .join(f),
            ),
            _ => std::fs::canonicalize(&p).ok(),
        }
    };
    let (Some(d), Some(p)) = (std::fs::canonicalize(dir).ok(), abs(path)) else {
        return path.to_path_buf();
    };
    let (dc, pc): (Vec<_>, Vec<_>) = (d.components().collect(), p.components().collect());
    let common = dc.iter().zip(&pc).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..dc.len() {
        out.push("..");
    }
    for c in &pc[common..] {
        out.push(c);
    }
    out
}
