//! Attributes on datatypes: `MPI_Type_create_keyval`, `_set_attr`, `_get_attr`,
//! `_delete_attr`, `_free_keyval`, with their copy functions run by `MPI_Type_dup` and their
//! delete functions by `MPI_Type_free`. Keyvals of datatypes are apart from communicators'.

use std::ffi::{c_int, c_void};

use crate::abi::*;
use crate::attr::{AttrKind, CopyFn, DeleteFn, Keyval};
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::Out;
use crate::state::{call, State};

impl State {
    /// The attributes `old` passes to its duplicate `new` (their copy functions asked).
    pub fn copy_type_attributes(&mut self, old: c_int, new: c_int) -> MpiResult<()> {
        let set: Vec<(c_int, usize)> = self
            .type_attrs
            .values
            .iter()
            .filter(|((t, _), _)| *t == old)
            .map(|(&(_, k), a)| (k, a.read_as(AttrKind::Ptr)))
            .collect();
        for (key, value) in set {
            let Some(copy) = self.type_attrs.keys.get(&key).and_then(|k| k.copy.map(|f| (f, k.extra_state)))
            else {
                continue;
            };
            let (mut out, mut flag) = (0usize, 0);
            let rc = ffi::attr_copy(copy.0, old, key, copy.1, value, &mut out, &mut flag);
            if rc != MPI_SUCCESS {
                return Err(MpiError::new(rc, format!("the copy function of type keyval {key} failed")));
            }
            if flag != 0 {
                self.type_attrs.set(new, key, out, AttrKind::Ptr);
            }
        }
        Ok(())
    }

    /// Deletes the attributes of datatype `t` (their delete functions called).
    pub fn delete_type_attributes(&mut self, t: c_int) -> MpiResult<()> {
        let keys: Vec<c_int> =
            self.type_attrs.values.keys().filter(|(h, _)| *h == t).map(|&(_, k)| k).collect();
        keys.into_iter().try_for_each(|k| self.delete_type_attribute(t, k))
    }

    fn delete_type_attribute(&mut self, t: c_int, key: c_int) -> MpiResult<()> {
        let Some(attr) = self.type_attrs.values.remove(&(t, key)) else { return Ok(()) };
        let value = attr.read_as(AttrKind::Ptr);
        let Some(kv) = self.type_attrs.keys.get(&key).copied() else { return Ok(()) };
        self.type_attrs.release(key);
        if let Some(delete) = kv.delete {
            let rc = ffi::attr_delete(delete, t, key, value, kv.extra_state);
            if rc != MPI_SUCCESS {
                return Err(MpiError::new(rc, format!("the delete function of type keyval {key} failed")));
            }
        }
        Ok(())
    }
}

pub(crate) unsafe fn mpi_type_create_keyval(
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    keyval: Out<'_, c_int>,
    extra_state: *mut c_void,
) -> c_int {
    call("MPI_Type_create_keyval", MPI_COMM_WORLD, |s| {
        let k = s.type_attrs.create(Keyval { copy, delete, extra_state, proxy: None, freed: false });
        ffi::out(keyval, k, "type_keyval")
    })
}

pub(crate) unsafe fn mpi_type_free_keyval(keyval: Out<'_, c_int>) -> c_int {
    call("MPI_Type_free_keyval", MPI_COMM_WORLD, |s| {
        let k = ffi::read(keyval, "type_keyval")?;
        let kv = s.type_attrs.keys.get_mut(&k).filter(|kv| !kv.freed);
        kv.ok_or_else(|| MpiError::new(MPI_ERR_KEYVAL, format!("invalid type keyval {k}")))?.freed = true;
        s.type_attrs.release(k);
        ffi::out(keyval, MPI_KEYVAL_INVALID, "type_keyval")
    })
}

pub(crate) unsafe fn mpi_type_set_attr(datatype: c_int, keyval: c_int, value: *mut c_void) -> c_int {
    call("MPI_Type_set_attr", MPI_COMM_WORLD, |s| {
        s.datatype(datatype)?;
        if s.type_attrs.keys.get(&keyval).is_none_or(|k| k.freed) {
            return Err(MpiError::new(MPI_ERR_KEYVAL, format!("invalid type keyval {keyval}")));
        }
        // A value set again replaces the old one, which is deleted first.
        s.delete_type_attribute(datatype, keyval)?;
        s.type_attrs.set(datatype, keyval, value as usize, AttrKind::Ptr);
        Ok(())
    })
}

pub(crate) unsafe fn mpi_type_get_attr(
    datatype: c_int,
    keyval: c_int,
    value: Out<'_, usize>,
    flag: Out<'_, c_int>,
) -> c_int {
    call("MPI_Type_get_attr", MPI_COMM_WORLD, |s| {
        s.datatype(datatype)?;
        if !s.type_attrs.keys.contains_key(&keyval) {
            return Err(MpiError::new(MPI_ERR_KEYVAL, format!("invalid type keyval {keyval}")));
        }
        match s.type_attrs.values.get(&(datatype, keyval)) {
            Some(a) => {
                ffi::out(value, a.read_as(AttrKind::Ptr), "attribute_val")?;
                ffi::out(flag, 1, "flag")
            }
            None => ffi::out(flag, 0, "flag"),
        }
    })
}

pub(crate) fn mpi_type_delete_attr(datatype: c_int, keyval: c_int) -> c_int {
    call("MPI_Type_delete_attr", MPI_COMM_WORLD, |s| {
        s.datatype(datatype)?;
        if !s.type_attrs.values.contains_key(&(datatype, keyval)) {
            return Err(MpiError::new(MPI_ERR_KEYVAL, format!("no attribute for type keyval {keyval}")));
        }
        s.delete_type_attribute(datatype, keyval)
    })
}
