//! `ballast info`'s one report: what `--json` prints (its keys in this order) and what the
//! text form ([`super::render`]) is written from.
use ballast_runtime::{Footprint, RecvSharing, RuntimeConfig, TransportConfig, TransportKind};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use super::overflow::overflow_lines;
use super::Plan;

/// The result of `ballast info`.
#[derive(Serialize)]
pub(super) struct Report {
    /// Under mpirun with `--transport mpi`: the MPI library and the native path's decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mpi: Option<MpiReport>,
    pub transports_compiled_in: Vec<&'static str>,
    /// RDMA devices listed by the kernel in /sys/class/infiniband, sorted.
    pub rdma_devices: Vec<String>,
    /// The soft `RLIMIT_MEMLOCK`, bytes (18446744073709551615: unlimited; null: unknown).
    pub memlock_limit_bytes: Option<u64>,
    /// Over verbs or with a device (builds with the `verbs` feature): the device the verbs
    /// transport would open.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verbs_device: Option<VerbsDevice>,
    /// What `--transport auto` picked, and why.
    pub auto_note: Option<String>,
    /// The effective configuration (the test-only drop model only when it is set).
    pub settings: Vec<SettingReport>,
    /// What `endpoint_overflow` does for this configuration and these peers.
    pub endpoint_overflow: Vec<String>,
    pub footprint: FootprintTable,
}

/// The MPI library and job, and whether the MPI native path is taken.
#[derive(Serialize)]
pub(super) struct MpiReport {
    pub library: String,
    pub native_path: bool,
    /// Why the native path is not taken, when the decision says.
    pub why_not: Option<String>,
}

/// The verbs device's properties, or why it cannot be opened.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(not(feature = "verbs"), allow(dead_code))]
pub(super) enum VerbsDevice {
    /// (property, value) pairs, in the probe's order (`DeviceCaps::lines`; a pair each,
    /// which the JSON report writes as a two-element array).
    Available(Vec<(&'static str, String)>),
    Unavailable(String),
}

/// A setting: its value, where it came from and its variable.
#[derive(Serialize)]
pub(super) struct SettingReport {
    pub name: &'static str,
    pub value: String,
    pub from: &'static str,
    pub variable: &'static str,
}

/// The footprint predicted per rank, under each receive-sharing mode (one column on the
/// MPI native path).
#[derive(Serialize)]
pub(super) struct FootprintTable {
    pub peers: usize,
    pub world_size: usize,
    pub ranks_per_node: usize,
    pub transport: &'static str,
    pub columns: Vec<FootprintColumn>,
    /// The other modes (not the configured one) whose model overflows 64 bits, left out of
    /// `columns`, each with its reason (absent from the JSON when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_predicted: Vec<String>,
}

/// One mode's predicted footprint, bytes: as JSON `{"mode": …, "pool_bytes": …, …,
/// "total_bytes": …}`, the fields in [`Footprint::fields`] order.
pub(super) struct FootprintColumn {
    pub mode: String,
    pub footprint: Footprint,
}

impl Serialize for FootprintColumn {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let fields = self.footprint.fields();
        let mut m = s.serialize_map(Some(fields.len() + 2))?;
        m.serialize_entry("mode", &self.mode)?;
        for f in fields {
            m.serialize_entry(f.name, &f.value)?;
        }
        m.serialize_entry("total_bytes", &self.footprint.total_bytes())?;
        m.end()
    }
}

impl Report {
    /// Gathers the report; `Ok(None)` on the ranks other than 0 under mpirun.
    pub fn gather(plan: &Plan) -> anyhow::Result<Option<Report>> {
        let cfg = &plan.cfg;
        // Under mpirun: whether the MPI native path is taken (the prediction follows it).
        let Some(mpi) = mpi_report(cfg)? else {
            return Ok(None);
        };
        let mut t = *cfg.transport();
        if let Some(m) = &mpi {
            t.mpi_native = m.native_path;
        }
        // First: a model that overflows is refused before anything else is worked out.
        let footprint = footprint_table(&t, plan.peers, plan.world)?;
        let rdma_devices = rdma_devices();
        Ok(Some(Report {
            mpi,
            transports_compiled_in: TransportKind::compiled_in().iter().map(|k| k.as_str()).collect(),
            verbs_device: verbs_device(cfg, !rdma_devices.is_empty()),
            rdma_devices,
            memlock_limit_bytes: ballast_runtime::memory::memlock_limit_bytes(),
            auto_note: plan.auto_note.clone(),
            settings: settings(cfg),
            endpoint_overflow: overflow_lines(&t, plan.peers, plan.world),
            footprint,
        }))
    }
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

/// Under mpirun (`--transport mpi`): the MPI library and job, and whether the MPI native
/// path is taken. `Ok(None)` on the ranks other than 0, `Ok(Some(None))` without MPI.
fn mpi_report(cfg: &RuntimeConfig) -> anyhow::Result<Option<Option<MpiReport>>> {
    #[cfg(feature = "mpi")]
    if cfg.transport().kind == TransportKind::Mpi {
        let mpi = ballast_runtime::mpi::Mpi::init()?;
        let decision = match mpi.native_path(cfg) {
            Ok(d) => d,
            Err(e) => return ballast_sim::launch::leave_mpi_on_error(mpi, Err(e.into())),
        };
        if mpi.rank() != 0 {
            return Ok(None);
        }
        return Ok(Some(Some(MpiReport {
            library: mpi.describe(),
            native_path: decision.taken,
            why_not: decision.why_not,
        })));
    }
    #[cfg(not(feature = "mpi"))]
    let _ = cfg;
    Ok(Some(None))
}

/// Over verbs or with a device: the device the verbs transport would open
/// (BALLAST_IB_DEVICE/PORT, BALLAST_GID_INDEX).
fn verbs_device(cfg: &RuntimeConfig, devices: bool) -> Option<VerbsDevice> {
    #[cfg(feature = "verbs")]
    if cfg.transport().kind == TransportKind::Verbs || devices {
        return Some(match ballast_runtime::verbs::device::probe(cfg.verbs()) {
            Ok(caps) => VerbsDevice::Available(caps.lines().into_iter().map(|l| (l.key, l.value)).collect()),
            Err(e) => VerbsDevice::Unavailable(e.to_string()),
        });
    }
    #[cfg(not(feature = "verbs"))]
    let _ = (cfg, devices);
    None
}

/// Each setting; the test-only drop model only when it is set.
fn settings(cfg: &RuntimeConfig) -> Vec<SettingReport> {
    cfg.settings()
        .into_iter()
        .filter(|s| !s.name.starts_with("datagram_drop_") || s.value != "0")
        .map(|s| SettingReport {
            name: s.name,
            value: s.value,
            from: s.origin.as_str(),
            variable: s.env,
        })
        .collect()
}

/// The footprint predicted per rank for `peers` peers in a world of `world`, under each
/// receive-sharing mode (one column, "mpi native", on the MPI native path). Errors: the
/// configured mode's model overflows 64 bits (as `ballast_predict` and dry-run refuse it),
/// named with the term that overflows; another mode that overflows is left out of the
/// columns and named in `not_predicted`.
fn footprint_table(t: &TransportConfig, peers: usize, world: usize) -> anyhow::Result<FootprintTable> {
    let modes: Vec<(String, RecvSharing)> = if t.kind == TransportKind::Mpi && t.mpi_native {
        vec![("mpi native".to_string(), t.recv_sharing)]
    } else {
        RecvSharing::ALL
            .iter()
            .map(|&m| (m.as_str().to_string(), m))
            .collect()
    };
    let mut columns = Vec::with_capacity(modes.len());
    let mut not_predicted = Vec::new();
    for (mode, m) in modes {
        let mt = TransportConfig {
            recv_sharing: m,
            ..*t
        };
        match mt.try_predict(peers, world, t.ranks_per_node) {
            Ok(footprint) => columns.push(FootprintColumn { mode, footprint }),
            // Only the comparison column of a mode not asked for: the rest is shown.
            Err(e) if m != t.recv_sharing => not_predicted.push(format!("recv_sharing={m}: {e}")),
            Err(e) => anyhow::bail!(
                "the footprint of a rank with --peers {peers} in a world of {world} ranks cannot be predicted \
                 with recv_sharing={}: {e}",
                mt.recv_sharing
            ),
        }
    }
    Ok(FootprintTable {
        peers,
        world_size: world,
        ranks_per_node: t.ranks_per_node,
        transport: t.kind.as_str(),
        columns,
        not_predicted,
    })
}
