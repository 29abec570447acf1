//! The protocol node: one per process, a pure state machine.
//!
//! Inputs are method calls that carry `now`: a peer message ([`Node::handle_message`]), the
//! timer ([`Node::handle_timeout`] once [`Node::poll_timeout`] is due), and visitor operations.
//! Outputs are data the driver drains: messages ([`Node::poll_transmit`]) and events
//! ([`Node::poll_event`]). The node never sleeps, spawns, reads a clock or an unseeded random
//! source, and only iterates ordered collections, so a seed replays a run exactly.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use waitingroom_core::{NodeId, SettingsError, Time, WaitingRoom};

use crate::channel::Channels;
use crate::config::{AdmissionMode, NodeConfig};
use crate::local::Local;
use crate::membership::Membership;
use crate::membership::{Contact, View};
use crate::messages::{
    Admission, AdmitRange, Body, ChannelMsg, CountRequest, CountResult, Counts, Envelope, Stamp,
    Summary, Weight,
};
use crate::outputs::{Event, Outbox, Output, Transmit};
use crate::qpid::{self, Qpid};
use crate::swim::{Swim, Tick};
use crate::tag::{self, Round, Tag};
use crate::timer::{Timer, TimerTable};

/// Where a node is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Created; neither started a cluster nor asked to join one.
    Idle,
    /// Asking `seeds` (addresses) to be let into a cluster.
    Joining {
        /// Addresses to ask, in turn.
        seeds: Vec<String>,
        /// Which one to ask next.
        next: usize,
        /// When the node started asking.
        since: Time,
    },
    /// In a cluster.
    Member,
    /// Shut down.
    Stopped,
}

/// One node of the waiting room cluster.
#[derive(Debug, Clone)]
pub struct Node {
    pub(crate) cfg: NodeConfig,
    pub(crate) me: Contact,
    pub(crate) local: Local,
    pub(crate) phase: Phase,
    pub(crate) membership: Membership,
    /// `membership.view()`, kept because every probe carries it.
    pub(crate) view: crate::membership::View,
    pub(crate) qpid: Qpid,
    pub(crate) tag: Tag,
    pub(crate) swim: Swim,
    pub(crate) channels: Channels,
    /// Members we lost, probed now and then so that a healed partition merges.
    pub(crate) formers: BTreeMap<NodeId, Contact>,
    /// Visitors re-queued here whose previous node was unreachable, to be told to it once it is
    /// a member again (by node, bounded).
    pub(crate) forgets: BTreeMap<NodeId, Vec<waitingroom_core::TicketId>>,
    /// Every seed address this node was given or learned; those not in the cluster are probed
    /// like former members, so that clusters that formed apart find each other.
    pub(crate) seed_addrs: Vec<String>,
    /// Channel messages for a membership version not applied yet, replayed once it is.
    pub(crate) future: Vec<(NodeId, ChannelMsg)>,
    timers: TimerTable,
    out: VecDeque<Transmit>,
    events: VecDeque<Event>,
}

/// Most messages buffered for a membership version not yet applied.
const FUTURE_LIMIT: usize = 4096;
/// Most links kept; beyond this, links to peers no longer in the cluster are dropped.
const LINKS_LIMIT: usize = 512;
/// Most former members remembered.
const FORMERS_LIMIT: usize = 256;

impl Node {
    /// A node that is not in a cluster yet: call [`Node::start_cluster`] or
    /// [`Node::join_cluster`].
    pub fn new(cfg: NodeConfig) -> Result<Node, SettingsError> {
        cfg.validate()?;
        let room = WaitingRoom::new(cfg.settings.clone(), cfg.id, cfg.seed ^ 0x5eed)?;
        let me = Contact {
            id: cfg.id,
            incarnation: cfg.incarnation,
            addr: cfg.addr.as_str().into(),
        };
        Ok(Node {
            me,
            local: Local::new(room),
            phase: Phase::Idle,
            membership: Membership::default(),
            view: Membership::default().view(),
            qpid: Qpid::new(cfg.admission, 10 * cfg.retransmit_ms),
            tag: Tag::new(&cfg),
            swim: Swim::new(cfg.seed, cfg.suspect_rounds, cfg.indirect_probes),
            channels: Channels::default(),
            formers: BTreeMap::new(),
            seed_addrs: Vec::new(),
            forgets: BTreeMap::new(),
            future: Vec::new(),
            timers: TimerTable::default(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            cfg,
        })
    }

    /// Starts a new cluster with this node as its only member (and root).
    pub fn start_cluster(&mut self, now: Time) {
        self.start_timers(now);
        self.become_single(now);
    }

    pub(crate) fn become_single(&mut self, now: Time) {
        let membership = Membership::single(self.me.clone());
        self.phase = Phase::Member;
        self.emit(Event::Joined {
            version: membership.version,
        });
        self.apply_membership(now, membership);
    }

    /// Asks the nodes at `seeds` (addresses) to add this node to their cluster, retrying
    /// until one does.
    pub fn join_cluster(&mut self, now: Time, seeds: Vec<String>) {
        self.start_timers(now);
        self.seed_addrs = seeds.clone();
        self.phase = Phase::Joining {
            seeds,
            next: 0,
            since: now,
        };
        self.send_join_request(now);
    }

    /// Leaves the cluster gracefully: the others learn at once instead of waiting for failure
    /// detection. Keep delivering messages until [`Node::is_drained`] (or a time limit).
    pub fn shutdown(&mut self, _now: Time) {
        if self.phase == Phase::Member
            && let Some(next) = self.membership.with_removed(
                self.me.id,
                self.me.incarnation,
                self.cfg.max_tree_degree,
            )
        {
            self.broadcast_membership(&next);
        }
        self.phase = Phase::Stopped;
        self.timers.keep_only_retransmit();
    }

    /// Whether every reliable message sent has been acknowledged (or given up on).
    pub fn is_drained(&self) -> bool {
        self.channels.is_drained()
    }

    fn start_timers(&mut self, now: Time) {
        self.timers = TimerTable::default();
        let interval = self.cfg.settings.eviction_interval_ms;
        self.arm(next_boundary(now, interval), Timer::Evict);
        self.arm(now + self.cfg.settings.cleanup_interval_ms, Timer::Cleanup);
        self.arm(now + self.cfg.probe_interval_ms, Timer::Probe);
        self.arm(now + 2 * self.cfg.probe_interval_ms, Timer::FormerProbe);
        self.tag.start(now);
    }

    // ---- driver interface ----------------------------------------------------------------

    /// When [`Node::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.timers.next().map(|(t, _)| t)
    }

    /// Fires every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        while let Some(timer) = self.timers.pop_due(now) {
            self.fire(now, timer);
        }
        self.flush(now);
    }

    /// The next message to send, if any.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Handles a message from a peer.
    pub fn handle_message(&mut self, now: Time, env: Envelope) {
        if self.phase == Phase::Stopped {
            // Still take acknowledgements, so the farewell broadcast can drain.
            match env.body {
                Body::Channel { ack_epoch, ack, .. } => {
                    self.channels.on_ack(&env.from, ack_epoch, ack)
                }
                Body::ChannelAck { epoch, ack, .. } => self.channels.on_ack(&env.from, epoch, ack),
                _ => {}
            }
            return;
        }
        let addressed_to_me = env.to.0 == 0
            || (env.to == self.me.id
                && (env.to_incarnation == 0 || env.to_incarnation == self.me.incarnation));
        if !addressed_to_me {
            return;
        }
        let from = env.from;
        match env.body {
            Body::Channel {
                epoch,
                seq,
                ack_epoch,
                ack,
                msg,
            } => {
                let ready = self
                    .channels
                    .receive(now, &from, epoch, seq, (ack_epoch, ack), msg);
                if self.channels.any_gap() {
                    self.arm_retransmit(now);
                }
                for msg in ready {
                    self.on_channel_msg(now, from.id, msg);
                }
            }
            Body::ChannelAck { epoch, ack, resync } => {
                self.channels.on_ack(&from, epoch, ack);
                if resync {
                    self.channels.on_resync(&from, epoch);
                    self.arm_retransmit(now);
                }
            }
            Body::Ping { nonce, view } => self.on_ping(now, &from, nonce, view),
            Body::PingAck {
                nonce,
                target,
                view,
            } => self.on_ping_ack(now, &from, nonce, target, view),
            Body::Tree(m) => self.on_tree(now, from.id, *m),
            Body::PingReq { target, nonce } => self.on_ping_req(now, &from, target, nonce),
            Body::JoinRequest { contact } => self.on_join_request(now, contact),
            Body::NotMember { cluster, version } => {
                self.on_not_member(now, &from, cluster, version)
            }
        }
        self.flush(now);
    }

    fn fire(&mut self, now: Time, timer: Timer) {
        match timer {
            Timer::Evict => {
                let interval = self.cfg.settings.eviction_interval_ms;
                self.arm(next_boundary(now, interval), Timer::Evict);
                self.on_eviction_tick(now);
            }
            Timer::Cleanup => {
                self.arm(now + self.cfg.settings.cleanup_interval_ms, Timer::Cleanup);
                self.local.room_mut().cleanup(now);
                self.local_queue_changed(now);
            }
            Timer::Probe => {
                self.arm(now + self.cfg.probe_interval_ms, Timer::Probe);
                self.on_probe_tick(now);
            }
            Timer::ProbeTimeout(nonce) => self.on_probe_timeout(now, nonce),
            Timer::Retransmit => {
                self.check_settling(now);
                let members = &self.membership.members;
                let joining = matches!(self.phase, Phase::Joining { .. });
                // While joining, the node's only links are to the member that is adding it.
                let live = |id: NodeId| joining || members.contains_key(&id);
                let resend =
                    self.channels
                        .due_for_resend(now, &self.me, self.cfg.retransmit_ms, live);
                self.channels.prune(LINKS_LIMIT, live);
                let waiting = self.channels.any_unacked(live) || self.channels.any_gap();
                self.out.extend(resend);
                let asks = self
                    .channels
                    .resync_requests(now, &self.me, 3 * self.cfg.retransmit_ms);
                self.out.extend(asks);
                if waiting || self.qpid.is_settling() {
                    self.arm_retransmit(now);
                }
            }
            Timer::JoinRetry => self.send_join_request(now),
            Timer::FormerProbe => {
                self.arm(now + 2 * self.cfg.probe_interval_ms, Timer::FormerProbe);
                self.probe_a_former(now);
            }
        }
    }

    pub(crate) fn arm(&mut self, at: Time, timer: Timer) {
        self.timers.set(timer, at);
    }

    /// Sends pending acknowledgements that found no message to ride on.
    fn flush(&mut self, _now: Time) {
        let acks = self.channels.take_bare_acks(&self.me);
        self.out.extend(acks);
    }

    // ---- sending -------------------------------------------------------------------------

    /// Sends `msg` on the reliable channel to member (or joining node) `to`.
    pub(crate) fn send(&mut self, now: Time, to: &Contact, msg: ChannelMsg) {
        let t = self.channels.send(now, &self.me, to, msg);
        self.out.push_back(t);
        self.arm_retransmit(now);
    }

    /// The retransmission timer runs only while something waits for an acknowledgement (or the
    /// node is settling): an idle cluster has no timer events for it.
    pub(crate) fn arm_retransmit(&mut self, now: Time) {
        if !self.timers.retransmit_armed() {
            self.arm(now + self.cfg.retransmit_ms, Timer::Retransmit);
        }
    }

    /// Sends `msg` on the reliable channel to member `to`, if it is one.
    pub(crate) fn send_to(&mut self, now: Time, to: NodeId, msg: ChannelMsg) {
        if let Some(contact) = self.membership.members.get(&to).cloned() {
            self.send(now, &contact, msg);
        }
    }

    /// Sends an unreliable message.
    pub(crate) fn send_raw(&mut self, to: &Contact, body: Body) {
        let t = crate::channel::envelope(&self.me, to, body);
        self.out.push_back(t);
    }

    pub(crate) fn emit(&mut self, event: Event) {
        self.events.push_back(event);
    }

    /// Sends what a part put in its outbox, in order.
    pub(crate) fn send_outbox(&mut self, now: Time, out: Outbox) {
        for output in out.into_outputs() {
            match output {
                Output::ToMember(to, msg) => self.send_to(now, to, msg),
                Output::ToContact(to, msg) => self.send(now, &to, msg),
                Output::Raw(to, body) => self.send_raw(&to, body),
                Output::Event(event) => self.emit(event),
            }
        }
    }

    // ---- QPID ------------------------------------------------------------------------------

    /// Runs `f` on QPID with what it needs to know of the node, then sends what it said.
    fn with_qpid<R>(
        &mut self,
        now: Time,
        f: impl FnOnce(&mut Qpid, qpid::Ctx, &mut Local, &mut Outbox) -> R,
    ) -> R {
        let ctx = qpid::Ctx {
            me: self.me.id,
            version: self.membership.version,
            member: self.is_member(),
        };
        let mut out = Outbox::default();
        let result = f(&mut self.qpid, ctx, &mut self.local, &mut out);
        self.send_outbox(now, out);
        result
    }

    /// Re-initialises QPID for the membership just applied (see [`Qpid::apply`]).
    pub(crate) fn qpid_apply(&mut self, now: Time, neighbours: &[NodeId]) {
        let me = self.me.id;
        let lowest = self.membership.members.keys().next().copied().unwrap_or(me);
        let parent = self.membership.next_hop(me, lowest);
        self.arm_retransmit(now);
        self.with_qpid(now, |q, ctx, local, out| {
            q.apply(now, ctx, neighbours, parent, local, out)
        });
    }

    /// The local queue's head may have changed (insert, admission, expiry): QPID propagates it.
    pub(crate) fn local_queue_changed(&mut self, now: Time) {
        self.with_qpid(now, |q, ctx, local, out| {
            q.local_queue_changed(now, ctx, local, out)
        });
    }

    fn on_update(&mut self, now: Time, from: NodeId, weight: Weight) {
        self.with_qpid(now, |q, ctx, local, out| {
            q.on_update(now, ctx, from, weight, local, out)
        });
    }

    fn on_find_root(&mut self, now: Time, from: (NodeId, Weight), admit: Option<Admission>) {
        self.with_qpid(now, |q, ctx, local, out| {
            q.on_find_root(now, ctx, from, admit, local, out)
        });
    }

    pub(crate) fn on_delete_min(&mut self, now: Time, admit: Admission) {
        self.with_qpid(now, |q, ctx, local, out| {
            q.on_delete_min(now, ctx, admit, local, out)
        });
    }

    fn on_weight_query(&mut self, now: Time, from: NodeId) {
        self.with_qpid(now, |q, ctx, _, out| q.on_weight_query(ctx, from, out));
    }

    fn check_settling(&mut self, now: Time) {
        self.with_qpid(now, |q, ctx, _, out| q.check_settling(now, ctx, out));
    }

    // ---- TAG -------------------------------------------------------------------------------

    /// Runs `f` on TAG with what it needs to know of the node, then sends what it said.
    fn with_tag<R>(
        &mut self,
        now: Time,
        f: impl FnOnce(&mut Tag, tag::Ctx<'_>, &mut Local, &mut Outbox) -> R,
    ) -> R {
        let neighbours = self.membership.neighbours(self.me.id);
        let ctx = tag::Ctx {
            me: self.me.id,
            version: self.membership.version,
            members: &self.membership.members,
            neighbours: &neighbours,
        };
        let mut out = Outbox::default();
        let result = f(&mut self.tag, ctx, &mut self.local, &mut out);
        self.send_outbox(now, out);
        result
    }

    /// An interval boundary: the watchdog rebuilds a tree that has gone quiet; the root counts.
    fn on_eviction_tick(&mut self, now: Time) {
        if !self.is_member() {
            return;
        }
        let queued = self.local.room().queued();
        if self
            .tag
            .watchdog(now, queued, self.membership.members.len())
        {
            let mut refreshed = self.membership.clone();
            refreshed.version = refreshed.version.saturating_add(1);
            self.emit(Event::TreeRepaired);
            self.commit_membership(now, refreshed);
            return;
        }
        if !self.is_root() || !self.qpid.is_settled() {
            return;
        }
        let done = self.with_tag(now, |t, ctx, local, out| {
            t.start_count(now, ctx, local, out)
        });
        self.complete_round(now, done);
    }

    fn on_count_request(&mut self, now: Time, from: NodeId, mut r: CountRequest) {
        let settled = self.qpid.is_settled();
        let taken = self.with_tag(now, |t, _, _, out| {
            t.take_request(now, from, &r, settled, out)
        });
        if !taken {
            return;
        }
        self.merge_ranges(now, std::mem::take(&mut r.ranges));
        let done = self.with_tag(now, |t, ctx, local, out| {
            t.join_round(from, r, ctx, local, out)
        });
        self.complete_round(now, done);
    }

    fn on_count_reply(&mut self, now: Time, from: NodeId, stamp: Stamp, counts: Option<Counts>) {
        let reply = self.with_tag(now, |t, _, _, out| {
            t.on_count_reply(from, stamp, counts, out)
        });
        if let Ok(done) = reply {
            self.complete_round(now, done);
        }
    }

    /// At the root, with the whole cluster counted (if `round` is): decide, merge the ranges
    /// the count reported, flood the result (this node takes it first), and in the deleteMin
    /// modes let the batch out through QPID.
    fn complete_round(&mut self, now: Time, round: Option<Round>) {
        let Some(round) = round else {
            return;
        };
        let version = self.membership.version;
        let decision = self.with_tag(now, |t, _, _, out| t.decide(now, round, version, out));
        self.merge_ranges(now, decision.reported);
        let result = self.tag.result(decision.summary, decision.range);
        self.on_count_result(now, self.me.id, result);
        let Some(batch) = decision.batch else {
            return;
        };
        if self.cfg.admission == AdmissionMode::Sequential {
            for _ in 0..batch.count {
                self.on_delete_min(now, Admission { count: 1, ..batch });
            }
        } else {
            self.on_delete_min(now, batch);
        }
    }

    fn on_count_result(&mut self, now: Time, from: NodeId, r: CountResult) {
        let ranges = self.with_tag(now, |t, ctx, _, out| t.on_count_result(from, r, ctx, out));
        self.merge_ranges(now, ranges);
    }

    fn merge_ranges(&mut self, now: Time, ranges: Vec<AdmitRange>) {
        self.tag.merge_ranges(ranges);
        self.admit_decided(now);
    }

    /// Lets out the local visitors whose keys fall in a decided range; QPID hears of the new
    /// head.
    pub(crate) fn admit_decided(&mut self, now: Time) {
        let mut out = Outbox::default();
        let admitted = self.tag.admit_decided(now, &mut self.local, &mut out);
        self.send_outbox(now, out);
        if admitted {
            self.local_queue_changed(now);
        }
    }

    // ---- SWIM ------------------------------------------------------------------------------

    fn on_probe_tick(&mut self, now: Time) {
        if !self.is_member() {
            return;
        }
        let mut out = Outbox::default();
        let tick = self
            .swim
            .tick(self.me.id, &self.membership.members, self.view, &mut out);
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

    fn on_probe_timeout(&mut self, now: Time, nonce: u64) {
        let mut out = Outbox::default();
        self.swim
            .timed_out(nonce, self.me.id, &self.membership.members, &mut out);
        self.send_outbox(now, out);
    }

    /// Every node answers a ping. A ping also shows the sender's membership view: a joining
    /// node learns a member's address from it, and a member sends its tree to a peer that is
    /// behind or conflicts (anti-entropy), or tells a stranger it is not a member.
    fn on_ping(&mut self, now: Time, from: &Contact, nonce: u64, view: View) {
        let mut out = Outbox::default();
        Swim::answer(self.me.id, self.view, from, nonce, &mut out);
        self.send_outbox(now, out);
        if view.version > 0 {
            self.learn_seed(&from.addr);
        }
        self.compare_views(from, view);
        if self.is_member() && !self.membership.contains(from.id) {
            let body = Body::NotMember {
                cluster: self.membership.rank(),
                version: self.membership.version,
            };
            self.send_raw(from, body);
        }
    }

    fn on_ping_ack(&mut self, now: Time, from: &Contact, nonce: u64, target: NodeId, view: View) {
        if from.id == target {
            self.compare_views(from, view);
        }
        let mut out = Outbox::default();
        self.swim.on_ack(nonce, target, view, &mut out);
        self.send_outbox(now, out);
    }

    fn on_ping_req(&mut self, now: Time, from: &Contact, target: Contact, nonce: u64) {
        if !self.is_member() || !self.membership.contains(from.id) {
            return;
        }
        let mut out = Outbox::default();
        self.swim.relay(from, target, nonce, self.view, &mut out);
        self.send_outbox(now, out);
    }

    /// Pings a former member now and then: if it lives in another cluster (a healed
    /// partition), its answer tells us, and the lesser cluster joins the greater.
    fn probe_a_former(&mut self, now: Time) {
        if !self.is_member() {
            return;
        }
        let candidates = self.former_candidates();
        let mut out = Outbox::default();
        self.swim.ping_one_of(&candidates, self.view, &mut out);
        self.send_outbox(now, out);
    }

    // ---- dispatch --------------------------------------------------------------------------

    pub(crate) fn on_channel_msg(&mut self, now: Time, from: NodeId, msg: ChannelMsg) {
        let version = match &msg {
            ChannelMsg::Update { version, .. }
            | ChannelMsg::FindRoot { version, .. }
            | ChannelMsg::WeightQuery { version } => Some(*version),
            ChannelMsg::DeleteMin { admit } => Some(admit.version),
            ChannelMsg::CountRequest(r) => Some(r.version),
            // A result is a decision already taken: it applies whatever changed since.
            ChannelMsg::CountResult(_)
            | ChannelMsg::CountReply { .. }
            | ChannelMsg::Forget { .. } => None,
        };
        let joining = matches!(self.phase, Phase::Joining { .. });
        if let Some(v) = version
            && (joining || v > self.membership.version)
        {
            // Sent by a member that applied a membership we have not seen yet (a joining node
            // gets updates from its new neighbours before the Tree from the member that added
            // it): keep it until we apply that version.
            if self.future.len() < FUTURE_LIMIT {
                self.future.push((from, msg));
            }
            return;
        }
        if let ChannelMsg::Forget { ticket } = msg {
            // Only touches this node's own queue: honoured in any phase, from anyone on a link.
            if self.local.room_mut().forget_queued(ticket) {
                self.local_queue_changed(now);
            }
            return;
        }
        if self.phase != Phase::Member {
            return;
        }
        if !self.membership.contains(from) {
            self.tell_not_member(from);
            return;
        }
        if version.is_some_and(|v| v < self.membership.version) {
            return;
        }
        match msg {
            ChannelMsg::Update { weight, .. } => self.on_update(now, from, weight),
            ChannelMsg::FindRoot { weight, admit, .. } => {
                self.on_find_root(now, (from, weight), admit)
            }
            ChannelMsg::DeleteMin { admit } => self.on_delete_min(now, admit),
            ChannelMsg::CountRequest(r) => self.on_count_request(now, from, r),
            ChannelMsg::CountReply { stamp, counts } => {
                self.on_count_reply(now, from, stamp, counts.map(|c| *c))
            }
            ChannelMsg::CountResult(r) => self.on_count_result(now, from, *r),
            ChannelMsg::WeightQuery { .. } => self.on_weight_query(now, from),
            ChannelMsg::Forget { .. } => {}
        }
    }

    /// Tells a node that talks to us as if it were a member that it is not.
    pub(crate) fn tell_not_member(&mut self, to: NodeId) {
        let contact = self
            .channels
            .contact_of(to)
            .or_else(|| self.formers.get(&to).cloned());
        if let Some(contact) = contact {
            let body = Body::NotMember {
                cluster: self.membership.rank(),
                version: self.membership.version,
            };
            self.send_raw(&contact, body);
        }
    }

    pub(crate) fn remember_former(&mut self, contact: Contact) {
        if contact.id == self.me.id {
            return;
        }
        if self.formers.len() >= FORMERS_LIMIT
            && let Some(&oldest) = self.formers.keys().next()
        {
            self.formers.remove(&oldest);
        }
        self.formers.insert(contact.id, contact);
    }

    // ---- introspection -----------------------------------------------------------------

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.me.id
    }

    /// This node's contact (id, incarnation, address).
    pub fn contact(&self) -> &Contact {
        &self.me
    }

    /// Where the node is in its life.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// Whether the node is in a cluster and can serve visitors.
    pub fn is_member(&self) -> bool {
        self.phase == Phase::Member
    }

    /// Whether this node is the QPID root (its pointer points at itself).
    pub fn is_root(&self) -> bool {
        self.is_member() && self.qpid.parent() == Some(self.me.id)
    }

    /// The QPID pointer: None while it is being re-picked after a membership change.
    pub fn parent(&self) -> Option<NodeId> {
        self.qpid.parent()
    }

    /// The membership this node has applied.
    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    /// The local waiting room (queue and admitted visitors of this node).
    pub fn room(&self) -> &WaitingRoom {
        self.local.room()
    }

    /// The latest cluster-wide summary this node has seen.
    pub fn summary(&self) -> Option<&Summary> {
        self.tag.summary()
    }

    /// Visitors this node let out, ever.
    pub fn admitted_total(&self) -> u64 {
        self.local.admitted_total()
    }

    /// The node's QPID weight table: its own weight and each neighbour's (None when not yet
    /// heard since the last membership change).
    pub fn weights(&self) -> (crate::Weight, BTreeMap<NodeId, Option<crate::Weight>>) {
        self.qpid.weights()
    }

    /// Whether the QPID state is settled: pointer picked and every neighbour heard from.
    pub fn is_settled(&self) -> bool {
        self.is_member() && self.qpid.is_settled()
    }

    /// Reliable messages sent and not yet acknowledged.
    pub fn unacked(&self) -> usize {
        self.channels.unacked()
    }

    /// The stamp of the count round in progress here, if any.
    pub fn round(&self) -> Option<Stamp> {
        self.tag.round_stamp()
    }

    /// How far the node's random source has advanced (in 32-bit words). Its `Debug` form hides
    /// the generator state, so a state fingerprint built from `Debug` (the exhaustive explorer's)
    /// needs this to tell apart two nodes that differ only in what they will draw next.
    pub fn rng_word_pos(&self) -> u128 {
        self.swim.rng_word_pos()
    }

    /// A serialisable snapshot for operators.
    pub fn status(&self) -> NodeStatus {
        NodeStatus {
            id: self.me.id,
            incarnation: self.me.incarnation,
            addr: self.me.addr.to_string(),
            phase: self.phase.clone(),
            version: self.membership.version,
            members: self.membership.members.values().cloned().collect(),
            edges: self.membership.edges.iter().copied().collect(),
            parent: self.qpid.parent(),
            is_root: self.is_root(),
            queued: self.local.room().queued(),
            on_site: self.local.room().on_site(),
            admitted_total: self.local.admitted_total(),
            summary: self.tag.summary().cloned(),
        }
    }
}

/// What `GET /api/cluster` shows about one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// Node id.
    pub id: NodeId,
    /// Incarnation.
    pub incarnation: u64,
    /// Address.
    pub addr: String,
    /// Life phase.
    pub phase: Phase,
    /// Membership version.
    pub version: u64,
    /// Members.
    pub members: Vec<Contact>,
    /// Spanning tree edges.
    pub edges: Vec<(NodeId, NodeId)>,
    /// QPID pointer.
    pub parent: Option<NodeId>,
    /// Whether this node is the root.
    pub is_root: bool,
    /// Visitors waiting here.
    pub queued: u64,
    /// Visitors on the site through this node.
    pub on_site: u64,
    /// Visitors let out here, ever.
    pub admitted_total: u64,
    /// Latest cluster-wide summary.
    pub summary: Option<Summary>,
}

/// The first multiple of `interval` strictly after `now`: every node wakes for eviction at the
/// same instants without talking to each other (clocks are assumed in sync).
pub(crate) fn next_boundary(now: Time, interval: Time) -> Time {
    (now / interval + 1) * interval
}
