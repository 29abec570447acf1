//! Membership changes: joining, applying a new tree, resolving conflicts, leaving, and merging
//! the two sides of a healed partition.

use waitingroom_core::{NodeId, Time};

use crate::membership::{ClusterRank, Contact, Membership, View};
use crate::messages::{Body, ChannelMsg};
use crate::node::{Node, Phase};
use crate::outputs::{Event, Outbox};
use crate::timer::Timer;

impl Node {
    pub(crate) fn send_join_request(&mut self, now: Time) {
        let give_up = self.cfg.join_timeout_ms;
        let Phase::Joining { seeds, next, since } = &mut self.phase else {
            return;
        };
        if seeds.is_empty() || now >= *since + give_up {
            // Nobody answers: serve visitors alone rather than not at all. Should the others
            // come back, the partition merge brings the clusters together.
            for s in std::mem::take(seeds) {
                if !self.seed_addrs.contains(&s) {
                    self.seed_addrs.push(s);
                }
            }
            self.become_single(now);
            return;
        }
        let addr = seeds[*next % seeds.len()].clone();
        *next += 1;
        let to = Contact {
            id: NodeId(0),
            incarnation: 0,
            addr: addr.into(),
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
                let m = Body::Tree(Box::new(self.membership.clone()));
                self.send_raw(&contact, m);
                return;
            }
            if existing.incarnation > contact.incarnation {
                return;
            }
        }
        if self.membership.is_gone(contact.id, contact.incarnation) {
            return;
        }
        let next = self
            .membership
            .with_added(contact, self.cfg.max_tree_degree);
        self.commit_membership(now, next);
    }

    /// Applies a membership this node decided on and tells everyone.
    pub(crate) fn commit_membership(&mut self, now: Time, next: Membership) {
        self.broadcast_membership(&next);
        self.apply_membership(now, next);
    }

    pub(crate) fn broadcast_membership(&mut self, m: &Membership) {
        let me = self.me.id;
        let targets: Vec<Contact> = m.members.values().filter(|c| c.id != me).cloned().collect();
        for c in targets {
            self.send_raw(&c, Body::Tree(Box::new(m.clone())));
        }
    }

    /// Anti-entropy: a peer's probe showed its membership view. Send ours if it is behind, or
    /// if it conflicts with ours (same version, other content; it will merge, as will we).
    pub(crate) fn compare_views(&mut self, peer: &Contact, view: View) {
        if !self.is_member() {
            return;
        }
        let mine = self.view;
        let behind = view.version < mine.version;
        let conflicting = view.version == mine.version && view.digest != mine.digest;
        if behind || conflicting {
            self.send_raw(peer, Body::Tree(Box::new(self.membership.clone())));
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
            Phase::Member if includes_me => {
                if m.version > self.membership.version {
                    self.apply_membership(now, m);
                } else if m.version == self.membership.version && m != self.membership {
                    // Two changes made concurrently from one membership: merge deterministically.
                    let merged = self.membership.merged(&m, self.cfg.max_tree_degree);
                    self.commit_membership(now, merged);
                } else if m.version < self.membership.version
                    && let Some(c) = self.membership.members.get(&from).cloned()
                {
                    self.send_raw(&c, Body::Tree(Box::new(self.membership.clone())));
                }
            }
            Phase::Member => {
                // A membership without us: either our cluster removed us (a newer version that
                // says so), or it is another cluster (after a partition), which the partition
                // merge handles, not this.
                let removed_me = m.is_gone(self.me.id, self.me.incarnation);
                if removed_me && m.version > self.membership.version {
                    self.apply_membership(now, m);
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
            let removed_me = m.is_gone(me, self.me.incarnation);
            if removed_me && self.is_member() {
                let seeds = m.members.values().map(|c| c.addr.to_string()).collect();
                self.rejoin(now, seeds);
            }
            return;
        }
        let old = std::mem::replace(&mut self.membership, m);
        self.view = self.membership.view();
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
            self.swim.forget(c.id);
            self.tag.member_departed(now, c.id, self.membership.version);
            self.remember_former(c.clone());
            self.emit(Event::MemberRemoved(c));
        }
        for c in added {
            self.formers.remove(&c.id);
            let mut out = Outbox::default();
            for ticket in self.forgets.remove(&c.id).unwrap_or_default() {
                out.send_to(c.clone(), ChannelMsg::Forget { ticket });
            }
            self.send_outbox(now, out);
            self.emit(Event::MemberAdded(c));
        }
        let neighbours = self.membership.neighbours(me);
        self.tag.abandon_round();
        self.qpid_apply(now, &neighbours);
        let pending = std::mem::take(&mut self.future);
        for (from, msg) in pending {
            self.on_channel_msg(now, from, msg);
        }
    }

    /// This node was removed from its cluster (declared dead, or its cluster lost to another
    /// after a partition): start a new life and ask to be let back in. Visitors queued here
    /// stay queued.
    pub(crate) fn rejoin(&mut self, now: Time, mut seeds: Vec<String>) {
        self.emit(Event::Rejoining);
        let old = std::mem::take(&mut self.membership);
        self.view = self.membership.view();
        for c in old.members.into_values() {
            self.remember_former(c);
        }
        // The first seeds are the best bets; any former member may be alive too.
        for c in self.formers.values() {
            if !seeds.iter().any(|s| **s == *c.addr) {
                seeds.push(c.addr.to_string());
            }
        }
        seeds.retain(|a| **a != *self.me.addr);
        self.me.incarnation += 1;
        self.channels.clear();
        self.qpid.reset();
        // Another cluster's decisions do not apply to the queue we are joining.
        self.tag.rejoined();
        self.phase = Phase::Joining {
            seeds,
            next: 0,
            since: now,
        };
        self.send_join_request(now);
    }

    /// A joining node probed by a cluster member learns one more address to ask.
    pub(crate) fn learn_seed(&mut self, addr: &str) {
        if let Phase::Joining { seeds, .. } = &mut self.phase
            && !seeds.iter().any(|s| s == addr)
        {
            seeds.push(addr.to_string());
        }
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
                self.rejoin(now, vec![from.addr.to_string()]);
            } else {
                // It is behind: show it our membership.
                self.send_raw(from, Body::Tree(Box::new(self.membership.clone())));
            }
            return;
        }
        let theirs = (std::cmp::Reverse(version), cluster);
        let ours = (
            std::cmp::Reverse(self.membership.version),
            self.membership.rank(),
        );
        if theirs < ours {
            // A partition healed and the other side ranks higher: leave ours and join theirs.
            if let Some(next) = self.membership.with_removed(
                self.me.id,
                self.me.incarnation,
                self.cfg.max_tree_degree,
            ) {
                self.broadcast_membership(&next);
            }
            self.rejoin(now, vec![from.addr.to_string()]);
        }
    }

    /// SWIM declared `target` dead: remove it and tell everyone.
    pub(crate) fn declare_dead(&mut self, now: Time, target: Contact) {
        if let Some(next) =
            self.membership
                .with_removed(target.id, target.incarnation, self.cfg.max_tree_degree)
        {
            self.emit(Event::MemberFailed(target));
            self.commit_membership(now, next);
        }
    }

    /// Former members, and seed addresses outside the cluster, to ping now and then.
    pub(crate) fn former_candidates(&self) -> Vec<Contact> {
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
        candidates
    }
}
