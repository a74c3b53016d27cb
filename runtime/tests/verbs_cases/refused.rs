//! A refused arrival over verbs (issue 33, `--refused-arrival`): rank 1's receive of a
//! large message is refused for memory (its address space limited with `RLIMIT_AS`), so
//! the fabric keeps the work completion, its receive slot and the rest of its CQ batch and
//! takes them first at the next poll. Once the limit is lifted the same receive gets the
//! message whole, with the right bytes, and the small messages sent after it arrive in
//! order. With the `trace` feature the fabric's counters must show the two refusals and the
//! completions kept. Every wait is bounded: a rank still waiting after [`WATCHDOG`] exits
//! 124.

use crate::*;
use ballast_runtime::{Completion, Message, Request};

/// The large message, bytes: above glibc's largest mmap threshold (32 MiB), so that its
/// buffer is always a new mapping, which `RLIMIT_AS` refuses.
const BIG: usize = 40 << 20;
/// Address space left to rank 1 above its size when the limit is set: room for the small
/// allocations of progress, far below [`BIG`].
const HEADROOM: u64 = 16 << 20;
/// Small messages sent after the large one, with the same tag.
const SMALLS: usize = 8;
const TAG: u32 = 1;
/// The end of every wait of a rank (the guest is slow under TCG).
const WATCHDOG: Duration = Duration::from_secs(120);

/// Byte `i` of the large message: varies within and across chunks, so that a chunk lost,
/// repeated or misplaced shows.
fn big_byte(i: usize) -> u8 {
    (i.wrapping_mul(131) ^ (i >> 13)) as u8
}

fn small(k: usize) -> Vec<u8> {
    vec![k as u8 + 1; 100 + k]
}

/// Progresses until `req` completes; exits the process when the watchdog's time is up.
fn wait_bounded(comm: &mut Communicator, req: Request, start: Instant, what: &str) -> Result<Completion> {
    while !comm.test(&req)? {
        if start.elapsed() > WATCHDOG {
            println!(
                "refused arrival: rank {}: {what} not done after {WATCHDOG:?}",
                comm.rank()
            );
            std::process::exit(124);
        }
        std::thread::yield_now();
    }
    comm.wait(req)
}

fn set_address_space(soft: u64) {
    let (_, hard) = rlimit::getrlimit(rlimit::Resource::AS).unwrap();
    rlimit::setrlimit(rlimit::Resource::AS, soft.min(hard), hard).unwrap();
}

/// One rank of the case, in `sharing` mode; its exit code.
pub(crate) fn child_refused_arrival(sharing: RecvSharing) -> i32 {
    let start = Instant::now();
    // Started before the limit (its stack is mapped now).
    std::thread::spawn(move || {
        std::thread::sleep(WATCHDOG + Duration::from_secs(20));
        println!("refused arrival: a rank hung (watchdog)");
        std::process::exit(124);
    });
    let cfg = RuntimeConfig::from_env()
        .unwrap()
        .to_builder()
        .recv_sharing(sharing)
        .buffer_size(64 << 10)
        .buffer_count(32)
        .recv_depth(16)
        .srq_depth(32)
        .build()
        .unwrap();
    let mut boot = TcpBootstrap::connect(cfg.bootstrap()).unwrap();
    let mut comm = verbs::communicator(&mut boot, &cfg).unwrap();
    let me = comm.rank();
    // Both queue pairs up before the limit.
    comm.send(1 - me, 9, b"hello").unwrap();
    comm.recv(1 - me, 9u32).unwrap();
    let r = if me == 0 {
        sender(&mut comm, &mut boot, start)
    } else {
        receiver(&mut comm, &mut boot, start, sharing)
    };
    // Finished together only when it went well: a failed rank exits at once, and its peer's
    // waits end with an error naming it.
    let r = match r {
        Ok(Ok(())) => verbs::finish(comm).map(Ok),
        r => r,
    };
    match r {
        Ok(Ok(())) => 0,
        Ok(Err(what)) => {
            println!("refused arrival ({sharing}): rank {me}: FAILED: {what}");
            1
        }
        Err(e) => {
            println!("refused arrival ({sharing}): rank {me}: FAILED with an error: {e}");
            1
        }
    }
}

/// Rank 0: once rank 1's limit is set, the large message, then the small ones, all
/// started at once; then waits for rank 1's verdict.
fn sender(
    comm: &mut Communicator,
    boot: &mut TcpBootstrap,
    start: Instant,
) -> Result<std::result::Result<(), String>> {
    // Made before rank 1 sleeps (slow under TCG), so that the chunks it waits for come.
    let big: Vec<u8> = (0..BIG).map(big_byte).collect();
    comm.recv(1, 10u32)?; // rank 1's limit is set
    let mut reqs = vec![comm.isend(1, TAG, &big)?];
    for k in 0..SMALLS {
        reqs.push(comm.isend(1, TAG, &small(k))?);
    }
    // Posts what the credits allow, then tells rank 1 (on the bootstrap's TCP, beside the
    // fabric), which has not polled since its limit was set.
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(500) {
        comm.progress()?;
    }
    boot.all_gather(b"posted")?;
    for (k, r) in reqs.into_iter().enumerate() {
        wait_bounded(comm, r, start, &format!("send {k}"))?;
    }
    let req = comm.irecv(1, 11u32)?;
    let verdict = wait_bounded(comm, req, start, "rank 1's verdict")?;
    Ok(match verdict.into_message().map(|m| m.data) {
        Some(v) if v == b"ok" => Ok(()),
        v => Err(format!("rank 1 said {v:?}")),
    })
}

/// Rank 1: the receive of the large message refused under the limit (twice: at the poll
/// that took it from the CQ, then again when it is taken first); the limit lifted, the same
/// receive gets it whole; then the small ones, in order.
fn receiver(
    comm: &mut Communicator,
    boot: &mut TcpBootstrap,
    start: Instant,
    #[cfg_attr(not(feature = "trace"), allow(unused_variables))] sharing: RecvSharing,
) -> Result<std::result::Result<(), String>> {
    let size = ProcStatus::read_self().unwrap().vm_size_kb * 1024;
    let (soft, _) = rlimit::getrlimit(rlimit::Resource::AS).unwrap();
    set_address_space(size + HEADROOM);
    comm.send(0, 10, b"go")?;
    // Not polling until rank 0 posted what its credits allow: in per-peer mode (16 credits)
    // the first chunk's CQ batch has more behind it; in shared mode rank 0 has only its
    // standing credit until rank 1 grants more at its next poll (which then refuses the
    // first chunk, alone).
    boot.all_gather(b"")?;
    std::thread::sleep(Duration::from_millis(500));
    let req = comm.irecv(0, TAG)?;
    let want = format!("a message of {BIG} bytes from rank 0");
    let first = loop {
        match comm.test(&req) {
            Ok(true) => return Ok(Err("the large message was received under the limit".into())),
            Ok(false) if start.elapsed() > WATCHDOG => return Ok(Err("no refusal under the limit".into())),
            Ok(false) => std::thread::yield_now(),
            Err(e) => break e.to_string(),
        }
    };
    println!(
        "refused arrival: rank 1 under a limit of {} MiB: {first}",
        (size + HEADROOM) >> 20
    );
    if !first.contains(&want) {
        return Ok(Err(format!("refused with \"{first}\", not for {want}")));
    }
    // Taken first at the next poll, and refused again: still kept.
    match comm.test(&req) {
        Err(e) if e.to_string().contains(&want) => {}
        r => {
            return Ok(Err(format!(
                "the kept arrival, taken again under the limit: {r:?}"
            )))
        }
    }
    set_address_space(soft);
    let got = wait_bounded(comm, req, start, "the large message")?.into_message();
    let Some(Message {
        source, tag, data, ..
    }) = got
    else {
        return Ok(Err("a receive completed without a message".into()));
    };
    let bad = data
        .iter()
        .enumerate()
        .filter(|&(i, &b)| b != big_byte(i))
        .count();
    if (source, tag, data.len(), bad) != (0, TAG, BIG, 0) {
        let first_bad = data.iter().enumerate().position(|(i, &b)| b != big_byte(i));
        return Ok(Err(format!(
            "the large message: source {source} tag {tag}, {} bytes (want {BIG}), {bad} wrong (the first at {first_bad:?})",
            data.len()
        )));
    }
    drop(data);
    for k in 0..SMALLS {
        let req = comm.irecv(0, TAG)?;
        let m = wait_bounded(comm, req, start, &format!("small message {k}"))?.into_message();
        if m.as_ref().map(|m| &m.data) != Some(&small(k)) {
            let got = m.map(|m| (m.data.len(), m.data.first().copied()));
            return Ok(Err(format!(
                "small message {k}: got (length, first byte) {got:?}, want ({}, {})",
                100 + k,
                k + 1
            )));
        }
    }
    #[cfg(feature = "trace")]
    {
        let [refused, kept] = verbs::counters::refusals();
        println!("refused arrival: rank 1: {refused} refusals, {kept} completions kept");
        // The two refusals above; in per-peer mode the first one's batch had more behind it.
        let batch = if sharing == RecvSharing::PerPeer { 2 } else { 1 };
        if refused != 2 || kept < batch {
            return Ok(Err(format!(
                "counters: {refused} refusals (want 2), {kept} completions kept (want {batch} or more)"
            )));
        }
    }
    println!(
        "refused arrival: rank 1: the large message whole after the refusals, then {SMALLS} small ones in order ({:.1} s)",
        start.elapsed().as_secs_f64()
    );
    let ack = comm.isend(0, 11, b"ok")?;
    wait_bounded(comm, ack, start, "the verdict")?;
    Ok(Ok(()))
}
