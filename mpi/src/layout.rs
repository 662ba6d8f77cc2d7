//! Where a datatype's data bytes lie: (offset, length) runs, kept as a flat list while they
//! are few, and as a tree of repeats and sequences (MPICH's dataloops) when they are many, so
//! a type of 135 M runs stays a few nodes; packing walks the tree, materializing nothing.

use std::sync::Arc;

use smallvec::{smallvec, SmallVec};

/// A flat layout's runs: inline for the predefined types (one run, two for value-index
/// pairs), so looking one up per call allocates nothing.
pub type Runs = SmallVec<[(isize, usize); 2]>;

/// Layouts of at most this many runs are kept flat: what small types had always been (and
/// at 16 bytes a run, at most 1 MiB each).
const FLAT_MAX: usize = 1 << 16;

/// Whether a walk goes on (`true`) or stops where it is (`false`).
pub type Go = bool;

#[derive(Debug, Clone)]
pub enum Layout {
    /// Runs in type-map order, neighbours merged.
    Flat(Runs),
    /// `count` copies of `inner`, `stride` bytes apart (`count` > 1).
    Repeat { inner: Arc<Layout>, count: usize, stride: isize },
    /// Parts one after another, each moved by its displacement.
    Seq(Arc<[(isize, Layout)]>),
}

/// Appends `(at, len)` to `out`, merged into the last run where it goes on from it.
fn push_merged(out: &mut Runs, at: isize, len: usize) {
    match out.last_mut() {
        Some(last) if last.0 + last.1 as isize == at => last.1 += len,
        _ => out.push((at, len)),
    }
}

impl Layout {
    pub fn one_run(len: usize) -> Layout {
        Layout::Flat(smallvec![(0, len)])
    }

    pub fn empty() -> Layout {
        Layout::Flat(Runs::new())
    }

    /// Runs it holds at most (before neighbours merge), saturating.
    pub fn runs(&self) -> usize {
        match self {
            Layout::Flat(runs) => runs.len(),
            Layout::Repeat { inner, count, .. } => inner.runs().saturating_mul(*count),
            Layout::Seq(parts) => parts.iter().map(|p| p.1.runs()).fold(0, usize::saturating_add),
        }
    }

    /// Bytes of data in it.
    pub fn bytes(&self) -> usize {
        match self {
            Layout::Flat(runs) => runs.iter().map(|r| r.1).sum(),
            Layout::Repeat { inner, count, .. } => inner.bytes().saturating_mul(*count),
            Layout::Seq(parts) => parts.iter().map(|p| p.1.bytes()).fold(0, usize::saturating_add),
        }
    }

    /// Its runs, when it is a flat list.
    pub fn flat(&self) -> Option<&[(isize, usize)]> {
        match self {
            Layout::Flat(runs) => Some(runs),
            _ => None,
        }
    }

    /// (offset, length, count, stride) of a repeat of one run: a plain vector.
    pub fn vector(&self) -> Option<(isize, usize, usize, isize)> {
        match self {
            Layout::Repeat { inner, count, stride } => match inner.flat() {
                Some(&[(off, len)]) => Some((off, len, *count, *stride)),
                _ => None,
            },
            _ => None,
        }
    }

    /// `count` copies, `stride` bytes apart: flat while small, else a repeat.
    pub fn repeat(&self, count: usize, stride: isize) -> Layout {
        match self.flat() {
            _ if count == 0 => return Layout::empty(),
            _ if count == 1 => return self.clone(),
            // One run a stride long: the copies make one run, however many (huge counts).
            Some(&[(off, len)]) if len as isize == stride => {
                return Layout::Flat(smallvec![(off, len.saturating_mul(count))])
            }
            _ => {}
        }
        if self.runs().saturating_mul(count) <= FLAT_MAX {
            return Layout::Flat(self.materialize(count, stride));
        }
        Layout::Repeat { inner: Arc::new(self.clone()), count, stride }
    }

    /// The parts one after another, each moved by its displacement: flat while small.
    pub fn seq(parts: Vec<(isize, Layout)>) -> Layout {
        let runs = parts.iter().map(|p| p.1.runs()).fold(0, usize::saturating_add);
        if runs <= FLAT_MAX {
            let mut out = Runs::with_capacity(runs);
            for (d, part) in &parts {
                part.walk(*d, &mut |at, len| {
                    push_merged(&mut out, at, len);
                    true
                });
            }
            return Layout::Flat(out);
        }
        Layout::Seq(Arc::from(parts))
    }

    /// The runs of `count` copies `stride` bytes apart, neighbours merged, as a list.
    pub fn materialize(&self, count: usize, stride: isize) -> Runs {
        let mut out = Runs::with_capacity(self.runs().saturating_mul(count).min(FLAT_MAX));
        self.walk_copies(count, stride, &mut |at, len| {
            out.push((at, len));
            true
        });
        out
    }

    /// Calls `f` on each run from `base`, in order, until it says stop; says whether it went
    /// through them all.
    pub fn walk(&self, base: isize, f: &mut impl FnMut(isize, usize) -> Go) -> Go {
        match self {
            Layout::Flat(runs) => runs.iter().all(|&(off, len)| f(base + off, len)),
            Layout::Repeat { inner, count, stride } => match inner.flat() {
                // The common case of a huge vector: a plain loop.
                Some(&[(off, len)]) => (0..*count as isize).all(|i| f(base + i * stride + off, len)),
                _ => (0..*count as isize).all(|i| inner.walk(base + i * stride, f)),
            },
            Layout::Seq(parts) => parts.iter().all(|(d, part)| part.walk(base + d, f)),
        }
    }

    /// `walk` over `count` copies `stride` bytes apart, neighbouring runs given to `f` as one.
    pub fn walk_copies(&self, count: usize, stride: isize, f: &mut impl FnMut(isize, usize) -> Go) -> Go {
        let mut pending: Option<(isize, usize)> = None;
        let mut merged = |at: isize, len: usize| match pending {
            Some((o, l)) if o + l as isize == at => {
                pending = Some((o, l + len));
                true
            }
            Some((o, l)) => {
                pending = Some((at, len));
                f(o, l)
            }
            None => {
                pending = Some((at, len));
                true
            }
        };
        let all = (0..count as isize).all(|i| self.walk(i * stride, &mut merged));
        match pending {
            Some((o, l)) if all => f(o, l),
            _ => all,
        }
    }

    /// The least offset and the greatest end of its runs (None without runs).
    pub fn span(&self) -> Option<(isize, isize)> {
        match self {
            Layout::Flat(runs) => {
                let lo = runs.iter().map(|r| r.0).min()?;
                let hi = runs.iter().map(|r| r.0 + r.1 as isize).max()?;
                Some((lo, hi))
            }
            Layout::Repeat { inner, count, stride } => {
                let (lo, hi) = inner.span()?;
                let last = (*count as isize - 1) * stride;
                Some((lo + last.min(0), hi + last.max(0)))
            }
            Layout::Seq(parts) => parts
                .iter()
                .filter_map(|(d, p)| p.span().map(|(lo, hi)| (lo + d, hi + d)))
                .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1))),
        }
    }

    /// `span` of `count` copies `stride` bytes apart.
    pub fn span_of(&self, count: usize, stride: isize) -> Option<(isize, isize)> {
        let (lo, hi) = self.span().filter(|_| count > 0)?;
        let last = (count as isize - 1) * stride;
        Some((lo + last.min(0), hi + last.max(0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs_of(l: &Layout, count: usize, stride: isize) -> Vec<(isize, usize)> {
        l.materialize(count, stride).to_vec()
    }

    #[test]
    fn huge_vector_is_a_repeat_and_walks_like_its_list() {
        let v = Layout::one_run(8).repeat(135_000_000, 16);
        assert!(matches!(v, Layout::Repeat { count: 135_000_000, .. }));
        assert_eq!((v.bytes(), v.span()), (1_080_000_000, Some((0, 16 * 134_999_999 + 8))));
        let small = Layout::one_run(8).repeat(5, 16);
        assert_eq!(small.flat(), Some(&[(0, 8), (16, 8), (32, 8), (48, 8), (64, 8)][..]));
        let mut n = 0usize;
        assert!(!v.walk(0, &mut |at, len| {
            assert_eq!((at, len), (n as isize * 16, 8));
            n += 1;
            n < 1000
        }));
        assert_eq!(n, 1000);
    }

    #[test]
    fn neighbours_merge_across_parts_and_copies() {
        let s = Layout::seq(vec![(0, Layout::one_run(6)), (6, Layout::one_run(2))]);
        assert_eq!(s.flat(), Some(&[(0, 8)][..]));
        let f = FLAT_MAX as isize;
        let big = Layout::one_run(4).repeat(FLAT_MAX + 1, 8);
        let tree = Layout::seq(vec![(0, big), (8 * f + 4, Layout::one_run(4))]);
        assert!(matches!(tree, Layout::Seq(_)));
        let runs = runs_of(&tree, 2, 8 * f + 8);
        assert_eq!(runs.len(), 2 * (FLAT_MAX + 1) - 1);
        assert_eq!(runs[FLAT_MAX - 1..FLAT_MAX + 1], [(8 * f - 8, 4), (8 * f, 12)]);
        assert_eq!(tree.span(), Some((0, 8 * f + 8)));
    }
}
