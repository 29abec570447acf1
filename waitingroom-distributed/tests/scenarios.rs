//! Hand-written protocol scenarios, driven deterministically by a tiny in-process network.

mod harness;

use harness::Net;
use waitingroom_core::{CheckInStatus, Settings};
use waitingroom_distributed::{AdmissionMode, invariants};

fn queued_settings() -> Settings {
    Settings {
        target_on_site: Settings::UNLIMITED,
        refresh_interval_ms: 600,
        ticket_expiry_ms: 10_000,
        pass_expiry_ms: 0,
        eviction_interval_ms: 1_000,
        cleanup_interval_ms: 1_000,
        admit_straight_through: false,
    }
}

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
