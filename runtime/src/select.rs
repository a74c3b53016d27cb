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
    /// The shared-memory transport is compiled in (Linux).
    pub shm_compiled: bool,
    /// Processes of the launch (the launcher's size; 1 without a launcher).
    pub processes: usize,
    /// The ranks on this node and the launcher variable that says so
    /// ([`crate::core::config::BootstrapConfig::node_ranks`]).
    pub node_ranks: Option<(usize, &'static str)>,
    /// The processes can meet without an RDMA device: through MPI (an MPI launch in an
    /// `mpi` build), `BALLAST_ROOT`, or the node's socket named by the launcher's job id.
    pub shm_meet: bool,
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
/// its start-up registrations fit `RLIMIT_MEMLOCK`; otherwise `shm` when compiled in and
/// the launch is of several processes that the launcher says are all on this node (and
/// that can meet); otherwise `mpi` when compiled in and launched under MPI; otherwise
/// `local`. Returns the kind and a note saying which and why,
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
    let p = i.processes;
    let shm_no = match i.node_ranks {
        // Not a launch of several processes: nothing to say about shm.
        _ if p < 2 => None,
        _ if !i.shm_compiled => Some("shm: not compiled in (Linux only)".to_string()),
        Some((n, var)) if n == p && i.shm_meet => {
            return AutoChoice {
                kind: TransportKind::Shm,
                note: format!(
                    "transport auto: {verbs_no}; using shm ({p} processes, all on this node by {var})"
                ),
            }
        }
        Some((n, var)) if n == p => Some(format!(
            "shm: the {p} processes are on this node ({var}) but have no way to meet (no job id from the \
             launcher, no BALLAST_ROOT)"
        )),
        Some((n, var)) => Some(format!("shm: {n} of the {p} processes on this node ({var})")),
        None => Some(format!(
            "shm: the launcher does not say that the {p} processes share this node"
        )),
    };
    let verbs_no = match shm_no {
        Some(s) => format!("{verbs_no}; {s}"),
        None => verbs_no,
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
    let b = config.bootstrap();
    let mpi_launch = b
        .rank_var
        .filter(|v| matches!(*v, "OMPI_COMM_WORLD_RANK" | "PMI_RANK"));
    let inputs = AutoInputs {
        verbs_compiled: cfg!(feature = "verbs"),
        verbs_device,
        verbs_locked_bytes,
        memlock_limit: crate::core::memory::memlock_limit_bytes(),
        mpi_compiled: cfg!(feature = "mpi"),
        mpi_launch,
        shm_compiled: cfg!(target_os = "linux"),
        processes: b.size.unwrap_or(1),
        node_ranks: b.node_ranks,
        shm_meet: b.job.is_some() || b.root.is_some() || (cfg!(feature = "mpi") && mpi_launch.is_some()),
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
            shm_compiled: true,
            processes: 1,
            node_ranks: None,
            shm_meet: true,
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
    fn auto_picks_shm_for_processes_of_one_node_without_a_device() {
        let no_device = AutoInputs {
            verbs_device: Err("no RDMA device found".into()),
            processes: 4,
            node_ranks: Some((4, "OMPI_COMM_WORLD_LOCAL_SIZE")),
            ..inputs()
        };
        assert_eq!(
            decide_transport(&no_device),
            AutoChoice {
                kind: TransportKind::Shm,
                note: "transport auto: verbs: no usable RDMA device (no RDMA device found); using shm (4 processes, \
                       all on this node by OMPI_COMM_WORLD_LOCAL_SIZE)"
                    .into()
            }
        );
        // A usable device still wins.
        let k = decide_transport(&AutoInputs {
            verbs_device: Ok("rxe0".into()),
            ..no_device.clone()
        })
        .kind;
        assert_eq!(k, TransportKind::Verbs);
        // Processes on several nodes, a launcher that does not say, no way to meet, no
        // shm: mpi under an MPI launch, saying why not shm.
        for (inputs, why) in [
            (
                AutoInputs {
                    node_ranks: Some((2, "OMPI_COMM_WORLD_LOCAL_SIZE")),
                    ..no_device.clone()
                },
                "shm: 2 of the 4 processes on this node (OMPI_COMM_WORLD_LOCAL_SIZE)",
            ),
            (
                AutoInputs {
                    node_ranks: None,
                    ..no_device.clone()
                },
                "shm: the launcher does not say that the 4 processes share this node",
            ),
            (
                AutoInputs {
                    shm_meet: false,
                    ..no_device.clone()
                },
                "shm: the 4 processes are on this node (OMPI_COMM_WORLD_LOCAL_SIZE) but have no way to meet",
            ),
            (
                AutoInputs {
                    shm_compiled: false,
                    ..no_device.clone()
                },
                "shm: not compiled in (Linux only)",
            ),
        ] {
            let AutoChoice { kind: k, note } = decide_transport(&inputs);
            assert_eq!(k, TransportKind::Mpi, "{note}");
            assert!(
                note.contains(why)
                    && note.ends_with("using mpi (launched under MPI: OMPI_COMM_WORLD_RANK is set)"),
                "{note}"
            );
        }
        // One process: shm is not mentioned.
        let note = decide_transport(&AutoInputs {
            processes: 1,
            node_ranks: Some((1, "OMPI_COMM_WORLD_LOCAL_SIZE")),
            ..no_device.clone()
        })
        .note;
        assert!(!note.contains("shm"), "{note}");
    }

    #[test]
    fn the_launchers_node_ranks_come_from_their_own_variables() {
        let nr = |v: &[(&str, &str)]| RuntimeConfig::from_vars(vars(v)).map(|c| c.bootstrap().node_ranks);
        let ompi = [
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ];
        assert_eq!(nr(&ompi).unwrap(), Some((4, "OMPI_COMM_WORLD_LOCAL_SIZE")));
        let hydra = [("PMI_RANK", "0"), ("PMI_SIZE", "3"), ("MPI_LOCALNRANKS", "2")];
        assert_eq!(nr(&hydra).unwrap(), Some((2, "MPI_LOCALNRANKS")));
        let srun = [
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_STEP_NUM_NODES", "1"),
            ("SLURM_NNODES", "2"),
        ];
        assert_eq!(nr(&srun).unwrap(), Some((8, "SLURM_STEP_NUM_NODES")));
        assert_eq!(
            nr(&[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "8"),
                ("SLURM_NNODES", "1")
            ])
            .unwrap(),
            Some((8, "SLURM_NNODES"))
        );
        assert_eq!(
            nr(&[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "8"),
                ("SLURM_NNODES", "2")
            ])
            .unwrap(),
            None
        );
        // Another launcher's variable does not count.
        assert_eq!(
            nr(&[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "8"),
                ("MPI_LOCALNRANKS", "8")
            ])
            .unwrap(),
            None
        );
        let e = nr(&[("PMI_RANK", "0"), ("PMI_SIZE", "3"), ("MPI_LOCALNRANKS", "x")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("MPI_LOCALNRANKS"), "{e}");
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
