//! The real protocol: a cluster of `waitingroom_distributed::Node`s over the simulated network.
//!
//! This module only drives the nodes (delivers messages, fires timers, routes visitors like a
//! load balancer would, crashes and adds nodes) and watches them (admission events, invariant
//! checks). Every protocol decision is the node's own.

use std::collections::{BTreeMap, HashMap};

use rand::RngExt;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use waitingroom_core::{CheckInStatus, NodeId, Pass, Settings, Ticket, TicketId, Time};
use waitingroom_distributed::{Body, Event, Node, NodeConfig, Transmit, VisitorError};

use crate::config::{Disturbance, PartitionKind, RunConfig};
use crate::disturbances;
use crate::metrics::RunReport;
use crate::network::Network;
use crate::scheduler::Ev;
use crate::seeds::{self, Stream};
use crate::sim::{Ctx, Reply, Room};

mod checks;

use checks::Outcome;

/// No node chosen yet.
const NONE: u32 = u32::MAX;

/// One node id's place in the cluster: the running node, if any, and its bookkeeping.
struct Slot {
    node: Option<Node>,
    /// Number of the node process now running in this slot (restarts get a new one).
    process: u32,
    /// When this slot's timer event is scheduled (None: not scheduled).
    timer_at: Option<Time>,
    /// Highest incarnation this slot has had, so a restart comes back with a higher one.
    incarnation: u64,
    /// What every invariant check read from this node last time, membership summarised (see
    /// [`QpidRoom::check`]).
    inputs: Vec<u64>,
    /// The same with the membership listed in full.
    full_inputs: Vec<u64>,
    /// What quiet invariant checks read from this node last time.
    quiet_inputs: Vec<u64>,
    /// `quiet_inputs` may be out of date.
    quiet_stale: bool,
    /// Listed in `touched`.
    touched: bool,
    /// Nothing this node sent waits for an acknowledgement (as of its last check).
    drained: bool,
    /// `drained` may be out of date.
    drained_stale: bool,
}

/// Something planned for a time.
#[derive(Debug, Clone, Copy)]
enum Action {
    Do(Disturbance),
    Revive(usize),
    Heal,
}

/// The protocol cluster and its network.
pub(crate) struct QpidRoom {
    cfg: RunConfig,
    settings: Settings,
    slots: Vec<Slot>,
    /// Whether each node process (by number) is still running.
    alive: Vec<bool>,
    net: Network,
    /// Disturbance victims.
    rng: ChaCha8Rng,
    plan: Vec<Action>,
    /// Each visitor's latest ticket while they wait.
    tickets: Vec<Option<Ticket>>,
    /// Each visitor's pass while on the site (only kept when sessions refresh passes).
    passes: Vec<Option<Pass>>,
    /// The node slot the load balancer sends each visitor to.
    sticky: Vec<u32>,
    /// Whose ticket is whose.
    owner: HashMap<TicketId, u32>,
    /// Messages in flight that can change protocol state (everything but SWIM probes).
    in_flight: u64,
    messages: u64,
    checks: u64,
    countdown: u32,
    violations: u64,
    violations_recovering: u64,
    samples_after: Vec<String>,
    samples_recovering: Vec<String>,
    /// Invariant checks that had to run in full (inputs changed).
    full_checks: u64,
    /// Slots whose node handled something since the last check.
    touched: Vec<usize>,
    /// A node was started or crashed since the last check.
    live_changed: bool,
    /// Outcome of the last full check with the network busy (0) and quiet (1), while still
    /// valid for the current inputs.
    outcome: [Option<Outcome>; 2],
    scratch: Vec<u64>,
    /// Live nodes with unacknowledged messages.
    undrained: usize,
    /// Counts down partial checks to the next verification of the membership summary.
    verify_countdown: u64,
    /// Verifications that found the membership summary unchanged but the membership changed.
    summary_misses: u64,
    visitor_errors: BTreeMap<String, u64>,
    protocol_events: BTreeMap<String, u64>,
}

fn addr(slot: usize) -> String {
    format!("n{}", slot + 1)
}

fn slot_of_addr(addr: &str, slots: usize) -> Option<usize> {
    let id: usize = addr.strip_prefix('n')?.parse().ok()?;
    (1..=slots).contains(&id).then(|| id - 1)
}

fn slot_of_id(id: NodeId, slots: usize) -> Option<usize> {
    let id = usize::try_from(id.0).ok()?;
    (1..=slots).contains(&id).then(|| id - 1)
}

/// SWIM probes carry no state the invariants look at; everything else may.
fn is_probe(body: &Body) -> bool {
    matches!(
        body,
        Body::Ping { .. } | Body::PingAck { .. } | Body::PingReq { .. }
    )
}

/// A small number naming a message's kind, for the trace.
fn body_code(body: &Body) -> u64 {
    match body {
        Body::Channel { seq, .. } => 1 + (seq << 4),
        Body::ChannelAck { ack, .. } => 2 + (ack << 4),
        Body::Ping { .. } => 3,
        Body::PingAck { .. } => 4,
        Body::PingReq { .. } => 5,
        Body::JoinRequest { .. } => 6,
        Body::NotMember { .. } => 7,
        Body::Tree(_) => 8,
    }
}

fn bump(map: &mut BTreeMap<String, u64>, key: &str) {
    *map.entry(key.to_string()).or_insert(0) += 1;
}

fn error_name(e: &VisitorError) -> String {
    match e {
        VisitorError::NotReady => "not-ready".into(),
        VisitorError::Elsewhere(_) => "elsewhere".into(),
        VisitorError::Engine(e) => format!("{e}"),
    }
}

impl QpidRoom {
    pub(crate) fn new(cfg: &RunConfig) -> Self {
        let n = cfg.workload.users as usize;
        QpidRoom {
            cfg: cfg.clone(),
            settings: cfg.settings(),
            slots: Vec::new(),
            alive: Vec::new(),
            net: Network::new(&cfg.network, seeds::rng(cfg.seed, Stream::Network)),
            rng: seeds::rng(cfg.seed, Stream::Disturbances),
            plan: Vec::new(),
            tickets: vec![None; n],
            passes: if cfg.workload.session_ms > 0 {
                vec![None; n]
            } else {
                Vec::new()
            },
            sticky: vec![NONE; n],
            owner: HashMap::with_capacity(n),
            in_flight: 0,
            messages: 0,
            checks: 0,
            countdown: 0,
            violations: 0,
            violations_recovering: 0,
            samples_after: Vec::new(),
            samples_recovering: Vec::new(),
            full_checks: 0,
            touched: Vec::new(),
            live_changed: true,
            outcome: [None, None],
            scratch: Vec::new(),
            undrained: 0,
            verify_countdown: 0,
            summary_misses: 0,
            visitor_errors: BTreeMap::new(),
            protocol_events: BTreeMap::new(),
        }
    }

    /// Starts a node process in `slot`: a new cluster when `seeds` is None, else joining.
    fn spawn(&mut self, ctx: &mut Ctx, slot: usize, seeds: Option<Vec<String>>) {
        if slot == self.slots.len() {
            self.slots.push(Slot {
                node: None,
                process: 0,
                timer_at: None,
                incarnation: 0,
                inputs: Vec::new(),
                full_inputs: Vec::new(),
                quiet_inputs: Vec::new(),
                quiet_stale: true,
                touched: false,
                drained: true,
                drained_stale: false,
            });
        }
        let id = slot as u64 + 1;
        let incarnation = self.slots[slot].incarnation + 1;
        let mut nc = NodeConfig::new(NodeId(id), incarnation, addr(slot), self.settings.clone());
        self.cfg.protocol.configure(&mut nc);
        nc.seed =
            seeds::mix(seeds::mix(self.cfg.seed ^ Stream::Nodes as u64) ^ (id << 24) ^ incarnation);
        let mut node = match Node::new(nc) {
            Ok(node) => node,
            Err(e) => {
                bump(
                    &mut self.protocol_events,
                    &format!("node-refused-config: {e}"),
                );
                return;
            }
        };
        match seeds {
            None => node.start_cluster(ctx.now),
            Some(seeds) => node.join_cluster(ctx.now, seeds),
        }
        let process = self.alive.len() as u32;
        self.alive.push(true);
        let s = &mut self.slots[slot];
        s.node = Some(node);
        s.process = process;
        s.timer_at = None;
        s.incarnation = incarnation;
        s.inputs.clear();
        s.quiet_inputs.clear();
        s.quiet_stale = true;
        self.live_changed = true;
        ctx.trace.note(ctx.now, "spawn", &[id, incarnation]);
        self.drain(ctx, slot);
    }

    fn crash(&mut self, ctx: &mut Ctx, slot: usize) {
        let s = &mut self.slots[slot];
        if let Some(node) = s.node.take() {
            s.incarnation = s.incarnation.max(node.contact().incarnation);
            s.timer_at = None;
            self.alive[s.process as usize] = false;
            s.inputs.clear();
            s.quiet_inputs.clear();
            if !s.drained {
                s.drained = true;
                self.undrained -= 1;
            }
            s.drained_stale = false;
            self.live_changed = true;
            ctx.trace.note(ctx.now, "crash", &[slot as u64 + 1]);
        }
    }

    fn is_serving(&self, slot: usize) -> bool {
        self.slots[slot]
            .node
            .as_ref()
            .is_some_and(|n| n.is_member())
    }

    fn serving_addrs(&self, except: usize) -> Vec<String> {
        (0..self.slots.len())
            .filter(|&s| s != except && self.is_serving(s))
            .map(addr)
            .collect()
    }

    fn alive_slots(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&s| self.slots[s].node.is_some())
            .collect()
    }

    /// Drains a node's outputs: messages onto the network, events into the ledger; then
    /// makes sure its next timer is scheduled.
    fn drain(&mut self, ctx: &mut Ctx, slot: usize) {
        let nslots = self.slots.len();
        let QpidRoom {
            slots,
            net,
            in_flight,
            messages,
            owner,
            alive,
            protocol_events,
            touched,
            ..
        } = self;
        let s = &mut slots[slot];
        let Some(node) = s.node.as_mut() else {
            return;
        };
        if !s.touched {
            s.touched = true;
            touched.push(slot);
        }
        let now = ctx.now;
        while let Some(t) = node.poll_transmit() {
            *messages += 1;
            let Some(to) = slot_of_addr(&t.to_addr, nslots) else {
                net.stats.to_dead += 1;
                continue;
            };
            if !net.connected(slot, to) {
                net.stats.sent += 1;
                net.stats.cut += 1;
                continue;
            }
            let counts = !is_probe(&t.envelope.body);
            let [first, second] = net.delays();
            if let Some(d) = second {
                *in_flight += u64::from(counts);
                ctx.sched.at(now + d, Ev::Deliver(Box::new(t.clone())));
            }
            if let Some(d) = first {
                *in_flight += u64::from(counts);
                ctx.sched.at(now + d, Ev::Deliver(Box::new(t)));
            }
        }
        while let Some(e) = node.poll_event() {
            match e {
                Event::Admitted {
                    key,
                    at,
                    decided_at,
                } => match owner.get(&key.ticket) {
                    Some(&v) => ctx.admitted(
                        v,
                        decided_at,
                        at,
                        (key.join_time, key.ticket.0),
                        s.process,
                        |p| alive[p as usize],
                    ),
                    None => bump(protocol_events, "admitted-unknown-ticket"),
                },
                Event::CountCompleted(_) => {}
                other => {
                    let (name, about) = match &other {
                        Event::Joined { version } => ("joined", *version),
                        Event::Rejoining => ("rejoining", 0),
                        Event::MemberAdded(c) => ("member-added", c.id.0),
                        Event::MemberRemoved(c) => ("member-removed", c.id.0),
                        Event::MemberFailed(c) => ("member-failed", c.id.0),
                        Event::TreeRepaired => ("tree-repaired", 0),
                        _ => ("other", 0),
                    };
                    bump(protocol_events, name);
                    ctx.trace.note(now, name, &[slot as u64 + 1, about]);
                }
            }
        }
        if let Some(t) = node.poll_timeout() {
            let t = t.max(now);
            if s.timer_at.is_none_or(|x| t < x) {
                s.timer_at = Some(t);
                ctx.sched.at(t, Ev::NodeTimer(slot as u32));
            }
        }
    }

    fn deliver(&mut self, ctx: &mut Ctx, t: Transmit) {
        if !is_probe(&t.envelope.body) {
            self.in_flight -= 1;
        }
        let nslots = self.slots.len();
        let to = slot_of_addr(&t.to_addr, nslots);
        let from = slot_of_id(t.envelope.from.id, nslots);
        ctx.trace.note(
            ctx.now,
            "deliver",
            &[
                from.map_or(0, |f| f as u64 + 1),
                to.map_or(0, |f| f as u64 + 1),
                body_code(&t.envelope.body),
            ],
        );
        let Some(to) = to else {
            return;
        };
        if from.is_some_and(|f| !self.net.connected(f, to)) {
            self.net.stats.cut += 1;
            return;
        }
        let Some(node) = self.slots[to].node.as_mut() else {
            self.net.stats.to_dead += 1;
            if self.cfg.network.refused_connections
                && let Some(f) = from
                && let Some(sender) = self.slots[f].node.as_mut()
            {
                // Like a refused connection: the sender's transport learns the peer is down.
                ctx.trace
                    .note(ctx.now, "refused", &[f as u64 + 1, to as u64 + 1]);
                sender.report_unreachable(&t.to_addr);
                self.drain(ctx, f);
                self.check(ctx);
            }
            return;
        };
        node.handle_message(ctx.now, t.envelope);
        self.drain(ctx, to);
        self.check(ctx);
    }

    fn timer(&mut self, ctx: &mut Ctx, slot: usize) {
        let s = &mut self.slots[slot];
        if s.timer_at != Some(ctx.now) {
            return;
        }
        s.timer_at = None;
        let Some(node) = s.node.as_mut() else {
            return;
        };
        if node.poll_timeout().is_some_and(|t| t <= ctx.now) {
            ctx.trace.note(ctx.now, "timer", &[slot as u64 + 1]);
            node.handle_timeout(ctx.now);
        }
        self.drain(ctx, slot);
        self.check(ctx);
    }

    /// The node the load balancer sends visitor `v` to: their usual one while it serves,
    /// otherwise a random serving node (which becomes their usual one).
    fn route(&mut self, ctx: &mut Ctx, v: u32) -> Option<usize> {
        let cur = self.sticky[v as usize];
        if cur != NONE && self.is_serving(cur as usize) {
            return Some(cur as usize);
        }
        let count = (0..self.slots.len())
            .filter(|&s| self.is_serving(s))
            .count();
        if count == 0 {
            return None;
        }
        let k = ctx.rng.random_range(0..count);
        let s = (0..self.slots.len())
            .filter(|&s| self.is_serving(s))
            .nth(k)?;
        self.sticky[v as usize] = s as u32;
        Some(s)
    }

    fn node(&mut self, slot: usize) -> &mut Node {
        self.slots[slot]
            .node
            .as_mut()
            .expect("route and forward only pick live nodes")
    }

    fn answer(
        &mut self,
        ctx: &mut Ctx,
        v: u32,
        r: Result<waitingroom_core::CheckIn, VisitorError>,
    ) -> Reply {
        match r {
            Ok(c) => {
                let status = c.status;
                self.tickets[v as usize] = Some(c.ticket);
                match status {
                    CheckInStatus::Admitted => Reply::Admitted,
                    CheckInStatus::Queued { .. } => Reply::Queued,
                }
            }
            Err(VisitorError::NotReady) => Reply::Unavailable,
            Err(e) => {
                let name = error_name(&e);
                ctx.trace
                    .text(ctx.now, &format!("refused visitor {v}: {name}"));
                bump(&mut self.visitor_errors, &name);
                Reply::Refused
            }
        }
    }

    fn disturb(&mut self, ctx: &mut Ctx, what: Disturbance) {
        match what {
            Disturbance::Crash | Disturbance::Restart => {
                let alive = self.alive_slots();
                if alive.len() <= 1 {
                    bump(&mut self.protocol_events, "disturbance-skipped");
                    return;
                }
                let victim = alive[self.rng.random_range(0..alive.len())];
                self.crash(ctx, victim);
                if what == Disturbance::Restart {
                    self.plan.push(Action::Revive(victim));
                    let at = ctx.now + self.cfg.faults.restart_delay_ms;
                    ctx.sched.at(at, Ev::Disturb(self.plan.len() as u32 - 1));
                }
            }
            Disturbance::Add => {
                let seeds = self.serving_addrs(usize::MAX);
                let slot = self.slots.len();
                self.spawn(ctx, slot, Some(seeds));
            }
            Disturbance::Partition(kind) => {
                let mut alive = self.alive_slots();
                if alive.len() < 2 {
                    bump(&mut self.protocol_events, "disturbance-skipped");
                    return;
                }
                let kind = match kind {
                    PartitionKind::Random if self.rng.random_bool(0.5) => PartitionKind::Isolate,
                    PartitionKind::Random => PartitionKind::Split,
                    k => k,
                };
                alive.shuffle(&mut self.rng);
                let cut = if kind == PartitionKind::Isolate {
                    1
                } else {
                    alive.len() / 2
                };
                self.net.cut_off(&alive[..cut]);
                let ids: Vec<u64> = alive[..cut].iter().map(|&s| s as u64 + 1).collect();
                ctx.trace.note(ctx.now, "partition", &ids);
                self.plan.push(Action::Heal);
                let at = ctx.now + self.cfg.faults.partition_ms;
                ctx.sched.at(at, Ev::Disturb(self.plan.len() as u32 - 1));
            }
        }
    }
}

impl Room for QpidRoom {
    fn start(&mut self, ctx: &mut Ctx) {
        for slot in 0..self.cfg.nodes as usize {
            let seeds = (slot > 0).then(|| vec![addr(0)]);
            self.spawn(ctx, slot, seeds);
        }
        let mut rng = seeds::rng(self.cfg.seed, Stream::Disturbances);
        // The plan draws from its own copy of the stream; victims come from `self.rng`,
        // advanced past the plan's draws so the two never overlap.
        let planned = disturbances::plan(
            &self.cfg.faults,
            ctx.start,
            self.cfg.workload.window_ms,
            &mut rng,
        );
        self.rng = rng;
        for (t, what) in planned {
            self.plan.push(Action::Do(what));
            ctx.sched.at(t, Ev::Disturb(self.plan.len() as u32 - 1));
        }
    }

    fn join(&mut self, ctx: &mut Ctx, v: u32) -> Reply {
        let Some(s) = self.route(ctx, v) else {
            return Reply::Unavailable;
        };
        let now = ctx.now;
        let r = self.node(s).join(now);
        ctx.trace.note(
            now,
            "join-at",
            &[u64::from(v), s as u64 + 1, u64::from(r.is_ok())],
        );
        if let Ok(c) = &r {
            ctx.ledger.joined(v, c.ticket.join_time, c.ticket.id.0);
            self.owner.insert(c.ticket.id, v);
        }
        self.drain(ctx, s);
        self.answer(ctx, v, r)
    }

    fn check_in(&mut self, ctx: &mut Ctx, v: u32) -> Reply {
        let Some(ticket) = self.tickets[v as usize].clone() else {
            return self.join(ctx, v);
        };
        let Some(s) = self.route(ctx, v) else {
            return Reply::Unavailable;
        };
        let now = ctx.now;
        let r = self.node(s).check_in(now, &ticket);
        self.drain(ctx, s);
        let r = match r {
            Err(VisitorError::Elsewhere(owner)) => {
                // The node forwards the request to the ticket's owner; if the owner cannot be
                // reached, the visitor is queued here under their original join time.
                // Peer requests reach any live process, member or not (a node rejoining the
                // cluster still serves the visitors it holds).
                let o = slot_of_addr(&owner.addr, self.slots.len())
                    .filter(|&o| self.slots[o].node.is_some() && self.net.connected(s, o));
                let forwarded = o.map(|o| {
                    let r = self.node(o).check_in(now, &ticket);
                    self.drain(ctx, o);
                    r
                });
                match (o, forwarded) {
                    (Some(o), Some(r @ Ok(_)))
                    | (Some(o), Some(r @ Err(VisitorError::Engine(_)))) => {
                        ctx.trace
                            .note(now, "check-in-at", &[u64::from(v), o as u64 + 1, 1]);
                        r
                    }
                    _ => {
                        ctx.trace
                            .note(now, "check-in-at", &[u64::from(v), s as u64 + 1, 2]);
                        let r = self.node(s).check_in_here(now, &ticket);
                        self.drain(ctx, s);
                        r
                    }
                }
            }
            r => {
                ctx.trace
                    .note(now, "check-in-at", &[u64::from(v), s as u64 + 1, 0]);
                r
            }
        };
        self.answer(ctx, v, r)
    }

    fn leave(&mut self, ctx: &mut Ctx, v: u32) -> Option<Time> {
        let ticket = self.tickets[v as usize].clone()?;
        let now = ctx.now;
        // The node that said "admitted" issued this ticket; leave there, or anywhere if it
        // went away meanwhile (the ticket carries the eviction time).
        let owner = slot_of_id(ticket.node, self.slots.len()).filter(|&o| self.is_serving(o));
        let mut result = owner.map(|o| {
            let r = self.node(o).leave(now, &ticket);
            self.drain(ctx, o);
            r
        });
        if !matches!(result, Some(Ok(_))) {
            let s = self.route(ctx, v)?;
            let r = self.node(s).leave_here(now, &ticket);
            self.drain(ctx, s);
            result = Some(r);
        }
        match result? {
            Ok(pass) => {
                let expires = pass.expires_at;
                self.tickets[v as usize] = None;
                if let Some(p) = self.passes.get_mut(v as usize) {
                    *p = Some(pass);
                }
                Some(expires)
            }
            Err(e) => {
                bump(
                    &mut self.visitor_errors,
                    &format!("leave: {}", error_name(&e)),
                );
                None
            }
        }
    }

    fn refresh_pass(&mut self, ctx: &mut Ctx, v: u32) -> Option<Time> {
        let pass = self.passes.get(v as usize)?.clone()?;
        let s = self.route(ctx, v)?;
        let r = self.node(s).refresh_pass(ctx.now, &pass);
        self.drain(ctx, s);
        match r {
            Ok(p) => {
                let expires = p.expires_at;
                self.passes[v as usize] = Some(p);
                Some(expires)
            }
            Err(e) => {
                bump(
                    &mut self.visitor_errors,
                    &format!("refresh: {}", error_name(&e)),
                );
                None
            }
        }
    }

    fn next_check_in(&self, v: u32) -> Option<Time> {
        self.tickets[v as usize].as_ref().map(|t| t.next_refresh)
    }

    fn handle(&mut self, ctx: &mut Ctx, ev: Ev) {
        match ev {
            Ev::Deliver(t) => self.deliver(ctx, *t),
            Ev::NodeTimer(slot) => self.timer(ctx, slot as usize),
            Ev::Disturb(i) => match self.plan[i as usize] {
                Action::Do(what) => self.disturb(ctx, what),
                Action::Revive(slot) => {
                    let seeds = self.serving_addrs(slot);
                    self.spawn(ctx, slot, Some(seeds));
                }
                Action::Heal => {
                    ctx.trace.note(ctx.now, "heal", &[]);
                    self.net.heal();
                }
            },
            Ev::Arrive(_) | Ev::Visitor(_) | Ev::Tick => {}
        }
    }

    fn finish(&mut self, _ctx: &mut Ctx, report: &mut RunReport) {
        report.messages = self.messages;
        report.network = self.net.stats.clone();
        report.invariant_checks = self.checks;
        report.invariant_checks_full = self.full_checks;
        if self.summary_misses > 0 {
            self.protocol_events
                .insert("check-summary-misses".into(), self.summary_misses);
        }
        report.invariant_violations = self.violations;
        report.invariant_violations_recovering = self.violations_recovering;
        report.violation_samples = self
            .samples_after
            .iter()
            .chain(&self.samples_recovering)
            .cloned()
            .collect();
        report.visitor_errors = std::mem::take(&mut self.visitor_errors);
        report.protocol_events = std::mem::take(&mut self.protocol_events);
    }
}
