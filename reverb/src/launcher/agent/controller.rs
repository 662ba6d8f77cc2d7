//! The job's controller, in the agent that hosts the rendezvous: it takes the other agents'
//! control connections from the boot server, hears their heartbeats, and decides for the whole
//! job. A host whose agent falls silent or drops its connection before its ranks are done is
//! lost: its ranks are marked failed at the rendezvous (survivors learn of it and wait for
//! their new incarnations), and an idle spare agent is told to start them at an incarnation
//! above any the lost agent could have reached. With no spare, one that connects within the
//! agent timeout (a host come back) takes them; otherwise the job stops with a report. The job
//! ends when every host's ranks are done, or at the first part that fails.
//!
//! Under partial redundancy the controller masks copies' deaths for the agents (each sees its
//! own host's copies only): an agent asks (`MaskRequest`), and the rendezvous retires the copy
//! if a mate is alive there. A host lost whose every rank has a live copy on another host is
//! masked whole: its copies are retired, nothing is restarted and nothing rolls back.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, Sender};
use reverb_transport::bootstrap::wire::Frame;
use reverb_transport::bootstrap::{AgentConn, AgentIntro, BootServer, FailureReporter};

use super::channel::{spawn_reader, Heard, Timing, Writer};

/// What the controller runs: every host's ranks, in rank order.
pub(crate) struct ControlPlan {
    pub parts: Vec<(String, Range<u32>)>,
    /// The part this process runs itself (its ranks' end comes through
    /// [`Controller::own_part_done`]).
    pub own: usize,
    pub ranks_per_node: u32,
    /// The loggers' rendezvous, with logger cores: a lost host's logger slots are marked
    /// failed there too.
    pub loggers: Option<FailureReporter>,
    pub respawn: u32,
    pub timing: Timing,
    /// How long the other hosts' agents have to connect at the start.
    pub start_within: Duration,
    /// Partial redundancy: the job's processes are copies of fewer virtual ranks.
    pub redundancy: Option<reverb_runtime::replicas::ReplicaMap>,
}

/// How the job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobEnd {
    pub code: i32,
    pub reason: String,
}

/// The running controller.
pub(crate) struct Controller {
    events: Sender<Event>,
    end: Receiver<JobEnd>,
    thread: Option<JoinHandle<()>>,
}

enum Event {
    Frame(u64, Frame),
    Gone(u64, String),
    OwnDone(i32),
    /// Whoever waits for the job gave up: end it now.
    GiveUp(JobEnd),
}

impl Controller {
    /// Starts controlling the job served by `server`; `stop_own` is called if the job fails
    /// while this process's own ranks still run.
    pub(crate) fn start(
        server: &BootServer,
        plan: ControlPlan,
        stop_own: Box<dyn Fn() + Send>,
    ) -> std::io::Result<Controller> {
        let arrivals = server.agent_connections();
        let reporter = server.failure_reporter();
        let (events, rx) = channel::unbounded();
        let (end_tx, end) = channel::bounded(1);
        let state = State::new(plan, reporter, events.clone(), stop_own);
        let thread = std::thread::Builder::new()
            .name("reverb-controller".into())
            .spawn(move || state.run(arrivals, rx, end_tx))?;
        Ok(Controller { events, end, thread: Some(thread) })
    }

    /// This process's own ranks ended with `code`.
    pub(crate) fn own_part_done(&self, code: i32) {
        let _ = self.events.send(Event::OwnDone(code));
    }

    /// Waits for the job's end; past `bound` (when given) the job is ended with code 124.
    pub(crate) fn wait_end(mut self, bound: Option<Duration>) -> JobEnd {
        let got = match bound {
            Some(b) => self.end.recv_timeout(b).ok(),
            None => self.end.recv().ok(),
        };
        let end = got.unwrap_or_else(|| {
            let why = bound.map_or("the controller stopped".into(), |b| {
                format!("the job did not end within {:.0} s", b.as_secs_f64())
            });
            let end = JobEnd { code: 124, reason: why };
            let _ = self.events.send(Event::GiveUp(end.clone()));
            end
        });
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        end
    }
}

/// Who holds a part's ranks.
#[derive(Debug, Clone, PartialEq)]
enum Holder {
    /// At the start, until its agent connects.
    Awaited {
        since: Instant,
    },
    Agent(u64),
    /// This process.
    Own,
    /// Its host was lost; no spare has taken it yet.
    Orphan {
        since: Instant,
    },
    Done,
}

struct Part {
    host: String,
    ranks: Range<u32>,
    holder: Holder,
    /// The highest incarnation its ranks may have reached under any holder so far.
    ceiling: u32,
}

struct Agent {
    intro: AgentIntro,
    writer: Writer,
    stop: Arc<AtomicBool>,
}

struct State {
    parts: Vec<Part>,
    agents: HashMap<u64, Agent>,
    /// Idle spare agents, in arrival order.
    spares: Vec<u64>,
    next_id: u64,
    plan_respawn: u32,
    timing: Timing,
    start_within: Duration,
    reporter: FailureReporter,
    loggers: Option<FailureReporter>,
    ranks_per_node: u32,
    redundancy: Option<reverb_runtime::replicas::ReplicaMap>,
    events: Sender<Event>,
    stop_own: Box<dyn Fn() + Send>,
    ended: Option<JobEnd>,
}

fn say(msg: std::fmt::Arguments<'_>) {
    eprintln!("reverb agent: {msg}");
}

impl State {
    fn new(
        plan: ControlPlan,
        reporter: FailureReporter,
        events: Sender<Event>,
        stop_own: Box<dyn Fn() + Send>,
    ) -> State {
        let now = Instant::now();
        let parts = plan
            .parts
            .into_iter()
            .enumerate()
            .map(|(i, (host, ranks))| Part {
                host,
                ranks,
                holder: if i == plan.own { Holder::Own } else { Holder::Awaited { since: now } },
                ceiling: plan.respawn,
            })
            .collect();
        State {
            parts,
            agents: HashMap::new(),
            spares: Vec::new(),
            next_id: 1,
            plan_respawn: plan.respawn,
            timing: plan.timing,
            start_within: plan.start_within,
            reporter,
            loggers: plan.loggers,
            ranks_per_node: plan.ranks_per_node.max(1),
            redundancy: plan.redundancy,
            events,
            stop_own,
            ended: None,
        }
    }

    fn run(mut self, arrivals: Receiver<AgentConn>, rx: Receiver<Event>, end: Sender<JobEnd>) {
        let mut last_beat = Instant::now();
        loop {
            channel::select! {
                recv(arrivals) -> a => if let Ok(a) = a { self.arrived(a) },
                recv(rx) -> ev => match ev {
                    Ok(Event::Frame(id, f)) => self.heard(id, f),
                    Ok(Event::Gone(id, why)) => self.gone(id, &why),
                    Ok(Event::OwnDone(code)) => self.own_done(code),
                    Ok(Event::GiveUp(e)) => self.end(e.code, e.reason),
                    Err(_) => break,
                },
                default(Duration::from_millis(100)) => {}
            }
            self.check_deadlines();
            if last_beat.elapsed() >= self.timing.heartbeat {
                last_beat = Instant::now();
                // A failed write shows up as that agent's reader ending.
                self.agents.values().for_each(|a| _ = a.writer.send(&Frame::Heartbeat));
            }
            if let Some(e) = &self.ended {
                // Every agent has been told (JobEnd comes before the connection closes).
                let _ = end.try_send(e.clone());
                break;
            }
        }
        for a in self.agents.values() {
            a.stop.store(true, Ordering::Relaxed);
            a.writer.close();
        }
    }

    fn arrived(&mut self, conn: AgentConn) {
        let id = self.next_id;
        self.next_id += 1;
        let AgentConn { stream, intro, peer } = conn;
        let Ok(writer) = stream.try_clone().and_then(|s| Writer::new(s, self.timing)) else {
            say(format_args!("agent of host {} ({peer}): cannot set up its connection", intro.host));
            return;
        };
        if let Some(e) = &self.ended {
            let _ = writer.send(&Frame::JobEnd { code: e.code, reason: e.reason.clone() });
            writer.close();
            return;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let events = self.events.clone();
        spawn_reader(stream, self.timing, stop.clone(), move |heard| match heard {
            Heard::Frame(Frame::Heartbeat) => true,
            Heard::Frame(f) => events.send(Event::Frame(id, f)).is_ok(),
            Heard::Gone(why) => {
                let _ = events.send(Event::Gone(id, why));
                false
            }
        });
        let agent = Agent { intro, writer, stop };
        if agent.intro.ranks.is_empty() {
            self.agents.insert(id, agent);
            self.spares.push(id);
            self.place_orphans();
            return;
        }
        let ranks = agent.intro.ranks.clone();
        let slot =
            self.parts.iter_mut().find(|p| p.ranks == ranks && matches!(p.holder, Holder::Awaited { .. }));
        match slot {
            Some(p) => {
                p.holder = Holder::Agent(id);
                p.ceiling = p.ceiling.max(agent.intro.first_incarnation.saturating_add(agent.intro.respawn));
                self.agents.insert(id, agent);
            }
            None => {
                // Fenced: a part's ranks run under one agent only (a lost one cannot come back).
                let reason = format!(
                    "ranks {}-{} are not awaited from host {}",
                    ranks.start,
                    ranks.end - 1,
                    agent.intro.host
                );
                say(format_args!("{reason}: refused"));
                let _ = agent.writer.send(&Frame::JobEnd { code: 1, reason });
                agent.writer.close();
            }
        }
    }

    fn heard(&mut self, id: u64, frame: Frame) {
        match frame {
            Frame::PartDone { code } => {
                if let Some(i) = self.part_of(id) {
                    self.part_ended(i, code);
                }
            }
            Frame::MaskRequest { rank, incarnation, mates, reason } => {
                self.mask_request(id, rank, incarnation, &mates, &reason)
            }
            other => {
                let host = self.agents.get(&id).map_or("?", |a| a.intro.host.as_str()).to_string();
                self.gone(id, &format!("sent an unexpected {} frame (host {host})", other.kind_name()));
            }
        }
    }

    /// An agent asks to mask the death of its copy `rank`: retired at the rendezvous if a mate
    /// is alive there. Only for a rank of the asking agent's own part.
    fn mask_request(&mut self, id: u64, rank: u32, incarnation: u32, mates: &[u32], reason: &str) {
        let Some(agent) = self.agents.get(&id) else { return };
        let own = self.part_of(id).is_some_and(|i| self.parts[i].ranks.contains(&rank));
        let masked = own
            && self.redundancy.is_some()
            && match self.reporter.retire_if_mates_live(&[(rank, incarnation, mates.to_vec())], reason) {
                Ok(m) => m,
                Err(e) => {
                    say(format_args!("masking rank {rank}: {e}"));
                    false
                }
            };
        if let Err(e) = agent.writer.send(&Frame::MaskReply { rank, masked }) {
            say(format_args!("answering host {} about rank {rank}: {e}", agent.intro.host));
        }
    }

    /// A part of a lost host every rank of which has a mate alive on another host: all
    /// retired at once. Whether they were.
    fn mask_lost_part(&self, ranks: std::ops::Range<u32>, reason: &str) -> bool {
        let Some(map) = &self.redundancy else { return false };
        let mut copies = Vec::new();
        for rank in ranks.clone() {
            let Some((v, _)) = map.of_physical(rank) else { return false };
            let mates: Vec<u32> = map.sphere(v).iter().copied().filter(|m| !ranks.contains(m)).collect();
            if mates.is_empty() {
                return false;
            }
            copies.push((rank, 0, mates));
        }
        // Any incarnation: a masked copy is never respawned.
        copies.iter_mut().for_each(|c| c.1 = u32::MAX);
        self.reporter.retire_if_mates_live(&copies, reason).unwrap_or_else(|e| {
            say(format_args!("masking ranks {}-{}: {e}", ranks.start, ranks.end - 1));
            false
        })
    }

    fn part_of(&self, id: u64) -> Option<usize> {
        self.parts.iter().position(|p| p.holder == Holder::Agent(id))
    }

    /// An agent's connection ended or fell silent.
    fn gone(&mut self, id: u64, why: &str) {
        let Some(agent) = self.agents.remove(&id) else { return };
        agent.stop.store(true, Ordering::Relaxed);
        agent.writer.close();
        let was_spare = self.spares.contains(&id);
        self.spares.retain(|s| *s != id);
        // An agent whose ranks are done leaves: no news.
        let Some(i) = self.part_of(id) else {
            if was_spare && self.ended.is_none() {
                say(format_args!("spare host {} lost ({why})", agent.intro.host));
            }
            return;
        };
        if self.ended.is_some() {
            return;
        }
        let reason = format!("host {} lost ({why})", agent.intro.host);
        let ranks = self.parts[i].ranks.clone();
        if self.mask_lost_part(ranks.clone(), &reason) {
            say(format_args!(
                "{reason}; its ranks {}-{} are copies with live mates on other hosts: masked, the job goes on",
                ranks.start,
                ranks.end - 1
            ));
            self.parts[i].holder = Holder::Done;
            self.finish_if_all_done();
            return;
        }
        let p = &mut self.parts[i];
        p.holder = Holder::Orphan { since: Instant::now() };
        // Not waiting for the rendezvous to apply them: the controller's heartbeats keep time.
        for rank in p.ranks.clone() {
            if let Err(e) = self.reporter.report_failed(rank, p.ceiling, &reason) {
                say(format_args!("marking rank {rank} failed: {e}"));
            }
        }
        // Its nodes' loggers died with it: the survivors' loggers await their next incarnation.
        if let Some(loggers) = &self.loggers {
            let rpn = self.ranks_per_node;
            for node in p.ranks.start / rpn..p.ranks.end.div_ceil(rpn) {
                if let Err(e) = loggers.report_failed(node, p.ceiling, &reason) {
                    say(format_args!("marking node {node}'s logger failed: {e}"));
                }
            }
        }
        say(format_args!("{reason}; ranks {}-{} wait for a spare host", p.ranks.start, p.ranks.end - 1));
        self.place_orphans();
    }

    /// Gives orphaned parts to idle spares.
    fn place_orphans(&mut self) {
        for i in 0..self.parts.len() {
            if !matches!(self.parts[i].holder, Holder::Orphan { .. }) {
                continue;
            }
            let Some(id) = self.spares.first().copied() else { return };
            self.spares.remove(0);
            let Some(spare) = self.agents.get(&id) else { continue };
            let p = &mut self.parts[i];
            let incarnation = p.ceiling.saturating_add(1);
            let order =
                Frame::TakeOver { first: p.ranks.start, count: p.ranks.end - p.ranks.start, incarnation };
            if let Err(e) = spare.writer.send(&order) {
                say(format_args!("spare host {}: {e}", spare.intro.host));
                continue;
            }
            say(format_args!(
                "host {} lost; ranks {}-{} start again on spare {} at incarnation {incarnation}",
                p.host,
                p.ranks.start,
                p.ranks.end - 1,
                spare.intro.host
            ));
            p.holder = Holder::Agent(id);
            p.host = spare.intro.host.clone();
            p.ceiling = incarnation.saturating_add(self.plan_respawn.max(spare.intro.respawn));
        }
    }

    fn own_done(&mut self, code: i32) {
        if let Some(i) = self.parts.iter().position(|p| p.holder == Holder::Own) {
            self.part_ended(i, code);
        }
    }

    /// Part `i`'s ranks ended with `code`: done, or the job fails.
    fn part_ended(&mut self, i: usize, code: i32) {
        if code == 0 {
            self.parts[i].holder = Holder::Done;
            self.finish_if_all_done();
            return;
        }
        let p = &self.parts[i];
        let why =
            format!("host {}'s ranks {}-{} ended with code {code}", p.host, p.ranks.start, p.ranks.end - 1);
        self.end(code, why);
    }

    /// Parts awaited too long at the start, or orphaned with no spare in time, end the job.
    fn check_deadlines(&mut self) {
        if self.ended.is_some() {
            return;
        }
        let now = Instant::now();
        for i in 0..self.parts.len() {
            let p = &self.parts[i];
            match p.holder {
                Holder::Awaited { since } if now - since > self.start_within => {
                    let why = format!(
                        "host {}'s agent did not connect within {:.0} s",
                        p.host,
                        self.start_within.as_secs_f64()
                    );
                    self.parts[i].holder = Holder::Orphan { since: now };
                    say(format_args!("{why}; its ranks wait for a spare host"));
                    self.place_orphans();
                }
                Holder::Orphan { since } if now - since > self.timing.timeout => {
                    let why = format!("host {} lost, and no spare host is left", p.host);
                    self.end(1, why);
                    return;
                }
                _ => {}
            }
        }
    }

    fn finish_if_all_done(&mut self) {
        if self.parts.iter().all(|p| p.holder == Holder::Done) {
            self.end(0, "every host's ranks are done".into());
        }
    }

    /// The job ended: every agent is told, and this process's ranks stop if it failed.
    fn end(&mut self, code: i32, reason: String) {
        if self.ended.is_some() {
            return;
        }
        // A failure while a lost host's ranks still wait for a spare comes of that loss.
        let orphan = self.parts.iter().find(|p| matches!(p.holder, Holder::Orphan { .. }));
        let reason = match orphan {
            Some(p) if code != 0 && !reason.contains("no spare host is left") => {
                format!("host {} lost, and no spare host is left ({reason})", p.host)
            }
            _ => reason,
        };
        if code != 0 {
            say(format_args!("{reason}; stopping the job"));
            if self.parts.iter().any(|p| p.holder == Holder::Own) {
                (self.stop_own)();
            }
        }
        for a in self.agents.values() {
            let _ = a.writer.send(&Frame::JobEnd { code, reason: reason.clone() });
        }
        self.ended = Some(JobEnd { code, reason });
    }
}
