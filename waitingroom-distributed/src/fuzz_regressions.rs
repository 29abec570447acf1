//! Crashes the fuzzer found (`fuzz/`, target `peer_values`): well-typed peer messages with
//! hostile numbers that made a node panic (arithmetic overflow; in a release build the value
//! wraps instead, silently). Each test delivers the crashing message; all four were fixed by
//! saturating arithmetic on the figures peers send.

use std::collections::VecDeque;

use waitingroom_core::{NodeId, Settings, Time};

use crate::NodeConfig;
use crate::messages::{Body, ChannelMsg, Envelope};
use crate::node::Node;

fn node(id: u64) -> Node {
    let settings = Settings {
        admit_straight_through: false,
        ..Settings::default()
    };
    Node::new(NodeConfig::new(NodeId(id), 1, format!("n{id}"), settings)).expect("valid")
}

/// Two nodes on a FIFO network with no delay; `tamper` may rewrite any envelope in flight.
struct Pair {
    now: Time,
    nodes: [Node; 2],
    queue: VecDeque<Envelope>,
}

impl Pair {
    fn new() -> Pair {
        let mut p = Pair {
            now: 0,
            nodes: [node(1), node(2)],
            queue: VecDeque::new(),
        };
        p.nodes[0].start_cluster(0);
        p.nodes[1].join_cluster(0, vec!["n1".into()]);
        p.deliver(|_| {});
        p
    }

    fn deliver(&mut self, mut tamper: impl FnMut(&mut Envelope)) {
        loop {
            for n in &mut self.nodes {
                while let Some(t) = n.poll_transmit() {
                    self.queue.push_back(t.envelope);
                }
                while n.poll_event().is_some() {}
            }
            let Some(mut env) = self.queue.pop_front() else {
                return;
            };
            tamper(&mut env);
            let at = if env.to == NodeId(2) || env.from.id == NodeId(1) {
                1
            } else {
                0
            };
            let _ = self.nodes[at].handle_message(self.now, env);
        }
    }

    /// Fires both nodes' timers at `t` and delivers, tampering.
    fn tick(&mut self, t: Time, tamper: impl FnMut(&mut Envelope)) {
        self.now = t;
        for n in &mut self.nodes {
            n.handle_timeout(t);
        }
        self.deliver(tamper);
    }
}

#[test]
fn an_ack_of_u64_max_from_a_stranger() {
    let mut n = node(1);
    n.start_cluster(0);
    let env: Envelope = serde_json::from_str(
        r#"{"from":{"id":2,"incarnation":1,"addr":"n2"},"to":1,"to_incarnation":1,
            "body":{"Channel":{"epoch":1,"seq":1,"ack_epoch":1,"ack":18446744073709551615,
            "msg":{"Update":{"weight":"Empty","version":1}}}}}"#,
    )
    .expect("well-typed");
    let _ = n.handle_message(10, env);
}

#[test]
fn a_count_reply_with_u64_max_counts() {
    let mut p = Pair::new();
    for _ in 0..3 {
        let now = p.now;
        p.nodes[1].join(now).expect("member");
    }
    p.tick(1_000, |env| {
        if let Body::Channel {
            msg: ChannelMsg::CountReply {
                counts: Some(c), ..
            },
            ..
        } = &mut env.body
        {
            c.on_site = u64::MAX;
            c.nodes = u64::MAX;
        }
    });
}

#[test]
fn a_tree_at_version_u64_max_then_a_join() {
    let mut n = node(1);
    n.start_cluster(0);
    let tree: Envelope = serde_json::from_str(
        r#"{"from":{"id":2,"incarnation":1,"addr":"n2"},"to":1,"to_incarnation":1,
            "body":{"Tree":{"version":18446744073709551615,
            "members":{"1":{"id":1,"incarnation":1,"addr":"n1"},
                       "2":{"id":2,"incarnation":1,"addr":"n2"}},
            "edges":[[1,2]],"removed":{}}}}"#,
    )
    .expect("well-typed");
    let _ = n.handle_message(10, tree);
    let join: Envelope = serde_json::from_str(
        r#"{"from":{"id":3,"incarnation":1,"addr":"n3"},"to":0,"to_incarnation":0,
            "body":{"JoinRequest":{"contact":{"id":3,"incarnation":1,"addr":"n3"}}}}"#,
    )
    .expect("well-typed");
    let _ = n.handle_message(11, join);
}

#[test]
fn a_count_result_with_a_u64_max_histogram() {
    let mut p = Pair::new();
    let now = p.now;
    p.nodes[1].join(now).expect("member");
    p.tick(1_000, |env| {
        if let Body::Channel {
            msg: ChannelMsg::CountResult(r),
            ..
        } = &mut env.body
        {
            r.summary.below.iter_mut().for_each(|b| *b = u64::MAX);
        }
    });
    // The second visitor has one ahead locally, plus nearly u64::MAX elsewhere.
    p.nodes[1].join(1_001).expect("member");
    p.nodes[1].join(1_002).expect("member");
}
