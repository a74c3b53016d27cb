//! Raw-verbs ping-pong (feature `verbs`): a diagnostic beside `verbs_pingpong` that runs
//! no Ballast engine or fabric, only one RC queue pair per side (the verbs calls are in
//! `ballast_bench::raw_pingpong`, over `ballast-ibv`). By default it is set up like perftest's
//! `ib_send_lat` (a CQ each for sends and receives, one receive posted and reposted at once,
//! one SGE, inline, every send signalled, polls of one); switches move one setting at a time
//! toward what Ballast's fabric does, to find which one costs the latency.
//!
//! `verbs_raw_pingpong [--variants a,b,..] [switches]` starts the responder on
//! `$RXE_VM_DEV` (or `--devices A,B`) and, per variant, an initiator child on `$RXE_VM_DEV2`,
//! which prints one line: the median (as perftest's `t_typical`) and mean half round trip.
//! Switches (`verbs_raw_pingpong --help` lists them with their defaults) apply on top of
//! every variant: each moves one setting (`--srq`, `--cq N`, ...) or adds a diagnostic
//! (`--one-way`, `--time-post`, ...).
//! Variants: `perftest` (the defaults; it also prints `raw_verbs_8B_half_rtt_us=`), `ballast`
//! (every verbs setting of Ballast's fabric: SRQ of 64, two SGEs, immediate data, one CQ of
//! 1024, SQ 64, polls of 32, a 526 KB pool of 8224 B slots, timeout 16, and the runtime's idle
//! loop `backoff`; also inside a combination, `ballast+mesh`), and
//! each single setting alone: `srq`, `sge2`, `imm`, `one-cq`, `cq1024`, `sq64`, `rx64`,
//! `batch32`, `pool`, `yield`, `timeout16`; also `backoff` (= `--clock-idle`), `mesh`
//! (`--mesh-every 64`), `wait-send`, `unsignalled` (every 64th send signalled); `a+b` combines;
//! an unknown name is an error.
//! Findings: docs/BENCHMARKS.md, "Soft-RoCE in the QEMU guest".

use std::net::{TcpListener, TcpStream};
use std::process::Command;

use ballast_bench::raw_pingpong::{run, RawOptions};
use ballast_runtime::VerbsConfig;
use clap::Parser;

/// Raw-verbs ping-pong: one RC queue pair per side, no Ballast engine or fabric, set up like
/// perftest's ib_send_lat by default; switches move one setting at a time toward what
/// Ballast's fabric does.
#[derive(Parser, Debug)]
#[command(
    name = "verbs_raw_pingpong",
    bin_name = "verbs_raw_pingpong",
    after_help = "Variants: perftest (the defaults; it also prints raw_verbs_8B_half_rtt_us=), ballast (every \
                  verbs setting of Ballast's fabric: SRQ of 64, two SGEs, immediate data, one CQ of 1024, SQ 64, \
                  polls of 32, a 526 KB pool of 8224 B slots, timeout 16, and the runtime's idle loop backoff), and each single \
                  setting alone: srq, sge2, imm, one-cq, cq1024, sq64, rx64, batch32, pool, yield, timeout16; \
                  also backoff (= --clock-idle), mesh (--mesh-every 64), wait-send, unsignalled (every 64th \
                  send signalled); a+b combines. Switches apply on top of every variant: flags add to its \
                  settings, values replace them."
)]
struct Args {
    /// Variants to run, one initiator child each (see below)
    #[arg(
        long,
        value_name = "a,b,..",
        value_delimiter = ',',
        default_value = "perftest"
    )]
    variants: Vec<String>,
    /// RDMA devices of the responder and the initiator [default: $RXE_VM_DEV,$RXE_VM_DEV2]
    #[arg(long, value_name = "A,B", value_delimiter = ',')]
    devices: Vec<String>,
    /// Internal: run as the initiator child, connecting to the responder on this port.
    #[arg(long, value_name = "PORT", hide = true, overrides_with = "connect")]
    connect: Option<u16>,
    /// Internal: the initiator child's variant.
    #[arg(long, value_name = "NAME", hide = true, overrides_with = "variant")]
    variant: Option<String>,
    #[command(flatten)]
    switches: Switches,
}

/// The switches applied on top of every variant's settings ([`apply`]).
#[derive(clap::Args, Debug)]
struct Switches {
    /// Round trips [default: 2000]
    #[arg(long, value_name = "N")]
    iters: Option<usize>,
    /// Payload bytes per message [default: 8]
    #[arg(long, value_name = "B")]
    size: Option<usize>,
    /// Receives go to a shared receive queue
    #[arg(long)]
    srq: bool,
    /// The send gathers a 32 B header and the payload (two SGEs)
    #[arg(long)]
    sge2: bool,
    /// SEND_WITH_IMM instead of SEND
    #[arg(long)]
    imm: bool,
    /// Every N-th send is signalled [default: 1]
    #[arg(long, value_name = "N")]
    signal_every: Option<u32>,
    /// One CQ for sends and receives
    #[arg(long)]
    one_cq: bool,
    /// Entries per CQ [default: 128]
    #[arg(long, value_name = "N")]
    cq: Option<u32>,
    /// Send queue depth [default: 128]
    #[arg(long, value_name = "N")]
    sq: Option<u32>,
    /// Receives posted [default: 1]
    #[arg(long, value_name = "N")]
    rx: Option<u32>,
    /// No inline sends
    #[arg(long)]
    no_inline: bool,
    /// Completions per poll [default: 1]
    #[arg(long, value_name = "N")]
    batch: Option<usize>,
    /// Bytes of the registered region [default: what is needed]
    #[arg(long, value_name = "BYTES")]
    pool: Option<usize>,
    /// Receive buffer bytes [default: 4096]
    #[arg(long, value_name = "BYTES")]
    slot: Option<usize>,
    /// sched_yield after an empty poll
    #[arg(long = "yield")]
    yield_idle: bool,
    /// The runtime's idle loop: a clock read and a yield per empty poll after 64
    #[arg(long)]
    clock_idle: bool,
    /// Every N polls, what the control channel does (see --mesh-what) [default: 0, never]
    #[arg(long, value_name = "N")]
    mesh_every: Option<u64>,
    /// What --mesh-every does, bits: 1 a non-blocking accept, 2 a read of an idle TCP stream, 4 a poll(2) of the listener and accept only if readable [default: 3]
    #[arg(long, value_name = "N")]
    mesh_what: Option<u8>,
    /// Also print the median ibv_post_send duration
    #[arg(long)]
    time_post: bool,
    /// RC ACK timeout exponent [default: 14]
    #[arg(long, value_name = "T")]
    timeout: Option<u8>,
    /// The initiator waits for its send completion first
    #[arg(long)]
    wait_send: bool,
    /// Each side stamps the cycle counter into the payload before ibv_post_send and prints the median time to the poll that saw it on the other side
    #[arg(long)]
    one_way: bool,
    /// Spin N us before each send
    #[arg(long, value_name = "N")]
    quiet_us: Option<u64>,
    /// Read N cache lines after each empty poll (a heavier idle loop)
    #[arg(long, value_name = "N")]
    idle_lines: Option<usize>,
    /// Read N cache lines before each send
    #[arg(long, value_name = "N")]
    pre_lines: Option<usize>,
}

/// The parts a variant name may combine with `+`.
const PARTS: [&str; 17] = [
    "perftest",
    "ballast",
    "srq",
    "sge2",
    "imm",
    "one-cq",
    "cq1024",
    "sq64",
    "rx64",
    "batch32",
    "pool",
    "yield",
    "timeout16",
    "backoff",
    "mesh",
    "wait-send",
    "unsignalled",
];

/// The settings of variant `name` (parts joined by `+`); an unknown part is an error.
fn variant(name: &str) -> Result<RawOptions, String> {
    let mut o = RawOptions::default();
    for part in name.split('+') {
        if !PARTS.contains(&part) {
            return Err(format!(
                "unknown variant `{part}` in `{name}` (known: {})",
                PARTS.join(", ")
            ));
        }
        // `ballast`: every verbs setting of Ballast's fabric, and its idle loop (`backoff`).
        let p = if part == "ballast" { "*" } else { part };
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
        if p == "yield" {
            o.yield_idle = true;
        }
        if p == "*" || p == "timeout16" {
            o.timeout = 16;
        }
        if p == "mesh" {
            o.mesh_every = 64;
        }
        if p == "*" || p == "backoff" {
            o.clock_idle = true;
        }
        if p == "wait-send" {
            o.wait_send = true;
        }
        if p == "unsignalled" {
            o.signal_every = 64;
        }
    }
    Ok(o)
}

/// The switches on top of a variant's settings: flags add to them, values replace them.
fn apply(o: &mut RawOptions, a: &Switches) {
    if let Some(v) = a.iters {
        o.iters = v;
    }
    if let Some(v) = a.size {
        o.size = v;
    }
    o.srq |= a.srq;
    o.two_sges |= a.sge2;
    o.imm |= a.imm;
    o.one_cq |= a.one_cq;
    o.yield_idle |= a.yield_idle;
    o.wait_send |= a.wait_send;
    o.clock_idle |= a.clock_idle;
    o.time_post |= a.time_post;
    o.one_way |= a.one_way;
    if let Some(v) = a.pre_lines {
        o.pre_lines = v;
    }
    if let Some(v) = a.idle_lines {
        o.idle_lines = v;
    }
    if let Some(v) = a.quiet_us {
        o.quiet_us = v;
    }
    if a.no_inline {
        o.inline = false;
    }
    if let Some(v) = a.signal_every {
        o.signal_every = v;
    }
    if let Some(v) = a.cq {
        o.cq_entries = v;
    }
    if let Some(v) = a.sq {
        o.sq_depth = v;
    }
    if let Some(v) = a.rx {
        o.rx_depth = v;
    }
    if let Some(v) = a.batch {
        o.poll_batch = v;
    }
    if let Some(v) = a.pool {
        o.pool_bytes = v;
    }
    if let Some(v) = a.slot {
        o.recv_slot = v;
    }
    if let Some(v) = a.mesh_every {
        o.mesh_every = v;
    }
    if let Some(v) = a.mesh_what {
        o.mesh_what = v;
    }
    if let Some(v) = a.timeout {
        o.timeout = v;
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
    let args = Args::parse();
    if let Some(e) = args.variants.iter().find_map(|v| variant(v).err()) {
        eprintln!("verbs_raw_pingpong: {e}");
        std::process::exit(2);
    }
    // Forwarded as given to each initiator child (which parses them again).
    let forward: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let devices: Vec<String> = if args.devices.is_empty() {
        ["RXE_VM_DEV", "RXE_VM_DEV2"]
            .iter()
            .filter_map(|v| std::env::var(v).ok())
            .collect()
    } else {
        args.devices.clone()
    };
    if let Some(port) = args.connect {
        // The initiator (child).
        let name = args.variant.clone().unwrap_or_else(|| "perftest".into());
        let mut o = variant(&name).unwrap_or_else(|e| {
            eprintln!("verbs_raw_pingpong: {e}");
            std::process::exit(2)
        });
        apply(&mut o, &args.switches);
        let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the responder");
        s.set_nodelay(true).ok();
        match run(&sel(devices.get(1)), &mut s, true, &o) {
            Ok(mut v) => {
                if o.time_post {
                    let mut p = v.split_off(o.iters);
                    p.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
                    println!(
                        "raw {name:<24} ibv_post_send median {:.2} us, p10 {:.2} us",
                        p[p.len() / 2] * 1e6,
                        p[p.len() / 10] * 1e6
                    );
                }
                let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
                v.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
                let med = v.get(v.len() / 2).copied().unwrap_or(0.0);
                println!(
                    "raw {name:<24} {:>6} B x{:<6} typical {:>9.2} us  mean {:>9.2} us",
                    o.size,
                    o.iters,
                    med * 1e6,
                    mean * 1e6
                );
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
    match ballast_runtime::verbs::device::device_names() {
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
    let mut ok = true;
    for name in &args.variants {
        let mut o = variant(name).expect("checked above");
        apply(&mut o, &args.switches);
        let l = TcpListener::bind("127.0.0.1:0").expect("listen");
        let port = l.local_addr().expect("addr").port();
        let mut child = Command::new(std::env::current_exe().expect("own path"))
            .args(&forward)
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

#[cfg(test)]
mod tests {
    #[test]
    fn cli() {
        // The imports are in here: the `cargo bench` target compiles this module with
        // `cfg(test)` but without the test harness, which drops `#[test]` functions.
        use super::*;
        use clap::CommandFactory;
        Args::command().debug_assert();
        let a = Args::try_parse_from(["verbs_raw_pingpong"]).expect("no switches");
        assert_eq!(a.variants, ["perftest"]);
        let mut o = variant("ballast").expect("ballast");
        apply(&mut o, &a.switches);
        assert_eq!(
            (
                o.srq,
                o.rx_depth,
                o.cq_entries,
                o.timeout,
                o.inline,
                o.clock_idle,
                o.yield_idle,
                o.mesh_every
            ),
            (true, 64, 1024, 16, true, true, false, 0)
        );
        let o = variant("ballast+mesh").expect("ballast+mesh");
        assert_eq!((o.srq, o.mesh_every), (true, 64));
        assert!(variant("srqq").is_err());
        assert!(variant("srq+nope").is_err());
        // What the parent passes its child: its own switches, then `--connect` and `--variant`.
        let a = Args::try_parse_from([
            "verbs_raw_pingpong",
            "--variants",
            "srq,imm",
            "--iters",
            "10",
            "--imm",
            "--no-inline",
            "--timeout",
            "7",
            "--connect",
            "4000",
            "--variant",
            "srq",
        ])
        .expect("child");
        assert_eq!((a.connect, a.variant.as_deref()), (Some(4000), Some("srq")));
        let mut o = variant(a.variant.as_deref().expect("variant")).expect("srq");
        apply(&mut o, &a.switches);
        assert_eq!(
            (o.iters, o.srq, o.imm, o.inline, o.timeout, o.size),
            (10, true, true, false, 7, 8)
        );
        assert!(Args::try_parse_from(["verbs_raw_pingpong", "--srqq"]).is_err());
        assert!(Args::try_parse_from(["verbs_raw_pingpong", "--cq", "x"]).is_err());
    }
}
