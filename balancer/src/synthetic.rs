//! Built-in generator of realistic dry-run data (the default input of `ballast dry-run
//! --synthetic`), seeded and deterministic.
//!
//! Shape, after cortical circuits such as the rat somatosensory cortex model (Markram et
//! al., Cell 163(2), 2015: ~55 m-types × 11 e-types, pyramidal cells the large majority and
//! the heaviest): metype memory is log-normal around 2.5 MB per cell, synapses per cell
//! log-normal around 1,500; one metype in twenty is "pyramidal-like", 2.5× the memory and
//! 3× the synapses (a layer-5 thick-tufted cell carries ~7,000 synapses). Cell counts per
//! metype follow a Zipf law (exponent 0.8), the heavy metypes among the most populous.
//! Populations take metypes round-robin and cells in proportion 1 : 1/2 : 1/3 ...; gids are
//! 0-based per population and shuffled across metypes.
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, LogNormal};

use crate::dry_run::{DryRun, GidMetype, Metype, MetypeGids, Population};
use crate::error::{BalancerError, Result};

/// Parameters of the synthetic dry run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntheticSpec {
    /// Total cells over all populations (≥ 1).
    pub cells: usize,
    /// Number of metypes (≥ 1).
    pub metypes: usize,
    /// Number of populations (1 ≤ populations ≤ metypes).
    pub populations: usize,
    pub seed: u64,
}

impl Default for SyntheticSpec {
    fn default() -> Self {
        SyntheticSpec {
            cells: 100_000,
            metypes: 200,
            populations: 2,
            seed: 1,
        }
    }
}

const LAYERS: [&str; 5] = ["L1", "L23", "L4", "L5", "L6"];
const MTYPES: [&str; 8] = ["TPC", "UPC", "SS", "BP", "MC", "LBC", "NBC", "ChC"];
const ETYPES: [&str; 5] = ["cADpyr", "cNAC", "bAC", "cACint", "dSTUT"];

/// Generates a dry run following [`SyntheticSpec`]. Errors on zero cells, metypes or
/// populations, or more populations than metypes.
pub fn generate(spec: &SyntheticSpec) -> Result<DryRun> {
    let bad = |m: String| Err(BalancerError::InvalidParameter(m));
    if spec.cells == 0 || spec.metypes == 0 || spec.populations == 0 {
        return bad(format!(
            "synthetic input needs at least 1 cell, 1 metype and 1 population, got {} cells, {} metypes, {} populations",
            spec.cells, spec.metypes, spec.populations
        ));
    }
    if spec.populations > spec.metypes {
        return bad(format!(
            "{} populations need at least as many metypes, got {}",
            spec.populations, spec.metypes
        ));
    }
    if spec.cells > u32::MAX as usize {
        return bad(format!("at most 2^32 - 1 cells, got {}", spec.cells));
    }
    // About 16 B per cell (gids, shuffles) and 128 B per metype (name, counts), before any
    // is allocated.
    let bytes = (spec.cells as u64)
        .saturating_mul(16)
        .saturating_add((spec.metypes as u64).saturating_mul(128));
    crate::limits::check_memory(
        &format!(
            "a synthetic input of {} cells and {} metypes",
            spec.cells, spec.metypes
        ),
        bytes,
        crate::limits::available_memory(),
    )?;
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    let memory = LogNormal::new(2500f64.ln(), 0.35).expect("valid log-normal");
    let synapses = LogNormal::new(1500f64.ln(), 0.6).expect("valid log-normal");

    let metypes: Vec<Metype> = (0..spec.metypes)
        .map(|i| {
            let heavy = i % 20 == 0;
            let scale = if heavy { (2.5, 3.0) } else { (1.0, 1.0) };
            let name = format!(
                "{}_{}{}-{}",
                LAYERS[i % LAYERS.len()],
                if heavy {
                    "TPC"
                } else {
                    MTYPES[(i / LAYERS.len()) % MTYPES.len()]
                },
                i,
                if heavy {
                    "cADpyr"
                } else {
                    ETYPES[(i / 7) % ETYPES.len()]
                }
            );
            Metype {
                name,
                // Whole KB and whole synapses, as a measured dry run would report.
                memory_kb: (memory.sample(&mut rng) * scale.0).round(),
                synapses_per_cell: (synapses.sample(&mut rng) * scale.1).round(),
            }
        })
        .collect();

    // Zipf weights; heavy metypes (i % 20 == 0) get the top ranks.
    let mut keyed: Vec<(bool, u32, usize)> = (0..spec.metypes)
        .map(|i| (i % 20 != 0, rng.random::<u32>(), i))
        .collect();
    keyed.sort_unstable();
    let ranks: Vec<usize> = keyed.into_iter().map(|(_, _, i)| i).collect();
    let mut weight = vec![0.0; spec.metypes];
    for (r, &i) in ranks.iter().enumerate() {
        weight[i] = 1.0 / ((r + 1) as f64).powf(0.8);
    }

    let pop_share: Vec<f64> = (0..spec.populations).map(|p| 1.0 / (p + 1) as f64).collect();
    let pop_cells = apportion(spec.cells, &pop_share);
    let populations = (0..spec.populations)
        .map(|p| {
            let members: Vec<usize> = (p..spec.metypes).step_by(spec.populations).collect();
            let w: Vec<f64> = members.iter().map(|&m| weight[m]).collect();
            let counts = apportion(pop_cells[p], &w);
            let mut gids: Vec<u32> = (0..pop_cells[p] as u32).collect();
            gids.shuffle(&mut rng);
            let mut rest = &gids[..];
            let metype_gids = members
                .iter()
                .zip(counts)
                .filter(|&(_, n)| n > 0)
                .map(|(&m, n)| {
                    let (mine, tail) = rest.split_at(n);
                    rest = tail;
                    let mut mine = mine.to_vec();
                    mine.sort_unstable();
                    MetypeGids {
                        metype: m,
                        gids: mine,
                    }
                })
                .collect();
            let name = if p == 0 {
                "synthetic_neurons".to_owned()
            } else {
                format!("synthetic_neurons_{p}")
            };
            Population {
                name,
                metype_gids,
                cell_synapses: None,
            }
        })
        .collect();
    Ok(DryRun { metypes, populations })
}

/// Splits `total` into integers proportional to `weights` (largest remainders), summing
/// exactly to `total`.
fn apportion(total: usize, weights: &[f64]) -> Vec<usize> {
    let sum: f64 = weights.iter().sum();
    let exact: Vec<f64> = weights.iter().map(|w| total as f64 * w / sum).collect();
    let mut counts: Vec<usize> = exact.iter().map(|x| x.floor() as usize).collect();
    let mut left = total - counts.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| {
        (exact[b] - exact[b].floor())
            .total_cmp(&(exact[a] - exact[a].floor()))
            .then(a.cmp(&b))
    });
    for &i in order.iter().cycle() {
        if left == 0 {
            break;
        }
        counts[i] += 1;
        left -= 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_and_determinism() {
        let spec = SyntheticSpec {
            cells: 10_000,
            metypes: 100,
            populations: 2,
            seed: 7,
        };
        let d = generate(&spec).unwrap();
        assert_eq!(d, generate(&spec).unwrap(), "same seed, same data");
        assert_ne!(
            d,
            generate(&SyntheticSpec {
                seed: 8,
                ..spec.clone()
            })
            .unwrap()
        );
        assert_eq!(d.cell_count(), 10_000);
        assert_eq!(d.metypes.len(), 100);
        // Populations 2 : 1, gids 0-based and contiguous, each exactly once.
        let sizes: Vec<usize> = d.populations.iter().map(|p| p.cell_count()).collect();
        assert_eq!(sizes, vec![6667, 3333]);
        for p in &d.populations {
            let mut gids: Vec<u32> = p.cells().map(|c| c.gid).collect();
            gids.sort_unstable();
            assert_eq!(gids, (0..p.cell_count() as u32).collect::<Vec<_>>());
        }
        // A few heavy metypes well above the median cost.
        let kb = d.metype_cell_kb();
        let mut sorted = kb.clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted[50];
        assert!(
            sorted[99] > 3.0 * median,
            "heaviest {} vs median {median}",
            sorted[99]
        );
        // The dry run survives its own JSON form.
        let back = DryRun::from_json_slice(
            &serde_json::to_vec(&d.to_json_value()).unwrap(),
            std::path::Path::new("x"),
        )
        .unwrap()
        .dry_run;
        assert_eq!(back.cell_count(), d.cell_count());
    }

    #[test]
    fn apportion_is_exact() {
        assert_eq!(apportion(10, &[1.0, 1.0, 1.0]), vec![4, 3, 3]);
        assert_eq!(apportion(7, &[0.5, 0.25, 0.25]).iter().sum::<usize>(), 7);
        assert!(generate(&SyntheticSpec {
            cells: 0,
            ..Default::default()
        })
        .is_err());
        assert!(generate(&SyntheticSpec {
            populations: 5,
            metypes: 3,
            ..Default::default()
        })
        .is_err());
    }
}

/// Parameters of a synthetic circuit: a dry run as [`SyntheticSpec`] plus cell positions
/// on a sheet and distance-dependent connectivity.
#[derive(Debug, Clone, PartialEq)]
pub struct CircuitSpec {
    pub dry_run: SyntheticSpec,
    /// Total synapses to generate (the metypes' synapse counts are scaled to it).
    pub synapses: u64,
    /// Mean synapses per connection (a connection is one source → target cell pair).
    pub synapses_per_connection: u32,
    /// Cells per mm² of the (square, wrap-around) sheet.
    pub density_per_mm2: f64,
    /// Standard deviation of the source–target offset, µm (Gaussian in x and y).
    pub sigma_um: f64,
}

impl Default for CircuitSpec {
    fn default() -> Self {
        CircuitSpec {
            dry_run: SyntheticSpec::default(),
            synapses: 10_000_000,
            synapses_per_connection: 5,
            density_per_mm2: 10_000.0,
            sigma_um: 100.0,
        }
    }
}

/// A synthetic circuit: its dry run (with per-cell synapse counts) and its connectivity.
#[derive(Debug, Clone)]
pub struct SyntheticCircuit {
    pub dry_run: DryRun,
    pub network: crate::network::Network,
    /// Position of every cell on the sheet, µm (global index as in the network).
    pub positions: Vec<[f32; 2]>,
}

/// Generates a circuit following [`CircuitSpec`]: cells uniformly on a wrap-around square
/// sheet; each cell gets about `synapses × (its metype's share) / synapses_per_connection`
/// afferent connections, each from the cell nearest a Gaussian offset of its position (a
/// grid of `sigma`-sized voxels makes that O(1)), with 1 to `2 × synapses_per_connection
/// − 1` synapses each. Deterministic for a seed.
pub fn generate_circuit(spec: &CircuitSpec) -> Result<SyntheticCircuit> {
    // NaN is refused too.
    let positive = |x: f64| x.partial_cmp(&0.0) == Some(std::cmp::Ordering::Greater);
    if spec.synapses_per_connection == 0 || !positive(spec.sigma_um) || !positive(spec.density_per_mm2) {
        return Err(BalancerError::InvalidParameter(format!(
            "bad circuit parameters {spec:?}"
        )));
    }
    // Per connection: its (source, target) pair and the network built from it, about 32 B;
    // per cell: position, grid, metype, synapse count and offsets, about 48 B.
    let connections = spec.synapses / spec.synapses_per_connection as u64;
    let bytes = connections
        .saturating_mul(32)
        .saturating_add((spec.dry_run.cells as u64).saturating_mul(48));
    crate::limits::check_memory(
        &format!(
            "a synthetic circuit of {} cells and {} synapses",
            spec.dry_run.cells, spec.synapses
        ),
        bytes,
        crate::limits::available_memory(),
    )?;
    let mut dry_run = generate(&spec.dry_run)?;
    let mut rng = ChaCha8Rng::seed_from_u64(spec.dry_run.seed ^ 0x5eed_c1c0);
    let offsets: Vec<usize> = std::iter::once(0)
        .chain(dry_run.populations.iter().scan(0, |acc, p| {
            *acc += p.cell_count();
            Some(*acc)
        }))
        .collect();
    let n = *offsets.last().unwrap();
    let side_um = (n as f64 / spec.density_per_mm2).sqrt() * 1000.0;
    let positions: Vec<[f32; 2]> = (0..n)
        .map(|_| {
            [
                (rng.random::<f64>() * side_um) as f32,
                (rng.random::<f64>() * side_um) as f32,
            ]
        })
        .collect();
    let voxels = ((side_um / spec.sigma_um).floor() as usize).max(1);
    let voxel_um = side_um / voxels as f64;
    let voxel_of = |x: f64, y: f64| {
        let vx = ((x / voxel_um) as usize).min(voxels - 1);
        let vy = ((y / voxel_um) as usize).min(voxels - 1);
        vy * voxels + vx
    };
    let mut grid_start = vec![0usize; voxels * voxels + 1];
    for p in &positions {
        grid_start[voxel_of(p[0] as f64, p[1] as f64) + 1] += 1;
    }
    for i in 0..voxels * voxels {
        grid_start[i + 1] += grid_start[i];
    }
    let mut fill = grid_start.clone();
    let mut grid = vec![0u32; n];
    for (c, p) in positions.iter().enumerate() {
        let v = voxel_of(p[0] as f64, p[1] as f64);
        grid[fill[v]] = c as u32;
        fill[v] += 1;
    }

    // Afferent synapses per cell: the metype's count, scaled so that the total matches.
    let metype_of: Vec<usize> = {
        let mut m = vec![0usize; n];
        for (p, pop) in dry_run.populations.iter().enumerate() {
            for GidMetype { gid, metype } in pop.cells() {
                m[offsets[p] + gid as usize] = metype;
            }
        }
        m
    };
    let raw: f64 = metype_of
        .iter()
        .map(|&m| dry_run.metypes[m].synapses_per_cell)
        .sum();
    let scale = if raw > 0.0 {
        spec.synapses as f64 / raw
    } else {
        0.0
    };
    let spc = spec.synapses_per_connection as f64;
    let gauss = rand_distr::Normal::new(0.0, spec.sigma_um).expect("sigma > 0");
    let mut pairs: Vec<(u32, u32)> = Vec::with_capacity((spec.synapses as f64 / spc) as usize + n);
    let mut synapses = vec![0u32; n];
    for t in 0..n {
        let want = dry_run.metypes[metype_of[t]].synapses_per_cell * scale;
        let mut k = (want / spc).floor() as usize;
        if rng.random::<f64>() < want / spc - k as f64 {
            k += 1;
        }
        let [x, y] = positions[t];
        for _ in 0..k {
            let s = loop {
                let sx = (x as f64 + gauss.sample(&mut rng)).rem_euclid(side_um);
                let sy = (y as f64 + gauss.sample(&mut rng)).rem_euclid(side_um);
                let v = voxel_of(sx, sy);
                let (a, b) = (grid_start[v], grid_start[v + 1]);
                if b > a {
                    let s = grid[rng.random_range(a..b)];
                    if s as usize != t {
                        break s;
                    }
                }
            };
            pairs.push((s, t as u32));
            synapses[t] += rng.random_range(1..2 * spec.synapses_per_connection);
        }
    }
    let mut network = crate::network::Network::from_pairs(offsets.clone(), &pairs)?;
    network.positions = Some(positions.iter().map(|&[x, y]| [x, y, 0.0]).collect());
    drop(pairs);
    // Per-cell synapse counts, and metype averages (what neurodamus' dry run records).
    let mut sum = vec![(0u64, 0u64); dry_run.metypes.len()];
    for (p, pop) in dry_run.populations.iter_mut().enumerate() {
        let span = pop.gid_span();
        let mut cell = vec![0u32; span];
        for GidMetype { gid: g, metype: m } in pop.cells().collect::<Vec<_>>() {
            let s = synapses[offsets[p] + g as usize];
            cell[g as usize] = s;
            sum[m].0 += s as u64;
            sum[m].1 += 1;
        }
        pop.cell_synapses = Some(cell);
    }
    for (m, (s, c)) in dry_run.metypes.iter_mut().zip(sum) {
        m.synapses_per_cell = if c > 0 { s as f64 / c as f64 } else { 0.0 };
    }
    Ok(SyntheticCircuit {
        dry_run,
        network,
        positions,
    })
}
