//! The real protocol: a cluster of `waitingroom_distributed::Node`s over the simulated network.
//!
//! This module only drives the nodes (delivers messages, fires timers, routes visitors like a
//! load balancer would, crashes and adds nodes) and watches them (admission events, invariant
//! checks). Every protocol decision is the node's own.

use std::collections::{BTreeMap, HashMap};

use rand::RngExt;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use waitingroom_core::queue::TicketHasher;
use waitingroom_core::{CheckInStatus, NodeId, Pass, Settings, Ticket, TicketId, Time};
use waitingroom_distributed::{Event, Node, NodeConfig, Pause, Transmit, VisitorError};

use crate::config::{Disturbance, PartitionKind, RunConfig};
use crate::disturbances;
use crate::metrics::{Admission, RunReport};
use crate::network::Network;
use crate::room::{Ctx, Play, Reply, Room};
use crate::scheduler::Ev;
use crate::seeds::{self, Stream};

mod checks;
mod clients;
mod faults;
mod nodes;
mod plays;
mod wire;

use checks::Checker;
use clients::{Client, NONE};
use nodes::{Nodes, Slot, addr, slot_of_addr, slot_of_id};
use wire::{Wire, body_code};

/// Something planned for a time.
#[derive(Debug, Clone, Copy)]
enum Action {
    Do(Disturbance),
    Revive(usize),
    Heal,
    /// A node back from a whole-cluster restart (the first starts the new cluster).
    ReviveAll(usize, bool),
    /// A node that left cleanly stops (if the same process still runs).
    Stop(usize, u32),
    /// The operator's action (index into `--operator`).
    Operate(usize),
    /// The operator looks whether a round carried the settings version its action `.0` made
    /// (`.1` written by node `.2`), and makes the action again if not.
    Confirm(usize, u64, NodeId),
    /// Every node must refuse the given-back pass (index into `released`), the cluster seen
    /// apart so far.
    CheckReleased(usize, plays::Apart),
    /// The pass `giving_back[.0]`, whose release was not confirmed, is given back again (try
    /// `.1 + 1`).
    GiveBackAgain(usize, u32),
}

/// What the load balancer remembers of each visitor, as a client and a sticky balancer would.
struct Visits {
    /// Each visitor's latest ticket while they wait, and the node slot the load balancer sends
    /// them to.
    clients: Vec<Client>,
    /// Each visitor's pass while on the site (only kept when sessions refresh passes).
    passes: Vec<Option<Pass>>,
    /// Whose ticket is whose.
    owner: HashMap<TicketId, u32, TicketHasher>,
    /// The node slot each visitor joined at.
    joined_at: Vec<u32>,
}

impl Visits {
    fn new(n: usize, keep_passes: bool) -> Self {
        Visits {
            clients: vec![Client::NEW; n],
            passes: if keep_passes {
                vec![None; n]
            } else {
                Vec::new()
            },
            owner: HashMap::with_capacity_and_hasher(n, TicketHasher),
            joined_at: vec![NONE; n],
        }
    }
}

/// Things counted by name for the report.
#[derive(Default)]
struct Tallies {
    /// Visitor operations the nodes refused, by reason.
    visitor_errors: BTreeMap<String, u64>,
    /// Protocol events worth knowing about, by kind.
    protocol_events: BTreeMap<String, u64>,
    /// Rounds completed at a root: how many, their total and their longest time.
    rounds: (u64, u64, Time),
}

fn bump(map: &mut BTreeMap<String, u64>, key: &str) {
    *map.entry(key.to_string()).or_insert(0) += 1;
}

/// The protocol cluster and its network.
pub(crate) struct QpidRoom {
    cfg: RunConfig,
    settings: Settings,
    nodes: Nodes,
    wire: Wire,
    visits: Visits,
    /// Disturbances and their follow-ups (revivals, heals), indexed by `Ev::Disturb`.
    plan: Vec<Action>,
    /// Disturbance victims.
    rng: ChaCha8Rng,
    checker: Checker,
    tallies: Tallies,
    /// The first partition: the slots on its paused side (those whose nodes report no
    /// majority just before it heals), and when it started and healed.
    first_cut: Option<(Vec<usize>, Time, Time)>,
    /// The tickets replayers gave up for their pass.
    old_tickets: HashMap<u32, Ticket>,
    /// Passes given back (by visitors or the operator) whose release was confirmed, and when:
    /// every node must refuse them.
    released: Vec<(TicketId, Time)>,
    /// Passes given back whose release was not confirmed, given back again (`plays.rs`).
    giving_back: Vec<Pass>,
    /// The target the operator set last.
    target: u64,
    /// Whether the operator switched the room to passthrough.
    passthrough: bool,
    /// Operator actions no node took (none served), in order: the first is tried again, the
    /// others wait behind it (`faults.rs`).
    ops_waiting: Vec<usize>,
    /// When the last partition healed.
    healed_at: Time,
    /// The operator's latest action (index into `--operator`), and how often it was made.
    operated_last: Option<(usize, u32)>,
    /// Where and with what seed the operator makes an action again, and where a pass whose
    /// release was not confirmed is given back again.
    operator_rng: ChaCha8Rng,
    /// What the clock of the node that handed out the latest pass read when it did.
    last_pass_issued_at: Option<Time>,
}

fn error_name(e: &VisitorError) -> String {
    match e {
        VisitorError::NotReady => "not-ready".into(),
        VisitorError::Elsewhere(_) => "elsewhere".into(),
        VisitorError::Engine(e) => format!("{e}"),
        VisitorError::Paused(why) => format!("paused-{}", why.as_str()),
        VisitorError::Rejected => "rejected".into(),
        VisitorError::EventOver => "event-over".into(),
        VisitorError::Released => "released".into(),
        VisitorError::Bypass => "bypass".into(),
        VisitorError::ReleasePending => "release-pending".into(),
    }
}

/// Turns one event of the node in `slot` (process `process`) into the ledger and the tallies.
fn on_event(
    ctx: &mut Ctx,
    (slot, process): (usize, u32),
    e: Event,
    owner: &HashMap<TicketId, u32, TicketHasher>,
    alive: &[bool],
    tallies: &mut Tallies,
) {
    match e {
        Event::Admitted {
            key,
            at,
            decided_at,
        } => match owner.get(&key.ticket) {
            Some(&v) => {
                let a = Admission {
                    v,
                    decided_at,
                    at,
                    tie_break: (key.join_time, key.ticket.0),
                    by: process,
                };
                ctx.admitted(a, |p| alive[p as usize]);
            }
            None => bump(&mut tallies.protocol_events, "admitted-unknown-ticket"),
        },
        Event::CountCompleted(summary) => {
            // The round began at its interval boundary (reference time: with no clock skew,
            // simulated time).
            let took = ctx.now.saturating_sub(summary.stamp.time);
            let (n, total, max) = &mut tallies.rounds;
            *n += 1;
            *total = total.saturating_add(took);
            *max = (*max).max(took);
        }
        other => {
            if let (Event::RoundRecorded(r), Some(p)) = (&other, ctx.promises.as_mut()) {
                p.recorded((r.round, r.decided_at_ms, r.root), (r.cutoff, r.through));
            }
            let (name, about) = match &other {
                Event::Joined { version } => ("joined", *version),
                Event::Rejoining => ("rejoining", 0),
                Event::MemberAdded(c) => ("member-added", c.id.0),
                Event::MemberRemoved(c) => ("member-removed", c.id.0),
                Event::MemberFailed(c) => ("member-failed", c.id.0),
                Event::TreeRepaired => ("tree-repaired", 0),
                _ => ("other", 0),
            };
            bump(&mut tallies.protocol_events, name);
            ctx.trace.note(ctx.now, name, &[slot as u64 + 1, about]);
        }
    }
}

impl Visits {
    /// Visitor `v` left the queue with `pass` (kept only when sessions refresh passes); returns
    /// when it expires.
    fn hold(&mut self, v: u32, pass: Pass) -> Time {
        let expires = pass.expires_at;
        self.clients[v as usize].drop_ticket();
        if let Some(p) = self.passes.get_mut(v as usize) {
            *p = Some(pass);
        }
        expires
    }
}

impl QpidRoom {
    pub(crate) fn new(cfg: &RunConfig) -> Self {
        let net = Network::new(&cfg.network, seeds::rng(cfg.seed, Stream::Network));
        QpidRoom {
            cfg: cfg.clone(),
            settings: cfg.settings(),
            nodes: Nodes::default(),
            wire: Wire::new(net),
            visits: Visits::new(cfg.workload.users as usize, cfg.workload.session_ms > 0),
            plan: Vec::new(),
            rng: seeds::rng(cfg.seed, Stream::Disturbances),
            checker: Checker::new(cfg.checks.check_every, cfg.settings().target_on_site),
            tallies: Tallies::default(),
            first_cut: None,
            old_tickets: HashMap::new(),
            released: Vec::new(),
            giving_back: Vec::new(),
            target: cfg.settings().target_on_site,
            passthrough: false,
            ops_waiting: Vec::new(),
            healed_at: 0,
            operated_last: None,
            operator_rng: seeds::rng(cfg.seed, Stream::Operator),
            last_pass_issued_at: None,
        }
    }

    /// Starts a node process in `slot`: a new cluster when `seeds` is None, else joining.
    fn spawn(&mut self, ctx: &mut Ctx, slot: usize, seeds: Option<Vec<String>>) {
        if slot == self.nodes.slots.len() {
            self.nodes.slots.push(Slot::default());
            self.checker.slot_added();
        }
        let id = slot as u64 + 1;
        let incarnation = self.nodes.slots[slot].incarnation + 1;
        let mut nc = NodeConfig::new(NodeId(id), incarnation, addr(slot), self.settings.clone());
        self.cfg.protocol.configure(&mut nc);
        nc.seed =
            seeds::mix(seeds::mix(self.cfg.seed ^ Stream::Nodes as u64) ^ (id << 24) ^ incarnation);
        let mut node = match Node::new(nc) {
            Ok(node) => node,
            Err(e) => {
                bump(
                    &mut self.tallies.protocol_events,
                    &format!("node-refused-config: {e}"),
                );
                return;
            }
        };
        let skew = self.skew_of(slot);
        let now = ctx.now.saturating_add_signed(skew);
        let known = self.give_back_past(slot, &mut node, now);
        match seeds {
            None => node.start_cluster(now),
            Some(seeds) => node.join_cluster(now, seeds),
        }
        // As the server does: its seeds may all be gone by the time it asks them.
        node.discovered(&known);
        self.nodes.put(slot, node, (incarnation, skew, ctx.now));
        self.checker.started(slot);
        ctx.trace.note(ctx.now, "spawn", &[id, incarnation]);
        self.drain(ctx, slot);
    }

    /// The clock of a process starting in `slot`: a restart keeps the machine's clock (its
    /// skew and any step since the last process started), a new node draws one
    /// (`--clock-skew-ms`).
    fn skew_of(&mut self, slot: usize) -> i64 {
        let s = &mut self.nodes.slots[slot];
        if s.incarnation > 0 {
            return s.skew.saturating_add(std::mem::take(&mut s.stepped));
        }
        let bound = i64::try_from(self.cfg.faults.clock_skew_ms).unwrap_or(i64::MAX);
        if bound > 0 {
            self.rng.random_range(-bound..=bound)
        } else {
            0
        }
    }

    /// A restarted node starts from what its earlier life kept (its state directory: the
    /// durable state, the releases and the voters), or, with `--cold-restarts`, from nothing,
    /// assuming the worst (waitingroom-distributed/README.md#durable-state).
    /// Returns the peers its earlier life knew, for it to look for besides its seeds.
    fn give_back_past(&mut self, slot: usize, node: &mut Node, now: Time) -> Vec<String> {
        let kept = self.nodes.slots[slot].kept.take();
        match kept {
            _ if self.nodes.slots[slot].incarnation == 0 => Vec::new(),
            Some(kept) if !self.cfg.faults.cold_restarts => {
                node.restore(now, &kept.durable);
                node.restore_releases(now, &kept.releases);
                if let Some(voters) = &kept.voters {
                    node.remember_voters(voters);
                }
                kept.durable.peers
            }
            _ => {
                node.assume_forgotten_past();
                Vec::new()
            }
        }
    }

    fn crash(&mut self, ctx: &mut Ctx, slot: usize) {
        if self.nodes.stop(slot) {
            self.checker.stopped(slot);
            ctx.trace.note(ctx.now, "crash", &[slot as u64 + 1]);
        }
    }

    /// Drains a node's outputs: messages onto the network, events into the ledger; then
    /// makes sure its next timer is scheduled.
    fn drain(&mut self, ctx: &mut Ctx, slot: usize) {
        let nslots = self.nodes.slots.len();
        let QpidRoom {
            nodes,
            wire,
            visits,
            checker,
            tallies,
            ..
        } = self;
        nodes.looked_at(slot);
        let s = &mut nodes.slots[slot];
        let skew = s.skew;
        let Some(node) = s.node.as_mut() else {
            return;
        };
        checker.touched(slot);
        while let Some(t) = node.poll_transmit() {
            wire.send(ctx, slot, t, nslots);
        }
        while let Some(mut e) = node.poll_event() {
            if let Event::Admitted { at, .. } = &mut e {
                *at = at.saturating_add_signed(-skew);
            }
            let alive = &nodes.alive;
            on_event(ctx, (slot, s.process), e, &visits.owner, alive, tallies);
        }
        if let Some(t) = node.poll_timeout() {
            let t = t.saturating_add_signed(-skew).max(ctx.now);
            if s.timer_at.is_none_or(|x| t < x) {
                s.timer_at = Some(t);
                ctx.sched.at(t, Ev::NodeTimer(slot as u32));
            }
        }
    }

    /// Runs the invariant checks (after a protocol event).
    fn check(&mut self, ctx: &Ctx) {
        let in_flight = self.wire.in_flight;
        let held = ctx.ledger.on_site;
        if !self.cfg.operator.operator.is_empty() {
            self.checker.target = ctx.target_bound();
        }
        self.checker
            .check(ctx.now, &self.nodes.slots, (in_flight, held));
    }

    fn deliver(&mut self, ctx: &mut Ctx, t: Transmit) {
        let nslots = self.nodes.slots.len();
        let to = slot_of_addr(&t.to_addr, nslots);
        if let Some(to) = to
            && self.nodes.frozen(to, ctx.now)
        {
            // A stopped process reads nothing; what was sent to it waits in its buffers.
            let thaw = self.nodes.slots[to].frozen_until;
            ctx.sched.at(thaw, Ev::Deliver(Box::new(t)));
            return;
        }
        self.wire.arrived(&t);
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
        if from.is_some_and(|f| !self.wire.net.connected(f, to)) {
            self.wire.net.stats.cut += 1;
            return;
        }
        if self.nodes.slots[to].node.is_none() {
            self.wire.net.stats.to_dead += 1;
            if self.cfg.network.refused_connections
                && let Some(f) = from
                && let Some(sender) = self.nodes.slots[f].node.as_mut()
            {
                // Like a refused connection: the sender's transport learns the peer is down.
                ctx.trace
                    .note(ctx.now, "refused", &[f as u64 + 1, to as u64 + 1]);
                sender.report_unreachable(&t.to_addr);
                self.drain(ctx, f);
                self.check(ctx);
            }
            return;
        }
        // Why a message was ignored is the node's business: the run's trace records what it did.
        let now = self.nodes.clock(to, ctx.now);
        let Some(node) = self.nodes.slots[to].node.as_mut() else {
            return;
        };
        let _ = node.handle_message(now, t.envelope);
        self.drain(ctx, to);
        self.check(ctx);
    }

    fn timer(&mut self, ctx: &mut Ctx, slot: usize) {
        let frozen = self.nodes.frozen(slot, ctx.now);
        let s = &mut self.nodes.slots[slot];
        if s.timer_at != Some(ctx.now) {
            return;
        }
        if frozen {
            s.timer_at = Some(s.frozen_until);
            ctx.sched.at(s.frozen_until, Ev::NodeTimer(slot as u32));
            return;
        }
        s.timer_at = None;
        let now = s.clock(ctx.now);
        let Some(node) = s.node.as_mut() else {
            return;
        };
        if node.poll_timeout().is_some_and(|t| t <= now) {
            ctx.trace.note(ctx.now, "timer", &[slot as u64 + 1]);
            node.handle_timeout(now);
        }
        self.drain(ctx, slot);
        self.check(ctx);
    }

    /// The node the load balancer sends visitor `v` to: their usual one while it serves,
    /// otherwise a random serving node (which becomes their usual one).
    fn route(&mut self, ctx: &mut Ctx, v: u32) -> Option<usize> {
        let cur = self.visits.clients[v as usize].sticky;
        let usable = |s: usize| !self.nodes.frozen(s, ctx.now);
        if cur != NONE && self.nodes.is_serving(cur as usize) && usable(cur as usize) {
            return Some(cur as usize);
        }
        if self.nodes.freezes > 0 {
            let s = self.any_node(ctx)?;
            self.visits.clients[v as usize].sticky = s as u32;
            return Some(s);
        }
        let serving = self.nodes.serving();
        if serving.is_empty() {
            return None;
        }
        let s = serving[ctx.rng.random_range(0..serving.len())];
        self.visits.clients[v as usize].sticky = s;
        Some(s as usize)
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
                self.visits.clients[v as usize].keep(&c.ticket);
                match status {
                    CheckInStatus::Admitted => Reply::Admitted,
                    CheckInStatus::Queued { .. } => Reply::Queued,
                }
            }
            Err(VisitorError::NotReady) => Reply::Unavailable,
            Err(VisitorError::Rejected | VisitorError::EventOver) => {
                bump(&mut self.tallies.visitor_errors, "turned-away");
                Reply::TurnedAway
            }
            Err(e) => {
                let name = error_name(&e);
                ctx.trace
                    .text(ctx.now, &format!("refused visitor {v}: {name}"));
                bump(&mut self.tallies.visitor_errors, &name);
                Reply::Refused
            }
        }
    }

    /// What a node answered visitor `v`'s `op` (leave or refresh) that hands out a pass: when
    /// the pass they now hold expires, or None (counted by reason) if it refused.
    /// True time when node `id`'s clock reads `t` (its running process', if any).
    fn true_time(&self, id: NodeId, t: Time) -> Time {
        slot_of_id(id, self.nodes.slots.len()).map_or(t, |s| self.nodes.slots[s].true_time(t))
    }

    fn holds(
        &mut self,
        ctx: &mut Ctx,
        v: u32,
        r: Result<Pass, VisitorError>,
        op: &str,
    ) -> Option<Time> {
        match r {
            Ok(pass) => {
                if let Some(p) = ctx.promises.as_mut() {
                    p.pass_handed(ctx.now, v, &pass, op == "leave");
                }
                let issuer = pass.node;
                self.last_pass_issued_at = Some(pass.issued_at);
                let expires = self.visits.hold(v, pass);
                Some(self.true_time(issuer, expires))
            }
            Err(e) => {
                let reason = format!("{op}: {}", error_name(&e));
                bump(&mut self.tallies.visitor_errors, &reason);
                None
            }
        }
    }

    fn disturb(&mut self, ctx: &mut Ctx, what: Disturbance) {
        match what {
            Disturbance::Crash | Disturbance::Restart => {
                let alive = self.nodes.alive_slots();
                if alive.len() <= 1 {
                    bump(&mut self.tallies.protocol_events, "disturbance-skipped");
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
            Disturbance::CrashRoot => {
                let alive = self.nodes.alive_slots();
                let root = alive
                    .iter()
                    .copied()
                    .find(|&s| self.nodes.node(s).is_root());
                match root {
                    Some(root) if alive.len() > 1 => self.crash(ctx, root),
                    _ => bump(&mut self.tallies.protocol_events, "disturbance-skipped"),
                }
            }
            Disturbance::Add => {
                let slot = self.nodes.slots.len();
                let seeds = self.seeds_for(slot);
                self.spawn(ctx, slot, Some(seeds));
            }
            Disturbance::Partition(kind) => {
                let mut alive = self.nodes.alive_slots();
                if alive.len() < 2 {
                    bump(&mut self.tallies.protocol_events, "disturbance-skipped");
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
                self.wire.net.cut_off(&alive[..cut]);
                if self.first_cut.is_none() {
                    let heal = ctx.now + self.cfg.faults.partition_ms;
                    self.first_cut = Some((Vec::new(), ctx.now, heal));
                }
                let ids: Vec<u64> = alive[..cut].iter().map(|&s| s as u64 + 1).collect();
                ctx.trace.note(ctx.now, "partition", &ids);
                self.plan.push(Action::Heal);
                let at = ctx.now + self.cfg.faults.partition_ms;
                ctx.sched.at(at, Ev::Disturb(self.plan.len() as u32 - 1));
            }
            Disturbance::Freeze => self.freeze(ctx),
            Disturbance::RestartAll => self.restart_all(ctx),
            Disturbance::ClockStep => self.clock_step(ctx),
            Disturbance::Remove => self.remove(ctx),
        }
    }
}

impl QpidRoom {
    /// Just before the first partition heals: which nodes its paused side held, by their own
    /// account (no majority).
    fn note_paused_side(&mut self, now: Time) {
        let Some((paused, _, end)) = self.first_cut.as_mut() else {
            return;
        };
        if !paused.is_empty() || now < *end {
            return;
        }
        for (slot, s) in self.nodes.slots.iter().enumerate() {
            if let Some(node) = &s.node
                && node.pause(s.clock(now)) == Some(Pause::NoMajority)
            {
                paused.push(slot);
            }
        }
    }

    /// Mean wait of the visitors who joined during the first partition at a node on its paused
    /// side, and of those who joined on the other side meanwhile (ms).
    fn partition_waits(&self, ctx: &Ctx) -> Option<(f64, f64)> {
        let (cut, start, end) = self.first_cut.as_ref()?;
        let (mut sums, mut counts) = ([0u128; 2], [0u64; 2]);
        for (v, &slot) in self.visits.joined_at.iter().enumerate() {
            let v = v as u32;
            let joined = ctx.ledger.joined_at(v);
            let Some(at) = ctx.ledger.admitted_at(v) else {
                continue;
            };
            if slot == NONE || joined < *start || joined >= *end {
                continue;
            }
            let side = usize::from(!cut.contains(&(slot as usize)));
            sums[side] += u128::from(at.saturating_sub(joined));
            counts[side] += 1;
        }
        let mean = |i: usize| sums[i] as f64 / counts[i].max(1) as f64;
        Some((mean(0), mean(1)))
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
        for i in 0..self.cfg.operator.operator.len() {
            let at = ctx.start + self.cfg.operator.operator[i].at;
            self.plan_at(ctx, at, Action::Operate(i));
        }
    }

    fn join(&mut self, ctx: &mut Ctx, v: u32) -> Reply {
        let Some(s) = self.route(ctx, v) else {
            return Reply::Unavailable;
        };
        let now = self.nodes.clock(s, ctx.now);
        let r = self.nodes.node(s).join(now);
        ctx.trace.note(
            ctx.now,
            "join-at",
            &[u64::from(v), s as u64 + 1, u64::from(r.is_ok())],
        );
        if let Ok(c) = &r {
            if c.status == CheckInStatus::Admitted
                && let Some(p) = ctx.promises.as_mut()
            {
                p.straight_through(v);
            }
            // The fair order is by true arrival time (the node stamps its own clock's).
            ctx.ledger.joined(v, ctx.now, c.ticket.id.0);
            self.visits.joined_at[v as usize] = s as u32;
            self.visits.owner.insert(c.ticket.id, v);
        }
        self.drain(ctx, s);
        self.answer(ctx, v, r)
    }

    fn check_in(&mut self, ctx: &mut Ctx, v: u32) -> Reply {
        let Some(ticket) = self.visits.clients[v as usize].ticket() else {
            return self.join(ctx, v);
        };
        let Some(s) = self.route(ctx, v) else {
            return Reply::Unavailable;
        };
        let now = ctx.now;
        let clock = self.nodes.clock(s, now);
        let r = self.nodes.node(s).check_in(clock, &ticket);
        self.drain(ctx, s);
        let r = match r {
            Err(VisitorError::Elsewhere(owner)) => {
                // The node forwards the request to the ticket's owner; if the owner cannot be
                // reached, the visitor is queued here under their original join time.
                // Peer requests reach any live process, member or not (a node rejoining the
                // cluster still serves the visitors it holds).
                let owner_slot = slot_of_addr(&owner.addr, self.nodes.slots.len());
                let left = owner_slot.map(|o| self.nodes.slots[o].process);
                let o = owner_slot.filter(|&o| {
                    self.nodes.slots[o].node.is_some()
                        && self.wire.net.connected(s, o)
                        && !self.nodes.frozen(o, now)
                });
                let forwarded = o.map(|o| {
                    let clock = self.nodes.clock(o, now);
                    let r = self.nodes.node(o).check_in(clock, &ticket);
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
                        if let Some(left) = left {
                            ctx.ledger.moved_from(v, left);
                        }
                        let r = self.nodes.node(s).check_in_here(clock, &ticket);
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
        let ticket = self.visits.clients[v as usize].ticket()?;
        let now = ctx.now;
        // The node that said "admitted" issued this ticket; leave there, or anywhere if it
        // went away meanwhile (the ticket carries the eviction time).
        let owner = slot_of_id(ticket.node, self.nodes.slots.len())
            .filter(|&o| self.nodes.is_serving(o) && !self.nodes.frozen(o, now));
        let mut result = owner.map(|o| {
            let clock = self.nodes.clock(o, now);
            let r = self.nodes.node(o).leave(clock, &ticket);
            self.drain(ctx, o);
            r
        });
        if !matches!(result, Some(Ok(_))) {
            let s = self.route(ctx, v)?;
            let clock = self.nodes.clock(s, now);
            let r = self.nodes.node(s).leave_here(clock, &ticket);
            self.drain(ctx, s);
            result = Some(r);
        }
        if self.cfg.behaviours.replayers > 0.0 && ctx.plays(v, Play::Replay) {
            self.old_tickets.insert(v, ticket);
        }
        self.holds(ctx, v, result?, "leave")
    }

    fn refresh_pass(&mut self, ctx: &mut Ctx, v: u32) -> Option<Time> {
        let pass = self.visits.passes.get(v as usize)?.clone()?;
        let s = if ctx.plays(v, Play::Roam) {
            self.any_node(ctx)?
        } else {
            self.route(ctx, v)?
        };
        let clock = self.nodes.clock(s, ctx.now);
        let mut r = self.nodes.node(s).refresh_pass(clock, &pass);
        self.drain(ctx, s);
        if let Err(VisitorError::Elsewhere(counter)) = &r {
            // The node forwards the refresh to the one counting the pass; unreachable, the
            // visitor is told to retry (and keeps the pass they hold).
            let o = slot_of_addr(&counter.addr, self.nodes.slots.len())
                .filter(|&o| self.nodes.slots[o].node.is_some() && self.wire.net.connected(s, o));
            if let Some(o) = o {
                let clock = self.nodes.clock(o, ctx.now);
                r = self.nodes.node(o).refresh_pass_here(clock, &pass);
                self.drain(ctx, o);
            }
        }
        self.holds(ctx, v, r, "refresh")
    }

    fn replay_leave(&mut self, ctx: &mut Ctx, v: u32) {
        self.replayed_leave(ctx, v);
    }

    fn release_pass(&mut self, ctx: &mut Ctx, v: u32) -> bool {
        self.give_back(ctx, v)
    }

    fn check_released(&mut self, ctx: &mut Ctx, v: u32) {
        self.try_given_back(ctx, v);
    }

    fn touch(&self, v: u32) {
        // The visitor's ticket and node: the first things a check-in reads. Their record at
        // that node is fetched without waiting (its address is known without reading it).
        let client = &self.visits.clients[v as usize];
        if let Some(id) = client.ticket_id()
            && let Some(node) = self
                .nodes
                .slots
                .get(client.sticky as usize)
                .and_then(|s| s.node.as_ref())
        {
            node.room().prefetch(id);
        }
    }

    fn prefetch(&self, v: u32) {
        prefetch_index::prefetch_index(&self.visits.clients, v as usize);
    }

    fn next_check_in(&self, v: u32) -> Option<Time> {
        let (node, next_refresh) = self.visits.clients[v as usize].asked()?;
        Some(self.true_time(node, next_refresh))
    }

    fn claim_window_end(&self, v: u32) -> Option<(Time, Time)> {
        let ticket = self.visits.clients[v as usize].ticket()?;
        ticket.eviction_time?;
        let end = ticket.expires_at;
        Some((self.true_time(ticket.node, end), end))
    }

    fn last_pass_issued_at(&self) -> Option<Time> {
        self.last_pass_issued_at
    }

    fn handle(&mut self, ctx: &mut Ctx, ev: Ev) {
        match ev {
            Ev::Deliver(t) => self.deliver(ctx, *t),
            Ev::NodeTimer(slot) => self.timer(ctx, slot as usize),
            Ev::Disturb(i) => match self.plan[i as usize] {
                Action::Do(what) => self.disturb(ctx, what),
                Action::Revive(slot) => {
                    let seeds = self.nodes.serving_addrs(slot);
                    self.spawn(ctx, slot, Some(seeds));
                }
                Action::Heal => {
                    self.note_paused_side(ctx.now);
                    ctx.trace.note(ctx.now, "heal", &[]);
                    self.wire.net.heal();
                    self.healed_at = ctx.now;
                }
                Action::ReviveAll(slot, first) => self.revive(ctx, slot, first),
                Action::Stop(slot, process) => {
                    if self.nodes.slots[slot].process == process {
                        self.crash(ctx, slot);
                    }
                }
                Action::Operate(i) => self.operate(ctx, i),
                Action::Confirm(i, version, author) => self.confirm(ctx, i, version, author),
                Action::CheckReleased(i, apart) => self.check_refused(ctx, i, apart),
                Action::GiveBackAgain(i, tries) => self.give_back_again(ctx, i, tries),
            },
            Ev::Arrive(_) | Ev::Visitor(_) | Ev::Tick => {}
        }
    }

    fn finish(&mut self, ctx: &mut Ctx, report: &mut RunReport) {
        report.partition_waits = self.partition_waits(ctx);
        report.messages = self.wire.messages;
        report.network = self.wire.net.stats.clone();
        report.visitor_errors = std::mem::take(&mut self.tallies.visitor_errors);
        report.protocol_events = std::mem::take(&mut self.tallies.protocol_events);
        let (rounds, total, max) = self.tallies.rounds;
        report.rounds = rounds;
        report.round_ms_mean = if rounds == 0 {
            0.0
        } else {
            total as f64 / rounds as f64
        };
        report.round_ms_max = max;
        self.checker.finish(report);
    }
}
