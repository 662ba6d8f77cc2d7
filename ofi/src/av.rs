//! The address vector's C entry points: `fi_av_insert` stores peers' `fi_getname` blobs, and
//! an endpoint bound to the AV connects to one the first time it is named.

use std::ffi::{c_char, c_int, c_void};
use std::rc::Rc;

use crate::abi::*;
use crate::core::{AvRef, AvState};
use crate::fabric::ops_ptr;
use crate::obj::{self, Table, NO_OP};

/// The AV object's state: the entries, shared with the endpoints bound to it, and the length
/// of one address (every address of the provider has the same length).
pub(crate) struct Av {
    pub(crate) state: AvRef,
}

/// Bytes of one address blob (an endpoint's name, see `name`).
pub(crate) const ADDRESS_LEN: usize = crate::name::NAME_LEN;

unsafe extern "C" fn close(f: *mut fid) -> c_int {
    // SAFETY: the fid libfabric got from `open`; free checks its ops table.
    obj::close_status(unsafe { obj::free::<fid_av, Av>(f, ops_ptr(&FI_OPS)) })
}

pub(crate) static FI_OPS: Table<fi_ops> = Table(fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(close),
    bind: Some(obj::no_bind),
    control: Some(obj::no_control),
    ops_open: NO_OP,
    tostr: NO_OP,
    ops_set: NO_OP,
});

static AV_OPS: Table<fi_ops_av> = Table(fi_ops_av {
    size: std::mem::size_of::<fi_ops_av>(),
    insert: Some(insert),
    insertsvc: NO_OP,
    insertsym: NO_OP,
    remove: Some(remove),
    lookup: Some(lookup),
    straddr: Some(straddr),
    av_set: NO_OP,
});

/// The AV state behind `av`, if it is one of ours.
///
/// # Safety
/// `av` is null or a live fid.
pub(crate) unsafe fn state_of(av: *mut fid) -> Option<&'static mut Av> {
    // SAFETY: the caller's contract; the ops table names the type.
    unsafe { obj::state::<fid_av, Av>(av, ops_ptr(&FI_OPS)) }
}

/// `fi_av_open` (the domain's `av_open`).
pub(crate) unsafe extern "C" fn open(
    _domain: *mut fid_domain,
    attr: *mut fi_av_attr,
    out: *mut *mut fid_av,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the consumer's attributes, null or valid.
    let kind = unsafe { attr.as_ref() }.map_or(FI_AV_UNSPEC, |a| a.type_);
    if out.is_null() || !matches!(kind, FI_AV_UNSPEC | FI_AV_MAP | FI_AV_TABLE) {
        return -FI_EINVAL;
    }
    let c = fid_av { fid: fid { fclass: FI_CLASS_AV, context, ops: &FI_OPS.0 }, ops: &AV_OPS.0 };
    let state = Av { state: Rc::new(std::cell::RefCell::new(AvState::default())) };
    // SAFETY: `out` checked non-null.
    unsafe { out.write(obj::into_raw(c, state) as *mut fid_av) };
    0
}

/// Inserts `count` addresses; each new one gets the next index. Returns how many were inserted.
unsafe extern "C" fn insert(
    av: *mut fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut fi_addr_t,
    _flags: u64,
    _context: *mut c_void,
) -> c_int {
    // SAFETY: the consumer's AV object.
    let Some(av) = (unsafe { state_of(av as *mut fid) }) else { return -FI_EINVAL };
    if addr.is_null() || count > c_int::MAX as usize {
        return -FI_EINVAL;
    }
    // SAFETY: the consumer passes `count` addresses of the provider's length (fi_av_insert).
    let bytes = unsafe { obj::lent(addr, count * ADDRESS_LEN) };
    let mut state = av.state.borrow_mut();
    for (i, blob) in bytes.chunks_exact(ADDRESS_LEN).enumerate() {
        // An address inserted before keeps its fi_addr (as libfabric's own AVs do).
        let known = state.entries.iter().position(|e| e.as_deref() == Some(blob));
        let index = known.unwrap_or_else(|| {
            state.entries.push(Some(blob.to_vec()));
            state.entries.len() - 1
        }) as fi_addr_t;
        if !fi_addr.is_null() {
            // SAFETY: fi_addr has room for `count` entries (fi_av_insert's contract).
            unsafe { fi_addr.add(i).write(index) };
        }
    }
    count as c_int
}

unsafe extern "C" fn remove(av: *mut fid_av, fi_addr: *mut fi_addr_t, count: usize, _flags: u64) -> c_int {
    // SAFETY: the consumer's AV object.
    let Some(av) = (unsafe { state_of(av as *mut fid) }) else { return -FI_EINVAL };
    if fi_addr.is_null() {
        return -FI_EINVAL;
    }
    let mut state = av.state.borrow_mut();
    for i in 0..count {
        // SAFETY: fi_addr holds `count` entries (fi_av_remove's contract).
        let index = unsafe { fi_addr.add(i).read() } as usize;
        if let Some(entry) = state.entries.get_mut(index) {
            *entry = None;
        }
    }
    0
}

unsafe extern "C" fn lookup(
    av: *mut fid_av,
    fi_addr: fi_addr_t,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    // SAFETY: the consumer's AV object.
    let Some(av) = (unsafe { state_of(av as *mut fid) }) else { return -FI_EINVAL };
    if addrlen.is_null() {
        return -FI_EINVAL;
    }
    let state = av.state.borrow();
    let Some(Some(blob)) = state.entries.get(fi_addr as usize) else { return -FI_ENOENT };
    // SAFETY: addrlen checked non-null; it holds the buffer's size on entry.
    let room = unsafe { addrlen.read() };
    obj::copy_to_lent(addr as usize, room, blob);
    // SAFETY: as above.
    unsafe { addrlen.write(blob.len()) };
    0
}

/// The address as hex, truncated to the caller's buffer.
unsafe extern "C" fn straddr(
    _av: *mut fid_av,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    if len.is_null() || addr.is_null() {
        return buf;
    }
    // SAFETY: an address of the provider's length (fi_av_straddr's contract).
    let blob = unsafe { obj::lent(addr, ADDRESS_LEN) };
    let mut text: Vec<u8> = b"fi_addr_reverb://".to_vec();
    text.extend(blob.iter().flat_map(|b| format!("{b:02x}").into_bytes()));
    // SAFETY: `len` holds the buffer's size on entry.
    let room = unsafe { len.read() };
    if room > 0 {
        let n = text.len().min(room - 1);
        obj::copy_to_lent(buf as usize, room, &text[..n]);
        obj::copy_to_lent(buf as usize + n, 1, &[0]);
    }
    // SAFETY: as above.
    unsafe { len.write(text.len() + 1) };
    buf
}
