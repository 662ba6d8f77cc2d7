//! Partial redundancy's messaging rules, as a state machine the runtime drives (paper:
//! "Combining Partial Redundancy and Checkpointing for HPC", §2, RedMPI's all-to-all mode):
//! every copy of a sending sphere sends to every live copy of the receiving sphere, and copies
//! are deterministic, so each copy of a sender sends the same messages in the same order per
//! tag. Unlike RedMPI, a receiver never waits for every copy: the first copy of a message to
//! arrive delivers it and the others' copies are dropped as duplicates, so a copy's death needs
//! no action beyond forgetting it.
//!
//! The counts that make this work, per tag (messages of one source and tag arrive in order):
//! - `delivered[(virtual source, tag)]`: messages handed to the application;
//! - `got[(physical copy, tag)]`: messages taken from that copy, delivered or dropped.
//!
//! The `got`-th message of a copy is new exactly when `got == delivered` (that copy runs
//! ahead of its sphere-mates), and a duplicate when `got < delivered`. A named receive takes
//! from the sphere's chosen copy (its lowest live one); the other copies' duplicates are owed
//! (`delivered - got`) and drained whenever they are there. A wildcard receive is decided by
//! the receiving sphere's leader (its lowest live copy), which tells the others the virtual
//! source it matched: copies must agree on the order in which their wildcard receives match.

use std::collections::HashMap;

use reverb_transport::codec::Reader;
use reverb_transport::Tag;

use crate::replicas::ReplicaMap;

/// What a message taken from a copy is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The first copy of this message to arrive: deliver it.
    New,
    /// A later copy of a message delivered already: drop it.
    Duplicate,
}

/// What a copy's death means for the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Another copy of its sphere lives on: nothing to recover.
    Masked,
    /// It was the sphere's last copy: virtual rank `.0` needs the checkpoint/logging recovery.
    SphereLost(u32),
}

/// One physical rank's view of the spheres: who is alive, and the counts above.
#[derive(Debug, Clone)]
pub struct Spheres {
    map: ReplicaMap,
    me: u32,
    dead: Vec<bool>,
    delivered: HashMap<(u32, Tag), u64>,
    got: HashMap<(u32, Tag), u64>,
    /// Wildcard receives this copy has matched (led or followed), and the last one's
    /// decision (index, virtual source, tag): a mate that takes the lead tells it again.
    pub(crate) wildcards: u64,
    pub(crate) last_decision: Option<(u64, u32, Tag)>,
    /// Whether this copy has led its sphere's wildcard receives since it became the leader.
    pub(crate) leading: bool,
}

impl Spheres {
    /// Physical rank `me`'s view of `map`, every copy alive.
    pub fn new(map: ReplicaMap, me: u32) -> Spheres {
        let dead = vec![false; map.physical_ranks() as usize];
        Spheres {
            map,
            me,
            dead,
            delivered: HashMap::new(),
            got: HashMap::new(),
            wildcards: 0,
            last_decision: None,
            leading: false,
        }
    }

    /// The virtual rank this process runs (what the application sees as its rank).
    pub fn virtual_rank(&self) -> u32 {
        self.map.of_physical(self.me).map_or(0, |(v, _)| v)
    }

    /// The virtual rank physical rank `p` is a copy of.
    pub fn virtual_of(&self, p: u32) -> u32 {
        self.map.of_physical(p).map_or(p, |(v, _)| v)
    }

    /// The application's job size.
    pub fn virtual_size(&self) -> u32 {
        self.map.virtual_ranks()
    }

    fn alive(&self, p: u32) -> bool {
        !self.dead.get(p as usize).copied().unwrap_or(true)
    }

    /// The live copies of virtual rank `v`: where a message to `v` goes.
    pub fn destinations(&self, v: u32) -> impl Iterator<Item = u32> + '_ {
        self.map.sphere(v).iter().copied().filter(|&p| self.alive(p))
    }

    /// Every copy of virtual rank `v`, live or not.
    pub fn copies(&self, v: u32) -> &[u32] {
        self.map.sphere(v)
    }

    /// The copy a named receive from virtual rank `v` takes from: its lowest live copy.
    pub fn source_for(&self, v: u32) -> Option<u32> {
        self.destinations(v).next()
    }

    /// Who decides this process's sphere's wildcard receives: its lowest live copy.
    pub fn leader(&self) -> Option<u32> {
        self.source_for(self.virtual_rank())
    }

    /// Whether this process is its sphere's leader.
    pub fn is_leader(&self) -> bool {
        self.leader() == Some(self.me)
    }

    /// The live copies of this process's sphere other than itself: who follows its decisions.
    pub fn mates(&self) -> impl Iterator<Item = u32> + '_ {
        self.destinations(self.virtual_rank()).filter(move |&p| p != self.me)
    }

    /// Records that copy `p` died: masked (forgotten from now on) while another copy of its
    /// sphere lives; its sphere's last copy stays counted alive, for the recovery to restart.
    pub fn mark_dead(&mut self, p: u32) -> Loss {
        let v = self.map.of_physical(p).map_or(p, |(v, _)| v);
        if self.destinations(v).any(|q| q != p) {
            if let Some(d) = self.dead.get_mut(p as usize) {
                *d = true;
            }
            Loss::Masked
        } else {
            Loss::SphereLost(v)
        }
    }

    /// Whether another copy of `p`'s sphere lives: its death could be masked.
    pub fn maskable(&self, p: u32) -> bool {
        let v = self.map.of_physical(p).map_or(p, |(v, _)| v);
        self.destinations(v).any(|q| q != p)
    }

    /// Whether copy `p`'s death was masked.
    pub fn is_masked(&self, p: u32) -> bool {
        self.dead.get(p as usize).copied().unwrap_or(false)
    }

    /// The counts a checkpoint keeps with the endpoint's channel state (a restarted copy's
    /// channels resume there, so its counts must too): `delivered` and `got` as
    /// `n u32 | (rank u32, tag u64, count u64)*` each, then the wildcard index and last decision.
    pub fn encode_counts(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for map in [&self.delivered, &self.got] {
            let mut entries: Vec<(&(u32, Tag), &u64)> = map.iter().collect();
            entries.sort_unstable();
            out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
            for (&(r, tag), &n) in entries {
                out.extend_from_slice(&r.to_le_bytes());
                out.extend_from_slice(&tag.to_le_bytes());
                out.extend_from_slice(&n.to_le_bytes());
            }
        }
        let (index, source, tag) = self.last_decision.unwrap_or((0, 0, 0));
        out.extend_from_slice(&self.wildcards.to_le_bytes());
        out.extend_from_slice(&index.to_le_bytes());
        out.extend_from_slice(&source.to_le_bytes());
        out.extend_from_slice(&tag.to_le_bytes());
        out
    }

    /// Takes back what [`Spheres::encode_counts`] wrote (a restarted copy's restore).
    pub fn restore_counts(&mut self, bytes: &[u8]) -> Result<(), String> {
        let mut r = Reader::new(bytes, "sphere counts");
        let mut maps = [HashMap::new(), HashMap::new()];
        for map in &mut maps {
            let n = r.u32("a count").map_err(|e| e.to_string())?;
            for _ in 0..n {
                let rank = r.u32("a copy").map_err(|e| e.to_string())?;
                let tag = r.u64("a tag").map_err(|e| e.to_string())?;
                map.insert((rank, tag), r.u64("a count").map_err(|e| e.to_string())?);
            }
        }
        let wildcards = r.u64("the wildcard count").map_err(|e| e.to_string())?;
        let index = r.u64("the last decision").map_err(|e| e.to_string())?;
        let source = r.u32("its source").map_err(|e| e.to_string())?;
        let tag = r.u64("its tag").map_err(|e| e.to_string())?;
        r.finish().map_err(|e| e.to_string())?;
        let [delivered, got] = maps;
        (self.delivered, self.got, self.wildcards) = (delivered, got, wildcards);
        self.last_decision = (index > 0).then_some((index, source, tag));
        Ok(())
    }

    /// Counts a message a replay took from a live copy in place of masked copy `p`'s (the
    /// log's stand-in): new by construction (the log skips those another copy delivered),
    /// while `p`'s own count may lag by the duplicates skipped.
    pub fn stood_in(&mut self, p: u32, tag: Tag) -> Arrival {
        let v = self.virtual_of(p);
        let delivered = self.delivered.get(&(v, tag)).copied().unwrap_or(0);
        self.got.insert((p, tag), delivered);
        self.arrived(p, tag)
    }

    /// Counts a message of tag `tag` taken from copy `p`: new (deliver) or a duplicate.
    pub fn arrived(&mut self, p: u32, tag: Tag) -> Arrival {
        let v = self.map.of_physical(p).map_or(p, |(v, _)| v);
        let got = self.got.entry((p, tag)).or_insert(0);
        let delivered = self.delivered.entry((v, tag)).or_insert(0);
        let arrival = if *got >= *delivered {
            *delivered += 1;
            Arrival::New
        } else {
            Arrival::Duplicate
        };
        *got += 1;
        arrival
    }

    /// Duplicates of tag `tag` that copy `p` still owes (sent or yet to send): to be dropped
    /// when they arrive.
    pub fn owed(&self, p: u32, tag: Tag) -> u64 {
        let v = self.map.of_physical(p).map_or(p, |(v, _)| v);
        let delivered = self.delivered.get(&(v, tag)).copied().unwrap_or(0);
        delivered.saturating_sub(self.got.get(&(p, tag)).copied().unwrap_or(0))
    }

    /// Every (live copy, tag, count) with duplicates owed, for draining.
    pub fn all_owed(&self) -> Vec<(u32, Tag, u64)> {
        let mut owed: Vec<(u32, Tag, u64)> = self
            .delivered
            .keys()
            .flat_map(|&(v, tag)| self.destinations(v).map(move |p| (p, tag)))
            .map(|(p, tag)| (p, tag, self.owed(p, tag)))
            .filter(|&(_, _, n)| n > 0)
            .collect();
        owed.sort_unstable();
        owed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2 virtual ranks at 2x: sphere 0 = {0, 2}, sphere 1 = {1, 3}.
    fn dual(me: u32) -> Spheres {
        Spheres::new(ReplicaMap::new(2, 2.0).unwrap(), me)
    }

    #[test]
    fn ranks_see_the_virtual_job() {
        let s = dual(3);
        assert_eq!((s.virtual_rank(), s.virtual_size()), (1, 2));
        assert_eq!(s.destinations(0).collect::<Vec<_>>(), [0, 2]);
        assert!(!s.is_leader() && dual(1).is_leader());
        assert_eq!(s.mates().collect::<Vec<_>>(), [1]);
    }

    /// Whichever copy runs ahead delivers; the other's copies of the same messages are
    /// dropped, message by message, in any interleaving.
    #[test]
    fn the_first_copy_of_each_message_delivers_it() {
        let mut s = dual(1);
        let order = [0, 0, 2, 2, 2, 0, 2, 0]; // copies 0 and 2 each send 4 messages of tag 7
        let arrivals: Vec<Arrival> = order.iter().map(|&p| s.arrived(p, 7)).collect();
        use Arrival::*;
        assert_eq!(arrivals, [New, New, Duplicate, Duplicate, New, Duplicate, New, Duplicate]);
        assert_eq!((s.owed(0, 7), s.owed(2, 7)), (0, 0));
        // Another tag counts apart.
        assert_eq!(s.arrived(2, 8), New);
        assert_eq!(s.owed(0, 8), 1);
        assert_eq!(s.all_owed(), [(0, 8, 1)]);
    }

    /// A named receive takes from the lowest live copy; when it dies the next copy takes
    /// over, first dropping the duplicates it owes.
    #[test]
    fn a_dead_copy_is_masked_and_its_mate_takes_over() {
        let mut s = dual(1);
        assert_eq!(s.source_for(0), Some(0));
        for _ in 0..3 {
            assert_eq!(s.arrived(0, 7), Arrival::New);
        }
        assert_eq!(s.arrived(2, 7), Arrival::Duplicate);
        assert_eq!(s.mark_dead(0), Loss::Masked);
        assert_eq!(s.source_for(0), Some(2));
        assert_eq!(s.owed(2, 7), 2);
        assert_eq!(s.arrived(2, 7), Arrival::Duplicate);
        assert_eq!(s.arrived(2, 7), Arrival::Duplicate);
        assert_eq!(s.arrived(2, 7), Arrival::New, "the fourth message, which copy 0 never sent");
        assert_eq!(s.all_owed(), [], "nothing owed by the dead copy");
        assert!(s.is_masked(0) && !s.is_masked(2));
        assert_eq!(s.mark_dead(2), Loss::SphereLost(0));
        assert_eq!(s.source_for(0), Some(2), "the last copy is restarted, not forgotten");
        assert!(!s.is_masked(2));
    }

    /// A replay's stand-in copy of a masked copy's message is new even where that copy's own
    /// count lags (the duplicates of it the log skipped); the stand-in's own comes later as
    /// a duplicate.
    #[test]
    fn a_stand_in_delivery_is_new_and_its_mates_copy_a_duplicate() {
        let mut s = dual(1);
        assert_eq!(s.arrived(0, 7), Arrival::New);
        assert_eq!(s.mark_dead(2), Loss::Masked);
        assert_eq!(s.stood_in(2, 7), Arrival::New, "copy 2's count lags by one skipped duplicate");
        assert_eq!(s.arrived(0, 7), Arrival::Duplicate);
        assert_eq!(s.arrived(0, 7), Arrival::New);
    }

    /// A restarted copy resumes the counts its checkpoint kept.
    #[test]
    fn counts_survive_a_checkpoint() {
        let mut s = dual(1);
        for p in [0, 0, 2] {
            s.arrived(p, 7);
        }
        s.wildcards = 3;
        s.last_decision = Some((3, 0, 7));
        let mut restored = dual(1);
        restored.restore_counts(&s.encode_counts()).unwrap();
        assert_eq!((restored.owed(2, 7), restored.owed(0, 7)), (1, 0));
        assert_eq!((restored.wildcards, restored.last_decision), (3, Some((3, 0, 7))));
        assert!(restored.restore_counts(&[1, 2, 3]).is_err());
    }

    /// Leadership of a sphere passes to its lowest live copy.
    #[test]
    fn the_lowest_live_copy_leads() {
        let mut s = dual(3);
        assert!(!s.is_leader());
        assert_eq!(s.mark_dead(1), Loss::Masked);
        assert!(s.is_leader());
        assert_eq!(s.mates().count(), 0);
    }

    /// 1.5x over 3 ranks: rank 2 has one copy; its messages are all new, and its death
    /// loses the sphere.
    #[test]
    fn a_rank_without_replica_is_its_own_sphere() {
        let map = ReplicaMap::new(3, 1.5).unwrap();
        let mut s = Spheres::new(map, 0);
        assert_eq!(s.destinations(2).collect::<Vec<_>>(), [2]);
        assert_eq!(s.arrived(2, 5), Arrival::New);
        assert_eq!(s.arrived(2, 5), Arrival::New);
        assert_eq!(s.mark_dead(2), Loss::SphereLost(2));
    }
}
