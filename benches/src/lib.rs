//! Criterion benchmarks live in `benches/`; the library holds only the ISA-L FFI shim they use.

pub mod isal;
