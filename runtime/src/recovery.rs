//! Recovery once the failed units are back: agree on the recovery epoch, restore
//! (restarted ranks), hand over determinants and ring frames, then resend (survivors) or
//! replay (restarted ranks).

use std::time::{Duration, Instant};

use reverb_ckpt::{Checkpointer, Epoch, RestoreSource};
use reverb_logger::{LogConfig, LogError, LogMode, LogUnit, LoggedEndpoint};
use reverb_transport::recovery::await_rejoin;
use reverb_transport::{Bootstrap, PeerState, Rank};

use super::detection::dead_peer_in;
use super::error::{Result, RuntimeError};
use super::report::unix_ns;
use super::rounds::{round_b_held, round_b_loss, round_b_lost, round_b_ssn, RoundAEntry};
use super::{Runtime, ENTRY_APP, ENTRY_ENDPOINT, ENTRY_SPHERES, FIRST_USER_ENTRY};

#[derive(Debug)]
pub(super) struct Replay {
    last_rsn: u64,
    targets: Vec<(Rank, u64)>,
    started: Instant,
    start_rsn: u64,
    /// The endpoint's ticks at the start: rsns that numbered no delivery.
    start_ticks: u64,
    start_sends: u64,
}

impl Runtime {
    pub(super) fn check_recoverable(log: &LogConfig, node_of: &[u32]) -> Result<()> {
        match log.mode {
            LogMode::NONE => Err(RuntimeError::Unrecoverable(
                "REVERB_LOG=none keeps no message log: the dead ranks' messages cannot be replayed".into(),
            )),
            _ if log.unit == LogUnit::Team => match &log.teams {
                Some(teams) => teams.check_whole_nodes(node_of).map_err(|e| {
                    RuntimeError::Unsupported(format!("the runtime recovers teams of whole nodes: {e}"))
                }),
                None => Err(RuntimeError::Unsupported(
                    "REVERB_LOG_UNIT=team without REVERB_LOG_TEAMS: no team to recover".into(),
                )),
            },
            _ if log.unit != LogUnit::Node => Err(RuntimeError::Unsupported(
                "the runtime recovers whole nodes or teams of whole nodes: use REVERB_LOG_UNIT=node or \
                 REVERB_LOG_TEAMS"
                    .into(),
            )),
            _ => Ok(()),
        }
    }

    /// Ends the replay once the re-execution has caught up with what the survivors saw.
    pub(super) fn note_replay(&mut self) -> Result<()> {
        let Some(replay) = &self.replay else { return Ok(()) };
        let sends = self.sends;
        let endpoint =
            self.endpoint.as_ref().ok_or_else(|| RuntimeError::InvalidArgument("finalized".into()))?;
        let rsn = endpoint.last_rsn();
        let caught_up = rsn >= replay.last_rsn
            && replay.targets.iter().all(|&(p, ssn)| endpoint.last_ssn_sent(p).unwrap_or(0) >= ssn);
        if caught_up {
            self.report.replay_ms = replay.started.elapsed().as_secs_f64() * 1e3;
            let ticks = endpoint.ticks().saturating_sub(replay.start_ticks);
            self.report.replayed_deliveries = (rsn - replay.start_rsn).saturating_sub(ticks);
            self.report.replayed_sends = sends - replay.start_sends;
            self.report.replay_end_ns = unix_ns();
            self.replay = None;
        }
        Ok(())
    }

    /// Restarted rank: connects to the current incarnation of each of `ranks` (other
    /// restarted ranks: they may have published after this one opened its provider).
    fn connect_current(&mut self, ranks: &[Rank]) -> Result<()> {
        let timeout = self.config.rejoin_timeout;
        let table = self.boot.lookup()?;
        let endpoint =
            self.endpoint.as_mut().ok_or_else(|| RuntimeError::InvalidArgument("finalized".into()))?;
        for a in table.iter().filter(|a| ranks.contains(&a.rank) && a.rank != self.rank) {
            let provider = endpoint.provider();
            let current = provider.peer_state(a.rank) == PeerState::Alive
                && provider.peer_incarnation(a.rank).is_some_and(|i| i >= a.incarnation);
            if !current {
                match &a.address {
                    Some(address) => provider.reconnect(a.rank, a.incarnation, address)?,
                    None => {
                        await_rejoin(provider, &mut self.boot, a.rank, None, timeout).map_err(|e| {
                            RuntimeError::Unrecoverable(format!(
                                "restarted rank {} did not come back within {timeout:?}: {e}",
                                a.rank
                            ))
                        })?;
                    }
                }
            }
            self.incarnation_of[a.rank as usize] = a.incarnation;
        }
        Ok(())
    }

    /// The part of recovery every rank runs alike once the endpoints and checkpointers are
    /// set up again: agree on the recovery epoch, restore (restarted ranks), hand over
    /// determinants, then resend (survivors).
    pub(super) fn recovery_collective(&mut self, failed: &[Rank], restarted: bool) -> Result<()> {
        let round_a = self.recovery_round_a(failed, restarted)?;
        // A restarted rank learns here who else restarted (nodes may fail together), and
        // connects to their new incarnations.
        let failed: Vec<Rank> = if restarted { round_a.flagged.clone() } else { failed.to_vec() };
        if restarted {
            self.connect_current(&failed)?;
        }
        self.check_failed_set(&failed, &round_a)?;
        let recovery = round_a.epochs.iter().copied().min_by_key(|&(e, _)| e).unwrap_or((0, 0));
        let commit = (recovery.0 > 0).then_some(recovery);
        if let Some(ckpt) = self.ckpt.as_mut() {
            ckpt.adopt_commit_state(commit, round_a.next)?;
        }
        let round_b = self.restore_and_hand_over(&failed, restarted, recovery.0)?;
        let all = self.boot.allgather(&round_b)?;
        let lost: Vec<String> = all
            .iter()
            .enumerate()
            .filter_map(|(r, b)| round_b_loss(b).map(|what| format!("rank {r}: {what}")))
            .collect();
        if !lost.is_empty() {
            return Err(RuntimeError::Unrecoverable(lost.join("; ")));
        }
        self.resolve_multicasts(&all, &failed, restarted)?;
        if restarted {
            self.replay_targets(&all, &failed)
        } else {
            self.resend_to_restarted(&all, &failed)
        }
    }

    /// Round A: survivors' commit state; restarted ranks say so.
    fn recovery_round_a(&mut self, failed: &[Rank], restarted: bool) -> Result<RoundA> {
        let (committed, next_epoch) = self.ckpt.as_ref().map_or((None, 1), Checkpointer::commit_state);
        // Survivors: does a failed rank's log miss what its restarted buddy held? (Restarted
        // ranks do not know the history; every rank decides from the survivors' flags.)
        let cut = !restarted && failed.iter().any(|r| self.logs_cut.contains(r));
        let committed = committed.map_or((0, 0), |(e, s)| (e, s as u8));
        let all = self.boot.allgather(&RoundAEntry { restarted, committed, next_epoch, cut }.encode())?;
        // A retired rank (a masked copy under partial redundancy) takes no part.
        let retired = (0..all.len()).filter(|&r| all[r].is_empty()).map(|r| r as Rank).collect();
        let mut round =
            RoundA { flagged: Vec::new(), cut_seen_by: Vec::new(), epochs: Vec::new(), next: 1, retired };
        for (r, b) in all.iter().enumerate().filter(|(_, b)| !b.is_empty()) {
            let entry = RoundAEntry::decode(b)
                .map_err(|e| RuntimeError::InvalidArgument(format!("rank {r}: {e}")))?;
            if entry.cut {
                round.cut_seen_by.push(r as Rank);
            }
            if entry.restarted {
                round.flagged.push(r as Rank);
                continue;
            }
            round.epochs.push((entry.committed.0, entry.committed.1 as usize));
            round.next = round.next.max(entry.next_epoch);
        }
        Ok(round)
    }

    /// Whether the ranks restarted are the ones this rank recovers, with their logs intact;
    /// then notes the ranks whose log buddy is among them (their logs are cut).
    fn check_failed_set(&mut self, failed: &[Rank], round_a: &RoundA) -> Result<()> {
        if round_a.flagged != failed {
            return Err(RuntimeError::Unrecoverable(format!(
                "another failure during recovery: restarted {:?}, rank {} recovered {failed:?}",
                round_a.flagged, self.rank
            )));
        }
        self.check_logs_survived(failed)?;
        self.check_log_buddies_live(failed, &round_a.retired)?;
        if !round_a.cut_seen_by.is_empty() {
            return Err(RuntimeError::Unrecoverable(format!(
                "ranks {failed:?} were lost before a checkpoint followed the restart of a log \
                 buddy (ranks {:?} saw it): message logs lost from before that restart",
                round_a.cut_seen_by
            )));
        }
        let buddies = reverb_logger::buddy::BuddyMap::from_nodes(&self.unit_of)?;
        for r in (0..self.size).filter(|r| buddies.buddy_of(*r).is_some_and(|b| failed.contains(&b))) {
            if !failed.contains(&r) && !self.logs_cut.contains(&r) {
                self.logs_cut.push(r);
            }
        }
        Ok(())
    }

    /// Restarted ranks restore their image of `epoch`; everyone hands over determinants (and
    /// ring frames under pessimistic-rb). Returns this rank's round B contribution: a restarted
    /// rank's held-through ssn per peer, a survivor's view of each restarted rank, or (1, what
    /// was lost).
    fn restore_and_hand_over(&mut self, failed: &[Rank], restarted: bool, epoch: Epoch) -> Result<Vec<u8>> {
        // A restore failure is reported in round B.
        let mut outcome: std::result::Result<(), String> = Ok(());
        if restarted {
            outcome = self.restore_own(epoch);
        }
        let endpoint =
            self.endpoint.as_mut().ok_or_else(|| RuntimeError::InvalidArgument("finalized".into()))?;
        let dets = endpoint.gather_determinants(&mut self.boot, failed)?;
        if self.config.log.mode == LogMode::PESSIMISTIC_RB {
            // Receiver-based: the restarted rank's log is the frames its buddy's ring holds;
            // they go into its restored channels before the senders resend what is missing.
            let frames = endpoint.gather_frames(&mut self.boot, failed)?;
            if restarted && outcome.is_ok() {
                match endpoint.replay_frames(frames, failed) {
                    Ok(n) => self.report.ring_frames_replayed = n as u64,
                    Err(e) => outcome = Err(format!("replaying the logged frames: {e}")),
                }
            }
        }
        let round_b = match &outcome {
            Ok(()) if restarted => {
                let mine: Vec<_> = dets.iter().filter(|d| d.receiver == self.rank).copied().collect();
                endpoint.begin_replay(&mine)?;
                self.replay = Some(Replay {
                    last_rsn: mine.iter().map(|d| d.rsn).max().unwrap_or(0),
                    targets: Vec::new(),
                    started: Instant::now(),
                    start_rsn: endpoint.last_rsn(),
                    start_ticks: endpoint.ticks(),
                    start_sends: self.sends,
                });
                // What the checkpoint covers, plus what the log replayed (rb): the senders
                // resend from the next ssn.
                round_b_held((0..self.size).map(|p| endpoint.held_through(p)))
            }
            Ok(()) => {
                // Survivors: how far each restarted rank had got, as seen from here.
                round_b_held((0..self.size).map(|p| {
                    if failed.contains(&p) {
                        endpoint.covered_from(p)
                    } else {
                        0
                    }
                }))
            }
            Err(lost) => round_b_lost(lost),
        };
        Ok(round_b)
    }

    /// Restarted rank: from round B, the ssn each survivor had delivered from it (the replay
    /// ends when its re-execution has sent that far).
    fn replay_targets(&mut self, all: &[Vec<u8>], failed: &[Rank]) -> Result<()> {
        if let Some(replay) = self.replay.as_mut() {
            // A retired rank (empty) sends nothing more: nothing to wait for from it.
            let survivors =
                all.iter().enumerate().filter(|(p, b)| !failed.contains(&(*p as Rank)) && !b.is_empty());
            for (p, b) in survivors {
                let seen = round_b_ssn(b, self.rank).ok_or_else(|| {
                    RuntimeError::InvalidArgument(format!("recovery round B from rank {p}"))
                })?;
                replay.targets.push((p as Rank, seen));
            }
        }
        self.note_replay()
    }

    /// Collective-aware logging, every rank: the survivors gather the payloads of the
    /// multicast stubs they are about to resend (round B says from which ssn).
    fn resolve_multicasts(&mut self, all: &[Vec<u8>], failed: &[Rank], restarted: bool) -> Result<()> {
        let endpoint =
            self.endpoint.as_mut().ok_or_else(|| RuntimeError::InvalidArgument("finalized".into()))?;
        if !endpoint.caml() {
            return Ok(());
        }
        let mut from = Vec::new();
        for &r in failed.iter().filter(|_| !restarted) {
            let covered = all
                .get(r as usize)
                .and_then(|b| round_b_ssn(b, self.rank))
                .ok_or_else(|| RuntimeError::InvalidArgument(format!("recovery round B from rank {r}")))?;
            from.push((r, covered + 1));
        }
        endpoint.resolve_multicasts(&mut self.boot, &from).map_err(|e| match e {
            LogError::MulticastLost(what) => {
                RuntimeError::Unrecoverable(format!("collective-aware logging: {what}"))
            }
            e => e.into(),
        })
    }

    /// Survivor: resends its logged messages to each restarted rank from the first ssn that
    /// rank does not hold (round B).
    fn resend_to_restarted(&mut self, all: &[Vec<u8>], failed: &[Rank]) -> Result<()> {
        let endpoint =
            self.endpoint.as_mut().ok_or_else(|| RuntimeError::InvalidArgument("finalized".into()))?;
        for &r in failed {
            let covered = all
                .get(r as usize)
                .and_then(|b| round_b_ssn(b, self.rank))
                .ok_or_else(|| RuntimeError::InvalidArgument(format!("recovery round B from rank {r}")))?;
            if endpoint.logs_payload_with(r) {
                drain_stale_failures(endpoint, failed)?;
                match endpoint.resend_from(r, covered + 1) {
                    Ok(_) => {}
                    // Collected after every resend was posted: a send that failed while
                    // the peer was dead.
                    Err(e) if dead_peer_in(&e).is_some_and(|p| failed.contains(&p)) => {
                        drain_stale_failures(endpoint, failed)?
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    /// A failed rank whose log buddy failed with it lost its determinants (what the buddy's
    /// ring held as stable is no longer piggybacked anywhere): a wildcard receive could
    /// replay in another order and give a wrong answer, so the job stops. Every rank decides
    /// alike from the same `failed` list.
    fn check_logs_survived(&self, failed: &[Rank]) -> Result<()> {
        let pairs = self.buddies_among(failed, failed)?;
        // Each pair once: rank 1 with buddy 3, not also rank 3 with buddy 1.
        let lost: Vec<String> = pairs
            .iter()
            .filter(|&&(r, b)| !(b < r && pairs.contains(&(b, r))))
            .map(|(r, b)| format!("rank {r} and its log buddy rank {b} were lost together"))
            .collect();
        if lost.is_empty() {
            return Ok(());
        }
        Err(RuntimeError::Unrecoverable(format!(
            "{} (their message logs lost with them: a replay could not follow the original \
             receive order)",
            lost.join("; ")
        )))
    }

    /// A failed rank whose log buddy was retired (a copy whose death partial redundancy
    /// masked) has logged nothing since (`LoggedEndpoint::retire`): under the pessimistic
    /// protocols its later wildcard deliveries are known nowhere, and a replay could follow
    /// another order (the master-worker's restarted leader then waited for a request its
    /// workers had sent to the order it no longer kept: chaos seed 2040, trial 378). Causal
    /// logging keeps such determinants unstable, piggybacked to the survivors' detLogs.
    fn check_log_buddies_live(&self, failed: &[Rank], retired: &[Rank]) -> Result<()> {
        let mode = self.config.log.mode;
        if retired.is_empty() || (mode != LogMode::PESSIMISTIC_SB && mode != LogMode::PESSIMISTIC_RB) {
            return Ok(());
        }
        let lost: Vec<String> = self
            .buddies_among(failed, retired)?
            .into_iter()
            .map(|(r, b)| format!("rank {r} (its log buddy {b} was retired, a masked copy)"))
            .collect();
        if lost.is_empty() {
            return Ok(());
        }
        Err(RuntimeError::Unrecoverable(format!(
            "message logs stopped with a retired buddy: {}; under {mode} its deliveries since are \
             logged nowhere",
            lost.join(", ")
        )))
    }

    /// The (rank, log buddy) pairs of `ranks` whose log buddy is in `set`.
    fn buddies_among(&self, ranks: &[Rank], set: &[Rank]) -> Result<Vec<(Rank, Rank)>> {
        let buddies = reverb_logger::buddy::BuddyMap::from_nodes(&self.unit_of)?;
        Ok(ranks
            .iter()
            .filter_map(|&r| buddies.buddy_of(r).filter(|b| set.contains(b)).map(|b| (r, b)))
            .collect())
    }

    /// Restarted rank: its image of `epoch` (0: none, start over) into the endpoint and the
    /// application state. `Err` says what was lost.
    fn restore_own(&mut self, epoch: Epoch) -> std::result::Result<(), String> {
        if epoch == 0 {
            self.report.restored_from = "initial state (no checkpoint yet)".into();
            return Ok(());
        }
        let rank = self.rank;
        let (Some(ckpt), Some(endpoint)) = (self.ckpt.as_mut(), self.endpoint.as_mut()) else {
            return Err("no checkpointer".into());
        };
        let restored = ckpt
            .restore(endpoint.provider(), rank, epoch)
            .map_err(|e| format!("checkpoint of epoch {epoch} lost at every level: {e}"))?;
        let snapshot = restored
            .image
            .entry(ENTRY_ENDPOINT)
            .ok_or_else(|| format!("epoch {epoch} image has no endpoint state"))?;
        endpoint.restore_snapshot(snapshot).map_err(|e| format!("endpoint state of epoch {epoch}: {e}"))?;
        self.restored_app = restored.image.entry(ENTRY_APP).map(<[u8]>::to_vec);
        if let (Some(spheres), Some(counts)) = (self.spheres.as_mut(), restored.image.entry(ENTRY_SPHERES)) {
            spheres.restore_counts(counts).map_err(|e| format!("sphere counts of epoch {epoch}: {e}"))?;
        }
        self.restored_extra = restored
            .image
            .ids()
            .filter(|&id| id >= FIRST_USER_ENTRY)
            .filter_map(|id| Some((id, restored.image.entry(id)?.to_vec())))
            .collect();
        self.report.restored_epoch = epoch;
        self.report.restored_from = match restored.source {
            RestoreSource::Local => "own copy".into(),
            RestoreSource::Buddy(b) => format!("buddy copy at rank {b}"),
            RestoreSource::Parity { members, parity_hosts } => {
                format!("Reed-Solomon from ranks {members:?} and parity {parity_hosts:?}")
            }
        };
        Ok(())
    }
}

/// What round A of a recovery told every rank.
struct RoundA {
    /// Ranks that said they restarted.
    flagged: Vec<Rank>,
    /// Survivors that found a failed rank's log cut (its log buddy restarted since its last
    /// checkpoint).
    cut_seen_by: Vec<Rank>,
    /// Each survivor's committed (epoch, slot).
    epochs: Vec<(Epoch, usize)>,
    /// The next epoch to write.
    next: Epoch,
    /// Ranks retired from the job (masked copies under partial redundancy): no part in it.
    retired: Vec<Rank>,
}

/// Collects the completions of sends that failed while `recovered` ranks were dead (they
/// are stale once those ranks are back), so they do not surface as errors later.
fn drain_stale_failures(endpoint: &mut LoggedEndpoint, recovered: &[Rank]) -> Result<()> {
    // Each call surfaces at most one failed completion; the queue is finite.
    for _ in 0..1 << 16 {
        match endpoint.progress() {
            Ok(()) => return Ok(()),
            Err(e) => match dead_peer_in(&e) {
                Some(p)
                    if recovered.contains(&p) && endpoint.provider().peer_state(p) == PeerState::Alive => {}
                _ => return Err(e.into()),
            },
        }
    }
    Err(RuntimeError::Timeout { what: "draining stale send failures".into(), after: Duration::ZERO })
}
