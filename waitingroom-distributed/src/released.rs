//! Passes given back early (`Node::release_pass`,
//! waitingroom-distributed/README.md#passes-given-back): a visitor who is done frees their place at
//! once instead of holding it until their pass expires.
//!
//! The node that takes the release refuses the pass from then on. The release travels with the
//! rounds, as the live settings do: each count carries the releases its subtree took in the
//! last few intervals (so a round that fails to finish loses none), the root's result carries
//! them down, and every node then refuses the pass too, and the node that counts it stops
//! counting it. Entries are kept until the pass could no longer be valid anyway.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use waitingroom_core::{TicketId, Time};

/// Most releases kept (the oldest-expiring go first beyond it).
const RELEASED_KEPT: usize = 65_536;

/// Most releases one count or result carries.
pub const RELEASED_SENT: usize = 4_096;

/// For how many intervals a count carries a release up (a round that fails to finish loses
/// none).
pub(crate) const RELEASES_SENT_INTERVALS: Time = 3;

/// A released pass: its visitor, and until when it could have been valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Release {
    /// The visitor's ticket id (a pass carries it).
    pub ticket: TicketId,
    /// When the pass would have expired at the latest.
    pub until: Time,
}

/// The releases this node knows.
#[derive(Debug, Clone, Default)]
pub(crate) struct Released {
    /// Ticket id → until when to refuse it.
    until: BTreeMap<TicketId, Time>,
    /// Releases taken or learned recently, with when: sent up with the next counts.
    recent: Vec<(Time, Release)>,
}

impl Released {
    /// Records a release at `now`; false if it was known.
    pub(crate) fn release(&mut self, now: Time, r: Release) -> bool {
        if self.until.insert(r.ticket, r.until).is_some() {
            return false;
        }
        self.recent.push((now, r));
        self.bound();
        true
    }

    /// Whether the pass of `ticket` was given back.
    pub(crate) fn contains(&self, ticket: TicketId) -> bool {
        self.until.contains_key(&ticket)
    }

    /// Releases learned from a count or a result at `now`: the ones not known before.
    pub(crate) fn learn(&mut self, now: Time, list: &[Release]) -> Vec<TicketId> {
        list.iter()
            .take(RELEASED_SENT)
            .filter(|r| self.release(now, **r))
            .map(|r| r.ticket)
            .collect()
    }

    /// What a count at `now` carries up: the releases of the last `window` ms. Forgets the
    /// expired ones.
    pub(crate) fn recent(&mut self, now: Time, window: Time) -> Vec<Release> {
        self.until.retain(|_, until| *until > now);
        self.recent
            .retain(|(at, r)| at.saturating_add(window) > now && r.until > now);
        let skip = self.recent.len().saturating_sub(RELEASED_SENT);
        self.recent[skip..].iter().map(|(_, r)| *r).collect()
    }

    fn bound(&mut self) {
        if self.until.len() > RELEASED_KEPT {
            let soonest = self
                .until
                .iter()
                .min_by_key(|(_, until)| **until)
                .map(|(t, _)| *t);
            if let Some(t) = soonest {
                self.until.remove(&t);
            }
        }
    }
}

/// Merges `more` into `list`, without copies, at most [`RELEASED_SENT`].
pub(crate) fn merge(list: &mut Vec<Release>, more: &[Release]) {
    for r in more {
        if list.len() >= RELEASED_SENT {
            return;
        }
        if !list.contains(r) {
            list.push(*r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(id: u64, until: Time) -> Release {
        Release {
            ticket: TicketId(id),
            until,
        }
    }

    #[test]
    fn a_release_is_refused_until_the_pass_could_have_expired_and_sent_up_for_a_while() {
        let mut rel = Released::default();
        assert!(rel.release(100, r(1, 5_000)));
        assert!(!rel.release(150, r(1, 5_000)), "known already");
        assert!(rel.contains(TicketId(1)));
        assert_eq!(rel.recent(1_000, 3_000), vec![r(1, 5_000)]);
        assert_eq!(rel.recent(3_100, 3_000), vec![], "sent for three intervals");
        assert!(rel.contains(TicketId(1)));
        rel.recent(5_000, 3_000);
        assert!(!rel.contains(TicketId(1)), "expired");
        // A result's releases: the new ones come back, to be uncounted.
        let learned = rel.learn(6_000, &[r(2, 9_000), r(3, 9_000)]);
        assert_eq!(learned, vec![TicketId(2), TicketId(3)]);
        assert_eq!(rel.learn(6_100, &[r(2, 9_000)]), vec![]);
        let mut list = vec![r(2, 9_000)];
        merge(&mut list, &[r(2, 9_000), r(4, 9_000)]);
        assert_eq!(list, vec![r(2, 9_000), r(4, 9_000)]);
    }
}
