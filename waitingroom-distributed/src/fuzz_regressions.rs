//! Crashes the fuzzer found (`fuzz/`, target `peer_values`): well-typed peer messages with
//! hostile numbers that made a node panic (arithmetic overflow; in a release build the value
//! wraps instead, silently). Each test delivers the crashing message, written out or rewritten
//! in flight on the test rig (`testing::Net`); all were fixed by saturating arithmetic on the
//! figures peers send, and each test fails again without it.

use std::cell::Cell;
use std::rc::Rc;

use waitingroom_core::{NodeId, Settings};

use crate::messages::{Body, ChannelMsg, Envelope};
use crate::node::Node;
use crate::testing::{self, Net};
use crate::{AdmissionMode, Ignored};

fn settings() -> Settings {
    Settings {
        admit_straight_through: false,
        ..Settings::default()
    }
}

fn single() -> Node {
    let mut n = Node::new(testing::config(1, 1, settings())).expect("valid");
    n.start_cluster(0);
    n
}

/// Two nodes in one cluster, rewriting every message in flight with `tamper`, which counts
/// the messages it rewrote.
fn pair(tamper: impl Fn(&mut Envelope) -> bool + 'static) -> (Net, Rc<Cell<u32>>) {
    let mut net = Net::new(2, settings(), AdmissionMode::Range, 1);
    let hits = Rc::new(Cell::new(0));
    let counter = hits.clone();
    net.tamper(move |env| {
        if tamper(env) {
            counter.set(counter.get() + 1);
        }
    });
    (net, hits)
}

#[test]
fn an_ack_of_u64_max_from_a_stranger() {
    let mut n = single();
    let env: Envelope = serde_json::from_str(
        r#"{"from":{"id":2,"incarnation":1,"addr":"n2"},"to":1,"to_incarnation":1,
            "body":{"Channel":{"epoch":1,"seq":1,"ack_epoch":1,"ack":18446744073709551615,
            "msg":{"Update":{"weight":"Empty","version":1}}}}}"#,
    )
    .expect("well-typed");
    assert_eq!(n.handle_message(10, env), Err(Ignored::SenderNotMember));
}

/// The same acknowledgement on a link the receiver does send on.
#[test]
fn an_ack_of_u64_max_on_a_link() {
    let (mut net, hits) = pair(|env| match &mut env.body {
        Body::Channel { ack, .. } | Body::ChannelAck { ack, .. } if *ack > 0 => {
            *ack = u64::MAX;
            true
        }
        _ => false,
    });
    net.with(NodeId(2), |n, now| n.join(now)).expect("member");
    net.run_for(1_000);
    assert!(hits.get() > 0, "no acknowledgement went by");
}

#[test]
fn a_count_reply_with_u64_max_counts() {
    let (mut net, hits) = pair(|env| {
        let Body::Channel {
            msg: ChannelMsg::CountReply {
                counts: Some(c), ..
            },
            ..
        } = &mut env.body
        else {
            return false;
        };
        c.on_site = u64::MAX;
        c.nodes = u64::MAX;
        true
    });
    for _ in 0..3 {
        net.with(NodeId(2), |n, now| n.join(now)).expect("member");
    }
    net.run_for(1_000);
    assert!(hits.get() > 0, "no count reply went by");
}

#[test]
fn a_tree_at_version_u64_max_then_a_join() {
    let mut n = single();
    let tree: Envelope = serde_json::from_str(
        r#"{"from":{"id":2,"incarnation":1,"addr":"n2"},"to":1,"to_incarnation":1,
            "body":{"Tree":[{"version":18446744073709551615,
            "members":{"1":{"id":1,"incarnation":1,"addr":"n1"},
                       "2":{"id":2,"incarnation":1,"addr":"n2"}},
            "edges":[[1,2]],"removed":{}},{"epoch":0,"set":[]}]}}"#,
    )
    .expect("well-typed");
    assert_eq!(n.handle_message(10, tree), Ok(()));
    let join: Envelope = serde_json::from_str(
        r#"{"from":{"id":3,"incarnation":1,"addr":"n3"},"to":0,"to_incarnation":0,
            "body":{"JoinRequest":{"contact":{"id":3,"incarnation":1,"addr":"n3"}}}}"#,
    )
    .expect("well-typed");
    assert_eq!(n.handle_message(11, join), Ok(()));
    assert_eq!(n.membership().version, u64::MAX);
}

#[test]
fn a_count_result_with_a_u64_max_histogram() {
    let (mut net, hits) = pair(|env| {
        let Body::Channel {
            msg: ChannelMsg::CountResult(r),
            ..
        } = &mut env.body
        else {
            return false;
        };
        let r = std::sync::Arc::make_mut(r);
        r.summary.below.iter_mut().for_each(|b| *b = u64::MAX);
        true
    });
    net.with(NodeId(2), |n, now| n.join(now)).expect("member");
    net.run_for(1_000);
    assert!(hits.get() > 0, "no count result went by");
    // Visitors join where the rewritten result arrived: the last has two ahead locally, plus
    // nearly u64::MAX elsewhere.
    let at = net
        .live()
        .iter()
        .find(|n| n.summary().is_some_and(|s| s.below.contains(&u64::MAX)))
        .map(|n| n.id())
        .expect("a node took the rewritten result");
    for _ in 0..3 {
        net.with(at, |n, now| n.join(now)).expect("member");
    }
}
