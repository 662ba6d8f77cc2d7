//! Attributes on communicators (keyvals, with their copy and delete callbacks).

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};

use crate::abi::*;
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::Out;
use crate::state::{call, State};

/// `MPI_Comm_copy_attr_function`: (oldcomm, keyval, extra_state, value_in, *value_out, *flag).
pub type CopyFn =
    unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
/// `MPI_Comm_delete_attr_function`: (comm, keyval, value, extra_state).
pub type DeleteFn = unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void) -> c_int;
/// MPICH's `MPII_Attr_copy_proxy`: calls a keyval's copy function in its language
/// (user function, handle, keyval, extra_state, `MPIR_Attr_type`, value, *new value, *flag).
pub type CopyProxy = unsafe extern "C" fn(
    CopyFn,
    c_int,
    c_int,
    *mut c_void,
    c_int,
    *mut c_void,
    *mut *mut c_void,
    *mut c_int,
) -> c_int;
/// MPICH's `MPII_Attr_delete_proxy`: (user function, handle, keyval, `MPIR_Attr_type`, value,
/// extra_state).
pub type DeleteProxy = unsafe extern "C" fn(DeleteFn, c_int, c_int, c_int, *mut c_void, *mut c_void) -> c_int;

/// How an attribute's value was set (MPICH's `MPIR_Attr_type`, the numbers its Fortran
/// binding passes): by C, a pointer; by Fortran, an integer the attribute holds by value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrKind {
    Ptr,
    /// `INTEGER(KIND=MPI_ADDRESS_KIND)`: MPI_Comm_set_attr from Fortran.
    Aint,
    /// `INTEGER`: MPI_Attr_put from Fortran.
    Int,
}

impl AttrKind {
    pub fn from_mpich(kind: c_int) -> MpiResult<AttrKind> {
        match kind {
            0 => Ok(AttrKind::Ptr),
            1 => Ok(AttrKind::Aint),
            3 => Ok(AttrKind::Int),
            _ => Err(MpiError::new(MPI_ERR_ARG, format!("attribute type {kind}"))),
        }
    }

    pub fn to_mpich(self) -> c_int {
        match self {
            AttrKind::Ptr => 0,
            AttrKind::Aint => 1,
            AttrKind::Int => 3,
        }
    }
}

/// An attribute's value. Boxed: C reads one set from Fortran as a pointer to the integer
/// (MPI 4.0, 19.3.7), which stays where it is until the attribute goes.
#[derive(Debug)]
pub struct Attr {
    /// Order of setting, so that a communicator's attributes are deleted last set first.
    seq: u64,
    value: Box<usize>,
    kind: AttrKind,
}

impl Attr {
    /// The value as a caller in `lang`'s view reads it: C (`Ptr`) gets a pointer to an
    /// integer set from Fortran, every other combination the value as it was set.
    pub fn read_as(&self, lang: AttrKind) -> usize {
        if lang == AttrKind::Ptr && self.kind != AttrKind::Ptr {
            std::ptr::from_ref::<usize>(&self.value) as usize
        } else {
            *self.value
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Keyval {
    pub copy: Option<CopyFn>,
    pub delete: Option<DeleteFn>,
    pub extra_state: *mut c_void,
    /// Set by MPICH's Fortran binding (`MPII_Keyval_set_proxy`): the callbacks are Fortran
    /// subroutines, called through these.
    pub proxy: Option<(CopyProxy, DeleteProxy)>,
    /// MPI_Comm_free_keyval was called: no new values, but the ones set keep it (and their
    /// delete function) until they go.
    pub freed: bool,
}

/// Keyvals by id, and each communicator's attribute values.
#[derive(Debug, Default)]
pub struct Keyvals {
    next: c_int,
    next_seq: u64,
    pub keys: BTreeMap<c_int, Keyval>,
    /// (communicator, keyval) → value.
    pub values: BTreeMap<(c_int, c_int), Attr>,
}

impl Keyvals {
    /// A new keyval.
    pub fn create(&mut self, kv: Keyval) -> c_int {
        let k = FIRST_KEYVAL + self.next;
        self.next += 1;
        self.keys.insert(k, kv);
        k
    }

    pub fn set(&mut self, comm: c_int, key: c_int, value: usize, kind: AttrKind) {
        self.next_seq += 1;
        self.values.insert((comm, key), Attr { seq: self.next_seq, value: Box::new(value), kind });
    }

    /// Drops a freed keyval no value uses any more.
    pub fn release(&mut self, key: c_int) {
        let used = self.values.keys().any(|&(_, k)| k == key);
        if !used && self.keys.get(&key).is_some_and(|k| k.freed) {
            self.keys.remove(&key);
        }
    }
}

/// User keyvals are numbered above the predefined attributes' (0x644000xx).
const FIRST_KEYVAL: c_int = 0x1000;

impl State {
    /// The attributes `comm` passes to a duplicate (their copy functions asked), for `new`.
    pub fn copy_attributes(&mut self, comm: c_int, new: c_int) -> MpiResult<()> {
        let set: Vec<(c_int, usize, usize, AttrKind)> = self
            .keyvals
            .values
            .iter()
            .filter(|((c, _), _)| *c == comm)
            .map(|(&(_, k), a)| (k, *a.value, a.read_as(AttrKind::Ptr), a.kind))
            .collect();
        for (key, value, c_view, kind) in set {
            let Some(kv) = self.keyvals.keys.get(&key).copied() else { continue };
            let Some(copy) = kv.copy else { continue };
            let (mut out, mut flag) = (0usize, 0);
            let rc = match kv.proxy {
                // The proxy takes the value as set, and calls the function in its language.
                Some((proxy, _)) => {
                    let attr = (kind.to_mpich(), value);
                    ffi::attr_copy_proxy(proxy, copy, comm, key, kv.extra_state, attr, &mut out, &mut flag)
                }
                None => ffi::attr_copy(copy, comm, key, kv.extra_state, c_view, &mut out, &mut flag),
            };
            if rc != MPI_SUCCESS {
                return Err(MpiError::new(rc, format!("the copy function of keyval {key} failed")));
            }
            if flag != 0 {
                self.keyvals.set(new, key, out, kind);
            }
        }
        Ok(())
    }

    /// Deletes `comm`'s attributes (their delete functions called), as MPI_Comm_free does.
    pub fn delete_attributes(&mut self, comm: c_int) -> MpiResult<()> {
        let mut keys: Vec<(u64, c_int)> = self
            .keyvals
            .values
            .iter()
            .filter(|((c, _), _)| *c == comm)
            .map(|(&(_, k), a)| (a.seq, k))
            .collect();
        // Last set, first deleted (MPI 2.2 fixes this order for MPI_COMM_SELF at finalize).
        keys.sort_unstable_by(|a, b| b.cmp(a));
        for (_, key) in keys {
            self.delete_attribute(comm, key)?;
        }
        Ok(())
    }

    fn delete_attribute(&mut self, comm: c_int, key: c_int) -> MpiResult<()> {
        let Some(attr) = self.keyvals.values.remove(&(comm, key)) else { return Ok(()) };
        let Some(kv) = self.keyvals.keys.get(&key).copied() else { return Ok(()) };
        self.keyvals.release(key);
        if let Some(delete) = kv.delete {
            let rc = match kv.proxy {
                Some((_, proxy)) => {
                    let value = (attr.kind.to_mpich(), *attr.value);
                    ffi::attr_delete_proxy(proxy, delete, comm, key, value, kv.extra_state)
                }
                None => ffi::attr_delete(delete, comm, key, attr.read_as(AttrKind::Ptr), kv.extra_state),
            };
            if rc != MPI_SUCCESS {
                return Err(MpiError::new(rc, format!("the delete function of keyval {key} failed")));
            }
        }
        Ok(())
    }
}

pub(crate) unsafe fn mpi_comm_create_keyval(
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    keyval: Out<'_, c_int>,
    extra_state: *mut c_void,
) -> c_int {
    call("MPI_Comm_create_keyval", MPI_COMM_WORLD, |s| {
        let k = FIRST_KEYVAL + s.keyvals.next;
        s.keyvals.next += 1;
        s.keyvals.keys.insert(k, Keyval { copy, delete, extra_state, proxy: None, freed: false });
        ffi::out(keyval, k, "keyval")
    })
}

pub(crate) unsafe fn mpi_keyval_create(
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    keyval: Out<'_, c_int>,
    extra: *mut c_void,
) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    unsafe { mpi_comm_create_keyval(copy, delete, keyval, extra) }
}

pub(crate) unsafe fn mpi_comm_free_keyval(keyval: Out<'_, c_int>) -> c_int {
    call("MPI_Comm_free_keyval", MPI_COMM_WORLD, |s| {
        let k = ffi::read(keyval, "keyval")?;
        let kv = s.keyvals.keys.get_mut(&k).filter(|kv| !kv.freed);
        kv.ok_or_else(|| MpiError::new(MPI_ERR_KEYVAL, format!("invalid keyval {k}")))?.freed = true;
        s.keyvals.release(k);
        ffi::out(keyval, MPI_KEYVAL_INVALID, "keyval")
    })
}

pub(crate) unsafe fn mpi_keyval_free(keyval: Out<'_, c_int>) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    unsafe { mpi_comm_free_keyval(keyval) }
}

pub(crate) unsafe fn mpi_comm_set_attr(comm: c_int, keyval: c_int, value: *mut c_void) -> c_int {
    call("MPI_Comm_set_attr", comm, |s| set_attribute(s, comm, keyval, value as usize, AttrKind::Ptr))
}

/// Sets `comm`'s attribute `keyval`, as `kind` says it was given (MPI_Comm_set_attr, and
/// MPICH's Fortran binding through `MPII_Comm_set_attr`).
pub fn set_attribute(
    s: &mut State,
    comm: c_int,
    keyval: c_int,
    value: usize,
    kind: AttrKind,
) -> MpiResult<()> {
    s.comm(comm)?;
    if s.keyvals.keys.get(&keyval).is_none_or(|k| k.freed) {
        return Err(MpiError::new(MPI_ERR_KEYVAL, format!("invalid keyval {keyval}")));
    }
    // A value set again replaces the old one, which is deleted first.
    s.delete_attribute(comm, keyval)?;
    s.keyvals.set(comm, keyval, value, kind);
    Ok(())
}

/// Has `keyval`'s callbacks called through MPICH's language proxies (`MPII_Keyval_set_proxy`).
pub fn set_proxy(s: &mut State, keyval: c_int, proxy: (CopyProxy, DeleteProxy)) -> MpiResult<()> {
    let kv = s.keyvals.keys.get_mut(&keyval);
    kv.ok_or_else(|| MpiError::new(MPI_ERR_KEYVAL, format!("invalid keyval {keyval}")))?.proxy = Some(proxy);
    Ok(())
}

pub(crate) unsafe fn mpi_attr_put(comm: c_int, keyval: c_int, value: *mut c_void) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    unsafe { mpi_comm_set_attr(comm, keyval, value) }
}

pub(crate) fn mpi_comm_delete_attr(comm: c_int, keyval: c_int) -> c_int {
    call("MPI_Comm_delete_attr", comm, |s| {
        s.comm(comm)?;
        s.delete_attribute(comm, keyval)
    })
}

pub(crate) fn mpi_attr_delete(comm: c_int, keyval: c_int) -> c_int {
    mpi_comm_delete_attr(comm, keyval)
}

/// A user attribute's value, if set, as a caller in `lang` reads it (the predefined ones are
/// `init.rs`'s).
pub fn user_attribute(s: &State, comm: c_int, keyval: c_int, lang: AttrKind) -> Option<usize> {
    s.keyvals.values.get(&(comm, keyval)).map(|a| a.read_as(lang))
}

/// `MPI_COMM_DUP_FN`: the attribute passes to the duplicate as it is.
///
/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `flag`: null or writable for the call; `value_out`: null or writable for one `void *` for
/// the call (declared `void *`, used as `void **`); `_extra`, `value_in`: opaque, never
/// dereferenced here.
#[no_mangle]
pub unsafe extern "C" fn MPIR_Dup_fn(
    _comm: c_int,
    _keyval: c_int,
    _extra: *mut c_void,
    value_in: *mut c_void,
    value_out: *mut c_void,
    flag: Out<'_, c_int>,
) -> c_int {
    // SAFETY: MPI's copy-function contract: `attribute_val_out` points at a `void *`.
    let value_out = unsafe { Out::from_raw(value_out.cast::<*mut c_void>()) };
    let r = ffi::out(value_out, value_in, "attribute_val_out").and_then(|()| ffi::out(flag, 1, "flag"));
    r.map_or_else(|e| e.class, |()| MPI_SUCCESS)
}

/// Communicators keep no hints: MPI_Comm_get_info hands back an empty info object.
pub(crate) fn mpi_comm_set_info(comm: c_int, _info: c_int) -> c_int {
    call("MPI_Comm_set_info", comm, |s| s.comm(comm).map(drop))
}

pub(crate) unsafe fn mpi_comm_get_info(comm: c_int, info: Out<'_, c_int>) -> c_int {
    call("MPI_Comm_get_info", comm, |s| {
        s.comm(comm)?;
        ffi::out(info, crate::info::new_empty(), "info_used")
    })
}
