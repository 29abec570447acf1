//! Eviction with TAG (thesis §4.5): on a shared interval only the root counts the cluster over
//! the tree, then decides how many visitors to let out.
//!
//! Every node wakes at the same interval boundaries (§4.5.1; clocks are in sync); the root
//! starts a count stamped with the boundary. A node answers once all its subtree has (§4.5.2),
//! so counts travel the same FIFO links as QPID updates: when the root has every answer, it
//! knows every visitor who joined before the boundary, which makes admitting only those exactly
//! first-in-first-out. A newer stamp supersedes an older round and answers for another round
//! are ignored (§5.2); a node in the middle of a membership change refuses a round, and the
//! next interval tries again. The result flows back down with a cluster-wide summary:
//! positions, admission rate, straight-through places, and in range admission the decided
//! range every node lets out its share of (README, "Eviction with TAG", departs from §4.5.3's
//! one deleteMin per visitor).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use waitingroom_core::{NodeId, QueueKey, Settings, SettingsError, TicketId, Time, WaitingRoom};

use crate::config::{AdmissionMode, NodeConfig};
use crate::departed::{self, DepartedPlaces};
use crate::ignored::Ignored;
use crate::lease::{Lease, Pause};
use crate::live::{InForce, LiveSettings};
use crate::local::Local;
use crate::messages::{
    Admission, AdmitRange, ChannelMsg, CountRequest, CountResult, Counts, LostRound, NodeCounts,
    SEEN_KEPT, Stamp, Summary,
};
use crate::outputs::{Event, Outbox};
use crate::patch::{Mode, QueueingMethod};
use crate::record_chain::RecordChain;
use crate::released::{Release, Released};
use crate::voters::Voters;

/// Histogram buckets reported per count, for position estimates.
const BUCKETS: u64 = 16;

/// Ranges kept: a visitor re-queued after their node died is let out at once if their key falls
/// in one of these (the cluster already decided to let them in).
const RANGES_KEPT: usize = 8;
/// Ranges passed on with each result.
const RANGES_SENT: usize = 3;

/// For how many intervals a count carries a release up (a round that fails to finish loses
/// none).
const RELEASES_SENT_INTERVALS: Time = 3;

/// Passes refreshed elsewhere that wait to be uncounted, at most.
const UNCOUNT_KEPT: usize = 65_536;

/// Rounds a root remembers starting (more than a lost round lives: `lease.rs`).
const STARTED_KEPT: usize = 16;

/// What TAG needs to know of the rest of the node for one call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx<'a> {
    /// This node.
    pub me: NodeId,
    /// The membership version applied.
    pub version: u64,
    /// This node's tree neighbours, in id order.
    pub neighbours: &'a [NodeId],
}

/// TAG state of one node.
#[derive(Debug, Clone)]
pub(crate) struct Tag {
    /// The live settings known, and what of them is in force (`live.rs`, `events.rs`).
    in_force: InForce,
    /// Passes refreshed on another node since this node last counted itself in: it counts
    /// them once more, then stops (`uncount_next`) at its count after that. The other node may
    /// have been counted before the refresh in the same round: counted nowhere, the visitor's
    /// place would be given away again.
    uncount_later: Vec<TicketId>,
    /// Passes counted once more since they were refreshed elsewhere: uncounted at this node's
    /// next count.
    uncount_next: Vec<TicketId>,
    /// How the root lets visitors out once a count has decided how many.
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
    /// This node's grant of places: every admission here takes one (README, "Admission leases").
    lease: Lease,
    /// The newest voters this node knows, for the majority rule.
    voters: Voters,
    /// Root only: admitted total and time at the previous completed round, and the smoothed rate.
    rate: Rate,
    /// The latest ranges decided (range admission), oldest first.
    ranges: Vec<AdmitRange>,
    /// Places departed members' visitors may still hold (`departed.rs`).
    departed: DepartedPlaces,
    /// Passes given back early (`released.rs`).
    released: Released,
    /// Where this node is in the chain of round records (`record_chain.rs`).
    records: RecordChain,
    /// Every member this node has had (at most [`SEEN_KEPT`]): before any voters are agreed,
    /// the first need a majority of them, and a founder votes alone only while it has had no
    /// other (`voters.rs`).
    seen: BTreeSet<NodeId>,
    /// The latest rounds this node started as root: it knows what each granted, so they are
    /// never lost to it (`lease.rs`).
    started: VecDeque<Stamp>,
}

#[derive(Debug, Clone, Default)]
struct Rate {
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

/// What the root decided at the end of a count, for the node to carry out.
#[derive(Debug)]
pub(crate) struct Decision {
    /// The ranges the subtrees reported (a new root may have missed some): merged first.
    pub reported: Vec<AdmitRange>,
    /// The result to flood down the tree (its earlier ranges filled in after the merge).
    pub summary: Summary,
    /// Range admission: the range decided.
    pub range: Option<AdmitRange>,
    /// DeleteMin admission: the batch to let out through QPID.
    pub batch: Option<Admission>,
}

impl Tag {
    /// TAG of a node configured by `cfg`.
    pub(crate) fn new(cfg: &NodeConfig) -> Tag {
        Tag {
            in_force: InForce::new(&cfg.settings, cfg.live()),
            uncount_later: Vec::new(),
            uncount_next: Vec::new(),
            mode: cfg.admission,
            select_limit: cfg.select_limit,
            watchdog_rounds: cfg.watchdog_rounds,
            round: None,
            summary: None,
            own_below: Vec::new(),
            last_round_seen: 0,
            lease: Lease::new(cfg.settings.eviction_interval_ms),
            voters: Voters::default(),
            rate: Rate::default(),
            ranges: Vec::new(),
            departed: DepartedPlaces::default(),
            released: Released::default(),
            records: RecordChain::default(),
            started: VecDeque::new(),
            seen: BTreeSet::new(),
        }
    }

    /// This node founds a cluster on purpose (not after giving up on its seeds): it votes.
    pub(crate) fn found(&mut self, me: NodeId) {
        if self.voters.set.is_empty() {
            self.voters = Voters::founder(me);
        }
    }

    /// This node applied a membership of `members`: it has had them (`seen`).
    pub(crate) fn members_now<'a>(&mut self, members: impl IntoIterator<Item = &'a NodeId>) {
        for &id in members {
            if self.seen.len() >= SEEN_KEPT {
                break;
            }
            self.seen.insert(id);
        }
    }

    /// An operator makes `members` the voters (`Voters::reset`).
    pub(crate) fn reset_voters(&mut self, members: BTreeSet<NodeId>) -> &Voters {
        self.voters = self.voters.reset(members);
        &self.voters
    }

    /// Voters a peer told of: the newer win.
    pub(crate) fn adopt_voters(&mut self, voters: &Voters) {
        self.voters.adopt(voters);
    }

    /// The newest voters this node knows.
    pub(crate) fn voters(&self) -> &Voters {
        &self.voters
    }

    /// The room settings in force.
    pub(crate) fn settings(&self) -> &Settings {
        self.in_force.settings()
    }

    /// The newest live settings this node knows.
    pub(crate) fn live(&self) -> &LiveSettings {
        self.in_force.live()
    }

    /// The live settings in force (an event's applied).
    pub(crate) fn current(&self) -> &LiveSettings {
        self.in_force.current()
    }

    /// Looks at the reference clock; whether the settings in force changed (an event's edge).
    pub(crate) fn settings_at(&mut self, reference_now: Time) -> bool {
        self.in_force.at(reference_now)
    }

    /// Adopts `other` if it is a newer version than the live settings known here (see
    /// [`InForce::adopt`]).
    pub(crate) fn adopt_settings(&mut self, other: &LiveSettings) -> Result<(), SettingsError> {
        self.in_force.adopt(other)
    }

    /// An operator's change made at this node: the next version, in force here at once and
    /// carried to the others by the next round. `change` makes it from the newest version
    /// known and the file settings.
    pub(crate) fn change_settings(
        &mut self,
        change: impl FnOnce(&LiveSettings, &Settings) -> Result<LiveSettings, SettingsError>,
    ) -> Result<LiveSettings, SettingsError> {
        let next = change(self.in_force.live(), self.in_force.file())?;
        self.in_force.adopt(&next)?;
        Ok(next)
    }

    /// Whether nothing limits admission: no target, and no rate cap (or passthrough). Then
    /// nobody needs a place to let a visitor through, and no majority is needed.
    pub(crate) fn unlimited(&self) -> bool {
        let now = self.in_force.current();
        self.settings().is_unlimited()
            && (now.new_users_per_minute.is_none() || now.mode == Mode::Passthrough)
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
    /// tangled, and rebuilding the tree makes every node re-pick its parent.
    pub(crate) fn watchdog(&mut self, now: Time, queued: u64, members: usize) -> bool {
        let interval = self.settings().eviction_interval_ms;
        let stale =
            now.saturating_sub(self.last_round_seen) > interval * u64::from(self.watchdog_rounds);
        if stale && queued > 0 && members > 1 {
            self.last_round_seen = now;
            return true;
        }
        false
    }

    /// At the root, at an interval boundary: count the cluster (§4.5.1). Returns the round if it
    /// is complete at once (a cluster of one).
    ///
    /// The round's cutoff is a boundary of the cluster's reference clock (`reference_now`, the
    /// clock join times are stamped on: README, "Clocks"), not of the root's own: a visitor
    /// stamped before the cutoff then joined before the count began, so before it reached their
    /// node, as §4.5.1 assumes of synchronised clocks. On a root whose clock ran ahead, an
    /// own-clock cutoff would let visitors who joined after their node was counted into the
    /// decided range, taking places meant for visitors counted ahead of them.
    pub(crate) fn start_count(
        &mut self,
        (now, reference_now): (Time, Time),
        ctx: Ctx<'_>,
        local: &mut Local,
        out: &mut Outbox,
    ) -> Option<Round> {
        let interval = self.settings().eviction_interval_ms;
        let boundary = reference_now / interval * interval;
        let stamp = Stamp {
            time: boundary,
            origin: ctx.me,
        };
        let bounds = make_bounds(local.room().head().map(|k| k.join_time), boundary);
        let select = match self.mode {
            AdmissionMode::Range if !self.unlimited() => self
                .select_limit
                .min(u32::try_from(self.settings().target_on_site).unwrap_or(u32::MAX)),
            _ => 0,
        };
        self.last_round_seen = now;
        if self.started.len() >= STARTED_KEPT {
            self.started.pop_front();
        }
        self.started.push_back(stamp);
        self.start_round(now, (stamp, bounds, select), None, ctx, local, out)
    }

    /// Counts this node's subtree for the round `(stamp, bounds, select)`: asks every neighbour
    /// but the parent side (`reply_to`; None at the root). Counting itself in is this node's
    /// request for places: it gives up what is left of its grant. Returns the round if it is
    /// complete.
    fn start_round(
        &mut self,
        now: Time,
        (stamp, bounds, select): (Stamp, Vec<Time>, u32),
        reply_to: Option<NodeId>,
        ctx: Ctx<'_>,
        local: &mut Local,
        out: &mut Outbox,
    ) -> Option<Round> {
        for ticket in std::mem::take(&mut self.uncount_next) {
            local.room_mut().uncount_pass(ticket);
        }
        let mut acc = self.own_counts(ctx.me, &bounds, select, local);
        let window = RELEASES_SENT_INTERVALS * self.settings().eviction_interval_ms;
        acc.released = self.released.recent(now, window);
        acc.lost = self.lease.lost_rounds(now, Some(stamp));
        self.uncount_next = std::mem::take(&mut self.uncount_later);
        self.lease.ask(stamp, now);
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

    fn own_counts(&self, me: NodeId, bounds: &[Time], select: u32, local: &Local) -> Counts {
        let room = local.room();
        let cutoff = bounds.last().copied().unwrap_or(0);
        let below: Vec<u64> = bounds.iter().map(|&b| room.queued_before(b)).collect();
        let own = NodeCounts {
            node: me,
            on_site: room.on_site(),
            eligible: below.last().copied().unwrap_or(0),
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
            departed: self.departed.list().to_vec(),
            voters: self.voters.clone(),
            settings: self.live().clone(),
            released: Vec::new(),
            lost: Vec::new(),
            seen: if self.voters.agreed() {
                BTreeSet::new()
            } else {
                self.seen.clone()
            },
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

    /// Counts this node's subtree for the round `r` that `from` asked about.
    pub(crate) fn join_round(
        &mut self,
        now: Time,
        from: NodeId,
        r: CountRequest,
        ctx: Ctx<'_>,
        local: &mut Local,
        out: &mut Outbox,
    ) -> Option<Round> {
        self.start_round(
            now,
            (r.stamp, r.bounds, r.select),
            Some(from),
            ctx,
            local,
            out,
        )
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

    /// At the root, with the whole cluster counted: decide how many to let out (§4.5.3, with
    /// the places departed members' visitors may still hold counted as taken) and grant each
    /// member its places. Members that hold a majority of the voters become the next voters;
    /// without a majority the root grants nothing (README, "Admission leases").
    pub(crate) fn decide(
        &mut self,
        now: Time,
        round: Round,
        version: u64,
        out: &mut Outbox,
    ) -> Decision {
        let counts = round.acc;
        let cutoff = round.stamp.time;
        // A version the count carried that does not fit here is still passed on.
        let _ = self.adopt_settings(&counts.settings);
        let majority = self.vote(&counts);
        let on_site = self.on_site_with_departed(now, &counts);
        let in_force = self.live().in_force_at(cutoff);
        let (held, lost) = self.held_back(now, &counts, round.stamp);
        let free = if majority && !held {
            self.free_places(&in_force, on_site, cutoff)
        } else {
            0
        };
        let lottery = in_force.queueing_method == QueueingMethod::Random;
        let (admit, max_key) = self.how_many(&counts, free, lottery);
        let rate = self.rate.sample(now, counts.admitted_total);
        let everyone_in = counts.queued <= admit;
        let straight = if everyone_in { free - admit } else { 0 };
        let by_range = self.mode == AdmissionMode::Range;
        // With no limit on the site nobody needs a place to let a visitor through.
        let granted = if self.unlimited() { 0 } else { straight };
        let grants = grants(&counts, admit, max_key.is_some(), granted, by_range);
        let summary = Summary {
            stamp: round.stamp,
            bounds: round.bounds,
            below: counts.below,
            version,
            queued: counts.queued,
            on_site,
            admitted: admit,
            rate_milli_per_s: rate,
            free_places: straight,
            members: counts.nodes,
            places: grants.places,
            grants: majority.then_some(grants.grants),
            voters: self.voters.clone(),
            settings: self.live().clone(),
            departed: self.departed.list().to_vec(),
            released: counts.released.clone(),
            record: (admit > 0).then(|| {
                (self.records).next_record(&round.stamp, (admit, max_key), version, lottery)
            }),
            lost,
        };
        out.emit(Event::CountCompleted(Box::new(summary.clone())));
        let range = (by_range && admit > 0).then_some(AdmitRange {
            cutoff,
            max_key,
            version,
            decided_at: round.stamp.time,
        });
        let batch = (!by_range && admit > 0).then_some(Admission {
            count: admit,
            cutoff,
            version,
        });
        Decision {
            reported: counts.ranges,
            summary,
            range,
            batch,
        }
    }

    /// The round whose record let out visitors decided at `decided_at`, if this node knows it
    /// ([`RecordChain::round_decided_at`]).
    pub(crate) fn round_decided_at(&self, decided_at: Time) -> Option<u64> {
        self.records.round_decided_at(decided_at)
    }

    /// Goes on from record `round` (with `link`) kept before a restart
    /// ([`RecordChain::resume`]).
    pub(crate) fn resume_records(&mut self, round: u64, link: String) {
        self.records.resume(round, link);
    }

    /// The driver signed round `round`'s record ([`RecordChain::linked`]).
    pub(crate) fn record_linked(&mut self, round: u64, link: String) {
        self.records.linked(round, link);
    }

    /// A visitor gives their pass back at this node at `now` (README, "Sessions"): refused here
    /// from now on, and everywhere once a round has carried it; uncounted here at once if this
    /// node counts it, else by the node that does when the round reaches it. Twice is once.
    pub(crate) fn release(&mut self, now: Time, r: Release, local: &mut Local) {
        local.room_mut().uncount_pass(r.ticket);
        self.released.release(now, r);
    }

    /// Whether the pass of `ticket` was given back.
    pub(crate) fn is_released(&self, ticket: TicketId) -> bool {
        self.released.contains(ticket)
    }

    /// Releases a round's result carries: refused from now on, uncounted if this node counts
    /// them.
    pub(crate) fn learn_released(&mut self, now: Time, list: &[Release], local: &mut Local) {
        for ticket in self.released.learn(now, list) {
            local.room_mut().uncount_pass(ticket);
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

    /// Places a round at `boundary` may fill, with `on_site` taken: the target's room, at most
    /// the rate cap's allowance for the round; none in queue-all mode (README, "Live settings").
    fn free_places(&self, live: &LiveSettings, on_site: u64, boundary: Time) -> u64 {
        if live.mode == Mode::QueueAll {
            return 0;
        }
        let settings = live.apply_to(self.in_force.file());
        let room = if settings.is_unlimited() {
            u64::MAX
        } else {
            settings.target_on_site.saturating_sub(on_site)
        };
        if live.mode == Mode::Passthrough {
            return room;
        }
        let interval = settings.eviction_interval_ms;
        live.round_allowance(boundary, interval)
            .map_or(room, |cap| room.min(cap))
    }

    /// The majority rule at the root (`voters.rs`): whether the members counted hold a majority
    /// of the newest voters known, which they then become. With no limit on the site there is
    /// nothing to protect, and no rule holds admission back.
    fn vote(&mut self, counts: &Counts) -> bool {
        self.voters.adopt(&counts.voters);
        let counted: BTreeSet<NodeId> = counts.per_node.iter().map(|n| n.node).collect();
        let had_company = self.seen.len() > 1;
        let lone_founder = self.voters.is_founding() && had_company && counted.len() == 1;
        let next = if lone_founder {
            None
        } else {
            let seen = self.seen.union(&counts.seen).copied().collect();
            self.voters.next(&counted, &seen)
        };
        let majority = next.is_some() || self.unlimited();
        if let Some(next) = next {
            self.voters = next;
        }
        majority
    }

    /// Rule 4 at the root (README, "Admission leases"): whether round `deciding` must grant
    /// nothing, because a lost round is live or the round took too long (`Lease::in_time`),
    /// and the lost rounds held.
    fn held_back(&mut self, now: Time, counts: &Counts, deciding: Stamp) -> (bool, Vec<LostRound>) {
        let lost = self.lost_rounds(now, counts, deciding);
        let asked = self.lease.asked_at(deciding);
        let in_time = asked.is_some_and(|at| self.lease.in_time(at, now));
        (!self.unlimited() && (!lost.is_empty() || !in_time), lost)
    }

    /// The lost rounds the count carried up or this node holds, live at `now`, but those this
    /// node started itself (it knows what they granted) and the round being decided.
    fn lost_rounds(&mut self, now: Time, counts: &Counts, deciding: Stamp) -> Vec<LostRound> {
        let started = &self.started;
        let unknown: Vec<LostRound> = (counts.lost.iter())
            .filter(|l| !started.contains(&l.stamp))
            .copied()
            .collect();
        self.lease.learn_lost(now, &unknown);
        let mut lost = self.lease.lost_rounds(now, Some(deciding));
        lost.retain(|l| !self.started.contains(&l.stamp));
        lost
    }

    /// Visitors on the site at the count plus the places departed members may still hold (the
    /// root's list merged with the ones the count carried up; expired ones dropped).
    fn on_site_with_departed(&mut self, now: Time, counts: &Counts) -> u64 {
        self.departed.learn(&counts.departed);
        self.departed.on_site(now, counts.on_site)
    }

    /// How many of the eligible visitors the `free` places let out, and in range admission the
    /// largest key among them (the admit-th smallest; a round admits at most as many as were
    /// reported).
    ///
    /// Under random queueing with a limit the range is always cut by key, even when it lets
    /// everyone counted out: the lottery's visitors all share one join time, earlier than the
    /// cutoff, so a range cut by time alone would also cover everyone who joins after the count
    /// (without a limit everyone is let out anyway).
    fn how_many(&self, counts: &Counts, free: u64, lottery: bool) -> (u64, Option<QueueKey>) {
        let eligible = counts.below.last().copied().unwrap_or(0);
        let admit = eligible.min(free);
        let everyone = admit >= eligible && (!lottery || self.unlimited());
        if self.mode != AdmissionMode::Range || everyone || admit == 0 {
            return (admit, None);
        }
        let admit = admit.min(counts.smallest.len() as u64);
        let max_key = admit
            .checked_sub(1)
            .and_then(|i| counts.smallest.get(i as usize).copied());
        (admit, max_key)
    }

    /// The result of the root's count, with the latest ranges (merged from the count first).
    pub(crate) fn result(&self, summary: Summary, range: Option<AdmitRange>) -> CountResult {
        CountResult {
            summary,
            admit: range,
            earlier: self.recent_ranges(),
        }
    }

    /// The result of a count flows down the tree: keep the summary, take this node's share of
    /// straight-through places, pass it on. Returns the ranges it carries, for the node to merge
    /// (and let out its part of).
    pub(crate) fn on_count_result(
        &mut self,
        now: Time,
        from: NodeId,
        r: CountResult,
        ctx: Ctx<'_>,
        out: &mut Outbox,
    ) -> Vec<AdmitRange> {
        let seen = self
            .summary
            .as_ref()
            .is_some_and(|s| s.stamp >= r.summary.stamp);
        if seen {
            // A copy that came another way (the tree changed under the flood), or an old one.
            return r.earlier.into_iter().chain(r.admit).collect();
        }
        for &n in ctx.neighbours.iter().filter(|&&n| n != from) {
            out.send(n, ChannelMsg::CountResult(Box::new(r.clone())));
        }
        let mine = r.summary.grants.as_ref().map(|grants| {
            grants
                .iter()
                .find(|(n, _)| *n == ctx.me)
                .map_or(0, |&(_, places)| places)
        });
        self.lease.grant(r.summary.stamp, mine);
        self.lease.learn_lost(now, &r.summary.lost);
        self.voters.adopt(&r.summary.voters);
        if let Some(record) = r.summary.record.as_ref()
            && self.records.take(record)
        {
            out.emit(Event::RoundRecorded(Box::new(record.clone())));
        }
        // A version that does not fit here is kept and passed on (`adopt_settings`).
        let _ = self.adopt_settings(&r.summary.settings);
        self.own_below.retain(|(s, _)| *s >= r.summary.stamp);
        self.departed.learn(&r.summary.departed);
        self.summary = Some(r.summary);
        r.earlier.into_iter().chain(r.admit).collect()
    }

    /// A member left the cluster (it died, was removed, or is cut off) with membership
    /// `version`: the places it held at the last count, with its grant, stay counted until
    /// whatever it may still have let out is gone ([`departed::counted_for`]), so the site does
    /// not fill past the target with visitors nobody counts any more.
    pub(crate) fn member_departed(&mut self, now: Time, node: NodeId, version: u64) {
        if self.unlimited() {
            return;
        }
        let expiry = self.departed_for();
        let places = self
            .summary
            .as_ref()
            .and_then(|s| s.places.iter().find(|(n, _)| *n == node))
            .map_or(0, |&(_, p)| p);
        self.departed
            .member_departed(now, (node, version), places, expiry);
    }

    /// How long a departed member's places stay counted ([`departed::counted_for`]).
    fn departed_for(&self) -> Time {
        departed::counted_for(self.lease.life(), &self.in_force)
    }

    /// Adds decided ranges this node had not seen (the node then lets out what falls in them,
    /// [`Tag::admit_decided`]).
    pub(crate) fn merge_ranges(&mut self, ranges: impl IntoIterator<Item = AdmitRange>) {
        for range in ranges {
            if !self.ranges.iter().any(|k| k.decided_at == range.decided_at) {
                self.ranges.push(range);
            }
        }
        self.ranges.sort_by_key(|r| r.decided_at);
        let excess = self.ranges.len().saturating_sub(RANGES_KEPT);
        self.ranges.drain(..excess);
    }

    /// The join time to re-queue a visitor under whose `key` a round decided to let out (their
    /// node died, or they were away): before the latest range's largest key, so they are let
    /// out with it, or among the first of the next round if no grant is left here. Under FIFO
    /// that is their own join time (or a ms less); under random queueing the lottery's ranges
    /// are not ordered, and without it a visitor whose node died before they could leave would
    /// lose their admission and draw again (README, "Random queueing").
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
    /// Each takes a place of this node's grant; without one left they wait for the next round.
    pub(crate) fn admit_decided(&mut self, now: Time, local: &mut Local, out: &mut Outbox) -> bool {
        let mut admitted = false;
        let unlimited = self.unlimited();
        for range in &self.ranges {
            while let Some(k) = local.room().head() {
                if !range.covers(&k) {
                    break;
                }
                if !unlimited && !self.lease.take(now) {
                    return admitted;
                }
                local.admit_head(now, range.decided_at, out);
                admitted = true;
            }
        }
        admitted
    }

    /// Takes one straight-through place for a visitor joining an empty queue: only while the
    /// last count let everyone in and this node's grant has a place left.
    pub(crate) fn take_place(&mut self, now: Time, queued_here: u64) -> bool {
        let everyone_in = self
            .summary
            .as_ref()
            .is_some_and(|s| s.queued <= s.admitted && s.grants.is_some());
        if self.current().mode == Mode::Passthrough {
            return true;
        }
        if !self.settings().admit_straight_through || queued_here > 0 || !everyone_in {
            return false;
        }
        self.unlimited() || self.lease.take(now)
    }

    /// Whether a pass may be extended here at `now`: only under a live grant (a node cut off
    /// from the majority must not keep its visitors on the site past what the others count).
    pub(crate) fn may_refresh(&self, now: Time) -> bool {
        self.unlimited() || self.lease.is_live(now)
    }

    /// Why this node lets nobody out at `now`, if it does not: the last result came from a root
    /// without a majority, or its grant has lapsed. Never with no limit on the site.
    pub(crate) fn pause(&self, now: Time) -> Option<Pause> {
        if self.unlimited() {
            return None;
        }
        if self.summary.as_ref().is_some_and(|s| s.grants.is_none()) {
            return Some(Pause::NoMajority);
        }
        if self.summary.as_ref().is_some_and(|s| !s.lost.is_empty()) {
            return Some(Pause::LostRound);
        }
        (!self.lease.is_live(now)).then_some(Pause::NoGrant)
    }

    /// Places this node may still give out at `now`, and when its grant expires (0: never
    /// granted).
    pub(crate) fn grant(&self, now: Time) -> (u64, Time) {
        (self.lease.places(now), self.lease.expires())
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

/// What a round grants each counted member, and the places each holds once it has used them.
struct Grants {
    /// Places each member may give out (its share of the range, in range admission, and of
    /// the straight-through places), by node id.
    grants: Vec<(NodeId, u64)>,
    /// Its visitors on the site plus its grant and its share of the round's admissions: what
    /// to keep counting if it departs.
    places: Vec<(NodeId, u64)>,
}

/// Each counted member's share of the `admit` let out and of the `straight` through places.
/// With a range cut by key (`by_key`) the share of the admissions is exact (the smallest keys
/// carry their node); otherwise a node that had `eligible` visitors gets `min(eligible, admit)`,
/// an upper bound, which errs towards a fuller site. Straight-through places are split evenly
/// in id order. Only range admission (`by_range`) lets visitors out of the queue under the
/// grant; the deleteMin modes let them out through QPID.
fn grants(counts: &Counts, admit: u64, by_key: bool, straight: u64, by_range: bool) -> Grants {
    let mut taken: BTreeMap<NodeId, u64> = BTreeMap::new();
    if by_key {
        let k = usize::try_from(admit).unwrap_or(usize::MAX);
        for key in counts.smallest.iter().take(k) {
            *taken.entry(key.node).or_default() += 1;
        }
    }
    let mut nodes = counts.per_node.clone();
    nodes.sort_unstable_by_key(|n| n.node);
    let n = nodes.len().max(1) as u64;
    let (mut grants, mut places) = (Vec::new(), Vec::new());
    for (i, node) in nodes.iter().enumerate() {
        let share = if by_key {
            taken.get(&node.node).copied().unwrap_or(0)
        } else {
            node.eligible.min(admit)
        };
        let through = straight / n + u64::from((i as u64) < straight % n);
        let grant = through.saturating_add(if by_range { share } else { 0 });
        grants.push((node.node, grant));
        let held = node.on_site.saturating_add(share).saturating_add(through);
        places.push((node.node, held));
    }
    Grants { grants, places }
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
    use crate::membership::Membership;
    use crate::messages::Body;
    use crate::node::Node;
    use crate::patch::SettingsPatch;
    use crate::testing::{self, Neighbours, Peer, Said, member, said, settle, tree};

    use waitingroom_core::rounds::{Cutoff, RoundRecord};

    use super::*;

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

    fn reply(stamp: Stamp, counts: Option<Counts>) -> ChannelMsg {
        ChannelMsg::CountReply {
            stamp,
            counts: counts.map(Box::new),
        }
    }

    /// Node `node`'s own figures in a count: `queued` visitors, all eligible.
    fn counts_of(node: u64, queued: u64) -> Counts {
        Counts {
            on_site: 0,
            queued,
            below: vec![queued],
            admitted_total: 0,
            nodes: 1,
            smallest: Vec::new(),
            ranges: Vec::new(),
            per_node: vec![NodeCounts {
                node: NodeId(node),
                on_site: 0,
                eligible: queued,
            }],
            departed: Vec::new(),
            released: Vec::new(),
            voters: Voters::default(),
            settings: LiveSettings::default(),
            lost: Vec::new(),
            seen: BTreeSet::new(),
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

    /// README, "Eviction with TAG": a node still settling after a membership change refuses
    /// the round (the next interval counts again).
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

    /// README, "Admission leases", rule 4: a count that carries a round whose result a member
    /// never heard (another root's) grants nothing, and says so, until that round's grants
    /// have expired; a lost round of the root's own is no reason to wait.
    #[test]
    fn a_lost_round_holds_grants_back_until_it_expires() {
        let settings = Settings {
            target_on_site: 5,
            ..testing::queued_settings()
        };
        let m = tree(2, &[1, 2], &[(1, 2)]);
        let mut cfg = testing::config(1, 1, settings);
        // Node 2 is this test's hand: it answers no probe.
        (cfg.probe_interval_ms, cfg.probe_timeout_ms) = (1 << 40, 1 << 39);
        let mut node = member(cfg, &m);
        let mut peers = settle(&mut node);
        let lost = |origin: u64, remaining_ms: Time| LostRound {
            stamp: Stamp {
                time: 500,
                origin: NodeId(origin),
            },
            remaining_ms,
        };
        let mut count = |node: &mut Node, at: Time, carried: Option<LostRound>| {
            node.handle_timeout(at);
            said(node);
            let stamp = Stamp {
                time: at,
                origin: NodeId(1),
            };
            let mut counts = counts_of(2, 1);
            counts.lost = carried.into_iter().collect();
            let env = peers.channel(2, node, reply(stamp, Some(counts)));
            assert_eq!(node.handle_message(at, env), Ok(()));
            said(node);
            let summary = node.summary().expect("decided").clone();
            (summary.admitted, summary.lost)
        };
        assert_eq!(
            count(&mut node, 1_000, Some(lost(3, 1_500))),
            (0, vec![lost(3, 1_500)])
        );
        assert_eq!(node.pause(1_000), Some(Pause::LostRound));
        assert_eq!(node.grant(1_000).0, 0);
        // Held here too, counted down, though the count no longer carries it.
        assert_eq!(count(&mut node, 2_000, None), (0, vec![lost(3, 500)]));
        assert_eq!(count(&mut node, 3_000, None), (1, vec![]));
        assert_eq!(node.pause(3_000), None);
        // Its own round: it knows what that granted.
        let own = LostRound {
            stamp: Stamp {
                time: 3_000,
                origin: NodeId(1),
            },
            remaining_ms: 5_000,
        };
        node.handle_timeout(4_000);
        said(&mut node);
        let stamp = Stamp {
            time: 4_000,
            origin: NodeId(1),
        };
        let mut counts = counts_of(2, 1);
        counts.lost = vec![own];
        let env = peers.channel(2, &node, reply(stamp, Some(counts)));
        assert_eq!(node.handle_message(4_000, env), Ok(()));
        assert_eq!(node.summary().expect("decided").lost, []);
    }

    /// §4.5.1 and §4.5.3, with range admission (README, "Eviction with TAG"): at the interval
    /// boundary only the root counts; with every answer in it decides how many to let out (all
    /// who joined before the boundary, as places are unlimited) and floods the result, which
    /// names the range every node lets out its share of.
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
                prev: BTreeSet::new(),
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
            }),
            lost: Vec::new(),
        };
        let range = AdmitRange {
            cutoff: 1_000,
            max_key: None,
            version: 2,
            decided_at: 1_000,
        };
        let result = CountResult {
            summary: summary.clone(),
            admit: Some(range),
            earlier: Vec::new(),
        };
        let flood = ChannelMsg::CountResult(Box::new(result));
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

    /// README, "Live settings": passes issued before an operator shortened the pass expiry
    /// still live the old expiry, so a departed member's places stay counted for it; a longer
    /// one counts at once.
    #[test]
    fn departed_places_count_the_longest_pass_expiry_in_force() {
        let settings = Settings {
            target_on_site: 10,
            pass_expiry_ms: 10_000,
            pass_max_lifetime_ms: 60_000,
            ..testing::queued_settings()
        };
        let mut tag = Tag::new(&testing::config(1, 1, settings));
        let before = tag.departed_for();
        let shorter = SettingsPatch {
            pass_expiry_ms: Some(1_000),
            ..SettingsPatch::default()
        };
        tag.change_settings(|l, f| l.patched(&shorter, (NodeId(1), 0, [0; 32]), f))
            .unwrap();
        assert_eq!(tag.settings().pass_expiry_ms, 1_000);
        assert_eq!(tag.departed_for(), before);
        let longer = SettingsPatch {
            pass_expiry_ms: Some(20_000),
            ..SettingsPatch::default()
        };
        tag.change_settings(|l, f| l.patched(&longer, (NodeId(1), 0, [0; 32]), f))
            .unwrap();
        assert!(tag.departed_for() > before);
    }
}
