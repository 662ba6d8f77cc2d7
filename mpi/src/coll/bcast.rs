//! Broadcasts: a binomial tree (small messages, and under collective-aware logging, whose
//! multicast key the tree's forwarders pass on), or the bytes scattered down that tree and
//! all-gathered round a ring (large messages).

use reverb_runtime::McastKey;

use super::frame::Chunks;
use super::tuning::{self, Bcast};
use super::Group;
use crate::abi::*;
use crate::errors::{MpiError, MpiResult};
use crate::frag;
use crate::state::State;

/// Broadcast of `len` bytes (alike at every rank), `data` at `root`; every rank returns the
/// root's bytes.
pub(crate) fn bcast_sized(
    s: &mut State,
    g: &Group,
    root: usize,
    data: Vec<u8>,
    len: usize,
) -> MpiResult<Vec<u8>> {
    match tuning::bcast(len, g.size(), s.rt.caml()) {
        Bcast::Binomial => bcast(s, g, root, data),
        Bcast::ScatterAllgather => scatter_allgather(s, g, root, data, len),
    }
}

/// Broadcast of the program's contiguous buffer `buf` (the root's bytes, the others' room
/// for them), alike in length at every rank, in place: sent from where it is and received
/// where it goes (one copy between two ranks on shared memory). False, touching nothing, when
/// the size calls for another algorithm or collective-aware logging is on (`bcast_sized`).
pub(crate) fn bcast_in_place(s: &mut State, g: &Group, root: usize, buf: &mut [u8]) -> MpiResult<bool> {
    if s.rt.caml() || tuning::bcast(buf.len(), g.size(), false) != Bcast::Binomial {
        return Ok(false);
    }
    let n = g.size();
    let (parent, children) = binomial((g.me + n - root) % n, n);
    if let Some(p) = parent {
        g.recv_into(s, (p + root) % n, buf)?;
    }
    for c in children {
        g.send_synchronous(s, (c + root) % n, buf)?;
    }
    Ok(true)
}

/// Relative rank `vr`'s links in the binomial tree of `n` rooted at 0: its parent (None at
/// the root), and its children, the largest subtree first.
fn binomial(vr: usize, n: usize) -> (Option<usize>, impl Iterator<Item = usize>) {
    let mut mask = 1;
    while mask < n && vr & mask == 0 {
        mask <<= 1;
    }
    let parent = (mask < n).then(|| vr - mask);
    let children = std::iter::successors(Some(mask >> 1), |m| Some(m >> 1))
        .take_while(|&m| m > 0)
        .filter(move |&m| vr + m < n)
        .map(move |m| vr + m);
    (parent, children)
}

/// Binomial broadcast of `data` from `root` (its length known at the root only). Under
/// collective-aware logging the bytes travel behind their multicast key, which forwarders
/// pass on: the root logs them once, every tree send logs a stub.
pub(crate) fn bcast(s: &mut State, g: &Group, root: usize, data: Vec<u8>) -> MpiResult<Vec<u8>> {
    if !s.rt.caml() {
        return bcast_tree(s, g, root, data, false);
    }
    let keyed = if g.me == root {
        let len = McastKey::WIRE_LEN + data.len();
        let pieces = frag::pieces(len, s.rt.config().log.max_message);
        let key =
            s.rt.multicast_key(pieces)?.ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "no multicast key"))?;
        let mut keyed = Vec::with_capacity(len);
        keyed.extend_from_slice(&key.to_bytes());
        keyed.extend_from_slice(&data);
        keyed
    } else {
        Vec::new()
    };
    let mut keyed = bcast_tree(s, g, root, keyed, true)?;
    if keyed.len() < McastKey::WIRE_LEN {
        return Err(MpiError::new(MPI_ERR_INTERN, "a broadcast without its multicast key"));
    }
    Ok(keyed.split_off(McastKey::WIRE_LEN))
}

/// The broadcast tree; `keyed`: `data` starts with its multicast key.
fn bcast_tree(s: &mut State, g: &Group, root: usize, mut data: Vec<u8>, keyed: bool) -> MpiResult<Vec<u8>> {
    let n = g.size();
    let (parent, children) = binomial((g.me + n - root) % n, n);
    if let Some(p) = parent {
        data = g.recv(s, (p + root) % n)?;
    }
    let key = if keyed {
        Some(McastKey::from_bytes(&data).map_err(|e| MpiError::new(MPI_ERR_INTERN, e.to_string()))?)
    } else {
        None
    };
    for c in children {
        let to = (c + root) % n;
        match key {
            Some(key) => frag::send_multicast(&mut s.rt, g.ranks[to], g.tag(), &data, key)?,
            None => g.send_synchronous(s, to, &data)?,
        }
    }
    Ok(data)
}

/// Van de Geijn's broadcast: chunk i of n goes down the binomial tree to relative rank i
/// (each rank receives its subtree's chunks), then the chunks go round a ring.
fn scatter_allgather(s: &mut State, g: &Group, root: usize, data: Vec<u8>, len: usize) -> MpiResult<Vec<u8>> {
    let n = g.size();
    let vr = (g.me + n - root) % n;
    let real = |v: usize| (v + root) % n;
    let chunks = Chunks { count: len, elem: 1, chunks: n };
    let mut buf = if g.me == root { data } else { vec![0u8; len] };
    if buf.len() != len {
        return Err(MpiError::new(
            MPI_ERR_TRUNCATE,
            format!("a broadcast of {} bytes, {len} expected", buf.len()),
        ));
    }
    let mut mask = 1;
    while mask < n {
        if vr & mask != 0 {
            let mine = chunks.bytes(vr..(vr + mask).min(n));
            let got = g.recv(s, real(vr - mask))?;
            place(&mut buf, mine, &got)?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if vr + mask < n {
            let theirs = chunks.bytes(vr + mask..(vr + 2 * mask).min(n));
            g.send(s, real(vr + mask), &buf[theirs])?;
        }
        mask >>= 1;
    }
    let (right, left) = (real((vr + 1) % n), real((vr + n - 1) % n));
    for step in 0..n - 1 {
        let out = chunks.bytes(wrap(vr, step, n)..wrap(vr, step, n) + 1);
        let into = chunks.bytes(wrap(vr, step + 1, n)..wrap(vr, step + 1, n) + 1);
        let got = g.shift(s, right, left, &buf[out])?;
        place(&mut buf, into, &got)?;
    }
    Ok(buf)
}

/// `(v - back) mod n`.
pub(crate) fn wrap(v: usize, back: usize, n: usize) -> usize {
    (v + n - back % n) % n
}

/// `got` into `buf[at]`, which it must fill exactly.
pub(crate) fn place(buf: &mut [u8], at: std::ops::Range<usize>, got: &[u8]) -> MpiResult<()> {
    if got.len() != at.len() {
        let why = format!("a collective piece of {} bytes where {} were expected", got.len(), at.len());
        return Err(MpiError::new(MPI_ERR_TRUNCATE, why));
    }
    buf[at].copy_from_slice(got);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::binomial;

    #[test]
    fn the_binomial_tree_links_every_rank_once() {
        for n in 1..20 {
            let mut parent_of = vec![None; n];
            for vr in 0..n {
                let (parent, children) = binomial(vr, n);
                assert_eq!(parent.is_none(), vr == 0, "only the root has no parent (n {n}, vr {vr})");
                let children: Vec<usize> = children.collect();
                assert!(children.windows(2).all(|w| w[0] > w[1]), "largest subtree first: {children:?}");
                for c in children {
                    assert!(parent_of[c].replace(vr).is_none(), "rank {c} has two parents (n {n})");
                }
                if let Some(p) = parent {
                    assert!(p < vr, "a parent comes before its child");
                }
            }
            for (vr, p) in parent_of.iter().enumerate() {
                assert_eq!(p.is_some(), vr != 0, "n {n}: rank {vr} reached from {p:?}");
                let (parent, _) = binomial(vr, n);
                assert_eq!(*p, parent, "n {n}: rank {vr}'s parent agrees with its children's lists");
            }
        }
    }
}
