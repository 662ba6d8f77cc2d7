//! The control connection between an agent and the job's controller, either end: frames
//! written with a bound, and a reader thread that forwards each frame and ends the connection
//! when the other side falls silent (no frame, heartbeats included, within the timeout).

use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use reverb_transport::bootstrap::wire::{self, Frame, Read1, Wait};

pub(crate) use crate::launcher::hostspec::Timing;

/// Granularity at which a reader notices its deadline and a stop.
const TICK: Duration = Duration::from_millis(100);
/// Largest control frame (they are a few bytes; a reason at most).
const MAX_CONTROL: usize = 4096;

/// What a reader saw last: a frame, or the end of the connection and why.
pub(crate) enum Heard {
    Frame(Frame),
    Gone(String),
}

/// The writing half, shared by the heartbeat thread and whoever sends control frames.
#[derive(Clone)]
pub(crate) struct Writer(Arc<Mutex<TcpStream>>);

impl Writer {
    pub(crate) fn new(stream: TcpStream, timing: Timing) -> std::io::Result<Writer> {
        stream.set_write_timeout(Some(timing.timeout))?;
        stream.set_nodelay(true)?;
        Ok(Writer(Arc::new(Mutex::new(stream))))
    }

    /// Writes one frame (bounded by the write timeout).
    pub(crate) fn send(&self, frame: &Frame) -> std::io::Result<()> {
        let bytes = wire::encode(frame).map_err(std::io::Error::other)?;
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        std::io::Write::write_all(&mut *s, &bytes)
    }

    /// Ends the connection both ways (its reader then stops).
    pub(crate) fn close(&self) {
        let s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let _ = s.shutdown(Shutdown::Both);
    }
}

/// Sends a heartbeat every `timing.heartbeat` until `stop` is raised or a write fails.
pub(crate) fn spawn_heartbeats(writer: Writer, timing: Timing, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut next = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            if Instant::now() >= next {
                if writer.send(&Frame::Heartbeat).is_err() {
                    return;
                }
                next = Instant::now() + timing.heartbeat;
            }
            std::thread::sleep(TICK.min(timing.heartbeat));
        }
    })
}

/// Reads frames from `stream` and hands each to `heard` (false: stop reading) until the
/// connection ends, `stop` is raised, or nothing arrives within `timing.timeout`; then hands
/// over one `Gone` with the reason (unless stopped).
pub(crate) fn spawn_reader(
    mut stream: TcpStream,
    timing: Timing,
    stop: Arc<AtomicBool>,
    mut heard: impl FnMut(Heard) -> bool + Send + 'static,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        if let Err(e) = stream.set_read_timeout(Some(TICK)) {
            heard(Heard::Gone(format!("set_read_timeout: {e}")));
            return;
        }
        let cancel = || stop.load(Ordering::Relaxed);
        loop {
            let wait = Wait {
                idle_deadline: Some(Instant::now() + timing.timeout),
                frame_timeout: timing.timeout,
                cancel: &cancel,
            };
            let why = match wire::read_frame(&mut stream, MAX_CONTROL, &wait) {
                Ok(Read1::Frame(Frame::Refused { reason })) => format!("refused: {reason}"),
                Ok(Read1::Frame(f)) => {
                    if heard(Heard::Frame(f)) {
                        continue;
                    }
                    return;
                }
                Ok(Read1::Eof) => "connection closed".to_string(),
                Err(_) if cancel() => return,
                Err(reverb_transport::TransportError::Timeout(_)) => {
                    format!("silent for {:.1} s", timing.timeout.as_secs_f64())
                }
                Err(e) => e.to_string(),
            };
            heard(Heard::Gone(why));
            return;
        }
    })
}
