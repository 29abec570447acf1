//! What a run measured: the ledger of who joined and was admitted when, the ground truth of
//! who is on the site, and the [`RunReport`] computed from them at the end.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use waitingroom_core::Time;
use waitingroom_core::kendall::{Ties, kendall_tau, kendall_tau_permutation};

use crate::network::NetStats;

/// Not admitted (yet).
const NEVER: Time = Time::MAX;

/// One admission of one visitor, as a waiting room reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// The visitor.
    pub v: u32,
    /// When the admission was decided.
    pub decided_at: Time,
    /// When the visitor was marked admitted.
    pub at: Time,
    /// Orders admissions decided at the same instant.
    pub tie_break: (u64, u64),
    /// Which node process admitted them (for double admissions; 0 where there are none).
    pub by: u32,
}

impl Admission {
    /// An admission decided and made at `now`, by a room without node processes (the
    /// baselines) or without an admission event (straight through).
    pub fn at_once(v: u32, now: Time, tie_break: (u64, u64)) -> Self {
        Admission {
            v,
            decided_at: now,
            at: now,
            tie_break,
            by: 0,
        }
    }
}

/// Per-visitor record of joining and of the first admission.
pub struct Ledger {
    /// Join time as the waiting room recorded it (the fair order's first key).
    join_time: Vec<Time>,
    /// Ticket id (the fair order's tie-break).
    ticket: Vec<u64>,
    /// When the admission was decided (`NEVER` if not admitted).
    decided_at: Vec<Time>,
    /// When the visitor was marked admitted.
    at: Vec<Time>,
    /// Orders admissions decided at the same instant.
    tie_break: Vec<(u64, u64)>,
    /// Which node process admitted them first.
    by: Vec<u32>,
    /// Visitors admitted at least once.
    pub admitted: u64,
    /// Admitted again while the node process that first admitted them was still alive, and not
    /// moved ([`Ledger::moved_admissions`]).
    pub double_admissions: u64,
    /// Admitted again after the node that first admitted them died (expected: they re-queued).
    pub readmissions: u64,
    /// Admitted again by another node after they moved: the same round's admission carried
    /// over (same decision time, so the same pass: `WaitingRoom::leave` derives the pass from
    /// it), or, after their node could not be reached, a round of the node they moved to
    /// (that node tells theirs to forget them: a pass from both is `second-pass`); or by the
    /// node they moved away from, once back there after it lost its record of them.
    pub moved_admissions: u64,
    /// Visitors told "admitted" without the waiting room reporting the admission as an event
    /// (straight-through admission does that).
    pub silent_admissions: u64,
    /// Ground truth: admitted and not yet claimed, or holding a valid pass.
    pub on_site: u64,
    /// Largest `on_site` seen.
    pub max_on_site: u64,
    /// Visitors whose admission lapsed: its claim window closed while they kept their ticket
    /// (banked admissions); their place is free again.
    lapsed: HashSet<u32>,
    /// (visitor, node process) for each node process a visitor moved away from: they checked
    /// in at another node because it could not be reached, and were queued there.
    moved_from: HashSet<(u32, u32)>,
    /// Visitors queued again after an admission (their node went away and another queued them
    /// under their join time): they gave the admission up with its ticket, and hold no place
    /// until a round lets them out again.
    requeued: HashSet<u32>,
}

impl Ledger {
    /// An empty ledger for `n` visitors.
    pub fn new(n: usize) -> Self {
        Ledger {
            join_time: vec![0; n],
            ticket: vec![0; n],
            decided_at: vec![NEVER; n],
            at: vec![0; n],
            tie_break: vec![(0, 0); n],
            by: vec![0; n],
            admitted: 0,
            double_admissions: 0,
            readmissions: 0,
            moved_admissions: 0,
            silent_admissions: 0,
            on_site: 0,
            max_on_site: 0,
            lapsed: HashSet::new(),
            moved_from: HashSet::new(),
            requeued: HashSet::new(),
        }
    }

    /// Visitor `v`, admitted, was queued again: their place is free until they are let out
    /// again ([`Ledger::place_retaken`]).
    pub fn requeued(&mut self, v: u32) {
        if self.is_admitted(v) && !self.lapsed.contains(&v) && self.requeued.insert(v) {
            self.place_freed();
        }
    }

    /// Visitor `v`'s admission lapsed unclaimed: their place is free.
    pub fn lapse(&mut self, v: u32) {
        let free = self.requeued.remove(&v);
        if self.lapsed.insert(v) && !free {
            self.place_freed();
        }
    }

    /// Whether `v`'s admission lapsed (and no round let them out again since).
    pub fn has_lapsed(&self, v: u32) -> bool {
        self.lapsed.contains(&v)
    }

    /// Visitor `v`, whose admission had lapsed, takes a place again (a pass or a new
    /// admission).
    pub fn place_retaken(&mut self, v: u32) {
        if self.lapsed.remove(&v) {
            self.on_site += 1;
            self.max_on_site = self.max_on_site.max(self.on_site);
        }
    }

    /// Visitor `v`, queued again after an admission, was let straight through: a place again.
    pub fn requeued_let_through(&mut self, v: u32) {
        if self.requeued.remove(&v) {
            self.on_site += 1;
            self.max_on_site = self.max_on_site.max(self.on_site);
        }
    }

    /// Visitor `v` checked in at another node because theirs, node process `process`, could not
    /// be reached.
    pub fn moved_from(&mut self, v: u32, process: u32) {
        self.moved_from.insert((v, process));
    }

    /// Visitor `v` joined at `join_time` with ticket id `ticket`.
    pub fn joined(&mut self, v: u32, join_time: Time, ticket: u64) {
        self.join_time[v as usize] = join_time;
        self.ticket[v as usize] = ticket;
    }

    /// When `v` joined (true time).
    pub fn joined_at(&self, v: u32) -> Time {
        self.join_time[v as usize]
    }

    /// Whether `v` was admitted at least once.
    pub fn is_admitted(&self, v: u32) -> bool {
        self.decided_at[v as usize] != NEVER
    }

    /// When `v` was first marked admitted, if they were.
    pub fn admitted_at(&self, v: u32) -> Option<Time> {
        self.is_admitted(v).then(|| self.at[v as usize])
    }

    /// Records admission `a`. `alive` says whether a node process is still running. Returns
    /// whether this was the visitor's first admission.
    pub fn admit(&mut self, a: Admission, alive: impl Fn(u32) -> bool) -> bool {
        let i = a.v as usize;
        if self.decided_at[i] != NEVER {
            // Let out again after they were queued again: a new place (the kinds of second
            // admission below are told apart as before).
            self.requeued_let_through(a.v);
            if self.lapsed.contains(&a.v) {
                // Let out again after their admission lapsed: a new admission, a new place.
                self.place_retaken(a.v);
                self.readmissions += 1;
                return false;
            }
            let left = |by| self.moved_from.contains(&(a.v, by));
            let moved = left(self.by[i]) || left(a.by);
            // The node they moved away from lets them out again once they came back: it had
            // no record of them left (it keeps one per ticket, and holding their first
            // admission it would have answered with that one), so the first admission had
            // lapsed unclaimed there or it was told to forget them.
            let back = a.by == self.by[i] && left(a.by);
            if back || a.by != self.by[i] && (a.decided_at == self.decided_at[i] || moved) {
                // Not a second admission: the round that let them out, carried over by the node
                // they could reach (its pass is the first one's: it dates from the round); or
                // one of the two nodes is one they moved away from, which could not be reached
                // (it is told to forget them; it let them out before that, or before it heard),
                // as after that node's death. Two passes for them is `Promises::pass_handed`'s
                // failure, a place too many `over-target`.
                self.moved_admissions += 1;
                return false;
            }
            if alive(self.by[i]) {
                self.double_admissions += 1;
            } else {
                self.readmissions += 1;
            }
            return false;
        }
        self.decided_at[i] = a.decided_at;
        self.at[i] = a.at;
        self.tie_break[i] = a.tie_break;
        self.by[i] = a.by;
        self.admitted += 1;
        self.on_site += 1;
        self.max_on_site = self.max_on_site.max(self.on_site);
        true
    }

    /// A place on the site became free (a pass expired, an admission went unclaimed).
    pub fn place_freed(&mut self) {
        self.on_site = self.on_site.saturating_sub(1);
    }

    /// Mean and longest wait, from joining to the first admission, over admitted visitors.
    pub fn waits(&self) -> (f64, Time) {
        let (mut sum, mut max, mut n) = (0u128, 0, 0u64);
        for (i, &d) in self.decided_at.iter().enumerate() {
            if d != NEVER {
                let w = self.at[i].saturating_sub(self.join_time[i]);
                sum += u128::from(w);
                max = max.max(w);
                n += 1;
            }
        }
        let mean = if n == 0 { 0.0 } else { sum as f64 / n as f64 };
        (mean, max)
    }

    /// Most visitors first let out within any `window` ms (a sliding window over the admission
    /// times).
    pub fn max_admitted_within(&self, window: Time) -> u64 {
        let mut times: Vec<Time> = (0..self.decided_at.len())
            .filter(|&i| self.decided_at[i] != NEVER)
            .map(|i| self.at[i])
            .collect();
        times.sort_unstable();
        let mut start = 0;
        let mut most = 0;
        for end in 0..times.len() {
            while times[end] >= times[start] + window {
                start += 1;
            }
            most = most.max(end + 1 - start);
        }
        most as u64
    }

    /// Random queueing's unfairness: the pairs let out against the lottery's order while both
    /// were waiting, over all pairs. A visitor's round is the one in progress when they were
    /// let out (eviction-interval boundaries of `round_ms`, as [`Fairness::actual`]; a round
    /// may let out under an earlier round's range too). A pair counts when one visitor's round
    /// began after the other, with the smaller ticket id, had joined (so that other was
    /// counted in it), and that other's round is later. Under a
    /// lottery the order over the whole run follows arrival (nobody is let out before joining),
    /// so plain Kendall-Tau against ticket order says nothing; this is 0 when every round let
    /// out the smallest tickets waiting.
    pub fn lottery_tau(&self, round_ms: Time) -> f64 {
        let mut admitted: Vec<u32> = (0..self.decided_at.len() as u32)
            .filter(|&v| self.decided_at[v as usize] != NEVER)
            .collect();
        let n = admitted.len();
        if n < 2 {
            return 0.0;
        }
        let mut rank = vec![0usize; self.decided_at.len()];
        admitted.sort_unstable_by_key(|&v| self.ticket[v as usize]);
        for (r, &v) in admitted.iter().enumerate() {
            rank[v as usize] = r;
        }
        let mut joins = admitted.clone();
        joins.sort_unstable_by_key(|&v| self.join_time[v as usize]);
        let round_ms = round_ms.max(1);
        let round_of = |v: u32| self.at[v as usize] / round_ms * round_ms;
        admitted.sort_unstable_by_key(|&v| round_of(v));
        let (mut waiting, mut done) = (Fenwick::new(n), vec![false; n]);
        let (mut inversions, mut next_join, mut i) = (0u128, 0, 0);
        while i < n {
            let t = round_of(admitted[i]);
            let round = admitted[i..]
                .iter()
                .take_while(|&&v| round_of(v) == t)
                .count();
            while next_join < n && self.join_time[joins[next_join] as usize] <= t {
                let r = rank[joins[next_join] as usize];
                if !done[r] {
                    waiting.add(r, 1);
                }
                next_join += 1;
            }
            let round = &admitted[i..i + round];
            for &v in round {
                let r = rank[v as usize];
                if !done[r] && self.join_time[v as usize] <= t {
                    waiting.add(r, -1);
                }
                done[r] = true;
            }
            for &v in round {
                inversions += u128::from(waiting.before(rank[v as usize]));
            }
            i += round.len();
        }
        inversions as f64 / (n as f64 * (n as f64 - 1.0) / 2.0)
    }

    /// Kendall-Tau distances (see [`Fairness`]); `round_ms` is the eviction interval, whose
    /// boundaries start the rounds.
    pub fn fairness(&self, round_ms: Time) -> Fairness {
        let mut admitted: Vec<u32> = (0..self.decided_at.len() as u32)
            .filter(|&v| self.decided_at[v as usize] != NEVER)
            .collect();
        // Fair rank of each admitted visitor.
        admitted.sort_unstable_by_key(|&v| (self.join_time[v as usize], self.ticket[v as usize]));
        let mut rank = vec![0u64; self.decided_at.len()];
        for (r, &v) in admitted.iter().enumerate() {
            rank[v as usize] = r as u64;
        }
        let thesis: Vec<(u64, u64)> = admitted
            .iter()
            .map(|&v| (self.join_time[v as usize], self.at[v as usize]))
            .collect();
        let rank_of = |v: &u32| rank[*v as usize];
        // Actual: by the round in progress when the visitor was let out, then by key.
        let round_ms = round_ms.max(1);
        admitted.sort_unstable_by_key(|&v| (self.at[v as usize] / round_ms, rank[v as usize]));
        let actual = kendall_tau_permutation(&admitted.iter().map(rank_of).collect::<Vec<_>>());
        admitted.sort_unstable_by_key(|&v| {
            (
                self.decided_at[v as usize],
                self.tie_break[v as usize],
                rank[v as usize],
            )
        });
        Fairness {
            strict: kendall_tau_permutation(&admitted.iter().map(rank_of).collect::<Vec<_>>()),
            actual,
            thesis: kendall_tau(&thesis, Ties::CountAsDiscordant),
        }
    }
}

/// Counts by rank, with prefix sums in O(log n) (a Fenwick tree).
struct Fenwick(Vec<i64>);

impl Fenwick {
    fn new(n: usize) -> Self {
        Fenwick(vec![0; n + 1])
    }

    fn add(&mut self, rank: usize, by: i64) {
        let mut i = rank + 1;
        while i < self.0.len() {
            self.0[i] += by;
            i += i & i.wrapping_neg();
        }
    }

    /// How many are counted at ranks below `rank`.
    fn before(&self, rank: usize) -> u64 {
        let (mut i, mut sum) = (rank, 0);
        while i > 0 {
            sum += self.0[i];
            i -= i & i.wrapping_neg();
        }
        sum.max(0) as u64
    }
}

/// Normalised Kendall-Tau distances between the fair order (join time, then ticket id) and the
/// order visitors were let out in, three ways.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fairness {
    /// The admission sequence by the time of the round that *decided* the admission, then the
    /// tie-break: a visitor whose node missed a round and let them out later (catch-up) counts
    /// as let out on time.
    pub strict: f64,
    /// The admission sequence by the round in progress when the visitor was *actually* let out
    /// (eviction-interval boundaries), ties within a round broken by key: every late admission
    /// counts against us.
    pub actual: f64,
    /// The thesis' definition: (join ms, admission ms) pairs, one-sided ties discordant (it
    /// punishes batching, not unfairness).
    pub thesis: f64,
}

/// Everything one run reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// The run's seed.
    pub seed: u64,
    /// The strategy simulated.
    pub strategy: String,
    /// Admission mode (qpid).
    pub admission: String,
    /// Nodes at the start.
    pub nodes: u32,
    /// Visitors.
    pub users: u64,
    /// Target on the site.
    pub target: String,
    /// Crashes (and as many additions).
    pub churn: u32,
    /// Arrival process.
    pub arrival: String,
    /// Normalised Kendall-Tau distance between the fair order and the admission sequence.
    pub kendall_tau: f64,
    /// Kendall-Tau by the round in which visitors were actually let out ([`Fairness::actual`]).
    pub kendall_tau_actual: f64,
    /// How visitors were let out: `fifo`, or `random` (a lottery: `kendall_tau` is then
    /// [`Ledger::lottery_tau`], the others are against arrival as always).
    #[serde(default)]
    pub queueing_method: String,
    /// Strict Kendall-Tau against arrival order (the same as `kendall_tau` under fifo).
    #[serde(default)]
    pub kendall_tau_arrival: f64,
    /// The thesis' Kendall-Tau over (join ms, admission ms) with one-sided ties discordant.
    pub kendall_tau_thesis: f64,
    /// Visitors admitted at least once.
    pub admitted: u64,
    /// Visitors who kept checking in and never got in (must be 0).
    pub lost: u64,
    /// Visitors who gave up waiting.
    pub abandoned: u64,
    /// Visitors the waiting room refused (counted in `lost` too).
    pub refused: u64,
    /// Tickets admitted again while the node that first admitted them was alive, and not moved.
    pub double_admissions: u64,
    /// Tickets admitted again after the node that first admitted them died.
    pub readmissions: u64,
    /// Visitors let out again by another node after they moved, their node unreachable
    /// ([`Ledger::moved_admissions`]).
    #[serde(default)]
    pub moved_admissions: u64,
    /// Simulated time from the opening of the arrival window until the last visitor got in.
    pub sim_time_ms: Time,
    /// Mean wait from joining to admission, over admitted visitors.
    pub wait_ms_mean: f64,
    /// Longest wait from joining to admission.
    pub wait_ms_max: Time,
    /// Counts completed at a root (eviction rounds; the other strategies have none).
    #[serde(default)]
    pub rounds: u64,
    /// Mean time from the interval boundary that started a round to its completion at the
    /// root (simulated time; with clock skew, off by the reference clock's offset).
    #[serde(default)]
    pub round_ms_mean: f64,
    /// Longest such round.
    #[serde(default)]
    pub round_ms_max: Time,
    /// Whether the run hit its time limit first.
    pub timed_out: bool,
    /// Largest number on the site (ground truth: admitted and unclaimed, or with a valid pass).
    pub max_on_site: u64,
    /// Largest excess of `max_on_site` over the target.
    pub max_overshoot: u64,
    /// Most visitors let out within any one minute.
    pub max_admitted_per_minute: u64,
    /// With a rate cap: how far that went over the cap plus one round's burst (must be 0).
    pub rate_cap_excess: u64,
    /// With partitions: mean wait (ms) of the visitors who joined during the first one at a
    /// node on its paused side (no majority), and of those who joined on the other side.
    pub partition_waits: Option<(f64, f64)>,
    /// Largest sum, at a check, of the places the nodes' live grants may still give out and
    /// the visitors really on the site (admission leases: must stay within the target).
    pub max_granted_plus_held: u64,
    /// Checks at which that sum was over the target.
    pub grant_violations: u64,
    /// Messages between nodes.
    pub messages: u64,
    /// Messages per admitted visitor.
    pub messages_per_admitted: f64,
    /// Invariant checks that failed while the cluster had converged (after recovery).
    pub invariant_violations: u64,
    /// Invariant checks that failed while the cluster was still recovering.
    pub invariant_violations_recovering: u64,
    /// Invariant checks run (after every `check_every`-th protocol event).
    pub invariant_checks: u64,
    /// Of those, checks whose inputs had changed since the previous one and so ran in full
    /// (the others repeat the previous outcome, which is what they would compute).
    pub invariant_checks_full: u64,
    /// The first few violations, with their simulated time.
    pub violation_samples: Vec<String>,
    /// Events processed.
    pub events: u64,
    /// Visitor operations the waiting room refused, by reason.
    pub visitor_errors: BTreeMap<String, u64>,
    /// Protocol events worth knowing about (members failed, tree repairs, rejoins), by kind.
    pub protocol_events: BTreeMap<String, u64>,
    /// What the network did.
    pub network: NetStats,
    /// Hash of the event trace: equal for equal seeds and configurations.
    pub trace_hash: String,
    /// Wall-clock time of the run.
    pub wall_ms: u64,
    /// Peak resident memory of the process (VmHWM) at the end, in bytes.
    pub peak_memory: u64,
    /// The command that replays this run.
    pub command: String,
    /// With `--strict`: the room's promises broken (`crate::promises`), by check.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub broken_promises: BTreeMap<String, u64>,
}

impl RunReport {
    /// The checks every run must pass: nobody lost, no double admission, no invariant broken
    /// after recovery. Returns what failed.
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.lost > 0 && self.timed_out {
            out.push(format!(
                "timed out with {} visitors not let in (a stall, or raise --max-time-ms if \
                 the room is simply slow)",
                self.lost
            ));
        } else if self.lost > 0 {
            out.push(format!("{} visitors lost", self.lost));
        }
        if self.double_admissions > 0 {
            out.push(format!("{} double admissions", self.double_admissions));
        }
        if self.grant_violations > 0 {
            out.push(format!(
                "{} checks with more places granted and held than the target (at most {})",
                self.grant_violations, self.max_granted_plus_held
            ));
        }
        if self.rate_cap_excess > 0 {
            out.push(format!(
                "{} admitted in one minute, {} over the rate cap and one round's burst",
                self.max_admitted_per_minute, self.rate_cap_excess
            ));
        }
        if self.invariant_violations > 0 {
            out.push(format!(
                "{} invariant violations after recovery",
                self.invariant_violations
            ));
        }
        for (check, n) in &self.broken_promises {
            out.push(format!("{n} × {check}"));
        }
        out
    }

    /// The names of the checks this run failed (what [`RunReport::failures`] describes).
    pub fn failed_checks(&self) -> Vec<String> {
        let mut out = Vec::new();
        let named = [
            ("timed-out", self.lost > 0 && self.timed_out),
            ("lost", self.lost > 0 && !self.timed_out),
            ("double-admission", self.double_admissions > 0),
            ("granted-and-held-over-target", self.grant_violations > 0),
            ("rate-cap", self.rate_cap_excess > 0),
            ("invariant", self.invariant_violations > 0),
        ];
        out.extend(named.iter().filter(|c| c.1).map(|c| c.0.to_owned()));
        out.extend(self.broken_promises.keys().cloned());
        out
    }
}

/// Peak resident memory of this process so far (VmHWM), in bytes; 0 where unavailable.
pub fn peak_memory() -> u64 {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Visitor `v` admitted at `t` by process `by`.
    fn admission(v: u32, t: Time, tie_break: (u64, u64), by: u32) -> Admission {
        Admission {
            by,
            ..Admission::at_once(v, t, tie_break)
        }
    }

    #[test]
    fn a_lottery_is_judged_among_those_waiting_together() {
        // Four wait together (tickets 40, 10, 30, 20), a fifth (ticket 5) comes after the
        // first round. Rounds let out the smallest tickets waiting: fair, whatever the arrival.
        let mut l = Ledger::new(5);
        for (v, ticket) in [40, 10, 30, 20].into_iter().enumerate() {
            l.joined(v as u32, v as u64, ticket);
        }
        l.joined(4, 1_500, 5);
        l.admit(admission(1, 1_000, (0, 0), 1), |_| true);
        l.admit(admission(3, 1_000, (0, 0), 1), |_| true);
        l.admit(admission(4, 2_000, (0, 0), 1), |_| true);
        l.admit(admission(2, 3_000, (0, 0), 1), |_| true);
        l.admit(admission(0, 3_000, (0, 0), 1), |_| true);
        assert_eq!(l.lottery_tau(1_000), 0.0);
        // Ticket 30 let out in the first round while 20 waited: one pair of ten.
        let mut l = Ledger::new(4);
        for (v, ticket) in [40, 10, 30, 20].into_iter().enumerate() {
            l.joined(v as u32, v as u64, ticket);
        }
        l.admit(admission(1, 1_000, (0, 0), 1), |_| true);
        l.admit(admission(2, 1_000, (0, 0), 1), |_| true);
        l.admit(admission(3, 2_000, (0, 0), 1), |_| true);
        l.admit(admission(0, 2_000, (0, 0), 1), |_| true);
        assert!((l.lottery_tau(1_000) - 1.0 / 6.0).abs() < 1e-12);
    }

    #[test]
    fn fairness_of_a_fair_and_an_unfair_ledger() {
        let mut l = Ledger::new(4);
        for v in 0..4 {
            l.joined(v, 10 * u64::from(v), 100 + u64::from(v));
        }
        // Admitted together, in key order: strictly fair; the thesis calls every pair a
        // disagreement (same admission ms, different join ms).
        for v in 0..4 {
            l.admit(admission(v, 1_000, (10 * u64::from(v), 0), 1), |_| true);
        }
        let f = l.fairness(1_000);
        assert_eq!((f.strict, f.actual, f.thesis), (0.0, 0.0, 1.0));
        assert_eq!(l.max_on_site, 4);

        let mut l = Ledger::new(3);
        for v in 0..3 {
            l.joined(v, u64::from(v), 0);
        }
        l.admit(admission(2, 1, (0, 0), 1), |_| true);
        l.admit(admission(0, 2, (0, 0), 1), |_| true);
        l.admit(admission(1, 3, (0, 0), 1), |_| true);
        let f = l.fairness(1_000);
        assert!((f.strict - 2.0 / 3.0).abs() < 1e-12);
        assert!((f.thesis - 2.0 / 3.0).abs() < 1e-12);
        // All three let out within one round: in key order by the actual measure.
        assert_eq!(f.actual, 0.0);
    }

    /// A visitor let out late by catch-up (their node missed the round that decided them)
    /// counts as on time by the strict measure and as late by the actual one.
    #[test]
    fn a_catch_up_admission_counts_against_the_actual_measure_only() {
        let mut l = Ledger::new(3);
        for v in 0..3 {
            l.joined(v, u64::from(v), 0);
        }
        let decided = |v, decided_at, at| Admission {
            decided_at,
            ..admission(v, at, (0, 0), 1)
        };
        l.admit(decided(1, 1_000, 1_000), |_| true);
        l.admit(decided(2, 2_000, 2_000), |_| true);
        l.admit(decided(0, 1_000, 2_500), |_| true);
        let f = l.fairness(1_000);
        assert_eq!(f.strict, 0.0);
        assert!((f.actual - 1.0 / 3.0).abs() < 1e-12, "{f:?}");
    }

    #[test]
    fn a_second_admission_is_double_only_while_the_first_node_lives() {
        let mut l = Ledger::new(2);
        assert!(l.admit(admission(0, 1, (0, 0), 7), |_| true));
        assert!(!l.admit(admission(0, 2, (0, 0), 8), |p| p != 7));
        assert_eq!((l.double_admissions, l.readmissions), (0, 1));
        assert!(!l.admit(admission(0, 3, (0, 0), 8), |_| true));
        assert_eq!(l.double_admissions, 1);
        assert_eq!(l.admitted, 1);
    }

    #[test]
    fn an_admission_again_by_a_node_they_moved_to_or_from_is_not_a_second_one() {
        let mut l = Ledger::new(1);
        let decided = |at, by| Admission {
            decided_at: 1_000,
            ..admission(0, at, (0, 0), by)
        };
        assert!(l.admit(decided(1_100, 7), |_| true));
        // Node 7 still runs (frozen, say); node 8 carries the round's decision over.
        assert!(!l.admit(decided(4_000, 8), |_| true));
        assert_eq!((l.double_admissions, l.moved_admissions), (0, 1));
        // The same node reporting it again, or another round letting them out, is double.
        assert!(!l.admit(decided(4_100, 7), |_| true));
        let later = Admission {
            decided_at: 2_000,
            ..admission(0, 4_200, (0, 0), 9)
        };
        assert!(!l.admit(later, |_| true));
        assert_eq!((l.double_admissions, l.moved_admissions), (2, 1));
        // They could not reach node 7 and checked in at node 10, whose round let them out.
        l.moved_from(0, 7);
        let requeued = Admission {
            decided_at: 6_000,
            ..admission(0, 6_100, (0, 0), 10)
        };
        assert!(!l.admit(requeued, |_| true));
        assert_eq!((l.double_admissions, l.moved_admissions), (2, 2));
        // Back at node 7 after its record of them lapsed, they are let out by it again.
        let back = Admission {
            decided_at: 9_000,
            ..admission(0, 9_100, (0, 0), 7)
        };
        assert!(!l.admit(back, |_| true));
        assert_eq!((l.double_admissions, l.moved_admissions), (2, 3));
    }

    #[test]
    fn peak_memory_is_read() {
        if std::path::Path::new("/proc/self/status").exists() {
            assert!(peak_memory() > 0);
        }
    }
}
