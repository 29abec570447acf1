//! The test rig (cargo feature `testing`): one simulated network for the crate's scenario tests
//! and the fuzz regressions, and the pieces of the message-level tests.
//!
//! - [`Net`]: nodes on a deterministic network: fixed latency, then what the tests ask for
//!   ([`Faults`]: loss, duplication, reordering by jitter), partitions ([`Net::cut`]), crashes
//!   ([`Net::kill`]), a hook to rewrite messages in flight ([`Net::tamper`]), and the protocol's
//!   invariants checked after every event. [`Crowd`] is visitors who keep checking in.
//! - Message-level tests, in the style of foca's probe tests: [`member`] builds one node in a
//!   known state from a few envelopes, a [`Peer`] writes the envelopes a neighbour would send
//!   (channel numbering included), and [`said`] lists what the node sent, without the channel's
//!   numbering, to compare with exactly what the protocol says it must send.
//!
//! Nodes are named `n<id>` ([`addr`], [`id_of`]); every random choice comes from the seed.

use std::collections::{BTreeMap, BTreeSet};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use waitingroom_core::{CheckInStatus, NodeId, Pass, QueueKey, Settings, Ticket, TicketId, Time};

use crate::invariants::{self, Violation};
use crate::live::LiveSettings;
use crate::membership::Contact;
use crate::messages::{Body, ChannelMsg, Counts, Envelope, NodeCounts, Stamp};
use crate::voters::Voters;
use crate::{AdmissionMode, Event, Ignored, Membership, Node, NodeConfig, Transmit, VisitorError};

/// The transport address of node `id` on the rig.
pub fn addr(id: u64) -> String {
    format!("n{id}")
}

/// The node at a rig address (`n<id>`).
pub fn id_of(addr: &str) -> Option<NodeId> {
    addr.strip_prefix('n')?.parse().ok().map(NodeId)
}

/// Node `id`'s contact in its first life.
pub fn contact(id: u64) -> Contact {
    Contact {
        id: NodeId(id),
        incarnation: 1,
        addr: addr(id).into(),
    }
}

/// Settings under which visitors queue: no limit on the site, 1-s rounds, no straight-through
/// admission.
pub fn queued_settings() -> Settings {
    Settings {
        target_on_site: Settings::UNLIMITED,
        refresh_interval_ms: 600,
        ticket_expiry_ms: 10_000,
        pass_expiry_ms: 0,
        pass_max_lifetime_ms: u64::MAX,
        eviction_interval_ms: 1_000,
        cleanup_interval_ms: 1_000,
        admit_straight_through: false,
    }
}

/// The configuration of node `id`'s life `incarnation` on the rig, with the protocol defaults.
pub fn config(id: u64, incarnation: u64, settings: Settings) -> NodeConfig {
    NodeConfig::new(NodeId(id), incarnation, addr(id), settings)
}

/// Faults of the link layer.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Extra random delay up to this many ms (reorders messages).
    pub jitter: Time,
    /// Probability a message is lost.
    pub loss: f64,
    /// Probability a message is delivered twice.
    pub dup: f64,
}

/// Rewrites a message in flight (see [`Net::tamper`]).
pub type Tamper = Box<dyn FnMut(&mut Envelope)>;

/// Nodes on a deterministic simulated network: messages arrive `latency` ms after they are sent
/// (plus jitter), in send order among equals; time jumps to the next delivery or timer.
pub struct Net {
    /// The clock.
    pub now: Time,
    /// Delay of every message, before jitter.
    pub latency: Time,
    nodes: BTreeMap<NodeId, Node>,
    dead: BTreeSet<NodeId>,
    cut: BTreeSet<(NodeId, NodeId)>,
    in_flight: BTreeMap<(Time, u64), Transmit>,
    seq: u64,
    /// Every admission: (decided at, key).
    pub admitted: Vec<(Time, QueueKey)>,
    /// Every event, with the node that emitted it.
    pub events: Vec<(NodeId, Event)>,
    /// Messages the nodes ignored, by reason.
    pub ignored: BTreeMap<Ignored, u64>,
    settings: Settings,
    mode: AdmissionMode,
    /// Faults applied to every message sent from now on.
    pub faults: Faults,
    tamper: Option<Tamper>,
    rng: ChaCha8Rng,
    incarnations: BTreeMap<NodeId, u64>,
    /// Invariant violations seen while the membership had converged.
    pub violations_after_recovery: Vec<Violation>,
    /// Check the invariants after every delivery and timer.
    pub check_every_event: bool,
}

impl Net {
    /// A network of `n` nodes (ids 1..=n) that formed a cluster one by one, 50 ms apart.
    pub fn new(n: u64, settings: Settings, mode: AdmissionMode, seed: u64) -> Net {
        let mut net = Net {
            now: 0,
            latency: 5,
            nodes: BTreeMap::new(),
            dead: BTreeSet::new(),
            cut: BTreeSet::new(),
            in_flight: BTreeMap::new(),
            seq: 0,
            admitted: Vec::new(),
            events: Vec::new(),
            ignored: BTreeMap::new(),
            settings,
            mode,
            faults: Faults::default(),
            tamper: None,
            rng: ChaCha8Rng::seed_from_u64(seed),
            incarnations: BTreeMap::new(),
            violations_after_recovery: Vec::new(),
            check_every_event: true,
        };
        for id in 1..=n {
            net.add_node(id, seed);
            net.run_for(50);
        }
        net
    }

    /// Starts node `id` (a new life of it if it ran before): the first node starts the cluster,
    /// the others ask every live node to let them in.
    pub fn add_node(&mut self, id: u64, seed: u64) {
        self.add_node_remembering(id, seed, None);
    }

    /// As [`Net::add_node`], the node remembering `voters` from an earlier life (what a driver
    /// keeps on disk: [`Node::remember_voters`]).
    pub fn add_node_remembering(&mut self, id: u64, seed: u64, voters: Option<&Voters>) {
        self.start_node(id, seed, false, remembering(voters));
    }

    /// Node `id` again, in a new life that starts a cluster of its own whoever runs: a node
    /// restarted with the command line that started the first cluster (no seeds), remembering
    /// `voters` as [`Net::add_node_remembering`] does.
    pub fn restart_alone(&mut self, id: u64, seed: u64, voters: Option<&Voters>) {
        self.start_node(id, seed, true, remembering(voters));
    }

    /// Stops node `id` running without ending its life (SIGSTOP): messages to it are lost and
    /// its timers wait, until [`Net::thaw`].
    pub fn freeze(&mut self, id: NodeId) {
        self.dead.insert(id);
    }

    /// Node `id` runs again where it stopped: its timers fire, late.
    pub fn thaw(&mut self, id: NodeId) {
        self.dead.remove(&id);
    }

    /// As [`Net::add_node`], the new life given first what its driver kept (`past` is called
    /// with the node and the time, before it starts or joins: [`Node::restore`],
    /// [`Node::assume_forgotten_past`], [`Node::remember_voters`]).
    pub fn add_node_with(&mut self, id: u64, seed: u64, past: impl FnOnce(&mut Node, Time)) {
        self.start_node(id, seed, false, past);
    }

    fn start_node(&mut self, id: u64, seed: u64, alone: bool, past: impl FnOnce(&mut Node, Time)) {
        let inc = self.incarnations.get(&NodeId(id)).map_or(1, |i| i + 1);
        self.incarnations.insert(NodeId(id), inc);
        self.dead.remove(&NodeId(id));
        let mut cfg = config(id, inc, self.settings.clone());
        cfg.admission = self.mode;
        cfg.seed = seed * 1000 + id;
        let mut node = Node::new(cfg).expect("a valid configuration");
        past(&mut node, self.now);
        if self.nodes.is_empty() || alone {
            node.start_cluster(self.now);
        } else {
            let seeds = self
                .nodes
                .keys()
                .filter(|k| !self.dead.contains(k) && k.0 != id)
                .map(|k| addr(k.0))
                .collect();
            node.join_cluster(self.now, seeds);
        }
        self.nodes.insert(NodeId(id), node);
        self.drain(NodeId(id));
    }

    /// Rewrites every message sent from now on with `f` (to deliver what a faulty or hostile
    /// peer would send).
    pub fn tamper(&mut self, f: impl FnMut(&mut Envelope) + 'static) {
        self.tamper = Some(Box::new(f));
    }

    /// The live nodes' ids.
    pub fn ids(&self) -> Vec<NodeId> {
        self.nodes
            .keys()
            .copied()
            .filter(|id| !self.dead.contains(id))
            .collect()
    }

    /// Node `id` (live or dead).
    pub fn node(&mut self, id: NodeId) -> &mut Node {
        self.nodes.get_mut(&id).expect("a node of the net")
    }

    /// Runs an operation on node `id` now, then collects what it sent.
    pub fn with<R>(&mut self, id: NodeId, f: impl FnOnce(&mut Node, Time) -> R) -> R {
        let now = self.now;
        let r = f(self.node(id), now);
        self.drain(id);
        r
    }

    /// Crashes node `id`: it stops, and messages to it are lost.
    pub fn kill(&mut self, id: NodeId) {
        self.dead.insert(id);
    }

    /// Cuts the link between `a` and `b` both ways.
    pub fn cut(&mut self, a: NodeId, b: NodeId) {
        self.cut.insert((a, b));
        self.cut.insert((b, a));
    }

    /// Restores every link.
    pub fn heal(&mut self) {
        self.cut.clear();
    }

    /// The live nodes.
    pub fn live(&self) -> Vec<&Node> {
        self.nodes
            .iter()
            .filter(|(id, _)| !self.dead.contains(id))
            .map(|(_, n)| n)
            .collect()
    }

    /// Takes what node `id` sent and emitted: messages go in flight (through the faults and
    /// the tamper hook), events are recorded.
    fn drain(&mut self, id: NodeId) {
        let node = self.nodes.get_mut(&id).expect("a node of the net");
        let sent: Vec<Transmit> = std::iter::from_fn(|| node.poll_transmit()).collect();
        let events: Vec<Event> = std::iter::from_fn(|| node.poll_event()).collect();
        for mut t in sent {
            if let Some(tamper) = &mut self.tamper {
                tamper(&mut t.envelope);
            }
            self.send(t);
        }
        for e in events {
            if std::env::var("WR_DEBUG").is_ok()
                && !matches!(e, Event::CountCompleted(_) | Event::Admitted { .. })
            {
                eprintln!("t={} node {id}: {e:?}", self.now);
            }
            if let Event::Admitted {
                key, decided_at, ..
            } = &e
            {
                self.admitted.push((*decided_at, *key));
            }
            self.events.push((id, e));
        }
    }

    fn send(&mut self, t: Transmit) {
        if self.faults.loss > 0.0 && self.rng.random::<f64>() < self.faults.loss {
            return;
        }
        let copies = if self.faults.dup > 0.0 && self.rng.random::<f64>() < self.faults.dup {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let jitter = if self.faults.jitter > 0 {
                self.rng.random_range(0..=self.faults.jitter)
            } else {
                0
            };
            self.seq += 1;
            let at = self.now + self.latency + jitter;
            self.in_flight.insert((at, self.seq), t.clone());
        }
    }

    /// Advances time by `ms`, delivering messages and firing timers in order.
    pub fn run_for(&mut self, ms: Time) {
        let end = self.now + ms;
        loop {
            let next_msg = self.in_flight.keys().next().map(|k| k.0);
            let next_timer = self
                .nodes
                .iter()
                .filter(|(id, _)| !self.dead.contains(id))
                .filter_map(|(_, n)| n.poll_timeout())
                .min();
            let next = match (next_msg, next_timer) {
                (Some(a), Some(b)) => a.min(b),
                // Nothing left to happen (every node down): time just passes.
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => break,
                },
            };
            if next > end {
                break;
            }
            // A thawed node's timers are overdue: they fire now, late, never back in time.
            self.now = next.max(self.now);
            self.deliver_due();
            self.fire_due();
        }
        self.now = end;
    }

    /// Delivers every message due by now, including those sent meanwhile with no delay.
    fn deliver_due(&mut self) {
        while let Some((&k, _)) = self.in_flight.iter().next() {
            if k.0 > self.now {
                break;
            }
            let t = self.in_flight.remove(&k).expect("just seen");
            let to = id_of(&t.to_addr).expect("a rig address");
            let from = t.envelope.from.id;
            if self.dead.contains(&to) || self.cut.contains(&(from, to)) {
                continue;
            }
            if let Some(node) = self.nodes.get_mut(&to) {
                if let Err(reason) = node.handle_message(self.now, t.envelope) {
                    *self.ignored.entry(reason).or_default() += 1;
                }
                self.drain(to);
                self.check();
            }
        }
    }

    fn fire_due(&mut self) {
        let due: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(id, n)| {
                !self.dead.contains(id) && n.poll_timeout().is_some_and(|t| t <= self.now)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let now = self.now;
            self.node(id).handle_timeout(now);
            self.drain(id);
            self.check();
        }
    }

    /// Ticket ids in admission order.
    pub fn admission_order(&self) -> Vec<TicketId> {
        let mut a = self.admitted.clone();
        a.sort();
        let mut seen = BTreeSet::new();
        a.into_iter()
            .map(|(_, k)| k.ticket)
            .filter(|t| seen.insert(*t))
            .collect()
    }

    /// Invariants after an event; violations count once the membership has converged.
    fn check(&mut self) {
        if !self.check_every_event {
            return;
        }
        let live = self.live();
        if !invariants::converged(&live) {
            return;
        }
        let v = invariants::check(&live, self.quiet());
        if !v.is_empty()
            && self.violations_after_recovery.is_empty()
            && std::env::var("WR_DEBUG").is_ok()
        {
            eprintln!("first violation at {}: {v:?}", self.now);
            for n in &live {
                eprintln!(
                    "  {} parent={:?} root={} w={:?} q={} unacked={}",
                    n.id(),
                    n.parent(),
                    n.is_root(),
                    n.weights(),
                    n.room().queued(),
                    n.unacked()
                );
            }
        }
        self.violations_after_recovery.extend(v);
    }

    /// No message in flight and none waiting to be resent.
    pub fn quiet(&self) -> bool {
        self.in_flight.is_empty() && self.live().iter().all(|n| n.unacked() == 0)
    }

    /// Invariants, with the network treated as quiet.
    pub fn check_quiet(&self) -> Vec<Violation> {
        invariants::check(&self.live(), true)
    }
}

/// Visitors that keep checking in, as a browser would, through a sticky-then-random balancer.
#[derive(Default)]
pub struct Crowd {
    /// Each visitor's latest ticket.
    pub tickets: Vec<Ticket>,
    /// Whether each visitor was let in.
    pub admitted: Vec<bool>,
    /// The pass each visitor let in left with, by visitor.
    pub passes: BTreeMap<usize, Pass>,
    next_refresh: Vec<Time>,
}

impl Crowd {
    /// A visitor arrives at `node`, or at another ready node when that one is not in the
    /// cluster (a balancer only sends traffic to ready nodes).
    pub fn join(&mut self, net: &mut Net, node: NodeId) {
        let ready: Vec<NodeId> = net
            .live()
            .iter()
            .filter(|n| n.is_member())
            .map(|n| n.id())
            .collect();
        let Some(&first) = ready.first() else {
            return;
        };
        let node = if ready.contains(&node) { node } else { first };
        let c = net
            .with(node, |n, now| n.join(now))
            .expect("members take joins");
        self.next_refresh.push(net.now + 600);
        self.admitted.push(c.status == CheckInStatus::Admitted);
        self.tickets.push(c.ticket);
    }

    /// Checks in every visitor whose refresh time has come.
    pub fn tick(&mut self, net: &mut Net) {
        let live = net.ids();
        for i in 0..self.tickets.len() {
            if self.admitted[i] || self.next_refresh[i] > net.now {
                continue;
            }
            let ticket = self.tickets[i].clone();
            let mut at = ticket.node;
            if !live.contains(&at) {
                at = live[i % live.len()];
            }
            let result = match net.with(at, |n, now| n.check_in(now, &ticket)) {
                Err(VisitorError::Elsewhere(owner)) if live.contains(&owner.id) => {
                    net.with(owner.id, |n, now| n.check_in(now, &ticket))
                }
                Err(VisitorError::Elsewhere(_)) => {
                    net.with(at, |n, now| n.check_in_here(now, &ticket))
                }
                other => other,
            };
            match result {
                Ok(c) => {
                    self.admitted[i] = c.status == CheckInStatus::Admitted;
                    self.tickets[i] = c.ticket;
                    if self.admitted[i] {
                        let t = self.tickets[i].clone();
                        let pass = net
                            .with(t.node, |n, now| n.leave(now, &t))
                            .expect("an admitted visitor leaves");
                        self.passes.insert(i, pass);
                    }
                }
                Err(VisitorError::NotReady) => {
                    if std::env::var("WR_DEBUG").is_ok() {
                        eprintln!("t={} visitor {i} at {at}: not ready", net.now);
                    }
                }
                Err(e) => panic!("visitor {i}: {e}"),
            }
            self.next_refresh[i] = net.now + 600;
        }
    }

    /// Runs `ms` of time with visitors checking in every 50 ms.
    pub fn run(&mut self, net: &mut Net, ms: Time) {
        let end = net.now + ms;
        while net.now < end {
            net.run_for(50.min(end - net.now));
            self.tick(net);
        }
    }

    /// Whether every visitor got in.
    pub fn all_admitted(&self) -> bool {
        self.admitted.iter().all(|a| *a)
    }

    /// Ticket ids in join order.
    pub fn join_order(&self) -> Vec<TicketId> {
        let mut t: Vec<_> = self.tickets.iter().map(|t| (t.join_time, t.id)).collect();
        t.sort();
        t.into_iter().map(|(_, id)| id).collect()
    }
}

// ---- message-level tests -------------------------------------------------------------------

/// Another node as a test plays it: writes the envelopes it would send to the node under test,
/// numbering its channel messages on one link (epoch 1, from sequence 1).
#[derive(Debug, Clone)]
pub struct Peer {
    /// Who it is.
    pub contact: Contact,
    seq: u64,
}

impl Peer {
    /// Node `id` in its first life.
    pub fn new(id: u64) -> Peer {
        Peer {
            contact: contact(id),
            seq: 0,
        }
    }

    /// `msg` on this peer's reliable channel to `to`: the next sequence number, acknowledging
    /// nothing.
    pub fn channel(&mut self, to: &Node, msg: ChannelMsg) -> Envelope {
        self.seq += 1;
        let body = Body::Channel {
            epoch: 1,
            seq: self.seq,
            ack_epoch: 0,
            ack: 0,
            msg,
        };
        self.raw(to, body)
    }

    /// An unreliable message to `to`.
    pub fn raw(&self, to: &Node, body: Body) -> Envelope {
        Envelope {
            from: self.contact.clone(),
            to: to.id(),
            to_incarnation: to.contact().incarnation,
            body,
        }
    }
}

/// One message a node sent, as the protocol says it: channel messages without the link's
/// numbering, by recipient id; anything else with its transport address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Said {
    /// A protocol message on the reliable channel.
    Channel(NodeId, ChannelMsg),
    /// An unreliable message (probe, tree, join request, not-member).
    Raw(String, Body),
}

/// What `node` sent since last asked, in order, leaving out bare acknowledgements (the
/// channel's own tests cover those). Events are dropped too: see [`events`].
pub fn said(node: &mut Node) -> Vec<Said> {
    std::iter::from_fn(|| node.poll_transmit())
        .filter_map(|t| match t.envelope.body {
            Body::Channel { msg, .. } => Some(Said::Channel(t.envelope.to, msg)),
            Body::ChannelAck { .. } => None,
            body => Some(Said::Raw(t.to_addr.to_string(), body)),
        })
        .collect()
}

/// What `node` emitted since last asked.
pub fn events(node: &mut Node) -> Vec<Event> {
    std::iter::from_fn(|| node.poll_event()).collect()
}

/// The stamp of a round node 1 started at `time`.
pub fn stamp(time: Time) -> Stamp {
    Stamp {
        time,
        origin: NodeId(1),
    }
}

/// A count's reply up the tree for round `stamp`: `counts`, or None for a refusal.
pub fn count_reply(stamp: Stamp, counts: Option<Counts>) -> ChannelMsg {
    ChannelMsg::CountReply {
        stamp,
        counts: counts.map(Box::new),
    }
}

/// Node `node`'s own figures in a count: `queued` visitors, all eligible.
pub fn counts_of(node: u64, queued: u64) -> Counts {
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
            lives: Some((1, 1)),
        }],
        departed: Vec::new(),
        released: Vec::new(),
        voters: Voters::default(),
        settings: LiveSettings::default(),
        lost: Vec::new(),
        seen: BTreeSet::new(),
    }
}

/// A membership at `version` over `ids` (first lives) with these tree `edges`.
pub fn tree(version: u64, ids: &[u64], edges: &[(u64, u64)]) -> Membership {
    Membership {
        version,
        members: ids.iter().map(|&id| (NodeId(id), contact(id))).collect(),
        edges: edges
            .iter()
            .map(|&(a, b)| (NodeId(a.min(b)), NodeId(a.max(b))))
            .collect(),
        removed: BTreeMap::new(),
    }
}

/// Node `id` (configured by `cfg`) as a member of `m`, let in at time 0: it asked `n<lowest>`
/// to join and got `m` back. Its neighbours have not told it their weights yet, so it is
/// still settling (see [`settle`]). What it said is acknowledged and, with what it emitted,
/// drained.
pub fn member(cfg: NodeConfig, m: &Membership) -> Node {
    let mut node = Node::new(cfg).expect("a valid configuration");
    let first = *m.members.keys().next().expect("a member");
    node.join_cluster(0, vec![addr(first.0)]);
    let from = Peer::new(first.0);
    let tree = from.raw(&node, Body::tree(m.clone()));
    node.handle_message(0, tree)
        .expect("a tree that lists the node");
    acknowledge(&mut node);
    node
}

/// The tree neighbours of a node under test, as [`Peer`]s (see [`settle`]).
#[derive(Debug, Clone, Default)]
pub struct Neighbours(BTreeMap<NodeId, Peer>);

impl Neighbours {
    /// Neighbour `id`.
    pub fn peer(&mut self, id: u64) -> &mut Peer {
        self.0.get_mut(&NodeId(id)).expect("a neighbour")
    }

    /// `msg` on neighbour `id`'s reliable channel to `to`.
    pub fn channel(&mut self, id: u64, to: &Node, msg: ChannelMsg) -> Envelope {
        self.peer(id).channel(to, msg)
    }
}

/// Tells `node` each of its tree neighbours' weight (empty, in their first message on their
/// link), so that it settles, and acknowledges what it said to them, so that it has nothing
/// to resend; drains what it said. Returns the neighbours' peers, for the test's next
/// messages.
pub fn settle(node: &mut Node) -> Neighbours {
    let version = node.membership().version;
    let mut peers = Neighbours::default();
    for n in node.membership().neighbours(node.id()) {
        let mut peer = Peer::new(n.0);
        let update = ChannelMsg::Update {
            weight: crate::Weight::Empty,
            version,
        };
        let env = peer.channel(node, update);
        node.handle_message(0, env).expect("a neighbour's update");
        peers.0.insert(n, peer);
    }
    acknowledge(node);
    peers
}

/// Acknowledges, from each receiver, every channel message `node` sent since last asked, and
/// drains what it said and emitted.
fn acknowledge(node: &mut Node) {
    let mut last: BTreeMap<(NodeId, u64), u64> = BTreeMap::new();
    for t in std::iter::from_fn(|| node.poll_transmit()) {
        if let Body::Channel { epoch, seq, .. } = t.envelope.body {
            let top = last.entry((t.envelope.to, epoch)).or_default();
            *top = (*top).max(seq);
        }
    }
    for ((to, epoch), ack) in last {
        let ack = Body::ChannelAck {
            epoch,
            ack,
            resync: false,
        };
        let env = Peer::new(to.0).raw(node, ack);
        node.handle_message(0, env).expect("an acknowledgement");
    }
    said(node);
    events(node);
}

/// What a driver that kept `voters` gives a new life of its node.
fn remembering(voters: Option<&Voters>) -> impl FnOnce(&mut Node, Time) + '_ {
    move |node, _| {
        if let Some(v) = voters {
            node.remember_voters(v);
        }
    }
}
