//! Invariant checks after every protocol event, made cheap.
//!
//! `invariants::check` is a pure function of what it reads from the nodes and of `quiet`, so
//! the simulator keeps a flat copy of those inputs per node, refreshes it only for the nodes an
//! event touched, and counts the previous outcome again while nothing changed.

use waitingroom_core::{Settings, Time};
use waitingroom_distributed::invariants;
use waitingroom_distributed::{Node, Weight};

use super::nodes::Slot;
use crate::metrics::RunReport;

/// Violation descriptions kept per kind (after recovery / while recovering).
const SAMPLES: usize = 4;
/// Every this many partial invariant checks, the membership summary is verified in full.
const VERIFY_EVERY: u64 = 64;

/// What the last full invariant check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
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
/// summarised by its version and sizes instead of listed; [`CheckCache`] verifies that summary
/// against the full list now and then and reports any disagreement.
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

/// What the checks read from one slot's node last time, and whether that may be out of date.
struct NodeInputs {
    /// What every check read, membership summarised.
    always: Vec<u64>,
    /// The same with the membership listed in full.
    always_full: Vec<u64>,
    /// What quiet checks read.
    quiet: Vec<u64>,
    /// `quiet` may be out of date.
    quiet_stale: bool,
    /// Listed in [`CheckCache::touched`].
    touched: bool,
    /// Nothing this node sent waits for an acknowledgement (as of its last check).
    drained: bool,
    /// `drained` may be out of date.
    drained_stale: bool,
}

impl Default for NodeInputs {
    fn default() -> Self {
        NodeInputs {
            always: Vec::new(),
            always_full: Vec::new(),
            quiet: Vec::new(),
            quiet_stale: true,
            touched: false,
            drained: true,
            drained_stale: false,
        }
    }
}

/// The invariant-check cache.
///
/// `invariants::check` is a pure function of what it reads from the nodes (memberships,
/// roots, pointers, weight tables, settledness) and of `quiet`; with `quiet` false it reads
/// only the first three. Most events (acks, probes, retransmission ticks) change none of that,
/// and an event only ever changes the node that handled it. So each node's inputs are kept as
/// flat lists of numbers, refreshed only for the nodes touched since the last check, and the
/// outcome of the last full check is kept for each value of `quiet`; while its inputs are
/// unchanged it is counted again instead of recomputed. The count is exactly what running the
/// check after every event gives, at a fraction of the cost.
struct CheckCache {
    /// By slot.
    nodes: Vec<NodeInputs>,
    /// Slots whose node handled something since the last check.
    touched: Vec<usize>,
    /// A node was started or crashed since the last check.
    live_changed: bool,
    /// Outcome of the last full check with the network busy (0) and quiet (1), while still
    /// valid for the current inputs.
    outcome: [Option<Outcome>; 2],
    scratch: Vec<u64>,
    /// Live nodes with unacknowledged messages.
    undrained: usize,
    /// Counts down partial checks to the next verification of the membership summary.
    verify_countdown: u64,
    /// Verifications that found the membership summary unchanged but the membership changed.
    summary_misses: u64,
}

impl CheckCache {
    fn new() -> Self {
        CheckCache {
            nodes: Vec::new(),
            touched: Vec::new(),
            live_changed: true,
            outcome: [None, None],
            scratch: Vec::new(),
            undrained: 0,
            verify_countdown: 0,
            summary_misses: 0,
        }
    }

    /// Refreshes the inputs that may have changed; returns whether the network is quiet (no
    /// state-carrying message in flight and none waiting to be resent).
    fn refresh(&mut self, slots: &[Slot], in_flight: u64) -> bool {
        if self.refresh_touched(slots) {
            self.outcome = [None, None];
        }
        // Whether a node waits for acknowledgements only matters once nothing is in flight.
        if in_flight == 0 {
            self.refresh_drained(slots);
        }
        let quiet = in_flight == 0 && self.undrained == 0;
        // What only quiet checks read is refreshed only now: every node touched while the
        // network was busy is compared again here.
        if quiet && self.refresh_quiet(slots) {
            self.outcome[1] = None;
        }
        quiet
    }

    /// Refreshes what every check reads from the touched nodes; returns whether it changed.
    fn refresh_touched(&mut self, slots: &[Slot]) -> bool {
        let mut changed = std::mem::take(&mut self.live_changed);
        for slot in std::mem::take(&mut self.touched) {
            let entry = &mut self.nodes[slot];
            entry.touched = false;
            let Some(node) = slots[slot].node.as_ref() else {
                continue;
            };
            entry.drained_stale = true;
            let scratch = &mut self.scratch;
            scratch.clear();
            always_inputs(node, false, scratch);
            if *scratch != entry.always {
                std::mem::swap(scratch, &mut entry.always);
                scratch.clear();
                always_inputs(node, true, scratch);
                std::mem::swap(scratch, &mut entry.always_full);
                changed = true;
            } else {
                self.verify_countdown = self.verify_countdown.wrapping_sub(1);
                if self.verify_countdown % VERIFY_EVERY == 0 {
                    scratch.clear();
                    always_inputs(node, true, scratch);
                    if *scratch != entry.always_full {
                        // The summary missed a change: count it, and check in full.
                        self.summary_misses += 1;
                        std::mem::swap(scratch, &mut entry.always_full);
                        changed = true;
                    }
                }
            }
            entry.quiet_stale = true;
        }
        changed
    }

    /// Refreshes which nodes wait for acknowledgements.
    fn refresh_drained(&mut self, slots: &[Slot]) {
        for (entry, slot) in self.nodes.iter_mut().zip(slots) {
            if !entry.drained_stale {
                continue;
            }
            entry.drained_stale = false;
            let drained = slot.node.as_ref().is_none_or(|n| n.is_drained());
            if drained != entry.drained {
                entry.drained = drained;
                if drained {
                    self.undrained -= 1;
                } else {
                    self.undrained += 1;
                }
            }
        }
    }

    /// Refreshes what only quiet checks read; returns whether it changed.
    fn refresh_quiet(&mut self, slots: &[Slot]) -> bool {
        let mut changed = false;
        for (entry, slot) in self.nodes.iter_mut().zip(slots) {
            if !entry.quiet_stale {
                continue;
            }
            entry.quiet_stale = false;
            let Some(node) = slot.node.as_ref() else {
                continue;
            };
            let scratch = &mut self.scratch;
            scratch.clear();
            quiet_inputs(node, scratch);
            if *scratch != entry.quiet {
                std::mem::swap(scratch, &mut entry.quiet);
                changed = true;
            }
        }
        changed
    }
}

/// Runs the invariant checks over the live nodes after every `check_every`-th protocol event
/// and counts what they find.
pub(super) struct Checker {
    /// Check after every this many events (0: never).
    every: u32,
    /// The site's target.
    pub(super) target: u64,
    /// Largest sum of places granted and visitors on the site seen at a check.
    max_granted_plus_held: u64,
    /// Checks at which that sum was over the target.
    grant_violations: u64,
    /// Events since the last check.
    countdown: u32,
    cache: CheckCache,
    /// Checks run.
    checks: u64,
    /// Checks that had to run in full (inputs changed).
    full_checks: u64,
    /// Failed checks while the cluster had converged.
    violations: u64,
    /// Failed checks while it was still recovering.
    violations_recovering: u64,
    samples_after: Vec<String>,
    samples_recovering: Vec<String>,
}

impl Checker {
    pub(super) fn new(every: u32, target: u64) -> Self {
        Checker {
            every,
            target,
            max_granted_plus_held: 0,
            grant_violations: 0,
            countdown: 0,
            cache: CheckCache::new(),
            checks: 0,
            full_checks: 0,
            violations: 0,
            violations_recovering: 0,
            samples_after: Vec::new(),
            samples_recovering: Vec::new(),
        }
    }

    /// A slot was added to the cluster.
    pub(super) fn slot_added(&mut self) {
        self.cache.nodes.push(NodeInputs::default());
    }

    /// A node process started in `slot`.
    pub(super) fn started(&mut self, slot: usize) {
        let entry = &mut self.cache.nodes[slot];
        entry.always.clear();
        entry.quiet.clear();
        entry.quiet_stale = true;
        self.cache.live_changed = true;
    }

    /// The node process in `slot` crashed.
    pub(super) fn stopped(&mut self, slot: usize) {
        let entry = &mut self.cache.nodes[slot];
        entry.always.clear();
        entry.quiet.clear();
        if !entry.drained {
            entry.drained = true;
            self.cache.undrained -= 1;
        }
        entry.drained_stale = false;
        self.cache.live_changed = true;
    }

    /// The node in `slot` handled something (its inputs may have changed).
    pub(super) fn touched(&mut self, slot: usize) {
        let entry = &mut self.cache.nodes[slot];
        if !entry.touched {
            entry.touched = true;
            self.cache.touched.push(slot);
        }
    }

    /// Counts one protocol event; every `check_every`-th, checks the invariants over the nodes
    /// in `slots` (see [`CheckCache`]) with `in_flight` state-carrying messages on the network,
    /// and that the places their grants may still give out and the `held` visitors really on
    /// the site are within the target (admission leases, whatever the network did).
    pub(super) fn check(&mut self, now: Time, slots: &[Slot], (in_flight, held): (u64, u64)) {
        if self.every == 0 {
            return;
        }
        self.countdown += 1;
        if self.countdown < self.every {
            return;
        }
        self.countdown = 0;
        self.checks += 1;
        self.check_places(now, slots, held);
        let quiet = self.cache.refresh(slots, in_flight);
        let outcome = match self.cache.outcome[usize::from(quiet)] {
            Some(outcome) => outcome,
            None => {
                self.full_checks += 1;
                let outcome = self.check_in_full(now, slots, quiet);
                self.cache.outcome[usize::from(quiet)] = Some(outcome);
                outcome
            }
        };
        match outcome {
            Outcome::Fine => {}
            Outcome::Converged => self.violations += 1,
            Outcome::Recovering => self.violations_recovering += 1,
        }
    }

    /// Places granted plus visitors on the site, against the target.
    fn check_places(&mut self, now: Time, slots: &[Slot], held: u64) {
        if self.target == Settings::UNLIMITED {
            return;
        }
        let granted = slots
            .iter()
            .filter_map(|s| s.node.as_ref().map(|n| n.grant(s.clock(now)).0))
            .fold(held, u64::saturating_add);
        self.max_granted_plus_held = self.max_granted_plus_held.max(granted);
        if granted > self.target {
            self.grant_violations += 1;
            if self.samples_after.len() < SAMPLES {
                self.samples_after.push(format!(
                    "t={now}: {granted} places granted and held, target {}",
                    self.target
                ));
            }
        }
    }

    /// Runs `invariants::check`, keeping the first few violations of each kind.
    fn check_in_full(&mut self, now: Time, slots: &[Slot], quiet: bool) -> Outcome {
        let live: Vec<&Node> = slots.iter().filter_map(|s| s.node.as_ref()).collect();
        let found = invariants::check(&live, quiet);
        if found.is_empty() {
            return Outcome::Fine;
        }
        let (outcome, samples, label) = if invariants::converged(&live) {
            (Outcome::Converged, &mut self.samples_after, "converged")
        } else {
            (
                Outcome::Recovering,
                &mut self.samples_recovering,
                "recovering",
            )
        };
        if samples.len() < SAMPLES {
            let text: Vec<String> = found.iter().map(|v| v.to_string()).collect();
            samples.push(format!(
                "t={now} ({label}, quiet={quiet}): {}",
                text.join("; ")
            ));
        }
        outcome
    }

    /// Adds the checks' counts to the report.
    pub(super) fn finish(&self, report: &mut RunReport) {
        report.invariant_checks = self.checks;
        report.max_granted_plus_held = self.max_granted_plus_held;
        report.grant_violations = self.grant_violations;
        report.invariant_checks_full = self.full_checks;
        report.invariant_violations = self.violations;
        report.invariant_violations_recovering = self.violations_recovering;
        report.violation_samples = self
            .samples_after
            .iter()
            .chain(&self.samples_recovering)
            .cloned()
            .collect();
        if self.cache.summary_misses > 0 {
            report
                .protocol_events
                .insert("check-summary-misses".into(), self.cache.summary_misses);
        }
    }
}
