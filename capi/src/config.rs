//! The configuration handle [`ballast_config`]: the runtime's `RuntimeConfig`, started from
//! the defaults and the `BALLAST_*` environment (read by the runtime, never here) and
//! changed by setting name; and [`ballast_predict`], the memory model's prediction.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int};

use ballast_runtime::env::SETTINGS;
use ballast_runtime::{ConfigError, RuntimeConfig};

use crate::comm::ballast_footprint;
use crate::error::{boundary, clear_out, Fail};
use crate::handles::{self, Kind};
use crate::BALLAST_ENOMEM;

/// A configuration (opaque): the settings of docs/CONFIG.md.
pub struct ballast_config {
    pub(crate) cfg: RuntimeConfig,
}

/// The configuration given to a call that creates communicators: the defaults and the
/// `BALLAST_*` environment (as ballast_config_new makes it) for NULL `config`, else the
/// configuration behind the handle (freed, or another kind of handle: `BALLAST_EINVAL`).
pub(crate) fn config_or_default(func: &str, config: *const ballast_config) -> Result<RuntimeConfig, Fail> {
    if config.is_null() {
        return RuntimeConfig::from_env().map_err(|e| Fail::runtime(func, &e.into()));
    }
    // SAFETY: a live configuration (its handle resolved), not freed during the call (the
    // callers' contract).
    Ok(unsafe { &*config_of(func, config)? }.cfg.clone())
}

/// The configuration behind handle `config` (NULL, freed, or another kind of handle:
/// `BALLAST_EINVAL`).
pub(crate) fn config_of(func: &str, config: *const ballast_config) -> Result<*mut ballast_config, Fail> {
    handles::object(func, "config", config, Kind::Config)
}

/// A C string argument as UTF-8, or `BALLAST_EINVAL` naming it.
///
/// # Safety
/// `p` must be NULL or a NUL-terminated string that stays valid for `'a`.
pub(crate) unsafe fn c_str<'a>(func: &str, what: &str, p: *const c_char) -> Result<&'a str, Fail> {
    if p.is_null() {
        return Err(Fail::null(func, what));
    }
    // SAFETY: non-NULL, and the caller guarantees a NUL-terminated string valid for 'a.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|_| Fail::inval(format!("{func}: {what} is not UTF-8")))
}

/// Creates a configuration from the defaults plus the BALLAST_* environment variables of
/// docs/CONFIG.md, in *out (freed with ballast_config_free). Errors: BALLAST_EINVAL when
/// `out` is NULL or a variable has a bad value (the message names the variable).
///
/// # Safety
/// `out` must be NULL or point to a writable `ballast_config *`.
#[no_mangle]
pub unsafe extern "C" fn ballast_config_new(out: *mut *mut ballast_config) -> c_int {
    boundary("ballast_config_new", || {
        // SAFETY: `out` is NULL or writable (the caller's contract).
        let out = unsafe { clear_out("ballast_config_new", out) }?;
        let cfg = RuntimeConfig::from_env().map_err(|e| Fail::runtime("ballast_config_new", &e.into()))?;
        let p = Box::into_raw(Box::new(ballast_config { cfg }));
        let Some(h) = handles::register(Kind::Config, p.cast()) else {
            // SAFETY: the box just made, never handed out.
            drop(unsafe { Box::from_raw(p) });
            return Err(Fail::new(
                BALLAST_ENOMEM,
                "ballast_config_new: no handle (out of memory)",
            ));
        };
        // The configuration is C's until ballast_config_free.
        *out = h as *mut ballast_config;
        Ok(0)
    })
}

/// Sets one setting: `key` is a setting name of docs/CONFIG.md in snake case
/// (buffer_count, buffer_size, pool_growth, max_pool_bytes, lazy_connect, max_endpoints,
/// endpoint_overflow, datagram_drop_every and datagram_drop_seed (test only),
/// recv_sharing, recv_depth, srq_depth, ranks_per_node, lock_pool, mpi_native, collective_checks,
/// transport),
/// `value` is written as the environment variable takes it (e.g. "64K", "per-peer", "off").
/// Errors: BALLAST_EINVAL for a NULL argument, an unknown key or a bad value; the message
/// names the key. The configuration is unchanged on error.
///
/// # Safety
/// `config` must be NULL or a ballast_config handle, not freed by another thread during the
/// call (a freed one is refused); `key` and `value` NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn ballast_config_set(
    config: *mut ballast_config,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    const F: &str = "ballast_config_set";
    boundary(F, || {
        // SAFETY: a live configuration, used by this thread alone (the contract).
        let c = unsafe { &mut *config_of(F, config)? };
        // SAFETY: NULL or NUL-terminated strings, valid for this call.
        let (key, value) = unsafe { (c_str(F, "key", key)?, c_str(F, "value", value)?) };
        if !SETTINGS.iter().any(|s| s.name == key) {
            return Err(Fail::inval(unknown_key(F, key)));
        }
        let builder = c
            .cfg
            .to_builder()
            .set(key, value)
            .map_err(|e| Fail::inval(format!("{F}: key `{key}`: {e}")))?;
        // A value out of range for this key, with the other settings as they are or as
        // their defaults (an earlier check failing on another setting would hide it).
        let own = |r: Result<RuntimeConfig, ConfigError>| match r {
            Err(e @ ConfigError::Setting { name, .. }) if name == key => {
                Err(Fail::inval(format!("{F}: key `{key}`: {e}")))
            }
            _ => Ok(()),
        };
        own(builder.clone().build())?;
        own(RuntimeConfig::builder().set(key, value).and_then(|b| b.build()))?;
        // Bad only in combination with another setting: checked again where it is used.
        c.cfg = builder.build_unchecked();
        Ok(0)
    })
}

/// The message for a key that is not a setting: the key it may have meant (the same name
/// in another spelling: `buffer-count`, `BALLAST_BUFFER_COUNT`, `Buffer_Count`; or a typo of
/// at most two edits: `endpoint_overfow`), and the keys.
fn unknown_key(func: &str, key: &str) -> String {
    let norm = |k: &str| {
        let k = k.trim().to_ascii_lowercase().replace('-', "_");
        k.strip_prefix("ballast_").map(str::to_string).unwrap_or(k)
    };
    // The same name in another spelling, else the closest name within two edits (a typo).
    let meant = SETTINGS
        .iter()
        .find(|s| norm(key) == s.name)
        .map(|s| s.name)
        .or_else(|| {
            SETTINGS
                .iter()
                .map(|s| (strsim::levenshtein(&norm(key), s.name), s.name))
                .filter(|&(d, _)| d <= 2)
                .min()
                .map(|(_, n)| n)
        });
    let keys = SETTINGS.map(|s| s.name).join(", ");
    let hint = meant
        .map(|m| format!(" (did you mean `{m}`?)"))
        .unwrap_or_default();
    format!(
        "{func}: unknown key `{key}`{hint}; the keys are {keys} (the bootstrap's BALLAST_ROOT and \
         BALLAST_BOOTSTRAP_TIMEOUT and the verbs device are read from the environment only)"
    )
}

/// Frees a configuration. NULL is not an error: it returns 0 and does nothing, as
/// free(NULL) does. Errors: BALLAST_EINVAL when `config` is not a live configuration
/// (freed already).
///
/// # Safety
/// `config` must be NULL or a ballast_config handle, not used by another thread during the
/// call (a freed one is refused).
#[no_mangle]
pub unsafe extern "C" fn ballast_config_free(config: *mut ballast_config) -> c_int {
    boundary("ballast_config_free", || {
        const F: &str = "ballast_config_free";
        if config.is_null() {
            return Ok(0);
        }
        let c = handles::unregister(config as usize, Kind::Config)
            .map_err(|r| handles::refused(F, "config", Kind::Config, r))?;
        // SAFETY: the box of ballast_config_new, taken back once (its handle has just ended).
        drop(unsafe { Box::from_raw(c.cast::<ballast_config>()) });
        Ok(0)
    })
}

/// Predicts, from the memory model alone, the transport memory of a rank that talks to
/// `peers` other ranks in a world of `world_size` ranks, `ranks_per_node` per node
/// (overriding the configuration's ranks_per_node), in *out (bytes), for the
/// configuration's transport (set `transport` to the one the communicator runs on: a
/// communicator of ballast_comm_from_mpi is over mpi whatever the configuration says).
/// On `local`, verbs and the MPI native path it is what the rank's ballast_comm_footprint
/// measures (with no request in flight). On the MPI engine path (`mpi_native` off, or an
/// MPI whose tags do not fit: MPICH) it is an upper bound: it charges `buffer_count` send
/// buffers of `buffer_size + 176` bytes (the most the MPI fabric keeps for reuse, when
/// every pool buffer is in flight at once), where a rank keeps as many as it had in flight
/// at its busiest, each as large as the largest message it carried (none before the first
/// send), so the measured figure is lower by up to `buffer_count * (buffer_size + 176)`
/// bytes (with 64 buffers of 8 KiB: 535,552 B, about half the prediction;
/// docs/EMBEDDING.md).
/// Errors: BALLAST_EINVAL for a NULL argument, `world_size` 0, `peers` not below
/// `world_size`, `ranks_per_node` 0, or a prediction above 2^64 bytes (the message names
/// the term that overflows).
///
/// # Safety
/// `config` must be NULL or a ballast_config handle, not freed by another thread during the
/// call (a freed one is refused); `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_predict(
    config: *const ballast_config,
    peers: u32,
    world_size: u32,
    ranks_per_node: u32,
    out: *mut ballast_footprint,
) -> c_int {
    const F: &str = "ballast_predict";
    boundary(F, || {
        // SAFETY: a live configuration (its handle resolved).
        let c = unsafe { &*config_of(F, config)? };
        // SAFETY: NULL or writable (the contract).
        let out = unsafe { out.as_mut() }.ok_or_else(|| Fail::null(F, "out"))?;
        if world_size == 0 {
            return Err(Fail::inval(format!("{F}: world_size is 0")));
        }
        if peers >= world_size {
            return Err(Fail::inval(format!(
                "{F}: peers is {peers}, but a rank of a world of {world_size} has at most {} peers",
                world_size - 1
            )));
        }
        if ranks_per_node == 0 {
            return Err(Fail::inval(format!("{F}: ranks_per_node is 0 (at least 1)")));
        }
        let fp = c
            .cfg
            .transport()
            .try_predict(peers as usize, world_size as usize, ranks_per_node as usize)
            .map_err(|e| Fail::inval(format!("{F}: {e}")))?;
        *out = ballast_footprint::from(&fp);
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::last_error;
    use crate::{ballast_local_run, BALLAST_EINVAL};
    use std::ffi::CString;

    fn set(c: *mut ballast_config, k: &str, v: &str) -> c_int {
        let (k, v) = (CString::new(k).unwrap(), CString::new(v).unwrap());
        // SAFETY: `c` is live; `k` and `v` are NUL-terminated and outlive the call.
        unsafe { ballast_config_set(c, k.as_ptr(), v.as_ptr()) }
    }

    #[test]
    fn settings_whose_combination_is_bad_are_refused_where_used() {
        let mut c = std::ptr::null_mut();
        // SAFETY: `c` is a local out-pointer.
        assert_eq!(unsafe { ballast_config_new(&mut c) }, 0);
        assert_eq!(set(c, "transport", "local"), 0);
        assert_eq!(set(c, "max_pool_bytes", "64K"), 0);
        // Alone each value is fine; together with growth on, the pool exceeds its bound.
        assert_eq!(set(c, "pool_growth", "on"), 0);
        let cfg = |c: *mut ballast_config| config_of("test", c).unwrap();
        // SAFETY: `c` is live.
        let t = unsafe { &(*cfg(c)).cfg }.transport();
        assert!(t.pool_growth && t.max_pool_bytes == 64 << 10);
        // A value out of range for its own key is refused at once, and nothing changes.
        assert_eq!(set(c, "srq_depth", "0"), BALLAST_EINVAL);
        assert!(last_error().contains("srq_depth"), "{}", last_error());
        // SAFETY: `c` is live.
        assert_ne!(unsafe { &(*cfg(c)).cfg }.transport().srq_depth, 0);
        // SAFETY: `c` is live; the callback is never called (validation fails first).
        let rc = unsafe { ballast_local_run(2, c, None, std::ptr::null_mut()) };
        assert_eq!(rc, BALLAST_EINVAL, "rank_main NULL is checked first");
        unsafe extern "C" fn never(_: *mut crate::ballast_comm, _: *mut std::os::raw::c_void) -> c_int {
            panic!("rank_main must not run with a bad configuration")
        }
        // SAFETY: as above.
        let rc = unsafe { ballast_local_run(2, c, Some(never), std::ptr::null_mut()) };
        assert_eq!(rc, BALLAST_EINVAL);
        assert!(last_error().contains("MAX_POOL_BYTES"), "{}", last_error());
        // SAFETY: `c` is live and freed once.
        assert_eq!(unsafe { ballast_config_free(c) }, 0);
    }
}
