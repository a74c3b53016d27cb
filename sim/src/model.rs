//! The proxy cell model: a leaky integrate-and-fire neuron driven by its own seeded Poisson
//! input, holding a really allocated state block of its estimated memory, and the
//! synaptic delay and weight of every connection. Everything here is a pure function of
//! (seed, population, gid) and the spikes a cell receives, never of its rank.
//!
//! # Units and constants
//! Time in ms, potential in mV. The LIF constants are the textbook cortical values
//! (Gerstner & Kistler, *Spiking Neuron Models*, 2002, ch. 4; Brunel, J. Comput. Neurosci.
//! 8, 2000): `tau_m` = 20 ms, rest/reset -65 mV, threshold -50 mV, refractory 2 ms. The
//! external drive is a Poisson train of 1.5 events/ms × 0.5 mV (mean input = threshold
//! distance / `tau_m`, so cells fire irregularly at a few Hz); recurrent synapses are
//! excitatory (+0.1 mV) or, for one source cell in five (chosen by a hash of its global
//! index), inhibitory (-0.5 mV).
//!
//! # Delays
//! Synthetic circuits store no delays: a connection's delay is `d_min + distance /
//! velocity` with `d_min` = 0.5 ms and velocity 300 µm/ms (0.3 m/s, unmyelinated cortical
//! axons; Swadlow, J. Neurophysiol. 1985), distance between somata on the wrap-around sheet.
//! SONATA circuits: the edges' own `delay` (edge group `0`, as neurodamus circuits store
//! it; the smallest over a pair's edges), else a constant (2.0 ms by default, the `delay`
//! of the edge types of the Allen Institute's layer-4 sample circuit, which keeps delays in
//! its edge-types CSV). Delays are rounded to whole steps, and never
//! below the exchange window (`d_min` in steps), as NEURON requires of its min delay.
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Parameters of the leaky integrate-and-fire model and its drive (see module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LifParams {
    /// Membrane time constant, ms.
    pub tau_m_ms: f64,
    /// Resting potential, mV.
    pub v_rest_mv: f64,
    /// Reset potential after a spike, mV.
    pub v_reset_mv: f64,
    /// Spike threshold, mV.
    pub v_thresh_mv: f64,
    /// Refractory period, ms.
    pub t_ref_ms: f64,
    /// Poisson drive, events per ms.
    pub drive_rate_per_ms: f64,
    /// Jump per drive event, mV.
    pub drive_weight_mv: f64,
    /// Jump per spike of an excitatory source, mV.
    pub w_exc_mv: f64,
    /// Jump per spike of an inhibitory source, mV (negative).
    pub w_inh_mv: f64,
}

impl Default for LifParams {
    fn default() -> Self {
        LifParams {
            tau_m_ms: 20.0,
            v_rest_mv: -65.0,
            v_reset_mv: -65.0,
            v_thresh_mv: -50.0,
            t_ref_ms: 2.0,
            drive_rate_per_ms: 1.5,
            drive_weight_mv: 0.5,
            w_exc_mv: 0.1,
            w_inh_mv: -0.5,
        }
    }
}

/// splitmix64 (Steele, Lea & Flood, OOPSLA 2014): a fixed bijective hash of a u64.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Whether the cell of global index `cell` is inhibitory (one in five, by hash).
pub fn is_inhibitory(cell: u32) -> bool {
    splitmix64(cell as u64 ^ 0x1_4b1b).is_multiple_of(5)
}

/// Weight of a spike of source `cell`, mV.
pub fn weight_of(cell: u32, p: &LifParams) -> f64 {
    if is_inhibitory(cell) {
        p.w_inh_mv
    } else {
        p.w_exc_mv
    }
}

/// How connection delays are derived (see module docs).
#[derive(Debug, Clone, PartialEq)]
pub enum DelayModel {
    /// `d_min_ms + distance / velocity`, distance on a sheet wrapping around at `period_um`
    /// in x and y (no wrap when `None`).
    Distance {
        /// Smallest delay, ms (also the exchange window).
        d_min_ms: f64,
        /// Conduction velocity, µm/ms.
        velocity_um_per_ms: f64,
        /// Side of the wrap-around sheet, µm.
        period_um: Option<f64>,
        /// Soma positions, µm, by global cell index.
        positions: Vec<[f32; 3]>,
    },
    /// Every connection has this delay, ms.
    Constant(f64),
    /// Per (source, target) delays, ms (the smallest over the pair's edges), read from
    /// the circuit; pairs absent from the map have `default_ms`.
    PerPair {
        /// Delay of each (source, target) global pair, ms.
        pairs: std::collections::HashMap<CellPair, f32>,
        /// Delay of the pairs not in `pairs`, ms.
        default_ms: f64,
        /// The smallest delay of any connection, ms.
        min_ms: f64,
    },
}

/// A connection's two cells, by global cell index (the key of [`DelayModel::PerPair`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CellPair {
    /// The presynaptic cell.
    pub source: u32,
    /// The postsynaptic cell.
    pub target: u32,
}

/// d_min of synthetic circuits, ms.
pub const SYNTHETIC_D_MIN_MS: f64 = 0.5;
/// Conduction velocity of synthetic circuits, µm/ms (0.3 m/s).
pub const SYNTHETIC_VELOCITY_UM_PER_MS: f64 = 300.0;
/// Delay of SONATA circuits without per-edge delays, ms.
pub const SONATA_DEFAULT_DELAY_MS: f64 = 2.0;

impl DelayModel {
    /// The smallest delay any connection can have, ms.
    pub fn min_delay_ms(&self) -> f64 {
        match self {
            DelayModel::Distance { d_min_ms, .. } => *d_min_ms,
            DelayModel::Constant(d) => *d,
            DelayModel::PerPair { min_ms, .. } => *min_ms,
        }
    }

    /// Delay of `source → target`, ms.
    pub fn delay_ms(&self, source: u32, target: u32) -> f64 {
        match self {
            DelayModel::Constant(d) => *d,
            DelayModel::PerPair {
                pairs, default_ms, ..
            } => pairs
                .get(&CellPair { source, target })
                .map_or(*default_ms, |&d| d as f64),
            DelayModel::Distance {
                d_min_ms,
                velocity_um_per_ms,
                period_um,
                positions,
            } => {
                let (a, b) = (positions[source as usize], positions[target as usize]);
                let mut d2 = 0.0;
                for k in 0..3 {
                    let mut d = (a[k] as f64 - b[k] as f64).abs();
                    if let (Some(p), true) = (period_um, k < 2) {
                        d = d.min(p - d);
                    }
                    d2 += d * d;
                }
                d_min_ms + d2.sqrt() / velocity_um_per_ms
            }
        }
    }

    /// Delay of `source → target` in whole steps of `dt_ms`, at least `window_steps`.
    pub fn delay_steps(&self, source: u32, target: u32, dt_ms: f64, window_steps: u32) -> u32 {
        ((self.delay_ms(source, target) / dt_ms).round() as u32).max(window_steps)
    }
}

/// The per-cell random generator: ChaCha8 keyed by (seed, population, gid).
pub fn cell_rng(seed: u64, population: u32, gid: u32) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..12].copy_from_slice(&population.to_le_bytes());
    key[12..16].copy_from_slice(&gid.to_le_bytes());
    key[16..24].copy_from_slice(b"ballast!");
    ChaCha8Rng::from_seed(key)
}

/// One simulated cell.
pub struct Cell {
    /// Global index (population offset + gid).
    pub global: u32,
    /// Membrane potential, mV.
    pub v_mv: f64,
    /// First step at which the cell integrates again after a spike.
    pub active_from_step: u64,
    /// Time of the next drive event, ms.
    next_drive_ms: f64,
    rng: ChaCha8Rng,
    /// The cell's state block: `estimated KB × 1024 × memory_scale` bytes, allocated and
    /// written (so that it is resident).
    pub state: Vec<u8>,
}

impl Cell {
    /// A cell at rest with a state block of `state_bytes` bytes.
    pub fn new(global: u32, population: u32, gid: u32, seed: u64, state_bytes: usize, p: &LifParams) -> Cell {
        let mut rng = cell_rng(seed, population, gid);
        let first = exp_sample(&mut rng, p.drive_rate_per_ms);
        // Filled with a non-zero byte: every page is touched (a zeroed allocation would not be).
        let state = vec![(global as u8) | 1; state_bytes];
        Cell {
            global,
            v_mv: p.v_rest_mv,
            active_from_step: 0,
            next_drive_ms: first,
            rng,
            state,
        }
    }

    /// Advances one step `k` (from `k × dt` to `(k + 1) × dt`) with `synaptic_mv` of summed
    /// synaptic input; returns whether the cell spiked at step `k`.
    pub fn step(&mut self, k: u64, dt_ms: f64, synaptic_mv: f64, p: &LifParams) -> bool {
        let t_end = (k + 1) as f64 * dt_ms;
        let mut drive = 0.0;
        while self.next_drive_ms < t_end {
            drive += p.drive_weight_mv;
            self.next_drive_ms += exp_sample(&mut self.rng, p.drive_rate_per_ms);
        }
        if k < self.active_from_step {
            return false;
        }
        self.v_mv += dt_ms / p.tau_m_ms * (p.v_rest_mv - self.v_mv) + drive + synaptic_mv;
        if self.v_mv >= p.v_thresh_mv {
            self.v_mv = p.v_reset_mv;
            self.active_from_step = k + 1 + (p.t_ref_ms / dt_ms).round() as u64;
            return true;
        }
        false
    }
}

/// An exponential sample of rate `rate` (per ms), ms.
fn exp_sample(rng: &mut ChaCha8Rng, rate: f64) -> f64 {
    let u: f64 = rng.random();
    -(1.0 - u).ln() / rate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_fires_at_a_few_hz_and_is_deterministic() {
        let p = LifParams::default();
        let run = || {
            let mut c = Cell::new(7, 0, 7, 1, 4096, &p);
            (0..40_000u64)
                .filter(|&k| c.step(k, 0.025, 0.0, &p))
                .collect::<Vec<_>>()
        };
        let spikes = run();
        assert_eq!(spikes, run());
        // 1 s of simulated time: irregular firing between 1 and 40 Hz.
        assert!((1..40).contains(&spikes.len()), "{} spikes", spikes.len());
        let other = {
            let mut c = Cell::new(8, 0, 8, 1, 0, &p);
            (0..40_000u64)
                .filter(|&k| c.step(k, 0.025, 0.0, &p))
                .collect::<Vec<_>>()
        };
        assert_ne!(spikes, other, "another gid, another drive");
    }

    #[test]
    fn delays_wrap_and_respect_the_window() {
        let m = DelayModel::Distance {
            d_min_ms: 0.5,
            velocity_um_per_ms: 300.0,
            period_um: Some(1000.0),
            positions: vec![[0.0, 0.0, 0.0], [900.0, 0.0, 0.0], [0.0, 300.0, 0.0]],
        };
        // 900 µm apart on a 1000 µm torus = 100 µm: 0.5 + 1/3 ms.
        assert!((m.delay_ms(0, 1) - (0.5 + 100.0 / 300.0)).abs() < 1e-9);
        assert!((m.delay_ms(0, 2) - 1.5).abs() < 1e-9);
        assert_eq!(m.delay_steps(0, 2, 0.025, 20), 60);
        assert_eq!(DelayModel::Constant(0.01).delay_steps(0, 1, 0.025, 20), 20);
        assert_eq!(m.min_delay_ms(), 0.5);
    }

    #[test]
    fn one_source_in_five_is_inhibitory() {
        let n = (0..10_000u32).filter(|&c| is_inhibitory(c)).count();
        assert!((1800..2200).contains(&n), "{n}");
    }
}
