//! The generated `# Safety` section: what each pointer parameter must be, by its kind
//! (`ffi.rs`'s contract), for as long as the function's semantics need it.

use crate::ctypes::{Kind, Mapped};
use crate::proto::{Param, Proto};

/// Parameters whose needs no kind says (memory exposed or handed over past the call).
const SPECIAL: &[(&str, &str, &str)] = &[
    ("MPI_Win_create", "base", "`size` bytes the program exposes until `MPI_Win_free`"),
    ("MPI_Win_attach", "base", "`size` bytes the program exposes until `MPI_Win_detach`"),
    ("MPI_Win_detach", "base", "an address given to `MPI_Win_attach`, never dereferenced here"),
    ("MPI_Free_mem", "base", "an address `MPI_Alloc_mem` gave (anything else is refused)"),
    ("MPI_Buffer_attach", "buffer", "`size` bytes the program lends until `MPI_Buffer_detach`"),
    ("MPI_Buffer_detach", "buffer_addr", "null or writable for one `void *` (declared `void *`)"),
    (
        "MPIX_Reverb_protect",
        "ptr",
        "`bytes` readable and writable bytes, valid until `MPI_Finalize` (read at every \
         checkpoint, written at a restore)",
    ),
];

/// One-sided calls: their origin and result buffers are used until the epoch's synchronization.
const RMA: &[&str] = &[
    "MPI_Put",
    "MPI_Get",
    "MPI_Accumulate",
    "MPI_Get_accumulate",
    "MPI_Fetch_and_op",
    "MPI_Compare_and_swap",
];

/// How long a message buffer of `p` must stay valid.
fn buffer_span(p: &Proto) -> &'static str {
    let starts_request = p.params.iter().any(|c| c.ty == "MPI_Request *");
    if p.name.ends_with("_init") {
        "until the request is freed (MPI's rule for persistent requests)"
    } else if starts_request {
        "until the request completes"
    } else if RMA.contains(&p.name.as_str()) {
        "until the epoch's synchronization"
    } else {
        "for the call"
    }
}

fn need(p: &Proto, param: &Param, kind: Kind) -> Option<String> {
    if let Some((_, _, text)) = SPECIAL.iter().find(|(f, n, _)| *f == p.name && *n == param.name) {
        return Some(text.to_string());
    }
    // An array (`int []`, not `int *`) is as long as the call's counts say.
    let many = if param.ty.ends_with(']') { " (as many as the counts say)" } else { "" };
    let text = match kind {
        Kind::Value => return None,
        Kind::Buffer => {
            format!("a message buffer (`UserBuf`) spanning its count of its datatype, {}", buffer_span(p))
        }
        Kind::Out => format!("null or writable for the call{many}"),
        Kind::InOut => format!("null or readable and writable for the call{many}"),
        Kind::In if p.name.ends_with("_init") => format!("null or readable{many} until the request is freed"),
        Kind::In => format!("null or readable for the call{many}"),
        Kind::Status => "null, `MPI_STATUS(ES)_IGNORE`, or writable statuses for the call".into(),
        Kind::StatusRw => {
            "null or a status (C, Fortran or F08, as the name says), writable for the call".into()
        }
        Kind::StatusIn => {
            "null or a status (C, Fortran or F08, as the name says), readable for the call".into()
        }
        Kind::CStrIn => "null or a NUL-terminated string".into(),
        Kind::CStrOut => "null or room for the call's `MPI_MAX_*` bytes (or its length argument's)".into(),
        Kind::CStrs => "null or NUL-terminated strings".into(),
        Kind::Opaque => "opaque, stored and handed back, never dereferenced here".into(),
        Kind::PtrOut => "null or writable for one `void *` for the call (declared `void *`)".into(),
        Kind::Function => "null or the program's function of the C type MPI declares".into(),
        Kind::Address => "an address, never dereferenced here".into(),
    };
    Some(text)
}

/// The `# Safety` doc lines of `p`, parameters with the same need on one line.
pub fn doc(p: &Proto, params: &[(String, Mapped)]) -> String {
    let mut lines: Vec<(Vec<String>, String)> = Vec::new();
    for (c, (name, m)) in p.params.iter().zip(params) {
        let Some(text) = need(p, c, m.kind) else { continue };
        match lines.iter_mut().find(|(_, t)| *t == text) {
            Some((names, _)) => names.push(format!("`{}`", name.trim_start_matches("r#"))),
            None => lines.push((vec![format!("`{}`", name.trim_start_matches("r#"))], text)),
        }
    }
    let mut s =
        String::from("///\n/// # Safety\n///\n/// Pointer arguments follow the FFI contract (`ffi.rs`):\n");
    let n = lines.len();
    for (i, (names, text)) in lines.into_iter().enumerate() {
        let end = if i + 1 == n { '.' } else { ';' };
        s.push_str(&format!("/// {}: {text}{end}\n", names.join(", ")));
    }
    s
}
