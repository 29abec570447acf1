//! A minimal deterministic network for protocol scenario tests: fixed latency, no loss,
//! delivery in send order per tick. (The simulator crate has the full network model.)

use std::collections::{BTreeMap, BTreeSet};

use waitingroom_core::{NodeId, Settings, TicketId, Time};
use waitingroom_distributed::invariants::{self, Violation};
use waitingroom_distributed::{AdmissionMode, Event, Node, NodeConfig, Transmit};

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
        };
        for id in 1..=n {
            net.add_node(id, seed);
            net.run_for(50);
        }
        net
    }

    pub fn add_node(&mut self, id: u64, seed: u64) {
        let mut cfg = NodeConfig::new(NodeId(id), 1, format!("n{id}"), self.settings.clone());
        cfg.admission = self.mode;
        cfg.seed = seed * 1000 + id;
        let mut node = Node::new(cfg).unwrap();
        if self.nodes.is_empty() {
            node.start_cluster(self.now);
        } else {
            let seeds = self.nodes.keys().map(|k| format!("n{}", k.0)).collect();
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
        while let Some(t) = node.poll_transmit() {
            self.seq += 1;
            self.in_flight
                .insert((self.now + self.latency, self.seq), t);
        }
        while let Some(e) = node.poll_event() {
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
                    node.handle_message(self.now, t.envelope);
                    self.drain(to);
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
            }
        }
        self.now = end;
    }

    /// Ticket ids in admission order.
    pub fn admission_order(&self) -> Vec<TicketId> {
        let mut a = self.admitted.clone();
        a.sort();
        a.into_iter().map(|(_, k)| k.ticket).collect()
    }

    pub fn quiet(&self) -> bool {
        self.in_flight.is_empty()
    }

    /// Invariants, with the network treated as quiet.
    pub fn check_quiet(&self) -> Vec<Violation> {
        invariants::check(&self.live(), true)
    }
}
