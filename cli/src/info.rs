//! `ballast info`: transports compiled in, RDMA devices seen, the effective runtime
//! configuration with the origin of each value, and the predicted footprint for P peers
//! under each receive-sharing mode side by side. Text only (no `--json`), printed section by
//! section (under mpirun, by rank 0 only).

use ballast_runtime::datagram::chunk_for;
use ballast_runtime::model::datagram_mtu;
use ballast_runtime::{RecvSharing, TransportConfig, TransportKind};

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
    let Some(native_taken) = mpi_lines(&cfg)? else {
        return Ok(()); // only rank 0 prints
    };
    machine_lines(&cfg)?;
    if let Some(n) = &auto_note {
        outln!("{n}");
    }
    outln!();
    settings_table(&cfg)?;
    let world = args.world_size.unwrap_or(args.peers + 1);
    let mut t = *cfg.transport();
    if let Some(n) = native_taken {
        t.mpi_native = n;
    }
    for line in overflow_lines(&t, args.peers, world) {
        outln!("  {line}");
    }
    outln!();
    footprint_table(&t, args.peers, world)
}

/// Under mpirun (`--transport mpi`): the MPI library and job, and whether the MPI native
/// path is taken, printed by rank 0. `Ok(None)` on the other ranks, `Ok(Some(None))`
/// without MPI.
fn mpi_lines(cfg: &ballast_runtime::RuntimeConfig) -> anyhow::Result<Option<Option<bool>>> {
    #[cfg(feature = "mpi")]
    if cfg.transport().kind == TransportKind::Mpi {
        // Under mpirun: one report, from rank 0, with the MPI library and job.
        let mpi = ballast_runtime::mpi::Mpi::init()?;
        let decision = mpi.native_path(cfg);
        let decision = match decision {
            Ok(d) => d,
            Err(e) => return ballast_sim::launch::leave_mpi_on_error(mpi, Err(e.into())),
        };
        if mpi.rank() != 0 {
            return Ok(None);
        }
        outln!("MPI: {}", mpi.describe());
        match decision {
            (true, _) => outln!("MPI native path: yes (one MPI message per Ballast message, MPI matches tags; pool, endpoints and receive sharing below do not apply)"),
            (false, Some(why)) => outln!("{why}"),
            (false, None) => outln!("MPI native path: not used: the engine runs above MPI"),
        }
        return Ok(Some(Some(decision.0)));
    }
    #[cfg(not(feature = "mpi"))]
    let _ = cfg;
    Ok(Some(None))
}

/// The transports compiled in, the RDMA devices, the memlock limit and, over verbs or with
/// a device, the device the verbs transport would open.
fn machine_lines(cfg: &ballast_runtime::RuntimeConfig) -> anyhow::Result<()> {
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
    #[cfg(not(feature = "verbs"))]
    let _ = cfg;
    Ok(())
}

/// The effective configuration: each setting, its value, where it came from and its
/// variable.
fn settings_table(cfg: &ballast_runtime::RuntimeConfig) -> anyhow::Result<()> {
    outln!("effective configuration:");
    outln!("  {:<19} {:<12} {:<8} {}", "setting", "value", "from", "variable");
    // The test-only drop model is shown only when it is set.
    for s in cfg
        .settings()
        .into_iter()
        .filter(|s| !s.name.starts_with("datagram_drop_") || s.value != "0")
    {
        outln!(
            "  {:<19} {:<12} {:<8} {}",
            s.name,
            s.value,
            s.origin.as_str(),
            s.env
        );
    }
    Ok(())
}

/// The footprint predicted per rank for `peers` peers in a world of `world`, under each
/// receive-sharing mode side by side (one column on the MPI native path).
fn footprint_table(t: &TransportConfig, peers: usize, world: usize) -> anyhow::Result<()> {
    outln!(
        "predicted footprint per rank, {} peers, world {} (set with --peers/--world-size), {} ranks/node, transport {} (bytes):",
        peers, world, t.ranks_per_node, t.kind
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
            ballast_runtime::TransportConfig {
                recv_sharing: m,
                ..*t
            }
            .predict(peers, world, t.ranks_per_node)
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

/// What `endpoint_overflow` does for this configuration, for a rank with `peers` peers in a
/// world of `world` ranks: whether the datagram path runs (`datagram::chunk_for`, the test
/// the engine makes), falls back to evict (and why) or does not apply, how many peers the
/// model puts past the cap, and what the cap costs or saves by the footprint model.
fn overflow_lines(t: &TransportConfig, peers: usize, world: usize) -> Vec<String> {
    let (cap, overflow) = (t.max_endpoints, t.endpoint_overflow);
    if t.kind == TransportKind::Mpi && t.mpi_native {
        return vec![format!(
            "max_endpoints={cap} and endpoint_overflow={overflow} do not apply: the MPI native path has no \
             endpoints and no datagram path (MPI manages its connections)"
        )];
    }
    if cap == 0 {
        return vec![format!(
            "endpoint_overflow={overflow} has no effect: max_endpoints is 0 (no cap)"
        )];
    }
    let evict = format!("peers beyond max_endpoints={cap} evict the least recently used endpoint");
    let chunk = match chunk_for(t, datagram_mtu(t.kind)) {
        Ok(Some(chunk)) => chunk,
        Ok(None) => return vec![format!("endpoint_overflow={overflow}: {evict}")],
        Err(why) => {
            return vec![format!(
                "endpoint_overflow={overflow} falls back to evict: transport {} {why}; {evict}",
                t.kind
            )]
        }
    };
    let rpn = t.ranks_per_node;
    let uncapped = TransportConfig {
        max_endpoints: 0,
        ..*t
    };
    let with_cap = t.predict(peers, world, rpn);
    let without = uncapped.predict(peers, world, rpn);
    let mut lines = vec![format!(
        "endpoint_overflow={overflow}: peers beyond max_endpoints={cap} go over the datagram path \
         (chunks of {chunk} B{}; recv_sharing={})",
        if t.kind == TransportKind::Verbs {
            " at the model's 4096 B MTU: the device's active MTU sets it, 972 B on soft-RoCE at a netdev MTU of 1500"
        } else {
            ""
        },
        t.recv_sharing
    )];
    let (c, past) = (with_cap.peers_connected, with_cap.datagram_peers);
    let from = if t.lazy_connect {
        "--peers"
    } else {
        "lazy_connect off: every other rank"
    };
    if past == 0 {
        lines.push(format!(
            "with {c} peers ({from}) no peer goes past the cap of {cap}: no datagram peer is predicted"
        ));
    } else {
        lines.push(format!(
            "of {c} peers ({from}), {} get endpoints and {past} go past the cap as datagram peers",
            with_cap.endpoints_live
        ));
    }
    // The model's costs, for one peer among `n`: an endpoint, a datagram peer, and the
    // fixed bytes the datagram path adds (verbs: its UD QP and rings).
    let n = (c as usize).max(1);
    let w = world.max(n + 1);
    let total = |e: usize, dg: usize| t.predict_with(n, e, dg, w).total_bytes();
    // A datagram peer once the path exists (the second one), and what the first one adds
    // beyond that (verbs: the UD QP, made with the rank's first datagram peer).
    let endpoint = total(n, 0).saturating_sub(total(n - 1, 0));
    let dg_peer = total(n - 1, 2).saturating_sub(total(n - 1, 1));
    let fixed = total(n - 1, 1)
        .saturating_sub(total(n - 1, 0))
        .saturating_sub(dg_peer);
    let (a, b) = (with_cap.total_bytes(), without.total_bytes());
    let here = match a.cmp(&b) {
        std::cmp::Ordering::Less => format!("saves {} B per rank", b - a),
        std::cmp::Ordering::Equal => "changes nothing".to_string(),
        std::cmp::Ordering::Greater => format!("costs {} B more per rank", a - b),
    };
    let totals = format!("predicted total {a} B with the cap, {b} B without: here the cap {here}");
    if dg_peer >= endpoint {
        lines.push(format!(
            "a datagram peer costs {dg_peer} B, an endpoint {endpoint} B: the cap bounds endpoints but \
             does not save memory on {} with recv_sharing={} ({totals})",
            t.kind, t.recv_sharing
        ));
        return lines;
    }
    let saved = endpoint - dg_peer;
    let each =
        format!("each peer past the cap saves {saved} B (endpoint {endpoint} B, datagram peer {dg_peer} B)");
    lines.push(if fixed == 0 {
        format!("the datagram path has no fixed cost on {}; {each}: a cap saves memory as soon as a peer goes past it ({totals})", t.kind)
    } else {
        let what = if t.kind == TransportKind::Verbs { "the UD QP" } else { "the datagram path" };
        format!(
            "{what} costs {fixed} B per rank once a peer goes past the cap (made on first use); {each}: a cap saves memory once more than {} peers go past it ({totals})",
            fixed / saved
        )
    });
    lines
}
