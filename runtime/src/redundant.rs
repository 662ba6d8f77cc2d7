//! The application's messages under partial redundancy (`spheres`): a send goes to every
//! copy of its destination, a named receive takes the first copy of each message to arrive
//! from its source's chosen copy and drops the others' copies, and a wildcard receive is
//! decided by the sphere's leader, which tells its mates the virtual source it matched.
//!
//! A copy's death is masked (`masked`): a named receive moves to the sphere's next copy, a
//! mate whose leader died follows the next one or leads. Decisions are numbered, and a new
//! leader repeats its last one: the dead leader may have told it to some mates only (spheres
//! of three copies).

use reverb_logger::LogMode;
use reverb_transport::{Rank, Source, Tag, TagMatch};

use super::error::{Result, RuntimeError};
use super::replicas::ReplicaMap;
use super::spheres::{Arrival, Spheres};
use super::{Message, Runtime};

/// Longest sleep of `settle_duplicates` between rounds: a duplicate already queued for
/// another tag does not wake the transport's sleep.
const DUPLICATE_NAP: std::time::Duration = std::time::Duration::from_millis(1);

/// The tag a sphere's leader tells its mates a wildcard match under (applications' tags stay
/// below it).
pub const TAG_DECISION: Tag = u64::MAX - 0x5150;

/// The spheres of this process's job, if it is redundant: `physical_size` processes must be
/// the copies of `config`'s virtual ranks.
pub(super) fn spheres_of(
    config: Option<super::config::Redundancy>,
    rank: Rank,
    physical_size: u32,
) -> Result<Option<Spheres>> {
    let Some(r) = config else { return Ok(None) };
    let map = ReplicaMap::new(r.virtual_ranks, r.degree)?;
    if map.physical_ranks() != physical_size {
        return Err(RuntimeError::InvalidArgument(format!(
            "{} virtual ranks at redundancy {} need {} processes, the job has {physical_size}",
            r.virtual_ranks,
            r.degree,
            map.physical_ranks()
        )));
    }
    Ok(Some(Spheres::new(map, rank)))
}

impl Runtime {
    /// The spheres, for a call made under redundancy.
    fn spheres(&mut self) -> Result<&mut Spheres> {
        self.spheres.as_mut().ok_or_else(|| RuntimeError::InvalidArgument("not a redundant job".into()))
    }

    /// Fails a call that has no redundant form yet.
    pub(super) fn not_redundant(&self, call: &str) -> Result<()> {
        match self.spheres {
            Some(_) => Err(RuntimeError::Unsupported(format!("{call} under partial redundancy"))),
            None => Ok(()),
        }
    }

    /// `send` to virtual rank `dest`: to every live copy of it.
    pub(super) fn send_redundant(&mut self, dest: Rank, tag: Tag, payload: &[u8]) -> Result<()> {
        if tag >= TAG_DECISION {
            return Err(RuntimeError::InvalidArgument(format!("tag {tag:#x} is reserved under redundancy")));
        }
        let copies: Vec<Rank> = self.spheres()?.destinations(dest).collect();
        if copies.is_empty() {
            return Err(RuntimeError::InvalidArgument(format!("no rank {dest} in the job")));
        }
        for p in copies {
            self.send_now(p, tag, payload)?;
        }
        Ok(())
    }

    /// `recv_from` virtual rank `source`: the next new message of its chosen copy.
    pub(super) fn recv_from_redundant(&mut self, source: Rank, tag: Tag) -> Result<Message> {
        loop {
            let copy = self
                .spheres()?
                .source_for(source)
                .ok_or_else(|| RuntimeError::InvalidArgument(format!("no rank {source} in the job")))?;
            match self.recv(Source::Rank(copy), TagMatch::exact(tag)) {
                Ok(msg) => {
                    if let Some(msg) = self.took(msg)? {
                        return Ok(msg);
                    }
                }
                // Its sphere's next copy serves the receive (it owes what this one delivered).
                Err(e) if e.dead_peer() == Some(copy) && self.masked_copy(copy) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// `recv_any`: the leader takes the first new message of any copy and tells its mates
    /// whose it was; a mate receives from that virtual rank. Decisions are numbered: a mate
    /// that takes over from a dead leader first tells the others its last one again (one may
    /// have missed it), and a decision already followed is skipped.
    pub(super) fn recv_any_redundant(&mut self, tag: Tag) -> Result<Message> {
        while !self.spheres()?.is_leader() {
            let leader = self.spheres()?.leader().unwrap_or(0);
            match self.recv(Source::Rank(leader), TagMatch::exact(TAG_DECISION)) {
                Ok(decision) => {
                    let (index, source, decided) = decision_of(&decision.payload)?;
                    let next = self.spheres()?.wildcards + 1;
                    if index < next {
                        continue; // told again by a new leader: followed already
                    }
                    if index > next || decided != tag {
                        return Err(RuntimeError::Unrecoverable(format!(
                            "copies diverged: wildcard receive {next} waits under tag {tag:#x}, the \
                             leader decided receive {index} under tag {decided:#x}"
                        )));
                    }
                    self.decided(index, source, tag)?;
                    return self.recv_from_redundant(source, tag);
                }
                // The next live copy leads from this receive on (or this one does).
                Err(e) if e.dead_peer() == Some(leader) && self.masked_copy(leader) => {}
                Err(e) => return Err(e),
            }
        }
        self.take_the_lead()?;
        loop {
            let msg = self.recv(Source::Any, TagMatch::exact(tag))?;
            if let Some(msg) = self.took(msg)? {
                let index = self.spheres()?.wildcards + 1;
                self.decided(index, msg.source, tag)?;
                self.tell_mates(index, msg.source, tag)?;
                return Ok(msg);
            }
        }
    }

    /// A copy leading for the first time tells its mates its last decision again: the dead
    /// leader may have told it to some of them only. Called at once when the leader's death
    /// is masked (a mate may be waiting for that decision while this copy has no wildcard
    /// receive left before a collective), and at the first wildcard receive a copy leads.
    pub(super) fn take_the_lead(&mut self) -> Result<()> {
        let spheres = self.spheres()?;
        if std::mem::replace(&mut spheres.leading, true) {
            return Ok(());
        }
        match spheres.last_decision {
            Some((index, source, tag)) => self.tell_mates(index, source, tag),
            None => Ok(()),
        }
    }

    fn decided(&mut self, index: u64, source: Rank, tag: Tag) -> Result<()> {
        let spheres = self.spheres()?;
        spheres.wildcards = index;
        spheres.last_decision = Some((index, source, tag));
        Ok(())
    }

    /// Sends decision `index` (virtual `source`, `tag`) to every live mate.
    fn tell_mates(&mut self, index: u64, source: Rank, tag: Tag) -> Result<()> {
        let mates: Vec<Rank> = self.spheres()?.mates().collect();
        let mut decision = source.to_le_bytes().to_vec();
        decision.extend_from_slice(&tag.to_le_bytes());
        decision.extend_from_slice(&index.to_le_bytes());
        for m in mates {
            self.send_now(m, TAG_DECISION, &decision)?;
        }
        Ok(())
    }

    /// Counts `msg` (from a copy): the message under its virtual source if it is new (and the
    /// duplicates now owed dropped where they arrived), None for a duplicate.
    fn took(&mut self, mut msg: Message) -> Result<Option<Message>> {
        let copy = msg.source;
        let stood_in = self.endpoint.as_ref().is_some_and(|e| e.last_delivery_stood_in());
        let spheres = self.spheres()?;
        let arrival = if stood_in { spheres.stood_in(copy, msg.tag) } else { spheres.arrived(copy, msg.tag) };
        if arrival == Arrival::Duplicate {
            return Ok(None);
        }
        msg.source = spheres.virtual_of(copy);
        self.drop_duplicates()?;
        Ok(Some(msg))
    }

    /// Takes in the duplicates owed that have arrived, so the copies not chosen fill no
    /// queue. Without logging only: what has arrived is chance, and a logged job's restarted
    /// rank must replay its receives in the order its log holds; a logged job drains at each
    /// checkpoint, before its snapshot (`drain_duplicates`), which no replay starts before.
    fn drop_duplicates(&mut self) -> Result<()> {
        if self.config.log.mode != LogMode::NONE {
            return Ok(());
        }
        self.drain_duplicates()
    }

    /// At a checkpoint and at the end, without logging: waits (bounded by the receive
    /// timeout) until every duplicate owed has arrived and is dropped. Without a log the
    /// messages go as the provider's own, and a copy's send above the rendezvous threshold
    /// completes only once its receiver takes it: a copy behind its mates would otherwise
    /// wait for sends nobody receives (in the log GC, at the final barrier). A copy that dies
    /// meanwhile is masked and owes nothing more.
    pub(super) fn settle_duplicates(&mut self) -> Result<()> {
        if self.spheres.is_none() || self.config.log.mode != LogMode::NONE {
            return self.drain_duplicates();
        }
        // Spins, yields or sleeps on the transport as REVERB_WAIT_MODE says (an arrival wakes
        // it); the clock is read every few rounds, not each.
        let mut wait = self.spin_wait(self.config.recv_timeout)?;
        let mut masked_since = None;
        loop {
            match self.drain_duplicates() {
                Ok(()) if self.spheres()?.all_owed().is_empty() => return Ok(()),
                Ok(()) => self.poll_now()?,
                Err(e) if self.retry_after(&e, &mut masked_since)? => {}
                Err(e) => return Err(e),
            }
            if !self.idle(&mut wait, DUPLICATE_NAP)? {
                return Err(RuntimeError::Timeout {
                    what: format!("the duplicates owed by copies: {:?}", self.spheres()?.all_owed()),
                    after: self.config.recv_timeout,
                });
            }
        }
    }

    /// Takes in every duplicate owed that has arrived (a copy behind sends the rest later).
    pub(super) fn drain_duplicates(&mut self) -> Result<()> {
        if self.spheres.is_none() {
            return Ok(());
        }
        for (copy, tag, owed) in self.spheres()?.all_owed() {
            for _ in 0..owed {
                match self.try_recv_now(Source::Rank(copy), TagMatch::exact(tag))? {
                    Some(_) => {
                        self.spheres()?.arrived(copy, tag);
                    }
                    None => break,
                }
            }
        }
        Ok(())
    }
}

/// A leader's decision (source u32, tag u64, index u64): (index, virtual source, tag). A due
/// one for another tag than the receive's means the copies no longer run the same program.
fn decision_of(payload: &[u8]) -> Result<(u64, Rank, Tag)> {
    let bad = || RuntimeError::InvalidArgument(format!("a wildcard decision of {} bytes", payload.len()));
    let source = payload.get(..4).and_then(|b| b.try_into().ok()).map(Rank::from_le_bytes).ok_or_else(bad)?;
    let decided =
        payload.get(4..12).and_then(|b| b.try_into().ok()).map(Tag::from_le_bytes).ok_or_else(bad)?;
    let index =
        payload.get(12..20).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes).ok_or_else(bad)?;
    Ok((index, source, decided))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_name_their_source_tag_and_index() {
        let mut d = 3u32.to_le_bytes().to_vec();
        d.extend_from_slice(&9u64.to_le_bytes());
        d.extend_from_slice(&5u64.to_le_bytes());
        assert_eq!(decision_of(&d).unwrap(), (5, 3, 9));
        assert!(decision_of(&d[..13]).is_err());
    }
}
