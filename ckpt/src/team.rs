//! Agreement among the ranks of a checkpoint: a two-step barrier over tagged messages (every
//! member reports ok/failed to the leader, the leader releases everyone with the verdict), so all
//! live members commit the same epoch or none does. Every wait is bounded and a dead member
//! turns the verdict into "failed" instead of a hang.

use std::time::{Duration, Instant};

use reverb_transport::codec::{CodecError, Fixed, Reader, Writer};
use reverb_transport::{
    CompletionKind, OpId, Owner, PeerState, Provider, Rank, RecvBuffer, Source, Tag, TagMatch,
};

use crate::error::CkptError;
use crate::image::Epoch;

const TAG_BASE: Tag = reverb_transport::api::library_tag(reverb_transport::api::LIBRARY_TAG_PREFIXES[1], 0); // "ckpt"
const ARRIVE: u64 = 1;
const RELEASE: u64 = 2;
const MSG_LEN: usize = 24;
/// Liveness is rechecked at least this often while waiting.
const SLICE: Duration = Duration::from_millis(20);

fn tag(kind: u64, round: u8, epoch: Epoch) -> Tag {
    TAG_BASE | (kind << 40) | (u64::from(round) << 32) | (epoch & 0xffff_ffff)
}

/// A vote: the round's id, ok/failed, and a value the leader reduces by minimum
/// (`epoch u64 | ok u8 | 7 zero bytes | min u64`).
fn message(epoch: Epoch, vote: Vote) -> [u8; MSG_LEN] {
    let mut m = Fixed::<MSG_LEN>::new();
    Writer::new(&mut m).u64(epoch).u8(u8::from(vote.ok)).zeros(7).u64(vote.min);
    m.into_array()
}

/// Decodes `message` output from untrusted bytes: the epoch, the ok flag and the minimum.
fn decode_message(bytes: &[u8]) -> Result<(Epoch, u8, u64), CodecError> {
    let mut r = Reader::new(bytes, "checkpoint vote");
    let (epoch, ok) = (r.u64("epoch")?, r.u8("ok")?);
    r.skip(7, "padding")?;
    let min = r.u64("min")?;
    r.finish()?;
    Ok((epoch, ok, min))
}

/// A vote `from` a member for round `epoch`, or why it is not one.
fn read_vote(bytes: &[u8], from: Rank, epoch: Epoch) -> Result<Vote, CkptError> {
    let bad = |detail: String| CkptError::Protocol { during: "reading a checkpoint vote", detail };
    match decode_message(bytes) {
        Ok((e, ok, min)) if e == epoch && ok <= 1 => Ok(Vote { ok: ok == 1, min }),
        Ok(_) => Err(bad(format!("rank {from} sent a vote for another epoch or a bad flag"))),
        Err(e) => Err(bad(format!("rank {from}: {e}"))),
    }
}

/// What a member reports and what the leader releases: all ok, and the minimum value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Vote {
    pub ok: bool,
    pub min: u64,
}

/// Waits for `op` (a receive or send) with `timeout`, failing early when `peer` dies.
pub(crate) fn wait_op_from(
    provider: &mut dyn Provider,
    op: OpId,
    peer: Rank,
    timeout: Duration,
    during: &'static str,
) -> Result<CompletionKind, CkptError> {
    wait_op_watching(provider, op, peer, &[], timeout, during)
}

/// How long a round still waits for its awaited peer after another member is seen dead.
const WATCHED_DEATH_GRACE: Duration = Duration::from_millis(200);

/// `wait_op_from` that also fails early when one of `watched` dies: a round with a dead
/// member fails anyway, and the live rank waited on may be busy recovering from that death
/// (never voting or releasing). A retry runs at a later epoch: stale messages of this round
/// match none of its tags.
fn wait_op_watching(
    provider: &mut dyn Provider,
    op: OpId,
    peer: Rank,
    watched: &[Rank],
    timeout: Duration,
    during: &'static str,
) -> Result<CompletionKind, CkptError> {
    let start = Instant::now();
    loop {
        match provider.wait_op(op, SLICE) {
            Ok(c) => return c.into_result().map(|c| c.kind).map_err(|e| CkptError::transport(during, e)),
            Err(reverb_transport::TransportError::Timeout(_)) => {}
            Err(e) => return Err(CkptError::transport(during, e)),
        }
        if let Some(&dead) =
            std::iter::once(&peer).chain(watched).find(|&&r| provider.peer_state(r) == PeerState::Dead)
        {
            // A rank that exited cleanly right after the round also reads as dead: take what
            // was already sent (and, for another member, give the awaited peer a moment to
            // send) before failing the round.
            let grace = if dead == peer { SLICE } else { WATCHED_DEATH_GRACE };
            match provider.wait_op(op, grace) {
                Ok(c) => return c.into_result().map(|c| c.kind).map_err(|e| CkptError::transport(during, e)),
                Err(reverb_transport::TransportError::Timeout(_)) => {}
                Err(e) => return Err(CkptError::transport(during, e)),
            }
            return Err(CkptError::PeerDead { rank: dead, during });
        }
        if start.elapsed() >= timeout {
            return Err(CkptError::Timeout { during, millis: timeout.as_millis() as u64 });
        }
    }
}

fn send_to(
    (provider, owner): (&mut dyn Provider, Owner),
    dest: Rank,
    tag: Tag,
    msg: &[u8],
    timeout: Duration,
) -> Result<(), CkptError> {
    let op = provider
        .send_for(owner, dest, tag, msg)
        .map_err(|e| CkptError::transport("sending a checkpoint vote", e))?;
    wait_op_from(provider, op, dest, timeout, "sending a checkpoint vote").map(|_| ())
}

fn recv_vote(
    provider: &mut dyn Provider,
    op: OpId,
    from: Rank,
    watched: &[Rank],
    epoch: Epoch,
    timeout: Duration,
) -> Result<Vote, CkptError> {
    match wait_op_watching(provider, op, from, watched, timeout, "waiting for a checkpoint vote")? {
        CompletionKind::Recv { data: Some(data), .. } if data.len() == MSG_LEN => {
            read_vote(&data, from, epoch)
        }
        other => Err(CkptError::Protocol {
            during: "reading a checkpoint vote",
            detail: format!("rank {from}: unexpected completion {other:?}"),
        }),
    }
}

/// Posts a receive for each of `from`'s arrival message of `round` at `epoch`.
fn post_arrivals(
    (provider, owner): (&mut dyn Provider, Owner),
    from: &[Rank],
    round: u8,
    epoch: Epoch,
    during: &'static str,
) -> Result<Vec<(Rank, OpId)>, CkptError> {
    from.iter()
        .map(|&r| {
            let op = provider
                .post_recv_for(
                    owner,
                    Source::Rank(r),
                    TagMatch::exact(tag(ARRIVE, round, epoch)),
                    RecvBuffer::Owned { capacity: MSG_LEN },
                )
                .map_err(|e| CkptError::transport(during, e))?;
            Ok((r, op))
        })
        .collect()
}

/// Runs one agreement round among `members` (led by `members[0]`, containing `me`); returns whether every
/// member reported `ok`. Dead or silent members count as failed.
pub(crate) fn agree_round(
    (provider, owner): (&mut dyn Provider, Owner),
    members: &[Rank],
    round: u8,
    epoch: Epoch,
    vote: Vote,
    timeout: Duration,
) -> Result<Vote, CkptError> {
    let me = provider.rank();
    let Some(&leader) = members.first() else {
        return Err(CkptError::InvalidArgument("empty checkpoint team".into()));
    };
    let release_tag = tag(RELEASE, round, epoch);
    if me != leader {
        let op = provider
            .post_recv_for(
                owner,
                Source::Rank(leader),
                TagMatch::exact(release_tag),
                RecvBuffer::Owned { capacity: MSG_LEN },
            )
            .map_err(|e| CkptError::transport("posting a checkpoint vote receive", e))?;
        send_to((provider, owner), leader, tag(ARRIVE, round, epoch), &message(epoch, vote), timeout)?;
        // Another member's death fails the round: the leader may be busy recovering from it.
        return recv_vote(provider, op, leader, members, epoch, timeout);
    }
    let others: Vec<Rank> = members.iter().copied().filter(|&r| r != me).collect();
    let posted =
        post_arrivals((provider, owner), &others, round, epoch, "posting a checkpoint vote receive")?;
    let deadline = Instant::now() + timeout;
    let mut verdict = vote;
    let mut alive = Vec::with_capacity(others.len());
    for (r, op) in posted {
        let left = deadline.saturating_duration_since(Instant::now()).max(SLICE);
        match recv_vote(provider, op, r, &others, epoch, left) {
            Ok(theirs) => {
                verdict.ok &= theirs.ok;
                verdict.min = verdict.min.min(theirs.min);
                alive.push(r);
            }
            Err(_) => verdict.ok = false,
        }
    }
    for r in alive {
        // A member that died since its vote just misses the verdict.
        let _ = send_to((provider, owner), r, release_tag, &message(epoch, verdict), timeout);
    }
    Ok(verdict)
}

/// Round numbers (part of each message's tag): a checkpoint's agreement is round 2, [`agree`]
/// and [`agree_min`] are 3 and 4, the level-1 reports to an encoder 5.
const USER_ROUND: u8 = 3;
const MIN_ROUND: u8 = 4;
/// A group member's "my level-1 copy of this epoch is written" to its group's encoder.
const WRITTEN_ROUND: u8 = 5;

/// Tells `encoder` whether this rank's level-1 copy of `epoch` is written (`ok`), so it can
/// gather the group's images without a job-wide barrier.
pub(crate) fn report_written(
    (provider, owner): (&mut dyn Provider, Owner),
    encoder: Rank,
    epoch: Epoch,
    ok: bool,
    timeout: Duration,
) -> Result<(), CkptError> {
    send_to(
        (provider, owner),
        encoder,
        tag(ARRIVE, WRITTEN_ROUND, epoch),
        &message(epoch, Vote { ok, min: 0 }),
        timeout,
    )
}

/// The encoder's side of [`report_written`]: waits for every member but itself; returns whether
/// all of them wrote. A dead or silent member fails the wait (it is bounded by `timeout`).
pub(crate) fn gather_written(
    (provider, owner): (&mut dyn Provider, Owner),
    members: &[Rank],
    epoch: Epoch,
    timeout: Duration,
) -> Result<bool, CkptError> {
    let me = provider.rank();
    let others: Vec<Rank> = members.iter().copied().filter(|&r| r != me).collect();
    let posted =
        post_arrivals((provider, owner), &others, WRITTEN_ROUND, epoch, "posting a level-1 report receive")?;
    let deadline = Instant::now() + timeout;
    let mut all_written = true;
    for (r, op) in posted {
        let left = deadline.saturating_duration_since(Instant::now()).max(SLICE);
        all_written &= recv_vote(provider, op, r, &others, epoch, left)?.ok;
    }
    Ok(all_written)
}

/// Agreement among `members` outside a checkpoint (e.g. the survivors of a failure, before
/// they release the memory others restore from): returns whether every member reported `ok`.
/// `members[0]` leads; every member passes the same list and the same `id`, which tells
/// successive calls apart. Lead with a rank that will outlive the call: a message sent right
/// before its sender dies may be dropped with the dead peer's pending receives.
pub fn agree(
    provider: &mut dyn Provider,
    members: &[Rank],
    id: u64,
    ok: bool,
    timeout: Duration,
) -> Result<bool, CkptError> {
    check_members(provider.rank(), members)?;
    agree_round((provider, Owner::APP), members, USER_ROUND, id, Vote { ok, min: 0 }, timeout).map(|v| v.ok)
}

/// Like [`agree`], and also returns the minimum of the members' `value`s; `None` when a
/// member failed or could not be heard.
pub fn agree_min(
    provider: &mut dyn Provider,
    members: &[Rank],
    id: u64,
    value: u64,
    timeout: Duration,
) -> Result<Option<u64>, CkptError> {
    agree_min_for((provider, Owner::APP), members, id, value, timeout)
}

/// [`agree_min`] with its messages completing to `owner` (the checkpointer's own queue).
pub(crate) fn agree_min_for(
    (provider, owner): (&mut dyn Provider, Owner),
    members: &[Rank],
    id: u64,
    value: u64,
    timeout: Duration,
) -> Result<Option<u64>, CkptError> {
    check_members(provider.rank(), members)?;
    let vote = Vote { ok: true, min: value };
    let verdict = agree_round((provider, owner), members, MIN_ROUND, id, vote, timeout)?;
    Ok(verdict.ok.then_some(verdict.min))
}

fn check_members(me: Rank, members: &[Rank]) -> Result<(), CkptError> {
    let mut distinct = members.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != members.len() || !distinct.contains(&me) {
        return Err(CkptError::InvalidArgument(format!(
            "rank {me} in team {members:?}: members must be distinct and include the caller"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pinned_encoding() {
        let m = message(0x0102, Vote { ok: true, min: 7 });
        assert_eq!(m, [2, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(read_vote(&m, 1, 0x0102).unwrap(), Vote { ok: true, min: 7 });
        assert!(read_vote(&m, 1, 0x0103).is_err(), "another epoch");
        let mut flag = m;
        flag[8] = 2;
        assert!(read_vote(&flag, 1, 0x0102).is_err(), "a bad flag");
        assert!(read_vote(&m[..MSG_LEN - 1], 1, 0x0102).is_err(), "short");
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..40), epoch: u64) {
            let _ = read_vote(&bytes, 1, epoch);
        }

        #[test]
        fn round_trips(epoch: u64, ok: bool, min: u64) {
            let vote = Vote { ok, min };
            prop_assert_eq!(read_vote(&message(epoch, vote), 1, epoch).unwrap(), vote);
        }
    }
}
