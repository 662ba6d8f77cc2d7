//! An agent's end of its control connection: the hello, heartbeats, and what the controller
//! says (take over ranks, the job ended), or that the controller is gone.

use std::net::TcpStream;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use crossbeam::channel::{self, Receiver};
use reverb_transport::bootstrap::wire::Frame;

use super::channel::{spawn_heartbeats, spawn_reader, Heard, Timing, Writer};

/// What the controller told this agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Order {
    /// Run `ranks` from `incarnation` (a spare taking over a lost host's ranks).
    TakeOver { ranks: Range<u32>, incarnation: u32 },
    /// The job ended with `code`.
    JobEnd { code: i32, reason: String },
    /// The controller stopped answering, or closed the connection.
    ControllerLost(String),
}

/// Who this agent is, as its hello says.
pub(crate) struct Hello<'a> {
    pub token: &'a str,
    pub size: u32,
    pub host: &'a str,
    /// Empty for a spare.
    pub ranks: Range<u32>,
    pub first_incarnation: u32,
    pub respawn: u32,
}

/// A connected agent.
pub(crate) struct Link {
    writer: Writer,
    orders: Receiver<Order>,
    /// The controller's answers to `MaskRequest`s: (rank, masked).
    replies: Receiver<(u32, bool)>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Link {
    /// Connects to the controller at `root` (retrying while it is not listening yet, for at
    /// most `within`), says hello and starts the heartbeats.
    pub(crate) fn connect(root: &str, hello: &Hello<'_>, timing: Timing, within: Duration) -> Result<Link> {
        let stream = connect_retrying(root, within)?;
        let writer = Writer::new(stream.try_clone()?, timing).context("agent link: socket setup")?;
        let count = hello.ranks.end - hello.ranks.start;
        writer
            .send(&Frame::AgentHello {
                token: hello.token.as_bytes().to_vec(),
                size: hello.size,
                host: hello.host.to_string(),
                first: hello.ranks.start,
                count,
                first_incarnation: hello.first_incarnation,
                respawn: hello.respawn,
            })
            .with_context(|| format!("agent link: hello to {root}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, orders) = channel::unbounded();
        let (reply_tx, replies) = channel::unbounded();
        let reader = spawn_reader(stream, timing, stop.clone(), move |heard| {
            let order = match heard {
                Heard::Frame(Frame::Heartbeat) => return true,
                Heard::Frame(Frame::MaskReply { rank, masked }) => {
                    return reply_tx.send((rank, masked)).is_ok()
                }
                Heard::Frame(Frame::TakeOver { first, count, incarnation }) => {
                    Order::TakeOver { ranks: first..first.saturating_add(count), incarnation }
                }
                Heard::Frame(Frame::JobEnd { code, reason }) => Order::JobEnd { code, reason },
                Heard::Frame(f) => Order::ControllerLost(format!("unexpected {} frame", f.kind_name())),
                Heard::Gone(why) => Order::ControllerLost(why),
            };
            let more = matches!(order, Order::TakeOver { .. });
            tx.send(order).is_ok() && more
        });
        let beats = spawn_heartbeats(writer.clone(), timing, stop.clone());
        Ok(Link { writer, orders, replies, stop, threads: vec![reader, beats] })
    }

    /// The controller's orders, in order; the last is a `JobEnd` or `ControllerLost`.
    pub(crate) fn orders(&self) -> &Receiver<Order> {
        &self.orders
    }

    /// Asks the controller, for this agent's launcher, to mask copies' deaths: one question
    /// at a time, each answered within `within`.
    pub(crate) fn masker(&self, within: Duration) -> crate::launcher::masking::Masker {
        let (writer, replies) = (self.writer.clone(), self.replies.clone());
        let one_at_a_time = std::sync::Mutex::new(());
        crate::launcher::masking::Masker(Arc::new(move |rank, incarnation, mates: &[u32], reason: &str| {
            let _turn = one_at_a_time.lock().unwrap_or_else(|p| p.into_inner());
            let ask =
                Frame::MaskRequest { rank, incarnation, mates: mates.to_vec(), reason: reason.to_string() };
            writer.send(&ask).context("asking the controller")?;
            let deadline = Instant::now() + within;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match replies.recv_timeout(left) {
                    Ok((r, masked)) if r == rank => return Ok(masked),
                    // An answer to a question given up on.
                    Ok(_) => continue,
                    Err(_) => bail!("the controller did not answer within {within:?}"),
                }
            }
        }))
    }

    /// Tells the controller this agent's ranks ended with `code`.
    pub(crate) fn part_done(&self, code: i32) -> Result<()> {
        self.writer.send(&Frame::PartDone { code }).context("agent link: telling the controller")
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.writer.close();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn connect_retrying(root: &str, within: Duration) -> Result<TcpStream> {
    let deadline = Instant::now() + within;
    loop {
        match TcpStream::connect(root) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => {
                bail!("agent link: the controller at {root} did not answer within {within:?}: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}
