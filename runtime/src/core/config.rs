//! Runtime configuration: the one [`RuntimeConfig`] (with its builder), the
//! memory-relevant [`TransportConfig`] it carries, and [`RuntimeConfig::from_env`],
//! the only place where `BALLAST_*` environment variables are read.
//!
//! Every setting, its variable, default and unit is listed in `docs/CONFIG.md`.

use std::fmt;
use std::str::FromStr;

use crate::core::error::{Error, Result};

/// Which transport carries the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransportKind {
    /// In-process transport: N ranks as threads of one process (see [`crate::transport::local`]).
    Local,
    /// MPI transport (feature `mpi`).
    Mpi,
    /// InfiniBand verbs transport (feature `verbs`).
    Verbs,
    /// Not a transport: pick one at start ([`resolve_transport`]): `verbs` when a usable
    /// RDMA device exists and the pool fits `ulimit -l`, else `mpi` when compiled in and
    /// launched under MPI, else `local`, with a note saying which and why.
    Auto,
}

impl TransportKind {
    /// The name used on the command line and in `BALLAST_TRANSPORT`.
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::Local => "local",
            TransportKind::Mpi => "mpi",
            TransportKind::Verbs => "verbs",
            TransportKind::Auto => "auto",
        }
    }
    /// Transports compiled into this build.
    pub fn compiled_in() -> &'static [TransportKind] {
        match (cfg!(feature = "mpi"), cfg!(feature = "verbs")) {
            (true, true) => &[TransportKind::Local, TransportKind::Mpi, TransportKind::Verbs],
            (true, false) => &[TransportKind::Local, TransportKind::Mpi],
            (false, true) => &[TransportKind::Local, TransportKind::Verbs],
            (false, false) => &[TransportKind::Local],
        }
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TransportKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "local" => Ok(TransportKind::Local),
            "mpi" => Ok(TransportKind::Mpi),
            "verbs" => Ok(TransportKind::Verbs),
            "auto" => Ok(TransportKind::Auto),
            other => Err(format!(
                "unknown transport `{other}` (expected local, mpi, verbs or auto)"
            )),
        }
    }
}

/// How receive buffers are provided to the endpoints of a rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecvSharing {
    /// Each endpoint has `recv_depth` preposted buffers of its own (RC QP without SRQ).
    PerPeer,
    /// One receive queue of `srq_depth` buffers per rank shared by all its endpoints (SRQ).
    Shared,
    /// Ranks grouped into nodes of `ranks_per_node`; one send endpoint per remote node
    /// instead of per remote rank, receives through a shared queue (XRC). A transport that
    /// cannot do it falls back to [`RecvSharing::Shared`] and says so.
    Xrc,
}

impl RecvSharing {
    /// All modes, in the order `ballast info` shows them.
    pub const ALL: [RecvSharing; 3] = [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc];
    /// The name used on the command line and in `BALLAST_RECV_SHARING`.
    pub fn as_str(self) -> &'static str {
        match self {
            RecvSharing::PerPeer => "per-peer",
            RecvSharing::Shared => "shared",
            RecvSharing::Xrc => "xrc",
        }
    }
}

impl fmt::Display for RecvSharing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RecvSharing {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "per-peer" | "per_peer" | "perpeer" => Ok(RecvSharing::PerPeer),
            "shared" | "srq" => Ok(RecvSharing::Shared),
            "xrc" => Ok(RecvSharing::Xrc),
            other => Err(format!(
                "unknown receive sharing `{other}` (expected per-peer, shared or xrc)"
            )),
        }
    }
}

/// The memory-relevant transport settings: everything [`TransportConfig::predict`] needs.
///
/// Sizes are in bytes. `max_endpoints == 0` means no cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransportConfig {
    /// Transport kind (`BALLAST_TRANSPORT`), default `local`.
    pub kind: TransportKind,
    /// Buffers in the registered pool (`BALLAST_BUFFER_COUNT`), default 64.
    pub buffer_count: usize,
    /// Bytes per pool buffer and per receive buffer; the eager limit and the chunk size of
    /// larger messages (`BALLAST_BUFFER_SIZE`), default 8192.
    pub buffer_size: usize,
    /// Allow the pool to add chunks when exhausted (`BALLAST_POOL_GROWTH`), default off.
    pub pool_growth: bool,
    /// Upper bound of the pool in bytes when `pool_growth` is on (`BALLAST_MAX_POOL_BYTES`),
    /// default 64 MiB.
    pub max_pool_bytes: u64,
    /// Open endpoints on first use (`BALLAST_LAZY_CONNECT`), default on; off connects all
    /// peers at start.
    pub lazy_connect: bool,
    /// Cap on live endpoints, 0 = no cap (`BALLAST_MAX_ENDPOINTS`), default 0.
    pub max_endpoints: usize,
    /// Receive buffer sharing (`BALLAST_RECV_SHARING`), default `shared`.
    pub recv_sharing: RecvSharing,
    /// Preposted buffers per endpoint in `per-peer` mode (`BALLAST_RECV_DEPTH`), default 8.
    pub recv_depth: usize,
    /// Buffers in the shared receive queue in `shared`/`xrc` mode (`BALLAST_SRQ_DEPTH`),
    /// default 64.
    pub srq_depth: usize,
    /// Ranks per node for `xrc` grouping (`BALLAST_RANKS_PER_NODE`), default 1.
    pub ranks_per_node: usize,
    /// Lock registered memory (pool and receive buffers) with `mlock` in the `local`
    /// transport (`BALLAST_LOCK_POOL`), default on; refused locks are reported, not fatal.
    pub lock_pool: bool,
    /// Over MPI with one Ballast rank per process, map each message onto one MPI message
    /// and let MPI match tags (`BALLAST_MPI_NATIVE`), default on; off runs the progress
    /// engine (pool, credits, endpoint cap) above MPI as on the other transports. See
    /// `mpi::native`.
    pub mpi_native: bool,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            kind: TransportKind::Local,
            buffer_count: 64,
            buffer_size: 8192,
            pool_growth: false,
            max_pool_bytes: 64 << 20,
            lazy_connect: true,
            max_endpoints: 0,
            recv_sharing: RecvSharing::Shared,
            recv_depth: 8,
            srq_depth: 64,
            ranks_per_node: 1,
            lock_pool: true,
            mpi_native: true,
        }
    }
}

impl TransportConfig {
    /// Checks value ranges. Errors name the setting's environment variable.
    pub fn validate(&self) -> Result<()> {
        fn bad(var: &'static str, value: String, reason: &str) -> Error {
            Error::Config {
                var,
                value,
                reason: reason.to_string(),
            }
        }
        if self.buffer_count == 0 {
            return Err(bad("BALLAST_BUFFER_COUNT", "0".into(), "must be at least 1"));
        }
        // Buffer ids are u32 (the verbs work-request ids and the wire carry them).
        if self.buffer_count > u32::MAX as usize {
            return Err(bad(
                "BALLAST_BUFFER_COUNT",
                self.buffer_count.to_string(),
                "must be at most 2^32 - 1",
            ));
        }
        if self.buffer_size == 0 || self.buffer_size > (1 << 30) {
            return Err(bad(
                "BALLAST_BUFFER_SIZE",
                self.buffer_size.to_string(),
                "must be 1 B ..= 1 GiB",
            ));
        }
        // (both bounded above: the product fits in u64)
        let pool_bytes = self.buffer_count as u64 * self.buffer_size as u64;
        if self.pool_growth && self.max_pool_bytes < pool_bytes {
            return Err(bad(
                "BALLAST_MAX_POOL_BYTES",
                self.max_pool_bytes.to_string(),
                &format!(
                    "must be at least buffer_count x buffer_size = {} x {} = {pool_bytes} B when pool growth is on (raise max_pool_bytes, default 64M, or make the pool smaller)",
                    self.buffer_count, self.buffer_size
                ),
            ));
        }
        if self.recv_sharing == RecvSharing::PerPeer && self.recv_depth == 0 {
            return Err(bad(
                "BALLAST_RECV_DEPTH",
                "0".into(),
                "must be at least 1 in per-peer mode",
            ));
        }
        if self.recv_sharing != RecvSharing::PerPeer && self.srq_depth == 0 {
            return Err(bad(
                "BALLAST_SRQ_DEPTH",
                "0".into(),
                "must be at least 1 in shared/xrc mode",
            ));
        }
        if self.recv_depth > u32::MAX as usize / 2 {
            return Err(bad(
                "BALLAST_RECV_DEPTH",
                self.recv_depth.to_string(),
                "must be at most 2^31 - 1",
            ));
        }
        if self.srq_depth > u32::MAX as usize / 2 {
            return Err(bad(
                "BALLAST_SRQ_DEPTH",
                self.srq_depth.to_string(),
                "must be at most 2^31 - 1",
            ));
        }
        if self.ranks_per_node == 0 {
            return Err(bad("BALLAST_RANKS_PER_NODE", "0".into(), "must be at least 1"));
        }
        Ok(())
    }
}

/// Where an effective setting came from (shown by `ballast info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueOrigin {
    /// The built-in default.
    Default,
    /// A `BALLAST_*` environment variable.
    Env,
    /// Set through [`RuntimeConfigBuilder`] (by code or by command-line options).
    Builder,
}

impl ValueOrigin {
    /// Short label.
    pub fn as_str(self) -> &'static str {
        match self {
            ValueOrigin::Default => "default",
            ValueOrigin::Env => "env",
            ValueOrigin::Builder => "option",
        }
    }
}

/// One setting: its name, environment variable, effective value and origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting {
    /// Field name in [`TransportConfig`].
    pub name: &'static str,
    /// Environment variable read by [`RuntimeConfig::from_env`].
    pub env: &'static str,
    /// Effective value, formatted.
    pub value: String,
    /// Where the value came from.
    pub origin: ValueOrigin,
}

/// Names of the settings, in declaration order, with their variables.
pub const SETTINGS: [(&str, &str); 13] = [
    ("transport", "BALLAST_TRANSPORT"),
    ("buffer_count", "BALLAST_BUFFER_COUNT"),
    ("buffer_size", "BALLAST_BUFFER_SIZE"),
    ("pool_growth", "BALLAST_POOL_GROWTH"),
    ("max_pool_bytes", "BALLAST_MAX_POOL_BYTES"),
    ("lazy_connect", "BALLAST_LAZY_CONNECT"),
    ("max_endpoints", "BALLAST_MAX_ENDPOINTS"),
    ("recv_sharing", "BALLAST_RECV_SHARING"),
    ("recv_depth", "BALLAST_RECV_DEPTH"),
    ("srq_depth", "BALLAST_SRQ_DEPTH"),
    ("ranks_per_node", "BALLAST_RANKS_PER_NODE"),
    ("lock_pool", "BALLAST_LOCK_POOL"),
    ("mpi_native", "BALLAST_MPI_NATIVE"),
];

/// The runtime's configuration: a validated [`TransportConfig`] plus the origin of each value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    transport: TransportConfig,
    origins: [ValueOrigin; SETTINGS.len()],
    bootstrap: BootstrapConfig,
    verbs: VerbsConfig,
}

/// Device selection of the verbs transport (`BALLAST_IB_DEVICE`, `BALLAST_IB_PORT`,
/// `BALLAST_GID_INDEX`), read by [`RuntimeConfig::from_env`]. `None` = automatic: the first
/// device with an active port, its first active port, and on RoCE the RoCE v2 GID of an
/// IPv4 address (index 0 on InfiniBand).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerbsConfig {
    /// Device name, e.g. `mlx5_0` or `rxe0` (`BALLAST_IB_DEVICE`).
    pub device: Option<String>,
    /// Port number, from 1 (`BALLAST_IB_PORT`).
    pub port: Option<u8>,
    /// GID table index (`BALLAST_GID_INDEX`).
    pub gid_index: Option<u32>,
}

impl VerbsConfig {
    /// Reads the three variables through `lookup`. Errors: [`Error::Config`] naming the variable.
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Result<VerbsConfig> {
        let device = lookup("BALLAST_IB_DEVICE")
            .map(|d| d.trim().to_string())
            .filter(|d| !d.is_empty());
        let port = match lookup("BALLAST_IB_PORT") {
            Some(raw) => match raw.trim().parse::<u8>() {
                Ok(p) if p >= 1 => Some(p),
                _ => {
                    return Err(Error::Config {
                        var: "BALLAST_IB_PORT",
                        value: raw,
                        reason: "must be a port number 1..=255".into(),
                    })
                }
            },
            None => None,
        };
        let gid_index = match lookup("BALLAST_GID_INDEX") {
            Some(raw) => Some(raw.trim().parse::<u32>().map_err(|_| Error::Config {
                var: "BALLAST_GID_INDEX",
                value: raw.clone(),
                reason: "not a GID table index (a non-negative integer)".into(),
            })?),
            None => None,
        };
        Ok(VerbsConfig {
            device,
            port,
            gid_index,
        })
    }
}

/// Launcher variables giving (rank, size), in the order they are tried.
pub const LAUNCHER_VARS: [(&str, &str); 4] = [
    ("BALLAST_RANK", "BALLAST_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
];

/// Where the processes of a job meet at start-up (the TCP bootstrap, `docs/CONFIG.md`),
/// read by [`RuntimeConfig::from_env`] from the launcher's environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootstrapConfig {
    /// `host:port` where rank 0 listens and the others connect (`BALLAST_ROOT`).
    pub root: Option<String>,
    /// This process' rank, from the first complete pair of [`LAUNCHER_VARS`].
    pub rank: Option<usize>,
    /// Number of processes, from the same pair.
    pub size: Option<usize>,
    /// The variable the rank came from (e.g. `OMPI_COMM_WORLD_RANK`).
    pub rank_var: Option<&'static str>,
    /// How long to wait for the other ranks (`BALLAST_BOOTSTRAP_TIMEOUT`, seconds, default 60).
    pub timeout: std::time::Duration,
}

impl Default for BootstrapConfig {
    fn default() -> Self {
        BootstrapConfig {
            root: None,
            rank: None,
            size: None,
            rank_var: None,
            timeout: std::time::Duration::from_secs(60),
        }
    }
}

impl BootstrapConfig {
    /// Reads `BALLAST_ROOT`, `BALLAST_BOOTSTRAP_TIMEOUT` and the launcher's rank/size
    /// variables through `lookup`. Errors: [`Error::Config`] naming the variable.
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Result<BootstrapConfig> {
        let mut b = BootstrapConfig {
            root: lookup("BALLAST_ROOT").filter(|r| !r.trim().is_empty()),
            ..Default::default()
        };
        if let Some(raw) = lookup("BALLAST_BOOTSTRAP_TIMEOUT") {
            let secs: f64 = raw.trim().parse().map_err(|_| Error::Config {
                var: "BALLAST_BOOTSTRAP_TIMEOUT",
                value: raw.clone(),
                reason: "not a number of seconds".into(),
            })?;
            if !(secs > 0.0 && secs <= 86_400.0) {
                return Err(Error::Config {
                    var: "BALLAST_BOOTSTRAP_TIMEOUT",
                    value: raw,
                    reason: "must be > 0 and <= 86400 seconds".into(),
                });
            }
            b.timeout = std::time::Duration::from_secs_f64(secs);
        }
        for (rv, sv) in LAUNCHER_VARS {
            let (r, s) = (lookup(rv), lookup(sv));
            if r.is_none() && s.is_none() {
                continue;
            }
            let num = |var: &'static str, v: Option<String>| -> Result<usize> {
                let v = v.ok_or_else(|| Error::Config {
                    var,
                    value: String::new(),
                    reason: format!("unset while its pair ({rv}/{sv}) is set"),
                })?;
                v.trim().parse().map_err(|_| Error::Config {
                    var,
                    value: v.clone(),
                    reason: "not a non-negative integer".into(),
                })
            };
            let (rank, size) = (num(rv, r)?, num(sv, s)?);
            if size == 0 || rank >= size {
                return Err(Error::Config {
                    var: rv,
                    value: rank.to_string(),
                    reason: format!("must be below {sv} = {size}"),
                });
            }
            (b.rank, b.size, b.rank_var) = (Some(rank), Some(size), Some(rv));
            break;
        }
        Ok(b)
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            transport: TransportConfig::default(),
            origins: [ValueOrigin::Default; SETTINGS.len()],
            bootstrap: BootstrapConfig::default(),
            verbs: VerbsConfig::default(),
        }
    }
}

fn parse_bool(s: &str) -> std::result::Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" => Ok(false),
        other => Err(format!(
            "`{other}` is not a boolean (use 1/0, true/false, on/off, yes/no)"
        )),
    }
}

/// Parses a byte size: a plain integer, or with a `K`/`KiB`/`M`/`MiB`/`G`/`GiB` suffix (powers of 1024).
pub fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a number (sizes may use a K, M or G suffix)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" | "kb" => 1 << 10,
        "m" | "mib" | "mb" => 1 << 20,
        "g" | "gib" | "gb" => 1 << 30,
        _ => return Err(format!("`{s}` has an unknown unit (use K, M or G)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("`{s}` overflows"))
}

fn parse_usize(s: &str) -> std::result::Result<usize, String> {
    let v = parse_bytes(s)?;
    usize::try_from(v).map_err(|_| format!("`{s}` is too large"))
}

impl RuntimeConfig {
    /// Starts a builder from the defaults.
    pub fn builder() -> RuntimeConfigBuilder {
        RuntimeConfigBuilder {
            cfg: RuntimeConfig::default(),
        }
    }

    /// Reads every `BALLAST_*` variable of `docs/CONFIG.md` from the process environment.
    /// Unset variables keep their defaults. A bad value is [`Error::Config`] naming the variable.
    pub fn from_env() -> Result<RuntimeConfig> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// Same as [`RuntimeConfig::from_env`] with a supplied lookup (tests, embedding).
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Result<RuntimeConfig> {
        let mut cfg = RuntimeConfig::default();
        for (i, (name, var)) in SETTINGS.iter().enumerate() {
            let Some(raw) = lookup(var) else { continue };
            cfg.set(name, &raw).map_err(|reason| Error::Config {
                var,
                value: raw.clone(),
                reason,
            })?;
            cfg.origins[i] = ValueOrigin::Env;
        }
        cfg.transport.validate()?;
        cfg.bootstrap = BootstrapConfig::from_vars(&lookup)?;
        cfg.verbs = VerbsConfig::from_vars(&lookup)?;
        Ok(cfg)
    }

    /// The start-up rendezvous settings (TCP bootstrap).
    pub fn bootstrap(&self) -> &BootstrapConfig {
        &self.bootstrap
    }

    /// The verbs device selection (`BALLAST_IB_DEVICE`, `BALLAST_IB_PORT`, `BALLAST_GID_INDEX`).
    pub fn verbs(&self) -> &VerbsConfig {
        &self.verbs
    }

    /// Replaces the verbs device selection (tests, launchers).
    pub fn with_verbs(mut self, verbs: VerbsConfig) -> RuntimeConfig {
        self.verbs = verbs;
        self
    }

    fn set(&mut self, name: &str, raw: &str) -> std::result::Result<(), String> {
        let t = &mut self.transport;
        match name {
            "transport" => t.kind = raw.parse()?,
            "buffer_count" => t.buffer_count = parse_usize(raw)?,
            "buffer_size" => t.buffer_size = parse_usize(raw)?,
            "pool_growth" => t.pool_growth = parse_bool(raw)?,
            "max_pool_bytes" => t.max_pool_bytes = parse_bytes(raw)?,
            "lazy_connect" => t.lazy_connect = parse_bool(raw)?,
            "max_endpoints" => t.max_endpoints = parse_usize(raw)?,
            "recv_sharing" => t.recv_sharing = raw.parse()?,
            "recv_depth" => t.recv_depth = parse_usize(raw)?,
            "srq_depth" => t.srq_depth = parse_usize(raw)?,
            "ranks_per_node" => t.ranks_per_node = parse_usize(raw)?,
            "lock_pool" => t.lock_pool = parse_bool(raw)?,
            "mpi_native" => t.mpi_native = parse_bool(raw)?,
            _ => return Err(format!("unknown setting {name}")),
        }
        Ok(())
    }

    /// The memory-relevant settings.
    pub fn transport(&self) -> &TransportConfig {
        &self.transport
    }

    /// Every setting with its effective value and origin, in `docs/CONFIG.md` order.
    pub fn settings(&self) -> Vec<Setting> {
        let t = &self.transport;
        let values = [
            t.kind.to_string(),
            t.buffer_count.to_string(),
            t.buffer_size.to_string(),
            t.pool_growth.to_string(),
            t.max_pool_bytes.to_string(),
            t.lazy_connect.to_string(),
            t.max_endpoints.to_string(),
            t.recv_sharing.to_string(),
            t.recv_depth.to_string(),
            t.srq_depth.to_string(),
            t.ranks_per_node.to_string(),
            t.lock_pool.to_string(),
            t.mpi_native.to_string(),
        ];
        SETTINGS
            .iter()
            .zip(values)
            .zip(self.origins)
            .map(|(((name, env), value), origin)| Setting {
                name,
                env,
                value,
                origin,
            })
            .collect()
    }

    /// A builder starting from this configuration (keeps the origins recorded so far).
    pub fn to_builder(&self) -> RuntimeConfigBuilder {
        RuntimeConfigBuilder { cfg: self.clone() }
    }
}

/// Builder for [`RuntimeConfig`]; [`RuntimeConfigBuilder::build`] validates.
#[derive(Clone, Debug)]
pub struct RuntimeConfigBuilder {
    cfg: RuntimeConfig,
}

macro_rules! setter {
    ($(#[$m:meta])* $name:ident : $ty:ty => $idx:expr, $field:ident) => {
        $(#[$m])*
        pub fn $name(mut self, v: $ty) -> Self {
            self.cfg.transport.$field = v;
            self.cfg.origins[$idx] = ValueOrigin::Builder;
            self
        }
    };
}

impl RuntimeConfigBuilder {
    setter!(/// Transport kind.
        transport: TransportKind => 0, kind);
    setter!(/// Pool buffer count.
        buffer_count: usize => 1, buffer_count);
    setter!(/// Buffer size in bytes.
        buffer_size: usize => 2, buffer_size);
    setter!(/// Pool growth on/off.
        pool_growth: bool => 3, pool_growth);
    setter!(/// Pool upper bound in bytes (with growth).
        max_pool_bytes: u64 => 4, max_pool_bytes);
    setter!(/// Lazy endpoint creation on/off.
        lazy_connect: bool => 5, lazy_connect);
    setter!(/// Live endpoint cap, 0 = none.
        max_endpoints: usize => 6, max_endpoints);
    setter!(/// Receive buffer sharing mode.
        recv_sharing: RecvSharing => 7, recv_sharing);
    setter!(/// Per-endpoint receive depth (per-peer mode).
        recv_depth: usize => 8, recv_depth);
    setter!(/// Shared receive queue depth (shared/xrc mode).
        srq_depth: usize => 9, srq_depth);
    setter!(/// Ranks per node (xrc grouping).
        ranks_per_node: usize => 10, ranks_per_node);
    setter!(/// mlock registered memory on/off.
        lock_pool: bool => 11, lock_pool);
    setter!(/// MPI native path on/off (one MPI message per Ballast message).
        mpi_native: bool => 12, mpi_native);

    /// Validates and returns the configuration. Errors: [`Error::Setting`] naming the
    /// setting when the bad value was set through the builder, [`Error::Config`] naming
    /// the variable when it came from the environment.
    pub fn build(self) -> Result<RuntimeConfig> {
        match self.cfg.transport.validate() {
            Ok(()) => Ok(self.cfg),
            Err(Error::Config { var, value, reason }) => match SETTINGS.iter().position(|(_, v)| *v == var) {
                Some(i) if self.cfg.origins[i] == ValueOrigin::Builder => Err(Error::Setting {
                    name: SETTINGS[i].0,
                    var,
                    value,
                    reason,
                }),
                _ => Err(Error::Config { var, value, reason }),
            },
            Err(e) => Err(e),
        }
    }
}

/// `BALLAST_VERBS_TRACE` (docs/CONFIG.md; only with the `trace` cargo feature): the verbs
/// fabric's diagnostic timings, `1` (clock reads) or `tsc` (cycle stamps). Not part of
/// [`RuntimeConfig`]: a diagnostic switch, read when a verbs fabric is created.
#[cfg(feature = "trace")]
pub(crate) fn verbs_trace() -> Option<String> {
    std::env::var("BALLAST_VERBS_TRACE").ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn env_values_are_parsed_and_origins_recorded() {
        let cfg = RuntimeConfig::from_vars(vars(&[
            ("BALLAST_BUFFER_SIZE", "16K"),
            ("BALLAST_RECV_SHARING", "per-peer"),
            ("BALLAST_LAZY_CONNECT", "off"),
            ("BALLAST_MAX_POOL_BYTES", "2MiB"),
        ]))
        .unwrap();
        let t = cfg.transport();
        assert_eq!(t.buffer_size, 16384);
        assert_eq!(t.recv_sharing, RecvSharing::PerPeer);
        assert!(!t.lazy_connect);
        assert_eq!(t.max_pool_bytes, 2 << 20);
        let s = cfg.settings();
        let bs = s.iter().find(|s| s.name == "buffer_size").unwrap();
        assert_eq!((bs.value.as_str(), bs.origin), ("16384", ValueOrigin::Env));
        let bc = s.iter().find(|s| s.name == "buffer_count").unwrap();
        assert_eq!((bc.value.as_str(), bc.origin), ("64", ValueOrigin::Default));
    }

    #[test]
    fn bad_env_value_names_the_variable() {
        let err = RuntimeConfig::from_vars(vars(&[("BALLAST_SRQ_DEPTH", "lots")])).unwrap_err();
        assert!(err.to_string().contains("BALLAST_SRQ_DEPTH"), "{err}");
        let err = RuntimeConfig::from_vars(vars(&[("BALLAST_RECV_SHARING", "sometimes")])).unwrap_err();
        assert!(err.to_string().contains("BALLAST_RECV_SHARING"), "{err}");
        let err = RuntimeConfig::from_vars(vars(&[("BALLAST_BUFFER_COUNT", "0")])).unwrap_err();
        assert!(err.to_string().contains("BALLAST_BUFFER_COUNT"), "{err}");
        let err = RuntimeConfig::from_vars(vars(&[("BALLAST_POOL_GROWTH", "maybe")])).unwrap_err();
        assert!(err.to_string().contains("BALLAST_POOL_GROWTH"), "{err}");
    }

    #[test]
    fn builder_validates_and_marks_origin() {
        let cfg = RuntimeConfig::builder().srq_depth(4).build().unwrap();
        assert_eq!(cfg.transport().srq_depth, 4);
        assert_eq!(cfg.settings()[9].origin, ValueOrigin::Builder);
        assert!(RuntimeConfig::builder().ranks_per_node(0).build().is_err());
        assert!(RuntimeConfig::builder()
            .pool_growth(true)
            .max_pool_bytes(10)
            .build()
            .is_err());
    }

    #[test]
    fn errors_name_the_setting_where_it_was_given() {
        // Given through the builder (code or a command-line option): the setting's name.
        let err = RuntimeConfig::builder().buffer_count(0).build().unwrap_err();
        assert_eq!(err.to_string(), "bad value `0` for buffer_count (given in code or as a command-line option; variable BALLAST_BUFFER_COUNT): must be at least 1");
        // From the environment: the variable.
        let err = RuntimeConfig::from_vars(vars(&[("BALLAST_BUFFER_COUNT", "0")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bad value `0` for BALLAST_BUFFER_COUNT: must be at least 1"
        );
        // Ids are u32 and the pool size must not overflow.
        let err = RuntimeConfig::builder()
            .buffer_count(1 << 40)
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("must be at most 2^32 - 1"), "{err}");
        let err = RuntimeConfig::builder()
            .buffer_count(usize::MAX)
            .buffer_size(1 << 30)
            .pool_growth(true)
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("for buffer_count"), "{err}");
        // The pool bound says what the pool is and what to change.
        let err = RuntimeConfig::builder()
            .buffer_count(1 << 20)
            .pool_growth(true)
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("for BALLAST_MAX_POOL_BYTES: must be at least buffer_count x buffer_size = 1048576 x 8192 = 8589934592 B"), "{err}");
        let err = RuntimeConfig::builder().srq_depth(1 << 31).build().unwrap_err();
        assert!(
            err.to_string().contains("for srq_depth") && err.to_string().contains("must be at most 2^31 - 1"),
            "{err}"
        );
    }

    #[test]
    fn every_variable_is_documented_in_config_md() {
        let doc = include_str!("../../../docs/CONFIG.md");
        for (name, var) in SETTINGS {
            assert!(
                doc.contains(&format!("| `{var}` | `{name}` |")),
                "{var} missing from docs/CONFIG.md"
            );
        }
    }

    #[test]
    fn bootstrap_vars_pick_the_first_launcher_and_name_bad_values() {
        let c = RuntimeConfig::from_vars(vars(&[
            ("BALLAST_ROOT", "127.0.0.1:4000"),
            ("PMI_RANK", "3"),
            ("PMI_SIZE", "4"),
            ("SLURM_PROCID", "1"),
        ]))
        .unwrap();
        let b = c.bootstrap();
        assert_eq!(
            (b.root.as_deref(), b.rank, b.size, b.rank_var),
            (Some("127.0.0.1:4000"), Some(3), Some(4), Some("PMI_RANK"))
        );
        assert_eq!(b.timeout, std::time::Duration::from_secs(60));
        let c = RuntimeConfig::from_vars(vars(&[
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("BALLAST_RANK", "1"),
            ("BALLAST_SIZE", "2"),
            ("BALLAST_BOOTSTRAP_TIMEOUT", "2.5"),
        ]))
        .unwrap();
        assert_eq!(
            (c.bootstrap().rank, c.bootstrap().rank_var),
            (Some(1), Some("BALLAST_RANK"))
        );
        assert_eq!(c.bootstrap().timeout, std::time::Duration::from_millis(2500));
        for (bad, var) in [
            (vec![("SLURM_PROCID", "4"), ("SLURM_NTASKS", "4")], "SLURM_PROCID"),
            (vec![("PMI_RANK", "x"), ("PMI_SIZE", "4")], "PMI_RANK"),
            (vec![("BALLAST_RANK", "0")], "BALLAST_SIZE"),
            (
                vec![("BALLAST_BOOTSTRAP_TIMEOUT", "0")],
                "BALLAST_BOOTSTRAP_TIMEOUT",
            ),
        ] {
            let err = RuntimeConfig::from_vars(vars(&bad)).unwrap_err();
            assert!(err.to_string().contains(var), "{err}");
        }
        assert_eq!(
            RuntimeConfig::from_vars(vars(&[])).unwrap().bootstrap(),
            &BootstrapConfig::default()
        );
    }

    #[test]
    fn verbs_device_selection_from_env() {
        let c = RuntimeConfig::from_vars(vars(&[
            ("BALLAST_IB_DEVICE", "rxe1"),
            ("BALLAST_IB_PORT", "1"),
            ("BALLAST_GID_INDEX", "3"),
        ]))
        .unwrap();
        assert_eq!(
            c.verbs(),
            &VerbsConfig {
                device: Some("rxe1".into()),
                port: Some(1),
                gid_index: Some(3)
            }
        );
        assert_eq!(
            RuntimeConfig::from_vars(vars(&[])).unwrap().verbs(),
            &VerbsConfig::default()
        );
        for (var, bad) in [
            ("BALLAST_IB_PORT", "0"),
            ("BALLAST_IB_PORT", "x"),
            ("BALLAST_GID_INDEX", "-1"),
        ] {
            let err = RuntimeConfig::from_vars(vars(&[(var, bad)])).unwrap_err();
            assert!(err.to_string().contains(var), "{err}");
        }
        let doc = include_str!("../../../docs/CONFIG.md");
        for var in ["BALLAST_IB_DEVICE", "BALLAST_IB_PORT", "BALLAST_GID_INDEX"] {
            assert!(
                doc.contains(&format!("| `{var}` |")),
                "{var} missing from docs/CONFIG.md"
            );
        }
    }

    #[test]
    fn byte_sizes_parse_with_units() {
        assert_eq!(parse_bytes("8192").unwrap(), 8192);
        assert_eq!(parse_bytes("8k").unwrap(), 8192);
        assert_eq!(parse_bytes("1GiB").unwrap(), 1 << 30);
        assert!(parse_bytes("1T").is_err());
        assert!(parse_bytes("").is_err());
    }
}
