//! `MPI_Pack_external`, `MPI_Unpack_external`, `MPI_Pack_external_size` in "external32":
//! the packed bytes with every basic value big-endian. `MPI_LONG` and `MPI_UNSIGNED_LONG`
//! themselves take external32's 4 bytes; inside derived types, and for the other types, sizes
//! are this machine's. The units to swap come from the datatype's kind, or from what made it
//! for a struct of several kinds.

use std::ffi::{c_char, c_int, c_long};

use crate::abi::*;
use crate::coll::count_of;
use crate::datatype::Datatype;
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::{Out, UserBuf};
use crate::state::{call, State};

/// Checks the data representation: only "external32" is defined.
///
/// # Safety
/// `datarep` is a NUL-terminated string (the FFI contract).
unsafe fn external32(datarep: *const c_char) -> MpiResult<()> {
    // SAFETY: the caller's promise.
    let rep = unsafe { ffi::string_in(datarep) }?;
    if rep == "external32" {
        return Ok(());
    }
    Err(MpiError::new(MPI_ERR_UNSUPPORTED_DATAREP, format!("data representation {rep:?}")))
}

/// Reverses each unit of the packed bytes in place, the units of one element (`units`)
/// repeating over the buffer. Native x86-64 is little-endian, external32 big-endian, so the
/// same swap packs and unpacks.
fn swap_units(bytes: &mut [u8], units: &[usize]) {
    if units.iter().all(|&u| u <= 1) {
        return;
    }
    let mut at = 0;
    'outer: loop {
        for &u in units {
            if at + u > bytes.len() {
                break 'outer;
            }
            bytes[at..at + u].reverse();
            at += u;
        }
    }
}

/// A predefined type whose external32 size is smaller than this machine's: (signed).
fn narrowed(h: c_int) -> Option<bool> {
    match h {
        MPI_LONG => Some(true),
        MPI_UNSIGNED_LONG => Some(false),
        _ => None,
    }
}

/// 8-byte native longs → 4-byte big-endian ones (the low half: external32's range).
fn narrow(native: &[u8]) -> Vec<u8> {
    native.chunks_exact(8).flat_map(|c| [c[3], c[2], c[1], c[0]]).collect()
}

/// 4-byte big-endian longs → 8-byte native ones, sign- or zero-extended.
fn widen(external: &[u8], signed: bool) -> Vec<u8> {
    external
        .chunks_exact(4)
        .flat_map(|c| {
            let v = [c[0], c[1], c[2], c[3]];
            let wide =
                if signed { i64::from(i32::from_be_bytes(v)) } else { i64::from(u32::from_be_bytes(v)) };
            wide.to_le_bytes()
        })
        .collect()
}

/// Bytes `count` elements of `h` take in external32.
fn external_size(h: c_int, t: &Datatype, count: usize) -> usize {
    let native = t.bytes_for(count);
    if narrowed(h).is_some() {
        native / 2
    } else {
        native
    }
}

fn units_of(s: &State, h: c_int, t: &Datatype) -> Vec<usize> {
    let found = match s.type_contents.get(&h) {
        Some(c) => c.units(t),
        None => crate::type_contents::uniform_units(t),
    };
    found.unwrap_or_default()
}

pub(crate) unsafe fn mpi_pack_external_size(
    datarep: *const c_char,
    incount: c_int,
    datatype: c_int,
    size: Out<'_, c_long>,
) -> c_int {
    call("MPI_Pack_external_size", MPI_COMM_WORLD, |s| {
        // SAFETY: a string argument of this call (the FFI contract).
        unsafe { external32(datarep) }?;
        let n = external_size(datatype, &s.datatype(datatype)?, count_of(incount)?);
        ffi::out(size, n as c_long, "size")
    })
}

pub(crate) unsafe fn mpi_pack_external(
    datarep: *const c_char,
    inbuf: UserBuf,
    incount: c_int,
    datatype: c_int,
    outbuf: UserBuf,
    outsize: c_long,
    position: Out<'_, c_long>,
) -> c_int {
    call("MPI_Pack_external", MPI_COMM_WORLD, |s| {
        // SAFETY: a string argument of this call (the FFI contract).
        unsafe { external32(datarep) }?;
        let at = usize::try_from(ffi::read(position, "position")?).unwrap_or(usize::MAX);
        let t = s.datatype(datatype)?;
        // SAFETY: `inbuf` spans `incount` elements of `datatype` (the contract).
        let mut bytes = unsafe { t.pack(&inbuf, count_of(incount)?) }?.into_owned();
        if narrowed(datatype).is_some() {
            bytes = narrow(&bytes);
        } else {
            swap_units(&mut bytes, &units_of(s, datatype, &t));
        }
        let room = usize::try_from(outsize).unwrap_or(0);
        if at > room || bytes.len() > room - at {
            return Err(MpiError::new(
                MPI_ERR_TRUNCATE,
                format!("{} bytes at {at} of a {room}-byte buffer", bytes.len()),
            ));
        }
        // SAFETY: `outbuf` holds `outsize` writable bytes (the contract).
        unsafe { outbuf.bytes_mut(room) }?[at..at + bytes.len()].copy_from_slice(&bytes);
        ffi::out(position, (at + bytes.len()) as c_long, "position")
    })
}

pub(crate) unsafe fn mpi_unpack_external(
    datarep: *const c_char,
    inbuf: UserBuf,
    insize: c_long,
    position: Out<'_, c_long>,
    outbuf: UserBuf,
    outcount: c_int,
    datatype: c_int,
) -> c_int {
    call("MPI_Unpack_external", MPI_COMM_WORLD, |s| {
        // SAFETY: a string argument of this call (the FFI contract).
        unsafe { external32(datarep) }?;
        let at = usize::try_from(ffi::read(position, "position")?).unwrap_or(usize::MAX);
        let (t, n) = (s.datatype(datatype)?, count_of(outcount)?);
        let (want, have) = (external_size(datatype, &t, n), usize::try_from(insize).unwrap_or(0));
        if at > have || want > have - at {
            return Err(MpiError::new(
                MPI_ERR_TRUNCATE,
                format!("{want} bytes at {at} of a {have}-byte buffer"),
            ));
        }
        // SAFETY: `inbuf` holds `insize` readable bytes (the contract).
        let mut bytes = unsafe { inbuf.bytes(have) }?[at..at + want].to_vec();
        match narrowed(datatype) {
            Some(signed) => bytes = widen(&bytes, signed),
            None => swap_units(&mut bytes, &units_of(s, datatype, &t)),
        }
        // SAFETY: `outbuf` spans `outcount` elements of `datatype` (the contract), apart from
        // `inbuf` (MPI forbids aliased arguments).
        unsafe { t.unpack(&bytes, outbuf, n) }?;
        ffi::out(position, (at + want) as c_long, "position")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_reversed_in_turn() {
        let mut b = vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
        swap_units(&mut b, &[8, 4]);
        assert_eq!(b, vec![8, 7, 6, 5, 4, 3, 2, 1, 12, 11, 10, 9]);
        let mut c = vec![1, 2, 3];
        swap_units(&mut c, &[1]);
        assert_eq!(c, vec![1, 2, 3]);
    }

    #[test]
    fn longs_take_four_bytes_and_come_back_extended() {
        let native: Vec<u8> = [-2i64, 0x0102_0304].iter().flat_map(|v| v.to_le_bytes()).collect();
        let external = narrow(&native);
        assert_eq!(external, vec![0xff, 0xff, 0xff, 0xfe, 1, 2, 3, 4]);
        assert_eq!(widen(&external, true), native);
        assert_eq!(&widen(&external, false)[..8], &0xffff_fffei64.to_le_bytes());
    }
}
