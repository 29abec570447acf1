//! Membership changes (thesis "Distributed Virtual Waiting Room", §4.4 and §4.7): this node's place
//! in a cluster. Joining through a seed, applying a new tree (§4.7.2), merging two trees made
//! concurrently from one version (§4.7.4), being removed and rejoining, leaving, and merging the
//! two sides of a healed partition.
//!
//! The tree edits themselves are [`Membership`]'s (§4.7.1). Departs from the thesis
//! (waitingroom-distributed/README.md#membership-changes and
//! waitingroom-distributed/README.md#partitions): trees also spread by anti-entropy (every probe
//! carries a [`View`]), a node removed by mistake rejoins under a new incarnation, former members
//! and seed addresses are remembered so that clusters that formed apart find each other, and a node
//! that no seed answers serves visitors alone rather than not at all. What the node must do with
//! the other parts when the membership changes (re-initialise QPID, drop TAG's round, forget SWIM's
//! strikes) it learns from what these methods return.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use waitingroom_core::{NodeId, Time};

use crate::ignored::Ignored;
use crate::membership::{ClusterRank, Contact, Membership, View};
use crate::messages::Body;
use crate::outputs::{Event, Outbox};

/// Most former members remembered.
const FORMERS_LIMIT: usize = 256;
/// Seed addresses kept at most (discovery answers are outside input: bound them).
const SEEDS_LIMIT: usize = 256;

/// Where a node is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Created; neither started a cluster nor asked to join one.
    Idle,
    /// Asking `seeds` (addresses) to be let into a cluster.
    Joining {
        /// Addresses to ask, in turn.
        seeds: Vec<String>,
        /// Which one to ask next.
        next: usize,
        /// When the node started asking.
        since: Time,
    },
    /// In a cluster.
    Member,
    /// Shut down.
    Stopped,
}

/// This node's membership state: who it is, its phase, the membership it applied, and whom it
/// knows outside it.
#[derive(Debug, Clone)]
pub(crate) struct Cluster {
    /// This node; its incarnation grows each time it rejoins.
    me: Contact,
    /// Tree edits try to give no node more than this many neighbours.
    max_degree: usize,
    /// A joining node that no seed answers for this long starts a cluster of its own.
    join_timeout: Time,
    phase: Phase,
    /// Shared, never edited in place: a tree received is kept as it came (in the simulator,
    /// one copy serves every node that applied it), and an edit makes a new one.
    membership: Arc<Membership>,
    /// `membership.view()`, kept because every probe carries it.
    view: View,
    /// This node's tree neighbours in `membership`, in id order, kept because every count
    /// asks for them (finding them scans every edge).
    neighbours: Vec<NodeId>,
    /// The lowest-id member, whose clock is the cluster's reference (`Node::reference_time`),
    /// kept because every visitor operation asks for it.
    reference: Option<NodeId>,
    /// Members we lost, probed now and then so that a healed partition merges.
    formers: BTreeMap<NodeId, Contact>,
    /// Every seed address this node was given or learned; those not in the cluster are probed
    /// like former members, so that clusters that formed apart find each other.
    seed_addrs: Vec<String>,
}

/// How a cluster stands against another one met after a partition or a restart; the smaller
/// wins and the other's nodes join it: the bigger cluster (so a node alone, restarted or cut
/// off, joins the others rather than the others it), then the higher membership version (the
/// one that moved on further), then the one holding the smaller node id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Standing {
    neg_size: i64,
    version: std::cmp::Reverse<u64>,
    min_id: NodeId,
}

impl Standing {
    fn of(rank: ClusterRank, version: u64) -> Standing {
        Standing {
            neg_size: rank.neg_size,
            version: std::cmp::Reverse(version),
            min_id: rank.min_id,
        }
    }
}

/// What asking to join led to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asking {
    /// A join request went out: ask again after `join_retry_ms`.
    Asked,
    /// Nobody answered for `join_timeout_ms`: start a cluster alone.
    GiveUp,
    /// The node is not joining (any more).
    NotJoining,
}

/// A membership to make this node's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    /// Apply it (it came from another member).
    Apply(Arc<Membership>),
    /// Broadcast it, then apply it (this node decided it).
    Commit(Arc<Membership>),
}

/// What applying a membership changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Applied {
    /// It is this node's membership now: these members left and these joined.
    Changed {
        /// Lives no longer in it, those a newer life of the same node replaced included
        /// (their failures and places are forgotten).
        gone: Vec<Contact>,
        /// Members new in it.
        added: Vec<Contact>,
    },
    /// It removed this node: rejoin, asking these addresses first.
    Rejoin(Vec<String>),
    /// It does not concern this node.
    Unchanged,
}

impl Cluster {
    pub(crate) fn new(me: Contact, max_degree: usize, join_timeout: Time) -> Cluster {
        Cluster {
            me,
            max_degree,
            join_timeout,
            phase: Phase::Idle,
            membership: Arc::default(),
            view: Membership::default().view(),
            neighbours: Vec::new(),
            reference: None,
            formers: BTreeMap::new(),
            seed_addrs: Vec::new(),
        }
    }

    /// This node (this life of it).
    pub(crate) fn me(&self) -> &Contact {
        &self.me
    }

    pub(crate) fn phase(&self) -> &Phase {
        &self.phase
    }

    pub(crate) fn is_member(&self) -> bool {
        // Not `==`: the derived comparison of the whole enum (its `Joining` holds a vector)
        // costs more, and this is asked on every visitor operation.
        matches!(self.phase, Phase::Member)
    }

    pub(crate) fn is_joining(&self) -> bool {
        matches!(self.phase, Phase::Joining { .. })
    }

    /// The membership applied.
    pub(crate) fn membership(&self) -> &Membership {
        &self.membership
    }

    /// The membership applied, shared.
    pub(crate) fn shared_membership(&self) -> &Arc<Membership> {
        &self.membership
    }

    /// The applied membership's view, as probes carry it.
    pub(crate) fn view(&self) -> View {
        self.view
    }

    /// The lowest-id member: the cluster's reference clock.
    pub(crate) fn reference(&self) -> Option<NodeId> {
        self.reference
    }

    /// Keeps what is derived from the membership in step with it.
    fn derive(&mut self) {
        self.view = self.membership.view();
        self.reference = self.membership.members.keys().next().copied();
        self.neighbours = self.membership.neighbours(self.me.id);
    }

    /// This node's tree neighbours, in id order.
    pub(crate) fn neighbours(&self) -> Vec<NodeId> {
        self.neighbours.clone()
    }

    /// A former member.
    pub(crate) fn former(&self, id: NodeId) -> Option<&Contact> {
        self.formers.get(&id)
    }

    /// How to reach node `id`, member or not: a member; or a node we saw leave; or one the
    /// cluster removed before we joined (we may have restarted since, or it was on the other
    /// side of a partition).
    pub(crate) fn reach(&self, id: NodeId) -> Option<&Contact> {
        self.membership
            .members
            .get(&id)
            .or_else(|| self.formers.get(&id))
            .or_else(|| self.membership.removed.get(&id))
    }

    /// The member at transport address `addr`.
    pub(crate) fn member_at(&self, addr: &str) -> Option<NodeId> {
        self.membership
            .members
            .values()
            .find(|c| &*c.addr == addr)
            .map(|c| c.id)
    }

    /// "You are not in my cluster", with what decides which side of a partition wins.
    pub(crate) fn not_member(&self) -> Body {
        Body::NotMember {
            cluster: self.membership.rank(),
            version: self.membership.version,
        }
    }

    /// The membership without `target` (a member SWIM declared dead), if it is still in it.
    pub(crate) fn without(&self, target: &Contact) -> Option<Membership> {
        self.membership
            .with_removed(target.id, target.incarnation, self.max_degree)
    }

    /// The same membership under a new version: every node re-derives its pointers from it.
    pub(crate) fn refreshed(&self) -> Membership {
        let mut refreshed = Membership::clone(&self.membership);
        refreshed.version = refreshed.version.saturating_add(1);
        refreshed
    }

    /// Starts a cluster of one (§4.4): returns the membership to apply.
    pub(crate) fn found(&mut self, out: &mut Outbox) -> Membership {
        let membership = Membership::single(self.me.clone());
        self.phase = Phase::Member;
        out.emit(Event::Joined {
            version: membership.version,
        });
        membership
    }

    /// Starts asking the nodes at `seeds` to add this one (§4.4).
    pub(crate) fn start_joining(&mut self, now: Time, seeds: Vec<String>) {
        self.seed_addrs = seeds.clone();
        self.phase = Phase::Joining {
            seeds,
            next: 0,
            since: now,
        };
    }

    /// Asks the next seed to add this node, unless nobody has answered for too long.
    pub(crate) fn ask_to_join(&mut self, now: Time, out: &mut Outbox) -> Asking {
        let Phase::Joining { seeds, next, since } = &mut self.phase else {
            return Asking::NotJoining;
        };
        if seeds.is_empty() || now >= *since + self.join_timeout {
            // Nobody answers: serve visitors alone rather than not at all. Should the others
            // come back, the partition merge brings the clusters together.
            for s in std::mem::take(seeds) {
                if !self.seed_addrs.contains(&s) {
                    self.seed_addrs.push(s);
                }
            }
            return Asking::GiveUp;
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
        out.raw(to, body);
        Asking::Asked
    }

    /// A node asks to be added. Returns the membership with it, to commit; or None after
    /// answering again with our tree if it is already a member (our answer was lost).
    pub(crate) fn on_join_request(
        &self,
        contact: Contact,
        out: &mut Outbox,
    ) -> Result<Option<Membership>, Ignored> {
        if !self.is_member() {
            return Err(Ignored::NotInCluster);
        }
        if contact.id == self.me.id || contact.id.0 == 0 {
            return Err(Ignored::Malformed);
        }
        if let Some(existing) = self.membership.members.get(&contact.id) {
            if existing.incarnation == contact.incarnation {
                // Our answer was lost, or is on its way: say it again.
                out.raw(contact, Body::shared_tree(self.membership.clone()));
                return Ok(None);
            }
            if existing.incarnation > contact.incarnation {
                return Err(Ignored::StaleIncarnation);
            }
        }
        if self.membership.is_gone(contact.id, contact.incarnation) {
            return Err(Ignored::StaleIncarnation);
        }
        Ok(Some(self.membership.with_added(contact, self.max_degree)))
    }

    /// Sends `m` to all its members but this node (§4.7: the node that changed the tree
    /// broadcasts it).
    pub(crate) fn broadcast(&self, m: &Arc<Membership>, out: &mut Outbox) {
        for c in m.members.values().filter(|c| c.id != self.me.id) {
            out.raw(c.clone(), Body::shared_tree(m.clone()));
        }
    }

    /// Anti-entropy: a peer's probe showed its membership view. Send ours if it is behind, or
    /// if it conflicts with ours (same version, other content; it will merge, as will we).
    pub(crate) fn compare_views(&self, peer: &Contact, view: View, out: &mut Outbox) {
        if !self.is_member() {
            return;
        }
        let mine = self.view;
        let behind = view.version < mine.version;
        let conflicting = view.version == mine.version && view.digest != mine.digest;
        if behind || conflicting {
            out.raw(peer.clone(), Body::shared_tree(self.membership.clone()));
        }
    }

    /// Whether `m` lists this life of this node.
    fn includes_me(&self, m: &Membership) -> bool {
        m.members
            .get(&self.me.id)
            .is_some_and(|c| c.incarnation == self.me.incarnation)
    }

    /// A tree from `from` (§4.7.2): a joining node it lets in becomes a member; a newer
    /// one is applied, one of the same version with other content is merged (§4.7.4), and an
    /// older one's sender is shown ours. A tree no newer than ours from a life our membership
    /// removed is the stale view of a node that missed its own removal (it was paused, or cut
    /// off): never merged back (it would remove whomever that node removed in the meantime).
    pub(crate) fn on_tree(
        &mut self,
        from: &Contact,
        m: Arc<Membership>,
        out: &mut Outbox,
    ) -> Result<Change, Ignored> {
        let includes_me = self.includes_me(&m);
        match self.phase {
            Phase::Joining { .. } if includes_me => {
                self.phase = Phase::Member;
                out.emit(Event::Joined { version: m.version });
                Ok(Change::Apply(m))
            }
            Phase::Member
                if m.version <= self.membership.version
                    && self.membership.is_gone(from.id, from.incarnation) =>
            {
                // Answered with nothing: any probe between us shows it our membership, which
                // removed it, and that makes it rejoin; an answer here could bounce for ever.
                Err(Ignored::SenderNotMember)
            }
            Phase::Member if includes_me => {
                let ours = &self.membership;
                if m.version > ours.version {
                    return Ok(Change::Apply(m));
                }
                // The same shared tree is the same membership, without comparing it member by
                // member.
                if m.version == ours.version && !Arc::ptr_eq(&m, ours) && m != *ours {
                    // Two changes made concurrently from one membership: merge deterministically.
                    let merged = ours.merged(&m, self.max_degree);
                    return Ok(Change::Commit(Arc::new(merged)));
                }
                if m.version < ours.version
                    && let Some(c) = ours.members.get(&from.id)
                {
                    out.raw(c.clone(), Body::shared_tree(ours.clone()));
                }
                Err(Ignored::StaleVersion)
            }
            Phase::Member => {
                // A membership without us: either our cluster removed us (a cluster mate says
                // so, at whatever version: a life once removed never comes back), or it is
                // another cluster that removed us (after a partition), which wins only if it
                // ranks higher, as the partition merge decides.
                if !m.is_gone(self.me.id, self.me.incarnation) {
                    return Err(Ignored::NotIncluded);
                }
                let from_a_mate = self.membership.contains(from.id);
                let ours = Standing::of(self.membership.rank(), self.membership.version);
                if !from_a_mate && Standing::of(m.rank(), m.version) >= ours {
                    return Err(Ignored::LowerRank);
                }
                Ok(Change::Apply(m))
            }
            Phase::Joining { .. } => Err(Ignored::NotIncluded),
            Phase::Idle => Err(Ignored::NotInCluster),
            Phase::Stopped => Err(Ignored::Stopped),
        }
    }

    /// Makes `m` this node's membership if it lists this node: diffs the members, remembers
    /// those gone as former members, and tells the driver. A membership that removed this node
    /// makes a member rejoin.
    pub(crate) fn apply(&mut self, m: Arc<Membership>, out: &mut Outbox) -> Applied {
        if !self.includes_me(&m) {
            let removed_me = m.is_gone(self.me.id, self.me.incarnation);
            if removed_me && self.is_member() {
                return Applied::Rejoin(m.members.values().map(|c| c.addr.to_string()).collect());
            }
            return Applied::Unchanged;
        }
        let old = std::mem::replace(&mut self.membership, m);
        self.derive();
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
            .filter(|c| c.id != self.me.id && !same(&old, c))
            .cloned()
            .collect();
        for c in &gone {
            self.remember_former(c.clone());
            out.emit(Event::MemberRemoved(c.clone()));
        }
        for c in &added {
            self.formers.remove(&c.id);
            out.emit(Event::MemberAdded(c.clone()));
        }
        self.learn_removed();
        Applied::Changed { gone, added }
    }

    /// This node was removed from its cluster (declared dead, or its cluster lost to another
    /// after a partition): start a new life and ask to be let back in, `seeds` first, then any
    /// former member (visitors queued here stay queued).
    pub(crate) fn rejoin(&mut self, now: Time, mut seeds: Vec<String>, out: &mut Outbox) {
        out.emit(Event::Rejoining);
        let old = std::mem::take(&mut self.membership);
        self.derive();
        for c in old.members.values() {
            self.remember_former(c.clone());
        }
        // The first seeds are the best bets; any former member may be alive too.
        for c in self.formers.values() {
            if !seeds.iter().any(|s| **s == *c.addr) {
                seeds.push(c.addr.to_string());
            }
        }
        seeds.retain(|a| **a != *self.me.addr);
        self.me.incarnation += 1;
        self.phase = Phase::Joining {
            seeds,
            next: 0,
            since: now,
        };
    }

    /// The lives the membership says were removed before this node saw them are former
    /// members too: a node that joined after a member was cut off and removed would otherwise
    /// never look for it, and a cut-off node that restarted and knows only addresses that are
    /// gone since would stay a cluster apart for good.
    fn learn_removed(&mut self) {
        let members = &self.membership.members;
        let unknown: Vec<Contact> = (self.membership.removed.values())
            .filter(|c| !members.contains_key(&c.id) && !self.formers.contains_key(&c.id))
            .cloned()
            .collect();
        for c in unknown {
            self.remember_former(c);
        }
    }

    fn remember_former(&mut self, contact: Contact) {
        if contact.id == self.me.id {
            return;
        }
        if self.formers.len() >= FORMERS_LIMIT
            && let Some(&oldest) = self.formers.keys().next()
        {
            self.formers.remove(&oldest);
        }
        self.formers.insert(contact.id, contact);
    }

    /// A joining node probed by a cluster member learns one more address to ask.
    pub(crate) fn learn_seed(&mut self, addr: &str) {
        if let Phase::Joining { seeds, .. } = &mut self.phase
            && !seeds.iter().any(|s| s == addr)
        {
            seeds.push(addr.to_string());
        }
    }

    /// Addresses found outside the protocol (DNS discovery): remembered as seeds (bounded),
    /// and asked at once while joining.
    pub(crate) fn discovered(&mut self, addrs: &[String]) {
        for addr in addrs {
            if *addr == *self.me.addr {
                continue;
            }
            if !self.seed_addrs.contains(addr) && self.seed_addrs.len() < SEEDS_LIMIT {
                self.seed_addrs.push(addr.clone());
            }
            self.learn_seed(addr);
        }
    }

    /// `from` says we are not in its cluster. Returns the seeds to rejoin with: when a cluster
    /// mate moved on without us (we were declared dead), or when the other side of a healed
    /// partition ranks higher (then our cluster is told we leave it first). None after showing
    /// a cluster mate that is behind our membership. When ours ranks higher, the sender is told
    /// it is not in ours: that is how a node that started a cluster of its own (restarted
    /// without seeds, or after none answered) hears that it should join ours.
    pub(crate) fn on_not_member(
        &self,
        from: &Contact,
        cluster: ClusterRank,
        version: u64,
        out: &mut Outbox,
    ) -> Result<Option<Vec<String>>, Ignored> {
        if !self.is_member() {
            return Err(Ignored::NotInCluster);
        }
        let ours = &self.membership;
        if ours.contains(from.id) {
            if version > ours.version {
                // A cluster mate moved on without us: we were declared dead.
                return Ok(Some(vec![from.addr.to_string()]));
            }
            // It is behind: show it our membership.
            out.raw(from.clone(), Body::shared_tree(ours.clone()));
            return Ok(None);
        }
        let theirs = Standing::of(cluster, version);
        let mine = Standing::of(ours.rank(), ours.version);
        if theirs > mine {
            // Strictly: two clusters that rank the same would tell each other for ever.
            out.raw(from.clone(), self.not_member());
        }
        if theirs >= mine {
            return Err(Ignored::LowerRank);
        }
        // A partition healed and the other side ranks higher: leave ours and join theirs.
        if let Some(next) = ours.with_removed(self.me.id, self.me.incarnation, self.max_degree) {
            self.broadcast(&Arc::new(next), out);
        }
        Ok(Some(vec![from.addr.to_string()]))
    }

    /// Leaves gracefully: a member tells the others at once instead of waiting for failure
    /// detection.
    pub(crate) fn leave(&mut self, out: &mut Outbox) {
        if self.is_member()
            && let Some(next) =
                self.membership
                    .with_removed(self.me.id, self.me.incarnation, self.max_degree)
        {
            self.broadcast(&Arc::new(next), out);
        }
        self.phase = Phase::Stopped;
    }

    /// Former members, and seed addresses outside the cluster, to ping now and then. A former
    /// member is asked whatever life it lives now (incarnation 0): a node that restarted or
    /// rejoined since drops anything addressed to its earlier life, and a node whose every peer
    /// rejoined without it would never hear of their cluster (mixed-chaos seed 4,364).
    pub(crate) fn former_candidates(&self) -> Vec<Contact> {
        let any_life = |c: &Contact| Contact {
            incarnation: 0,
            ..c.clone()
        };
        let mut candidates: Vec<Contact> = self.formers.values().map(any_life).collect();
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

/// One envelope in, the exact messages out (see `testing`).
#[cfg(test)]
mod tests {
    use crate::messages::{ChannelMsg, Envelope, Weight};
    use crate::node::Node;
    use crate::testing::{self, Peer, Said, member, said, settle, tree};

    use super::*;

    fn settled(id: u64, m: &Membership) -> Node {
        let mut node = member(testing::config(id, 1, testing::queued_settings()), m);
        settle(&mut node);
        node
    }

    fn line() -> Membership {
        tree(2, &[1, 2, 3], &[(1, 2), (2, 3)])
    }

    /// §4.4 and §4.7: a node asks a member to be let in; the member adds it to the tree and
    /// broadcasts the new tree to every other member, the new node included. Asking again
    /// (the answer was lost) gets the same tree again.
    #[test]
    fn a_join_request_is_answered_with_the_new_tree_broadcast() {
        let pair = tree(2, &[1, 2], &[(1, 2)]);
        let mut node = settled(1, &pair);
        let join = Envelope {
            from: testing::contact(3),
            to: NodeId(0),
            to_incarnation: 0,
            body: Body::JoinRequest {
                contact: testing::contact(3),
            },
        };
        assert_eq!(node.handle_message(1, join.clone()), Ok(()));
        let grown = pair.with_added(testing::contact(3), 4);
        let to = |id: u64| Said::Raw(testing::addr(id), Body::tree(grown.clone()));
        assert_eq!(said(&mut node), [to(2), to(3)]);
        let added = Event::MemberAdded(testing::contact(3));
        assert_eq!(testing::events(&mut node), [added]);
        assert_eq!(node.handle_message(2, join), Ok(()));
        assert_eq!(said(&mut node), [to(3)]);
    }

    /// §4.7.2: a newer tree is applied (here node 3 left: node 2 starts QPID over with its one
    /// neighbour); an older one is not, and its sender is shown ours.
    #[test]
    fn a_newer_tree_is_applied_and_an_older_one_answered() {
        let mut node = settled(2, &line());
        let smaller = line().with_removed(NodeId(3), 1, 4).expect("a member");
        let from_1 = Peer::new(1);
        let env = from_1.raw(&node, Body::tree(smaller.clone()));
        assert_eq!(node.handle_message(1, env), Ok(()));
        let update = ChannelMsg::Update {
            weight: Weight::Empty,
            version: 3,
        };
        assert_eq!(said(&mut node), [Said::Channel(NodeId(1), update)]);
        let removed = Event::MemberRemoved(testing::contact(3));
        assert_eq!(testing::events(&mut node), [removed]);
        assert_eq!(node.membership(), &smaller);
        let env = from_1.raw(&node, Body::tree(line()));
        assert_eq!(node.handle_message(2, env), Err(Ignored::StaleVersion));
        let ours = Body::tree(smaller);
        assert_eq!(said(&mut node), [Said::Raw("n1".into(), ours)]);
    }

    /// §4.7.4: two trees with the same version and different content were made concurrently;
    /// every node that sees both rebuilds the tree from the merged member list, sorted by id,
    /// and broadcasts it.
    #[test]
    fn a_conflicting_tree_of_the_same_version_is_merged_and_broadcast() {
        let mut node = settled(2, &line());
        let other = tree(2, &[1, 2, 4], &[(1, 2), (2, 4)]);
        let env = Peer::new(4).raw(&node, Body::tree(other.clone()));
        assert_eq!(node.handle_message(1, env), Ok(()));
        let merged = line().merged(&other, 4);
        assert_eq!(merged.version, 3);
        let trees: Vec<Said> = said(&mut node)
            .into_iter()
            .filter(|s| matches!(s, Said::Raw(_, Body::Tree(..))))
            .collect();
        let to = |id: u64| Said::Raw(testing::addr(id), Body::tree(merged.clone()));
        assert_eq!(trees, [to(1), to(3), to(4)]);
        assert_eq!(node.membership(), &merged);
    }

    /// waitingroom-distributed/README.md#partitions: a node that talks to us as a member without
    /// being one is told so, with what it needs to decide which side of a partition joins the
    /// other.
    #[test]
    fn a_non_member_talking_as_a_member_is_told_it_is_not_one() {
        let mut node = settled(2, &line());
        let update = ChannelMsg::Update {
            weight: Weight::Empty,
            version: 2,
        };
        let env = Peer::new(9).channel(&node, update);
        assert_eq!(node.handle_message(1, env), Err(Ignored::SenderNotMember));
        let not_member = Body::NotMember {
            cluster: line().rank(),
            version: 2,
        };
        assert_eq!(said(&mut node), [Said::Raw("n9".into(), not_member)]);
    }

    /// waitingroom-distributed/README.md#partitions: addresses found by discovery that are not in
    /// the cluster are probed like former members (so clusters that formed apart merge); this
    /// node's own address and its cluster mates' are not, and a joining node asks them at once.
    #[test]
    fn discovered_addresses_outside_the_cluster_are_probed_and_asked() {
        let mut cluster = Cluster::new(testing::contact(2), 4, 10_000);
        let found: Vec<String> = [1, 2, 9].map(|id| testing::addr(id).to_string()).into();
        cluster.start_joining(0, vec![testing::addr(1).to_string()]);
        cluster.discovered(&found);
        let Phase::Joining { seeds, .. } = &cluster.phase else {
            panic!("joining");
        };
        assert_eq!(seeds, &["n1".to_string(), "n9".to_string()]);
        cluster.membership = Arc::new(line());
        cluster.phase = Phase::Member;
        let probed: Vec<String> = cluster
            .former_candidates()
            .into_iter()
            .map(|c| c.addr.to_string())
            .collect();
        assert_eq!(probed, ["n9"]);
    }

    #[test]
    fn former_members_are_probed_in_whatever_life_they_live_now() {
        let mut cluster = Cluster::new(testing::contact(2), 4, 10_000);
        cluster.remember_former(testing::contact(3));
        let probed = cluster.former_candidates();
        // Incarnation 0 reaches any life at that address: node 3 may have rejoined since, and
        // drops what is addressed to its earlier life.
        assert_eq!(probed.len(), 1);
        assert_eq!((probed[0].id, probed[0].incarnation), (NodeId(3), 0));
        assert_eq!(&*probed[0].addr, "n3");
    }

    /// Node 1 of the line missed its own removal (it was paused) and, from its stale view,
    /// removed node 2 at the same version the others removed it at.
    fn removed_by_each_other() -> (Membership, Membership) {
        let without_1 = line().with_removed(NodeId(1), 1, 4).expect("a member");
        let stale = line().with_removed(NodeId(2), 1, 4).expect("a member");
        assert_eq!(without_1.version, stale.version);
        (without_1, stale)
    }

    /// waitingroom-distributed/README.md#swim: a tree from a life our membership removed, of
    /// the same version as ours, is that node's stale view: merging it would remove a healthy
    /// member too. It is not merged.
    #[test]
    fn a_tree_from_a_removed_life_is_not_merged_back() {
        let (without_1, stale) = removed_by_each_other();
        let mut node = settled(3, &without_1);
        let env = Peer::new(1).raw(&node, Body::tree(stale));
        assert_eq!(node.handle_message(1, env), Err(Ignored::SenderNotMember));
        assert_eq!(node.membership(), &without_1);
        assert_eq!(said(&mut node), []);
    }

    /// The paused node, shown by a member of its own (stale) membership a tree that removed it,
    /// rejoins even though that tree is no newer than its own: a life once removed never comes
    /// back.
    #[test]
    fn a_cluster_mates_tree_that_removed_us_makes_us_rejoin_at_any_version() {
        let (without_1, stale) = removed_by_each_other();
        let mut node = settled(1, &stale);
        let env = Peer::new(3).raw(&node, Body::tree(without_1));
        assert_eq!(node.handle_message(1, env), Ok(()));
        assert!(
            matches!(node.phase(), Phase::Joining { .. }),
            "{:?}",
            node.phase()
        );
        assert!(testing::events(&mut node).contains(&Event::Rejoining));
    }

    /// waitingroom-distributed/README.md#partitions: a node that started a cluster of its own
    /// (restarted without seeds) says our node is not in its cluster; ours ranks higher, so it
    /// is told it is not in ours: the invitation to join.
    #[test]
    fn a_lone_cluster_is_invited_into_a_bigger_one() {
        let without_1 = line().with_removed(NodeId(1), 1, 4).expect("a member");
        let mut node = settled(2, &without_1);
        let alone = Membership::single(testing::contact(1));
        let says = Body::NotMember {
            cluster: alone.rank(),
            version: alone.version,
        };
        let env = Peer::new(1).raw(&node, says);
        assert_eq!(node.handle_message(1, env), Err(Ignored::LowerRank));
        let invite = Body::NotMember {
            cluster: without_1.rank(),
            version: without_1.version,
        };
        assert_eq!(said(&mut node), [Said::Raw("n1".into(), invite)]);
    }

    /// waitingroom-distributed/README.md#partitions: the bigger cluster wins whatever the
    /// versions: a node alone whose membership moved on further (it outlived its cluster mates)
    /// joins a cluster of two rather than making both rejoin it.
    #[test]
    fn a_node_alone_joins_a_bigger_cluster_of_a_lower_version() {
        let mut alone = Membership::single(testing::contact(1));
        alone.version = 9;
        let mut node = settled(1, &alone);
        let pair = tree(3, &[2, 3], &[(2, 3)]);
        let says = Body::NotMember {
            cluster: pair.rank(),
            version: pair.version,
        };
        let env = Peer::new(2).raw(&node, says);
        assert_eq!(node.handle_message(1, env), Ok(()));
        assert!(
            matches!(node.phase(), Phase::Joining { .. }),
            "{:?}",
            node.phase()
        );
    }

    /// A ping from a later life of a member (it restarted before the cluster noticed) is
    /// answered, and its sender told it is not a member, so that it joins again at once.
    #[test]
    fn a_members_later_life_is_told_it_is_not_a_member() {
        let mut node = settled(2, &line());
        let view = node.membership().view();
        let ping = Envelope {
            from: Contact {
                incarnation: 7,
                ..testing::contact(1)
            },
            to: NodeId(2),
            to_incarnation: 1,
            body: Body::Ping {
                nonce: 3,
                view,
                time: 0,
            },
        };
        assert_eq!(node.handle_message(1, ping), Ok(()));
        let not_member = Body::NotMember {
            cluster: line().rank(),
            version: 2,
        };
        let not_member = Said::Raw("n1".into(), not_member);
        assert!(said(&mut node).contains(&not_member));
    }
}
