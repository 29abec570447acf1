//! Passes given back early (`Node::release_pass`,
//! waitingroom-distributed/README.md#passes-given-back): a visitor who is done frees their place at
//! once instead of holding it until their pass expires. A release is also the only way to revoke
//! a bypass pass, so it must hold on every node for as long as the pass could be valid.
//!
//! The node that takes the release refuses the pass from then on, and sends it at once to every
//! other member (`node/released.rs`), so that it outlives that node; it confirms the release to
//! its visitor only once more than half of the voters said they hold it ([`Confirming`]), since
//! a node cut off from them may die before anyone heard of it. It also travels with the
//! rounds, as the live settings do: each count carries the releases its subtree took in the
//! last few intervals (so a round that fails to finish loses none), the root's result carries
//! them down, and every node then refuses the pass too, and the node that counts it stops
//! counting it. Entries are kept until the pass could no longer be valid anyway.
//!
//! That covers the nodes that hear the rounds. The set of releases is cluster state, so the
//! others catch up by anti-entropy: a result also carries a digest of the root's whole set (a
//! count and an order-independent hash); a node whose set differs sends its parent the digests
//! of its set's buckets, and the parent answers with the entries of the buckets that differ
//! (bounded pages). What the node has and the parent lacks (taken while cut off) it carries up
//! again with its next counts. A node that joins gets the whole set from the member that adds
//! it, with its membership. Two sets with the same entries have the same digest, whatever the
//! order they were learned in: the merge keeps each ticket's latest `until`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};
use waitingroom_core::{NodeId, TicketId, Time};

/// Most releases kept (the soonest-expiring go first beyond it).
const RELEASED_KEPT: usize = 65_536;

/// Most releases one count, result or page carries.
pub const RELEASED_SENT: usize = 4_096;

/// For how many intervals a count carries a release up (a round that fails to finish loses
/// none).
pub(crate) const RELEASES_SENT_INTERVALS: Time = 3;

/// Buckets of the set for anti-entropy: a difference costs the entries of one bucket (at most
/// `RELEASED_KEPT / BUCKETS` on average), and an ask carries one digest per bucket.
pub const BUCKETS: usize = 64;

/// Most releases carried up again in one interval: releases this node took while cut off and
/// its parent lacks (the rest go with the next counts).
const RECENT_KEPT: usize = 4 * RELEASED_SENT;

/// A released pass: its visitor, and until when it could have been valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Release {
    /// The visitor's ticket id (a pass carries it).
    pub ticket: TicketId,
    /// When the pass would have expired at the latest.
    pub until: Time,
}

/// A summary of a set of releases: equal sets have equal digests, and two sets that differ
/// almost surely differ here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digest {
    /// Releases in the set.
    pub count: u64,
    /// Xor of every release's hash ([`hash`]): order-independent, and updated in O(1).
    pub hash: u64,
}

impl Digest {
    /// Adds `r` to, or takes it out of, the set summarised (xor is its own inverse).
    fn toggle(&mut self, r: Release, adding: bool) {
        self.hash ^= hash(r);
        self.count = if adding {
            self.count.saturating_add(1)
        } else {
            self.count.saturating_sub(1)
        };
    }

    /// The digest of these releases without `other`'s (a subset of them).
    fn without(self, other: Digest) -> Digest {
        Digest {
            count: self.count.saturating_sub(other.count),
            hash: self.hash ^ other.hash,
        }
    }
}

/// One page of an anti-entropy answer (or of the set sent to a joining node).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    /// Buckets whose every entry this page holds: the receiver carries up its own entries of
    /// these buckets that the page lacks.
    pub buckets: Vec<u8>,
    /// The entries, at most [`RELEASED_SENT`].
    pub list: Vec<Release>,
}

/// splitmix64's finaliser: a fixed, well-mixing function, the same on every node.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A release's contribution to a digest. Not keyed: ticket ids are drawn by the nodes, not by
/// visitors, and a collision would only delay a catch-up until the set changes again.
fn hash(r: Release) -> u64 {
    mix(r.ticket.0 ^ mix(r.until ^ 0x9e37_79b9_7f4a_7c15))
}

/// The bucket of `ticket` (by ticket only, so a ticket's entries meet in one bucket).
fn bucket(ticket: TicketId) -> usize {
    (mix(ticket.0 ^ 0x5851_f42d_4c95_7f2d) % BUCKETS as u64) as usize
}

/// The releases this node knows.
#[derive(Clone)]
pub(crate) struct Released {
    /// Ticket id → until when to refuse it, by bucket.
    sets: Vec<BTreeMap<TicketId, Time>>,
    /// Each bucket's digest.
    digests: [Digest; BUCKETS],
    /// The same entries by expiry: the soonest go first (expired, or beyond the bound).
    by_until: BTreeSet<(Time, TicketId)>,
    /// Releases taken or learned recently, with when: sent up with the next counts.
    recent: Vec<(Time, Release)>,
    /// The releases this node took itself since its last count: no result can know them yet.
    fresh: Digest,
    /// Entries expiring at or before this were dropped, and are not taken again.
    expired_to: Time,
    /// Bumped at every change but expiry (a driver that keeps the set on disk writes it then).
    changes: u64,
}

impl Default for Released {
    fn default() -> Self {
        Released {
            sets: vec![BTreeMap::new(); BUCKETS],
            digests: [Digest::default(); BUCKETS],
            by_until: BTreeSet::new(),
            recent: Vec::new(),
            fresh: Digest::default(),
            expired_to: 0,
            changes: 0,
        }
    }
}

/// What the set holds, not how: the same releases show the same whatever the buckets (and a
/// state explorer that compares nodes by their `Debug` form reads a few lines, not 64 maps).
impl std::fmt::Debug for Released {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Released")
            .field("until", &self.by_until)
            .field("recent", &self.recent)
            .field("fresh", &self.fresh)
            .field("expired_to", &self.expired_to)
            .finish()
    }
}

impl Released {
    /// Records a release this node took at `now`; false if it was known.
    pub(crate) fn release(&mut self, now: Time, r: Release) -> bool {
        if !self.insert(r) {
            return false;
        }
        self.fresh.toggle(r, true);
        self.carry(now, r);
        true
    }

    /// Whether the pass of `ticket` was given back. O(log n): the pass check is a hot path.
    pub(crate) fn contains(&self, ticket: TicketId) -> bool {
        self.sets[bucket(ticket)].contains_key(&ticket)
    }

    /// Releases learned from a count or a result at `now`: the ones not known before.
    pub(crate) fn learn(&mut self, now: Time, list: &[Release]) -> Vec<TicketId> {
        let mut learned = Vec::new();
        for r in list.iter().take(RELEASED_SENT) {
            if self.insert(*r) {
                self.carry(now, *r);
                learned.push(r.ticket);
            }
        }
        learned
    }

    /// What a count at `now` carries up: the releases of the last `window` ms. Forgets the
    /// ones expired by `at` (the round's time, the same at every node, so that the digests
    /// compared at its result count the same entries).
    pub(crate) fn recent(&mut self, now: Time, at: Time, window: Time) -> Vec<Release> {
        self.expire(at);
        self.fresh = Digest::default();
        self.recent
            .retain(|(when, r)| when.saturating_add(window) > now && r.until > now);
        let skip = self.recent.len().saturating_sub(RELEASED_SENT);
        self.recent[skip..].iter().map(|(_, r)| *r).collect()
    }

    /// This node's whole set, as a digest.
    pub(crate) fn digest(&self) -> Digest {
        self.digests.iter().fold(Digest::default(), |a, d| Digest {
            count: a.count.saturating_add(d.count),
            hash: a.hash ^ d.hash,
        })
    }

    /// Whether this node's set differs from the one a result's digest summarises, leaving
    /// out the releases it took since its count (the result cannot know them yet).
    pub(crate) fn differs(&self, theirs: Digest) -> bool {
        self.digest().without(self.fresh) != theirs
    }

    /// The digests of the buckets, for an ask.
    pub(crate) fn bucket_digests(&self) -> Vec<Digest> {
        self.digests.to_vec()
    }

    /// The answer to an ask: the entries of the buckets whose digests differ from `theirs`
    /// (all of them when `theirs` is empty), in pages of at most [`RELEASED_SENT`].
    pub(crate) fn pages_for(&self, theirs: &[Digest]) -> Vec<Page> {
        let mut pages = vec![Page::default()];
        for (i, set) in self.sets.iter().enumerate() {
            if theirs.get(i) == Some(&self.digests[i]) {
                continue;
            }
            let Some(page) = pages.last_mut() else { break };
            if page.list.len() + set.len() > RELEASED_SENT && !page.list.is_empty() {
                pages.push(Page::default());
            }
            let Some(page) = pages.last_mut() else { break };
            // A bucket larger than a page (only by a skewed draw) goes partly, uncovered.
            if set.len() <= RELEASED_SENT {
                page.buckets.push(i as u8);
            }
            let room = RELEASED_SENT - page.list.len();
            page.list.extend(
                set.iter()
                    .take(room)
                    .map(|(&ticket, &until)| Release { ticket, until }),
            );
        }
        pages.retain(|p| !p.list.is_empty() || !p.buckets.is_empty());
        pages
    }

    /// A page of a peer's set, taken at `now`: returns the releases new here. Of the buckets
    /// it covers, what this node has that the peer lacks is carried up again.
    pub(crate) fn take_page(&mut self, now: Time, page: &Page) -> Vec<TicketId> {
        let theirs: BTreeMap<TicketId, Time> = page
            .list
            .iter()
            .take(RELEASED_SENT)
            .map(|r| (r.ticket, r.until))
            .collect();
        let mut learned = Vec::new();
        for (&ticket, &until) in &theirs {
            if self.insert(Release { ticket, until }) {
                learned.push(ticket);
            }
        }
        let covered: BTreeSet<usize> = page
            .buckets
            .iter()
            .map(|&b| usize::from(b))
            .filter(|&b| b < BUCKETS)
            .collect();
        let lacking: Vec<Release> = covered
            .iter()
            .flat_map(|&b| self.sets[b].iter())
            .filter(|(t, until)| theirs.get(t).is_none_or(|u| u < until))
            .map(|(&ticket, &until)| Release { ticket, until })
            .collect();
        for r in lacking {
            self.carry(now, r);
        }
        learned
    }

    /// Every release kept, by ticket (for a driver that keeps them on disk).
    pub(crate) fn all(&self) -> Vec<Release> {
        let mut all: Vec<Release> = self
            .by_until
            .iter()
            .map(|&(until, ticket)| Release { ticket, until })
            .collect();
        all.sort_unstable();
        all
    }

    /// Bumped at every change of the set but expiry.
    pub(crate) fn changes(&self) -> u64 {
        self.changes
    }

    /// Adds `r`, or lengthens a known release to `r.until`; false if nothing changed.
    fn insert(&mut self, r: Release) -> bool {
        if r.until <= self.expired_to {
            return false;
        }
        let b = bucket(r.ticket);
        match self.sets[b].get(&r.ticket) {
            Some(&known) if known >= r.until => return false,
            Some(_) => self.remove(r.ticket),
            None => {}
        }
        self.sets[b].insert(r.ticket, r.until);
        self.digests[b].toggle(r, true);
        self.by_until.insert((r.until, r.ticket));
        self.changes += 1;
        while self.by_until.len() > RELEASED_KEPT {
            let Some((_, ticket)) = self.by_until.pop_first() else {
                break;
            };
            self.remove(ticket);
        }
        true
    }

    /// Takes `ticket`'s release out of the set, its bucket's digest and the expiry index.
    fn remove(&mut self, ticket: TicketId) {
        let b = bucket(ticket);
        if let Some(until) = self.sets[b].remove(&ticket) {
            self.digests[b].toggle(Release { ticket, until }, false);
            self.by_until.remove(&(until, ticket));
        }
    }

    /// Drops the releases whose pass has expired by `at`.
    pub(crate) fn expire(&mut self, at: Time) {
        self.expired_to = self.expired_to.max(at);
        while let Some(&(until, ticket)) = self.by_until.first() {
            if until > at {
                break;
            }
            self.by_until.pop_first();
            self.remove(ticket);
        }
    }

    /// Sends `r` up with the counts of the next few intervals.
    fn carry(&mut self, now: Time, r: Release) {
        if self.recent.len() >= RECENT_KEPT {
            self.recent.remove(0);
        }
        self.recent.push((now, r));
    }
}

/// Most releases taken here whose holders are still followed (the oldest go first: a visitor
/// asking again about one of those starts it over).
const CONFIRMING_KEPT: usize = 4_096;

/// How long the node that took a release waits, when asked about it again, before it sends it
/// again to the members that have not said they hold it (the reliable channel retransmits in
/// the meantime; only a channel dropped with a member removed loses it).
pub(crate) const RELEASE_RESEND_MS: Time = 1_000;

/// The releases this node took, with the members known to hold each. A release is confirmed to
/// its visitor only once more than half of the voters hold it: a node cut off from them may die
/// before it can tell anyone, and its visitor must not believe in a release lost with it
/// (waitingroom-distributed/README.md#passes-given-back).
#[derive(Debug, Clone, Default)]
pub(crate) struct Confirming {
    /// Ticket → the members that said they hold its release, and when it was last sent.
    following: BTreeMap<TicketId, (BTreeSet<NodeId>, Time)>,
    /// The same tickets, oldest first.
    order: VecDeque<TicketId>,
}

impl Confirming {
    /// This node (`me`) is asked at `now` for the release of `ticket`: followed from now on if
    /// it was not, held by `me`. Whether to send it to the members not known to hold it: at
    /// first, and again once [`RELEASE_RESEND_MS`] passed since it was last sent.
    pub(crate) fn ask(&mut self, ticket: TicketId, me: NodeId, now: Time) -> bool {
        if let Some((_, sent_at)) = self.following.get_mut(&ticket) {
            if now.saturating_sub(*sent_at) < RELEASE_RESEND_MS {
                return false;
            }
            *sent_at = now;
            return true;
        }
        while self.order.len() >= CONFIRMING_KEPT {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            self.following.remove(&old);
        }
        self.following.insert(ticket, (BTreeSet::from([me]), now));
        self.order.push_back(ticket);
        true
    }

    /// Member `by` holds the release of `ticket`.
    pub(crate) fn held(&mut self, ticket: TicketId, by: NodeId) {
        if let Some((holders, _)) = self.following.get_mut(&ticket) {
            holders.insert(by);
        }
    }

    /// The members known to hold the release of `ticket` (empty if it is not followed).
    pub(crate) fn holders(&self, ticket: TicketId) -> BTreeSet<NodeId> {
        (self.following.get(&ticket)).map_or_else(BTreeSet::new, |(holders, _)| holders.clone())
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
        assert_eq!(rel.recent(1_000, 1_000, 3_000), vec![r(1, 5_000)]);
        assert_eq!(
            rel.recent(3_100, 3_100, 3_000),
            vec![],
            "sent for three intervals"
        );
        assert!(rel.contains(TicketId(1)));
        rel.recent(5_000, 5_000, 3_000);
        assert!(!rel.contains(TicketId(1)), "expired");
        // A result's releases: the new ones come back, to be uncounted.
        let learned = rel.learn(6_000, &[r(2, 9_000), r(3, 9_000)]);
        assert_eq!(learned, vec![TicketId(2), TicketId(3)]);
        assert_eq!(rel.learn(6_100, &[r(2, 9_000)]), vec![]);
        let mut list = vec![r(2, 9_000)];
        merge(&mut list, &[r(2, 9_000), r(4, 9_000)]);
        assert_eq!(list, vec![r(2, 9_000), r(4, 9_000)]);
    }

    #[test]
    fn sets_with_the_same_releases_have_the_same_digest_whatever_the_order() {
        let (mut a, mut b) = (Released::default(), Released::default());
        a.learn(0, &[r(1, 100), r(2, 200), r(3, 300)]);
        b.learn(0, &[r(3, 300), r(1, 100)]);
        assert_ne!(a.digest(), b.digest());
        // The same ticket released at two nodes with two ends: both keep the later one.
        b.learn(0, &[r(2, 150), r(2, 200)]);
        a.learn(0, &[r(2, 150)]);
        assert_eq!(a.digest(), b.digest());
        assert_eq!(a.digest().count, 3);
        a.recent(250, 250, 0);
        b.recent(250, 250, 0);
        assert_eq!(a.digest(), b.digest());
        assert_eq!(a.digest().count, 1, "the expired ones are out of both");
        assert_eq!(a.learn(260, &[r(9, 240)]), vec![], "already expired");
    }

    #[test]
    fn a_node_that_missed_releases_learns_them_and_gives_back_what_its_peer_missed() {
        let mut parent = Released::default();
        let mut child = Released::default();
        let many: Vec<Release> = (1..=10_000).map(|i| r(i * 7_919, 1_000_000)).collect();
        for chunk in many.chunks(RELEASED_SENT) {
            parent.learn(0, chunk);
        }
        for chunk in many[..9_998].chunks(RELEASED_SENT) {
            child.learn(0, chunk);
        }
        parent.recent(10, 10, 0);
        // Taken by the child while it was cut off: the parent never heard of it.
        child.release(5, r(3, 1_000_000));
        child.recent(10, 10, 0);
        assert!(child.differs(parent.digest()));
        let pages = parent.pages_for(&child.bucket_digests());
        let sent: usize = pages.iter().map(|p| p.list.len()).sum();
        assert!(sent < 1_000, "only the buckets that differ go: {sent}");
        let learned: Vec<TicketId> = pages.iter().flat_map(|p| child.take_page(20, p)).collect();
        assert_eq!(learned.len(), 2);
        assert!(many.iter().all(|x| child.contains(x.ticket)));
        // What the parent lacks goes up with the child's next count.
        let up = child.recent(30, 30, 1_000);
        assert_eq!(up, vec![r(3, 1_000_000)]);
        parent.learn(40, &up);
        assert_eq!(parent.digest(), child.digest());
        assert!(!child.differs(parent.digest()));
    }

    #[test]
    fn a_joining_node_gets_the_whole_set_in_bounded_pages() {
        let mut member = Released::default();
        let many: Vec<Release> = (1..=70_000).map(|i| r(i, 1_000_000 + i)).collect();
        for chunk in many.chunks(RELEASED_SENT) {
            member.learn(0, chunk);
        }
        assert_eq!(member.digest().count, RELEASED_KEPT as u64);
        assert!(
            !member.contains(TicketId(1)),
            "the soonest to expire go first"
        );
        let pages = member.pages_for(&[]);
        assert!(pages.iter().all(|p| p.list.len() <= RELEASED_SENT));
        let mut joiner = Released::default();
        for p in &pages {
            joiner.take_page(0, p);
        }
        assert_eq!(joiner.digest(), member.digest());
        assert_eq!(joiner.all(), member.all());
    }

    #[test]
    fn the_holders_of_a_release_are_followed_for_a_bounded_number_of_releases() {
        let mut c = Confirming::default();
        assert!(c.ask(TicketId(1), NodeId(1), 0), "sent at first");
        assert!(!c.ask(TicketId(1), NodeId(1), 10), "not sent again at once");
        c.held(TicketId(1), NodeId(2));
        c.held(TicketId(9), NodeId(2));
        assert_eq!(
            c.holders(TicketId(1)),
            BTreeSet::from([NodeId(1), NodeId(2)])
        );
        assert!(c.holders(TicketId(9)).is_empty(), "not taken here");
        assert!(
            c.ask(TicketId(1), NodeId(1), RELEASE_RESEND_MS),
            "sent again later"
        );
        for t in 2..=CONFIRMING_KEPT as u64 {
            c.ask(TicketId(t), NodeId(1), 0);
        }
        assert!(c.ask(TicketId(0), NodeId(1), 0));
        assert!(c.holders(TicketId(1)).is_empty(), "the oldest went first");
    }

    #[test]
    fn a_release_taken_since_the_last_count_is_not_held_against_its_result() {
        let mut rel = Released::default();
        rel.learn(0, &[r(1, 100)]);
        let root = rel.digest();
        rel.release(1, r(2, 100));
        assert!(!rel.differs(root), "the result cannot know it yet");
        rel.recent(2, 2, 1_000);
        assert!(rel.differs(root), "the next one must");
    }
}
