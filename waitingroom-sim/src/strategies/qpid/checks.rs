//! Invariant checks after every protocol event, made cheap.
//!
//! `invariants::check` is a pure function of what it reads from the nodes and of `quiet`, so
//! the simulator keeps a flat copy of those inputs per node, refreshes it only for the nodes an
//! event touched, and counts the previous outcome again while nothing changed.

use waitingroom_distributed::invariants;
use waitingroom_distributed::{Node, Weight};

use super::QpidRoom;
use crate::sim::Ctx;

/// Violation descriptions kept per kind (after recovery / while recovering).
const SAMPLES: usize = 4;
/// Every this many partial invariant checks, the membership summary is verified in full.
const VERIFY_EVERY: u64 = 64;

/// What the last full invariant check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Fine,
    Converged,
    Recovering,
}

fn weight_words(w: Option<Weight>, out: &mut Vec<u64>) {
    match w {
        None => out.push(0),
        Some(Weight::Empty) => out.push(1),
        Some(Weight::Key(k)) => out.extend([2, k.join_time, k.ticket.0, k.node.0]),
    }
}

/// What every `invariants::check` (and `invariants::converged`) reads from one node,
/// flattened: whether it is a member, settled, the root, and its membership.
///
/// A node's membership is only ever replaced by one with a higher version (or, when the node
/// rejoins, by an empty one under a new incarnation), so with `full` false the membership is
/// summarised by its version and sizes instead of listed; [`QpidRoom::check`] verifies that
/// summary against the full list now and then and reports any disagreement.
fn always_inputs(n: &Node, full: bool, out: &mut Vec<u64>) {
    let flags =
        u64::from(n.is_member()) | u64::from(n.is_settled()) << 1 | u64::from(n.is_root()) << 2;
    out.extend([n.id().0, n.contact().incarnation, flags]);
    let m = n.membership();
    out.extend([
        m.version,
        m.members.len() as u64,
        m.edges.len() as u64,
        m.removed.len() as u64,
    ]);
    if !full {
        return;
    }
    for (id, c) in &m.members {
        out.extend([id.0, c.incarnation, c.addr.len() as u64]);
    }
    for (a, b) in &m.edges {
        out.extend([a.0, b.0]);
    }
    for (id, gone) in &m.removed {
        out.extend([id.0, gone.incarnation]);
    }
}

/// What only the checks of a quiet network read from one node, flattened: its pointer, its
/// weight table, and how many visitors it holds when outside the cluster.
fn quiet_inputs(n: &Node, out: &mut Vec<u64>) {
    out.push(n.parent().map_or(0, |p| p.0 + 1));
    if !n.is_member() {
        out.push(n.room().queued());
    }
    let (own, table) = n.weights();
    weight_words(Some(own), out);
    out.push(table.len() as u64);
    for (nb, w) in table {
        out.push(nb.0);
        weight_words(w, out);
    }
}

impl QpidRoom {
    /// Runs the invariant checks over the live nodes (every `check_every`-th protocol event).
    ///
    /// `invariants::check` is a pure function of what it reads from the nodes (memberships,
    /// roots, pointers, weight tables, settledness) and of `quiet`; with `quiet` false it reads
    /// only the first three. Most events (acks, probes, retransmission ticks) change none of
    /// that, and an event only ever changes the node that handled it. So each node's inputs are
    /// kept as flat lists of numbers, refreshed only for the nodes touched since the last
    /// check, and the outcome of the last full check is kept for each value of `quiet`; while
    /// its inputs are unchanged it is counted again instead of recomputed. The count is exactly
    /// what running the check after every event gives, at a fraction of the cost.
    pub(super) fn check(&mut self, ctx: &Ctx) {
        let every = self.cfg.checks.check_every;
        if every == 0 {
            return;
        }
        self.countdown += 1;
        if self.countdown < every {
            return;
        }
        self.countdown = 0;
        self.checks += 1;
        let mut changed = std::mem::take(&mut self.live_changed);
        let mut quiet_changed = false;
        for slot in std::mem::take(&mut self.touched) {
            let s = &mut self.slots[slot];
            s.touched = false;
            let Some(node) = s.node.as_ref() else {
                continue;
            };
            s.drained_stale = true;
            let scratch = &mut self.scratch;
            scratch.clear();
            always_inputs(node, false, scratch);
            if *scratch != s.inputs {
                std::mem::swap(scratch, &mut s.inputs);
                scratch.clear();
                always_inputs(node, true, scratch);
                std::mem::swap(scratch, &mut s.full_inputs);
                changed = true;
            } else {
                self.verify_countdown = self.verify_countdown.wrapping_sub(1);
                if self.verify_countdown % VERIFY_EVERY == 0 {
                    scratch.clear();
                    always_inputs(node, true, scratch);
                    if *scratch != s.full_inputs {
                        // The summary missed a change: count it, and check in full.
                        self.summary_misses += 1;
                        std::mem::swap(scratch, &mut s.full_inputs);
                        changed = true;
                    }
                }
            }
            s.quiet_stale = true;
        }
        if changed {
            self.outcome = [None, None];
        }
        // "Quiet": no state-carrying message in flight and none waiting to be resent. Whether a
        // node waits for acknowledgements only matters once nothing is in flight.
        if self.in_flight == 0 {
            for s in self.slots.iter_mut().filter(|s| s.drained_stale) {
                s.drained_stale = false;
                let drained = s.node.as_ref().is_none_or(|n| n.is_drained());
                if drained != s.drained {
                    s.drained = drained;
                    if drained {
                        self.undrained -= 1;
                    } else {
                        self.undrained += 1;
                    }
                }
            }
        }
        let quiet = self.in_flight == 0 && self.undrained == 0;
        if quiet {
            // What only quiet checks read is refreshed only now: every node touched while the
            // network was busy is compared again here.
            for s in self.slots.iter_mut().filter(|s| s.quiet_stale) {
                s.quiet_stale = false;
                let Some(node) = s.node.as_ref() else {
                    continue;
                };
                let scratch = &mut self.scratch;
                scratch.clear();
                quiet_inputs(node, scratch);
                if *scratch != s.quiet_inputs {
                    std::mem::swap(scratch, &mut s.quiet_inputs);
                    quiet_changed = true;
                }
            }
            if quiet_changed {
                self.outcome[1] = None;
            }
        }
        if let Some(outcome) = self.outcome[usize::from(quiet)] {
            match outcome {
                Outcome::Fine => {}
                Outcome::Converged => self.violations += 1,
                Outcome::Recovering => self.violations_recovering += 1,
            }
            return;
        }
        self.full_checks += 1;
        let live: Vec<&Node> = self.slots.iter().filter_map(|s| s.node.as_ref()).collect();
        let found = invariants::check(&live, quiet);
        let slot = &mut self.outcome[usize::from(quiet)];
        if found.is_empty() {
            *slot = Some(Outcome::Fine);
            return;
        }
        let converged = invariants::converged(&live);
        let (count, samples, label) = if converged {
            *slot = Some(Outcome::Converged);
            (&mut self.violations, &mut self.samples_after, "converged")
        } else {
            *slot = Some(Outcome::Recovering);
            (
                &mut self.violations_recovering,
                &mut self.samples_recovering,
                "recovering",
            )
        };
        *count += 1;
        if samples.len() < SAMPLES {
            let text: Vec<String> = found.iter().map(|v| v.to_string()).collect();
            samples.push(format!(
                "t={} ({label}, quiet={quiet}): {}",
                ctx.now,
                text.join("; ")
            ));
        }
    }
}
