//! The wireup channel: one UD QP per rank on the provider's CQ, over which on-demand
//! connections are negotiated (`connect.rs`). A message is one datagram:
//!
//! ```text
//! 0:  magic "VBWU" u32 | kind u32 (1 request, 2 reply) | src rank u32 | src incarnation u32
//! 16: dst incarnation u32 | qpn u32 | psn u32 | generation u32
//! 32: echo qpn u32 | echo generation u32          (a reply: the request it answers)
//! ```
//!
//! Datagrams may be lost or duplicated: the sender retries, answers are idempotent.

use std::sync::Arc;

use ibverbs_sys as ffi;

use super::cq::CompletionQueue;
use super::mr;
use super::pd::ProtectionDomain;
use super::qp::Sge;
use super::ud::{AddressHandle, UdQueuePair, GRH_LEN};
use super::RECV_FLAG;
use crate::api::{Access, Rank};
use crate::codec::{Reader, Writer};
use crate::error::{Result, TransportError};
use crate::region::Region;

const MSG_MAGIC: u32 = 0x5557_4256; // "VBWU" on the wire
pub(super) const MSG_LEN: usize = 40;
/// Receives posted, and datagrams in flight at most (more are dropped: the retry resends).
pub(super) const DEPTH: u32 = 64;
/// Bytes per receive buffer: the GRH, the message, rounded up.
const RECV_SLOT: usize = 128;
/// The qkey every rank's wireup QP uses (below 0x8000_0000: not a privileged key).
pub(super) const QKEY: u32 = 0x5256_4257;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Request = 1,
    Reply = 2,
}

/// One wireup message: "connect my QP `qpn` (send PSN `psn`) to yours".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WireMsg {
    pub(super) kind: Kind,
    pub(super) src: Rank,
    pub(super) src_incarnation: u32,
    /// The incarnation of the receiver the sender means: a message for an older one is stale.
    pub(super) dst_incarnation: u32,
    pub(super) qpn: u32,
    pub(super) psn: u32,
    /// The sender's connection generation for this peer.
    pub(super) generation: u32,
    /// In a reply, the request's QPN and generation.
    pub(super) echo_qpn: u32,
    pub(super) echo_generation: u32,
}

impl WireMsg {
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(MSG_LEN);
        let mut w = Writer::new(&mut b);
        w.u32(MSG_MAGIC).u32(self.kind as u32).u32(self.src).u32(self.src_incarnation);
        w.u32(self.dst_incarnation).u32(self.qpn).u32(self.psn).u32(self.generation);
        w.u32(self.echo_qpn).u32(self.echo_generation);
        b
    }

    /// None for anything that is not a whole wireup message (anyone with the qkey may send).
    pub(super) fn decode(b: &[u8]) -> Option<WireMsg> {
        let mut r = Reader::new(b.get(..MSG_LEN)?, "wireup message");
        if r.u32("magic").ok()? != MSG_MAGIC {
            return None;
        }
        let kind = match r.u32("kind").ok()? {
            1 => Kind::Request,
            2 => Kind::Reply,
            _ => return None,
        };
        let mut next = || r.u32("field").ok();
        Some(WireMsg {
            kind,
            src: next()?,
            src_incarnation: next()?,
            dst_incarnation: next()?,
            qpn: next()?,
            psn: next()?,
            generation: next()?,
            echo_qpn: next()?,
            echo_generation: next()?,
        })
    }
}

/// The UD QP, its receive and send buffers, and an address handle per peer (made on first use).
pub(super) struct Wireup {
    qp: UdQueuePair,
    recv_ring: Region,
    send_ring: Region,
    ahs: Vec<Option<AddressHandle>>,
    /// Datagrams posted and completed (every send is signaled).
    posted: u64,
    completed: u64,
}

/// How to reach a peer, from its address: its port's GID, LID and MTU, its wireup QP.
#[derive(Debug, Clone, Copy)]
pub(super) struct Route {
    pub(super) gid: [u8; 16],
    pub(super) lid: u16,
    pub(super) gid_index: u8,
    pub(super) mtu: u8,
    pub(super) qpn: u32,
    pub(super) qkey: u32,
}

impl Wireup {
    /// Creates the channel for `size` ranks and posts its receives.
    pub(super) fn new(
        pd: &Arc<ProtectionDomain>,
        cq: &CompletionQueue,
        port: u8,
        (rank, incarnation, size): (Rank, u32, u32),
    ) -> Result<Wireup> {
        let qp = UdQueuePair::new(pd, cq, DEPTH, port, QKEY)?;
        let recv_ring = mr::register(pd, rank, incarnation, DEPTH as usize * RECV_SLOT, Access::LOCAL)?;
        let send_ring = mr::register(pd, rank, incarnation, DEPTH as usize * MSG_LEN, Access::LOCAL)?;
        let mut w = Wireup {
            qp,
            recv_ring,
            send_ring,
            ahs: (0..size).map(|_| None).collect(),
            posted: 0,
            completed: 0,
        };
        for slot in 0..DEPTH as u64 {
            w.post_recv(slot)?;
        }
        Ok(w)
    }

    pub(super) fn qpn(&self) -> u32 {
        self.qp.qpn()
    }

    fn post_recv(&mut self, slot: u64) -> Result<()> {
        let addr = self.recv_ring.as_ptr() as u64 + slot * RECV_SLOT as u64;
        let sge = Sge { addr, len: RECV_SLOT as u32, lkey: self.recv_ring.local_key() };
        self.qp.post_recv(RECV_FLAG | slot, sge)
    }

    /// Forgets `rank`'s address handle (it respawned: its route may differ).
    pub(super) fn forget(&mut self, rank: Rank) {
        if let Some(ah) = self.ahs.get_mut(rank as usize) {
            *ah = None;
        }
    }

    /// Sends `msg` to `rank`'s wireup QP at `route`. A full send queue drops it (Ok(false)):
    /// the sender's retry timer resends.
    pub(super) fn send(
        &mut self,
        pd: &Arc<ProtectionDomain>,
        path: &super::PathParams,
        rank: Rank,
        route: &Route,
        msg: &WireMsg,
    ) -> Result<bool> {
        if self.posted - self.completed >= DEPTH as u64 {
            return Ok(false);
        }
        let size = self.ahs.len() as u32;
        let slot = self.ahs.get_mut(rank as usize).ok_or(TransportError::InvalidRank(rank, size))?;
        if slot.is_none() {
            let ah = AddressHandle::new(pd, path.port, path.use_grh, path.gid_index, route.gid, route.lid)?;
            *slot = Some(ah);
        }
        let Some(ah) = slot.as_ref() else { return Ok(false) };
        let offset = (self.posted % DEPTH as u64) as usize * MSG_LEN;
        self.send_ring.write(offset, &msg.encode())?;
        let sge = Sge {
            addr: self.send_ring.as_ptr() as u64 + offset as u64,
            len: MSG_LEN as u32,
            lkey: self.send_ring.local_key(),
        };
        self.qp.post_send(self.posted, sge, ah, route.qpn, route.qkey)?;
        self.posted += 1;
        Ok(true)
    }

    /// A completion of the wireup QP: a received message (its receive reposted), or None.
    /// Send completions only free their buffer (a failed datagram is a lost one).
    pub(super) fn on_completion(&mut self, c: &ffi::ibv_wc) -> Result<Option<WireMsg>> {
        let id = c.wr_id();
        if id & RECV_FLAG == 0 {
            self.completed += 1;
            return Ok(None);
        }
        let slot = id & !RECV_FLAG;
        let msg = if c.error().is_some() || c.len() < GRH_LEN + MSG_LEN {
            None
        } else {
            let mut bytes = [0u8; MSG_LEN];
            self.recv_ring.read(slot as usize * RECV_SLOT + GRH_LEN, &mut bytes)?;
            WireMsg::decode(&bytes)
        };
        self.post_recv(slot)?;
        Ok(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes written out by hand: ranks of two builds must agree.
    #[test]
    fn pinned_encoding() {
        let m = WireMsg {
            kind: Kind::Reply,
            src: 3,
            src_incarnation: 1,
            dst_incarnation: 2,
            qpn: 0x11,
            psn: 0x22,
            generation: 5,
            echo_qpn: 0x33,
            echo_generation: 6,
        };
        let mut want = b"VBWU\x02\0\0\0\x03\0\0\0\x01\0\0\0\x02\0\0\0".to_vec();
        want.extend_from_slice(&[0x11, 0, 0, 0, 0x22, 0, 0, 0, 5, 0, 0, 0, 0x33, 0, 0, 0, 6, 0, 0, 0]);
        assert_eq!(m.encode(), want);
        assert_eq!(WireMsg::decode(&want), Some(m));
        assert_eq!(WireMsg::decode(&want[..MSG_LEN - 1]), None);
        want[4] = 9;
        assert_eq!(WireMsg::decode(&want), None);
    }
}
