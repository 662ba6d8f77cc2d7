//! Reductions. `MPI_Reduce` runs a binomial tree to its root. `MPI_Allreduce` runs what
//! `tuning::allreduce` picks; each algorithm combines in one fixed association, the same at
//! every rank (partial results of contiguous blocks of ranks, the lower block on the left,
//! except the ring's, which is for commutative operations only), so the answer is
//! bit-identical at every rank and on every run, a recovered rank's replay included.

use std::ffi::c_int;

use reverb_runtime::Contributions;

use super::bcast::{bcast, place, wrap};
use super::frame::Chunks;
use super::tuning::{self, Allreduce};
use super::Group;
use crate::abi::*;
use crate::datatype::Datatype;
use crate::errors::{MpiError, MpiResult};
use crate::frag;
use crate::op::{self, Op};
use crate::state::State;

/// What a reduction combines.
pub(crate) struct Reduction<'a> {
    pub(crate) op: Op,
    pub(crate) dt: &'a Datatype,
    pub(crate) dt_handle: c_int,
    pub(crate) count: usize,
}

impl Reduction<'_> {
    /// `higher = lower op higher` over `count` elements.
    fn combine(&self, count: usize, lower: &[u8], higher: &mut [u8]) -> MpiResult<()> {
        if lower.len() != higher.len() || lower.len() != self.dt.bytes_for(count) {
            let why = format!("reduction operands of {} and {} bytes", lower.len(), higher.len());
            return Err(MpiError::new(MPI_ERR_TRUNCATE, why));
        }
        if count == 0 {
            return Ok(());
        }
        op::apply(self.op, self.dt, self.dt_handle, count, lower, higher)
    }

    /// `acc = acc op theirs` (`theirs_lower`: `theirs op acc`) over all the elements.
    fn merge(&self, acc: &mut Vec<u8>, mut theirs: Vec<u8>, theirs_lower: bool) -> MpiResult<()> {
        if theirs_lower {
            return self.combine(self.count, &theirs, acc);
        }
        self.combine(self.count, acc, &mut theirs)?;
        *acc = theirs;
        Ok(())
    }
}

/// Binomial reduction to `root`: Some(result) there. Ranks are combined in rank order (lower
/// ranks' partial results on the left), so a non-commutative operation is reduced to rank 0
/// first and then handed to the root.
pub(crate) fn reduce(
    s: &mut State,
    g: &Group,
    root: usize,
    mine: Vec<u8>,
    r: &Reduction<'_>,
) -> MpiResult<Option<Vec<u8>>> {
    reduce_logged(s, g, root, mine, r, None)
}

/// Every rank's `mine` combined, at every rank.
pub(crate) fn allreduce(s: &mut State, g: &Group, mine: Vec<u8>, r: &Reduction<'_>) -> MpiResult<Vec<u8>> {
    let bytes = r.dt.bytes_for(r.count);
    match tuning::allreduce(r.op.commutative(), bytes, g.size(), s.rt.caml()) {
        Allreduce::Tree => tree(s, g, mine, r),
        Allreduce::Flat => flat(s, g, mine, r),
        Allreduce::RecursiveDoubling => recursive_doubling(s, g, mine, r),
        Allreduce::Rabenseifner => rabenseifner(s, g, mine, r),
        Allreduce::Ring => ring(s, g, mine, r),
    }
}

/// Reduction to rank 0 and a broadcast, each rank's contribution under collective-aware
/// logging until it holds the result.
fn tree(s: &mut State, g: &Group, mine: Vec<u8>, r: &Reduction<'_>) -> MpiResult<Vec<u8>> {
    let mut c = s.rt.begin_reduction(g.ranks[0]);
    let result = reduce_logged(s, g, 0, mine, r, Some(&mut c))?;
    let result = bcast(s, g, 0, result.unwrap_or_default())?;
    s.rt.end_reduction(c)?;
    Ok(result)
}

/// `reduce`, with the contributions under collective-aware logging when `c` is given (to
/// root 0, whose result every rank then holds: `MPI_Allreduce`).
fn reduce_logged(
    s: &mut State,
    g: &Group,
    root: usize,
    mine: Vec<u8>,
    r: &Reduction<'_>,
    mut c: Option<&mut Contributions>,
) -> MpiResult<Option<Vec<u8>>> {
    let n = g.size();
    let tree_root = if r.op.commutative() { root } else { 0 };
    let vr = (g.me + n - tree_root) % n;
    let mut acc = mine;
    let mut mask = 1;
    let mut holder = true;
    while mask < n {
        if vr & mask == 0 {
            let src = vr | mask;
            if src < n {
                let from = (src + tree_root) % n;
                let got = g.recv(s, from)?;
                let theirs = match c.as_deref_mut() {
                    Some(c) => c.take(g.ranks[from], &got)?.map(<[u8]>::to_vec),
                    None => Some(got),
                };
                // None: a tombstone, so this rank's partial result is one too.
                if let Some(theirs) = theirs {
                    r.merge(&mut acc, theirs, false)?;
                }
            }
        } else {
            let to = ((vr & !mask) + tree_root) % n;
            match c.as_deref_mut() {
                Some(c) => {
                    let (parent, tag, payload) = (g.ranks[to], g.tag(), c.payload(&acc));
                    s.rt.send_contribution(c, parent, |rt| frag::send(rt, parent, tag, &payload))?;
                }
                // Its parent is in its receive of it, or comes to it waiting for no one
                // else: lent where large (one copy), as a tree's sends in `bcast`.
                None => g.send_synchronous(s, to, &acc)?,
            }
            holder = false;
            break;
        }
        mask <<= 1;
    }
    if tree_root == root {
        return Ok(holder.then_some(acc));
    }
    if g.me == tree_root {
        g.send(s, root, &acc)?;
    }
    if g.me == root {
        return Ok(Some(g.recv(s, tree_root)?));
    }
    Ok(None)
}

/// Whether `MPI_Reduce` of `r` to `root` runs in the program's buffers (`reduce_in_place`):
/// a contiguous datatype, and a tree rooted at `root` (a commutative operation, or root 0).
pub(crate) fn reduce_runs_in_place(r: &Reduction<'_>, root: usize) -> bool {
    r.dt.is_contiguous() && (r.op.commutative() || root == 0)
}

/// This rank's part in `reduce_in_place`: the root's receive buffer, holding its
/// contribution already, or another rank's contribution.
pub(crate) enum ReduceAt<'a> {
    Root(&'a mut [u8]),
    Other(&'a [u8]),
}

/// `reduce` in the program's buffers where `reduce_runs_in_place`: the same binomial tree and
/// association, so the same value (NaN payloads aside, see `lands_either_way`). A leaf sends
/// its contribution as it lies; a rank with children receives them into the state's scratch
/// buffer and combines into its own (the root's receive buffer).
pub(crate) fn reduce_in_place(
    s: &mut State,
    g: &Group,
    root: usize,
    at: ReduceAt<'_>,
    r: &Reduction<'_>,
) -> MpiResult<()> {
    let n = g.size();
    let vr = (g.me + n - root) % n;
    // The lowest bit set in vr names the parent, the masks below it the children.
    let parent_mask = if vr == 0 { n.next_power_of_two() } else { 1 << vr.trailing_zeros() };
    let parent = (vr != 0).then(|| ((vr & !parent_mask) + root) % n);
    let leaf = parent_mask == 1 || (vr | 1) >= n;
    match (at, parent) {
        (ReduceAt::Other(mine), Some(to)) if leaf => g.send_synchronous(s, to, mine),
        (ReduceAt::Root(_), _) if leaf => Ok(()),
        (at, parent) => with_scratch(s, |s, scratch| {
            let len = match &at {
                ReduceAt::Root(acc) => acc.len(),
                ReduceAt::Other(mine) => mine.len(),
            };
            scratch.resize(2 * len, 0);
            let (incoming, own) = scratch.split_at_mut(len);
            let acc = match at {
                ReduceAt::Root(acc) => acc,
                ReduceAt::Other(mine) => {
                    own.copy_from_slice(mine);
                    own
                }
            };
            let mut mask = 1;
            while mask < parent_mask && (vr | mask) < n {
                g.recv_into(s, ((vr | mask) + root) % n, incoming)?;
                if lands_either_way(&r.op) {
                    r.combine(r.count, incoming, acc)?;
                } else {
                    r.combine(r.count, acc, incoming)?;
                    acc.copy_from_slice(incoming);
                }
                mask <<= 1;
            }
            match parent {
                Some(to) => g.send_synchronous(s, to, acc),
                None => Ok(()),
            }
        }),
    }
}

/// Whether a combination may land in either operand (`a op b` is `b op a`): the predefined
/// operations but the extremes (a floating-point maximum of +0 and -0, or of NaNs, follows
/// the operand order); a sum or product of two NaNs is a NaN either way, whichever payload.
fn lands_either_way(op: &Op) -> bool {
    matches!(op, Op::Builtin(h) if ![MPI_MAX, MPI_MIN, MPI_MAXLOC, MPI_MINLOC].contains(h))
}

/// A communicator of n ranks folded onto the largest power of two p <= n: of the first
/// 2 (n - p) ranks each even one hands its value to the odd one after it, which combines the
/// pair in order. The p ranks left keep rank order.
struct Fold {
    pof2: usize,
    rem: usize,
}

impl Fold {
    fn of(n: usize) -> Fold {
        let pof2 = if n.is_power_of_two() { n } else { n.next_power_of_two() / 2 };
        Fold { pof2, rem: n - pof2 }
    }

    /// This rank's place among the p (None: it handed its value on), `acc` its pair's.
    fn enter(
        &self,
        s: &mut State,
        g: &Group,
        acc: &mut Vec<u8>,
        r: &Reduction<'_>,
    ) -> MpiResult<Option<usize>> {
        if g.me >= 2 * self.rem {
            return Ok(Some(g.me - self.rem));
        }
        if g.me.is_multiple_of(2) {
            g.send(s, g.me + 1, acc)?;
            return Ok(None);
        }
        let theirs = g.recv(s, g.me - 1)?;
        r.merge(acc, theirs, true)?;
        Ok(Some(g.me / 2))
    }

    /// The rank at place `v`.
    fn real(&self, v: usize) -> usize {
        if v < self.rem {
            2 * v + 1
        } else {
            v + self.rem
        }
    }

    /// The result back to the ranks that handed their values on.
    fn leave(&self, s: &mut State, g: &Group, acc: Vec<u8>) -> MpiResult<Vec<u8>> {
        if g.me >= 2 * self.rem {
            return Ok(acc);
        }
        if g.me.is_multiple_of(2) {
            return g.recv(s, g.me + 1);
        }
        g.send(s, g.me - 1, &acc)?;
        Ok(acc)
    }
}

/// Round k, places 2^k apart swap their partial results: log2 p rounds of the whole vector.
fn recursive_doubling(s: &mut State, g: &Group, mine: Vec<u8>, r: &Reduction<'_>) -> MpiResult<Vec<u8>> {
    let fold = Fold::of(g.size());
    let mut acc = mine;
    if let Some(me) = fold.enter(s, g, &mut acc, r)? {
        let mut mask = 1;
        while mask < fold.pof2 {
            let partner = me ^ mask;
            let peer = fold.real(partner);
            let theirs = g.shift(s, peer, peer, &acc)?;
            r.merge(&mut acc, theirs, partner < me)?;
            mask <<= 1;
        }
    }
    fold.leave(s, g, acc)
}

/// Every rank sends its vector to every other, then combines all of them as
/// `recursive_doubling` does: the folded pairs first, then blocks of places, the lower on
/// the left. One round instead of log n, and the same bits.
fn flat(s: &mut State, g: &Group, mine: Vec<u8>, r: &Reduction<'_>) -> MpiResult<Vec<u8>> {
    let n = g.size();
    for k in 1..n {
        g.send(s, (g.me + k) % n, &mine)?;
    }
    let mut mine = Some(mine);
    let mut all = Vec::with_capacity(n);
    for from in 0..n {
        all.push(if from == g.me { mine.take().unwrap_or_default() } else { g.recv(s, from)? });
    }
    let fold = Fold::of(n);
    let mut places = Vec::with_capacity(fold.pof2);
    for v in 0..fold.pof2 {
        let real = fold.real(v);
        let mut acc = std::mem::take(&mut all[real]);
        if v < fold.rem {
            let lower = std::mem::take(&mut all[real - 1]);
            r.merge(&mut acc, lower, true)?;
        }
        places.push(acc);
    }
    let mut mask = 1;
    while mask < fold.pof2 {
        for v in (0..fold.pof2).step_by(2 * mask) {
            let higher = std::mem::take(&mut places[v + mask]);
            r.merge(&mut places[v], higher, false)?;
        }
        mask <<= 1;
    }
    Ok(places.swap_remove(0))
}

/// Rabenseifner: reduce-scatter by recursive halving (round k, places 2^k apart each keep
/// half of the chunks they share and combine the partner's partial of that half), then the
/// rounds backwards, all-gathering the reduced chunks. About 2 B moved per rank in all.
fn rabenseifner(s: &mut State, g: &Group, mine: Vec<u8>, r: &Reduction<'_>) -> MpiResult<Vec<u8>> {
    let fold = Fold::of(g.size());
    let mut acc = mine;
    if let Some(me) = fold.enter(s, g, &mut acc, r)? {
        let places = Places { me, count: fold.pof2, real: &|v| fold.real(v) };
        with_scratch(s, |s, scratch| rabenseifner_rounds(s, g, places, &mut acc, scratch, r))?;
    }
    fold.leave(s, g, acc)
}

/// Whether an all-reduce of `r` on `g` runs in place (`allreduce_in_place`): Rabenseifner
/// on a communicator of a power of two, a contiguous datatype.
pub(crate) fn allreduce_runs_in_place(s: &State, g: &Group, r: &Reduction<'_>) -> bool {
    let (n, len) = (g.size(), r.dt.bytes_for(r.count));
    r.dt.is_contiguous()
        && n.is_power_of_two()
        && tuning::allreduce(r.op.commutative(), len, n, s.rt.caml()) == Allreduce::Rabenseifner
}

/// `rabenseifner` in the program's buffer `acc` (this rank's contribution, where
/// `allreduce_runs_in_place`): the partner's halves land in the state's scratch buffer, the
/// all-gather's chunks straight in `acc`. The same rounds and operand order, so the same bits.
pub(crate) fn allreduce_in_place(
    s: &mut State,
    g: &Group,
    acc: &mut [u8],
    r: &Reduction<'_>,
) -> MpiResult<()> {
    let n = g.size();
    if !allreduce_runs_in_place(s, g, r) || acc.len() != r.dt.bytes_for(r.count) {
        return Err(MpiError::new(MPI_ERR_INTERN, "an all-reduce in place where it does not run"));
    }
    let places = Places { me: g.me, count: n, real: &|v| v };
    with_scratch(s, |s, scratch| rabenseifner_rounds(s, g, places, acc, scratch, r))
}

/// The places of an algorithm on a power of two (`count` of them): this rank's, and the
/// rank at each (a communicator's, or `Fold`'s when it is not a power of two).
#[derive(Clone, Copy)]
struct Places<'a> {
    me: usize,
    count: usize,
    real: &'a dyn Fn(usize) -> usize,
}

/// Runs `f` with the state's scratch buffer, kept for the next collective.
fn with_scratch<T>(s: &mut State, f: impl FnOnce(&mut State, &mut Vec<u8>) -> MpiResult<T>) -> MpiResult<T> {
    let mut scratch = std::mem::take(&mut s.coll_scratch);
    let done = f(s, &mut scratch);
    s.coll_scratch = scratch;
    done
}

/// Rabenseifner's rounds over `acc`, this rank's value (its fold pair's, off powers of two):
/// the partner's halves land in `scratch`, the all-gather's chunks straight in `acc`.
fn rabenseifner_rounds(
    s: &mut State,
    g: &Group,
    places: Places<'_>,
    acc: &mut [u8],
    scratch: &mut Vec<u8>,
    r: &Reduction<'_>,
) -> MpiResult<()> {
    let (me, n) = (places.me, places.count);
    let chunks = Chunks { count: r.count, elem: r.dt.size, chunks: n };
    // The first half's chunks are the longer ones: every round's half fits.
    scratch.resize(chunks.bytes(0..n / 2).len(), 0);
    let mut rounds = Vec::new();
    let (mut lo, mut hi, mut mask) = (0, n, 1);
    while mask < n {
        let partner = me ^ mask;
        let peer = (places.real)(partner);
        let mid = lo + (hi - lo) / 2;
        let (keep, give) = if me < partner { (lo..mid, mid..hi) } else { (mid..hi, lo..mid) };
        let at = chunks.bytes(keep.clone());
        let theirs = &mut scratch[..at.len()];
        g.shift_into(s, peer, peer, &acc[chunks.bytes(give.clone())], theirs)?;
        let count = chunks.elements(keep.clone()).len();
        if partner < me {
            r.combine(count, theirs, &mut acc[at])?;
        } else {
            r.combine(count, &acc[at.clone()], theirs)?;
            acc[at].copy_from_slice(theirs);
        }
        rounds.push((peer, keep.clone(), give));
        (lo, hi) = (keep.start, keep.end);
        mask <<= 1;
    }
    for (peer, keep, give) in rounds.into_iter().rev() {
        // Two neighbouring runs of chunks: this rank's reduced ones out, the partner's in.
        let (keep, give) = (chunks.bytes(keep), chunks.bytes(give));
        let (out, into) = if keep.start < give.start {
            let (low, high) = acc.split_at_mut(give.start);
            (&low[keep], &mut high[..give.len()])
        } else {
            let (low, high) = acc.split_at_mut(keep.start);
            (&high[..keep.len()], &mut low[give])
        };
        g.shift_into(s, peer, peer, out, into)?;
    }
    Ok(())
}

/// Ring: n - 1 rounds of reduce-scatter (chunk c starts at rank c and gathers each next
/// rank's value on its right), n - 1 rounds of all-gather; every rank moves 2 (n-1)/n of the
/// vector, with no folding. Commutative operations only (chunk c's order starts at rank c).
fn ring(s: &mut State, g: &Group, mine: Vec<u8>, r: &Reduction<'_>) -> MpiResult<Vec<u8>> {
    let n = g.size();
    let chunks = Chunks { count: r.count, elem: r.dt.size, chunks: n };
    let (right, left) = ((g.me + 1) % n, (g.me + n - 1) % n);
    let mut acc = mine;
    for step in 0..n - 1 {
        let (out, into) = (wrap(g.me, step, n), wrap(g.me, step + 1, n));
        let theirs = g.shift(s, right, left, &acc[chunks.bytes(out..out + 1)])?;
        let count = chunks.elements(into..into + 1).len();
        r.combine(count, &theirs, &mut acc[chunks.bytes(into..into + 1)])?;
    }
    // This rank now holds chunk me + 1 whole.
    let done = (g.me + 1) % n;
    for step in 0..n - 1 {
        let (out, into) = (wrap(done, step, n), wrap(done, step + 1, n));
        let got = g.shift(s, right, left, &acc[chunks.bytes(out..out + 1)])?;
        place(&mut acc, chunks.bytes(into..into + 1), &got)?;
    }
    Ok(acc)
}
