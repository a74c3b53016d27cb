//! Raw-verbs ping-pong (feature `verbs`): a diagnostic beside `verbs_pingpong` that runs
//! no Ballast engine or fabric, only one RC queue pair per side (the verbs calls are in
//! `ballast_runtime::verbs::raw_pingpong`). By default it is set up like perftest's
//! `ib_send_lat` (a CQ each for sends and receives, one receive posted and reposted at once,
//! one SGE, inline, every send signalled, polls of one); switches move one setting at a time
//! toward what Ballast's fabric does, to find which one costs the latency.
//!
//! `verbs_raw_pingpong [--variants a,b,..] [switches]` starts the responder on
//! `$RXE_VM_DEV` (or `--devices A,B`) and, per variant, an initiator child on `$RXE_VM_DEV2`,
//! which prints one line: the median (as perftest's `t_typical`) and mean half round trip.
//! Switches (applied on top of every variant): `--iters N` (2000), `--size B` (8), `--srq`,
//! `--sge2` (32 B header + payload), `--imm`, `--signal-every N`, `--one-cq`, `--cq N`,
//! `--sq N`, `--rx N` (receives posted), `--no-inline`, `--batch N` (completions per poll),
//! `--pool BYTES` (registered region), `--slot BYTES` (receive buffer), `--yield`,
//! `--clock-idle` (the runtime's idle loop: a clock read and a yield per empty poll after 64),
//! `--mesh-every N` (every N polls, what the control channel does: see `--mesh-what`),
//! `--mesh-what 1|2|4` (1 a non-blocking `accept`, 2 a `read` of an idle TCP stream, 4 a
//! poll(2) of the listener and `accept` only if readable; bits combine, default 3),
//! `--time-post` (also print the median `ibv_post_send` duration), `--timeout T`,
//! `--wait-send` (the initiator waits for its send completion first), `--one-way` (each
//! side stamps the cycle counter into the payload before `ibv_post_send` and prints the
//! median time to the poll that saw it on the other side), `--quiet-us N` (spin N us
//! before each send), `--idle-lines N` (read N cache lines after each empty poll: a heavier
//! idle loop), `--pre-lines N` (read N cache lines before each send).
//! Variants: `perftest` (the defaults; it also prints `raw_verbs_8B_half_rtt_us=`), `ballast`
//! (every verbs setting of Ballast's fabric: SRQ of 64, two SGEs, immediate data, one CQ of
//! 1024, SQ 64, polls of 32, a 526 KB pool of 8224 B slots, yields when idle, timeout 16), and
//! each single setting alone: `srq`, `sge2`, `imm`, `one-cq`, `cq1024`, `sq64`, `rx64`,
//! `batch32`, `pool`, `yield`, `timeout16`; also `backoff` (= `--clock-idle`), `mesh`
//! (`--mesh-every 64`), `wait-send`, `unsignalled` (every 64th send signalled); `a+b` combines.
//! Findings: docs/BENCHMARKS.md, verbs section, "Third pass".

use std::net::{TcpListener, TcpStream};
use std::process::Command;

use ballast_runtime::config::VerbsConfig;
use ballast_runtime::verbs::raw_pingpong::{run, RawOptions};

fn variant(name: &str) -> RawOptions {
    let mut o = RawOptions::default();
    let all = name == "ballast";
    for part in name.split('+') {
        let p = if all { "*" } else { part };
        if p == "*" || p == "srq" {
            o.srq = true;
            o.rx_depth = 64;
        }
        if p == "*" || p == "sge2" {
            o.two_sges = true;
        }
        if p == "*" || p == "imm" {
            o.imm = true;
        }
        if p == "*" || p == "one-cq" {
            o.one_cq = true;
        }
        if p == "*" || p == "cq1024" {
            o.cq_entries = 1024;
        }
        if p == "*" || p == "sq64" {
            o.sq_depth = 64;
        }
        if p == "*" || p == "rx64" {
            o.rx_depth = 64;
        }
        if p == "*" || p == "batch32" {
            o.poll_batch = 32;
        }
        if p == "*" || p == "pool" {
            o.pool_bytes = 64 * 8224 + 4096;
            o.recv_slot = 8224;
        }
        if p == "*" || p == "yield" {
            o.yield_idle = true;
        }
        if p == "*" || p == "timeout16" {
            o.timeout = 16;
        }
        if p == "*" || p == "mesh" {
            o.mesh_every = 64;
        }
        if p == "backoff" {
            o.clock_idle = true;
        }
        if p == "wait-send" {
            o.wait_send = true;
        }
        if p == "unsignalled" {
            o.signal_every = 64;
        }
    }
    o
}

fn apply(o: &mut RawOptions, args: &[String]) {
    let val = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(|v| v.parse::<usize>().expect("a number"));
    let has = |name: &str| args.iter().any(|a| a == name);
    if let Some(v) = val("--iters") {
        o.iters = v;
    }
    if let Some(v) = val("--size") {
        o.size = v;
    }
    o.srq |= has("--srq");
    o.two_sges |= has("--sge2");
    o.imm |= has("--imm");
    o.one_cq |= has("--one-cq");
    o.yield_idle |= has("--yield");
    o.wait_send |= has("--wait-send");
    o.clock_idle |= has("--clock-idle");
    o.time_post |= has("--time-post");
    o.one_way |= has("--one-way");
    if let Some(q) = args.iter().position(|a| a == "--pre-lines").and_then(|i| args.get(i + 1)) {
        o.pre_lines = q.parse().expect("--pre-lines N");
    }
    if let Some(q) = args.iter().position(|a| a == "--idle-lines").and_then(|i| args.get(i + 1)) {
        o.idle_lines = q.parse().expect("--idle-lines N");
    }
    if let Some(q) = args.iter().position(|a| a == "--quiet-us").and_then(|i| args.get(i + 1)) {
        o.quiet_us = q.parse().expect("--quiet-us N");
    }
    if has("--no-inline") {
        o.inline = false;
    }
    if let Some(v) = val("--signal-every") {
        o.signal_every = v as u32;
    }
    if let Some(v) = val("--cq") {
        o.cq_entries = v as u32;
    }
    if let Some(v) = val("--sq") {
        o.sq_depth = v as u32;
    }
    if let Some(v) = val("--rx") {
        o.rx_depth = v as u32;
    }
    if let Some(v) = val("--batch") {
        o.poll_batch = v;
    }
    if let Some(v) = val("--pool") {
        o.pool_bytes = v;
    }
    if let Some(v) = val("--slot") {
        o.recv_slot = v;
    }
    if let Some(v) = val("--mesh-every") {
        o.mesh_every = v as u64;
    }
    if let Some(v) = val("--mesh-what") {
        o.mesh_what = v as u8;
    }
    if let Some(v) = val("--timeout") {
        o.timeout = v as u8;
    }
}

fn sel(dev: Option<&String>) -> VerbsConfig {
    let mut s = VerbsConfig::from_vars(|k| std::env::var(k).ok()).unwrap_or_else(|e| {
        eprintln!("verbs_raw_pingpong: {e}");
        std::process::exit(2)
    });
    if let Some(d) = dev {
        s.device = Some(d.clone());
    }
    s
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let devices: Vec<String> = match flag("--devices") {
        Some(d) => d.split(',').map(String::from).collect(),
        None => ["RXE_VM_DEV", "RXE_VM_DEV2"].iter().filter_map(|v| std::env::var(v).ok()).collect(),
    };
    if let Some(port) = flag("--connect") {
        // The initiator (child).
        let name = flag("--variant").unwrap_or_else(|| "perftest".into());
        let mut o = variant(&name);
        apply(&mut o, &args);
        let mut s = TcpStream::connect(("127.0.0.1", port.parse::<u16>().expect("port"))).expect("connect to the responder");
        s.set_nodelay(true).ok();
        match run(&sel(devices.get(1)), &mut s, true, &o) {
            Ok(mut v) => {
                if o.time_post {
                    let mut p = v.split_off(o.iters);
                    p.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
                    println!("raw {name:<24} ibv_post_send median {:.2} us, p10 {:.2} us", p[p.len() / 2] * 1e6, p[p.len() / 10] * 1e6);
                }
                let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
                v.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
                let med = v.get(v.len() / 2).copied().unwrap_or(0.0);
                println!("raw {name:<24} {:>6} B x{:<6} typical {:>9.2} us  mean {:>9.2} us", o.size, o.iters, med * 1e6, mean * 1e6);
                if name == "perftest" && o.size == 8 {
                    println!("raw_verbs_8B_half_rtt_us={:.2}", med * 1e6);
                }
            }
            Err(e) => {
                eprintln!("verbs_raw_pingpong initiator ({name}): {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    match ballast_runtime::verbs::device_names() {
        Ok(d) if !d.is_empty() => {}
        Ok(_) => {
            println!("verbs_raw_pingpong: skipped: no RDMA device on this machine");
            return;
        }
        Err(e) => {
            println!("verbs_raw_pingpong: skipped: {e}");
            return;
        }
    }
    let variants = flag("--variants").unwrap_or_else(|| "perftest".into());
    let mut ok = true;
    for name in variants.split(',') {
        let mut o = variant(name);
        apply(&mut o, &args);
        let l = TcpListener::bind("127.0.0.1:0").expect("listen");
        let port = l.local_addr().expect("addr").port();
        let mut child = Command::new(std::env::current_exe().expect("own path"))
            .args(&args)
            .args(["--connect", &port.to_string(), "--variant", name])
            .spawn()
            .expect("spawn the initiator");
        let (mut s, _) = l.accept().expect("accept");
        s.set_nodelay(true).ok();
        if let Err(e) = run(&sel(devices.first()), &mut s, false, &o) {
            eprintln!("verbs_raw_pingpong responder ({name}): {e}");
            ok = false;
        }
        ok &= child.wait().map(|s| s.success()).unwrap_or(false);
    }
    std::process::exit(i32::from(!ok));
}
