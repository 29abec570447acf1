//! Visitor operations on a cluster node.
//!
//! A visitor is queued on one node. A check-in that reaches another node is answered with
//! [`VisitorError::Elsewhere`] while the owner is a live member, so the driver forwards it there;
//! when the owner is gone (or unreachable, [`Node::check_in_here`]) the visitor is queued here
//! under their original join time and keeps their place.

use thiserror::Error;
use waitingroom_core::{CheckIn, CheckInStatus, EngineError, NodeId, Pass, Ticket, TicketId, Time};

use super::{Node, OffsetFrom, next_boundary};
use crate::cluster::Phase;
use crate::lease::{Pause, Through};
use crate::membership::Contact;
use crate::messages::ChannelMsg;
use crate::outputs::Outbox;
use crate::patch::Mode;
use crate::released::Release;

/// Most re-queued visitors remembered for nodes that are away.
const FORGETS_LIMIT: usize = 65_536;

/// Longest a given-back pass is refused (passes live minutes, sessions hours).
const RELEASE_KEPT_MS: Time = 24 * 3_600_000;

/// Why a node refused a visitor operation.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum VisitorError {
    /// The node is not in a cluster (yet).
    #[error("node is not in a cluster yet")]
    NotReady,
    /// The ticket is queued on another live member: forward the request there.
    #[error("ticket is held by node {}", .0.id)]
    Elsewhere(Contact),
    /// The waiting room refused.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// This node lets nobody out at the moment (no live grant, or no majority): ask another.
    #[error("node is not admitting at the moment ({})", .0.as_str())]
    Paused(Pause),
    /// The room is closed to new visitors (mode `reject`,
    /// waitingroom-distributed/README.md#live-settings).
    #[error("the waiting room is closed to new visitors")]
    Rejected,
    /// The room is closed to new visitors and its scheduled event has ended
    /// (waitingroom-distributed/README.md#scheduled-events).
    #[error("the event is over; the waiting room is closed to new visitors")]
    EventOver,
    /// The pass was given back (waitingroom-distributed/README.md#passes-given-back).
    #[error("the pass was given back")]
    Released,
    /// A bypass pass is not extended (docs/operating.md#bypass-passes): the operator mints another.
    #[error("a bypass pass is not extended; mint another")]
    Bypass,
    /// The pass is refused here, but not yet held by a majority of the nodes
    /// (waitingroom-distributed/README.md#passes-given-back): give it back again, here or at
    /// another node, until this is answered with success.
    #[error("the release is not confirmed yet; give the pass back again")]
    ReleasePending,
}

impl Node {
    /// A new visitor joins through this node.
    pub fn join(&mut self, now: Time) -> Result<CheckIn, VisitorError> {
        self.ready()?;
        self.look_at_clock(now);
        if self.in_force.current().mode == Mode::Reject {
            let reference_now = self.reference_time(now);
            return Err(if self.in_force.live().event_over_at(reference_now) {
                VisitorError::EventOver
            } else {
                VisitorError::Rejected
            });
        }
        let queued_here = self.local.room().queued();
        let last = self.tag.summary();
        let records = &self.records;
        let through = (self.lease).take_place(now, (queued_here, last), &self.in_force, |at| {
            records.round_granting_joins(at)
        });
        let straight_through = through.is_some();
        // waitingroom-distributed/README.md#scheduled-events and
        // waitingroom-distributed/README.md#random-queueing: the join time a pre-queue or a lottery
        // stamps.
        let stamp = self.in_force.live().join_stamp(self.reference_time(now));
        let mut answer = self
            .local
            .room_mut()
            .join_stamped(now, stamp, straight_through);
        if let Some(Through::Granted(round)) = through {
            // Their pass names the round whose grant let them through, whatever node serves
            // the leave (waitingroom-distributed/README.md#fairness-records).
            answer.ticket.round = Some(round);
        }
        if straight_through {
            let key = answer.ticket.key_on(self.id());
            let mut out = Outbox::default();
            self.local.admitted(key, now, now, &mut out);
            self.send_outbox(now, out);
        }
        self.local_queue_changed(now);
        Ok(self.with_cluster_position(now, answer, None))
    }

    /// `now` on the cluster's reference clock, the lowest-id member's, as this node last
    /// measured it on its probes (waitingroom-distributed/README.md#clocks): join times from every
    /// node then compare within the measurement's error (half a probe's round trip), whatever the
    /// clocks say. An offset within that error is no evidence of one, and is not applied.
    pub fn reference_time(&self, now: Time) -> Time {
        let from = self.offset_from();
        let offset = match self.reference.0 {
            Some((kept, offset)) if kept == from => offset,
            _ => self.derive_offset(from),
        };
        now.saturating_add_signed(offset)
    }

    /// What the reference clock's offset derives from: the reference member, and the version
    /// of the clock samples.
    pub(super) fn offset_from(&self) -> OffsetFrom {
        (self.cluster.reference(), self.swim.clock_changes())
    }

    /// The reference clock's offset worked out afresh from the member's clock samples.
    pub(super) fn derive_offset(&self, (reference, _): OffsetFrom) -> i64 {
        reference
            .filter(|&r| r != self.id())
            .and_then(|r| self.swim.clock_offset(r))
            .filter(|&(offset, rtt)| offset.unsigned_abs() > rtt / 2)
            .map_or(0, |(offset, _)| offset)
    }

    /// Each member's clock offset from this node's (ms, positive: ahead), with the round trip
    /// of the probe that measured it.
    pub fn clock_offsets(&self) -> Vec<(NodeId, i64, u64)> {
        self.swim.clock_offsets()
    }

    /// A visitor checks in. Answers [`VisitorError::Elsewhere`] when another live member holds
    /// their ticket.
    pub fn check_in(&mut self, now: Time, ticket: &Ticket) -> Result<CheckIn, VisitorError> {
        self.route(ticket)?;
        self.check_in_here(now, ticket)
    }

    /// A visitor checks in here whatever node holds the ticket: used when the owner could not
    /// be reached. The visitor is queued here under their original join time.
    pub fn check_in_here(&mut self, now: Time, ticket: &Ticket) -> Result<CheckIn, VisitorError> {
        self.ready_for(ticket)?;
        self.look_at_clock(now);
        let requeued = !self.local.room().knows(ticket.id);
        // Without the shown position, the engine's answer is the plain local rank.
        let shown = ticket.previous_position;
        let mut unclamped = Ticket {
            previous_position: None,
            ..ticket.clone()
        };
        let expiry = self.in_force.settings().ticket_expiry_ms;
        if ticket.eviction_time.is_none()
            && now >= ticket.expires_at
            && self.past.takes_expired(now, ticket.expires_at, expiry)
        {
            // It ran out around this process' start, while nobody may have been there to
            // answer: it lives for this check-in, which gives it a fresh expiry.
            unclamped.expires_at = now.saturating_add(1);
        }
        if requeued && let Some(t) = self.tag.decided_join_time(&ticket.key_on(ticket.node)) {
            // The cluster had let them out; they keep that admission (`Tag::decided_join_time`).
            unclamped.join_time = t;
        }
        let mut answer = self.local.room_mut().check_in(now, &unclamped)?;
        self.local_queue_changed(now);
        if requeued && ticket.node != self.id() {
            self.forget_elsewhere(now, ticket.node, ticket.id);
        }
        if requeued && matches!(answer.status, CheckInStatus::Queued { .. }) {
            // Their node is gone; the cluster may already have decided to let them in.
            self.admit_decided(now);
            if self.local.room().is_admitted(ticket.id) {
                answer = self.local.room_mut().check_in(now, &answer.ticket)?;
            }
        }
        // The round the ticket names holds for the admission it was named for only: a lapsed
        // admission re-queues the visitor, and a later one is another round's.
        let same_admission = ticket.eviction_time == answer.ticket.eviction_time;
        answer.ticket.round = match answer.status {
            CheckInStatus::Admitted if same_admission => self.round_of(ticket),
            CheckInStatus::Admitted => (answer.ticket.eviction_time)
                .and_then(|at| (self.records).round_letting_out(at, answer.ticket.join_time)),
            _ => None,
        };
        Ok(self.with_cluster_position(now, answer, shown))
    }

    /// The round whose record let out the holder of `ticket` (admitted): the one the ticket
    /// names for its admission, else the one this node knows for that boundary. Carried on the
    /// ticket, it is named on the pass by whatever node serves the leave: the node that let
    /// them out may be gone by then, and a node that joined after the round never learns its
    /// record (waitingroom-distributed/README.md#fairness-records).
    fn round_of(&self, ticket: &Ticket) -> Option<u64> {
        let at = ticket.eviction_time?;
        (ticket.round).or_else(|| self.records.round_letting_out(at, ticket.join_time))
    }

    /// An admitted visitor exchanges their ticket for a pass.
    pub fn leave(&mut self, now: Time, ticket: &Ticket) -> Result<Pass, VisitorError> {
        self.route(ticket)?;
        self.leave_here(now, ticket)
    }

    /// Like [`Node::leave`], whatever node holds the ticket. The pass names the round whose
    /// record let its holder out, as the ticket names it or this node knows it
    /// (waitingroom-distributed/README.md#fairness-records).
    pub fn leave_here(&mut self, now: Time, ticket: &Ticket) -> Result<Pass, VisitorError> {
        self.ready_for(ticket)?;
        let mut pass = self.local.room_mut().leave(now, ticket)?;
        pass.round = if ticket.eviction_time == Some(pass.eviction_time) {
            self.round_of(ticket)
        } else {
            (self.records).round_letting_out(pass.eviction_time, pass.queue_join_time)
        };
        Ok(pass)
    }

    /// Extends a valid pass at the one node that counts it
    /// (waitingroom-distributed/README.md#one-admission-one-pass): answers
    /// [`VisitorError::Elsewhere`] when that is another node ([`Node::pass_counter`]), so the
    /// driver forwards the refresh there; whatever node a copy of the pass is refreshed at, it
    /// is counted once.
    pub fn refresh_pass(&mut self, now: Time, pass: &Pass) -> Result<Pass, VisitorError> {
        self.refusable(pass)?;
        if let Some(counter) = self.pass_counter(pass) {
            return Err(VisitorError::Elsewhere(counter));
        }
        self.refresh_pass_here(now, pass)
    }

    /// Like [`Node::refresh_pass`], here whatever node counts the pass: used for a refresh
    /// forwarded here. Its holder now counts as on the site through this node, and the node
    /// named by the pass, if another, is told to stop (`Forget`), so the visitor is counted
    /// once. Until it hears, both count them: more than there are, never fewer.
    /// Refused while this node holds no live grant
    /// (waitingroom-distributed/README.md#admission-leases), and when the pass was extended here
    /// too recently ([`waitingroom_core::WaitingRoom::refresh_min_interval`]).
    pub fn refresh_pass_here(&mut self, now: Time, pass: &Pass) -> Result<Pass, VisitorError> {
        self.refusable(pass)?;
        // Only under a live grant: a node cut off from the majority must not keep its visitors
        // on the site past what the others count.
        if !self.in_force.unguarded() && !self.lease.is_live(now) {
            let why = self.pause(now).unwrap_or(Pause::NoGrant);
            return Err(VisitorError::Paused(why));
        }
        let refreshed = self.local.room_mut().refresh_pass(now, pass)?;
        if pass.node != self.id() {
            self.forget_elsewhere(now, pass.node, pass.id);
        }
        Ok(refreshed)
    }

    /// Refusals any node makes of a pass refresh, wherever it is counted.
    fn refusable(&self, pass: &Pass) -> Result<(), VisitorError> {
        if self.released.contains(pass.id) {
            return Err(VisitorError::Released);
        }
        if pass.is_bypass() {
            // Counted nowhere, and extended nowhere: extending it here would count it.
            return Err(VisitorError::Bypass);
        }
        Ok(())
    }

    /// The node that counts `pass`, when it is not this one: the node the pass names while it
    /// is a member; once that node is removed, an heir all members agree on
    /// ([`Node::heir_of`]), so that copies of the pass refreshed at different nodes are all
    /// counted at one. None: this node counts it.
    pub fn pass_counter(&self, pass: &Pass) -> Option<Contact> {
        let members = &self.cluster.membership().members;
        let counter = if members.contains_key(&pass.node) {
            pass.node
        } else {
            self.heir_of(pass.id)?
        };
        (counter != self.id())
            .then(|| members.get(&counter).cloned())
            .flatten()
    }

    /// The member that takes over the passes of `ticket` from a removed node: the highest of a
    /// hash of (ticket, member) over the members (rendezvous hashing), the same at every node
    /// that sees the same members, and spread evenly; a member leaving moves only its own
    /// passes. None outside a cluster.
    pub fn heir_of(&self, ticket: TicketId) -> Option<NodeId> {
        let members = self.cluster.membership().members.keys();
        members.copied().max_by_key(|m| rendezvous(ticket, *m))
    }

    /// Whether this node serves a refresh of `pass` forwarded here: it counts the pass, or the
    /// node the pass names has been removed (the forwarding node found this one its heir; if
    /// the two views of the members differ, that lasts until they agree).
    pub fn serves_refresh(&self, pass: &Pass) -> bool {
        pass.node == self.id() || !self.cluster.membership().contains(pass.node)
    }

    /// Whether `pass` is valid at `now`: not expired, not given back.
    pub fn validate_pass(&self, now: Time, pass: &Pass) -> Result<(), VisitorError> {
        self.local.room().validate_pass(now, pass)?;
        if self.released.contains(pass.id) {
            return Err(VisitorError::Released);
        }
        Ok(())
    }

    /// Whether the pass of `ticket` was given back
    /// (waitingroom-distributed/README.md#passes-given-back).
    pub fn is_released(&self, ticket: TicketId) -> bool {
        self.released.contains(ticket)
    }

    /// A visitor gives their place back early
    /// (waitingroom-distributed/README.md#passes-given-back): the pass is refused here from now on
    /// and on every member as soon as the release sent to it arrives; its place is free here at
    /// once if this node counts it, else at the node that does when the release reaches it. Giving
    /// it back twice is no error. Answered [`VisitorError::ReleasePending`] until a majority of
    /// the voters hold the release: the visitor gives it back again until it is confirmed. Until
    /// when to refuse it: the longest the pass could still be refreshed to (its session), at
    /// most a day.
    pub fn release_pass(&mut self, now: Time, pass: &Pass) -> Result<(), VisitorError> {
        self.local.room().validate_pass(now, pass)?;
        let session = self.in_force.settings().pass_max_lifetime_ms;
        let until = pass
            .created_at
            .saturating_add(session)
            .min(now.saturating_add(RELEASE_KEPT_MS))
            .max(pass.expires_at);
        let release = Release {
            ticket: pass.id,
            until,
        };
        self.local.room_mut().uncount_pass(release.ticket);
        self.take_release(now, release)
    }

    /// Tells `node` (the visitor's previous node) to drop its entry: now if it is a member, or
    /// once it is one again.
    fn forget_elsewhere(&mut self, now: Time, node: NodeId, ticket: TicketId) {
        if self.cluster.membership().contains(node) {
            self.send_to(now, node, ChannelMsg::Forget { ticket });
            return;
        }
        let pending: usize = self.forgets.values().map(Vec::len).sum();
        if pending < FORGETS_LIMIT {
            self.forgets.entry(node).or_default().push(ticket);
        }
    }

    /// The transport could not deliver to `addr` (connection refused, timeout): probe that
    /// member next instead of waiting for its turn in the round-robin order.
    pub fn report_unreachable(&mut self, addr: &str) {
        if let Some(id) = self.cluster.member_at(addr) {
            self.swim.prioritise(id);
        }
    }

    /// The node that holds `ticket`, when it is not this one: a member, or a former member
    /// that may still be alive (removed by mistake, or cut off by a partition) and must be
    /// asked before the visitor is queued a second time.
    pub fn owner_of(&self, ticket: &Ticket) -> Option<Contact> {
        if ticket.node == self.id() || self.local.room().knows(ticket.id) {
            return None;
        }
        self.cluster.reach(ticket.node).cloned()
    }

    /// A node serves the visitors it knows even while it rejoins the cluster; anyone else
    /// needs it to be a member.
    fn ready_for(&self, ticket: &Ticket) -> Result<(), VisitorError> {
        let alive = matches!(self.cluster.phase(), Phase::Member | Phase::Joining { .. });
        if alive && self.local.room().knows(ticket.id) {
            Ok(())
        } else {
            self.ready()
        }
    }

    fn route(&self, ticket: &Ticket) -> Result<(), VisitorError> {
        match self.owner_of(ticket) {
            Some(owner) => Err(VisitorError::Elsewhere(owner)),
            None => Ok(()),
        }
    }

    fn ready(&self) -> Result<(), VisitorError> {
        if self.is_member() {
            Ok(())
        } else {
            Err(VisitorError::NotReady)
        }
    }

    /// Replaces the engine's local position by the cluster-wide estimate (never above what the
    /// visitor was shown before) and the ETA by one from the cluster's admission rate.
    fn with_cluster_position(
        &mut self,
        now: Time,
        mut answer: CheckIn,
        shown: Option<u64>,
    ) -> CheckIn {
        if let Some(cutoff) = self.tag.summary().map(|s| s.stamp.time) {
            // `Tag::visitors_ahead` asks how many queued here before the count's cutoff.
            self.local.room_mut().mark_before(cutoff);
        }
        if let CheckInStatus::Queued { position: local } = answer.status {
            let key = answer.ticket.key_on(self.id());
            let room = self.local.room();
            let members = self.cluster.membership().members.len();
            let estimate = self
                .tag
                .visitors_ahead(&key, local.saturating_sub(1), room, members)
                .saturating_add(1);
            let position = shown.map_or(estimate, |p| p.min(estimate)).max(1);
            answer.status = CheckInStatus::Queued { position };
            answer.ticket.previous_position = Some(position);
            answer.eta_ms = self
                .tag
                .summary()
                .filter(|s| s.rate_milli_per_s > 0)
                .map(|s| position.saturating_mul(1_000_000) / s.rate_milli_per_s);
            if let Some(soon) = self.refresh_soon(now, &answer.ticket, position) {
                answer.ticket.next_refresh = answer.ticket.next_refresh.min(soon);
            }
            answer.starts_in_ms = self.prequeue_left(now);
            if let Some(left) = answer.starts_in_ms {
                // Check in again just after the start, spread over half an interval by id.
                let spread = self.in_force.settings().eviction_interval_ms / 2 + 1;
                let after_start = now
                    .saturating_add(left)
                    .saturating_add(answer.ticket.id.0 % spread);
                answer.ticket.next_refresh = answer.ticket.next_refresh.min(after_start);
            }
        }
        answer
    }

    /// While a scheduled event's pre-queue is on: how long until its start
    /// (waitingroom-distributed/README.md#scheduled-events).
    pub fn prequeue_left(&self, now: Time) -> Option<u64> {
        let reference_now = self.reference_time(now);
        self.in_force
            .live()
            .prequeue_until(reference_now)
            .map(|start| start - reference_now)
    }

    /// A visitor likely to be let out at the next eviction is told to check in right after it
    /// rather than a whole refresh interval later: admission reaches them sooner, and the rest of
    /// the queue keeps its slow pace. The first tenth of the interval after the boundary leaves
    /// the count time to finish; the check-ins are spread by ticket id over the next eight
    /// tenths so they do not arrive at once.
    ///
    /// Not without a limit on the site: then the whole queue is let out every round, and moving
    /// everyone's check-in into the round would only bunch the queue's whole traffic together
    /// (check-in latency grows with the queue); their refresh intervals, spread by ticket id,
    /// serve them.
    fn refresh_soon(&self, now: Time, ticket: &Ticket, position: u64) -> Option<Time> {
        let s = self.tag.summary()?;
        if self.in_force.settings().is_unlimited() || position > s.admitted.max(1) {
            return None;
        }
        let interval = self.cfg.settings.eviction_interval_ms;
        let spread = (interval * 8 / 10).max(1);
        let boundary = next_boundary(now, interval);
        Some(boundary + interval / 10 + ticket.id.0 % spread)
    }
}

/// The rendezvous weight of `member` for `ticket`: a SplitMix64 finish of the two ids mixed.
fn rendezvous(ticket: TicketId, member: NodeId) -> u64 {
    let mut z = ticket
        .0
        .wrapping_add(member.0.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
