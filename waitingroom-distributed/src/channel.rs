//! Reliable, ordered delivery per link, over a network that may lose, duplicate and reorder.
//!
//! QPID assumes FIFO links. The thesis numbers update and findRoot messages per link and drops
//! any older than the last one received; dropping is not enough once messages can be lost or
//! a findRoot is overtaken by a later update (the pointers can then form a cycle), so here every
//! protocol message gets a per-link sequence number, the receiver delivers strictly in order
//! (holding early ones, dropping copies) and acknowledges, and the sender resends what is not
//! acknowledged. A link belongs to one incarnation of the peer: a restarted peer gets a fresh
//! link, and messages from or for an older life are dropped.

use std::collections::BTreeMap;

use waitingroom_core::{NodeId, Time};

use crate::messages::{Body, ChannelMsg, Contact, Envelope};
use crate::node::Transmit;

/// Most unacknowledged messages kept per link; past this the peer is surely gone (failure
/// detection will remove it), and memory must stay bounded meanwhile.
const MAX_UNACKED: usize = 16_384;
/// Most early (out-of-order) messages held per link.
const MAX_EARLY: usize = 16_384;
/// Most messages resent per link per retransmission tick.
const RESEND_BATCH: usize = 512;

#[derive(Debug, Clone)]
struct Link {
    peer: Contact,
    last_seq: u64,
    unacked: BTreeMap<u64, (ChannelMsg, Time)>,
    delivered: u64,
    early: BTreeMap<u64, ChannelMsg>,
    ack_due: bool,
}

impl Link {
    fn new(peer: Contact) -> Self {
        Link {
            peer,
            last_seq: 0,
            unacked: BTreeMap::new(),
            delivered: 0,
            early: BTreeMap::new(),
            ack_due: false,
        }
    }

    fn on_ack(&mut self, ack: u64) {
        self.unacked = self.unacked.split_off(&ack.saturating_add(1));
    }
}

/// All links of one node.
#[derive(Debug, Clone, Default)]
pub(crate) struct Channels {
    links: BTreeMap<NodeId, Link>,
    /// Links whose `ack_due` may be set, so acknowledging does not walk every link.
    ack_due: Vec<NodeId>,
}

impl Channels {
    /// Numbers `msg` for `to` and returns it ready to send.
    pub fn send(&mut self, now: Time, me: &Contact, to: &Contact, msg: ChannelMsg) -> Transmit {
        let link = self.link_for(to);
        link.last_seq += 1;
        let seq = link.last_seq;
        if link.unacked.len() >= MAX_UNACKED {
            link.unacked.pop_first();
        }
        link.unacked.insert(seq, (msg.clone(), now));
        link.ack_due = false;
        let ack = link.delivered;
        envelope(me, to, Body::Channel { seq, ack, msg })
    }

    fn link_for(&mut self, to: &Contact) -> &mut Link {
        let fresh = self
            .links
            .get(&to.id)
            .is_none_or(|l| l.peer.incarnation != to.incarnation);
        if fresh {
            self.links.insert(to.id, Link::new(to.clone()));
        }
        self.links.get_mut(&to.id).expect("link inserted above")
    }

    /// Takes in one channel message; returns the messages now deliverable, in order.
    pub fn receive(
        &mut self,
        from: &Contact,
        seq: u64,
        ack: u64,
        msg: ChannelMsg,
    ) -> Vec<ChannelMsg> {
        let link = match self.links.get(&from.id) {
            Some(l) if l.peer.incarnation > from.incarnation => return Vec::new(),
            Some(l) if l.peer.incarnation == from.incarnation => {
                self.links.get_mut(&from.id).expect("checked above")
            }
            _ => self.link_for(from),
        };
        link.on_ack(ack);
        if !link.ack_due {
            link.ack_due = true;
            self.ack_due.push(from.id);
        }
        let link = self.links.get_mut(&from.id).expect("link looked up above");
        if seq <= link.delivered || link.early.contains_key(&seq) {
            return Vec::new();
        }
        if link.early.len() >= MAX_EARLY {
            return Vec::new();
        }
        link.early.insert(seq, msg);
        let mut ready = Vec::new();
        while let Some(m) = link.early.remove(&(link.delivered + 1)) {
            link.delivered += 1;
            ready.push(m);
        }
        ready
    }

    /// Takes in an acknowledgement.
    pub fn on_ack(&mut self, from: &Contact, ack: u64) {
        if let Some(link) = self.links.get_mut(&from.id)
            && link.peer.incarnation == from.incarnation
        {
            link.on_ack(ack);
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
        for link in self.links.values_mut().filter(|l| live(l.peer.id)) {
            let ack = link.delivered;
            let mut resent = 0;
            for (&seq, (msg, sent)) in link.unacked.iter_mut() {
                if resent == RESEND_BATCH {
                    break;
                }
                if *sent + rto <= now {
                    *sent = now;
                    resent += 1;
                    let body = Body::Channel {
                        seq,
                        ack,
                        msg: msg.clone(),
                    };
                    out.push(envelope(me, &link.peer, body));
                }
            }
            if resent > 0 {
                link.ack_due = false;
            }
        }
        out
    }

    /// Bare acknowledgements for links that received something and sent nothing since.
    pub fn take_bare_acks(&mut self, me: &Contact) -> Vec<Transmit> {
        let mut out = Vec::new();
        for id in std::mem::take(&mut self.ack_due) {
            let Some(link) = self.links.get_mut(&id) else {
                continue;
            };
            if link.ack_due {
                link.ack_due = false;
                let body = Body::ChannelAck {
                    ack: link.delivered,
                };
                out.push(envelope(me, &link.peer, body));
            }
        }
        out
    }

    /// Whether a link to a `live` peer waits for an acknowledgement.
    pub fn any_unacked(&self, live: impl Fn(NodeId) -> bool) -> bool {
        self.links
            .values()
            .any(|l| !l.unacked.is_empty() && live(l.peer.id))
    }

    /// Forgets links to peers that are not `live`, oldest ids first, beyond `limit` links.
    pub fn prune(&mut self, limit: usize, live: impl Fn(NodeId) -> bool) {
        while self.links.len() > limit {
            let Some(id) = self.links.keys().copied().find(|&id| !live(id)) else {
                return;
            };
            self.links.remove(&id);
        }
    }

    /// Forgets every link.
    pub fn clear(&mut self) {
        self.links.clear();
        self.ack_due.clear();
    }

    /// The contact behind the link to `id`.
    pub fn contact_of(&self, id: NodeId) -> Option<Contact> {
        self.links.get(&id).map(|l| l.peer.clone())
    }

    /// Whether nothing sent is waiting for an acknowledgement.
    pub fn is_drained(&self) -> bool {
        self.links.values().all(|l| l.unacked.is_empty())
    }

    /// Messages waiting for an acknowledgement, over all links.
    pub fn unacked(&self) -> usize {
        self.links.values().map(|l| l.unacked.len()).sum()
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

    fn seq_of(t: &Transmit) -> u64 {
        match t.envelope.body {
            Body::Channel { seq, .. } => seq,
            _ => panic!("not a channel message"),
        }
    }

    #[test]
    fn delivers_in_order_once_despite_reordering_and_duplicates() {
        let (a, b) = (c(1, 1), c(2, 1));
        let mut tx = Channels::default();
        let mut rx = Channels::default();
        let sent: Vec<_> = (1..=5).map(|i| tx.send(0, &a, &b, msg(i))).collect();
        let mut got = Vec::new();
        for i in [2usize, 0, 0, 4, 1, 3, 2] {
            let t = &sent[i];
            if let Body::Channel { seq, ack, msg } = t.envelope.body.clone() {
                got.extend(rx.receive(&a, seq, ack, msg));
            }
        }
        assert_eq!(got, (1..=5).map(msg).collect::<Vec<_>>());
        let acks = rx.take_bare_acks(&b);
        assert_eq!(acks.len(), 1);
        assert_eq!(acks[0].envelope.body, Body::ChannelAck { ack: 5 });
        assert_eq!(tx.unacked(), 5);
        tx.on_ack(&b, 5);
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
        tx.on_ack(&b, 1);
        assert!(tx.due_for_resend(1_000, &a, 100, |_| true).is_empty());
    }

    #[test]
    fn a_new_incarnation_gets_a_fresh_link_and_old_messages_are_dropped() {
        let (a, b) = (c(1, 1), c(2, 1));
        let a2 = c(1, 2);
        let mut rx = Channels::default();
        assert_eq!(rx.receive(&a, 1, 0, msg(1)).len(), 1);
        // a restarts: its sequence numbers start again.
        assert_eq!(rx.receive(&a2, 1, 0, msg(2)), vec![msg(2)]);
        // A late message from the old life is ignored.
        assert!(rx.receive(&a, 2, 0, msg(3)).is_empty());
        let mut tx = Channels::default();
        tx.send(0, &b, &a, msg(1));
        let t = tx.send(0, &b, &a2, msg(2));
        assert_eq!(seq_of(&t), 1);
        assert_eq!(t.envelope.to_incarnation, 2);
    }
}
