//! Reading the `BALLAST_*` variables (the only place they are read): the settings table
//! of [`SETTINGS`], the verbs device and the start-up rendezvous, and the value parsers.

use super::*;

impl VerbsConfig {
    /// Reads the three variables through `lookup`. Errors: [`ConfigError::Var`] naming the variable.
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> ConfigResult<VerbsConfig> {
        let device = lookup("BALLAST_IB_DEVICE")
            .map(|d| d.trim().to_string())
            .filter(|d| !d.is_empty());
        let port = match lookup("BALLAST_IB_PORT") {
            Some(raw) => match raw.trim().parse::<u8>() {
                Ok(p) if p >= 1 => Some(p),
                _ => {
                    return Err(ConfigError::Var {
                        var: "BALLAST_IB_PORT",
                        value: raw,
                        reason: "must be a port number 1..=255".into(),
                    })
                }
            },
            None => None,
        };
        let gid_index = match lookup("BALLAST_GID_INDEX") {
            Some(raw) => Some(raw.trim().parse::<u32>().map_err(|_| ConfigError::Var {
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

impl BootstrapConfig {
    /// Reads `BALLAST_ROOT`, `BALLAST_BOOTSTRAP_TIMEOUT`, `BALLAST_NODE` and the launcher's
    /// rank/size variables through `lookup`. Errors: [`ConfigError::Var`] naming the variable.
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> ConfigResult<BootstrapConfig> {
        let mut b = BootstrapConfig {
            root: lookup("BALLAST_ROOT").filter(|r| !r.trim().is_empty()),
            node: lookup("BALLAST_NODE").filter(|n| !n.trim().is_empty()),
            ..Default::default()
        };
        if let Some(raw) = lookup("BALLAST_BOOTSTRAP_TIMEOUT") {
            let secs: f64 = raw.trim().parse().map_err(|_| ConfigError::Var {
                var: "BALLAST_BOOTSTRAP_TIMEOUT",
                value: raw.clone(),
                reason: "not a number of seconds".into(),
            })?;
            if !(secs > 0.0 && secs <= 86_400.0) {
                return Err(ConfigError::Var {
                    var: "BALLAST_BOOTSTRAP_TIMEOUT",
                    value: raw,
                    reason: "must be > 0 and <= 86400 seconds".into(),
                });
            }
            b.timeout = std::time::Duration::from_secs_f64(secs);
        }
        for LauncherVars { rank: rv, size: sv } in LAUNCHER_VARS {
            let (r, s) = (lookup(rv), lookup(sv));
            if r.is_none() && s.is_none() {
                continue;
            }
            let num = |var: &'static str, v: Option<String>| -> ConfigResult<usize> {
                let v = v.ok_or_else(|| ConfigError::Var {
                    var,
                    value: String::new(),
                    reason: format!("unset while its pair ({rv}/{sv}) is set"),
                })?;
                v.trim().parse().map_err(|_| ConfigError::Var {
                    var,
                    value: v.clone(),
                    reason: "not a non-negative integer".into(),
                })
            };
            let (rank, size) = (num(rv, r)?, num(sv, s)?);
            if size == 0 || rank >= size {
                return Err(ConfigError::Var {
                    var: rv,
                    value: rank.to_string(),
                    reason: format!("must be below {sv} = {size}"),
                });
            }
            (b.rank, b.size, b.rank_var) = (Some(rank), Some(size), Some(rv));
            break;
        }
        b.job = launcher_job(b.rank_var, &lookup)?;
        b.node_ranks = node_ranks(b.rank_var, b.size, &lookup)?;
        Ok(b)
    }
}

/// The ranks on this node by the launcher of `rank_var` ([`BootstrapConfig::node_ranks`]).
/// Errors: [`ConfigError::Var`] for a value that is not a count.
fn node_ranks(
    rank_var: Option<&'static str>,
    size: Option<usize>,
    lookup: &impl Fn(&str) -> Option<String>,
) -> ConfigResult<Option<(usize, &'static str)>> {
    let count = |var: &'static str| -> ConfigResult<Option<usize>> {
        lookup(var)
            .map(|v| {
                v.trim().parse::<usize>().map_err(|_| ConfigError::Var {
                    var,
                    value: v.clone(),
                    reason: "not a non-negative integer".into(),
                })
            })
            .transpose()
    };
    Ok(match rank_var {
        Some("OMPI_COMM_WORLD_RANK") => {
            count("OMPI_COMM_WORLD_LOCAL_SIZE")?.map(|n| (n, "OMPI_COMM_WORLD_LOCAL_SIZE"))
        }
        Some("PMI_RANK") => count("MPI_LOCALNRANKS")?.map(|n| (n, "MPI_LOCALNRANKS")),
        Some("SLURM_PROCID") => {
            let nodes = match count("SLURM_STEP_NUM_NODES")? {
                Some(n) => Some((n, "SLURM_STEP_NUM_NODES")),
                None => count("SLURM_NNODES")?.map(|n| (n, "SLURM_NNODES")),
            };
            match (nodes, size) {
                (Some((1, var)), Some(size)) => Some((size, var)),
                _ => None,
            }
        }
        _ => None,
    })
}

/// The launcher's identity of this job step ([`BootstrapConfig::job`]): the launcher whose
/// rank variable was taken first (`SLURM_PROCID`: Slurm; `OMPI_COMM_WORLD_RANK`: PMIx, then
/// Open MPI 4's job id), then Slurm, PMIx and Open MPI in that order. Errors:
/// [`ConfigError::Var`] for an id that is empty, longer than 64 bytes or holds a character
/// other than `A-Z a-z 0-9 . _ -` (it becomes part of a socket name).
fn launcher_job(
    rank_var: Option<&'static str>,
    lookup: &impl Fn(&str) -> Option<String>,
) -> ConfigResult<Option<String>> {
    let checked = |var: &'static str, v: String| -> ConfigResult<String> {
        let ok = !v.is_empty()
            && v.len() <= 64
            && v.bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c));
        if ok {
            Ok(v)
        } else {
            Err(ConfigError::Var {
                var,
                value: v,
                reason: "not a job id (1 to 64 of A-Z a-z 0-9 . _ -)".into(),
            })
        }
    };
    let var = |name: &'static str| lookup(name).map(|v| v.trim().to_string());
    let slurm = || -> ConfigResult<Option<String>> {
        let Some(job) = var("SLURM_JOB_ID") else {
            return Ok(None);
        };
        let job = checked("SLURM_JOB_ID", job)?;
        Ok(Some(match var("SLURM_STEP_ID") {
            Some(step) => format!("slurm-{job}.{}", checked("SLURM_STEP_ID", step)?),
            None => format!("slurm-{job}"),
        }))
    };
    let pmix = || -> ConfigResult<Option<String>> {
        var("PMIX_NAMESPACE")
            .map(|ns| checked("PMIX_NAMESPACE", ns).map(|ns| format!("pmix-{ns}")))
            .transpose()
    };
    let ompi = || -> ConfigResult<Option<String>> {
        var("OMPI_MCA_ess_base_jobid")
            .map(|id| checked("OMPI_MCA_ess_base_jobid", id).map(|id| format!("ompi-{id}")))
            .transpose()
    };
    let order: [&dyn Fn() -> ConfigResult<Option<String>>; 3] = match rank_var {
        Some("OMPI_COMM_WORLD_RANK") => [&pmix, &ompi, &slurm],
        _ => [&slurm, &pmix, &ompi],
    };
    for f in order {
        if let Some(job) = f()? {
            return Ok(Some(job));
        }
    }
    Ok(None)
}

impl RuntimeConfig {
    /// Reads every `BALLAST_*` variable of `docs/CONFIG.md` from the process environment.
    /// Unset variables keep their defaults. A bad value is [`ConfigError::Var`] naming the variable.
    pub fn from_env() -> ConfigResult<RuntimeConfig> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// Same as [`RuntimeConfig::from_env`] with a supplied lookup (tests, embedding).
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> ConfigResult<RuntimeConfig> {
        let mut cfg = RuntimeConfig::default();
        for (i, s) in SETTINGS.iter().enumerate() {
            let Some(raw) = lookup(s.env) else { continue };
            cfg.set(s.name, &raw).map_err(|reason| ConfigError::Var {
                var: s.env,
                value: raw.clone(),
                reason,
            })?;
            cfg.origins[i] = ValueOrigin::Env;
        }
        cfg.transport.validate()?;
        cfg.bootstrap = BootstrapConfig::from_vars(&lookup)?;
        cfg.verbs = VerbsConfig::from_vars(&lookup)?;
        if let Some(raw) = lookup("BALLAST_SHM_CMA") {
            cfg.shm.cma = parse_bool(&raw).map_err(|reason| ConfigError::Var {
                var: "BALLAST_SHM_CMA",
                value: raw.clone(),
                reason,
            })?;
        }
        Ok(cfg)
    }

    pub(super) fn set(&mut self, name: &str, raw: &str) -> std::result::Result<(), String> {
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
            "endpoint_overflow" => t.endpoint_overflow = raw.parse()?,
            "datagram_drop_every" => t.datagram_drop_every = parse_usize(raw)?,
            "datagram_drop_seed" => t.datagram_drop_seed = parse_u64(raw)?,
            "collective_checks" => t.collective_checks = parse_bool(raw)?,
            _ => return Err(format!("unknown setting {name}")),
        }
        Ok(())
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
    if unit.starts_with('.') && unit[1..].starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!(
            "`{s}` is not a whole number (give an integer, with an optional K, M or G suffix)"
        ));
    }
    let n: u64 = match num.parse() {
        Ok(n) => n,
        Err(_) if !num.is_empty() => return Err(format!("`{s}` is too large (at most {})", u64::MAX)),
        Err(_) => {
            return Err(format!(
                "`{s}` is not a number (sizes may use a K, M or G suffix)"
            ))
        }
    };
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" | "kb" => 1 << 10,
        "m" | "mib" | "mb" => 1 << 20,
        "g" | "gib" | "gb" => 1 << 30,
        _ => return Err(format!("`{s}` has an unknown unit (use K, M or G)")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large (at most {})", u64::MAX))
}

fn parse_u64(s: &str) -> std::result::Result<u64, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number from 0 to {}", u64::MAX))
}

fn parse_usize(s: &str) -> std::result::Result<usize, String> {
    let v = parse_bytes(s)?;
    usize::try_from(v).map_err(|_| format!("`{s}` is too large"))
}

/// `BALLAST_VERBS_TRACE` (docs/CONFIG.md; only with the `trace` cargo feature): the verbs
/// fabric's diagnostic timings, `1` (clock reads) or `tsc` (cycle stamps). Not part of
/// [`RuntimeConfig`]: a diagnostic switch, read when a verbs fabric is created.
#[cfg(feature = "trace")]
pub(crate) fn verbs_trace() -> Option<String> {
    std::env::var("BALLAST_VERBS_TRACE").ok()
}

/// `BALLAST_DEBUG` (docs/CONFIG.md): set (to anything but empty or `0`), libballast prints
/// the panics it catches at its C boundary to stderr (their message is always
/// `ballast_last_error`'s). Not part of [`RuntimeConfig`]: a diagnostic switch, read when a
/// panic is caught.
pub fn debug() -> bool {
    std::env::var_os("BALLAST_DEBUG").is_some_and(|v| !v.is_empty() && v != "0")
}
