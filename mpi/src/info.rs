//! Info objects: (key, value) pairs in the order set. MPI 4.0 allows the info calls before
//! `MPI_Init` and after `MPI_Finalize`, so they live apart from the library's state, and
//! `MPI_INFO_ENV` (the environment the process was started with) is built when asked.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int};
use std::sync::{Mutex, MutexGuard};

use crate::abi::*;
use crate::errors::{self, MpiError, MpiResult};
use crate::ffi;
use crate::ffi::Out;

type Pairs = Vec<(String, String)>;

/// The process's info objects by handle.
struct Infos {
    next: c_int,
    items: BTreeMap<c_int, Pairs>,
}

const INFO_BASE: c_int = 0xdc00_0000_u32 as c_int;

static INFOS: Mutex<Infos> = Mutex::new(Infos { next: 0, items: BTreeMap::new() });

fn infos() -> MutexGuard<'static, Infos> {
    // A panic while holding it left plain data behind: still usable.
    INFOS.lock().unwrap_or_else(|p| p.into_inner())
}

impl Infos {
    fn insert(&mut self, pairs: Pairs) -> c_int {
        let h = INFO_BASE.wrapping_add(self.next);
        self.next += 1;
        self.items.insert(h, pairs);
        h
    }

    fn get_mut(&mut self, h: c_int) -> MpiResult<&mut Pairs> {
        if h == MPI_INFO_ENV && !self.items.contains_key(&h) {
            self.items.insert(h, environment());
        }
        self.items.get_mut(&h).ok_or_else(|| MpiError::new(MPI_ERR_INFO, format!("invalid info {h:#x}")))
    }
}

/// A new, empty info object (`MPI_Comm_get_info` and the like hand one back).
pub fn new_empty() -> c_int {
    infos().insert(Vec::new())
}

/// What `MPI_INFO_ENV` and `MPI_Info_create_env` hold: how this process was started.
fn environment() -> Pairs {
    let mut args = std::env::args();
    let mut pairs = Vec::new();
    if let Some(command) = args.next() {
        pairs.push(("command".to_string(), command));
    }
    let rest: Vec<String> = args.collect();
    if !rest.is_empty() {
        pairs.push(("argv".to_string(), rest.join(" ")));
    }
    if let Ok(dir) = std::env::current_dir() {
        pairs.push(("wdir".to_string(), dir.display().to_string()));
    }
    pairs.push(("arch".to_string(), std::env::consts::ARCH.to_string()));
    pairs.push(("thread_level".to_string(), "MPI_THREAD_FUNNELED".to_string()));
    pairs
}

/// Runs an info call; an error goes to MPI_COMM_WORLD's handler when MPI is running, else
/// stops the job (MPI's default before `MPI_Init`).
fn info_call(function: &str, body: impl FnOnce(&mut Infos) -> MpiResult<()>) -> c_int {
    let result = body(&mut infos());
    match result {
        Ok(()) => MPI_SUCCESS,
        Err(e) => errors::handle(crate::state::world_errhandler(), function, e),
    }
}

pub(crate) unsafe fn mpi_info_create(info: Out<'_, c_int>) -> c_int {
    info_call("MPI_Info_create", |i| ffi::out(info, i.insert(Vec::new()), "info"))
}

pub(crate) unsafe fn mpi_info_create_env(
    _argc: c_int,
    _argv: *mut *mut c_char,
    info: Out<'_, c_int>,
) -> c_int {
    info_call("MPI_Info_create_env", |i| ffi::out(info, i.insert(environment()), "info"))
}

pub(crate) unsafe fn mpi_info_set(info: c_int, key: *const c_char, value: *const c_char) -> c_int {
    info_call("MPI_Info_set", |i| {
        // SAFETY: a string argument of this call: NUL-terminated (the FFI contract).
        let (key, value) = (unsafe { ffi::string_in(key) }?, unsafe { ffi::string_in(value) }?);
        if key.len() > MPI_MAX_INFO_KEY as usize {
            return Err(MpiError::new(MPI_ERR_INFO_KEY, format!("a key of {} characters", key.len())));
        }
        if value.len() > MPI_MAX_INFO_VAL as usize {
            return Err(MpiError::new(MPI_ERR_INFO_VALUE, format!("a value of {} characters", value.len())));
        }
        let pairs = i.get_mut(info)?;
        match pairs.iter_mut().find(|(k, _)| *k == key) {
            Some(pair) => pair.1 = value,
            None => pairs.push((key, value)),
        }
        Ok(())
    })
}

/// The value of `key` in `info`, if set.
///
/// # Safety
/// `key` is null or a NUL-terminated string.
unsafe fn lookup(i: &mut Infos, info: c_int, key: *const c_char) -> MpiResult<Option<String>> {
    // SAFETY: the caller's promise.
    let key = unsafe { ffi::string_in(key) }?;
    Ok(i.get_mut(info)?.iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone()))
}

pub(crate) unsafe fn mpi_info_get(
    info: c_int,
    key: *const c_char,
    len: c_int,
    value: *mut c_char,
    flag: Out<'_, c_int>,
) -> c_int {
    info_call("MPI_Info_get", |i| {
        // SAFETY: a string argument of this call: NUL-terminated (the FFI contract).
        match unsafe { lookup(i, info, key) }? {
            Some(v) => {
                // SAFETY: the program's buffer has room for `len` + 1 bytes (the contract).
                unsafe { ffi::string_out(value, usize::try_from(len).unwrap_or(0) + 1, &v) }?;
                ffi::out(flag, 1, "flag")
            }
            None => ffi::out(flag, 0, "flag"),
        }
    })
}

/// MPI 4.0's form: `*buflen` is the buffer's size in and the value's size (NUL included) out;
/// a value that does not fit is cut, NUL-terminated, and nothing is written for a zero size.
pub(crate) unsafe fn mpi_info_get_string(
    info: c_int,
    key: *const c_char,
    buflen: Out<'_, c_int>,
    value: *mut c_char,
    flag: Out<'_, c_int>,
) -> c_int {
    info_call("MPI_Info_get_string", |i| {
        let room = usize::try_from(ffi::read(buflen, "buflen")?).unwrap_or(0);
        // SAFETY: a string argument of this call: NUL-terminated (the FFI contract).
        match unsafe { lookup(i, info, key) }? {
            Some(v) => {
                if room > 0 {
                    // SAFETY: the program's buffer has room for `*buflen` bytes (the contract).
                    unsafe { ffi::string_out(value, room, &v) }?;
                }
                ffi::out(buflen, c_int::try_from(v.len() + 1).unwrap_or(c_int::MAX), "buflen")?;
                ffi::out(flag, 1, "flag")
            }
            None => ffi::out(flag, 0, "flag"),
        }
    })
}

pub(crate) unsafe fn mpi_info_get_valuelen(
    info: c_int,
    key: *const c_char,
    len: Out<'_, c_int>,
    flag: Out<'_, c_int>,
) -> c_int {
    info_call("MPI_Info_get_valuelen", |i| {
        // SAFETY: a string argument of this call: NUL-terminated (the FFI contract).
        match unsafe { lookup(i, info, key) }? {
            Some(v) => {
                ffi::out(len, v.len() as c_int, "valuelen")?;
                ffi::out(flag, 1, "flag")
            }
            None => ffi::out(flag, 0, "flag"),
        }
    })
}

pub(crate) unsafe fn mpi_info_get_nkeys(info: c_int, nkeys: Out<'_, c_int>) -> c_int {
    info_call("MPI_Info_get_nkeys", |i| {
        let n = i.get_mut(info)?.len();
        ffi::out(nkeys, n as c_int, "nkeys")
    })
}

pub(crate) unsafe fn mpi_info_get_nthkey(info: c_int, n: c_int, key: *mut c_char) -> c_int {
    info_call("MPI_Info_get_nthkey", |i| {
        let pairs = i.get_mut(info)?;
        let k = usize::try_from(n)
            .ok()
            .and_then(|at| pairs.get(at))
            .map(|(k, _)| k.clone())
            .ok_or_else(|| MpiError::new(MPI_ERR_ARG, format!("no key {n}")))?;
        // SAFETY: the program's string buffer has room for the `MPI_MAX_*` bytes given (the contract).
        unsafe { ffi::string_out(key, MPI_MAX_INFO_KEY as usize + 1, &k) }.map(drop)
    })
}

pub(crate) unsafe fn mpi_info_delete(info: c_int, key: *const c_char) -> c_int {
    info_call("MPI_Info_delete", |i| {
        // SAFETY: a string argument of this call: NUL-terminated (the FFI contract).
        let key = unsafe { ffi::string_in(key) }?;
        let pairs = i.get_mut(info)?;
        let before = pairs.len();
        pairs.retain(|(k, _)| *k != key);
        if pairs.len() == before {
            return Err(MpiError::new(MPI_ERR_INFO_NOKEY, format!("no key {key}")));
        }
        Ok(())
    })
}

pub(crate) unsafe fn mpi_info_dup(info: c_int, newinfo: Out<'_, c_int>) -> c_int {
    info_call("MPI_Info_dup", |i| {
        let copy = i.get_mut(info)?.clone();
        ffi::out(newinfo, i.insert(copy), "newinfo")
    })
}

pub(crate) unsafe fn mpi_info_free(info: Out<'_, c_int>) -> c_int {
    info_call("MPI_Info_free", |i| {
        let h = ffi::read(info, "info")?;
        if h == MPI_INFO_ENV {
            return Err(MpiError::new(MPI_ERR_INFO, "MPI_INFO_ENV cannot be freed"));
        }
        i.items.remove(&h).ok_or_else(|| MpiError::new(MPI_ERR_INFO, format!("invalid info {h:#x}")))?;
        ffi::out(info, MPI_INFO_NULL, "info")
    })
}
