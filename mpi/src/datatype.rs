//! Datatypes: the predefined ones (sizes from MPICH's handle encoding), and derived ones with
//! their data's byte runs per element (`layout`); packing a buffer into message bytes and back.

use std::borrow::Cow;
use std::ffi::c_int;

use smallvec::smallvec;

use crate::abi::*;
use crate::elements::Elems;
use crate::errors::{MpiError, MpiResult};
use crate::ffi::UserBuf;
use crate::layout::Layout;

/// What one element holds, for reductions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
    /// C `bool` (logical operations only).
    Bool,
    /// A value and an `int` index, for MINLOC/MAXLOC: the value's kind, the index's offset.
    Pair(PairValue, usize),
    /// C's `long double` (x87 extended, 16 bytes): reduced by `csrc/long_double.c`.
    LongDouble,
    /// (`long double`, `int`) packed: 20 bytes.
    LongDoubleInt,
    /// Complex numbers of two `f32` or two `f64`.
    ComplexF32,
    ComplexF64,
    /// Bytes with no arithmetic (MPI_BYTE, MPI_PACKED, long double, complex, mixed structs).
    Opaque,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairValue {
    F32,
    F64,
    I64,
    I32,
    I16,
}

impl Elem {
    /// Bytes of one element of this kind.
    pub fn size(self) -> usize {
        match self {
            Elem::I8 | Elem::U8 | Elem::Bool | Elem::Opaque => 1,
            Elem::I16 | Elem::U16 => 2,
            Elem::I32 | Elem::U32 | Elem::F32 => 4,
            Elem::I64 | Elem::U64 | Elem::F64 => 8,
            Elem::Pair(_, index_at) => index_at + 4,
            Elem::LongDouble | Elem::ComplexF64 => 16,
            Elem::LongDoubleInt => 20,
            Elem::ComplexF32 => 8,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Datatype {
    /// Bytes of data in one element.
    pub size: usize,
    pub lb: isize,
    pub extent: isize,
    /// The data of one element: (offset from its start, length) runs, in order.
    pub layout: Layout,
    /// The kind of every basic element in it, when all are one kind.
    pub elem: Elem,
    pub committed: bool,
    /// Explicit bounds (MPI_LB / MPI_UB markers, `MPI_Type_create_resized`), which override
    /// the computed ones in every type made of this one.
    pub sticky: (Option<isize>, Option<isize>),
    /// Alignment of its most aligned basic element: a struct's extent is padded to it.
    pub align: usize,
    /// Its basic elements in type-map order (MPI_Get_elements).
    pub elems: Elems,
}

/// The natural alignment of a basic type of `size` bytes holding `elem`s.
fn natural_align(size: usize, elem: Elem) -> usize {
    match elem {
        Elem::ComplexF32 => 4,
        Elem::ComplexF64 => 8,
        Elem::Pair(_, value_size) => value_size.max(4),
        Elem::LongDoubleInt => 16,
        _ => (1usize << size.trailing_zeros().min(4)).min(size.max(1)),
    }
}

fn elem_of(h: c_int) -> Elem {
    match h {
        MPI_CHAR | MPI_SIGNED_CHAR | MPI_INT8_T | MPI_INTEGER1 => Elem::I8,
        MPI_UNSIGNED_CHAR | MPI_UINT8_T => Elem::U8,
        MPI_SHORT | MPI_INT16_T | MPI_INTEGER2 => Elem::I16,
        MPI_UNSIGNED_SHORT | MPI_UINT16_T => Elem::U16,
        MPI_INT | MPI_INT32_T | MPI_INTEGER | MPI_INTEGER4 | MPI_WCHAR | MPI_LOGICAL => Elem::I32,
        MPI_UNSIGNED | MPI_UINT32_T => Elem::U32,
        MPI_LONG | MPI_LONG_LONG_INT | MPI_INT64_T | MPI_INTEGER8 | MPI_AINT | MPI_OFFSET | MPI_COUNT => {
            Elem::I64
        }
        MPI_UNSIGNED_LONG | MPI_UNSIGNED_LONG_LONG | MPI_UINT64_T => Elem::U64,
        MPI_FLOAT | MPI_REAL | MPI_REAL4 => Elem::F32,
        MPI_DOUBLE | MPI_DOUBLE_PRECISION | MPI_REAL8 => Elem::F64,
        MPI_C_BOOL | MPI_CXX_BOOL => Elem::Bool,
        MPI_2INT | MPI_2INTEGER => Elem::Pair(PairValue::I32, 4),
        MPI_2REAL => Elem::Pair(PairValue::F32, 4),
        MPI_LONG_DOUBLE => Elem::LongDouble,
        MPI_C_FLOAT_COMPLEX | MPI_COMPLEX | MPI_COMPLEX8 | MPI_CXX_FLOAT_COMPLEX => Elem::ComplexF32,
        MPI_C_DOUBLE_COMPLEX | MPI_DOUBLE_COMPLEX | MPI_COMPLEX16 | MPI_CXX_DOUBLE_COMPLEX => {
            Elem::ComplexF64
        }
        _ => Elem::Opaque,
    }
}

impl Datatype {
    fn contiguous_bytes(size: usize, elem: Elem) -> Datatype {
        Datatype {
            size,
            lb: 0,
            extent: size as isize,
            layout: Layout::one_run(size),
            elem,
            committed: true,
            sticky: (None, None),
            align: natural_align(size, elem),
            elems: match elem {
                Elem::Pair(_, value_size) => Elems::concat([Elems::basic(value_size), Elems::basic(4)]),
                _ => Elems::basic(size),
            },
        }
    }

    /// The element size of a predefined type laid out as one contiguous run, from its handle
    /// alone (MPICH's predefined handles, 0x4c......, carry their size in bits 8..16; the
    /// value-index pairs are not among them): the per-message case builds no `Datatype`.
    #[inline]
    pub fn plain_size(h: c_int) -> Option<usize> {
        let h = h as u32;
        (h & 0xff00_0000 == 0x4c00_0000).then_some(((h >> 8) & 0xff) as usize)
    }

    /// A predefined datatype named by its handle.
    pub fn builtin(h: c_int) -> Option<Datatype> {
        // The value-index pairs are not contiguous in C: (value, padding?, int).
        let pair = |value: PairValue, value_size: usize, index_at: usize, extent: usize| Datatype {
            size: value_size + 4,
            lb: 0,
            extent: extent as isize,
            layout: Layout::Flat(if index_at == value_size {
                smallvec![(0, value_size + 4)]
            } else {
                smallvec![(0, value_size), (index_at as isize, 4)]
            }),
            // Reductions see packed bytes: the index right after the value.
            elem: Elem::Pair(value, value_size),
            committed: true,
            sticky: (None, None),
            align: value_size.max(4),
            elems: Elems::concat([Elems::basic(value_size), Elems::basic(4)]),
        };
        match h {
            MPI_FLOAT_INT => return Some(pair(PairValue::F32, 4, 4, 8)),
            MPI_DOUBLE_INT => return Some(pair(PairValue::F64, 8, 8, 16)),
            MPI_LONG_INT => return Some(pair(PairValue::I64, 8, 8, 16)),
            MPI_SHORT_INT => return Some(pair(PairValue::I16, 2, 4, 8)),
            MPI_LONG_DOUBLE_INT => {
                return Some(Datatype {
                    size: 20,
                    lb: 0,
                    extent: 32,
                    layout: Layout::Flat(smallvec![(0, 16), (16, 4)]),
                    elem: Elem::LongDoubleInt,
                    committed: true,
                    sticky: (None, None),
                    align: 16,
                    elems: Elems::concat([Elems::basic(16), Elems::basic(4)]),
                });
            }
            MPI_DATATYPE_NULL => return None,
            // The old bound markers: no data, an explicit bound where they are placed.
            MPI_LB | MPI_UB => {
                let mut marker = Datatype::contiguous_bytes(0, Elem::Opaque);
                marker.layout = Layout::empty();
                marker.elems = Elems::empty();
                marker.sticky = if h == MPI_LB { (Some(0), None) } else { (None, Some(0)) };
                return Some(marker);
            }
            _ => {}
        }
        let size = Datatype::plain_size(h)?;
        let elem = elem_of(h);
        let elem = if elem.size() == size { elem } else { Elem::Opaque };
        Some(Datatype::contiguous_bytes(size, elem))
    }

    /// One contiguous run of `size` bytes at offset 0 with extent `size`.
    pub fn is_contiguous(&self) -> bool {
        self.extent == self.size as isize
            && self.layout.flat().is_some_and(|runs| runs.len() <= 1 && runs.first().is_none_or(|b| b.0 == 0))
    }

    /// The runs of `count` elements of this type laid out `stride` bytes apart, as a list.
    pub fn repeated(&self, count: usize, stride: isize) -> Vec<(isize, usize)> {
        // One run a stride long: one run however many copies (huge counts), listed at once.
        match self.layout.repeat(count, stride) {
            Layout::Flat(runs) => runs.into_vec(),
            tree => tree.materialize(1, 0).into_vec(),
        }
    }

    /// `count` elements as a plain vector (offset, length, blocks, stride), where they are
    /// one: one element of a vector layout, or copies of a one-run type.
    fn as_vector(&self, count: usize) -> Option<(isize, usize, usize, isize)> {
        match (count, self.layout.flat()) {
            (1, _) => self.layout.vector(),
            // Copies that touch: one block.
            (_, Some(&[(off, len)])) if len as isize == self.extent => Some((off, len * count, 1, 0)),
            (_, Some(&[(off, len)])) => Some((off, len, count, self.extent)),
            _ => None,
        }
    }

    /// The least offset and the greatest end of the data of `count` elements ((0, 0) for
    /// none): the true bounds.
    pub fn data_span(&self, count: usize) -> (isize, isize) {
        self.layout.span_of(count, self.extent).unwrap_or((0, 0))
    }

    /// The bytes of `count` elements where they are one contiguous run, else None.
    pub fn contiguous_len(&self, count: usize) -> Option<usize> {
        self.is_contiguous().then(|| self.bytes_for(count))
    }

    /// Bytes `count` elements carry.
    pub fn bytes_for(&self, count: usize) -> usize {
        self.size * count
    }

    /// The bytes of `count` elements at `buf`: borrowed (no longer than `buf` is) when
    /// contiguous.
    ///
    /// # Safety
    /// `buf` spans `count` elements of this type, readable: MPI's rule for a send's buffer,
    /// until its call returns or its request completes (which has not happened yet).
    pub unsafe fn pack<'a>(&self, buf: &'a UserBuf, count: usize) -> MpiResult<Cow<'a, [u8]>> {
        let total = self.bytes_for(count);
        if self.is_contiguous() {
            // SAFETY: contiguous, so the `total` bytes from `buf` (the caller's promise).
            return Ok(Cow::Borrowed(unsafe { buf.bytes(total) }?));
        }
        if let Some(v) = self.as_vector(count) {
            // SAFETY: the caller's promise.
            return unsafe { pack_vector(buf, v, total) }.map(Cow::Owned);
        }
        let mut out = Vec::with_capacity(total);
        let mut failed = None;
        self.layout.walk_copies(count, self.extent, &mut |off, len| {
            // SAFETY: one run of the layout the caller promised is there.
            match unsafe { buf.at(off).bytes(len) } {
                Ok(run) => out.extend_from_slice(run),
                Err(e) => failed = Some(e),
            }
            failed.is_none()
        });
        failed.map_or(Ok(Cow::Owned(out)), Err)
    }

    /// Writes `data` (at most `count` elements' bytes) into `buf`.
    ///
    /// # Safety
    /// `buf` spans `count` elements of this type, writable and used by nothing else: MPI's
    /// rule for a receive's buffer, until its call returns or its request completes.
    pub unsafe fn unpack(&self, data: &[u8], buf: UserBuf, count: usize) -> MpiResult<()> {
        if self.is_contiguous() {
            let n = data.len().min(self.bytes_for(count));
            // SAFETY: contiguous, so `n` <= the bytes the caller promised are there.
            unsafe { buf.bytes_mut(n) }?.copy_from_slice(&data[..n]);
            return Ok(());
        }
        if let Some(v) = self.as_vector(count) {
            if data.len() == self.bytes_for(count) {
                // SAFETY: the caller's promise.
                return unsafe { unpack_vector(data, buf, v) };
            }
        }
        let (mut at, mut failed) = (0, None);
        self.layout.walk_copies(count, self.extent, &mut |off, len| {
            let n = len.min(data.len() - at);
            // SAFETY: (part of) one run of the layout the caller promised is there.
            match unsafe { buf.at(off).bytes_mut(n) } {
                Ok(run) => run.copy_from_slice(&data[at..at + n]),
                Err(e) => failed = Some(e),
            }
            at += n;
            failed.is_none() && at < data.len()
        });
        failed.map_or(Ok(()), Err)
    }
}

/// `pack` of a plain vector `(off, len, count, stride)` (`total` bytes): one loop of copies (MPICH's large_vec has 135 M blocks, and in a debug build the walk's
/// closures cost several times the copy).
///
/// # Safety
/// As `Datatype::pack`: `buf` holds every block, readable.
unsafe fn pack_vector(
    buf: &UserBuf,
    (off, len, count, stride): (isize, usize, usize, isize),
    total: usize,
) -> MpiResult<Vec<u8>> {
    let mut out = Vec::<u8>::with_capacity(total);
    check_vector(len, count, total)?;
    if total == 0 {
        return Ok(out);
    }
    // SAFETY: the first block, which the caller promised is there (checked for null).
    unsafe { buf.at(off).bytes(len) }?;
    let first = buf.at(off).ptr().cast_const();
    let dst = out.as_mut_ptr();
    for i in 0..count {
        // SAFETY: block i of the caller's buffer, and `len` bytes of `out`'s capacity at
        // `i * len` (`count * len == total`); the two are different memory.
        unsafe {
            std::ptr::copy_nonoverlapping(first.wrapping_offset(i as isize * stride), dst.add(i * len), len)
        };
    }
    // SAFETY: all `total` bytes were written above.
    unsafe { out.set_len(total) };
    Ok(out)
}

/// `unpack` of `data`, the whole of a plain vector, into `buf`: as `pack_vector`.
///
/// # Safety
/// As `Datatype::unpack`: `buf` holds every block, writable and used by nothing else.
unsafe fn unpack_vector(
    data: &[u8],
    buf: UserBuf,
    (off, len, count, stride): (isize, usize, usize, isize),
) -> MpiResult<()> {
    check_vector(len, count, data.len())?;
    if data.is_empty() {
        return Ok(());
    }
    // SAFETY: the first block, which the caller promised is there (checked for null).
    unsafe { buf.at(off).bytes_mut(len) }?;
    let first = buf.at(off).ptr();
    for i in 0..count {
        // SAFETY: block i of the caller's buffer, and `len` bytes of `data` at `i * len`
        // (`count * len == data.len()`); the two are different memory.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr().add(i * len),
                first.wrapping_offset(i as isize * stride),
                len,
            )
        };
    }
    Ok(())
}

fn check_vector(len: usize, count: usize, total: usize) -> MpiResult<()> {
    match len.checked_mul(count) == Some(total) {
        true => Ok(()),
        false => Err(MpiError::new(MPI_ERR_INTERN, "a vector layout of another size than its type")),
    }
}

/// `buf` moved by `off` bytes (the address arithmetic of a datatype's layout; no access).
pub fn offset(buf: UserBuf, off: isize) -> UserBuf {
    buf.at(off)
}

/// MPI's bounds of a type made of copies of others: the least lower bound and the greatest
/// upper bound over the copies, explicit (sticky) bounds taking precedence.
#[derive(Default)]
struct Bounds {
    computed: Option<(isize, isize)>,
    sticky: (Option<isize>, Option<isize>),
    align: usize,
}

impl Bounds {
    /// `n` copies of `t` from byte `d`, one extent apart; an empty block counts for nothing.
    fn add(&mut self, d: isize, n: usize, t: &Datatype) {
        if n == 0 {
            return;
        }
        let span = (n as isize - 1) * t.extent;
        let (first, last) = (d + t.lb, d + t.lb + span);
        let (lo, hi) = (first.min(last), (first + t.extent).max(last + t.extent));
        // A bare marker (MPI_LB, MPI_UB) places only its explicit bound.
        let marker = t.size == 0 && t.extent == 0 && (t.sticky.0.is_some() || t.sticky.1.is_some());
        if !marker {
            self.align = self.align.max(t.align);
            self.computed = Some(match self.computed {
                None => (lo, hi),
                Some((a, b)) => (a.min(lo), b.max(hi)),
            });
        }
        let shifted =
            |m: Option<isize>, pick: fn(isize, isize) -> isize| m.map(|m| pick(d + m, d + m + span));
        let least = shifted(t.sticky.0, isize::min);
        let most = shifted(t.sticky.1, isize::max);
        self.sticky.0 = match (self.sticky.0, least) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.sticky.1 = match (self.sticky.1, most) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    /// The type of `blocks`: its bounds, a struct's extent padded to its alignment.
    fn finish(self, layout: Layout, elems: Elems, elem: Elem, pad: bool) -> Datatype {
        let (lo, hi) = self.computed.unwrap_or((0, 0));
        let lb = self.sticky.0.unwrap_or(lo);
        let mut ub = self.sticky.1.unwrap_or(hi);
        if pad && self.sticky.1.is_none() && self.align > 1 {
            let a = self.align as isize;
            ub = lb + (ub - lb + a - 1).div_euclid(a) * a;
        }
        let mut t = derived(layout, lb, ub - lb, elem);
        t.elems = elems;
        (t.sticky, t.align) = (self.sticky, self.align.max(1));
        t
    }
}

fn derived(layout: Layout, lb: isize, extent: isize, elem: Elem) -> Datatype {
    Datatype {
        size: layout.bytes(),
        lb,
        extent,
        layout,
        elem,
        committed: false,
        sticky: (None, None),
        align: 1,
        elems: Elems::empty(),
    }
}

/// `count` copies of `old`, one extent apart.
pub fn contiguous(count: usize, old: &Datatype) -> Datatype {
    let mut bounds = Bounds::default();
    bounds.add(0, count, old);
    let layout = old.layout.repeat(count, old.extent);
    bounds.finish(layout, old.elems.repeat(count as u64), old.elem, false)
}

/// `count` blocks of `blocklen` elements, block starts `stride` bytes apart.
pub fn hvector(count: usize, blocklen: usize, stride: isize, old: &Datatype) -> Datatype {
    let layout = old.layout.repeat(blocklen, old.extent).repeat(count, stride);
    let mut bounds = Bounds::default();
    // The first and the last block bound them all (the blocks are evenly spaced).
    for i in [0, count as isize - 1].into_iter().filter(|&i| i >= 0) {
        bounds.add(i * stride, blocklen, old);
    }
    let elems = old.elems.repeat(blocklen as u64).repeat(count as u64);
    bounds.finish(layout, elems, old.elem, false)
}

/// A block length as a count: MPI_ERR_ARG when negative.
fn block_len<L: Copy + TryInto<usize> + std::fmt::Display>(n: L) -> MpiResult<usize> {
    n.try_into().map_err(|_| MpiError::new(MPI_ERR_ARG, format!("block length {n}")))
}

/// Blocks of `lens[i]` elements at byte displacements `displs[i]` (`int` or `MPI_Count`
/// lengths).
pub fn hindexed<L>(lens: &[L], displs: &[isize], old: &Datatype) -> MpiResult<Datatype>
where
    L: Copy + TryInto<usize> + std::fmt::Display,
{
    let (mut parts, mut elems) = (Vec::new(), Vec::new());
    let mut bounds = Bounds::default();
    for (&n, &d) in lens.iter().zip(displs) {
        let n = block_len(n)?;
        parts.push((d, old.layout.repeat(n, old.extent)));
        bounds.add(d, n, old);
        elems.push(old.elems.repeat(n as u64));
    }
    Ok(bounds.finish(Layout::seq(parts), Elems::concat(elems), old.elem, false))
}

/// A struct: blocks of `lens[i]` elements of `types[i]` at byte displacements `displs[i]`.
pub fn structure<L>(lens: &[L], displs: &[isize], types: &[Datatype]) -> MpiResult<Datatype>
where
    L: Copy + TryInto<usize> + std::fmt::Display,
{
    let (mut parts, mut elems) = (Vec::new(), Vec::new());
    let mut bounds = Bounds::default();
    let mut elem = None;
    for ((&n, &d), t) in lens.iter().zip(displs).zip(types) {
        let n = block_len(n)?;
        parts.push((d, t.layout.repeat(n, t.extent)));
        bounds.add(d, n, t);
        elems.push(t.elems.repeat(n as u64));
        if t.size == 0 || n == 0 {
            continue; // No elements: nothing of their kind.
        }
        elem = match elem {
            None => Some(t.elem),
            Some(e) if e == t.elem => Some(e),
            Some(_) => Some(Elem::Opaque),
        };
    }
    Ok(bounds.finish(Layout::seq(parts), Elems::concat(elems), elem.unwrap_or(Elem::Opaque), true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_of_many_blocks_packs_and_unpacks_them_in_one_loop_or_walked() {
        let byte = Datatype::builtin(MPI_BYTE).expect("MPI_BYTE");
        let v = hvector(100_000, 1, 3, &byte);
        assert!(v.layout.vector().is_some());
        let mut src: Vec<u8> = (0..600_000).map(|i| (i % 251) as u8).collect();
        // SAFETY: `src` is ours and outlives `buf`'s use here.
        let buf = unsafe { UserBuf::from_raw(src.as_mut_ptr().cast()) };
        // One element (the loop) and two (walked): the same bytes, every third.
        for count in [1, 2] {
            // SAFETY: `src` holds `count` elements (extent 299 998, 600 000 bytes).
            let packed = unsafe { v.pack(&buf, count) }.expect("pack").into_owned();
            let expected: Vec<u8> =
                (0..count).flat_map(|c| (0..100_000).map(move |i| src_at(c * 299_998 + 3 * i))).collect();
            assert_eq!(packed, expected);
            let mut dst = vec![0u8; 600_000];
            // SAFETY: as above, for `dst`.
            let out = unsafe { UserBuf::from_raw(dst.as_mut_ptr().cast()) };
            // SAFETY: as above.
            unsafe { v.unpack(&packed, out, count) }.expect("unpack");
            let holes = dst.iter().enumerate().filter(|&(i, &b)| b != 0 && b != src_at(i)).count();
            assert_eq!(holes, 0);
            assert_eq!(dst[3], src_at(3));
        }
    }

    fn src_at(i: usize) -> u8 {
        (i % 251) as u8
    }
}
