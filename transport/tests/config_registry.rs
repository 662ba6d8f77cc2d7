//! The registry (`transport/src/config/registry.rs`) and the repository agree: every
//! `REVERB_*` name in a Rust source or shell script is registered, and every registered
//! name appears in some source or script besides the registry.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use reverb_transport::config::registry::VARS;

/// Directories never scanned: build outputs, VCS data, the VM image cache.
const SKIP_DIRS: &[&str] = &["target", ".git", "cache", "node_modules"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if !SKIP_DIRS.contains(&name.as_ref()) && !name.starts_with('.') {
                source_files(&path, out);
            }
        } else if name.ends_with(".rs") || name.ends_with(".sh") {
            out.push(path);
        }
    }
}

/// `REVERB_[A-Z0-9_]+` names in `text`; a name ending in `_` is a prefix (`REVERB_VERBS_*`).
fn names_in(text: &str) -> impl Iterator<Item = String> + '_ {
    text.match_indices("REVERB_").filter_map(move |(at, _)| {
        let rest = &text[at..];
        let len =
            rest.bytes().take_while(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_').count();
        let name = &rest[..len];
        let preceded = at > 0 && text.as_bytes()[at - 1].is_ascii_alphanumeric();
        (!preceded && !name.ends_with('_')).then(|| name.to_string())
    })
}

/// Every name used outside the registry, with one file that uses it.
fn used_names() -> Vec<(String, PathBuf)> {
    let mut files = Vec::new();
    source_files(&repo_root(), &mut files);
    assert!(files.len() > 50, "found only {} source files under {:?}", files.len(), repo_root());
    let mut used = Vec::new();
    for file in files {
        if file.ends_with("config/registry.rs") || file.ends_with("tests/config_registry.rs") {
            continue;
        }
        // The C ABI's source defines C constants (REVERB_OK, REVERB_ERR_*), not variables: it
        // reads none of its own (the runtime and transport do).
        if file.strip_prefix(repo_root()).is_ok_and(|f| f.starts_with("capi/src")) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        let shown = file.strip_prefix(repo_root()).unwrap_or(&file).to_path_buf();
        used.extend(names_in(&text).map(|n| (n, shown.clone())));
    }
    used
}

#[test]
fn every_used_variable_is_registered_and_every_registered_one_is_used() {
    let registered: BTreeSet<&str> = VARS.iter().map(|v| v.name).collect();
    let used = used_names();
    let mut missing: Vec<String> = used
        .iter()
        .filter(|(n, _)| !registered.contains(n.as_str()))
        .map(|(n, f)| format!("{n} (in {})", f.display()))
        .collect();
    missing.sort();
    missing.dedup_by(|a, b| a.split(' ').next() == b.split(' ').next());
    assert!(missing.is_empty(), "not in transport/src/config/registry.rs: {missing:#?}");

    let used: BTreeSet<&str> = used.iter().map(|(n, _)| n.as_str()).collect();
    let stale: Vec<&&str> = registered.iter().filter(|n| !used.contains(**n)).collect();
    assert!(stale.is_empty(), "registered but used nowhere (remove them): {stale:?}");
}

#[test]
fn the_scanner_finds_names_and_skips_prefixes() {
    let names: Vec<String> = names_in("x `REVERB_VERBS_*` $REVERB_RANK XREVERB_NO REVERB_LOG*").collect();
    assert_eq!(names, ["REVERB_RANK", "REVERB_LOG"]);
}
