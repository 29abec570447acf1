//! QPID: the distributed priority queue over the spanning tree.
//!
//! Every node keeps a weight table over itself and its tree neighbours and a pointer towards the
//! root, which holds the smallest key of the whole cluster. Updates travel lazily towards the
//! pointer; findRoot re-aims pointers from the old root; deleteMin follows the pointers to the
//! root and needs no reply. The root role moves only with findRoot, so there is never more than
//! one root. Around a membership change the table is refilled by a saturation wave: a node tells
//! a neighbour its weight once it has heard from all its other neighbours, so every value
//! exchanged describes a whole branch; pointers are re-derived from the tree (towards the lowest
//! node id), and once the lowest node knows all its branches it moves the root to the minimum.

use std::collections::{BTreeMap, BTreeSet};

use waitingroom_core::{NodeId, Time};

use crate::config::AdmissionMode;
use crate::messages::{Admission, ChannelMsg, Weight};
use crate::node::Node;
use crate::outputs::Event;

/// QPID state of one node.
#[derive(Debug, Clone)]
pub(crate) struct Qpid {
    /// The pointer towards the root; `Some(self)` at the root; None while re-picking.
    pub parent: Option<NodeId>,
    /// This node's weight: its local queue's head.
    pub own: Weight,
    /// Neighbours' weights; None until heard from since the last membership change.
    pub weights: BTreeMap<NodeId, Option<Weight>>,
    /// What this node last told each neighbour, since the last membership change.
    pub sent: BTreeMap<NodeId, Weight>,
    /// The root was handed to this node while it was still settling.
    pub pending_find_root: bool,
    /// Admissions this node carries (batched mode), to make once it is the root.
    pub credit: Option<Admission>,
    /// Between a membership change and the moment every neighbour has been heard from.
    pub settling: bool,
    /// When the current membership was applied.
    pub settling_since: Time,
}

impl Default for Qpid {
    fn default() -> Self {
        Qpid {
            parent: None,
            own: Weight::Empty,
            weights: BTreeMap::new(),
            sent: BTreeMap::new(),
            pending_find_root: false,
            credit: None,
            settling: false,
            settling_since: 0,
        }
    }
}

impl Qpid {
    pub fn is_settled(&self) -> bool {
        !self.settling && self.parent.is_some()
    }

    /// Whether every neighbour has been told this node's weight since the last change.
    fn wave_done(&self) -> bool {
        self.weights.keys().all(|n| self.sent.contains_key(n))
    }

    fn all_known(&self) -> bool {
        self.weights.values().all(Option::is_some)
    }

    /// The smallest weight on this node's side of the link to `to`.
    pub fn report(&self, to: NodeId) -> Weight {
        self.weights
            .iter()
            .filter(|(n, _)| **n != to)
            .filter_map(|(_, w)| *w)
            .fold(self.own, Weight::min)
    }

    /// Where the smallest weight is: this node (`me`) on ties.
    pub fn argmin(&self, me: NodeId) -> NodeId {
        let mut best = (self.own, me);
        for (&n, w) in &self.weights {
            if let Some(w) = *w
                && w < best.0
            {
                best = (w, n);
            }
        }
        best.1
    }

    /// Keeps the later of two batches: a newer count supersedes what is left of an older one.
    fn merge_credit(&mut self, admit: Admission) {
        self.credit = Some(match self.credit {
            Some(c)
                if (c.version, c.cutoff, c.count) >= (admit.version, admit.cutoff, admit.count) =>
            {
                c
            }
            _ => admit,
        });
    }
}

impl Node {
    /// Re-initialises QPID for a newly applied membership. Every node points towards the
    /// member with the lowest id, which holds the root role until it knows its branches; it
    /// then hands the root to the minimum with findRoot. Pointers that every node derives from
    /// the same tree can never form a cycle or two roots, whatever weights change meanwhile
    /// (picking by smallest weight during the change can: a weight that changes mid-change makes
    /// two neighbours point at each other).
    pub(crate) fn qpid_apply(&mut self, now: Time, neighbours: &BTreeSet<NodeId>) {
        let me = self.me.id;
        let lowest = self.membership.members.keys().next().copied().unwrap_or(me);
        let q = &mut self.qpid;
        q.weights = neighbours.iter().map(|&n| (n, None)).collect();
        q.sent.clear();
        q.own = Weight::of(self.room.head());
        q.pending_find_root = false;
        q.parent = Some(self.membership.next_hop(me, lowest));
        q.settling = true;
        q.settling_since = now;
        self.arm_retransmit(now);
        self.wave_send(now);
        self.try_settle(now);
    }

    /// While re-filling the table after a membership change: tell each neighbour this node's
    /// weight once every other neighbour has been heard from, and tell it again if it changed.
    fn wave_send(&mut self, now: Time) {
        let version = self.membership.version;
        let neighbours: Vec<NodeId> = self.qpid.weights.keys().copied().collect();
        for u in neighbours {
            let others_known = self
                .qpid
                .weights
                .iter()
                .all(|(n, w)| *n == u || w.is_some());
            if !others_known {
                continue;
            }
            let weight = self.qpid.report(u);
            if self.qpid.sent.get(&u) != Some(&weight) {
                self.qpid.sent.insert(u, weight);
                self.send_to(now, u, ChannelMsg::Update { weight, version });
            }
        }
    }

    /// Once every neighbour is known the node takes part in QPID again: the root (or a node
    /// that was handed the root meanwhile) moves the root to the minimum; the others report to
    /// their parent and pass on any admissions they hold.
    fn try_settle(&mut self, now: Time) {
        let me = self.me.id;
        if !self.qpid.all_known() || self.phase != crate::node::Phase::Member {
            return;
        }
        self.qpid.settling = false;
        if std::mem::take(&mut self.qpid.pending_find_root) {
            self.qpid.parent = Some(me);
        }
        let parent = self.qpid.parent.unwrap_or(me);
        if parent == me {
            self.use_credit(now);
        } else {
            if let Some(admit) = self.qpid.credit.take() {
                self.send_to(now, parent, ChannelMsg::DeleteMin { admit });
            }
            self.lazy_update(now);
        }
    }

    /// A node that has waited long for some neighbours' weights asks them again.
    pub(crate) fn check_settling(&mut self, now: Time) {
        let patience = 10 * self.cfg.retransmit_ms;
        if !self.qpid.settling || now < self.qpid.settling_since + patience {
            return;
        }
        self.qpid.settling_since = now;
        let version = self.membership.version;
        let silent: Vec<NodeId> = self
            .qpid
            .weights
            .iter()
            .filter(|(_, w)| w.is_none())
            .map(|(n, _)| *n)
            .collect();
        for n in silent {
            self.send_to(now, n, ChannelMsg::WeightQuery { version });
        }
    }

    /// A neighbour lost what we told it: tell it again (as soon as the wave allows).
    pub(crate) fn on_weight_query(&mut self, now: Time, from: NodeId) {
        if self.qpid.weights.contains_key(&from) {
            self.qpid.sent.remove(&from);
            self.wave_send(now);
        }
    }

    fn send_find_root(&mut self, now: Time, to: NodeId, admit: Option<Admission>) {
        let weight = self.qpid.report(to);
        self.qpid.sent.insert(to, weight);
        let version = self.membership.version;
        self.send_to(
            now,
            to,
            ChannelMsg::FindRoot {
                weight,
                admit,
                version,
            },
        );
    }

    /// Lazy update: tell the parent when this side's weight changed.
    fn lazy_update(&mut self, now: Time) {
        let me = self.me.id;
        let Some(parent) = self.qpid.parent.filter(|&p| p != me) else {
            return;
        };
        let weight = self.qpid.report(parent);
        if self.qpid.sent.get(&parent) != Some(&weight) {
            self.qpid.sent.insert(parent, weight);
            let version = self.membership.version;
            self.send_to(now, parent, ChannelMsg::Update { weight, version });
        }
    }

    /// At the root: if another branch now holds the minimum, hand the root over (findRoot,
    /// with any admissions still to make); otherwise keep admitting.
    fn root_reconsider(&mut self, now: Time) {
        self.use_credit(now);
    }

    /// The local queue's head may have changed (insert, admission, expiry): propagate.
    pub(crate) fn local_queue_changed(&mut self, now: Time) {
        let own = Weight::of(self.room.head());
        if own == self.qpid.own || !self.is_member() {
            self.qpid.own = own;
            return;
        }
        self.qpid.own = own;
        if !self.qpid.wave_done() {
            self.wave_send(now);
        }
        if self.qpid.settling {
            self.try_settle(now);
        } else if self.qpid.parent == Some(self.me.id) {
            self.root_reconsider(now);
        } else {
            self.lazy_update(now);
        }
    }

    pub(crate) fn on_update(&mut self, now: Time, from: NodeId, weight: Weight) {
        let Some(slot) = self.qpid.weights.get_mut(&from) else {
            return;
        };
        *slot = Some(weight);
        if !self.qpid.wave_done() {
            self.wave_send(now);
        }
        if self.qpid.settling {
            self.try_settle(now);
        } else if self.qpid.parent == Some(self.me.id) {
            self.root_reconsider(now);
        } else if self.qpid.parent != Some(from) {
            self.lazy_update(now);
        }
    }

    pub(crate) fn on_find_root(
        &mut self,
        now: Time,
        from: NodeId,
        weight: Weight,
        admit: Option<Admission>,
    ) {
        let Some(slot) = self.qpid.weights.get_mut(&from) else {
            return;
        };
        *slot = Some(weight);
        if let Some(admit) = admit {
            self.qpid.merge_credit(admit);
        }
        if !self.qpid.wave_done() {
            self.wave_send(now);
        }
        if self.qpid.settling {
            self.qpid.pending_find_root = true;
            self.try_settle(now);
            return;
        }
        let me = self.me.id;
        let best = self.qpid.argmin(me);
        self.qpid.parent = Some(best);
        if best != me {
            let admit = self.qpid.credit.take();
            self.send_find_root(now, best, admit);
        } else {
            self.use_credit(now);
        }
    }

    /// A deleteMin reached this node (from a neighbour, or from this node's own count).
    pub(crate) fn on_delete_min(&mut self, now: Time, admit: Admission) {
        if admit.version != self.membership.version {
            return;
        }
        if self.cfg.admission == AdmissionMode::Sequential {
            self.delete_one(now, admit);
            return;
        }
        self.qpid.merge_credit(admit);
        if !self.qpid.is_settled() {
            return;
        }
        match self.qpid.parent {
            Some(p) if p == self.me.id => self.use_credit(now),
            Some(p) => {
                if let Some(admit) = self.qpid.credit.take() {
                    self.send_to(now, p, ChannelMsg::DeleteMin { admit });
                }
            }
            None => {}
        }
    }

    /// Thesis deleteMin, one visitor: at the root pop the head if it is the minimum, else
    /// move the root towards the minimum and send the deleteMin after the findRoot.
    fn delete_one(&mut self, now: Time, admit: Admission) {
        let me = self.me.id;
        if !self.qpid.is_settled() {
            return;
        }
        match self.qpid.parent {
            Some(p) if p == me => {
                let best = self.qpid.argmin(me);
                if best == me {
                    if self.room.head().is_some_and(|k| k.join_time < admit.cutoff) {
                        self.admit_head(now, now);
                        self.qpid.own = Weight::of(self.room.head());
                    }
                    self.root_reconsider(now);
                } else {
                    self.qpid.parent = Some(best);
                    self.send_find_root(now, best, None);
                    self.send_to(now, best, ChannelMsg::DeleteMin { admit });
                }
            }
            Some(p) => self.send_to(now, p, ChannelMsg::DeleteMin { admit }),
            None => {}
        }
    }

    /// Batched admission at the root: pop while the local head is the cluster minimum and
    /// joined before the batch's cutoff; when another branch holds the minimum, hand the rest
    /// of the batch over with findRoot. The order is exactly that of one deleteMin at a time.
    fn use_credit(&mut self, now: Time) {
        let me = self.me.id;
        while let Some(mut credit) = self.qpid.credit.take() {
            if credit.count == 0 || credit.version != self.membership.version {
                break;
            }
            if self.qpid.argmin(me) != me {
                self.qpid.credit = Some(credit);
                break;
            }
            match self.room.head() {
                Some(k) if k.join_time < credit.cutoff => {
                    self.admit_head(now, now);
                    self.qpid.own = Weight::of(self.room.head());
                    credit.count -= 1;
                    self.qpid.credit = Some(credit);
                }
                // The minimum of the whole cluster joined after the cutoff: nobody left to admit.
                _ => break,
            }
        }
        // The root must hold the minimum: if a branch holds it now, move there (taking what is
        // left of the batch along).
        let best = self.qpid.argmin(me);
        if best != me {
            self.qpid.parent = Some(best);
            let admit = self.qpid.credit.take();
            self.send_find_root(now, best, admit);
        }
    }

    /// Lets the local head out and records it. The caller propagates the new head.
    pub(crate) fn admit_head(&mut self, now: Time, decided_at: Time) {
        if let Some(key) = self.room.admit_head(now, decided_at) {
            self.admitted_total += 1;
            self.emit(Event::Admitted {
                key,
                at: now,
                decided_at,
            });
        }
    }
}
