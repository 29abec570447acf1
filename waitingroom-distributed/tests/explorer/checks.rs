//! The safety properties checked in every reachable state, and the liveness summary of the
//! states where the run ends.

use std::collections::BTreeSet;

use waitingroom_core::{Settings, TicketId};
use waitingroom_distributed::invariants;

use super::Config;
use super::model::{Admission, State};

/// No message in flight. With loss, a lost message is still owed by its sender (it will be
/// resent), so the network is quiet only once nothing is unacknowledged either. Without loss,
/// messages a crashed node never acknowledged do not count: they will never travel.
pub fn quiet(state: &State, cfg: &Config) -> bool {
    state.in_flight.is_empty()
        && (cfg.drops == 0 || state.active().iter().all(|n| n.unacked() == 0))
}

/// The protocol's own invariants (at most one root per settled membership; once converged and
/// quiet, the QPID invariants), and first-in-first-out admission once quiet.
pub fn check(state: &State, cfg: &Config) -> Vec<String> {
    let quiet = quiet(state, cfg);
    let mut out: Vec<String> = invariants::check(&state.active(), quiet)
        .into_iter()
        .map(|v| v.to_string())
        .collect();
    if quiet {
        out.extend(fifo(state));
    }
    out.extend(places(state, cfg));
    out
}

/// Admission leases: the places the nodes' live grants may still give out plus the visitors
/// on the site stay within the target, in every state.
fn places(state: &State, cfg: &Config) -> Option<String> {
    if cfg.target == Settings::UNLIMITED {
        return None;
    }
    let admitted: BTreeSet<TicketId> = (state.admissions.iter())
        .filter(|a| on_site(state, cfg, a))
        .map(|a| a.key.ticket)
        .collect();
    let granted: u64 = state.active().iter().map(|n| n.grant(state.now).0).sum();
    let total = granted + admitted.len() as u64;
    (total > cfg.target).then(|| {
        format!(
            "t={}: {granted} places granted and {} visitors let in, target {}",
            state.now,
            admitted.len(),
            cfg.target
        )
    })
}

/// Whether a visitor let in may still be on the site. None of them leaves here, and a node
/// extends their passes while it holds a live grant; once its latest grant has expired, a
/// visitor it let in holds a place only until their ticket (to fetch the pass) and then the
/// pass run out. A visitor of a crashed node is counted for ever.
fn on_site(state: &State, cfg: &Config, a: &Admission) -> bool {
    let Some(node) = state.active().into_iter().find(|n| n.id() == a.by) else {
        return true;
    };
    let (_, expires) = node.grant(state.now);
    let gone = expires
        .saturating_add(cfg.ticket_expiry_ms)
        .saturating_add(super::model::PASS_EXPIRY);
    state.now < gone
}

/// Admissions sorted by `(decided_at, key)` must follow join order: whoever joined before an
/// admitted visitor was admitted before them. The one excuse: an orphan of the crashed node
/// that was not queued anywhere (not yet checked in again) when the later visitor's admission
/// was decided.
fn fifo(state: &State) -> Vec<String> {
    let first = |id: TicketId| state.admissions.iter().find(|a| a.key.ticket == id);
    let mut out = Vec::new();
    for a in &state.admissions {
        let Some(v) = state
            .visitors
            .iter()
            .find(|v| v.ticket.as_ref().is_some_and(|t| t.id == a.key.ticket))
        else {
            continue;
        };
        let vt = v.ticket.as_ref().expect("found by ticket");
        for u in &state.visitors {
            let Some(ut) = &u.ticket else { continue };
            if (ut.join_time, ut.id) >= (vt.join_time, vt.id) {
                continue;
            }
            let in_order = first(ut.id).is_some_and(|b| b <= a);
            let excused = u.orphan && u.requeued_at.is_none_or(|t| a.decided_at <= t);
            if !in_order && !excused {
                out.push(format!(
                    "visitor {} (joined {}) admitted at {} ahead of visitor {} (joined {}), \
                     who is {}",
                    vt.id,
                    vt.join_time,
                    a.decided_at,
                    ut.id,
                    ut.join_time,
                    match first(ut.id) {
                        Some(b) => format!("admitted later, at {}", b.decided_at),
                        None => "still waiting".into(),
                    }
                ));
            }
        }
    }
    out
}

/// Whether every visitor who joined and could get in did, the cluster has converged and the
/// network is quiet.
pub fn all_in(state: &State, cfg: &Config) -> bool {
    incomplete(state, cfg).is_none()
}

/// Where a run ends (nothing can happen before the horizon): whether every visitor who could
/// get in did, and whether the cluster converged. Informative, not a safety property: a bound
/// too tight for the scenario shows up here.
pub fn incomplete(state: &State, cfg: &Config) -> Option<String> {
    let waiting: Vec<usize> = state
        .visitors
        .iter()
        .enumerate()
        .filter(|(_, v)| {
            v.ticket
                .as_ref()
                .is_some_and(|t| !state.admissions.iter().any(|a| a.key.ticket == t.id))
                && (!v.orphan || v.requeued_at.is_some())
        })
        .map(|(i, _)| i)
        .collect();
    let converged = invariants::converged(&state.active());
    if waiting.is_empty() && converged && quiet(state, cfg) {
        None
    } else {
        Some(format!(
            "t={} waiting visitors {waiting:?}, converged {converged}",
            state.now
        ))
    }
}
