//! The explored system: the nodes, the messages in flight (a multiset), the visitors, and the
//! steps that move it on.
//!
//! Time is a shared clock that only timer steps advance; messages carry no delivery time, so a
//! message may be delivered at any later point of the run (see [`super::TimerPolicy`] for when
//! the clock may move while messages are still in flight).

use std::fmt::{self, Write as _};
use std::hash::{Hash, Hasher};
use std::rc::Rc;

use waitingroom_core::{NodeId, QueueKey, Settings, Ticket, Time};
use waitingroom_distributed::testing;
use waitingroom_distributed::{Body, Event, Node, NodeConfig, Transmit};

use super::{Config, TimerPolicy, checks};

/// The eviction interval: rounds start at its multiples.
pub const EVICT: Time = 1_000;
/// Visitors check in this often.
const REFRESH: Time = 600;
/// A frozen node resumes no sooner than this after it froze: the others have removed it and
/// its grant has expired.
const RESUME_AFTER: Time = 3 * EVICT;
/// "Never" for timers a scenario does not need (probes without a crash, resends without loss):
/// far beyond any horizon, small enough that adding intervals to it cannot overflow.
const FAR: Time = 1 << 40;

/// A 128-bit fingerprint of everything fed to it: the bytes are buffered (most come from
/// `Debug` in many tiny pieces) and hashed at the end, eight bytes at a time in two independent
/// multiply-rotate lanes. Not a cryptographic hash, but states are not adversarial, and 128 bits
/// make a collision between a few million states vanishingly unlikely. SipHash over the same
/// bytes took a third of the exploration time.
pub struct Fp(Vec<u8>);

thread_local! {
    /// One buffer reused by every fingerprint: allocating and growing a fresh one each time was
    /// a visible share of the run.
    static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Fp {
    /// Runs `feed` on an empty fingerprint and returns the result.
    pub fn of(feed: impl FnOnce(&mut Fp)) -> u128 {
        let mut buf = BUFFER.with(|b| std::mem::take(&mut *b.borrow_mut()));
        buf.clear();
        let mut fp = Fp(buf);
        feed(&mut fp);
        let out = fp.finish128();
        BUFFER.with(|b| *b.borrow_mut() = fp.0);
        out
    }

    pub fn add(&mut self, v: impl Hash) {
        v.hash(self);
    }

    /// Feeds the `Debug` form of `v`.
    pub fn add_debug(&mut self, v: &impl fmt::Debug) {
        write!(self, "{v:?}").expect("buffering cannot fail");
    }

    pub fn finish128(&self) -> u128 {
        const K1: u64 = 0x9e37_79b9_7f4a_7c15;
        const K2: u64 = 0xc2b2_ae3d_27d4_eb4f;
        let (mut a, mut b) = (0x243f_6a88_85a3_08d3_u64, 0x1319_8a2e_0370_7344_u64);
        let mut chunks = self.0.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes(c.try_into().expect("eight bytes"));
            a = (a ^ w).wrapping_mul(K1).rotate_left(29);
            b = (b ^ w.rotate_left(32)).wrapping_mul(K2).rotate_left(31);
        }
        let mut tail = [0u8; 8];
        tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        let w = u64::from_le_bytes(tail) ^ (self.0.len() as u64);
        a = (a ^ w).wrapping_mul(K1);
        b = (b ^ w).wrapping_mul(K2);
        // Final avalanche so that every input bit reaches every output bit.
        let mix = |mut x: u64| {
            x ^= x >> 33;
            x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
            x ^= x >> 33;
            x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
            x ^ (x >> 33)
        };
        (u128::from(mix(a ^ b.rotate_left(17))) << 64) | u128::from(mix(b ^ a.rotate_left(41)))
    }
}

impl Hasher for Fp {
    fn write(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    fn finish(&self) -> u64 {
        self.finish128() as u64
    }
}

impl fmt::Write for Fp {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// One node and its cached fingerprint. Shared between states until a step touches it (then
/// copied and re-hashed): cloning every node on every step took a quarter of the run.
#[derive(Clone)]
pub struct Slot {
    pub node: Rc<Node>,
    fp: u128,
    /// False once crashed.
    pub live: bool,
    /// False for the joining node until it asks to join.
    pub started: bool,
}

impl Slot {
    fn new(node: Node, started: bool) -> Slot {
        let mut slot = Slot {
            node: Rc::new(node),
            fp: 0,
            live: true,
            started,
        };
        slot.rehash();
        slot
    }

    fn rehash(&mut self) {
        self.fp = Fp::of(|fp| {
            fp.add_debug(&self.node);
            // `Debug` hides the random generator's position; the waiting room's own generator
            // only draws ticket ids on joins, which the visitor state already tells apart.
            fp.add(self.node.rng_word_pos());
        });
    }

    pub fn active(&self) -> bool {
        self.live && self.started
    }
}

#[derive(Clone)]
pub struct Msg {
    pub fp: u128,
    pub t: Rc<Transmit>,
}

/// What the explorer knows of one visitor.
#[derive(Clone, Debug, Default)]
pub struct Visitor {
    /// The latest ticket, once joined.
    pub ticket: Option<Ticket>,
    /// Queued on the node that crashed, not admitted then: must check in elsewhere.
    pub orphan: bool,
    /// When the orphan checked in at a live node and was queued there again.
    pub requeued_at: Option<Time>,
}

/// One `Event::Admitted`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Admission {
    pub decided_at: Time,
    pub key: QueueKey,
    pub by: NodeId,
}

/// Everything that moves the system on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Deliver one copy of the message with this fingerprint.
    Deliver(u128),
    /// Lose one copy (lossy variant, within the budget).
    Drop(u128),
    /// Add one copy (lossy variant, within the budget).
    Dup(u128),
    /// Fire the node's due timers, moving the clock to its next deadline if it is in the future.
    Fire(NodeId),
    /// The next visitor joins (visitors join in index order).
    Join(usize),
    /// An orphaned visitor checks in at a live node and is queued there again.
    Recheck(usize),
    /// The node crashes (at most once per run).
    Crash(NodeId),
    /// The extra node asks to join the cluster.
    StartJoin,
    /// The node is cut off from the others (and frozen, in the `pause` scenario).
    Cut(NodeId),
    /// The cut heals (the frozen node resumes).
    Heal,
}

/// Deadlines of one run, derived from the configuration.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Visitors join and the extra node starts joining only before this.
    pub events_until: Time,
    /// A node crashes only before this: one interval after the last join, so that a crash can
    /// fall in the middle of the round that admits the last visitors.
    pub crash_until: Time,
    /// No timer fires after this.
    pub horizon: Time,
}

impl Timing {
    pub fn of(cfg: &Config) -> Timing {
        let events_until = cfg.event_rounds * EVICT;
        let crash_until = events_until + EVICT;
        // A crash is detected within about four probe periods (1.2 s), and the orphans check
        // in elsewhere within a refresh interval; the round after both admits them.
        let horizon = if cfg.partition {
            // Detection, then the cut-off node's places counted for a grant's and a ticket's
            // life (5 s here), then a round that admits again.
            crash_until + 8 * EVICT
        } else if cfg.crash {
            crash_until + 2 * EVICT
        } else {
            events_until + EVICT
        };
        Timing {
            events_until,
            crash_until,
            horizon: horizon + cfg.extra_rounds * EVICT,
        }
    }
}

#[derive(Clone)]
pub struct State {
    pub now: Time,
    /// Slot `i` holds node `i + 1`.
    pub slots: Vec<Slot>,
    /// Sorted by fingerprint: a canonical multiset.
    pub in_flight: Vec<Msg>,
    pub visitors: Vec<Visitor>,
    /// Sorted, for a canonical state.
    pub admissions: Vec<Admission>,
    pub crashed: Option<NodeId>,
    crashed_at: Time,
    /// The node cut off (and frozen, with `pause`), and whether the one cut happened.
    cut: Option<NodeId>,
    cut_used: bool,
    cut_at: Time,
    frozen: bool,
    /// A cut freezes the node too (the `pause` scenario).
    pause: bool,
    drops_left: u32,
    dups_left: u32,
    /// Deliver bare acknowledgements as soon as they are sent (see [`Config::eager_acks`]).
    eager_acks: bool,
}

/// Pass lifetime: a visitor of a node cut off stays on the site this long after its last
/// refresh.
pub const PASS_EXPIRY: Time = 0;

fn settings(cfg: &Config) -> Settings {
    Settings {
        target_on_site: cfg.target,
        refresh_interval_ms: REFRESH,
        // Visitors never check in without a reason here: their tickets must not expire.
        ticket_expiry_ms: cfg.ticket_expiry_ms,
        pass_expiry_ms: PASS_EXPIRY,
        pass_max_lifetime_ms: u64::MAX,
        eviction_interval_ms: EVICT,
        cleanup_interval_ms: FAR,
        admit_straight_through: false,
    }
}

fn node_config(id: u64, cfg: &Config) -> NodeConfig {
    let mut c = testing::config(id, 1, settings(cfg));
    c.admission = cfg.mode;
    let lossy = cfg.drops > 0 || cfg.dups > 0;
    // Probes only where a crash must be detected: every probe is one more timer instant.
    (c.probe_interval_ms, c.probe_timeout_ms) = if cfg.crash || cfg.partition {
        (300, 100)
    } else {
        (FAR, FAR / 2)
    };
    c.indirect_probes = 1;
    // Without loss every message arrives, so resends only add states.
    c.retransmit_ms = if lossy { 250 } else { FAR };
    c.join_retry_ms = if lossy { 500 } else { FAR };
    c.seed = id;
    c
}

/// Of the probes held for a frozen node, only each sender's latest: the earlier ones are taken
/// as lost, as an unanswered probe may be (SWIM tolerates that; the prober gave up on them long
/// ago and probed again). Answered on resume, each would add one more message to interleave
/// with the resumed node's rejoining, whose orders multiplied the paused-node scenario's
/// states. This narrows what is explored: runs where the stale probes were answered too are
/// left out. Every other held message is delivered.
fn latest_probes(mut held: Vec<Msg>) -> Vec<Msg> {
    let probe = |m: &Msg| match m.t.envelope.body {
        Body::Ping { nonce, .. } => Some((m.t.envelope.from.id, nonce)),
        _ => None,
    };
    let mut latest: Vec<(NodeId, u64)> = Vec::new();
    for (from, nonce) in held.iter().filter_map(probe) {
        match latest.iter_mut().find(|(f, _)| *f == from) {
            Some((_, n)) => *n = (*n).max(nonce),
            None => latest.push((from, nonce)),
        }
    }
    held.retain(|m| probe(m).is_none_or(|p| latest.contains(&p)));
    held
}

fn addr_id(addr: &str) -> NodeId {
    testing::id_of(addr).expect("addresses are n<id>")
}

fn msg_fp(t: &Transmit) -> u128 {
    Fp::of(|fp| fp.add_debug(t))
}

impl State {
    /// Forms the cluster with a plain FIFO driver (formation is not explored): node 1 starts it
    /// at t=0, node i asks to join at t=10(i-1), so the nodes' timers do not all coincide.
    /// With `join`, one more node is created but only asks to join as an explored step.
    pub fn initial(cfg: &Config) -> State {
        let mut s = State {
            now: 0,
            slots: Vec::new(),
            in_flight: Vec::new(),
            visitors: vec![Visitor::default(); cfg.visitors],
            admissions: Vec::new(),
            crashed: None,
            crashed_at: 0,
            cut: None,
            cut_used: false,
            cut_at: 0,
            frozen: false,
            pause: cfg.pause,
            drops_left: cfg.drops,
            dups_left: cfg.dups,
            eager_acks: false,
        };
        for id in 1..=cfg.nodes {
            s.now = (id - 1) * 10;
            let mut node = Node::new(node_config(id, cfg)).expect("valid config");
            if id == 1 {
                node.start_cluster(s.now);
            } else {
                node.join_cluster(s.now, vec![testing::addr(1)]);
            }
            s.slots.push(Slot::new(node, true));
            s.drain(NodeId(id));
            s.settle_fifo();
        }
        if cfg.join {
            let id = cfg.nodes + 1;
            let node = Node::new(node_config(id, cfg)).expect("valid config");
            s.slots.push(Slot::new(node, false));
        }
        s.eager_acks = cfg.eager_acks();
        s
    }

    /// Delivers everything in flight in send order, at the current instant.
    fn settle_fifo(&mut self) {
        let mut queue: std::collections::VecDeque<Msg> = std::mem::take(&mut self.in_flight).into();
        while let Some(m) = queue.pop_front() {
            let to = addr_id(&m.t.to_addr);
            let now = self.now;
            let _ = self.node_mut(to).handle_message(now, m.t.envelope.clone());
            self.drain(to);
            queue.extend(std::mem::take(&mut self.in_flight));
        }
    }

    pub fn slot(&mut self, id: NodeId) -> &mut Slot {
        &mut self.slots[(id.0 - 1) as usize]
    }

    /// The node, copied first if another state shares it.
    fn node_mut(&mut self, id: NodeId) -> &mut Node {
        Rc::make_mut(&mut self.slot(id).node)
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.slots[(id.0 - 1) as usize].node
    }

    /// The nodes that run (started, not crashed).
    pub fn active(&self) -> Vec<&Node> {
        self.slots
            .iter()
            .filter(|s| s.active())
            .map(|s| &*s.node)
            .collect()
    }

    pub fn fingerprint(&self) -> u128 {
        Fp::of(|fp| {
            fp.add((self.now, self.crashed, self.crashed_at));
            fp.add((self.cut, self.cut_used, self.cut_at, self.frozen));
            fp.add((self.drops_left, self.dups_left));
            for s in &self.slots {
                fp.add((s.fp, s.live, s.started));
            }
            for m in &self.in_flight {
                fp.add(m.fp);
            }
            fp.add_debug(&self.visitors);
            fp.add_debug(&self.admissions);
        })
    }

    /// Collects what node `id` sent and emitted; returns the violations seen in its events.
    fn drain(&mut self, id: NodeId) -> Vec<String> {
        let mut problems = Vec::new();
        let mut sent = Vec::new();
        let mut events = Vec::new();
        {
            let node = self.node_mut(id);
            while let Some(t) = node.poll_transmit() {
                sent.push(t);
            }
            while let Some(e) = node.poll_event() {
                events.push(e);
            }
            self.slot(id).rehash();
        }
        let mut acks = Vec::new();
        for t in sent {
            let to = addr_id(&t.to_addr);
            let reachable = self
                .slots
                .get((to.0 as usize).wrapping_sub(1))
                .is_some_and(|s| s.live);
            if reachable && self.eager_acks && matches!(t.envelope.body, Body::ChannelAck { .. }) {
                acks.push((to, t.envelope));
            } else if reachable {
                self.enqueue(Msg {
                    fp: msg_fp(&t),
                    t: Rc::new(t),
                });
            }
        }
        for (to, envelope) in acks {
            let now = self.now;
            let _ = self.node_mut(to).handle_message(now, envelope);
            problems.extend(self.drain(to));
        }
        for e in events {
            if let Event::Admitted {
                key, decided_at, ..
            } = e
            {
                problems.extend(self.record_admission(Admission {
                    decided_at,
                    key,
                    by: id,
                }));
            }
        }
        problems
    }

    fn enqueue(&mut self, m: Msg) {
        let at = self.in_flight.partition_point(|x| x.fp <= m.fp);
        self.in_flight.insert(at, m);
    }

    /// No visitor is let out twice, unless the node that let them out first has crashed (its
    /// visitor could not learn it and checked in elsewhere).
    fn record_admission(&mut self, a: Admission) -> Option<String> {
        let earlier = self
            .admissions
            .iter()
            .find(|x| x.key.ticket == a.key.ticket)
            .cloned();
        let joined = self
            .visitors
            .iter()
            .any(|v| v.ticket.as_ref().is_some_and(|t| t.id == a.key.ticket));
        let at = self.admissions.partition_point(|x| *x <= a);
        self.admissions.insert(at, a.clone());
        if !joined {
            return Some(format!("admitted an unknown ticket: {a:?}"));
        }
        match earlier {
            Some(first) if self.slots[(first.by.0 - 1) as usize].live => Some(format!(
                "visitor {} admitted twice: first {first:?}, again {a:?}",
                a.key.ticket
            )),
            _ => None,
        }
    }

    /// Whether no event is left to come (visitors joined, crash and join done or past their
    /// deadline, orphans checked in or past theirs).
    pub fn events_over(&self, cfg: &Config, timing: &Timing) -> bool {
        let visitors =
            self.visitors.iter().all(|v| v.ticket.is_some()) || self.now >= timing.events_until;
        let crash = !cfg.crash || self.crashed.is_some() || self.now >= timing.crash_until;
        let join = !cfg.join
            || self.slots.last().is_some_and(|s| s.started)
            || self.now >= timing.events_until;
        let cut = !cfg.partition
            || (self.cut_used && !self.frozen)
            || (!self.cut_used && self.now >= timing.crash_until);
        let orphans = self.now >= self.recheck_until()
            || self
                .visitors
                .iter()
                .all(|v| !v.orphan || v.requeued_at.is_some());
        visitors && crash && join && cut && orphans
    }

    /// Whether the message can cross now: not across the cut.
    fn deliverable(&self, m: &Msg) -> bool {
        self.cut
            .is_none_or(|c| (m.t.envelope.from.id == c) == (addr_id(&m.t.to_addr) == c))
    }

    /// Whether `id` is frozen (its timers wait).
    fn is_frozen(&self, id: NodeId) -> bool {
        self.frozen && self.cut == Some(id)
    }

    /// Orphans check in elsewhere before this: their browser checks in every refresh interval,
    /// and the first check-in after the crash fails over to another node.
    fn recheck_until(&self) -> Time {
        self.crashed_at + REFRESH
    }

    /// The steps possible from here, in a deterministic order.
    pub fn enabled(&self, cfg: &Config, timing: &Timing) -> Vec<Step> {
        // Only a frozen node resumes, at the first step once the others have had time to count
        // it out: what it does with its old state is the point (a partition's heal and merge
        // are the simulator's; resuming at any instant is beyond what a test can visit).
        if self.frozen && self.now >= self.cut_at + RESUME_AFTER {
            return vec![Step::Heal];
        }
        let mut steps = Vec::new();
        if !cfg.to_horizon && self.events_over(cfg, timing) && checks::all_in(self, cfg) {
            // Everyone is in, the cluster is settled and quiet, and nothing more will happen:
            // what follows is idle probing and empty counts.
            return steps;
        }
        let mut distinct: Vec<u128> = self.in_flight.iter().map(|m| m.fp).collect();
        distinct.dedup();
        let mut deliverable: Vec<u128> = self
            .in_flight
            .iter()
            .filter(|m| self.deliverable(m))
            .map(|m| m.fp)
            .collect();
        deliverable.dedup();
        steps.extend(deliverable.iter().map(|&fp| Step::Deliver(fp)));
        if self.drops_left > 0 {
            steps.extend(distinct.iter().map(|&fp| Step::Drop(fp)));
        }
        if self.dups_left > 0 {
            steps.extend(distinct.iter().map(|&fp| Step::Dup(fp)));
        }
        let deadlines: Vec<(NodeId, Time)> = self
            .slots
            .iter()
            .filter(|s| s.active() && !self.is_frozen(s.node.id()))
            .filter_map(|s| s.node.poll_timeout().map(|t| (s.node.id(), t)))
            .collect();
        let earliest = deadlines.iter().map(|d| d.1).min();
        let may_advance = match cfg.timers {
            TimerPolicy::Quiet => deliverable.is_empty(),
            TimerPolicy::Anytime => true,
        };
        for &(id, due) in &deadlines {
            // A due timer fires in any order with the deliveries of its instant; the clock moves
            // on to the next deadline only when the policy allows and nothing is due before.
            let fire_now = due <= self.now;
            let advance = may_advance && Some(due) == earliest && due <= timing.horizon;
            if fire_now || advance {
                steps.push(Step::Fire(id));
            }
        }
        let before_events = self.now < timing.events_until;
        if let Some(v) = self.visitors.iter().position(|v| v.ticket.is_none())
            && before_events
            && (!cfg.quiet_joins || self.in_flight.is_empty())
            && self.visitor_node(v).is_some()
        {
            steps.push(Step::Join(v));
        }
        if self.now < self.recheck_until() {
            for (v, visitor) in self.visitors.iter().enumerate() {
                if visitor.orphan && visitor.requeued_at.is_none() && self.visitor_node(v).is_some()
                {
                    steps.push(Step::Recheck(v));
                }
            }
        }
        self.disturbances(cfg, timing, &mut steps);
        steps
    }

    /// The scenario's disturbances possible now: a crash, a node asking to join, a cut.
    fn disturbances(&self, cfg: &Config, timing: &Timing, steps: &mut Vec<Step>) {
        let victims = || {
            self.slots
                .iter()
                .filter(|s| s.active())
                .map(|s| s.node.id())
                .filter(|id| cfg.crash_victim.is_none_or(|v| v == id.0))
        };
        if cfg.crash && self.crashed.is_none() && self.now < timing.crash_until {
            steps.extend(victims().map(Step::Crash));
        }
        if cfg.join
            && self.now < timing.events_until
            && self.slots.last().is_some_and(|s| !s.started)
        {
            steps.push(Step::StartJoin);
        }
        // A node freezes only while every message in flight is on its way to it (at any
        // instant; none in flight too): it stops before reading what it was sent, a round's
        // result to it among them, which it then reads on resuming. Freezing it with other
        // messages in flight multiplies the states past what can be visited.
        let may_freeze = |id: NodeId| self.in_flight.iter().all(|m| addr_id(&m.t.to_addr) == id);
        if cfg.partition && !self.cut_used && self.now < timing.crash_until {
            steps.extend(
                victims()
                    .filter(|&id| !cfg.pause || may_freeze(id))
                    .map(Step::Cut),
            );
        }
    }

    /// Where visitor `v` goes: the live members in id order, taken round-robin by visitor index
    /// (fixed, so that visitors add no branching of their own beyond *when* they come).
    fn visitor_node(&self, v: usize) -> Option<NodeId> {
        let members: Vec<NodeId> = self
            .slots
            .iter()
            .filter(|s| s.active() && s.node.is_member() && !self.is_frozen(s.node.id()))
            .map(|s| s.node.id())
            .collect();
        (!members.is_empty()).then(|| members[v % members.len()])
    }

    fn take(&mut self, fp: u128) -> Msg {
        let at = self
            .in_flight
            .iter()
            .position(|m| m.fp == fp)
            .expect("the step names a message in flight");
        self.in_flight.remove(at)
    }

    /// Applies `step`; returns the violations it revealed on the way (double admissions).
    pub fn apply(&mut self, step: Step) -> Vec<String> {
        match step {
            Step::Deliver(fp) => {
                let m = self.take(fp);
                let to = addr_id(&m.t.to_addr);
                let now = self.now;
                let _ = self.node_mut(to).handle_message(now, m.t.envelope.clone());
                self.drain(to)
            }
            Step::Drop(fp) => {
                self.take(fp);
                self.drops_left -= 1;
                Vec::new()
            }
            Step::Dup(fp) => {
                let m = self.take(fp);
                self.enqueue(m.clone());
                self.enqueue(m);
                self.dups_left -= 1;
                Vec::new()
            }
            Step::Fire(id) => {
                let due = self
                    .node(id)
                    .poll_timeout()
                    .expect("enabled only with a timer");
                self.now = self.now.max(due);
                let now = self.now;
                self.node_mut(id).handle_timeout(now);
                self.drain(id)
            }
            Step::Join(v) => {
                let id = self.visitor_node(v).expect("enabled only with a member");
                let now = self.now;
                let answer = self.node_mut(id).join(now).expect("members accept joins");
                self.visitors[v].ticket = Some(answer.ticket);
                self.drain(id)
            }
            Step::Recheck(v) => {
                let id = self.visitor_node(v).expect("enabled only with a member");
                let now = self.now;
                let ticket = self.visitors[v].ticket.clone().expect("orphans joined");
                let answer = self
                    .node_mut(id)
                    .check_in_here(now, &ticket)
                    .expect("a member takes an orphaned ticket");
                let visitor = &mut self.visitors[v];
                visitor.ticket = Some(answer.ticket);
                visitor.requeued_at = Some(now);
                self.drain(id)
            }
            Step::Crash(id) => self.crash(id),
            Step::Cut(id) => {
                self.cut = Some(id);
                self.cut_used = true;
                self.cut_at = self.now;
                self.frozen = self.pause;
                Vec::new()
            }
            Step::Heal => self.resume(),
            Step::StartJoin => self.start_join(),
        }
    }

    /// The extra node asks the running ones to let it join.
    fn start_join(&mut self) -> Vec<String> {
        let seeds = self
            .slots
            .iter()
            .filter(|s| s.active())
            .map(|s| s.node.contact().addr.to_string())
            .collect();
        let now = self.now;
        let slot = self.slots.last_mut().expect("a joining node exists");
        slot.started = true;
        let id = slot.node.id();
        Rc::make_mut(&mut slot.node).join_cluster(now, seeds);
        self.drain(id)
    }

    /// Node `id` crashes: what was on its way to it is lost, and its visitors not let in yet
    /// are orphans (they check in elsewhere).
    fn crash(&mut self, id: NodeId) -> Vec<String> {
        self.crashed = Some(id);
        self.crashed_at = self.now;
        let slot = self.slot(id);
        slot.live = false;
        self.in_flight.retain(|m| addr_id(&m.t.to_addr) != id);
        let admitted: Vec<_> = self.admissions.iter().map(|a| a.key.ticket).collect();
        for v in &mut self.visitors {
            if let Some(t) = &v.ticket
                && t.node == id
                && !admitted.contains(&t.id)
            {
                v.orphan = true;
            }
        }
        Vec::new()
    }

    /// The frozen node resumes: it handles what reached it meanwhile, all at once in one fixed
    /// order (whatever order is the same stale news; every order would be beyond a test's
    /// reach), with the clock where it has got to; its timers fire at its next step.
    fn resume(&mut self) -> Vec<String> {
        let Some(id) = self.cut.take() else {
            return Vec::new();
        };
        self.frozen = false;
        let (mine, rest): (Vec<Msg>, Vec<Msg>) = std::mem::take(&mut self.in_flight)
            .into_iter()
            .partition(|m| addr_id(&m.t.to_addr) == id);
        self.in_flight = rest;
        let mine = latest_probes(mine);
        let mut problems = Vec::new();
        for m in mine {
            let now = self.now;
            let _ = self.node_mut(id).handle_message(now, m.t.envelope.clone());
            problems.extend(self.drain(id));
        }
        problems
    }

    /// A line a person can follow, for traces.
    pub fn describe(&self, step: Step) -> String {
        let t = self.now;
        match step {
            Step::Deliver(fp) | Step::Drop(fp) | Step::Dup(fp) => {
                let m = self
                    .in_flight
                    .iter()
                    .find(|m| m.fp == fp)
                    .expect("message in flight");
                let verb = match step {
                    Step::Deliver(_) => "deliver",
                    Step::Drop(_) => "DROP",
                    _ => "DUPLICATE",
                };
                format!(
                    "t={t} {verb} {} -> {}: {:?}",
                    m.t.envelope.from.addr, m.t.to_addr, m.t.envelope.body
                )
            }
            Step::Fire(id) => {
                let due = self.node(id).poll_timeout().unwrap_or(t);
                format!("t={} timers of n{id}", t.max(due))
            }
            Step::Join(v) => format!(
                "t={t} visitor {v} joins at n{}",
                self.visitor_node(v).map_or(0, |n| n.0)
            ),
            Step::Recheck(v) => format!(
                "t={t} orphan {v} checks in at n{}",
                self.visitor_node(v).map_or(0, |n| n.0)
            ),
            Step::Crash(id) => format!("t={t} CRASH n{id}"),
            Step::StartJoin => format!("t={t} n{} asks to join", self.slots.len()),
            Step::Cut(id) if self.pause => format!("t={t} FREEZE n{id}"),
            Step::Cut(id) => format!("t={t} CUT OFF n{id}"),
            Step::Heal => format!("t={t} resume (held messages delivered)"),
        }
    }
}
