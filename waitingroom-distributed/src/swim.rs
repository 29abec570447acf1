//! SWIM failure detection: probe one member per period in a shuffled round-robin order; when a
//! ping goes unanswered, ask `k` others to probe it too (links lose packets); a member that
//! fails `1 + suspect_rounds` probe periods in a row is declared dead and removed.

use std::collections::BTreeMap;

use rand::seq::{IndexedRandom, SliceRandom};
use waitingroom_core::{NodeId, Time};

use crate::membership::{Contact, View};
use crate::messages::Body;
use crate::node::Node;
use crate::outputs::Event;
use crate::timer::Timer;

/// Most indirect probes relayed for others at once.
const MAX_RELAYS: usize = 256;

#[derive(Debug, Clone, Default)]
pub(crate) struct Swim {
    order: Vec<NodeId>,
    next: usize,
    probe: Option<Probe>,
    strikes: BTreeMap<NodeId, u32>,
    /// Our nonce of a ping we sent for someone else → (requester, their nonce).
    relays: BTreeMap<u64, (Contact, u64)>,
    nonce: u64,
    /// A member the transport failed to reach: probed before the round-robin order goes on.
    urgent: Option<NodeId>,
}

#[derive(Debug, Clone)]
struct Probe {
    target: Contact,
    nonce: u64,
    acked: bool,
}

impl Swim {
    fn next_nonce(&mut self) -> u64 {
        self.nonce += 1;
        self.nonce
    }

    pub fn forget(&mut self, id: NodeId) {
        self.strikes.remove(&id);
    }

    /// Probes `id` next.
    pub fn prioritise(&mut self, id: NodeId) {
        self.urgent = Some(id);
    }
}

impl Node {
    pub(crate) fn on_probe_tick(&mut self, now: Time) {
        if !self.is_member() {
            return;
        }
        let mut retry = None;
        if let Some(p) = self.swim.probe.take() {
            let still_member = self
                .membership
                .members
                .get(&p.target.id)
                .is_some_and(|c| c.incarnation == p.target.incarnation);
            if p.acked || !still_member {
                self.swim.strikes.remove(&p.target.id);
            } else {
                let strikes = self.swim.strikes.entry(p.target.id).or_insert(0);
                *strikes += 1;
                if *strikes > self.cfg.suspect_rounds {
                    self.swim.strikes.remove(&p.target.id);
                    self.declare_dead(now, p.target);
                    return;
                }
                retry = Some(p.target);
            }
        }
        let Some(target) = retry.or_else(|| self.next_probe_target()) else {
            return;
        };
        let nonce = self.swim.next_nonce();
        let view = self.view;
        self.send_raw(&target, Body::Ping { nonce, view });
        self.arm(now + self.cfg.probe_timeout_ms, Timer::ProbeTimeout(nonce));
        self.swim.probe = Some(Probe {
            target,
            nonce,
            acked: false,
        });
    }

    fn next_probe_target(&mut self) -> Option<Contact> {
        if let Some(c) = self
            .swim
            .urgent
            .take()
            .and_then(|id| self.membership.members.get(&id))
            .filter(|c| c.id != self.me.id)
        {
            return Some(c.clone());
        }
        for _ in 0..2 {
            while self.swim.next < self.swim.order.len() {
                let id = self.swim.order[self.swim.next];
                self.swim.next += 1;
                if let Some(c) = self.membership.members.get(&id) {
                    return Some(c.clone());
                }
            }
            let me = self.me.id;
            let mut order: Vec<NodeId> = self
                .membership
                .members
                .keys()
                .copied()
                .filter(|&n| n != me)
                .collect();
            order.shuffle(&mut self.rng);
            self.swim.order = order;
            self.swim.next = 0;
        }
        None
    }

    pub(crate) fn on_probe_timeout(&mut self, _now: Time, nonce: u64) {
        let Some(p) = self.swim.probe.as_ref() else {
            return;
        };
        if p.nonce != nonce || p.acked {
            return;
        }
        let target = p.target.clone();
        let me = self.me.id;
        let mut helpers: Vec<Contact> = self
            .membership
            .members
            .values()
            .filter(|c| c.id != me && c.id != target.id)
            .cloned()
            .collect();
        helpers.shuffle(&mut self.rng);
        helpers.truncate(self.cfg.indirect_probes);
        for h in helpers {
            let body = Body::PingReq {
                target: target.clone(),
                nonce,
            };
            self.send_raw(&h, body);
        }
    }

    pub(crate) fn on_ping(&mut self, _now: Time, from: &Contact, nonce: u64, view: View) {
        let body = Body::PingAck {
            nonce,
            target: self.me.id,
            view: self.view,
        };
        self.send_raw(from, body);
        if view.version > 0 {
            self.learn_seed(&from.addr);
        }
        self.compare_views(from, view);
        if self.is_member() && !self.membership.contains(from.id) {
            let body = Body::NotMember {
                cluster: self.membership.rank(),
                version: self.membership.version,
            };
            self.send_raw(from, body);
        }
    }

    pub(crate) fn on_ping_ack(
        &mut self,
        _now: Time,
        from: &Contact,
        nonce: u64,
        target: NodeId,
        view: View,
    ) {
        if from.id == target {
            self.compare_views(from, view);
        }
        if let Some(p) = self.swim.probe.as_mut()
            && p.nonce == nonce
            && p.target.id == target
        {
            p.acked = true;
            return;
        }
        if let Some((requester, their_nonce)) = self.swim.relays.remove(&nonce) {
            let body = Body::PingAck {
                nonce: their_nonce,
                target,
                view,
            };
            self.send_raw(&requester, body);
        }
    }

    pub(crate) fn on_ping_req(&mut self, _now: Time, from: &Contact, target: Contact, nonce: u64) {
        if !self.is_member() || !self.membership.contains(from.id) {
            return;
        }
        let ours = self.swim.next_nonce();
        if self.swim.relays.len() >= MAX_RELAYS {
            self.swim.relays.pop_first();
        }
        self.swim.relays.insert(ours, (from.clone(), nonce));
        let view = self.view;
        self.send_raw(&target, Body::Ping { nonce: ours, view });
    }

    fn declare_dead(&mut self, now: Time, target: Contact) {
        if let Some(next) =
            self.membership
                .with_removed(target.id, target.incarnation, self.cfg.max_tree_degree)
        {
            self.emit(Event::MemberFailed(target));
            self.commit_membership(now, next);
        }
    }

    /// Pings a former member now and then: if it lives in another cluster (a healed
    /// partition), its answer tells us, and the lesser cluster joins the greater.
    pub(crate) fn probe_a_former(&mut self, _now: Time) {
        if !self.is_member() {
            return;
        }
        let mut candidates: Vec<Contact> = self.formers.values().cloned().collect();
        let member_addrs: Vec<&str> = self.membership.members.values().map(|c| &*c.addr).collect();
        candidates.extend(
            self.seed_addrs
                .iter()
                .filter(|a| !member_addrs.contains(&a.as_str()) && a.as_str() != &*self.me.addr)
                .map(|addr| Contact {
                    id: NodeId(0),
                    incarnation: 0,
                    addr: addr.as_str().into(),
                }),
        );
        if let Some(c) = candidates.choose(&mut self.rng).cloned() {
            let nonce = self.swim.next_nonce();
            let view = self.view;
            self.send_raw(&c, Body::Ping { nonce, view });
        }
    }
}
