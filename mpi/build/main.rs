//! reverb-mpi's build: MPICH's ABI and MPI's C binding, from MPICH's headers (Debian's
//! libmpich-dev, or REVERB_MPICH_INCLUDE), as MPICH generates its own from one list.
//!
//! - `abi`: every integer constant of `mpi.h` (handles, error classes, limits) in Rust.
//! - `proto`: the list of signatures, `mpi_proto.h` (with `mpio.h`'s MPI-IO functions and
//!   reverb's `include/mpix_reverb.h`), parsed into prototypes.
//! - `shims`: for each function the crate implements (a hand-written `fn mpi_x` holding its
//!   semantics) the exported `PMPI_X`, typed from its prototype (`ctypes`), with a `# Safety`
//!   section from its parameters' kinds (`safety`); `derived`: the nonblocking and persistent
//!   collectives, from their blocking forms.
//! - `fortran`: MPICH's Fortran binding's attribute helpers (`MPII_*`), from the C
//!   functions' prototypes they extend.
//! - `pmpi`: a stub for every other function of the list, stopping the job with "not
//!   supported by reverb"; `MPI_X` as an alias of every `PMPI_X` (the profiling interface);
//!   MPICH's soname, libmpich.so.12.
//! - `contract`: the hand-written `extern "C"` functions left (Fortran helpers, callbacks)
//!   keep the FFI contract.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod abi;
mod contract;
mod ctypes;
mod derived;
mod fortran;
mod pmpi;
mod proto;
mod safety;
mod shims;

const DEFAULT_INCLUDE: &str = "/usr/include/x86_64-linux-gnu/mpich";

fn main() {
    println!("cargo:rerun-if-env-changed=REVERB_MPICH_INCLUDE");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=build");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpich.so.12");
    println!("cargo:rerun-if-changed=csrc/long_double.c");
    cc::Build::new().file("csrc/long_double.c").warnings_into_errors(true).compile("reverb_mpi_c");
    let include = std::env::var("REVERB_MPICH_INCLUDE").unwrap_or_else(|_| DEFAULT_INCLUDE.into());
    let include = PathBuf::from(include);
    let read = |path: PathBuf| -> String {
        println!("cargo:rerun-if-changed={}", path.display());
        std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "reverb-mpi takes MPICH's ABI from {}: {e}; install MPICH's headers \
                 (apt-get install libmpich-dev) or set REVERB_MPICH_INCLUDE to their directory",
                path.display()
            )
        })
    };
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    write(&out.join("abi.rs"), &abi::constants_source(&abi::constants(&read(include.join("mpi.h")))));
    let list = list(
        &read(include.join("mpi_proto.h")),
        &read(include.join("mpio.h")),
        &read("include/mpix_reverb.h".into()),
    );
    // The functions generated when implemented: the list's and the Fortran helpers mirroring it.
    let mut generated = list.clone();
    generated.extend(fortran::helpers(&list));
    let semantics = shims::semantics(Path::new("src"), &generated);
    write(&out.join("shims.rs"), &shims::source(&generated, &semantics));
    let exports = contract::exports(Path::new("src"));
    contract::check_contract(&exports, &generated.keys().cloned().collect());
    let declared: BTreeSet<String> = list.keys().cloned().collect();
    let derived_names = derived::all(&list, &semantics).into_iter().map(|d| d.proto.name.clone());
    let implemented: BTreeSet<String> =
        semantics.keys().cloned().chain(derived_names).chain(exports.into_iter().map(|e| e.name)).collect();
    write(&out.join("stubs.rs"), &pmpi::stubs_source(&declared, &implemented));
    let profiled = pmpi::profiled(&declared, &implemented);
    write(&out.join("aliases.rs"), &pmpi::placeholders_source(&profiled));
    let script = out.join("aliases.ld");
    write(&script, &pmpi::script(&profiled));
    println!("cargo:rustc-cdylib-link-arg={}", script.display());
}

/// The list: `mpi_proto.h`'s functions, MPI-IO's from `mpio.h` (MPICH's Fortran binding calls
/// them too; the rest of what it declares is mpi.h's already, or macros there), reverb's own.
fn list(proto: &str, mpio: &str, reverb: &str) -> BTreeMap<String, proto::Proto> {
    let mut list = proto::prototypes(proto, |_| true);
    let io = proto::prototypes(mpio, |n| n.contains("MPI_File_") || n.contains("MPI_Register_datarep"));
    for (name, p) in io.into_iter().chain(proto::prototypes(reverb, |n| n.starts_with("MPIX_Reverb_"))) {
        list.entry(name).or_insert(p);
    }
    list
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}
