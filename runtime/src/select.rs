//! The choice of transport for `BALLAST_TRANSPORT=auto`: [`decide_transport`] (pure,
//! over [`AutoInputs`], giving an [`AutoChoice`]) and [`resolve_transport`], which gathers
//! those inputs from this machine and launch (the verbs device is opened and closed again)
//! and gives a [`ResolvedTransport`].

use crate::core::config::{RuntimeConfig, TransportKind};

/// What the choice of `BALLAST_TRANSPORT=auto` weighs ([`decide_transport`]); gathered
/// from the machine by [`resolve_transport`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutoInputs {
    /// The verbs transport is compiled in.
    pub verbs_compiled: bool,
    /// The RDMA device the verbs transport would open (`Ok(name)`), or why there is none.
    pub verbs_device: std::result::Result<String, String>,
    /// Bytes the verbs transport registers (pins) at start: pool, send headers, SRQ buffers.
    pub verbs_locked_bytes: u64,
    /// `RLIMIT_MEMLOCK` (soft), bytes: `None` unknown, `u64::MAX` unlimited.
    pub memlock_limit: Option<u64>,
    /// The MPI transport is compiled in.
    pub mpi_compiled: bool,
    /// The launcher variable that shows an MPI launch (`OMPI_COMM_WORLD_RANK`, `PMI_RANK`).
    pub mpi_launch: Option<&'static str>,
}

/// What `BALLAST_TRANSPORT=auto` picks ([`decide_transport`]): the transport and the note
/// saying which and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutoChoice {
    /// The transport picked (never [`TransportKind::Auto`]).
    pub kind: TransportKind,
    /// Which and why, e.g. `transport auto: verbs: not compiled in; using mpi (...)`.
    pub note: String,
}

/// The transport a configuration runs on ([`resolve_transport`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedTransport {
    /// The transport (never [`TransportKind::Auto`]).
    pub kind: TransportKind,
    /// For `auto`, the note of its [`AutoChoice`], to print; `None` for a transport named.
    pub note: Option<String>,
}

fn kib_text(bytes: u64) -> String {
    if bytes == u64::MAX {
        "unlimited".into()
    } else {
        format!("{} KiB", bytes / 1024)
    }
}

/// The choice of `BALLAST_TRANSPORT=auto`: `verbs` when compiled in, a device is usable and
/// its start-up registrations fit `RLIMIT_MEMLOCK`; otherwise `mpi` when compiled in and
/// launched under MPI; otherwise `local`. Returns the kind and a note saying which and why,
/// e.g. `transport auto: verbs: pool needs 520 KiB locked, ulimit -l is 64 KiB; using mpi
/// (launched under MPI: OMPI_COMM_WORLD_RANK)`.
pub fn decide_transport(i: &AutoInputs) -> AutoChoice {
    let need = i.verbs_locked_bytes;
    let verbs_no = if !i.verbs_compiled {
        "verbs: not compiled in".to_string()
    } else {
        match &i.verbs_device {
            Err(why) => format!("verbs: no usable RDMA device ({why})"),
            Ok(dev) => match i.memlock_limit {
                Some(limit) if limit != u64::MAX && need > limit => {
                    format!(
                        "verbs: pool needs {} KiB locked, ulimit -l is {}",
                        need.div_ceil(1024),
                        kib_text(limit)
                    )
                }
                limit => {
                    let limit = limit.map_or("unknown".to_string(), kib_text);
                    return AutoChoice {
                        kind: TransportKind::Verbs,
                        note: format!(
                            "transport auto: using verbs (device {dev}; {} KiB to lock, ulimit -l {limit})",
                            need.div_ceil(1024)
                        ),
                    };
                }
            },
        }
    };
    match (i.mpi_compiled, i.mpi_launch) {
        (true, Some(var)) => AutoChoice {
            kind: TransportKind::Mpi,
            note: format!("transport auto: {verbs_no}; using mpi (launched under MPI: {var} is set)"),
        },
        (compiled, _) => {
            let mpi_no = if compiled {
                "mpi: not launched under MPI (no OMPI_COMM_WORLD_RANK or PMI_RANK)"
            } else {
                "mpi: not compiled in"
            };
            AutoChoice {
                kind: TransportKind::Local,
                note: format!(
                    "transport auto: {verbs_no}; {mpi_no}; using local (ranks as threads of this process)"
                ),
            }
        }
    }
}

/// The transport to use for `config`: its kind, unless that is [`TransportKind::Auto`],
/// which is resolved by [`decide_transport`] from what this machine and launch offer (the
/// verbs device is opened and closed again to check it). Returns the kind and, for `auto`,
/// the note to print. Reads no environment variable (the launch is known from
/// `BootstrapConfig::rank_var`).
pub fn resolve_transport(config: &RuntimeConfig) -> ResolvedTransport {
    let kind = config.transport().kind;
    if kind != TransportKind::Auto {
        return ResolvedTransport { kind, note: None };
    }
    #[cfg(feature = "verbs")]
    let (verbs_device, verbs_locked_bytes) = (
        crate::fabric::verbs::device::probe(config.verbs())
            .map(|c| c.name)
            .map_err(|e| e.to_string()),
        crate::fabric::verbs::locked_at_start(config.transport()),
    );
    #[cfg(not(feature = "verbs"))]
    let (verbs_device, verbs_locked_bytes) = (Err("not compiled in".to_string()), 0);
    let inputs = AutoInputs {
        verbs_compiled: cfg!(feature = "verbs"),
        verbs_device,
        verbs_locked_bytes,
        memlock_limit: crate::core::memory::memlock_limit_bytes(),
        mpi_compiled: cfg!(feature = "mpi"),
        mpi_launch: config
            .bootstrap()
            .rank_var
            .filter(|v| matches!(*v, "OMPI_COMM_WORLD_RANK" | "PMI_RANK")),
    };
    let AutoChoice { kind, note } = decide_transport(&inputs);
    ResolvedTransport {
        kind,
        note: Some(note),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    fn inputs() -> AutoInputs {
        AutoInputs {
            verbs_compiled: true,
            verbs_device: Ok("rxe0".into()),
            verbs_locked_bytes: 520 * 1024,
            memlock_limit: Some(u64::MAX),
            mpi_compiled: true,
            mpi_launch: Some("OMPI_COMM_WORLD_RANK"),
        }
    }

    #[test]
    fn auto_prefers_verbs_when_the_device_and_memlock_allow() {
        let AutoChoice { kind: k, note } = decide_transport(&inputs());
        assert_eq!(k, TransportKind::Verbs);
        assert_eq!(
            note,
            "transport auto: using verbs (device rxe0; 520 KiB to lock, ulimit -l unlimited)"
        );
        // Exactly at the limit still fits.
        let k = decide_transport(&AutoInputs {
            memlock_limit: Some(520 * 1024),
            ..inputs()
        })
        .kind;
        assert_eq!(k, TransportKind::Verbs);
        // Unknown limit: verbs is tried (registration says more if it fails).
        let AutoChoice { kind: k, note } = decide_transport(&AutoInputs {
            memlock_limit: None,
            ..inputs()
        });
        assert_eq!(k, TransportKind::Verbs);
        assert!(note.contains("ulimit -l unknown"), "{note}");
    }

    #[test]
    fn auto_falls_back_to_mpi_then_local_and_says_why() {
        let low = AutoInputs {
            memlock_limit: Some(64 * 1024),
            ..inputs()
        };
        assert_eq!(
            decide_transport(&low),
            AutoChoice {
                kind: TransportKind::Mpi,
                note: "transport auto: verbs: pool needs 520 KiB locked, ulimit -l is 64 KiB; using mpi (launched under MPI: OMPI_COMM_WORLD_RANK is set)".into()
            }
        );
        let AutoChoice { kind: k, note } = decide_transport(&AutoInputs {
            mpi_launch: None,
            ..low.clone()
        });
        assert_eq!(k, TransportKind::Local);
        assert_eq!(note, "transport auto: verbs: pool needs 520 KiB locked, ulimit -l is 64 KiB; mpi: not launched under MPI (no OMPI_COMM_WORLD_RANK or PMI_RANK); using local (ranks as threads of this process)");
        let AutoChoice { kind: k, note } = decide_transport(&AutoInputs {
            verbs_device: Err("no RDMA device found".into()),
            mpi_compiled: false,
            ..inputs()
        });
        assert_eq!(k, TransportKind::Local);
        assert!(
            note.contains("verbs: no usable RDMA device (no RDMA device found)")
                && note.contains("mpi: not compiled in"),
            "{note}"
        );
        let AutoChoice { kind: k, note } = decide_transport(&AutoInputs {
            verbs_compiled: false,
            mpi_launch: Some("PMI_RANK"),
            ..inputs()
        });
        assert_eq!(k, TransportKind::Mpi);
        assert!(
            note.starts_with("transport auto: verbs: not compiled in; using mpi")
                && note.contains("PMI_RANK"),
            "{note}"
        );
    }

    #[test]
    fn auto_parses_and_resolves_to_itself_only_when_asked() {
        let c = RuntimeConfig::from_vars(vars(&[("BALLAST_TRANSPORT", "auto")])).unwrap();
        assert_eq!(c.transport().kind, TransportKind::Auto);
        let ResolvedTransport { kind: k, note } = resolve_transport(&c);
        assert_ne!(k, TransportKind::Auto);
        assert!(note.unwrap().starts_with("transport auto: "));
        let c = RuntimeConfig::from_vars(vars(&[("BALLAST_TRANSPORT", "mpi")])).unwrap();
        assert_eq!(
            resolve_transport(&c),
            ResolvedTransport {
                kind: TransportKind::Mpi,
                note: None
            }
        );
        assert!(RuntimeConfig::from_vars(vars(&[("BALLAST_TRANSPORT", "fast")]))
            .unwrap_err()
            .to_string()
            .contains("auto"));
    }
}
