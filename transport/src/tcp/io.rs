//! Moving bytes: reading and writing each connection in `progress`, the bounded wait for
//! room in a send queue, sleeping in `poll(2)`, and the orderly close.

use std::io;
use std::net::Shutdown;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use crate::api::Rank;
use crate::error::{Result, TransportError};
use crate::tcp::conn::{Read1, Rx, Tx, CHUNK};
use crate::tcp::core::{Core, Link, TX_QUEUE_BYTES};

/// Bytes read from one connection per `progress` call, so one busy peer cannot starve the
/// others.
pub(super) const READ_BUDGET: usize = 4 << 20;

impl Core {
    /// Writes what waits for `rank`, then reads and handles what it sent. A closed or broken
    /// connection fails the peer (after everything it sent before has been handled).
    pub(super) fn pump(&mut self, rank: Rank) {
        if matches!(self.peers[rank as usize].link, Link::Itself) {
            return self.pump_itself(rank);
        }
        let mut read = 0;
        loop {
            let peer = &mut self.peers[rank as usize];
            let Link::Up(stream) = &mut peer.link else { return };
            if let Err(e) = peer.tx.flush(stream) {
                return self.lost(rank, e);
            }
            match peer.rx.read(stream) {
                Ok(Read1::Idle) => break,
                Ok(Read1::Eof) => return self.lost(rank, io::ErrorKind::UnexpectedEof.into()),
                Ok(Read1::Bytes(n)) => {
                    read += n;
                    self.bytes_read += n as u64;
                }
                Err(e) => return self.lost(rank, e),
            }
            if !self.handle_buffered(rank) || read >= READ_BUDGET {
                break;
            }
        }
        // Answers to what was just handled.
        self.kick(rank);
        if self.peers[rank as usize].second.is_some() {
            self.pump_second(rank);
        }
    }

    /// Handles every whole frame buffered from `rank`; false when the stream broke (a frame
    /// length beyond any frame's), which fails the peer.
    pub(super) fn handle_buffered(&mut self, rank: Rank) -> bool {
        let mut rx = std::mem::replace(&mut self.peers[rank as usize].rx, Rx::new(0));
        if self.handle_frames(rank, &mut rx) {
            self.peers[rank as usize].rx = rx;
            return true;
        }
        false
    }

    /// Handles every whole frame in `rx`, from `rank`; false (and the peer failed) when the
    /// stream broke or a handler failed the peer (an answer to it that could not be written).
    pub(super) fn handle_frames(&mut self, rank: Rank, rx: &mut Rx) -> bool {
        loop {
            match rx.next_frame() {
                Ok(Some(body)) => {
                    self.on_frame(rank, &rx.bytes()[body]);
                    // Failing the peer failed its reads: the data behind is for none of them.
                    if !self.peers[rank as usize].alive() {
                        return false;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    self.malformed.push(e);
                    self.mark_dead(rank);
                    return false;
                }
            }
        }
        true
    }

    /// The helper thread's work: what `progress` does, less the error report (the next
    /// `progress` of the application gives it).
    pub(super) fn serve_peers(&mut self) {
        if self.book.is_some() {
            self.poll_accepts();
        }
        for rank in 0..self.job.size {
            self.pump(rank);
        }
    }

    /// Frames this rank sent itself go straight to its receive path.
    pub(super) fn pump_itself(&mut self, rank: Rank) {
        let peer = &mut self.peers[rank as usize];
        if peer.tx.is_empty() {
            return;
        }
        let bytes = peer.tx.take_all();
        let mut at = 0;
        while let Some(p) = bytes.get(at..at + 4) {
            let len = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize;
            // Only injected garbage can run past the end: drop it.
            let Some(body) = bytes.get(at + 4..at + 4 + len) else { break };
            self.on_frame(rank, body);
            at += 4 + len;
        }
    }

    pub(super) fn lost(&mut self, rank: Rank, e: io::Error) {
        tracing::debug!("tcp: connection to rank {rank} lost: {e}");
        self.mark_dead(rank);
    }

    /// Writes what waits for `rank` now, as far as the socket takes it.
    pub(super) fn kick(&mut self, rank: Rank) {
        let Some(peer) = self.peers.get_mut(rank as usize) else { return };
        if let Link::Up(stream) = &mut peer.link {
            if let Err(e) = peer.tx.flush(stream) {
                self.lost(rank, e);
            }
        }
    }

    /// Makes room in `rank`'s send queue before a post copies more into it: progresses that
    /// connection (reading too, so two ranks filling each other's queues both drain) until
    /// the queue is under its cap, for at most the peer timeout.
    pub(super) fn make_room(&mut self, rank: Rank) -> Result<()> {
        let deadline = Instant::now() + self.config.peer_timeout;
        loop {
            self.live(rank)?;
            let peer = &self.peers[rank as usize];
            if peer.tx.queued_bytes() + CHUNK <= TX_QUEUE_BYTES || matches!(peer.link, Link::Itself) {
                return Ok(());
            }
            self.pump(rank);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(TransportError::Timeout(self.config.peer_timeout));
            }
            self.sleep_in_poll(left.min(Duration::from_millis(1)));
        }
    }

    /// Sleeps until a socket is readable (or writable with data waiting), a connection
    /// arrives, or `timeout` passes.
    pub(super) fn sleep_in_poll(&mut self, timeout: Duration) {
        let mut fds = Vec::with_capacity(self.peers.len() + self.handshakes.len() + 1);
        fds.push(PollFd::from_borrowed_fd(self.listener.as_fd(), PollFlags::IN));
        for h in &self.handshakes {
            fds.push(PollFd::from_borrowed_fd(h.fd(), PollFlags::IN));
        }
        for p in &self.peers {
            match &p.link {
                Link::Up(s) => {
                    let out = if p.tx.is_empty() { PollFlags::empty() } else { PollFlags::OUT };
                    fds.push(PollFd::from_borrowed_fd(s.as_fd(), PollFlags::IN | out));
                }
                // Frames to itself are handled by the next progress: do not sleep on them.
                Link::Itself if !p.tx.is_empty() => return,
                _ => {}
            }
            if let Some((s, _)) = &p.second {
                fds.push(PollFd::from_borrowed_fd(s.as_fd(), PollFlags::IN));
            }
        }
        let timeout = rustix::event::Timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as _,
            tv_nsec: timeout.subsec_nanos() as _,
        };
        // An interrupted or failed poll is a spurious wakeup: callers loop on progress.
        let _ = rustix::event::poll(&mut fds, Some(&timeout));
    }

    /// Delivers what is still queued (bounded by the peer timeout: a peer that stopped
    /// reading cannot hold us), then closes every connection so peers see an orderly end.
    pub(super) fn close_all(&mut self) {
        let deadline = Instant::now() + self.config.peer_timeout;
        while self.peers.iter().any(|p| matches!(p.link, Link::Up(_)) && !p.tx.is_empty())
            && Instant::now() < deadline
        {
            for rank in 0..self.job.size {
                self.pump(rank);
            }
            self.sleep_in_poll(Duration::from_millis(1));
        }
        for peer in &mut self.peers {
            if let Link::Up(stream) = std::mem::replace(&mut peer.link, Link::Dead) {
                // Our FIN goes after the data; reading what the peer sent meanwhile keeps the
                // kernel from answering with a reset that could discard our last bytes there.
                let _ = stream.shutdown(Shutdown::Write);
                let mut sink = Rx::new(0);
                let mut s = stream;
                let _ = sink.discard(&mut s);
            }
            peer.tx = Tx::default();
            peer.second = None;
        }
    }
}
