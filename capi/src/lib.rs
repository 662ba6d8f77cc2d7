//! reverb's C ABI: `libreverb.so` / `libreverb.a` with `reverb.h` (generated from this
//! source by cbindgen; `include/reverb.h`, kept current by the `header` test).
//!
//! Two layers, as in Rust:
//! - the **transport** (`reverb_transport_*`, `reverb_region_*`, `reverb_put`, `reverb_get`,
//!   `reverb_send`, `reverb_recv`, `reverb_poll`, `reverb_wait`): registered regions, one-sided
//!   RMA, tagged messages and completions, on whichever provider `REVERB_PROVIDER` names;
//! - the **runtime** (`reverb_runtime_*`): message logging, in-memory checkpoints and local
//!   rollback recovery; protect memory, checkpoint, restore after a restart (FTI's shape).
//!
//! Every call returns `REVERB_OK` (0) or a `REVERB_ERR_*` code, with the message in
//! `reverb_last_error()`; no Rust panic crosses the boundary. Handles are used from one thread
//! at a time. Programs run under `reverb run`, which gives each rank its place in the job.

mod completion;
mod ptr;
mod runtime;
mod status;
mod transport;

pub use completion::*;
pub use runtime::*;
pub use status::*;
pub use transport::*;

/// The library's version, `"MAJOR.MINOR.PATCH"`.
#[no_mangle]
pub extern "C" fn reverb_version() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
