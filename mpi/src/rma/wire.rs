//! The bytes of the window protocol: an origin's requests, a target's replies, and the
//! synchronization notices (lock, grant, unlock, post, complete). All travel on the window's
//! context under one tag, so a pair's messages keep their order.

use std::ffi::c_int;

use crate::abi::MPI_ERR_INTERN;
use crate::errors::{MpiError, MpiResult};

/// What a request asks the target to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Put,
    Get,
    /// Accumulate: `op` over the target's elements.
    Acc,
    /// Get_accumulate / Fetch_and_op: the old elements back, then `op`.
    GetAcc,
    /// Compare_and_swap: data is (origin, compare); the old element back.
    Cas,
}

/// One operation for the target: byte runs of its window (from the window's base, or
/// absolute addresses for a dynamic window) and the origin's packed bytes.
#[derive(Debug)]
pub struct OpReq {
    pub kind: OpKind,
    /// Names the reply.
    pub id: u64,
    pub op: c_int,
    /// A predefined datatype whose elements `op` works on.
    pub elem: c_int,
    pub runs: Vec<(u64, u64)>,
    pub data: Vec<u8>,
}

#[derive(Debug)]
pub enum Msg {
    Op(OpReq),
    /// The target applied request `id`: its bytes for a get, or why it refused it.
    Reply {
        id: u64,
        error: Option<String>,
        data: Vec<u8>,
    },
    Lock {
        exclusive: bool,
    },
    Grant,
    Unlock,
    /// The target released the lock (under a logging protocol, where an unlock waits for it).
    Unlocked,
    Post,
    Complete,
}

const OPS: [OpKind; 5] = [OpKind::Put, OpKind::Get, OpKind::Acc, OpKind::GetAcc, OpKind::Cas];
const REPLY: u8 = 10;
const REFUSED: u8 = 11;
const LOCK_SHARED: u8 = 12;
const LOCK_EXCLUSIVE: u8 = 13;
const GRANT: u8 = 14;
const UNLOCK: u8 = 15;
const POST: u8 = 16;
const COMPLETE: u8 = 17;
const UNLOCKED: u8 = 18;

impl Msg {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Msg::Op(r) => {
                let kind = OPS.iter().position(|k| *k == r.kind).unwrap_or(0) as u8;
                let mut b = Vec::with_capacity(25 + 16 * r.runs.len() + r.data.len());
                b.push(kind);
                b.extend_from_slice(&r.id.to_le_bytes());
                b.extend_from_slice(&r.op.to_le_bytes());
                b.extend_from_slice(&r.elem.to_le_bytes());
                b.extend_from_slice(&(r.runs.len() as u64).to_le_bytes());
                for (off, len) in &r.runs {
                    b.extend_from_slice(&off.to_le_bytes());
                    b.extend_from_slice(&len.to_le_bytes());
                }
                b.extend_from_slice(&r.data);
                b
            }
            Msg::Reply { id, error, data } => {
                let (kind, body) = match error {
                    Some(why) => (REFUSED, why.as_bytes()),
                    None => (REPLY, data.as_slice()),
                };
                let mut b = Vec::with_capacity(9 + body.len());
                b.push(kind);
                b.extend_from_slice(&id.to_le_bytes());
                b.extend_from_slice(body);
                b
            }
            Msg::Lock { exclusive: true } => vec![LOCK_EXCLUSIVE],
            Msg::Lock { exclusive: false } => vec![LOCK_SHARED],
            Msg::Grant => vec![GRANT],
            Msg::Unlock => vec![UNLOCK],
            Msg::Unlocked => vec![UNLOCKED],
            Msg::Post => vec![POST],
            Msg::Complete => vec![COMPLETE],
        }
    }

    pub fn decode(b: &[u8]) -> MpiResult<Msg> {
        let mut r = Reader { b, at: 1 };
        let kind = *b.first().ok_or_else(|| bad("an empty message"))?;
        Ok(match kind {
            k if (k as usize) < OPS.len() => {
                let (id, op, elem, n) = (r.u64()?, r.i32()?, r.i32()?, r.u64()?);
                let n = usize::try_from(n).ok().filter(|&n| n <= b.len() / 16).ok_or_else(|| bad("runs"))?;
                let mut runs = Vec::with_capacity(n);
                for _ in 0..n {
                    runs.push((r.u64()?, r.u64()?));
                }
                let data = b[r.at..].to_vec();
                Msg::Op(OpReq { kind: OPS[k as usize], id, op, elem, runs, data })
            }
            REPLY | REFUSED => {
                let id = r.u64()?;
                let body = b[r.at..].to_vec();
                match kind {
                    REPLY => Msg::Reply { id, error: None, data: body },
                    _ => Msg::Reply {
                        id,
                        error: Some(String::from_utf8_lossy(&body).into()),
                        data: Vec::new(),
                    },
                }
            }
            LOCK_SHARED => Msg::Lock { exclusive: false },
            LOCK_EXCLUSIVE => Msg::Lock { exclusive: true },
            GRANT => Msg::Grant,
            UNLOCK => Msg::Unlock,
            UNLOCKED => Msg::Unlocked,
            POST => Msg::Post,
            COMPLETE => Msg::Complete,
            k => return Err(bad(&format!("kind {k}"))),
        })
    }
}

fn bad(what: &str) -> MpiError {
    MpiError::new(MPI_ERR_INTERN, format!("a malformed one-sided message: {what}"))
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> MpiResult<[u8; N]> {
        let bytes = self.b.get(self.at..self.at + N).and_then(|s| s.try_into().ok());
        self.at += N;
        bytes.ok_or_else(|| bad("truncated"))
    }

    fn u64(&mut self) -> MpiResult<u64> {
        self.take::<8>().map(u64::from_le_bytes)
    }

    fn i32(&mut self) -> MpiResult<i32> {
        self.take::<4>().map(i32::from_le_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_survive_the_wire() {
        let req = OpReq {
            kind: OpKind::GetAcc,
            id: 7,
            op: 3,
            elem: -5,
            runs: vec![(8, 16), (40, 4)],
            data: vec![1, 2, 3],
        };
        let Msg::Op(back) = Msg::decode(&Msg::Op(req).encode()).unwrap() else { panic!("not an op") };
        assert_eq!((back.kind, back.id, back.op, back.elem), (OpKind::GetAcc, 7, 3, -5));
        assert_eq!((back.runs, back.data), (vec![(8, 16), (40, 4)], vec![1, 2, 3]));
        let refused = Msg::Reply { id: 9, error: Some("out of range".into()), data: Vec::new() };
        let Msg::Reply { id, error, .. } = Msg::decode(&refused.encode()).unwrap() else {
            panic!("not a reply")
        };
        assert_eq!((id, error.as_deref()), (9, Some("out of range")));
        assert!(matches!(Msg::decode(&[LOCK_EXCLUSIVE]).unwrap(), Msg::Lock { exclusive: true }));
        assert!(matches!(Msg::decode(&Msg::Unlocked.encode()).unwrap(), Msg::Unlocked));
        assert!(Msg::decode(&[0, 1, 2]).is_err() && Msg::decode(&[]).is_err());
    }
}
