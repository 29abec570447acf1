//! The majority rule: a root grants places only while the members it counted hold a majority of
//! the voters, the membership the cluster last agreed on (README, "Admission leases"; the thesis
//! has no such rule: each side of a partition elects a root, §4.7, and both fill the site).
//!
//! Agreement is a completed count: when every member answered a round and they hold a majority
//! of the voters, the root makes them the next voters (one epoch on) and the result tells every
//! member. Removing members one by one never moves the voters by itself: a minority side that
//! drops the others from its membership still counts only its own members, which hold no
//! majority of the voters it knows, so it grants nothing until enough of them are back. Counts
//! carry the newest voters of each subtree, so a root that missed a change learns it. An even
//! split goes to the half holding the lowest voter id, so exactly one side of it may go on.
//!
//! The voters never shrink below [`VOTERS_FLOOR`] (those that left are kept, lowest id first):
//! a 3-node cluster that loses one node keeps admitting (2 of 3); one that loses two stops
//! (1 of 3) until a node comes back or an operator restarts the cluster. A node that started a
//! cluster on its own after no seed answered has no voters, and so no majority, until it hears
//! of a cluster that has. A round that counted two or more members none of whom knows any
//! voters (the founder died before any round completed) makes them the first voters. Voters
//! live in memory: a restarted node learns them anew, so two restarted nodes cut off together
//! from everyone else would count as a cluster of their own.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use waitingroom_core::NodeId;

/// Fewest voters kept once a cluster has had that many members.
pub const VOTERS_FLOOR: usize = 3;

/// A set of voters and the epoch it was agreed in (newer epochs win).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Voters {
    /// Agreements so far (0: none).
    pub epoch: u64,
    /// The voters.
    pub set: BTreeSet<NodeId>,
}

impl Voters {
    /// A cluster founded on purpose (not after giving up on the seeds): its founder votes.
    pub(crate) fn founder(me: NodeId) -> Voters {
        Voters {
            epoch: 1,
            set: BTreeSet::from([me]),
        }
    }

    /// The voters, in id order.
    pub fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.set.iter().copied()
    }

    /// Whether `members` hold a majority of the voters (half of them, with the lowest voter,
    /// breaks an even split).
    pub(crate) fn is_majority(&self, members: &BTreeSet<NodeId>) -> bool {
        let held = self.set.intersection(members).count();
        let lowest_in = self.set.first().is_some_and(|v| members.contains(v));
        let n = self.set.len();
        n > 0 && (2 * held > n || 2 * held == n && lowest_in)
    }

    /// The voters after a round that counted `members`, if they hold a majority: the members,
    /// topped up to the floor with the old voters, lowest id first. With no voters known, two
    /// or more members become the first.
    pub(crate) fn next(&self, members: &BTreeSet<NodeId>) -> Option<Voters> {
        if self.set.is_empty() && members.len() >= 2 {
            return Some(Voters {
                epoch: 1,
                set: members.clone(),
            });
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
        })
    }

    /// Keeps the newer of these voters and `other`.
    pub(crate) fn adopt(&mut self, other: &Voters) {
        if *other > *self {
            *self = other.clone();
        }
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
        let v = voters(&[1, 2, 3]).next(&ids(&[1, 2])).unwrap();
        assert_eq!(v.set, ids(&[1, 2, 3]), "the floor keeps 3 voters");
        assert_eq!(v.epoch, 6);
        assert_eq!(v.next(&ids(&[1])), None);
        assert!(v.next(&ids(&[1, 3])).is_some());
    }

    /// A minority side that removed the others one by one still holds no majority: only
    /// completed rounds move the voters.
    #[test]
    fn a_minority_side_cannot_take_over() {
        let v = voters(&[1, 2, 3, 4, 5]);
        assert_eq!(v.next(&ids(&[4, 5])), None);
        let majority = v.next(&ids(&[1, 2, 3])).unwrap();
        assert_eq!(majority.set, ids(&[1, 2, 3]));
        let mut stale = v.clone();
        stale.adopt(&majority);
        assert_eq!(stale, majority, "the newer epoch wins when the sides meet");
        assert_eq!(majority.next(&ids(&[3, 4, 5])), None);
    }

    /// A node that started alone after no seed answered holds no majority on its own, and
    /// takes the voters of the cluster it meets; members none of whom knows voters start them.
    #[test]
    fn no_voters_no_majority() {
        let mut v = Voters::default();
        assert_eq!(v.next(&ids(&[7])), None);
        assert_eq!(v.next(&ids(&[7, 8])).unwrap().set, ids(&[7, 8]));
        v.adopt(&Voters::founder(NodeId(1)));
        assert!(v.is_majority(&ids(&[1, 7])));
        assert_eq!(v.next(&ids(&[1, 7])).unwrap().set, ids(&[1, 7]));
    }
}
