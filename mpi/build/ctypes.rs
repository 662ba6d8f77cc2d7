//! From a C parameter of the list to the crate's FFI type (`ffi.rs`) and what the generated
//! `# Safety` section says of it. The C type decides, with the few exceptions MPI's C
//! binding forces named here (a `void *` that is not a message buffer, MPI-1's non-const
//! input arrays, the status conversions' Fortran statuses).

use crate::proto::Param;

/// What a parameter is, for the `# Safety` doc: pointers only (values need nothing).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Value,
    /// `UserBuf`: a message buffer.
    Buffer,
    /// `Out<'_, T>`: written (scalar or array).
    Out,
    /// `Out<'_, T>`, an array also read (`MPI_Waitall`'s requests).
    InOut,
    /// `In<'_, T>`: read (scalar or array).
    In,
    /// `StatusOut<'_>`.
    Status,
    /// `Out<'_, CStatus>` / `In<'_, CStatus>` of a status conversion or setter.
    StatusRw,
    StatusIn,
    CStrIn,
    CStrOut,
    /// `char *[]` (NUL-terminated strings).
    CStrs,
    /// `void *` stored and handed back.
    Opaque,
    /// `void *` used as `void **` (an attribute value, `MPI_Alloc_mem`'s pointer).
    PtrOut,
    /// A program's function.
    Function,
    /// An address compared or handed over, never read here (`MPI_Get_address`, `MPI_Free_mem`).
    Address,
}

pub struct Mapped {
    pub rust: String,
    pub kind: Kind,
}

fn m(rust: &str, kind: Kind) -> Option<Mapped> {
    Some(Mapped { rust: rust.to_string(), kind })
}

/// MPICH's handles are `int`s; `MPI_Fint` is Fortran's `INTEGER`.
const HANDLES: &[&str] = &[
    "int",
    "MPI_Comm",
    "MPI_Datatype",
    "MPI_Group",
    "MPI_Info",
    "MPI_Op",
    "MPI_Request",
    "MPI_Win",
    "MPI_Errhandler",
    "MPI_Message",
    "MPI_Session",
    "MPI_Fint",
    // MPICH's attribute kinds (an enum), which its Fortran helpers take.
    "MPIR_Attr_type",
];
/// `long` in MPICH's mpi.h on LP64 (`MPI_Offset` is `long long`, the same 64 bits).
const WIDE: &[&str] = &["MPI_Aint", "MPI_Count", "MPI_Offset", "long"];

/// The C types of the program's functions → the crate's function-pointer types.
const FUNCTIONS: &[(&str, &str)] = &[
    ("MPI_Comm_copy_attr_function", "crate::attr::CopyFn"),
    ("MPI_Type_copy_attr_function", "crate::attr::CopyFn"),
    ("MPI_Win_copy_attr_function", "crate::attr::CopyFn"),
    ("MPI_Copy_function", "crate::attr::CopyFn"),
    ("MPI_Comm_delete_attr_function", "crate::attr::DeleteFn"),
    ("MPI_Type_delete_attr_function", "crate::attr::DeleteFn"),
    ("MPI_Win_delete_attr_function", "crate::attr::DeleteFn"),
    ("MPI_Delete_function", "crate::attr::DeleteFn"),
    ("MPI_Comm_errhandler_function", "crate::errhandler::HandlerFn"),
    ("MPI_Win_errhandler_function", "crate::errhandler::HandlerFn"),
    ("MPI_File_errhandler_function", "crate::errhandler::HandlerFn"),
    ("MPI_Handler_function", "crate::errhandler::HandlerFn"),
    ("MPI_User_function", "crate::op::UserFn"),
    ("MPI_User_function_c", "crate::op::UserFnC"),
    ("MPI_Grequest_query_function", "crate::request::QueryFn"),
    ("MPI_Grequest_free_function", "crate::request::FreeFn"),
    ("MPI_Grequest_cancel_function", "crate::request::CancelFn"),
];

/// MPI-1's deprecated constructors declare input arrays without `const`.
const NON_CONST_INPUTS: &[&str] = &["MPI_Type_hindexed", "MPI_Type_struct", "MPI_Type_hvector"];

/// `void *`s that are memory handed over rather than a message buffer.
const MEMORY: &[&str] = &["MPI_Free_mem", "MPI_Buffer_attach", "MPI_Buffer_detach"];

fn scalar(ty: &str) -> Option<&'static str> {
    if HANDLES.contains(&ty) {
        Some("c_int")
    } else if WIDE.contains(&ty) {
        Some("c_long")
    } else {
        None
    }
}

/// The return type: a handle, an address-sized integer, `double`, or `MPI_File` (a pointer).
pub fn ret(ty: &str) -> Option<String> {
    match ty {
        "double" => Some("c_double".into()),
        "MPI_File" => Some("*mut c_void".into()),
        t => scalar(t).map(str::to_string),
    }
}

/// The Rust type of `p`, a parameter of `function`; `None` for a C type outside the table.
pub fn map(function: &str, p: &Param) -> Option<Mapped> {
    let ty = p.ty.as_str();
    // `const int level` (by value, so the `const` says nothing to the caller).
    if let Some(r) = ty.strip_prefix("const ").and_then(scalar) {
        return m(r, Kind::Value);
    }
    if let Some(r) = scalar(ty) {
        return m(r, Kind::Value);
    }
    let status_fn = function.starts_with("MPI_Status_");
    match ty {
        "MPI_File" => return m("*mut c_void", Kind::Address),
        "const char *" | "const char []" => return m("*const c_char", Kind::CStrIn),
        "char *" => return m("*mut c_char", Kind::CStrOut),
        "char * []" => return m("*mut *mut c_char", Kind::CStrs),
        "char ***" => return m("Out<'_, *mut *mut c_char>", Kind::Out),
        "int [][3]" => return m("In<'_, [c_int; 3]>", Kind::In),
        "const void *" if p.name == "location" => return m("*const c_void", Kind::Address),
        "const void *" => return m("UserBuf", Kind::Buffer),
        "void *" => return void_ptr(function, &p.name),
        "MPI_Status *" | "MPI_Status []" if !status_fn => return m("StatusOut<'_>", Kind::Status),
        "MPI_Status *" | "MPI_F08_status *" | "MPI_Fint *" if status_fn => {
            return m("Out<'_, CStatus>", Kind::StatusRw)
        }
        "const MPI_Status *" | "const MPI_F08_status *" => return m("In<'_, CStatus>", Kind::StatusIn),
        "const MPI_Fint *" if status_fn => return m("In<'_, CStatus>", Kind::StatusIn),
        _ => {}
    }
    if let Some(f) = ty.strip_suffix(" *").and_then(|t| FUNCTIONS.iter().find(|(c, _)| *c == t)) {
        return m(&format!("Option<{}>", f.1), Kind::Function);
    }
    // Arrays and pointers of handles and integers.
    let (is_const, rest) = match ty.strip_prefix("const ") {
        Some(r) => (true, r),
        None => (false, ty),
    };
    let (base, is_array) = match (rest.strip_suffix(" []"), rest.strip_suffix(" *")) {
        (Some(b), _) => (b, true),
        (_, Some(b)) => (b, false),
        _ => return None,
    };
    let elem = scalar(base)?;
    if is_const || NON_CONST_INPUTS.contains(&function) && is_array {
        m(&format!("In<'_, {elem}>"), Kind::In)
    } else if is_array && base == "MPI_Request" || function == "MPI_Dims_create" && p.name == "dims" {
        m(&format!("Out<'_, {elem}>"), Kind::InOut)
    } else {
        m(&format!("Out<'_, {elem}>"), Kind::Out)
    }
}

/// `void *`: a message buffer unless its name or function says otherwise.
fn void_ptr(function: &str, name: &str) -> Option<Mapped> {
    let gets = function.contains("get_attr") || function == "MPI_Attr_get";
    match name {
        "extra_state" => m("*mut c_void", Kind::Opaque),
        "attribute_val" if gets => m("Out<'_, usize>", Kind::PtrOut),
        "attribute_val" => m("*mut c_void", Kind::Opaque),
        "baseptr" => m("Out<'_, *mut c_void>", Kind::PtrOut),
        "location" => m("*const c_void", Kind::Address),
        _ if MEMORY.contains(&function) => m("*mut c_void", Kind::Address),
        _ => m("UserBuf", Kind::Buffer),
    }
}
