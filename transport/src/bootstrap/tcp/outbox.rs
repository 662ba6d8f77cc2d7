//! One admitted connection's writer: the coordinator queues frames, a thread of the
//! connection's own writes them. A rank that stops reading (its host lost without a reset, its
//! wire cut) then fills only its own queue, and never stalls the coordinator, every other
//! rank's collectives and the job's controller with it.

use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, Sender, TrySendError};

use super::server::{count_sent, Event};
use crate::bootstrap::wire;

/// Frames queued for one connection before it counts as not reading. Collectives are
/// synchronous, so a reading rank has a round's result and a few notices (a `Rejoined` per
/// rank restarting at once) waiting at most.
const MAX_QUEUED: usize = 4096;
/// Bytes queued likewise: two of the largest frames. (A round's result is shared by every
/// connection's queue, not copied.)
const MAX_QUEUED_BYTES: usize = 2 * wire::MAX_FRAME;

/// A frame, shared by every connection a round's result goes to.
pub(super) type Bytes = Arc<[u8]>;

pub(super) struct Outbox {
    frames: Sender<Bytes>,
    /// Bytes queued and not yet written.
    queued: Arc<AtomicUsize>,
    /// Closed by the writer thread when it ends (all queued frames written, or a write failed).
    done: Receiver<()>,
}

impl Outbox {
    /// Starts the writer of `stream` (admitted connection `conn` of `rank`); a failed write
    /// (after the stream's write timeout) reports the rank lost to the coordinator on `events`.
    pub(super) fn start(
        stream: TcpStream,
        conn: u64,
        rank: u32,
        events: Sender<Event>,
    ) -> std::io::Result<Outbox> {
        let (frames, queue) = channel::bounded::<Bytes>(MAX_QUEUED);
        let (done_tx, done) = channel::bounded::<()>(0);
        let queued = Arc::new(AtomicUsize::new(0));
        let writer = Writer { stream, conn, rank, events, queued: queued.clone() };
        std::thread::Builder::new().name(format!("reverb-boot-w{rank}")).spawn(move || {
            let _done = done_tx;
            writer.write_all_queued(queue);
        })?;
        Ok(Outbox { frames, queued, done })
    }

    /// Queues `frame`; an error says why the connection cannot take it (then the rank is lost).
    pub(super) fn post(&self, frame: Bytes) -> std::result::Result<(), String> {
        let len = frame.len();
        let queued = self.queued.load(Ordering::Relaxed);
        if queued > 0 && queued + len > MAX_QUEUED_BYTES {
            return Err(format!("not reading: {queued} bytes unread"));
        }
        self.queued.fetch_add(len, Ordering::Relaxed);
        match self.frames.try_send(frame) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(format!("not reading: {MAX_QUEUED} frames unread")),
            Err(TrySendError::Disconnected(_)) => Err("its writer ended (a write failed)".into()),
        }
    }

    /// Stops taking frames and waits until `deadline` for the queued ones to be written.
    pub(super) fn drain(self, deadline: Instant) {
        drop(self.frames);
        let wait = deadline.saturating_duration_since(Instant::now());
        let _ = self.done.recv_timeout(wait.max(Duration::from_millis(1)));
    }
}

/// The writer thread's side.
struct Writer {
    /// Its write timeout is the server's I/O bound.
    stream: TcpStream,
    conn: u64,
    rank: u32,
    events: Sender<Event>,
    queued: Arc<AtomicUsize>,
}

impl Writer {
    fn write_all_queued(mut self, queue: Receiver<Bytes>) {
        for frame in queue.iter() {
            if let Err(e) = std::io::Write::write_all(&mut self.stream, &frame) {
                let reason = format!("write failed: {e}");
                let left = Event::Left { conn: self.conn, rank: self.rank, clean: false, reason };
                let _ = self.events.send(left);
                let _ = self.stream.shutdown(Shutdown::Both);
                return;
            }
            self.queued.fetch_sub(frame.len(), Ordering::Relaxed);
            count_sent(frame.len());
        }
    }
}
