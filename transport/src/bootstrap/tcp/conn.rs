//! One admitted connection's reader: the Hello handshake, then frames forwarded to the
//! coordinator as events.

use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crossbeam::channel::{self, Sender};

use super::server::{log_line, AgentConn, AgentIntro, Event, Shared};
use super::{IDLE_TICK, TICK};
use crate::bootstrap::wire::{self, Frame, Read1, Wait};
use crate::error::TransportError;

/// Handshake, then forward frames to the coordinator until the connection ends.
pub(super) fn serve_conn(mut stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>, tx: Sender<Event>) {
    let admitted = handshake(&mut stream, peer, &shared, &tx);
    shared.pending.fetch_sub(1, Ordering::SeqCst);
    let (conn, rank) = match admitted {
        // The controller owns the agent's connection now.
        Ok(Admitted::Agent) => return,
        Ok(Admitted::Rank(conn, rank)) => (conn, rank),
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

/// Who a handshake admitted.
enum Admitted {
    /// A rank, welcomed by the coordinator: its connection id and rank.
    Rank(u64, u32),
    /// A per-host agent, handed to the controller.
    Agent,
}

/// Reads and checks the Hello; on success the coordinator has admitted (and welcomed) it, or
/// (an agent's hello) the controller has its connection.
fn handshake(
    stream: &mut TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    tx: &Sender<Event>,
) -> std::result::Result<Admitted, String> {
    let setup = stream
        .set_nonblocking(false)
        .and_then(|_| stream.set_read_timeout(Some(TICK)))
        .and_then(|_| stream.set_write_timeout(Some(shared.opts.io_timeout)))
        .and_then(|_| stream.set_nodelay(true));
    setup.map_err(|e| format!("socket setup: {e}"))?;
    let cancel = || shared.stopping();
    let wait = Wait {
        idle_deadline: Some(Instant::now() + shared.opts.hello_timeout),
        frame_timeout: shared.opts.hello_timeout,
        cancel: &cancel,
    };
    let hello = match wire::read_frame(stream, wire::MAX_HELLO, &wait) {
        Ok(Read1::Frame(f)) => f,
        Ok(Read1::Eof) => return Err("closed before Hello".into()),
        Err(TransportError::Timeout(_)) => {
            return Err(format!("no Hello within {:?}", shared.opts.hello_timeout))
        }
        Err(e) => return Err(format!("bad Hello: {e}")),
    };
    if let Frame::AgentHello { .. } = hello {
        return hand_to_controller(stream, peer, shared, hello).map(|()| Admitted::Agent);
    }
    let Frame::Hello { token, rank, size, incarnation } = hello else {
        return Err(format!("expected Hello, got {}", hello.kind_name()));
    };
    if !wire::ct_eq(&token, &shared.token) {
        return Err(format!("wrong job token (claimed rank {rank})"));
    }
    if size != shared.size {
        return Err(format!("wrong job size {size} (the job has {})", shared.size));
    }
    if rank >= shared.size {
        return Err(format!("rank {rank} out of range (size {})", shared.size));
    }
    let writer = stream.try_clone().map_err(|e| format!("socket clone: {e}"))?;
    let conn = shared.next_conn.fetch_add(1, Ordering::Relaxed);
    let (vtx, vrx) = channel::bounded(1);
    tx.send(Event::Join { conn, rank, incarnation, peer, writer, verdict: vtx })
        .map_err(|_| "server stopping".to_string())?;
    match vrx.recv_timeout(shared.opts.io_timeout) {
        Ok(Ok(())) => Ok(Admitted::Rank(conn, rank)),
        Ok(Err(reason)) => Err(reason),
        Err(_) => Err("server did not answer the admission".into()),
    }
}

/// Checks an agent's hello and gives its connection to the job's controller.
fn hand_to_controller(
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
