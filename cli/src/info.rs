//! `ballast info`: transports compiled in, RDMA devices seen, the effective runtime
//! configuration with the origin of each value, and the predicted footprint for P peers
//! under each receive-sharing mode side by side.

use ballast_runtime::{RecvSharing, TransportKind};

use crate::runtime_args::RuntimeArgs;

/// Arguments of `ballast info`.
#[derive(clap::Args, Debug)]
pub struct InfoArgs {
    /// Peers each rank talks to, for the footprint prediction.
    #[arg(long, default_value_t = 255)]
    pub peers: usize,
    /// World size for the prediction (default: peers + 1).
    #[arg(long)]
    pub world_size: Option<usize>,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// RDMA devices listed by the kernel in /sys/class/infiniband.
fn rdma_devices() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Runs `ballast info`.
pub fn run(args: &InfoArgs) -> anyhow::Result<()> {
    let (cfg, auto_note) = args.runtime.to_config_resolved()?;
    // Under mpirun: whether the MPI native path is taken (the prediction follows it).
    #[allow(unused_mut)]
    let mut native_taken: Option<bool> = None;
    #[cfg(feature = "mpi")]
    if cfg.transport().kind == TransportKind::Mpi {
        // Under mpirun: one report, from rank 0, with the MPI library and job.
        let mpi = ballast_runtime::mpi::Mpi::init()?;
        let decision = mpi.native_path(&cfg);
        let decision = match decision {
            Ok(d) => d,
            Err(e) => return ballast_sim::launch::leave_mpi_on_error(mpi, Err(e.into())),
        };
        if mpi.rank() != 0 {
            return Ok(());
        }
        outln!("MPI: {}", mpi.describe());
        native_taken = Some(decision.0);
        match decision {
            (true, _) => outln!("MPI native path: yes (one MPI message per Ballast message, MPI matches tags; pool, endpoints and receive sharing below do not apply)"),
            (false, Some(why)) => outln!("{why}"),
            (false, None) => outln!("MPI native path: not used: the engine runs above MPI"),
        }
    }
    let compiled: Vec<&str> = TransportKind::compiled_in().iter().map(|k| k.as_str()).collect();
    outln!("transports compiled in: {}", compiled.join(", "));
    let devs = rdma_devices();
    outln!(
        "RDMA devices: {}",
        if devs.is_empty() {
            "none (/sys/class/infiniband is empty or absent)".to_string()
        } else {
            devs.join(", ")
        }
    );
    match ballast_runtime::local::memlock_limit_bytes() {
        Some(u64::MAX) => outln!("memlock limit (RLIMIT_MEMLOCK soft): unlimited"),
        Some(b) => outln!("memlock limit (RLIMIT_MEMLOCK soft): {} KiB", b / 1024),
        None => outln!("memlock limit: unknown"),
    }
    #[cfg(feature = "verbs")]
    if cfg.transport().kind == TransportKind::Verbs || !devs.is_empty() {
        // The device the verbs transport would open (BALLAST_IB_DEVICE/PORT, BALLAST_GID_INDEX).
        match ballast_runtime::verbs::probe(cfg.verbs()) {
            Ok(caps) => {
                outln!("verbs device:");
                for (k, v) in caps.lines() {
                    outln!("  {k:<12} {v}");
                }
            }
            Err(e) => outln!("verbs device: unavailable ({e})"),
        }
    }
    if let Some(n) = &auto_note {
        outln!("{n}");
    }
    outln!();
    outln!("effective configuration:");
    outln!("  {:<19} {:<12} {:<8} {}", "setting", "value", "from", "variable");
    // The test-only drop model is shown only when it is set.
    for s in cfg
        .settings()
        .into_iter()
        .filter(|s| s.name != "datagram_drop_every" || s.value != "0")
    {
        outln!(
            "  {:<19} {:<12} {:<8} {}",
            s.name,
            s.value,
            s.origin.as_str(),
            s.env
        );
    }
    let overflow = cfg.transport().endpoint_overflow;
    if cfg.transport().max_endpoints == 0 {
        outln!("  endpoint_overflow={overflow} has no effect: max_endpoints is 0 (no cap)");
    } else {
        outln!(
            "  endpoint_overflow={overflow}: peers beyond max_endpoints={} {}",
            cfg.transport().max_endpoints,
            match overflow {
                ballast_runtime::EndpointOverflow::Datagram =>
                    "go over the datagram path (no endpoint; evict with recv_sharing=xrc, buffers below \
                     64 B, or a transport without datagrams)",
                ballast_runtime::EndpointOverflow::Evict => "evict the least recently used endpoint",
            }
        );
    }
    let world = args.world_size.unwrap_or(args.peers + 1);
    let mut t = *cfg.transport();
    if let Some(n) = native_taken {
        t.mpi_native = n;
    }
    outln!();
    outln!(
        "predicted footprint per rank, {} peers, world {} (set with --peers/--world-size), {} ranks/node, transport {} (bytes):",
        args.peers, world, t.ranks_per_node, t.kind
    );
    // On the MPI native path no sharing mode applies: one column.
    let modes: Vec<(String, RecvSharing)> = if t.kind == TransportKind::Mpi && t.mpi_native {
        vec![("mpi native".to_string(), t.recv_sharing)]
    } else {
        RecvSharing::ALL
            .iter()
            .map(|&m| (m.as_str().to_string(), m))
            .collect()
    };
    let preds: Vec<_> = modes
        .iter()
        .map(|&(_, m)| {
            ballast_runtime::TransportConfig { recv_sharing: m, ..t }.predict(
                args.peers,
                world,
                t.ranks_per_node,
            )
        })
        .collect();
    out!("  {:<18}", "");
    for (name, _) in &modes {
        out!(" {:>14}", name);
    }
    outln!();
    for (i, (name, _)) in preds[0].fields().iter().enumerate() {
        out!("  {name:<18}");
        for p in &preds {
            out!(" {:>14}", p.fields()[i].1);
        }
        outln!();
    }
    out!("  {:<18}", "total_bytes");
    for p in &preds {
        out!(" {:>14}", p.total_bytes());
    }
    outln!();
    Ok(())
}
