//! A datatype's basic elements in type-map order (MPI_Get_elements): runs of one element size
//! and repeats of sequences, so a type of huge counts or many blocks stays small.

use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Elems {
    /// `count` basic elements of `size` bytes each (`size` > 0).
    Run { size: usize, count: u64 },
    /// `times` copies of a sequence (`times` > 1).
    Repeat(Arc<Elems>, u64),
    /// One sequence after another (none of them empty, none a `Seq`).
    Seq(Arc<[Elems]>),
}

impl Elems {
    /// No elements (MPI_LB, MPI_UB, types of zero-length blocks).
    pub fn empty() -> Elems {
        Elems::Seq(Arc::from(Vec::new()))
    }

    /// One basic element of `size` bytes.
    pub fn basic(size: usize) -> Elems {
        match size {
            0 => Elems::empty(),
            _ => Elems::Run { size, count: 1 },
        }
    }

    pub fn is_empty(&self) -> bool {
        matches!(self, Elems::Seq(parts) if parts.is_empty())
    }

    /// Basic elements in one copy.
    pub fn count(&self) -> u64 {
        match self {
            Elems::Run { count, .. } => *count,
            Elems::Repeat(inner, times) => inner.count().saturating_mul(*times),
            Elems::Seq(parts) => parts.iter().map(Elems::count).fold(0, u64::saturating_add),
        }
    }

    /// Bytes of data in one copy.
    pub fn bytes(&self) -> u64 {
        match self {
            Elems::Run { size, count } => (*size as u64).saturating_mul(*count),
            Elems::Repeat(inner, times) => inner.bytes().saturating_mul(*times),
            Elems::Seq(parts) => parts.iter().map(Elems::bytes).fold(0, u64::saturating_add),
        }
    }

    /// `n` copies one after another.
    pub fn repeat(&self, n: u64) -> Elems {
        match self {
            _ if n == 0 || self.is_empty() => Elems::empty(),
            _ if n == 1 => self.clone(),
            Elems::Run { size, count } => Elems::Run { size: *size, count: count.saturating_mul(n) },
            Elems::Repeat(inner, times) => Elems::Repeat(inner.clone(), times.saturating_mul(n)),
            Elems::Seq(_) => Elems::Repeat(Arc::new(self.clone()), n),
        }
    }

    /// The sequences one after another, adjacent runs of one size merged.
    pub fn concat(parts: impl IntoIterator<Item = Elems>) -> Elems {
        let mut out: Vec<Elems> = Vec::new();
        let mut push = |e: Elems| match (out.last_mut(), &e) {
            (Some(Elems::Run { size: a, count }), Elems::Run { size: b, count: more }) if a == b => {
                *count = count.saturating_add(*more);
            }
            _ => out.push(e),
        };
        for part in parts {
            match part {
                Elems::Seq(inner) => inner.iter().cloned().for_each(&mut push),
                other => push(other),
            }
        }
        match out.len() {
            1 => out.pop().unwrap_or_else(Elems::empty),
            _ => Elems::Seq(Arc::from(out)),
        }
    }

    /// The whole elements in the first `bytes` bytes of one copy (at most `self.bytes()`);
    /// `None` when they end inside an element.
    pub fn prefix(&self, bytes: u64) -> Option<u64> {
        match self {
            Elems::Run { size, .. } => {
                let size = *size as u64;
                bytes.is_multiple_of(size).then_some(bytes / size)
            }
            Elems::Repeat(inner, _) => {
                let per = inner.bytes();
                if per == 0 {
                    return Some(0);
                }
                let whole = (bytes / per).saturating_mul(inner.count());
                Some(whole.saturating_add(inner.prefix(bytes % per)?))
            }
            Elems::Seq(parts) => {
                let (mut left, mut n) = (bytes, 0u64);
                for part in parts.iter() {
                    if left == 0 {
                        break;
                    }
                    let b = part.bytes();
                    if left < b {
                        return Some(n.saturating_add(part.prefix(left)?));
                    }
                    (left, n) = (left - b, n.saturating_add(part.count()));
                }
                Some(n)
            }
        }
    }

    /// Bytes of the first `n` basic elements of one copy (`n` at most `self.count()`).
    fn prefix_bytes(&self, n: u64) -> u64 {
        match self {
            Elems::Run { size, .. } => (*size as u64).saturating_mul(n),
            Elems::Repeat(inner, _) => {
                let per = inner.count().max(1);
                let whole = (n / per).saturating_mul(inner.bytes());
                whole.saturating_add(inner.prefix_bytes(n % per))
            }
            Elems::Seq(parts) => {
                let (mut left, mut bytes) = (n, 0u64);
                for part in parts.iter() {
                    let c = part.count();
                    if left < c {
                        return bytes.saturating_add(part.prefix_bytes(left));
                    }
                    (left, bytes) = (left - c, bytes.saturating_add(part.bytes()));
                }
                bytes
            }
        }
    }

    /// The bytes of data `n` basic elements take, copy after copy (MPI_Status_set_elements).
    pub fn bytes_of(&self, n: u64) -> u64 {
        let per = self.count();
        if per == 0 {
            return 0;
        }
        (n / per).saturating_mul(self.bytes()).saturating_add(self.prefix_bytes(n % per))
    }

    /// The basic elements `bytes` bytes of data hold, copy after copy; `None` when they end
    /// inside an element.
    pub fn in_bytes(&self, bytes: u64) -> Option<u64> {
        let per = self.bytes();
        if per == 0 {
            return Some(0);
        }
        let whole = (bytes / per).saturating_mul(self.count());
        Some(whole.saturating_add(self.prefix(bytes % per)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_of_char_short_int_counts_partial_copies() {
        let s = Elems::concat([Elems::basic(1), Elems::basic(2), Elems::basic(4)]);
        assert_eq!((s.count(), s.bytes()), (3, 7));
        assert_eq!(s.in_bytes(7), Some(3));
        assert_eq!(s.in_bytes(10), Some(5));
        assert_eq!(s.in_bytes(2), None);
        assert_eq!((s.bytes_of(5), s.bytes_of(3), s.bytes_of(1)), (10, 7, 1));
        assert_eq!(s.repeat(1 << 40).count(), 3 << 40);
    }

    #[test]
    fn runs_merge_and_empties_vanish() {
        let e = Elems::concat([Elems::basic(4).repeat(3), Elems::empty(), Elems::basic(4)]);
        assert_eq!(e, Elems::Run { size: 4, count: 4 });
        assert!(Elems::basic(8).repeat(0).is_empty());
        assert_eq!(Elems::empty().in_bytes(0), Some(0));
    }
}
