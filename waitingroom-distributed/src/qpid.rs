//! QPID: the distributed priority queue over the spanning tree (thesis "Distributed Virtual Waiting
//! Room", §3.3, with the changes of §4.3 and §4.7.3).
//!
//! Every node keeps a weight table over itself and its tree neighbours and a pointer towards the
//! root, which holds the smallest key of the whole cluster. Updates travel lazily towards the
//! pointer; findRoot re-aims pointers from the old root; deleteMin follows the pointers to the
//! root and needs no reply (§4.3.1). The root role moves only with findRoot, so there is never
//! more than one root.
//!
//! Departs from the thesis around a membership change (§4.7.3;
//! waitingroom-distributed/README.md#re-picking-the-parent): the table is refilled by a saturation
//! wave (a node tells a neighbour its weight once it has heard from all its other neighbours, so
//! every value exchanged describes a whole branch), pointers are re-derived from the tree (towards
//! the lowest node id) instead of by smallest weight, and once the lowest node knows all its
//! branches it moves the root to the minimum with findRoot. The per-link counters of §4.3.2 are the
//! reliable channel's job (`channel.rs`).

use std::collections::BTreeMap;

use waitingroom_core::{NodeId, Time};

use crate::config::AdmissionMode;
use crate::ignored::Ignored;
use crate::local::Local;
use crate::messages::{Admission, ChannelMsg, Weight};
use crate::outputs::Outbox;

/// What QPID needs to know of the rest of the node for one call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx {
    /// This node.
    pub me: NodeId,
    /// The membership version applied: stamped on what QPID sends.
    pub version: u64,
    /// Whether the node is a member (a node that is not takes no part in QPID).
    pub member: bool,
}

/// QPID state of one node.
#[derive(Debug, Clone)]
pub(crate) struct Qpid {
    /// How the root lets visitors out (deleteMin one at a time, or in batches).
    mode: AdmissionMode,
    /// How long a settling node waits for a neighbour's weight before asking again.
    patience: Time,
    /// The pointer towards the root; `Some(self)` at the root; None while re-picking.
    parent: Option<NodeId>,
    /// This node's weight: its local queue's head.
    own: Weight,
    /// Neighbours' weights; None until heard from since the last membership change.
    weights: BTreeMap<NodeId, Option<Weight>>,
    /// What this node last told each neighbour, since the last membership change.
    sent: BTreeMap<NodeId, Weight>,
    /// The root was handed to this node while it was still settling.
    pending_find_root: bool,
    /// Admissions this node carries (batched mode), to make once it is the root.
    credit: Option<Admission>,
    /// Between a membership change and the moment every neighbour has been heard from.
    settling: bool,
    /// When the current membership was applied (or the silent neighbours last asked again).
    settling_since: Time,
}

impl Qpid {
    /// A node outside any tree. `patience`: how long a settling node waits for a neighbour's
    /// weight before asking again.
    pub(crate) fn new(mode: AdmissionMode, patience: Time) -> Qpid {
        Qpid {
            mode,
            patience,
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

    /// Forgets the tree (the node rejoins a cluster).
    pub(crate) fn reset(&mut self) {
        *self = Qpid::new(self.mode, self.patience);
    }

    /// The pointer towards the root: None while it is being re-picked.
    pub(crate) fn parent(&self) -> Option<NodeId> {
        self.parent
    }

    /// Whether the pointer is picked and every neighbour has been heard from.
    pub(crate) fn is_settled(&self) -> bool {
        !self.settling && self.parent.is_some()
    }

    /// Whether some neighbour has not been heard from since the last membership change.
    pub(crate) fn is_settling(&self) -> bool {
        self.settling
    }

    /// This node's weight and each neighbour's (None when not yet heard).
    pub(crate) fn weights(&self) -> (Weight, BTreeMap<NodeId, Option<Weight>>) {
        (self.own, self.weights.clone())
    }

    /// Whether every neighbour has been told this node's weight since the last change.
    fn wave_done(&self) -> bool {
        self.weights.keys().all(|n| self.sent.contains_key(n))
    }

    fn all_known(&self) -> bool {
        self.weights.values().all(Option::is_some)
    }

    /// The smallest weight on this node's side of the link to `to`.
    fn report(&self, to: NodeId) -> Weight {
        self.weights
            .iter()
            .filter(|(n, _)| **n != to)
            .filter_map(|(_, w)| *w)
            .fold(self.own, Weight::min)
    }

    /// Where the smallest weight is: this node (`me`) on ties.
    fn argmin(&self, me: NodeId) -> NodeId {
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

    /// Re-initialises QPID for a newly applied membership: `neighbours` in the new tree, and
    /// `parent` the neighbour on the path to the member with the lowest id, which holds the
    /// root role until it knows its branches; it then hands the root to the minimum with
    /// findRoot. Pointers that every node derives from the same tree can never form a cycle or
    /// two roots, whatever weights change meanwhile (picking by smallest weight during the
    /// change can: a weight that changes mid-change makes two neighbours point at each other).
    pub(crate) fn apply(
        &mut self,
        now: Time,
        ctx: Ctx,
        neighbours: &[NodeId],
        parent: NodeId,
        local: &mut Local,
        out: &mut Outbox,
    ) {
        self.weights = neighbours.iter().map(|&n| (n, None)).collect();
        self.sent.clear();
        self.own = local.weight();
        self.pending_find_root = false;
        self.parent = Some(parent);
        self.settling = true;
        self.settling_since = now;
        self.wave_send(ctx, out);
        self.try_settle(now, ctx, local, out);
    }

    /// While re-filling the table after a membership change (until every neighbour has been
    /// told): tell each neighbour this node's weight once every other neighbour has been heard
    /// from, and tell it again if it changed.
    fn wave_send(&mut self, ctx: Ctx, out: &mut Outbox) {
        if self.wave_done() {
            return;
        }
        let neighbours: Vec<NodeId> = self.weights.keys().copied().collect();
        for u in neighbours {
            let others_known = self.weights.iter().all(|(n, w)| *n == u || w.is_some());
            if others_known {
                self.tell(u, ctx, out);
            }
        }
    }

    /// Tells neighbour `to` the smallest weight on this side, unless it already knows it.
    fn tell(&mut self, to: NodeId, ctx: Ctx, out: &mut Outbox) {
        let weight = self.report(to);
        if self.sent.get(&to) != Some(&weight) {
            self.sent.insert(to, weight);
            let version = ctx.version;
            out.send(to, ChannelMsg::Update { weight, version });
        }
    }

    /// Notes what neighbour `from` says its branch holds.
    fn heard(&mut self, from: NodeId, weight: Weight) -> Result<(), Ignored> {
        let slot = self
            .weights
            .get_mut(&from)
            .ok_or(Ignored::UnknownNeighbour)?;
        *slot = Some(weight);
        Ok(())
    }

    /// Once every neighbour is known the node takes part in QPID again: the root (or a node
    /// that was handed the root meanwhile) moves the root to the minimum; the others report to
    /// their parent and pass on any admissions they hold.
    fn try_settle(&mut self, now: Time, ctx: Ctx, local: &mut Local, out: &mut Outbox) {
        if !self.all_known() || !ctx.member {
            return;
        }
        self.settling = false;
        if std::mem::take(&mut self.pending_find_root) {
            self.parent = Some(ctx.me);
        }
        let parent = self.parent.unwrap_or(ctx.me);
        if parent == ctx.me {
            self.use_credit(now, ctx, local, out);
        } else {
            if let Some(admit) = self.credit.take() {
                out.send(parent, ChannelMsg::DeleteMin { admit });
            }
            self.lazy_update(ctx, out);
        }
    }

    /// A node that has waited long for some neighbours' weights asks them again.
    pub(crate) fn check_settling(&mut self, now: Time, ctx: Ctx, out: &mut Outbox) {
        if !self.settling || now < self.settling_since + self.patience {
            return;
        }
        self.settling_since = now;
        let version = ctx.version;
        for (&n, w) in &self.weights {
            if w.is_none() {
                out.send(n, ChannelMsg::WeightQuery { version });
            }
        }
    }

    /// A neighbour lost what we told it: tell it again (as soon as the wave allows).
    pub(crate) fn on_weight_query(
        &mut self,
        ctx: Ctx,
        from: NodeId,
        out: &mut Outbox,
    ) -> Result<(), Ignored> {
        if !self.weights.contains_key(&from) {
            return Err(Ignored::UnknownNeighbour);
        }
        self.sent.remove(&from);
        self.wave_send(ctx, out);
        Ok(())
    }

    fn send_find_root(&mut self, ctx: Ctx, to: NodeId, admit: Option<Admission>, out: &mut Outbox) {
        let weight = self.report(to);
        self.sent.insert(to, weight);
        let version = ctx.version;
        let msg = ChannelMsg::FindRoot {
            weight,
            admit,
            version,
        };
        out.send(to, msg);
    }

    /// Lazy update: tell the parent when this side's weight changed.
    fn lazy_update(&mut self, ctx: Ctx, out: &mut Outbox) {
        if let Some(parent) = self.parent.filter(|&p| p != ctx.me) {
            self.tell(parent, ctx, out);
        }
    }

    /// The local queue's head may have changed (insert, admission, expiry): propagate.
    pub(crate) fn local_queue_changed(
        &mut self,
        now: Time,
        ctx: Ctx,
        local: &mut Local,
        out: &mut Outbox,
    ) {
        let own = local.weight();
        if own == self.own || !ctx.member {
            self.own = own;
            return;
        }
        self.own = own;
        self.propagate(now, ctx, None, local, out);
    }

    /// After a weight changed (this node's, or the one of the branch behind `from`): go on with
    /// the wave, settle, move the root, or tell the parent.
    fn propagate(
        &mut self,
        now: Time,
        ctx: Ctx,
        from: Option<NodeId>,
        local: &mut Local,
        out: &mut Outbox,
    ) {
        self.wave_send(ctx, out);
        if self.settling {
            self.try_settle(now, ctx, local, out);
        } else if self.parent == Some(ctx.me) {
            self.use_credit(now, ctx, local, out);
        } else if from.is_none() || self.parent != from {
            self.lazy_update(ctx, out);
        }
    }

    /// QPID update: the branch behind `from` now holds `weight`.
    pub(crate) fn on_update(
        &mut self,
        now: Time,
        ctx: Ctx,
        from: NodeId,
        weight: Weight,
        local: &mut Local,
        out: &mut Outbox,
    ) -> Result<(), Ignored> {
        self.heard(from, weight)?;
        self.propagate(now, ctx, Some(from), local, out);
        Ok(())
    }

    /// QPID findRoot: the root moves this way. Re-aim the pointer at the minimum and pass the
    /// findRoot on, or become the root (and make the admissions it carries).
    pub(crate) fn on_find_root(
        &mut self,
        now: Time,
        ctx: Ctx,
        (from, weight): (NodeId, Weight),
        admit: Option<Admission>,
        local: &mut Local,
        out: &mut Outbox,
    ) -> Result<(), Ignored> {
        self.heard(from, weight)?;
        if let Some(admit) = admit {
            self.merge_credit(admit);
        }
        self.wave_send(ctx, out);
        if self.settling {
            self.pending_find_root = true;
            self.try_settle(now, ctx, local, out);
            return Ok(());
        }
        let best = self.argmin(ctx.me);
        self.parent = Some(best);
        if best != ctx.me {
            let admit = self.credit.take();
            self.send_find_root(ctx, best, admit, out);
        } else {
            self.use_credit(now, ctx, local, out);
        }
        Ok(())
    }

    /// A deleteMin reached this node (from a neighbour, or from this node's own count): at the
    /// root it lets visitors out; elsewhere it follows the pointer, with no reply (§4.3.1). In
    /// the batched mode a node holds the batch as credit until it can pass it on. Dropped when
    /// it is for another membership version, or, one visitor at a time, at a node still
    /// settling (the next count lets that visitor out).
    pub(crate) fn on_delete_min(
        &mut self,
        now: Time,
        ctx: Ctx,
        admit: Admission,
        local: &mut Local,
        out: &mut Outbox,
    ) -> Result<(), Ignored> {
        if admit.version != ctx.version {
            return Err(Ignored::StaleVersion);
        }
        let one = self.mode == AdmissionMode::Sequential;
        if !one {
            self.merge_credit(admit);
        }
        if !self.is_settled() {
            return if one {
                Err(Ignored::NotSettled)
            } else {
                Ok(())
            };
        }
        let me = ctx.me;
        match self.parent {
            // Thesis deleteMin, one visitor: at the root pop the head if it is the minimum,
            // else move the root towards the minimum and send the deleteMin after the findRoot.
            Some(p) if p == me && one => {
                let best = self.argmin(me);
                if best == me {
                    if local
                        .room()
                        .head()
                        .is_some_and(|k| k.join_time < admit.cutoff)
                    {
                        // Decided at the round's boundary: the pass names its round's record.
                        local.admit_head(now, admit.cutoff, out);
                        self.own = local.weight();
                    }
                    self.use_credit(now, ctx, local, out);
                } else {
                    self.parent = Some(best);
                    self.send_find_root(ctx, best, None, out);
                    out.send(best, ChannelMsg::DeleteMin { admit });
                }
            }
            Some(p) if p == me => self.use_credit(now, ctx, local, out),
            Some(p) => {
                let pass = if one { Some(admit) } else { self.credit.take() };
                if let Some(admit) = pass {
                    out.send(p, ChannelMsg::DeleteMin { admit });
                }
            }
            None => {}
        }
        Ok(())
    }

    /// Batched admission at the root: pop while the local head is the cluster minimum and
    /// joined before the batch's cutoff; when another branch holds the minimum, hand the rest
    /// of the batch over with findRoot. The order is exactly that of one deleteMin at a time.
    fn use_credit(&mut self, now: Time, ctx: Ctx, local: &mut Local, out: &mut Outbox) {
        let me = ctx.me;
        while let Some(mut credit) = self.credit.take() {
            if credit.count == 0 || credit.version != ctx.version {
                break;
            }
            if self.argmin(me) != me {
                self.credit = Some(credit);
                break;
            }
            match local.room().head() {
                Some(k) if k.join_time < credit.cutoff => {
                    local.admit_head(now, credit.cutoff, out);
                    self.own = local.weight();
                    credit.count -= 1;
                    self.credit = Some(credit);
                }
                // The minimum of the whole cluster joined after the cutoff: nobody left to admit.
                _ => break,
            }
        }
        // The root must hold the minimum: if a branch holds it now, move there (taking what is
        // left of the batch along).
        let best = self.argmin(me);
        if best != me {
            self.parent = Some(best);
            let admit = self.credit.take();
            self.send_find_root(ctx, best, admit, out);
        }
    }
}

/// One envelope in, the exact messages out (see `testing`): node 2 of the line 1 - 2 - 3,
/// whose parent is 1.
#[cfg(test)]
mod tests {
    use waitingroom_core::{QueueKey, TicketId};

    use crate::testing::{self, Neighbours, Peer, Said, member, said, settle, tree};
    use crate::{AdmissionMode, Event, Node};

    use super::*;

    fn key(join_time: Time, node: u64) -> Weight {
        Weight::Key(QueueKey {
            join_time,
            ticket: TicketId(join_time),
            node: NodeId(node),
        })
    }

    /// Node 2 of the line 1 - 2 - 3 at membership version 2, every weight empty, settled.
    fn middle(mode: AdmissionMode) -> (Node, Neighbours) {
        let mut cfg = testing::config(2, 1, testing::queued_settings());
        cfg.admission = mode;
        let mut node = member(cfg, &tree(2, &[1, 2, 3], &[(1, 2), (2, 3)]));
        let peers = settle(&mut node);
        (node, peers)
    }

    fn update(weight: Weight) -> ChannelMsg {
        ChannelMsg::Update { weight, version: 2 }
    }

    /// waitingroom-distributed/README.md#re-picking-the-parent (departs from §4.7.3): after a
    /// membership change a node tells a neighbour its weight only once every other neighbour has
    /// been heard from, so each value covers a whole branch; with every neighbour known it is
    /// settled, its pointer towards the lowest id.
    #[test]
    fn the_saturation_wave_answers_each_neighbour_once_the_others_are_known() {
        let cfg = testing::config(2, 1, testing::queued_settings());
        let mut node = member(cfg, &tree(2, &[1, 2, 3], &[(1, 2), (2, 3)]));
        assert!(!node.is_settled());
        let (mut p1, mut p3) = (Peer::new(1), Peer::new(3));
        let from_1 = p1.channel(&node, update(Weight::Empty));
        assert_eq!(node.handle_message(0, from_1), Ok(()));
        assert_eq!(
            said(&mut node),
            [Said::Channel(NodeId(3), update(Weight::Empty))]
        );
        let from_3 = p3.channel(&node, update(key(10, 3)));
        assert_eq!(node.handle_message(0, from_3), Ok(()));
        assert_eq!(
            said(&mut node),
            [Said::Channel(NodeId(1), update(key(10, 3)))]
        );
        assert!(node.is_settled());
        assert_eq!(node.parent(), Some(NodeId(1)));
    }

    /// §3.3.1 (lazy updating): a change on a child's side goes to the parent, once; news from
    /// the parent's side goes nowhere.
    #[test]
    fn a_childs_update_goes_to_the_parent_once() {
        let (mut node, mut peers) = middle(AdmissionMode::Range);
        let env = peers.channel(3, &node, update(key(10, 3)));
        assert_eq!(node.handle_message(1, env), Ok(()));
        assert_eq!(
            said(&mut node),
            [Said::Channel(NodeId(1), update(key(10, 3)))]
        );
        let again = peers.channel(3, &node, update(key(10, 3)));
        assert_eq!(node.handle_message(2, again), Ok(()));
        assert_eq!(said(&mut node), []);
        let from_parent = peers.channel(1, &node, update(key(5, 1)));
        assert_eq!(node.handle_message(3, from_parent), Ok(()));
        assert_eq!(said(&mut node), []);
    }

    /// §3.3.1: findRoot re-aims the pointer at the minimum. Here this node holds it: it becomes
    /// the root, and there is nothing to pass on.
    #[test]
    fn find_root_makes_the_holder_of_the_minimum_the_root() {
        let (mut node, mut peers) = middle(AdmissionMode::Range);
        node.join(1).expect("a member takes visitors");
        let [Said::Channel(to, ChannelMsg::Update { .. })] = said(&mut node)[..] else {
            panic!("the new head goes to the parent");
        };
        assert_eq!(to, NodeId(1));
        let find_root = ChannelMsg::FindRoot {
            weight: Weight::Empty,
            admit: None,
            version: 2,
        };
        let env = peers.channel(1, &node, find_root);
        assert_eq!(node.handle_message(2, env), Ok(()));
        assert_eq!(said(&mut node), []);
        assert!(node.is_root());
    }

    /// §3.3.1: when a branch holds the minimum, findRoot goes on down that branch, telling it
    /// the smallest weight on this side.
    #[test]
    fn find_root_is_passed_towards_the_minimum() {
        let (mut node, mut peers) = middle(AdmissionMode::Range);
        let env = peers.channel(3, &node, update(key(10, 3)));
        node.handle_message(1, env).expect("an update");
        said(&mut node);
        let find_root = ChannelMsg::FindRoot {
            weight: key(20, 1),
            admit: None,
            version: 2,
        };
        let env = peers.channel(1, &node, find_root);
        assert_eq!(node.handle_message(2, env), Ok(()));
        let passed = ChannelMsg::FindRoot {
            weight: key(20, 1),
            admit: None,
            version: 2,
        };
        assert_eq!(said(&mut node), [Said::Channel(NodeId(3), passed)]);
        assert_eq!(node.parent(), Some(NodeId(3)));
    }

    /// §3.3.1 and §4.3.1: a deleteMin at a node that is not the root follows the pointer, and
    /// nothing is sent back.
    #[test]
    fn delete_min_follows_the_pointer_without_a_reply() {
        let (mut node, mut peers) = middle(AdmissionMode::Sequential);
        let admit = Admission {
            count: 1,
            cutoff: 1_000,
            version: 2,
            round: None,
        };
        let env = peers.channel(3, &node, ChannelMsg::DeleteMin { admit });
        assert_eq!(node.handle_message(1, env), Ok(()));
        let forwarded = ChannelMsg::DeleteMin { admit };
        assert_eq!(said(&mut node), [Said::Channel(NodeId(1), forwarded)]);
    }

    /// §3.3.1: a deleteMin at the root lets its head out (the cluster minimum, joined before
    /// the count's cutoff) as decided at the round's boundary; again no reply (§4.3.1).
    #[test]
    fn delete_min_at_the_root_lets_the_head_out() {
        let (mut node, mut peers) = middle(AdmissionMode::Sequential);
        let ticket = node.join(1).expect("a member takes visitors").ticket;
        let find_root = ChannelMsg::FindRoot {
            weight: Weight::Empty,
            admit: None,
            version: 2,
        };
        let p1 = peers.peer(1);
        let env = p1.channel(&node, find_root);
        node.handle_message(2, env).expect("a findRoot");
        said(&mut node);
        testing::events(&mut node);
        let admit = Admission {
            count: 1,
            cutoff: 1_000,
            version: 2,
            round: Some(4),
        };
        let env = p1.channel(&node, ChannelMsg::DeleteMin { admit });
        assert_eq!(node.handle_message(3, env), Ok(()));
        assert_eq!(said(&mut node), []);
        let key = ticket.key_on(NodeId(2));
        // Decided at the round's boundary (the batch's cutoff), whose record it names.
        let admitted = Event::Admitted {
            key,
            at: 3,
            decided_at: 1_000,
        };
        assert_eq!(testing::events(&mut node), [admitted]);
        assert!(node.room().is_admitted(ticket.id));
        // The batch named its round: this node never saw the round's result, and names it.
        let ticket = node.check_in(4, &ticket).expect("admitted").ticket;
        assert_eq!(ticket.round, Some(4));
        assert_eq!(node.leave(5, &ticket).map(|p| p.round), Ok(Some(4)));
    }
}
