//! The dry run's input: the cells to balance read or generated from the plan's
//! [`Source`], with their connectivity when known and the files read (no output may
//! replace one).
use std::path::Path;

use ballast_balancer::atomic;
use ballast_balancer::network::Network;
use ballast_balancer::synthetic::{self, CircuitSpec};
use ballast_balancer::{DryRun, DryRunWithNotes, Progress};

use super::plan::Source;

/// The cells to balance and, when known, their connectivity.
pub(super) struct Input {
    pub dry_run: DryRun,
    pub network: Option<Network>,
    /// Where the input came from, for messages.
    pub label: String,
    /// The files read, which no output may replace.
    pub files: Vec<atomic::Input>,
}

impl Source {
    /// The progress total of reading: a dry-run file's bytes twice (read, then parsed);
    /// `None` for other inputs (or when the file's size cannot be read).
    pub fn read_total(&self) -> Option<u64> {
        match self {
            Source::MemoryUsage(p) => std::fs::metadata(p).ok().map(|m| 2 * m.len()),
            _ => None,
        }
    }

    /// Reads or generates the input, a dry-run file's progress counted in `done`.
    pub fn load(&self, done: &Progress) -> anyhow::Result<Input> {
        match self {
            Source::Circuit {
                config,
                memory_usage,
                cell_kb,
                point_cell_kb,
            } => load_circuit(config, memory_usage.as_deref(), *cell_kb, *point_cell_kb),
            Source::Synthetic { spec, synapses } => Ok(match *synapses {
                Some(synapses) => {
                    let c = synthetic::generate_circuit(&CircuitSpec {
                        dry_run: spec.clone(),
                        synapses,
                        ..CircuitSpec::default()
                    })?;
                    Input {
                        dry_run: c.dry_run,
                        network: Some(c.network),
                        label: format!("synthetic circuit ({synapses} synapses)"),
                        files: Vec::new(),
                    }
                }
                None => Input {
                    dry_run: synthetic::generate(spec)?,
                    network: None,
                    label: "synthetic dry run".into(),
                    files: Vec::new(),
                },
            }),
            Source::MemoryUsage(path) => Ok(Input {
                dry_run: read_dry_run(path, done)?,
                network: None,
                label: path.display().to_string(),
                files: vec![atomic::Input::new(path, "--memory-usage")],
            }),
        }
    }
}

/// Reads a dry-run file, printing its notes (e.g. unknown keys) as warnings; its progress
/// counted in `done` ([`crate::memory_usage::read`]).
fn read_dry_run(path: &Path, done: &Progress) -> anyhow::Result<DryRun> {
    let DryRunWithNotes { dry_run, notes } = crate::memory_usage::read(path, Some(done))?;
    for note in notes {
        eprintln!("warning: {note}");
    }
    Ok(dry_run)
}

#[cfg(feature = "sonata")]
fn load_circuit(
    config: &Path,
    memory_usage: Option<&Path>,
    cell_kb: Option<f64>,
    point_cell_kb: Option<f64>,
) -> anyhow::Result<Input> {
    use ballast_balancer::circuit::{dry_run_from_circuit, MetypeMemory};
    let circuit = ballast_balancer::sonata::Circuit::open(config)?;
    let measured = match memory_usage {
        Some(p) => read_dry_run(p, &Progress::new())?
            .metypes
            .into_iter()
            .map(|m| (m.name, m.memory_kb))
            .collect(),
        None => Default::default(),
    };
    let memory = MetypeMemory {
        measured,
        cell_kb,
        point_cell_kb,
    };
    let (dry_run, network) = dry_run_from_circuit(&circuit, &memory)?;
    let mut files = vec![atomic::Input::new(config, "--circuit")];
    files.extend(memory_usage.map(|p| atomic::Input::new(p, "--memory-usage")));
    files.extend(
        circuit
            .node_populations
            .iter()
            .map(|p| atomic::Input::new(&p.file, "a nodes file of --circuit")),
    );
    files.extend(
        circuit
            .edge_populations
            .iter()
            .map(|e| atomic::Input::new(&e.file, "an edges file of --circuit")),
    );
    Ok(Input {
        dry_run,
        network: Some(network),
        label: config.display().to_string(),
        files,
    })
}

#[cfg(not(feature = "sonata"))]
fn load_circuit(config: &Path, _: Option<&Path>, _: Option<f64>, _: Option<f64>) -> anyhow::Result<Input> {
    anyhow::bail!("{}: reading SONATA circuits needs the `sonata` feature: build with `cargo build --release --bin ballast --features sonata` (needs libhdf5-dev pkg-config)", config.display())
}
