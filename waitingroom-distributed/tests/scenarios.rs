//! Hand-written protocol scenarios, driven deterministically by the test rig (`testing::Net`).

use waitingroom_core::{CheckInStatus, EngineError, NodeId, Pass, Settings, Ticket, Time};
use waitingroom_distributed::testing::{Crowd, Faults, Net, queued_settings};
use waitingroom_distributed::{
    AdmissionMode, Durable, Event, LiveSettings, Node, Pause, ScheduledEvent, SettingsPatch,
    VisitorError, invariants,
};

#[test]
fn a_cluster_forms_and_settles() {
    for n in [1, 2, 3, 8] {
        let mut net = Net::new(n, queued_settings(), AdmissionMode::Range, 1);
        net.run_for(3_000);
        let nodes = net.live();
        assert!(invariants::converged(&nodes), "n={n}");
        assert_eq!(nodes.iter().filter(|x| x.is_root()).count(), 1);
        assert!(net.check_quiet().is_empty(), "{:?}", net.check_quiet());
    }
}

#[test]
fn visitors_on_many_nodes_are_admitted_in_join_order() {
    for mode in [
        AdmissionMode::Range,
        AdmissionMode::Batched,
        AdmissionMode::Sequential,
    ] {
        let mut net = Net::new(5, queued_settings(), mode, 7);
        net.run_for(3_000);
        let mut tickets = Vec::new();
        for i in 0..40u64 {
            let node = net.ids()[(i * 7 % 5) as usize];
            let c = net.with(node, |n, now| n.join(now)).unwrap();
            tickets.push(c.ticket);
            net.run_for(13);
        }
        net.run_for(5_000);
        let order = net.admission_order();
        assert_eq!(order.len(), 40, "{mode:?}");
        let expected: Vec<_> = tickets.iter().map(|t| t.id).collect();
        assert_eq!(order, expected, "{mode:?}");
        assert!(
            net.check_quiet().is_empty(),
            "{mode:?}: {:?}",
            net.check_quiet()
        );
        for t in &tickets {
            let owner = t.node;
            let c = net.with(owner, |n, now| n.check_in(now, t)).unwrap();
            assert_eq!(c.status, CheckInStatus::Admitted);
        }
    }
}

/// A cluster of `n` with `visitors` spread over the nodes, joined 10 ms apart.
fn crowded(n: u64, visitors: usize, mode: AdmissionMode, seed: u64) -> (Net, Crowd) {
    let mut net = Net::new(n, queued_settings(), mode, seed);
    net.run_for(2_000);
    let mut crowd = Crowd::default();
    for i in 0..visitors {
        let ids = net.ids();
        crowd.join(&mut net, ids[(i * 3 + 1) % ids.len()]);
        net.run_for(10);
    }
    (net, crowd)
}

fn assert_fair(net: &Net, crowd: &Crowd) {
    assert!(crowd.all_admitted(), "not everyone got in");
    assert_eq!(net.admission_order(), crowd.join_order());
    assert!(
        net.violations_after_recovery.is_empty(),
        "{:?}",
        &net.violations_after_recovery[..net.violations_after_recovery.len().min(5)]
    );
}

#[test]
fn a_node_joins_while_visitors_wait() {
    let (mut net, mut crowd) = crowded(3, 30, AdmissionMode::Range, 2);
    net.add_node(4, 2);
    crowd.run(&mut net, 200);
    for i in 0..10 {
        crowd.join(&mut net, NodeId(4 - (i % 2)));
        net.run_for(10);
    }
    crowd.run(&mut net, 6_000);
    assert_fair(&net, &crowd);
    assert!(invariants::converged(&net.live()));
    assert_eq!(net.live().len(), 4);
}

#[test]
fn the_root_crashes_and_its_visitors_keep_their_place() {
    let (mut net, mut crowd) = crowded(4, 40, AdmissionMode::Batched, 3);
    let root = net.live().iter().find(|n| n.is_root()).unwrap().id();
    net.kill(root);
    crowd.run(&mut net, 10_000);
    assert!(crowd.all_admitted());
    assert!(invariants::converged(&net.live()));
    assert_eq!(net.live().len(), 3);
    assert!(net.violations_after_recovery.is_empty());
    let failed = net
        .events
        .iter()
        .filter(|(_, e)| matches!(e, Event::MemberFailed(c) if c.id == root))
        .count();
    assert!(failed >= 1);
}

#[test]
fn a_leaf_crashes_and_its_visitors_are_requeued_in_order() {
    let (mut net, mut crowd) = crowded(5, 50, AdmissionMode::Range, 4);
    let leaf = net
        .live()
        .iter()
        .find(|n| n.membership().neighbours(n.id()).len() == 1 && !n.is_root())
        .unwrap()
        .id();
    // Crash before the first eviction lets anyone out: every visitor must still get in, in
    // exactly their join order (the leaf's visitors re-queue under their original join time).
    net.kill(leaf);
    crowd.run(&mut net, 10_000);
    assert_fair(&net, &crowd);
    assert!(invariants::converged(&net.live()));
}

#[test]
fn two_simultaneous_membership_changes_converge() {
    let mut net = Net::new(4, queued_settings(), AdmissionMode::Range, 5);
    net.run_for(2_000);
    // Two nodes crash at once: several survivors detect them and edit the tree concurrently.
    net.kill(NodeId(2));
    net.kill(NodeId(3));
    net.run_for(5_000);
    assert!(
        invariants::converged(&net.live()),
        "{:?}",
        net.live()[0].status(net.now)
    );
    // Two nodes join at once through different members.
    net.add_node(5, 5);
    net.add_node(6, 5);
    net.run_for(5_000);
    let live = net.live();
    assert_eq!(live.len(), 4);
    assert!(invariants::converged(&live));
    assert!(net.check_quiet().is_empty() || !net.quiet());
    assert!(net.violations_after_recovery.is_empty());
}

#[test]
fn lossy_duplicating_reordering_links_keep_order_and_invariants() {
    for mode in [AdmissionMode::Range, AdmissionMode::Batched] {
        let mut net = Net::new(5, queued_settings(), mode, 6);
        net.faults = Faults {
            jitter: 30,
            loss: 0.05,
            dup: 0.05,
        };
        net.run_for(3_000);
        let mut crowd = Crowd::default();
        for i in 0..60 {
            let ids = net.ids();
            crowd.join(&mut net, ids[i % ids.len()]);
            crowd.run(&mut net, 20);
        }
        crowd.run(&mut net, 15_000);
        assert_fair(&net, &crowd);
    }
}

#[test]
fn batched_admission_equals_sequential_admission() {
    let run = |mode| {
        let (mut net, mut crowd) = crowded(6, 60, mode, 8);
        crowd.run(&mut net, 8_000);
        assert_fair(&net, &crowd);
        net.admission_order()
    };
    let batched = run(AdmissionMode::Batched);
    let sequential = run(AdmissionMode::Sequential);
    let range = run(AdmissionMode::Range);
    assert_eq!(batched, sequential);
    assert_eq!(batched, range);
}

#[test]
fn limited_places_admit_exactly_the_smallest_keys() {
    let settings = Settings {
        target_on_site: 7,
        pass_expiry_ms: 400,
        ..queued_settings()
    };
    let mut net = Net::new(4, settings, AdmissionMode::Range, 9);
    net.run_for(2_000);
    let mut crowd = Crowd::default();
    for i in 0..40 {
        let ids = net.ids();
        crowd.join(&mut net, ids[i % ids.len()]);
        net.run_for(5);
    }
    // A pass lasts to the end of its admission's claim window (the ticket expiry, longer than
    // the pass expiry here): six rounds of places, 10 s each.
    crowd.run(&mut net, 70_000);
    assert_fair(&net, &crowd);
    // Never more than the target counted in one round.
    for (_, e) in &net.events {
        if let Event::CountCompleted(s) = e {
            assert!(s.on_site + s.admitted <= 7, "{s:?}");
        }
    }
}

/// Passes outlive the node that issued them: a crashed member's places stay counted against the
/// target until its passes have expired, and only then are given out again.
#[test]
fn a_crashed_members_places_count_until_its_passes_expire() {
    let settings = Settings {
        target_on_site: 4,
        pass_expiry_ms: 20_000,
        ..queued_settings()
    };
    let mut net = Net::new(3, settings, AdmissionMode::Range, 12);
    net.run_for(2_000);
    let mut first = Crowd::default();
    for _ in 0..4 {
        first.join(&mut net, NodeId(3));
        net.run_for(5);
    }
    first.run(&mut net, 3_000);
    assert!(first.all_admitted());
    net.kill(NodeId(3));
    net.run_for(5_000);
    assert!(
        net.live()
            .iter()
            .all(|n| !n.membership().contains(NodeId(3)))
    );
    let mut later = Crowd::default();
    for _ in 0..2 {
        later.join(&mut net, NodeId(1));
        net.run_for(5);
    }
    later.run(&mut net, 10_000);
    assert!(
        !later.admitted.iter().any(|&a| a),
        "node 3's four passes are still valid: the site is full"
    );
    // Counted for a grant's, a ticket's and a pass's life, with 1% and an interval to spare
    // (waitingroom-distributed/README.md#admission-leases): 3 + 10 + 20 s + 1% + 1 s after the
    // removal.
    later.run(&mut net, 25_000);
    assert!(
        later.all_admitted(),
        "node 3's places are no longer counted"
    );
}

/// Places granted plus visitors on the site through the live nodes (each visitor is counted at
/// one node: this crowd never refreshes a pass).
fn granted_and_held(net: &Net) -> u64 {
    net.live()
        .iter()
        .map(|n| n.grant(net.now).0 + n.room().on_site())
        .sum()
}

/// waitingroom-distributed/README.md#admission-leases: with a partition, only the side holding a
/// majority of the voters lets visitors out, the places granted and held never exceed the target,
/// the other side pauses (its grants lapse), and once the partition heals its visitors get in.
#[test]
fn a_partition_never_puts_the_site_over_its_target() {
    let settings = Settings {
        target_on_site: 6,
        pass_expiry_ms: 2_000,
        // No longer than the pass expiry: a pass lasts at least to the end of its admission's
        // claim window.
        ticket_expiry_ms: 2_000,
        ..queued_settings()
    };
    let mut net = Net::new(5, settings, AdmissionMode::Range, 21);
    net.run_for(2_000);
    let mut crowd = Crowd::default();
    for i in 0..60 {
        let ids = net.ids();
        crowd.join(&mut net, ids[i % ids.len()]);
        net.run_for(20);
    }
    crowd.run(&mut net, 3_000);
    for minority in [4, 5] {
        for majority in [1, 2, 3] {
            net.cut(NodeId(minority), NodeId(majority));
        }
    }
    // Longer than the majority side counts the minority's places (16 s here).
    for _ in 0..500 {
        crowd.run(&mut net, 50);
        assert!(granted_and_held(&net) <= 6, "t={}", net.now);
    }
    for n in net.live() {
        let expected = (n.id() >= NodeId(4)).then_some(Pause::NoMajority);
        assert_eq!(n.pause(net.now), expected, "node {}", n.id());
    }
    assert!(!crowd.all_admitted(), "the minority side's visitors wait");
    net.heal();
    for _ in 0..600 {
        crowd.run(&mut net, 50);
        assert!(granted_and_held(&net) <= 6, "t={}", net.now);
    }
    assert!(crowd.all_admitted(), "everyone got in after the heal");
}

/// waitingroom-distributed/README.md#admission-leases: a 3-node cluster that loses two nodes stops
/// (1 of 3 voters), its visitors queued, until an operator declares the others gone
/// (`Node::reset_voters`): the survivor is then the voters and lets its visitors out, within the
/// target.
#[test]
fn an_operator_restores_admission_after_a_lost_majority() {
    let settings = Settings {
        target_on_site: 6,
        pass_expiry_ms: 2_000,
        ..queued_settings()
    };
    let mut net = Net::new(3, settings, AdmissionMode::Range, 31);
    net.run_for(2_000);
    let survivor = NodeId(1);
    net.kill(NodeId(2));
    net.kill(NodeId(3));
    let mut crowd = Crowd::default();
    for _ in 0..10 {
        crowd.join(&mut net, survivor);
        net.run_for(20);
    }
    crowd.run(&mut net, 20_000);
    assert_eq!(net.live()[0].pause(net.now), Some(Pause::NoMajority));
    assert!(!crowd.all_admitted(), "no majority, nobody let out");
    let voters = net.with(survivor, |n, _| n.reset_voters());
    assert_eq!(voters.ids().collect::<Vec<_>>(), [survivor]);
    for _ in 0..400 {
        crowd.run(&mut net, 50);
        assert!(granted_and_held(&net) <= 6, "t={}", net.now);
    }
    assert!(crowd.all_admitted(), "everyone got in after the reset");
}

/// waitingroom-distributed/README.md#admission-leases: two nodes of five that restart and are cut
/// off together from the other three make themselves a cluster of their own, and let visitors out
/// beside the three that hold the majority, unless they remember the voters from before (the
/// server's `--voters-file`): then they need a majority of those and pause.
#[test]
fn restarted_nodes_that_remember_the_voters_need_a_majority_of_them() {
    let let_out_by_the_two = |remember: bool| {
        let settings = Settings {
            target_on_site: 100,
            pass_expiry_ms: 2_000,
            ..queued_settings()
        };
        let mut net = Net::new(5, settings, AdmissionMode::Range, 32);
        net.run_for(3_000);
        let voters = net
            .node(NodeId(1))
            .agreed_voters()
            .cloned()
            .expect("agreed");
        assert_eq!(voters.ids().count(), 5);
        for id in [1, 2] {
            net.kill(NodeId(id));
            for other in [3, 4, 5] {
                net.cut(NodeId(id), NodeId(other));
            }
        }
        net.run_for(3_000);
        for id in [1, 2] {
            net.add_node_remembering(id, 32, remember.then_some(&voters));
            net.run_for(2_000);
        }
        // They give up on the three they cannot reach and form a cluster of two.
        let limit = net.now + 60_000;
        while net.node(NodeId(1)).membership().members.len() != 2 {
            assert!(net.now < limit, "the two never formed a cluster");
            net.run_for(100);
        }
        let mut crowd = Crowd::default();
        for i in 0..10 {
            crowd.join(&mut net, NodeId(1 + i % 2));
            net.run_for(20);
        }
        assert!(
            crowd.tickets.iter().all(|t| t.node.0 <= 2),
            "they joined at the two"
        );
        crowd.run(&mut net, 15_000);
        let now = net.now;
        let paused = net.node(NodeId(1)).pause(now);
        (crowd.admitted.iter().filter(|a| **a).count(), paused)
    };
    let (forgot, _) = let_out_by_the_two(false);
    assert!(
        forgot > 0,
        "without the voters the two go on as a cluster of their own"
    );
    let (remembered, paused) = let_out_by_the_two(true);
    assert_eq!((remembered, paused), (0, Some(Pause::NoMajority)));
}

#[test]
fn graceful_shutdown_is_noticed_without_failure_detection() {
    let mut net = Net::new(4, queued_settings(), AdmissionMode::Range, 10);
    net.run_for(2_000);
    let before = net.now;
    net.with(NodeId(3), |n, now| n.shutdown(now));
    net.kill(NodeId(3));
    net.run_for(100);
    assert!(
        net.live()
            .iter()
            .all(|n| !n.membership().contains(NodeId(3)))
    );
    assert!(
        !net.events
            .iter()
            .any(|(_, e)| matches!(e, Event::MemberFailed(_)))
    );
    assert!(net.now - before <= 100);
}

#[test]
fn a_healed_partition_merges_into_one_cluster() {
    let (mut net, mut crowd) = crowded(5, 20, AdmissionMode::Range, 11);
    for other in [1, 2, 3, 4] {
        net.cut(NodeId(5), NodeId(other));
    }
    crowd.run(&mut net, 4_000);
    net.heal();
    crowd.run(&mut net, 15_000);
    assert!(crowd.all_admitted());
    let live = net.live();
    assert!(
        invariants::converged(&live),
        "{:#?}",
        live.iter().map(|n| n.status(net.now)).collect::<Vec<_>>()
    );
    assert!(net.violations_after_recovery.is_empty());
}

mod random_operations {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    pub enum Op {
        Join(usize),
        Wait(u64),
        Crash(usize),
        AddNode,
        Isolate(usize),
        Heal,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0usize..8).prop_map(Op::Join),
            4 => (1u64..1_500).prop_map(Op::Wait),
            1 => (0usize..8).prop_map(Op::Crash),
            1 => Just(Op::AddNode),
            1 => (0usize..8).prop_map(Op::Isolate),
            1 => Just(Op::Heal),
        ]
    }

    /// Plays `ops` on a lossy network, then heals everything and lets visitors keep checking in
    /// for 30 s.
    pub fn play(nodes: u64, seed: u64, batched: bool, ops: &[Op]) -> (Net, Crowd) {
        let mode = if batched {
            AdmissionMode::Batched
        } else {
            AdmissionMode::Range
        };
        let mut net = Net::new(nodes, queued_settings(), mode, seed);
        net.faults = Faults {
            jitter: 10,
            loss: 0.02,
            dup: 0.02,
        };
        net.run_for(1_000);
        let mut crowd = Crowd::default();
        let mut next_id = nodes + 1;
        for op in ops {
            let ids = net.ids();
            match *op {
                Op::Join(i) => crowd.join(&mut net, ids[i % ids.len()]),
                Op::Wait(ms) => crowd.run(&mut net, ms),
                Op::Crash(i) => {
                    // Never one that leaves the live nodes without a majority of some node's
                    // voters: such a cluster stops admitting until a node comes back
                    // (waitingroom-distributed/README.md#admission-leases), and this test brings
                    // none back.
                    let victim = ids[i % ids.len()];
                    if keeps_a_majority(&net, victim) {
                        net.kill(victim);
                    }
                }
                Op::AddNode => {
                    net.add_node(next_id, seed);
                    next_id += 1;
                }
                Op::Isolate(i) => {
                    let victim = ids[i % ids.len()];
                    for &other in &ids {
                        if other != victim {
                            net.cut(victim, other);
                        }
                    }
                }
                Op::Heal => net.heal(),
            }
        }
        net.heal();
        net.faults = Faults::default();
        crowd.run(&mut net, 30_000);
        (net, crowd)
    }

    /// Whether the live nodes but `victim` hold a strict majority of every member's voters.
    fn keeps_a_majority(net: &Net, victim: NodeId) -> bool {
        let live = net.live();
        let survivors: Vec<NodeId> = live
            .iter()
            .map(|n| n.id())
            .filter(|&id| id != victim)
            .collect();
        !survivors.is_empty()
            && live.iter().filter(|n| n.is_member()).all(|n| {
                let voters = n.voters();
                let held = voters.iter().filter(|v| survivors.contains(v)).count();
                2 * held > voters.len()
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24),
            ..ProptestConfig::default()
        })]
        /// Whatever happens, once the faults stop the cluster converges, the invariants hold,
        /// and every visitor who keeps checking in gets in.
        #[test]
        fn random_operations_keep_the_invariants(
            nodes in 1u64..=8,
            seed in 0u64..1_000,
            batched in any::<bool>(),
            ops in prop::collection::vec(op(), 1..40),
        ) {
            let (mut net, crowd) = play(nodes, seed, batched, &ops);
            let live = net.live();
            prop_assert!(invariants::converged(&live), "not converged: {:#?}",
                live.iter().map(|n| n.status(net.now)).collect::<Vec<_>>());
            prop_assert!(crowd.all_admitted(), "lost visitors");
            net.run_for(3_000);
            prop_assert!(net.quiet() || net.check_quiet().is_empty());
            prop_assert!(net.violations_after_recovery.is_empty(),
                "{:?}", &net.violations_after_recovery[..net.violations_after_recovery.len().min(3)]);
        }
    }

    /// Replays a failing case: `WR_CASE="nodes seed batched" WR_OPS="Join(0) AddNode Wait(500)"`.
    #[test]
    #[ignore = "debugging aid"]
    fn replay() {
        let case = std::env::var("WR_CASE").unwrap_or_else(|_| "3 1 false".into());
        let case: Vec<&str> = case.split_whitespace().collect();
        let ops: Vec<Op> = std::env::var("WR_OPS")
            .unwrap_or_default()
            .split_whitespace()
            .map(|op| {
                let arg = || {
                    op[op.find('(').unwrap() + 1..op.len() - 1]
                        .parse::<u64>()
                        .unwrap()
                };
                match &op[..op.find('(').unwrap_or(op.len())] {
                    "Join" => Op::Join(arg() as usize),
                    "Wait" => Op::Wait(arg()),
                    "Crash" => Op::Crash(arg() as usize),
                    "AddNode" => Op::AddNode,
                    "Isolate" => Op::Isolate(arg() as usize),
                    "Heal" => Op::Heal,
                    other => panic!("unknown op {other}"),
                }
            })
            .collect();
        let (net, _) = play(
            case[0].parse().unwrap(),
            case[1].parse().unwrap(),
            case[2] == "true",
            &ops,
        );
        for n in net.live() {
            eprintln!(
                "{} inc={} {:?} v={} members={:?} parent={:?} settled={} w={:?}",
                n.id(),
                n.contact().incarnation,
                n.phase(),
                n.membership().version,
                n.membership()
                    .members
                    .keys()
                    .map(|k| k.0)
                    .collect::<Vec<_>>(),
                n.parent(),
                n.is_settled(),
                n.weights()
            );
        }
        for (id, e) in &net.events {
            if !matches!(e, Event::CountCompleted(_) | Event::Admitted { .. }) {
                eprintln!("{id} {e:?}");
            }
        }
    }
}

#[test]
fn positions_are_cluster_wide_and_never_rise() {
    // Three places, long passes: the queue stays long.
    let settings = Settings {
        target_on_site: 3,
        pass_expiry_ms: 60_000,
        ..queued_settings()
    };
    let mut net = Net::new(5, settings, AdmissionMode::Range, 12);
    net.run_for(2_000);
    let mut crowd = Crowd::default();
    for i in 0..50 {
        let ids = net.ids();
        crowd.join(&mut net, ids[i % ids.len()]);
        net.run_for(7);
    }
    // One count round later every node knows the cluster's histogram.
    crowd.run(&mut net, 1_100);
    let waiting: Vec<usize> = (0..50).filter(|&i| !crowd.admitted[i]).collect();
    assert_eq!(waiting.len(), 47);
    let mut last = 0;
    for (rank, &i) in waiting.iter().enumerate() {
        let t = crowd.tickets[i].clone();
        let c = net.with(t.node, |n, now| n.check_in(now, &t)).unwrap();
        if let CheckInStatus::Queued { position } = c.status {
            let truth = rank as u64 + 1;
            // Local rank times node count would be off by up to 4x; the histogram keeps the
            // estimate within a bucket's worth of visitors.
            assert!(
                position.abs_diff(truth) <= 8,
                "visitor {i}: shown {position}, true {truth}"
            );
            assert!(position >= last.min(position));
            last = position;
        }
    }
}

#[test]
fn a_check_in_elsewhere_is_sent_to_the_owner_while_it_lives() {
    let (mut net, crowd) = crowded(3, 6, AdmissionMode::Range, 13);
    let t = crowd.tickets[0].clone();
    let other = net.ids().into_iter().find(|&id| id != t.node).unwrap();
    match net.with(other, |n, now| n.check_in(now, &t)) {
        Err(waitingroom_distributed::VisitorError::Elsewhere(owner)) => {
            assert_eq!(owner.id, t.node)
        }
        other => panic!("expected a redirect to the owner, got {other:?}"),
    }
    // Nothing was queued at the other node.
    let queued: u64 = net.live().iter().map(|n| n.room().queued()).sum();
    assert_eq!(queued, 6);
}

/// Three nodes with 10 places and straight-through admission; 30 visitors join, spread
/// over them.
fn thirty_join_a_room_of_ten() -> (Net, Crowd) {
    let settings = Settings {
        target_on_site: 10,
        pass_expiry_ms: 60_000,
        admit_straight_through: true,
        ..queued_settings()
    };
    let mut net = Net::new(3, settings, AdmissionMode::Range, 14);
    net.run_for(2_500);
    let mut crowd = Crowd::default();
    for i in 0..30 {
        let ids = net.ids();
        crowd.join(&mut net, ids[i % ids.len()]);
    }
    (net, crowd)
}

#[test]
fn straight_through_admission_only_while_nobody_waits() {
    let (mut net, mut crowd) = thirty_join_a_room_of_ten();
    // The cluster had 10 free places, split over 3 nodes: at most 10 got in at once.
    let at_once = crowd.admitted.iter().filter(|a| **a).count();
    assert!(at_once > 0 && at_once <= 10, "{at_once}");
    crowd.run(&mut net, 5_000);
    // The rest wait: the site is full and passes last a minute.
    let total = crowd.admitted.iter().filter(|a| **a).count();
    assert!(total <= 10, "{total}");
}

/// waitingroom-distributed/README.md#fairness-records: a visitor let straight through at join
/// leaves with a pass naming the round whose grant let them through, published by their node;
/// its record granted places for joins, at least as many as the passes that name it that way,
/// and its cutoff does not cover them (they joined after it was decided).
#[test]
fn straight_through_passes_name_a_round_whose_record_counts_them() {
    use std::collections::BTreeMap;
    let (mut net, crowd) = thirty_join_a_room_of_ten();
    let mut published = BTreeMap::new();
    for (n, e) in &net.events {
        if let Event::RoundRecorded(r) = e {
            published.insert((*n, r.round), (**r).clone());
        }
    }
    let mut named: BTreeMap<u64, u64> = BTreeMap::new();
    for (i, ticket) in crowd.tickets.iter().enumerate() {
        if !crowd.admitted[i] {
            continue;
        }
        let pass = (net.with(ticket.node, |n, now| n.leave(now, ticket))).expect("a pass");
        let round = pass.round.expect("a straight-through pass names its round");
        let record = (published.get(&(pass.node, round))).expect("its node published the round");
        let key = ticket.key_on(ticket.node);
        assert!(!record.cutoff.covers(&key) && key.join_time >= record.decided_at_ms);
        *named.entry(round).or_default() += 1;
    }
    assert!(!named.is_empty(), "some were let straight through");
    for (round, passes) in named {
        let through = (published.iter())
            .find(|((_, r), _)| *r == round)
            .map(|(_, record)| record.through);
        assert!(
            through >= Some(passes),
            "round {round}: {passes} passes, {through:?}"
        );
    }
}

/// waitingroom-distributed/README.md#live-settings: a change made on the minority side of a
/// partition is carried by that side's rounds but not confirmed, for the majority, which lets
/// visitors out, goes on under its own settings (the operator, told so, makes it again there);
/// once the partition heals it is in force everywhere, and confirmed.
#[test]
fn a_change_made_on_the_minority_side_of_a_partition_is_not_confirmed() {
    let settings = Settings {
        target_on_site: 50,
        ..queued_settings()
    };
    let mut net = Net::new(5, settings, AdmissionMode::Range, 3);
    net.run_for(2_000);
    for minority in [4, 5] {
        for majority in [1, 2, 3] {
            net.cut(NodeId(minority), NodeId(majority));
        }
    }
    net.run_for(20_000);
    let lowered = change(&mut net, 4, serde_json::json!({"target_on_site": 7}));
    net.run_for(3_000);
    let carried = |n: &Node| {
        n.summary()
            .is_some_and(|s| s.settings.includes(lowered.author, lowered.version))
    };
    assert!(
        carried(net.node(NodeId(5))),
        "the minority's rounds carry it"
    );
    assert!(!net.node(NodeId(4)).settings_confirmed(&lowered));
    assert_eq!(net.node(NodeId(1)).room().settings().target_on_site, 50);
    net.heal();
    net.run_for(20_000);
    for id in 1..=5 {
        let n = net.node(NodeId(id));
        assert!(n.settings_confirmed(&lowered), "node {id}");
        assert_eq!(n.room().settings().target_on_site, 7, "node {id}");
    }
}

/// The seed every lottery of these tests draws from (a server draws a fresh one each time).
const LOTTERY_SEED: [u8; 32] = [5; 32];

/// Whether `ticket`'s id was drawn from `seed` with the draw it carries
/// (waitingroom-distributed/README.md#random-queueing: a provable lottery).
fn drawn_from(seed: &[u8; 32], ticket: &waitingroom_core::Ticket) -> bool {
    ticket
        .draw
        .is_some_and(|d| waitingroom_core::lottery::drawn_id(seed, d) == ticket.id)
}

/// Changes node `id`'s live settings as an operator would
/// (waitingroom-distributed/README.md#live-settings).
fn change(net: &mut Net, id: u64, patch: serde_json::Value) -> LiveSettings {
    let patch = SettingsPatch::from_json(&patch).expect("a valid patch");
    net.with(NodeId(id), |n, now| {
        n.change_settings(now, &patch, LOTTERY_SEED)
    })
    .expect("valid settings")
}

/// Times at which visitors were let out, in order.
fn admission_times(net: &Net) -> Vec<u64> {
    let mut t: Vec<u64> = net
        .events
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Admitted { at, .. } => Some(*at),
            _ => None,
        })
        .collect();
    t.sort_unstable();
    t
}

/// waitingroom-distributed/README.md#live-settings: a change made at one node is in force on every
/// node within two rounds, outlives the node it was made at and the root, and a node that joins
/// later (with its file configuration) adopts it.
#[test]
fn a_settings_change_reaches_every_node_and_outlives_its_author_and_the_root() {
    let settings = Settings {
        target_on_site: 50,
        ..queued_settings()
    };
    let mut net = Net::new(5, settings, AdmissionMode::Range, 3);
    net.run_for(2_000);
    let changed = change(&mut net, 3, serde_json::json!({"target_on_site": 7}));
    assert_eq!((changed.version, changed.author), (1, NodeId(3)));
    net.run_for(2_000);
    for n in net.live() {
        assert_eq!(n.live_settings(), &changed, "node {}", n.id());
        assert_eq!(n.room().settings().target_on_site, 7, "node {}", n.id());
    }
    let root = net.live().iter().find(|n| n.is_root()).unwrap().id();
    assert_ne!(root, NodeId(3));
    let newer = change(&mut net, 3, serde_json::json!({"mode": "queue_all"}));
    // The root dies right after the change: its author carries it to the next root.
    net.kill(root);
    net.run_for(6_000);
    assert!(net.node(NodeId(3)).settings_confirmed(&newer));
    // Once a round confirmed it, the author may die too; a node that joins adopts it.
    net.kill(NodeId(3));
    net.add_node(6, 3);
    net.run_for(6_000);
    let live = net.live();
    assert_eq!(live.len(), 4);
    for n in live {
        assert_eq!(n.live_settings(), &newer, "node {}", n.id());
        assert!(!n.room().settings().admit_straight_through);
    }
}

/// waitingroom-distributed/README.md#live-settings: queue-all holds everyone queued (they keep
/// checking in), and back in normal mode they are let out in join order; reject turns new visitors
/// away and keeps the queue.
#[test]
fn queue_all_holds_the_queue_and_reject_refuses_new_visitors() {
    let mut net = Net::new(3, queued_settings(), AdmissionMode::Range, 5);
    net.run_for(2_000);
    change(&mut net, 2, serde_json::json!({"mode": "queue_all"}));
    net.run_for(2_000);
    let mut crowd = Crowd::default();
    for i in 0..30 {
        let ids = net.ids();
        crowd.join(&mut net, ids[i % ids.len()]);
        net.run_for(10);
    }
    crowd.run(&mut net, 5_000);
    assert!(crowd.admitted.iter().all(|a| !a), "nobody is let out");
    change(&mut net, 1, serde_json::json!({"mode": "reject"}));
    net.run_for(2_000);
    let refused = net.with(NodeId(3), |n, now| n.join(now));
    assert!(
        matches!(refused, Err(VisitorError::Rejected)),
        "{refused:?}"
    );
    crowd.run(&mut net, 3_000);
    assert!(crowd.all_admitted(), "the queue is let out in reject mode");
    assert_eq!(net.admission_order(), crowd.join_order());
}

/// waitingroom-distributed/README.md#live-settings: a rate cap of 120 visitors a minute lets out at
/// most 2 per 1-s round, also while the root dies and a new one takes over.
#[test]
fn the_rate_cap_holds_while_the_root_dies() {
    let mut net = Net::new(4, queued_settings(), AdmissionMode::Range, 9);
    net.run_for(2_000);
    change(
        &mut net,
        4,
        serde_json::json!({"new_users_per_minute": 120}),
    );
    net.run_for(2_000);
    let mut crowd = Crowd::default();
    for i in 0..40 {
        let ids = net.ids();
        crowd.join(&mut net, ids[i % ids.len()]);
    }
    let start = net.now;
    crowd.run(&mut net, 5_000);
    let root = net.live().iter().find(|n| n.is_root()).unwrap().id();
    net.kill(root);
    crowd.run(&mut net, 15_000);
    let times = admission_times(&net);
    assert!(times.len() >= 20, "admissions go on: {}", times.len());
    // Any window of w ms holds at most the cap's share of it plus one round's burst.
    for (i, &t) in times.iter().enumerate() {
        for w in [1_000, 5_000, 10_000] {
            let inside = times[i..].iter().take_while(|&&u| u < t + w).count() as u64;
            assert!(
                inside <= 2 * w / 1_000 + 2,
                "{inside} admitted in {w} ms from {t}"
            );
        }
    }
    let elapsed = net.now - start;
    assert!(times.len() as u64 <= 2 * elapsed / 1_000 + 2);
}

/// Where each visitor's ticket id comes in the order of ticket ids: the lottery's order when
/// every visitor shares one join time, indexed by join order.
fn ranks_by_ticket(crowd: &Crowd) -> Vec<usize> {
    let mut ids: Vec<_> = crowd.tickets.iter().map(|t| t.id).collect();
    ids.sort_unstable();
    crowd
        .tickets
        .iter()
        .map(|t| ids.binary_search(&t.id).unwrap())
        .collect()
}

/// waitingroom-distributed/README.md#random-queueing: visitors who join while random queueing is on
/// are let out in the order of their ticket ids (drawn at random by their nodes), not in join
/// order, across nodes and a dying root; those who joined before it was switched on go first.
#[test]
fn random_queueing_lets_visitors_out_in_lottery_order() {
    let mut net = Net::new(3, queued_settings(), AdmissionMode::Range, 11);
    net.run_for(2_000);
    change(
        &mut net,
        1,
        serde_json::json!({"new_users_per_minute": 240}),
    );
    // Every node has the cap before the next change (two changes at once: one is lost).
    net.run_for(2_000);
    let mut crowd = Crowd::default();
    for i in 0..5 {
        crowd.join(&mut net, NodeId(1 + i % 3));
        net.run_for(7);
    }
    let random = change(
        &mut net,
        2,
        serde_json::json!({"queueing_method": "random"}),
    );
    assert_eq!(random.new_users_per_minute, Some(240));
    assert_eq!(random.lottery_since, net.now);
    // In force on every node within two rounds; those who join meanwhile at another node
    // still queue in join order (behind the lottery).
    net.run_for(2_000);
    for i in 0..45 {
        crowd.join(&mut net, NodeId(1 + i % 3));
        net.run_for(7);
    }
    crowd.run(&mut net, 3_000);
    let root = net.live().iter().find(|n| n.is_root()).unwrap().id();
    net.kill(root);
    crowd.run(&mut net, 30_000);
    let alive: Vec<usize> = (0..crowd.tickets.len())
        .filter(|&i| crowd.tickets[i].node != root || crowd.admitted[i])
        .collect();
    assert!(
        alive.iter().all(|&i| crowd.admitted[i]),
        "everyone gets in: {:?}",
        alive
            .iter()
            .filter(|&&i| !crowd.admitted[i])
            .map(|&i| (i, crowd.tickets[i].join_time, crowd.tickets[i].node))
            .collect::<Vec<_>>()
    );
    let order = net.admission_order();
    let first: Vec<_> = crowd.tickets[..5].iter().map(|t| t.id).collect();
    assert_eq!(
        order[..5],
        first[..],
        "the queue before the lottery goes first"
    );
    // The lottery's visitors all share its join time: their order is their ticket ids.
    let lottery = &crowd.tickets[5..];
    assert!(lottery.iter().all(|t| t.join_time == random.lottery_since));
    assert_eq!(random.lottery_seed, Some(LOTTERY_SEED));
    assert!(lottery.iter().all(|t| drawn_from(&LOTTERY_SEED, t)));
    assert!(crowd.tickets[..5].iter().all(|t| t.draw.is_none()));
    let mut by_id: Vec<_> = lottery.iter().map(|t| t.id).collect();
    by_id.sort_unstable();
    let admitted: Vec<_> = order[5..].iter().filter(|id| by_id.contains(id)).collect();
    let expected: Vec<_> = by_id.iter().filter(|id| admitted.contains(id)).collect();
    assert_eq!(admitted, expected, "let out in the lottery's order");
    let ranks = ranks_by_ticket(&crowd);
    let tau = waitingroom_core::kendall_tau_permutation(&ranks[5..]);
    assert!((0.3..0.7).contains(&tau), "against join order: {tau}");
}

/// waitingroom-distributed/README.md#scheduled-events: visitors who join in a pre-queue wait
/// (nobody is let out, even with places free) and at the start are let out in a random order, all
/// ahead of anyone who joined later; the event, scheduled at one node, holds on every node and
/// through the root's death, and its settings apply until its end.
#[test]
fn a_prequeue_is_shuffled_at_the_start_ahead_of_later_joiners() {
    let mut net = Net::new(3, queued_settings(), AdmissionMode::Range, 13);
    net.run_for(2_000);
    let now = net.now;
    let event = ScheduledEvent::from_json(&serde_json::json!({"name": "sale",
        "prequeue_start_ms": now + 1_000, "start_ms": now + 6_000, "end_ms": now + 60_000,
        "shuffle_at_start": true, "settings": {"new_users_per_minute": 300}}))
    .unwrap();
    let added = net
        .with(NodeId(3), |n, at| n.add_event(at, event, LOTTERY_SEED))
        .expect("a valid event");
    assert_eq!(added.events.len(), 1);
    net.run_for(1_500);
    let mut crowd = Crowd::default();
    for i in 0..40 {
        crowd.join(&mut net, NodeId(1 + i % 3));
        net.run_for(20);
    }
    let prequeued = net.with(NodeId(1), |n, at| n.check_in(at, &crowd.tickets[0].clone()));
    let left = prequeued.unwrap().starts_in_ms.expect("pre-queued");
    assert!(left > 2_000 && left <= 3_700, "{left}");
    let root = net.live().iter().find(|n| n.is_root()).unwrap().id();
    net.kill(root);
    crowd.run(&mut net, 2_000);
    assert!(
        crowd.admitted.iter().all(|a| !a),
        "nobody is let out before the start"
    );
    while net.now < now + 6_000 {
        crowd.run(&mut net, 50);
    }
    for i in 0..10 {
        crowd.join(&mut net, NodeId(1 + i % 3));
        net.run_for(20);
    }
    crowd.run(&mut net, 30_000);
    for n in net.live() {
        assert_eq!(n.live_settings().events, added.events, "node {}", n.id());
    }
    let gone = |i: usize| crowd.tickets[i].node == root;
    assert!(
        (0..50).all(|i| crowd.admitted[i] || gone(i)),
        "everyone gets in"
    );
    let order = net.admission_order();
    let later: Vec<_> = crowd.tickets[40..].iter().map(|t| t.id).collect();
    let first_later = order.iter().position(|id| later.contains(id)).unwrap();
    let prequeued_in = order[..first_later].len();
    assert!(
        crowd.tickets[..40]
            .iter()
            .all(|t| drawn_from(&LOTTERY_SEED, t))
    );
    let kept = (0..40).filter(|&i| !gone(i) || crowd.admitted[i]).count();
    assert_eq!(prequeued_in, kept, "the pre-queue goes first");
    let ranks = ranks_by_ticket(&crowd);
    let tau = waitingroom_core::kendall_tau_permutation(&ranks[..40]);
    assert!((0.3..0.7).contains(&tau), "against join order: {tau}");
    // The cap of 300 a minute is 5 per 1-s round.
    let times = admission_times(&net);
    for (i, &t) in times.iter().enumerate() {
        let inside = times[i..].iter().take_while(|&&u| u < t + 1_000).count();
        assert!(inside <= 5 + 5, "{inside} admitted in 1 s from {t}");
    }
}

/// waitingroom-distributed/README.md#passes-given-back: a pass given back at another node than the
/// one counting it frees its place within a round or two (the next visitor is let in while the
/// other passes still last a minute), and every node refuses it from then on, for validation and
/// refresh alike.
#[test]
fn a_pass_given_back_frees_its_place_and_is_refused_everywhere() {
    let settings = Settings {
        target_on_site: 2,
        pass_expiry_ms: 60_000,
        ..queued_settings()
    };
    let mut net = Net::new(3, settings, AdmissionMode::Range, 17);
    net.run_for(2_000);
    let mut crowd = Crowd::default();
    for _ in 0..3 {
        crowd.join(&mut net, NodeId(1));
        net.run_for(10);
    }
    crowd.run(&mut net, 5_000);
    assert_eq!(crowd.admitted, vec![true, true, false], "the site is full");
    let pass = crowd.passes[&0].clone();
    assert_eq!(pass.node, NodeId(1));
    give_back(&mut net, NodeId(3), &pass);
    net.with(NodeId(3), |n, now| n.release_pass(now, &pass))
        .expect("twice is no error");
    let refused = net.with(NodeId(3), |n, now| n.validate_pass(now, &pass));
    assert_eq!(
        refused,
        Err(VisitorError::Released),
        "at once where it was given back"
    );
    crowd.run(&mut net, 2_500);
    assert!(crowd.admitted[2], "the place went to the next visitor");
    for id in net.ids() {
        let valid = net.with(id, |n, now| n.validate_pass(now, &pass));
        assert_eq!(valid, Err(VisitorError::Released), "node {id}");
        let refresh = net.with(id, |n, now| n.refresh_pass(now, &pass));
        assert_eq!(refresh, Err(VisitorError::Released), "node {id}");
    }
    let other = crowd.passes[&1].clone();
    assert_eq!(
        net.with(NodeId(2), |n, now| n.validate_pass(now, &other)),
        Ok(())
    );
}

/// A cluster of `n` whose first visitor (queued at node 1) holds a pass of a minute.
fn one_pass(n: u64, seed: u64) -> (Net, Crowd, waitingroom_core::Pass) {
    let settings = Settings {
        target_on_site: 5,
        pass_expiry_ms: 60_000,
        ..queued_settings()
    };
    let mut net = Net::new(n, settings, AdmissionMode::Range, seed);
    net.run_for(2_000);
    let mut crowd = Crowd::default();
    crowd.join(&mut net, NodeId(1));
    crowd.run(&mut net, 3_000);
    let pass = crowd.passes[&0].clone();
    (net, crowd, pass)
}

/// Gives `pass` back at `node`: refused there at once, confirmed once a majority of the voters
/// hold the release (the others answer within a round trip, long before the next round).
fn give_back(net: &mut Net, node: NodeId, pass: &waitingroom_core::Pass) {
    let back = |net: &mut Net| net.with(node, |n, now| n.release_pass(now, pass));
    assert_eq!(
        back(net),
        Err(VisitorError::ReleasePending),
        "held here alone"
    );
    assert_eq!(
        net.with(node, |n, now| n.validate_pass(now, pass)),
        Err(VisitorError::Released),
        "refused at once where it was given back"
    );
    net.run_for(100);
    assert_eq!(back(net), Ok(()), "confirmed once a majority holds it");
}

fn refused_everywhere(net: &mut Net, pass: &waitingroom_core::Pass) {
    for id in net.ids() {
        let valid = net.with(id, |n, now| n.validate_pass(now, pass));
        assert_eq!(valid, Err(VisitorError::Released), "node {id}");
    }
}

/// waitingroom-distributed/README.md#passes-given-back: the rounds carry a release for a few
/// intervals only; a node that missed them (its results lost the releases, or it was cut off
/// far longer than that, or it took a release the others never heard of while cut off) catches
/// up by the digest every result carries.
#[test]
fn a_node_that_missed_a_release_for_many_rounds_catches_up() {
    use std::cell::Cell;
    use std::rc::Rc;
    use waitingroom_distributed::messages::{Body, ChannelMsg};
    let (mut net, mut crowd, pass) = one_pass(3, 41);
    // Node 3 hears every round but none of the releases they carry.
    let deaf = Rc::new(Cell::new(true));
    let strip = deaf.clone();
    net.tamper(move |env| {
        if let Body::Channel {
            msg: ChannelMsg::CountResult(r),
            ..
        } = &mut env.body
            && env.to == NodeId(3)
            && strip.get()
        {
            std::sync::Arc::make_mut(r).summary.released.clear();
        }
    });
    give_back(&mut net, NodeId(1), &pass);
    crowd.run(&mut net, 10_000);
    // Long after the rounds stopped carrying it, by the digest alone.
    refused_everywhere(&mut net, &pass);
    deaf.set(false);

    // Cut off for twenty rounds, node 3 takes a release nobody else hears of, and misses one.
    let mut other = Crowd::default();
    other.join(&mut net, NodeId(2));
    other.join(&mut net, NodeId(3));
    other.run(&mut net, 3_000);
    let (at_2, at_3) = (other.passes[&0].clone(), other.passes[&1].clone());
    for id in [1, 2] {
        net.cut(NodeId(3), NodeId(id));
    }
    give_back(&mut net, NodeId(2), &at_2);
    // Node 3 refuses the pass at once, but a majority does not hold the release: its visitor
    // hears so for as long as it is cut off (it may die before anyone hears of it).
    let at_3_back = |net: &mut Net| net.with(NodeId(3), |n, now| n.release_pass(now, &at_3));
    assert_eq!(at_3_back(&mut net), Err(VisitorError::ReleasePending));
    net.run_for(20_000);
    assert_eq!(at_3_back(&mut net), Err(VisitorError::ReleasePending));
    net.heal();
    net.run_for(15_000);
    // Asked again, it asks the others again (what it sent while cut off was lost).
    let _ = at_3_back(&mut net);
    net.run_for(100);
    assert_eq!(
        at_3_back(&mut net),
        Ok(()),
        "confirmed once the others hold it"
    );
    refused_everywhere(&mut net, &at_2);
    refused_everywhere(&mut net, &at_3);
    refused_everywhere(&mut net, &pass);
}

/// waitingroom-distributed/README.md#passes-given-back: a node that joins after a release
/// (long after the rounds stopped carrying it) gets the whole set from the member that adds it,
/// and refuses the pass before its first round.
#[test]
fn a_node_that_joins_after_a_release_refuses_it_from_the_start() {
    let (mut net, mut crowd, pass) = one_pass(3, 43);
    give_back(&mut net, NodeId(2), &pass);
    crowd.run(&mut net, 10_000);
    // Just after a round, so that the next one is far.
    let boundary = net.now.next_multiple_of(1_000);
    net.run_for(boundary - net.now + 100);
    net.add_node(4, 43);
    let mut waited = 0;
    while !net.node(NodeId(4)).is_member() && waited < 500 {
        net.run_for(10);
        waited += 10;
    }
    assert!(net.node(NodeId(4)).is_member(), "node 4 joined");
    assert!(net.now < boundary + 1_000, "before its first round");
    assert_eq!(
        net.with(NodeId(4), |n, now| n.validate_pass(now, &pass)),
        Err(VisitorError::Released)
    );
    let refresh = net.with(NodeId(4), |n, now| n.refresh_pass(now, &pass));
    assert_eq!(refresh, Err(VisitorError::Released));
}

/// waitingroom-distributed/README.md#passes-given-back: the node that takes a release sends it
/// to every member at once, so it reaches them before the next round, and outlives that node
/// when it dies before its next count (it was the only one that knew).
#[test]
fn a_release_reaches_every_member_at_once_and_outlives_the_node_that_took_it() {
    let (mut net, mut crowd, pass) = one_pass(3, 44);
    crowd.run(&mut net, 2_000);
    // Just after a round, so that the next one is far.
    let boundary = net.now.next_multiple_of(1_000);
    net.run_for(boundary - net.now + 50);
    give_back(&mut net, NodeId(2), &pass);
    assert!(net.now < boundary + 1_000, "before the next round");
    refused_everywhere(&mut net, &pass);
    net.kill(NodeId(2));
    net.run_for(15_000);
    for id in [1, 3] {
        let node = net.node(NodeId(id));
        assert!(!node.membership().contains(NodeId(2)), "node 2 is gone");
        assert!(node.is_released(pass.id), "node {id}");
    }
}

/// waitingroom-distributed/README.md#passes-given-back: a node cut off from every other member
/// takes a release, then dies and starts again without its state. The others never heard of the
/// release, so it was never confirmed to its visitor, who gives the pass back again at a node of
/// the majority: confirmed there, and refused everywhere.
#[test]
fn a_release_taken_by_a_node_cut_off_that_dies_is_never_confirmed() {
    let (mut net, mut crowd, pass) = one_pass(3, 45);
    crowd.run(&mut net, 2_000);
    for id in [1, 2] {
        net.cut(NodeId(3), NodeId(id));
    }
    net.run_for(5_000);
    let back = |net: &mut Net, id: u64| net.with(NodeId(id), |n, now| n.release_pass(now, &pass));
    assert_eq!(
        back(&mut net, 3),
        Err(VisitorError::ReleasePending),
        "held by node 3 alone, of three voters"
    );
    net.run_for(3_000);
    assert_eq!(
        back(&mut net, 3),
        Err(VisitorError::ReleasePending),
        "asked again while still cut off"
    );
    net.kill(NodeId(3));
    net.heal();
    net.add_node(3, 46);
    net.run_for(10_000);
    for id in net.ids() {
        let valid = net.with(id, |n, now| n.validate_pass(now, &pass));
        assert_eq!(
            valid,
            Ok(()),
            "node {id}: the release went with node 3's life"
        );
    }
    give_back(&mut net, NodeId(1), &pass);
    net.run_for(3_000);
    refused_everywhere(&mut net, &pass);
}

/// waitingroom-distributed/README.md#fairness-records: every round that lets anyone out is on
/// the record, also when its result is lost. 500-ms rounds, 3% loss and jitter, and the first
/// node cut off from the others for 1.2 s every few seconds: it is removed, rejoins, and lets
/// its visitors out under ranges decided while it was away, which it learns from later rounds.
/// Every pass names its round, and the node that issued it published that round's record: in
/// range admission, and in batched deleteMin, whose visitors are let out as decided at the
/// round's boundary.
#[test]
fn every_pass_names_a_round_its_node_published() {
    use std::collections::BTreeSet;
    let runs = [AdmissionMode::Range, AdmissionMode::Batched].map(|m| [(m, 1), (m, 6)]);
    for (mode, seed) in runs.into_iter().flatten() {
        // Passes last no longer than the claim window, so places turn over quickly.
        let settings = Settings {
            target_on_site: 20,
            ticket_expiry_ms: 2_000,
            pass_expiry_ms: 2_000,
            eviction_interval_ms: 500,
            ..queued_settings()
        };
        let mut net = Net::new(3, settings, mode, seed);
        net.run_for(2_000);
        net.faults = Faults {
            jitter: 30,
            loss: 0.03,
            dup: 0.0,
        };
        let mut crowd = Crowd::default();
        for i in 0..300usize {
            let ids = net.ids();
            crowd.join(&mut net, ids[i % ids.len()]);
            crowd.run(&mut net, 50);
            if i % 60 == 30 {
                for other in [2, 3] {
                    net.cut(NodeId(1), NodeId(other));
                }
                crowd.run(&mut net, 1_200);
                net.heal();
            }
        }
        net.faults = Faults::default();
        crowd.run(&mut net, 20_000);
        let published: BTreeSet<(NodeId, u64, u64)> = (net.events.iter())
            .filter_map(|(n, e)| match e {
                Event::RoundRecorded(r) => Some((*n, r.round, r.decided_at_ms)),
                _ => None,
            })
            .collect();
        assert!(crowd.passes.len() > 100, "{mode:?} seed {seed}");
        for pass in crowd.passes.values() {
            let round = pass.round.expect("every pass names its round");
            assert!(
                published.contains(&(pass.node, round, pass.eviction_time)),
                "{mode:?} seed {seed}: node {} names round {round} of {} but never published it",
                pass.node,
                pass.eviction_time
            );
        }
    }
}

/// waitingroom-distributed/README.md#departed-places: a member cut off long enough to be removed
/// holds its places as departed; once it rejoins (the same process, a new incarnation) and is
/// counted again, it counts its visitors itself and the departure is released at once, not a
/// grant's, a ticket's and a pass's life later. Never over the target meanwhile.
#[test]
fn a_departed_member_counted_again_releases_its_places() {
    let settings = Settings {
        target_on_site: 6,
        pass_expiry_ms: 20_000,
        ..queued_settings()
    };
    let mut net = Net::new(3, settings, AdmissionMode::Range, 5);
    net.run_for(2_000);
    let mut first = Crowd::default();
    for _ in 0..2 {
        first.join(&mut net, NodeId(3));
        net.run_for(5);
    }
    first.run(&mut net, 3_000);
    assert!(first.all_admitted());
    for other in [1, 2] {
        net.cut(NodeId(3), NodeId(other));
    }
    net.run_for(5_000);
    assert!(!net.node(NodeId(1)).membership().contains(NodeId(3)));
    net.heal();
    let mut rejoined = false;
    for _ in 0..200 {
        net.run_for(50);
        let m = net.node(NodeId(1)).membership().clone();
        if m.contains(NodeId(3)) && net.node(NodeId(3)).is_member() {
            rejoined = true;
            break;
        }
    }
    assert!(rejoined, "node 3 is back");
    let mut later = Crowd::default();
    for _ in 0..4 {
        later.join(&mut net, NodeId(1));
        net.run_for(5);
    }
    for _ in 0..100 {
        later.run(&mut net, 50);
        let on_site: u64 = net.live().iter().map(|n| n.room().on_site()).sum();
        assert!(on_site <= 6, "t={}: {on_site} on the site", net.now);
    }
    assert!(
        later.all_admitted(),
        "node 3 counts its two visitors itself: four places are free"
    );
}

/// Checks `ticket` in at `node` every 600 ms for `ms`, as a visitor who never leaves: the last
/// answer (or the first refusal).
fn keep_checking_in(
    net: &mut Net,
    node: NodeId,
    mut ticket: Ticket,
    ms: u64,
) -> (Ticket, Result<CheckInStatus, VisitorError>, Option<u64>) {
    let end = net.now + ms;
    let mut claim_by = None;
    while net.now < end {
        net.run_for(600);
        match net.with(node, |n, now| n.check_in(now, &ticket)) {
            Ok(c) => {
                if c.status == CheckInStatus::Admitted {
                    let first = *claim_by.get_or_insert(c.ticket.expires_at);
                    assert_eq!(first, c.ticket.expires_at, "the claim window never moves");
                }
                ticket = c.ticket;
            }
            Err(e) => return (ticket, Err(e), claim_by),
        }
    }
    let status = net.with(node, |n, now| n.check_in(now, &ticket).map(|c| c.status));
    (ticket, status, claim_by)
}

/// waitingroom-distributed/README.md#one-admission-one-pass: an admission not used within its
/// claim window lapses, however often its visitor checks in: the next visitor gets the place,
/// and no node gives the first one a pass, neither the owner nor, once the owner is gone,
/// another node serving the ticket on its own.
#[test]
fn an_unused_admission_lapses_and_gets_no_pass_anywhere() {
    let settings = Settings {
        target_on_site: 1,
        pass_expiry_ms: 60_000,
        ..queued_settings()
    };
    let mut net = Net::new(3, settings, AdmissionMode::Range, 21);
    net.run_for(2_000);
    let a = net.with(NodeId(1), |n, now| n.join(now)).unwrap();
    net.run_for(10);
    let b = net.with(NodeId(2), |n, now| n.join(now)).unwrap();
    let (a_ticket, a_last, claim_by) = keep_checking_in(&mut net, NodeId(1), a.ticket, 5_000);
    assert_eq!(a_last, Ok(CheckInStatus::Admitted), "a was let out");
    let claim_by = claim_by.expect("a saw the admission");
    // b waits, checking in, while a keeps checking in with the admission unused.
    let (b_ticket, _, _) = keep_checking_in(&mut net, NodeId(2), b.ticket, 1_000);
    let (_, a_late, _) = keep_checking_in(&mut net, NodeId(1), a_ticket.clone(), 10_000);
    assert!(net.now > claim_by);
    assert_eq!(
        a_late,
        Err(VisitorError::Engine(EngineError::TicketExpired))
    );
    let (_, b_status, _) = keep_checking_in(&mut net, NodeId(2), b_ticket, 3_000);
    assert_eq!(b_status, Ok(CheckInStatus::Admitted), "the place went to b");
    let leave = net.with(NodeId(1), |n, now| n.leave(now, &a_ticket));
    assert_eq!(leave, Err(VisitorError::Engine(EngineError::TicketExpired)));
    net.kill(NodeId(1));
    net.run_for(8_000);
    assert!(!net.node(NodeId(3)).membership().contains(NodeId(1)));
    for node in [NodeId(2), NodeId(3)] {
        let check_in = net.with(node, |n, now| n.check_in_here(now, &a_ticket));
        assert_eq!(
            check_in.map(|c| c.status),
            Err(EngineError::TicketExpired.into())
        );
        let leave = net.with(node, |n, now| n.leave_here(now, &a_ticket));
        assert_eq!(leave, Err(VisitorError::Engine(EngineError::TicketExpired)));
    }
}

/// waitingroom-distributed/README.md#one-admission-one-pass: once the node that gave a pass is
/// gone, another node serving a leave of the same ticket gives the same pass (same id, same
/// creation and expiry), not a second one.
#[test]
fn a_leave_served_after_the_owner_died_gives_the_same_pass() {
    let settings = Settings {
        target_on_site: 2,
        ticket_expiry_ms: 30_000,
        pass_expiry_ms: 60_000,
        ..queued_settings()
    };
    let mut net = Net::new(3, settings, AdmissionMode::Range, 23);
    net.run_for(2_000);
    let a = net.with(NodeId(1), |n, now| n.join(now)).unwrap();
    let (ticket, status, _) = keep_checking_in(&mut net, NodeId(1), a.ticket, 3_000);
    assert_eq!(status, Ok(CheckInStatus::Admitted));
    let first = net.with(NodeId(1), |n, now| n.leave(now, &ticket)).unwrap();
    net.kill(NodeId(1));
    net.run_for(8_000);
    assert!(!net.node(NodeId(2)).membership().contains(NodeId(1)));
    for node in [NodeId(2), NodeId(3)] {
        let again = net.with(node, |n, now| n.leave_here(now, &ticket)).unwrap();
        let key = |p: &Pass| (p.id, p.created_at, p.expires_at, p.eviction_time);
        assert_eq!(key(&again), key(&first), "node {node}");
    }
}

/// waitingroom-distributed/README.md#fairness-records: the admitted ticket names the round that
/// let its holder out, so a node that joined after that round (it never saw its result) serves
/// the leave, once the owner is dead, with a pass that names the same round.
#[test]
fn a_leave_served_by_a_node_that_joined_after_the_round_names_it() {
    let settings = Settings {
        target_on_site: 50,
        ticket_expiry_ms: 30_000,
        pass_expiry_ms: 60_000,
        ..queued_settings()
    };
    let mut net = Net::new(2, settings, AdmissionMode::Range, 25);
    net.run_for(2_000);
    let a = net.with(NodeId(1), |n, now| n.join(now)).unwrap();
    let (ticket, status, _) = keep_checking_in(&mut net, NodeId(1), a.ticket, 3_000);
    assert_eq!(status, Ok(CheckInStatus::Admitted));
    let round = ticket.round.expect("the admitted ticket names its round");
    // Rounds that let others out, until the decided ranges (which carry the records) no longer
    // hold a's.
    let mut crowd = Crowd::default();
    for _ in 0..12 {
        crowd.join(&mut net, NodeId(2));
        crowd.run(&mut net, 1_000);
    }
    net.add_node(3, 25);
    net.run_for(3_000);
    assert!(net.node(NodeId(3)).is_member(), "node 3 joined");
    net.kill(NodeId(1));
    net.run_for(8_000);
    assert!(!net.node(NodeId(3)).membership().contains(NodeId(1)));
    let pass = net.with(NodeId(3), |n, now| n.leave_here(now, &ticket));
    assert_eq!(pass.map(|p| p.round), Ok(Some(round)));
}

/// waitingroom-distributed/README.md#one-admission-one-pass: a pass is extended only at the
/// node counting it, whatever node a copy reaches (the others answer `Elsewhere`), at most
/// once per quarter of the pass expiry; once that node is removed, every member names the
/// same heir, and copies refreshed anywhere are counted there alone.
#[test]
fn a_pass_refreshed_anywhere_is_counted_at_one_node() {
    let settings = Settings {
        target_on_site: 5,
        pass_expiry_ms: 20_000,
        ..queued_settings()
    };
    let mut net = Net::new(3, settings, AdmissionMode::Range, 29);
    net.run_for(2_000);
    let a = net.with(NodeId(1), |n, now| n.join(now)).unwrap();
    let (ticket, _, _) = keep_checking_in(&mut net, NodeId(1), a.ticket, 3_000);
    let pass = net.with(NodeId(1), |n, now| n.leave(now, &ticket)).unwrap();
    net.run_for(6_000);
    for node in [NodeId(2), NodeId(3)] {
        let r = net.with(node, |n, now| n.refresh_pass(now, &pass));
        assert!(
            matches!(&r, Err(VisitorError::Elsewhere(c)) if c.id == NodeId(1)),
            "{r:?}"
        );
        assert_eq!(net.node(node).room().on_site(), 0);
    }
    let refreshed = net
        .with(NodeId(1), |n, now| n.refresh_pass(now, &pass))
        .unwrap();
    let again = net.with(NodeId(1), |n, now| n.refresh_pass(now, &pass));
    assert!(
        matches!(
            again,
            Err(VisitorError::Engine(EngineError::RefreshTooSoon { .. }))
        ),
        "{again:?}"
    );
    net.kill(NodeId(1));
    net.run_for(8_000);
    let heir = net.node(NodeId(2)).heir_of(pass.id).unwrap();
    assert_eq!(net.node(NodeId(3)).heir_of(pass.id), Some(heir));
    let other = if heir == NodeId(2) {
        NodeId(3)
    } else {
        NodeId(2)
    };
    for copy in [&pass, &refreshed] {
        let r = net.with(other, |n, now| n.refresh_pass(now, copy));
        assert!(
            matches!(&r, Err(VisitorError::Elsewhere(c)) if c.id == heir),
            "{r:?}"
        );
    }
    let moved = net
        .with(heir, |n, now| n.refresh_pass(now, &refreshed))
        .unwrap();
    assert_eq!(moved.node, heir);
    assert_eq!(net.node(heir).room().on_site(), 1);
    assert_eq!(net.node(other).room().on_site(), 0);
    let old = net.with(heir, |n, now| n.refresh_pass(now, &pass));
    assert!(
        matches!(
            old,
            Err(VisitorError::Engine(EngineError::RefreshTooSoon { .. }))
        ),
        "an old copy extends nothing: {old:?}"
    );
}

/// waitingroom-distributed/README.md#live-settings: two changes made at two nodes within one
/// round are both applied, in the order they were made, also when the root dies right after
/// them; the answer to the change that lost the tie is confirmed only once the version made
/// again on top of the winner has gone round.
#[test]
fn changes_made_at_two_nodes_within_one_round_are_both_applied_in_order() {
    for (first, second, kill_root) in [(1, 2, false), (2, 1, false), (0, 0, true)] {
        let mut net = Net::new(4, queued_settings(), AdmissionMode::Range, 7);
        net.run_for(2_000);
        let root = net.live().iter().find(|n| n.is_root()).unwrap().id();
        let others: Vec<u64> = net
            .ids()
            .iter()
            .map(|id| id.0)
            .filter(|&id| id != root.0)
            .collect();
        let (first, second) = if kill_root {
            (others[2], others[0])
        } else {
            (first, second)
        };
        let a = change(&mut net, first, serde_json::json!({"mode": "queue_all"}));
        net.run_for(5);
        let b = change(
            &mut net,
            second,
            serde_json::json!({"mode": "normal", "target_on_site": 9}),
        );
        let c = change(
            &mut net,
            first,
            serde_json::json!({"pass_expiry_ms": 4_000}),
        );
        assert_eq!((a.version, b.version), (1, 1), "made at once");
        if kill_root {
            net.kill(root);
        }
        net.run_for(8_000);
        let live = net.live();
        let settled = live[0].live_settings().clone();
        for n in &live {
            assert_eq!(n.live_settings(), &settled, "node {}", n.id());
            assert_eq!(
                settled.mode,
                waitingroom_distributed::Mode::Normal,
                "normal came last: {settled:?}"
            );
            let s = n.room().settings();
            assert_eq!((s.target_on_site, s.pass_expiry_ms), (9, 4_000));
            for made in [&a, &b, &c] {
                assert!(n.settings_confirmed(made), "node {} {made:?}", n.id());
            }
        }
    }
}

/// Runs `crowd` on `net` until its live nodes are one cluster again (at most `limit_ms`),
/// checking that the site never holds more than `target`; returns how long it took.
fn converge_within_target(net: &mut Net, crowd: &mut Crowd, target: u64, limit_ms: u64) -> u64 {
    let start = net.now;
    while !invariants::converged(&net.live()) {
        assert!(
            net.now < start + limit_ms,
            "not one cluster again: {:#?}",
            net.live()
                .iter()
                .map(|n| (n.id(), n.membership().members.keys().collect::<Vec<_>>()))
                .collect::<Vec<_>>()
        );
        crowd.run(net, 50);
        assert!(granted_and_held(net) <= target, "t={}", net.now);
    }
    net.now - start
}

/// waitingroom-distributed/README.md#partitions: a rolling restart with the README's command
/// lines (node 1 starts a cluster of its own every time, the others join through the live
/// nodes; each remembers the voters, as with the server's `--voters-file`): the cluster that
/// lost node 1 hears from it at its old address and invites it back, so every restart ends in
/// one cluster within a few probe periods, within the target all along.
#[test]
fn a_rolling_restart_with_node_1_started_alone_converges() {
    let target = 6;
    let settings = Settings {
        target_on_site: target,
        pass_expiry_ms: 2_000,
        ticket_expiry_ms: 2_000,
        ..queued_settings()
    };
    let mut net = Net::new(3, settings, AdmissionMode::Range, 41);
    net.run_for(2_000);
    let mut crowd = Crowd::default();
    for order in [[1, 2, 3], [3, 2, 1]] {
        for id in order {
            for i in 0..6 {
                let ids = net.ids();
                crowd.join(&mut net, ids[i % ids.len()]);
                net.run_for(20);
            }
            let voters = net.node(NodeId(id)).agreed_voters().cloned();
            // Stopped as an operator stops it (SIGTERM): it leaves, then exits.
            net.with(NodeId(id), |n, now| n.shutdown(now));
            net.run_for(100);
            net.kill(NodeId(id));
            crowd.run(&mut net, 1_500);
            if id == 1 {
                net.restart_alone(id, 41, voters.as_ref());
            } else {
                net.add_node_remembering(id, 41, voters.as_ref());
            }
            let took = converge_within_target(&mut net, &mut crowd, target, 10_000);
            // The probe period is 500 ms: a few of them.
            assert!(took <= 5_000, "node {id} back after {took} ms");
        }
    }
    assert_eq!(net.node(NodeId(1)).membership().members.len(), 3);
}

/// waitingroom-distributed/README.md#partitions: two nodes of three restarted alone (each
/// starts a cluster of one, remembering the voters), the third gone: each is one voter of
/// three and lets nobody out. Once one of them learns where the other is (DNS, say), the two
/// clusters of one merge, the one with the higher id joining the other, and the pair, a
/// majority of the voters, lets everyone in, the site never over its target.
#[test]
fn two_nodes_restarted_alone_merge() {
    let target = 4;
    let settings = Settings {
        target_on_site: target,
        pass_expiry_ms: 2_000,
        ticket_expiry_ms: 2_000,
        ..queued_settings()
    };
    let mut net = Net::new(3, settings, AdmissionMode::Range, 42);
    net.run_for(3_000);
    let voters = net.node(NodeId(1)).agreed_voters().cloned();
    assert_eq!(voters.as_ref().map(|v| v.ids().count()), Some(3));
    for id in 1..=3 {
        net.kill(NodeId(id));
    }
    net.restart_alone(1, 42, voters.as_ref());
    net.restart_alone(2, 42, voters.as_ref());
    let mut crowd = Crowd::default();
    for i in 0..8 {
        crowd.join(&mut net, NodeId(1 + i % 2));
        net.run_for(20);
    }
    crowd.run(&mut net, 3_000);
    assert!(
        crowd.admitted.iter().all(|a| !a),
        "one voter of three lets nobody out"
    );
    net.with(NodeId(2), |n, _| n.discovered(&["n1".to_string()]));
    let took = converge_within_target(&mut net, &mut crowd, target, 10_000);
    assert!(took <= 5_000, "merged after {took} ms");
    assert_eq!(net.node(NodeId(1)).membership().members.len(), 2);
    for _ in 0..300 {
        crowd.run(&mut net, 50);
        assert!(granted_and_held(&net) <= target, "t={}", net.now);
    }
    assert!(crowd.all_admitted(), "everyone got in after the merge");
}

/// waitingroom-distributed/README.md#swim: the root stopped for 20 s (SIGSTOP) is removed by
/// the others; thawed, it does not blame the healthy for the probe it had out across its own
/// pause, its stale view is not merged back, and it rejoins: no healthy node is ever removed.
#[test]
fn a_thawed_root_evicts_no_healthy_node() {
    thawed_root_evicts_no_healthy_node(3_000, 0);
}

/// As above, the root stopped as soon as the cluster formed, before its first probe period, so
/// that its first one, after the pause, has none before it to show the pause; and for 700 ms
/// after the thaw it hears nobody (what piled up for it is still being refused), so the pings
/// it sends go unanswered until it learns it was removed and rejoins: once a member again, the
/// probe its previous life had out is no evidence against its target.
#[test]
fn a_root_thawed_before_its_first_probe_evicts_no_healthy_node() {
    thawed_root_evicts_no_healthy_node(0, 700);
}

/// Freezes the root `settle_ms` after the cluster formed, for 20 s; thawed, it is cut off for
/// `deaf_ms`. No node but the root is removed in the 10 s after the thaw, and all three end up
/// members again.
fn thawed_root_evicts_no_healthy_node(settle_ms: Time, deaf_ms: Time) {
    let mut net = Net::new(3, queued_settings(), AdmissionMode::Range, 43);
    net.run_for(settle_ms);
    let root = NodeId(1);
    assert!(net.node(root).is_root());
    net.freeze(root);
    net.run_for(20_000);
    net.thaw(root);
    let thawed_at = net.events.len();
    for other in [NodeId(2), NodeId(3)] {
        net.cut(root, other);
    }
    net.run_for(deaf_ms);
    net.heal();
    net.run_for(10_000 - deaf_ms);
    let healthy_removed: Vec<_> = net.events[thawed_at..]
        .iter()
        .filter(
            |(_, e)| matches!(e, Event::MemberRemoved(c) | Event::MemberFailed(c) if c.id != root),
        )
        .collect();
    assert!(healthy_removed.is_empty(), "{healthy_removed:?}");
    let live = net.live();
    assert!(invariants::converged(&live));
    assert_eq!(live[0].membership().members.len(), 3);
}

/// A 3-node cluster, target 3, with three visitors on the site under 60-s passes and three
/// more waiting; then every node stops at once and comes back: from its kept state (`restore`)
/// or from nothing (`forget`). Returns the net, the crowd and how many of the three waiting
/// were let in within the next 20 s.
fn whole_cluster_restart(seed: u64, past: fn(&mut Node, Time, &Durable)) -> (Net, Crowd, usize) {
    let settings = Settings {
        target_on_site: 3,
        pass_expiry_ms: 60_000,
        // The waiting keep their tickets while the first node back gives up on finding the
        // others and founds the cluster again (`join_timeout_ms`).
        ticket_expiry_ms: 30_000,
        ..queued_settings()
    };
    let mut net = Net::new(3, settings, AdmissionMode::Range, seed);
    net.run_for(2_000);
    let mut crowd = Crowd::default();
    for i in 0..3 {
        crowd.join(&mut net, NodeId(1 + i));
    }
    crowd.run(&mut net, 3_000);
    assert_eq!(crowd.passes.len(), 3, "the first three are on the site");
    for i in 0..3 {
        crowd.join(&mut net, NodeId(1 + i));
    }
    crowd.run(&mut net, 3_000);
    assert_eq!(crowd.passes.len(), 3, "the site is full");
    let kept: Vec<Durable> = (1..=3).map(|id| net.node(NodeId(id)).durable()).collect();
    for id in 1..=3 {
        net.kill(NodeId(id));
    }
    net.run_for(1_000);
    for (id, kept) in (1..=3).zip(&kept) {
        net.add_node_with(id, seed + 1, |node, now| past(node, now, kept));
    }
    crowd.run(&mut net, 20_000);
    let waiting_let_in = (3..6).filter(|i| crowd.admitted[*i]).count();
    (net, crowd, waiting_let_in)
}

/// waitingroom-distributed/README.md#durable-state: nodes restored from what they kept count
/// the passes given before the restart, so nobody else is let in while they are valid, and a
/// ticket already exchanged for a pass gets no second one.
#[test]
fn a_whole_cluster_restarted_from_its_kept_state_still_counts_the_passes() {
    let (mut net, crowd, let_in) =
        whole_cluster_restart(51, |node, now, kept| node.restore(now, kept));
    assert_eq!(let_in, 0, "the three passes still hold the target");
    let used = crowd.tickets[0].clone();
    let again = net.with(used.node, |n, now| n.leave(now, &used));
    assert_eq!(
        again,
        Err(VisitorError::Engine(EngineError::AlreadyLeft)),
        "a used ticket gets no second pass"
    );
    let now = net.now;
    assert_eq!(net.node(NodeId(1)).forgotten_past_hold_ms(now), 0);
}

/// waitingroom-distributed/README.md#durable-state: nodes that come back without their state
/// and find nobody who remembers the site hold the whole target until every pass an earlier
/// life could have given has expired, and say so; then the room admits again.
#[test]
fn a_whole_cluster_restarted_without_state_holds_the_target_until_the_passes_expire() {
    let (mut net, mut crowd, let_in) =
        whole_cluster_restart(52, |node, _, _| node.assume_forgotten_past());
    assert_eq!(let_in, 0, "nobody is let in over passes nobody counts");
    let now = net.now;
    let hold = net.node(NodeId(2)).forgotten_past_hold_ms(now);
    assert!(hold > 30_000, "every member shows the hold: {hold} ms left");
    crowd.run(&mut net, hold + 10_000);
    let let_in = (3..6).filter(|i| crowd.admitted[*i]).count();
    assert_eq!(let_in, 3, "once it has expired, the room admits again");
}

/// waitingroom-distributed/README.md#restart-grace: the visitors waiting when the whole cluster
/// went down found nobody to check in at, and their tickets ran out meanwhile; the restarted
/// nodes take them back under their join times, and let them out when the passes free places.
#[test]
fn tickets_that_ran_out_while_the_whole_cluster_was_down_keep_their_places() {
    let settings = Settings {
        target_on_site: 3,
        pass_expiry_ms: 60_000,
        ticket_expiry_ms: 30_000,
        ..queued_settings()
    };
    let mut net = Net::new(3, settings, AdmissionMode::Range, 54);
    net.run_for(2_000);
    let mut crowd = Crowd::default();
    for i in 0..6 {
        crowd.join(&mut net, NodeId(1 + i % 3));
        crowd.run(&mut net, 500);
    }
    crowd.run(&mut net, 3_000);
    assert_eq!(crowd.passes.len(), 3, "three on the site, three waiting");
    let kept: Vec<Durable> = (1..=3).map(|id| net.node(NodeId(id)).durable()).collect();
    for id in 1..=3 {
        net.kill(NodeId(id));
    }
    net.run_for(31_000);
    let now = net.now;
    let waiting: Vec<usize> = (0..6).filter(|i| !crowd.admitted[*i]).collect();
    assert!(
        waiting.iter().all(|&i| crowd.tickets[i].expires_at <= now),
        "every waiting ticket ran out while nobody was up"
    );
    for (id, kept) in (1..=3).zip(&kept) {
        net.add_node_with(id, 55, |node, now| node.restore(now, kept));
    }
    // A ticket refused here would fail the crowd's check-in.
    crowd.run(&mut net, 40_000);
    assert!(
        crowd.all_admitted(),
        "the waiting are let in once the passes expire"
    );
    let joined = |i: usize| crowd.tickets[i].join_time;
    let let_out = |i: usize| crowd.passes[&i].eviction_time;
    assert!(
        waiting
            .windows(2)
            .all(|w| joined(w[0]) > joined(w[1]) || let_out(w[0]) <= let_out(w[1])),
        "in the order they joined before the restart"
    );
}

/// waitingroom-distributed/README.md#durable-state: a node killed and restarted from its state
/// before the others noticed its death replaces its earlier life in the membership; that
/// life's departed places are dropped at the new life's first count (it counts the visitors
/// itself), not held until its passes could have expired.
#[test]
fn a_life_replaced_by_its_restored_successor_holds_no_departed_places() {
    let settings = Settings {
        target_on_site: 3,
        pass_expiry_ms: 60_000,
        ticket_expiry_ms: 30_000,
        ..queued_settings()
    };
    let mut net = Net::new(3, settings, AdmissionMode::Range, 61);
    net.run_for(2_000);
    let mut crowd = Crowd::default();
    crowd.join(&mut net, NodeId(3));
    crowd.run(&mut net, 3_000);
    assert_eq!(
        crowd.passes.len(),
        1,
        "one visitor on the site, let out by node 3"
    );
    let kept = net.node(NodeId(3)).durable();
    net.kill(NodeId(3));
    net.add_node_with(3, 62, |node, now| node.restore(now, &kept));
    crowd.run(&mut net, 3_000);
    let summary = net
        .node(NodeId(1))
        .summary()
        .cloned()
        .expect("rounds go on");
    assert_eq!(summary.members, 3);
    assert_eq!(
        summary.departed,
        [],
        "the earlier life is counted by its successor"
    );
    assert_eq!(summary.on_site, 1);
}
