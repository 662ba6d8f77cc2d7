//! MPI's datatype calls over `datatype.rs`.

use std::ffi::{c_int, c_long, c_void};

use crate::abi::*;
use crate::datatype::{self, Datatype};
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::{In, Out, UserBuf};
use crate::state::{call, query_type, State};
use crate::type_contents::*;

fn count_of(n: c_int) -> MpiResult<usize> {
    usize::try_from(n).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("count {n}")))
}

/// Makes a derived datatype and records what made it (`MPI_Type_get_contents`).
pub fn new_type(
    function: &str,
    out: Out<'_, c_int>,
    make: impl FnOnce(&mut State) -> MpiResult<(Datatype, Contents)>,
) -> c_int {
    call(function, MPI_COMM_WORLD, |s| {
        let (t, contents) = make(s)?;
        let h = s.types.insert(t);
        s.record_contents(h, contents);
        ffi::out(out, h, "newtype")
    })
}

fn aints(v: &[isize]) -> Vec<isize> {
    v.to_vec()
}

pub(crate) unsafe fn mpi_type_size(datatype: c_int, size: Out<'_, c_int>) -> c_int {
    query_type("MPI_Type_size", datatype, |t| {
        ffi::out(size, c_int::try_from(t.size).unwrap_or(MPI_UNDEFINED), "size")
    })
}

pub(crate) unsafe fn mpi_type_get_extent(
    datatype: c_int,
    lb: Out<'_, c_long>,
    extent: Out<'_, c_long>,
) -> c_int {
    query_type("MPI_Type_get_extent", datatype, |t| {
        ffi::out(lb, t.lb as c_long, "lb")?;
        ffi::out(extent, t.extent as c_long, "extent")
    })
}

pub(crate) unsafe fn mpi_type_get_true_extent(
    datatype: c_int,
    lb: Out<'_, c_long>,
    extent: Out<'_, c_long>,
) -> c_int {
    query_type("MPI_Type_get_true_extent", datatype, |t| {
        let (lo, hi) = t.data_span(1);
        ffi::out(lb, lo as c_long, "true_lb")?;
        ffi::out(extent, (hi - lo) as c_long, "true_extent")
    })
}

pub(crate) unsafe fn mpi_type_extent(datatype: c_int, extent: Out<'_, c_long>) -> c_int {
    call("MPI_Type_extent", MPI_COMM_WORLD, |s| {
        ffi::out(extent, s.datatype(datatype)?.extent as c_long, "extent")
    })
}

pub(crate) unsafe fn mpi_type_contiguous(count: c_int, old: c_int, newtype: Out<'_, c_int>) -> c_int {
    new_type("MPI_Type_contiguous", newtype, |s| {
        let t = datatype::contiguous(count_of(count)?, &s.datatype(old)?);
        Ok((t, Contents::new(s, MPI_COMBINER_CONTIGUOUS, vec![count], vec![], vec![old])))
    })
}

pub(crate) unsafe fn mpi_type_vector(
    count: c_int,
    blocklen: c_int,
    stride: c_int,
    old: c_int,
    newtype: Out<'_, c_int>,
) -> c_int {
    new_type("MPI_Type_vector", newtype, |s| {
        let t = s.datatype(old)?;
        let t = datatype::hvector(count_of(count)?, count_of(blocklen)?, stride as isize * t.extent, &t);
        Ok((t, Contents::new(s, MPI_COMBINER_VECTOR, vec![count, blocklen, stride], vec![], vec![old])))
    })
}

pub(crate) unsafe fn mpi_type_create_hvector(
    count: c_int,
    blocklen: c_int,
    stride: c_long,
    old: c_int,
    newtype: Out<'_, c_int>,
) -> c_int {
    new_type("MPI_Type_create_hvector", newtype, |s| {
        let t = datatype::hvector(count_of(count)?, count_of(blocklen)?, stride as isize, &s.datatype(old)?);
        Ok((
            t,
            Contents::new(s, MPI_COMBINER_HVECTOR, vec![count, blocklen], vec![stride as isize], vec![old]),
        ))
    })
}

pub(crate) unsafe fn mpi_type_hvector(
    count: c_int,
    blocklen: c_int,
    stride: c_long,
    old: c_int,
    newtype: Out<'_, c_int>,
) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    unsafe { mpi_type_create_hvector(count, blocklen, stride, old, newtype) }
}

pub(crate) unsafe fn mpi_type_indexed(
    count: c_int,
    lens: In<'_, c_int>,
    displs: In<'_, c_int>,
    old: c_int,
    newtype: Out<'_, c_int>,
) -> c_int {
    new_type("MPI_Type_indexed", newtype, |s| {
        let n = count_of(count)?;
        let t = s.datatype(old)?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        let given = unsafe { ffi::array(displs, n, "displacements") }?;
        let displs: Vec<isize> = given.iter().map(|&d| d as isize * t.extent).collect();
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        let lens = unsafe { ffi::array(lens, n, "blocklengths") }?;
        let ints = [&[count], lens, given].concat();
        Ok((
            datatype::hindexed(lens, &displs, &t)?,
            Contents::new(s, MPI_COMBINER_INDEXED, ints, vec![], vec![old]),
        ))
    })
}

pub(crate) unsafe fn mpi_type_create_hindexed(
    count: c_int,
    lens: In<'_, c_int>,
    displs: In<'_, c_long>,
    old: c_int,
    newtype: Out<'_, c_int>,
) -> c_int {
    new_type("MPI_Type_create_hindexed", newtype, |s| {
        let n = count_of(count)?;
        let displs: Vec<isize> =
            // SAFETY: the array is as long as this call's counts say (the FFI contract).
            unsafe { ffi::array(displs, n, "displacements") }?.iter().map(|&d| d as isize).collect();
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        let lens = unsafe { ffi::array(lens, n, "blocklengths") }?;
        let t = datatype::hindexed(lens, &displs, &s.datatype(old)?)?;
        let ints = [&[count], lens].concat();
        Ok((t, Contents::new(s, MPI_COMBINER_HINDEXED, ints, aints(&displs), vec![old])))
    })
}

pub(crate) unsafe fn mpi_type_create_struct(
    count: c_int,
    lens: In<'_, c_int>,
    displs: In<'_, c_long>,
    types: In<'_, c_int>,
    newtype: Out<'_, c_int>,
) -> c_int {
    new_type("MPI_Type_create_struct", newtype, |s| {
        let n = count_of(count)?;
        let displs: Vec<isize> =
            // SAFETY: the array is as long as this call's counts say (the FFI contract).
            unsafe { ffi::array(displs, n, "displacements") }?.iter().map(|&d| d as isize).collect();
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        let handles = unsafe { ffi::array(types, n, "types") }?;
        let types = handles.iter().map(|&t| s.datatype(t)).collect::<MpiResult<Vec<_>>>()?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        let lens = unsafe { ffi::array(lens, n, "blocklengths") }?;
        let t = datatype::structure(lens, &displs, &types)?;
        let ints = [&[count], lens].concat();
        Ok((t, Contents::new(s, MPI_COMBINER_STRUCT, ints, aints(&displs), handles.to_vec())))
    })
}

pub(crate) unsafe fn mpi_type_struct(
    count: c_int,
    lens: In<'_, c_int>,
    displs: In<'_, c_long>,
    types: In<'_, c_int>,
    newtype: Out<'_, c_int>,
) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    unsafe { mpi_type_create_struct(count, lens, displs, types, newtype) }
}

pub(crate) unsafe fn mpi_type_create_resized(
    old: c_int,
    lb: c_long,
    extent: c_long,
    newtype: Out<'_, c_int>,
) -> c_int {
    new_type("MPI_Type_create_resized", newtype, |s| {
        let mut t = s.datatype(old)?;
        (t.lb, t.extent, t.committed) = (lb as isize, extent as isize, false);
        // MPI 4.0, 5.1.7: as if made with MPI_LB and MPI_UB markers at the new bounds.
        t.sticky = (Some(lb as isize), Some((lb + extent) as isize));
        Ok((t, Contents::new(s, MPI_COMBINER_RESIZED, vec![], vec![lb as isize, extent as isize], vec![old])))
    })
}

pub(crate) unsafe fn mpi_type_dup(old: c_int, newtype: Out<'_, c_int>) -> c_int {
    call("MPI_Type_dup", MPI_COMM_WORLD, |s| {
        let t = s.datatype(old)?;
        let contents = Contents::new(s, MPI_COMBINER_DUP, vec![], vec![], vec![old]);
        let h = s.types.insert(t);
        s.record_contents(h, contents);
        // The duplicate gets the attributes their copy functions pass on.
        s.copy_type_attributes(old, h)?;
        ffi::out(newtype, h, "newtype")
    })
}

pub(crate) unsafe fn mpi_type_commit(datatype: Out<'_, c_int>) -> c_int {
    call("MPI_Type_commit", MPI_COMM_WORLD, |s| {
        let h = ffi::read(datatype, "datatype")?;
        if let Some(t) = s.types.get_mut(h) {
            t.committed = true;
        }
        s.datatype(h).map(drop)
    })
}

pub(crate) unsafe fn mpi_type_free(datatype: Out<'_, c_int>) -> c_int {
    call("MPI_Type_free", MPI_COMM_WORLD, |s| {
        let h = ffi::read(datatype, "datatype")?;
        if s.types.get(h).is_some() {
            s.delete_type_attributes(h)?;
        }
        s.types
            .remove(h)
            .ok_or_else(|| MpiError::new(MPI_ERR_TYPE, format!("{h:#x} is not a derived datatype")))?;
        s.type_contents.remove(&h);
        s.type_names.remove(&h);
        ffi::out(datatype, MPI_DATATYPE_NULL, "datatype")
    })
}

pub(crate) unsafe fn mpi_get_address(location: *const c_void, address: Out<'_, c_long>) -> c_int {
    call("MPI_Get_address", MPI_COMM_WORLD, |_| ffi::out(address, location as c_long, "address"))
}

pub(crate) unsafe fn mpi_address(location: *const c_void, address: Out<'_, c_long>) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    unsafe { mpi_get_address(location, address) }
}

pub(crate) unsafe fn mpi_type_create_indexed_block(
    count: c_int,
    blocklen: c_int,
    displs: In<'_, c_int>,
    old: c_int,
    newtype: Out<'_, c_int>,
) -> c_int {
    new_type("MPI_Type_create_indexed_block", newtype, |s| {
        let n = count_of(count)?;
        let t = s.datatype(old)?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        let given = unsafe { ffi::array(displs, n, "displacements") }?;
        let displs: Vec<isize> = given.iter().map(|&d| d as isize * t.extent).collect();
        let ints = [&[count, blocklen], given].concat();
        let c = Contents::new(s, MPI_COMBINER_INDEXED_BLOCK, ints, vec![], vec![old]);
        Ok((datatype::hindexed(&vec![blocklen; n], &displs, &t)?, c))
    })
}

pub(crate) unsafe fn mpi_type_create_hindexed_block(
    count: c_int,
    blocklen: c_int,
    displs: In<'_, c_long>,
    old: c_int,
    newtype: Out<'_, c_int>,
) -> c_int {
    new_type("MPI_Type_create_hindexed_block", newtype, |s| {
        let n = count_of(count)?;
        let displs: Vec<isize> =
            // SAFETY: the array is as long as this call's counts say (the FFI contract).
            unsafe { ffi::array(displs, n, "displacements") }?.iter().map(|&d| d as isize).collect();
        let t = datatype::hindexed(&vec![blocklen; n], &displs, &s.datatype(old)?)?;
        Ok((
            t,
            Contents::new(s, MPI_COMBINER_HINDEXED_BLOCK, vec![count, blocklen], aints(&displs), vec![old]),
        ))
    })
}

pub(crate) unsafe fn mpi_pack_size(
    incount: c_int,
    datatype: c_int,
    comm: c_int,
    size: Out<'_, c_int>,
) -> c_int {
    call("MPI_Pack_size", comm, |s| {
        let n = s.datatype(datatype)?.bytes_for(count_of(incount)?);
        ffi::out(size, c_int::try_from(n).unwrap_or(c_int::MAX), "size")
    })
}

pub(crate) unsafe fn mpi_pack(
    inbuf: UserBuf,
    incount: c_int,
    datatype: c_int,
    outbuf: UserBuf,
    outsize: c_int,
    position: Out<'_, c_int>,
    comm: c_int,
) -> c_int {
    call("MPI_Pack", comm, |s| {
        let at = usize::try_from(ffi::read(position, "position")?).unwrap_or(usize::MAX);
        // SAFETY: MPI_Pack's `inbuf` spans `incount` elements of `datatype` (the contract).
        let bytes = unsafe { s.datatype(datatype)?.pack(&inbuf, count_of(incount)?) }?;
        let room = usize::try_from(outsize).unwrap_or(0);
        if at > room || bytes.len() > room - at {
            return Err(MpiError::new(
                MPI_ERR_TRUNCATE,
                format!("{} bytes at {at} of a {room}-byte buffer", bytes.len()),
            ));
        }
        // SAFETY: MPI_Pack's `outbuf` holds `outsize` writable bytes (the contract).
        unsafe { outbuf.bytes_mut(room) }?[at..at + bytes.len()].copy_from_slice(&bytes);
        ffi::out(position, (at + bytes.len()) as c_int, "position")
    })
}

pub(crate) unsafe fn mpi_unpack(
    inbuf: UserBuf,
    insize: c_int,
    position: Out<'_, c_int>,
    outbuf: UserBuf,
    outcount: c_int,
    datatype: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Unpack", comm, |s| {
        let at = usize::try_from(ffi::read(position, "position")?).unwrap_or(usize::MAX);
        let dt = s.datatype(datatype)?;
        let n = count_of(outcount)?;
        let want = dt.bytes_for(n);
        let have = usize::try_from(insize).unwrap_or(0);
        if at > have || want > have - at {
            return Err(MpiError::new(
                MPI_ERR_TRUNCATE,
                format!("{want} bytes at {at} of a {have}-byte buffer"),
            ));
        }
        // SAFETY: MPI_Unpack's `inbuf` holds `insize` readable bytes (the contract).
        let packed = unsafe { inbuf.bytes(have) }?;
        // SAFETY: `outbuf` spans `outcount` elements of `datatype` (the contract); it is not
        // `inbuf` (MPI forbids aliased arguments).
        unsafe { dt.unpack(&packed[at..at + want], outbuf, n) }?;
        ffi::out(position, (at + want) as c_int, "position")
    })
}

fn size_wide(datatype: c_int, size: Out<'_, c_long>, function: &str) -> c_int {
    call(function, MPI_COMM_WORLD, |s| ffi::out(size, s.datatype(datatype)?.size as c_long, "size"))
}

pub(crate) unsafe fn mpi_type_size_c(datatype: c_int, size: Out<'_, c_long>) -> c_int {
    size_wide(datatype, size, "MPI_Type_size_c")
}

pub(crate) unsafe fn mpi_type_size_x(datatype: c_int, size: Out<'_, c_long>) -> c_int {
    size_wide(datatype, size, "MPI_Type_size_x")
}

pub(crate) unsafe fn mpi_type_lb(datatype: c_int, displacement: Out<'_, c_long>) -> c_int {
    query_type("MPI_Type_lb", datatype, |t| ffi::out(displacement, t.lb as c_long, "displacement"))
}

pub(crate) unsafe fn mpi_type_ub(datatype: c_int, displacement: Out<'_, c_long>) -> c_int {
    query_type("MPI_Type_ub", datatype, |t| {
        ffi::out(displacement, (t.lb + t.extent) as c_long, "displacement")
    })
}
