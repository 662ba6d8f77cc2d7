//! Collectives whose nonblocking and persistent forms follow from the blocking one, as their
//! prototypes do: `MPI_I<x>` is `MPI_<x>` plus a request, the blocking call started as a
//! nonblocking one (`icoll::start`: a coroutine that MPI progress resumes); `MPI_<x>_init` is
//! `MPI_<x>` plus an info and a request, started so at each start (`pcoll::coll_init`). Their
//! arrays are kept as given (MPI keeps them valid until the request completes, or is freed).
//! Only the blocking form is hand-written.

use std::collections::BTreeMap;

use crate::ctypes::Mapped;
use crate::proto::Proto;
use crate::shims::{Semantic, Typed};

/// Collectives whose `MPI_I<x>` is derived.
const NONBLOCKING: &[&str] = &[
    "Barrier",
    "Bcast",
    "Reduce",
    "Allreduce",
    "Gather",
    "Gatherv",
    "Scatter",
    "Scatterv",
    "Allgather",
    "Allgatherv",
    "Alltoall",
    "Alltoallv",
    "Alltoallw",
    "Scan",
    "Exscan",
    "Reduce_scatter_block",
    "Reduce_scatter",
    "Neighbor_allgather",
    "Neighbor_allgatherv",
    "Neighbor_alltoall",
    "Neighbor_alltoallv",
    "Neighbor_alltoallw",
];

/// Large-count collectives whose `MPI_I<x>_c` and `MPI_<x>_init_c` derive from `MPI_<x>_c`.
const NONBLOCKING_C: &[&str] = &[
    "Bcast_c",
    "Reduce_c",
    "Allreduce_c",
    "Gather_c",
    "Gatherv_c",
    "Scatter_c",
    "Scatterv_c",
    "Allgather_c",
    "Allgatherv_c",
    "Alltoall_c",
    "Alltoallv_c",
    "Alltoallw_c",
    "Scan_c",
    "Exscan_c",
    "Reduce_scatter_block_c",
    "Reduce_scatter_c",
    "Neighbor_allgather_c",
    "Neighbor_allgatherv_c",
    "Neighbor_alltoall_c",
    "Neighbor_alltoallv_c",
    "Neighbor_alltoallw_c",
];

/// The persistent form's name: `MPI_<x>_init`, and `MPI_<x>_init_c` for a large-count `<x>_c`.
fn persistent_name(x: &str) -> String {
    match x.strip_suffix("_c") {
        Some(base) => format!("MPI_{base}_init_c"),
        None => format!("MPI_{x}_init"),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Nonblocking,
    Persistent,
}

pub struct Derived<'a> {
    pub proto: &'a Proto,
    pub form: Form,
    pub blocking: &'a Proto,
    pub sem: &'a Semantic,
}

/// Every derived function, checked against the list: its prototype is the blocking one's
/// parameters and then the added ones, or the build stops.
pub fn all<'a>(
    list: &'a BTreeMap<String, Proto>,
    semantics: &'a BTreeMap<String, Semantic>,
) -> Vec<Derived<'a>> {
    let forms = NONBLOCKING
        .iter()
        .chain(NONBLOCKING_C)
        .map(|x| (format!("MPI_I{}", x.to_lowercase()), x, Form::Nonblocking))
        .chain(NONBLOCKING.iter().chain(NONBLOCKING_C).map(|x| (persistent_name(x), x, Form::Persistent)));
    let mut found = Vec::new();
    for (name, x, form) in forms {
        let blocking_name = format!("MPI_{x}");
        let find = |n: &str| list.get(n).unwrap_or_else(|| panic!("{n} is not in mpi_proto.h"));
        let (proto, blocking) = (find(&name), find(&blocking_name));
        let sem = semantics
            .get(&blocking_name)
            .unwrap_or_else(|| panic!("{name} derives from {blocking_name}, which has no mpi_* function"));
        if semantics.contains_key(&name) {
            panic!("{name} is derived from {blocking_name} (build/derived.rs) and hand-written too");
        }
        let added: &[&str] = match form {
            Form::Nonblocking => &["MPI_Request *"],
            Form::Persistent => &["MPI_Info", "MPI_Request *"],
        };
        let types = |p: &Proto| p.params.iter().map(|c| c.ty.clone()).collect::<Vec<_>>();
        let want: Vec<String> =
            types(blocking).into_iter().chain(added.iter().map(|t| t.to_string())).collect();
        if types(proto) != want {
            panic!("{name} is not {blocking_name}'s parameters and then {added:?}: {}", proto.text);
        }
        found.push(Derived { proto, form, blocking, sem });
    }
    found
}

/// The derived `MPI_I<x>` or `MPI_<x>_init`, calling the blocking form's `mpi_<x>`.
pub fn shim(mut t: Typed, d: &Derived) -> String {
    let n = d.blocking.params.len();
    if d.form == Form::Persistent {
        // The info: reverb takes no hints for a persistent collective.
        t.params[n].0 = format!("_{}", t.params[n].0);
    }
    let path = format!("{}::{}", d.sem.module, d.blocking.name.to_lowercase());
    // Every collective's last parameter is its communicator; the request comes last.
    let comm = &t.params[n - 1].0;
    let request = &t.params[t.params.len() - 1].0;
    let (what, body) = match d.form {
        Form::Nonblocking => {
            ("started as a nonblocking collective", kept_run(&t.params[..n], &path, d, NONBLOCKING_SAFETY))
        }
        Form::Persistent => ("started at each start", kept_run(&t.params[..n], &path, d, PERSISTENT_SAFETY)),
    };
    let mut s = t.head(&format!("`{}` {what} (`{path}`)", d.blocking.name), true);
    let helper = match d.form {
        Form::Nonblocking => "crate::icoll::start",
        Form::Persistent => "crate::pcoll::coll_init",
    };
    s.push_str(&body.0);
    s.push_str(&format!("    {helper}(\"{}\", {comm}, {request}, {})\n}}\n\n", d.proto.name, body.1));
    s
}

const NONBLOCKING_SAFETY: &str = "a nonblocking collective not complete yet: MPI keeps its buffers \
     and arrays valid and unchanged until it completes (MPI 4.0, 6.12).";
const PERSISTENT_SAFETY: &str = "a start of this persistent request, not freed yet: MPI keeps its \
     buffers and arrays valid and unchanged until it is freed (MPI 4.0, 6.13).";

/// (statements keeping the arrays, the closure that runs the blocking call).
fn kept_run(args: &[(String, Mapped)], path: &str, d: &Derived, safety: &str) -> (String, String) {
    let kept: Vec<&str> =
        args.iter().filter(|(_, m)| m.rust.starts_with("In<")).map(|(a, _)| a.as_str()).collect();
    let before: String = kept.iter().map(|a| format!("    let {a} = {a}.keep();\n")).collect();
    let names: Vec<String> = args
        .iter()
        .map(|(a, _)| if kept.contains(&a.as_str()) { format!("{a}.get()") } else { a.clone() })
        .collect();
    let call = format!("{path}({})", names.join(", "));
    let run = if d.sem.is_unsafe || !kept.is_empty() {
        format!("move || {{\n        // SAFETY: {safety}\n        unsafe {{ {call} }}\n    }}")
    } else {
        format!("move || {call}")
    };
    (before, run)
}
