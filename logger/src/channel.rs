//! Per-peer FIFO channels on top of an unordered, possibly duplicating delivery: the sender
//! numbers each (sender → receiver) message with an ssn; the receiver delivers in ssn order,
//! drops duplicates and stale incarnations, and buffers early arrivals until the gap fills.

use std::collections::BTreeMap;

use reverb_transport::Rank;

use crate::determinant::Ssn;
use crate::error::{LogError, Result};

/// Sender side: the next ssn for each destination.
#[derive(Debug, Clone)]
pub struct SendSequencer {
    last_ssn: Vec<Ssn>,
}

impl SendSequencer {
    pub fn new(size: u32) -> Self {
        SendSequencer { last_ssn: vec![0; size as usize] }
    }

    /// The ssn of the next message to `dest` (the first is 1).
    pub fn next_ssn(&mut self, dest: Rank) -> Result<Ssn> {
        let slot = self
            .last_ssn
            .get_mut(dest as usize)
            .ok_or_else(|| LogError::InvalidArgument(format!("destination rank {dest} out of range")))?;
        *slot += 1;
        Ok(*slot)
    }

    pub fn last_ssn(&self, dest: Rank) -> Option<Ssn> {
        self.last_ssn.get(dest as usize).copied()
    }

    /// The per-destination counters, for a checkpoint.
    pub fn snapshot(&self) -> Vec<Ssn> {
        self.last_ssn.clone()
    }

    /// Resumes from checkpointed counters.
    pub fn resume(last_ssn: Vec<Ssn>) -> Self {
        SendSequencer { last_ssn }
    }
}

/// What happened to one arriving message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// It (and `released - 1` buffered successors) were handed out in order.
    Delivered { released: usize },
    /// It arrived early and waits for the gap before it.
    Buffered,
    /// It came from an older incarnation of the sender.
    DroppedStale,
    /// Its ssn was already delivered or is already buffered.
    DroppedDuplicate,
}

/// Receiver side of one channel.
#[derive(Debug)]
pub struct RecvChannel<T> {
    peer: Rank,
    /// The newest incarnation of `peer` seen; older ones are stale.
    incarnation: u32,
    /// Every ssn below this has been delivered.
    next_ssn: Ssn,
    early: BTreeMap<Ssn, T>,
    early_limit: usize,
    dropped_stale: u64,
    dropped_duplicate: u64,
}

impl<T> RecvChannel<T> {
    pub fn new(peer: Rank, early_limit: usize) -> Self {
        RecvChannel {
            peer,
            incarnation: 0,
            next_ssn: 1,
            early: BTreeMap::new(),
            early_limit,
            dropped_stale: 0,
            dropped_duplicate: 0,
        }
    }

    /// Handles one arrival; in-order messages are appended to `out` as `(ssn, msg)`.
    pub fn accept(&mut self, incarnation: u32, ssn: Ssn, msg: T, out: &mut Vec<(Ssn, T)>) -> Result<Arrival> {
        if ssn == 0 {
            return Err(LogError::malformed("channel message", format!("ssn 0 from peer {}", self.peer)));
        }
        if incarnation < self.incarnation {
            self.dropped_stale += 1;
            return Ok(Arrival::DroppedStale);
        }
        // The sender restarted and will re-send everything after its checkpoint, so early
        // messages of the dead incarnation are redundant; delivered ssns stay delivered.
        self.peer_restarted(incarnation);
        if ssn < self.next_ssn || self.early.contains_key(&ssn) {
            self.dropped_duplicate += 1;
            return Ok(Arrival::DroppedDuplicate);
        }
        if ssn > self.next_ssn {
            if self.early.len() >= self.early_limit {
                return Err(LogError::ReorderWindowFull { peer: self.peer, limit: self.early_limit });
            }
            self.early.insert(ssn, msg);
            return Ok(Arrival::Buffered);
        }
        out.push((ssn, msg));
        self.next_ssn += 1;
        let mut released = 1;
        while let Some(next) = self.take_early() {
            out.push((self.next_ssn, next));
            self.next_ssn += 1;
            released += 1;
        }
        Ok(Arrival::Delivered { released })
    }

    /// The early message that is next in order, if buffered (none buffered: one check).
    fn take_early(&mut self) -> Option<T> {
        match self.early.is_empty() {
            true => None,
            false => self.early.remove(&self.next_ssn),
        }
    }

    pub fn peer(&self) -> Rank {
        self.peer
    }

    pub fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// The highest ssn delivered in order (0 before the first).
    pub fn delivered_through(&self) -> Ssn {
        self.next_ssn - 1
    }

    pub fn buffered(&self) -> usize {
        self.early.len()
    }

    pub fn dropped_stale(&self) -> u64 {
        self.dropped_stale
    }

    pub fn dropped_duplicate(&self) -> u64 {
        self.dropped_duplicate
    }

    /// Counts every ssn through `ssn` as delivered (a replay took them from a stand-in): a
    /// late arrival of one is then a duplicate.
    pub fn skip_through(&mut self, ssn: Ssn) {
        if ssn >= self.next_ssn {
            self.next_ssn = ssn + 1;
            self.early.retain(|&s, _| s > ssn);
        }
    }

    /// `peer` restarted as `incarnation`: from now on what its older incarnations sent is
    /// stale (their piggybacked determinants void), and their early messages are dropped, as
    /// the new incarnation re-sends them.
    pub fn peer_restarted(&mut self, incarnation: u32) {
        if incarnation > self.incarnation {
            self.incarnation = incarnation;
            self.dropped_stale += self.early.len() as u64;
            self.early.clear();
        }
    }

    /// Resumes after a restart: `delivered_through` from the checkpoint.
    pub fn resume(peer: Rank, incarnation: u32, delivered_through: Ssn, early_limit: usize) -> Self {
        RecvChannel { incarnation, next_ssn: delivered_through + 1, ..RecvChannel::new(peer, early_limit) }
    }
}

/// The receive channels of one rank, one per peer.
#[derive(Debug)]
pub struct RecvChannels<T> {
    channels: Vec<RecvChannel<T>>,
}

impl<T> RecvChannels<T> {
    pub fn new(size: u32, early_limit: usize) -> Self {
        RecvChannels { channels: (0..size).map(|p| RecvChannel::new(p, early_limit)).collect() }
    }

    pub fn channel(&mut self, peer: Rank) -> Result<&mut RecvChannel<T>> {
        self.channels
            .get_mut(peer as usize)
            .ok_or_else(|| LogError::malformed("channel message", format!("sender rank {peer} out of range")))
    }

    pub fn accept(
        &mut self,
        peer: Rank,
        incarnation: u32,
        ssn: Ssn,
        msg: T,
        out: &mut Vec<(Ssn, T)>,
    ) -> Result<Arrival> {
        self.channel(peer)?.accept(incarnation, ssn, msg, out)
    }

    pub fn dropped_stale(&self) -> u64 {
        self.channels.iter().map(|c| c.dropped_stale).sum()
    }

    /// The highest ssn from `peer` released in order (0 before the first).
    pub fn delivered_through(&self, peer: Rank) -> Option<Ssn> {
        self.channels.get(peer as usize).map(RecvChannel::delivered_through)
    }

    pub fn dropped_duplicate(&self) -> u64 {
        self.channels.iter().map(|c| c.dropped_duplicate).sum()
    }

    /// `RecvChannel::peer_restarted` of `peer`'s channel.
    pub fn peer_restarted(&mut self, peer: Rank, incarnation: u32) -> Result<()> {
        self.channel(peer)?.peer_restarted(incarnation);
        Ok(())
    }

    /// `RecvChannel::skip_through` of `peer`'s channel.
    pub fn skip_through(&mut self, peer: Rank, ssn: Ssn) {
        if let Some(c) = self.channels.get_mut(peer as usize) {
            c.skip_through(ssn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sequencer_numbers_per_destination() {
        let mut s = SendSequencer::new(3);
        assert_eq!(s.next_ssn(1).ok(), Some(1));
        assert_eq!(s.next_ssn(1).ok(), Some(2));
        assert_eq!(s.next_ssn(2).ok(), Some(1));
        assert!(s.next_ssn(3).is_err());
        assert_eq!(SendSequencer::resume(s.snapshot()).next_ssn(1).ok(), Some(3));
    }

    /// A replay that took messages through 5 from a stand-in: a late arrival of one of them is
    /// a duplicate, and the next in order is released at once.
    #[test]
    fn skipped_ssns_count_as_delivered() {
        let mut ch = RecvChannel::new(7, 8);
        let mut out = Vec::new();
        ch.accept(0, 4, 40, &mut out).unwrap();
        ch.skip_through(5);
        assert_eq!(ch.delivered_through(), 5);
        assert_eq!(ch.buffered(), 0, "the early 4 is one of the skipped");
        assert_eq!(ch.accept(0, 3, 30, &mut out).unwrap(), Arrival::DroppedDuplicate);
        assert!(matches!(ch.accept(0, 6, 60, &mut out).unwrap(), Arrival::Delivered { released: 1 }));
        ch.skip_through(2);
        assert_eq!(ch.delivered_through(), 6, "never backwards");
    }

    proptest! {
        /// Any arrival order, with duplicates mixed in: delivery is ssn order, complete, once.
        #[test]
        fn random_arrivals_deliver_in_order(
            order in Just((1..=64u64).collect::<Vec<_>>()).prop_shuffle(),
            dups in prop::collection::vec((1..=64u64, 0usize..128), 0..32),
        ) {
            let mut arrivals = order;
            for (ssn, at) in dups {
                let at = at.min(arrivals.len());
                arrivals.insert(at, ssn);
            }
            let mut ch = RecvChannel::new(7, 64);
            let mut out = Vec::new();
            for ssn in &arrivals {
                ch.accept(0, *ssn, *ssn * 10, &mut out).unwrap();
            }
            let ssns: Vec<u64> = out.iter().map(|(s, _)| *s).collect();
            prop_assert_eq!(ssns, (1..=64).collect::<Vec<_>>());
            prop_assert!(out.iter().all(|(s, m)| *m == *s * 10));
            prop_assert_eq!(ch.buffered(), 0);
            prop_assert_eq!(ch.dropped_duplicate() as usize, arrivals.len() - 64);
        }

        /// Several peers interleaved: each peer's stream stays in its own ssn order.
        #[test]
        fn interleaved_peers_keep_per_peer_order(
            order in Just((0..3u32).flat_map(|p| (1..=20u64).map(move |s| (p, s))).collect::<Vec<_>>())
                .prop_shuffle(),
        ) {
            let mut chans = RecvChannels::new(3, 32);
            let mut per_peer = vec![Vec::new(); 3];
            for (peer, ssn) in order {
                let mut out = Vec::new();
                chans.accept(peer, 0, ssn, (), &mut out).unwrap();
                per_peer[peer as usize].extend(out.into_iter().map(|(s, ())| s));
            }
            for delivered in per_peer {
                prop_assert_eq!(delivered, (1..=20).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn stale_incarnations_are_dropped() {
        let mut ch = RecvChannel::new(0, 8);
        let mut out = Vec::new();
        assert_eq!(ch.accept(1, 1, 'a', &mut out).ok(), Some(Arrival::Delivered { released: 1 }));
        assert_eq!(ch.accept(1, 3, 'c', &mut out).ok(), Some(Arrival::Buffered));
        // The sender restarts (incarnation 2): the early message of incarnation 1 is discarded.
        assert_eq!(ch.accept(2, 1, 'a', &mut out).ok(), Some(Arrival::DroppedDuplicate));
        assert_eq!(ch.dropped_stale(), 1);
        assert_eq!(ch.buffered(), 0);
        // Late traffic from the dead incarnation is stale.
        assert_eq!(ch.accept(1, 2, 'x', &mut out).ok(), Some(Arrival::DroppedStale));
        assert_eq!(ch.accept(2, 2, 'b', &mut out).ok(), Some(Arrival::Delivered { released: 1 }));
        assert_eq!(ch.accept(2, 3, 'c', &mut out).ok(), Some(Arrival::Delivered { released: 1 }));
        assert_eq!(out.iter().map(|(_, m)| *m).collect::<String>(), "abc");
        assert_eq!(ch.dropped_stale(), 2);
    }

    /// A survivor told of a restart before the new incarnation's first message: what the old
    /// one sent and was still under way is stale from then on.
    #[test]
    fn a_restart_told_in_advance_makes_old_traffic_stale() {
        let mut ch = RecvChannel::new(0, 8);
        let mut out = Vec::new();
        assert_eq!(ch.accept(0, 1, 'a', &mut out).ok(), Some(Arrival::Delivered { released: 1 }));
        assert_eq!(ch.accept(0, 3, 'c', &mut out).ok(), Some(Arrival::Buffered));
        ch.peer_restarted(1);
        assert_eq!((ch.incarnation(), ch.buffered(), ch.dropped_stale()), (1, 0, 1));
        assert_eq!(ch.accept(0, 2, 'x', &mut out).ok(), Some(Arrival::DroppedStale));
        ch.peer_restarted(0);
        assert_eq!(ch.incarnation(), 1, "an older incarnation never goes back");
        assert_eq!(ch.accept(1, 2, 'b', &mut out).ok(), Some(Arrival::Delivered { released: 1 }));
        assert_eq!(out.iter().map(|(_, m)| *m).collect::<String>(), "ab");
    }

    #[test]
    fn early_window_is_bounded_and_ssn_zero_rejected() {
        let mut ch = RecvChannel::new(5, 2);
        let mut out = Vec::new();
        assert!(ch.accept(0, 0, (), &mut out).is_err());
        ch.accept(0, 3, (), &mut out).unwrap();
        ch.accept(0, 4, (), &mut out).unwrap();
        assert!(matches!(ch.accept(0, 5, (), &mut out), Err(LogError::ReorderWindowFull { peer: 5, .. })));
        let mut chans: RecvChannels<()> = RecvChannels::new(2, 2);
        assert!(chans.accept(2, 0, 1, (), &mut out).is_err());
    }
}
