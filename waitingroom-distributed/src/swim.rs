//! SWIM failure detection (thesis §4.6): probe one member per period in a shuffled
//! round-robin order (§4.6.1, SWIM's round-robin probe target selection).
//!
//! Departs from the thesis, which assumes links never lose a message and so needs neither: when
//! a ping goes unanswered, `k` other members are asked to probe the target too (SWIM's indirect
//! probes), and a member is declared dead only after `1 + suspect_rounds` probe periods in a row
//! without an answer, so one lost packet does not remove a node. The node owns the membership;
//! this part is given the members for each call and says whom to declare dead.

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand_chacha::ChaCha8Rng;
use waitingroom_core::NodeId;

use crate::ignored::Ignored;
use crate::membership::{Contact, View};
use crate::messages::Body;
use crate::outputs::Outbox;

/// Most indirect probes relayed for others at once.
const MAX_RELAYS: usize = 256;

/// SWIM state of one node: the probe order, the probe in progress and the failures counted.
#[derive(Debug, Clone)]
pub(crate) struct Swim {
    /// Every random choice the node makes (probe order, helpers, former members to ping).
    rng: ChaCha8Rng,
    /// Extra failed probe periods a member gets before it is declared dead.
    suspect_rounds: u32,
    /// Members asked to probe a target that did not answer.
    indirect_probes: usize,
    order: Vec<NodeId>,
    next: usize,
    probe: Option<Probe>,
    strikes: BTreeMap<NodeId, u32>,
    /// Our nonce of a ping we sent for someone else → (requester, their nonce).
    relays: BTreeMap<u64, (Contact, u64)>,
    nonce: u64,
    /// A member the transport failed to reach: probed before the round-robin order goes on.
    urgent: Option<NodeId>,
}

#[derive(Debug, Clone)]
struct Probe {
    target: Contact,
    nonce: u64,
    acked: bool,
}

/// What a probe period led to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tick {
    /// A ping went out with this nonce: check for its answer after the probe timeout.
    Pinged(u64),
    /// This member failed too many probe periods in a row: remove it.
    Dead(Contact),
    /// Nobody to probe.
    Idle,
}

impl Swim {
    /// A detector drawing its random choices from `seed`.
    pub(crate) fn new(seed: u64, suspect_rounds: u32, indirect_probes: usize) -> Swim {
        Swim {
            rng: ChaCha8Rng::seed_from_u64(seed),
            suspect_rounds,
            indirect_probes,
            order: Vec::new(),
            next: 0,
            probe: None,
            strikes: BTreeMap::new(),
            relays: BTreeMap::new(),
            nonce: 0,
            urgent: None,
        }
    }

    fn next_nonce(&mut self) -> u64 {
        self.nonce += 1;
        self.nonce
    }

    /// Forgets the failures counted against a member that left.
    pub(crate) fn forget(&mut self, id: NodeId) {
        self.strikes.remove(&id);
    }

    /// Probes `id` next.
    pub(crate) fn prioritise(&mut self, id: NodeId) {
        self.urgent = Some(id);
    }

    /// How far the random source has advanced (see `Node::rng_word_pos`).
    pub(crate) fn rng_word_pos(&self) -> u128 {
        self.rng.get_word_pos()
    }

    /// A probe period begins: judge the last probe (answered, or one more strike against its
    /// target), then ping the next member (the last target again if it has strikes left).
    pub(crate) fn tick(
        &mut self,
        me: NodeId,
        members: &BTreeMap<NodeId, Contact>,
        view: View,
        out: &mut Outbox,
    ) -> Tick {
        let mut retry = None;
        if let Some(p) = self.probe.take() {
            let still_member = members
                .get(&p.target.id)
                .is_some_and(|c| c.incarnation == p.target.incarnation);
            if p.acked || !still_member {
                self.strikes.remove(&p.target.id);
            } else {
                let strikes = self.strikes.entry(p.target.id).or_insert(0);
                *strikes += 1;
                if *strikes > self.suspect_rounds {
                    self.strikes.remove(&p.target.id);
                    return Tick::Dead(p.target);
                }
                retry = Some(p.target);
            }
        }
        let Some(target) = retry.or_else(|| self.next_target(me, members)) else {
            return Tick::Idle;
        };
        let nonce = self.next_nonce();
        out.raw(target.clone(), Body::Ping { nonce, view });
        self.probe = Some(Probe {
            target,
            nonce,
            acked: false,
        });
        Tick::Pinged(nonce)
    }

    fn next_target(&mut self, me: NodeId, members: &BTreeMap<NodeId, Contact>) -> Option<Contact> {
        if let Some(c) = self
            .urgent
            .take()
            .and_then(|id| members.get(&id))
            .filter(|c| c.id != me)
        {
            return Some(c.clone());
        }
        for _ in 0..2 {
            while self.next < self.order.len() {
                let id = self.order[self.next];
                self.next += 1;
                if let Some(c) = members.get(&id) {
                    return Some(c.clone());
                }
            }
            let mut order: Vec<NodeId> = members.keys().copied().filter(|&n| n != me).collect();
            order.shuffle(&mut self.rng);
            self.order = order;
            self.next = 0;
        }
        None
    }

    /// The probe with `nonce` had its time: if its target has not answered, ask up to
    /// `indirect_probes` other members to ping it for us.
    pub(crate) fn timed_out(
        &mut self,
        nonce: u64,
        me: NodeId,
        members: &BTreeMap<NodeId, Contact>,
        out: &mut Outbox,
    ) {
        let Some(p) = self.probe.as_ref() else {
            return;
        };
        if p.nonce != nonce || p.acked {
            return;
        }
        let target = p.target.clone();
        let mut helpers: Vec<Contact> = members
            .values()
            .filter(|c| c.id != me && c.id != target.id)
            .cloned()
            .collect();
        helpers.shuffle(&mut self.rng);
        helpers.truncate(self.indirect_probes);
        for h in helpers {
            let body = Body::PingReq {
                target: target.clone(),
                nonce,
            };
            out.raw(h, body);
        }
    }

    /// Answers a ping: every node answers, member or not, with its own view.
    pub(crate) fn answer(me: NodeId, view: View, from: &Contact, nonce: u64, out: &mut Outbox) {
        let body = Body::PingAck {
            nonce,
            target: me,
            view,
        };
        out.raw(from.clone(), body);
    }

    /// An answer to a probe: ours (the target is alive), or one we relayed for someone else
    /// (passed back to them).
    pub(crate) fn on_ack(
        &mut self,
        nonce: u64,
        target: NodeId,
        view: View,
        out: &mut Outbox,
    ) -> Result<(), Ignored> {
        if let Some(p) = self.probe.as_mut()
            && p.nonce == nonce
            && p.target.id == target
        {
            p.acked = true;
            return Ok(());
        }
        let (requester, their_nonce) = self.relays.remove(&nonce).ok_or(Ignored::UnknownProbe)?;
        let body = Body::PingAck {
            nonce: their_nonce,
            target,
            view,
        };
        out.raw(requester, body);
        Ok(())
    }

    /// Pings `target` for `from` (an indirect probe), remembering whom to pass the answer to.
    pub(crate) fn relay(
        &mut self,
        from: &Contact,
        target: Contact,
        nonce: u64,
        view: View,
        out: &mut Outbox,
    ) {
        let ours = self.next_nonce();
        if self.relays.len() >= MAX_RELAYS {
            self.relays.pop_first();
        }
        self.relays.insert(ours, (from.clone(), nonce));
        out.raw(target, Body::Ping { nonce: ours, view });
    }

    /// Pings one of `candidates` (former members, seed addresses outside the cluster), chosen
    /// at random: if it lives in another cluster, its answer shows its view and the two merge.
    pub(crate) fn ping_one_of(&mut self, candidates: &[Contact], view: View, out: &mut Outbox) {
        if let Some(c) = candidates.choose(&mut self.rng).cloned() {
            let nonce = self.next_nonce();
            out.raw(c, Body::Ping { nonce, view });
        }
    }
}
