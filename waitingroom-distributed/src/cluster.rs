//! Membership changes: joining, applying a new tree, resolving conflicts, leaving, and merging
//! the two sides of a healed partition.

use std::collections::BTreeSet;

use waitingroom_core::{NodeId, Time};

use crate::membership::Membership;
use crate::messages::{Body, ChannelMsg, ClusterRank, Contact};
use crate::node::{Event, Node, Phase, Timer};

impl Node {
    pub(crate) fn send_join_request(&mut self, now: Time) {
        let Phase::Joining { seeds, next } = &mut self.phase else {
            return;
        };
        if seeds.is_empty() {
            return;
        }
        let addr = seeds[*next % seeds.len()].clone();
        *next += 1;
        let to = Contact {
            id: NodeId(0),
            incarnation: 0,
            addr,
        };
        let body = Body::JoinRequest {
            contact: self.me.clone(),
        };
        self.send_raw(&to, body);
        self.arm(now + self.cfg.join_retry_ms, Timer::JoinRetry);
    }

    pub(crate) fn on_join_request(&mut self, now: Time, contact: Contact) {
        if !self.is_member() || contact.id == self.me.id || contact.id.0 == 0 {
            return;
        }
        if let Some(existing) = self.membership.members.get(&contact.id) {
            if existing.incarnation == contact.incarnation {
                // Our answer was lost, or is on its way: say it again.
                let m = ChannelMsg::Tree(self.membership.clone());
                self.send(now, &contact, m);
                return;
            }
            if existing.incarnation > contact.incarnation {
                return;
            }
        }
        if self
            .membership
            .removed
            .get(&contact.id)
            .is_some_and(|&gone| gone >= contact.incarnation)
        {
            return;
        }
        let next = self
            .membership
            .with_added(contact, self.cfg.max_tree_degree);
        self.commit_membership(now, next);
    }

    /// Applies a membership this node decided on and tells everyone.
    pub(crate) fn commit_membership(&mut self, now: Time, next: Membership) {
        // Broadcast first: on each link the Tree then precedes the updates applying it causes.
        self.broadcast_membership(now, &next);
        self.apply_membership(now, next);
    }

    pub(crate) fn broadcast_membership(&mut self, now: Time, m: &Membership) {
        let me = self.me.id;
        let targets: Vec<Contact> = m.members.values().filter(|c| c.id != me).cloned().collect();
        for c in targets {
            self.send(now, &c, ChannelMsg::Tree(m.clone()));
        }
    }

    pub(crate) fn on_tree(&mut self, now: Time, from: NodeId, m: Membership) {
        let includes_me = m
            .members
            .get(&self.me.id)
            .is_some_and(|c| c.incarnation == self.me.incarnation);
        match self.phase {
            Phase::Joining { .. } => {
                if includes_me {
                    self.phase = Phase::Member;
                    self.emit(Event::Joined { version: m.version });
                    self.apply_membership(now, m);
                }
            }
            Phase::Member => {
                if m.version > self.membership.version {
                    self.apply_membership(now, m);
                } else if m.version == self.membership.version && m != self.membership {
                    let merged = self.membership.merged(&m, self.cfg.max_tree_degree);
                    self.commit_membership(now, merged);
                } else if m.version < self.membership.version && self.membership.contains(from) {
                    let mine = ChannelMsg::Tree(self.membership.clone());
                    self.send_to(now, from, mine);
                }
            }
            Phase::Idle | Phase::Stopped => {}
        }
    }

    /// Makes `m` this node's membership: diff the members and this node's tree edges, and
    /// re-initialise QPID for the new neighbours.
    pub(crate) fn apply_membership(&mut self, now: Time, m: Membership) {
        let me = self.me.id;
        let includes_me = m
            .members
            .get(&me)
            .is_some_and(|c| c.incarnation == self.me.incarnation);
        if !includes_me {
            let removed_me = m
                .removed
                .get(&me)
                .is_some_and(|&gone| gone >= self.me.incarnation);
            if removed_me && self.is_member() {
                let seeds = m.members.values().map(|c| c.addr.clone()).collect();
                self.rejoin(now, seeds);
            }
            return;
        }
        let old = std::mem::replace(&mut self.membership, m);
        let same = |a: &Membership, c: &Contact| {
            a.members
                .get(&c.id)
                .is_some_and(|x| x.incarnation == c.incarnation)
        };
        let gone: Vec<Contact> = old
            .members
            .values()
            .filter(|c| !same(&self.membership, c))
            .cloned()
            .collect();
        let added: Vec<Contact> = self
            .membership
            .members
            .values()
            .filter(|c| c.id != me && !same(&old, c))
            .cloned()
            .collect();
        for c in gone {
            self.channels.remove(c.id);
            self.swim.forget(c.id);
            self.remember_former(c.clone());
            self.emit(Event::MemberRemoved(c));
        }
        for c in added {
            self.formers.remove(&c.id);
            self.emit(Event::MemberAdded(c));
        }
        let neighbours: BTreeSet<NodeId> = self.membership.neighbours(me).into_iter().collect();
        self.tag.round = None;
        self.qpid_apply(now, &neighbours);
        let pending = std::mem::take(&mut self.future);
        for (from, msg) in pending {
            self.on_channel_msg(now, from, msg);
        }
    }

    /// This node was removed from its cluster (declared dead, or its cluster lost to another
    /// after a partition): start a new life and ask to be let back in. Visitors queued here
    /// stay queued.
    pub(crate) fn rejoin(&mut self, now: Time, seeds: Vec<String>) {
        self.emit(Event::Rejoining);
        let old = std::mem::take(&mut self.membership);
        for c in old.members.into_values() {
            self.remember_former(c);
        }
        self.me.incarnation += 1;
        self.channels.clear();
        self.future.clear();
        self.qpid = Default::default();
        self.tag.round = None;
        self.phase = Phase::Joining { seeds, next: 0 };
        self.send_join_request(now);
    }

    /// Someone says we are not in its cluster.
    pub(crate) fn on_not_member(
        &mut self,
        now: Time,
        from: &Contact,
        cluster: ClusterRank,
        version: u64,
    ) {
        if !self.is_member() {
            return;
        }
        if self.membership.contains(from.id) {
            if version > self.membership.version {
                // A cluster mate moved on without us: we were declared dead.
                self.rejoin(now, vec![from.addr.clone()]);
            } else {
                // It is behind: show it our membership.
                let mine = ChannelMsg::Tree(self.membership.clone());
                self.send(now, from, mine);
            }
            return;
        }
        if cluster < self.membership.rank() {
            // A partition healed and the other side ranks higher: leave ours and join theirs.
            if let Some(next) = self.membership.with_removed(
                self.me.id,
                self.me.incarnation,
                self.cfg.max_tree_degree,
            ) {
                self.broadcast_membership(now, &next);
            }
            self.rejoin(now, vec![from.addr.clone()]);
        }
    }
}
