//! The released passes as cluster state (`released.rs`,
//! waitingroom-distributed/README.md#passes-given-back): the catch-up of a node whose set
//! differs from the root's, the whole set for a node that joins, the set for a driver that
//! keeps it on disk, and the confirmation of a release this node took (more than half of the
//! voters hold it). The releases that travel with the rounds are routed in `routes.rs`.

use std::collections::BTreeSet;

use waitingroom_core::{NodeId, TicketId, Time};

use super::Node;
use super::visitor::VisitorError;
use crate::ignored::Ignored;
use crate::membership::Contact;
use crate::messages::ChannelMsg;
use crate::released::{BUCKETS, Digest, Page, RELEASED_SENT, Release};

impl Node {
    /// Every release this node refuses, by ticket: what a driver keeps on disk.
    pub fn releases(&self) -> Vec<Release> {
        self.released.all()
    }

    /// Bumped whenever the set of releases changes but by expiry: a driver that keeps them on
    /// disk writes them when this moved.
    pub fn releases_changed(&self) -> u64 {
        self.released.changes()
    }

    /// Releases kept on disk by an earlier life of this node (or of the cluster), given back
    /// at start: refused from now on, and carried to the others with the next counts.
    pub fn restore_releases(&mut self, now: Time, list: &[Release]) {
        let live: Vec<Release> = list.iter().filter(|r| r.until > now).copied().collect();
        for chunk in live.chunks(RELEASED_SENT) {
            self.released.learn(now, chunk);
        }
    }

    /// A release this node just took (or was asked again for): refused here from now on, and
    /// sent at once to every other member on the reliable channel (retransmitted until
    /// acknowledged), so that it reaches every member without waiting for a round: a round may
    /// be seconds away when the root or a node on the way has just died. Each member that takes
    /// it carries it up with its next counts too, and answers that it holds it.
    ///
    /// Confirmed once more than half of the voters (and of the voters before a move under way)
    /// hold it: until then the visitor hears [`VisitorError::ReleasePending`] and asks again,
    /// here or elsewhere. A node cut off from the others may die before anyone hears of the
    /// release; one held by a majority is held by a member of whatever majority goes on, whose
    /// counts carry it to the root and the rounds' digests to everyone. Asked again, this node
    /// sends it again to the members that have not answered (what it sent while cut off went
    /// with the channels of the members it removed).
    pub(super) fn take_release(&mut self, now: Time, release: Release) -> Result<(), VisitorError> {
        self.released.release(now, release);
        let me = self.id();
        let send = self.confirming.ask(release.ticket, me, now);
        let holders = self.confirming.holders(release.ticket);
        if send {
            let others: Vec<Contact> = (self.cluster.membership().members.iter())
                .filter(|(id, _)| !holders.contains(id))
                .map(|(_, contact)| contact.clone())
                .collect();
            let page = Page {
                buckets: Vec::new(),
                list: vec![release],
            };
            for contact in others {
                self.send(now, &contact, ChannelMsg::Releases(page.clone()));
            }
        }
        let voters = self.voters.voters();
        if most_hold(&voters.set, &holders)
            && (voters.prev.is_empty() || most_hold(&voters.prev, &holders))
        {
            Ok(())
        } else {
            Err(VisitorError::ReleasePending)
        }
    }

    /// Member `from` holds the releases of `tickets` (it answers the ones this node sent it).
    pub(super) fn on_releases_held(
        &mut self,
        from: NodeId,
        tickets: &[TicketId],
    ) -> Result<(), Ignored> {
        if tickets.len() > RELEASED_SENT {
            return Err(Ignored::Malformed);
        }
        for &ticket in tickets {
            self.confirming.held(ticket, from);
        }
        Ok(())
    }

    /// A result of round `at` carried the digest of the root's set: if this node's set
    /// differs, it asks `from` (its parent, which passed the result on) for the buckets that
    /// differ. Both sets left out what expired by the round's time.
    pub(super) fn compare_releases(
        &mut self,
        now: Time,
        from: NodeId,
        (at, theirs): (Time, Digest),
    ) {
        self.released.expire(at);
        if from == self.id() || !self.released.differs(theirs) {
            return;
        }
        let buckets = self.released.bucket_digests();
        self.send_to(now, from, ChannelMsg::ReleasesAsk { buckets });
    }

    /// A member asks for the entries of the buckets whose digests differ from `buckets`.
    pub(super) fn on_releases_ask(
        &mut self,
        now: Time,
        from: NodeId,
        buckets: &[Digest],
    ) -> Result<(), Ignored> {
        if buckets.len() != BUCKETS {
            return Err(Ignored::Malformed);
        }
        for page in self.released.pages_for(buckets) {
            self.send_to(now, from, ChannelMsg::Releases(page));
        }
        Ok(())
    }

    /// A page of a peer's releases (a release just taken, an answer, or the set sent at join):
    /// the new ones are refused from now on, and uncounted if this node counts them.
    pub(super) fn on_releases(
        &mut self,
        now: Time,
        from: NodeId,
        page: &Page,
    ) -> Result<(), Ignored> {
        if page.list.len() > RELEASED_SENT || page.buckets.len() > BUCKETS {
            return Err(Ignored::Malformed);
        }
        // A page that covers no bucket is a release sent by the member that took it (or a
        // bucket too large for one page): what is new goes up with this node's next counts,
        // and the sender hears that this node holds it (new or not).
        let learned: Vec<TicketId> = if page.buckets.is_empty() {
            let learned = self.released.learn(now, &page.list);
            let tickets = page.list.iter().map(|r| r.ticket).collect();
            self.send_to(now, from, ChannelMsg::ReleasesHeld { tickets });
            learned
        } else {
            self.released.take_page(now, page)
        };
        for ticket in learned {
            self.local.room_mut().uncount_pass(ticket);
        }
        Ok(())
    }

    /// Sends the whole set to `joiner`, which this node just added to the cluster: it refuses
    /// the released passes from its first request on.
    pub(super) fn send_releases_to(&mut self, now: Time, joiner: &Contact) {
        if self.released.digest().count == 0 {
            return;
        }
        for page in self.released.pages_for(&[]) {
            self.send(now, joiner, ChannelMsg::Releases(page));
        }
    }
}

/// Whether more than half of `voters` are in `holders`. Strictly more: the majority rule's
/// tie-break (the half holding the lowest id may go on) would confirm a release that only the
/// node that took it holds, of two, and that node may die. No voters known: not confirmed.
fn most_hold(voters: &BTreeSet<NodeId>, holders: &BTreeSet<NodeId>) -> bool {
    2 * voters.intersection(holders).count() > voters.len()
}
