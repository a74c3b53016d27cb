//! The `local` transport's world of one rank owned by the caller: [`single`] and its
//! [`finish`], published as `ballast_runtime::local::{single, finish}`.

use std::sync::Arc;

use super::check_ranks_fit;
use crate::comm::error::{Error, Result};
use crate::comm::Communicator;
use crate::core::config::{ConfigError, RuntimeConfig, TransportKind};
use crate::fabric::local::{LocalFabric, World};

/// A world of one rank over the local transport, owned by the caller (for a program
/// that embeds Ballast and runs as a single process: `ballast_comm_from_env` of the C
/// ABI). Finish it with [`finish`]. Errors: [`ConfigError::TransportUnavailable`] when the
/// configuration's transport is not `local`, the configuration's validation errors.
pub fn single(config: &RuntimeConfig) -> Result<Communicator> {
    let cfg = *config.transport();
    if cfg.kind != TransportKind::Local {
        return Err(Error::Config(ConfigError::TransportUnavailable {
            transport: cfg.kind,
            why: "local::single runs transport=local only",
        }));
    }
    cfg.validate()?;
    check_ranks_fit(1, &cfg)?;
    let (world, mut parkers) = World::new(1);
    let parker = parkers.pop().expect("World::new(1) gives one parker");
    let fabric = LocalFabric::new(0, Arc::new(world), &cfg, parker);
    Communicator::new(Box::new(fabric), &cfg)
}

/// Finishes a communicator of [`single`]: delivers its own sends to itself.
pub fn finish(mut comm: Communicator) -> Result<()> {
    comm.finalize()
}
