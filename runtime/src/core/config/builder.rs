//! The configuration builder ([`RuntimeConfigBuilder`]): settings given in code or by a
//! command-line option, validated by [`RuntimeConfigBuilder::build`].

use super::*;

impl RuntimeConfig {
    /// Starts a builder from the defaults.
    pub fn builder() -> RuntimeConfigBuilder {
        RuntimeConfigBuilder {
            cfg: RuntimeConfig::default(),
        }
    }

    /// A builder starting from this configuration (keeps the origins recorded so far).
    pub fn to_builder(&self) -> RuntimeConfigBuilder {
        RuntimeConfigBuilder { cfg: self.clone() }
    }
}

/// Builder for [`RuntimeConfig`]; [`RuntimeConfigBuilder::build`] validates.
#[derive(Clone, Debug)]
pub struct RuntimeConfigBuilder {
    cfg: RuntimeConfig,
}

macro_rules! setter {
    ($(#[$m:meta])* $name:ident : $ty:ty => $idx:expr, $field:ident) => {
        $(#[$m])*
        pub fn $name(mut self, v: $ty) -> Self {
            self.cfg.transport.$field = v;
            self.cfg.origins[$idx] = ValueOrigin::Builder;
            self
        }
    };
}

impl RuntimeConfigBuilder {
    setter!(/// Transport kind.
        transport: TransportKind => 0, kind);
    setter!(/// Pool buffer count.
        buffer_count: usize => 1, buffer_count);
    setter!(/// Buffer size in bytes.
        buffer_size: usize => 2, buffer_size);
    setter!(/// Pool growth on/off.
        pool_growth: bool => 3, pool_growth);
    setter!(/// Pool upper bound in bytes (with growth).
        max_pool_bytes: u64 => 4, max_pool_bytes);
    setter!(/// Lazy endpoint creation on/off.
        lazy_connect: bool => 5, lazy_connect);
    setter!(/// Live endpoint cap, 0 = none.
        max_endpoints: usize => 6, max_endpoints);
    setter!(/// Receive buffer sharing mode.
        recv_sharing: RecvSharing => 7, recv_sharing);
    setter!(/// Per-endpoint receive depth (per-peer mode).
        recv_depth: usize => 8, recv_depth);
    setter!(/// Shared receive queue depth (shared/xrc mode).
        srq_depth: usize => 9, srq_depth);
    setter!(/// Ranks per node (xrc grouping).
        ranks_per_node: usize => 10, ranks_per_node);
    setter!(/// mlock registered memory on/off.
        lock_pool: bool => 11, lock_pool);
    setter!(/// MPI native path on/off (one MPI message per Ballast message).
        mpi_native: bool => 12, mpi_native);
    setter!(/// What happens to peers beyond `max_endpoints`: datagram or evict.
        endpoint_overflow: EndpointOverflow => 13, endpoint_overflow);
    setter!(/// Test only: the local transport drops 1 in k datagrams (0 = none).
        datagram_drop_every: usize => 14, datagram_drop_every);
    setter!(/// Test only: the seed of the drop model's pattern (0 = the default one).
        datagram_drop_seed: u64 => 15, datagram_drop_seed);
    setter!(/// Collective numbers checked across ranks on the MPI native path on/off.
        collective_checks: bool => 16, collective_checks);

    /// Sets the setting `name` (a snake-case name of [`SETTINGS`], e.g. `buffer_count`)
    /// from `value` written as its `BALLAST_*` variable takes it (docs/CONFIG.md), for
    /// settings given as text (the C API's `ballast_config_set`). Errors:
    /// [`ConfigError::Setting`] naming the setting for a value that does not parse, and with the
    /// unknown name as its value for a name that is not a setting; range checks wait for [`RuntimeConfigBuilder::build`].
    pub fn set(mut self, name: &str, value: &str) -> ConfigResult<Self> {
        let Some(i) = SETTINGS.iter().position(|s| s.name == name) else {
            // (A variant of its own would make every `Error` 16 bytes larger.)
            return Err(ConfigError::Setting {
                name: "(setting name)",
                var: "(none)",
                value: name.to_string(),
                reason: format!("no such setting (known: {})", SETTINGS.map(|s| s.name).join(", ")),
            });
        };
        let SettingVar {
            name: known,
            env: var,
        } = SETTINGS[i];
        self.cfg
            .set(known, value)
            .map_err(|reason| ConfigError::Setting {
                name: known,
                var,
                value: value.to_string(),
                reason,
            })?;
        self.cfg.origins[i] = ValueOrigin::Builder;
        Ok(self)
    }

    /// The configuration without validation, for settings given one at a time whose
    /// combination is checked later (the C API's `ballast_config_set`): every launcher
    /// validates its configuration again before using it.
    pub fn build_unchecked(self) -> RuntimeConfig {
        self.cfg
    }

    /// Validates and returns the configuration. Errors: [`ConfigError::Setting`] naming the
    /// setting when the bad value was set through the builder, [`ConfigError::Var`] naming
    /// the variable when it came from the environment.
    pub fn build(self) -> ConfigResult<RuntimeConfig> {
        match self.cfg.transport.validate() {
            Ok(()) => Ok(self.cfg),
            Err(ConfigError::Var { var, value, reason }) => {
                match SETTINGS.iter().position(|s| s.env == var) {
                    Some(i) if self.cfg.origins[i] == ValueOrigin::Builder => Err(ConfigError::Setting {
                        name: SETTINGS[i].name,
                        var,
                        value,
                        reason,
                    }),
                    _ => Err(ConfigError::Var { var, value, reason }),
                }
            }
            Err(e) => Err(e),
        }
    }
}
