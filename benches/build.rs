//! Probes for Debian's ISA-L (`libisal-dev`) so the Reed-Solomon bench can compare against it.
//!
//! The probe compiles and links a tiny C program calling `ec_init_tables`/`ec_encode_data`. On
//! success it sets `cfg(have_isal)` and links `-lisal`; otherwise the bench still builds and
//! prints the reason (REVERB_ISAL_SKIP_REASON) instead of ISA-L numbers. `REVERB_NO_ISAL=1`
//! forces the skip path (to test a machine without the package). The probe result is cached like
//! any build-script output: after installing or removing the package, `touch benches/build.rs`.

use std::env;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

const PROBE_SOURCE: &str = r#"
#include <isa-l/erasure_code.h>
int main(void) {
    unsigned char coefficients[2] = {1, 1};
    unsigned char tables[64];
    unsigned char a[1] = {1}, b[1] = {2}, out[1];
    unsigned char *data[2] = {a, b};
    unsigned char *coding[1] = {out};
    ec_init_tables(2, 1, coefficients, tables);
    ec_encode_data(1, 2, 1, tables, data, coding);
    return out[0] == 3 ? 0 : 1;
}
"#;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(have_isal)");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=REVERB_NO_ISAL");
    println!("cargo:rerun-if-env-changed=CC");
    match probe_isal() {
        Ok(()) => {
            println!("cargo:rustc-cfg=have_isal");
            println!("cargo:rustc-link-lib=dylib=isal");
            println!("cargo:rustc-env=REVERB_ISAL_SKIP_REASON=");
        }
        Err(reason) => {
            println!("cargo:warning=ISA-L not used by the rs bench: {reason}");
            println!("cargo:rustc-env=REVERB_ISAL_SKIP_REASON={reason}");
        }
    }
}

fn probe_isal() -> Result<(), String> {
    if env::var_os("REVERB_NO_ISAL").is_some_and(|v| v == "1") {
        return Err("disabled by REVERB_NO_ISAL=1".into());
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").ok_or("OUT_DIR not set")?);
    let source = out_dir.join("isal_probe.c");
    let binary = out_dir.join("isal_probe");
    fs::write(&source, PROBE_SOURCE).map_err(|e| format!("writing {}: {e}", source.display()))?;
    let compiler = env::var("CC").unwrap_or_else(|_| "cc".into());
    let output = Command::new(&compiler)
        .arg(&source)
        .arg("-o")
        .arg(&binary)
        .arg("-lisal")
        .output()
        .map_err(|e| format!("C compiler `{compiler}` not runnable: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first_line = stderr.lines().next().unwrap_or("no output").replace(['\n', '\r'], " ");
        return Err(format!(
            "libisal-dev not found (probe failed: {first_line}); apt-get install libisal-dev"
        ));
    }
    Ok(())
}
