//! Runtime configuration: the one [`RuntimeConfig`] (with its builder), the
//! memory-relevant [`TransportConfig`] it carries, and [`RuntimeConfig::from_env`],
//! the only place where `BALLAST_*` environment variables are read.
//!
//! Every setting, its variable, default and unit is listed in `docs/CONFIG.md`.
//!
//! Layout: this file holds the types and the settings table; `env` reads the variables and
//! parses values; `builder` is [`RuntimeConfigBuilder`]; `tests` the unit tests.

use std::fmt;
use std::str::FromStr;

mod builder;
mod env;
mod error;
#[cfg(test)]
mod tests;

pub use builder::RuntimeConfigBuilder;
#[cfg(feature = "trace")]
pub(crate) use env::verbs_trace;
pub use env::{debug, parse_bytes};
pub use error::{ConfigError, ConfigResult};

/// Which transport carries the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransportKind {
    /// In-process transport: N ranks as threads of one process (the `local` fabric).
    Local,
    /// MPI transport (feature `mpi`).
    Mpi,
    /// InfiniBand verbs transport (feature `verbs`).
    Verbs,
    /// Shared-memory transport: one rank per process, every rank on one node (Linux;
    /// `ballast_runtime::shm`).
    Shm,
    /// Not a transport: pick one at start (`resolve_transport`): `verbs` when a usable
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
            TransportKind::Shm => "shm",
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
            "shm" => Ok(TransportKind::Shm),
            "auto" => Ok(TransportKind::Auto),
            other => Err(format!(
                "unknown transport `{other}` (expected local, mpi, verbs, shm or auto)"
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

/// What a rank does with a peer it must reach while `max_endpoints` endpoints are live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EndpointOverflow {
    /// The peer goes over the connectionless datagram path (no endpoint, a fixed state of
    /// at most 256 B; see `protocol::datagram`); the most active peers keep or get the
    /// endpoints. A fabric without datagrams falls back to [`EndpointOverflow::Evict`].
    Datagram,
    /// The least recently used idle endpoint is closed to make room (reconnects).
    Evict,
}

impl EndpointOverflow {
    /// The name used on the command line and in `BALLAST_ENDPOINT_OVERFLOW`.
    pub fn as_str(self) -> &'static str {
        match self {
            EndpointOverflow::Datagram => "datagram",
            EndpointOverflow::Evict => "evict",
        }
    }
}

impl fmt::Display for EndpointOverflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EndpointOverflow {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "datagram" => Ok(EndpointOverflow::Datagram),
            "evict" => Ok(EndpointOverflow::Evict),
            other => Err(format!(
                "unknown endpoint overflow `{other}` (expected datagram or evict)"
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
    /// `shm` never locks; `verbs` registration always pins.
    pub lock_pool: bool,
    /// Over MPI with one Ballast rank per process, map each message onto one MPI message
    /// and let MPI match tags (`BALLAST_MPI_NATIVE`), default on; off runs the progress
    /// engine (pool, credits, endpoint cap) above MPI as on the other transports. See
    /// `mpi::native`.
    pub mpi_native: bool,
    /// What happens to peers beyond `max_endpoints` (`BALLAST_ENDPOINT_OVERFLOW`), default
    /// `datagram`; no effect without a cap.
    pub endpoint_overflow: EndpointOverflow,
    /// Test only: the `local` transport drops 1 in k of the datagrams it carries, at
    /// random (`BALLAST_DATAGRAM_DROP_EVERY`), default 0 = none. Exercises the datagram
    /// path's retransmission; never set it in production.
    pub datagram_drop_every: usize,
    /// Test only: the seed of the drop model's pattern (`BALLAST_DATAGRAM_DROP_SEED`),
    /// default 0 = a fixed default pattern. Each datagram is dropped with probability
    /// 1/`datagram_drop_every`, decided by a hash of (seed, sender, receiver, datagrams the
    /// sender posted to that receiver before), so that a failing pattern can be run again
    /// by its seed (the local fabric's `drop_model`).
    pub datagram_drop_seed: u64,
    /// Over the MPI native path, give every collective a number checked across the ranks
    /// (`BALLAST_COLLECTIVE_CHECKS`), default off. On, a collective that carries none
    /// (`barrier`, `all_reduce`, `bcast`, `gather`, `all_to_allv`, `exchange_sparse`) starts
    /// with an `MPI_Allgather` of 16 B per rank, so that ranks calling different
    /// collectives get the protocol error `CollectiveMismatch` instead of a hang. Off, they
    /// are MPI's own collectives alone, at MPI's cost and under MPI's rule (ranks that call
    /// different ones are an erroneous program: MPI may fail or wait for ever), and
    /// `barrier` is `MPI_Barrier`. `all_gatherv` carries its number either way (with its
    /// lengths), which catches it only against another `all_gatherv` whose number differs
    /// (one rank called a collective more before it); with checks off, an `all_gatherv`
    /// on one rank against another collective on the next is MPI's erroneous case. The
    /// engine paths always check. Every process must use the same value (checked when the
    /// communicator is made).
    pub collective_checks: bool,
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
            endpoint_overflow: EndpointOverflow::Datagram,
            datagram_drop_every: 0,
            datagram_drop_seed: 0,
            collective_checks: false,
        }
    }
}

impl TransportConfig {
    /// Checks value ranges. Errors name the setting's environment variable.
    pub fn validate(&self) -> ConfigResult<()> {
        fn bad(var: &'static str, value: String, reason: &str) -> ConfigError {
            ConfigError::Var {
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

/// A setting's name (the field of [`TransportConfig`]) and the variable
/// [`RuntimeConfig::from_env`] reads it from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettingVar {
    /// Field name in [`TransportConfig`].
    pub name: &'static str,
    /// Environment variable read by [`RuntimeConfig::from_env`].
    pub env: &'static str,
}

/// Names of the settings, in declaration order, with their variables.
pub const SETTINGS: [SettingVar; 17] = [
    SettingVar {
        name: "transport",
        env: "BALLAST_TRANSPORT",
    },
    SettingVar {
        name: "buffer_count",
        env: "BALLAST_BUFFER_COUNT",
    },
    SettingVar {
        name: "buffer_size",
        env: "BALLAST_BUFFER_SIZE",
    },
    SettingVar {
        name: "pool_growth",
        env: "BALLAST_POOL_GROWTH",
    },
    SettingVar {
        name: "max_pool_bytes",
        env: "BALLAST_MAX_POOL_BYTES",
    },
    SettingVar {
        name: "lazy_connect",
        env: "BALLAST_LAZY_CONNECT",
    },
    SettingVar {
        name: "max_endpoints",
        env: "BALLAST_MAX_ENDPOINTS",
    },
    SettingVar {
        name: "recv_sharing",
        env: "BALLAST_RECV_SHARING",
    },
    SettingVar {
        name: "recv_depth",
        env: "BALLAST_RECV_DEPTH",
    },
    SettingVar {
        name: "srq_depth",
        env: "BALLAST_SRQ_DEPTH",
    },
    SettingVar {
        name: "ranks_per_node",
        env: "BALLAST_RANKS_PER_NODE",
    },
    SettingVar {
        name: "lock_pool",
        env: "BALLAST_LOCK_POOL",
    },
    SettingVar {
        name: "mpi_native",
        env: "BALLAST_MPI_NATIVE",
    },
    SettingVar {
        name: "endpoint_overflow",
        env: "BALLAST_ENDPOINT_OVERFLOW",
    },
    SettingVar {
        name: "datagram_drop_every",
        env: "BALLAST_DATAGRAM_DROP_EVERY",
    },
    SettingVar {
        name: "datagram_drop_seed",
        env: "BALLAST_DATAGRAM_DROP_SEED",
    },
    SettingVar {
        name: "collective_checks",
        env: "BALLAST_COLLECTIVE_CHECKS",
    },
];

/// The runtime's configuration: a validated [`TransportConfig`] plus the origin of each value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    transport: TransportConfig,
    origins: [ValueOrigin; SETTINGS.len()],
    bootstrap: BootstrapConfig,
    verbs: VerbsConfig,
    shm: ShmConfig,
}

/// How the shared-memory transport moves large messages, read by
/// [`RuntimeConfig::from_env`] (`BALLAST_SHM_CMA`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmConfig {
    /// Messages above the direct threshold go by one `process_vm_readv` from the sender's
    /// memory (CMA) when the system allows it (default true); false: in chunks through
    /// the rings, as the engine paces every message (`BALLAST_SHM_CMA=off`).
    pub cma: bool,
}

impl Default for ShmConfig {
    fn default() -> Self {
        ShmConfig { cma: true }
    }
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

/// A launcher's pair of variables: this process' rank and the number of processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LauncherVars {
    /// The variable of the rank (e.g. `OMPI_COMM_WORLD_RANK`).
    pub rank: &'static str,
    /// The variable of the size (e.g. `OMPI_COMM_WORLD_SIZE`).
    pub size: &'static str,
}

/// The launchers' variables, in the order they are tried.
pub const LAUNCHER_VARS: [LauncherVars; 4] = [
    LauncherVars {
        rank: "BALLAST_RANK",
        size: "BALLAST_SIZE",
    },
    LauncherVars {
        rank: "OMPI_COMM_WORLD_RANK",
        size: "OMPI_COMM_WORLD_SIZE",
    },
    LauncherVars {
        rank: "PMI_RANK",
        size: "PMI_SIZE",
    },
    LauncherVars {
        rank: "SLURM_PROCID",
        size: "SLURM_NTASKS",
    },
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
    /// This process' node, for the transports that need every rank on one node (`shm`):
    /// `BALLAST_NODE` when set (tests), else the host name and boot id are read at start.
    pub node: Option<String>,
    /// The launcher's identity of this job step, which names the node-local rendezvous
    /// socket when there is no `BALLAST_ROOT` (`bootstrap::NodeBootstrap`): `slurm-{job}.{step}`
    /// (`SLURM_JOB_ID`, `SLURM_STEP_ID`), `pmix-{ns}` (`PMIX_NAMESPACE`, Open MPI 5 and PMIx
    /// launchers) or `ompi-{id}` (`OMPI_MCA_ess_base_jobid`, Open MPI 4); the launcher of
    /// [`BootstrapConfig::rank_var`] first.
    pub job: Option<String>,
    /// The ranks of this job on this node, by the launcher of [`BootstrapConfig::rank_var`],
    /// and the variable that says so: `OMPI_COMM_WORLD_LOCAL_SIZE` (Open MPI),
    /// `MPI_LOCALNRANKS` (MPICH's Hydra), or the job size when `SLURM_STEP_NUM_NODES` (else
    /// `SLURM_NNODES`) is 1 under srun; `None` when the launcher does not say. Used by
    /// `BALLAST_TRANSPORT=auto` (`shm` when every rank is on this node).
    pub node_ranks: Option<(usize, &'static str)>,
}

impl Default for BootstrapConfig {
    fn default() -> Self {
        BootstrapConfig {
            root: None,
            rank: None,
            size: None,
            rank_var: None,
            timeout: std::time::Duration::from_secs(60),
            node: None,
            job: None,
            node_ranks: None,
        }
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            transport: TransportConfig::default(),
            origins: [ValueOrigin::Default; SETTINGS.len()],
            bootstrap: BootstrapConfig::default(),
            verbs: VerbsConfig::default(),
            shm: ShmConfig::default(),
        }
    }
}

impl RuntimeConfig {
    /// The start-up rendezvous settings (TCP bootstrap).
    pub fn bootstrap(&self) -> &BootstrapConfig {
        &self.bootstrap
    }

    /// The verbs device selection (`BALLAST_IB_DEVICE`, `BALLAST_IB_PORT`, `BALLAST_GID_INDEX`).
    pub fn verbs(&self) -> &VerbsConfig {
        &self.verbs
    }

    /// The shared-memory transport's large-message path (`BALLAST_SHM_CMA`).
    pub fn shm(&self) -> &ShmConfig {
        &self.shm
    }

    /// Replaces the shared-memory transport's settings (tests, embedding).
    pub fn with_shm(mut self, shm: ShmConfig) -> RuntimeConfig {
        self.shm = shm;
        self
    }

    /// Replaces the verbs device selection (tests, launchers).
    pub fn with_verbs(mut self, verbs: VerbsConfig) -> RuntimeConfig {
        self.verbs = verbs;
        self
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
            t.endpoint_overflow.to_string(),
            t.datagram_drop_every.to_string(),
            t.datagram_drop_seed.to_string(),
            t.collective_checks.to_string(),
        ];
        SETTINGS
            .iter()
            .zip(values)
            .zip(self.origins)
            .map(|((s, value), origin)| Setting {
                name: s.name,
                env: s.env,
                value,
                origin,
            })
            .collect()
    }
}
