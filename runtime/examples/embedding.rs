//! A simulator's main loop on Ballast's runtime: the example of `docs/EMBEDDING.md`.
//!
//! Four ranks (threads, `local` transport) each own 8 toy cells. Every cell fires on a
//! fixed schedule and excites the cells of the next rank with a delay of 1 ms. Time
//! advances in min-delay windows (1 ms = 40 steps of 0.025 ms): the rank computes a
//! window, calls `progress` between steps so the runtime serves its peers, then sends the
//! window's spikes to the ranks that need them (one message per window, empty or not) and
//! receives one message per window from each rank that sends to it. The window number is
//! the tag. At the end each rank prints its transport footprint.
//!
//! Run: `cargo run -p ballast-runtime --example embedding`
use ballast_runtime::{launch::threads, Communicator, RuntimeConfig, Source, TagMatch};

const CELLS_PER_RANK: u32 = 8;
const DT_MS: f64 = 0.025;
const WINDOW_STEPS: u64 = 40; // min delay 1 ms
const WINDOWS: u64 = 20;

/// One rank's simulation; returns (spikes fired, spikes received).
fn simulate(comm: &mut Communicator) -> ballast_runtime::Result<(usize, usize)> {
    let (me, n) = (comm.rank(), comm.world_size());
    let next = (me + 1) % n; // where my cells' targets live
    let prev = (me + n - 1) % n; // who sends to me
    let mut v = vec![0.0f64; CELLS_PER_RANK as usize];
    let mut pending: Vec<(u64, u32)> = Vec::new(); // (arrival step, local cell)
    let (mut fired, mut received) = (0, 0);
    for w in 0..WINDOWS {
        let mut spikes: Vec<u8> = Vec::new();
        for k in w * WINDOW_STEPS..(w + 1) * WINDOW_STEPS {
            for (c, vc) in v.iter_mut().enumerate() {
                // Deliveries due now, then a toy integration: fire when v crosses 1.
                *vc += pending.iter().filter(|p| p.0 == k && p.1 as usize == c).count() as f64 * 0.3;
                *vc += 0.01 * (1.0 + c as f64 / 8.0);
                if *vc >= 1.0 {
                    *vc = 0.0;
                    let gid = me as u32 * CELLS_PER_RANK + c as u32;
                    spikes.extend_from_slice(&(k as u32).to_le_bytes());
                    spikes.extend_from_slice(&gid.to_le_bytes());
                    fired += 1;
                }
            }
            pending.retain(|p| p.0 > k);
            comm.progress()?; // serve peers between compute steps
        }
        if n > 1 {
            let tag = w as u32 + 1;
            let send = comm.isend(next, tag, &spikes)?; // copied: `spikes` can be reused
            let msg = comm.recv(Source::Rank(prev), TagMatch::Tag(tag))?;
            for s in msg.data.chunks_exact(8) {
                let step = u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as u64;
                let gid = u32::from_le_bytes([s[4], s[5], s[6], s[7]]);
                pending.push((step + WINDOW_STEPS, gid % CELLS_PER_RANK)); // delay = 1 ms
                received += 1;
            }
            comm.wait(send)?;
        }
    }
    let f = comm.footprint();
    println!(
        "rank {me}: {fired} spikes fired, {received} received, {} peers connected, transport {} bytes ({:.1} ms simulated)",
        f.peers_connected,
        f.total_bytes(),
        (WINDOWS * WINDOW_STEPS) as f64 * DT_MS
    );
    Ok((fired, received))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cfg = RuntimeConfig::from_env()?; // BALLAST_* variables, see docs/CONFIG.md
    let results = threads::run_ranks(4, &cfg, simulate)?;
    let mut total = (0, 0);
    for r in results {
        let (f, rcv) = r?;
        total = (total.0 + f, total.1 + rcv);
    }
    assert_eq!(total.0, total.1, "every spike reaches the next rank");
    println!("{} spikes fired and delivered", total.0);
    Ok(())
}
