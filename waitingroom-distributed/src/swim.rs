//! SWIM failure detection (thesis "Distributed Virtual Waiting Room", §4.6): probe one member per
//! period in a shuffled round-robin order (§4.6.1, SWIM's round-robin probe target selection).
//!
//! Departs from the thesis, which assumes links never lose a message and so needs neither: when
//! a ping goes unanswered, `k` other members are asked to probe the target too (SWIM's indirect
//! probes), and a member is declared dead only after `1 + suspect_rounds` probe periods in a row
//! without an answer, so one lost packet does not remove a node. A probe period that began far
//! later than planned shows that the prober itself was paused (a stopped process, a stalled
//! host): the probe it had out, and those of the next few periods while it catches up with what
//! piled up meanwhile, are no evidence against their targets and count no strike. The node owns the membership; this part is given the members for
//! each call and says whom to declare dead.

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand_chacha::ChaCha8Rng;
use waitingroom_core::{NodeId, Time};

use crate::ignored::Ignored;
use crate::membership::{Contact, View};
use crate::messages::Body;
use crate::outputs::Outbox;

/// Most indirect probes relayed for others at once.
const MAX_RELAYS: usize = 256;
/// Clock samples kept per member; the one with the shortest round trip is believed.
const CLOCK_SAMPLES: usize = 8;

/// SWIM state of one node: the probe order, the probe in progress and the failures counted.
#[derive(Debug, Clone)]
pub(crate) struct Swim {
    /// Every random choice the node makes (probe order, helpers, former members to ping).
    rng: ChaCha8Rng,
    /// Extra failed probe periods a member gets before it is declared dead.
    suspect_rounds: u32,
    /// Members asked to probe a target that did not answer.
    indirect_probes: usize,
    /// A probe period that begins more than this after the one before was stretched by a pause
    /// of this node, not by its target: no strike.
    late_after: Time,
    /// When the last probe period began.
    last_tick: Option<Time>,
    /// Until when, after a pause, this node counts no strikes: it is still catching up with
    /// what piled up while it stood still (answers to its pings among it).
    catching_up_until: Time,
    order: Vec<NodeId>,
    next: usize,
    probe: Option<Probe>,
    strikes: BTreeMap<NodeId, u32>,
    /// Our nonce of a ping we sent for someone else → (requester, their nonce).
    relays: BTreeMap<u64, (Contact, u64)>,
    nonce: u64,
    /// A member the transport failed to reach: probed before the round-robin order goes on.
    urgent: Option<NodeId>,
    /// The latest clock samples per member, (round trip, offset of its clock from ours), ms.
    clocks: BTreeMap<NodeId, Vec<(u64, i64)>>,
    /// Bumped whenever `clocks` changes, so that an offset derived from it can be kept.
    clock_changes: u64,
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
    /// A detector drawing its random choices from `seed`, probing every `probe_interval`.
    pub(crate) fn new(
        seed: u64,
        (suspect_rounds, indirect_probes): (u32, usize),
        probe_interval: Time,
    ) -> Swim {
        Swim {
            rng: ChaCha8Rng::seed_from_u64(seed),
            suspect_rounds,
            indirect_probes,
            // One period late is a busy node; two is a pause no target can be blamed for.
            late_after: probe_interval.saturating_mul(3),
            last_tick: None,
            catching_up_until: 0,
            order: Vec::new(),
            next: 0,
            probe: None,
            strikes: BTreeMap::new(),
            relays: BTreeMap::new(),
            nonce: 0,
            urgent: None,
            clocks: BTreeMap::new(),
            clock_changes: 0,
        }
    }

    fn next_nonce(&mut self) -> u64 {
        self.nonce += 1;
        self.nonce
    }

    /// Forgets the failures counted against a member that left.
    pub(crate) fn forget(&mut self, id: NodeId) {
        self.strikes.remove(&id);
        self.clocks.remove(&id);
        self.clock_changes += 1;
    }

    /// How far `id`'s clock is ahead of ours, and the round trip of the sample that says so
    /// (the shortest of the latest few: its error is at most half that round trip).
    pub(crate) fn clock_offset(&self, id: NodeId) -> Option<(i64, u64)> {
        let samples = self.clocks.get(&id)?;
        let &(rtt, offset) = samples.iter().min()?;
        Some((offset, rtt))
    }

    /// Every member's clock offset and round trip, by id.
    pub(crate) fn clock_offsets(&self) -> Vec<(NodeId, i64, u64)> {
        self.clocks
            .keys()
            .filter_map(|&id| self.clock_offset(id).map(|(o, rtt)| (id, o, rtt)))
            .collect()
    }

    /// A direct answer to our ping sent at `sent` (our clock), answered at `theirs` (its
    /// clock), back at `now`: one sample of its offset, assuming the two legs took as long.
    fn clock_sample(&mut self, id: NodeId, now: Time, (sent, theirs): (Time, Time)) {
        if sent == 0 || sent > now {
            return;
        }
        let rtt = now - sent;
        let midpoint = sent + rtt / 2;
        let offset =
            i64::try_from(theirs).unwrap_or(i64::MAX) - i64::try_from(midpoint).unwrap_or(i64::MAX);
        let samples = self.clocks.entry(id).or_default();
        if samples.len() >= CLOCK_SAMPLES {
            samples.remove(0);
        }
        samples.push((rtt, offset));
        self.clock_changes += 1;
    }

    /// A number that changes whenever any clock sample does.
    pub(crate) fn clock_changes(&self) -> u64 {
        self.clock_changes
    }

    /// The probe timer starts at `now`: the first probe period is late, too, if this node is
    /// paused before it begins.
    pub(crate) fn started(&mut self, now: Time) {
        self.last_tick = Some(now);
    }

    /// This node was removed and starts a new life: the probe its previous life had out is
    /// answered to that life, which the others no longer reach, and the strikes it counted
    /// were counted by a node its cluster had given up on; neither is evidence against anyone.
    pub(crate) fn rejoined(&mut self) {
        self.probe = None;
        self.strikes.clear();
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
    /// target, unless this node was paused while it was out or is catching up after a pause),
    /// then ping the next member (the last target again if it has strikes left, or if the pause
    /// left it unjudged).
    pub(crate) fn tick(
        &mut self,
        now: Time,
        me: NodeId,
        members: &BTreeMap<NodeId, Contact>,
        view: View,
        out: &mut Outbox,
    ) -> Tick {
        let mut retry = None;
        if self
            .last_tick
            .is_some_and(|t| now > t.saturating_add(self.late_after))
        {
            self.catching_up_until = now.saturating_add(self.late_after.saturating_mul(2));
        }
        self.last_tick = Some(now);
        if let Some(p) = self.probe.take() {
            let still_member = members
                .get(&p.target.id)
                .is_some_and(|c| c.incarnation == p.target.incarnation);
            if p.acked || !still_member {
                self.strikes.remove(&p.target.id);
            } else if now < self.catching_up_until {
                // This node was paused while the ping was out, or has just been: ask again,
                // blaming no one.
                retry = Some(p.target);
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
        let ping = Body::Ping {
            nonce,
            view,
            time: now,
        };
        out.raw(target.clone(), ping);
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
    /// `times` are the ping's time and ours now, echoed for the prober's clock sample.
    pub(crate) fn answer(
        (me, view): (NodeId, View),
        from: &Contact,
        (nonce, times): (u64, (Time, Time)),
        out: &mut Outbox,
    ) {
        let body = Body::PingAck {
            nonce,
            target: me,
            view,
            clock: (times.0 > 0).then_some(times),
        };
        out.raw(from.clone(), body);
    }

    /// An answer to a probe: ours (the target is alive), or one we relayed for someone else
    /// (passed back to them).
    /// A direct answer (`clock` told) also samples the target's clock offset.
    pub(crate) fn on_ack(
        &mut self,
        now: Time,
        (nonce, target): (u64, NodeId),
        (view, clock): (View, Option<(Time, Time)>),
        out: &mut Outbox,
    ) -> Result<(), Ignored> {
        if let Some(p) = self.probe.as_mut()
            && p.nonce == nonce
            && p.target.id == target
        {
            p.acked = true;
            if let Some(times) = clock {
                self.clock_sample(target, now, times);
            }
            return Ok(());
        }
        let (requester, their_nonce) = self.relays.remove(&nonce).ok_or(Ignored::UnknownProbe)?;
        let body = Body::PingAck {
            nonce: their_nonce,
            target,
            view,
            clock: None,
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
        let ping = Body::Ping {
            nonce: ours,
            view,
            time: 0,
        };
        out.raw(target, ping);
    }

    /// Pings one of `candidates` (former members, seed addresses outside the cluster), chosen
    /// at random: if it lives in another cluster, its answer shows its view and the two merge.
    pub(crate) fn ping_one_of(&mut self, candidates: &[Contact], view: View, out: &mut Outbox) {
        if let Some(c) = candidates.choose(&mut self.rng).cloned() {
            let nonce = self.next_nonce();
            let ping = Body::Ping {
                nonce,
                view,
                time: 0,
            };
            out.raw(c, ping);
        }
    }
}

/// One envelope (or timer) in, the exact messages out (see `testing`): node 1 of the star
/// 1 - 2, 1 - 3, settled. Its first probe goes to 2 or 3, as its seed shuffles them.
#[cfg(test)]
mod tests {
    use crate::membership::Membership;
    use crate::node::Node;
    use crate::outputs::Event;
    use crate::testing::{self, Peer, Said, member, said, settle, tree};

    use super::*;

    fn star() -> Membership {
        tree(2, &[1, 2, 3], &[(1, 2), (1, 3)])
    }

    fn hub() -> Node {
        let mut node = member(testing::config(1, 1, testing::queued_settings()), &star());
        settle(&mut node);
        node
    }

    /// The first probe, at 500 ms: returns the member pinged and the other one.
    fn first_probe(node: &mut Node) -> (NodeId, NodeId) {
        node.handle_timeout(500);
        let view = node.membership().view();
        let [
            Said::Raw(
                to,
                Body::Ping {
                    nonce: 1,
                    view: v,
                    time: 500,
                },
            ),
        ] = &said(node)[..]
        else {
            panic!("one ping")
        };
        assert_eq!(*v, view);
        let target = testing::id_of(to).expect("a rig address");
        let other = if target == NodeId(2) {
            NodeId(3)
        } else {
            NodeId(2)
        };
        (target, other)
    }

    /// §4.6: every node answers a ping, with its own view of the membership. A stranger whose
    /// view is behind also gets our tree (anti-entropy) and is told it is not a member
    /// (waitingroom-distributed/README.md#membership-changes and
    /// waitingroom-distributed/README.md#partitions).
    #[test]
    fn every_ping_is_answered() {
        let mut node = hub();
        let view = node.membership().view();
        let ping = Peer::new(2).raw(
            &node,
            Body::Ping {
                nonce: 9,
                view,
                time: 0,
            },
        );
        assert_eq!(node.handle_message(1, ping), Ok(()));
        let ack = Body::PingAck {
            nonce: 9,
            target: NodeId(1),
            view,
            clock: None,
        };
        assert_eq!(said(&mut node), [Said::Raw("n2".into(), ack.clone())]);
        let old = View {
            version: 1,
            digest: 0,
        };
        let stranger = Peer::new(9).raw(
            &node,
            Body::Ping {
                nonce: 9,
                view: old,
                time: 0,
            },
        );
        assert_eq!(node.handle_message(2, stranger), Ok(()));
        let tree = Body::tree(star());
        let not_member = Body::NotMember {
            cluster: star().rank(),
            version: 2,
        };
        let to = |b: Body| Said::Raw("n9".into(), b);
        assert_eq!(said(&mut node), [to(ack), to(tree), to(not_member)]);
    }

    /// waitingroom-distributed/README.md#swim (departs from §4.6, which trusts links not to lose a
    /// ping): a ping unanswered after `probe_timeout_ms` makes the node ask the other members to
    /// probe the target too; an answer in time asks nobody.
    #[test]
    fn an_unanswered_ping_asks_the_others_to_probe() {
        let mut node = hub();
        let (target, other) = first_probe(&mut node);
        node.handle_timeout(700);
        let req = Body::PingReq {
            target: testing::contact(target.0),
            nonce: 1,
        };
        assert_eq!(said(&mut node), [Said::Raw(testing::addr(other.0), req)]);

        let mut node = hub();
        let (target, _) = first_probe(&mut node);
        let ack = Body::PingAck {
            nonce: 1,
            target,
            view: node.membership().view(),
            clock: Some((500, 540)),
        };
        let ack = Peer::new(target.0).raw(&node, ack);
        assert_eq!(node.handle_message(600, ack.clone()), Ok(()));
        // Sent at 500, back at 600, the target's clock read 540 halfway: 10 ms behind ours.
        assert_eq!(node.clock_offsets(), [(target, -10, 100)]);
        node.handle_timeout(700);
        assert_eq!(said(&mut node), []);
        assert_eq!(
            node.handle_message(701, ack),
            Ok(()),
            "a copy of the answer"
        );
    }

    /// SWIM's indirect probe (waitingroom-distributed/README.md#swim): asked by a member, the node
    /// pings the target with a nonce of its own and passes the answer back under the requester's
    /// nonce; an answer that matches no probe is ignored.
    #[test]
    fn an_indirect_probe_is_relayed_both_ways() {
        let mut node = hub();
        let req = Body::PingReq {
            target: testing::contact(3),
            nonce: 7,
        };
        let req = Peer::new(2).raw(&node, req);
        assert_eq!(node.handle_message(1, req), Ok(()));
        let view = node.membership().view();
        assert_eq!(
            said(&mut node),
            [Said::Raw(
                "n3".into(),
                Body::Ping {
                    nonce: 1,
                    view,
                    time: 0
                }
            )]
        );
        let theirs = View {
            version: 2,
            digest: 42,
        };
        let answer = Body::PingAck {
            nonce: 1,
            target: NodeId(3),
            view: theirs,
            clock: None,
        };
        let answer = Peer::new(3).raw(&node, answer);
        assert_eq!(node.handle_message(2, answer.clone()), Ok(()));
        let back = Body::PingAck {
            nonce: 7,
            target: NodeId(3),
            view: theirs,
            clock: None,
        };
        let tree = Body::tree(star());
        assert_eq!(
            said(&mut node),
            [Said::Raw("n3".into(), tree), Said::Raw("n2".into(), back)],
            "node 3's view conflicts with ours: it gets our tree"
        );
        assert_eq!(node.handle_message(3, answer), Err(Ignored::UnknownProbe));
    }

    /// waitingroom-distributed/README.md#swim: a member that fails `1 + suspect_rounds` probe
    /// periods in a row (two, by default) is declared dead, and the tree without it goes to the
    /// others; one failed period is not enough (one lost packet must not remove a node).
    #[test]
    fn a_member_silent_for_two_probe_periods_is_declared_dead() {
        let mut node = hub();
        let (target, other) = first_probe(&mut node);
        node.handle_timeout(1_000);
        said(&mut node);
        assert!(testing::events(&mut node).is_empty());
        node.handle_timeout(1_500);
        let without = star()
            .with_removed(target, 1, 4)
            .expect("a member to remove");
        let trees: Vec<Said> = said(&mut node)
            .into_iter()
            .filter(|s| matches!(s, Said::Raw(_, Body::Tree(..))))
            .collect();
        let tree = Body::tree(without.clone());
        assert_eq!(trees, [Said::Raw(testing::addr(other.0), tree)]);
        let failed = Event::MemberFailed(testing::contact(target.0));
        let removed = Event::MemberRemoved(testing::contact(target.0));
        assert_eq!(testing::events(&mut node), [failed, removed]);
        assert_eq!(node.membership(), &without);
    }

    /// waitingroom-distributed/README.md#swim: a probe that was out while this node was paused
    /// (its next period came 20 s late) is no evidence against its target, nor are those of the
    /// next six periods, while the node catches up with what piled up; after them, two silent
    /// periods remove the target again.
    #[test]
    fn a_probe_out_across_a_pause_of_the_prober_counts_no_strike() {
        let mut node = hub();
        let (target, _) = first_probe(&mut node);
        let failed = |node: &mut Node| {
            testing::events(node)
                .iter()
                .any(|e| matches!(e, Event::MemberFailed(c) if c.id == target))
        };
        for now in (20_000..=22_500).step_by(500) {
            node.handle_timeout(now);
            said(&mut node);
            assert!(
                !failed(&mut node),
                "removed at {now} for a pause of its prober"
            );
        }
        assert!(node.membership().contains(target));
        node.handle_timeout(23_000);
        node.handle_timeout(23_500);
        assert!(failed(&mut node), "two silent periods after the catch-up");
    }
}
