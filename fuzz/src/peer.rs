//! Peer messages: anyone who can reach a node's peer port can send these, so a node must
//! survive any message that decodes, whatever its content.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::OnceLock;

use waitingroom_core::{NodeId, Settings, Time};
use waitingroom_distributed::testing::{self, Net};
use waitingroom_distributed::{AdmissionMode, Envelope, Node};

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

fn settings() -> Settings {
    Settings {
        target_on_site: 5,
        refresh_interval_ms: 600,
        ticket_expiry_ms: 10_000,
        pass_expiry_ms: 2_000,
        pass_max_lifetime_ms: u64::MAX,
        eviction_interval_ms: 1_000,
        cleanup_interval_ms: 1_000,
        admit_straight_through: true,
    }
}

/// A three-node cluster on the protocol crate's test rig (no delay), visitors on every node,
/// run through a few eviction rounds; snapshots of each member, of a member in the middle of a
/// count, and of a node still asking to join.
fn build() -> Templates {
    let traffic = Rc::new(RefCell::new(Vec::new()));
    let mut net = Net::new(0, settings(), AdmissionMode::Range, 0);
    net.latency = 0;
    let sent = traffic.clone();
    net.tamper(move |env| sent.borrow_mut().push(env.clone()));
    for id in 1..=3 {
        net.add_node(id, 0);
        net.run_for(0);
    }
    for i in 0..12 {
        net.run_for(37);
        let _ = net.with(NodeId(i % 3 + 1), |n, now| n.join(now));
        net.run_for(0);
    }
    let mut nodes = Vec::new();
    // Run to the eviction boundary and catch the root right after it starts a count.
    net.run_for(999 - net.now);
    net.now = 1_000;
    if let Some(root) = net.live().into_iter().find(|n| n.is_root()).map(Node::id) {
        net.with(root, |n, now| n.handle_timeout(now));
        nodes.push((net.node(root).clone(), net.now));
    }
    net.run_for(2_500);
    nodes.extend(net.live().into_iter().map(|n| (n.clone(), net.now)));
    let mut cfg = testing::config(4, 1, settings());
    cfg.seed = 4;
    let mut joining = Node::new(cfg).expect("valid config");
    joining.join_cluster(net.now, vec![testing::addr(1)]);
    nodes.push((joining, net.now));
    let traffic = traffic.borrow().clone();
    Templates { nodes, traffic }
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
    let _ = node.status(now);
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
