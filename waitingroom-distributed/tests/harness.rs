//! A minimal deterministic network for protocol scenario tests: fixed latency, no loss,
//! delivery in send order per tick. (The simulator crate has the full network model.)

use std::collections::{BTreeMap, BTreeSet};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use waitingroom_core::{CheckInStatus, NodeId, Settings, Ticket, TicketId, Time};
use waitingroom_distributed::invariants::{self, Violation};
use waitingroom_distributed::{AdmissionMode, Event, Node, NodeConfig, Transmit, VisitorError};

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

pub struct Net {
    pub now: Time,
    pub latency: Time,
    nodes: BTreeMap<NodeId, Node>,
    dead: BTreeSet<NodeId>,
    cut: BTreeSet<(NodeId, NodeId)>,
    in_flight: BTreeMap<(Time, u64), Transmit>,
    seq: u64,
    pub admitted: Vec<(Time, waitingroom_core::QueueKey)>,
    pub events: Vec<(NodeId, Event)>,
    settings: Settings,
    mode: AdmissionMode,
    pub faults: Faults,
    rng: ChaCha8Rng,
    incarnations: BTreeMap<NodeId, u64>,
    pub violations_after_recovery: Vec<Violation>,
    pub check_every_event: bool,
}

#[allow(dead_code)]
impl Net {
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
            settings,
            mode,
            faults: Faults::default(),
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

    pub fn add_node(&mut self, id: u64, seed: u64) {
        let inc = self.incarnations.get(&NodeId(id)).map_or(1, |i| i + 1);
        self.incarnations.insert(NodeId(id), inc);
        self.dead.remove(&NodeId(id));
        let mut cfg = NodeConfig::new(NodeId(id), inc, format!("n{id}"), self.settings.clone());
        cfg.admission = self.mode;
        cfg.seed = seed * 1000 + id;
        let mut node = Node::new(cfg).unwrap();
        if self.nodes.is_empty() {
            node.start_cluster(self.now);
        } else {
            let seeds = self
                .nodes
                .keys()
                .filter(|k| !self.dead.contains(k) && k.0 != id)
                .map(|k| format!("n{}", k.0))
                .collect();
            node.join_cluster(self.now, seeds);
        }
        self.nodes.insert(NodeId(id), node);
        self.drain(NodeId(id));
    }

    pub fn ids(&self) -> Vec<NodeId> {
        self.nodes
            .keys()
            .copied()
            .filter(|id| !self.dead.contains(id))
            .collect()
    }

    pub fn node(&mut self, id: NodeId) -> &mut Node {
        self.nodes.get_mut(&id).unwrap()
    }

    /// Runs a visitor operation on node `id` now, then collects what it sent.
    pub fn with<R>(&mut self, id: NodeId, f: impl FnOnce(&mut Node, Time) -> R) -> R {
        let now = self.now;
        let r = f(self.nodes.get_mut(&id).unwrap(), now);
        self.drain(id);
        r
    }

    pub fn kill(&mut self, id: NodeId) {
        self.dead.insert(id);
    }

    pub fn cut(&mut self, a: NodeId, b: NodeId) {
        self.cut.insert((a, b));
        self.cut.insert((b, a));
    }

    pub fn heal(&mut self) {
        self.cut.clear();
    }

    pub fn live(&self) -> Vec<&Node> {
        self.nodes
            .iter()
            .filter(|(id, _)| !self.dead.contains(id))
            .map(|(_, n)| n)
            .collect()
    }

    fn drain(&mut self, id: NodeId) {
        let node = self.nodes.get_mut(&id).unwrap();
        let mut sent = Vec::new();
        while let Some(t) = node.poll_transmit() {
            sent.push(t);
        }
        let mut events = Vec::new();
        while let Some(e) = node.poll_event() {
            events.push(e);
        }
        for t in sent {
            if self.faults.loss > 0.0 && self.rng.random::<f64>() < self.faults.loss {
                continue;
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
                self.in_flight
                    .insert((self.now + self.latency + jitter, self.seq), t.clone());
            }
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
                (a, b) => a.or(b).unwrap_or(end),
            };
            if next > end {
                break;
            }
            self.now = next;
            while let Some((&k, _)) = self.in_flight.iter().next() {
                if k.0 > self.now {
                    break;
                }
                let t = self.in_flight.remove(&k).unwrap();
                let to = NodeId(t.to_addr[1..].parse().unwrap());
                let from = t.envelope.from.id;
                if self.dead.contains(&to) || self.cut.contains(&(from, to)) {
                    continue;
                }
                if let Some(node) = self.nodes.get_mut(&to) {
                    let _ = node.handle_message(self.now, t.envelope);
                    self.drain(to);
                    self.check();
                }
            }
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
        self.now = end;
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
        if invariants::converged(&live) {
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
    pub tickets: Vec<Ticket>,
    pub admitted: Vec<bool>,
    next_refresh: Vec<Time>,
}

#[allow(dead_code)]
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
        let c = net.with(node, |n, now| n.join(now)).unwrap();
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
                        net.with(t.node, |n, now| n.leave(now, &t)).unwrap();
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

    /// Runs `ms` of time with visitors checking in.
    pub fn run(&mut self, net: &mut Net, ms: Time) {
        let end = net.now + ms;
        while net.now < end {
            net.run_for(50.min(end - net.now));
            self.tick(net);
        }
    }

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
