//! Device and context: open an RDMA device by name, query its limits, its port and GIDs.

use std::ffi::CStr;
use std::sync::Arc;

use ibverbs_sys as ffi;

use crate::error::{Result, TransportError};

fn unavailable(detail: String) -> TransportError {
    TransportError::Unavailable("verbs", detail)
}

/// The port facts a connection needs.
#[derive(Debug, Clone, Copy)]
pub struct PortInfo {
    pub lid: u16,
    pub active_mtu: u8,
    pub link_layer: u8,
    pub max_msg_size: u32,
    pub gid_table_len: i32,
}

impl PortInfo {
    /// RoCE ports route by GID, so every packet needs a GRH.
    pub fn is_ethernet(&self) -> bool {
        self.link_layer == ffi::IBV_LINK_LAYER_ETHERNET as u8
    }
}

/// The device limits queue sizing needs (`ibv_query_device`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_qp_wr: u32,
    pub max_rd_atomic: u8,
    pub max_cqe: u32,
    /// SRQs the device can create: 0 means it has none.
    pub max_srq: u32,
    pub max_srq_wr: u32,
}

/// An open device context. Dropped last: PDs, CQs and QPs hold an `Arc` to it.
pub struct Context {
    pub(crate) raw: *mut ffi::ibv_context,
    pub name: String,
}

// SAFETY: ibv_context is thread-safe per the verbs API; we only share the pointer.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// Opens `name`, or the first device when `name` is None.
    pub fn open(name: Option<&str>) -> Result<Arc<Context>> {
        let mut count = 0i32;
        // SAFETY: ibv_get_device_list writes the count and returns an owned array or null.
        let list = unsafe { ffi::ibv_get_device_list(&mut count) };
        if list.is_null() || count <= 0 {
            if !list.is_null() {
                // SAFETY: the list came from ibv_get_device_list.
                unsafe { ffi::ibv_free_device_list(list) };
            }
            return Err(unavailable("no RDMA device found (is rdma_rxe or a HCA driver loaded?)".into()));
        }
        let mut names = Vec::new();
        let mut chosen = None;
        for i in 0..count as usize {
            // SAFETY: i < count entries of the list are valid device pointers.
            let dev = unsafe { *list.add(i) };
            // SAFETY: the device name is a NUL-terminated string owned by the list.
            let dev_name =
                unsafe { CStr::from_ptr(ffi::ibv_get_device_name(dev)) }.to_string_lossy().into_owned();
            if chosen.is_none() && name.is_none_or(|n| n == dev_name) {
                chosen = Some((dev, dev_name.clone()));
            }
            names.push(dev_name);
        }
        let result = match chosen {
            None => Err(unavailable(format!(
                "device {:?} not found; devices: {}",
                name.unwrap_or(""),
                names.join(", ")
            ))),
            Some((dev, dev_name)) => {
                // SAFETY: dev is a valid device from the list, which is still alive here.
                let raw = unsafe { ffi::ibv_open_device(dev) };
                if raw.is_null() {
                    Err(unavailable(format!(
                        "ibv_open_device({dev_name}): {}",
                        std::io::Error::last_os_error()
                    )))
                } else {
                    Ok(Arc::new(Context { raw, name: dev_name }))
                }
            }
        };
        // SAFETY: opened contexts stay valid after the list is freed.
        unsafe { ffi::ibv_free_device_list(list) };
        result
    }

    pub fn query_port(&self, port: u8) -> Result<PortInfo> {
        let mut attr = ffi::ibv_port_attr::default();
        // SAFETY: the exported ibv_query_port fills the compat prefix of ibv_port_attr, which
        // is layout-compatible; attr lives on our stack.
        let rc = unsafe {
            ffi::ibv_query_port(
                self.raw,
                port,
                &mut attr as *mut ffi::ibv_port_attr as *mut ffi::_compat_ibv_port_attr,
            )
        };
        if rc != 0 {
            return Err(unavailable(format!("ibv_query_port({}, {port}): errno {rc}", self.name)));
        }
        if attr.state != ffi::ibv_port_state::IBV_PORT_ACTIVE {
            return Err(unavailable(format!(
                "{} port {port} is not active (state {})",
                self.name, attr.state
            )));
        }
        Ok(PortInfo {
            lid: attr.lid,
            active_mtu: attr.active_mtu as u8,
            link_layer: attr.link_layer,
            max_msg_size: attr.max_msg_sz,
            gid_table_len: attr.gid_tbl_len,
        })
    }

    /// Limits for queue sizing.
    pub fn limits(&self) -> Result<Limits> {
        let mut attr = ffi::ibv_device_attr::default();
        // SAFETY: attr lives on our stack; the context is open.
        let rc = unsafe { ffi::ibv_query_device(self.raw, &mut attr) };
        if rc != 0 {
            return Err(unavailable(format!("ibv_query_device({}): errno {rc}", self.name)));
        }
        Ok(Limits {
            max_qp_wr: attr.max_qp_wr.max(1) as u32,
            max_rd_atomic: attr.max_qp_rd_atom.clamp(1, 255) as u8,
            max_cqe: attr.max_cqe.max(1) as u32,
            max_srq: attr.max_srq.max(0) as u32,
            max_srq_wr: attr.max_srq_wr.max(0) as u32,
        })
    }

    pub fn gid(&self, port: u8, index: i32) -> Result<[u8; 16]> {
        let mut gid = ffi::ibv_gid::default();
        // SAFETY: gid lives on our stack; index is checked by the library.
        let rc = unsafe { ffi::ibv_query_gid(self.raw, port, index, &mut gid) };
        if rc != 0 {
            return Err(unavailable(format!("ibv_query_gid({}, {port}, {index}): errno {rc}", self.name)));
        }
        // SAFETY: both union members are plain bytes.
        Ok(unsafe { gid.raw })
    }

    /// The GID index to use: `wanted`, or on RoCE the first RoCE v2 GID holding an IPv4 address
    /// (what rxe needs), or 0.
    pub fn pick_gid_index(&self, port: u8, info: &PortInfo, wanted: Option<i32>) -> Result<i32> {
        if let Some(i) = wanted {
            self.gid(port, i)?;
            return Ok(i);
        }
        if !info.is_ethernet() {
            return Ok(0);
        }
        for i in 0..info.gid_table_len.min(64) {
            let ty = std::fs::read_to_string(format!(
                "/sys/class/infiniband/{}/ports/{port}/gid_attrs/types/{i}",
                self.name
            ))
            .unwrap_or_default();
            let Ok(gid) = self.gid(port, i) else { continue };
            let v4_mapped = gid[..10].iter().all(|b| *b == 0) && gid[10] == 0xff && gid[11] == 0xff;
            if ty.trim() == "RoCE v2" && v4_mapped {
                return Ok(i);
            }
        }
        Ok(0)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every child object holds an Arc<Context>, so none is alive any more.
        unsafe { ffi::ibv_close_device(self.raw) };
    }
}

/// Whether the verbs provider can run here: the configured devices (`REVERB_VERBS_DEVICE`,
/// every entry, as any node may use any; else the first device) open, with the configured
/// port active and a GID to use. Cheap: opens and closes contexts, makes no queues; for the
/// `auto` provider to choose verbs between hosts.
pub(crate) fn usable() -> bool {
    super::VerbsOptions::from_env().is_ok_and(|opts| usable_with(&opts))
}

/// [`usable`] with these options.
pub(super) fn usable_with(opts: &super::VerbsOptions) -> bool {
    let check = |name: Option<&str>| -> Result<()> {
        let ctx = Context::open(name)?;
        let port = ctx.query_port(opts.port)?;
        ctx.pick_gid_index(opts.port, &port, opts.gid_index)?;
        Ok(())
    };
    let result = match opts.devices.is_empty() {
        true => check(None),
        false => opts.devices.iter().try_for_each(|d| check(Some(d))),
    };
    if let Err(e) = &result {
        tracing::debug!("verbs not usable: {e}");
    }
    result.is_ok()
}
