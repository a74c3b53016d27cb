//! Allocation files on disk: their names (`allocation_r{R}_c{C}.pkl.gz`), reading one into
//! an [`Allocation`], writing one, and neurodamus' `--lb-mode=Memory` rule: use the file for
//! this rank count when present, regenerate it otherwise ([`load_or_generate`]).
//!
//! Beside each allocation Ballast writes its sidecar `allocation_r{R}_c{C}.json`
//! ([`AllocationCosts`]): the costs it was balanced with, so that a later `ballast run
//! --lb-mode=Memory` can say when the file it reuses was balanced with other costs.
//! neurodamus' pickle itself holds only the buckets.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::allocation::Allocation;
use crate::atomic::AtomicFile;
use crate::dry_run::{DryRun, MetypeGids};
use crate::error::{BalancerError, Result};
use crate::pickle::{self, RanksCycles};
use crate::strategy::{balance, BalancerConfig};

/// neurodamus' file name for an allocation of `ranks` ranks and `cycles` cycles.
pub fn allocation_file_name(ranks: u32, cycles: u32) -> String {
    format!("allocation_r{ranks}_c{cycles}.pkl.gz")
}

/// Reads an allocation file. Ranks and cycles come from the file name when it follows
/// neurodamus' pattern, otherwise from the largest (rank, cycle) key + 1. Buckets outside
/// the ranks and cycles of the name are an error.
///
/// Errors: those of [`pickle::read_allocation_file`]; a name with 0 ranks or 0 cycles; a
/// bucket outside the name's counts; without such a name, a rank or cycle key of
/// 4294967295 (the count would not fit in 32 bits). Nothing is allocated per bucket the
/// name or keys claim: an allocation costs memory in proportion to the file's content.
pub fn read_allocation(path: &Path) -> Result<Allocation> {
    use crate::limits::count;
    let name = pickle::ranks_cycles_from_file_name(path);
    if let Some(RanksCycles { ranks: r, cycles: c }) = name.filter(|n| n.ranks == 0 || n.cycles == 0) {
        return Err(BalancerError::Pickle {
            path: path.to_owned(),
            message: format!(
                "the file name says {} × {}: an allocation has at least 1 rank and 1 cycle",
                count(r.into(), "rank"),
                count(c.into(), "cycle")
            ),
        });
    }
    let populations = pickle::read_allocation_file(path)?;
    let keys = populations.iter().flat_map(|p| p.buckets.keys());
    let span = keys.fold((0u64, 0u64), |(r, c), b| {
        (r.max(b.rank as u64 + 1), c.max(b.cycle as u64 + 1))
    });
    let (ranks, cycles) = match name {
        Some(RanksCycles { ranks: r, cycles: c }) => {
            if span.0 > r as u64 || span.1 > c as u64 {
                return Err(BalancerError::Pickle {
                    path: path.to_owned(),
                    message: format!(
                        "the file name says {} × {} but it holds bucket (rank {}, cycle {})",
                        count(r.into(), "rank"),
                        count(c.into(), "cycle"),
                        span.0 - 1,
                        span.1 - 1
                    ),
                });
            }
            (r, c)
        }
        None => {
            let fit = |n: u64, what: &str| {
                u32::try_from(n.max(1)).map_err(|_| BalancerError::Pickle {
                    path: path.to_owned(),
                    message: format!(
                        "a bucket has {what} {}: the {what} count {n} does not fit in 32 bits",
                        n - 1
                    ),
                })
            };
            (fit(span.0, "rank")?, fit(span.1, "cycle")?)
        }
    };
    Ok(Allocation {
        ranks,
        cycles,
        populations,
    })
}

/// Writes `allocation` as `dir/allocation_r{R}_c{C}.pkl.gz` (atomically) and returns the path.
pub fn write_allocation(dir: &Path, allocation: &Allocation) -> Result<PathBuf> {
    let path = dir.join(allocation_file_name(allocation.ranks, allocation.cycles));
    pickle::write_allocation_file(&path, &allocation.populations)?;
    Ok(path)
}

/// [`write_allocation`] up to the commit (see [`crate::atomic::commit_all`]).
pub fn stage_allocation(dir: &Path, allocation: &Allocation) -> Result<AtomicFile> {
    let path = dir.join(allocation_file_name(allocation.ranks, allocation.cycles));
    pickle::stage_allocation_file(&path, &allocation.populations)
}

/// The sidecar's name for an allocation of `ranks` × `cycles`: `allocation_r{R}_c{C}.json`.
pub fn sidecar_file_name(ranks: u32, cycles: u32) -> String {
    format!("allocation_r{ranks}_c{cycles}.json")
}

/// The costs an allocation was balanced with: the sidecar `allocation_r{R}_c{C}.json`.
///
/// `cost_digest` is a CRC-32 (hex) of the cost inputs: every metype's name, memory KB and
/// average synapses, the per-cell synapse counts and gids of each population, the KB per
/// synapse, the strategy and the transport model. Two allocations balanced from the same
/// inputs have the same digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocationCosts {
    /// The command that wrote it (`ballast dry-run`, `ballast run`).
    pub written_by: String,
    pub ranks: u32,
    pub cycles: u32,
    /// `lpt`, `neurodamus` or `lpt+transport`.
    pub strategy: String,
    /// `none` or `ballast` (per-rank transport memory charged).
    pub transport_model: String,
    /// Cells balanced.
    pub cells: usize,
    /// Their total cost, KB (cells + synapses), rounded to 0.001 KB.
    pub total_kb: f64,
    /// KB per synapse.
    pub synapse_kb: f64,
    /// With a circuit: KB of a detailed cell whose metype is not measured.
    pub cell_kb_default: Option<f64>,
    /// With a circuit: KB of a point neuron whose metype is not measured.
    pub point_cell_kb_default: Option<f64>,
    pub cost_digest: String,
}

/// What [`AllocationCosts`] takes from a dry run: the digest of its cost inputs so far and
/// its total KB. It depends on the dry run only, so it can be computed beside the balancing.
#[derive(Debug, Clone)]
pub struct CostInputs {
    hasher: crc32fast::Hasher,
    total_kb: f64,
    cells: usize,
}

impl CostInputs {
    /// Digests every metype's name, memory KB and average synapses, the KB per synapse, and
    /// each population's name, gids and per-cell synapse counts; sums the cells' KB.
    pub fn new(dry_run: &DryRun) -> CostInputs {
        let mut h = crc32fast::Hasher::new();
        h.update(b"ballast-costs-1\0");
        h.update(&crate::dry_run::SYNAPSE_KB.to_le_bytes());
        for m in &dry_run.metypes {
            h.update(m.name.as_bytes());
            h.update(&[0]);
            h.update(&m.memory_kb.to_le_bytes());
            h.update(&m.synapses_per_cell.to_le_bytes());
        }
        let mut total_kb = 0.0;
        for p in &dry_run.populations {
            h.update(p.name.as_bytes());
            h.update(&[0]);
            // The gids' bytes go to the CRC in chunks (the same stream as one by one).
            let mut bytes: Vec<u8> = Vec::with_capacity(1 << 16);
            for MetypeGids { metype: m, gids } in &p.metype_gids {
                h.update(&(*m as u64).to_le_bytes());
                h.update(&(gids.len() as u64).to_le_bytes());
                // A metype's cells weigh the same without per-cell synapses: the same sum,
                // term by term, without a lookup per cell.
                let kb = dry_run.metypes[*m].cell_kb();
                for chunk in gids.chunks(1 << 14) {
                    bytes.clear();
                    for &g in chunk {
                        bytes.extend_from_slice(&g.to_le_bytes());
                    }
                    match &p.cell_synapses {
                        None => chunk.iter().for_each(|_| total_kb += kb),
                        Some(_) => chunk.iter().for_each(|&g| total_kb += dry_run.cell_kb(p, g, *m)),
                    }
                    h.update(&bytes);
                }
            }
            if let Some(syn) = &p.cell_synapses {
                h.update(b"synapses");
                for s in syn {
                    h.update(&s.to_le_bytes());
                }
            }
        }
        CostInputs {
            hasher: h,
            total_kb,
            cells: dry_run.cell_count(),
        }
    }
}

impl AllocationCosts {
    /// The costs of balancing `dry_run` on `ranks` × `cycles` with `strategy` and
    /// `transport_model`.
    pub fn new(
        written_by: &str,
        dry_run: &DryRun,
        ranks: u32,
        cycles: u32,
        strategy: &str,
        transport_model: &str,
    ) -> Self {
        Self::from_inputs(
            &CostInputs::new(dry_run),
            written_by,
            ranks,
            cycles,
            strategy,
            transport_model,
        )
    }

    /// [`AllocationCosts::new`] from the dry run's [`CostInputs`].
    pub fn from_inputs(
        inputs: &CostInputs,
        written_by: &str,
        ranks: u32,
        cycles: u32,
        strategy: &str,
        transport_model: &str,
    ) -> Self {
        let mut h = inputs.hasher.clone();
        h.update(strategy.as_bytes());
        h.update(&[0]);
        h.update(transport_model.as_bytes());
        let total_kb = inputs.total_kb;
        AllocationCosts {
            written_by: written_by.to_owned(),
            ranks,
            cycles,
            strategy: strategy.to_owned(),
            transport_model: transport_model.to_owned(),
            cells: inputs.cells,
            // To 0.001 KB: the sum's last-bit noise (403297.9999999999) is not a cost. The
            // digest, which tells costs apart, hashes the exact inputs, not this total.
            total_kb: Some((total_kb * 1000.0).round() / 1000.0)
                .filter(|t| t.is_finite())
                .unwrap_or(total_kb),
            synapse_kb: crate::dry_run::SYNAPSE_KB,
            cell_kb_default: None,
            point_cell_kb_default: None,
            cost_digest: format!("{:08x}", h.finalize()),
        }
    }

    /// True when both were balanced from the same cost inputs.
    pub fn same_costs(&self, other: &AllocationCosts) -> bool {
        self.cost_digest == other.cost_digest
    }

    /// What differs from `other`, field by field (`strategy lpt vs neurodamus`); the digest
    /// when nothing else does.
    pub fn differences(&self, other: &AllocationCosts) -> Vec<String> {
        let mut d = Vec::new();
        let opt = |x: Option<f64>| x.map_or("none".into(), |v| format!("{v}"));
        if self.strategy != other.strategy {
            d.push(format!("strategy {} vs {}", self.strategy, other.strategy));
        }
        if self.transport_model != other.transport_model {
            d.push(format!(
                "transport model {} vs {}",
                self.transport_model, other.transport_model
            ));
        }
        if self.cells != other.cells {
            d.push(format!("{} vs {} cells", self.cells, other.cells));
        }
        if self.total_kb != other.total_kb {
            d.push(format!("total {:.1} vs {:.1} KB", self.total_kb, other.total_kb));
        }
        if self.cell_kb_default != other.cell_kb_default && other.cell_kb_default.is_some() {
            d.push(format!(
                "cell KB default {} vs {}",
                opt(self.cell_kb_default),
                opt(other.cell_kb_default)
            ));
        }
        if self.point_cell_kb_default != other.point_cell_kb_default && other.point_cell_kb_default.is_some()
        {
            d.push(format!(
                "point-cell KB default {} vs {}",
                opt(self.point_cell_kb_default),
                opt(other.point_cell_kb_default)
            ));
        }
        if self.synapse_kb != other.synapse_kb {
            d.push(format!(
                "{} vs {} KB per synapse",
                self.synapse_kb, other.synapse_kb
            ));
        }
        if d.is_empty() && !self.same_costs(other) {
            d.push("per-cell costs".into());
        }
        d.push(format!(
            "cost digest {} vs {}",
            self.cost_digest, other.cost_digest
        ));
        d
    }

    /// The sidecar as JSON, written atomically into `dir` (not yet committed).
    pub fn stage(&self, dir: &Path) -> Result<AtomicFile> {
        use std::io::Write;
        let path = dir.join(sidecar_file_name(self.ranks, self.cycles));
        let mut text = serde_json::to_vec_pretty(self).map_err(|error| BalancerError::Json {
            path: path.clone(),
            error,
        })?;
        text.push(b'\n');
        let mut f = AtomicFile::create(&path)?;
        f.write_all(&text).map_err(|e| BalancerError::io(&path, e))?;
        Ok(f)
    }

    /// Reads a sidecar; `Ok(None)` when there is none. Bounded: a sidecar is a few hundred
    /// bytes, anything over 1 MiB is refused.
    pub fn read(path: &Path) -> Result<Option<AllocationCosts>> {
        use crate::read_file::{read_regular, ReadError};
        // Opened without blocking and checked to be a regular file (a FIFO would hang, a
        // symlink to a device be read without end); at most 1 MiB read.
        let text = match read_regular(path, 1 << 20) {
            Ok(t) => t,
            Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(ReadError::TooLarge(n)) => {
                return Err(BalancerError::Pickle {
                    path: path.to_owned(),
                    message: format!("{n} bytes: not an allocation sidecar (at most 1 MiB)"),
                })
            }
            Err(e) => return Err(e.at(path)),
        };
        if text.iter().all(u8::is_ascii_whitespace) {
            return Err(BalancerError::Pickle {
                path: path.to_owned(),
                message: "empty file: not an allocation sidecar".into(),
            });
        }
        serde_json::from_slice(&text)
            .map(Some)
            .map_err(|error| BalancerError::Json {
                path: path.to_owned(),
                error,
            })
    }
}

/// Where [`load_or_generate`] got its allocation from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocationSource {
    /// Read from this existing file.
    File(PathBuf),
    /// The file for this rank count was absent: balanced anew and written here.
    Regenerated(PathBuf),
}

/// An allocation and where it came from.
#[derive(Debug, Clone)]
pub struct LoadedAllocation {
    pub allocation: Allocation,
    pub source: AllocationSource,
    /// For the user: the reused file was balanced with other costs (its sidecar says so).
    pub warnings: Vec<String>,
}

/// neurodamus' `--lb-mode=Memory` rule: use `dir/allocation_r{ranks}_c{cycles}.pkl.gz` when
/// present (it must hold every gid of `dry_run` exactly once, or this errors), otherwise
/// balance `dry_run` with `strategy` and write that file and its sidecar
/// ([`AllocationCosts`]). The caller says "regenerated" to the user when
/// [`AllocationSource::Regenerated`] comes back, and prints the warnings: a reused file
/// whose sidecar records other costs than `dry_run`'s with `strategy` and no transport
/// charge, or whose sidecar cannot be read (it is not a regular file, too large, not
/// JSON). A reused file whose sidecar records other ranks or cycles than its name (a file
/// renamed from another rank count) is an error.
pub fn load_or_generate(
    dir: &Path,
    ranks: u32,
    cycles: u32,
    dry_run: &DryRun,
    strategy: crate::strategy::Strategy,
) -> Result<LoadedAllocation> {
    let config = BalancerConfig::builder()
        .ranks(ranks)
        .cycles(cycles)
        .strategy(strategy)
        .build()?;
    config.check_size(dry_run)?;
    let path = dir.join(allocation_file_name(ranks, cycles));
    if path.exists() {
        let allocation = read_allocation(&path)?;
        allocation.validate(dry_run).map_err(|e| match e {
            BalancerError::Mismatch {
                population, gid, what, ..
            } => BalancerError::Mismatch {
                file: Some(path.clone()),
                population,
                gid,
                what: format!(
                    "{what}; the file was written for another circuit or dry run (its name keys only the rank and cycle counts): \
                     move it away to have it regenerated"
                ),
            },
            e => e,
        })?;
        let ours = AllocationCosts::new(
            "ballast run",
            dry_run,
            ranks,
            cycles,
            &strategy.to_string(),
            "none",
        );
        let sidecar = dir.join(sidecar_file_name(ranks, cycles));
        let mut warnings = Vec::new();
        match AllocationCosts::read(&sidecar) {
            // Renamed from another rank or cycle count: the buckets of the ranks it was not
            // balanced for stay empty (or ranks are missing).
            Ok(Some(theirs)) if (theirs.ranks, theirs.cycles) != (ranks, cycles) => {
                return Err(BalancerError::Pickle {
                    path: path.clone(),
                    message: format!(
                        "its sidecar {} says it was balanced for {} × {}, but its name and this run are {} × {}: it was renamed or copied from another allocation; move it away to have it regenerated",
                        sidecar.display(),
                        crate::limits::count(theirs.ranks.into(), "rank"),
                        crate::limits::count(theirs.cycles.into(), "cycle"),
                        crate::limits::count(ranks.into(), "rank"),
                        crate::limits::count(cycles.into(), "cycle"),
                    ),
                });
            }
            Ok(Some(theirs)) if !theirs.same_costs(&ours) => warnings.push(format!(
                "{} was balanced with other costs than this run's ({}: {}; theirs vs this run's): its per-rank memory may be unbalanced for this run; move it away to have it regenerated",
                path.display(),
                sidecar.display(),
                theirs.differences(&ours).join(", ")
            )),
            // No sidecar (neurodamus' own file, or one copied without it): a file renamed
            // from fewer ranks shows as ranks without any cell although cells are enough.
            Ok(None) => {
                let mut used = std::collections::BTreeSet::new();
                for p in &allocation.populations {
                    used.extend(p.buckets.iter().filter(|(_, g)| !g.is_empty()).map(|(b, _)| b.rank));
                }
                let empty = (ranks as usize).saturating_sub(used.len());
                if empty > 0 && dry_run.cell_count() >= ranks as usize {
                    warnings.push(format!(
                        "{}: {empty} of its {ranks} ranks get no cell although there are {} cells, and it has no sidecar ({}) to say what it was balanced for: was it written for fewer ranks and renamed? Move it away to have it regenerated",
                        path.display(),
                        dry_run.cell_count(),
                        sidecar.display()
                    ));
                }
            }
            Ok(Some(_)) => {}
            Err(e) => warnings.push(format!("{e} (cannot tell which costs the allocation was balanced with)")),
        }
        return Ok(LoadedAllocation {
            allocation,
            source: AllocationSource::File(path),
            warnings,
        });
    }
    let allocation = balance(dry_run, &config);
    let costs = AllocationCosts::new(
        "ballast run",
        dry_run,
        ranks,
        cycles,
        &strategy.to_string(),
        "none",
    );
    let files = vec![stage_allocation(dir, &allocation)?, costs.stage(dir)?];
    let path = crate::atomic::commit_all(files)?.swap_remove(0);
    Ok(LoadedAllocation {
        allocation,
        source: AllocationSource::Regenerated(path),
        warnings: Vec::new(),
    })
}
