//! The shared multi-process harness (`reverb_transport::testkit`).
#![allow(unused_imports)]
pub use reverb_transport::testkit::*;

/// Scale for the tests' time bounds: `REVERB_TEST_TIME_SCALE` (a whole number, default 1), set
/// where everything runs slower (the emulated rxe VM). Bad values fall back to 1: test code.
pub fn time_scale() -> u32 {
    std::env::var("REVERB_TEST_TIME_SCALE")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&s| s > 0)
        .unwrap_or(1)
}
