//! Routing between the protocol's parts. Each part is called with what it needs of the node
//! and says what it wants sent in an outbox; what one part's call means for another (a
//! membership applied re-initialises QPID, a count decided lets visitors out, a member declared
//! dead changes the membership) is decided here, in the order the protocol needs.

use std::sync::Arc;

use waitingroom_core::round_records::RoundRecord;
use waitingroom_core::{NodeId, Time};

use super::Node;
use crate::cluster::{Applied, Asking, Change};
use crate::config::AdmissionMode;
use crate::decision::Parts;
use crate::departed;
use crate::ignored::Ignored;
use crate::local::Local;
use crate::membership::{ClusterRank, Contact, Membership, View};
use crate::messages::{
    Admission, AdmitRange, ChannelMsg, CountRequest, CountResult, Counts, Stamp, Summary, Weight,
};
use crate::outputs::{Event, Outbox};
use crate::qpid::{self, Qpid};
use crate::released::RELEASES_SENT_INTERVALS;
use crate::swim::{Swim, Tick};
use crate::tag::{self, Carried, Round, Tag};
use crate::timer::Timer;

impl Node {
    // ---- QPID ------------------------------------------------------------------------------

    /// Runs `f` on QPID with what it needs to know of the node, then sends what it said.
    fn with_qpid<R>(
        &mut self,
        now: Time,
        f: impl FnOnce(&mut Qpid, qpid::Ctx, &mut Local, &mut Outbox) -> R,
    ) -> R {
        let ctx = qpid::Ctx {
            me: self.cluster.me().id,
            version: self.cluster.membership().version,
            member: self.is_member(),
        };
        let mut out = Outbox::default();
        let result = f(&mut self.qpid, ctx, &mut self.local, &mut out);
        self.send_outbox(now, out);
        result
    }

    /// The local queue's head may have changed (insert, admission, expiry): QPID propagates it.
    pub(super) fn local_queue_changed(&mut self, now: Time) {
        self.with_qpid(now, |q, ctx, local, out| {
            q.local_queue_changed(now, ctx, local, out)
        });
    }

    pub(super) fn on_update(
        &mut self,
        now: Time,
        from: NodeId,
        weight: Weight,
    ) -> Result<(), Ignored> {
        self.with_qpid(now, |q, ctx, local, out| {
            q.on_update(now, ctx, from, weight, local, out)
        })
    }

    pub(super) fn on_find_root(
        &mut self,
        now: Time,
        from: (NodeId, Weight),
        admit: Option<Admission>,
    ) -> Result<(), Ignored> {
        if let Some(Admission {
            cutoff,
            round: Some(round),
            ..
        }) = admit
        {
            // A batch handed over with findRoot is let out here like one a deleteMin brings:
            // this node names its round.
            self.records.let_out_by(cutoff, round);
        }
        self.with_qpid(now, |q, ctx, local, out| {
            q.on_find_root(now, ctx, from, admit, local, out)
        })
    }

    pub(super) fn on_delete_min(&mut self, now: Time, admit: Admission) -> Result<(), Ignored> {
        if let Some(round) = admit.round {
            // Whoever of the nodes on the way lets the batch out names its round.
            self.records.let_out_by(admit.cutoff, round);
        }
        self.with_qpid(now, |q, ctx, local, out| {
            q.on_delete_min(now, ctx, admit, local, out)
        })
    }

    pub(super) fn on_weight_query(&mut self, now: Time, from: NodeId) -> Result<(), Ignored> {
        self.with_qpid(now, |q, ctx, _, out| q.on_weight_query(ctx, from, out))
    }

    pub(super) fn check_settling(&mut self, now: Time) {
        self.with_qpid(now, |q, ctx, _, out| q.check_settling(now, ctx, out));
    }

    // ---- TAG, the decision, and what each part takes of a round ----------------------------

    /// Runs `f` on TAG with what it needs to know of the node, then sends what it said.
    fn with_tag<R>(
        &mut self,
        now: Time,
        f: impl FnOnce(&mut Tag, tag::Ctx<'_>, &mut Local, &mut Outbox) -> R,
    ) -> R {
        let neighbours = self.cluster.neighbours();
        let membership = self.cluster.membership();
        let ctx = tag::Ctx {
            me: self.cluster.me().id,
            version: membership.version,
            neighbours: &neighbours,
            settings: &self.in_force,
        };
        let mut out = Outbox::default();
        let result = f(&mut self.tag, ctx, &mut self.local, &mut out);
        self.send_outbox(now, out);
        self.apply_settings();
        result
    }

    /// Puts the room settings in force in the local room, if a round or an operator brought
    /// new live settings (`live.rs`).
    pub(super) fn apply_settings(&mut self) {
        if self.local.room().settings() != self.in_force.settings() {
            let settings = self.in_force.settings().clone();
            // They were checked against this node's file settings before they were taken.
            let _ = self.local.room_mut().set_settings(settings);
            self.emit(Event::SettingsChanged(self.in_force.live().clone()));
        }
        for (_, why) in self.in_force.take_dropped() {
            self.emit(Event::SettingsChangeDropped {
                field: why.field.to_owned(),
                reason: why.reason,
            });
        }
    }

    /// An interval boundary: the watchdog rebuilds a tree that has gone quiet; the root counts.
    pub(super) fn on_eviction_tick(&mut self, now: Time) {
        if !self.is_member() {
            return;
        }
        let queued = self.local.room().queued();
        let members = self.cluster.membership().members.len();
        let interval = self.in_force.settings().eviction_interval_ms;
        if self.tag.watchdog(now, queued, members, interval) {
            let refreshed = self.cluster.refreshed();
            self.emit(Event::TreeRepaired);
            self.commit_membership(now, Arc::new(refreshed));
            return;
        }
        if !self.is_root() || !self.qpid.is_settled() {
            return;
        }
        let reference = self.reference_time(now);
        let stamp = Tag::stamp_at(self.id(), reference, interval);
        self.decision.started(stamp);
        let carried = self.count_in(now, stamp);
        let done = self.with_tag(now, |t, ctx, local, out| {
            t.start_count(now, (stamp, carried), ctx, local, out)
        });
        self.complete_round(now, done);
    }

    /// This node counts itself into round `stamp` at `now`: what its own count carries of the
    /// other parts. Counting itself in is its request for places: it gives up what is left of
    /// its grant (`Lease::ask`), after gathering the rounds it may have missed but this one.
    fn count_in(&mut self, now: Time, stamp: Stamp) -> Carried {
        let window = RELEASES_SENT_INTERVALS * self.in_force.settings().eviction_interval_ms;
        let carried = Carried {
            departed: self.departed.list().to_vec(),
            voters: self.voters.voters().clone(),
            seen: self.voters.seen_to_count(),
            settings: self.in_force.live().clone(),
            released: self.released.recent(now, stamp.time, window),
            lost: self.lease.lost_rounds(now, Some(stamp)),
            lives: (self.past.first_life, self.cluster.me().incarnation),
        };
        self.lease.ask(stamp, now);
        carried
    }

    pub(super) fn on_count_request(&mut self, now: Time, from: NodeId, mut r: CountRequest) {
        let settled = self.qpid.is_settled();
        let taken = self.with_tag(now, |t, _, _, out| {
            t.take_request(now, from, &r, settled, out)
        });
        if !taken {
            return;
        }
        self.merge_ranges(now, std::mem::take(&mut r.ranges));
        let carried = self.count_in(now, r.stamp);
        let done = self.with_tag(now, |t, ctx, local, out| {
            t.join_round((from, r), carried, ctx, local, out)
        });
        self.complete_round(now, done);
    }

    pub(super) fn on_count_reply(
        &mut self,
        now: Time,
        from: NodeId,
        stamp: Stamp,
        counts: Option<Counts>,
    ) -> Result<(), Ignored> {
        let reply = self.with_tag(now, |t, _, _, out| {
            t.on_count_reply(from, stamp, counts, out)
        });
        self.complete_round(now, reply?);
        Ok(())
    }

    /// At the root, with the whole cluster counted (if `round` is): decide, merge the ranges
    /// the count reported, flood the result (this node takes it first), and in the deleteMin
    /// modes let the batch out through QPID.
    fn complete_round(&mut self, now: Time, round: Option<Round>) {
        let Some(round) = round else {
            return;
        };
        let version = self.cluster.membership().version;
        let mut out = Outbox::default();
        let parts = Parts {
            settings: &mut self.in_force,
            voters: &mut self.voters,
            departed: &mut self.departed,
            lease: &mut self.lease,
            records: &self.records,
        };
        let counted = round.into_counted();
        let decision = (self.decision).decide(now, counted, version, parts, &mut out);
        self.send_outbox(now, out);
        self.apply_settings();
        self.merge_ranges(now, decision.reported);
        // The releases the count carried up first, so that the digest counts them.
        for ticket in self.released.learn(now, &decision.summary.released) {
            self.local.room_mut().uncount_pass(ticket);
        }
        let record = decision.summary.record.clone();
        let mut result = self.tag.result(decision.summary, decision.range);
        result.releases = self.released.digest();
        self.on_count_result(now, self.id(), Arc::new(result));
        let Some(batch) = decision.batch else {
            return;
        };
        // The batch is let out under this round's record, published here even when a newer
        // result reached this node first (another root's, in the same round slot) and so kept
        // this one from being taken.
        if let Some(record) = &record {
            self.learn_record(record);
        }
        // This node applied the batch's version: QPID takes it (a one-at-a-time deleteMin at a
        // node still settling is dropped: the next count lets that visitor out).
        if self.cfg.admission == AdmissionMode::Sequential {
            for _ in 0..batch.count {
                let _ = self.on_delete_min(now, Admission { count: 1, ..batch });
            }
        } else {
            let _ = self.on_delete_min(now, batch);
        }
    }

    /// The result of a count flows down the tree (TAG passes it on): the releases it carries
    /// are refused from now on and uncounted if this node counts them, and a node whose set
    /// still differs from the root's catches up; a new result is taken by every part; the
    /// ranges it carries are merged (and this node's part let out).
    pub(super) fn on_count_result(&mut self, now: Time, from: NodeId, r: Arc<CountResult>) {
        for ticket in self.released.learn(now, &r.summary.released) {
            self.local.room_mut().uncount_pass(ticket);
        }
        let new = self.with_tag(now, |t, ctx, _, out| t.pass_on(from, &r, ctx, out));
        let ranges = r.earlier.iter().chain(&r.admit).cloned().collect();
        if new {
            self.compare_releases(now, from, (r.summary.stamp.time, r.releases));
            self.take_result(now, r.summary.clone());
        }
        self.merge_ranges(now, ranges);
    }

    /// A new result: this node's grant and the lost rounds it tells of, the voters, the
    /// record (for the driver to sign), the live settings (a version that does not fit here is
    /// kept and passed on: `InForce::adopt`), the departed places, and TAG's summary.
    fn take_result(&mut self, now: Time, summary: Summary) {
        self.lease.take_result(now, self.id(), &summary);
        self.voters.adopt(&summary.voters);
        if let Some(record) = summary.record.as_ref() {
            self.learn_record(record);
        }
        let _ = self.in_force.adopt(&summary.settings);
        self.apply_settings();
        self.departed.learn(&summary.departed);
        self.tag.keep(summary);
    }

    /// Merges decided ranges, learning the records they carry first (a result this node missed
    /// may let its visitors out now, under a round whose record it must publish and name on their
    /// passes), then lets out this node's part of them: their passes name the round of the range
    /// kept for their boundary (`RecordChain::let_out_by`).
    fn merge_ranges(&mut self, now: Time, mut ranges: Vec<AdmitRange>) {
        ranges.sort_by_key(|r| r.decided_at);
        for record in ranges.iter().filter_map(|r| r.record.as_ref()) {
            self.learn_record(record);
        }
        for (decided_at, round) in self.tag.merge_ranges(ranges) {
            self.records.let_out_by(decided_at, round);
        }
        self.admit_decided(now);
    }

    /// A round's record reached this node (with its result or a range it decided): published
    /// once, for the driver to sign (`Event::RoundRecorded`).
    fn learn_record(&mut self, record: &RoundRecord) {
        if self.records.learn(record) {
            self.emit(Event::RoundRecorded(Box::new(record.clone())));
        }
    }

    /// Lets out the local visitors whose keys fall in a decided range; QPID hears of the new
    /// head.
    pub(super) fn admit_decided(&mut self, now: Time) {
        let mut out = Outbox::default();
        let lease = (&mut self.lease, self.in_force.unguarded());
        let admitted = self
            .tag
            .admit_decided(now, lease, &mut self.local, &mut out);
        self.send_outbox(now, out);
        if admitted {
            self.local_queue_changed(now);
        }
    }

    // ---- SWIM ------------------------------------------------------------------------------

    pub(super) fn on_probe_tick(&mut self, now: Time) {
        if !self.is_member() {
            return;
        }
        let mut out = Outbox::default();
        let (me, members) = (self.id(), &self.cluster.membership().members);
        let tick = self
            .swim
            .tick(now, me, members, self.cluster.view(), &mut out);
        self.send_outbox(now, out);
        match tick {
            Tick::Pinged(nonce) => {
                let due = now + self.cfg.probe_timeout_ms;
                self.arm(due, Timer::ProbeTimeout(nonce));
            }
            Tick::Dead(target) => self.declare_dead(now, target),
            Tick::Idle => {}
        }
    }

    pub(super) fn on_probe_timeout(&mut self, now: Time, nonce: u64) {
        let mut out = Outbox::default();
        let (me, members) = (self.id(), &self.cluster.membership().members);
        self.swim.timed_out(nonce, me, members, &mut out);
        self.send_outbox(now, out);
    }

    /// Every node answers a ping. A ping also shows the sender's membership view: a joining
    /// node learns a member's address from it, and a member sends its tree to a peer that is
    /// behind or conflicts (anti-entropy), or tells a stranger it is not a member.
    pub(super) fn on_ping(
        &mut self,
        now: Time,
        from: &Contact,
        (nonce, time): (u64, Time),
        view: View,
    ) {
        let mut out = Outbox::default();
        let me = (self.id(), self.cluster.view());
        Swim::answer(me, from, (nonce, (time, now)), &mut out);
        if view.version > 0 {
            self.cluster.learn_seed(&from.addr);
        }
        self.cluster.compare_views(from, view, &mut out);
        // A stranger, or a member's later life (it restarted before we noticed): either way
        // not in our cluster, and told so, so that it joins (or, ranking higher, we join it).
        let listed = self.cluster.membership().members.get(&from.id);
        if self.is_member() && listed.is_none_or(|c| c.incarnation < from.incarnation) {
            out.raw(from.clone(), self.cluster.not_member());
        }
        self.send_outbox(now, out);
    }

    pub(super) fn on_ping_ack(
        &mut self,
        now: Time,
        from: &Contact,
        (nonce, target): (u64, NodeId),
        (view, clock): (View, Option<(Time, Time)>),
    ) -> Result<(), Ignored> {
        let mut out = Outbox::default();
        if from.id == target {
            self.cluster.compare_views(from, view, &mut out);
        }
        // Only the target's own answer measures its clock (a relayed one took another path).
        let clock = clock.filter(|_| from.id == target);
        let acked = self
            .swim
            .on_ack(now, (nonce, target), (view, clock), &mut out);
        self.send_outbox(now, out);
        acked
    }

    /// Another member asks this one to probe `target` for it (an indirect probe).
    pub(super) fn on_ping_req(
        &mut self,
        now: Time,
        from: &Contact,
        target: Contact,
        nonce: u64,
    ) -> Result<(), Ignored> {
        if !self.is_member() {
            return Err(Ignored::NotInCluster);
        }
        if !self.cluster.membership().contains(from.id) {
            return Err(Ignored::SenderNotMember);
        }
        let mut out = Outbox::default();
        let view = self.cluster.view();
        self.swim.relay(from, target, nonce, view, &mut out);
        self.send_outbox(now, out);
        Ok(())
    }

    /// Pings a former member now and then: if it lives in another cluster (a healed
    /// partition), its answer tells us, and the lesser cluster joins the greater.
    pub(super) fn probe_a_former(&mut self, now: Time) {
        if !self.is_member() {
            return;
        }
        let candidates = self.cluster.former_candidates();
        let mut out = Outbox::default();
        self.swim
            .ping_one_of(&candidates, self.cluster.view(), &mut out);
        self.send_outbox(now, out);
    }

    // ---- membership ------------------------------------------------------------------------

    /// Starts a cluster of one.
    pub(super) fn become_single(&mut self, now: Time) {
        self.hold_forgotten_past(now);
        let mut out = Outbox::default();
        let membership = self.cluster.found(&mut out);
        self.send_outbox(now, out);
        self.apply_membership(now, Arc::new(membership));
    }

    pub(super) fn send_join_request(&mut self, now: Time) {
        let mut out = Outbox::default();
        let asking = self.cluster.ask_to_join(now, &mut out);
        self.send_outbox(now, out);
        match asking {
            Asking::Asked => self.arm(now + self.cfg.join_retry_ms, Timer::JoinRetry),
            Asking::GiveUp => self.become_single(now),
            Asking::NotJoining => {}
        }
    }

    pub(super) fn on_join_request(&mut self, now: Time, contact: Contact) -> Result<(), Ignored> {
        let mut out = Outbox::default();
        let next = self.cluster.on_join_request(contact.clone(), &mut out);
        self.send_outbox(now, out);
        if let Some(next) = next? {
            self.commit_membership(now, Arc::new(next));
            self.send_releases_to(now, &contact);
        }
        Ok(())
    }

    pub(super) fn on_tree(
        &mut self,
        now: Time,
        from: &Contact,
        m: Arc<Membership>,
    ) -> Result<(), Ignored> {
        let mut out = Outbox::default();
        let change = self.cluster.on_tree(from, m, &mut out);
        self.send_outbox(now, out);
        match change? {
            Change::Apply(m) => self.apply_membership(now, m),
            Change::Commit(m) => self.commit_membership(now, m),
        }
        Ok(())
    }

    pub(super) fn on_not_member(
        &mut self,
        now: Time,
        from: &Contact,
        cluster: ClusterRank,
        version: u64,
    ) -> Result<(), Ignored> {
        let mut out = Outbox::default();
        let rejoin = self.cluster.on_not_member(from, cluster, version, &mut out);
        self.send_outbox(now, out);
        if let Some(seeds) = rejoin? {
            self.rejoin(now, seeds);
        }
        Ok(())
    }

    /// SWIM declared `target` dead: remove it and tell everyone.
    fn declare_dead(&mut self, now: Time, target: Contact) {
        if let Some(next) = self.cluster.without(&target) {
            self.emit(Event::MemberFailed(target));
            self.commit_membership(now, Arc::new(next));
        }
    }

    /// Applies a membership this node decided on and tells everyone.
    fn commit_membership(&mut self, now: Time, next: Arc<Membership>) {
        let mut out = Outbox::default();
        self.cluster.broadcast(&next, &mut out);
        self.send_outbox(now, out);
        self.apply_membership(now, next);
    }

    /// Makes `m` this node's membership; then the parts follow: SWIM forgets the members gone,
    /// TAG keeps counting their places and drops its round, re-queued visitors are told to the
    /// members back, QPID starts over on the new tree, and messages held for this version are
    /// replayed.
    fn apply_membership(&mut self, now: Time, m: Arc<Membership>) {
        let mut out = Outbox::default();
        let applied = self.cluster.apply(m, &mut out);
        self.send_outbox(now, out);
        let (gone, added) = match applied {
            Applied::Changed { gone, added } => (gone, added),
            Applied::Rejoin(seeds) => return self.rejoin(now, seeds),
            Applied::Unchanged => return,
        };
        let version = self.cluster.membership().version;
        if self.cluster.membership().members.len() > 1 {
            self.past.met_others();
        }
        self.voters
            .members_now(self.cluster.membership().members.keys());
        for life in gone {
            self.swim.forget(life.id);
            self.member_departed(now, &life, version);
        }
        for c in added {
            for ticket in self.forgets.remove(&c.id).unwrap_or_default() {
                self.send(now, &c, ChannelMsg::Forget { ticket });
            }
        }
        self.tag.abandon_round();
        self.qpid_apply(now);
        let pending = std::mem::take(&mut self.future);
        for (from, msg) in pending {
            // Whoever sent them learns nothing of how they were taken.
            let _ = self.on_channel_msg(now, from, msg);
        }
    }

    /// A member's life left the cluster (it died, was removed, is cut off, or a newer life of
    /// the node took its place) with membership `version`: the places it held at the last
    /// count, with its grant, stay counted until whatever it may still have let out is gone
    /// ([`departed::counted_for`]), or until a process that counts that life's visitors is
    /// counted (the same process back, or one restored from its state: `node/durable.rs`),
    /// so the site does not fill past the target with visitors nobody counts any more.
    fn member_departed(&mut self, now: Time, life: &Contact, version: u64) {
        if self.in_force.unlimited() {
            return;
        }
        let expiry = departed::counted_for(self.lease.life(), &self.in_force);
        // A node that has heard of no round knows nothing of what the member let out: the
        // whole target, as for a forgotten past (`node/durable.rs`).
        let target = self.in_force.settings().target_on_site;
        let places = self.tag.places_of(life.id).unwrap_or(target);
        self.tag.forget_places(life.id);
        let node = (life.id, Some(life.incarnation), version);
        (self.departed).member_departed(now, node, places, expiry);
    }

    /// Re-initialises QPID for the membership just applied (see [`Qpid::apply`]): the root
    /// role starts at the member with the lowest id.
    fn qpid_apply(&mut self, now: Time) {
        let me = self.id();
        let membership = self.cluster.membership();
        let lowest = membership.members.keys().next().copied().unwrap_or(me);
        let parent = membership.next_hop(me, lowest);
        let neighbours = self.cluster.neighbours();
        self.arm_retransmit(now);
        self.with_qpid(now, |q, ctx, local, out| {
            q.apply(now, ctx, &neighbours, parent, local, out)
        });
    }

    /// This node was removed from its cluster: a new life asks to be let back in, with no
    /// links, no QPID state and no decisions of the old cluster; queued visitors stay.
    fn rejoin(&mut self, now: Time, seeds: Vec<String>) {
        let mut out = Outbox::default();
        self.cluster.rejoin(now, seeds, &mut out);
        self.send_outbox(now, out);
        self.channels.clear();
        self.swim.rejoined();
        self.qpid.reset();
        self.tag.rejoined();
        self.send_join_request(now);
    }
}
