//! The shared multi-process harness (`reverb_transport::testkit`).
#![allow(unused_imports)]
pub use reverb_transport::testkit::*;
