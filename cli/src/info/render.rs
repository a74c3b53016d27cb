//! `ballast info`'s report as text: the MPI job (under mpirun), the machine, the effective
//! configuration, what `endpoint_overflow` does, and the predicted footprint table.
use super::report::{FootprintTable, MpiReport, Report, VerbsDevice};

/// Prints `r` as text to stdout.
pub(super) fn text(r: &Report) -> anyhow::Result<()> {
    if let Some(m) = &r.mpi {
        mpi(m)?;
    }
    machine(r)?;
    if let Some(n) = &r.auto_note {
        outln!("{n}");
    }
    outln!();
    outln!("effective configuration:");
    outln!("  {:<19} {:<12} {:<8} {}", "setting", "value", "from", "variable");
    for s in &r.settings {
        outln!("  {:<19} {:<12} {:<8} {}", s.name, s.value, s.from, s.variable);
    }
    for line in &r.endpoint_overflow {
        outln!("  {line}");
    }
    outln!();
    footprint(&r.footprint)
}

/// The MPI library and job, and whether the MPI native path is taken.
fn mpi(m: &MpiReport) -> anyhow::Result<()> {
    outln!("MPI: {}", m.library);
    match (m.native_path, &m.why_not) {
        (true, _) => outln!("MPI native path: yes (one MPI message per Ballast message, MPI matches tags; pool, endpoints and receive sharing below do not apply)"),
        (false, Some(why)) => outln!("{why}"),
        (false, None) => outln!("MPI native path: not used: the engine runs above MPI"),
    }
    Ok(())
}

/// The transports compiled in, the RDMA devices, the memlock limit and the verbs device.
fn machine(r: &Report) -> anyhow::Result<()> {
    outln!("transports compiled in: {}", r.transports_compiled_in.join(", "));
    outln!(
        "RDMA devices: {}",
        if r.rdma_devices.is_empty() {
            "none (/sys/class/infiniband is empty or absent)".to_string()
        } else {
            r.rdma_devices.join(", ")
        }
    );
    match r.memlock_limit_bytes {
        Some(u64::MAX) => outln!("memlock limit (RLIMIT_MEMLOCK soft): unlimited"),
        Some(b) => outln!("memlock limit (RLIMIT_MEMLOCK soft): {} KiB", b / 1024),
        None => outln!("memlock limit: unknown"),
    }
    match &r.verbs_device {
        Some(VerbsDevice::Available(lines)) => {
            outln!("verbs device:");
            for (k, v) in lines {
                outln!("  {k:<12} {v}");
            }
        }
        Some(VerbsDevice::Unavailable(e)) => outln!("verbs device: unavailable ({e})"),
        None => {}
    }
    Ok(())
}

/// The footprint table: a row per field, a column per receive-sharing mode.
fn footprint(f: &FootprintTable) -> anyhow::Result<()> {
    outln!(
        "predicted footprint per rank, {} peers, world {} (set with --peers/--world-size), {} ranks/node, transport {} (bytes):",
        f.peers, f.world_size, f.ranks_per_node, f.transport
    );
    out!("  {:<18}", "");
    for c in &f.columns {
        out!(" {:>14}", c.mode);
    }
    outln!();
    let Some(first) = f.columns.first() else {
        return Ok(());
    };
    for (i, field) in first.footprint.fields().iter().enumerate() {
        out!("  {:<18}", field.name);
        for c in &f.columns {
            out!(" {:>14}", c.footprint.fields()[i].value);
        }
        outln!();
    }
    out!("  {:<18}", "total_bytes");
    for c in &f.columns {
        out!(" {:>14}", c.footprint.total_bytes());
    }
    outln!();
    for why in &f.not_predicted {
        outln!("  not predicted: {why}");
    }
    Ok(())
}
