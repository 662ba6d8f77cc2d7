//! Reduction operations: the predefined ones over each element kind, and the program's own
//! (`MPI_Op_create`). `apply` computes `inout = in op inout`, as MPI's user functions do.

use std::ffi::{c_int, c_long, c_void};

use crate::abi::*;
use crate::datatype::{Datatype, Elem, PairValue};
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::Out;
use crate::ffi::UserBuf;
use crate::state::{call, with_callback_type};

/// `void fn(void *in, void *inout, int *len, MPI_Datatype *type)`.
pub type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut c_int);

/// `void fn(void *in, void *inout, MPI_Count *len, MPI_Datatype *type)` (`MPI_Op_create_c`).
pub type UserFnC = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_long, *mut c_int);

/// A program's operation, as `MPI_Op_create` or `MPI_Op_create_c` took it.
#[derive(Debug, Clone, Copy)]
pub enum UserFunction {
    Int(UserFn),
    Large(UserFnC),
}

#[derive(Debug, Clone, Copy)]
pub struct UserOp {
    pub f: UserFunction,
    pub commute: bool,
}

/// An operation as a reduction runs it.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    Builtin(c_int),
    User(UserOp),
}

impl Op {
    pub fn commutative(&self) -> bool {
        match self {
            Op::Builtin(_) => true,
            Op::User(u) => u.commute,
        }
    }
}

fn bad(op: c_int, elem: Elem) -> MpiError {
    MpiError::new(MPI_ERR_OP, format!("operation {op:#x} is not defined on {elem:?} elements"))
}

/// `b[i] = f(a[i], b[i])` over the elements of type `$t`: one operation per loop, so the
/// compiler vectorizes it.
macro_rules! each {
    ($t:ty, $a:expr, $b:expr, |$p:ident, $q:ident| $body:expr) => {{
        const W: usize = std::mem::size_of::<$t>();
        let (xs, ys) = ($a.as_chunks::<W>().0, $b.as_chunks_mut::<W>().0);
        for (x, y) in xs.iter().zip(ys.iter_mut()) {
            let ($p, $q) = (<$t>::from_le_bytes(*x), <$t>::from_le_bytes(*y));
            let r: $t = $body;
            *y = r.to_le_bytes();
        }
        Ok(())
    }};
}

macro_rules! numeric {
    ($op:expr, $t:ty, $a:expr, $b:expr, $int:tt) => {{
        match $op {
            MPI_MAX => each!($t, $a, $b, |p, q| if p > q { p } else { q }),
            MPI_MIN => each!($t, $a, $b, |p, q| if p < q { p } else { q }),
            MPI_SUM => each!($t, $a, $b, |p, q| int_or_float!($int, p, q, add)),
            MPI_PROD => each!($t, $a, $b, |p, q| int_or_float!($int, p, q, mul)),
            MPI_REPLACE => each!($t, $a, $b, |p, _q| p),
            MPI_NO_OP => Ok(()),
            _ => Err(bad($op, Elem::Opaque)),
        }
    }};
}

macro_rules! int_or_float {
    (true, $p:expr, $q:expr, add) => {
        $p.wrapping_add($q)
    };
    (true, $p:expr, $q:expr, mul) => {
        $p.wrapping_mul($q)
    };
    (false, $p:expr, $q:expr, add) => {
        $p + $q
    };
    (false, $p:expr, $q:expr, mul) => {
        $p * $q
    };
}

macro_rules! bits {
    ($op:expr, $t:ty, $a:expr, $b:expr) => {{
        let w = std::mem::size_of::<$t>();
        for (x, y) in $a.chunks_exact(w).zip($b.chunks_exact_mut(w)) {
            let p = <$t>::from_le_bytes(x.try_into().unwrap_or_default());
            let q = <$t>::from_le_bytes((&*y).try_into().unwrap_or_default());
            let r: $t = match $op {
                MPI_BAND => p & q,
                MPI_BOR => p | q,
                MPI_BXOR => p ^ q,
                MPI_LAND => <$t>::from((p != 0) && (q != 0)),
                MPI_LOR => <$t>::from((p != 0) || (q != 0)),
                MPI_LXOR => <$t>::from((p != 0) != (q != 0)),
                _ => unreachable!("bitwise and logical operations only"),
            };
            y.copy_from_slice(&r.to_le_bytes());
        }
        Ok(())
    }};
}

/// SUM and PROD on complex numbers (pairs of `$t`: real, imaginary).
macro_rules! complex {
    ($op:expr, $t:ty, $a:expr, $b:expr) => {{
        let w = std::mem::size_of::<$t>();
        for (x, y) in $a.chunks_exact(2 * w).zip($b.chunks_exact_mut(2 * w)) {
            let v = |c: &[u8], i: usize| {
                <$t>::from_le_bytes(c[i * w..(i + 1) * w].try_into().unwrap_or_default())
            };
            let (p, q, r, t) = (v(x, 0), v(x, 1), v(y, 0), v(y, 1));
            let (re, im) = match $op {
                MPI_SUM => (p + r, q + t),
                MPI_PROD => (p * r - q * t, p * t + q * r),
                _ => return Err(bad($op, Elem::Opaque)),
            };
            y[..w].copy_from_slice(&re.to_le_bytes());
            y[w..].copy_from_slice(&im.to_le_bytes());
        }
        Ok(())
    }};
}

const BITWISE: [c_int; 6] = [MPI_BAND, MPI_BOR, MPI_BXOR, MPI_LAND, MPI_LOR, MPI_LXOR];

/// A predefined operation on packed elements of kind `elem`.
fn builtin(op: c_int, elem: Elem, a: &[u8], b: &mut [u8]) -> MpiResult<()> {
    if BITWISE.contains(&op) {
        let logical = matches!(op, MPI_LAND | MPI_LOR | MPI_LXOR);
        return match elem {
            Elem::I8 | Elem::U8 => bits!(op, u8, a, b),
            Elem::Bool if logical => bits!(op, u8, a, b),
            Elem::Opaque if !logical => bits!(op, u8, a, b),
            Elem::I16 | Elem::U16 => bits!(op, u16, a, b),
            Elem::I32 | Elem::U32 => bits!(op, u32, a, b),
            Elem::I64 | Elem::U64 => bits!(op, u64, a, b),
            _ => Err(bad(op, elem)),
        };
    }
    if op == MPI_MAXLOC || op == MPI_MINLOC {
        if elem == Elem::LongDoubleInt {
            ffi::long_double_loc(if op == MPI_MAXLOC { ffi::LD_MAXLOC } else { ffi::LD_MINLOC }, a, b);
            return Ok(());
        }
        return pairs(op, elem, a, b);
    }
    match elem {
        Elem::LongDouble => {
            let code = match op {
                MPI_MAX => ffi::LD_MAX,
                MPI_MIN => ffi::LD_MIN,
                MPI_SUM => ffi::LD_SUM,
                MPI_PROD => ffi::LD_PROD,
                _ => 0,
            };
            return if ffi::long_double_op(code, a, b) { Ok(()) } else { Err(bad(op, elem)) };
        }
        Elem::ComplexF32 => return complex!(op, f32, a, b),
        Elem::ComplexF64 => return complex!(op, f64, a, b),
        _ => {}
    }
    match elem {
        Elem::I8 => numeric!(op, i8, a, b, true),
        Elem::U8 => numeric!(op, u8, a, b, true),
        Elem::I16 => numeric!(op, i16, a, b, true),
        Elem::U16 => numeric!(op, u16, a, b, true),
        Elem::I32 => numeric!(op, i32, a, b, true),
        Elem::U32 => numeric!(op, u32, a, b, true),
        Elem::I64 => numeric!(op, i64, a, b, true),
        Elem::U64 => numeric!(op, u64, a, b, true),
        Elem::F32 => numeric!(op, f32, a, b, false),
        Elem::F64 => numeric!(op, f64, a, b, false),
        _ if op == MPI_REPLACE => {
            b.copy_from_slice(&a[..b.len()]);
            Ok(())
        }
        _ if op == MPI_NO_OP => Ok(()),
        _ => Err(bad(op, elem)),
    }
}

/// MAXLOC / MINLOC on (value, int index) pairs: the better value, ties to the lower index.
fn pairs(op: c_int, elem: Elem, a: &[u8], b: &mut [u8]) -> MpiResult<()> {
    let Elem::Pair(kind, index_at) = elem else { return Err(bad(op, elem)) };
    let size = elem.size();
    let value = |x: &[u8]| -> f64 {
        let w = |n: usize| -> [u8; 8] {
            let mut v = [0u8; 8];
            v[..n].copy_from_slice(&x[..n]);
            v
        };
        match kind {
            PairValue::F32 => f32::from_le_bytes(x[..4].try_into().unwrap_or_default()) as f64,
            PairValue::F64 => f64::from_le_bytes(w(8)),
            PairValue::I64 => i64::from_le_bytes(w(8)) as f64,
            PairValue::I32 => i32::from_le_bytes(x[..4].try_into().unwrap_or_default()) as f64,
            PairValue::I16 => i16::from_le_bytes(x[..2].try_into().unwrap_or_default()) as f64,
        }
    };
    let index = |x: &[u8]| i32::from_le_bytes(x[index_at..index_at + 4].try_into().unwrap_or_default());
    for (x, y) in a.chunks_exact(size).zip(b.chunks_exact_mut(size)) {
        let (vx, vy) = (value(x), value(y));
        let better = if op == MPI_MAXLOC { vx > vy } else { vx < vy };
        if better || (vx == vy && index(x) < index(y)) {
            y.copy_from_slice(x);
        }
    }
    Ok(())
}

/// `inout = in op inout` over `count` elements of `dt` (packed bytes). A program's own
/// operation gets the elements in their datatype's layout (a non-contiguous one's laid out in
/// scratch buffers first, and packed back after).
pub fn apply(
    op: Op,
    dt: &Datatype,
    dt_handle: c_int,
    count: usize,
    input: &[u8],
    inout: &mut [u8],
) -> MpiResult<()> {
    let u = match op {
        Op::Builtin(o) => return builtin(o, dt.elem, input, inout),
        Op::User(u) => u,
    };
    if dt.is_contiguous() {
        let mut scratch = input.to_vec();
        return with_callback_type(dt_handle, dt, || {
            ffi::user_op(u.f, &mut scratch, 0, inout, count, dt_handle)
        });
    }
    // The span the elements' blocks cover, from its lowest offset (a negative lower bound
    // included): both operands are laid out there as the program's buffers would hold them.
    let (low, high) = dt.data_span(count);
    let span = usize::try_from(high - low)
        .map_err(|_| MpiError::new(MPI_ERR_TYPE, "a datatype spanning no bytes"))?;
    let lay_out = |packed: &[u8]| -> MpiResult<Vec<u8>> {
        let mut area = vec![0u8; span];
        // SAFETY: `area` is ours, `span` bytes: every block of the layout from `-low` on.
        let base = unsafe { UserBuf::from_raw(area.as_mut_ptr().cast()) }.at(-low);
        // SAFETY: as above; nothing else touches `area` meanwhile.
        unsafe { dt.unpack(packed, base, count) }?;
        Ok(area)
    };
    let (mut a, mut b) = (lay_out(input)?, lay_out(inout)?);
    with_callback_type(dt_handle, dt, || ffi::user_op(u.f, &mut a, -low, &mut b, count, dt_handle))?;
    // SAFETY: `b` is ours and laid out like `area` above; only read while `packed` lives.
    let base = unsafe { UserBuf::from_raw(b.as_mut_ptr().cast()) }.at(-low);
    // SAFETY: as above.
    let packed = unsafe { dt.pack(&base, count) }?;
    inout.copy_from_slice(&packed);
    Ok(())
}

impl crate::state::State {
    pub fn op(&self, h: c_int) -> MpiResult<Op> {
        if (MPI_MAX..=MPI_NO_OP).contains(&h) {
            return Ok(Op::Builtin(h));
        }
        self.ops
            .get(h)
            .map(|u| Op::User(*u))
            .ok_or_else(|| MpiError::new(MPI_ERR_OP, format!("invalid operation {h:#x}")))
    }
}

pub(crate) unsafe fn mpi_op_create(f: Option<UserFn>, commute: c_int, op: Out<'_, c_int>) -> c_int {
    create("MPI_Op_create", f.map(UserFunction::Int), commute, op)
}

/// The large-count form: the function gets its length as an MPI_Count.
pub(crate) unsafe fn mpi_op_create_c(f: Option<UserFnC>, commute: c_int, op: Out<'_, c_int>) -> c_int {
    create("MPI_Op_create_c", f.map(UserFunction::Large), commute, op)
}

fn create(function: &str, f: Option<UserFunction>, commute: c_int, op: Out<'_, c_int>) -> c_int {
    call(function, MPI_COMM_WORLD, |s| {
        let f = f.ok_or_else(|| MpiError::new(MPI_ERR_ARG, "a NULL user function"))?;
        let h = s.ops.insert(UserOp { f, commute: commute != 0 });
        ffi::out(op, h, "op")
    })
}

pub(crate) unsafe fn mpi_op_free(op: Out<'_, c_int>) -> c_int {
    call("MPI_Op_free", MPI_COMM_WORLD, |s| {
        let h = ffi::read(op, "op")?;
        s.ops.remove(h).ok_or_else(|| MpiError::new(MPI_ERR_OP, format!("invalid operation {h:#x}")))?;
        ffi::out(op, MPI_OP_NULL, "op")
    })
}

pub(crate) unsafe fn mpi_op_commutative(op: c_int, commute: Out<'_, c_int>) -> c_int {
    call("MPI_Op_commutative", MPI_COMM_WORLD, |s| {
        ffi::out(commute, c_int::from(s.op(op)?.commutative()), "commute")
    })
}
