//! A rank's connection past the gate: its admission by the coordinator, then its frames
//! forwarded to the coordinator as events; and an agent's hello handed to the controller.

use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam::channel::{self, Sender};

use super::server::{log_line, AgentConn, AgentIntro, Event, Shared};
use super::IDLE_TICK;
use crate::bootstrap::wire::{self, Frame, Read1, Wait};

/// Admission of a rank whose Hello the gate checked, then its frames forwarded to the
/// coordinator until the connection ends.
pub(super) fn serve_rank(
    mut stream: TcpStream,
    peer: SocketAddr,
    rank: u32,
    incarnation: u32,
    shared: Arc<Shared>,
    tx: Sender<Event>,
) {
    let conn = match join(&stream, peer, rank, incarnation, &shared, &tx) {
        Ok(conn) => conn,
        Err(reason) => {
            if !shared.stopping() {
                log_line(format_args!("refused {peer}: {reason}"));
                if let Ok(b) = wire::encode(&Frame::Refused { reason }) {
                    let _ = std::io::Write::write_all(&mut stream, &b);
                }
            }
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
    };
    // Admitted: the coordinator shuts this socket when it stops or drops the rank.
    if let Err(e) = stream.set_read_timeout(Some(IDLE_TICK)) {
        log_line(format_args!("rank {rank} ({peer}): set_read_timeout: {e}"));
    }
    let cancel = || shared.stopping();
    let wait = Wait { idle_deadline: None, frame_timeout: shared.opts.io_timeout, cancel: &cancel };
    loop {
        let ev = match wire::read_frame(&mut stream, wire::MAX_FRAME, &wait) {
            Ok(Read1::Frame(Frame::Contribute { round, data })) => {
                let ev = Event::Contribute { conn, rank, round, data };
                if tx.send(ev).is_err() {
                    break;
                }
                continue;
            }
            Ok(Read1::Frame(Frame::Publish { address })) => {
                if tx.send(Event::Publish { conn, rank, address }).is_err() {
                    break;
                }
                continue;
            }
            Ok(Read1::Frame(Frame::Lookup)) => {
                if tx.send(Event::Lookup { conn, rank }).is_err() {
                    break;
                }
                continue;
            }
            Ok(Read1::Frame(Frame::Bye)) => Event::Left { conn, rank, clean: true, reason: "left".into() },
            Ok(Read1::Frame(f)) => Event::Left {
                conn,
                rank,
                clean: false,
                reason: format!("protocol error: unexpected {} frame", f.kind_name()),
            },
            Ok(Read1::Eof) => {
                Event::Left { conn, rank, clean: false, reason: "connection closed without Bye".into() }
            }
            Err(_) if shared.stopping() => break,
            Err(e) => Event::Left { conn, rank, clean: false, reason: e.to_string() },
        };
        let _ = tx.send(ev);
        break;
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// Asks the coordinator to admit the rank; its connection id once welcomed.
fn join(
    stream: &TcpStream,
    peer: SocketAddr,
    rank: u32,
    incarnation: u32,
    shared: &Shared,
    tx: &Sender<Event>,
) -> std::result::Result<u64, String> {
    let writer = stream.try_clone().map_err(|e| format!("socket clone: {e}"))?;
    let conn = shared.next_conn.fetch_add(1, Ordering::Relaxed);
    let (vtx, vrx) = channel::bounded(1);
    tx.send(Event::Join { conn, rank, incarnation, peer, writer, verdict: vtx })
        .map_err(|_| "server stopping".to_string())?;
    match vrx.recv_timeout(shared.opts.io_timeout) {
        Ok(Ok(())) => Ok(conn),
        Ok(Err(reason)) => Err(reason),
        Err(_) => Err("server did not answer the admission".into()),
    }
}

/// Checks an agent's hello and gives its connection to the job's controller.
pub(super) fn hand_to_controller(
    stream: &TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    hello: Frame,
) -> std::result::Result<(), String> {
    let Frame::AgentHello { token, size, host, first, count, first_incarnation, respawn } = hello else {
        return Err(format!("expected AgentHello, got {}", hello.kind_name()));
    };
    if !wire::ct_eq(&token, &shared.token) {
        return Err(format!("wrong job token (agent of host {host})"));
    }
    if size != shared.size {
        return Err(format!("wrong job size {size} (the job has {})", shared.size));
    }
    let end = first.checked_add(count).filter(|&e| e <= shared.size);
    let Some(end) = end else {
        return Err(format!("agent of host {host}: ranks {first}+{count} outside the job's {}", shared.size));
    };
    if !shared.agents_wanted.load(Ordering::SeqCst) {
        return Err("this rendezvous has no job controller for agents".into());
    }
    let stream = stream.try_clone().map_err(|e| format!("socket clone: {e}"))?;
    let intro = AgentIntro { host, ranks: first..end, first_incarnation, respawn };
    shared.agents.send(AgentConn { peer, stream, intro }).map_err(|_| "server stopping".to_string())
}
