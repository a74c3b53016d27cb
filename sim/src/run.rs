//! The per-rank driver of the proxy simulation: builds this rank's cells and routing
//! tables from the circuit and the placement, then steps the cells window by window
//! (one window = the minimum delay, as NEURON's `ParallelContext` does), exchanging the
//! window's spikes at its end and queueing their deliveries at `spike step + delay`.
//!
//! Determinism across placements: each cell evolves from its own generator and its
//! inputs; the spikes of a window (local and received) are sorted by (step, source global
//! index) before delivery, and every delivery falls at or after the next window's start
//! (delays ≥ window), so the input a cell sums at each step is the same sequence of
//! floating-point additions whatever the rank count, transport, placement or exchange.
use std::sync::atomic::{AtomicU64, Ordering};

use ballast_runtime::{Communicator, Footprint, MemoryLock, ProcStatus};

use crate::exchange::{ExchangeKind, ExchangeStats, Exchanger, Spike};
use crate::model::{weight_of, Cell, DelayModel, LifParams};
use crate::SimError;
use ballast_balancer::network::Network;

/// A circuit ready to simulate: connectivity, per-cell memory estimate and delays.
pub struct SimCircuit {
    /// Connectivity (CSR of sources per target, global cell indices).
    pub network: Network,
    /// Estimated memory of each cell, KB (metype memory + 1.9 KB per synapse, as the
    /// balancer charges it).
    pub cell_kb: Vec<f64>,
    /// How delays are derived.
    pub delays: DelayModel,
    /// Targets of each source: `targets[target_start[s]..target_start[s + 1]]`.
    target_start: Vec<u64>,
    targets: Vec<u32>,
}

impl SimCircuit {
    /// Wraps `network`; errors when `cell_kb` does not have one entry per cell.
    pub fn new(network: Network, cell_kb: Vec<f64>, delays: DelayModel) -> Result<SimCircuit, SimError> {
        let n = network.cell_count();
        if cell_kb.len() != n {
            return Err(SimError::Input(format!(
                "{} cell memory estimates for {n} cells",
                cell_kb.len()
            )));
        }
        if let DelayModel::Distance { positions, .. } = &delays {
            if positions.len() != n {
                return Err(SimError::Input(format!(
                    "{} positions for {n} cells",
                    positions.len()
                )));
            }
        }
        if n >= u32::MAX as usize {
            return Err(SimError::Input(format!("{n} cells: at most 2^32 - 2")));
        }
        let mut count = vec![0u64; n + 1];
        for &s in &network.sources {
            count[s as usize + 1] += 1;
        }
        for i in 0..n {
            count[i + 1] += count[i];
        }
        let mut fill = count.clone();
        let mut targets = vec![0u32; network.sources.len()];
        for t in 0..n {
            for &s in network.sources_of(t) {
                targets[fill[s as usize] as usize] = t as u32;
                fill[s as usize] += 1;
            }
        }
        Ok(SimCircuit {
            network,
            cell_kb,
            delays,
            target_start: count,
            targets,
        })
    }

    /// Number of cells.
    pub fn cell_count(&self) -> usize {
        self.network.cell_count()
    }

    /// Targets of cell `s` (ascending).
    pub fn targets_of(&self, s: usize) -> &[u32] {
        &self.targets[self.target_start[s] as usize..self.target_start[s + 1] as usize]
    }

    /// The population and gid of global cell `c`.
    pub fn population_gid(&self, c: usize) -> PopulationGid {
        let offs = &self.network.offsets;
        let p = offs.partition_point(|&o| o <= c).saturating_sub(1);
        PopulationGid {
            population: p as u32,
            gid: (c - offs[p]) as u32,
        }
    }
}

/// A cell as its circuit names it ([`SimCircuit::population_gid`]): its population's index
/// and its gid in that population.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PopulationGid {
    /// Index of the population (placed populations, in circuit order).
    pub population: u32,
    /// The cell's gid (node id) in its population.
    pub gid: u32,
}

/// Parameters of a simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct SimParams {
    /// Simulated time, ms.
    pub tstop_ms: f64,
    /// Time step, ms (NEURON's default is 0.025).
    pub dt_ms: f64,
    /// Seed of every cell's generator.
    pub seed: u64,
    /// Fraction of each cell's estimated memory really allocated as its state block.
    pub memory_scale: f64,
    /// How spikes are exchanged.
    pub exchange: ExchangeKind,
    /// The cell model.
    pub lif: LifParams,
}

impl Default for SimParams {
    fn default() -> Self {
        SimParams {
            tstop_ms: 100.0,
            dt_ms: 0.025,
            seed: 1,
            memory_scale: 0.01,
            exchange: ExchangeKind::P2p,
            lif: LifParams::default(),
        }
    }
}

/// The time steps of a run ([`SimParams::steps`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Steps {
    /// Time steps of the whole run (`tstop / dt`, rounded).
    pub total: u64,
    /// Time steps of one exchange window (the smallest delay over `dt`, at least 1).
    pub window: u32,
}

impl SimParams {
    /// Checks ranges; returns the run's steps and its window's.
    pub fn steps(&self, delays: &DelayModel) -> Result<Steps, SimError> {
        let bad = |m: String| Err(SimError::Input(m));
        let ok = |x: f64, min: f64, strict: bool| {
            !x.is_nan() && x.is_finite() && if strict { x > min } else { x >= min }
        };
        if !ok(self.dt_ms, 0.0, true) || !ok(self.tstop_ms, 0.0, false) || !ok(self.memory_scale, 0.0, false)
        {
            return bad(format!(
                "need dt > 0, tstop ≥ 0, memory scale ≥ 0 (dt {}, tstop {}, scale {})",
                self.dt_ms, self.tstop_ms, self.memory_scale
            ));
        }
        let steps = (self.tstop_ms / self.dt_ms).round() as u64;
        if steps >= u32::MAX as u64 / 2 {
            return bad(format!("{steps} steps: too many"));
        }
        let window = ((delays.min_delay_ms() / self.dt_ms + 1e-9).floor() as u32).max(1);
        Ok(Steps { total: steps, window })
    }
}

/// What one rank did and measured.
#[derive(Debug, Clone)]
pub struct RankOutcome {
    /// This rank.
    pub rank: usize,
    /// Cells simulated here.
    pub cells: usize,
    /// Their estimated memory, KB.
    pub estimated_kb: f64,
    /// Bytes of cell state blocks really allocated (estimated KB × 1024 × memory scale).
    pub state_bytes: u64,
    /// Spikes of this rank's cells, (step, global cell index), in step order.
    pub spikes: Vec<Spike>,
    /// Exchange counters.
    pub exchange: ExchangeStats,
    /// Ranks sent to / received from (p2p routing tables; also computed for allgather).
    pub out_peers: usize,
    /// See `out_peers`.
    pub in_peers: usize,
    /// The communicator's footprint right after the last window, before any collective.
    pub footprint: Footprint,
    /// What became of its `mlock` requests at the same moment.
    pub memory_lock: MemoryLock,
    /// The process' memory counters at the same moment.
    pub process: ProcStatus,
    /// The process' memory counters before its communicator(s) were created (set by the
    /// driver: [`crate::launch::run_ranks_as_threads`] or [`crate::launch::run_per_process`]),
    /// so `process - process_start` is what the run added: transport, cell state, tables.
    pub process_start: ProcStatus,
    /// Which process held this rank (0 when all ranks are threads of one process; the
    /// process' rank under a launcher), to sum the ranks sharing one process' counters.
    pub proc_index: usize,
    /// Min-delay windows run.
    pub windows: u64,
}

impl RankOutcome {
    /// Records the process this rank ran in and its counters before the communicator.
    pub fn stamp(&mut self, proc_index: usize, process_start: ProcStatus) {
        self.proc_index = proc_index;
        self.process_start = process_start;
    }
}

/// Runs this rank's part of the simulation over `comm`. `rank_of[c]` is the rank of global
/// cell `c` (every rank must be given the same). Collective over all ranks of `comm`. With
/// `windows_done`, adds 1 to it after each min-delay window (for a progress display: ranks
/// sharing one counter count `windows × ranks` in all).
pub fn run_rank(
    comm: &mut Communicator,
    circuit: &SimCircuit,
    rank_of: &[u32],
    params: &SimParams,
    windows_done: Option<&AtomicU64>,
) -> Result<RankOutcome, SimError> {
    let me = comm.rank();
    let world = comm.world_size();
    let n = circuit.cell_count();
    if rank_of.len() != n {
        return Err(SimError::Input(format!(
            "placement of {} cells for a circuit of {n}",
            rank_of.len()
        )));
    }
    if let Some(c) = rank_of.iter().position(|&r| r as usize >= world) {
        return Err(SimError::Input(format!(
            "cell {c} placed on rank {} of {world}",
            rank_of[c]
        )));
    }
    let Steps { total: steps, window } = params.steps(&circuit.delays)?;
    // A window longer than the run is the whole run (`as` saturates: a minimum delay of
    // 1e300 steps is u32::MAX windows' worth, cut here to the run's steps).
    let window = window.min(steps.max(1) as u32);

    // This rank's cells, ascending global index.
    let globals: Vec<u32> = (0..n as u32)
        .filter(|&c| rank_of[c as usize] as usize == me)
        .collect();
    let mut local_of = vec![u32::MAX; n];
    for (i, &c) in globals.iter().enumerate() {
        local_of[c as usize] = i as u32;
    }
    let mut estimated_kb = 0.0;
    let mut state_bytes = 0u64;
    let mut cells: Vec<Cell> = Vec::with_capacity(globals.len());
    for &c in &globals {
        let kb = circuit.cell_kb[c as usize];
        let bytes = (kb * 1024.0 * params.memory_scale).round() as usize;
        estimated_kb += kb;
        state_bytes += bytes as u64;
        let PopulationGid { population, gid } = circuit.population_gid(c as usize);
        cells.push(Cell::new(c, population, gid, params.seed, bytes, &params.lif));
    }

    // Deliveries: for every source with a target here, (local target, delay steps), by source.
    let mut inbound: Vec<(u32, u32, u32)> = Vec::new();
    let mut in_peer = vec![false; world];
    for (i, &t) in globals.iter().enumerate() {
        for &s in circuit.network.sources_of(t as usize) {
            // A delivery at or past the run's end never lands: its delay is cut to the run's
            // steps (at least the window), which keeps the ring below 2^32 slots.
            let d = circuit
                .delays
                .delay_steps(s, t, params.dt_ms, window)
                .min((steps as u32).max(window));
            inbound.push((s, i as u32, d));
            in_peer[rank_of[s as usize] as usize] = true;
        }
    }
    inbound.sort_unstable();
    let mut in_start = vec![0u32; n + 1];
    for &(s, _, _) in &inbound {
        in_start[s as usize + 1] += 1;
    }
    for i in 0..n {
        in_start[i + 1] += in_start[i];
    }
    let max_delay = inbound.iter().map(|x| x.2).max().unwrap_or(window);
    let deliveries: Vec<(u32, u32)> = inbound.into_iter().map(|(_, i, d)| (i, d)).collect();

    // Routing: other ranks holding a target of each local cell.
    let mut dest_start = vec![0u32; globals.len() + 1];
    let mut dests: Vec<u32> = Vec::new();
    let mut out_peer = vec![false; world];
    let mut scratch: Vec<u32> = Vec::new();
    for (i, &c) in globals.iter().enumerate() {
        scratch.clear();
        scratch.extend(
            circuit
                .targets_of(c as usize)
                .iter()
                .map(|&t| rank_of[t as usize])
                .filter(|&r| r as usize != me),
        );
        scratch.sort_unstable();
        scratch.dedup();
        for &r in &scratch {
            out_peer[r as usize] = true;
        }
        dests.extend_from_slice(&scratch);
        dest_start[i + 1] = dests.len() as u32;
    }
    in_peer[me] = false;
    let out_peers: Vec<usize> = (0..world).filter(|&r| out_peer[r]).collect();
    let in_peers: Vec<usize> = (0..world).filter(|&r| in_peer[r]).collect();
    let (n_out, n_in) = (out_peers.len(), in_peers.len());
    let mut ex = Exchanger::new(params.exchange, world, out_peers, in_peers);

    let ring_len = max_delay as usize + window as usize + 1;
    let mut ring: Vec<Vec<(u32, f64)>> = vec![Vec::new(); ring_len];
    let mut input = vec![0.0f64; cells.len()];
    let mut own: Vec<Spike> = Vec::new();
    let mut window_spikes: Vec<Spike> = Vec::new();
    let windows = steps.div_ceil(window as u64);
    for w in 0..windows {
        window_spikes.clear();
        let (k0, k1) = (w * window as u64, ((w + 1) * window as u64).min(steps));
        for k in k0..k1 {
            let slot = &mut ring[(k % ring_len as u64) as usize];
            for &(i, wt) in slot.iter() {
                input[i as usize] += wt;
            }
            slot.clear();
            for (i, cell) in cells.iter_mut().enumerate() {
                if cell.step(k, params.dt_ms, input[i], &params.lif) {
                    window_spikes.push(Spike {
                        step: k as u32,
                        source: cell.global,
                    });
                }
                input[i] = 0.0;
            }
        }
        let dest = |g: u32| -> &[u32] {
            let i = local_of[g as usize] as usize;
            &dests[dest_start[i] as usize..dest_start[i + 1] as usize]
        };
        let mut all = ex.exchange(comm, w as u32, &window_spikes, dest)?;
        own.extend_from_slice(&window_spikes);
        all.extend_from_slice(&window_spikes);
        all.sort_unstable();
        for Spike { step: k, source: s } in all {
            let (a, b) = (in_start[s as usize] as usize, in_start[s as usize + 1] as usize);
            if a == b {
                continue;
            }
            let wt = weight_of(s, &params.lif);
            for &(i, d) in &deliveries[a..b] {
                let at = k as u64 + d as u64;
                if at < steps {
                    ring[(at % ring_len as u64) as usize].push((i, wt));
                }
            }
        }
        if let Some(done) = windows_done {
            done.fetch_add(1, Ordering::Relaxed);
        }
    }
    let footprint = comm.footprint();
    let memory_lock = comm.memory_lock();
    let process = ProcStatus::read_self().unwrap_or_default();
    // Keep the state blocks alive until measured.
    std::hint::black_box(&cells);
    Ok(RankOutcome {
        rank: me,
        cells: cells.len(),
        estimated_kb,
        state_bytes,
        spikes: own,
        exchange: ex.stats,
        out_peers: n_out,
        in_peers: n_in,
        footprint,
        memory_lock,
        process,
        process_start: ProcStatus::default(),
        proc_index: 0,
        windows,
    })
}
