//! On-demand connections, as UCX's wireup: the first op for a peer (queued in its backlog)
//! makes our RC QP for it (on the shared SRQ and CQ), takes it to INIT and sends a request
//! {QPN, PSN, incarnations, generation} over the wireup channel (`wireup.rs`). The peer's
//! progress connects its QP for us (made if it has none) to ours and replies with its QPN and
//! PSN; on the reply we connect ours, send the hello (a zero-length SEND) and flush the
//! backlog. The side that learnt of the pair from a request posts nothing until that hello (or
//! a reply) shows the other QP is connected too, so nothing reaches a QP still in INIT.
//!
//! Both sides starting at once: each connects its pending QP to the other's on the request,
//! so there is still one QP per peer; each then becomes ready on the other's reply. Datagrams
//! are lost or repeated: a peer not ready with an op waiting re-sends its request (20 ms,
//! doubling to 320 ms), answers are idempotent, and no answer within the connect timeout makes
//! the peer `PeerDead`. Messages from or for another incarnation, or answering another
//! generation of our QP, are ignored.

use super::*;
use wireup::{Kind, WireMsg};

const RETRY_FIRST: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_millis(320);

/// Where our QP for a peer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Link {
    /// No QP, or one in RESET.
    Idle,
    /// In INIT, our request out.
    Init,
    /// RTS, connected to the peer's QP `remote_qpn`.
    Up { remote_qpn: u32 },
}

impl VerbsProvider {
    /// RC QPs this rank has made (its loopback QP included): with on-demand connections, one
    /// per peer it has exchanged traffic with.
    pub fn rc_qps(&self) -> usize {
        self.peers.iter().filter(|p| p.qp.is_some()).count()
    }

    /// Our loopback QP's number and PSN.
    pub(super) fn own_qp(&self) -> Option<(u32, u32)> {
        let p = &self.peers[self.job.rank as usize];
        p.qp.as_ref().map(|q| (q.qpn(), p.psn))
    }

    /// Makes our QP for `rank` (in RESET) and routes its receive completions.
    pub(super) fn make_qp(&mut self, rank: Rank) -> Result<()> {
        let qp = QueuePair::new(&self.pd, &self.cq, &self.srq, self.sq_depth as u32, qp::INLINE_WANTED)?;
        let at = self.qpn_rank.partition_point(|&(q, _)| q < qp.qpn());
        self.qpn_rank.insert(at, (qp.qpn(), rank));
        // One limit for all QPs: the smallest any was granted.
        self.max_inline = self.max_inline.min(qp.max_inline);
        let p = &mut self.peers[rank as usize];
        p.psn = rand::random::<u32>() & 0xff_ffff;
        p.qp = Some(qp);
        Ok(())
    }

    /// Idle → Init: our QP for `rank` (made if there is none) in INIT, a new generation.
    fn link_init(&mut self, rank: Rank) -> Result<()> {
        if self.peers[rank as usize].link != Link::Idle {
            return Ok(());
        }
        if self.peers[rank as usize].qp.is_none() {
            self.make_qp(rank)?;
        }
        let path = self.path;
        let p = &mut self.peers[rank as usize];
        p.qp.as_ref().ok_or(TransportError::PeerDead(rank))?.init(&path)?;
        p.generation = (p.generation + 1) & GEN_MASK;
        p.link = Link::Init;
        Ok(())
    }

    /// → Up: our QP for `rank` connected to its QP `qpn` (whose send PSN is `psn`).
    pub(super) fn link_up(&mut self, rank: Rank, qpn: u32, psn: u32) -> Result<()> {
        // Connected already by a request that came first (a respawned rank's, while the
        // survivor's `reconnect` polled): the same pair, nothing to do.
        if let Link::Up { remote_qpn } = self.peers[rank as usize].link {
            if remote_qpn == qpn {
                return Ok(());
            }
            return Err(TransportError::Remote(
                rank,
                format!("asked to connect to its QP {qpn}, connected to {remote_qpn}"),
            ));
        }
        self.link_init(rank)?;
        let path = self.path;
        let p = &mut self.peers[rank as usize];
        let route = p.route.ok_or(TransportError::PeerDead(rank))?;
        let remote = QpAddress {
            qpn,
            psn,
            lid: route.lid,
            gid: route.gid,
            gid_index: route.gid_index,
            mtu: route.mtu,
        };
        p.qp.as_ref().ok_or(TransportError::PeerDead(rank))?.connect_from_init(&path, p.psn, &remote)?;
        p.link = Link::Up { remote_qpn: qpn };
        tracing::debug!("verbs rank {}: connected to rank {rank} ({} RC QPs)", self.job.rank, self.rc_qps());
        Ok(())
    }

    /// With `REVERB_VERBS_CONNECT=all` (our QP for `rank` made at open, its address listing its
    /// QP for us): connects to that QP now, and says so. `ready`: the peer's QP is connected to
    /// ours already, post at once.
    pub(super) fn connect_listed(&mut self, rank: Rank, peer: &RankAddress, ready: bool) -> Result<bool> {
        let listed = peer.qps.get(self.job.rank as usize);
        let Some(&(qpn, psn)) = listed.filter(|_| self.peers[rank as usize].qp.is_some()) else {
            return Ok(false);
        };
        self.link_up(rank, qpn, psn)?;
        if ready {
            self.mark_ready(rank);
        }
        Ok(true)
    }

    /// An op waits for `rank`'s connection: start it (or, on a link another request made,
    /// ask for the reply that makes it ready) and keep retrying from `progress`.
    pub(super) fn connect_start(&mut self, rank: Rank) {
        let p = &self.peers[rank as usize];
        if p.ready || p.state == PeerState::Dead || p.connect_since.is_some() {
            return;
        }
        if let Err(e) = self.link_init(rank) {
            return self.connect_failed(rank, e);
        }
        let now = Instant::now();
        let p = &mut self.peers[rank as usize];
        p.connect_since = Some(now);
        p.retry = RETRY_FIRST;
        p.next_request = now + RETRY_FIRST;
        if !self.connecting.contains(&rank) {
            self.connecting.push(rank);
        }
        self.send_wire(rank, Kind::Request, None);
    }

    /// `rank`'s QP is connected to ours: we may post to it.
    pub(super) fn mark_ready(&mut self, rank: Rank) {
        let p = &mut self.peers[rank as usize];
        p.ready = true;
        p.connect_since = None;
    }

    /// Retries due requests and fails peers that did not answer in time; drops peers that are
    /// ready (or dead) from the list.
    pub(super) fn wireup_tick(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.connecting.len() {
            let rank = self.connecting[i];
            let p = &mut self.peers[rank as usize];
            let since = if p.state == PeerState::Alive && !p.ready { p.connect_since } else { None };
            let Some(since) = since else {
                p.connect_since = None;
                self.connecting.swap_remove(i);
                continue;
            };
            if now.duration_since(since) > self.connect_timeout {
                self.connecting.swap_remove(i);
                tracing::warn!(
                    "verbs rank {}: rank {rank} answered no connection request in {:?}: dead",
                    self.job.rank,
                    self.connect_timeout
                );
                self.fail_peer(rank, TransportError::PeerDead(rank));
                continue;
            }
            if now >= p.next_request {
                p.retry = (p.retry * 2).min(RETRY_MAX);
                p.next_request = now + p.retry;
                self.send_wire(rank, Kind::Request, None);
            }
            i += 1;
        }
    }

    /// Sends a request, or the reply to `request`, about our QP for `rank`.
    fn send_wire(&mut self, rank: Rank, kind: Kind, request: Option<&WireMsg>) {
        let p = &self.peers[rank as usize];
        let (Some(route), Some(qp)) = (p.route, p.qp.as_ref()) else { return };
        let msg = WireMsg {
            kind,
            src: self.job.rank,
            src_incarnation: self.job.incarnation,
            dst_incarnation: p.incarnation,
            qpn: qp.qpn(),
            psn: p.psn,
            generation: p.generation as u32,
            echo_qpn: request.map_or(0, |m| m.qpn),
            echo_generation: request.map_or(0, |m| m.generation),
        };
        if let Err(e) = self.wireup.send(&self.pd, &self.path, rank, &route, &msg) {
            self.connect_failed(rank, e);
        }
    }

    /// Connecting to `rank` failed locally (a verbs call): it is unreachable.
    fn connect_failed(&mut self, rank: Rank, e: TransportError) {
        tracing::warn!("verbs rank {}: connecting to rank {rank} failed: {e}", self.job.rank);
        self.fail_peer(rank, e);
    }

    /// A completion of the wireup QP (from `poll_cq`).
    pub(super) fn on_wireup_completion(&mut self, c: &ffi::ibv_wc) {
        match self.wireup.on_completion(c) {
            Ok(Some(m)) => self.on_wire_msg(m),
            Ok(None) => {}
            Err(e) => self.malformed.push(e),
        }
    }

    fn on_wire_msg(&mut self, m: WireMsg) {
        let rank = m.src;
        let Some(p) = self.peers.get(rank as usize) else { return };
        // From or for another incarnation, or from a rank whose rejoin we have not applied
        // (it retries until we have): not for this connection.
        if rank == self.job.rank
            || !p.attached
            || p.state == PeerState::Dead
            || m.src_incarnation != p.incarnation
            || m.dst_incarnation != self.job.incarnation
        {
            return;
        }
        let handled = match m.kind {
            Kind::Request => self.on_request(rank, &m),
            Kind::Reply => self.on_reply(rank, &m),
        };
        if let Err(e) = handled {
            self.connect_failed(rank, e);
        }
    }

    /// Connects our QP (made if needed) to the requester's and answers; a repeated request
    /// (our reply was lost) is answered again.
    fn on_request(&mut self, rank: Rank, m: &WireMsg) -> Result<()> {
        match self.peers[rank as usize].link {
            Link::Up { remote_qpn } if remote_qpn != m.qpn => return Ok(()),
            Link::Up { .. } => {}
            Link::Idle | Link::Init => self.link_up(rank, m.qpn, m.psn)?,
        }
        self.send_wire(rank, Kind::Reply, Some(m));
        Ok(())
    }

    /// The peer's QP is connected to ours: connect ours if it is not yet, then post: the
    /// hello first, which makes the peer ready for us too.
    fn on_reply(&mut self, rank: Rank, m: &WireMsg) -> Result<()> {
        let p = &self.peers[rank as usize];
        let ours = p.qp.as_ref().map(|q| q.qpn());
        if ours != Some(m.echo_qpn) || m.echo_generation != p.generation as u32 {
            return Ok(()); // answers an earlier connection of our QP
        }
        match p.link {
            Link::Init => self.link_up(rank, m.qpn, m.psn)?,
            Link::Up { remote_qpn } if remote_qpn == m.qpn => {}
            _ => return Ok(()),
        }
        if self.peers[rank as usize].ready {
            return Ok(());
        }
        self.mark_ready(rank);
        // Takes one of the peer's receive slots, as a message does.
        self.post(rank, WrInfo::Msg { bounce: false }, Opcode::Send, &[], None, false)?;
        self.peers[rank as usize].sent += 1;
        Ok(())
    }
}
