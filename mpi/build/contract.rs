//! The hand-written `extern "C"` functions left (Fortran helpers, callbacks) and the FFI
//! contract they keep.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One hand-written `extern "C" fn` of the crate's source, as the contract sees it.
pub struct Export {
    pub name: String,
    pub file: PathBuf,
    /// The symbol it is exported as: its `#[export_name]`, else its name (`#[no_mangle]`).
    pub symbol: String,
    /// `unsafe extern "C" fn`.
    pub is_unsafe: bool,
    /// Its doc comment has a `# Safety` section.
    pub has_safety_doc: bool,
    /// A parameter is a pointer, raw or one of `ffi`'s pointer types.
    pub takes_pointers: bool,
}

/// The functions the crate defines (`[unsafe] extern "C" fn NAME(...)` in its source).
pub fn exports(dir: &Path) -> Vec<Export> {
    let mut found = Vec::new();
    let mut files = vec![dir.to_path_buf()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                files.push(entry.path());
            }
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for (at, _) in text.match_indices("extern \"C\" fn ") {
            let rest = &text[at + "extern \"C\" fn ".len()..];
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            // Up to the return type, or the body of a function that returns nothing.
            let end = [") ->", ") {"].iter().filter_map(|t| rest.find(t)).min().unwrap_or(rest.len());
            let params = &rest[..end];
            let before = &text[..at];
            let is_unsafe = before.ends_with("unsafe ");
            // The doc comment: the `///` lines above the item (attributes in between).
            let doc: Vec<&str> = before
                .lines()
                .rev()
                .skip(1)
                .map(str::trim)
                .take_while(|l| l.starts_with("///") || l.starts_with("#["))
                .collect();
            let pointer_types = ["*const", "*mut", "Out<", "In<", "StatusOut<", "UserBuf"];
            let export_name =
                doc.iter().find_map(|l| l.strip_prefix("#[export_name = \"")?.strip_suffix("\"]"));
            found.push(Export {
                symbol: export_name.map_or_else(|| name.clone(), str::to_string),
                name,
                file: path.clone(),
                is_unsafe,
                has_safety_doc: doc.iter().any(|l| l.trim_start_matches('/').trim() == "# Safety"),
                takes_pointers: pointer_types.iter().any(|p| params.contains(p)),
            });
        }
    }
    found
}

/// The FFI contract: an MPI function of the list is generated, never hand-written; an exported
/// function that takes a pointer is `unsafe` and says what it needs of it (docs/mpi.md,
/// `ffi.rs`); an MPI-named one is exported under its profiling name (`PMPI_X`), its `MPI_X`
/// being the generated alias. A build that breaks any of these stops here.
pub fn check_contract(exports: &[Export], list: &BTreeSet<String>) {
    let by_hand: Vec<String> = exports
        .iter()
        .filter(|e| list.contains(&e.name))
        .map(|e| format!("{} ({})", e.name, e.file.display()))
        .collect();
    if !by_hand.is_empty() {
        panic!(
            "MPI functions of mpi_proto.h are generated from their prototypes: write their semantics \
             as `fn mpi_x` (the name lowercased) instead of `extern \"C\" fn MPI_X`: {}",
            by_hand.join(", ")
        );
    }
    let misnamed: Vec<String> = exports
        .iter()
        .filter(|e| crate::pmpi::profiling_name(&e.name).is_some_and(|p| e.symbol != p))
        .map(|e| format!("{} ({})", e.name, e.file.display()))
        .collect();
    if !misnamed.is_empty() {
        panic!(
            "MPI functions are defined under their profiling names, `#[export_name = \"PMPI_X\"]` on \
             `fn MPI_X` (build.rs makes MPI_X an alias of it): {}",
            misnamed.join(", ")
        );
    }
    let broken: Vec<String> = exports
        .iter()
        .filter(|e| e.takes_pointers && !(e.is_unsafe && e.has_safety_doc))
        .map(|e| format!("{} ({})", e.name, e.file.display()))
        .collect();
    if !broken.is_empty() {
        panic!(
            "exported functions that take pointers must be `unsafe extern \"C\"` with a `# Safety` \
             doc section: {}",
            broken.join(", ")
        );
    }
}
