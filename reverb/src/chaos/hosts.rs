//! `reverb chaos --hosts`: the host fault kinds and their plans. A trial runs one
//! `reverb run --hosts ... --spares ...` job; its fault takes a whole host away (killed, or its
//! wire cut), kills a host's agent alone, or loses a second host while the first one's ranks
//! restart on a spare. The first host serves the rendezvous (the job is meant to stop with
//! it), so it is never a victim.

use anyhow::{bail, Result};
use reverb_transport::nodemap::NodeMap;

use super::plan::{pick_host_app, Fault, Plan, Rng, RANKS_PER_NODE};

/// The host fault kinds, cycled through by trial number.
pub const HOST_FAULT_KINDS: [&str; 4] = ["host", "net-cut", "agent", "host-in-recovery"];
/// The protocols that survive a node (so a host) lost.
const HOST_PROTOCOLS: [&str; 3] = ["causal", "pessimistic-sb", "pessimistic-rb"];

/// The hosts of a campaign and the fault kinds it draws from.
#[derive(Debug, Clone)]
pub struct HostSet {
    /// In rank order, with their rank counts; the first serves the rendezvous.
    pub hosts: Vec<(String, u32)>,
    pub spares: Vec<String>,
    pub kinds: Vec<&'static str>,
}

impl HostSet {
    /// Checks `--hosts`, `--spares` and `--kinds` (all kinds when empty) against what the
    /// kinds need: a victim that does not serve, spares to take over, whole nodes per host.
    pub fn new(hosts: &str, spares: &[String], kinds: &[String]) -> Result<HostSet> {
        let list = crate::launcher::hosts::parse_hosts(hosts).map_err(|e| anyhow::anyhow!("--hosts: {e}"))?;
        let hosts: Vec<(String, u32)> = list.0.into_iter().map(|h| (h.name, h.ranks)).collect();
        if let Some((name, n)) = hosts.iter().find(|(_, n)| n % RANKS_PER_NODE != 0) {
            bail!("--hosts: {name} runs {n} rank(s), not whole nodes of {RANKS_PER_NODE}");
        }
        if hosts.len() < 3 {
            bail!("--hosts: name at least three hosts (the first serves and is never lost, and a lost host's log buddy must live)");
        }
        if let Some(s) = spares.iter().find(|s| hosts.iter().any(|(h, _)| h == *s)) {
            bail!("--spares: {s} also runs ranks");
        }
        let kinds: Vec<&'static str> = if kinds.is_empty() {
            HOST_FAULT_KINDS.to_vec()
        } else {
            kinds
                .iter()
                .map(|k| {
                    HOST_FAULT_KINDS.iter().copied().find(|h| h == k).ok_or_else(|| {
                        anyhow::anyhow!("--kinds: '{k}' is not one of {}", HOST_FAULT_KINDS.join(", "))
                    })
                })
                .collect::<Result<_>>()?
        };
        let spares_needed = if kinds.contains(&"host-in-recovery") { 2 } else { 1 };
        if spares.len() < spares_needed {
            bail!("--spares: the host kinds need {spares_needed} spare host(s) (host-in-recovery loses two hosts)");
        }
        Ok(HostSet { hosts, spares: spares.to_vec(), kinds })
    }

    pub fn ranks(&self) -> u32 {
        self.hosts.iter().map(|(_, n)| n).sum()
    }

    /// `--hosts` as `reverb run` takes it.
    pub fn hosts_arg(&self) -> String {
        self.hosts.iter().map(|(h, n)| format!("{h}:{n}")).collect::<Vec<_>>().join(",")
    }

    /// The hosts a fault may take away: all but the first.
    fn victims(&self) -> &[(String, u32)] {
        &self.hosts[1..]
    }

    /// Whether losing hosts `a` and `b` together loses a message log with the ranks it
    /// protects: a node of one is the log buddy (the pair map) of a node of the other.
    pub fn buddies(&self, a: &str, b: &str) -> bool {
        let node_of_rank: Vec<u32> = (0..self.ranks()).map(|r| r / RANKS_PER_NODE).collect();
        let Some(map) = NodeMap::from_nodes(&node_of_rank) else { return false };
        let nodes_of = |host: &str| -> Vec<usize> {
            let mut first = 0;
            for (h, n) in &self.hosts {
                if h == host {
                    return (first / RANKS_PER_NODE..(first + n) / RANKS_PER_NODE)
                        .map(|n| n as usize)
                        .collect();
                }
                first += n;
            }
            Vec::new()
        };
        let (na, nb) = (nodes_of(a), nodes_of(b));
        na.iter().any(|&n| nb.contains(&map.partner(n))) || nb.iter().any(|&n| na.contains(&map.partner(n)))
    }
}

/// The plan of trial `trial` across hosts: the kind cycled by trial number, the app and
/// protocol, the victims and the times random (seeded). Times fall within the middle of the
/// app's failure-free wall time `wall_ms`, so the fault lands mid-run.
pub fn host_plan(seed: u64, trial: u64, set: &HostSet, wall_ms: u64) -> Plan {
    let mut rng = Rng::new(seed, trial);
    // The same first draw as `pick_host_app`: the app is known before its baseline.
    let app = super::plan::HOST_APPS[rng.below(super::plan::HOST_APPS.len() as u64) as usize];
    debug_assert_eq!(app, pick_host_app(seed, trial));
    let protocol = HOST_PROTOCOLS[rng.below(HOST_PROTOCOLS.len() as u64) as usize];
    let kind = set.kinds[((trial + seed) % set.kinds.len() as u64) as usize];
    let victims = set.victims();
    let first = rng.below(victims.len() as u64) as usize;
    let host = victims[first].0.clone();
    let at_ms = rng.between(wall_ms * 15 / 100, wall_ms * 70 / 100);
    let fault = match kind {
        "host" => Fault::Host { host, at_ms },
        "net-cut" => Fault::NetCut { host, at_ms },
        "agent" => Fault::Agent { host, at_ms },
        _ => {
            // Another victim; with only two, the other one.
            let other = (first + 1 + rng.below(victims.len() as u64 - 1) as usize) % victims.len();
            let second = victims[other].0.clone();
            let buddies = set.buddies(&host, &second);
            // Early enough that the recovery, and so the second loss, lands mid-run too.
            let at_ms = at_ms.min(wall_ms / 2);
            Fault::HostInRecovery { first: host, at_ms, second, after_ms: rng.below(501), buddies }
        }
    };
    Plan { trial, app, protocol, fault }
}

/// Whether the design does not cover this host fault: two hosts lost, the second while the
/// first one's ranks recover (a second failure during a recovery; with the first's log buddy,
/// a log lost too).
pub(super) fn expected_unrecoverable(fault: &Fault) -> Option<&'static str> {
    match fault {
        Fault::HostInRecovery { buddies: true, .. } => Some("two log buddy hosts lost"),
        Fault::HostInRecovery { .. } => Some("a second host lost during the recovery"),
        _ => None,
    }
}

/// A case the design does not cover that only the log tells: the host lost while the ranks
/// still opened their transports (the first collective of init, not recovered: a slow start
/// can put a fault meant for mid-run there).
pub(super) fn unrecoverable_by_log(fault: &Fault, log: &str) -> Option<&'static str> {
    let host_fault =
        matches!(fault, Fault::Host { .. } | Fault::NetCut { .. } | Fault::HostInRecovery { .. });
    (host_fault && log.contains("while the transport was opening"))
        .then_some("a host lost while the transports opened")
}

/// Whether the fault took effect, from the job's log: the launcher saw the host lost (or its
/// launcher fail, killed while it started), or
/// (for the agent) a line names the agent of the host (`reverb agent: REVERB_FAULT_AGENT: the
/// agent of host HOST SIGKILLs itself`).
pub(super) fn fired(fault: &Fault, log: &str) -> bool {
    match fault {
        // Lost, or killed while its launcher was still being started (the remote shell fails).
        Fault::Host { host, .. } | Fault::NetCut { host, .. } | Fault::HostInRecovery { first: host, .. } => {
            log.contains(&format!("host {host} lost"))
                || log.contains(&format!("host {host}'s launcher failed"))
        }
        Fault::Agent { host, .. } => {
            let host = format!("host {host}");
            log.lines().any(|l| l.contains("agent") && l.contains(&host))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> HostSet {
        let spares = ["he".to_string(), "hf".to_string()];
        HostSet::new("ha:2,hb:2,hc:2,hd:2", &spares, &[]).expect("valid host set")
    }

    #[test]
    fn a_host_plan_depends_only_on_seed_and_trial_and_spares_the_first_host() {
        let set = set();
        for trial in 0..400 {
            let (a, b) = (host_plan(7, trial, &set, 6000), host_plan(7, trial, &set, 6000));
            assert_eq!((a.app, a.protocol, &a.fault), (b.app, b.protocol, &b.fault));
            assert_eq!(a.app, pick_host_app(7, trial));
            assert!(HOST_PROTOCOLS.contains(&a.protocol));
            let (victims, at_ms) = match &a.fault {
                Fault::Host { host, at_ms }
                | Fault::NetCut { host, at_ms }
                | Fault::Agent { host, at_ms } => (vec![host.clone()], *at_ms),
                Fault::HostInRecovery { first, at_ms, second, after_ms, buddies } => {
                    assert_ne!(first, second, "trial {trial}: two different hosts");
                    assert_eq!(*buddies, set.buddies(first, second));
                    assert!(*after_ms <= 500);
                    (vec![first.clone(), second.clone()], *at_ms)
                }
                other => panic!("trial {trial}: not a host fault: {other:?}"),
            };
            assert!(
                victims.iter().all(|v| v != "ha" && ["hb", "hc", "hd"].contains(&v.as_str())),
                "{victims:?}"
            );
            assert!((900..=4200).contains(&at_ms), "trial {trial}: {at_ms} ms outside the run");
        }
        // Another seed, another campaign.
        let differ =
            (0..40).filter(|&t| host_plan(8, t, &set, 6000).fault != host_plan(7, t, &set, 6000).fault);
        assert!(differ.count() > 20);
    }

    #[test]
    fn consecutive_trials_cycle_through_the_kinds_asked_for() {
        let set = set();
        let kinds: Vec<&str> = (3..7).map(|t| host_plan(1, t, &set, 6000).fault.kind()).collect();
        for k in HOST_FAULT_KINDS {
            assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
        }
        let only = ["host".to_string(), "host-in-recovery".to_string()];
        let two = HostSet::new("ha:2,hb:2,hc:2,hd:2", &set.spares, &only).expect("valid");
        for t in 0..20 {
            assert!(["host", "host-in-recovery"].contains(&host_plan(1, t, &two, 6000).fault.kind()));
        }
    }

    #[test]
    fn host_sets_are_checked_against_what_their_kinds_need() {
        let one = ["he".to_string()];
        // host-in-recovery loses two hosts: two spares.
        assert!(HostSet::new("ha:2,hb:2,hc:2", &one, &[]).is_err());
        assert!(HostSet::new("ha:2,hb:2,hc:2", &one, &["host".to_string()]).is_ok());
        assert!(HostSet::new("ha:2,hb:2,hc:2", &[], &["host".to_string()]).is_err());
        assert!(
            HostSet::new("ha:2,hb:2", &one, &["host".to_string()]).is_err(),
            "the only victim's buddy serves"
        );
        assert!(HostSet::new("ha:2,hb:3,hc:2", &one, &["host".to_string()]).is_err(), "not whole nodes");
        assert!(HostSet::new("ha:2,hb:2,hc:2", &["hb".to_string()], &["host".to_string()]).is_err());
        assert!(HostSet::new("ha:2,hb:2,hc:2", &one, &["disk".to_string()]).is_err());
    }

    #[test]
    fn log_buddies_follow_the_pair_map_of_nodes() {
        let set = set();
        assert!(set.buddies("ha", "hb") && set.buddies("hc", "hd") && set.buddies("hd", "hc"));
        assert!(!set.buddies("hb", "hc") && !set.buddies("hb", "hd"));
        // An odd node count: the last node pairs with the one before it.
        let odd = HostSet::new("ha:2,hb:2,hc:2", &["hd".into(), "he".into()], &[]).expect("valid");
        assert!(odd.buddies("hb", "hc"));
    }

    #[test]
    fn the_agent_fault_is_set_for_the_lead_agent_and_host_kills_need_no_variable() {
        let agent = Fault::Agent { host: "hc".into(), at_ms: 1500 };
        assert_eq!(agent.env(), vec![("REVERB_FAULT_AGENT".to_string(), "hc@1500".to_string())]);
        assert!(Fault::Host { host: "hc".into(), at_ms: 9 }.env().is_empty());
        assert!(fired(&Fault::Host { host: "hc".into(), at_ms: 9 }, "reverb run: host hc lost (signal: 9)"));
        assert!(!fired(&Fault::Host { host: "hc".into(), at_ms: 9 }, "reverb run: host hd lost"));
        let killed = "reverb agent: REVERB_FAULT_AGENT: the agent of host hc SIGKILLs itself";
        assert!(fired(&agent, killed) && !fired(&agent, "reverb agent: host hd up"));
        let host = Fault::Host { host: "hc".into(), at_ms: 9 };
        assert!(fired(&host, "reverb run: host hc's launcher failed (exit status: 1); stopping the others"));
        let opening =
            "[3] unrecoverable failure: rank 5 failed while the transport was opening (the first ...)";
        assert!(unrecoverable_by_log(&host, opening).is_some());
        assert!(unrecoverable_by_log(&host, "[3] unrecoverable failure: a second failure").is_none());
        assert!(unrecoverable_by_log(&agent, opening).is_none(), "the agent's ranks are not lost");
        let two = Fault::HostInRecovery {
            first: "hb".into(),
            at_ms: 1,
            second: "hd".into(),
            after_ms: 2,
            buddies: false,
        };
        assert!(expected_unrecoverable(&two).is_some());
        assert!(expected_unrecoverable(&Fault::Host { host: "hc".into(), at_ms: 9 }).is_none());
    }
}
