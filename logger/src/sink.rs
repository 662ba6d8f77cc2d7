//! Logger-core offload for [`crate::LoggedEndpoint`]: under `reverb run --logger ...`
//! (`REVERB_LOGGER_SEGMENT` set) the endpoint attaches its node's [`NodeLogClient`] and only
//! enqueues; the logger core does the one-sided writes into the buddy node's ring.
//!
//! - `pessimistic-sb` and `causal`: determinants go into the node's `DetQueue` (the
//!   `DeterminantSink::NodeQueue` seam); stable once the logger core's start index passes them.
//! - `pessimistic-rb`: the received frame goes into this rank's payload lane and the
//!   determinant (wildcard receives) into the node queue; delivery waits, bounded, until the
//!   logger published both as durable.
//!
//! Every failure of that path is a [`LogError`]: `BuddyDead`, `LoggerGone`, `LaneFull`
//! (back-pressure that outlived the bound), or a timeout. Nothing waits unbounded.

use std::time::Duration;

use reverb_transport::Rank;

use crate::core::{vars, CoreError, NodeLogClient, Ticket};
use crate::determinant::Determinant;
use crate::error::{LogError, Result};
use crate::logring::{self, RecordKind};
use crate::stats::LogStats;

/// This rank's attachment to its node's logger core.
#[derive(Debug)]
pub struct LoggerOffload {
    client: NodeLogClient,
}

impl LoggerOffload {
    /// Attaches as the producer of payload lane `lane` (this rank's index on its node) when
    /// the launcher started logger cores (`REVERB_LOGGER_SEGMENT` set); `None` otherwise.
    pub fn attach_from_env(lane: u64) -> Result<Option<Self>> {
        if reverb_transport::config::env_os(vars::SEGMENT)?.is_none() {
            return Ok(None);
        }
        let client = NodeLogClient::attach_from_env(lane).map_err(LogError::from)?;
        Ok(Some(LoggerOffload { client }))
    }

    pub fn client(&self) -> &NodeLogClient {
        &self.client
    }

    /// Receiver-based logging of one delivery: enqueues `frame` (if its payload is logged)
    /// and `determinant` (if the receive needs one), then waits until both are durable at
    /// the buddy node. A full lane is retried within `timeout`, then reported as `LaneFull`.
    pub fn log_delivery(
        &self,
        frame: Option<&[u8]>,
        determinant: Option<Determinant>,
        timeout: Duration,
        stats: &LogStats,
    ) -> Result<()> {
        let mut tickets = [Ticket::default(); 2];
        if let Some(frame) = frame {
            tickets[0] = match self.client.enqueue_payload(frame) {
                Ok(t) => t,
                Err(CoreError::LaneFull { lane, needed, free }) => {
                    LogStats::bump(&stats.back_pressure_events, 1);
                    match self.client.enqueue_payload_wait(frame, timeout) {
                        Ok(t) => t,
                        Err(CoreError::Timeout(_)) => return Err(LogError::LaneFull { lane, needed, free }),
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(e) => return Err(e.into()),
            };
            LogStats::bump(&stats.payload_bytes_logged, frame.len() as u64);
        }
        if let Some(d) = determinant {
            tickets[1] = self.client.enqueue_determinant_wait(&d, timeout).map_err(LogError::from)?;
            LogStats::bump(&stats.determinant_bytes_logged, Determinant::WIRE_LEN as u64);
            LogStats::bump(&stats.determinants_logged, 1);
            LogStats::bump(&stats.determinant_writes, 1);
        }
        for t in tickets {
            self.client.wait_durable(t, timeout).map_err(LogError::from)?;
        }
        Ok(())
    }

    /// Replay: the determinants of `rank` in the rings this node's logger core hosts (for the
    /// nodes that log to it), from a snapshot the logger writes on request.
    pub fn determinants_hosted_for(&self, rank: Rank, timeout: Duration) -> Result<Vec<Determinant>> {
        let mut held = Vec::new();
        for (_, image) in self.client.hosted_ring_images(timeout)? {
            for record in logring::scan(&image)?.records.iter().filter(|r| r.kind == RecordKind::Determinants)
            {
                held.extend(record.determinants()?.into_iter().filter(|d| d.receiver == rank));
            }
        }
        Ok(held)
    }

    /// Replay (`pessimistic-rb`): the logged frames (envelope + payload) received by `rank`, in
    /// log order, from the rings this node's logger core hosts.
    pub fn frames_hosted_for(&self, rank: Rank, timeout: Duration) -> Result<Vec<Vec<u8>>> {
        let mut frames = Vec::new();
        for (_, image) in self.client.hosted_ring_images(timeout)? {
            frames.extend(frames_for(&logring::scan(&image)?, rank)?);
        }
        Ok(frames)
    }

    /// GC after a coordinated checkpoint (every rank of the node quiesced at it): the logger
    /// core drops everything durable from the buddy ring.
    pub fn trim(&self, timeout: Duration) -> Result<()> {
        self.client.trim_wait(timeout).map_err(LogError::from)
    }
}

/// The payload records of `scan` whose envelope names `rank` as the receiver, in log order.
pub(crate) fn frames_for(scan: &logring::RingScan, rank: Rank) -> Result<Vec<Vec<u8>>> {
    let mut frames = Vec::new();
    for record in scan.records.iter().filter(|r| r.kind == RecordKind::Payload) {
        let (envelope, _) = crate::envelope::Envelope::decode(&record.data)?;
        if envelope.receiver == rank {
            frames.push(record.data.clone());
        }
    }
    Ok(frames)
}
