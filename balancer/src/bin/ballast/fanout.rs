//! `ballast fanout`: the classic investigation — rank 0 sends a few integers to every
//! other rank; prints rank 0's process memory counters and footprint before and after,
//! and the footprint the model predicts.

use anyhow::bail;
use ballast_runtime::fanout::{run_local, FanoutReport, Snapshot};
use ballast_runtime::TransportKind;
use serde_json::json;

use crate::runtime_args::RuntimeArgs;

/// Arguments of `ballast fanout`.
#[derive(clap::Args, Debug)]
pub struct FanoutArgs {
    /// Number of ranks (rank 0 sends to ranks 1..N-1); required for `--transport local`.
    /// With `--transport mpi` the ranks are the MPI processes (`mpirun -n N ballast fanout
    /// --transport mpi`) and this, if given, must equal N.
    #[arg(long)]
    pub ranks: Option<usize>,
    /// Messages rank 0 sends to each other rank.
    #[arg(long, default_value_t = 1)]
    pub messages: usize,
    /// 32-bit integers per message.
    #[arg(long, default_value_t = 10)]
    pub ints: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

fn snap_json(s: &Snapshot) -> serde_json::Value {
    json!({
        "vm_rss_kb": s.status.vm_rss_kb,
        "vm_lck_kb": s.status.vm_lck_kb,
        "vm_data_kb": s.status.vm_data_kb,
        "vm_hwm_kb": s.status.vm_hwm_kb,
        "footprint_bytes": s.footprint.total_bytes(),
        "world_footprint_bytes": s.world_footprint_bytes,
    })
}

/// The JSON form of a report (keys documented in the issue and `--help`).
pub fn report_json(r: &FanoutReport) -> serde_json::Value {
    json!({
        "ranks": r.ranks,
        "before": snap_json(&r.before),
        "after": snap_json(&r.after),
        "predicted_footprint_bytes": r.predicted.total_bytes(),
        "endpoints_live": r.after.footprint.endpoints_live,
        "peers_connected": r.after.footprint.peers_connected,
        "model_matches_accounting": r.all_ranks_match_model,
        "notes": r.notes,
    })
}

/// Runs `ballast fanout`.
pub fn run(args: &FanoutArgs) -> anyhow::Result<()> {
    let cfg = args.runtime.to_config()?;
    let r = match cfg.transport().kind {
        TransportKind::Local => {
            let Some(ranks) = args.ranks else { bail!("--ranks is required with --transport local") };
            if ranks < 2 {
                bail!("--ranks must be at least 2");
            }
            run_local(ranks, &cfg, args.messages, args.ints)?
        }
        #[cfg(feature = "mpi")]
        TransportKind::Mpi => {
            let mpi = ballast_runtime::mpi::Mpi::init()?;
            if mpi.size() < 2 {
                bail!("fanout over mpi needs at least 2 processes (mpirun -n N, N >= 2)");
            }
            if args.ranks.is_some_and(|r| r != mpi.size()) {
                bail!("--ranks {} differs from the {} MPI processes", args.ranks.unwrap_or(0), mpi.size());
            }
            match mpi.fanout(&cfg, args.messages, args.ints)? {
                Some(r) => r,
                None => return Ok(()), // only rank 0 prints
            }
        }
        k => bail!("transport `{k}` is not compiled in; fanout runs over {}", TransportKind::compiled_in().iter().map(|k| k.as_str()).collect::<Vec<_>>().join(" or ")),
    };
    let ranks = r.ranks;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report_json(&r))?);
        return Ok(());
    }
    let t = cfg.transport();
    println!(
        "fanout: {} ranks, rank 0 sends {} x {} ints to each; recv_sharing={} buffer {} x {} B",
        ranks, args.messages, args.ints, t.recv_sharing, t.buffer_count, t.buffer_size
    );
    println!("{:<26} {:>14} {:>14} {:>14}", "", "before", "after", "delta");
    let row = |name: &str, b: u64, a: u64| println!("{name:<26} {b:>14} {a:>14} {:>14}", a as i64 - b as i64);
    let (b, a) = (&r.before, &r.after);
    row("VmRSS (KiB, process)", b.status.vm_rss_kb, a.status.vm_rss_kb);
    row("VmHWM (KiB, process)", b.status.vm_hwm_kb, a.status.vm_hwm_kb);
    row("VmLck (KiB, process)", b.status.vm_lck_kb, a.status.vm_lck_kb);
    row("VmData (KiB, process)", b.status.vm_data_kb, a.status.vm_data_kb);
    row("footprint rank 0 (B)", b.footprint.total_bytes(), a.footprint.total_bytes());
    row("footprint all ranks (B)", b.world_footprint_bytes, a.world_footprint_bytes);
    row("predicted all ranks (B)", b.world_predicted_bytes, a.world_predicted_bytes);
    row("endpoints live rank 0", b.footprint.endpoints_live, a.footprint.endpoints_live);
    row("peers connected rank 0", b.footprint.peers_connected, a.footprint.peers_connected);
    println!(
        "predicted footprint rank 0: {} B ({})",
        r.predicted.total_bytes(),
        if r.all_ranks_match_model {
            "the model matches the accounting on every rank"
        } else {
            "the model differs from the accounting on some ranks: with max_endpoints or xrc it is the steady-state bound, and fewer endpoints may be live at the snapshot"
        }
    );
    for n in &r.notes {
        println!("note: {n}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fanout_json_has_the_documented_keys_and_real_values() {
        let args = RuntimeArgs { buffer_count: Some(4), srq_depth: Some(4), lock_pool: Some(false), ..Default::default() };
        let cfg = args.to_config().unwrap();
        let r = run_local(9, &cfg, 1, 10).unwrap();
        let v = report_json(&r);
        for k in ["before", "after"] {
            for f in ["vm_rss_kb", "vm_lck_kb", "vm_data_kb", "footprint_bytes"] {
                assert!(v[k][f].is_u64(), "{k}.{f} in {v}");
            }
        }
        assert_eq!(v["peers_connected"], 8);
        assert_eq!(v["endpoints_live"], 8);
        assert_eq!(v["predicted_footprint_bytes"], cfg.transport().predict(8, 9, 1).total_bytes());
        assert!(v["after"]["footprint_bytes"].as_u64() > v["before"]["footprint_bytes"].as_u64());
    }

    #[test]
    fn options_override_and_bad_values_are_errors() {
        let args = RuntimeArgs { recv_sharing: Some(ballast_runtime::RecvSharing::Xrc), ranks_per_node: Some(0), ..Default::default() };
        let e = args.to_config().unwrap_err().to_string();
        assert!(e.contains("BALLAST_RANKS_PER_NODE"), "{e}");
        let args = RuntimeArgs { srq_depth: Some(7), ..Default::default() };
        let cfg = args.to_config().unwrap();
        let s = cfg.settings().into_iter().find(|s| s.name == "srq_depth").unwrap();
        assert_eq!((s.value.as_str(), s.origin.as_str()), ("7", "option"));
    }
}
