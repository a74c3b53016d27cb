//! Tests of the configuration: environment parsing, the builder, validation.

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
    let doc = include_str!("../../../../docs/CONFIG.md");
    for SettingVar { name, env: var } in SETTINGS {
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
fn the_job_id_comes_from_the_launcher_of_the_rank_first() {
    let job = |v: &[(&str, &str)]| RuntimeConfig::from_vars(vars(v)).map(|c| c.bootstrap().job.clone());
    let slurm = [("SLURM_JOB_ID", "4711"), ("SLURM_STEP_ID", "2")];
    let ompi = [
        ("OMPI_MCA_ess_base_jobid", "1647050753"),
        ("PMIX_NAMESPACE", "1647050753"),
    ];
    assert_eq!(job(&slurm).unwrap().as_deref(), Some("slurm-4711.2"));
    assert_eq!(job(&slurm[..1]).unwrap().as_deref(), Some("slurm-4711"));
    assert_eq!(job(&ompi).unwrap().as_deref(), Some("pmix-1647050753"));
    assert_eq!(job(&ompi[..1]).unwrap().as_deref(), Some("ompi-1647050753"));
    // mpirun inside a Slurm allocation: Open MPI's rank, so Open MPI's job.
    let both: Vec<_> = slurm
        .iter()
        .chain(&ompi)
        .copied()
        .chain([("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "2")])
        .collect();
    assert_eq!(job(&both).unwrap().as_deref(), Some("pmix-1647050753"));
    assert_eq!(job(&both[..4]).unwrap().as_deref(), Some("slurm-4711.2"));
    assert_eq!(job(&[]).unwrap(), None);
    for (var, bad) in [
        ("SLURM_JOB_ID", "a/b"),
        ("PMIX_NAMESPACE", ""),
        ("SLURM_STEP_ID", &"9".repeat(65)),
    ] {
        let v = match var {
            "SLURM_STEP_ID" => vec![("SLURM_JOB_ID", "1"), (var, bad)],
            _ => vec![(var, bad)],
        };
        let err = job(&v).unwrap_err().to_string();
        assert!(err.contains(var) && err.contains("not a job id"), "{err}");
    }
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
    let doc = include_str!("../../../../docs/CONFIG.md");
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

#[test]
fn builder_set_takes_setting_names_and_variable_syntax() {
    let cfg = RuntimeConfig::from_vars(vars(&[("BALLAST_BUFFER_COUNT", "8")]))
        .unwrap()
        .to_builder()
        .set("buffer_size", "16K")
        .unwrap()
        .set("recv_sharing", "per-peer")
        .unwrap()
        .set("lazy_connect", "off")
        .unwrap()
        .build()
        .unwrap();
    let t = cfg.transport();
    assert_eq!((t.buffer_count, t.buffer_size), (8, 16384));
    assert_eq!(t.recv_sharing, RecvSharing::PerPeer);
    assert!(!t.lazy_connect);
    let s = cfg.settings();
    let origin = |n: &str| s.iter().find(|s| s.name == n).unwrap().origin;
    assert_eq!(origin("buffer_size"), ValueOrigin::Builder);
    assert_eq!(origin("buffer_count"), ValueOrigin::Env);

    let e = RuntimeConfig::builder().set("buffer_sise", "1").unwrap_err();
    assert!(
        matches!(&e, ConfigError::Setting { value, .. } if value == "buffer_sise"),
        "{e}"
    );
    assert!(
        e.to_string().contains("buffer_size"),
        "lists the known names: {e}"
    );
    let e = RuntimeConfig::builder().set("lazy_connect", "maybe").unwrap_err();
    assert!(
        matches!(
            e,
            ConfigError::Setting {
                name: "lazy_connect",
                ..
            }
        ),
        "{e}"
    );
    // Parsed by `set`, range-checked by `build`, which names the setting.
    let e = RuntimeConfig::builder()
        .set("buffer_size", "0")
        .unwrap()
        .build()
        .unwrap_err();
    assert!(
        matches!(
            e,
            ConfigError::Setting {
                name: "buffer_size",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn endpoint_overflow_defaults_to_datagram_and_parses() {
    let d = RuntimeConfig::from_vars(vars(&[])).unwrap();
    assert_eq!(d.transport().endpoint_overflow, EndpointOverflow::Datagram);
    assert_eq!(d.transport().datagram_drop_every, 0);
    let e = RuntimeConfig::from_vars(vars(&[
        ("BALLAST_ENDPOINT_OVERFLOW", "Evict"),
        ("BALLAST_DATAGRAM_DROP_EVERY", "7"),
    ]))
    .unwrap();
    assert_eq!(e.transport().endpoint_overflow, EndpointOverflow::Evict);
    assert_eq!(e.transport().datagram_drop_every, 7);
    assert_eq!(e.transport().datagram_drop_seed, 0, "the default pattern");
    let seeded =
        RuntimeConfig::from_vars(vars(&[("BALLAST_DATAGRAM_DROP_SEED", "18446744073709551615")])).unwrap();
    assert_eq!(seeded.transport().datagram_drop_seed, u64::MAX);
    let err = RuntimeConfig::from_vars(vars(&[("BALLAST_DATAGRAM_DROP_SEED", "7K")])).unwrap_err();
    assert!(err.to_string().contains("BALLAST_DATAGRAM_DROP_SEED"), "{err}");
    let s = e.settings();
    let o = s.iter().find(|s| s.name == "endpoint_overflow").unwrap();
    assert_eq!(
        (o.value.as_str(), o.origin, o.env),
        ("evict", ValueOrigin::Env, "BALLAST_ENDPOINT_OVERFLOW")
    );
    let err = RuntimeConfig::from_vars(vars(&[("BALLAST_ENDPOINT_OVERFLOW", "drop")])).unwrap_err();
    assert!(err.to_string().contains("BALLAST_ENDPOINT_OVERFLOW"), "{err}");
    // One spelling: `dgram` is not taken for `datagram`, and the error lists the names.
    let err = RuntimeConfig::from_vars(vars(&[("BALLAST_ENDPOINT_OVERFLOW", "dgram")])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "bad value `dgram` for BALLAST_ENDPOINT_OVERFLOW: unknown endpoint overflow `dgram` (expected datagram or evict)"
    );
    let err = RuntimeConfig::builder()
        .set("endpoint_overflow", "dgram")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "bad value `dgram` for endpoint_overflow (given in code or as a command-line option; \
         variable BALLAST_ENDPOINT_OVERFLOW): unknown endpoint overflow `dgram` (expected datagram or evict)"
    );
    let b = RuntimeConfig::builder()
        .set("endpoint_overflow", "datagram")
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(b.transport().endpoint_overflow, EndpointOverflow::Datagram);
}

#[test]
fn sizes_say_too_large_and_not_whole() {
    use super::env::parse_bytes;
    assert_eq!(parse_bytes("4K"), Ok(4096));
    let e = parse_bytes("99999999999999999999").unwrap_err();
    assert!(e.contains("is too large (at most 18446744073709551615)"), "{e}");
    let e = parse_bytes("20000000000G").unwrap_err();
    assert!(e.contains("is too large"), "{e}");
    let e = parse_bytes("1.5").unwrap_err();
    assert!(e.contains("is not a whole number"), "{e}");
    let e = parse_bytes("lots").unwrap_err();
    assert!(e.contains("is not a number"), "{e}");
    let e = parse_bytes("3Q").unwrap_err();
    assert!(e.contains("unknown unit"), "{e}");
}
