//! The majority rule: a root grants places only while the members it counted hold a majority of
//! the voters, the membership the cluster last agreed on
//! (waitingroom-distributed/README.md#admission-leases; the thesis has no such rule: each side of a
//! partition elects a root, §4.7, and both fill the site).
//!
//! Agreement is a completed count: when every member answered a round and they hold a majority
//! of the voters, the root makes them the next voters (one epoch on) and the result tells every
//! member. Removing members one by one never moves the voters by itself: a minority side that
//! drops the others from its membership still counts only its own members, which hold no
//! majority of the voters it knows, so it grants nothing until enough of them are back. Counts
//! carry the newest voters of each subtree, so a root that missed a change learns it. An even
//! split goes to the half holding the lowest voter id, so exactly one side of it may go on.
//!
//! A member counted in the round that moved the voters may never hear its result, and still
//! hold the old voters: on its own side of a cut it may be a majority of them. So a root also
//! needs a majority of the voters *before* the latest move (`prev`): of two disjoint sides,
//! at most one holds a majority of the older set, and the side that moved cannot go on without
//! it (the explorer's `partition` scenario found the old side and the new one both granting).
//! Once a round under the new voters completes, they are the previous ones too.
//!
//! The voters never shrink below [`VOTERS_FLOOR`] (those that left are kept, lowest id first):
//! a 3-node cluster that loses one node keeps admitting (2 of 3); one that loses two stops
//! (1 of 3) until a node comes back or an operator declares the others gone
//! ([`Voters::reset`]). A voter that leaves cleanly may hand its vote on instead
//! ([`Voters::resignation`]): the voters become the others, and its vote counts as held in the
//! ones before until a round completes under the new ones; so the survivor of a cluster of two
//! goes on whichever node left. A node that started a cluster on its own after no seed answered has no
//! voters, and so no majority, until it hears of a cluster that has.
//!
//! A founder votes alone (its *founding* voters) only while it has never had company: once
//! another member joined, it needs a completed round with them, and its founding voters are
//! passed on to nobody. Otherwise a founder cut off before the first round completed would go
//! on alone while the others, who cannot tell it from dead, go on too (the explorer found both
//! sides granting). A round that counted two or more members none of whom knows any voters
//! (the founder among them, or dead before any round completed) makes them the first voters,
//! if they hold a majority of every member any of them has had ([`Voters::first`]).
//!
//! Voters live in memory; a driver may keep them on disk (`Node::agreed_voters`, given back to
//! the next life with `Node::remember_voters`: the server's `--voters-file`). Without that, a
//! restarted node learns them anew, so two restarted nodes cut off together from everyone else
//! would make themselves the first voters of a cluster of their own; with it they still need a
//! majority of the voters they knew.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use waitingroom_core::NodeId;

/// Fewest voters kept once a cluster has had that many members.
pub const VOTERS_FLOOR: usize = 3;

/// Most members a node remembers having had, and a count carries (`seen`).
pub(crate) const SEEN_KEPT: usize = 1_024;

/// A set of voters and the epoch it was agreed in (newer epochs win).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Voters {
    /// Agreements so far (0: none).
    pub epoch: u64,
    /// The voters.
    pub set: BTreeSet<NodeId>,
    /// The voters before the move to `set` (empty: none before).
    #[serde(default)]
    pub prev: BTreeSet<NodeId>,
    /// Voters of `prev` who left cleanly and gave their vote to this move
    /// ([`Voters::resignation`]): they count as held in `prev`.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub resigned: BTreeSet<NodeId>,
}

impl Voters {
    /// A cluster founded on purpose (not after giving up on the seeds): its founder votes.
    pub(crate) fn founder(me: NodeId) -> Voters {
        Voters {
            epoch: 1,
            set: BTreeSet::from([me]),
            ..Voters::default()
        }
    }

    /// Whether these are a founder's own voters (itself alone, before any agreement).
    pub fn is_founding(&self) -> bool {
        self.epoch == 1 && self.set.len() == 1 && self.prev.is_empty()
    }

    /// Whether voters were agreed (not none, nor a founder's own).
    pub(crate) fn agreed(&self) -> bool {
        !self.set.is_empty() && !self.is_founding()
    }

    /// The voters, in id order.
    pub fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.set.iter().copied()
    }

    /// Whether `members` hold a majority of the voters and of the voters before them (where
    /// those who resigned count as held).
    pub fn is_majority(&self, members: &BTreeSet<NodeId>) -> bool {
        if !majority(&self.set, members) {
            return false;
        }
        if self.prev.is_empty() {
            return true;
        }
        if self.resigned.is_empty() {
            return majority(&self.prev, members);
        }
        let held: BTreeSet<NodeId> = members.union(&self.resigned).copied().collect();
        majority(&self.prev, &held)
    }

    /// The voters after `me` leaves cleanly, if it may hand its vote on: settled voters (no
    /// move under way) of two or more, `me` among them. The move is the same wherever it is
    /// made: one epoch on, the others, with `me` counted as held in the voters before.
    ///
    /// Sound only if `me` never counts as one of the old voters again: a node restarted
    /// without this move would vote twice (once here, once as a member of a side that never
    /// heard of it). So a driver hands the vote on only after keeping the move on disk, where
    /// the node's next life reads it back (`Node::remember_voters`), and whoever counts that
    /// life adopts it. Two sides holding this move both need a majority of the others, which
    /// they cannot both hold; a side still holding the old voters needs a majority of them
    /// without `me`, which leaves the others none.
    pub fn resignation(&self, me: NodeId) -> Option<Voters> {
        let settled = self.prev.is_empty() || self.prev == self.set;
        let may = self.agreed() && settled && self.set.len() >= 2 && self.set.contains(&me);
        may.then(|| {
            let mut set = self.set.clone();
            set.remove(&me);
            Voters {
                epoch: self.epoch.saturating_add(1),
                set,
                prev: self.set.clone(),
                resigned: BTreeSet::from([me]),
            }
        })
    }

    /// The voters after a round that counted `members`, if they hold a majority: the members,
    /// topped up to the floor with the old voters, lowest id first. With no voters known, two
    /// or more members become the first.
    ///
    /// Before any agreement (no voters, or a founder's own), `seen` is every member any of
    /// them has ever had: see [`Voters::first`].
    pub(crate) fn next(
        &self,
        members: &BTreeSet<NodeId>,
        seen: &BTreeSet<NodeId>,
    ) -> Option<Voters> {
        if !self.agreed() {
            return self.first(members, seen);
        }
        if !self.is_majority(members) {
            return None;
        }
        let mut set = members.clone();
        let floor = VOTERS_FLOOR.min(self.set.len());
        for &v in &self.set {
            if set.len() >= floor {
                break;
            }
            set.insert(v);
        }
        Some(Voters {
            // Saturating: the epoch comes from peers, and a wrong one must not crash a node.
            epoch: self.epoch.saturating_add(1),
            set,
            prev: self.set.clone(),
            resigned: BTreeSet::new(),
        })
    }

    /// Before any agreement: `members` must hold a majority of every member any of them has
    /// ever had (`seen`), so that two sides of a cluster cut before its first round cannot
    /// both start voters (the simulator's chaos preset found a 4-4 split doing so). Two or more
    /// become the first voters; a founder alone stays its own voter (while it has never had
    /// company, `Electorate::vote`), and the founding voters never count without their founder.
    fn first(&self, members: &BTreeSet<NodeId>, seen: &BTreeSet<NodeId>) -> Option<Voters> {
        let everyone: BTreeSet<NodeId> = seen.union(members).copied().collect();
        if !majority(&everyone, members) || self.is_founding() && !self.is_majority(members) {
            return None;
        }
        if members.len() == 1 {
            return self.is_founding().then(|| self.clone());
        }
        // Epoch 2: after the founding voters, which they replace.
        Some(Voters {
            epoch: 2,
            set: members.clone(),
            ..Voters::default()
        })
    }

    /// The operator's way out of a lost majority
    /// (waitingroom-distributed/README.md#admission-leases): `members` become the voters, one epoch
    /// on, with no older voters to satisfy. Sound only if every voter left out is really gone:
    /// alive on the other side of a cut, it may still grant.
    pub(crate) fn reset(&self, members: BTreeSet<NodeId>) -> Voters {
        Voters {
            epoch: self.epoch.saturating_add(1).max(2),
            set: members,
            ..Voters::default()
        }
    }

    /// Keeps the newer of these voters and `other`; never another node's founding voters.
    pub(crate) fn adopt(&mut self, other: &Voters) {
        if *other > *self && !other.is_founding() {
            *self = other.clone();
        }
    }
}

/// Whether `members` hold a majority of `voters` (half of them, with the lowest voter, breaks an
/// even split).
fn majority(voters: &BTreeSet<NodeId>, members: &BTreeSet<NodeId>) -> bool {
    let held = voters.intersection(members).count();
    let lowest_in = voters.first().is_some_and(|v| members.contains(v));
    let n = voters.len();
    n > 0 && (2 * held > n || 2 * held == n && lowest_in)
}

/// The voters this node knows, and the members it has had: what the majority rule needs of one
/// node, at the root and everywhere else.
#[derive(Debug, Clone, Default)]
pub(crate) struct Electorate {
    /// The newest voters this node knows, for the majority rule.
    voters: Voters,
    /// Every member this node has had (at most [`SEEN_KEPT`]): before any voters are agreed,
    /// the first need a majority of them, and a founder votes alone only while it has had no
    /// other.
    seen: BTreeSet<NodeId>,
}

impl Electorate {
    /// This node founds a cluster on purpose (not after giving up on its seeds): it votes.
    pub(crate) fn found(&mut self, me: NodeId) {
        if self.voters.set.is_empty() {
            self.voters = Voters::founder(me);
        }
    }

    /// This node applied a membership of `members`: it has had them (`seen`).
    pub(crate) fn members_now<'a>(&mut self, members: impl IntoIterator<Item = &'a NodeId>) {
        for &id in members {
            if self.seen.len() >= SEEN_KEPT {
                break;
            }
            self.seen.insert(id);
        }
    }

    /// An operator makes `members` the voters (`Voters::reset`).
    pub(crate) fn reset(&mut self, members: BTreeSet<NodeId>) -> &Voters {
        self.voters = self.voters.reset(members);
        &self.voters
    }

    /// Voters a peer told of: the newer win.
    pub(crate) fn adopt(&mut self, voters: &Voters) {
        self.voters.adopt(voters);
    }

    /// The newest voters this node knows.
    pub(crate) fn voters(&self) -> &Voters {
        &self.voters
    }

    /// What this node's own count carries of the members it has had: all of them until voters
    /// are agreed, none after.
    pub(crate) fn seen_to_count(&self) -> BTreeSet<NodeId> {
        if self.voters.agreed() {
            BTreeSet::new()
        } else {
            self.seen.clone()
        }
    }

    /// The majority rule at the root: whether the members `counted` (whose newest voters are
    /// `theirs`, and who have had `their_seen`) hold a majority of the newest voters known,
    /// which they then become. With no limit on the site for good (`unguarded`:
    /// `InForce::unguarded`) there is nothing to protect, and no rule holds admission back.
    pub(crate) fn vote(
        &mut self,
        theirs: &Voters,
        counted: &BTreeSet<NodeId>,
        their_seen: &BTreeSet<NodeId>,
        unguarded: bool,
    ) -> bool {
        self.voters.adopt(theirs);
        let had_company = self.seen.len() > 1;
        let lone_founder = self.voters.is_founding() && had_company && counted.len() == 1;
        let next = if lone_founder {
            None
        } else {
            let seen = self.seen.union(their_seen).copied().collect();
            self.voters.next(counted, &seen)
        };
        let majority = next.is_some() || unguarded;
        if let Some(next) = next {
            self.voters = next;
        }
        majority
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[u64]) -> BTreeSet<NodeId> {
        v.iter().map(|&i| NodeId(i)).collect()
    }

    fn voters(v: &[u64]) -> Voters {
        Voters {
            epoch: 5,
            set: ids(v),
            ..Voters::default()
        }
    }

    #[test]
    fn a_strict_majority_goes_on() {
        let v = voters(&[1, 2, 3]);
        assert!(v.is_majority(&ids(&[1, 2, 3])));
        assert!(v.is_majority(&ids(&[2, 3])));
        assert!(!v.is_majority(&ids(&[3])));
        assert!(
            !v.is_majority(&ids(&[3, 4, 5])),
            "new members do not vote yet"
        );
    }

    /// An even split goes to the half with the lowest voter: exactly one side goes on.
    #[test]
    fn an_even_split_goes_to_the_lowest_id() {
        let v = voters(&[1, 2, 3, 4]);
        assert!(v.is_majority(&ids(&[1, 4])));
        assert!(!v.is_majority(&ids(&[2, 3])));
    }

    /// A 3-node cluster that loses one keeps admitting; one that loses two stops until one is
    /// back.
    #[test]
    fn three_nodes_survive_one_loss_not_two() {
        let v = voters(&[1, 2, 3]).next(&ids(&[1, 2]), &ids(&[])).unwrap();
        assert_eq!(v.set, ids(&[1, 2, 3]), "the floor keeps 3 voters");
        assert_eq!(v.prev, ids(&[1, 2, 3]));
        assert_eq!(v.epoch, 6);
        assert_eq!(v.next(&ids(&[1]), &ids(&[])), None);
        assert!(v.next(&ids(&[1, 3]), &ids(&[])).is_some());
    }

    /// A minority side that removed the others one by one still holds no majority: only
    /// completed rounds move the voters.
    #[test]
    fn a_minority_side_cannot_take_over() {
        let v = voters(&[1, 2, 3, 4, 5]);
        assert_eq!(v.next(&ids(&[4, 5]), &ids(&[])), None);
        let majority = v.next(&ids(&[1, 2, 3]), &ids(&[])).unwrap();
        assert_eq!(majority.set, ids(&[1, 2, 3]));
        let mut stale = v.clone();
        stale.adopt(&majority);
        assert_eq!(stale, majority, "the newer epoch wins when the sides meet");
        assert_eq!(majority.next(&ids(&[3, 4, 5]), &ids(&[])), None);
    }

    /// A node that started alone after no seed answered holds no majority on its own, and
    /// takes the voters of the cluster it meets; members none of whom knows voters start them.
    #[test]
    fn no_voters_no_majority() {
        let v = Voters::default();
        assert_eq!(v.next(&ids(&[7]), &ids(&[])), None);
        assert_eq!(
            v.next(&ids(&[7, 8]), &ids(&[6, 7, 8, 9])),
            None,
            "2 of 4 seen"
        );
        assert!(
            v.next(&ids(&[6, 7]), &ids(&[6, 7, 8, 9])).is_some(),
            "with the lowest"
        );
        assert_eq!(v.next(&ids(&[7, 8]), &ids(&[])).unwrap().set, ids(&[7, 8]));
        let founder = Voters::founder(NodeId(1));
        assert_eq!(
            founder.next(&ids(&[1]), &ids(&[])),
            Some(founder.clone()),
            "alone, it stays"
        );
        assert_eq!(
            founder.next(&ids(&[1, 7]), &ids(&[])).unwrap().set,
            ids(&[1, 7])
        );
        assert_eq!(
            founder.next(&ids(&[7, 8]), &ids(&[])),
            None,
            "not without the founder"
        );
        let mut joiner = Voters::default();
        joiner.adopt(&founder);
        assert_eq!(
            joiner,
            Voters::default(),
            "founding voters are passed on to nobody"
        );
    }

    /// A member counted in the round that moved the voters but cut off before its result still
    /// holds the old ones, and may be a majority of them on its own: the side that moved needs
    /// the old voters too, so exactly one side goes on.
    #[test]
    fn the_side_that_moved_the_voters_needs_the_old_ones_too() {
        let old = voters(&[1, 2, 3]);
        let moved = old.next(&ids(&[1, 2, 3, 4, 5]), &ids(&[])).unwrap();
        assert_eq!(moved.prev, ids(&[1, 2, 3]));
        assert!(
            old.is_majority(&ids(&[1, 2])),
            "the side that missed the move"
        );
        assert!(
            !moved.is_majority(&ids(&[3, 4, 5])),
            "the side that moved waits"
        );
        let settled = moved.next(&ids(&[1, 2, 3, 4, 5]), &ids(&[])).unwrap();
        assert!(
            settled.is_majority(&ids(&[3, 4, 5])),
            "once a round under the new voters completed"
        );
    }

    /// A clean leave hands its vote on: the survivor of two goes on whichever of them left,
    /// and a restarted node that kept the move is no voter.
    #[test]
    fn a_clean_leave_hands_its_vote_on() {
        let two = voters(&[1, 2]).next(&ids(&[1, 2]), &ids(&[])).unwrap();
        let left = two.resignation(NodeId(1)).unwrap();
        assert_eq!(
            (left.epoch, &left.set, &left.resigned),
            (7, &ids(&[2]), &ids(&[1]))
        );
        assert!(left.is_majority(&ids(&[2])), "the survivor goes on");
        assert!(
            !two.is_majority(&ids(&[2])),
            "without the vote it could not"
        );
        let after = left.next(&ids(&[2]), &ids(&[])).unwrap();
        assert_eq!((after.set, after.prev), (ids(&[2]), ids(&[2])));
        assert!(after.resigned.is_empty(), "once a round completed");
        assert!(
            !left.is_majority(&ids(&[1])),
            "the leaver's next life is no voter"
        );
    }

    /// A side that never heard of the leave needs a majority of the old voters without the
    /// leaver, which leaves the side that heard none; two sides that heard of it need a
    /// majority of the others.
    #[test]
    fn a_handed_on_vote_counts_on_one_side_only() {
        let old = voters(&[1, 2, 3, 4])
            .next(&ids(&[1, 2, 3, 4]), &ids(&[]))
            .unwrap();
        let left = old.resignation(NodeId(4)).unwrap();
        for side in [&[1][..], &[2], &[3], &[1, 2], &[1, 3], &[2, 3], &[1, 2, 3]] {
            let other: Vec<u64> = [1, 2, 3]
                .into_iter()
                .filter(|i| !side.contains(i))
                .collect();
            let heard = left.is_majority(&ids(side));
            assert!(!(heard && old.is_majority(&ids(&other))), "{side:?}");
            assert!(!(heard && left.is_majority(&ids(&other))), "{side:?}");
        }
        assert!(left.is_majority(&ids(&[1, 2])));
    }

    /// Only settled voters, of two or more, the leaver among them, hand a vote on.
    #[test]
    fn only_a_settled_voter_hands_its_vote_on() {
        let old = voters(&[1, 2, 3]);
        let moving = old.next(&ids(&[1, 2, 3, 4]), &ids(&[])).unwrap();
        assert_eq!(moving.resignation(NodeId(1)), None, "a move under way");
        assert_eq!(old.resignation(NodeId(9)), None, "not a voter");
        assert_eq!(Voters::founder(NodeId(1)).resignation(NodeId(1)), None);
        assert_eq!(Voters::default().resignation(NodeId(1)), None);
        let left = old.resignation(NodeId(1)).unwrap();
        assert_eq!(left.resignation(NodeId(2)), None, "until a round completes");
    }
}
