//! The room's promises to the site, checked as the run goes (`--strict`, which the swarm turns
//! on): no admission puts more visitors on the site than the target, one admission gives one
//! pass, a lapsed admission gives no pass, every pass names a recorded round that covers it, a
//! given-back pass stays refused. Each check looks only at what one event changed, so a run
//! pays for it per event, not per visitor.
//!
//! The target may change while the run goes (an operator's action): an admission is measured
//! against the largest target in force over the last `window` (what grants handed out under an
//! older, larger target may still spend), and while the room lets everyone through
//! (`passthrough`) against none.

use std::collections::{BTreeMap, HashMap, HashSet};

use waitingroom_core::round_records::Cutoff;
use waitingroom_core::{NodeId, Pass, QueueKey, Settings, Time};

/// Violation descriptions kept.
const SAMPLES: usize = 6;

/// A round as a pass names it: its number and when it was decided (the pass's
/// `eviction_time`).
type NamedRound = (u64, Time);

/// What the promises checks found and what they need to remember.
#[derive(Default)]
pub struct Promises {
    /// Targets in force from each time on, in time order (`Settings::UNLIMITED`: none).
    targets: Vec<(Time, u64)>,
    /// How long an older target still bounds admissions after a change.
    window: Time,
    /// Each visitor's pass (id, creation) since their latest admission.
    passes: HashMap<u32, (u64, Time)>,
    /// Visitors let straight through (their pass names the round whose grant let them
    /// through, or none when they needed no place).
    straight: HashSet<u32>,
    /// Rounds recorded, by number and decision time: their cutoffs, and the places they granted
    /// for joins let straight through not yet named by a pass. Two roots may give their rounds
    /// one number (a fork the audit lists): a pass names its round by both, as the audit reads
    /// it (`waitingroom_core::round_records::AdmittedPass`).
    records: BTreeMap<(u64, Time), (Cutoff, u64)>,
    /// The records taken, by round, decision time and root.
    roots: HashSet<(u64, Time, NodeId)>,
    /// (visitor, round named and when it was decided, queue key as the audit reads it off the
    /// pass) of every pass handed out by a leave.
    named: Vec<(u32, Option<NamedRound>, QueueKey)>,
    /// Failures by check.
    pub failed: BTreeMap<String, u64>,
    /// The first few, with their simulated time.
    pub samples: Vec<String>,
}

impl Promises {
    /// Checks against `target` from the start; an older target bounds admissions for `window`.
    pub fn new(target: u64, window: Time) -> Self {
        Promises {
            targets: vec![(0, target)],
            window,
            ..Promises::default()
        }
    }

    /// Counts a failure of `check`, keeping a description of the first few.
    pub fn fail(&mut self, now: Time, check: &str, what: impl FnOnce() -> String) {
        *self.failed.entry(check.to_owned()).or_insert(0) += 1;
        if self.samples.len() < SAMPLES {
            self.samples.push(format!("t={now}: {check}: {}", what()));
        }
    }

    /// The target in force from `now` on (`Settings::UNLIMITED`: none).
    pub fn target_changed(&mut self, now: Time, target: u64) {
        self.targets.push((now, target));
    }

    /// The largest target in force at any time within `extra + window` before `now`.
    pub fn bound(&self, now: Time, extra: Time) -> u64 {
        let since = now.saturating_sub(self.window.saturating_add(extra));
        let mut bound = 0;
        for (i, &(from, target)) in self.targets.iter().enumerate() {
            let until = self.targets.get(i + 1).map_or(Time::MAX, |n| n.0);
            if until > since && from <= now {
                bound = bound.max(target);
            }
        }
        bound
    }

    /// The visitors on the site (admitted and unclaimed, or holding a valid pass) just grew to
    /// `on_site`.
    pub fn place_taken(&mut self, now: Time, on_site: u64) {
        let bound = self.bound(now, 0);
        if bound != Settings::UNLIMITED && on_site > bound {
            self.fail(now, "over-target", || {
                format!("{on_site} on the site, target {bound}")
            });
        }
    }

    /// Visitor `v` was let straight through.
    pub fn straight_through(&mut self, v: u32) {
        self.straight.insert(v);
    }

    /// Visitor `v`'s admission lapsed and a round let them out again: a new pass is theirs.
    pub fn admitted_again(&mut self, v: u32) {
        self.passes.remove(&v);
    }

    /// The record of round `round`, decided at `decided_at` by `root`: its cutoff, and the
    /// places it granted for joins let straight through (`through`). Two roots that decided one
    /// round number at one time (a fork) both granted places: a pass let through names the
    /// round the same way under either's grant, as the audit counts them.
    pub fn recorded(&mut self, (round, decided_at, root): (u64, Time, NodeId), at: (Cutoff, u64)) {
        let fresh = self.roots.insert((round, decided_at, root));
        let (cutoff, through) = at;
        (self.records)
            .entry((round, decided_at))
            .and_modify(|(_, kept)| *kept += through * u64::from(fresh))
            .or_insert((cutoff, through));
    }

    /// Visitor `v` was handed `pass` by a leave (`fresh`) or a refresh: one admission, one
    /// pass, whatever node hands it out.
    pub fn pass_handed(&mut self, now: Time, v: u32, pass: &Pass, fresh: bool) {
        let identity = (pass.id.0, pass.created_at);
        match self.passes.get(&v) {
            Some(&held) if held != identity => self.fail(now, "second-pass", || {
                format!(
                    "visitor {v} holds pass {}@{} and was handed {}@{}",
                    held.0, held.1, identity.0, identity.1
                )
            }),
            Some(_) => {}
            None => {
                self.passes.insert(v, identity);
            }
        }
        if fresh {
            // The audit knows a pass's key only from the pass: its join time and id.
            let key = QueueKey {
                join_time: pass.queue_join_time,
                ticket: pass.id,
                node: NodeId(0),
            };
            let round = pass.round.map(|r| (r, pass.eviction_time));
            self.named.push((v, round, key));
        }
    }

    /// At the end of the run: every pass handed out by a leave names a recorded round that
    /// covers its holder, or, let straight through, the round whose grant let them through (one
    /// of the places it granted for that), as the audit reads them
    /// (`waitingroom_core::round_records::audit`); a straight-through pass names none when it
    /// needed no place (passthrough, no limit on the site).
    pub fn finish(&mut self, now: Time) {
        for (v, round, key) in std::mem::take(&mut self.named) {
            let straight = self.straight.contains(&v);
            let Some((r, at)) = round else {
                if !straight {
                    self.fail(now, "pass-without-round", || {
                        format!("visitor {v}'s pass names no round")
                    });
                }
                continue;
            };
            match self.named_round((r, at), &key, straight) {
                Some(true) => {}
                Some(false) => self.fail(now, "pass-not-covered", || {
                    format!("visitor {v}'s round {r} does not cover their key")
                }),
                None => self.fail(now, "round-unrecorded", || {
                    format!("visitor {v}'s round {r} decided at {at} has no record")
                }),
            }
        }
    }

    /// Whether round `r` covers a pass let out at `at` with `key` (None: no such record):
    /// decided then and its cutoff covers the key; or, for a visitor let straight through
    /// (`straight`), that round or another of that number with a place for a join left, which
    /// the pass takes: the latest decided before, else the first (the join's clock may be
    /// behind the root's), as the audit picks it.
    fn named_round(&mut self, (r, at): NamedRound, key: &QueueKey, straight: bool) -> Option<bool> {
        if let Some((cutoff, through)) = self.records.get_mut(&(r, at)) {
            let placed = straight && !cutoff.covers(key) && *through > 0;
            *through -= u64::from(placed);
            return Some(placed || cutoff.covers(key));
        }
        if !straight {
            return None;
        }
        let left = |(_, (_, through)): &(&(u64, Time), &(Cutoff, u64))| *through > 0;
        let before = (self.records.range((r, 0)..=(r, at)).rev()).find(left);
        let found = before.or_else(|| self.records.range((r, at)..=(r, Time::MAX)).find(left));
        let at = *found?.0;
        if let Some((_, through)) = self.records.get_mut(&at) {
            *through -= 1;
        }
        Some(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use waitingroom_core::TicketId;

    fn pass(id: u64, created_at: Time, round: Option<u64>) -> Pass {
        Pass {
            id: TicketId(id),
            node: NodeId(1),
            queue_join_time: 100,
            created_at,
            issued_at: created_at,
            expires_at: created_at + 1_000,
            eviction_time: round.map_or(0, |r| r * 1_000),
            round,
            draw: None,
        }
    }

    #[test]
    fn one_admission_gives_one_pass_and_each_pass_names_a_covering_round() {
        let mut p = Promises::new(10, 1_000);
        p.pass_handed(5, 7, &pass(1, 5, Some(0)), true);
        // A refresh, or the same pass handed out again, is the same pass.
        p.pass_handed(6, 7, &pass(1, 5, Some(0)), false);
        assert!(p.failed.is_empty());
        p.pass_handed(7, 7, &pass(1, 7, Some(0)), true);
        assert_eq!(p.failed.get("second-pass"), Some(&1));
        // After the admission lapsed and a round let them out again, a new pass is theirs.
        p.admitted_again(7);
        p.pass_handed(8, 7, &pass(1, 8, Some(1)), true);
        assert_eq!(p.failed.get("second-pass"), Some(&1));
        p.pass_handed(9, 8, &pass(2, 9, None), true);
        p.straight_through(9);
        p.pass_handed(9, 9, &pass(3, 9, None), true);
        let cutoff = |join_time| Cutoff {
            join_time,
            id: TicketId(u64::MAX),
            node: NodeId(u64::MAX),
        };
        p.recorded((0, 0, NodeId(1)), (cutoff(100), 0));
        p.recorded((1, 1_000, NodeId(1)), (cutoff(50), 0));
        // Another root's round 1 (a fork), decided later: its passes are checked against it.
        p.recorded((1, 3_000, NodeId(2)), (cutoff(100), 0));
        let mut forked = pass(4, 9, Some(1));
        forked.eviction_time = 3_000;
        p.pass_handed(9, 10, &forked, true);
        // A pass naming a round decided when no record says.
        let mut unrecorded = pass(5, 9, Some(0));
        unrecorded.eviction_time = 2_000;
        p.pass_handed(9, 11, &unrecorded, true);
        p.finish(10);
        assert_eq!(p.failed.get("pass-without-round"), Some(&1));
        // Round 1's cutoff is below the key; round 0's covers it, and so does the fork's
        // round 1 the third pass names.
        assert_eq!(p.failed.get("pass-not-covered"), Some(&1));
        assert_eq!(p.failed.get("round-unrecorded"), Some(&1));
    }

    #[test]
    fn an_older_larger_target_bounds_admissions_only_for_the_window() {
        let mut p = Promises::new(10, 1_000);
        p.target_changed(5_000, 4);
        assert_eq!(p.bound(4_000, 0), 10);
        assert_eq!(p.bound(5_500, 0), 10);
        assert_eq!(p.bound(6_001, 0), 4);
        assert_eq!(p.bound(6_001, 2_000), 10);
        p.place_taken(5_500, 10);
        assert!(p.failed.is_empty());
        p.place_taken(6_500, 5);
        assert_eq!(p.failed.get("over-target"), Some(&1));
        p.target_changed(7_000, Settings::UNLIMITED);
        p.place_taken(7_000, 500);
        assert_eq!(p.failed.get("over-target"), Some(&1));
    }
}
