//! Device selection and capability probe of the verbs transport: which device, port and
//! GID a rank uses (`BALLAST_IB_DEVICE`, `BALLAST_IB_PORT`, `BALLAST_GID_INDEX`, or the
//! automatic choice), the limits the device reports ([`DeviceCaps`], shown by
//! `ballast info`), and the opened device with its protection domain ([`Device`]).

use std::path::Path;

use super::ibv;
use crate::core::config::VerbsConfig;
use crate::fabric::error::{FabricError, Result};

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
    pub fn lines(&self) -> Vec<DeviceLine> {
        let line = |key, value| DeviceLine { key, value };
        vec![
            line(
                "device",
                format!(
                    "{} port {} ({}, active MTU {} B)",
                    self.name, self.port, self.link_layer, self.active_mtu
                ),
            ),
            line("gid", format!("index {}: {}", self.gid_index, self.gid)),
            line(
                "srq",
                format!(
                    "{} (max_srq {}, max_srq_wr {})",
                    if self.srq { "yes" } else { "no" },
                    self.max_srq,
                    self.max_srq_wr
                ),
            ),
            line(
                "xrc",
                if self.xrc {
                    "yes".into()
                } else {
                    "no (recv_sharing=xrc falls back to shared)".into()
                },
            ),
            line("max_qp", self.max_qp.to_string()),
            line("max_qp_wr", self.max_qp_wr.to_string()),
            line("max_cqe", self.max_cqe.to_string()),
            line("max_mr_size", format!("{} B", self.max_mr_size)),
        ]
    }
}

/// One line of [`DeviceCaps::lines`]: a property of the device and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceLine {
    /// The property (`device`, `gid`, `srq`, ...).
    pub key: &'static str,
    /// Its value, as text.
    pub value: String,
}

/// Names of the RDMA devices libibverbs sees (empty when there are none, e.g. no kernel
/// support). Errors: [`FabricError::VerbsCall`] when the device list cannot be read for another reason.
pub fn device_names() -> Result<Vec<String>> {
    let list = match ibv::DeviceList::get() {
        Ok(l) => l,
        // ENOSYS: no kernel support (no uverbs): simply no device.
        Err(e) if e.raw_os_error() == Some(38) => return Ok(Vec::new()),
        Err(source) => {
            return Err(FabricError::VerbsCall {
                verb: "ibv_get_device_list",
                object: "the RDMA devices".into(),
                rank: None,
                peer: None,
                source,
            })
        }
    };
    Ok((0..list.len()).map(|i| list.name(i)).collect())
}

/// An opened device: context, protection domain, port and GID. Everything made from it
/// keeps the context and PD alive (see `ballast_ibv`). Public for the raw-verbs ping-pong
/// of `ballast-bench`, which makes its own queue pairs on the device the transport would use.
pub struct Device {
    /// The opened device (`ballast_ibv`).
    pub ctx: ibv::Context,
    /// Its protection domain.
    pub pd: ibv::Pd,
    /// The device, port and GID chosen, and the device's limits.
    pub caps: DeviceCaps,
    /// The GID at `caps.gid_index`, bytes.
    pub gid: [u8; 16],
    /// The port's LID (0 on RoCE).
    pub lid: u16,
    pub(crate) mtu: ibv::sys::ibv_mtu::Type,
    pub(crate) ethernet: bool,
}

impl Device {
    /// This side of a connection (port, active MTU, GID index, RoCE or not), for the RTR
    /// attributes (`ballast_ibv::attr::rtr`).
    pub fn local(&self) -> ibv::attr::Local {
        ibv::attr::Local {
            port: self.caps.port,
            mtu: self.mtu,
            gid_index: self.caps.gid_index as u8,
            ethernet: self.ethernet,
        }
    }
}

fn mtu_bytes(m: ibv::sys::ibv_mtu::Type) -> u32 {
    128u32 << m.clamp(1, 5)
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

fn unusable(device: &str, reason: String) -> FabricError {
    FabricError::VerbsDevice {
        device: Some(device.to_string()),
        reason,
    }
}

/// Opens the device chosen by `sel` (see [`VerbsConfig`]). Errors: [`FabricError::VerbsDevice`]
/// naming what is missing (no device, no active port, no usable GID), [`FabricError::VerbsCall`]
/// for a failing call.
pub fn open(sel: &VerbsConfig) -> Result<Device> {
    let list = match ibv::DeviceList::get() {
        Ok(l) if !l.is_empty() => l,
        r => {
            let why = r.err().unwrap_or_else(std::io::Error::last_os_error);
            return Err(FabricError::VerbsDevice {
                device: None,
                reason: format!(
                    "no RDMA device found ({why}); load a driver (e.g. `modprobe rdma_rxe` and `rdma link add rxe0 type rxe netdev eth0` for soft-RoCE)"
                ),
            });
        }
    };
    let n = list.len();
    let mut tried = Vec::new();
    let mut result = Err(FabricError::VerbsDevice {
        device: None,
        reason: "no device".into(),
    });
    for i in 0..n {
        let name = list.name(i);
        if sel.device.as_deref().is_some_and(|d| d != name) {
            tried.push(name);
            continue;
        }
        let ctx = match list.open(i) {
            Ok(c) => c,
            Err(e) => {
                result = Err(e.into());
                if sel.device.is_some() {
                    break;
                }
                continue;
            }
        };
        match open_ctx(ctx, &name, sel) {
            Ok(c) => {
                result = Ok(c);
                break;
            }
            Err(e) => {
                result = Err(e);
                if sel.device.is_some() {
                    break;
                }
                tried.push(name);
            }
        }
    }
    if let (Err(_), Some(d)) = (&result, &sel.device) {
        if tried.iter().any(|t| t == d) || !tried.is_empty() && tried.len() == n {
            return Err(unusable(
                d,
                format!(
                    "BALLAST_IB_DEVICE={d}: no such device (devices: {})",
                    tried.join(", ")
                ),
            ));
        }
    }
    result
}

fn open_ctx(ctx: ibv::Context, name: &str, sel: &VerbsConfig) -> Result<Device> {
    let named = |e: ibv::IbvError| match FabricError::from(e) {
        FabricError::VerbsCall {
            verb,
            object,
            rank,
            peer,
            source,
        } => FabricError::VerbsCall {
            verb,
            object: format!("{object} of {name}").into(),
            rank,
            peer,
            source,
        },
        e => e,
    };
    let da = ctx.query_device().map_err(named)?;
    let ports: Vec<u8> = match sel.port {
        Some(p) if p > da.phys_port_cnt => {
            return Err(unusable(
                name,
                format!("BALLAST_IB_PORT={p}: {name} has {} port(s)", da.phys_port_cnt),
            ))
        }
        Some(p) => vec![p],
        None => (1..=da.phys_port_cnt).collect(),
    };
    let mut chosen = None;
    for p in ports {
        let pa = ctx.query_port(p).map_err(named)?;
        if pa.state == ibv::sys::ibv_port_state::IBV_PORT_ACTIVE {
            chosen = Some((p, pa));
            break;
        }
        if sel.port.is_some() {
            return Err(unusable(
                name,
                format!("{name} port {p} is not active (state {})", pa.state),
            ));
        }
    }
    let (port, pa) = chosen.ok_or_else(|| unusable(name, format!("{name} has no active port")))?;
    let ethernet = pa.link_layer == LINK_LAYER_ETHERNET;
    let gid_index = match sel.gid_index {
        Some(g) => g as i32,
        None if ethernet => {
            let len = pa.gid_tbl_len.min(GID_SCAN);
            let pick = (0..len).find(|&i| {
                ctx.query_gid(port, i).is_some_and(|g| is_ipv4_mapped(&g))
                    && gid_type(name, port, i).is_none_or(|t| t.eq_ignore_ascii_case("RoCE v2"))
            });
            pick.ok_or_else(|| {
                unusable(name, format!(
                    "{name} port {port}: no RoCE v2 GID of an IPv4 address (give the interface an IPv4 address or set BALLAST_GID_INDEX)"
                ))
            })?
        }
        None => 0,
    };
    let gid = ctx
        .query_gid(port, gid_index)
        .ok_or_else(|| unusable(name, format!("{name} port {port}: no GID at index {gid_index}")))?;
    if gid.iter().all(|&b| b == 0) {
        return Err(unusable(
            name,
            format!("{name} port {port}: GID index {gid_index} is empty (BALLAST_GID_INDEX)"),
        ));
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
        xrc: (da.device_cap_flags & ibv::sys::ibv_device_cap_flags::IBV_DEVICE_XRC.0) != 0,
        max_qp: da.max_qp.max(0) as u32,
        max_qp_wr: da.max_qp_wr.max(0) as u32,
        max_cqe: da.max_cqe.max(0) as u32,
        max_mr_size: da.max_mr_size,
        max_srq: da.max_srq.max(0) as u32,
        max_srq_wr: da.max_srq_wr.max(0) as u32,
    };
    let pd = ctx.alloc_pd().map_err(named)?;
    Ok(Device {
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
        assert_eq!(mtu_bytes(ibv::sys::ibv_mtu::IBV_MTU_1024), 1024);
        assert_eq!(mtu_bytes(5), 4096);
    }
}
