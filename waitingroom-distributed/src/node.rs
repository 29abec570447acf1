//! The protocol node: one per process, a pure state machine.
//!
//! Inputs are method calls that carry `now`: a peer message ([`Node::handle_message`]), the
//! timer ([`Node::handle_timeout`] once [`Node::poll_timeout`] is due), and visitor operations
//! (`node/visitor.rs`). Outputs are data the driver drains: messages
//! ([`Node::poll_transmit`]) and events ([`Node::poll_event`]). The node never sleeps, spawns,
//! reads a clock or an unseeded random source, and only iterates ordered collections, so a
//! seed replays a run exactly.
//!
//! The node composes the protocol's parts, each with state of its own: the membership
//! (`Cluster`), QPID, TAG's count, the root's decision, this node's lease, the voters, the
//! departed places, the record chain, the released passes, the live settings, SWIM, the
//! reliable channel and the local room. It owns the links and the timers, hands each part what
//! it needs for one call, sends what the part put in its outbox, and routes what one part's
//! call means for the others (`node/routes.rs`).

mod durable;
mod released;
mod routes;
pub(crate) mod visitor;

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use waitingroom_core::lottery::LotterySeed;
use waitingroom_core::{NodeId, SettingsError, TicketId, Time, WaitingRoom};

use crate::channel::Channels;
use crate::cluster::{Cluster, Phase};
use crate::config::NodeConfig;
use crate::decision::Decider;
use crate::departed::DepartedPlaces;
use crate::events::ScheduledEvent;
use crate::ignored::Ignored;
use crate::lease::{Lease, Pause};
use crate::live::{Change, InForce, LiveSettings};
use crate::local::Local;
use crate::membership::{Contact, Membership};
use crate::messages::{Body, ChannelMsg, Envelope, Stamp, Summary, Weight};
use crate::outputs::{Event, Outbox, Output, Transmit};
use crate::patch::SettingsPatch;
use crate::qpid::Qpid;
use crate::record_chain::RecordChain;
use crate::released::{Confirming, Released};
use crate::swim::Swim;
use crate::tag::Tag;
use crate::timer::{Timer, TimerTable};
use crate::voters::{Electorate, Voters};
use durable::Past;
pub use durable::{Durable, DurableDelta};

/// One node of the waiting room cluster.
#[derive(Debug, Clone)]
pub struct Node {
    cfg: NodeConfig,
    /// Who this node is, its phase, and the membership it applied.
    cluster: Cluster,
    /// This node's own visitors.
    local: Local,
    qpid: Qpid,
    /// TAG's count (`tag.rs`).
    tag: Tag,
    /// The root's decision at the end of a count (`decision.rs`).
    decision: Decider,
    /// This node's grant of places: every admission here takes one (`lease.rs`).
    lease: Lease,
    /// The voters of the majority rule, and the members this node has had (`voters.rs`).
    voters: Electorate,
    /// Places departed members' visitors may still hold (`departed.rs`).
    departed: DepartedPlaces,
    /// Where this node is in the chain of round records (`record_chain.rs`).
    records: RecordChain,
    /// Passes given back early (`released.rs`).
    released: Released,
    /// The releases this node took and who holds them: answered once a majority does.
    confirming: Confirming,
    /// The live settings known, and what of them is in force (`live.rs`, `events.rs`).
    in_force: InForce,
    swim: Swim,
    channels: Channels,
    /// Visitors re-queued here whose previous node was unreachable, to be told to it once it is
    /// a member again (by node, bounded).
    forgets: BTreeMap<NodeId, Vec<TicketId>>,
    /// Channel messages for a membership version not applied yet, replayed once it is.
    future: Vec<(NodeId, ChannelMsg)>,
    timers: TimerTable,
    /// Why this node let nobody out when last looked at, to tell the driver of a change.
    pause: Option<Pause>,
    /// The reference clock's offset as last derived (`Node::reference_time`).
    reference: ReferenceOffset,
    /// What this process knows of the node's earlier lives (`node/durable.rs`).
    past: Past,
    out: VecDeque<Transmit>,
    events: VecDeque<Event>,
}

/// The reference clock's offset from this node's, kept with what it was derived from: every
/// visitor operation and timer asks for it, and deriving it walks two maps, about ten cache
/// lines of the node's that a check-in does not otherwise touch. Brought up to date when the
/// node looks at its clock (`Node::look_at_clock`, first thing in every visitor operation and
/// timer). Left out of `Debug` (and so of the exhaustive explorer's state fingerprints): it is
/// a cache, not state.
#[derive(Clone, Default)]
struct ReferenceOffset(Option<(OffsetFrom, i64)>);

/// What the reference clock's offset is derived from: the reference member, and the version of
/// this node's clock samples (`Swim::clock_changes`).
type OffsetFrom = (Option<NodeId>, u64);

impl fmt::Debug for ReferenceOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReferenceOffset")
    }
}

/// Most messages buffered for a membership version not yet applied.
const FUTURE_LIMIT: usize = 4096;
/// Most links kept; beyond this, links to peers no longer in the cluster are dropped.
const LINKS_LIMIT: usize = 512;

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
        let in_force = InForce::new(&cfg.settings, cfg.live());
        let pause = (!in_force.unguarded()).then_some(Pause::NoGrant);
        Ok(Node {
            cluster: Cluster::new(me, cfg.max_tree_degree, cfg.join_timeout_ms),
            local: Local::new(room),
            qpid: Qpid::new(cfg.admission, 10 * cfg.retransmit_ms),
            tag: Tag::new(&cfg),
            decision: Decider::new(cfg.admission),
            lease: Lease::new(cfg.settings.eviction_interval_ms),
            voters: Electorate::default(),
            departed: DepartedPlaces::default(),
            records: RecordChain::default(),
            released: Released::default(),
            confirming: Confirming::default(),
            in_force,
            swim: Swim::new(
                cfg.seed,
                (cfg.suspect_rounds, cfg.indirect_probes),
                cfg.probe_interval_ms,
            ),
            channels: Channels::default(),
            forgets: BTreeMap::new(),
            future: Vec::new(),
            timers: TimerTable::default(),
            pause,
            reference: ReferenceOffset::default(),
            past: Past::new(cfg.incarnation),
            out: VecDeque::new(),
            events: VecDeque::new(),
            cfg,
        })
    }

    /// Starts a new cluster with this node as its only member (and root).
    pub fn start_cluster(&mut self, now: Time) {
        self.start_timers(now);
        self.voters.found(self.id());
        self.become_single(now);
    }

    /// Asks the nodes at `seeds` (addresses) to add this node to their cluster, retrying
    /// until one does.
    pub fn join_cluster(&mut self, now: Time, seeds: Vec<String>) {
        self.start_timers(now);
        self.cluster.start_joining(now, seeds);
        self.send_join_request(now);
    }

    /// Addresses of possible peers found outside the protocol (DNS discovery, an operator):
    /// a joining node asks them too, and a member probes those not in its cluster now and then,
    /// so that clusters which formed apart (nodes that started at once and found nobody) merge.
    pub fn discovered(&mut self, addrs: &[String]) {
        self.cluster.discovered(addrs);
    }

    /// Leaves the cluster gracefully: the others learn at once instead of waiting for failure
    /// detection. Keep delivering messages until [`Node::is_drained`] (or a time limit).
    pub fn shutdown(&mut self, now: Time) {
        let mut out = Outbox::default();
        self.cluster.leave(&mut out);
        self.send_outbox(now, out);
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
        self.swim.started(now);
        self.past.started(now);
        self.arm(now + 2 * self.cfg.probe_interval_ms, Timer::FormerProbe);
        self.tag.start(now);
    }

    // ---- driver interface ----------------------------------------------------------------

    /// When [`Node::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.timers.next_at()
    }

    /// Fires every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        self.look_at_clock(now);
        while let Some(timer) = self.timers.pop_due(now) {
            self.fire(now, timer);
        }
        self.note_pause(now);
        self.flush();
    }

    /// Scheduled events switch settings on and off by the reference clock (`events.rs`): looked
    /// at on every timer and visitor operation.
    fn look_at_clock(&mut self, now: Time) {
        let from = self.offset_from();
        let offset = match self.reference.0 {
            Some((kept, offset)) if kept == from => offset,
            _ => {
                let offset = self.derive_offset(from);
                self.reference.0 = Some((from, offset));
                offset
            }
        };
        let reference_now = now.saturating_add_signed(offset);
        if self.in_force.at(reference_now) {
            self.apply_settings();
        }
    }

    /// Tells the driver when this node stops or starts letting visitors out
    /// (waitingroom-distributed/README.md#admission-leases). Looked at on every timer, so a lapsed
    /// grant is noticed within a probe interval.
    fn note_pause(&mut self, now: Time) {
        let pause = self.pause(now);
        if pause == self.pause {
            return;
        }
        self.pause = pause;
        self.emit(match pause {
            Some(why) => Event::AdmissionPaused(why),
            None => Event::AdmissionResumed,
        });
    }

    /// The next message to send, if any.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Handles a message from a peer: `Ok` when the node acted on it, or why it did not. For a
    /// message on the reliable channel that is the first reason any message it released was
    /// ignored (messages held back for an earlier one are released with the one that fills
    /// the gap).
    pub fn handle_message(&mut self, now: Time, env: Envelope) -> Result<(), Ignored> {
        if self.cluster.phase() == &Phase::Stopped {
            // Still take acknowledgements, so the farewell broadcast can drain.
            return match env.body {
                Body::Channel { ack_epoch, ack, .. } => {
                    self.channels.on_ack(&env.from, ack_epoch, ack);
                    Err(Ignored::Stopped)
                }
                Body::ChannelAck { epoch, ack, .. } => self.on_ack(&env.from, epoch, ack),
                _ => Err(Ignored::Stopped),
            };
        }
        let me = self.cluster.me();
        let addressed_to_me = env.to.0 == 0
            || (env.to == me.id
                && (env.to_incarnation == 0 || env.to_incarnation == me.incarnation));
        if !addressed_to_me {
            return Err(Ignored::Misaddressed);
        }
        let result = self.dispatch(now, env.from, env.body);
        self.flush();
        result
    }

    fn dispatch(&mut self, now: Time, from: Contact, body: Body) -> Result<(), Ignored> {
        match body {
            Body::Channel { .. } => {
                let received = self.channels.receive(now, &from, body);
                if self.channels.any_gap() {
                    self.arm_retransmit(now);
                }
                let mut result = Ok(());
                for msg in received? {
                    let handled = self.on_channel_msg(now, from.id, msg);
                    result = result.and(handled);
                }
                result
            }
            Body::ChannelAck { epoch, ack, resync } => {
                let acked = self.on_ack(&from, epoch, ack);
                if resync {
                    self.channels.on_resync(&from, epoch);
                    self.arm_retransmit(now);
                }
                acked
            }
            Body::Ping { nonce, view, time } => {
                self.on_ping(now, &from, (nonce, time), view);
                Ok(())
            }
            Body::PingAck {
                nonce,
                target,
                view,
                clock,
            } => self.on_ping_ack(now, &from, (nonce, target), (view, clock)),
            Body::Tree(m, voters) => {
                self.voters.adopt(&voters);
                self.on_tree(now, &from, m)
            }
            Body::PingReq { target, nonce } => self.on_ping_req(now, &from, target, nonce),
            Body::JoinRequest { contact } => self.on_join_request(now, contact),
            Body::NotMember { cluster, version } => {
                self.on_not_member(now, &from, cluster, version)
            }
        }
    }

    fn on_ack(&mut self, from: &Contact, epoch: u64, ack: u64) -> Result<(), Ignored> {
        if self.channels.on_ack(from, epoch, ack) {
            Ok(())
        } else {
            Err(Ignored::StaleAck)
        }
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
            Timer::Retransmit => self.on_retransmit_tick(now),
            Timer::JoinRetry => self.send_join_request(now),
            Timer::FormerProbe => {
                self.arm(now + 2 * self.cfg.probe_interval_ms, Timer::FormerProbe);
                self.probe_a_former(now);
            }
        }
    }

    /// Resends what is unacknowledged, asks for new epochs on links whose start never came,
    /// and asks silent neighbours of a settling node again.
    fn on_retransmit_tick(&mut self, now: Time) {
        self.check_settling(now);
        let members = &self.cluster.membership().members;
        let joining = self.cluster.is_joining();
        // While joining, the node's only links are to the member that is adding it.
        let live = |id: NodeId| joining || members.contains_key(&id);
        let me = self.cluster.me();
        let rto = self.cfg.retransmit_ms;
        let resend = self.channels.due_for_resend(now, me, rto, live);
        self.channels.prune(LINKS_LIMIT, live);
        let waiting = self.channels.any_unacked(live) || self.channels.any_gap();
        self.out.extend(resend);
        let asks = self.channels.resync_requests(now, me, 3 * rto);
        self.out.extend(asks);
        if waiting || self.qpid.is_settling() {
            self.arm_retransmit(now);
        }
    }

    fn arm(&mut self, at: Time, timer: Timer) {
        self.timers.set(timer, at);
    }

    /// Sends pending acknowledgements that found no message to ride on.
    fn flush(&mut self) {
        let acks = self.channels.take_bare_acks(self.cluster.me());
        self.out.extend(acks);
    }

    // ---- sending -------------------------------------------------------------------------

    /// Sends `msg` on the reliable channel to member (or joining node) `to`.
    fn send(&mut self, now: Time, to: &Contact, msg: ChannelMsg) {
        let t = self.channels.send(now, self.cluster.me(), to, msg);
        self.out.push_back(t);
        self.arm_retransmit(now);
    }

    /// The retransmission timer runs only while something waits for an acknowledgement (or the
    /// node is settling): an idle cluster has no timer events for it.
    fn arm_retransmit(&mut self, now: Time) {
        if !self.timers.retransmit_armed() {
            self.arm(now + self.cfg.retransmit_ms, Timer::Retransmit);
        }
    }

    /// Sends `msg` on the reliable channel to member `to`, if it is one.
    fn send_to(&mut self, now: Time, to: NodeId, msg: ChannelMsg) {
        if let Some(contact) = self.cluster.membership().members.get(&to).cloned() {
            self.send(now, &contact, msg);
        }
    }

    /// Sends an unreliable message. A tree takes the voters in `shared`, made on first use:
    /// the trees of one broadcast share one copy.
    fn send_raw(&mut self, to: &Contact, mut body: Body, shared: &mut Option<Arc<Voters>>) {
        if let Body::Tree(_, voters) = &mut body {
            let mine = shared.get_or_insert_with(|| Arc::new(self.voters.voters().clone()));
            *voters = mine.clone();
        }
        let t = crate::channel::envelope(self.cluster.me(), to, body);
        self.out.push_back(t);
    }

    fn emit(&mut self, event: Event) {
        self.events.push_back(event);
    }

    /// Sends what a part put in its outbox, in order.
    fn send_outbox(&mut self, now: Time, out: Outbox) {
        // Sending changes no voters.
        let mut voters = None;
        for output in out.into_outputs() {
            match output {
                Output::ToMember(to, msg) => self.send_to(now, to, msg),
                Output::Raw(to, body) => self.send_raw(&to, body, &mut voters),
                Output::Event(event) => self.emit(event),
            }
        }
    }

    // ---- dispatch --------------------------------------------------------------------------

    /// A protocol message delivered in order by the channel from `from`.
    fn on_channel_msg(&mut self, now: Time, from: NodeId, msg: ChannelMsg) -> Result<(), Ignored> {
        let version = version_of(&msg);
        let applied = self.cluster.membership().version;
        if let Some(v) = version
            && (self.cluster.is_joining() || v > applied)
        {
            // Sent by a member that applied a membership we have not seen yet (a joining node
            // gets updates from its new neighbours before the Tree from the member that added
            // it): keep it until we apply that version.
            if self.future.len() >= FUTURE_LIMIT {
                return Err(Ignored::FutureFull);
            }
            self.future.push((from, msg));
            return Err(Ignored::FutureVersion);
        }
        if let ChannelMsg::Forget { ticket } = msg {
            // Only touches this node's own records: honoured in any phase, from anyone on a
            // link. The visitor is queued elsewhere now, or their pass is counted elsewhere.
            if self.local.room_mut().forget_queued(ticket) {
                self.local_queue_changed(now);
            } else {
                self.tag.pass_counted_elsewhere(ticket, &mut self.local);
            }
            return Ok(());
        }
        if let ChannelMsg::Releases(page) = &msg {
            // Releases are facts of the cluster, from anyone on a link: a joining node takes
            // them before it is a member.
            return self.on_releases(now, from, page);
        }
        if let ChannelMsg::ReleasesHeld { tickets } = &msg {
            return self.on_releases_held(from, tickets);
        }
        if !self.is_member() {
            return Err(Ignored::NotInCluster);
        }
        if !self.cluster.membership().contains(from) {
            self.tell_not_member(from);
            return Err(Ignored::SenderNotMember);
        }
        if version.is_some_and(|v| v < applied) {
            return Err(Ignored::StaleVersion);
        }
        match msg {
            ChannelMsg::Update { weight, .. } => self.on_update(now, from, weight),
            ChannelMsg::FindRoot { weight, admit, .. } => {
                self.on_find_root(now, (from, weight), admit)
            }
            ChannelMsg::DeleteMin { admit } => self.on_delete_min(now, admit),
            ChannelMsg::CountRequest(r) => {
                self.on_count_request(now, from, r);
                Ok(())
            }
            ChannelMsg::CountReply { stamp, counts } => {
                self.on_count_reply(now, from, stamp, counts.map(|c| *c))
            }
            ChannelMsg::CountResult(r) => {
                self.on_count_result(now, from, r);
                Ok(())
            }
            ChannelMsg::WeightQuery { .. } => self.on_weight_query(now, from),
            ChannelMsg::ReleasesAsk { buckets } => self.on_releases_ask(now, from, &buckets),
            ChannelMsg::Forget { .. }
            | ChannelMsg::Releases(_)
            | ChannelMsg::ReleasesHeld { .. } => Ok(()),
        }
    }

    /// Tells a node that talks to us as if it were a member that it is not.
    fn tell_not_member(&mut self, to: NodeId) {
        let contact = self
            .channels
            .contact_of(to)
            .or_else(|| self.cluster.former(to).cloned());
        if let Some(contact) = contact {
            let body = self.cluster.not_member();
            self.send_raw(&contact, body, &mut None);
        }
    }

    // ---- introspection -----------------------------------------------------------------

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.cluster.me().id
    }

    /// This node's contact (id, incarnation, address).
    pub fn contact(&self) -> &Contact {
        self.cluster.me()
    }

    /// Where the node is in its life.
    pub fn phase(&self) -> &Phase {
        self.cluster.phase()
    }

    /// Whether the node is in a cluster and can serve visitors.
    pub fn is_member(&self) -> bool {
        self.cluster.is_member()
    }

    /// Whether this node is the QPID root (its pointer points at itself).
    pub fn is_root(&self) -> bool {
        self.is_member() && self.qpid.parent() == Some(self.id())
    }

    /// The QPID pointer: None while it is being re-picked after a membership change.
    pub fn parent(&self) -> Option<NodeId> {
        self.qpid.parent()
    }

    /// The membership this node has applied.
    pub fn membership(&self) -> &Membership {
        self.cluster.membership()
    }

    /// The membership applied, as shared with the other nodes that applied the same tree.
    pub(crate) fn shared_membership(&self) -> &Arc<Membership> {
        self.cluster.shared_membership()
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
    pub fn weights(&self) -> (Weight, BTreeMap<NodeId, Option<Weight>>) {
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

    /// Why this node lets nobody out at `now`, if it does not
    /// (waitingroom-distributed/README.md#admission-leases).
    pub fn pause(&self, now: Time) -> Option<Pause> {
        if self.in_force.unguarded() {
            None
        } else if self.in_force.unlimited() {
            (!self.lease.is_live(now)).then_some(Pause::NoGrant)
        } else if self.is_member() {
            self.lease.pause(now, self.tag.summary())
        } else {
            Some(Pause::NoGrant)
        }
    }

    /// Places this node may still give out at `now` under its grant, and when the grant expires
    /// on this node's clock (0: never granted).
    pub fn grant(&self, now: Time) -> (u64, Time) {
        (self.lease.places(now), self.lease.expires())
    }

    /// The newest live settings this node knows (waitingroom-distributed/README.md#live-settings).
    pub fn live_settings(&self) -> &LiveSettings {
        self.in_force.live()
    }

    /// An operator's change made at this node: the next version of the live settings, in
    /// force here at once and on every member after the next round. An error names the
    /// setting at fault and changes nothing. A lottery it opens draws from `seed` (32 random
    /// bytes from the driver: waitingroom-distributed/README.md#random-queueing).
    pub fn change_settings(
        &mut self,
        now: Time,
        patch: &SettingsPatch,
        seed: LotterySeed,
    ) -> Result<LiveSettings, SettingsError> {
        let me = (self.id(), self.reference_time(now), seed);
        let next = self.in_force.change(Change::Patch(patch.clone(), me))?;
        self.apply_settings();
        Ok(next)
    }

    /// An operator declares the voters left out of this node's membership gone for good: the
    /// members become the voters, so a cluster that lost its majority admits again
    /// (waitingroom-distributed/README.md#admission-leases). The counts and results of the next
    /// round carry them to every member. Returns the new voters.
    pub fn reset_voters(&mut self) -> Voters {
        let members = self.cluster.membership().members.keys().copied().collect();
        self.voters.reset(members).clone()
    }

    /// The voters the cluster last agreed on, as this node knows them (None before any
    /// agreement): what a driver keeps on disk, so that this node still needs a majority of
    /// them after a restart (waitingroom-distributed/README.md#admission-leases).
    pub fn agreed_voters(&self) -> Option<&Voters> {
        let voters = self.voters.voters();
        voters.agreed().then_some(voters)
    }

    /// The voters after this member leaves cleanly, handing its vote on, if it may
    /// ([`Voters::resignation`]): so that a cluster of two whose lower id leaves, or one that
    /// loses voters one clean leave at a time, keeps a majority. A driver that keeps the
    /// voters on disk writes these first, then gives them to the node
    /// ([`Node::remember_voters`]) and shuts it down: the farewell carries them to every
    /// member. A driver that keeps nothing must not: the node's next life would vote again.
    pub fn resignation(&self) -> Option<Voters> {
        if !self.is_member() {
            return None;
        }
        self.voters.voters().resignation(self.id())
    }

    /// Voters a driver kept from this node's earlier life ([`Node::agreed_voters`]), given
    /// before it starts or joins a cluster: it then needs a majority of them again, as it did
    /// before the restart, instead of counting as a new cluster with whoever it finds (newer
    /// voters it hears of replace them, as always).
    pub fn remember_voters(&mut self, voters: &Voters) {
        self.voters.adopt(voters);
    }

    /// An operator schedules an event at this node
    /// (waitingroom-distributed/README.md#scheduled-events): the next version of the live settings,
    /// carried to every member like any other change. An error names the field at fault (a taken
    /// name, an overlap, a time past) and changes nothing. An event that draws lots draws from
    /// `seed` (32 random bytes from the driver).
    pub fn add_event(
        &mut self,
        now: Time,
        event: ScheduledEvent,
        seed: LotterySeed,
    ) -> Result<LiveSettings, SettingsError> {
        let me = (self.id(), self.reference_time(now), seed);
        let next = self.in_force.change(Change::AddEvent(event, me))?;
        self.look_at_clock(now);
        self.apply_settings();
        Ok(next)
    }

    /// An operator deletes the event `name` at this node: the next version without it; None
    /// when no event has that name.
    pub fn remove_event(&mut self, now: Time, name: &str) -> Option<LiveSettings> {
        let me = (self.id(), self.reference_time(now));
        let next = self
            .in_force
            .change(Change::RemoveEvent(name.to_owned(), me))
            .ok()?;
        self.look_at_clock(now);
        self.apply_settings();
        Some(next)
    }

    /// The driver signed round `round`'s record (`Event::RoundRecorded`): its link, which the
    /// next record this node decides as root names as `prev`
    /// (waitingroom-distributed/README.md#fairness-records).
    pub fn record_linked(&mut self, round: u64, link: String) {
        self.records.linked(round, link);
        self.past.changed();
    }

    /// The last round record this node kept before it restarted (`--rounds-log`): a record it
    /// decides as root follows it, unless a round has told it of a later one.
    pub fn resume_records(&mut self, round: u64, link: String) {
        self.records.resume(round, link);
    }

    /// Whether the latest round's result carried live settings that include `version` (the
    /// change it carries, or that change made again on top of a concurrent one), from a root
    /// that held a majority of the voters: the part of the cluster that lets visitors out had
    /// it, and so will every member that took that result. A version that lost to another
    /// without being made again is not confirmed, nor one only a cut-off minority carries
    /// (the majority's rounds go on under their own settings until the partition heals).
    pub fn settings_confirmed(&self, version: &LiveSettings) -> bool {
        self.tag.summary().is_some_and(|s| {
            s.grants.is_some() && s.settings.includes(version.author, version.version)
        })
    }

    /// The voters of the majority rule, as this node last agreed on them.
    pub fn voters(&self) -> Vec<NodeId> {
        self.voters.voters().ids().collect()
    }

    /// A serialisable snapshot for operators at `now`.
    pub fn status(&self, now: Time) -> NodeStatus {
        let me = self.cluster.me();
        let membership = self.cluster.membership();
        let (places, expires) = self.grant(now);
        NodeStatus {
            id: me.id,
            incarnation: me.incarnation,
            addr: me.addr.to_string(),
            phase: self.cluster.phase().clone(),
            version: membership.version,
            members: membership.members.values().cloned().collect(),
            edges: membership.edges.iter().copied().collect(),
            parent: self.qpid.parent(),
            is_root: self.is_root(),
            queued: self.local.room().queued(),
            on_site: self.local.room().on_site(),
            admitted_total: self.local.admitted_total(),
            grant: GrantStatus {
                places,
                expires_in_ms: expires.saturating_sub(now),
            },
            paused: self.pause(now),
            forgotten_past_hold_ms: self.forgotten_past_hold_ms(now),
            voters: self.voters(),
            clock_offsets: self
                .clock_offsets()
                .into_iter()
                .map(|(peer, offset_ms, rtt_ms)| ClockOffset {
                    peer,
                    offset_ms,
                    rtt_ms,
                })
                .collect(),
            settings: self.in_force.live().clone(),
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
    /// This node's grant of places.
    pub grant: GrantStatus,
    /// Why it lets nobody out, if it does not: `no_grant`, `no_majority` or `lost_round`.
    pub paused: Option<Pause>,
    /// How long the cluster still holds the whole target because a node that founded it
    /// started without the state of its earlier life (waitingroom-distributed/README.md#durable-state).
    #[serde(default)]
    pub forgotten_past_hold_ms: u64,
    /// The voters of the majority rule, as this node last agreed on them.
    pub voters: Vec<NodeId>,
    /// Each member's clock offset from this node's, as measured on the probes.
    pub clock_offsets: Vec<ClockOffset>,
    /// The newest live settings this node knows (waitingroom-distributed/README.md#live-settings).
    pub settings: LiveSettings,
    /// Latest cluster-wide summary.
    pub summary: Option<Summary>,
}

/// How far a member's clock is ahead of this node's (waitingroom-distributed/README.md#clocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockOffset {
    /// The member.
    pub peer: NodeId,
    /// Its clock minus ours, ms.
    pub offset_ms: i64,
    /// Round trip of the probe that measured it (the error is at most half of it), ms.
    pub rtt_ms: u64,
}

/// A node's grant of places (waitingroom-distributed/README.md#admission-leases).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantStatus {
    /// Places it may still give out.
    pub places: u64,
    /// Milliseconds until the grant expires on its clock (0: expired, or never granted).
    pub expires_in_ms: u64,
}

/// The first multiple of `interval` strictly after `now`: every node wakes for eviction at the
/// same instants without talking to each other (clocks are assumed in sync).
fn next_boundary(now: Time, interval: Time) -> Time {
    (now / interval + 1) * interval
}

/// Why messages are ignored (see [`Ignored`]): one envelope in, its outcome and exactly what
/// the node said about it (see `testing`).
/// The membership version a channel message was sent under, if it depends on one.
fn version_of(msg: &ChannelMsg) -> Option<u64> {
    match msg {
        ChannelMsg::Update { version, .. }
        | ChannelMsg::FindRoot { version, .. }
        | ChannelMsg::WeightQuery { version } => Some(*version),
        ChannelMsg::DeleteMin { admit } => Some(admit.version),
        ChannelMsg::CountRequest(r) => Some(r.version),
        // A result is a decision already taken: it applies whatever changed since.
        ChannelMsg::CountResult(_)
        | ChannelMsg::CountReply { .. }
        | ChannelMsg::Forget { .. }
        | ChannelMsg::ReleasesAsk { .. }
        | ChannelMsg::Releases(_)
        | ChannelMsg::ReleasesHeld { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use waitingroom_core::{QueueKey, TicketId};

    use super::*;
    use crate::testing::{self, Neighbours, Peer, member, said, settle, tree};

    /// Node 2 of the line 1 - 2 - 3 - 4 at version 2, settled.
    fn node_2() -> (Node, Neighbours) {
        let line = tree(2, &[1, 2, 3, 4], &[(1, 2), (2, 3), (3, 4)]);
        let mut node = member(testing::config(2, 1, testing::queued_settings()), &line);
        let peers = settle(&mut node);
        (node, peers)
    }

    fn ping(node: &Node) -> Body {
        Body::Ping {
            nonce: 1,
            view: node.membership().view(),
            time: 0,
        }
    }

    /// waitingroom-distributed/README.md#links: a message belongs to one life of its receiver; and
    /// a node that is not (or no longer) a member takes no part.
    #[test]
    fn messages_for_another_node_life_or_phase_are_ignored() {
        let (mut node, _) = node_2();
        let mut env = Peer::new(1).raw(&node, ping(&node));
        env.to = NodeId(7);
        assert_eq!(
            node.handle_message(1, env.clone()),
            Err(Ignored::Misaddressed)
        );
        env.to = NodeId(2);
        env.to_incarnation = 5;
        assert_eq!(node.handle_message(1, env), Err(Ignored::Misaddressed));
        let req = Body::PingReq {
            target: testing::contact(3),
            nonce: 1,
        };
        let mut idle = Node::new(testing::config(5, 1, testing::queued_settings())).unwrap();
        let env = Peer::new(1).raw(&idle, req);
        assert_eq!(idle.handle_message(1, env), Err(Ignored::NotInCluster));
        node.shutdown(2);
        said(&mut node);
        let env = Peer::new(1).raw(&node, ping(&node));
        assert_eq!(node.handle_message(3, env), Err(Ignored::Stopped));
        assert!(said(&mut node).is_empty() && said(&mut idle).is_empty());
    }

    /// waitingroom-distributed/README.md#links (the thesis' per-link counters, §4.3.2, generalised)
    /// and waitingroom-distributed/README.md#membership-changes: copies and stale links are
    /// dropped; a message for an older membership is ignored, one for a newer membership kept until
    /// the node applies it; QPID takes news only from tree neighbours.
    #[test]
    fn copies_stale_links_and_other_versions_are_ignored_or_held() {
        let (mut node, mut peers) = node_2();
        let key = Weight::Key(QueueKey {
            join_time: 10,
            ticket: TicketId(10),
            node: NodeId(1),
        });
        let update = |version| ChannelMsg::Update {
            weight: key,
            version,
        };
        let p1 = peers.peer(1);
        let env = p1.channel(&node, update(2));
        assert_eq!(node.handle_message(1, env.clone()), Ok(()));
        assert_eq!(node.handle_message(1, env.clone()), Err(Ignored::Duplicate));
        let mut old_epoch = env;
        if let Body::Channel { epoch, .. } = &mut old_epoch.body {
            *epoch = 0;
        }
        assert_eq!(node.handle_message(1, old_epoch), Err(Ignored::StaleLink));
        let env = p1.channel(&node, update(1));
        assert_eq!(node.handle_message(1, env), Err(Ignored::StaleVersion));
        let env = Peer::new(4).channel(&node, update(2));
        assert_eq!(node.handle_message(1, env), Err(Ignored::UnknownNeighbour));
        said(&mut node);

        let env = p1.channel(&node, update(3));
        assert_eq!(node.handle_message(2, env), Err(Ignored::FutureVersion));
        let line = tree(2, &[1, 2, 3, 4], &[(1, 2), (2, 3), (3, 4)]);
        let v3 = line.with_removed(NodeId(4), 1, 4).expect("a member");
        let env = p1.raw(&node, Body::tree(v3));
        assert_eq!(node.handle_message(3, env), Ok(()));
        assert_eq!(node.weights().1[&NodeId(1)], Some(key), "held, then taken");
    }
}
