//! What made each derived datatype (`MPI_Type_get_envelope`, `MPI_Type_get_contents`), its
//! name (`MPI_Type_set_name`/`_get_name`), and the datatypes MPI finds by size
//! (`MPI_Type_match_size`, `MPI_Type_create_f90_*`).

use std::ffi::{c_char, c_int, c_long};

use crate::abi::*;
use crate::datatype::{Datatype, Elem};
use crate::errors::MpiError;
use crate::ffi;
use crate::ffi::Out;
use crate::state::{call, State};

// mpi.h's combiners (an enum, which the build's constant scan skips).
pub const MPI_COMBINER_NAMED: c_int = 1;
pub const MPI_COMBINER_DUP: c_int = 2;
pub const MPI_COMBINER_CONTIGUOUS: c_int = 3;
pub const MPI_COMBINER_VECTOR: c_int = 4;
pub const MPI_COMBINER_HVECTOR: c_int = 6;
pub const MPI_COMBINER_INDEXED: c_int = 7;
pub const MPI_COMBINER_HINDEXED: c_int = 9;
pub const MPI_COMBINER_INDEXED_BLOCK: c_int = 10;
pub const MPI_COMBINER_STRUCT: c_int = 12;
pub const MPI_COMBINER_SUBARRAY: c_int = 13;
pub const MPI_COMBINER_DARRAY: c_int = 14;
pub const MPI_COMBINER_F90_REAL: c_int = 15;
pub const MPI_COMBINER_F90_COMPLEX: c_int = 16;
pub const MPI_COMBINER_F90_INTEGER: c_int = 17;
pub const MPI_COMBINER_RESIZED: c_int = 18;
pub const MPI_COMBINER_HINDEXED_BLOCK: c_int = 19;

/// A constructor's arguments, as `MPI_Type_get_contents` gives them back. The datatypes it
/// was made of are kept as they were (`inner`), so the contents outlive their handles'
/// `MPI_Type_free`.
#[derive(Debug, Clone)]
pub struct Contents {
    pub combiner: c_int,
    pub ints: Vec<c_int>,
    pub aints: Vec<isize>,
    pub types: Vec<c_int>,
    inner: Vec<Option<(Datatype, Option<Box<Contents>>)>>,
}

impl Contents {
    /// A constructor's record; `types` are looked up now (derived ones copied).
    pub fn new(
        s: &State,
        combiner: c_int,
        ints: Vec<c_int>,
        aints: Vec<isize>,
        types: Vec<c_int>,
    ) -> Contents {
        let inner = types
            .iter()
            .map(|&t| {
                let derived = s.types.get(t)?;
                Some((derived.clone(), s.type_contents.get(&t).cloned().map(Box::new)))
            })
            .collect();
        Contents { combiner, ints, aints, types, inner }
    }

    /// The unit sizes of one element in pack order (what external32 byte-swaps), given the
    /// type it describes; None where it cannot tell (bytes are then left as they are).
    pub fn units(&self, t: &Datatype) -> Option<Vec<usize>> {
        if let Some(u) = uniform_units(t) {
            return Some(u);
        }
        let child = |i: usize| -> Option<Vec<usize>> {
            match self.inner.get(i)? {
                Some((dt, contents)) => match contents {
                    Some(c) => c.units(dt),
                    None => uniform_units(dt),
                },
                None => uniform_units(&Datatype::builtin(*self.types.get(i)?)?),
            }
        };
        if self.combiner == MPI_COMBINER_STRUCT {
            let mut out = Vec::new();
            for (i, &n) in self.ints.iter().skip(1).enumerate().take(self.types.len()) {
                let u = child(i)?;
                for _ in 0..n {
                    out.extend_from_slice(&u);
                }
            }
            return Some(out);
        }
        // One inner type, repeated as often as the sizes say.
        let u = child(0)?;
        let each: usize = u.iter().sum();
        let times = t.size.checked_div(each).unwrap_or(0);
        Some(u.iter().copied().cycle().take(u.len() * times).collect())
    }
}

/// Unit sizes of a type whose elements are all one kind.
pub fn uniform_units(t: &Datatype) -> Option<Vec<usize>> {
    let one = |e: Elem| -> Option<Vec<usize>> {
        Some(match e {
            Elem::Opaque => return None,
            // Reductions see pairs packed: the value's bytes, then the index.
            Elem::Pair(_, value_size) => vec![value_size, 4],
            Elem::ComplexF32 => vec![4, 4],
            Elem::ComplexF64 => vec![8, 8],
            Elem::LongDoubleInt => vec![16, 4],
            e => vec![e.size()],
        })
    };
    if t.elem == Elem::Opaque {
        // Bytes (MPI_BYTE, MPI_PACKED, MPI_CHAR-sized opaque): nothing to swap.
        return (t.size == 0).then(Vec::new);
    }
    let u = one(t.elem)?;
    let each: usize = u.iter().sum();
    let times = t.size.checked_div(each).unwrap_or(0);
    Some(u.iter().copied().cycle().take(u.len() * times).collect())
}

impl State {
    /// Records what made `h`.
    pub fn record_contents(&mut self, h: c_int, contents: Contents) {
        self.type_contents.insert(h, contents);
    }

    /// A new handle for a datatype `MPI_Type_get_contents` hands out (a copy: the program
    /// frees it).
    fn hand_out(&mut self, c: &Contents, i: usize) -> c_int {
        match c.inner.get(i) {
            Some(Some((dt, contents))) => {
                let h = self.types.insert(dt.clone());
                if let Some(contents) = contents {
                    self.type_contents.insert(h, (**contents).clone());
                }
                h
            }
            _ => c.types.get(i).copied().unwrap_or(MPI_DATATYPE_NULL),
        }
    }
}

fn is_predefined(s: &State, h: c_int) -> bool {
    !s.types.items.contains_key(&h) && Datatype::builtin(h).is_some()
}

pub(crate) unsafe fn mpi_type_get_envelope(
    datatype: c_int,
    num_integers: Out<'_, c_int>,
    num_addresses: Out<'_, c_int>,
    num_datatypes: Out<'_, c_int>,
    combiner: Out<'_, c_int>,
) -> c_int {
    call("MPI_Type_get_envelope", MPI_COMM_WORLD, |s| {
        s.datatype(datatype)?;
        let (ni, na, nt, comb) = match s.type_contents.get(&datatype) {
            Some(c) => (c.ints.len(), c.aints.len(), c.types.len(), c.combiner),
            None => (0, 0, 0, MPI_COMBINER_NAMED),
        };
        ffi::out(num_integers, ni as c_int, "num_integers")?;
        ffi::out(num_addresses, na as c_int, "num_addresses")?;
        ffi::out(num_datatypes, nt as c_int, "num_datatypes")?;
        ffi::out(combiner, comb, "combiner")
    })
}

pub(crate) unsafe fn mpi_type_get_contents(
    datatype: c_int,
    max_integers: c_int,
    max_addresses: c_int,
    max_datatypes: c_int,
    integers: Out<'_, c_int>,
    addresses: Out<'_, c_long>,
    datatypes: Out<'_, c_int>,
) -> c_int {
    call("MPI_Type_get_contents", MPI_COMM_WORLD, |s| {
        let c = s.type_contents.get(&datatype).cloned().ok_or_else(|| {
            MpiError::new(MPI_ERR_TYPE, format!("{datatype:#x} is predefined: it has no contents"))
        })?;
        let fits = |n: usize, max: c_int| usize::try_from(max).is_ok_and(|m| m >= n);
        if !fits(c.ints.len(), max_integers)
            || !fits(c.aints.len(), max_addresses)
            || !fits(c.types.len(), max_datatypes)
        {
            return Err(MpiError::new(MPI_ERR_ARG, "the arrays are shorter than mpi_type_get_envelope said"));
        }
        // SAFETY: room for `max_integers` >= the entries written (the FFI contract).
        unsafe { ffi::array_mut(integers, c.ints.len(), "array_of_integers") }?.copy_from_slice(&c.ints);
        let aints: Vec<c_long> = c.aints.iter().map(|&a| a as c_long).collect();
        // SAFETY: as above, `max_addresses`.
        unsafe { ffi::array_mut(addresses, aints.len(), "array_of_addresses") }?.copy_from_slice(&aints);
        let handles: Vec<c_int> = (0..c.types.len()).map(|i| s.hand_out(&c, i)).collect();
        // SAFETY: as above, `max_datatypes`.
        unsafe { ffi::array_mut(datatypes, handles.len(), "array_of_datatypes") }?.copy_from_slice(&handles);
        Ok(())
    })
}

/// A predefined datatype's name (`MPI_INT`), from mpi.h's constants.
fn predefined_name(h: c_int) -> Option<&'static str> {
    crate::abi::TYPE_NAMES
        .iter()
        .find(|(name, v)| *v == h && !name.starts_with("MPI_DATATYPE"))
        .map(|(n, _)| *n)
}

pub(crate) unsafe fn mpi_type_set_name(datatype: c_int, name: *const c_char) -> c_int {
    call("MPI_Type_set_name", MPI_COMM_WORLD, |s| {
        s.datatype(datatype)?;
        // SAFETY: a string argument of this call: NUL-terminated (the FFI contract).
        let mut name = unsafe { ffi::string_in(name) }?;
        name.truncate(MPI_MAX_OBJECT_NAME as usize - 1);
        s.type_names.insert(datatype, name);
        Ok(())
    })
}

pub(crate) unsafe fn mpi_type_get_name(
    datatype: c_int,
    name: *mut c_char,
    resultlen: Out<'_, c_int>,
) -> c_int {
    call("MPI_Type_get_name", MPI_COMM_WORLD, |s| {
        s.datatype(datatype)?;
        let text = match s.type_names.get(&datatype) {
            Some(n) => n.clone(),
            None if is_predefined(s, datatype) => predefined_name(datatype).unwrap_or("").to_string(),
            None => String::new(),
        };
        // SAFETY: room for `MPI_MAX_OBJECT_NAME` bytes (the FFI contract).
        let n = unsafe { ffi::string_out(name, MPI_MAX_OBJECT_NAME as usize, &text) }?;
        ffi::out(resultlen, n, "resultlen")
    })
}

pub(crate) unsafe fn mpi_type_match_size(typeclass: c_int, size: c_int, datatype: Out<'_, c_int>) -> c_int {
    call("MPI_Type_match_size", MPI_COMM_WORLD, |_| {
        let candidates: &[c_int] = match typeclass {
            MPI_TYPECLASS_REAL => &[MPI_FLOAT, MPI_DOUBLE, MPI_LONG_DOUBLE],
            MPI_TYPECLASS_INTEGER => &[MPI_SIGNED_CHAR, MPI_SHORT, MPI_INT, MPI_LONG],
            MPI_TYPECLASS_COMPLEX => &[MPI_C_FLOAT_COMPLEX, MPI_C_DOUBLE_COMPLEX, MPI_C_LONG_DOUBLE_COMPLEX],
            _ => return Err(MpiError::new(MPI_ERR_ARG, format!("type class {typeclass}"))),
        };
        let found = candidates.iter().find(|&&t| Datatype::plain_size(t) == usize::try_from(size).ok());
        let t = found.ok_or_else(|| {
            MpiError::new(MPI_ERR_ARG, format!("no type of class {typeclass} has {size} bytes"))
        })?;
        ffi::out(datatype, *t, "datatype")
    })
}

/// The `MPI_Type_create_f90_*` type of `kind` for (p, r): a datatype like the basic one that
/// holds it, whose envelope names the f90 combiner; one handle per (kind, p, r), as MPI
/// treats these as predefined (never freed).
fn f90_type(function: &str, combiner: c_int, p: c_int, r: c_int, out: Out<'_, c_int>) -> c_int {
    call(function, MPI_COMM_WORLD, |s| {
        let want = |v: c_int, max: c_int| v == MPI_UNDEFINED || (0..=max).contains(&v);
        let basic = match combiner {
            MPI_COMBINER_F90_REAL if want(p, 6) && want(r, 37) => MPI_REAL4,
            MPI_COMBINER_F90_REAL if want(p, 15) && want(r, 307) => MPI_REAL8,
            MPI_COMBINER_F90_COMPLEX if want(p, 6) && want(r, 37) => MPI_COMPLEX8,
            MPI_COMBINER_F90_COMPLEX if want(p, 15) && want(r, 307) => MPI_COMPLEX16,
            MPI_COMBINER_F90_INTEGER if want(r, 2) => MPI_INTEGER1,
            MPI_COMBINER_F90_INTEGER if want(r, 4) => MPI_INTEGER2,
            MPI_COMBINER_F90_INTEGER if want(r, 9) => MPI_INTEGER4,
            MPI_COMBINER_F90_INTEGER if want(r, 18) => MPI_INTEGER8,
            _ => return Err(MpiError::new(MPI_ERR_ARG, format!("no type holds precision {p}, range {r}"))),
        };
        let ints = if combiner == MPI_COMBINER_F90_INTEGER { vec![r] } else { vec![p, r] };
        let key = (combiner, ints.clone());
        if let Some(&h) = s.f90_types.get(&key) {
            return ffi::out(out, h, "newtype");
        }
        let h = s.types.insert(s.datatype(basic)?);
        s.record_contents(h, Contents { combiner, ints, aints: vec![], types: vec![], inner: vec![] });
        s.f90_types.insert(key, h);
        ffi::out(out, h, "newtype")
    })
}

pub(crate) unsafe fn mpi_type_create_f90_real(p: c_int, r: c_int, newtype: Out<'_, c_int>) -> c_int {
    f90_type("MPI_Type_create_f90_real", MPI_COMBINER_F90_REAL, p, r, newtype)
}

pub(crate) unsafe fn mpi_type_create_f90_complex(p: c_int, r: c_int, newtype: Out<'_, c_int>) -> c_int {
    f90_type("MPI_Type_create_f90_complex", MPI_COMBINER_F90_COMPLEX, p, r, newtype)
}

pub(crate) unsafe fn mpi_type_create_f90_integer(r: c_int, newtype: Out<'_, c_int>) -> c_int {
    f90_type("MPI_Type_create_f90_integer", MPI_COMBINER_F90_INTEGER, MPI_UNDEFINED, r, newtype)
}
