//! The copy of a large lent send shared by its two ends. A cross-memory read runs on the
//! receiver's core alone while the sender waits (~11 GB/s for a 1 MiB stream here, against
//! MPICH's 15 with both cores copying through cells). So the sender announces the send with a
//! slot of its segment ([`LentSlot`]); the receiver opens it with its buffer's address, and
//! both take 64 KiB chunks from one counter: the receiver reads its chunks
//! (`process_vm_readv`), a sender that is progressing writes its chunks into the receiver's
//! buffer (`process_vm_writev`; not with `REVERB_SHM_CMA_WRITE=0`). The receiver returns once every chunk is done (all are taken
//! by then, so none starts later) and closes the slot for reuse. A sender that dies mid-chunk
//! writes nothing more: the receive fails. Without a free slot, or a sender the kernel does
//! not let write the receiver, the receiver copies it all. Shared, a 1 MiB stream ran at 19
//! GB/s.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::control::{LentSlot, LENT_SLOTS};
use super::*;

/// Bytes each side takes at a time.
const CHUNK: usize = 64 << 10;
/// Slot states (the high half of `LentSlot::claim`).
const ANNOUNCED: u64 = 1;
const OPEN: u64 = 2;
const CLOSED: u64 = 3;
/// How long a receiver waits for chunks a live sender took (each is one 64 KiB copy).
const CHUNK_BOUND: Duration = Duration::from_secs(20);

/// A lent send of ours announced with a slot: where its bytes are, whom they go to.
pub(super) struct LentOut {
    dest: Rank,
    src: u64,
    len: usize,
}

/// Takes the next chunk of an open slot, if any is left.
fn take_chunk(slot: &LentSlot, total: u32) -> Option<u32> {
    let mut cur = slot.claim.load(Ordering::Acquire);
    loop {
        let (state, next) = (cur >> 32, cur as u32);
        if state != OPEN || next >= total {
            return None;
        }
        match slot.claim.compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(next),
            Err(seen) => cur = seen,
        }
    }
}

/// Byte range (offset, length) of chunk `c` of a `len`-byte message; None past its end (a
/// chunk count the receiver wrote may be wrong).
fn chunk_range(c: u32, len: usize) -> Option<(usize, usize)> {
    let off = (c as usize).checked_mul(CHUNK).filter(|&off| off < len)?;
    Some((off, CHUNK.min(len - off)))
}

impl ShmProvider {
    /// Sender: a slot of ours announcing lent send `op` of `data` to `dest`, prepared for the
    /// receiver (None: every slot is busy, or `data` is one chunk).
    pub(super) fn lend_slot(&mut self, op: OpId, dest: Rank, data: &[u8]) -> Option<usize> {
        if data.len() <= CHUNK {
            return None;
        }
        self.reclaim_lent_slots();
        let index = self.lent_out.iter().position(Option::is_none)?;
        let slot = self.own.lent_slot(index)?;
        slot.dst.store(0, Ordering::Relaxed);
        slot.total.store(0, Ordering::Relaxed);
        slot.done.store(0, Ordering::Relaxed);
        slot.failed.store(0, Ordering::Relaxed);
        slot.cookie.store(op.0, Ordering::Relaxed);
        // Published to the receiver by the RTS's own release.
        slot.claim.store(ANNOUNCED << 32, Ordering::Release);
        self.lent_out[index] = Some(LentOut { dest, src: data.as_ptr() as u64, len: data.len() });
        self.lent_in_use += 1;
        Some(index)
    }

    /// Sender: frees the slots whose receiver is done with them (closed) or gone.
    fn reclaim_lent_slots(&mut self) {
        for (index, out) in self.lent_out.iter_mut().enumerate() {
            let Some(o) = out else { continue };
            let closed =
                self.own.lent_slot(index).is_none_or(|s| s.claim.load(Ordering::Acquire) >> 32 == CLOSED);
            let gone = self.peers.get(o.dest as usize).is_none_or(|p| p.state == PeerState::Dead);
            if closed || gone {
                *out = None;
                self.lent_in_use -= 1;
            }
        }
    }

    /// Sender: copies chunks of every slot its receiver opened into the receiver's buffer,
    /// while any are left. Free while no slot is in use.
    #[inline(always)]
    pub(super) fn help_lent_reads(&mut self) {
        if self.lent_in_use == 0 || !self.config.shm_cma_write {
            return;
        }
        for index in 0..LENT_SLOTS {
            let Some(LentOut { dest, src, len }) = self.lent_out[index] else { continue };
            let Some(slot) = self.own.lent_slot(index) else { continue };
            let peer = &self.peers[dest as usize];
            if peer.state != PeerState::Alive || !self.own.reads_lent(dest, peer.incarnation) {
                continue;
            }
            // The receiver wrote `dst` and `total` before it opened the slot (release).
            if slot.claim.load(Ordering::Acquire) >> 32 != OPEN {
                continue;
            }
            let (pid, total, dst) =
                (peer.pid, slot.total.load(Ordering::Relaxed), slot.dst.load(Ordering::Relaxed));
            while let Some(c) = take_chunk(slot, total) {
                let Some((off, n)) = chunk_range(c, len) else {
                    slot.failed.store(1, Ordering::Release);
                    slot.done.fetch_add(1, Ordering::AcqRel);
                    continue;
                };
                // SAFETY: the bytes are lent to this send until its completion, which waits for
                // the receiver's FIN, which waits for this chunk; the kernel checks `dst`
                // against the receiver's mappings.
                let wrote = unsafe { cma::write(pid, dst + off as u64, (src as *const u8).add(off), n) };
                if wrote.is_err() {
                    slot.failed.store(1, Ordering::Release);
                }
                slot.done.fetch_add(1, Ordering::AcqRel);
            }
        }
    }

    /// Receiver: reads lent message `len` bytes at `addr` of `source` into `dst`, sharing the
    /// copy through the sender's slot `slot` (RTS `r_key` - 1) when it names this send.
    ///
    /// # Safety
    /// `dst..dst + len` must be writable and the receive's alone until this returns.
    pub(super) unsafe fn read_lent_shared(
        &mut self,
        source: Rank,
        addr: u64,
        len: usize,
        dst: *mut u8,
        slot: Option<(usize, u64)>,
    ) -> std::io::Result<()> {
        let peer = &self.peers[source as usize];
        let pid = peer.pid;
        let shared = slot.and_then(|(index, cookie)| {
            let s = peer.view.lent_slot(index)?;
            let announced = s.claim.load(Ordering::Acquire) == ANNOUNCED << 32;
            (announced && s.cookie.load(Ordering::Acquire) == cookie).then_some(s)
        });
        let Some(s) = shared else {
            // SAFETY: the caller's range, read whole.
            return unsafe { cma::read(pid, addr, dst, len) };
        };
        let total = len.div_ceil(CHUNK) as u32;
        s.dst.store(dst as u64, Ordering::Relaxed);
        s.total.store(total, Ordering::Relaxed);
        s.claim.store(OPEN << 32, Ordering::Release);
        Self::wake(peer);
        let mut result = Ok(());
        while let Some(c) = take_chunk(s, total) {
            // Chunks of this message (`total` is ours): always in range.
            let Some((off, n)) = chunk_range(c, len) else { break };
            if result.is_ok() {
                // SAFETY: off + n <= len, inside the caller's range.
                result = unsafe { cma::read(pid, addr + off as u64, dst.add(off), n) };
            }
            s.done.fetch_add(1, Ordering::AcqRel);
        }
        let waited = self.await_sender_chunks(source, s, total);
        s.claim.store(CLOSED << 32, Ordering::Release);
        result?;
        waited?;
        match s.failed.load(Ordering::Acquire) {
            0 => Ok(()),
            _ => Err(std::io::Error::other("the sender could not write its share")),
        }
    }

    /// Receiver: closes `source`'s slot for a lent send it will not read (truncated), so the
    /// sender may use it again.
    pub(super) fn close_lent_slot(&self, source: Rank, slot: Option<(usize, u64)>) {
        let Some((index, cookie)) = slot else { return };
        let Some(s) = self.peers[source as usize].view.lent_slot(index) else { return };
        if s.cookie.load(Ordering::Acquire) == cookie {
            let _ =
                s.claim.compare_exchange(ANNOUNCED << 32, CLOSED << 32, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// Receiver: waits until the chunks the sender took are done (it is copying them), or the
    /// sender died; bounded by `CHUNK_BOUND`.
    fn await_sender_chunks(&self, source: Rank, s: &LentSlot, total: u32) -> std::io::Result<()> {
        let start = Instant::now();
        let mut spins = 0u32;
        while s.done.load(Ordering::Acquire) < total {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) {
                let alive = self.peers[source as usize].watch.as_ref().is_some_and(|w| w.alive());
                if !alive || start.elapsed() > CHUNK_BOUND {
                    return Err(std::io::Error::other("the sender did not finish its share"));
                }
                std::thread::yield_now();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_message_and_none_lies_past_it() {
        let len = 3 * CHUNK + 5;
        let total = len.div_ceil(CHUNK) as u32;
        let ranges: Vec<_> = (0..total).map(|c| chunk_range(c, len).unwrap()).collect();
        assert_eq!(ranges.iter().map(|r| r.1).sum::<usize>(), len);
        assert_eq!(ranges.last(), Some(&(3 * CHUNK, 5)));
        // A count a receiver wrote past the end names no bytes.
        assert_eq!(chunk_range(total, len), None);
        assert_eq!(chunk_range(u32::MAX, len), None);
    }
}
