//! `ballast rebalance-corenrn`: redistribute CoreNEURON's `files.dat` entries over machines
//! and their ranks by the size of their data files, and write the `files.dat` CoreNEURON
//! reads that assignment from (the layout and weight are documented in
//! [`ballast_balancer::corenrn`]). The options are checked into a [`Plan`], which runs into
//! one [`Report`], printed as JSON or as text.
use std::path::{Path, PathBuf};

use anyhow::Context;
use ballast_balancer::atomic;
use ballast_balancer::corenrn::{
    check_layout, histogram, rebalance, size_entries, EntryFiles, HistogramBin, Layout, RebalanceStrategy,
    DEFAULT_RANKS_PER_MACHINE,
};
use ballast_balancer::files_dat::FilesDat;
use ballast_balancer::limits::{available_memory, human_bytes};
use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::output::count;

#[derive(Args)]
pub struct RebalanceCorenrnArgs {
    /// CoreNEURON's files.dat (version line, count, one cell-group id per line).
    files_dat: PathBuf,
    /// Machines (nodes) the simulation will run on.
    #[arg(value_parser = crate::parse::whole::<u32>(1, u32::MAX.into()), allow_negative_numbers = true)]
    n_machines: u32,
    /// Ranks per machine (neurodamus' name --ranks-per-machine is accepted).
    #[arg(long, alias = "ranks-per-machine", value_name = "K", default_value_t = DEFAULT_RANKS_PER_MACHINE,
          value_parser = crate::parse::whole::<u32>(1, u32::MAX.into()), allow_negative_numbers = true)]
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
    /// The strategy compared with this one.
    fn other(self) -> StrategyArg {
        match self {
            StrategyArg::Ballast => StrategyArg::Neurodamus,
            StrategyArg::Neurodamus => StrategyArg::Ballast,
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

/// `rebalance-corenrn`'s options, checked.
struct Plan {
    files_dat: PathBuf,
    machines: u32,
    ranks_per_node: u32,
    /// Where the data files are: `--dat-path`, else the directory of `files_dat`.
    dat_dir: PathBuf,
    max_entries: Option<u64>,
    strategy: StrategyArg,
    output_file: PathBuf,
    histogram: bool,
    json: bool,
}

/// The weight of a cell group, as the report names it.
const WEIGHT: &str = "bytes of {id}_1.dat + {id}_2.dat + {id}_3.dat + {id}_gap.dat";

/// The result of `rebalance-corenrn`: the layout written (bytes and groups per machine and
/// rank) and the other strategy's on the same input.
#[derive(Serialize)]
struct Report {
    files_dat: PathBuf,
    version: String,
    gap_junctions: bool,
    entries: usize,
    machines: u32,
    ranks_per_machine: u32,
    ranks: u64,
    strategy: &'static str,
    weight: &'static str,
    total_bytes: u64,
    machine_bytes: Vec<u64>,
    rank_bytes: Vec<u64>,
    machine_entries: Vec<usize>,
    rank_entries: Vec<usize>,
    empty_ranks: usize,
    rounds: u64,
    count_line: u64,
    output: PathBuf,
    /// The other strategy on the same input, weighed the same way (when it is possible):
    /// one of the two is given.
    #[serde(skip_serializing_if = "Option::is_none")]
    ballast_strategy: Option<OtherStrategy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    neurodamus_strategy: Option<OtherStrategy>,
    /// What only the text form prints.
    #[serde(skip)]
    text: TextOnly,
}

/// The other strategy's largest machine and largest and smallest rank, bytes.
#[derive(Serialize)]
struct OtherStrategy {
    max_machine_bytes: u64,
    max_rank_bytes: u64,
    min_rank_bytes: u64,
}

struct TextOnly {
    other: StrategyArg,
    /// Why the other strategy is not possible on this input.
    other_error: Option<String>,
    dat_dir: PathBuf,
    histogram: bool,
}

pub fn run(args: &RebalanceCorenrnArgs) -> anyhow::Result<()> {
    let plan = Plan::new(args)?;
    let json = plan.json;
    let report = plan.run()?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    render(&report)
}

impl Plan {
    /// Checks the options before any work: an output never replaces a FIFO or device (and
    /// is checked again when written).
    fn new(args: &RebalanceCorenrnArgs) -> anyhow::Result<Plan> {
        atomic::refuse_special(&args.output_file).context("--output-file")?;
        Ok(Plan {
            files_dat: args.files_dat.clone(),
            machines: args.n_machines,
            ranks_per_node: args.ranks_per_node,
            dat_dir: args
                .dat_path
                .clone()
                .unwrap_or_else(|| atomic::parent_dir(&args.files_dat).to_owned()),
            max_entries: args.max_entries,
            strategy: args.strategy,
            output_file: args.output_file.clone(),
            histogram: args.histogram,
            json: args.json,
        })
    }

    /// Reads files.dat and the data files' sizes, rebalances, writes the output and weighs
    /// the other strategy on the same input.
    fn run(self) -> anyhow::Result<Report> {
        let files_dat = &self.files_dat;
        let parsed = FilesDat::read(files_dat)?;
        let chosen = parsed.entries(files_dat, self.max_entries)?;
        if let Some(n) = self
            .max_entries
            .filter(|&n| n > 0 && n < parsed.lines.len() as u64)
        {
            eprintln!(
                "warning: {}: using the first {n} of {} entry lines (--max-entries)",
                files_dat.display(),
                parsed.lines.len()
            );
        }
        let ids: Vec<String> = chosen.iter().map(|e| e.text.clone()).collect();
        let entries = size_entries(&self.dat_dir, &ids, files_dat)?;
        let layout = self.rebalance(&entries, self.strategy)?;
        check_layout(&layout, entries.len())
            .map_err(|e| anyhow::anyhow!("internal error: the rebalance lost or duplicated a group: {e}"))?;
        let text = layout.render(
            &parsed.version,
            parsed.gap_junctions,
            &entries,
            available_memory(),
        )?;
        atomic::refuse_input(&self.output_file, &[atomic::Input::new(files_dat, "FILES_DAT")])?;
        atomic::write_file(&self.output_file, text.as_bytes()).with_context(|| {
            format!(
                "cannot write {} (--output-file chooses where)",
                self.output_file.display()
            )
        })?;
        // The other strategy on the same input, weighed the same way, for comparison.
        let other = self.rebalance(&entries, self.strategy.other());
        Ok(self.report(parsed, &entries, &layout, other))
    }

    fn rebalance(&self, entries: &[EntryFiles], strategy: StrategyArg) -> anyhow::Result<Layout> {
        Ok(rebalance(
            entries,
            self.machines,
            self.ranks_per_node,
            strategy.strategy(),
            available_memory(),
        )?)
    }

    fn report(
        self,
        parsed: FilesDat,
        entries: &[EntryFiles],
        layout: &Layout,
        other: anyhow::Result<Layout>,
    ) -> Report {
        let weight = |i: usize| entries[i].weight();
        let stats = |l: &Layout| {
            let r = l.rank_totals(weight);
            OtherStrategy {
                max_machine_bytes: spread(&l.machine_totals(weight)).0,
                max_rank_bytes: spread(&r).0,
                min_rank_bytes: spread(&r).2,
            }
        };
        let other_strategy = self.strategy.other();
        let (other_stats, other_error) = match &other {
            Ok(o) => (Some(stats(o)), None),
            Err(e) => (None, Some(e.to_string())),
        };
        let (mut ballast_strategy, mut neurodamus_strategy) = (None, None);
        match other_strategy {
            StrategyArg::Ballast => ballast_strategy = other_stats,
            StrategyArg::Neurodamus => neurodamus_strategy = other_stats,
        }
        Report {
            files_dat: self.files_dat,
            version: parsed.version,
            gap_junctions: parsed.gap_junctions,
            entries: entries.len(),
            machines: self.machines,
            ranks_per_machine: self.ranks_per_node,
            ranks: layout.rank_count(),
            strategy: self.strategy.name(),
            weight: WEIGHT,
            total_bytes: entries.iter().map(EntryFiles::weight).sum::<u64>(),
            machine_bytes: layout.machine_totals(weight),
            rank_bytes: layout.rank_totals(weight),
            machine_entries: layout
                .ranks
                .chunks(self.ranks_per_node as usize)
                .map(|m| m.iter().map(Vec::len).sum::<usize>())
                .collect(),
            rank_entries: layout.ranks.iter().map(Vec::len).collect(),
            empty_ranks: layout.ranks.iter().filter(|r| r.is_empty()).count(),
            rounds: layout.rounds(),
            count_line: layout.count_line(),
            output: self.output_file,
            ballast_strategy,
            neurodamus_strategy,
            text: TextOnly {
                other: other_strategy,
                other_error,
                dat_dir: self.dat_dir,
                histogram: self.histogram,
            },
        }
    }
}

/// Prints `r` as text: the header, per machine, the spreads, the other strategy, the
/// histograms when asked, and how to run CoreNEURON on the output.
fn render(r: &Report) -> anyhow::Result<()> {
    outln!(
        "ballast rebalance-corenrn: {} ({}, version {}{}) -> {} × {} per machine = {}, strategy {}",
        count(r.entries as u64, "cell group"),
        r.files_dat.display(),
        r.version,
        if r.gap_junctions { ", gap junctions" } else { "" },
        count(r.machines, "machine"),
        count(r.ranks_per_machine, "rank"),
        count(r.ranks, "rank"),
        r.strategy
    );
    outln!("weight of a group: bytes of {{id}}_1.dat + {{id}}_2.dat + {{id}}_3.dat + {{id}}_gap.dat (those present); total {}\n",
        human_bytes(r.total_bytes));
    machine_table(r)?;
    let (mmax, mmean, mmin) = spread(&r.machine_bytes);
    let (rmax, rmean, rmin) = spread(&r.rank_bytes);
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
        r.empty_ranks,
        count(r.ranks, "rank")
    );
    let other = r.text.other.name();
    match (r.ballast_strategy.as_ref().or(r.neurodamus_strategy.as_ref()), &r.text.other_error) {
        (Some(o), _) => outln!(
            "{other} strategy on the same input, same weight: largest machine {:.1} KiB, largest rank {:.1} KiB",
            kib(o.max_machine_bytes as f64),
            kib(o.max_rank_bytes as f64)
        ),
        (None, e) => outln!(
            "{other} strategy on the same input: not possible ({})",
            e.as_deref().unwrap_or_default()
        ),
    }
    if r.text.histogram {
        histograms(r)?;
    }
    if r.empty_ranks > 0 {
        eprintln!(
            "warning: {} of {} load no cell group",
            r.empty_ranks,
            count(r.ranks, "rank")
        );
    }
    outln!(
        "\nwrote {} (count line {} = {} × {}: every line written, padding included)",
        r.output.display(),
        r.count_line,
        count(r.rounds, "round"),
        count(r.ranks, "rank")
    );
    // CoreNEURON opens `-d` + "/" + `-f` (main1.cpp: `datpath + "/" + files_dat`), so `-f` is
    // the output's path relative to the data directory.
    let dir = &r.text.dat_dir;
    let files_dat = relative_to(dir, &r.output);
    let nranks = r.ranks;
    outln!(
        "run CoreNEURON on exactly {nranks} ranks ({} × {}): mpirun -n {nranks} special-core --mpi -d {} -f {} (-f is read relative to -d; with any other rank count groups would be lost)",
        r.machines,
        r.ranks_per_machine,
        dir.display(),
        files_dat.display()
    );
    Ok(())
}

/// One row per machine: groups, total, largest and smallest rank, empty ranks.
fn machine_table(r: &Report) -> anyhow::Result<()> {
    outln!(
        "{:>8} {:>8} {:>14} {:>14} {:>14} {:>6}",
        "machine",
        "groups",
        "total KiB",
        "largest rank",
        "smallest rank",
        "empty"
    );
    let rpm = r.ranks_per_machine as usize;
    for (m, total) in r.machine_bytes.iter().enumerate() {
        let ranks = &r.rank_bytes[m * rpm..(m + 1) * rpm];
        let entries = &r.rank_entries[m * rpm..(m + 1) * rpm];
        let groups: usize = entries.iter().sum();
        let empty = entries.iter().filter(|&&n| n == 0).count();
        outln!(
            "{:>8} {:>8} {:>14.1} {:>14.1} {:>14.1} {:>6}",
            m,
            groups,
            kib(*total as f64),
            kib(spread(ranks).0 as f64),
            kib(spread(ranks).2 as f64),
            empty
        );
    }
    Ok(())
}

/// Histograms of the machine and rank totals (`--histogram`).
fn histograms(r: &Report) -> anyhow::Result<()> {
    for (what, values) in [("machine", &r.machine_bytes), ("rank", &r.rank_bytes)] {
        outln!("\n{what} totals (KiB), 40 bins, empty bins not shown:");
        let h = histogram(values, 40);
        let most = h.iter().map(|b| b.count).max().unwrap_or(1).max(1);
        for HistogramBin { start, end, count: n } in h.into_iter().filter(|b| b.count > 0) {
            outln!(
                "  [{:>10.1} - {:>10.1}]: {:>6} {}",
                kib(start),
                kib(end),
                n,
                "#".repeat((n * 40).div_ceil(most))
            );
        }
    }
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
