//! A trial's plan: its app, protocol, fault and the fault's phase, drawn from (seed, trial)
//! alone.

use super::phase::{Phase, Timeline};
use super::size::MsgSize;

pub(super) const RANKS: u32 = 8;
pub(super) const RANKS_PER_NODE: u32 = 2;
pub(super) const APPS: [&str; 4] = ["stencil", "master-worker", "ring", "collectives"];
/// The apps of campaigns across hosts.
pub(super) const HOST_APPS: [&str; 3] = ["stencil", "master-worker", "ring"];
/// The app the collective kind runs (its runs log collective-aware, `REVERB_LOG_CAML=1`).
pub(super) const COLLECTIVE_APP: &str = "collectives";
pub(super) const PROTOCOLS: [&str; 4] = ["causal", "pessimistic-sb", "pessimistic-rb", "none"];
/// `REVERB_FAULT_CKPT` stages, in a checkpoint's order.
pub(super) const CKPT_STAGES: [&str; 6] =
    ["entered", "local-written", "buddy-body-landed", "buddy-flipped", "voting", "committed"];
/// `Runtime::init`'s collective steps a fault can hit (`REVERB_FAULT_INIT`).
const INIT_STEPS: [&str; 2] = ["log-rings", "ckpt-slots"];
/// The variable that has the lead agent of a host kill itself (`HOST@MS`).
pub(super) const AGENT_FAULT_VAR: &str = "REVERB_FAULT_AGENT";
/// Fault kinds, cycled through by trial number.
pub const FAULT_KINDS: [&str; 12] = [
    "none",
    "rank",
    "node",
    "checkpoint",
    "replay",
    "two-nodes",
    "init",
    "gc",
    "replica",
    "replica-then-rank",
    "collective",
    "helper",
];
/// The redundancy of the replica kinds' jobs: the even virtual ranks have a second copy.
pub(super) const REPLICA_DEGREE: &str = "1.5";

/// Small runs: a trial takes a second or two. (iterations, size, checkpoint interval); each
/// app's data per message is at most `size::APP_DATA_MAX` bytes (a 64-value halo row, a
/// 256-byte ring block, a 512-byte cell, 16-byte requests), which `--msg-bytes` pads.
fn app_params(app: &str) -> (u64, u64, u64) {
    match app {
        "stencil" => (60, 64, 10),
        "master-worker" => (12, 2000, 3),
        "collectives" => (16, 512, 4),
        _ => (40, 256, 8),
    }
}

/// The arguments of `reverb app APP` in a trial on one host, its main messages `size` big.
pub(super) fn app_args(app: &str, size: &MsgSize) -> Vec<String> {
    let (iters, n, every) = app_params(app);
    let mut a: Vec<String> =
        ["--iters", &iters.to_string(), "--size", &n.to_string(), "--ckpt-every", &every.to_string()]
            .iter()
            .map(|s| s.to_string())
            .collect();
    a.extend(size.app_args());
    a
}

/// An app's iterations and checkpoint interval on one host.
pub(super) fn timeline(app: &str) -> Timeline {
    let (iters, _, every) = app_params(app);
    Timeline { iters, every }
}

/// The fault a trial injects.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    None,
    /// A rank dies after its SENDS-th send; the launcher takes its node down.
    Rank {
        rank: u32,
        sends: u64,
    },
    /// Both ranks of a node, each at a random point of its own; the first death takes the node.
    Node {
        node: u32,
        sends: [u64; 2],
    },
    /// A rank dies inside checkpoint EPOCH at STAGE.
    Checkpoint {
        rank: u32,
        epoch: u64,
        stage: &'static str,
    },
    /// A rank dies, then its restarted incarnation dies again after `replay_sends` sends.
    Replay {
        rank: u32,
        sends: u64,
        replay_sends: u64,
    },
    /// Ranks on two different nodes die at the same point.
    TwoNodes {
        ranks: [u32; 2],
        sends: u64,
    },
    /// A rank dies inside `Runtime::init`, just before STEP's collective; with `late`, a rank
    /// of another node joins that collective only once the dead node is back (it misses
    /// the abort and must join the recovery from the resumed round).
    Init {
        rank: u32,
        step: &'static str,
        late: Option<u32>,
    },
    /// A rank dies at the log GC after checkpoint EPOCH committed; with `late`, a rank of
    /// another node joins that GC only once the dead node is back.
    Gc {
        rank: u32,
        epoch: u64,
        late: Option<u32>,
    },
    /// A rank dies at the log GC after checkpoint EPOCH committed, past its collective,
    /// before its logs are trimmed.
    GcTrim {
        rank: u32,
        epoch: u64,
    },
    /// Under partial redundancy (`REPLICA_DEGREE`): copy `copy` (physical rank) of a
    /// replicated rank dies after `sends` sends; its death is masked.
    Replica {
        copy: u32,
        sends: u64,
    },
    /// Under partial redundancy: copy `copy` dies early (masked), then physical rank `rank`
    /// of another node dies later: its node is recovered without the retired copy.
    ReplicaThenRank {
        copy: u32,
        copy_sends: u64,
        rank: u32,
        sends: u64,
    },
    /// Under collective-aware logging (the collectives app): a rank dies after its SENDS-th
    /// send, inside a broadcast or an all-reduce.
    Collective {
        rank: u32,
        sends: u64,
    },
    /// Processes of `RANKS_PER_NODE` objects restarted in parallel (`--objects`,
    /// `--parallel-recovery 2`): node NODE's first object dies after SENDS sends; the
    /// restarted second object, replaying on a helper's core, dies after `replay_sends`.
    Helper {
        node: u32,
        sends: u64,
        replay_sends: u64,
    },
    /// A whole host lost AT_MS into the job: everything on it killed, its wire removed.
    Host {
        host: String,
        at_ms: u64,
    },
    /// A host's wire cut AT_MS into the job; its processes keep running, unreachable.
    NetCut {
        host: String,
        at_ms: u64,
    },
    /// A host's agent killed alone, AT_MS after it started its ranks (`REVERB_FAULT_AGENT`).
    Agent {
        host: String,
        at_ms: u64,
    },
    /// Host FIRST lost AT_MS into the job, then SECOND lost AFTER_MS once FIRST's ranks start
    /// again on a spare (during their recovery); `buddies`: one holds the other's logs.
    HostInRecovery {
        first: String,
        at_ms: u64,
        second: String,
        after_ms: u64,
        buddies: bool,
    },
}

impl Fault {
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Rank { .. } => "rank",
            Fault::Node { .. } => "node",
            Fault::Checkpoint { .. } => "checkpoint",
            Fault::Replay { .. } => "replay",
            Fault::TwoNodes { .. } => "two-nodes",
            Fault::Init { .. } => "init",
            Fault::Gc { .. } | Fault::GcTrim { .. } => "gc",
            Fault::Host { .. } => "host",
            Fault::NetCut { .. } => "net-cut",
            Fault::Agent { .. } => "agent",
            Fault::HostInRecovery { .. } => "host-in-recovery",
            Fault::Replica { .. } => "replica",
            Fault::ReplicaThenRank { .. } => "replica-then-rank",
            Fault::Collective { .. } => "collective",
            Fault::Helper { .. } => "helper",
        }
    }

    /// The job's `--redundancy`, for the replica kinds.
    pub(super) fn redundancy(&self) -> Option<&'static str> {
        matches!(self, Fault::Replica { .. } | Fault::ReplicaThenRank { .. }).then_some(REPLICA_DEGREE)
    }

    /// The job's `--objects` and `--parallel-recovery`, for the helper kind.
    pub(super) fn objects(&self) -> Option<(u32, u32)> {
        matches!(self, Fault::Helper { .. }).then_some((RANKS_PER_NODE, 2))
    }

    /// The environment that injects it.
    pub(super) fn env(&self) -> Vec<(String, String)> {
        let fault = |v: String| vec![("REVERB_FAULT".to_string(), v)];
        match self {
            Fault::None => Vec::new(),
            Fault::Rank { rank, sends } | Fault::Collective { rank, sends } => {
                fault(format!("{rank}:{sends}"))
            }
            Fault::Node { node, sends } => {
                let r = node * RANKS_PER_NODE;
                fault(format!("{r}:{},{}:{}", sends[0], r + 1, sends[1]))
            }
            Fault::Checkpoint { rank, epoch, stage } => {
                vec![("REVERB_FAULT_CKPT".to_string(), format!("{rank}:{epoch}:{stage}"))]
            }
            Fault::Replay { rank, sends, replay_sends } => {
                fault(format!("{rank}:{sends},{rank}:{replay_sends}@1"))
            }
            Fault::Helper { node, sends, replay_sends } => {
                let r = node * RANKS_PER_NODE;
                fault(format!("{r}:{sends},{}:{replay_sends}@1", r + 1))
            }
            Fault::TwoNodes { ranks, sends } => fault(format!("{}:{sends},{}:{sends}", ranks[0], ranks[1])),
            Fault::Replica { copy, sends } => fault(format!("{copy}:{sends}")),
            Fault::ReplicaThenRank { copy, copy_sends, rank, sends } => {
                fault(format!("{copy}:{copy_sends},{rank}:{sends}"))
            }
            Fault::Init { rank, step, late } => {
                let late = late.map_or(String::new(), |l| format!(",{l}:{step}:late"));
                vec![("REVERB_FAULT_INIT".to_string(), format!("{rank}:{step}{late}"))]
            }
            Fault::Gc { rank, epoch, late } => {
                let late = late.map_or(String::new(), |l| format!(",{l}:{epoch}:late"));
                vec![("REVERB_FAULT_GC".to_string(), format!("{rank}:{epoch}{late}"))]
            }
            Fault::GcTrim { rank, epoch } => {
                vec![("REVERB_FAULT_GC".to_string(), format!("{rank}:{epoch}:trim"))]
            }
            Fault::Agent { host, at_ms } => vec![(AGENT_FAULT_VAR.to_string(), format!("{host}@{at_ms}"))],
            // Injected from outside the job (`--host-kill-cmd`, `--net-cut-cmd`).
            Fault::Host { .. } | Fault::NetCut { .. } | Fault::HostInRecovery { .. } => Vec::new(),
        }
    }

    pub(super) fn respawns(&self) -> u32 {
        match self {
            // A masked copy needs no respawn: one taken would be a failure not masked.
            Fault::None | Fault::Replica { .. } => 0,
            Fault::Replay { .. } | Fault::TwoNodes { .. } | Fault::Helper { .. } => 2,
            _ => 1,
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Fault::Host { host, at_ms } => return format!("host ({host} lost at {at_ms} ms)"),
            Fault::NetCut { host, at_ms } => return format!("net-cut ({host} cut at {at_ms} ms)"),
            Fault::HostInRecovery { first, at_ms, second, after_ms, buddies } => {
                let buddies = if *buddies { ", log buddies" } else { "" };
                return format!(
                    "host-in-recovery ({first} lost at {at_ms} ms, {second} {after_ms} ms after the takeover{buddies})"
                );
            }
            _ => {}
        }
        match self.env().first() {
            Some((k, v)) => format!("{} ({k}={v})", self.kind()),
            None => "none".into(),
        }
    }
}

/// splitmix64: a trial's plan depends only on (seed, trial), so one trial re-runs alone.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64, trial: u64) -> Rng {
        let mut r = Rng(seed ^ trial.wrapping_mul(0xA076_1D64_78BD_642F));
        r.next();
        r
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n` > 0).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// Uniform in `lo..=hi`.
    pub(super) fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }
}

/// What the failure-free run of an app says: its checksum, each rank's sends and checkpoints.
#[derive(Debug, Clone)]
pub struct Baseline {
    pub checksum: String,
    pub sends: Vec<u64>,
    pub checkpoints: u64,
    /// The job's wall time, start to end (ms).
    pub wall_ms: u64,
}

/// One trial's plan.
#[derive(Debug, Clone)]
pub struct Plan {
    pub trial: u64,
    pub app: &'static str,
    pub protocol: &'static str,
    pub fault: Fault,
}

/// The app of trial `trial` (needed before its baseline): the collective kind's own, else
/// the first draw.
pub(super) fn pick_app(seed: u64, trial: u64) -> &'static str {
    let drawn = APPS[Rng::new(seed, trial).below(APPS.len() as u64) as usize];
    match kind_index(seed, trial) {
        COLLECTIVE_KIND => COLLECTIVE_APP,
        _ => drawn,
    }
}

/// The app of trial `trial` across hosts (`host_plan`'s first draw).
pub(super) fn pick_host_app(seed: u64, trial: u64) -> &'static str {
    HOST_APPS[Rng::new(seed, trial).below(HOST_APPS.len() as u64) as usize]
}

/// Index into `FAULT_KINDS` of trial `trial`'s kind: cycled through by trial number.
fn kind_index(seed: u64, trial: u64) -> u64 {
    (trial + seed) % FAULT_KINDS.len() as u64
}

const COLLECTIVE_KIND: u64 = 10;
const HELPER_KIND: u64 = 11;

/// The layout of the replica kinds' jobs: `RANKS` virtual ranks at `REPLICA_DEGREE`.
fn replica_map() -> reverb_runtime::replicas::ReplicaMap {
    let degree = REPLICA_DEGREE.parse().unwrap_or(1.5);
    reverb_runtime::replicas::ReplicaMap::new(RANKS, degree).expect("8 ranks at 1.5x is a valid layout")
}

/// The processes of the replica kinds' jobs.
pub(super) fn replica_processes() -> u32 {
    replica_map().physical_ranks()
}

/// A random copy (physical rank) of a replicated virtual rank, and that virtual rank.
fn replicated_copy(rng: &mut Rng) -> (u32, u32) {
    let map = replica_map();
    let copies: Vec<(u32, u32)> = (0..RANKS)
        .filter(|&v| map.sphere(v).len() > 1)
        .flat_map(|v| map.sphere(v).iter().map(move |&p| (p, v)).collect::<Vec<_>>())
        .collect();
    copies[rng.below(copies.len() as u64) as usize]
}

/// One time in three, a rank on another node than `rank` (a survivor that joins late).
fn late_survivor(rng: &mut Rng, rank: u32) -> Option<u32> {
    let nodes = RANKS / RANKS_PER_NODE;
    (rng.below(3) == 0).then(|| {
        let node = (rank / RANKS_PER_NODE + 1 + rng.below(u64::from(nodes - 1)) as u32) % nodes;
        node * RANKS_PER_NODE + rng.below(u64::from(RANKS_PER_NODE)) as u32
    })
}

/// The plan of trial `trial`. Fault kinds are cycled through by trial number (so a short
/// campaign covers each), everything else is random.
pub fn plan(seed: u64, trial: u64, base: &Baseline) -> Plan {
    draw(seed, trial, base).0
}

/// The checkpoint stage of a checkpoint-kind trial: cycled through by the trial's round of
/// kinds, so six rounds cover every stage.
fn ckpt_stage(seed: u64, trial: u64) -> &'static str {
    CKPT_STAGES[((trial + seed) / FAULT_KINDS.len() as u64 % CKPT_STAGES.len() as u64) as usize]
}

/// Whether a gc-kind trial kills in the trim (every other round of kinds) rather than before
/// the collective.
fn gc_in_trim(seed: u64, trial: u64) -> bool {
    (trial + seed) / FAULT_KINDS.len() as u64 % 2 == 1
}

/// The plan of trial `trial` and the phase its fault strikes in. A kill at a send count
/// lands in a phase drawn with weight on the checkpoint boundaries and the first iterations
/// ([`Phase::draw_send_phase`]), at the count the app's failure-free sends put there.
pub(super) fn draw(seed: u64, trial: u64, base: &Baseline) -> (Plan, Phase) {
    let mut rng = Rng::new(seed, trial);
    rng.below(APPS.len() as u64);
    let app = pick_app(seed, trial);
    let protocol = PROTOCOLS[rng.below(PROTOCOLS.len() as u64) as usize];
    let send_phase = Phase::draw_send_phase(&mut rng);
    let tl = timeline(app);
    let nodes = RANKS / RANKS_PER_NODE;
    let sends_of = |r: u32| base.sends.get(r as usize).copied().unwrap_or(1).max(1);
    let (fault, phase) = match kind_index(seed, trial) {
        0 => (Fault::None, Phase::None),
        1 => {
            let rank = rng.below(u64::from(RANKS)) as u32;
            (Fault::Rank { rank, sends: tl.sends_in(send_phase, sends_of(rank), &mut rng) }, send_phase)
        }
        2 => {
            let node = rng.below(u64::from(nodes)) as u32;
            let r = node * RANKS_PER_NODE;
            let sends = [
                tl.sends_in(send_phase, sends_of(r), &mut rng),
                tl.sends_in(send_phase, sends_of(r + 1), &mut rng),
            ];
            (Fault::Node { node, sends }, send_phase)
        }
        3 if base.checkpoints > 0 => {
            let stage = ckpt_stage(seed, trial);
            let fault = Fault::Checkpoint {
                rank: rng.below(u64::from(RANKS)) as u32,
                epoch: rng.between(1, base.checkpoints),
                stage,
            };
            (fault, Phase::Checkpoint(stage))
        }
        3 | 4 => {
            let rank = rng.below(u64::from(RANKS)) as u32;
            let sends = tl.sends_in(send_phase, sends_of(rank), &mut rng);
            (Fault::Replay { rank, sends, replay_sends: rng.between(1, 6) }, Phase::Recovery)
        }
        6 => {
            let rank = rng.below(u64::from(RANKS)) as u32;
            let step = INIT_STEPS[rng.below(INIT_STEPS.len() as u64) as usize];
            let late = late_survivor(&mut rng, rank);
            (Fault::Init { rank, step, late }, Phase::Init)
        }
        7 if base.checkpoints > 0 => {
            let rank = rng.below(u64::from(RANKS)) as u32;
            let epoch = rng.between(1, base.checkpoints);
            let late = late_survivor(&mut rng, rank);
            if gc_in_trim(seed, trial) {
                (Fault::GcTrim { rank, epoch }, Phase::LogGcTrim)
            } else {
                (Fault::Gc { rank, epoch, late }, Phase::LogGc)
            }
        }
        8 => {
            let (copy, v) = replicated_copy(&mut rng);
            (Fault::Replica { copy, sends: tl.sends_in(send_phase, sends_of(v), &mut rng) }, send_phase)
        }
        HELPER_KIND => {
            let node = rng.below(u64::from(nodes)) as u32;
            let sends = tl.sends_in(send_phase, sends_of(node * RANKS_PER_NODE), &mut rng);
            (Fault::Helper { node, sends, replay_sends: rng.between(1, 6) }, Phase::Recovery)
        }
        COLLECTIVE_KIND => {
            let rank = rng.below(u64::from(RANKS)) as u32;
            (Fault::Collective { rank, sends: tl.sends_in(send_phase, sends_of(rank), &mut rng) }, send_phase)
        }
        9 => replica_then_rank(&mut rng, tl, &sends_of),
        _ => {
            let a = rng.below(u64::from(RANKS)) as u32;
            let other_node = (a / RANKS_PER_NODE + 1 + rng.below(u64::from(nodes - 1)) as u32) % nodes;
            let b = other_node * RANKS_PER_NODE + rng.below(u64::from(RANKS_PER_NODE)) as u32;
            let most = sends_of(a).min(sends_of(b));
            (Fault::TwoNodes { ranks: [a, b], sends: tl.sends_in(send_phase, most, &mut rng) }, send_phase)
        }
    };
    (Plan { trial, app, protocol, fault }, phase)
}

/// A copy killed in its first iteration (masked), then a physical rank of another node at a
/// later phase: its node is recovered without the retired copy.
fn replica_then_rank(rng: &mut Rng, tl: Timeline, sends_of: &dyn Fn(u32) -> u64) -> (Fault, Phase) {
    let (copy, v) = replicated_copy(rng);
    let copy_sends = rng.between(1, (sends_of(v) / tl.iters.max(1)).max(1));
    let copy_node = copy / RANKS_PER_NODE;
    let rank = loop {
        let r = rng.below(u64::from(replica_processes())) as u32;
        if r / RANKS_PER_NODE != copy_node {
            break r;
        }
    };
    let of = replica_map().of_physical(rank).map_or(0, |(v, _)| v);
    let phase = Phase::draw_late_send_phase(rng);
    // After the copy's death, whatever the counts.
    let sends = tl.sends_in(phase, sends_of(of), rng).max(copy_sends + 1);
    (Fault::ReplicaThenRank { copy, copy_sends, rank, sends }, phase)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::chaos::phase::PHASES;
    use std::collections::BTreeSet;

    /// The seed of `ci/chaos-phases.sh`.
    const CI_SLICE_SEED: u64 = 2;

    pub(in crate::chaos) fn base() -> Baseline {
        Baseline { checksum: "abc".into(), sends: vec![100; RANKS as usize], checkpoints: 4, wall_ms: 3000 }
    }

    #[test]
    fn a_trial_plan_depends_only_on_seed_and_trial() {
        for trial in 0..50 {
            let ((a, pa), (b, pb)) = (draw(9, trial, &base()), draw(9, trial, &base()));
            assert_eq!((a.app, a.protocol, &a.fault, pa), (b.app, b.protocol, &b.fault, pb));
            assert_eq!(a.app, pick_app(9, trial));
        }
    }

    #[test]
    fn every_phase_is_drawn_and_matches_its_fault() {
        let drawn: Vec<(Plan, Phase)> = (0..240).map(|t| draw(2, t, &base())).collect();
        for name in PHASES.iter().filter(|&&p| p != "timed") {
            assert!(drawn.iter().any(|(_, p)| p.name() == *name), "no {name} phase in 240 trials");
        }
        for (plan, phase) in &drawn {
            let f = &plan.fault;
            match phase {
                Phase::None => assert_eq!(f, &Fault::None),
                Phase::Init => assert_eq!(f.kind(), "init"),
                Phase::LogGc => assert!(matches!(f, Fault::Gc { .. }), "{f:?}"),
                Phase::LogGcTrim => assert!(matches!(f, Fault::GcTrim { .. }), "{f:?}"),
                Phase::Recovery => assert!(["replay", "helper"].contains(&f.kind()), "{f:?}"),
                Phase::Checkpoint(stage) => {
                    assert!(matches!(f, Fault::Checkpoint { stage: s, .. } if s == stage), "{f:?}")
                }
                _ => assert!(f.env().first().is_some_and(|(k, _)| k == "REVERB_FAULT"), "{phase:?}: {f:?}"),
            }
        }
        // Weight on the checkpoint boundaries: more kills there than mid-interval.
        let count = |p: Phase| drawn.iter().filter(|(_, q)| *q == p).count();
        assert!(count(Phase::BeforeCheckpoint) > 2 * count(Phase::MidInterval));
        assert!(count(Phase::AfterCommit) > count(Phase::MidInterval));
    }

    #[test]
    fn a_rank_killed_before_a_checkpoint_dies_in_that_checkpoint_s_last_iteration() {
        // The stencil's middle ranks: two halos an iteration, a checkpoint every 10 of 60.
        let mut b = base();
        b.sends = vec![121; RANKS as usize];
        for t in 0..600 {
            let (plan, phase) = draw(6, t, &b);
            if plan.app != "stencil" {
                continue;
            }
            if let (Fault::Rank { sends, .. }, Phase::BeforeCheckpoint) = (&plan.fault, phase) {
                assert!(matches!(sends % 20, 0 | 19) && *sends < 120, "{sends}");
            }
        }
    }

    /// Whether a campaign's phases cover every phase of one host: the checkpoint stages
    /// cycle by rounds of kinds (six rounds for all six), so a short campaign needs only
    /// one stage per round it has (`ckpt_boundary`'s matrix covers each stage in CI).
    fn covers_phases(phases: &[&str], trials: u64) -> bool {
        let stages = phases.iter().filter(|p| p.starts_with("ckpt-")).collect::<BTreeSet<_>>();
        let rounds = (trials / FAULT_KINDS.len() as u64).min(CKPT_STAGES.len() as u64) as usize;
        stages.len() >= rounds
            && PHASES.iter().filter(|&&p| p != "timed" && !p.starts_with("ckpt-")).all(|p| phases.contains(p))
    }

    /// Prints seeds whose first 24 or 36 trials cover every class and phase (to pick
    /// `CI_SLICE_SEED`): `cargo test -p reverb --lib ci_slice_seeds -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn ci_slice_seeds() {
        use crate::chaos::size::{pick_size, Thresholds, SIZE_CLASSES};
        let th = Thresholds { rndv: 8192, max_message: 4 << 20 };
        for trials in [24, 36] {
            let good: Vec<u64> = (0..400)
                .filter(|&seed| {
                    let classes: Vec<&str> =
                        (0..trials).map(|t| pick_size(seed, t, &th).class.name()).collect();
                    let phases: Vec<&str> = (0..trials).map(|t| draw(seed, t, &base()).1.name()).collect();
                    SIZE_CLASSES.iter().all(|c| classes.contains(c)) && covers_phases(&phases, trials)
                })
                .collect();
            eprintln!("{trials} trials: {good:?}");
        }
    }

    /// The CI slice (`ci/chaos-phases.sh`): its seed's first 36 trials cover every size
    /// class and every phase of one host, three checkpoint stages of six (the sizes do not
    /// depend on the app's counts; the phases do not either).
    #[test]
    fn the_ci_slice_covers_every_class_and_phase() {
        use crate::chaos::size::{pick_size, Thresholds, SIZE_CLASSES};
        let th = Thresholds { rndv: 8192, max_message: 4 << 20 };
        let (seed, trials) = (CI_SLICE_SEED, 36);
        let classes: Vec<&str> = (0..trials).map(|t| pick_size(seed, t, &th).class.name()).collect();
        for c in SIZE_CLASSES {
            assert!(classes.contains(&c), "seed {seed}: no {c} in {classes:?}");
        }
        let phases: Vec<&str> = (0..trials).map(|t| draw(seed, t, &base()).1.name()).collect();
        assert!(covers_phases(&phases, trials), "seed {seed}: {phases:?}");
    }

    #[test]
    fn consecutive_trials_cover_every_fault_kind() {
        let kinds: Vec<&str> = (10..22).map(|t| plan(3, t, &base()).fault.kind()).collect();
        for k in FAULT_KINDS {
            assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
        }
    }

    #[test]
    fn faults_stay_within_the_run_and_two_nodes_are_two_nodes() {
        for trial in 0..600 {
            match plan(1, trial, &base()).fault {
                Fault::Rank { rank, sends }
                | Fault::Replay { rank, sends, .. }
                | Fault::Collective { rank, sends } => {
                    assert!(rank < RANKS && (1..=100).contains(&sends));
                }
                Fault::Checkpoint { rank, epoch, .. } => assert!(rank < RANKS && (1..=4).contains(&epoch)),
                Fault::TwoNodes { ranks, sends } => {
                    assert_ne!(ranks[0] / RANKS_PER_NODE, ranks[1] / RANKS_PER_NODE);
                    assert!(ranks.iter().all(|&r| r < RANKS) && (1..=100).contains(&sends));
                }
                Fault::Node { node, .. } | Fault::Helper { node, .. } => {
                    assert!(node < RANKS / RANKS_PER_NODE)
                }
                Fault::Init { rank, step, late } => {
                    assert!(rank < RANKS && INIT_STEPS.contains(&step));
                    if let Some(late) = late {
                        assert!(late < RANKS);
                        assert_ne!(late / RANKS_PER_NODE, rank / RANKS_PER_NODE, "the late rank survives");
                    }
                }
                Fault::GcTrim { rank, epoch } => assert!(rank < RANKS && (1..=4).contains(&epoch)),
                Fault::Gc { rank, epoch, late } => {
                    assert!(rank < RANKS && (1..=4).contains(&epoch));
                    if let Some(late) = late {
                        assert!(late < RANKS);
                        assert_ne!(late / RANKS_PER_NODE, rank / RANKS_PER_NODE, "the late rank survives");
                    }
                }
                Fault::Replica { copy, sends } => {
                    let map = replica_map();
                    let v = map.of_physical(copy).map(|(v, _)| v).expect("a copy of the job");
                    assert!(map.sphere(v).len() > 1, "copy {copy} has a mate");
                    assert!((1..=100).contains(&sends));
                }
                Fault::ReplicaThenRank { copy, copy_sends, rank, sends } => {
                    assert!(copy < replica_processes() && rank < replica_processes());
                    assert_ne!(copy / RANKS_PER_NODE, rank / RANKS_PER_NODE, "another node");
                    assert!(copy_sends < sends && (1..=100).contains(&sends), "{copy_sends} then {sends}");
                }
                Fault::None => {}
                host => panic!("trial {trial}: a host fault on one host: {host:?}"),
            }
        }
    }

    #[test]
    fn fault_environment_uses_the_runtime_syntax() {
        assert_eq!(Fault::Node { node: 1, sends: [3, 4] }.env()[0].1, "2:3,3:4");
        assert_eq!(Fault::Replay { rank: 5, sends: 9, replay_sends: 2 }.env()[0].1, "5:9,5:2@1");
        let ckpt = Fault::Checkpoint { rank: 3, epoch: 2, stage: "buddy-flipped" }.env();
        assert_eq!(ckpt[0], ("REVERB_FAULT_CKPT".to_string(), "3:2:buddy-flipped".to_string()));
        let init = Fault::Init { rank: 3, step: "ckpt-slots", late: None }.env();
        assert_eq!(init, vec![("REVERB_FAULT_INIT".to_string(), "3:ckpt-slots".to_string())]);
        let late = Fault::Init { rank: 3, step: "log-rings", late: Some(6) }.env();
        assert_eq!(late[0].1, "3:log-rings,6:log-rings:late");
        let replica = Fault::ReplicaThenRank { copy: 8, copy_sends: 3, rank: 1, sends: 40 };
        assert_eq!(replica.env()[0].1, "8:3,1:40");
        assert_eq!((replica.redundancy(), replica.respawns()), (Some("1.5"), 1));
        assert_eq!(Fault::Replica { copy: 9, sends: 5 }.respawns(), 0, "masked: no respawn");
        let gc = Fault::Gc { rank: 2, epoch: 3, late: Some(7) }.env();
        assert_eq!(gc, vec![("REVERB_FAULT_GC".to_string(), "2:3,7:3:late".to_string())]);
        // The runtime accepts what the campaign sets.
        for f in ["3:ckpt-slots", "3:log-rings", "6:log-rings:late"] {
            assert!(f.parse::<reverb_runtime::InitFault>().is_ok(), "{f}");
        }
        for f in ["2:3", "7:3:late"] {
            assert!(f.parse::<reverb_runtime::GcFault>().is_ok(), "{f}");
        }
    }

    #[test]
    fn helper_faults_run_objects_and_kill_the_replaying_helper() {
        let helpers: Vec<Fault> =
            (0..120).map(|t| plan(4, t, &base()).fault).filter(|f| f.kind() == "helper").collect();
        assert_eq!(helpers.len(), 10, "one trial in twelve");
        for f in &helpers {
            let Fault::Helper { node, sends, replay_sends } = f else { unreachable!() };
            let first = node * RANKS_PER_NODE;
            let want = format!("{first}:{sends},{}:{replay_sends}@1", first + 1);
            assert_eq!(f.env(), vec![("REVERB_FAULT".to_string(), want)]);
            assert_eq!(f.objects(), Some((RANKS_PER_NODE, 2)));
            assert_eq!(f.respawns(), 2);
        }
        assert_eq!(Fault::Rank { rank: 1, sends: 2 }.objects(), None);
    }

    #[test]
    fn init_faults_get_a_share_and_sometimes_a_late_survivor() {
        let inits: Vec<Fault> =
            (0..960).map(|t| plan(5, t, &base()).fault).filter(|f| f.kind() == "init").collect();
        assert_eq!(inits.len(), 80, "one trial in twelve");
        let late = inits.iter().filter(|f| matches!(f, Fault::Init { late: Some(_), .. })).count();
        assert!((12..=44).contains(&late), "{late} of 80 with a late survivor");
        for step in INIT_STEPS {
            assert!(inits.iter().any(|f| matches!(f, Fault::Init { step: s, .. } if *s == step)), "{step}");
        }
        assert_eq!(inits[0].respawns(), 1);
    }
}
