//! This node's log path into its buddy's ring, and the copy of every record since the last
//! trim that is written again into a respawned buddy's fresh ring.

use std::collections::VecDeque;

use reverb_transport::{Provider, RemoteRegion, TransportError};

use super::CoreError;
use crate::error::LogError;
use crate::logring::{LogRingWriter, RecordKind};

/// its ring dies with it, and these are written again into its next incarnation's ring.
struct Shadowed {
    ticket: u64,
    kind: RecordKind,
    data: Vec<u8>,
}

/// This node's log path: the writer into the buddy's ring (None while the buddy is down),
/// the copy kept for a re-flush, and the entries not yet durable.
#[derive(Default)]
pub(super) struct LogPath {
    pub(super) writer: Option<LogRingWriter>,
    shadow: VecDeque<Shadowed>,
    /// (ring ticket, queue end, count)
    pub(super) pending_dets: VecDeque<(u64, u64, u64)>,
    /// (ring ticket, lane, lane end)
    pub(super) pending_frames: VecDeque<(u64, u64, u64)>,
    /// The current writer's durable watermark.
    pub(super) durable: u64,
    /// The buddy ring the log goes to (kept while the buddy is only suspected).
    pub(super) remote: Option<RemoteRegion>,
}

impl LogPath {
    pub(super) fn append(
        &mut self,
        provider: &mut dyn Provider,
        kind: RecordKind,
        data: Vec<u8>,
    ) -> Result<u64, CoreError> {
        let writer = self.writer.as_mut().ok_or_else(|| CoreError::Config("no log path".into()))?;
        let ticket = writer.append(provider, kind, &data)?;
        self.shadow.push_back(Shadowed { ticket, kind, data });
        Ok(ticket)
    }

    /// Drops everything durable (the ring's and the kept copy's).
    pub(super) fn trim(&mut self, provider: &mut dyn Provider) -> Result<(), CoreError> {
        if let Some(writer) = self.writer.as_mut() {
            writer.trim(provider, self.durable)?;
        }
        while self.shadow.front().is_some_and(|r| r.ticket <= self.durable) {
            self.shadow.pop_front();
        }
        Ok(())
    }

    /// Drops the writer (its buddy died or is replaced); its puts still in flight complete
    /// unseen (its provider owner is closed).
    pub(super) fn drop_writer(&mut self, provider: &mut dyn Provider) {
        if let Some(writer) = self.writer.take() {
            writer.close(provider);
        }
    }

    /// Points the log at the buddy's new ring and writes the kept records again, in order;
    /// entries still in flight follow their records. Returns the records written.
    pub(super) fn retarget(
        &mut self,
        provider: &mut dyn Provider,
        remote: RemoteRegion,
    ) -> Result<usize, CoreError> {
        let mut writer = LogRingWriter::new(provider, remote)?;
        let mut moved = std::collections::HashMap::with_capacity(self.shadow.len());
        for r in self.shadow.iter_mut() {
            let ticket = writer.append(provider, r.kind, &r.data)?;
            moved.insert(r.ticket, ticket);
            r.ticket = ticket;
        }
        let remap = |t: &mut u64| -> Result<(), CoreError> {
            *t = *moved.get(t).ok_or_else(|| CoreError::Malformed {
                what: "log re-flush",
                detail: format!("ticket {t} in flight has no kept record"),
            })?;
            Ok(())
        };
        for p in self.pending_dets.iter_mut() {
            remap(&mut p.0)?;
        }
        for p in self.pending_frames.iter_mut() {
            remap(&mut p.0)?;
        }
        self.durable = 0;
        self.drop_writer(provider);
        self.writer = Some(writer);
        self.remote = Some(remote);
        Ok(self.shadow.len())
    }
}

/// Whether an error means the buddy path is gone (rather than a bug or a bad argument).
pub(super) fn path_error(e: &CoreError) -> bool {
    matches!(
        e,
        CoreError::Transport(TransportError::PeerDead(_))
            | CoreError::Log(LogError::WriteFailed(_))
            | CoreError::Log(LogError::Transport(TransportError::PeerDead(_)))
    )
}
