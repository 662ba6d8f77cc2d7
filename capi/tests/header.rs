//! `include/reverb.h` is what cbindgen makes of the source now: a stale header fails here
//! (`REVERB_BLESS=1` rewrites it).

use std::path::Path;

#[test]
fn the_header_matches_the_source() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not read the crate");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let path = dir.join("include/reverb.h");
    if std::env::var_os("REVERB_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("writing include/reverb.h");
        return;
    }
    let kept = std::fs::read(&path).unwrap_or_default();
    assert!(
        kept == fresh,
        "include/reverb.h is stale: run `REVERB_BLESS=1 cargo test -p reverb-capi --test header`"
    );
}
