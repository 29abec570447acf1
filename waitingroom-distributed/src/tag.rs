//! Eviction with TAG: on a shared interval only the root counts the cluster over the tree,
//! then decides how many visitors to let out.
//!
//! Every node wakes at the same interval boundaries (clocks are in sync); the root starts a
//! count stamped with the boundary. A node answers once all its subtree has, so counts travel
//! the same FIFO links as QPID updates: when the root has every answer, it knows every visitor
//! who joined before the boundary, which makes admitting only those exactly first-in-first-out.
//! A newer stamp supersedes an older round; a node in the middle of a membership change refuses
//! a round, and the next interval tries again. The result flows back down with a cluster-wide
//! summary: positions, admission rate, and straight-through places.

use std::collections::{BTreeMap, BTreeSet};

use waitingroom_core::{NodeId, Time};

use crate::config::AdmissionMode;
use crate::messages::{
    Admission, AdmitRange, ChannelMsg, CountRequest, CountResult, Counts, Departed, NodeCounts,
    Stamp, Summary,
};
use crate::node::Node;
use crate::outputs::Event;

/// Histogram buckets reported per count, for position estimates.
const BUCKETS: u64 = 16;

/// TAG state of one node.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tag {
    /// The round this node is aggregating, if any.
    pub round: Option<Round>,
    /// Latest cluster-wide summary.
    pub summary: Option<Summary>,
    /// This node's own histogram in the round of `summary` (and of the round in progress).
    pub own_below: Vec<(Stamp, Vec<u64>)>,
    /// When this node last saw a count (started or received).
    pub last_round_seen: Time,
    /// Straight-through places this node may still give out.
    pub budget: u64,
    /// Root only: admitted total and time at the previous completed round, and the smoothed rate.
    pub rate: Rate,
    /// The latest ranges decided (range admission), oldest first.
    pub ranges: Vec<AdmitRange>,
    /// Places departed members' visitors may still hold, counted until their passes expire.
    pub departed: Vec<Departed>,
}

/// Departures remembered at most (a flapping member must not grow the list without bound).
const DEPARTED_KEPT: usize = 256;

/// Ranges kept: a visitor re-queued after their node died is let out at once if their key falls
/// in one of these (the cluster already decided to let them in).
const RANGES_KEPT: usize = 8;
/// Ranges passed on with each result.
const RANGES_SENT: usize = 3;

#[derive(Debug, Clone, Default)]
pub(crate) struct Rate {
    last: Option<(Time, u64)>,
    milli_per_s: u64,
}

impl Rate {
    fn sample(&mut self, now: Time, admitted_total: u64) -> u64 {
        if let Some((t0, a0)) = self.last
            && now > t0
        {
            let sample = admitted_total.saturating_sub(a0) * 1_000_000 / (now - t0);
            self.milli_per_s = if self.milli_per_s == 0 {
                sample
            } else {
                (self.milli_per_s * 7 + sample * 3) / 10
            };
        }
        self.last = Some((now, admitted_total));
        self.milli_per_s
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Round {
    pub stamp: Stamp,
    reply_to: Option<NodeId>,
    waiting: BTreeSet<NodeId>,
    acc: Counts,
    select: u32,
    bounds: Vec<Time>,
}

impl Node {
    pub(crate) fn on_eviction_tick(&mut self, now: Time) {
        if !self.is_member() {
            return;
        }
        let interval = self.cfg.settings.eviction_interval_ms;
        let boundary = now / interval * interval;
        let stale = now.saturating_sub(self.tag.last_round_seen)
            > interval * u64::from(self.cfg.watchdog_rounds);
        if stale && self.local.room().queued() > 0 && self.membership.members.len() > 1 {
            // Visitors wait and no count has come by for many rounds: the pointers must be
            // tangled. Rebuilding the tree makes every node re-pick its parent.
            self.tag.last_round_seen = now;
            let mut refreshed = self.membership.clone();
            refreshed.version = refreshed.version.saturating_add(1);
            self.emit(Event::TreeRepaired);
            self.commit_membership(now, refreshed);
            return;
        }
        if !self.is_root() || !self.qpid.is_settled() {
            return;
        }
        let stamp = Stamp {
            time: boundary,
            origin: self.me.id,
        };
        let bounds = make_bounds(self.local.room().head().map(|k| k.join_time), boundary);
        let select = match self.cfg.admission {
            AdmissionMode::Range if !self.cfg.settings.is_unlimited() => self
                .cfg
                .select_limit
                .min(u32::try_from(self.cfg.settings.target_on_site).unwrap_or(u32::MAX)),
            _ => 0,
        };
        let neighbours = self.membership.neighbours(self.me.id);
        self.tag.last_round_seen = now;
        self.start_round(now, stamp, None, bounds, select, &neighbours);
    }

    fn start_round(
        &mut self,
        now: Time,
        stamp: Stamp,
        reply_to: Option<NodeId>,
        bounds: Vec<Time>,
        select: u32,
        neighbours: &[NodeId],
    ) {
        let acc = self.own_counts(&bounds, select);
        if self.tag.own_below.len() >= 4 {
            self.tag.own_below.remove(0);
        }
        self.tag.own_below.push((stamp, acc.below.clone()));
        let waiting: BTreeSet<NodeId> = neighbours
            .iter()
            .copied()
            .filter(|&n| Some(n) != reply_to)
            .collect();
        let request = CountRequest {
            stamp,
            version: self.membership.version,
            bounds: bounds.clone(),
            select,
            ranges: self.recent_ranges(),
        };
        for &n in &waiting {
            self.send_to(now, n, ChannelMsg::CountRequest(request.clone()));
        }
        self.tag.round = Some(Round {
            stamp,
            reply_to,
            waiting,
            acc,
            select,
            bounds,
        });
        self.maybe_finish_round(now);
    }

    fn own_counts(&self, bounds: &[Time], select: u32) -> Counts {
        let cutoff = bounds.last().copied().unwrap_or(0);
        let below: Vec<u64> = bounds
            .iter()
            .map(|&b| self.local.room().queued_before(b))
            .collect();
        let own = NodeCounts {
            node: self.me.id,
            on_site: self.local.room().on_site(),
            eligible: below.last().copied().unwrap_or(0),
        };
        Counts {
            on_site: own.on_site,
            queued: self.local.room().queued(),
            below,
            admitted_total: self.local.admitted_total(),
            nodes: 1,
            smallest: self.local.room().smallest_before(cutoff, select as usize),
            ranges: self.recent_ranges(),
            per_node: vec![own],
        }
    }

    pub(crate) fn on_count_request(&mut self, now: Time, from: NodeId, r: CountRequest) {
        self.tag.last_round_seen = now;
        let refuse = !self.qpid.is_settled()
            || self
                .tag
                .round
                .as_ref()
                .is_some_and(|cur| cur.stamp > r.stamp)
            || r.bounds.is_empty();
        if refuse {
            let reply = ChannelMsg::CountReply {
                stamp: r.stamp,
                counts: None,
            };
            self.send_to(now, from, reply);
            return;
        }
        self.merge_ranges(now, r.ranges.into_iter());
        let neighbours = self.membership.neighbours(self.me.id);
        self.start_round(now, r.stamp, Some(from), r.bounds, r.select, &neighbours);
    }

    /// The latest decided ranges this node knows, oldest first.
    fn recent_ranges(&self) -> Vec<AdmitRange> {
        let skip = self.tag.ranges.len().saturating_sub(RANGES_SENT);
        self.tag.ranges[skip..].to_vec()
    }

    pub(crate) fn on_count_reply(
        &mut self,
        now: Time,
        from: NodeId,
        stamp: Stamp,
        counts: Option<Counts>,
    ) {
        let Some(round) = self.tag.round.as_mut() else {
            return;
        };
        if round.stamp != stamp || !round.waiting.remove(&from) {
            return;
        }
        match counts {
            Some(c) => {
                round.acc.add(&c);
                round.acc.merge_smallest(&c.smallest, round.select as usize);
                self.maybe_finish_round(now);
            }
            None => {
                // Someone below refused: the whole round is off.
                if let Some(round) = self.tag.round.take()
                    && let Some(up) = round.reply_to
                {
                    let reply = ChannelMsg::CountReply {
                        stamp,
                        counts: None,
                    };
                    self.send_to(now, up, reply);
                }
            }
        }
    }

    fn maybe_finish_round(&mut self, now: Time) {
        if !self
            .tag
            .round
            .as_ref()
            .is_some_and(|r| r.waiting.is_empty())
        {
            return;
        }
        let Some(round) = self.tag.round.take() else {
            return;
        };
        match round.reply_to {
            Some(up) => {
                let reply = ChannelMsg::CountReply {
                    stamp: round.stamp,
                    counts: Some(Box::new(round.acc)),
                };
                self.send_to(now, up, reply);
            }
            None => self.complete_round(now, round),
        }
    }

    /// At the root, with the whole cluster counted: decide how many to let out.
    fn complete_round(&mut self, now: Time, round: Round) {
        let settings = &self.cfg.settings;
        let counts = round.acc;
        let cutoff = round.stamp.time;
        let eligible = counts.below.last().copied().unwrap_or(0);
        self.tag.departed.retain(|d| d.until > now);
        let on_site = self
            .tag
            .departed
            .iter()
            .fold(counts.on_site, |sum, d| sum.saturating_add(d.places));
        let free = if settings.is_unlimited() {
            u64::MAX
        } else {
            settings.target_on_site.saturating_sub(on_site)
        };
        let mut admit = eligible.min(free);
        let mut max_key = None;
        if self.cfg.admission == AdmissionMode::Range && admit < eligible && admit > 0 {
            // Only the smallest keys go: the admit-th smallest bounds the range. A round admits
            // at most as many as were reported.
            admit = admit.min(counts.smallest.len() as u64);
            max_key = admit
                .checked_sub(1)
                .and_then(|i| counts.smallest.get(i as usize).copied());
        }
        let rate = self.tag.rate.sample(now, counts.admitted_total);
        let everyone_in = counts.queued <= admit;
        let places = places_after(&counts, admit, max_key.is_some());
        let summary = Summary {
            stamp: round.stamp,
            bounds: round.bounds,
            below: counts.below,
            version: self.membership.version,
            queued: counts.queued,
            on_site,
            admitted: admit,
            rate_milli_per_s: rate,
            free_places: if everyone_in { free - admit } else { 0 },
            members: counts.nodes,
            places,
            departed: self.tag.departed.clone(),
        };
        self.emit(Event::CountCompleted(summary.clone()));
        let version = self.membership.version;
        let range =
            (self.cfg.admission == AdmissionMode::Range && admit > 0).then_some(AdmitRange {
                cutoff,
                max_key,
                version,
                decided_at: round.stamp.time,
            });
        self.merge_ranges(now, counts.ranges.iter().copied());
        let result = CountResult {
            summary,
            admit: range,
            earlier: self.recent_ranges(),
        };
        self.on_count_result(now, self.me.id, result);
        if admit > 0 {
            let batch = Admission {
                count: admit,
                cutoff,
                version,
            };
            match self.cfg.admission {
                AdmissionMode::Range => {}
                AdmissionMode::Batched => self.on_delete_min(now, batch),
                AdmissionMode::Sequential => {
                    for _ in 0..admit {
                        self.on_delete_min(now, Admission { count: 1, ..batch });
                    }
                }
            }
        }
    }

    /// The result of a count flows down the tree: keep the summary, take this node's share of
    /// straight-through places, let out this node's part of the range, pass it on.
    pub(crate) fn on_count_result(&mut self, now: Time, from: NodeId, r: CountResult) {
        let me = self.me.id;
        let seen = self
            .tag
            .summary
            .as_ref()
            .is_some_and(|s| s.stamp >= r.summary.stamp);
        if seen {
            // A copy that came another way (the tree changed under the flood), or an old one.
            self.merge_ranges(now, r.earlier.into_iter().chain(r.admit));
            return;
        }
        let neighbours: Vec<NodeId> = self
            .membership
            .neighbours(me)
            .into_iter()
            .filter(|&n| n != from)
            .collect();
        for n in neighbours {
            self.send_to(now, n, ChannelMsg::CountResult(Box::new(r.clone())));
        }
        let members: Vec<NodeId> = self.membership.members.keys().copied().collect();
        let n = members.len().max(1) as u64;
        let index = members.iter().position(|&m| m == me).unwrap_or(0) as u64;
        let free = r.summary.free_places;
        self.tag.budget = free / n + u64::from(index < free % n);
        self.tag.own_below.retain(|(s, _)| *s >= r.summary.stamp);
        for &d in r.summary.departed.iter().take(DEPARTED_KEPT) {
            self.note_departed(d);
        }
        self.tag.summary = Some(r.summary);
        self.merge_ranges(now, r.earlier.into_iter().chain(r.admit));
    }

    /// A member left the cluster (it died, or was removed): the places its visitors held at
    /// the last count stay counted until the passes it could have issued have expired, so the
    /// site does not fill past the target with visitors nobody counts any more.
    pub(crate) fn member_departed(&mut self, now: Time, node: NodeId) {
        let expiry = self.cfg.settings.pass_expiry_ms;
        let places = self
            .tag
            .summary
            .as_ref()
            .and_then(|s| s.places.iter().find(|(n, _)| *n == node))
            .map_or(0, |&(_, p)| p);
        if places > 0 && expiry > 0 {
            self.note_departed(Departed {
                until: now.saturating_add(expiry),
                node,
                version: self.membership.version,
                places,
            });
        }
    }

    /// Records a departure once, whoever reports it (every member notes it, and results spread
    /// the root's list, so a new root still counts it).
    fn note_departed(&mut self, d: Departed) {
        match self
            .tag
            .departed
            .iter_mut()
            .find(|k| k.node == d.node && k.version == d.version)
        {
            Some(k) => {
                k.until = k.until.max(d.until);
                k.places = k.places.max(d.places);
            }
            None => self.tag.departed.push(d),
        }
        if self.tag.departed.len() > DEPARTED_KEPT {
            // Keep the ones that hold places longest.
            self.tag.departed.sort_unstable_by(|a, b| b.cmp(a));
            self.tag.departed.truncate(DEPARTED_KEPT);
        }
    }

    fn merge_ranges(&mut self, now: Time, ranges: impl Iterator<Item = AdmitRange>) {
        for range in ranges {
            if !self
                .tag
                .ranges
                .iter()
                .any(|k| k.decided_at == range.decided_at)
            {
                self.tag.ranges.push(range);
            }
        }
        self.tag.ranges.sort_by_key(|r| r.decided_at);
        let excess = self.tag.ranges.len().saturating_sub(RANGES_KEPT);
        self.tag.ranges.drain(..excess);
        self.admit_decided(now);
    }

    /// Lets out every local visitor whose key falls in a decided range, attributed to the round
    /// that decided it: this node's share of the latest round, and anyone re-queued here (their
    /// node died) or cut off from a result that the cluster had already decided to let in.
    pub(crate) fn admit_decided(&mut self, now: Time) {
        let mut admitted = false;
        for i in 0..self.tag.ranges.len() {
            let range = self.tag.ranges[i];
            while let Some(k) = self.local.room().head() {
                if k.join_time >= range.cutoff || range.max_key.is_some_and(|m| k > m) {
                    break;
                }
                self.admit_head(now, range.decided_at);
                admitted = true;
            }
        }
        if admitted {
            self.local_queue_changed(now);
        }
    }

    /// Estimated number of visitors ahead of `key` in the whole cluster: exactly those queued
    /// here, plus the other nodes' share of the last count's histogram (less their share of
    /// that round's admissions), plus, for the part of the queue that joined after the last
    /// count, as many again per other member as joined here (balancers spread visitors evenly).
    /// The part after the count errs high rather than low: the visitor is never shown a larger
    /// number later, so an estimate that starts low would stay wrong.
    pub(crate) fn visitors_ahead(&self, key: &waitingroom_core::QueueKey, local: u64) -> u64 {
        let Some(s) = &self.tag.summary else {
            return local;
        };
        let Some((_, own)) = self.tag.own_below.iter().find(|(st, _)| *st == s.stamp) else {
            return local;
        };
        let cutoff = s.stamp.time;
        let t = key.join_time.min(cutoff);
        let global = interpolate(&s.bounds, &s.below, t);
        let mine = interpolate(&s.bounds, own, t).min(global);
        let others = global - mine;
        // The round let out the `admitted` smallest keys; the others' share of them is gone.
        let others_gone = if global == 0 {
            0
        } else {
            (u128::from(s.admitted.min(global)) * u128::from(others) / u128::from(global)) as u64
        };
        let recent_here = if key.join_time >= cutoff {
            local.saturating_sub(self.local.room().queued_before(cutoff))
        } else {
            0
        };
        let other_members = (self.membership.members.len() as u64).saturating_sub(1);
        local
            .saturating_add(others.saturating_sub(others_gone))
            .saturating_add(recent_here.saturating_mul(other_members))
    }
}

/// Places each counted node holds once the round's admissions are out: its visitors on the site
/// plus its share of the `admit` let out. With a range cut by key (`by_key`) that share is
/// exact (the smallest keys carry their node); otherwise a node that had `eligible` visitors
/// gets `min(eligible, admit)`, an upper bound, which errs towards a fuller site.
fn places_after(counts: &Counts, admit: u64, by_key: bool) -> Vec<(NodeId, u64)> {
    let mut taken: BTreeMap<NodeId, u64> = BTreeMap::new();
    if by_key {
        let k = usize::try_from(admit).unwrap_or(usize::MAX);
        for key in counts.smallest.iter().take(k) {
            *taken.entry(key.node).or_default() += 1;
        }
    }
    let mut places: Vec<(NodeId, u64)> = counts
        .per_node
        .iter()
        .map(|n| {
            let share = if by_key {
                taken.get(&n.node).copied().unwrap_or(0)
            } else {
                n.eligible.min(admit)
            };
            (n.node, n.on_site.saturating_add(share))
        })
        .collect();
    places.sort_unstable();
    places
}

/// `BUCKETS` boundaries from the oldest waiting visitor's join time up to the cutoff (the last
/// boundary is the cutoff itself).
fn make_bounds(oldest: Option<Time>, cutoff: Time) -> Vec<Time> {
    match oldest {
        Some(first) if first < cutoff => (1..=BUCKETS)
            .map(|i| first + (cutoff - first) * i / BUCKETS)
            .collect(),
        _ => vec![cutoff],
    }
}

/// Linear interpolation of a cumulative "joined before bound" histogram at time `t`.
fn interpolate(bounds: &[Time], below: &[u64], t: Time) -> u64 {
    let mut prev = (bounds.first().map_or(0, |b| b.saturating_sub(1)), 0u64);
    for (&b, &c) in bounds.iter().zip(below) {
        if t <= b {
            let (pb, pc) = prev;
            if b <= pb {
                return c;
            }
            let frac = u128::from(t.saturating_sub(pb)) * u128::from(c.saturating_sub(pc))
                / u128::from(b - pb);
            return pc + frac as u64;
        }
        prev = (b, c);
    }
    prev.1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_end_at_the_cutoff() {
        assert_eq!(make_bounds(None, 1_000), vec![1_000]);
        assert_eq!(make_bounds(Some(2_000), 1_000), vec![1_000]);
        let b = make_bounds(Some(0), 1_600);
        assert_eq!(b.len(), 16);
        assert_eq!(b[0], 100);
        assert_eq!(*b.last().unwrap(), 1_600);
    }

    #[test]
    fn interpolation_is_monotone_and_exact_at_bounds() {
        let bounds = [100, 200, 300];
        let below = [10, 30, 30];
        assert_eq!(interpolate(&bounds, &below, 100), 10);
        assert_eq!(interpolate(&bounds, &below, 150), 20);
        assert_eq!(interpolate(&bounds, &below, 200), 30);
        assert_eq!(interpolate(&bounds, &below, 1_000), 30);
        let mut last = 0;
        for t in 0..400 {
            let v = interpolate(&bounds, &below, t);
            assert!(v >= last);
            last = v;
        }
    }
}
