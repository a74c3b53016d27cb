//! Device selection and capability probe of the verbs transport: which device, port and
//! GID a rank uses (`BALLAST_IB_DEVICE`, `BALLAST_IB_PORT`, `BALLAST_GID_INDEX`, or the
//! automatic choice), the limits the device reports ([`DeviceCaps`], shown by
//! `ballast info`), and the opened device context with its protection domain ([`Context`]).

use std::ffi::CStr;
use std::path::Path;

use rdma_sys::*;

use crate::core::config::VerbsConfig;
use crate::core::error::{Error, Result};

/// `IBV_LINK_LAYER_INFINIBAND` (verbs.h `#define`, not in the bindings).
const LINK_LAYER_INFINIBAND: u8 = 1;
/// `IBV_LINK_LAYER_ETHERNET`.
const LINK_LAYER_ETHERNET: u8 = 2;
/// GID table entries scanned for the automatic RoCE v2 choice.
const GID_SCAN: i32 = 256;

/// What one device/port reports (from `ibv_query_device` and `ibv_query_port`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Device name (`rxe0`, `mlx5_0`).
    pub name: String,
    /// Port used, from 1.
    pub port: u8,
    /// GID index used.
    pub gid_index: u32,
    /// The GID at that index, as text (IPv6 notation).
    pub gid: String,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: &'static str,
    /// Active path MTU, bytes.
    pub active_mtu: u32,
    /// Shared receive queues supported (`max_srq > 0`).
    pub srq: bool,
    /// XRC supported (`IBV_DEVICE_XRC` in `device_cap_flags`).
    pub xrc: bool,
    /// Most queue pairs.
    pub max_qp: u32,
    /// Most work requests per queue.
    pub max_qp_wr: u32,
    /// Most completion queue entries per CQ.
    pub max_cqe: u32,
    /// Largest memory region, bytes.
    pub max_mr_size: u64,
    /// Most shared receive queues.
    pub max_srq: u32,
    /// Most work requests per shared receive queue.
    pub max_srq_wr: u32,
}

impl DeviceCaps {
    /// `key: value` lines for `ballast info`.
    pub fn lines(&self) -> Vec<(String, String)> {
        vec![
            (
                "device".into(),
                format!(
                    "{} port {} ({}, active MTU {} B)",
                    self.name, self.port, self.link_layer, self.active_mtu
                ),
            ),
            ("gid".into(), format!("index {}: {}", self.gid_index, self.gid)),
            (
                "srq".into(),
                format!(
                    "{} (max_srq {}, max_srq_wr {})",
                    if self.srq { "yes" } else { "no" },
                    self.max_srq,
                    self.max_srq_wr
                ),
            ),
            (
                "xrc".into(),
                if self.xrc {
                    "yes".into()
                } else {
                    "no (recv_sharing=xrc falls back to shared)".into()
                },
            ),
            ("max_qp".into(), self.max_qp.to_string()),
            ("max_qp_wr".into(), self.max_qp_wr.to_string()),
            ("max_cqe".into(), self.max_cqe.to_string()),
            ("max_mr_size".into(), format!("{} B", self.max_mr_size)),
        ]
    }
}

fn verr(what: &str) -> Error {
    Error::Verbs(format!("{what}: {}", std::io::Error::last_os_error()))
}

/// Names of the RDMA devices libibverbs sees (empty when there are none, e.g. no kernel
/// support). Errors: [`Error::Verbs`] when the device list cannot be read for another reason.
pub fn device_names() -> Result<Vec<String>> {
    let mut n: i32 = 0;
    // SAFETY: ibv_get_device_list writes the count into `n` and returns a NULL-terminated
    // array that we free below with ibv_free_device_list; NULL means failure.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() {
        let e = std::io::Error::last_os_error();
        // ENOSYS: no kernel support (no uverbs): simply no device.
        if e.raw_os_error() == Some(38)
        /* ENOSYS */
        {
            return Ok(Vec::new());
        }
        return Err(Error::Verbs(format!("ibv_get_device_list: {e}")));
    }
    let mut names = Vec::with_capacity(n.max(0) as usize);
    for i in 0..n.max(0) as usize {
        // SAFETY: `i < n` entries of the list are valid device pointers; the name is a
        // NUL-terminated string owned by the device, copied before the list is freed.
        let name = unsafe { CStr::from_ptr(ibv_get_device_name(*list.add(i))) };
        names.push(name.to_string_lossy().into_owned());
    }
    // SAFETY: `list` came from ibv_get_device_list and is freed once.
    unsafe { ibv_free_device_list(list) };
    Ok(names)
}

/// An opened device: context, protection domain, port and GID. Closed on drop (after
/// everything created from it, which the owner guarantees by field order).
pub(crate) struct Context {
    pub(crate) ctx: *mut ibv_context,
    pub(crate) pd: *mut ibv_pd,
    pub(crate) caps: DeviceCaps,
    pub(crate) gid: [u8; 16],
    pub(crate) lid: u16,
    pub(crate) mtu: ibv_mtu::Type,
    pub(crate) ethernet: bool,
}

// SAFETY: the context and PD are plain handles into libibverbs, which is thread-safe; a
// Context is used by one thread at a time (its fabric's).
unsafe impl Send for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: pd and ctx were created by open() and are released once, PD first; the
        // owner drops every QP, CQ, SRQ and MR made from them before.
        unsafe {
            ibv_dealloc_pd(self.pd);
            ibv_close_device(self.ctx);
        }
    }
}

fn mtu_bytes(m: ibv_mtu::Type) -> u32 {
    128u32 << m.clamp(1, 5)
}

fn query_port(ctx: *mut ibv_context, port: u8) -> Result<ibv_port_attr> {
    // SAFETY: ibv_port_attr is plain data; zeroed is a valid value for the out-parameter.
    let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: ctx is an open context; attr is a valid out-pointer of the right size.
    let rc = unsafe { ___ibv_query_port(ctx, port, &mut attr) };
    if rc != 0 {
        return Err(Error::Verbs(format!(
            "ibv_query_port(port {port}): {}",
            std::io::Error::from_raw_os_error(rc)
        )));
    }
    Ok(attr)
}

fn query_gid(ctx: *mut ibv_context, port: u8, index: i32) -> Option<[u8; 16]> {
    // SAFETY: ibv_gid is a plain union of bytes; zeroed is valid.
    let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
    // SAFETY: ctx is open; gid is a valid out-pointer.
    let rc = unsafe { ibv_query_gid(ctx, port, index, &mut gid as *mut ibv_gid as *mut _) };
    // SAFETY: `raw` is the byte view of the union, always initialised.
    (rc == 0).then_some(unsafe { gid.raw })
}

fn gid_text(g: &[u8; 16]) -> String {
    std::net::Ipv6Addr::from(*g).to_string()
}

/// True if `g` is an IPv4-mapped GID (`::ffff:a.b.c.d`).
fn is_ipv4_mapped(g: &[u8; 16]) -> bool {
    g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff
}

/// The GID type from sysfs (`RoCE v2`, `IB/RoCE v1`), if the kernel exposes it.
fn gid_type(dev: &str, port: u8, index: i32) -> Option<String> {
    let p = format!("/sys/class/infiniband/{dev}/ports/{port}/gid_attrs/types/{index}");
    std::fs::read_to_string(Path::new(&p))
        .ok()
        .map(|s| s.trim().to_string())
}

/// Opens the device chosen by `sel` (see [`VerbsConfig`]). Errors: [`Error::Verbs`] naming
/// what is missing (no device, no active port, no usable GID) or the failing call.
pub(crate) fn open(sel: &VerbsConfig) -> Result<Context> {
    let mut n: i32 = 0;
    // SAFETY: as in device_names(); the list is freed before returning.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() || n <= 0 {
        if !list.is_null() {
            // SAFETY: freed once.
            unsafe { ibv_free_device_list(list) };
        }
        return Err(Error::Verbs(format!(
            "no RDMA device found ({}); load a driver (e.g. `modprobe rdma_rxe` and `rdma link add rxe0 type rxe netdev eth0` for soft-RoCE)",
            std::io::Error::last_os_error()
        )));
    }
    let mut tried = Vec::new();
    let mut result = Err(Error::Verbs("no device".into()));
    for i in 0..n as usize {
        // SAFETY: `i < n` entries are valid device pointers.
        let dev = unsafe { *list.add(i) };
        // SAFETY: the name is a NUL-terminated string owned by the device.
        let name = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) }
            .to_string_lossy()
            .into_owned();
        if sel.device.as_deref().is_some_and(|d| d != name) {
            tried.push(name);
            continue;
        }
        // SAFETY: dev is a valid device of the list, which is still alive.
        let ctx = unsafe { ibv_open_device(dev) };
        if ctx.is_null() {
            result = Err(verr(&format!("ibv_open_device({name})")));
            if sel.device.is_some() {
                break;
            }
            continue;
        }
        match open_ctx(ctx, &name, sel) {
            Ok(c) => {
                result = Ok(c);
                break;
            }
            Err(e) => {
                // SAFETY: ctx was opened above and nothing was created from it that outlives open_ctx.
                unsafe { ibv_close_device(ctx) };
                result = Err(e);
                if sel.device.is_some() {
                    break;
                }
                tried.push(name);
            }
        }
    }
    // SAFETY: the list came from ibv_get_device_list; contexts opened from it stay valid.
    unsafe { ibv_free_device_list(list) };
    if let (Err(_), Some(d)) = (&result, &sel.device) {
        if tried.iter().any(|t| t == d) || !tried.is_empty() && tried.len() == n as usize {
            return Err(Error::Verbs(format!(
                "BALLAST_IB_DEVICE={d}: no such device (devices: {})",
                tried.join(", ")
            )));
        }
    }
    result
}

fn open_ctx(ctx: *mut ibv_context, name: &str, sel: &VerbsConfig) -> Result<Context> {
    // SAFETY: ibv_device_attr is plain data; zeroed is a valid out-parameter.
    let mut da: ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: ctx is open; da is a valid out-pointer.
    let rc = unsafe { ibv_query_device(ctx, &mut da) };
    if rc != 0 {
        return Err(Error::Verbs(format!(
            "ibv_query_device({name}): {}",
            std::io::Error::from_raw_os_error(rc)
        )));
    }
    let ports: Vec<u8> = match sel.port {
        Some(p) if p > da.phys_port_cnt => {
            return Err(Error::Verbs(format!(
                "BALLAST_IB_PORT={p}: {name} has {} port(s)",
                da.phys_port_cnt
            )))
        }
        Some(p) => vec![p],
        None => (1..=da.phys_port_cnt).collect(),
    };
    let mut chosen = None;
    for p in ports {
        let pa = query_port(ctx, p)?;
        if pa.state == ibv_port_state::IBV_PORT_ACTIVE {
            chosen = Some((p, pa));
            break;
        }
        if sel.port.is_some() {
            return Err(Error::Verbs(format!(
                "{name} port {p} is not active (state {})",
                pa.state
            )));
        }
    }
    let (port, pa) = chosen.ok_or_else(|| Error::Verbs(format!("{name} has no active port")))?;
    let ethernet = pa.link_layer == LINK_LAYER_ETHERNET;
    let gid_index = match sel.gid_index {
        Some(g) => g as i32,
        None if ethernet => {
            let len = pa.gid_tbl_len.min(GID_SCAN);
            let pick = (0..len).find(|&i| {
                query_gid(ctx, port, i).is_some_and(|g| is_ipv4_mapped(&g))
                    && gid_type(name, port, i).is_none_or(|t| t.eq_ignore_ascii_case("RoCE v2"))
            });
            pick.ok_or_else(|| {
                Error::Verbs(format!(
                    "{name} port {port}: no RoCE v2 GID of an IPv4 address (give the interface an IPv4 address or set BALLAST_GID_INDEX)"
                ))
            })?
        }
        None => 0,
    };
    let gid = query_gid(ctx, port, gid_index)
        .ok_or_else(|| Error::Verbs(format!("{name} port {port}: no GID at index {gid_index}")))?;
    if gid.iter().all(|&b| b == 0) {
        return Err(Error::Verbs(format!(
            "{name} port {port}: GID index {gid_index} is empty (BALLAST_GID_INDEX)"
        )));
    }
    let _ = LINK_LAYER_INFINIBAND;
    let caps = DeviceCaps {
        name: name.to_string(),
        port,
        gid_index: gid_index as u32,
        gid: gid_text(&gid),
        link_layer: if ethernet { "Ethernet" } else { "InfiniBand" },
        active_mtu: mtu_bytes(pa.active_mtu),
        srq: da.max_srq > 0,
        xrc: (da.device_cap_flags & ibv_device_cap_flags::IBV_DEVICE_XRC.0) != 0,
        max_qp: da.max_qp.max(0) as u32,
        max_qp_wr: da.max_qp_wr.max(0) as u32,
        max_cqe: da.max_cqe.max(0) as u32,
        max_mr_size: da.max_mr_size,
        max_srq: da.max_srq.max(0) as u32,
        max_srq_wr: da.max_srq_wr.max(0) as u32,
    };
    // SAFETY: ctx is open; the PD is released in Context::drop.
    let pd = unsafe { ibv_alloc_pd(ctx) };
    if pd.is_null() {
        return Err(verr(&format!("ibv_alloc_pd({name})")));
    }
    Ok(Context {
        ctx,
        pd,
        caps,
        gid,
        lid: pa.lid,
        mtu: pa.active_mtu,
        ethernet,
    })
}

/// Opens the selected device, reads its limits and closes it again (for `ballast info`).
/// Errors: those of opening (no device, no active port, no GID).
pub fn probe(sel: &VerbsConfig) -> Result<DeviceCaps> {
    open(sel).map(|c| c.caps.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_helpers() {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[10, 77, 0, 1]);
        assert!(is_ipv4_mapped(&g));
        assert_eq!(gid_text(&g), "::ffff:10.77.0.1");
        g[0] = 0xfe;
        assert!(!is_ipv4_mapped(&g));
        assert_eq!(mtu_bytes(ibv_mtu::IBV_MTU_1024), 1024);
        assert_eq!(mtu_bytes(5), 4096);
    }
}
