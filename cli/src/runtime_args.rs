//! Runtime options shared by the runtime commands (`fanout`, `info`): each overrides the
//! matching `BALLAST_*` variable read by `RuntimeConfig::from_env` (see docs/CONFIG.md).

use ballast_runtime::env::parse_bytes;
use ballast_runtime::{EndpointOverflow, RecvSharing, RuntimeConfig, TransportKind};

/// A whole number of at most `max`, with an optional K/M/G suffix (the runtime's
/// `parse_bytes`, which reads `BALLAST_*` the same way); a number too large for `max` and a
/// decimal fraction are named as such instead of "not a number" / "unknown unit".
fn parse_whole(s: &str, max: u64) -> Result<u64, String> {
    let t = s.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let too_large = || format!("`{s}` is too large (at most {max})");
    if unit.starts_with('.') && unit[1..].starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!(
            "`{s}` is not a whole number (give an integer, with an optional K, M or G suffix)"
        ));
    }
    if !num.is_empty() {
        let Ok(n) = num.parse::<u64>() else {
            return Err(too_large());
        };
        // The suffix's multiplier, as the runtime reads it (an unknown one is its error).
        if let Ok(mult) = parse_bytes(&format!("1{unit}")) {
            if n.checked_mul(mult).is_none_or(|v| v > max) {
                return Err(too_large());
            }
        }
    }
    parse_bytes(s)
}

fn parse_size(s: &str) -> Result<u64, String> {
    parse_whole(s, u64::MAX)
}

fn parse_count(s: &str) -> Result<usize, String> {
    let max = u64::try_from(usize::MAX).unwrap_or(u64::MAX);
    parse_whole(s, max)
        .and_then(|v| usize::try_from(v).map_err(|_| format!("`{s}` is too large (at most {max})")))
}

fn parse_switch(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" => Ok(false),
        _ => Err(format!(
            "`{s}` is not a switch (use on/off, 1/0, true/false, yes/no)"
        )),
    }
}

/// Runtime settings on the command line (defaults: environment, then built-in defaults).
#[derive(clap::Args, Debug, Default, Clone)]
pub struct RuntimeArgs {
    /// Transport: local, shm, mpi, verbs, or auto (verbs if a device is usable and the pool
    /// fits ulimit -l, else shm for two or more processes all on this node, else mpi if
    /// launched under MPI, else local) (BALLAST_TRANSPORT).
    #[arg(long, value_parser = |s: &str| s.parse::<TransportKind>())]
    pub transport: Option<TransportKind>,
    /// Buffers in the registered pool (BALLAST_BUFFER_COUNT).
    #[arg(long, value_parser = parse_count, allow_negative_numbers = true)]
    pub buffer_count: Option<usize>,
    /// Bytes per buffer, K/M/G suffixes allowed (BALLAST_BUFFER_SIZE).
    #[arg(long, value_parser = parse_count, allow_negative_numbers = true)]
    pub buffer_size: Option<usize>,
    /// Let the pool grow up to --max-pool-bytes: on/off (BALLAST_POOL_GROWTH).
    #[arg(long, value_parser = parse_switch)]
    pub pool_growth: Option<bool>,
    /// Pool bound with growth, bytes (BALLAST_MAX_POOL_BYTES).
    #[arg(long, value_parser = parse_size, allow_negative_numbers = true)]
    pub max_pool_bytes: Option<u64>,
    /// Open endpoints on first use: on/off (BALLAST_LAZY_CONNECT).
    #[arg(long, value_parser = parse_switch)]
    pub lazy_connect: Option<bool>,
    /// Cap on live endpoints, 0 = none (BALLAST_MAX_ENDPOINTS).
    #[arg(long, value_parser = parse_count, allow_negative_numbers = true)]
    pub max_endpoints: Option<usize>,
    /// Peers beyond --max-endpoints: datagram (a connectionless path, no reconnects; the
    /// default) or evict (close the least recently used endpoint) (BALLAST_ENDPOINT_OVERFLOW).
    #[arg(long, value_parser = |s: &str| s.parse::<EndpointOverflow>())]
    pub endpoint_overflow: Option<EndpointOverflow>,
    /// Receive sharing: per-peer, shared or xrc (BALLAST_RECV_SHARING).
    #[arg(long, value_parser = |s: &str| s.parse::<RecvSharing>())]
    pub recv_sharing: Option<RecvSharing>,
    /// Preposted buffers per endpoint in per-peer mode (BALLAST_RECV_DEPTH).
    #[arg(long, value_parser = parse_count, allow_negative_numbers = true)]
    pub recv_depth: Option<usize>,
    /// Shared receive queue depth (BALLAST_SRQ_DEPTH).
    #[arg(long, value_parser = parse_count, allow_negative_numbers = true)]
    pub srq_depth: Option<usize>,
    /// Ranks per node (BALLAST_RANKS_PER_NODE): the node grouping of xrc, and of
    /// dry-run's per-node totals and --node-memory-gb.
    #[arg(long, value_parser = parse_count, allow_negative_numbers = true)]
    pub ranks_per_node: Option<usize>,
    /// mlock registered memory: on/off (BALLAST_LOCK_POOL).
    #[arg(long, value_parser = parse_switch)]
    pub lock_pool: Option<bool>,
    /// MPI native path (one MPI message per Ballast message) with one rank per process:
    /// on/off (BALLAST_MPI_NATIVE).
    #[arg(long, value_parser = parse_switch)]
    pub mpi_native: Option<bool>,
}

impl RuntimeArgs {
    /// The options given that only shape the transport (memory) charge: all but
    /// `--ranks-per-node`, which also groups ranks into nodes.
    pub fn given_charge_options(&self) -> Vec<&'static str> {
        [
            ("--transport", self.transport.is_some()),
            ("--buffer-count", self.buffer_count.is_some()),
            ("--buffer-size", self.buffer_size.is_some()),
            ("--pool-growth", self.pool_growth.is_some()),
            ("--max-pool-bytes", self.max_pool_bytes.is_some()),
            ("--lazy-connect", self.lazy_connect.is_some()),
            ("--max-endpoints", self.max_endpoints.is_some()),
            ("--endpoint-overflow", self.endpoint_overflow.is_some()),
            ("--recv-sharing", self.recv_sharing.is_some()),
            ("--recv-depth", self.recv_depth.is_some()),
            ("--srq-depth", self.srq_depth.is_some()),
            ("--lock-pool", self.lock_pool.is_some()),
            ("--mpi-native", self.mpi_native.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect()
    }

    /// The environment's configuration with these options applied on top.
    pub fn to_config(&self) -> anyhow::Result<RuntimeConfig> {
        let mut b = RuntimeConfig::from_env()?.to_builder();
        if let Some(v) = self.transport {
            b = b.transport(v);
        }
        if let Some(v) = self.buffer_count {
            b = b.buffer_count(v);
        }
        if let Some(v) = self.buffer_size {
            b = b.buffer_size(v);
        }
        if let Some(v) = self.pool_growth {
            b = b.pool_growth(v);
        }
        if let Some(v) = self.max_pool_bytes {
            b = b.max_pool_bytes(v);
        }
        if let Some(v) = self.lazy_connect {
            b = b.lazy_connect(v);
        }
        if let Some(v) = self.max_endpoints {
            b = b.max_endpoints(v);
        }
        if let Some(v) = self.endpoint_overflow {
            b = b.endpoint_overflow(v);
        }
        if let Some(v) = self.recv_sharing {
            b = b.recv_sharing(v);
        }
        if let Some(v) = self.recv_depth {
            b = b.recv_depth(v);
        }
        if let Some(v) = self.srq_depth {
            b = b.srq_depth(v);
        }
        if let Some(v) = self.ranks_per_node {
            b = b.ranks_per_node(v);
        }
        if let Some(v) = self.mpi_native {
            b = b.mpi_native(v);
        }
        if let Some(v) = self.lock_pool {
            b = b.lock_pool(v);
        }
        b.build().map_err(|e| match e {
            // Set through the builder here means: by one of these options (`--` + the
            // setting's name with `-` for `_`).
            ballast_runtime::ConfigError::Setting {
                name,
                var,
                value,
                reason,
            } => {
                anyhow::anyhow!(
                    "bad value `{value}` for --{} (variable {var}): {reason}",
                    name.replace('_', "-")
                )
            }
            e => e.into(),
        })
    }

    /// [`RuntimeArgs::to_config`] with `--transport auto` (or `BALLAST_TRANSPORT=auto`)
    /// resolved to the transport this machine and launch offer
    /// (`ballast_runtime::resolve_transport`), and the note that says which and why.
    pub fn to_config_resolved(&self) -> anyhow::Result<(RuntimeConfig, Option<String>)> {
        let cfg = self.to_config()?;
        let ballast_runtime::ResolvedTransport { kind, note } = ballast_runtime::resolve_transport(&cfg);
        if kind == cfg.transport().kind {
            return Ok((cfg, note));
        }
        Ok((cfg.to_builder().transport(kind).build()?, note))
    }
}

/// Refuses the `local` transport in a process that a launcher started as one of several
/// (`mpirun -n N ballast run` without `--transport`, or `auto` that found nothing better):
/// each process would run the whole job alone, N copies writing the same outputs. `command`
/// names the subcommand; `auto_note` says why `auto` picked local, when it did.
pub fn check_not_one_of_many(
    cfg: &RuntimeConfig,
    command: &str,
    auto_note: Option<&str>,
) -> anyhow::Result<()> {
    let b = cfg.bootstrap();
    let size = b.size.unwrap_or(1);
    if cfg.transport().kind == TransportKind::Local && size > 1 {
        anyhow::bail!(
            "ballast {command}: the transport is local (ranks as threads of one process), but this process was \
             launched as one of {size} (by {}): each would run the whole job alone; use --transport shm (every \
             rank on this node), mpi or verbs, or one process with --ranks {size}{}",
            b.rank_var.unwrap_or("the launcher's variables"),
            auto_note.map(|n| format!(" ({n})")).unwrap_or_default()
        );
    }
    Ok(())
}

/// Refuses transports this build cannot run, with the build command that adds them (the
/// same as the README's): [`not_compiled_in`]'s message.
pub fn check_compiled_in(kind: TransportKind) -> anyhow::Result<()> {
    match not_compiled_in(kind) {
        Some(why) => anyhow::bail!("{why}"),
        None => Ok(()),
    }
}

/// `None` when this build can run transport `kind`; else what says it is not compiled in
/// and the build command that adds it.
pub fn not_compiled_in(kind: TransportKind) -> Option<String> {
    let compiled: Vec<&str> = TransportKind::compiled_in().iter().map(|k| k.as_str()).collect();
    let (feature, packages, then) = match kind {
        TransportKind::Mpi if !cfg!(feature = "mpi") => {
            ("mpi", "libopenmpi-dev libclang-dev", "launch with mpirun -n N")
        }
        TransportKind::Verbs if !cfg!(feature = "verbs") => (
            "verbs",
            "libibverbs-dev librdmacm-dev libclang-dev pkg-config",
            "run where an RDMA device is",
        ),
        _ => return None,
    };
    Some(format!(
        "transport {} (--transport or BALLAST_TRANSPORT) is not compiled into this ballast (transports compiled in: {}); build with `cargo build --release --bin ballast --features {feature}` (needs {packages}) and {then}",
        kind.as_str(),
        compiled.join(", ")
    ))
}
