//! Compiles `abi/layout.c`, which records libfabric's struct offsets as the installed headers
//! define them, so that `abi`'s tests compare them with the hand-declared Rust structs.

fn main() {
    println!("cargo:rerun-if-changed=abi/layout.c");
    cc::Build::new().file("abi/layout.c").compile("reverb_fi_layout");
    println!("cargo:rustc-link-lib=fabric");
}
