//! Takes MPICH's ABI from the system's `mpi.h` (Debian's libmpich-dev, or REVERB_MPICH_INCLUDE):
//! every integer constant (handles, error classes, limits) becomes a Rust constant, and every
//! MPI function the library does not implement becomes a stub that stops the job with "not
//! supported by reverb", so no call falls through to undefined behaviour. Also gives the
//! library MPICH's soname, libmpich.so.12, and MPICH's profiling interface: every function is
//! defined as `PMPI_X` (the implementation or the stub) with `MPI_X` an alias of it (`pmpi`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const DEFAULT_INCLUDE: &str = "/usr/include/x86_64-linux-gnu/mpich";

fn main() {
    println!("cargo:rerun-if-env-changed=REVERB_MPICH_INCLUDE");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpich.so.12");
    println!("cargo:rerun-if-changed=csrc/long_double.c");
    cc::Build::new().file("csrc/long_double.c").warnings_into_errors(true).compile("reverb_mpi_c");
    let include = std::env::var("REVERB_MPICH_INCLUDE").unwrap_or_else(|_| DEFAULT_INCLUDE.into());
    let include = PathBuf::from(include);
    let read = |name: &str| -> String {
        let path = include.join(name);
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
    let constants = constants(&read("mpi.h"));
    write(&out.join("abi.rs"), &constants_source(&constants));
    let exports = exports(Path::new("src"));
    check_contract(&exports);
    let implemented: BTreeSet<String> = exports.into_iter().map(|e| e.name).collect();
    // MPI-IO's functions are mpio.h's (MPICH's Fortran binding calls them too); the rest of
    // what it declares is mpi.h's already, or macros there (`MPI_Info_c2f`).
    let io = functions(&read("mpio.h"))
        .into_iter()
        .filter(|n| n.contains("MPI_File_") || n.contains("MPI_Register_datarep"));
    let declared: BTreeSet<String> = functions(&read("mpi_proto.h")).into_iter().chain(io).collect();
    write(&out.join("stubs.rs"), &stubs_source(&declared, &implemented));
    let profiled = pmpi::profiled(&declared, &implemented);
    write(&out.join("aliases.rs"), &pmpi::placeholders_source(&profiled));
    let script = out.join("aliases.ld");
    write(&script, &pmpi::script(&profiled));
    println!("cargo:rustc-cdylib-link-arg={}", script.display());
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// `#define MPI_NAME <integer>` (casts and parentheses around it allowed), and aliases of
/// names already seen (`#define MPI_LONG_LONG MPI_LONG_LONG_INT`).
fn constants(header: &str) -> BTreeMap<String, i64> {
    let mut found = BTreeMap::new();
    for line in header.lines() {
        let Some(rest) = line.trim_start().strip_prefix("#define ") else { continue };
        let mut words = rest.splitn(2, char::is_whitespace);
        let (Some(name), Some(value)) = (words.next(), words.next()) else { continue };
        if !(name.starts_with("MPI_") || name.starts_with("MPIX_")) || name.contains('(') {
            continue;
        }
        let value = value.split("/*").next().unwrap_or("").trim();
        if let Some(v) = integer(value) {
            found.insert(name.to_string(), v);
        } else if let Some(&v) = found.get(strip_casts(value)) {
            found.insert(name.to_string(), v);
        }
    }
    found
}

/// `((MPI_Comm)0x44000000)`, `(MPI_Op)(0x58000003)`, `(-32766)` → the bare expression.
fn strip_casts(v: &str) -> &str {
    let mut v = v.trim();
    loop {
        let before = v;
        v = v.trim_start_matches('(').trim_end_matches(')').trim();
        if let Some(rest) = v.strip_prefix("MPI_") {
            // A cast: "MPI_Comm)0x44..." → what follows the ')'.
            if let Some((ty, after)) = rest.split_once(')') {
                if ty.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    v = after.trim();
                }
            }
        }
        if v == before {
            return v;
        }
    }
}

fn integer(v: &str) -> Option<i64> {
    let v = strip_casts(v);
    let (neg, digits) = match v.strip_prefix('-') {
        Some(d) => (true, d.trim()),
        None => (false, v),
    };
    let n = match digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        Some(hex) => i64::from_str_radix(hex, 16).ok()?,
        None => digits.parse::<i64>().ok()?,
    };
    Some(if neg { -n } else { n })
}

fn constants_source(constants: &BTreeMap<String, i64>) -> String {
    let mut s = String::from("// Generated by build.rs from MPICH's mpi.h.\n");
    for (name, value) in constants {
        // Handles are 32-bit patterns (0x8c000000 included); limits fit i32 as they are.
        s.push_str(&format!("pub const {name}: i32 = {}_u32 as i32;\n", *value as u32));
    }
    // The predefined datatypes' names (MPI_Type_get_name): handles of MPICH's datatype kinds.
    s.push_str("pub const TYPE_NAMES: &[(&str, i32)] = &[\n");
    for (name, value) in constants {
        let kind = (*value as u32) >> 24;
        if (kind == 0x4c || kind == 0x8c) && name.starts_with("MPI_") {
            s.push_str(&format!("    (\"{name}\", {}_u32 as i32),\n", *value as u32));
        }
    }
    s.push_str("];\n");
    s
}

/// Names of the functions `mpi_proto.h` declares (MPI_*, PMPI_*, MPIX_*).
fn functions(proto: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in proto.lines() {
        if line.starts_with(' ') || line.starts_with('#') || line.starts_with('/') {
            continue;
        }
        let Some(open) = line.find('(') else { continue };
        let head = &line[..open];
        let name = head.rsplit([' ', '*']).next().unwrap_or("");
        let ours = ["MPI_", "PMPI_", "MPIX_", "PMPIX_"].iter().any(|p| name.starts_with(p));
        if ours && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            names.insert(name.to_string());
        }
    }
    names
}

/// One `extern "C" fn` of the crate's source: what the stubs (and any other generated
/// symbol per exported function) are derived from.
struct Export {
    name: String,
    file: PathBuf,
    /// The symbol it is exported as: its `#[export_name]`, else its name (`#[no_mangle]`).
    symbol: String,
    /// `unsafe extern "C" fn`.
    is_unsafe: bool,
    /// Its doc comment has a `# Safety` section.
    has_safety_doc: bool,
    /// A parameter is a pointer, raw or one of `ffi`'s pointer types.
    takes_pointers: bool,
}

/// The functions the crate defines (`[unsafe] extern "C" fn NAME(...)` in its source).
fn exports(dir: &Path) -> Vec<Export> {
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

/// The FFI contract: an exported function that takes a pointer is `unsafe` and says what it
/// needs of it (docs/mpi.md, `ffi.rs`); an MPI function is exported under its profiling name
/// (`PMPI_X`), its `MPI_X` being the generated alias. A build that breaks either stops here.
fn check_contract(exports: &[Export]) {
    let misnamed: Vec<String> = exports
        .iter()
        .filter(|e| pmpi::profiling_name(&e.name).is_some_and(|p| e.symbol != p))
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

/// A stub per function of `mpi_proto.h` the crate does not implement, defined under its
/// profiling name (the `MPI_X` alias comes with the others): it stops the job naming `MPI_X`.
fn stubs_source(declared: &BTreeSet<String>, implemented: &BTreeSet<String>) -> String {
    let mut s =
        String::from("// Generated by build.rs: MPICH's functions this library does not implement.\n");
    for name in pmpi::names(declared).difference(implemented) {
        let symbol = pmpi::profiling_name(name).unwrap_or_else(|| name.clone());
        s.push_str(&format!(
            "#[export_name = \"{symbol}\"]\npub extern \"C\" fn {symbol}() -> i32 {{ \
             crate::errors::unsupported(\"{name}\") }}\n"
        ));
    }
    s
}

/// MPICH's profiling interface: `PMPI_X` is the definition and `MPI_X` an alias at its address,
/// so a library loaded before this one can define `MPI_X` and reach reverb's through `PMPI_X`.
/// MPICH's `MPI_X` is weak; here it is a linker-script assignment (strong, same address):
/// rustc's version script hides every symbol that no Rust item defines, and stable Rust defines
/// no weak symbols, so each `MPI_X` is also a Rust placeholder (exported, hence listed) that the
/// script's `MPI_X = PMPI_X;` overrides. For a shared library the binding makes no difference:
/// the loader takes the first definition in load order, weak or not.
mod pmpi {
    use std::collections::BTreeSet;

    /// `MPI_X` → `PMPI_X`, `MPIX_X` → `PMPIX_X`; `None` for names outside the interface.
    pub fn profiling_name(name: &str) -> Option<String> {
        (name.starts_with("MPI_") || name.starts_with("MPIX_")).then(|| format!("P{name}"))
    }

    /// The interface's names (`MPI_X`, `MPIX_X`) of declared functions, `PMPI_X` folded in.
    pub fn names(declared: &BTreeSet<String>) -> BTreeSet<String> {
        declared
            .iter()
            .map(|d| d.strip_prefix('P').filter(|n| n.starts_with("MPI")).unwrap_or(d).to_string())
            .collect()
    }

    /// Every `MPI_X`/`MPIX_X` that gets an alias: the declared ones and the crate's own.
    pub fn profiled(declared: &BTreeSet<String>, implemented: &BTreeSet<String>) -> Vec<String> {
        let ours = implemented.iter().filter(|n| profiling_name(n).is_some()).cloned();
        let all: BTreeSet<String> = names(declared).into_iter().chain(ours).collect();
        all.into_iter().collect()
    }

    /// The placeholders: each makes rustc export `MPI_X`; the script points it at `PMPI_X`.
    pub fn placeholders_source(profiled: &[String]) -> String {
        let mut s = String::from(
            "// Generated by build.rs: the MPI_X names, each overridden by `MPI_X = PMPI_X;` in aliases.ld.\n",
        );
        for name in profiled {
            s.push_str(&format!(
                "#[export_name = \"{name}\"]\npub extern \"C\" fn {name}() -> i32 {{ \
                 crate::errors::alias_unlinked(\"{name}\") }}\n"
            ));
        }
        s
    }

    /// The linker script (an input file, so it adds to the default one): `MPI_X = PMPI_X;`.
    pub fn script(profiled: &[String]) -> String {
        let mut s = String::from(
            "/* Generated by reverb-mpi's build.rs: MPI_X is PMPI_X (the profiling interface). */\n",
        );
        for name in profiled {
            if let Some(p) = profiling_name(name) {
                s.push_str(&format!("{name} = {p};\n"));
            }
        }
        s
    }
}
