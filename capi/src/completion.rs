//! Completions in C form: one plain struct for every kind.

use std::ffi::c_int;

use reverb_transport::{Completion, CompletionKind};

use crate::status::{CError, REVERB_OK};

/// A signaled `reverb_put` finished: its local bytes may be reused.
pub const REVERB_COMPLETION_PUT: c_int = 1;
/// A signaled `reverb_put_imm` finished.
pub const REVERB_COMPLETION_PUT_IMM: c_int = 2;
/// A signaled `reverb_get` finished: the data is in the local region.
pub const REVERB_COMPLETION_GET: c_int = 3;
/// A tagged send finished.
pub const REVERB_COMPLETION_SEND: c_int = 4;
/// A tagged receive finished: the message is in its buffer.
pub const REVERB_COMPLETION_RECV: c_int = 5;
/// A peer's `reverb_put_imm` into one of this rank's regions: the data is in place.
pub const REVERB_COMPLETION_IMM: c_int = 6;

/// One completion.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CompletionC {
    /// The id its post returned (0 for `REVERB_COMPLETION_IMM`).
    pub op: u64,
    /// `REVERB_COMPLETION_*`.
    pub kind: c_int,
    /// `REVERB_OK`, or why the operation failed (`reverb_last_error` has the message).
    pub status: c_int,
    /// The peer: a send's destination, a receive's source, an immediate's writer.
    pub peer: u32,
    /// The immediate value of a `REVERB_COMPLETION_IMM`.
    pub imm: u32,
    /// The tag of a send or receive.
    pub tag: u64,
    /// Bytes moved (a receive: the message's length).
    pub len: u64,
}

/// The C form of `c`; `take_data` gets an owned receive's bytes (to copy them where the caller
/// asked). A failed completion's error becomes its status and this thread's last error.
pub(crate) fn to_c(
    c: Completion,
    take_data: impl FnOnce(&[u8]) -> Result<(), CError>,
) -> Result<CompletionC, CError> {
    let status = match c.status {
        Ok(()) => REVERB_OK,
        Err(e) => {
            let e = CError::from(*e);
            crate::status::note(&e);
            e.code
        }
    };
    let mut out = CompletionC { op: c.op.0, kind: 0, status, peer: 0, imm: 0, tag: 0, len: 0 };
    match c.kind {
        CompletionKind::Put => out.kind = REVERB_COMPLETION_PUT,
        CompletionKind::PutImm => out.kind = REVERB_COMPLETION_PUT_IMM,
        CompletionKind::Get => out.kind = REVERB_COMPLETION_GET,
        CompletionKind::Send { dest, tag, len } => {
            (out.kind, out.peer, out.tag, out.len) = (REVERB_COMPLETION_SEND, dest, tag, len as u64)
        }
        CompletionKind::Recv { source, tag, len, data } => {
            (out.kind, out.peer, out.tag, out.len) = (REVERB_COMPLETION_RECV, source, tag, len as u64);
            if let Some(data) = data {
                take_data(&data)?;
            }
        }
        CompletionKind::Imm { source, imm, len } => {
            (out.kind, out.peer, out.imm, out.len) = (REVERB_COMPLETION_IMM, source, imm, len as u64)
        }
    }
    Ok(out)
}
