//! Peer messages: anyone who can reach a node's peer port can send these, so a node must
//! survive any message that decodes, whatever its content.

use std::collections::VecDeque;
use std::sync::OnceLock;

use waitingroom_core::{NodeId, Settings, Time};
use waitingroom_distributed::{Envelope, Node, NodeConfig};

/// Nodes to aim the messages at, each caught in a different moment of a small cluster's life,
/// with the time it was caught at. Built once; every input gets fresh copies.
pub(crate) struct Templates {
    pub nodes: Vec<(Node, Time)>,
    /// Every envelope the cluster sent while being built: the seed corpus.
    pub traffic: Vec<Envelope>,
}

pub(crate) fn templates() -> &'static Templates {
    static T: OnceLock<Templates> = OnceLock::new();
    T.get_or_init(build)
}

fn config(id: u64) -> NodeConfig {
    let settings = Settings {
        target_on_site: 5,
        refresh_interval_ms: 600,
        ticket_expiry_ms: 10_000,
        pass_expiry_ms: 2_000,
        eviction_interval_ms: 1_000,
        cleanup_interval_ms: 1_000,
        admit_straight_through: true,
    };
    let mut c = NodeConfig::new(NodeId(id), 1, format!("n{id}"), settings);
    c.seed = id;
    c
}

/// A three-node cluster on a FIFO network with no delay, visitors on every node, run through a
/// few eviction rounds; snapshots of each member, of a member in the middle of a count, and of
/// a node still asking to join.
fn build() -> Templates {
    let mut net = Net::default();
    for id in 1..=3 {
        let mut node = Node::new(config(id)).expect("valid config");
        if id == 1 {
            node.start_cluster(net.now);
        } else {
            node.join_cluster(net.now, vec!["n1".into()]);
        }
        net.nodes.push(node);
        net.deliver_all();
    }
    for i in 0..12 {
        net.now += 37;
        let at = i % 3;
        let _ = net.nodes[at].join(net.now);
        net.collect(at);
        net.deliver_all();
    }
    let mut nodes = Vec::new();
    // Run to the eviction boundary and catch the root right after it starts a count.
    net.run_until(1_000, false);
    if let Some(root) = net.nodes.iter().position(Node::is_root) {
        let now = net.now;
        net.nodes[root].handle_timeout(now);
        nodes.push((net.nodes[root].clone(), now));
        net.collect(root);
        net.deliver_all();
    }
    net.run_until(3_500, true);
    nodes.extend(net.nodes.iter().map(|n| (n.clone(), net.now)));
    let mut joining = Node::new(config(4)).expect("valid config");
    joining.join_cluster(net.now, vec!["n1".into()]);
    nodes.push((joining, net.now));
    Templates {
        nodes,
        traffic: net.traffic,
    }
}

#[derive(Default)]
struct Net {
    now: Time,
    nodes: Vec<Node>,
    queue: VecDeque<waitingroom_distributed::Transmit>,
    traffic: Vec<Envelope>,
}

impl Net {
    fn collect(&mut self, at: usize) {
        while let Some(t) = self.nodes[at].poll_transmit() {
            self.traffic.push(t.envelope.clone());
            self.queue.push_back(t);
        }
        while self.nodes[at].poll_event().is_some() {}
    }

    fn deliver_all(&mut self) {
        for at in 0..self.nodes.len() {
            self.collect(at);
        }
        while let Some(t) = self.queue.pop_front() {
            let Some(at) = self
                .nodes
                .iter()
                .position(|n| n.contact().addr == t.to_addr)
            else {
                continue;
            };
            let now = self.now;
            let _ = self.nodes[at].handle_message(now, t.envelope);
            self.collect(at);
        }
    }

    /// Fires timers up to `end` (inclusive or not), delivering everything after each.
    fn run_until(&mut self, end: Time, inclusive: bool) {
        loop {
            let next = self.nodes.iter().filter_map(Node::poll_timeout).min();
            match next {
                Some(t) if t < end || (inclusive && t == end) => self.now = t,
                _ => break,
            }
            for at in 0..self.nodes.len() {
                let now = self.now;
                self.nodes[at].handle_timeout(now);
            }
            self.deliver_all();
        }
        self.now = end;
    }
}

/// Input: a steering byte, then JSON. The steering byte picks the template node (bits 0-2),
/// whether to address the envelope to it (bit 3: messages for someone else are dropped on
/// arrival, which the fuzzer would otherwise spend most inputs on), and whether to make the
/// sender one of its members (bit 4, member chosen by bits 5-7).
pub fn peer_message(data: &[u8]) {
    let Some((&steer, json)) = data.split_first() else {
        return;
    };
    let Ok(env) = serde_json::from_slice::<Envelope>(json) else {
        return;
    };
    round_trip(&env);
    feed(steer, vec![env]);
}

/// Input: a steering byte (as for [`peer_message`], applied to every envelope), then a JSON
/// array of envelopes, delivered in order.
pub fn peer_batch(data: &[u8]) {
    let Some((&steer, json)) = data.split_first() else {
        return;
    };
    let Ok(batch) = serde_json::from_slice::<Vec<Envelope>>(json) else {
        return;
    };
    batch.iter().for_each(round_trip);
    feed(steer, batch);
}

/// What decodes must encode to something that decodes to the same envelope.
fn round_trip(env: &Envelope) {
    let text = serde_json::to_vec(env).expect("an envelope always encodes");
    let again: Envelope = serde_json::from_slice(&text).expect("an encoded envelope decodes");
    assert_eq!(&again, env);
}

fn feed(steer: u8, batch: Vec<Envelope>) {
    let t = templates();
    let (template, start) = &t.nodes[usize::from(steer & 7) % t.nodes.len()];
    let mut node = template.clone();
    let mut now = *start;
    let members: Vec<_> = node.membership().members.values().cloned().collect();
    for mut env in batch {
        if steer & 8 != 0 {
            env.to = node.id();
            env.to_incarnation = node.contact().incarnation;
        }
        if steer & 16 != 0 && !members.is_empty() {
            env.from = members[usize::from(steer >> 5) % members.len()].clone();
        }
        let _ = node.handle_message(now, env);
        drain(&mut node);
        now += 1;
    }
    // Let the node act on what it was told: a few rounds of its timers and a visitor.
    for _ in 0..8 {
        let Some(due) = node.poll_timeout() else {
            break;
        };
        now = now.max(due);
        node.handle_timeout(now);
        drain(&mut node);
    }
    let _ = node.join(now);
    let _ = node.status();
    drain(&mut node);
}

fn drain(node: &mut Node) {
    while node.poll_transmit().is_some() {}
    while node.poll_event().is_some() {}
}

/// Input: a steering byte (as for [`peer_message`]), then choices. Well-typed messages with
/// hostile content, which random JSON rarely reaches: up to four envelopes are taken from the
/// template cluster's own traffic (so they fit the link state of the template nodes), and each
/// number in them is kept or replaced, by the next input byte, with an extreme or arbitrary
/// value; arrays may lose or repeat an element.
pub fn peer_values(data: &[u8]) {
    let Some((&steer, rest)) = data.split_first() else {
        return;
    };
    let traffic = &templates().traffic;
    let mut bytes = rest.iter().copied();
    let count = 1 + usize::from(bytes.next().unwrap_or(0) % 4);
    let mut batch = Vec::with_capacity(count);
    for _ in 0..count {
        let pick = u16::from_le_bytes([bytes.next().unwrap_or(0), bytes.next().unwrap_or(0)]);
        let env = &traffic[usize::from(pick) % traffic.len()];
        let mut value = serde_json::to_value(env).expect("an envelope always encodes");
        tweak(&mut value, &mut bytes);
        if let Ok(env) = serde_json::from_value::<Envelope>(value) {
            batch.push(env);
        }
    }
    feed(steer, batch);
}

fn tweak(v: &mut serde_json::Value, bytes: &mut impl Iterator<Item = u8>) {
    use serde_json::Value;
    match v {
        Value::Number(n) => {
            let choice = bytes.next().unwrap_or(0);
            if choice < 0x80 {
                return;
            }
            let mut word = || {
                let mut b = [0u8; 8];
                b.iter_mut().for_each(|x| *x = bytes.next().unwrap_or(0));
                u64::from_le_bytes(b)
            };
            if let Some(x) = n.as_u64() {
                let new = match choice % 8 {
                    0 => 0,
                    1 => x.wrapping_add(1),
                    2 => x.wrapping_sub(1),
                    3 => u64::MAX,
                    4 => u64::MAX / 2 + 1,
                    5 => u64::from(u32::MAX),
                    _ => word(),
                };
                *v = Value::from(new);
            } else if let Some(x) = n.as_i64() {
                let new = match choice % 4 {
                    0 => i64::MIN,
                    1 => i64::MAX,
                    2 => x.wrapping_neg(),
                    _ => word() as i64,
                };
                *v = Value::from(new);
            }
        }
        Value::Array(items) => {
            for item in items.iter_mut() {
                tweak(item, bytes);
            }
            match bytes.next().unwrap_or(0) {
                0xff => {
                    items.pop();
                }
                0xfe if !items.is_empty() => items.push(items[0].clone()),
                _ => {}
            }
        }
        Value::Object(fields) => {
            for (_, field) in fields.iter_mut() {
                tweak(field, bytes);
            }
        }
        _ => {}
    }
}
