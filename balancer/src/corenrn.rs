//! CoreNEURON input rebalancing (`ballast rebalance-corenrn`): reading CoreNEURON's
//! `files.dat`, sizing each cell group from its data files, assigning the groups to machines
//! and their ranks (Ballast's two-level LPT, or neurodamus'
//! `tools/rebalance-corenrn-data.py` reproduced), and writing the `files.dat` that makes
//! CoreNEURON load exactly that assignment.
//!
//! **How CoreNEURON reads `files.dat`** (`nrn_read_filesdat` in `coreneuron/io/nrn_setup.cpp`,
//! NEURON 9.0): a version; a count, or `-1` (the model has gap junctions) and then the
//! count; then `count` integers, each read with `fscanf("%d")` (any whitespace between them,
//! one per line as written here; a missing one is a failed assertion, those after the count
//! are ignored; see [`crate::files_dat`]).
//! Line `i` (from 0) goes to rank `i % nranks`; a rank that meets `-1` in its own stride
//! stops reading (NEURON ≥ 9.0, neuronsimulator/nrn#3147). So rank `r` of `R` loads the
//! groups on lines `r, r + R, r + 2R, …` up to its first `-1`.
//!
//! **The layout written** ([`Layout::render`]): `rounds` rounds of `R = machines ×
//! ranks_per_machine` lines each, `rounds` the largest group count of any rank; line
//! `k·R + m·ranks_per_machine + j` holds the `k`-th group of rank `j` of machine `m`, or `-1`
//! when that rank has fewer. The count line is `rounds × R`, every line written, padding
//! included: each rank then finds its groups and its `-1` inside the count, and every line
//! is read. The gap-junction header (`-1`, then the count) is kept when the input has one.
//! The file is only right for exactly `R` ranks: with another rank count, ranks would read
//! other ranks' lines and stop at their `-1`, and groups would be lost.
//!
//! **Weight of a group** ([`EntryFiles::weight`]): the bytes of all its files,
//! `{id}_1.dat + {id}_2.dat + {id}_3.dat + {id}_gap.dat` (the last two where present), each
//! byte counting once: CoreNEURON reads each file into structures of about its size
//! (phase 2, the mechanisms and their data, dominates; phase 1 holds the gids and netcon
//! sources, phase 3 the section mapping for reports, `_gap` the gap-junction transfer
//! lists). neurodamus' script weighs `{id}_2.dat` alone ([`EntryFiles::dat2`]).
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::path::{Path, PathBuf};

/// The skip mark: in a rank's stride, "no further group for this rank".
pub const SKIP_MARK: &str = "-1";

/// neurodamus' default ranks per machine (`DEFAULT_RANKS_PER_MACHINE` of its script).
pub const DEFAULT_RANKS_PER_MACHINE: u32 = 40;

/// Largest count line CoreNEURON can read (it reads the count as a C `int`).
pub const MAX_LINES: u64 = i32::MAX as u64;

/// Why a `files.dat` could not be read, sized, rebalanced or laid out. Messages name the
/// file, line or option at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CorenrnError {
    /// Reading a file (or its metadata) failed.
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    /// The file is not a `files.dat`: a line is missing or not what CoreNEURON reads.
    #[error("{path}: line {line}: {message}")]
    Format {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// The count line disagrees with the entry lines.
    #[error("{path}: the count line says {count} entries but {lines} entry lines follow; give --max-entries 0 to use every line, or --max-entries N to use the first N")]
    CountMismatch { path: PathBuf, count: u64, lines: u64 },
    /// `--max-entries` asks for more entries than the file has.
    #[error("{path}: --max-entries {asked} but the file has only {lines} entry lines")]
    TooFewLines { path: PathBuf, asked: u64, lines: u64 },
    /// A cell group appears twice (CoreNEURON would load it twice).
    #[error("{path}: line {line}: cell group {id} already appears on line {first}")]
    Duplicate {
        path: PathBuf,
        line: usize,
        first: usize,
        id: i32,
    },
    /// A data file a group needs is missing.
    #[error("{path}: missing data file of cell group {id} (listed in {files_dat}){hint}")]
    MissingData {
        path: PathBuf,
        id: i32,
        files_dat: PathBuf,
        hint: String,
    },
    /// Fewer groups than the ranks (or, for neurodamus' strategy, the machines) to fill.
    #[error("{entries} cell groups for {targets}: every {unit} needs at least one; give fewer machines or ranks per machine")]
    TooFewEntries {
        entries: usize,
        targets: String,
        unit: &'static str,
    },
    /// Machines × ranks per machine, or the lines to write, beyond what CoreNEURON or this
    /// machine can take.
    #[error("{0}")]
    TooLarge(String),
}

type Result<T> = std::result::Result<T, CorenrnError>;

use crate::files_dat::FilesDat;

/// One cell group and the sizes of its data files, bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryFiles {
    /// The id as written in `files.dat` (written back unchanged).
    pub id: String,
    /// `{id}_1.dat`.
    pub dat1: u64,
    /// `{id}_2.dat` (neurodamus' weight).
    pub dat2: u64,
    /// `{id}_3.dat`, where written (neurodamus writes it when reports need the mapping).
    pub dat3: Option<u64>,
    /// `{id}_gap.dat`, for groups with gap junctions.
    pub gap: Option<u64>,
}

impl EntryFiles {
    /// Ballast's weight: the bytes of all the group's files.
    pub fn weight(&self) -> u64 {
        self.dat1 + self.dat2 + self.dat3.unwrap_or(0) + self.gap.unwrap_or(0)
    }
}

/// Sizes the data files of `entries` (ids as in `files.dat`) in `dir`. `{id}_1.dat` and
/// `{id}_2.dat` are required (CoreNEURON always reads them); `{id}_3.dat` is all or none
/// (one group without it while others have it is an error naming it); `{id}_gap.dat` is
/// optional. `files_dat` names the listing file in messages.
pub fn size_entries(dir: &Path, entries: &[String], files_dat: &Path) -> Result<Vec<EntryFiles>> {
    let size = |id: &str, suffix: &str, required: bool, hint: &str| -> Result<Option<u64>> {
        let path = dir.join(format!("{id}_{suffix}.dat"));
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => Ok(Some(m.len())),
            Ok(_) => Err(CorenrnError::Io {
                path,
                error: std::io::Error::other("not a regular file"),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if required {
                    Err(CorenrnError::MissingData {
                        path,
                        id: id.parse().unwrap_or(-1),
                        files_dat: files_dat.to_owned(),
                        hint: hint.to_owned(),
                    })
                } else {
                    Ok(None)
                }
            }
            Err(error) => Err(CorenrnError::Io { path, error }),
        }
    };
    let dat_hint = " (the data files are looked for beside files.dat; --dat-path names another directory)";
    let mut out = Vec::with_capacity(entries.len());
    let mut with_dat3: Option<(bool, String)> = None;
    for id in entries {
        let dat1 = size(id, "1", true, dat_hint)?.unwrap_or(0);
        let dat2 = size(id, "2", true, dat_hint)?.unwrap_or(0);
        let required3 = with_dat3.as_ref().is_some_and(|(has, _)| *has);
        let hint3 = with_dat3
            .as_ref()
            .map(|(_, first)| format!(" (cell group {first} has its _3.dat: the directory is incomplete)"))
            .unwrap_or_default();
        let dat3 = size(id, "3", required3, &hint3)?;
        match &with_dat3 {
            None => with_dat3 = Some((dat3.is_some(), id.clone())),
            Some((false, first)) if dat3.is_some() => {
                return Err(CorenrnError::MissingData {
                    path: dir.join(format!("{first}_3.dat")),
                    id: first.parse().unwrap_or(-1),
                    files_dat: files_dat.to_owned(),
                    hint: format!(" (cell group {id} has its _3.dat: the directory is incomplete)"),
                })
            }
            _ => {}
        }
        let gap = size(id, "gap", false, "")?;
        out.push(EntryFiles {
            id: id.clone(),
            dat1,
            dat2,
            dat3,
            gap,
        });
    }
    Ok(out)
}

/// The strategy assigning groups to machines and ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebalanceStrategy {
    /// Ballast's: LPT of the groups (by [`EntryFiles::weight`]) over machines, then each
    /// machine's groups LPT over its ranks. Needs at least one group per rank.
    Ballast,
    /// neurodamus' script: LPT over machines by `_2.dat` size (ties to the lowest machine),
    /// then each machine's groups dealt in that order to its ranks. Needs at least one
    /// group per machine.
    Neurodamus,
}

/// Which groups every rank loads: `ranks[m * ranks_per_machine + j]` lists, in load order,
/// the indices (into the sized entries) of rank `j` of machine `m`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub machines: u32,
    pub ranks_per_machine: u32,
    pub ranks: Vec<Vec<usize>>,
}

/// LPT of `weights` (in the order given by `order`) over `bins` bins: each goes to the bin
/// of least load, then fewest items, then lowest index (so groups of 0 bytes spread too).
fn lpt(order: &[usize], weight: impl Fn(usize) -> u64, bins: usize) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); bins];
    let mut heap: BinaryHeap<Reverse<(u64, usize, usize)>> = (0..bins).map(|b| Reverse((0, 0, b))).collect();
    for &i in order {
        let Reverse((load, n, b)) = heap.pop().expect("at least one bin");
        out[b].push(i);
        heap.push(Reverse((load + weight(i), n + 1, b)));
    }
    out
}

/// Indices of `entries` by decreasing `key`, equal keys in file order (Python's stable
/// `sorted(reverse=True)`).
fn by_decreasing(entries: &[EntryFiles], key: impl Fn(&EntryFiles) -> u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_by_key(|&i| Reverse(key(&entries[i])));
    order
}

/// Bytes [`rebalance`] and [`Layout::render`] need per rank at least (the rank's list, its
/// heap entry, one `-1` line).
pub const BYTES_PER_RANK: u64 = 64;

/// Assigns `entries` to `machines × ranks_per_machine` ranks with `strategy`. Errors:
/// fewer groups than ranks (Ballast) or machines (neurodamus), a rank count above what
/// CoreNEURON reads or whose lists would not fit in `available` bytes (`None`: not
/// checked), 0 machines or ranks. Checked before anything is allocated.
pub fn rebalance(
    entries: &[EntryFiles],
    machines: u32,
    ranks_per_machine: u32,
    strategy: RebalanceStrategy,
    available: Option<u64>,
) -> Result<Layout> {
    if machines == 0 || ranks_per_machine == 0 {
        return Err(CorenrnError::TooLarge(
            "0 machines or 0 ranks per machine: give at least 1 of each".into(),
        ));
    }
    let ranks = machines as u64 * ranks_per_machine as u64;
    if ranks > MAX_LINES {
        return Err(CorenrnError::TooLarge(format!(
            "{machines} machines × {ranks_per_machine} ranks = {ranks} ranks: more than CoreNEURON's {MAX_LINES}"
        )));
    }
    let (targets, unit, need) = match strategy {
        RebalanceStrategy::Ballast => (
            format!("{machines} machines × {ranks_per_machine} ranks = {ranks} ranks"),
            "rank",
            ranks,
        ),
        RebalanceStrategy::Neurodamus => (format!("{machines} machines"), "machine", machines as u64),
    };
    if (entries.len() as u64) < need {
        return Err(CorenrnError::TooFewEntries {
            entries: entries.len(),
            targets,
            unit,
        });
    }
    if let Some(avail) = available.filter(|&a| ranks * BYTES_PER_RANK > a) {
        return Err(CorenrnError::TooLarge(format!(
            "{machines} machines × {ranks_per_machine} ranks would need about {} but only {} are available (MemAvailable, or ulimit -v): give fewer machines or ranks per machine",
            crate::limits::human_bytes(ranks * BYTES_PER_RANK),
            crate::limits::human_bytes(avail)
        )));
    }
    let rpm = ranks_per_machine as usize;
    let mut out = Vec::with_capacity(ranks as usize);
    match strategy {
        RebalanceStrategy::Ballast => {
            let order = by_decreasing(entries, EntryFiles::weight);
            for machine in lpt(&order, |i| entries[i].weight(), machines as usize) {
                // `machine` is already by decreasing weight: LPT over its ranks.
                out.extend(lpt(&machine, |i| entries[i].weight(), rpm));
            }
        }
        RebalanceStrategy::Neurodamus => {
            // The script's heap holds (size, machine): ties go to the lowest machine, with
            // no regard to the number of groups.
            let order = by_decreasing(entries, |e| e.dat2);
            let mut buckets = vec![Vec::new(); machines as usize];
            let mut heap: BinaryHeap<Reverse<(u64, usize)>> =
                (0..machines as usize).map(|b| Reverse((0, b))).collect();
            for i in order {
                let Reverse((load, b)) = heap.pop().expect("at least one machine");
                buckets[b].push(i);
                heap.push(Reverse((load + entries[i].dat2, b)));
            }
            for bucket in buckets {
                out.extend((0..rpm).map(|j| bucket.iter().skip(j).step_by(rpm).copied().collect()));
            }
        }
    }
    Ok(Layout {
        machines,
        ranks_per_machine,
        ranks: out,
    })
}

impl Layout {
    /// Rank count, `machines × ranks_per_machine`.
    pub fn rank_count(&self) -> u64 {
        self.ranks.len() as u64
    }

    /// Rounds written: the largest group count of any rank.
    pub fn rounds(&self) -> u64 {
        self.ranks.iter().map(Vec::len).max().unwrap_or(0) as u64
    }

    /// The count line: `rounds × ranks`, every entry line written.
    pub fn count_line(&self) -> u64 {
        self.rounds() * self.rank_count()
    }

    /// The `files.dat` text (see the module documentation for the layout): `version`, the
    /// gap-junction mark when `gap_junctions`, the count, then the rounds; ids as written in
    /// `entries`. Errors when the count would exceed what CoreNEURON reads or the text would
    /// not fit in `available` bytes (`None`: not checked).
    pub fn render(
        &self,
        version: &str,
        gap_junctions: bool,
        entries: &[EntryFiles],
        available: Option<u64>,
    ) -> Result<String> {
        let lines = self.count_line();
        if lines > MAX_LINES {
            return Err(CorenrnError::TooLarge(format!(
                "{} rounds × {} ranks = {lines} lines: more than CoreNEURON's count can hold ({MAX_LINES})",
                self.rounds(),
                self.rank_count()
            )));
        }
        let widest = entries
            .iter()
            .map(|e| e.id.len())
            .max()
            .unwrap_or(0)
            .max(SKIP_MARK.len()) as u64;
        let bytes = lines
            .saturating_mul(widest + 1)
            .saturating_add(64 + version.len() as u64);
        if let Some(avail) = available.filter(|&a| bytes.saturating_mul(2) > a) {
            return Err(CorenrnError::TooLarge(format!(
                "writing {lines} lines of files.dat would need about {} but only {} are available (MemAvailable, or ulimit -v)",
                crate::limits::human_bytes(bytes.saturating_mul(2)),
                crate::limits::human_bytes(avail)
            )));
        }
        let mut out = String::with_capacity(bytes as usize);
        out.push_str(version);
        out.push('\n');
        if gap_junctions {
            out.push_str("-1\n");
        }
        out.push_str(&lines.to_string());
        out.push('\n');
        for k in 0..self.rounds() as usize {
            for rank in &self.ranks {
                out.push_str(rank.get(k).map_or(SKIP_MARK, |&i| entries[i].id.as_str()));
                out.push('\n');
            }
        }
        Ok(out)
    }

    /// Per-rank totals of `weight` (bytes), rank order.
    pub fn rank_totals(&self, weight: impl Fn(usize) -> u64) -> Vec<u64> {
        self.ranks
            .iter()
            .map(|r| r.iter().map(|&i| weight(i)).sum())
            .collect()
    }

    /// Per-machine totals of `weight` (bytes).
    pub fn machine_totals(&self, weight: impl Fn(usize) -> u64) -> Vec<u64> {
        self.rank_totals(weight)
            .chunks(self.ranks_per_machine as usize)
            .map(|m| m.iter().sum())
            .collect()
    }
}

/// Which ranks CoreNEURON gives each line of `text` (a `files.dat`) when run on `nranks`
/// ranks, as `nrn_read_filesdat` does: rank `i % nranks` takes line `i` until its first
/// `-1`. Returns the ids each rank loads, as written. For checking a written file.
pub fn coreneuron_reads(text: &str, nranks: usize) -> Result<Vec<Vec<String>>> {
    let f = FilesDat::parse(text, Path::new("files.dat"))?;
    let mut out = vec![Vec::new(); nranks];
    let mut done = vec![false; nranks];
    if f.lines.len() < f.count as usize {
        return Err(CorenrnError::Format {
            path: "files.dat".into(),
            line: f.lines.len() + 2,
            message: format!(
                "count {} but {} lines: CoreNEURON's fscanf would fail",
                f.count,
                f.lines.len()
            ),
        });
    }
    for (i, e) in f.lines.iter().take(f.count as usize).enumerate() {
        let r = i % nranks;
        if done[r] {
            continue;
        }
        if e.id == -1 {
            done[r] = true;
        } else {
            out[r].push(e.text.clone());
        }
    }
    Ok(out)
}

/// One bin of a [`histogram`].
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramBin {
    /// Its left edge, in the unit of the values.
    pub start: f64,
    /// Its right edge (included in the last bin only).
    pub end: f64,
    /// How many values fall in it.
    pub count: usize,
}

/// A histogram of `values` in `bins` equal bins from the smallest to the largest value
/// (NumPy's `histogram`, as neurodamus' `show_histogram` uses: the last bin includes its
/// right edge; all values equal: one unit wide around them). Returns every bin, empty
/// ones included, in order.
pub fn histogram(values: &[u64], bins: usize) -> Vec<HistogramBin> {
    if values.is_empty() || bins == 0 {
        return Vec::new();
    }
    let lo = *values.iter().min().unwrap() as f64;
    let hi = *values.iter().max().unwrap() as f64;
    let (lo, hi) = if lo == hi { (lo - 0.5, hi + 0.5) } else { (lo, hi) };
    let width = (hi - lo) / bins as f64;
    let mut counts = vec![0usize; bins];
    for &v in values {
        let b = (((v as f64 - lo) / width) as usize).min(bins - 1);
        counts[b] += 1;
    }
    (0..bins)
        .map(|b| HistogramBin {
            start: lo + b as f64 * width,
            end: lo + (b + 1) as f64 * width,
            count: counts[b],
        })
        .collect()
}

/// Every group of `entries` appears exactly once in `layout`: the check run before writing.
pub fn check_layout(layout: &Layout, entries: usize) -> std::result::Result<(), String> {
    let mut seen = HashSet::with_capacity(entries);
    for (r, rank) in layout.ranks.iter().enumerate() {
        for &i in rank {
            if i >= entries || !seen.insert(i) {
                return Err(format!("rank {r} holds group index {i} twice or out of range"));
            }
        }
    }
    if seen.len() != entries {
        return Err(format!("{} of {entries} groups placed", seen.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: i32, dat2: u64) -> EntryFiles {
        EntryFiles {
            id: id.to_string(),
            dat1: 10,
            dat2,
            dat3: Some(5),
            gap: None,
        }
    }

    /// Every group once, every rank's list in its stride, the count line covering every line.
    fn check_render(layout: &Layout, entries: &[EntryFiles], gap: bool) {
        check_layout(layout, entries.len()).unwrap();
        let text = layout.render("1.8", gap, entries, None).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let header = if gap { 3 } else { 2 };
        assert_eq!(lines[0], "1.8");
        if gap {
            assert_eq!(lines[1], "-1");
        }
        let count: usize = lines[header - 1].parse().unwrap();
        assert_eq!(count, lines.len() - header, "the count is every line written");
        assert_eq!(count as u64 % layout.rank_count(), 0, "whole rounds");
        let read = coreneuron_reads(&text, layout.ranks.len()).unwrap();
        for (r, ids) in read.iter().enumerate() {
            let want: Vec<String> = layout.ranks[r].iter().map(|&i| entries[i].id.clone()).collect();
            assert_eq!(ids, &want, "rank {r} loads its groups");
        }
        // Padding: after a rank's first -1, only -1 in its stride.
        for r in 0..layout.ranks.len() {
            let stride: Vec<&str> = lines[header..]
                .iter()
                .skip(r)
                .step_by(layout.ranks.len())
                .copied()
                .collect();
            let first = stride.iter().position(|&l| l == "-1").unwrap_or(stride.len());
            assert!(stride[first..].iter().all(|&l| l == "-1"), "rank {r}: {stride:?}");
        }
    }

    #[test]
    fn ballast_balances_machines_and_ranks() {
        // 12 groups of sizes 100, 90, ..., 1 (weights dat1 10 + dat3 5 on top).
        let sizes = [100, 90, 80, 70, 60, 50, 40, 30, 20, 10, 5, 1];
        let entries: Vec<EntryFiles> = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| entry(i as i32, s))
            .collect();
        let l = rebalance(&entries, 2, 3, RebalanceStrategy::Ballast, None).unwrap();
        check_render(&l, &entries, false);
        check_render(&l, &entries, true);
        let w = |i: usize| entries[i].weight();
        let total: u64 = entries.iter().map(EntryFiles::weight).sum();
        let heaviest = entries.iter().map(EntryFiles::weight).max().unwrap();
        // LPT's bound: no bin above mean + heaviest item.
        for m in l.machine_totals(w) {
            assert!(m <= total / 2 + heaviest, "{m}");
        }
        for (r, t) in l.rank_totals(w).iter().enumerate() {
            let machine = l.machine_totals(w)[r / 3];
            assert!(*t <= machine / 3 + heaviest, "rank {r}: {t}");
            assert!(*t > 0, "rank {r} is empty");
        }
        // By hand: weights 115, 105, 95, …, 20, 16 (736 bytes) alternate between the machines
        // (ties to the lower index): 115+85+75+45+35+16 and 105+95+65+55+25+20.
        assert_eq!(l.machine_totals(w), vec![371, 365]);
        let ranks = l.rank_totals(w);
        assert!(
            ranks.iter().max().unwrap() - ranks.iter().min().unwrap() <= 90,
            "{ranks:?}"
        );
    }

    #[test]
    fn neurodamus_deals_in_order() {
        let entries: Vec<EntryFiles> = [5, 7, 7, 1, 3]
            .iter()
            .enumerate()
            .map(|(i, &s)| entry(i as i32, s))
            .collect();
        // By _2 size: 7 (1), 7 (2), 5 (0), 3 (4), 1 (3); machines 0 and 1.
        let l = rebalance(&entries, 2, 2, RebalanceStrategy::Neurodamus, None).unwrap();
        // machine 0: 1, 0 (7+5); machine 1: 2, 4, 3 (7+3+1); ranks deal in order.
        assert_eq!(l.ranks, vec![vec![1], vec![0], vec![2, 3], vec![4]]);
        check_render(&l, &entries, false);
        let text = l.render("1.8", false, &entries, None).unwrap();
        assert_eq!(text, "1.8\n8\n1\n0\n2\n4\n-1\n-1\n3\n-1\n");
        // Fewer groups than machines / ranks.
        let e = rebalance(&entries[..1], 2, 1, RebalanceStrategy::Neurodamus, None).unwrap_err();
        assert_eq!(e.to_string(), "1 cell groups for 2 machines: every machine needs at least one; give fewer machines or ranks per machine");
        let e = rebalance(&entries, 2, 3, RebalanceStrategy::Ballast, None).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("5 cell groups for 2 machines × 3 ranks = 6 ranks"),
            "{e}"
        );
        assert!(rebalance(&entries, 0, 3, RebalanceStrategy::Ballast, None).is_err());
        // 2 machines of 2^29 ranks: refused for the memory before anything is allocated.
        let e = rebalance(&entries, 2, 1 << 29, RebalanceStrategy::Neurodamus, Some(1 << 30)).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "2 machines × 536870912 ranks would need about 64.0 GiB but only 1.0 GiB are available"
            ),
            "{e}"
        );
        // More ranks than CoreNEURON's int count.
        let e = rebalance(&entries, 4, 1 << 30, RebalanceStrategy::Neurodamus, None).unwrap_err();
        assert!(e.to_string().contains("more than CoreNEURON's 2147483647"), "{e}");
    }

    #[test]
    fn zero_byte_groups_spread() {
        let entries: Vec<EntryFiles> = (0..4)
            .map(|i| EntryFiles {
                id: i.to_string(),
                dat1: 0,
                dat2: 0,
                dat3: None,
                gap: None,
            })
            .collect();
        let l = rebalance(&entries, 1, 4, RebalanceStrategy::Ballast, None).unwrap();
        assert!(l.ranks.iter().all(|r| r.len() == 1), "{:?}", l.ranks);
    }

    #[test]
    fn histogram_as_numpy() {
        let bin = |start, end, count| HistogramBin { start, end, count };
        let h = histogram(&[0, 10, 10, 5], 2);
        assert_eq!(h, [bin(0.0, 5.0, 1), bin(5.0, 10.0, 3)]);
        let h = histogram(&[3, 3], 1);
        assert_eq!(h, [bin(2.5, 3.5, 2)]);
        assert!(histogram(&[], 3).is_empty());
    }

    #[test]
    fn sizes_data_files_and_names_missing_ones() {
        let dir = tempfile::tempdir().unwrap();
        let put = |name: &str, n: usize| std::fs::write(dir.path().join(name), vec![0u8; n]).unwrap();
        put("1_1.dat", 3);
        put("1_2.dat", 7);
        put("1_3.dat", 2);
        put("1_gap.dat", 4);
        put("2_1.dat", 1);
        put("2_2.dat", 1);
        let fd = Path::new("files.dat");
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let e = size_entries(dir.path(), &ids(&["1"]), fd).unwrap();
        assert_eq!(e[0].weight(), 16);
        assert_eq!(e[0].dat2, 7);
        // 2 has no _3.dat while 1 has one.
        let err = size_entries(dir.path(), &ids(&["1", "2"]), fd)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("2_3.dat: missing data file of cell group 2")
                && err.contains("cell group 1 has its _3.dat"),
            "{err}"
        );
        // The other way round: the first group's is named.
        let err = size_entries(dir.path(), &ids(&["2", "1"]), fd)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("2_3.dat: missing data file of cell group 2"),
            "{err}"
        );
        let err = size_entries(dir.path(), &ids(&["9"]), fd)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("9_1.dat: missing data file of cell group 9 (listed in files.dat)"),
            "{err}"
        );
    }
}
