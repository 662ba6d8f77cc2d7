//! The list of signatures: MPICH's `mpi_proto.h` (and the MPI-IO part of `mpio.h`, reverb's
//! `mpix_reverb.h`) parsed into prototypes, as MPICH's own generator reads its list.

use std::collections::BTreeMap;

/// One C parameter: its type with the name taken out (`const int []`, `MPI_Comm`), its name.
#[derive(Clone, Debug)]
pub struct Param {
    pub ty: String,
    pub name: String,
}

/// `ret name(params)`; a variadic tail (`...`) is dropped and remembered.
#[derive(Clone, Debug)]
pub struct Proto {
    pub name: String,
    pub ret: String,
    pub params: Vec<Param>,
    pub variadic: bool,
    /// The declaration as the header has it, on one line (for the generated doc).
    pub text: String,
}

/// The prototypes of `header` whose names `keep` accepts, by name (the first declaration wins).
pub fn prototypes(header: &str, keep: impl Fn(&str) -> bool) -> BTreeMap<String, Proto> {
    let mut found = BTreeMap::new();
    for decl in declarations(header) {
        if let Some(p) = parse(&decl).filter(|p| keep(&p.name)) {
            found.entry(p.name.clone()).or_insert(p);
        }
    }
    found
}

/// The header's statements up to each `;`, comments and preprocessor lines left out.
fn declarations(header: &str) -> Vec<String> {
    let mut text = String::new();
    let mut rest = header;
    while let Some(at) = rest.find("/*") {
        text.push_str(&rest[..at]);
        rest = rest[at..].find("*/").map_or("", |end| &rest[at + end + 2..]);
    }
    text.push_str(rest);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim_start().starts_with('#')).collect();
    lines.join(" ").split(';').map(|d| d.split_whitespace().collect::<Vec<_>>().join(" ")).collect()
}

/// `int MPI_Send(const void *buf, int count) MPICH_API_PUBLIC` → its prototype.
fn parse(decl: &str) -> Option<Proto> {
    // What follows a brace (`extern "C" {` before the first declaration).
    let decl = decl.rsplit(['{', '}']).next().unwrap_or(decl).trim();
    if decl.starts_with("typedef") {
        return None;
    }
    let open = decl.find('(')?;
    let head = &decl[..open];
    let name = head.rsplit([' ', '*']).next()?.to_string();
    let ours = ["MPI_", "MPIX_"].iter().any(|p| name.starts_with(p));
    if !ours || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let ret = normalize(&head[..head.len() - name.len()]);
    let close = matching_paren(decl, open)?;
    let inner = decl[open + 1..close].trim();
    let mut params = Vec::new();
    let mut variadic = false;
    if !inner.is_empty() && inner != "void" {
        for p in inner.split(',') {
            match p.trim() {
                "..." => variadic = true,
                p => params.push(param(p)),
            }
        }
    }
    let text = format!("{}{name}({inner})", if ret.ends_with('*') { ret.clone() } else { format!("{ret} ") });
    Some(Proto { name, ret, params, variadic, text })
}

fn matching_paren(s: &str, open: usize) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in s[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

/// `const int ranges[][3]` → (`const int [][3]`, `ranges`); `MPI_Comm` (unnamed) → (`MPI_Comm`, ``).
fn param(p: &str) -> Param {
    let (decl, dims) = match p.find('[') {
        Some(at) => (&p[..at], p[at..].replace(' ', "")),
        None => (p, String::new()),
    };
    let decl = decl.trim();
    let split = decl.rfind([' ', '*']).map_or(0, |i| i + 1);
    let (ty, name) = (&decl[..split], &decl[split..]);
    let is_type_word = ["int", "double", "void", "char", "long"].contains(&name) || name.starts_with("MPI");
    let (ty, name) = if ty.trim().is_empty()
        || ty.trim() == "const"
        || is_type_word && dims.is_empty() && !ty.contains('*')
    {
        (decl, "")
    } else {
        (ty, name)
    };
    let ty = normalize(ty);
    let ty = if dims.is_empty() { ty } else { format!("{ty} {dims}") };
    Param { ty, name: name.to_string() }
}

/// One space between words, `*`s together after one space: `char**` → `char **`.
fn normalize(ty: &str) -> String {
    let spaced = ty.replace('*', " * ");
    let mut out = String::new();
    for word in spaced.split_whitespace() {
        if word == "*" && out.ends_with('*') {
            out.push('*');
        } else {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(word);
        }
    }
    out
}
