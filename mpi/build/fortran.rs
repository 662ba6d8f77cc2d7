//! MPICH's Fortran binding (libmpichfort) calls the C binding, and for attributes helpers of
//! MPICH's own (`MPII_Comm_set_attr`, ...): the C function's prototype with the value's kind
//! (`MPIR_Attr_type`) added. Their prototypes follow from the list; the semantics are
//! hand-written as `mpii_*` (`src/fortran/attr.rs`), and they are exported under their own
//! names (the Fortran binding's, with no profiling name).

use std::collections::BTreeMap;

use crate::proto::{Param, Proto};

/// The helpers mirroring `MPI_<x>` with a kind added.
const ATTR: &[&str] =
    &["Comm_set_attr", "Comm_get_attr", "Type_set_attr", "Type_get_attr", "Win_set_attr", "Win_get_attr"];

/// `MPII_<x>`'s prototype for each helper, from `MPI_<x>`'s.
pub fn helpers(list: &BTreeMap<String, Proto>) -> BTreeMap<String, Proto> {
    let mut found = BTreeMap::new();
    for x in ATTR {
        let c = list.get(&format!("MPI_{x}")).unwrap_or_else(|| panic!("MPI_{x} is not in mpi_proto.h"));
        let mut p = c.clone();
        p.name = format!("MPII_{x}");
        p.params.push(Param { ty: "MPIR_Attr_type".into(), name: "attr_type".into() });
        let params: Vec<String> = p
            .params
            .iter()
            .map(|c| {
                if c.ty.ends_with('*') {
                    format!("{}{}", c.ty, c.name)
                } else {
                    format!("{} {}", c.ty, c.name)
                }
            })
            .collect();
        p.text = format!("{} {}({})", p.ret, p.name, params.join(", "));
        found.insert(p.name.clone(), p);
    }
    found
}
