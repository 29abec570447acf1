//! Departed places (waitingroom-distributed/README.md#departed-places; not in the thesis): passes
//! stay valid after the node that issued them is gone, but nobody counts them any more, so the
//! places a departed member held stay counted against the target until whatever it may still
//! have let out is gone, or until its process is counted again.
//!
//! Every member notes a departure when it applies the membership without the member; counts
//! carry each member's list up and results carry the root's down, so a new root keeps counting
//! it. A departure is known by its member and the membership version that removed it, and is
//! kept once whoever reports it.
//!
//! What a departure holds is what the member last reported plus what its grant allowed it to
//! let out since: its visitors on the site at its last count, its share of that round's
//! admissions and its part of the straight-through places (`Summary::places`). That bounds what
//! it can have let out since, because it lets anyone out only under a grant
//! (waitingroom-distributed/README.md#admission-leases): counting itself into a round gives up
//! what was left of the one before, and the grant of that round's result is those places, no
//! more, for a grant's life. A later round it missed granted it nothing (a grant is taken only
//! for the round it last counted itself into), and once it is gone no round counts it.
//!
//! A departed member whose *process* is counted again (it was paused, cut off or removed by
//! mistake, and rejoined under a new incarnation of the same life: `NodeCounts::lives` covers
//! the incarnation that departed) counts in its own room every visitor it let out, before the
//! departure and since: its departure holds nothing any more and is dropped at once
//! ([`DepartedPlaces::settle`]). A restarted process (a new life, with a higher first
//! incarnation) has forgotten its visitors, so its predecessor's departure stays counted until
//! it expires; one restored from its predecessor's state counts them and claims that life's
//! first incarnation (`node/durable.rs`). Incarnations only grow from one life of a node to the next, so no restarted
//! process can claim an earlier life's incarnation.

use waitingroom_core::{NodeId, Time};

use crate::live::InForce;
use crate::messages::{Departed, NodeCounts};

/// Departures remembered at most (a flapping member must not grow the list without bound).
const DEPARTED_KEPT: usize = 256;

/// The places departed members' visitors may still hold, as this node knows them.
#[derive(Debug, Clone, Default)]
pub(crate) struct DepartedPlaces {
    /// Places departed members' visitors may still hold, counted until their passes expire.
    departed: Vec<Departed>,
    /// Bumped whenever the list changes but by expiry (a restart keeps it: `node/durable.rs`).
    changes: u64,
}

impl DepartedPlaces {
    /// Moves whenever the list changed but by expiry.
    pub(crate) fn changes(&self) -> u64 {
        self.changes
    }

    /// The departures known, for a count or a result to carry.
    pub(crate) fn list(&self) -> &[Departed] {
        &self.departed
    }

    /// Departures a count or a result carried: each noted once.
    pub(crate) fn learn(&mut self, list: &[Departed]) {
        for &d in list.iter().take(DEPARTED_KEPT) {
            self.note_departed(d);
        }
    }

    /// The members `counted` in a round: the departures of lives whose process was counted
    /// (`NodeCounts::lives` covers the incarnation that departed) hold nothing any more, as
    /// that process counts what it let out itself. Returns how many were dropped.
    pub(crate) fn settle(&mut self, counted: &[NodeCounts]) -> usize {
        let before = self.departed.len();
        self.departed.retain(|d| {
            !counted.iter().any(|n| {
                n.node == d.node
                    && matches!((n.lives, d.incarnation), (Some((first, now)), Some(i))
                        if first <= i && i <= now)
            })
        });
        let dropped = before - self.departed.len();
        if dropped > 0 {
            self.changes += 1;
        }
        dropped
    }

    /// Visitors on the site at `now`, `on_site` of them counted, plus the places departed
    /// members may still hold (expired departures dropped).
    pub(crate) fn on_site(&mut self, now: Time, on_site: u64) -> u64 {
        self.departed.retain(|d| d.until > now);
        self.departed
            .iter()
            .fold(on_site, |sum, d| sum.saturating_add(d.places))
    }

    /// Member `node` (its life `incarnation`, if known) left with membership `version` at
    /// `now`, holding `places` at the last count: they stay counted for `expiry`
    /// ([`counted_for`]), or until that life is counted again ([`DepartedPlaces::settle`]).
    pub(crate) fn member_departed(
        &mut self,
        now: Time,
        (node, incarnation, version): (NodeId, Option<u64>, u64),
        places: u64,
        expiry: Time,
    ) {
        if places > 0 && expiry > 0 {
            self.note_departed(Departed {
                until: now.saturating_add(expiry),
                node,
                version,
                places,
                incarnation,
            });
        }
    }

    /// Records a departure once, whoever reports it (every member notes it, and results spread
    /// the root's list, so a new root still counts it).
    fn note_departed(&mut self, d: Departed) {
        let before = self.departed.len();
        let changed = match self
            .departed
            .iter_mut()
            .find(|k| k.node == d.node && k.version == d.version)
        {
            Some(k) => {
                let was = *k;
                k.until = k.until.max(d.until);
                k.places = k.places.max(d.places);
                // Reports that disagree on the life: none is sure, so it waits to expire.
                if k.incarnation != d.incarnation {
                    k.incarnation = None;
                }
                was != *k
            }
            None => {
                self.departed.push(d);
                true
            }
        };
        if changed || self.departed.len() != before {
            self.changes += 1;
        }
        if self.departed.len() > DEPARTED_KEPT {
            // Keep the ones that hold places longest.
            self.departed.sort_unstable_by(|a, b| b.cmp(a));
            self.departed.truncate(DEPARTED_KEPT);
        }
    }
}

/// How long a departed member's places stay counted. It may be alive and cut off: it may
/// spend its grant until that expires (a grant's life after its last count, which came
/// before the departure); a visitor it let out then holds the place for a ticket's life
/// until they get a pass, which lasts a pass's life (passes are extended only under a live
/// grant; the longest pass expiry in force since this node started, as an operator may have
/// shortened it after those passes were issued). Plus 1% for the rate at which its clock
/// and ours may drift apart (quartz clocks drift by well under 0.01%) and an interval to
/// spare.
pub(crate) fn counted_for(grant_life: Time, in_force: &InForce) -> Time {
    let s = in_force.settings();
    let life = grant_life
        .saturating_add(s.ticket_expiry_ms)
        .saturating_add(in_force.longest_pass_expiry());
    life.saturating_add(life / 100)
        .saturating_add(s.eviction_interval_ms)
}

#[cfg(test)]
mod tests {
    use waitingroom_core::Settings;

    use super::*;
    use crate::lease::Lease;
    use crate::live::Change;
    use crate::patch::SettingsPatch;
    use crate::testing;

    fn departed(node: u64, version: u64, until: Time, places: u64) -> Departed {
        Departed {
            until,
            node: NodeId(node),
            version,
            places,
            incarnation: None,
        }
    }

    /// A departure is counted once whoever reports it, for the longest and most places any
    /// report gives, and until it expires.
    #[test]
    fn a_departure_is_counted_once_until_it_expires() {
        let mut d = DepartedPlaces::default();
        d.member_departed(1_000, (NodeId(2), None, 5), 3, 4_000);
        d.learn(&[departed(2, 5, 6_000, 2), departed(3, 5, 2_000, 1)]);
        assert_eq!(
            d.list(),
            [departed(2, 5, 6_000, 3), departed(3, 5, 2_000, 1)]
        );
        assert_eq!(d.on_site(1_999, 10), 14);
        assert_eq!(d.on_site(2_000, 10), 13, "node 3's places expired");
        assert_eq!(d.list().len(), 1);
        d.member_departed(2_000, (NodeId(4), None, 6), 0, 4_000);
        d.member_departed(2_000, (NodeId(4), None, 6), 2, 0);
        assert_eq!(d.list().len(), 1, "nothing held, or nothing to wait for");
        assert_eq!(d.on_site(6_000, 10), 10);
    }

    /// A departed life whose process is counted again holds nothing any more; a restarted
    /// process (a later first incarnation), a life not known, or a node that does not say
    /// which lives it had, leaves the departure counted.
    #[test]
    fn a_departure_is_settled_when_its_process_is_counted_again() {
        let counted = |node: u64, lives: Option<(u64, u64)>| NodeCounts {
            node: NodeId(node),
            on_site: 0,
            eligible: 0,
            lives,
        };
        let mut d = DepartedPlaces::default();
        d.member_departed(1_000, (NodeId(2), Some(7), 5), 3, 60_000);
        d.member_departed(1_000, (NodeId(3), None, 5), 3, 60_000);
        assert_eq!(
            d.settle(&[counted(2, Some((8, 9)))]),
            0,
            "a restarted process"
        );
        assert_eq!(d.settle(&[counted(2, None)]), 0, "says nothing");
        assert_eq!(d.settle(&[counted(3, Some((1, 9)))]), 0, "life unknown");
        assert_eq!(d.on_site(2_000, 0), 6);
        assert_eq!(
            d.settle(&[counted(2, Some((7, 8)))]),
            1,
            "rejoined, same process"
        );
        assert_eq!(d.on_site(2_000, 0), 3);
        // Two reports that disagree on the life: it waits to expire.
        d.member_departed(1_000, (NodeId(4), Some(1), 6), 2, 60_000);
        d.learn(&[Departed {
            incarnation: Some(2),
            ..departed(4, 6, 61_000, 2)
        }]);
        assert_eq!(d.settle(&[counted(4, Some((1, 2)))]), 0);
    }

    /// Past the bound, the departures that hold places longest are kept.
    #[test]
    fn the_longest_held_are_kept() {
        let mut d = DepartedPlaces::default();
        let many: Vec<Departed> = (0..=DEPARTED_KEPT as u64)
            .map(|i| departed(i + 1, 1, 1_000 + i, 1))
            .collect();
        d.learn(&many[..DEPARTED_KEPT]);
        d.learn(&many[DEPARTED_KEPT..]);
        assert_eq!(d.list().len(), DEPARTED_KEPT);
        assert!(
            d.list().iter().all(|k| k.until > 1_000),
            "the soonest to expire went"
        );
    }

    /// waitingroom-distributed/README.md#live-settings: passes issued before an operator shortened
    /// the pass expiry still live the old expiry, so a departed member's places stay counted for
    /// it; a longer one counts at once.
    #[test]
    fn departed_places_count_the_longest_pass_expiry_in_force() {
        let settings = Settings {
            target_on_site: 10,
            pass_expiry_ms: 10_000,
            pass_max_lifetime_ms: 60_000,
            ..testing::queued_settings()
        };
        let cfg = testing::config(1, 1, settings);
        let mut in_force = InForce::new(&cfg.settings, cfg.live());
        let life = Lease::new(cfg.settings.eviction_interval_ms).life();
        let before = counted_for(life, &in_force);
        let shorter = SettingsPatch {
            pass_expiry_ms: Some(1_000),
            ..SettingsPatch::default()
        };
        in_force
            .change(Change::Patch(shorter, (NodeId(1), 0, [0; 32])))
            .unwrap();
        assert_eq!(in_force.settings().pass_expiry_ms, 1_000);
        assert_eq!(counted_for(life, &in_force), before);
        let longer = SettingsPatch {
            pass_expiry_ms: Some(20_000),
            ..SettingsPatch::default()
        };
        in_force
            .change(Change::Patch(longer, (NodeId(1), 0, [0; 32])))
            .unwrap();
        assert!(counted_for(life, &in_force) > before);
    }
}
