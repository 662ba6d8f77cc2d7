//! Logger-core placement (seed 003): where each node's logger core runs relative to the
//! node's application ranks.
//!
//! - `dedicated`: pinned to a cpu no rank of its node uses (ranks are pinned to the others);
//! - `shared-pinned`: pinned to a cpu its node's ranks also use (the first rank's);
//! - `shared-unpinned`: left to the scheduler (ranks unpinned too).
//!
//! Simulated nodes share one host, so the plan splits the host's cpus: loggers take cpus from
//! the top, ranks the rest, round-robin. With too few cpus, loggers of different nodes share
//! their reserved cpu; with a single cpu `dedicated` is impossible and the plan says so.

use std::fmt;
use std::str::FromStr;

use super::CoreError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// No logger cores (the default: jobs run as before).
    #[default]
    Off,
    Dedicated,
    SharedPinned,
    SharedUnpinned,
}

impl Placement {
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::Off => "off",
            Placement::Dedicated => "dedicated",
            Placement::SharedPinned => "shared-pinned",
            Placement::SharedUnpinned => "shared-unpinned",
        }
    }

    /// A dedicated core can spin; a shared one backs off to sleep so the ranks get the cpu.
    pub fn spins(self) -> bool {
        self == Placement::Dedicated
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Placement {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, CoreError> {
        match s {
            "off" | "none" => Ok(Placement::Off),
            "dedicated" => Ok(Placement::Dedicated),
            "shared-pinned" => Ok(Placement::SharedPinned),
            "shared-unpinned" => Ok(Placement::SharedUnpinned),
            other => Err(CoreError::Config(format!(
                "unknown logger placement {other:?} (expected dedicated, shared-pinned, shared-unpinned or off)"
            ))),
        }
    }
}

/// Which cpu each logger core and each rank is pinned to (`None`: not pinned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementPlan {
    pub placement: Placement,
    /// Indexed by node.
    pub logger_cpu: Vec<Option<usize>>,
    /// Indexed by rank.
    pub rank_cpu: Vec<Option<usize>>,
    /// What was chosen, in words (the launcher prints it).
    pub note: String,
}

/// Plans pinning for `ranks` ranks in nodes of `ranks_per_node` consecutive ranks on a host
/// whose usable cpus are `cpus`.
pub fn plan(
    placement: Placement,
    cpus: &[usize],
    ranks: u32,
    ranks_per_node: u32,
) -> Result<PlacementPlan, CoreError> {
    let rpn = ranks_per_node.clamp(1, ranks.max(1));
    let nodes = ranks.div_ceil(rpn) as usize;
    let node_of = |rank: u32| (rank / rpn) as usize;
    let unpinned = |note: String| PlacementPlan {
        placement,
        logger_cpu: vec![None; nodes],
        rank_cpu: vec![None; ranks as usize],
        note,
    };
    if cpus.is_empty() && matches!(placement, Placement::Dedicated | Placement::SharedPinned) {
        return Err(CoreError::Config("no cpus to pin logger cores to".into()));
    }
    match placement {
        Placement::Off => Ok(unpinned("no logger cores".into())),
        Placement::SharedUnpinned => Ok(unpinned(format!(
            "shared-unpinned: {nodes} logger core(s) and {ranks} rank(s) left to the scheduler"
        ))),
        Placement::SharedPinned => {
            let rank_cpu: Vec<Option<usize>> =
                (0..ranks).map(|r| Some(cpus[r as usize % cpus.len()])).collect();
            let logger_cpu: Vec<Option<usize>> = (0..nodes).map(|n| rank_cpu[n * rpn as usize]).collect();
            let note = format!(
                "shared-pinned: node n's logger on its first rank's cpu (loggers {:?}), ranks round-robin over {:?}",
                flat(&logger_cpu),
                cpus
            );
            Ok(PlacementPlan { placement, logger_cpu, rank_cpu, note })
        }
        Placement::Dedicated => {
            if cpus.len() < 2 {
                return Err(CoreError::Config(format!(
                    "dedicated logger cores need at least 2 cpus, this host offers {cpus:?}; \
                     use --logger shared-pinned or shared-unpinned"
                )));
            }
            // Reserve one cpu per node while ranks keep at least one per node (and always one).
            let reserved = nodes.min(cpus.len() - (rpn as usize).min(cpus.len() - 1)).max(1);
            let (rank_cpus, logger_cpus) = cpus.split_at(cpus.len() - reserved);
            let logger_cpu: Vec<Option<usize>> =
                (0..nodes).map(|n| Some(logger_cpus[n % reserved])).collect();
            let rank_cpu: Vec<Option<usize>> =
                (0..ranks).map(|r| Some(rank_cpus[r as usize % rank_cpus.len()])).collect();
            debug_assert!((0..ranks).all(|r| logger_cpu[node_of(r)] != rank_cpu[r as usize]));
            let shared =
                if reserved < nodes { format!(" ({nodes} loggers share {reserved})") } else { String::new() };
            let note = format!(
                "dedicated: logger cpus {logger_cpus:?}{shared}, no rank on them; ranks round-robin over {rank_cpus:?}"
            );
            Ok(PlacementPlan { placement, logger_cpu, rank_cpu, note })
        }
    }
}

fn flat(v: &[Option<usize>]) -> Vec<usize> {
    v.iter().flatten().copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for p in [Placement::Off, Placement::Dedicated, Placement::SharedPinned, Placement::SharedUnpinned] {
            assert_eq!(p.as_str().parse::<Placement>().unwrap(), p);
        }
        assert!("pinned".parse::<Placement>().is_err());
    }

    #[test]
    fn dedicated_keeps_ranks_off_logger_cpus() {
        for ncpu in 2..10usize {
            let cpus: Vec<usize> = (0..ncpu).collect();
            for (ranks, rpn) in [(4, 2), (8, 4), (2, 1), (6, 3), (3, 2)] {
                let p = plan(Placement::Dedicated, &cpus, ranks, rpn).unwrap();
                for r in 0..ranks {
                    let node = (r / rpn) as usize;
                    assert_ne!(
                        p.logger_cpu[node], p.rank_cpu[r as usize],
                        "{ncpu} cpus, {ranks}/{rpn}: {p:?}"
                    );
                    assert!(p.rank_cpu[r as usize].is_some());
                }
            }
        }
        // The 2-cpu case: both loggers on cpu 1, every rank on cpu 0.
        let p = plan(Placement::Dedicated, &[0, 1], 4, 2).unwrap();
        assert_eq!(p.logger_cpu, vec![Some(1), Some(1)]);
        assert_eq!(p.rank_cpu, vec![Some(0); 4]);
        assert!(plan(Placement::Dedicated, &[0], 4, 2).is_err());
    }

    #[test]
    fn shared_pinned_shares_a_rank_cpu() {
        let p = plan(Placement::SharedPinned, &[0, 1], 4, 2).unwrap();
        assert_eq!(p.rank_cpu, vec![Some(0), Some(1), Some(0), Some(1)]);
        assert_eq!(p.logger_cpu, vec![Some(0), Some(0)]);
        let p = plan(Placement::SharedUnpinned, &[0, 1], 4, 2).unwrap();
        assert!(p.logger_cpu.iter().chain(&p.rank_cpu).all(Option::is_none));
    }
}
