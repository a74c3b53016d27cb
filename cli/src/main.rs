//! The `ballast` command-line tool: `dry-run` (balance cells into an allocation file),
//! `stats` (inspect any allocation file, ours or neurodamus'), `fanout`/`info` (runtime),
//! `run` (the proxy simulation over the runtime), `demo` (the built-in example) and
//! `rebalance-corenrn` (CoreNEURON's files.dat redistributed over machines and ranks).
#![deny(unsafe_code)]

/// `print!` to stdout that ends the program quietly (exit 0) when stdout is a closed pipe,
/// as in `ballast stats F | head`, instead of panicking; other write errors are returned.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = write!(std::io::stdout().lock(), $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            return Err(e.into());
        }
    }};
}

/// [`out!`] with a newline.
macro_rules! outln {
    () => { out!("\n") };
    ($($arg:tt)*) => {{ out!($($arg)*); out!("\n"); }};
}

mod arena;
mod demo;
mod dry_run;
mod exchange;
mod fanout;
mod info;
mod memory_usage;
mod node_suggest;
mod output;
mod parse;
mod plot;
mod progress;
mod rebalance_corenrn;
mod run;
mod runtime_args;
mod stats;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Ballast: a memory load balancer for neuron simulations (neurodamus' dry-run and
/// allocation files: dry-run, stats), a communication runtime whose transport memory is
/// bounded and known (fanout, info), and a proxy simulation of a circuit over that runtime
/// (run, demo).
#[derive(Parser)]
#[command(name = "ballast", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Balance cells into (rank, cycle) buckets and write allocation_r{N}_c{C}.pkl.gz.
    DryRun(dry_run::DryRunArgs),
    /// Show per rank and cycle loads of an allocation file, ours or neurodamus'.
    Stats(stats::StatsArgs),
    /// Rank 0 sends a few integers to every other rank; memory before/after vs the model.
    Fanout(fanout::FanoutArgs),
    /// Transports, devices, effective runtime configuration, predicted footprint.
    Info(info::InfoArgs),
    /// Simulate a circuit on N ranks over the runtime (--lb-mode=Memory|RoundRobin):
    /// out.dat, report.json and per-rank memory, peers and footprint, predicted and measured.
    Run(run::RunArgs),
    /// The built-in example: a 20,000-cell circuit balanced for 16 ranks, run with
    /// RoundRobin and Memory side by side, and the check that the spikes are identical.
    Demo(demo::DemoArgs),
    /// Redistribute CoreNEURON's files.dat entries over machines and ranks by the size of
    /// their data files (neurodamus' rebalance-corenrn-data.py, and better).
    RebalanceCorenrn(rebalance_corenrn::RebalanceCorenrnArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::DryRun(args) => dry_run::run(args),
        Command::Stats(args) => stats::run(args),
        Command::Fanout(args) => fanout::run(args),
        Command::Info(args) => info::run(args),
        Command::Run(args) => run::run(args),
        Command::Demo(args) => demo::run(args),
        Command::RebalanceCorenrn(args) => rebalance_corenrn::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ballast: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
