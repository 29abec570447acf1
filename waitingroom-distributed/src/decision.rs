//! The root's decision at the end of a count (thesis "Distributed Virtual Waiting Room",
//! §4.5.3): how many visitors the round lets out, and to whom.
//!
//! With the whole cluster counted, the root takes the places free under the target and the
//! rate cap (the places departed members' visitors may still hold counted as taken,
//! `departed.rs`), lets out that many of the eligible visitors (in range admission, up to the
//! largest key among them), and grants each member its share and its part of the
//! straight-through places (`lease.rs`). It grants nothing unless the members counted hold a
//! majority of the voters (`voters.rs`), and nothing while a round whose result was lost may
//! still have granted places (waitingroom-distributed/README.md#4-a-lost-round-counts-as-spent).
//! The round's record is the next in the chain (`record_chain.rs`), and the smoothed admission rate
//! feeds the visitors' ETAs. Grants and the majority rule are not in the thesis, which lets every
//! node act on the last count it heard.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use waitingroom_core::round_records::RoundRecord;
use waitingroom_core::{NodeId, QueueKey, Time};

use crate::config::AdmissionMode;
use crate::departed::DepartedPlaces;
use crate::lease::Lease;
use crate::live::{InForce, LiveSettings};
use crate::messages::{Admission, AdmitRange, Counts, LostRound, Stamp, Summary};
use crate::outputs::{Event, Outbox};
use crate::patch::{Mode, QueueingMethod};
use crate::record_chain::RecordChain;
use crate::voters::Electorate;

/// Rounds a root remembers starting (more than a lost round lives: `lease.rs`).
const STARTED_KEPT: usize = 16;

/// What the root decides with: how it lets visitors out, the admission rate so far, and the
/// rounds it started.
#[derive(Debug, Clone)]
pub(crate) struct Decider {
    /// How the root lets visitors out once a count has decided how many.
    mode: AdmissionMode,
    /// Root only: admitted total and time at the previous completed round, and the smoothed rate.
    rate: Rate,
    /// The latest rounds this node started as root: it knows what each granted, so they are
    /// never lost to it (`lease.rs`).
    started: VecDeque<Stamp>,
}

#[derive(Debug, Clone, Default)]
struct Rate {
    last: Option<(Time, u64)>,
    milli_per_s: u64,
}

impl Rate {
    fn sample(&mut self, now: Time, admitted_total: u64) -> u64 {
        if let Some((t0, a0)) = self.last
            && now > t0
        {
            let sample = admitted_total.saturating_sub(a0) * 1_000_000 / (now - t0);
            self.milli_per_s = if self.milli_per_s == 0 {
                sample
            } else {
                (self.milli_per_s * 7 + sample * 3) / 10
            };
        }
        self.last = Some((now, admitted_total));
        self.milli_per_s
    }
}

/// What the root decided at the end of a count, for the node to carry out.
#[derive(Debug)]
pub(crate) struct Decision {
    /// The ranges the subtrees reported (a new root may have missed some): merged first.
    pub reported: Vec<AdmitRange>,
    /// The result to flood down the tree (its earlier ranges filled in after the merge).
    pub summary: Summary,
    /// Range admission: the range decided.
    pub range: Option<AdmitRange>,
    /// DeleteMin admission: the batch to let out through QPID.
    pub batch: Option<Admission>,
}

/// The node's other parts that the decision reads and moves.
pub(crate) struct Parts<'a> {
    /// The live settings: the count's newest version is adopted first.
    pub settings: &'a mut InForce,
    /// The majority rule: the members counted may become the next voters.
    pub voters: &'a mut Electorate,
    /// The places departed members' visitors may still hold, counted as taken.
    pub departed: &'a mut DepartedPlaces,
    /// This node's lease: when it asked, and the lost rounds it holds.
    pub lease: &'a mut Lease,
    /// The chain of round records: the round's record is the next in it.
    pub records: &'a RecordChain,
}

/// What a round lets out: how many, the largest key among them (range admission cut by key),
/// the places free under the target and the rate cap, and whether it is a lottery's.
struct Outcome {
    admit: u64,
    max_key: Option<QueueKey>,
    free: u64,
    lottery: bool,
}

impl Decider {
    /// The decision of a node that lets visitors out in `mode`.
    pub(crate) fn new(mode: AdmissionMode) -> Decider {
        Decider {
            mode,
            rate: Rate::default(),
            started: VecDeque::new(),
        }
    }

    /// This node, as root, starts round `stamp`: it will know what that round granted.
    pub(crate) fn started(&mut self, stamp: Stamp) {
        if self.started.len() >= STARTED_KEPT {
            self.started.pop_front();
        }
        self.started.push_back(stamp);
    }

    /// At the root, with the whole cluster counted in round `stamp` (its histogram `bounds`
    /// and the `counts`): decide how many to let out (§4.5.3, with the places departed
    /// members' visitors may still hold counted as taken) and grant each member its places.
    /// Members that hold a majority of the voters become the next voters; without a majority
    /// the root grants nothing (waitingroom-distributed/README.md#admission-leases).
    pub(crate) fn decide(
        &mut self,
        now: Time,
        (stamp, bounds, counts): (Stamp, Vec<Time>, Counts),
        version: u64,
        p: Parts<'_>,
        out: &mut Outbox,
    ) -> Decision {
        let cutoff = stamp.time;
        // A version the count carried that does not fit here is still passed on.
        let _ = p.settings.adopt(&counts.settings);
        let (unlimited, unguarded) = (p.settings.unlimited(), p.settings.unguarded());
        let counted: BTreeSet<NodeId> = counts.per_node.iter().map(|n| n.node).collect();
        let majority = (p.voters).vote(&counts.voters, &counted, &counts.seen, unguarded);
        let on_site = on_site_with_departed(now, &counts, p.departed);
        let (held, lost) = self.held_back(now, &counts, stamp, p.lease, unlimited);
        // A record this root missed: it goes on from it next round (`RecordChain::behind`).
        let behind = p.records.behind(&counts.ranges);
        let may_grant = majority && !held && !behind;
        let o = self.outcome(&counts, (may_grant, on_site), cutoff, p.settings);
        let everyone_in = counts.queued <= o.admit;
        let straight = if everyone_in { o.free - o.admit } else { 0 };
        let by_range = self.mode == AdmissionMode::Range;
        // With no limit on the site nobody needs a place to let a visitor through.
        let granted = if unlimited { 0 } else { straight };
        let grants = grants(&counts, o.admit, o.max_key.is_some(), granted, by_range);
        let (admit, max_key) = (o.admit, o.max_key);
        let grants_given = majority.then_some(grants.grants);
        let record = record(&p, (&stamp, version), &o, grants_given.as_deref());
        let summary = Summary {
            stamp,
            bounds,
            below: counts.below,
            version,
            queued: counts.queued,
            on_site,
            admitted: admit,
            rate_milli_per_s: self.rate.sample(now, counts.admitted_total),
            free_places: straight,
            members: counts.nodes,
            places: grants.places,
            grants: grants_given,
            voters: p.voters.voters().clone(),
            settings: p.settings.live().clone(),
            departed: p.departed.list().to_vec(),
            released: counts.released.clone(),
            record,
            lost,
        };
        out.emit(Event::CountCompleted(Box::new(summary.clone())));
        let (range, batch) = admissions(by_range, &summary, max_key);
        Decision {
            reported: counts.ranges,
            summary,
            range,
            batch,
        }
    }

    /// What the round at `cutoff` lets out, if it may grant (`may_grant`) with `on_site`
    /// taken: the places free under the settings in force at the cutoff, and how many of the
    /// eligible visitors they let out.
    fn outcome(
        &self,
        counts: &Counts,
        (may_grant, on_site): (bool, u64),
        cutoff: Time,
        settings: &InForce,
    ) -> Outcome {
        let in_force = settings.live().in_force_at(cutoff);
        let free = if may_grant {
            free_places(&in_force, settings, on_site, cutoff)
        } else {
            0
        };
        let lottery = in_force.queueing_method == QueueingMethod::Random;
        let (admit, max_key) = self.how_many(counts, free, lottery, settings.unlimited());
        Outcome {
            admit,
            max_key,
            free,
            lottery,
        }
    }

    /// Rule 4 at the root (waitingroom-distributed/README.md#4-a-lost-round-counts-as-spent):
    /// whether round `deciding` must grant nothing, because a lost round is live or the round took
    /// too long (`Lease::in_time`), and the lost rounds held.
    fn held_back(
        &mut self,
        now: Time,
        counts: &Counts,
        deciding: Stamp,
        lease: &mut Lease,
        unlimited: bool,
    ) -> (bool, Vec<LostRound>) {
        let lost = self.lost_rounds(now, counts, deciding, lease);
        let asked = lease.asked_at(deciding);
        let in_time = asked.is_some_and(|at| lease.in_time(at, now));
        (!unlimited && (!lost.is_empty() || !in_time), lost)
    }

    /// The lost rounds the count carried up or this node holds, live at `now`, but those this
    /// node started itself (it knows what they granted) and the round being decided.
    fn lost_rounds(
        &mut self,
        now: Time,
        counts: &Counts,
        deciding: Stamp,
        lease: &mut Lease,
    ) -> Vec<LostRound> {
        let started = &self.started;
        let unknown: Vec<LostRound> = (counts.lost.iter())
            .filter(|l| !started.contains(&l.stamp))
            .copied()
            .collect();
        lease.learn_lost(now, &unknown);
        let mut lost = lease.lost_rounds(now, Some(deciding));
        lost.retain(|l| !self.started.contains(&l.stamp));
        lost
    }

    /// How many of the eligible visitors the `free` places let out, and in range admission the
    /// largest key among them (the admit-th smallest; a round admits at most as many as were
    /// reported).
    ///
    /// Under random queueing with a limit the range is always cut by key, even when it lets
    /// everyone counted out: the lottery's visitors all share one join time, earlier than the
    /// cutoff, so a range cut by time alone would also cover everyone who joins after the count
    /// (without a limit everyone is let out anyway).
    fn how_many(
        &self,
        counts: &Counts,
        free: u64,
        lottery: bool,
        unlimited: bool,
    ) -> (u64, Option<QueueKey>) {
        let eligible = counts.below.last().copied().unwrap_or(0);
        let admit = eligible.min(free);
        let everyone = admit >= eligible && (!lottery || unlimited);
        if self.mode != AdmissionMode::Range || everyone || admit == 0 {
            return (admit, None);
        }
        let admit = admit.min(counts.smallest.len() as u64);
        let max_key = admit
            .checked_sub(1)
            .and_then(|i| counts.smallest.get(i as usize).copied());
        (admit, max_key)
    }
}

/// What the round of `summary` lets out, if anyone: a range up to `max_key` (or everyone
/// before its boundary), or a batch for the deleteMin modes, each naming the round's record.
fn admissions(
    by_range: bool,
    summary: &Summary,
    max_key: Option<QueueKey>,
) -> (Option<AdmitRange>, Option<Admission>) {
    let (admit, cutoff, version) = (summary.admitted, summary.stamp.time, summary.version);
    let range = (by_range && admit > 0).then(|| AdmitRange {
        cutoff,
        max_key,
        version,
        decided_at: cutoff,
        record: summary.record.clone(),
    });
    let batch = (!by_range && admit > 0).then_some(Admission {
        count: admit,
        cutoff,
        version,
        round: summary.record.as_ref().map(|r| r.round),
    });
    (range, batch)
}

/// The record of round `stamp`, if it lets anyone out of the queue or grants places joins may
/// take (`granted`, none without a majority): a member lets a visitor straight through only
/// under the grant of a recorded round, and their pass names that round, so the record says
/// how many places the round granted in all (`through`)
/// (waitingroom-distributed/README.md#fairness-records). Joins take places only with
/// `admit_straight_through` and a limit on the site.
fn record(
    p: &Parts<'_>,
    (stamp, version): (&Stamp, u64),
    o: &Outcome,
    granted: Option<&[(NodeId, u64)]>,
) -> Option<RoundRecord> {
    let joins = p.settings.settings().admit_straight_through && !p.settings.unlimited();
    let total: u64 = granted.map_or(0, |g| g.iter().map(|&(_, places)| places).sum());
    let through = if joins { total } else { 0 };
    let claims = (o.admit, o.max_key);
    (o.admit > 0 || through > 0).then(|| RoundRecord {
        through,
        ..(p.records).next_record(stamp, claims, version, o.lottery)
    })
}

/// Places a round at `boundary` may fill, with `on_site` taken: the target's room, at most
/// the rate cap's allowance for the round; none in queue-all mode
/// (waitingroom-distributed/README.md#live-settings).
fn free_places(live: &LiveSettings, in_force: &InForce, on_site: u64, boundary: Time) -> u64 {
    if live.mode == Mode::QueueAll {
        return 0;
    }
    let settings = live.apply_to(in_force.file());
    let room = if settings.is_unlimited() {
        u64::MAX
    } else {
        settings.target_on_site.saturating_sub(on_site)
    };
    if live.mode == Mode::Passthrough {
        return room;
    }
    let interval = settings.eviction_interval_ms;
    live.round_allowance(boundary, interval)
        .map_or(room, |cap| room.min(cap))
}

/// Visitors on the site at the count plus the places departed members may still hold (the
/// root's list merged with the ones the count carried up; expired ones dropped, and those of
/// lives whose process the count shows alive again, which counts them itself).
fn on_site_with_departed(now: Time, counts: &Counts, departed: &mut DepartedPlaces) -> u64 {
    departed.learn(&counts.departed);
    departed.settle(&counts.per_node);
    departed.on_site(now, counts.on_site)
}

/// What a round grants each counted member, and the places each holds once it has used them.
struct Grants {
    /// Places each member may give out (its share of the range, in range admission, and of
    /// the straight-through places), by node id.
    grants: Vec<(NodeId, u64)>,
    /// Its visitors on the site plus its grant and its share of the round's admissions: what
    /// to keep counting if it departs.
    places: Vec<(NodeId, u64)>,
}

/// Each counted member's share of the `admit` let out and of the `straight` through places.
/// With a range cut by key (`by_key`) the share of the admissions is exact (the smallest keys
/// carry their node); otherwise a node that had `eligible` visitors gets `min(eligible, admit)`,
/// an upper bound, which errs towards a fuller site. Straight-through places are split evenly
/// in id order. Only range admission (`by_range`) lets visitors out of the queue under the
/// grant; the deleteMin modes let them out through QPID.
fn grants(counts: &Counts, admit: u64, by_key: bool, straight: u64, by_range: bool) -> Grants {
    let mut taken: BTreeMap<NodeId, u64> = BTreeMap::new();
    if by_key {
        let k = usize::try_from(admit).unwrap_or(usize::MAX);
        for key in counts.smallest.iter().take(k) {
            *taken.entry(key.node).or_default() += 1;
        }
    }
    let mut nodes = counts.per_node.clone();
    nodes.sort_unstable_by_key(|n| n.node);
    let n = nodes.len().max(1) as u64;
    let (mut grants, mut places) = (Vec::new(), Vec::new());
    for (i, node) in nodes.iter().enumerate() {
        let share = if by_key {
            taken.get(&node.node).copied().unwrap_or(0)
        } else {
            node.eligible.min(admit)
        };
        let through = straight / n + u64::from((i as u64) < straight % n);
        let grant = through.saturating_add(if by_range { share } else { 0 });
        grants.push((node.node, grant));
        let held = node.on_site.saturating_add(share).saturating_add(through);
        places.push((node.node, held));
    }
    Grants { grants, places }
}

#[cfg(test)]
mod tests {
    use waitingroom_core::Settings;

    use super::*;
    use crate::lease::Pause;
    use crate::messages::{ChannelMsg, CountResult, NodeCounts};
    use crate::node::Node;
    use crate::testing::{self, count_reply as reply, counts_of, member, said, settle, tree};

    /// waitingroom-distributed/README.md#4-a-lost-round-counts-as-spent: a count that carries a
    /// round whose result a member never heard (another root's) grants nothing, and says so, until
    /// that round's grants have expired; a lost round of the root's own is no reason to wait.
    #[test]
    fn a_lost_round_holds_grants_back_until_it_expires() {
        let settings = Settings {
            target_on_site: 5,
            ..testing::queued_settings()
        };
        let m = tree(2, &[1, 2], &[(1, 2)]);
        let mut cfg = testing::config(1, 1, settings);
        // Node 2 is this test's hand: it answers no probe.
        (cfg.probe_interval_ms, cfg.probe_timeout_ms) = (1 << 40, 1 << 39);
        let mut node = member(cfg, &m);
        let mut peers = settle(&mut node);
        let lost = |origin: u64, remaining_ms: Time| LostRound {
            stamp: Stamp {
                time: 500,
                origin: NodeId(origin),
            },
            remaining_ms,
        };
        let mut count = |node: &mut Node, at: Time, carried: Option<LostRound>| {
            node.handle_timeout(at);
            said(node);
            let stamp = Stamp {
                time: at,
                origin: NodeId(1),
            };
            let mut counts = counts_of(2, 1);
            counts.lost = carried.into_iter().collect();
            let env = peers.channel(2, node, reply(stamp, Some(counts)));
            assert_eq!(node.handle_message(at, env), Ok(()));
            said(node);
            let summary = node.summary().expect("decided").clone();
            (summary.admitted, summary.lost)
        };
        assert_eq!(
            count(&mut node, 1_000, Some(lost(3, 1_500))),
            (0, vec![lost(3, 1_500)])
        );
        assert_eq!(node.pause(1_000), Some(Pause::LostRound));
        assert_eq!(node.grant(1_000).0, 0);
        // Held here too, counted down, though the count no longer carries it.
        assert_eq!(count(&mut node, 2_000, None), (0, vec![lost(3, 500)]));
        assert_eq!(count(&mut node, 3_000, None), (1, vec![]));
        assert_eq!(node.pause(3_000), None);
        // Its own round: it knows what that granted.
        let own = LostRound {
            stamp: Stamp {
                time: 3_000,
                origin: NodeId(1),
            },
            remaining_ms: 5_000,
        };
        node.handle_timeout(4_000);
        said(&mut node);
        let stamp = Stamp {
            time: 4_000,
            origin: NodeId(1),
        };
        let mut counts = counts_of(2, 1);
        counts.lost = vec![own];
        let env = peers.channel(2, &node, reply(stamp, Some(counts)));
        assert_eq!(node.handle_message(4_000, env), Ok(()));
        assert_eq!(node.summary().expect("decided").lost, []);
    }

    /// waitingroom-distributed/README.md#fairness-records: in batched deleteMin a root lets its
    /// batch out under its round's record, which it publishes even when another root's newer
    /// result of the same round slot reached it first (so its own result is not taken).
    #[test]
    fn a_batch_let_out_is_on_the_record_though_a_newer_result_came_first() {
        let m = tree(2, &[1, 2], &[(1, 2)]);
        let mut cfg = testing::config(1, 1, testing::queued_settings());
        cfg.admission = AdmissionMode::Batched;
        (cfg.probe_interval_ms, cfg.probe_timeout_ms) = (1 << 40, 1 << 39);
        let mut node = member(cfg, &m);
        let mut peers = settle(&mut node);
        let mut round = |node: &mut Node, at: Time, first: Option<CountResult>| {
            node.handle_timeout(at);
            said(node);
            if let Some(r) = first {
                let env = peers.channel(2, node, ChannelMsg::CountResult(r.into()));
                assert_eq!(node.handle_message(at, env), Ok(()));
            }
            let stamp = Stamp {
                time: at,
                origin: NodeId(1),
            };
            let env = peers.channel(2, node, reply(stamp, Some(counts_of(2, 0))));
            assert_eq!(node.handle_message(at, env), Ok(()));
            said(node);
        };
        round(&mut node, 1_000, None);
        let joined = node.join(1_500).expect("joined");
        // Node 2's own round of the 2-s slot, letting nobody out, reaches node 1 first.
        let mut newer = node.summary().expect("a first round").clone();
        newer.stamp = Stamp {
            time: 2_000,
            origin: NodeId(2),
        };
        let newer = CountResult {
            summary: newer,
            admit: None,
            earlier: Vec::new(),
            releases: Default::default(),
        };
        testing::events(&mut node);
        round(&mut node, 2_000, Some(newer));
        let recorded: Vec<(u64, Time)> = (testing::events(&mut node).into_iter())
            .filter_map(|e| match e {
                Event::RoundRecorded(r) => Some((r.round, r.decided_at_ms)),
                _ => None,
            })
            .collect();
        let pass = node
            .leave(2_001, &joined.ticket)
            .expect("let out by the batch");
        assert_eq!(pass.eviction_time, 2_000);
        assert_eq!(recorded, [(0, 2_000)], "the batch's round is published");
        assert_eq!(pass.round, Some(0));
    }

    fn per_node(node: u64, on_site: u64, eligible: u64) -> NodeCounts {
        NodeCounts {
            node: NodeId(node),
            on_site,
            eligible,
            lives: None,
        }
    }

    /// Straight-through places are split evenly in id order; without a key cut each member's
    /// share of the admissions is an upper bound (its eligible visitors, at most all let out),
    /// and only range admission grants it.
    #[test]
    fn each_member_gets_its_share() {
        let mut counts = counts_of(2, 0);
        counts.per_node = vec![per_node(3, 1, 4), per_node(1, 0, 1), per_node(2, 2, 0)];
        let g = grants(&counts, 3, false, 5, true);
        assert_eq!(g.grants, [(NodeId(1), 3), (NodeId(2), 2), (NodeId(3), 4)]);
        assert_eq!(g.places, [(NodeId(1), 3), (NodeId(2), 4), (NodeId(3), 5)]);
        let g = grants(&counts, 3, false, 5, false);
        assert_eq!(g.grants, [(NodeId(1), 2), (NodeId(2), 2), (NodeId(3), 1)]);
    }

    /// The admission rate is smoothed over the rounds (ETAs do not jump with one round).
    #[test]
    fn the_rate_is_smoothed() {
        let mut rate = Rate::default();
        assert_eq!(rate.sample(1_000, 0), 0, "no rate before two rounds");
        assert_eq!(rate.sample(2_000, 10), 10_000);
        assert_eq!(rate.sample(3_000, 10), 7_000);
    }
}
