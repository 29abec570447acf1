//! What a node must not forget across a restart of its process
//! (waitingroom-distributed/README.md#durable-state), as data for its driver to keep, and how a
//! restarted node starts from it, or from nothing.
//!
//! Kept: the visitors this node let out who still hold a place and the tickets already
//! exchanged for a pass (`waitingroom_core::KeptVisitor`); the head of the round-record chain
//! (so round numbers never repeat and the chain links on); the departed places it holds for
//! others (a member gone before a whole-cluster restart stays counted); the places each other
//! member held after the last round (a member cut off when every node restarted is never a
//! member of the cluster they form, and nobody else would count what it let out); the newest
//! live settings with the events they schedule (`live.rs`: a cluster restarted as a whole goes
//! on with what its operators changed, and a newer version any member knows still wins) and
//! the node's own last changes (made again on top of a version that lacks them); and
//! the addresses of the members and former members it knew (a restarted node asks them as well
//! as its seeds, so it finds its cluster though every seed it was given is gone). The released
//! passes are kept apart (`node/released.rs`). A node restored from this counts in its own
//! room everything its earlier life let out, so its counts claim that life too
//! (`NodeCounts::lives`) and the departure its peers hold for it is dropped at its first count
//! (`DepartedPlaces::settle`). That is sound only if the state is complete: the driver keeps
//! it before it answers anyone after a change ([`Node::durable_changes`]).
//!
//! A node that has no state although it may have run before (no state directory) assumes the
//! worst when nobody else remembers the site, which it knows only when it founds a cluster:
//! its earlier life may have let out up to the whole target, so the target stays held, as a
//! departure of its own earlier life, for as long as any pass that life gave could be valid.

use serde::{Deserialize, Serialize};
use waitingroom_core::{KeptVisitor, NodeId, Time};

use super::Node;
use crate::departed;
use crate::live::{LiveSettings, OwnChange};
use crate::messages::Departed;

/// The membership version a forgotten past's hold is noted under: no membership that removes
/// a member has it.
const FORGOTTEN_PAST: u64 = 0;

/// What a restarted node must not forget, for its driver to keep (`--state-dir`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Durable {
    /// The first incarnation whose visitors this state counts: the node's own, or that of the
    /// earlier life it was restored from.
    pub first_life: u64,
    /// Visitors let out here who still hold a place, and tickets already exchanged for a pass.
    pub visitors: Vec<KeptVisitor>,
    /// The last round record this node knows: its number and link (empty until signed).
    pub last_record: Option<(u64, String)>,
    /// The latest records it learned, by boundary (`decided_at_ms`), round and root: the
    /// passes of visitors let out before the restart name their round from these.
    #[serde(default)]
    pub recent_records: Vec<(Time, u64, NodeId)>,
    /// Places departed members may still hold.
    pub departed: Vec<Departed>,
    /// The other members when this was kept, each with the places it held after the last round
    /// this node heard of (`until` unused): a restored node counts them as departed from its
    /// restart on, until their lives are counted again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peer_places: Vec<Departed>,
    /// The newest live settings and events it knew; None while the file's are in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveSettings>,
    /// Its own last changes to them, made again on top of a newer version that lacks them
    /// (`live.rs`): a change made at this node just before the restart, and beaten by one made
    /// at once elsewhere, is not lost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub own_changes: Vec<OwnChange>,
    /// The addresses of the other members and former members it knew: where a restarted node
    /// looks for its cluster besides its seeds ([`Node::discovered`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
}

/// What changed in a node's durable state since its driver last took a delta
/// ([`Node::take_durable_delta`]): the visitors changed, in their state now, and everything
/// else whole when any of it changed. A driver appends these after a whole [`Durable`] and
/// gives the sum back at restart ([`Durable::apply`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DurableDelta {
    /// The visitors changed.
    pub visitors: Vec<KeptVisitor>,
    /// Everything but the visitors, when any of it changed (its `visitors` empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rest: Option<Durable>,
}

impl Durable {
    /// This state with `delta`, taken after it, applied: its visitors replace those of the
    /// same ticket, its rest the rest.
    pub fn apply(&mut self, delta: DurableDelta) {
        if let Some(rest) = delta.rest {
            let visitors = std::mem::take(&mut self.visitors);
            *self = Durable { visitors, ..rest };
        }
        let mut visitors: std::collections::BTreeMap<_, _> =
            (self.visitors.drain(..)).map(|k| (k.ticket(), k)).collect();
        visitors.extend(delta.visitors.into_iter().map(|k| (k.ticket(), k)));
        self.visitors = visitors.into_values().collect();
    }
}

/// This process's relation to earlier lives of the node (`node/durable.rs`).
#[derive(Debug, Clone, Default)]
pub(super) struct Past {
    /// The first incarnation whose visitors this process counts.
    pub(super) first_life: u64,
    /// Started without state although it may have run before: holds the target if it founds
    /// a cluster.
    forgotten: bool,
    /// Changes to the kept state outside the room, the chain and the departed places.
    changes: u64,
    /// The changes outside the room when a driver last took a delta or the whole.
    rest_taken: Option<u64>,
    /// When this process started (its own clock): the start of its restart grace
    /// ([`Past::takes_expired`]).
    started: Option<Time>,
}

impl Past {
    pub(super) fn new(incarnation: u64) -> Past {
        Past {
            first_life: incarnation,
            ..Past::default()
        }
    }

    pub(super) fn changed(&mut self) {
        self.changes += 1;
    }

    /// The process started (its timers began) at `now`.
    pub(super) fn started(&mut self, now: Time) {
        self.started = Some(now);
    }

    /// Whether a queued visitor's ticket that expired at `expired_at` is still taken at `now`
    /// (waitingroom-distributed/README.md#restart-grace): this process started less than a
    /// ticket expiry (`expiry`) ago, and the ticket expired at most a ticket expiry before it
    /// started. While the node was down (with the rest of its cluster, perhaps) its visitors'
    /// check-ins found nobody to answer them and their tickets ran out; a process cannot tell
    /// how long it was down, nor whether any other node took check-ins meanwhile, so every
    /// ticket that ran out within one ticket life of its start gets one ticket life from the
    /// start to check in again. Its holder keeps their place under their join time.
    pub(super) fn takes_expired(&self, now: Time, expired_at: Time, expiry: Time) -> bool {
        self.started.is_some_and(|start| {
            now < start.saturating_add(expiry) && expired_at.saturating_add(expiry) > start
        })
    }

    /// In a cluster with others: they hold this node's departed places, so a forgotten past
    /// needs no hold of its own any more.
    pub(super) fn met_others(&mut self) {
        self.forgotten = false;
    }
}

impl Node {
    /// Moves whenever [`Node::durable`] changed but by expiry: a driver that keeps it writes it
    /// when this moved, before it answers anyone after the call that moved it.
    pub fn durable_changes(&self) -> u64 {
        let room = self.local.room().kept_changes();
        let chain = self.records.head().0;
        // A membership's version changes with every membership applied (the peers kept).
        let peers = self.cluster.membership().version;
        (room.wrapping_add(chain))
            .wrapping_add(self.departed.changes())
            .wrapping_add(self.past.changes)
            .wrapping_add(self.tag.places_changes())
            .wrapping_add(self.in_force.taken())
            .wrapping_add(peers)
    }

    /// What this node must not forget across a restart, for its driver to keep. Linear in the
    /// visitors it knows: taken when [`Node::durable_changes`] moved.
    pub fn durable(&self) -> Durable {
        Durable {
            visitors: self.local.room().kept_visitors(),
            ..self.durable_rest()
        }
    }

    /// What changed in [`Node::durable`] since this was last called, for a driver that keeps
    /// it at every change: the visitors changed (constant work per visitor let out) and the rest
    /// when it changed. None when the room cannot tell which visitors changed (too many, or a
    /// restore since): then the driver keeps [`Node::durable`] whole, taken in the same call.
    pub fn take_durable_delta(&mut self) -> Option<DurableDelta> {
        let rest_now = (self.durable_changes()).wrapping_sub(self.local.room().kept_changes());
        let rest_moved = self.past.rest_taken.replace(rest_now) != Some(rest_now);
        let visitors = self.local.room_mut().take_kept_delta()?;
        let rest = rest_moved.then(|| self.durable_rest());
        Some(DurableDelta { visitors, rest })
    }

    /// [`Node::durable`] but the visitors.
    fn durable_rest(&self) -> Durable {
        let (next, link) = self.records.head();
        Durable {
            first_life: self.past.first_life,
            visitors: Vec::new(),
            last_record: next.checked_sub(1).map(|last| (last, link.to_owned())),
            recent_records: self.records.recent(),
            departed: self.departed.list().to_vec(),
            peer_places: self.peer_places(),
            live: (self.in_force.live().version > 0).then(|| self.in_force.live().clone()),
            own_changes: self.in_force.own_changes(),
            peers: self.known_peers(),
        }
    }

    /// The other members and the places each held after the last round: a member this node
    /// counted with may not come back to the cluster it finds after a restart (it is cut off,
    /// or the others restart without it), and nobody else would count what it let out. While
    /// this node has heard of no round it knows nothing of what they let out: each holds the
    /// whole target, as for a member departed then (`Node::member_departed`).
    fn peer_places(&self) -> Vec<Departed> {
        let unknown = self.in_force.settings().target_on_site;
        let membership = self.cluster.membership();
        (membership.members.values())
            .filter(|c| c.id != self.id())
            .map(|c| Departed {
                until: 0,
                node: c.id,
                version: membership.version,
                places: self.tag.places_of(c.id).unwrap_or(unknown),
                incarnation: Some(c.incarnation),
            })
            .filter(|d| d.places > 0)
            .collect()
    }

    /// The addresses of the other members and of former members, each once.
    fn known_peers(&self) -> Vec<String> {
        let me = &*self.cluster.me().addr;
        let members = self.cluster.membership().members.values();
        let formers = self.cluster.former_candidates();
        let mut seen = std::collections::BTreeSet::new();
        (members.map(|c| &*c.addr))
            .chain(formers.iter().map(|c| &*c.addr))
            .filter(|&addr| addr != me && seen.insert(addr))
            .map(str::to_owned)
            .collect()
    }

    /// Starts from what an earlier life of this node kept ([`Node::durable`]), before it starts
    /// or joins a cluster: its visitors count again until their places expire, used tickets
    /// get no second pass, its records go on from the last one, and its counts claim the
    /// earlier life, so the departure its peers hold for it is dropped at its first count.
    /// The live settings it kept are in force until the cluster carries a newer version; the
    /// peers it knew are for its driver to give as seeds ([`Node::discovered`]).
    pub fn restore(&mut self, now: Time, kept: &Durable) {
        self.past.first_life = kept.first_life.min(self.cfg.incarnation);
        self.local.room_mut().restore_visitors(now, &kept.visitors);
        if let Some((round, link)) = &kept.last_record {
            self.records.resume(*round, link.clone());
        }
        self.records.restore_recent(&kept.recent_records);
        let live: Vec<Departed> = (kept.departed.iter())
            .filter(|d| d.until > now)
            .copied()
            .collect();
        self.departed.learn(&live);
        self.hold_peers(now, &kept.peer_places);
        if let Some(settings) = &kept.live {
            // A version that does not fit this node's file settings is kept and passed on,
            // as one carried by a round would be; the room keeps the file's then.
            let _ = self.in_force.adopt(settings);
            self.apply_settings();
        }
        self.in_force.restore_own_changes(&kept.own_changes);
        self.past.changed();
    }

    /// The members an earlier life counted with hold their places as departed from `now` on,
    /// for as long as a member that left then could still use them, or until the life they had
    /// is counted again (`DepartedPlaces::settle`): a member that is cut off goes on letting
    /// visitors out under its grant while the cluster this node finds does not know it.
    fn hold_peers(&mut self, now: Time, peers: &[Departed]) {
        if self.in_force.unlimited() {
            return;
        }
        let expiry = departed::counted_for(self.lease.life(), &self.in_force);
        let held: Vec<Departed> = (peers.iter())
            .map(|d| Departed {
                until: now.saturating_add(expiry),
                ..*d
            })
            .collect();
        self.departed.learn(&held);
    }

    /// This node starts without state although it may have run before (its driver keeps
    /// none): if it founds a cluster, nobody remembers who is on the site, so it holds the
    /// whole target for as long as a pass its earlier life gave could be valid
    /// (waitingroom-distributed/README.md#durable-state).
    pub fn assume_forgotten_past(&mut self) {
        self.past.forgotten = true;
    }

    /// When founding a cluster: the hold of a forgotten past, once.
    pub(super) fn hold_forgotten_past(&mut self, now: Time) {
        if !std::mem::take(&mut self.past.forgotten) {
            return;
        }
        let target = self.in_force.settings().target_on_site;
        let expiry = departed::counted_for(self.lease.life(), &self.in_force);
        let until = now.saturating_add(expiry);
        self.departed.learn(&[Departed {
            until,
            node: self.id(),
            version: FORGOTTEN_PAST,
            places: target,
            incarnation: None,
        }]);
    }

    /// How long this node still holds the whole target for a forgotten past at `now`
    /// ([`Node::assume_forgotten_past`]; 0: it does not).
    /// Every member learns the hold with the rounds' results, so each says so.
    pub fn forgotten_past_hold_ms(&self, now: Time) -> u64 {
        (self.departed.list().iter())
            .filter(|d| d.version == FORGOTTEN_PAST)
            .map(|d| d.until.saturating_sub(now))
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use waitingroom_core::{Settings, TicketId};

    use super::*;
    use crate::patch::SettingsPatch;
    use crate::testing::{self, member, tree};

    fn settings() -> Settings {
        Settings {
            target_on_site: 3,
            ..testing::queued_settings()
        }
    }

    /// A node that restarts from its kept state goes by the live settings its earlier life
    /// knew, and knows its former peers' addresses; a newer version from the cluster still
    /// wins over them.
    #[test]
    fn live_settings_and_peers_are_kept_across_a_restart() {
        let trio = tree(2, &[1, 2, 3], &[(1, 2), (1, 3)]);
        let mut before = member(testing::config(2, 1, settings()), &trio);
        let changes = before.durable_changes();
        let patch = SettingsPatch {
            target_on_site: Some(7),
            ..SettingsPatch::default()
        };
        let live = before.change_settings(0, &patch, [0; 32]).unwrap();
        assert_ne!(before.durable_changes(), changes, "a change is to be kept");
        let kept = before.durable();
        assert_eq!(kept.live.as_ref(), Some(&live));
        let mut peers = kept.peers.clone();
        peers.sort();
        assert_eq!(peers, [testing::addr(1), testing::addr(3)]);

        let mut after = Node::new(testing::config(2, 2, settings())).unwrap();
        after.restore(0, &kept);
        assert_eq!(after.live_settings(), &live);
        assert_eq!(after.room().settings().target_on_site, 7);
        let nine = SettingsPatch {
            target_on_site: Some(9),
            ..SettingsPatch::default()
        };
        let newer = live.patched(&nine, (NodeId(1), 5, [0; 32]), &settings());
        after.in_force.adopt(&newer.unwrap()).unwrap();
        after.apply_settings();
        assert_eq!(after.room().settings().target_on_site, 9);
    }

    /// A member that has heard of no round knows nothing of what its peers let out: kept, each
    /// holds the whole target, and a node restored from that counts them from its restart on.
    #[test]
    fn peers_of_a_node_that_heard_no_round_hold_the_whole_target() {
        let trio = tree(2, &[1, 2, 3], &[(1, 2), (1, 3)]);
        let before = member(testing::config(2, 1, settings()), &trio);
        let kept = before.durable();
        let held: Vec<(NodeId, u64)> = (kept.peer_places.iter())
            .map(|d| (d.node, d.places))
            .collect();
        assert_eq!(held, [(NodeId(1), 3), (NodeId(3), 3)]);
        let mut after = Node::new(testing::config(2, 2, settings())).unwrap();
        after.restore(0, &kept);
        assert_eq!(after.departed.on_site(1, 0), 6);
    }

    /// A change made just before a restart and beaten by a version made elsewhere without it
    /// is made again on top of that version, as it would have been without the restart.
    #[test]
    fn an_own_change_survives_a_restart_and_a_competing_version() {
        let trio = tree(2, &[1, 2, 3], &[(1, 2), (1, 3)]);
        let mut before = member(testing::config(2, 1, settings()), &trio);
        let seven = SettingsPatch {
            target_on_site: Some(7),
            ..SettingsPatch::default()
        };
        before.change_settings(0, &seven, [0; 32]).unwrap();
        let kept = before.durable();
        assert_eq!(kept.own_changes.len(), 1);
        let text = serde_json::to_string(&kept).unwrap();
        let kept: Durable = serde_json::from_str(&text).unwrap();

        let mut after = Node::new(testing::config(2, 2, settings())).unwrap();
        after.restore(0, &kept);
        // Node 1 changed the mode twice meanwhile, on the file's version: a newer number.
        let queue_all = SettingsPatch {
            mode: Some(crate::patch::Mode::QueueAll),
            ..SettingsPatch::default()
        };
        let stamp = (NodeId(1), 1, [0; 32]);
        let one = LiveSettings::default().patched(&queue_all, stamp, &settings());
        let two = one
            .unwrap()
            .patched(&queue_all, stamp, &settings())
            .unwrap();
        after.in_force.adopt(&two).unwrap();
        after.apply_settings();
        assert_eq!(
            after.room().settings().target_on_site,
            7,
            "made again on top"
        );
        assert_eq!(after.live_settings().mode, crate::patch::Mode::QueueAll);
    }

    /// A whole state with the deltas taken after it applied is the whole state now.
    #[test]
    fn a_whole_state_and_its_deltas_add_up_to_the_state_now() {
        let trio = tree(2, &[1, 2, 3], &[(1, 2), (1, 3)]);
        let mut node = member(testing::config(2, 1, settings()), &trio);
        let mut kept = node.durable();
        assert!(
            node.take_durable_delta().is_some_and(|d| d.rest.is_some()),
            "first: all"
        );
        let none = node.take_durable_delta().unwrap();
        assert_eq!(none, DurableDelta::default(), "nothing changed since");
        let patch = SettingsPatch {
            target_on_site: Some(7),
            ..SettingsPatch::default()
        };
        node.change_settings(0, &patch, [0; 32]).unwrap();
        let delta = node.take_durable_delta().unwrap();
        assert!(delta.rest.is_some(), "the live settings changed");
        kept.apply(delta);
        assert_eq!(kept, node.durable());

        let (one, two) = (TicketId(1), TicketId(2));
        let left = |ticket, counted| KeptVisitor::Left {
            ticket,
            pass_expires: 10,
            forget_at: 20,
            counted,
        };
        let mut kept = Durable {
            visitors: vec![left(one, true), left(two, true)],
            ..Durable::default()
        };
        kept.apply(DurableDelta {
            visitors: vec![left(two, false)],
            rest: None,
        });
        assert_eq!(kept.visitors, [left(one, true), left(two, false)]);
    }
}
