//! Teams as the failure unit under `--respawn`: a failed node fails every node of its team.

use anyhow::{bail, Context, Result};

use super::spawn::JobCtx;
use super::{LaunchOptions, LaunchSpec};

/// The teams of a job run with `--respawn` (`REVERB_LOG_TEAMS` in `spec.env`, else in the
/// launcher's environment), as the team of every node; `None` without teams. Teams that are
/// not unions of whole nodes, a single team, or logger cores with teams are refused.
pub(super) fn teams_of_nodes(spec: &LaunchSpec, opts: &LaunchOptions) -> Result<Option<Vec<u32>>> {
    use reverb_logger::team::{Teams, TEAMS_VAR};
    let from_spec = spec.env.iter().rev().find(|(k, _)| k == TEAMS_VAR).map(|(_, v)| v.clone());
    let from_env = || reverb_transport::config::env_get(TEAMS_VAR).ok().flatten();
    let Some(text) = from_spec.or_else(from_env) else { return Ok(None) };
    if opts.respawn == 0 {
        return Ok(None);
    }
    let teams = Teams::from_spec(&text).with_context(|| format!("{TEAMS_VAR}={text:?}"))?;
    let rpn = spec.ranks_per_node.min(spec.ranks);
    let node_of_rank: Vec<u32> = (0..spec.ranks).map(|r| r / rpn).collect();
    teams.check_whole_nodes(&node_of_rank).with_context(|| {
        format!(
            "{TEAMS_VAR}={text:?} with --respawn: a failed node fails its whole team, so each team \
             must be a union of whole nodes ({} ranks, {rpn} per node)",
            spec.ranks
        )
    })?;
    if opts.logger != reverb_logger::core::Placement::Off {
        bail!(
            "{TEAMS_VAR} with --respawn and --logger {}: unsupported, logger cores pair nodes and \
             a team's log could stay inside the team; run teams without logger cores",
            opts.logger
        );
    }
    let nodes = spec.ranks.div_ceil(rpn);
    (0..nodes)
        .map(|n| teams.team_of(n * rpn).with_context(|| format!("node {n} has no team in {TEAMS_VAR}")))
        .collect::<Result<Vec<u32>>>()
        .map(Some)
}

/// The nodes that fail together with `node`: its team's, or itself alone.
pub(super) fn failure_unit_nodes(ctx: &JobCtx<'_>, node: u32) -> Vec<u32> {
    match &ctx.team_of_node {
        Some(team_of) => match team_of.get(node as usize) {
            Some(&team) => (0..team_of.len() as u32).filter(|&n| team_of[n as usize] == team).collect(),
            None => vec![node],
        },
        None => vec![node],
    }
}
