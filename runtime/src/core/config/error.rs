//! The configuration's errors ([`ConfigError`]): a bad value of a `BALLAST_*` variable or
//! of a setting given in code, and a transport this build or launcher cannot run. The
//! public error wraps it (`Error::Config`), with the same messages.

use thiserror::Error;

use super::TransportKind;

/// Errors of the configuration. New variants may be added (`#[non_exhaustive]`): match
/// with a `_` arm.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A configuration value is out of range or unparsable; `var` is its `BALLAST_*` variable.
    #[error("bad value `{value}` for {var}: {reason}")]
    Var {
        /// The environment variable naming the setting.
        var: &'static str,
        /// The rejected value.
        value: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A value set through the configuration builder (in code, or by a command-line option
    /// that maps to it) is out of range; `name` is the setting, `var` its variable.
    #[error("bad value `{value}` for {name} (given in code or as a command-line option; variable {var}): {reason}")]
    Setting {
        /// The setting's name ([`super::TransportConfig`] field).
        name: &'static str,
        /// The environment variable of the same setting.
        var: &'static str,
        /// The rejected value.
        value: String,
        /// Why it was rejected.
        reason: String,
    },
    /// The requested transport cannot be used here: `why` says what is missing (not
    /// compiled into this build, or the launcher asked for another transport).
    #[error("transport `{transport}` is unavailable: {why}")]
    TransportUnavailable {
        /// The transport asked for.
        transport: TransportKind,
        /// Why it cannot be used, and what to do.
        why: &'static str,
    },
}

/// Result of the configuration's functions.
pub type ConfigResult<T> = std::result::Result<T, ConfigError>;
