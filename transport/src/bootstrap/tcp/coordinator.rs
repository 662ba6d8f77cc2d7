//! The coordinator thread: owns the rank slots and the allgather round, and queues every
//! write to admitted connections (each connection's [`Outbox`] writes them).

use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, Sender};

use super::outbox::{Bytes, Outbox};
use super::server::{count_round, log_line, Event, Shared};
use super::TICK;
use crate::bootstrap::wire::{self, Frame};
use crate::bootstrap::PeerAddress;

#[derive(Debug, Clone, PartialEq, Eq)]
enum SlotStatus {
    /// Never connected yet.
    Waiting,
    Live,
    /// Said Bye.
    Left,
    /// Lost without Bye; carries the reason.
    Failed(String),
    /// Gone for good, the job going on without it (the launcher masked its death).
    Retired,
}

struct Conn {
    id: u64,
    peer: SocketAddr,
    /// Kept to shut the connection down (which also wakes its reader and writer).
    socket: TcpStream,
    outbox: Outbox,
}

/// How long a stopping server gives the connections' writers to flush what is queued (the
/// last results, which ranks are still reading).
const FLUSH_ON_STOP: Duration = Duration::from_secs(2);

struct RankSlot {
    incarnation: u32,
    status: SlotStatus,
    conn: Option<Conn>,
    /// The provider address this incarnation published; None until then and after a failure.
    address: Option<Vec<u8>>,
    /// Admitted after a failure: its Publish is announced to the other ranks.
    rejoined: bool,
}

pub(super) struct Coordinator {
    shared: Arc<Shared>,
    /// For the connections' writers, which report a failed write as the rank lost.
    events: Sender<Event>,
    slots: Vec<RankSlot>,
    round: u64,
    parts: Vec<Option<Vec<u8>>>,
    have: u32,
    /// Why collectives cannot proceed (rank, reason); set by a failure.
    failure: Option<(Option<u32>, String)>,
}

impl Coordinator {
    pub(super) fn new(shared: Arc<Shared>, events: Sender<Event>) -> Self {
        let n = shared.size as usize;
        Coordinator {
            slots: (0..n)
                .map(|_| RankSlot {
                    incarnation: 0,
                    status: SlotStatus::Waiting,
                    conn: None,
                    address: None,
                    rejoined: false,
                })
                .collect(),
            parts: vec![None; n],
            shared,
            events,
            round: 0,
            have: 0,
            failure: None,
        }
    }

    pub(super) fn run(mut self, rx: Receiver<Event>) {
        while !self.shared.stopping() {
            match rx.recv_timeout(TICK) {
                Ok(ev) => self.handle(ev),
                Err(channel::RecvTimeoutError::Timeout) => {}
                Err(channel::RecvTimeoutError::Disconnected) => break,
            }
        }
        let conns: Vec<Conn> = self.slots.iter_mut().filter_map(|s| s.conn.take()).collect();
        let deadline = Instant::now() + FLUSH_ON_STOP;
        for c in conns {
            c.outbox.drain(deadline);
            let _ = c.socket.shutdown(Shutdown::Both);
        }
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Join { conn, rank, incarnation, peer, writer, verdict } => {
                let v = self.admit(conn, rank, incarnation, peer, writer);
                let _ = verdict.send(v);
            }
            Event::Contribute { conn, rank, round, data } => self.contribute(conn, rank, round, data),
            Event::Left { conn, rank, clean, reason } => self.left(conn, rank, clean, reason),
            Event::Publish { conn, rank, address } => self.publish(conn, rank, address),
            Event::Lookup { conn, rank } => self.lookup(conn, rank),
            Event::MarkFailed { rank, incarnation, reason, retire, verdict } => {
                self.mark_failed(rank, incarnation, reason);
                if retire {
                    self.retire(rank, incarnation);
                }
                let _ = verdict.send(Ok(()));
            }
            Event::RetireIfMatesLive { copies, reason, verdict } => {
                let _ = verdict.send(self.retire_if_mates_live(&copies, reason));
            }
        }
    }

    /// Retires every copy when each has a live mate outside `copies`; else nothing.
    fn retire_if_mates_live(&mut self, copies: &[(u32, u32, Vec<u32>)], reason: String) -> bool {
        let live = |m: u32| {
            !copies.iter().any(|(r, _, _)| *r == m)
                && self
                    .slots
                    .get(m as usize)
                    .is_some_and(|s| matches!(s.status, SlotStatus::Live | SlotStatus::Left))
        };
        if !copies.iter().all(|(_, _, mates)| mates.iter().any(|&m| live(m))) {
            return false;
        }
        for (rank, incarnation, _) in copies {
            self.mark_failed(*rank, *incarnation, reason.clone());
            self.retire(*rank, *incarnation);
        }
        true
    }

    fn set_presence(&self, joined: bool, left: bool) {
        let mut g = match self.shared.presence.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if joined {
            g.0 += 1;
            g.1 += 1;
        }
        if left {
            g.0 = g.0.saturating_sub(1);
        }
        self.shared.presence_cv.notify_all();
    }

    /// Admission policy: a never-connected slot at its incarnation; a failed slot (or a live
    /// one whose process the launcher replaced) only at a higher incarnation.
    fn admit(
        &mut self,
        id: u64,
        rank: u32,
        incarnation: u32,
        peer: SocketAddr,
        writer: TcpStream,
    ) -> std::result::Result<(), String> {
        let slot = &self.slots[rank as usize];
        let current = slot.incarnation;
        let rejoin = match &slot.status {
            SlotStatus::Waiting if incarnation >= current => false,
            SlotStatus::Live if incarnation > current => {
                // The old process is gone but its connection is not closed yet.
                let old = slot.conn.as_ref().map(|c| c.id).unwrap_or_default();
                self.left(old, rank, false, format!("superseded by incarnation {incarnation}"));
                true
            }
            SlotStatus::Live => {
                let from = slot.conn.as_ref().map(|c| c.peer.to_string()).unwrap_or_default();
                return Err(format!(
                    "duplicate rank {rank}: incarnation {current} already connected from {from} \
                     (a rejoin needs a higher incarnation than {current}, got {incarnation})"
                ));
            }
            SlotStatus::Left => return Err(format!("rank {rank} has already left the job")),
            SlotStatus::Retired => return Err(format!("rank {rank} was retired from the job")),
            SlotStatus::Failed(_) if incarnation > current => true,
            SlotStatus::Waiting | SlotStatus::Failed(_) => {
                return Err(format!(
                    "stale incarnation {incarnation} for rank {rank}: the slot is at incarnation \
                     {current}; a rejoin needs a higher one"
                ))
            }
        };
        let welcome = wire::encode(&Frame::Welcome { size: self.shared.size, round: self.round })
            .map_err(|e| e.to_string())?;
        let socket = writer.try_clone().map_err(|e| format!("socket clone: {e}"))?;
        let outbox = Outbox::start(writer, id, rank, self.events.clone())
            .map_err(|e| format!("starting its writer: {e}"))?;
        outbox.post(welcome.into()).map_err(|e| format!("writing Welcome: {e}"))?;
        if rejoin {
            log_line(format_args!("rank {rank} rejoined at incarnation {incarnation} from {peer}"));
        }
        let slot = &mut self.slots[rank as usize];
        slot.incarnation = incarnation;
        slot.status = SlotStatus::Live;
        slot.conn = Some(Conn { id, peer, socket, outbox });
        slot.address = None;
        slot.rejoined = rejoin;
        self.set_presence(true, false);
        // Collectives resume once no rank is missing: rounds did not advance while one was.
        let lost_rank = matches!(self.failure, Some((Some(_), _)));
        if rejoin && lost_rank && !self.slots.iter().any(|s| matches!(s.status, SlotStatus::Failed(_))) {
            log_line(format_args!(
                "every failed rank has rejoined: collectives resume at round {}",
                self.round
            ));
            self.failure = None;
        }
        Ok(())
    }

    /// Stores a rank's address; a rejoined rank's is announced to every other live rank.
    fn publish(&mut self, conn: u64, rank: u32, address: Vec<u8>) {
        if !self.is_current(conn, rank) {
            return;
        }
        let slot = &mut self.slots[rank as usize];
        let (incarnation, announce) = (slot.incarnation, slot.rejoined);
        slot.address = Some(address.clone());
        if !announce {
            return;
        }
        let frame: Bytes = match wire::encode(&Frame::Rejoined { rank, incarnation, address }) {
            Ok(f) => f.into(),
            Err(e) => {
                self.left(conn, rank, false, format!("unannounceable address: {e}"));
                return;
            }
        };
        for r in 0..self.shared.size {
            if r != rank && self.slots[r as usize].status == SlotStatus::Live {
                self.send_to(r, &frame);
            }
        }
    }

    fn lookup(&mut self, conn: u64, rank: u32) {
        if !self.is_current(conn, rank) {
            return;
        }
        let entries = (0..self.shared.size)
            .map(|r| {
                let s = &self.slots[r as usize];
                let live = s.status == SlotStatus::Live;
                PeerAddress {
                    rank: r,
                    incarnation: s.incarnation,
                    address: s.address.clone().filter(|_| live),
                    lost: matches!(s.status, SlotStatus::Failed(_) | SlotStatus::Retired),
                    retired: s.status == SlotStatus::Retired,
                }
            })
            .collect();
        match wire::encode(&Frame::Addresses { entries }) {
            Ok(frame) => {
                self.send_to(rank, &frame.into());
            }
            Err(e) => self.left(conn, rank, false, format!("lookup: {e}")),
        }
    }

    fn mark_failed(&mut self, rank: u32, incarnation: u32, reason: String) {
        let Some(slot) = self.slots.get(rank as usize) else { return };
        if slot.incarnation > incarnation {
            return;
        }
        match slot.conn.as_ref().map(|c| c.id) {
            Some(id) => self.left(id, rank, false, reason),
            None => {
                let slot = &mut self.slots[rank as usize];
                slot.status = SlotStatus::Failed(reason.clone());
                slot.address = None;
                if self.failure.is_none() {
                    self.failure = Some((Some(rank), format!("rank {rank} lost: {reason}")));
                }
                self.abort_pending();
            }
        }
    }

    /// Takes a failed slot out of the job: collectives resume without it once no other rank
    /// is missing, and a round its death aborted completes with the others.
    fn retire(&mut self, rank: u32, incarnation: u32) {
        let Some(slot) = self.slots.get_mut(rank as usize) else { return };
        if slot.incarnation > incarnation || !matches!(slot.status, SlotStatus::Failed(_)) {
            return;
        }
        slot.status = SlotStatus::Retired;
        log_line(format_args!("rank {rank} retired: the job goes on without it"));
        let lost_rank = matches!(self.failure, Some((Some(_), _)));
        if lost_rank && !self.slots.iter().any(|s| matches!(s.status, SlotStatus::Failed(_))) {
            log_line(format_args!("collectives resume at round {} without the retired", self.round));
            self.failure = None;
        }
    }

    /// The ranks a round waits for: every slot not retired.
    fn expected(&self) -> u32 {
        self.slots.iter().filter(|s| s.status != SlotStatus::Retired).count() as u32
    }

    fn is_current(&self, conn: u64, rank: u32) -> bool {
        self.slots.get(rank as usize).and_then(|s| s.conn.as_ref()).is_some_and(|c| c.id == conn)
    }

    /// Queues `bytes` for a rank; a connection that cannot take it marks the rank lost.
    fn send_to(&mut self, rank: u32, bytes: &Bytes) -> bool {
        let Some(c) = self.slots[rank as usize].conn.as_ref() else {
            return false;
        };
        match c.outbox.post(bytes.clone()) {
            Ok(()) => true,
            Err(reason) => {
                let id = c.id;
                self.left(id, rank, false, reason);
                false
            }
        }
    }

    fn abort_frame(&self) -> Bytes {
        let (rank, reason) = self.failure.clone().unwrap_or((None, "job aborted".into()));
        wire::encode(&Frame::Abort { rank, reason }).unwrap_or_default().into()
    }

    /// Fails every rank waiting in the current round with the job's failure.
    fn abort_pending(&mut self) {
        let frame = self.abort_frame();
        let waiting: Vec<u32> = (0..self.shared.size).filter(|&r| self.parts[r as usize].is_some()).collect();
        for p in self.parts.iter_mut() {
            *p = None;
        }
        self.have = 0;
        for r in waiting {
            self.send_to(r, &frame);
        }
    }

    fn contribute(&mut self, conn: u64, rank: u32, round: u64, data: Vec<u8>) {
        if !self.is_current(conn, rank) {
            return;
        }
        if self.failure.is_some() {
            let frame = self.abort_frame();
            self.send_to(rank, &frame);
            return;
        }
        if round != self.round || self.parts[rank as usize].is_some() {
            let why = format!(
                "protocol error: contribution to round {round} while the job is at round {}",
                self.round
            );
            self.left(conn, rank, false, why);
            return;
        }
        self.parts[rank as usize] = Some(data);
        self.have += 1;
        // A rank that already left can never contribute: the round is dead.
        if let Some(gone) = self.slots.iter().position(|s| s.status == SlotStatus::Left) {
            self.failure = Some((Some(gone as u32), format!("rank {gone} has left the job")));
            self.abort_pending();
            return;
        }
        if self.have < self.expected() {
            return;
        }
        let parts: Vec<Option<Vec<u8>>> = self.parts.iter_mut().map(Option::take).collect();
        self.have = 0;
        let round = self.round;
        self.round += 1;
        match wire::encode(&result_frame(round, parts)) {
            Ok(bytes) => {
                let bytes: Bytes = bytes.into();
                let mut sent = 0u64;
                for r in 0..self.shared.size {
                    if self.send_to(r, &bytes) {
                        sent += bytes.len() as u64;
                    }
                }
                count_round(sent);
            }
            Err(e) => {
                self.failure = Some((None, format!("allgather round {round}: {e}")));
                let frame = self.abort_frame();
                for r in 0..self.shared.size {
                    self.send_to(r, &frame);
                }
            }
        }
    }

    fn left(&mut self, conn: u64, rank: u32, clean: bool, reason: String) {
        if !self.is_current(conn, rank) {
            return;
        }
        // Dropping its outbox ends its writer (the shut socket fails any write in progress).
        let peer = self.slots[rank as usize].conn.take().map(|c| {
            let _ = c.socket.shutdown(Shutdown::Both);
            c.peer
        });
        self.set_presence(false, true);
        let slot = &mut self.slots[rank as usize];
        if clean {
            slot.status = SlotStatus::Left;
            if self.have > 0 && self.failure.is_none() {
                self.failure = Some((Some(rank), format!("rank {rank} has left the job")));
                self.abort_pending();
            }
            return;
        }
        if let Some(p) = peer {
            log_line(format_args!("rank {rank} ({p}) lost: {reason}"));
        }
        slot.status = SlotStatus::Failed(reason.clone());
        slot.address = None;
        if self.failure.is_none() {
            self.failure = Some((Some(rank), format!("rank {rank} lost: {reason}")));
        }
        self.abort_pending();
    }
}

/// A round's result from every slot's part (None for a retired slot): `Uniform` when every
/// part there is the same bytes (a barrier, the final barrier's mark), so the server writes
/// O(n) bytes for it instead of O(n^2); else `Gathered`, a retired slot's part empty.
fn result_frame(round: u64, parts: Vec<Option<Vec<u8>>>) -> Frame {
    let count = parts.len() as u32;
    let mut present = parts.iter().flatten();
    let first = present.next();
    // One too large as a Gathered frame stays one, and fails to encode as before.
    let gathered_len: usize = 12 + parts.iter().map(|p| 4 + p.as_ref().map_or(0, Vec::len)).sum::<usize>();
    let uniform = gathered_len <= wire::MAX_FRAME && present.all(|p| Some(p) == first);
    match first {
        Some(part) if uniform => Frame::Uniform { round, count, part: part.clone() },
        _ => Frame::Gathered { round, parts: parts.into_iter().map(Option::unwrap_or_default).collect() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_contributions_make_a_uniform_result() {
        let f = result_frame(4, vec![Some(vec![]); 3]);
        assert_eq!(f, Frame::Uniform { round: 4, count: 3, part: vec![] });
        let f = result_frame(5, vec![Some(b"mark".to_vec()); 2]);
        assert_eq!(f, Frame::Uniform { round: 5, count: 2, part: b"mark".to_vec() });
        let f = result_frame(6, vec![Some(vec![1]), Some(vec![2])]);
        assert_eq!(f, Frame::Gathered { round: 6, parts: vec![vec![1], vec![2]] });
        assert_eq!(result_frame(7, vec![]), Frame::Gathered { round: 7, parts: vec![] });
    }

    /// A retired slot counts as the others in a uniform result, and is empty in a gathered one.
    #[test]
    fn a_retired_slot_takes_no_part() {
        let mark = Some(b"mark".to_vec());
        let f = result_frame(2, vec![mark.clone(), None, mark]);
        assert_eq!(f, Frame::Uniform { round: 2, count: 3, part: b"mark".to_vec() });
        let f = result_frame(3, vec![Some(vec![1]), None, Some(vec![2])]);
        assert_eq!(f, Frame::Gathered { round: 3, parts: vec![vec![1], vec![], vec![2]] });
    }

    #[test]
    fn a_result_too_large_to_gather_stays_gathered() {
        let big = Some(vec![0u8; wire::MAX_FRAME / 2]);
        let f = result_frame(1, vec![big.clone(), big]);
        assert!(matches!(f, Frame::Gathered { .. }));
        assert!(wire::encode(&f).is_err());
    }
}
