//! Completion routing: every operation names its [`Owner`] (as libfabric's `void *context` or
//! a UCX request callback does), and the provider puts its completion in that owner's queue.
//! Components sharing one provider (the application, the logger endpoint, a log-ring writer,
//! a logger core's heartbeats) each drain their own queue and never scan another's.
//!
//! The owner travels in the high bits of the [`OpId`], so routing a completion is an index
//! into a vector, not a lookup.

use std::collections::VecDeque;

use crate::api::{Completion, OpId};
use crate::error::{Result, TransportError};

/// Who posted an operation: its completion lands in this owner's queue. Owners are opened
/// per provider ([`crate::Provider::open_owner`]); [`Owner::APP`] always exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner(u16);

impl Owner {
    /// The default owner: operations posted without naming one (`put`, `send`, ...), and the
    /// queue [`crate::Provider::completions`] returns.
    pub const APP: Owner = Owner(0);

    /// The owner's number (0 for [`Owner::APP`]).
    pub fn id(self) -> u16 {
        self.0
    }
}

/// Bits of an [`OpId`] below the owner: the per-provider sequence number.
const SEQ_BITS: u32 = 48;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

impl OpId {
    /// The id of operation number `seq` (below 2^48) posted for `owner`.
    #[inline]
    pub fn new(owner: Owner, seq: u64) -> OpId {
        OpId((u64::from(owner.0) << SEQ_BITS) | (seq & SEQ_MASK))
    }

    /// The owner whose queue this operation's completion goes to.
    #[inline]
    pub fn owner(self) -> Owner {
        Owner((self.0 >> SEQ_BITS) as u16)
    }
}

/// A provider's completion queues, one per owner, and its operation numbering. Providers
/// number operations with [`CompletionQueues::next_op`] and [`CompletionQueues::push`] every
/// completion; the owner's queue is found from the id.
#[derive(Debug)]
pub struct CompletionQueues {
    /// [`Owner::APP`]'s queue, a field of its own: applications pay no lookup.
    app: VecDeque<Completion>,
    /// Owner `n` (from 1) at index `n - 1`; `None` once closed (its completions are dropped).
    others: Vec<Option<VecDeque<Completion>>>,
    /// Where target-side events ([`OpId::REMOTE`]) go.
    remote: Owner,
    next_seq: u64,
    /// Handed out for an owner that is closed or was never opened: always empty.
    spare: VecDeque<Completion>,
}

impl Default for CompletionQueues {
    fn default() -> Self {
        Self::new()
    }
}

impl CompletionQueues {
    /// Just the [`Owner::APP`] queue, which also takes remote events.
    pub fn new() -> Self {
        CompletionQueues {
            app: VecDeque::new(),
            others: Vec::new(),
            remote: Owner::APP,
            next_seq: 1,
            spare: VecDeque::new(),
        }
    }

    /// Queues that number operations from `first` on: providers sharing one job-wide id
    /// space (the `auto` provider's sub-providers) each take a disjoint range.
    pub fn numbered_from(first: u64) -> Self {
        CompletionQueues { next_seq: first.max(1), ..Self::new() }
    }

    /// A fresh owner with an empty queue. Numbers are not reused (an operation of a closed
    /// owner still in flight must not land in a new one's queue): `Config` after 65535 opens.
    pub fn open(&mut self) -> Result<Owner> {
        let id = u16::try_from(self.others.len() + 1)
            .map_err(|_| TransportError::Config("all 65535 completion owners used".into()))?;
        self.others.push(Some(VecDeque::new()));
        Ok(Owner(id))
    }

    /// Drops `owner`'s queued completions and every later one (its operations still in flight
    /// complete unseen). Remote events routed to it go back to [`Owner::APP`]. `APP` stays open.
    pub fn close(&mut self, owner: Owner) {
        if let Some(q) = self.other(owner) {
            *q = None;
        }
        if self.remote == owner {
            self.remote = Owner::APP;
        }
    }

    /// The slot of an owner other than `APP`.
    #[inline]
    fn other(&mut self, owner: Owner) -> Option<&mut Option<VecDeque<Completion>>> {
        usize::from(owner.0).checked_sub(1).and_then(|i| self.others.get_mut(i))
    }

    /// Sends target-side events ([`OpId::REMOTE`]: a peer's `put_imm`) to `owner`'s queue.
    pub fn route_remote(&mut self, owner: Owner) {
        self.remote = owner;
    }

    /// The id of the next operation `owner` posts. Ids are unique per provider, never
    /// [`OpId::REMOTE`].
    #[inline]
    pub fn next_op(&mut self, owner: Owner) -> OpId {
        let id = OpId::new(owner, self.next_seq);
        self.next_seq += 1;
        id
    }

    /// Queues `c` for its owner (the remote route for [`OpId::REMOTE`]); dropped if that owner
    /// is closed.
    // Always inlined: a completion is ~100 bytes, built in place rather than copied in.
    #[inline(always)]
    pub fn push(&mut self, c: Completion) {
        // `REMOTE` has owner bits 0 too: it takes this path unless it is routed elsewhere.
        if c.op.owner() == Owner::APP && (c.op != OpId::REMOTE || self.remote == Owner::APP) {
            self.app.push_back(c);
        } else {
            self.push_routed(c);
        }
    }

    /// `push` for an owner other than `APP`, or a remote event routed away from it.
    #[inline]
    fn push_routed(&mut self, c: Completion) {
        let owner = if c.op == OpId::REMOTE { self.remote } else { c.op.owner() };
        match owner {
            Owner::APP => self.app.push_back(c),
            _ => {
                if let Some(Some(q)) = self.other(owner) {
                    q.push_back(c);
                }
            }
        }
    }

    /// [`CompletionQueues::push`] of each.
    #[inline]
    pub fn extend(&mut self, completions: impl IntoIterator<Item = Completion>) {
        for c in completions {
            self.push(c);
        }
    }

    /// `owner`'s queue; callers take entries out in any order. Empty (and dropped on the next
    /// call) for a closed or unknown owner.
    #[inline]
    pub fn of(&mut self, owner: Owner) -> &mut VecDeque<Completion> {
        if owner == Owner::APP {
            return &mut self.app;
        }
        match usize::from(owner.0).checked_sub(1).and_then(|i| self.others.get_mut(i)) {
            Some(Some(q)) => q,
            _ => {
                self.spare.clear();
                &mut self.spare
            }
        }
    }

    /// True when any owner has completions queued.
    pub fn any_queued(&self) -> bool {
        !self.app.is_empty() || self.others.iter().flatten().any(|q| !q.is_empty())
    }

    /// Moves every queued completion into the same owner's queue of `into` (already routed:
    /// remote events stay where this side's route put them); dropped where `into` closed it.
    #[inline]
    pub fn move_into(&mut self, into: &mut CompletionQueues) {
        if !self.app.is_empty() {
            into.app.append(&mut self.app);
        }
        for (i, q) in self.others.iter_mut().enumerate() {
            let Some(q) = q.as_mut().filter(|q| !q.is_empty()) else { continue };
            match into.others.get_mut(i) {
                Some(Some(dest)) => dest.append(q),
                _ => q.clear(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::CompletionKind;

    #[test]
    fn routes_by_owner_and_drops_a_closed_owners() {
        let mut cq = CompletionQueues::new();
        let (a, b) = (cq.open().unwrap(), cq.open().unwrap());
        let (app_op, a_op, b_op) = (cq.next_op(Owner::APP), cq.next_op(a), cq.next_op(b));
        assert_eq!((app_op.owner(), a_op.owner(), b_op.owner()), (Owner::APP, a, b));
        assert!([app_op, a_op, b_op].iter().all(|&op| op != OpId::REMOTE));
        for op in [b_op, a_op, app_op] {
            cq.push(Completion::ok(op, CompletionKind::Put));
        }
        assert_eq!(cq.of(a).iter().map(|c| c.op).collect::<Vec<_>>(), [a_op]);
        assert_eq!(cq.of(Owner::APP).len(), 1);
        cq.close(b);
        assert!(cq.of(b).is_empty());
        cq.push(Completion::ok(b_op, CompletionKind::Put));
        assert!(cq.of(b).is_empty());
        assert_eq!(cq.of(a).len(), 1, "closing b left a alone");
    }

    #[test]
    fn remote_events_follow_the_route() {
        let mut cq = CompletionQueues::new();
        let a = cq.open().unwrap();
        let imm = || Completion::ok(OpId::REMOTE, CompletionKind::Imm { source: 1, imm: 7, len: 8 });
        cq.push(imm());
        cq.route_remote(a);
        cq.push(imm());
        assert_eq!((cq.of(Owner::APP).len(), cq.of(a).len()), (1, 1));
        cq.close(a);
        cq.push(imm());
        assert_eq!(cq.of(Owner::APP).len(), 2, "a closed route falls back to APP");
    }
}
