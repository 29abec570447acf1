//! Reliable, ordered delivery per link, over a network that may lose, duplicate and reorder.
//!
//! QPID assumes FIFO links. The thesis numbers update and findRoot messages per link and drops
//! any older than the last one received; dropping is not enough once messages can be lost or
//! a findRoot is overtaken by a later update (the pointers can then form a cycle), so here every
//! protocol message gets a per-link sequence number, the receiver delivers strictly in order
//! (holding early ones, dropping copies) and acknowledges, and the sender resends what is not
//! acknowledged.
//!
//! Sending and receiving state are kept apart, and every sending link has an *epoch*: a link
//! that starts afresh (the peer restarted, or we addressed another life of it) starts a new
//! epoch at sequence 1, and the receiver, seeing a newer epoch, starts afresh too. A receiver
//! that has lost its state (it forgot a departed member) and keeps hearing a link in the middle
//! (the start never comes, even resent) asks the sender to start a new epoch (`resync`), which
//! resends everything unacknowledged. Both ends therefore always agree on the numbering,
//! whatever either forgot.

use std::collections::BTreeMap;

use waitingroom_core::{NodeId, Time};

use crate::ignored::Ignored;
use crate::membership::Contact;
use crate::messages::{Body, ChannelMsg, Envelope};
use crate::outputs::Transmit;

/// Most unacknowledged messages kept per link; past this the peer is surely gone (failure
/// detection will remove it), and memory must stay bounded meanwhile.
const MAX_UNACKED: usize = 16_384;
/// Most early (out-of-order) messages held per link.
const MAX_EARLY: usize = 16_384;
/// Most messages resent per link per retransmission tick.
const RESEND_BATCH: usize = 512;

/// Our side of sending to one peer.
#[derive(Debug, Clone)]
struct Outgoing {
    peer: Contact,
    epoch: u64,
    last_seq: u64,
    unacked: BTreeMap<u64, (ChannelMsg, Time)>,
}

/// Our side of receiving from one peer (one incarnation of it).
#[derive(Debug, Clone)]
struct Incoming {
    peer: Contact,
    epoch: u64,
    delivered: u64,
    early: BTreeMap<u64, ChannelMsg>,
    ack_due: bool,
    /// Since when nothing was delivered on this epoch while later messages wait.
    gap_since: Option<Time>,
}

impl Incoming {
    /// Acknowledges what this link delivered; with `resync`, asks the sender to start over.
    fn ack(&self, me: &Contact, resync: bool) -> Transmit {
        let body = Body::ChannelAck {
            epoch: self.epoch,
            ack: self.delivered,
            resync,
        };
        envelope(me, &self.peer, body)
    }
}

/// All links of one node.
#[derive(Debug, Clone, Default)]
pub(crate) struct Channels {
    out: BTreeMap<NodeId, Outgoing>,
    inc: BTreeMap<NodeId, Incoming>,
    /// Epochs handed out so far (each new sending link takes the next).
    epochs: u64,
    /// Peers owed an acknowledgement, so acknowledging does not walk every link.
    ack_due: Vec<NodeId>,
}

impl Channels {
    /// Numbers `msg` for `to` and returns it ready to send.
    pub fn send(&mut self, now: Time, me: &Contact, to: &Contact, msg: ChannelMsg) -> Transmit {
        let fresh = self
            .out
            .get(&to.id)
            .is_none_or(|l| l.peer.incarnation != to.incarnation);
        if fresh {
            self.open(to.clone());
        }
        let link = self.out.get_mut(&to.id).expect("opened above");
        link.last_seq += 1;
        let seq = link.last_seq;
        if link.unacked.len() >= MAX_UNACKED {
            link.unacked.pop_first();
        }
        link.unacked.insert(seq, (msg.clone(), now));
        let epoch = link.epoch;
        let ack = self.take_ack(to.id);
        envelope(me, to, frame(epoch, seq, ack, msg))
    }

    /// Starts a new epoch to `peer`, keeping what it had not acknowledged, renumbered from 1.
    fn open(&mut self, peer: Contact) {
        self.epochs += 1;
        let pending: Vec<(ChannelMsg, Time)> = match self.out.remove(&peer.id) {
            Some(old) if old.peer.incarnation == peer.incarnation => {
                old.unacked.into_values().collect()
            }
            _ => Vec::new(),
        };
        let unacked: BTreeMap<u64, (ChannelMsg, Time)> = pending
            .into_iter()
            .enumerate()
            .map(|(i, (m, _))| (i as u64 + 1, (m, 0)))
            .collect();
        let link = Outgoing {
            peer: peer.clone(),
            epoch: self.epochs,
            last_seq: unacked.len() as u64,
            unacked,
        };
        self.out.insert(peer.id, link);
    }

    /// The acknowledgement to piggyback to `peer`: (its epoch, highest delivered).
    fn take_ack(&mut self, peer: NodeId) -> (u64, u64) {
        match self.inc.get_mut(&peer) {
            Some(i) => {
                i.ack_due = false;
                (i.epoch, i.delivered)
            }
            None => (0, 0),
        }
    }

    /// Takes in one message of a link (a [`Body::Channel`]; nothing else concerns the
    /// channel); returns the messages now deliverable, in order (none while it waits for an
    /// earlier one), or why it was dropped.
    pub fn receive(
        &mut self,
        now: Time,
        from: &Contact,
        body: Body,
    ) -> Result<Vec<ChannelMsg>, Ignored> {
        let Body::Channel {
            epoch,
            seq,
            ack_epoch,
            ack,
            msg,
        } = body
        else {
            return Ok(Vec::new());
        };
        self.on_ack(from, ack_epoch, ack);
        let known = self
            .inc
            .get(&from.id)
            .map(|i| (i.peer.incarnation, i.epoch));
        match known {
            Some((inc, _)) if inc > from.incarnation => return Err(Ignored::StaleLink),
            Some((inc, e)) if inc == from.incarnation && e > epoch => {
                return Err(Ignored::StaleLink);
            }
            Some((inc, e)) if inc == from.incarnation && e == epoch => {}
            // A new life of the peer, or a new epoch of its link: start counting afresh.
            _ => {
                let fresh = Incoming {
                    peer: from.clone(),
                    epoch,
                    delivered: 0,
                    early: BTreeMap::new(),
                    ack_due: false,
                    gap_since: None,
                };
                self.inc.insert(from.id, fresh);
            }
        }
        let link = self.inc.get_mut(&from.id).expect("inserted above");
        if !link.ack_due {
            link.ack_due = true;
            self.ack_due.push(from.id);
        }
        if seq <= link.delivered || link.early.contains_key(&seq) {
            return Err(Ignored::Duplicate);
        }
        if link.early.len() >= MAX_EARLY {
            return Err(Ignored::HoldBackFull);
        }
        link.early.insert(seq, msg);
        let mut ready = Vec::new();
        while let Some(m) = link.early.remove(&(link.delivered + 1)) {
            link.delivered += 1;
            ready.push(m);
        }
        // Nothing delivered on this epoch yet and a gap at the start: either the first
        // messages are late, or we forgot this link while the peer went on.
        if link.delivered == 0 && !link.early.is_empty() {
            link.gap_since.get_or_insert(now);
        } else {
            link.gap_since = None;
        }
        Ok(ready)
    }

    /// Takes in an acknowledgement of our epoch `epoch` to `from`. False when no link of ours
    /// has that epoch.
    pub fn on_ack(&mut self, from: &Contact, epoch: u64, ack: u64) -> bool {
        let Some(link) = self.out.get_mut(&from.id) else {
            return false;
        };
        if link.peer.incarnation != from.incarnation || link.epoch != epoch {
            return false;
        }
        link.unacked = link.unacked.split_off(&ack.saturating_add(1));
        true
    }

    /// The peer lost track of our link to it: start a new epoch (resending what is pending).
    pub fn on_resync(&mut self, from: &Contact, epoch: u64) {
        if let Some(link) = self.out.get(&from.id)
            && link.peer.incarnation == from.incarnation
            && link.epoch == epoch
        {
            let peer = link.peer.clone();
            self.open(peer);
        }
    }

    /// Messages unacknowledged for `rto` or more, stamped as sent again now. Links to peers
    /// that are not `live` (removed members) are kept but not resent on: should the peer come
    /// back in the same life, both ends still agree on the sequence numbers.
    pub fn due_for_resend(
        &mut self,
        now: Time,
        me: &Contact,
        rto: Time,
        live: impl Fn(NodeId) -> bool,
    ) -> Vec<Transmit> {
        let mut out = Vec::new();
        for link in self.out.values_mut().filter(|l| live(l.peer.id)) {
            let ack = match self.inc.get_mut(&link.peer.id) {
                Some(i) => (i.epoch, i.delivered),
                None => (0, 0),
            };
            let mut resent = 0;
            for (&seq, (msg, sent)) in link.unacked.iter_mut() {
                if resent == RESEND_BATCH {
                    break;
                }
                if *sent + rto <= now {
                    *sent = now;
                    resent += 1;
                    let body = frame(link.epoch, seq, ack, msg.clone());
                    out.push(envelope(me, &link.peer, body));
                }
            }
        }
        out
    }

    /// Bare acknowledgements (and resync requests) for links that received something and sent
    /// nothing since.
    pub fn take_bare_acks(&mut self, me: &Contact) -> Vec<Transmit> {
        let mut out = Vec::new();
        for id in std::mem::take(&mut self.ack_due) {
            let Some(link) = self.inc.get_mut(&id) else {
                continue;
            };
            if link.ack_due {
                link.ack_due = false;
                out.push(link.ack(me, false));
            }
        }
        out
    }

    /// Resync requests for links whose start has been missing for `patience`: the sender would
    /// have resent it by now, so it must consider it delivered (we forgot the link).
    pub fn resync_requests(&mut self, now: Time, me: &Contact, patience: Time) -> Vec<Transmit> {
        let mut out = Vec::new();
        for link in self.inc.values_mut() {
            if let Some(since) = link.gap_since
                && since + patience <= now
            {
                link.gap_since = Some(now);
                out.push(link.ack(me, true));
            }
        }
        out
    }

    /// Whether some link waits for its start (see [`Channels::resync_requests`]).
    pub fn any_gap(&self) -> bool {
        self.inc.values().any(|l| l.gap_since.is_some())
    }

    /// Whether a link to a `live` peer waits for an acknowledgement.
    pub fn any_unacked(&self, live: impl Fn(NodeId) -> bool) -> bool {
        self.out
            .values()
            .any(|l| !l.unacked.is_empty() && live(l.peer.id))
    }

    /// Forgets links to peers that are not `live`, smallest ids first, beyond `limit` links.
    pub fn prune(&mut self, limit: usize, live: impl Fn(NodeId) -> bool) {
        while self.out.len() > limit {
            let Some(id) = self.out.keys().copied().find(|&id| !live(id)) else {
                break;
            };
            self.out.remove(&id);
        }
        while self.inc.len() > limit {
            let Some(id) = self.inc.keys().copied().find(|&id| !live(id)) else {
                break;
            };
            self.inc.remove(&id);
        }
    }

    /// Forgets every link.
    pub fn clear(&mut self) {
        self.out.clear();
        self.inc.clear();
        self.ack_due.clear();
    }

    /// The contact behind the link to or from `id`.
    pub fn contact_of(&self, id: NodeId) -> Option<Contact> {
        self.out
            .get(&id)
            .map(|l| l.peer.clone())
            .or_else(|| self.inc.get(&id).map(|l| l.peer.clone()))
    }

    /// Whether nothing sent is waiting for an acknowledgement.
    pub fn is_drained(&self) -> bool {
        self.out.values().all(|l| l.unacked.is_empty())
    }

    /// Messages waiting for an acknowledgement, over all links.
    pub fn unacked(&self) -> usize {
        self.out.values().map(|l| l.unacked.len()).sum()
    }
}

/// Message `seq` of link epoch `epoch`, acknowledging `ack` = (the peer's epoch, highest
/// delivered).
fn frame(epoch: u64, seq: u64, (ack_epoch, ack): (u64, u64), msg: ChannelMsg) -> Body {
    Body::Channel {
        epoch,
        seq,
        ack_epoch,
        ack,
        msg,
    }
}

pub(crate) fn envelope(me: &Contact, to: &Contact, body: Body) -> Transmit {
    Transmit {
        to_addr: to.addr.clone(),
        envelope: Envelope {
            from: me.clone(),
            to: to.id,
            to_incarnation: to.incarnation,
            body,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::Weight;

    fn c(id: u64, inc: u64) -> Contact {
        Contact {
            id: NodeId(id),
            incarnation: inc,
            addr: format!("n{id}").into(),
        }
    }

    fn msg(i: u64) -> ChannelMsg {
        ChannelMsg::Update {
            weight: Weight::Empty,
            version: i,
        }
    }

    /// Feeds a transmitted channel message to `rx`.
    fn deliver(rx: &mut Channels, t: &Transmit) -> Result<Vec<ChannelMsg>, Ignored> {
        assert!(matches!(t.envelope.body, Body::Channel { .. }));
        let body = t.envelope.body.clone();
        rx.receive(0, &t.envelope.from, body)
    }

    fn seq_of(t: &Transmit) -> (u64, u64) {
        match t.envelope.body {
            Body::Channel { epoch, seq, .. } => (epoch, seq),
            _ => panic!("not a channel message"),
        }
    }

    #[test]
    fn delivers_in_order_once_despite_reordering_and_duplicates() {
        let (a, b) = (c(1, 1), c(2, 1));
        let mut tx = Channels::default();
        let mut rx = Channels::default();
        let sent: Vec<_> = (1..=5).map(|i| tx.send(0, &a, &b, msg(i))).collect();
        let (mut got, mut dropped) = (Vec::new(), Vec::new());
        for i in [0usize, 2, 0, 4, 1, 3, 2] {
            match deliver(&mut rx, &sent[i]) {
                Ok(ready) => got.extend(ready),
                Err(why) => dropped.push(why),
            }
        }
        assert_eq!(got, (1..=5).map(msg).collect::<Vec<_>>());
        assert_eq!(dropped, [Ignored::Duplicate, Ignored::Duplicate]);
        let acks = rx.take_bare_acks(&b);
        assert_eq!(acks.len(), 1);
        let Body::ChannelAck { epoch, ack, resync } = acks[0].envelope.body else {
            panic!("an ack")
        };
        assert_eq!((ack, resync), (5, false));
        assert_eq!(tx.unacked(), 5);
        tx.on_ack(&b, epoch, 5);
        assert!(tx.is_drained());
    }

    #[test]
    fn resends_until_acknowledged() {
        let (a, b) = (c(1, 1), c(2, 1));
        let mut tx = Channels::default();
        let first = tx.send(0, &a, &b, msg(1));
        assert!(tx.due_for_resend(50, &a, 100, |_| true).is_empty());
        assert!(tx.due_for_resend(100, &a, 100, |_| false).is_empty());
        let again = tx.due_for_resend(100, &a, 100, |_| true);
        assert_eq!(again.len(), 1);
        assert_eq!(seq_of(&again[0]), seq_of(&first));
        tx.on_ack(&b, seq_of(&first).0, 1);
        assert!(tx.due_for_resend(1_000, &a, 100, |_| true).is_empty());
    }

    #[test]
    fn a_new_incarnation_gets_a_fresh_link_and_old_messages_are_dropped() {
        let (a, b) = (c(1, 1), c(2, 1));
        let a2 = c(1, 2);
        let mut a_tx = Channels::default();
        let mut a2_tx = Channels::default();
        let mut rx = Channels::default();
        let old = a_tx.send(0, &a, &b, msg(1));
        let old2 = a_tx.send(0, &a, &b, msg(2));
        assert_eq!(deliver(&mut rx, &old), Ok(vec![msg(1)]));
        // a restarts: its sequence numbers start again.
        let new = a2_tx.send(0, &a2, &b, msg(3));
        assert_eq!(deliver(&mut rx, &new), Ok(vec![msg(3)]));
        // A late message from the old life is ignored.
        assert_eq!(deliver(&mut rx, &old2), Err(Ignored::StaleLink));
    }

    #[test]
    fn addressing_another_life_of_the_peer_starts_a_new_epoch_the_receiver_follows() {
        let (a, b) = (c(1, 1), c(2, 1));
        let b_stale = c(2, 0);
        let mut tx = Channels::default();
        let mut rx = Channels::default();
        for i in 1..=3 {
            let t = tx.send(0, &a, &b, msg(i));
            assert_eq!(deliver(&mut rx, &t), Ok(vec![msg(i)]));
        }
        // A send meant for an older life of b (dropped on the way) resets our link ...
        tx.send(0, &a, &b_stale, msg(99));
        // ... so back to b we count from 1 in a new epoch, and b starts counting afresh.
        let t = tx.send(0, &a, &b, msg(4));
        assert_eq!(seq_of(&t).1, 1);
        assert_eq!(deliver(&mut rx, &t), Ok(vec![msg(4)]));
    }

    #[test]
    fn a_receiver_that_forgot_the_link_asks_for_a_new_epoch() {
        let (a, b) = (c(1, 1), c(2, 1));
        let mut tx = Channels::default();
        let mut rx = Channels::default();
        for i in 1..=3 {
            let t = tx.send(0, &a, &b, msg(i));
            assert_eq!(deliver(&mut rx, &t), Ok(vec![msg(i)]));
        }
        let acks = rx.take_bare_acks(&b);
        let Body::ChannelAck { epoch, ack, .. } = acks[0].envelope.body else {
            panic!("an ack")
        };
        tx.on_ack(&b, epoch, ack);
        // b forgets everything (say it dropped a departed member); a goes on at 4.
        rx.clear();
        let t = tx.send(0, &a, &b, msg(4));
        assert_eq!(
            deliver(&mut rx, &t),
            Ok(Vec::new()),
            "held back, waiting for 1 to 3"
        );
        // A reordered start gets its time to arrive ...
        assert!(rx.resync_requests(100, &b, 300).is_empty());
        // ... then the receiver asks for a new epoch.
        let asks = rx.resync_requests(300, &b, 300);
        let Body::ChannelAck { epoch, resync, .. } = asks[0].envelope.body else {
            panic!("an ack")
        };
        assert!(resync);
        tx.on_resync(&b, epoch);
        // The pending message goes again, renumbered in a new epoch, and gets through.
        let again = tx.due_for_resend(100, &a, 100, |_| true);
        assert_eq!(again.len(), 1);
        assert_eq!(seq_of(&again[0]).1, 1);
        assert_eq!(deliver(&mut rx, &again[0]), Ok(vec![msg(4)]));
    }
}
