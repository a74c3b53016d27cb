//! `ballast info`: transports compiled in, RDMA devices seen, the effective runtime
//! configuration with the origin of each value, and the predicted footprint for P peers
//! under each receive-sharing mode side by side. The options become a [`Plan`] (the
//! configuration resolved, the prediction's peers and world), which gathers one [`Report`]
//! ([`report`]; what `endpoint_overflow` does in [`overflow`]), printed as text
//! ([`render`]) or, with `--json`, as one JSON object (under mpirun, by rank 0 only).
mod overflow;
mod render;
mod report;

use ballast_runtime::RuntimeConfig;

use crate::runtime_args::RuntimeArgs;
use report::Report;

/// Arguments of `ballast info`.
#[derive(clap::Args, Debug)]
pub struct InfoArgs {
    /// Peers each rank talks to, for the footprint prediction.
    #[arg(long, default_value_t = 255)]
    pub peers: usize,
    /// World size for the prediction (default: peers + 1).
    #[arg(long)]
    pub world_size: Option<usize>,
    /// Print one JSON object instead of the text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// `ballast info`'s options, checked: the effective configuration (and what `--transport
/// auto` picked), and the peers and world size of the prediction.
struct Plan {
    cfg: RuntimeConfig,
    auto_note: Option<String>,
    peers: usize,
    world: usize,
    json: bool,
}

/// Runs `ballast info`.
pub fn run(args: &InfoArgs) -> anyhow::Result<()> {
    let plan = Plan::new(args)?;
    // A transport this build cannot run (`--transport mpi` without the `mpi` feature): the
    // report is the model's alone, said on stderr so that the report itself is unchanged.
    if let Some(why) = crate::runtime_args::not_compiled_in(plan.cfg.transport().kind) {
        eprintln!("note: {why}; the report below is the footprint model's prediction only");
    }
    let Some(report) = Report::gather(&plan)? else {
        return Ok(()); // only rank 0 prints
    };
    if plan.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    render::text(&report)
}

impl Plan {
    fn new(args: &InfoArgs) -> anyhow::Result<Plan> {
        let (cfg, auto_note) = args.runtime.to_config_resolved()?;
        let world = match args.world_size {
            Some(w) => w,
            None => args.peers.checked_add(1).ok_or_else(|| {
                anyhow::anyhow!(
                    "--peers {}: the world size (peers + 1) does not fit in {} bits: give fewer peers",
                    args.peers,
                    usize::BITS
                )
            })?,
        };
        // As ballast_predict refuses them (the same wording).
        if world == 0 {
            anyhow::bail!("--world-size is 0");
        }
        if args.peers >= world {
            anyhow::bail!(
                "--peers is {}, but a rank of a world of {world} (--world-size) has at most {} peers",
                args.peers,
                world - 1
            );
        }
        Ok(Plan {
            cfg,
            auto_note,
            peers: args.peers,
            world,
            json: args.json,
        })
    }
}
