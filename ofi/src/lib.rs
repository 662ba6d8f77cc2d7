//! `reverb`, a libfabric provider carried by reverb's transport: `libreverb-fi.so`, which
//! libfabric 1.17 loads from `FI_PROVIDER_PATH` through [`fi_prov_ini`]. Endpoints are
//! `FI_EP_RDM` with `FI_MSG` and `FI_TAGGED`, manual progress, `FI_THREAD_DOMAIN`, address
//! vectors of either type; peers are wired up the libfabric way (`fi_getname` /
//! `fi_av_insert`) over reverb's shm provider (docs/ofi.md).
//!
//! - [`abi`]: the C structs and constants, declared by hand and checked against the headers;
//! - [`obj`]: the unsafe plumbing objects share; [`core`]: the logic, safe;
//! - [`info`]: `fi_getinfo`; `fabric`, `av`, `cq`, `ep`: the objects' C entry points.

pub mod abi;
mod av;
pub mod core;
mod cq;
mod ep;
pub mod error;
mod fabric;
pub mod info;
pub mod obj;

use std::ffi::{c_char, c_int};

use abi::*;

/// The provider's own version, as `fi_info -v` shows it.
const PROVIDER_VERSION: u32 = fi_version(0, 1);
/// The libfabric API it is written against (Debian's 1.17).
const API_VERSION: u32 = fi_version(1, 17);

unsafe extern "C" fn getinfo(
    version: u32,
    _node: *const c_char,
    _service: *const c_char,
    _flags: u64,
    hints: *const fi_info,
    info: *mut *mut fi_info,
) -> c_int {
    if info.is_null() {
        return -FI_EINVAL;
    }
    // SAFETY: libfabric passes the consumer's hints: null or a valid fi_info.
    let hints = unsafe { info::read_hints(hints) };
    let Some(offer) = info::offer(&hints) else { return -FI_ENODATA };
    let built = info::build(&offer, version);
    if built.is_null() {
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
