//! Eviction with TAG (thesis "Distributed Virtual Waiting Room", §4.5): on a shared interval
//! only the root counts the cluster over the tree; what it then decides is `decision.rs`'s.
//!
//! Every node wakes at the same interval boundaries (§4.5.1; clocks are in sync); the root
//! starts a count stamped with the boundary. A node answers once all its subtree has (§4.5.2),
//! so counts travel the same FIFO links as QPID updates: when the root has every answer, it
//! knows every visitor who joined before the boundary, which makes admitting only those exactly
//! first-in-first-out. A newer stamp supersedes an older round and answers for another round
//! are ignored (§5.2); a node in the middle of a membership change refuses a round, and the
//! next interval tries again. The result flows back down with a cluster-wide summary:
//! positions, admission rate, straight-through places, and in range admission the decided
//! range every node lets out its share of (waitingroom-distributed/README.md#eviction-with-tag,
//! departs from §4.5.3's one deleteMin per visitor).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use waitingroom_core::{NodeId, QueueKey, TicketId, Time, WaitingRoom};

use crate::config::{AdmissionMode, NodeConfig};
use crate::ignored::Ignored;
use crate::lease::Lease;
use crate::live::{InForce, LiveSettings};
use crate::local::Local;
use crate::messages::{
    AdmitRange, ChannelMsg, CountRequest, CountResult, Counts, Departed, LostRound, NodeCounts,
    Stamp, Summary,
};
use crate::outputs::Outbox;
use crate::released::Release;
use crate::voters::Voters;

/// Histogram buckets reported per count, for position estimates.
const BUCKETS: u64 = 16;

/// Ranges kept: a visitor re-queued after their node died is let out at once if their key falls
/// in one of these (the cluster already decided to let them in).
const RANGES_KEPT: usize = 8;
/// Ranges passed on with each result.
const RANGES_SENT: usize = 3;

/// Passes refreshed elsewhere that wait to be uncounted, at most.
const UNCOUNT_KEPT: usize = 65_536;

/// What TAG needs to know of the rest of the node for one call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx<'a> {
    /// This node.
    pub me: NodeId,
    /// The membership version applied.
    pub version: u64,
    /// This node's tree neighbours, in id order.
    pub neighbours: &'a [NodeId],
    /// The live settings known, and what of them is in force (`live.rs`).
    pub settings: &'a InForce,
}

/// What this node's own count carries up besides its room's figures: the cluster state that
/// travels with the rounds, from the node's other parts as it counts itself in.
#[derive(Debug)]
pub(crate) struct Carried {
    /// The places departed members may still hold (`departed.rs`).
    pub departed: Vec<Departed>,
    /// The newest voters known (`voters.rs`).
    pub voters: Voters,
    /// The members this node has had, until voters are agreed (`voters.rs`).
    pub seen: BTreeSet<NodeId>,
    /// The newest live settings known (`live.rs`).
    pub settings: LiveSettings,
    /// The passes given back lately (`released.rs`).
    pub released: Vec<Release>,
    /// The rounds whose result this node may have missed, but this one (`lease.rs`).
    pub lost: Vec<LostRound>,
    /// The first and current incarnation of this node's process (`departed.rs`).
    pub lives: (u64, u64),
}

/// TAG state of one node.
#[derive(Debug, Clone)]
pub(crate) struct Tag {
    /// Passes refreshed on another node since this node last counted itself in: it counts
    /// them once more, then stops (`uncount_next`) at its count after that. The other node may
    /// have been counted before the refresh in the same round: counted nowhere, the visitor's
    /// place would be given away again.
    uncount_later: Vec<TicketId>,
    /// Passes counted once more since they were refreshed elsewhere: uncounted at this node's
    /// next count.
    uncount_next: Vec<TicketId>,
    /// How visitors are let out: in range admission a count also selects the smallest keys.
    mode: AdmissionMode,
    /// Range admission: most keys per count reply, and so most admitted per round.
    select_limit: u32,
    /// Intervals without a count (while visitors wait) before the tree is rebuilt.
    watchdog_rounds: u32,
    /// The round this node is aggregating, if any.
    round: Option<Round>,
    /// Latest cluster-wide summary.
    summary: Option<Summary>,
    /// This node's own histogram in the round of `summary` (and of the round in progress).
    own_below: Vec<(Stamp, Vec<u64>)>,
    /// When this node last saw a count (started or received).
    last_round_seen: Time,
    /// The latest ranges decided (range admission), oldest first.
    ranges: Vec<AdmitRange>,
    /// Bumped whenever a summary names other places than the one before.
    places_changes: u64,
    /// The places each member held after the last round that counted it, whether or not the
    /// latest round did (a member it missed kept what it held then, under that round's grant).
    last_places: BTreeMap<NodeId, u64>,
}

/// One count in progress at this node.
#[derive(Debug, Clone)]
pub(crate) struct Round {
    stamp: Stamp,
    reply_to: Option<NodeId>,
    waiting: BTreeSet<NodeId>,
    acc: Counts,
    select: u32,
    bounds: Vec<Time>,
}

impl Round {
    /// The round's stamp, histogram bounds and the whole subtree's counts: at the root, what
    /// the decision is made of (`decision.rs`).
    pub(crate) fn into_counted(self) -> (Stamp, Vec<Time>, Counts) {
        (self.stamp, self.bounds, self.acc)
    }
}

impl Tag {
    /// TAG of a node configured by `cfg`.
    pub(crate) fn new(cfg: &NodeConfig) -> Tag {
        Tag {
            uncount_later: Vec::new(),
            uncount_next: Vec::new(),
            mode: cfg.admission,
            select_limit: cfg.select_limit,
            watchdog_rounds: cfg.watchdog_rounds,
            round: None,
            summary: None,
            own_below: Vec::new(),
            last_round_seen: 0,
            ranges: Vec::new(),
            places_changes: 0,
            last_places: BTreeMap::new(),
        }
    }

    /// The node's clock starts: the watchdog counts from here.
    pub(crate) fn start(&mut self, now: Time) {
        self.last_round_seen = now;
    }

    /// Latest cluster-wide summary.
    pub(crate) fn summary(&self) -> Option<&Summary> {
        self.summary.as_ref()
    }

    /// The stamp of the round in progress here, if any.
    pub(crate) fn round_stamp(&self) -> Option<Stamp> {
        self.round.as_ref().map(|r| r.stamp)
    }

    /// The tree changed under the round in progress: drop it (the next interval counts again).
    pub(crate) fn abandon_round(&mut self) {
        self.round = None;
    }

    /// The node rejoins another cluster: its round, and its decisions, do not apply there.
    pub(crate) fn rejoined(&mut self) {
        self.round = None;
        self.ranges.clear();
    }

    /// At an interval boundary: whether visitors wait (`queued`) in a cluster of more than one
    /// and no count has come by for `watchdog_rounds` intervals. Then the pointers must be
    /// tangled, and rebuilding the tree makes every node re-pick its parent. Rounds start every
    /// `interval`.
    pub(crate) fn watchdog(
        &mut self,
        now: Time,
        queued: u64,
        members: usize,
        interval: Time,
    ) -> bool {
        let stale =
            now.saturating_sub(self.last_round_seen) > interval * u64::from(self.watchdog_rounds);
        if stale && queued > 0 && members > 1 {
            self.last_round_seen = now;
            return true;
        }
        false
    }

    /// At the root, at an interval boundary: count the cluster in round `stamp` ([`Tag::stamp_at`],
    /// §4.5.1). Returns the round if it is complete at once (a cluster of one).
    pub(crate) fn start_count(
        &mut self,
        now: Time,
        (stamp, carried): (Stamp, Carried),
        ctx: Ctx<'_>,
        local: &mut Local,
        out: &mut Outbox,
    ) -> Option<Round> {
        let boundary = stamp.time;
        let bounds = make_bounds(local.room().head().map(|k| k.join_time), boundary);
        let select = match self.mode {
            AdmissionMode::Range if !ctx.settings.unlimited() => self
                .select_limit
                .min(u32::try_from(ctx.settings.settings().target_on_site).unwrap_or(u32::MAX)),
            _ => 0,
        };
        self.last_round_seen = now;
        self.start_round((stamp, bounds, select), (None, carried), ctx, local, out)
    }

    /// The stamp of the count the root `me` starts at the interval boundary at or before
    /// `reference_now`, rounds starting every `interval`.
    ///
    /// The round's cutoff is a boundary of the cluster's reference clock (`reference_now`, the
    /// clock join times are stamped on: waitingroom-distributed/README.md#clocks), not of the
    /// root's own: a visitor stamped before the cutoff then joined before the count began, so
    /// before it reached their node, as §4.5.1 assumes of synchronised clocks. On a root whose
    /// clock ran ahead, an own-clock cutoff would let visitors who joined after their node was
    /// counted into the decided range, taking places meant for visitors counted ahead of them.
    pub(crate) fn stamp_at(me: NodeId, reference_now: Time, interval: Time) -> Stamp {
        let boundary = reference_now / interval * interval;
        Stamp {
            time: boundary,
            origin: me,
        }
    }

    /// Counts this node's subtree for the round `(stamp, bounds, select)`: asks every neighbour
    /// but the parent side (`reply_to`; None at the root). Its own count carries what the
    /// node's other parts gave (`carried`: counting itself in is this node's request for
    /// places, and it gave up what was left of its grant). Returns the round if it is complete.
    fn start_round(
        &mut self,
        (stamp, bounds, select): (Stamp, Vec<Time>, u32),
        (reply_to, carried): (Option<NodeId>, Carried),
        ctx: Ctx<'_>,
        local: &mut Local,
        out: &mut Outbox,
    ) -> Option<Round> {
        for ticket in std::mem::take(&mut self.uncount_next) {
            local.room_mut().uncount_pass(ticket);
        }
        let acc = self.own_counts(ctx.me, (&bounds, select), carried, local);
        self.uncount_next = std::mem::take(&mut self.uncount_later);
        if self.own_below.len() >= 4 {
            self.own_below.remove(0);
        }
        self.own_below.push((stamp, acc.below.clone()));
        let waiting: BTreeSet<NodeId> = ctx
            .neighbours
            .iter()
            .copied()
            .filter(|&n| Some(n) != reply_to)
            .collect();
        let request = CountRequest {
            stamp,
            version: ctx.version,
            bounds: bounds.clone(),
            select,
            ranges: self.recent_ranges(),
        };
        for &n in &waiting {
            out.send(n, ChannelMsg::CountRequest(request.clone()));
        }
        self.round = Some(Round {
            stamp,
            reply_to,
            waiting,
            acc,
            select,
            bounds,
        });
        self.finish_if_done(out)
    }

    fn own_counts(
        &self,
        me: NodeId,
        (bounds, select): (&[Time], u32),
        carried: Carried,
        local: &Local,
    ) -> Counts {
        let room = local.room();
        let cutoff = bounds.last().copied().unwrap_or(0);
        let below: Vec<u64> = bounds.iter().map(|&b| room.queued_before(b)).collect();
        let own = NodeCounts {
            node: me,
            on_site: room.on_site(),
            eligible: below.last().copied().unwrap_or(0),
            lives: Some(carried.lives),
        };
        Counts {
            on_site: own.on_site,
            queued: room.queued(),
            below,
            admitted_total: local.admitted_total(),
            nodes: 1,
            smallest: room.smallest_before(cutoff, select as usize),
            ranges: self.recent_ranges(),
            per_node: vec![own],
            departed: carried.departed,
            voters: carried.voters,
            settings: carried.settings,
            released: carried.released,
            lost: carried.lost,
            seen: carried.seen,
        }
    }

    /// A count request from the parent side: refused (a refusal sent back) while this node is
    /// not `settled` or counts a newer round. Returns whether it was taken; then the node merges
    /// the request's ranges and calls [`Tag::join_round`].
    pub(crate) fn take_request(
        &mut self,
        now: Time,
        from: NodeId,
        r: &CountRequest,
        settled: bool,
        out: &mut Outbox,
    ) -> bool {
        self.last_round_seen = now;
        let newer_here = self.round.as_ref().is_some_and(|cur| cur.stamp > r.stamp);
        if !settled || newer_here || r.bounds.is_empty() {
            let reply = ChannelMsg::CountReply {
                stamp: r.stamp,
                counts: None,
            };
            out.send(from, reply);
            return false;
        }
        true
    }

    /// Counts this node's subtree for the round `r` that `from` asked about, its own count
    /// carrying `carried`.
    pub(crate) fn join_round(
        &mut self,
        (from, r): (NodeId, CountRequest),
        carried: Carried,
        ctx: Ctx<'_>,
        local: &mut Local,
        out: &mut Outbox,
    ) -> Option<Round> {
        let spec = (r.stamp, r.bounds, r.select);
        self.start_round(spec, (Some(from), carried), ctx, local, out)
    }

    /// The latest decided ranges this node knows, oldest first.
    fn recent_ranges(&self) -> Vec<AdmitRange> {
        let skip = self.ranges.len().saturating_sub(RANGES_SENT);
        self.ranges[skip..].to_vec()
    }

    /// A child's counts (None: it refused, and the whole round is off). Ignored when it answers
    /// no round in progress here (an older one, or a copy). Some when the root's round is now
    /// complete.
    pub(crate) fn on_count_reply(
        &mut self,
        from: NodeId,
        stamp: Stamp,
        counts: Option<Counts>,
        out: &mut Outbox,
    ) -> Result<Option<Round>, Ignored> {
        let Some(round) = self.round.as_mut() else {
            return Err(Ignored::StaleRound);
        };
        if round.stamp != stamp || !round.waiting.remove(&from) {
            return Err(Ignored::StaleRound);
        }
        let Some(c) = counts else {
            // Someone below refused: the whole round is off.
            if let Some(round) = self.round.take()
                && let Some(up) = round.reply_to
            {
                let reply = ChannelMsg::CountReply {
                    stamp,
                    counts: None,
                };
                out.send(up, reply);
            }
            return Ok(None);
        };
        round.acc.add(&c);
        round.acc.merge_smallest(&c.smallest, round.select as usize);
        Ok(self.finish_if_done(out))
    }

    /// Once every child has answered: reply to the parent, or, at the root, hand the round back
    /// to be decided.
    fn finish_if_done(&mut self, out: &mut Outbox) -> Option<Round> {
        if !self.round.as_ref().is_some_and(|r| r.waiting.is_empty()) {
            return None;
        }
        let round = self.round.take()?;
        match round.reply_to {
            Some(up) => {
                let reply = ChannelMsg::CountReply {
                    stamp: round.stamp,
                    counts: Some(Box::new(round.acc)),
                };
                out.send(up, reply);
                None
            }
            None => Some(round),
        }
    }

    /// A pass this node counts was refreshed on another node, which counts it from now on:
    /// this node stops counting it after one more count of its own (see `uncount_later`). A
    /// node that is not counted for long keeps counting such passes, erring towards a fuller
    /// site; past [`UNCOUNT_KEPT`] waiting, they are uncounted at once.
    pub(crate) fn pass_counted_elsewhere(&mut self, ticket: TicketId, local: &mut Local) {
        if self.uncount_later.len() + self.uncount_next.len() >= UNCOUNT_KEPT {
            local.room_mut().uncount_pass(ticket);
        } else {
            self.uncount_later.push(ticket);
        }
    }

    /// The result of the root's count, with the latest ranges (merged from the count first).
    pub(crate) fn result(&self, summary: Summary, range: Option<AdmitRange>) -> CountResult {
        CountResult {
            summary,
            admit: range,
            earlier: self.recent_ranges(),
            releases: Default::default(),
        }
    }

    /// The result of a count flows down the tree: passed on to every neighbour but `from`.
    /// Returns whether it is new here; then the node's parts take their share of it (this
    /// node's grant, the voters, the record, the live settings, the departed places) and TAG
    /// keeps its summary ([`Tag::keep`]). Either way the node merges the ranges it carries (and
    /// lets out its part of them).
    pub(crate) fn pass_on(
        &mut self,
        from: NodeId,
        r: &Arc<CountResult>,
        ctx: Ctx<'_>,
        out: &mut Outbox,
    ) -> bool {
        let seen = self
            .summary
            .as_ref()
            .is_some_and(|s| s.stamp >= r.summary.stamp);
        if seen {
            // A copy that came another way (the tree changed under the flood), or an old one.
            return false;
        }
        for &n in ctx.neighbours.iter().filter(|&&n| n != from) {
            out.send(n, ChannelMsg::CountResult(r.clone()));
        }
        true
    }

    /// Keeps the summary of a new result: the latest cluster-wide figures, for positions.
    pub(crate) fn keep(&mut self, summary: Summary) {
        self.own_below.retain(|(s, _)| *s >= summary.stamp);
        if self
            .summary
            .as_ref()
            .is_none_or(|s| s.places != summary.places)
        {
            self.places_changes += 1;
        }
        self.last_places.extend(summary.places.iter().copied());
        self.summary = Some(summary);
    }

    /// Moves whenever the places members held after the last round changed (a restart keeps
    /// them: `node/durable.rs`).
    pub(crate) fn places_changes(&self) -> u64 {
        self.places_changes
    }

    /// The places member `node` held after the last round that counted it, as that round's
    /// summary says; `None` while this node has heard of no round at all (it joined a cluster
    /// whose members may hold anything).
    pub(crate) fn places_of(&self, node: NodeId) -> Option<u64> {
        self.summary.as_ref()?;
        Some(self.last_places.get(&node).copied().unwrap_or(0))
    }

    /// Member `node` left: its places are held as a departure from now on.
    pub(crate) fn forget_places(&mut self, node: NodeId) {
        self.last_places.remove(&node);
    }

    /// Adds decided ranges this node had not seen (the node then lets out what falls in them,
    /// [`Tag::admit_decided`]). Returns the round and boundary of each range added: one range
    /// is kept per boundary, and two roots can decide a round at the same time, so the visitors
    /// let out at a boundary here were let out by the round of the range kept for it.
    pub(crate) fn merge_ranges(
        &mut self,
        ranges: impl IntoIterator<Item = AdmitRange>,
    ) -> Vec<(Time, u64)> {
        let mut kept = Vec::new();
        for range in ranges {
            if !self.ranges.iter().any(|k| k.decided_at == range.decided_at) {
                if let Some(record) = &range.record {
                    kept.push((range.decided_at, record.round));
                }
                self.ranges.push(range);
            }
        }
        self.ranges.sort_by_key(|r| r.decided_at);
        let excess = self.ranges.len().saturating_sub(RANGES_KEPT);
        self.ranges.drain(..excess);
        kept
    }

    /// The join time to re-queue a visitor under whose `key` a round decided to let out (their
    /// node died, or they were away): before the latest range's largest key, so they are let
    /// out with it, or among the first of the next round if no grant is left here. Under FIFO
    /// that is their own join time (or a ms less); under random queueing the lottery's ranges
    /// are not ordered, and without it a visitor whose node died before they could leave would
    /// lose their admission and draw again (waitingroom-distributed/README.md#random-queueing).
    pub(crate) fn decided_join_time(&self, key: &QueueKey) -> Option<Time> {
        let latest = self.ranges.last()?;
        if !self.ranges.iter().any(|r| r.covers(key)) {
            return None;
        }
        let bound = latest.max_key.map_or(latest.cutoff, |m| m.join_time);
        Some(bound.saturating_sub(1).min(key.join_time))
    }

    /// Lets out every local visitor whose key falls in a decided range, attributed to the round
    /// that decided it: this node's share of the latest round, and anyone re-queued here (their
    /// node died) or cut off from a result that the cluster had already decided to let in.
    /// Returns whether anyone was let out.
    /// Each takes a place of this node's grant (`lease`) unless nothing limits admission
    /// (`unlimited`); without one left they wait for the next round.
    pub(crate) fn admit_decided(
        &self,
        now: Time,
        (lease, unlimited): (&mut Lease, bool),
        local: &mut Local,
        out: &mut Outbox,
    ) -> bool {
        let mut admitted = false;
        for range in &self.ranges {
            while let Some(k) = local.room().head() {
                if !range.covers(&k) {
                    break;
                }
                if !unlimited && !lease.take(now) {
                    return admitted;
                }
                local.admit_head(now, range.decided_at, out);
                admitted = true;
            }
        }
        admitted
    }

    /// Estimated number of visitors ahead of `key` in the whole cluster of `members`: exactly
    /// those queued here (`local`), plus the other nodes' share of the last count's histogram
    /// (less their share of that round's admissions), plus, for the part of the queue that
    /// joined after the last count, as many again per other member as joined here (balancers
    /// spread visitors evenly). The part after the count errs high rather than low: the visitor
    /// is never shown a larger number later, so an estimate that starts low would stay wrong.
    pub(crate) fn visitors_ahead(
        &self,
        key: &QueueKey,
        local: u64,
        room: &WaitingRoom,
        members: usize,
    ) -> u64 {
        let Some(s) = &self.summary else {
            return local;
        };
        let Some((_, own)) = self.own_below.iter().find(|(st, _)| *st == s.stamp) else {
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
            local.saturating_sub(room.queued_before(cutoff))
        } else {
            0
        };
        let other_members = (members as u64).saturating_sub(1);
        local
            .saturating_add(others.saturating_sub(others_gone))
            .saturating_add(recent_here.saturating_mul(other_members))
    }
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

/// Linear interpolation of a cumulative "joined before bound" histogram at time `t`, whose
/// bounds ascend.
fn interpolate(bounds: &[Time], below: &[u64], t: Time) -> u64 {
    // Most visitors who check in joined after the count, so `t` is its cutoff, the last bound:
    // the answer is the last step's, without reading the lines before it.
    let n = bounds.len().min(below.len());
    if n >= 2 && t == bounds[n - 1] && bounds[n - 2] < t {
        let (pc, c) = (below[n - 2], below[n - 1]);
        return pc + c.saturating_sub(pc);
    }
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
    use waitingroom_core::round_records::{Cutoff, RoundRecord};

    use super::*;
    use crate::membership::Membership;
    use crate::messages::Body;
    use crate::node::Node;
    use crate::outputs::Event;
    use crate::testing::{self, Neighbours, Peer, Said, count_reply as reply, counts_of};
    use crate::testing::{member, said, settle, tree};

    /// Node `id` of `m`, settled, with nothing left to resend.
    fn settled(id: u64, m: &Membership) -> (Node, Neighbours) {
        let mut node = member(testing::config(id, 1, testing::queued_settings()), m);
        let peers = settle(&mut node);
        (node, peers)
    }

    fn line() -> Membership {
        tree(2, &[1, 2, 3], &[(1, 2), (2, 3)])
    }

    fn request(time: Time) -> CountRequest {
        CountRequest {
            stamp: Stamp {
                time,
                origin: NodeId(1),
            },
            version: 2,
            bounds: vec![time],
            select: 0,
            ranges: Vec::new(),
        }
    }

    /// §4.5.2: a count request goes on to every neighbour but the one it came from; once they
    /// have all answered, the subtree's total goes back up.
    #[test]
    fn a_count_goes_down_the_tree_and_the_subtree_total_comes_back() {
        let (mut node, mut peers) = settled(2, &line());
        let r = request(1_000);
        let env = peers.channel(1, &node, ChannelMsg::CountRequest(r.clone()));
        assert_eq!(node.handle_message(1_000, env), Ok(()));
        assert_eq!(
            said(&mut node),
            [Said::Channel(
                NodeId(3),
                ChannelMsg::CountRequest(r.clone())
            )]
        );
        let below = Some(counts_of(3, 2));
        let env = peers.channel(3, &node, reply(r.stamp, below));
        assert_eq!(node.handle_message(1_001, env), Ok(()));
        let mut total = counts_of(2, 0);
        total.settings = node.live_settings().clone();
        // No voters agreed yet: the count carries every member this node has had.
        total.seen = node.membership().members.keys().copied().collect();
        total.add(&counts_of(3, 2));
        assert_eq!(total.nodes, 2);
        assert_eq!(
            said(&mut node),
            [Said::Channel(NodeId(1), reply(r.stamp, Some(total)))]
        );
    }

    /// Two roots decided a round at the same boundary (a takeover): a node keeps one range per
    /// boundary and lets its visitors out under it, so their passes name that range's round,
    /// not another record of the same time it learned with it.
    #[test]
    fn a_pass_names_the_round_of_the_range_that_let_its_holder_out() {
        let (mut node, mut peers) = settled(2, &line());
        let joined = node.join(500).expect("joined");
        let range = |round, root, cutoff: Time| AdmitRange {
            cutoff,
            max_key: None,
            version: 2,
            decided_at: 1_000,
            record: Some(RoundRecord {
                round,
                decided_at_ms: 1_000,
                cutoff: Cutoff {
                    join_time: cutoff - 1,
                    id: TicketId(u64::MAX),
                    node: NodeId(u64::MAX),
                },
                admitted: 1,
                root: NodeId(root),
                version: 2,
                prev: String::new(),
                lottery: false,
                through: 0,
            }),
        };
        let mut r = request(1_000);
        r.ranges = vec![range(5, 1, 1_000), range(6, 3, 400)];
        let env = peers.channel(1, &node, ChannelMsg::CountRequest(r));
        assert_eq!(node.handle_message(1_000, env), Ok(()));
        let published: Vec<u64> = (testing::events(&mut node).into_iter())
            .filter_map(|e| match e {
                Event::RoundRecorded(r) => Some(r.round),
                _ => None,
            })
            .collect();
        assert_eq!(published, [5, 6], "both records are published");
        let pass = node.leave(1_001, &joined.ticket).expect("let out");
        assert_eq!(pass.eviction_time, 1_000);
        assert_eq!(pass.round, Some(5));
    }

    /// §5.2: a newer round supersedes an older one: a request for the older round is refused,
    /// and an answer for it is ignored.
    #[test]
    fn an_older_round_is_refused_and_its_answers_ignored() {
        let (mut node, mut peers) = settled(2, &line());
        let newer = request(2_000);
        let env = peers.channel(1, &node, ChannelMsg::CountRequest(newer));
        node.handle_message(2_000, env).expect("a count request");
        said(&mut node);
        let older = request(1_000);
        let env = peers.channel(1, &node, ChannelMsg::CountRequest(older.clone()));
        assert_eq!(node.handle_message(2_001, env), Ok(()));
        assert_eq!(
            said(&mut node),
            [Said::Channel(NodeId(1), reply(older.stamp, None))]
        );
        let late = reply(older.stamp, Some(counts_of(3, 1)));
        let env = peers.channel(3, &node, late);
        assert_eq!(node.handle_message(2_002, env), Err(Ignored::StaleRound));
        assert_eq!(said(&mut node), []);
    }

    /// waitingroom-distributed/README.md#eviction-with-tag: a node still settling after a
    /// membership change refuses the round (the next interval counts again).
    #[test]
    fn a_node_still_settling_refuses_the_round() {
        let mut node = member(testing::config(2, 1, testing::queued_settings()), &line());
        let r = request(1_000);
        let env = Peer::new(1).channel(&node, ChannelMsg::CountRequest(r.clone()));
        assert_eq!(node.handle_message(1_000, env), Ok(()));
        assert_eq!(
            said(&mut node),
            [Said::Channel(NodeId(1), reply(r.stamp, None))]
        );
    }

    /// §4.5.1 and §4.5.3, with range admission
    /// (waitingroom-distributed/README.md#eviction-with-tag): at the interval boundary only the
    /// root counts; with every answer in it decides how many to let out (all who joined before the
    /// boundary, as places are unlimited) and floods the result, which names the range every node
    /// lets out its share of.
    #[test]
    fn the_root_counts_decides_and_floods_the_result() {
        let (mut node, mut peers) = settled(1, &tree(2, &[1, 2], &[(1, 2)]));
        assert!(node.is_root());

        node.handle_timeout(1_000);
        let stamp = Stamp {
            time: 1_000,
            origin: NodeId(1),
        };
        let ping = Body::Ping {
            nonce: 1,
            view: node.membership().view(),
            time: 1_000,
        };
        let count = ChannelMsg::CountRequest(CountRequest {
            stamp,
            ..request(1_000)
        });
        assert_eq!(
            said(&mut node),
            [
                Said::Raw("n2".into(), ping),
                Said::Channel(NodeId(2), count)
            ]
        );
        let env = peers.channel(2, &node, reply(stamp, Some(counts_of(2, 1))));
        assert_eq!(node.handle_message(1_001, env), Ok(()));
        let summary = Summary {
            stamp,
            bounds: vec![1_000],
            below: vec![1],
            version: 2,
            queued: 1,
            on_site: 0,
            admitted: 1,
            rate_milli_per_s: 0,
            free_places: u64::MAX - 1,
            members: 2,
            places: vec![(NodeId(1), 0), (NodeId(2), 1)],
            grants: Some(vec![(NodeId(1), 0), (NodeId(2), 1)]),
            // Neither knew any voters: the first round makes them the first (epoch 2: after
            // a founder's own, which they replace).
            voters: Voters {
                epoch: 2,
                set: [NodeId(1), NodeId(2)].into(),
                ..Voters::default()
            },
            settings: node.live_settings().clone(),
            departed: Vec::new(),
            released: Vec::new(),
            // The first record: everyone who joined before the boundary.
            record: Some(RoundRecord {
                round: 0,
                decided_at_ms: 1_000,
                cutoff: Cutoff {
                    join_time: 999,
                    id: TicketId(u64::MAX),
                    node: NodeId(u64::MAX),
                },
                admitted: 1,
                root: NodeId(1),
                version: 2,
                prev: String::new(),
                lottery: false,
                through: 0,
            }),
            lost: Vec::new(),
        };
        let range = AdmitRange {
            cutoff: 1_000,
            max_key: None,
            version: 2,
            decided_at: 1_000,
            record: summary.record.clone(),
        };
        let result = CountResult {
            summary: summary.clone(),
            admit: Some(range),
            earlier: Vec::new(),
            releases: Default::default(),
        };
        let flood = ChannelMsg::CountResult(Arc::new(result));
        assert_eq!(said(&mut node), [Said::Channel(NodeId(2), flood)]);
        let record = Box::new(summary.record.clone().unwrap());
        assert_eq!(
            testing::events(&mut node),
            [
                Event::CountCompleted(Box::new(summary)),
                Event::RoundRecorded(record)
            ]
        );
    }

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
        assert_eq!(interpolate(&bounds, &below, 300), 30, "at the cutoff");
        assert_eq!(
            interpolate(&[100, 300, 300], &[10, 20, 25], 300),
            20,
            "a repeated last bound"
        );
        assert_eq!(
            interpolate(&[100, 300], &[10, 5], 300),
            10,
            "counts that fall"
        );
        let mut last = 0;
        for t in 0..400 {
            let v = interpolate(&bounds, &below, t);
            assert!(v >= last);
            last = v;
        }
    }
}
