//! `reverb`, a libfabric provider carried by reverb's transport: `libreverb-fi.so`, which
//! libfabric 1.17 loads from `FI_PROVIDER_PATH` through [`fi_prov_ini`]. Endpoints are
//! `FI_EP_RDM` with `FI_MSG`, `FI_TAGGED` and `FI_RMA`, manual progress, `FI_THREAD_DOMAIN`,
//! address vectors of either type; peers are wired up the libfabric way (`fi_getname` /
//! `fi_av_insert`) over reverb's shm provider (docs/ofi.md).
//!
//! - [`abi`]: the C structs and constants, declared by hand and checked against the headers;
//! - [`obj`]: the unsafe plumbing objects share; [`core`]: the logic, safe;
//! - [`info`]: `fi_getinfo`; `fabric`, `av`, `cq`, `cntr`, `ep`: the objects' C entry points
//!   (`bound`: the endpoints a CQ or counter progresses);
//! - [`mr`]: memory registration; `rma`: RMA emulated over messages; `rma_ops`: its entry points;
//! - `lend`: the consumer's buffers handed to the carrier, to be read or written in place.

pub mod abi;
mod av;
mod bound;
mod cntr;
pub mod core;
mod cq;
mod ep;
pub mod error;
mod fabric;
pub mod info;
mod lend;
pub mod mr;
pub mod name;
pub mod obj;
mod rma;
mod rma_ops;
pub mod service;

use std::ffi::{c_char, c_int, CStr};

use abi::*;

/// The provider's own version, as `fi_info -v` shows it.
const PROVIDER_VERSION: u32 = fi_version(0, 1);
/// The libfabric API it is written against (Debian's 1.17).
const API_VERSION: u32 = fi_version(1, 17);

unsafe extern "C" fn getinfo(
    version: u32,
    _node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi_info,
    info: *mut *mut fi_info,
) -> c_int {
    if info.is_null() {
        return -FI_EINVAL;
    }
    let carrier = match name::Carrier::from_env() {
        Ok(c) => c,
        Err(e) => return -e.errno(),
    };
    // SAFETY: libfabric passes the consumer's hints: null or a valid fi_info.
    let hints = unsafe { info::read_hints(hints, carrier) };
    let Some(offer) = info::offer(&hints) else { return -FI_ENODATA };
    // A server names the service it will publish; a client finds the server's address.
    // Every info has a source address: the mark, with no service but a server's.
    // SAFETY: null or a C string (fi_getinfo's contract).
    let service =
        (!service.is_null()).then(|| unsafe { CStr::from_ptr(service) }.to_string_lossy().into_owned());
    let (src, dest) = match service {
        Some(s) if flags & FI_SOURCE != 0 => ([service::MARK, s.as_bytes()].concat(), Vec::new()),
        Some(s) => match service::lookup(&s) {
            Some(address) => (service::MARK.to_vec(), address),
            None => return -FI_ENODATA,
        },
        None => (service::MARK.to_vec(), Vec::new()),
    };
    let built = info::build(&offer, version);
    // SAFETY: null or the info fi_dupinfo just made.
    if unsafe { !info::set_addresses(built, &src, &dest) } {
        // SAFETY: as above.
        unsafe { fi_freeinfo(built) };
        return -FI_ENOMEM;
    }
    // SAFETY: checked non-null above; libfabric reads the answer from here.
    unsafe { info.write(built) };
    0
}

unsafe extern "C" fn cleanup() {}

/// The external-provider entry point libfabric looks up in `lib<name>-fi.so`. libfabric keeps
/// the description and writes its own bookkeeping into `context`, so each call leaks a fresh
/// one (libfabric calls it once per process).
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut fi_provider {
    Box::into_raw(Box::new(fi_provider {
        version: PROVIDER_VERSION,
        fi_version: API_VERSION,
        context: fi_context { internal: [std::ptr::null_mut(); 4] },
        name: c"reverb".as_ptr(),
        getinfo: Some(getinfo),
        fabric: Some(fabric::open),
        cleanup: Some(cleanup),
    }))
}
