//! The transport options as the commands report them: `ballast fanout`'s refused memory
//! lock as an unprivileged user, the endpoint cap and overflow in `ballast info`, and the
//! transport charge of `ballast dry-run` past the cap.
mod common;

use std::fs;

use common::ballast;
use common::cmd::{run, stderr};
use serde_json::Value;

/// Rule 9 of issue 13: an unprivileged user whose memlock limit (8 MiB) is below what
/// `fanout --recv-sharing per-peer` on 16 ranks registers is told, in `--json` `notes` and
/// `memory_lock` and in the table, how many bytes were asked to be locked, how many were
/// locked (what VmLck shows) and the limit, instead of seeing the registered memory as
/// locked. As root (CAP_IPC_LOCK) the same run locks everything and has no note.
#[test]
fn fanout_as_an_unprivileged_user_names_the_refused_lock() {
    const LIMIT: u64 = 8 << 20;
    let Some(u) = common::Unprivileged::new("fanout_as_an_unprivileged_user_names_the_refused_lock") else {
        return;
    };
    let args = ["fanout", "--ranks", "16", "--recv-sharing", "per-peer"];
    let o = u.run(LIMIT, &[&args[..], &["--json"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let l = &v["memory_lock"];
    let (asked, locked) = (
        l["asked_bytes"].as_u64().unwrap(),
        l["locked_bytes"].as_u64().unwrap(),
    );
    assert_eq!(l["status"], "partially locked", "{v}");
    assert_eq!(l["memlock_limit_bytes"], LIMIT, "{v}");
    assert!(asked > LIMIT && locked <= LIMIT && locked > 0, "{v}");
    assert!(
        l["refused_requests"].as_u64().unwrap() > 0 && l["error"].as_str().unwrap().contains("os error"),
        "{v}"
    );
    // What is accounted as locked is what the kernel counts (the regions are whole pages).
    assert_eq!(v["after"]["vm_lck_kb"].as_u64().unwrap() * 1024, locked, "{v}");
    let notes: Vec<&str> = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(notes.len(), 1, "{v}");
    for want in [
        "all 16 ranks of this process: memory partially locked".to_string(),
        format!("asked to lock {asked} B"),
        format!("locked {locked} B"),
        format!("RLIMIT_MEMLOCK (soft) {LIMIT} B"),
    ] {
        assert!(notes[0].contains(&want), "{want:?} not in {}", notes[0]);
    }
    let o = u.run(LIMIT, &args);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        text.contains("memory lock, all ranks of this process (after): partially locked: ")
            && text.contains("note: all 16 ranks of this process: memory partially locked: asked to lock "),
        "{text}"
    );
    // The local transport has no MPI_Init: the start line says what it precedes.
    assert!(
        text.contains("\nprocess at start (before the ranks, their communicators and pools): VmRSS ")
            && !text.contains("MPI_Init"),
        "{text}"
    );

    // Root: every lock granted, no note; the footnote says where "before" is taken.
    let o = common::ballast()
        .args([&args[..], &["--json"]].concat())
        .current_dir(u.work())
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (
            v["memory_lock"]["status"].as_str(),
            v["notes"].as_array().map(Vec::len)
        ),
        (Some("locked"), Some(0)),
        "{v}"
    );
    assert_eq!(v["memory_lock"]["asked_bytes"], v["memory_lock"]["locked_bytes"]);
    let before = v["before"]["footprint_bytes"].as_u64().unwrap();
    assert!(before > 0);
    let peers_before = v["before_taken"].as_str().unwrap();
    assert!(
        peers_before.starts_with("after the setup and 2 barriers")
            && peers_before.ends_with("connected to 7 peers"),
        "{peers_before}"
    );
}

/// `ballast info` shows `endpoint_overflow`, says it has no effect without a cap, and with
/// `--max-endpoints` predicts the peers beyond the cap as datagram peers (none with
/// `evict`).
#[test]
fn info_shows_the_endpoint_overflow_and_the_datagram_peers() {
    let o = common::ballast()
        .args(["info", "--peers", "20"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("endpoint_overflow=datagram has no effect: max_endpoints is 0 (no cap)"),
        "{text}"
    );
    let row = |text: &str, name: &str| -> Vec<String> {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {text}"));
        line.split_whitespace().skip(1).map(String::from).collect()
    };
    assert_eq!(row(&text, "datagram_peers"), ["0", "0", "0"]);
    let o = common::ballast()
        .args(["info", "--peers", "20", "--max-endpoints", "8"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("peers beyond max_endpoints=8 go over the datagram path"),
        "{text}"
    );
    // per-peer and shared: 12 datagram peers; xrc has no datagram path (evict).
    assert_eq!(row(&text, "datagram_peers"), ["12", "12", "0"]);
    assert_eq!(row(&text, "endpoints_live"), ["8", "8", "8"]);
    let bytes: Vec<u64> = row(&text, "datagram_bytes")
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
    assert!(
        bytes[0] > 0 && bytes[0] <= 12 * 256,
        "at most 256 B per datagram peer: {bytes:?}"
    );
    let o = common::ballast()
        .args([
            "info",
            "--peers",
            "20",
            "--max-endpoints",
            "8",
            "--endpoint-overflow",
            "evict",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("endpoint_overflow=evict: peers beyond max_endpoints=8 evict"),
        "{text}"
    );
    assert_eq!(row(&text, "datagram_peers"), ["0", "0", "0"]);
    let o = common::ballast()
        .args(["info", "--endpoint-overflow", "sometimes"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("expected datagram or evict"));
    // One spelling: `dgram` is refused, as an option and as the variable, naming the two.
    let o = common::ballast()
        .args(["info", "--endpoint-overflow", "dgram"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "invalid value 'dgram' for '--endpoint-overflow <ENDPOINT_OVERFLOW>': \
             unknown endpoint overflow `dgram` (expected datagram or evict)"
        ),
        "{err}"
    );
    let o = common::ballast()
        .arg("info")
        .env("BALLAST_ENDPOINT_OVERFLOW", "dgram")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err,
        "ballast: error: bad value `dgram` for BALLAST_ENDPOINT_OVERFLOW: \
         unknown endpoint overflow `dgram` (expected datagram or evict)\n"
    );
}

/// `dry-run --transport-model ballast` with `--max-endpoints 2` charges each rank's peers
/// beyond the cap their datagram state with `endpoint_overflow=datagram` (the default),
/// and not with `evict`: 8 ranks that all talk to each other, 5 datagram peers each, the
/// runtime's per-peer state bytes apart.
#[test]
fn dry_run_charges_the_datagram_peers_beyond_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let transport = |mode: &str| -> Vec<f64> {
        let o = ballast()
            .current_dir(dir.path())
            .args([
                "dry-run",
                "--synthetic",
                "2000",
                "--synapses",
                "100000",
                "--num-target-ranks",
                "8",
            ])
            .args([
                "--transport-model",
                "ballast",
                "--max-endpoints",
                "2",
                "--endpoint-overflow",
                mode,
            ])
            .args(["--json", "--output-dir", mode])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let peers = j["rank_loads"]["peers"].as_array().unwrap();
        assert!(peers.iter().all(|p| p.as_u64() == Some(7)), "{peers:?}");
        j["rank_loads"]["transport_kb"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    let (dg, ev) = (transport("datagram"), transport("evict"));
    let per_peer = ballast_runtime::datagram::PEER_STATE_BYTES as f64;
    for (d, e) in dg.iter().zip(&ev) {
        assert_eq!((d - e) * 1024.0, 5.0 * per_peer, "{dg:?} vs {ev:?}");
    }
}

/// `ballast info` with a cap says what `endpoint_overflow` really does for the
/// configuration: the fallback to evict with the runtime's reason (buffers too small, xrc),
/// that it does not apply on the MPI native path, that no datagram peer is predicted when
/// `--peers` is within the cap, and the cost of the cap from the footprint model: on verbs
/// the UD QP's fixed bytes and the break-even peer count, on `local` with `shared` that a
/// datagram peer costs as much as an endpoint (the totals with and without the cap from
/// the table of each run).
#[test]
fn info_says_what_the_endpoint_overflow_really_does() {
    use ballast_runtime::{datagram::PEER_STATE_BYTES, model, MemoryModel};
    let info = |args: &[&str]| -> String {
        let o = ballast().arg("info").args(args).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    // The `total_bytes` row's column of the configured sharing mode (per-peer, shared, xrc).
    let total = |text: &str, col: usize| -> u64 {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("total_bytes"))
            .unwrap();
        line.split_whitespace().nth(1 + col).unwrap().parse().unwrap()
    };
    let t = info(&["--peers", "20", "--max-endpoints", "8", "--buffer-size", "32"]);
    assert!(
        t.contains(
            "endpoint_overflow=datagram falls back to evict: transport local fits 32 B per datagram \
             (buffer_size 32 B, datagram size 65536 B), less than 64 B; peers beyond max_endpoints=8 evict"
        ),
        "{t}"
    );
    assert!(!t.contains("go over the datagram path"), "{t}");
    let t = info(&["--peers", "20", "--max-endpoints", "8", "--recv-sharing", "xrc"]);
    assert!(
        t.contains("endpoint_overflow=datagram falls back to evict: transport local runs recv_sharing=xrc"),
        "{t}"
    );
    let t = info(&["--peers", "20", "--max-endpoints", "8", "--transport", "mpi"]);
    assert!(
        t.contains("max_endpoints=8 and endpoint_overflow=datagram do not apply: the MPI native path"),
        "{t}"
    );
    let t = info(&["--peers", "8", "--max-endpoints", "8"]);
    assert!(
        t.contains("with 8 peers (--peers) no peer goes past the cap of 8: no datagram peer is predicted"),
        "{t}"
    );
    let t = info(&[
        "--peers",
        "5",
        "--world-size",
        "30",
        "--max-endpoints",
        "8",
        "--lazy-connect",
        "off",
    ]);
    assert!(
        t.contains(
            "of 29 peers (lazy_connect off: every other rank), 8 get endpoints and 21 go past the cap"
        ),
        "{t}"
    );
    // local, shared: an endpoint costs the engine's entry, a datagram peer its state.
    let local = MemoryModel::local();
    let ep = local.endpoint_fixed_bytes + local.engine_endpoint_bytes;
    assert!(PEER_STATE_BYTES >= ep, "the premise: {PEER_STATE_BYTES} vs {ep}");
    let capped = info(&["--peers", "20", "--max-endpoints", "8"]);
    let uncapped = info(&["--peers", "20"]);
    assert!(
        capped.contains("of 20 peers (--peers), 8 get endpoints and 12 go past the cap"),
        "{capped}"
    );
    let (a, b) = (total(&capped, 1), total(&uncapped, 1));
    assert!(
        capped.contains(&format!(
            "a datagram peer costs {PEER_STATE_BYTES} B, an endpoint {ep} B: the cap bounds endpoints but \
             does not save memory on local with recv_sharing=shared (predicted total {a} B with the cap, {b} B without"
        )),
        "{capped}"
    );
    // verbs, shared: the UD QP's fixed bytes against the saving per peer past the cap.
    let verbs = MemoryModel::verbs();
    let ep = verbs.endpoint_fixed_bytes + verbs.engine_endpoint_bytes;
    let dg = PEER_STATE_BYTES + model::VERBS_UD_PEER_BYTES;
    let fixed = model::verbs_ud_fixed_bytes(8192);
    let k = fixed / (ep - dg);
    for (peers, past) in [(20u64, 12u64), (8 + k + 1, k + 1)] {
        let p = peers.to_string();
        let capped = info(&["--peers", &p, "--max-endpoints", "8", "--transport", "verbs"]);
        let uncapped = info(&["--peers", &p, "--transport", "verbs"]);
        let (a, b) = (total(&capped, 1), total(&uncapped, 1));
        assert_eq!(
            a + past * (ep - dg),
            b + fixed,
            "the model's totals: {capped}\n{uncapped}"
        );
        assert!(
            capped.contains(&format!(
                "the UD QP costs {fixed} B per rank once a peer goes past the cap (made on first use); each peer past the cap saves {} B (endpoint {ep} B, \
                 datagram peer {dg} B): a cap saves memory once more than {k} peers go past it \
                 (predicted total {a} B with the cap, {b} B without",
                ep - dg
            )),
            "{capped}"
        );
        let verdict = if past > k {
            format!("saves {} B per rank", b - a)
        } else {
            format!("costs {} B more", a - b)
        };
        assert!(capped.contains(&format!("here the cap {verdict}")), "{capped}");
    }
}

/// `dry-run` without `--transport-model ballast` names the runtime options that have no
/// effect on stderr and leaves stdout and the files as without them; with it and a cap,
/// the estimate's transport row and `--json` `transport_cap` say which cap and overflow
/// mode the charge used (the fallback to evict with its reason), and nothing without a cap.
#[test]
fn dry_run_says_which_cap_the_transport_charge_used() {
    let dir = tempfile::tempdir().unwrap();
    let input = [
        "dry-run",
        "--synthetic",
        "2000",
        "--synapses",
        "100000",
        "--num-target-ranks",
        "8",
    ];
    let dry_run = |out: &str, extra: &[&str]| -> (String, String) {
        let o = run(&[&input[..], &["--output-dir", out], extra].concat(), dir.path());
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        // The balancing time and the output directory aside.
        let text = String::from_utf8_lossy(&o.stdout);
        let text: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with("ballast dry-run: "))
            .map(|l| l.replace(out, "OUT"))
            .collect();
        (text.join("\n"), stderr(&o))
    };
    let (plain, plain_err) = dry_run("plain", &[]);
    let (opts, opts_err) = dry_run("opts", &["--max-endpoints", "2", "--endpoint-overflow", "evict"]);
    assert_eq!(plain, opts);
    assert!(!plain_err.contains("no effect"), "{plain_err}");
    assert!(
        opts_err.contains(
            "note: --max-endpoints, --endpoint-overflow have no effect: without --transport-model ballast no transport memory is charged"
        ),
        "{opts_err}"
    );
    for f in ["allocation_r8_c1.pkl.gz", "allocation_r8_c1.json"] {
        let read = |d: &str| fs::read(dir.path().join(d).join(f)).unwrap();
        assert_eq!(read("plain"), read("opts"), "{f}");
    }
    let row = |text: &str| -> String {
        text.lines()
            .find(|l| l.starts_with("Transport (Ballast)"))
            .unwrap()
            .to_string()
    };
    let charged = ["--transport-model", "ballast"];
    let (t, _) = dry_run("uncapped", &charged);
    let r = row(&t);
    assert!(
        !r.contains("max_endpoints") && r.ends_with(|c: char| c.is_ascii_digit()),
        "{t}"
    );
    let (t, _) = dry_run("capped", &[&charged[..], &["--max-endpoints", "2"]].concat());
    assert!(
        row(&t).ends_with("  (max_endpoints=2, endpoint_overflow=datagram: peers past the cap charged their datagram state)"),
        "{t}"
    );
    let (t, _) = dry_run(
        "small",
        &[&charged[..], &["--max-endpoints", "2", "--buffer-size", "32"]].concat(),
    );
    assert!(
        row(&t).ends_with(
            "  (max_endpoints=2, endpoint_overflow=datagram falls back to evict: transport local fits 32 B per \
             datagram (buffer_size 32 B, datagram size 65536 B), less than 64 B; at most 2 endpoints charged, \
             nothing for the peers past the cap)"
        ),
        "{t}"
    );
    let json = |out: &str, extra: &[&str]| -> Value {
        let (t, _) = dry_run(out, &[&charged[..], extra, &["--json"]].concat());
        serde_json::from_str(&t).unwrap()
    };
    assert!(json("j0", &[]).get("transport_cap").is_none());
    let cap = |j: Value| {
        let c = &j["transport_cap"];
        (
            c["max_endpoints"].as_u64(),
            c["endpoint_overflow"].clone(),
            c["charged_as"].clone(),
            c["fallback"].clone(),
        )
    };
    assert_eq!(
        cap(json("j1", &["--max-endpoints", "2"])),
        (Some(2), "datagram".into(), "datagram".into(), Value::Null)
    );
    assert_eq!(
        cap(json(
            "j2",
            &["--max-endpoints", "3", "--endpoint-overflow", "evict"]
        )),
        (Some(3), "evict".into(), "evict".into(), Value::Null)
    );
    let (_, _, charged_as, why) = cap(json("j3", &["--max-endpoints", "2", "--recv-sharing", "xrc"]));
    assert_eq!(charged_as, "evict");
    assert!(
        why.as_str()
            .unwrap()
            .starts_with("transport local runs recv_sharing=xrc"),
        "{why}"
    );
}
