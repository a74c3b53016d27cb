//! The 8 B latency over verbs of a datagram peer beside an endpoint peer (feature `verbs`):
//! 3 Ballast ranks as threads of this process on one device (the `BALLAST_IB_*` settings
//! apply), `max_endpoints 1` and `endpoint_overflow=datagram`. Rank 0 ping-pongs 8 B with
//! rank 1 first (its one endpoint, an RC queue pair), then with rank 2 (beyond the cap: the
//! UD queue pair), `--rounds` round trips each after as many for warm-up, timed in batches
//! of 20; it prints the median half round trip of the batches for each peer and their
//! ratio. The rounds stay below the promotion policy's `PROMOTE_EVERY` datagrams, so rank 2
//! stays a datagram peer (checked: its footprint says so). The idle third rank polls
//! meanwhile (each phase has one), so both figures carry the same disturbance.
//! Without an RDMA device it prints why and exits 0.

use std::time::Instant;

use anyhow::{bail, Context};
use ballast_runtime::bootstrap::LocalBootstrap;
use ballast_runtime::{verbs, Communicator, EndpointOverflow, RuntimeConfig};
use clap::Parser;

/// 8 B latency of a datagram peer beside an endpoint peer over verbs.
#[derive(Parser, Debug)]
#[command(name = "verbs_datagram_latency")]
struct Args {
    /// Timed round trips per peer (after as many untimed); at most 200 so that the
    /// datagram peer is not promoted.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(20..=200))]
    rounds: u32,
}

const BATCH: u32 = 20;

/// Rank 0's half round trips (us) with `peer`, per batch of [`BATCH`].
fn pingpong(comm: &mut Communicator, peer: usize, rounds: u32) -> ballast_runtime::Result<Vec<f64>> {
    let me = comm.rank();
    let msg = [7u8; 8];
    let mut out = Vec::new();
    for phase in 0..2 {
        let mut t = Instant::now();
        for i in 0..rounds {
            if me == 0 {
                comm.send(peer, 1, &msg)?;
                comm.recv(peer, 1u32)?;
            } else {
                comm.recv(0, 1u32)?;
                comm.send(0, 1, &msg)?;
            }
            if phase == 1 && (i + 1) % BATCH == 0 {
                out.push(t.elapsed().as_secs_f64() * 1e6 / (2 * BATCH) as f64);
                t = Instant::now();
            }
        }
    }
    Ok(out)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Err(e) = verbs::device::probe(&RuntimeConfig::from_env()?.verbs().clone()) {
        println!("verbs_datagram_latency: skipped: {e}");
        return Ok(());
    }
    let cfg = RuntimeConfig::from_env()?
        .to_builder()
        .max_endpoints(1)
        .endpoint_overflow(EndpointOverflow::Datagram)
        .build()?;
    let mut boot = LocalBootstrap::group(1)?.pop().context("one bootstrap")?;
    let rounds = args.rounds;
    let res = verbs::run_ranks(&mut boot, 3, &cfg, |comm| -> ballast_runtime::Result<_> {
        let me = comm.rank();
        let ep = if me != 2 {
            pingpong(comm, 1, rounds)?
        } else {
            vec![]
        };
        let dg = if me != 1 {
            pingpong(comm, 2, rounds)?
        } else {
            vec![]
        };
        Ok((ep, dg, comm.footprint()))
    })?;
    let r0 = res.into_iter().next().context("rank 0's result")?;
    let (ep, dg, f) = r0.output?;
    if (f.endpoints_live, f.datagram_peers) != (1, 1) {
        bail!(
            "rank 0 has {} endpoints and {} datagram peers, not 1 and 1 (promoted?)",
            f.endpoints_live,
            f.datagram_peers
        );
    }
    let (e, d) = (median(ep.clone()), median(dg.clone()));
    println!("8 B half round trip, medians of {} batches of {BATCH}:", ep.len());
    println!("  endpoint peer (RC):  {e:.2} us   batches {ep:.1?}");
    println!("  datagram peer (UD):  {d:.2} us   batches {dg:.1?}");
    println!(
        "verbs_datagram_8B_half_rtt_us={d:.2} verbs_endpoint_8B_half_rtt_us={e:.2} ratio={:.2}",
        d / e
    );
    Ok(())
}
