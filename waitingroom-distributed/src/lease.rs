//! Admission leases: a member lets visitors out only while it holds an unexpired grant of
//! places from the root, and only up to it (waitingroom-distributed/README.md#admission-leases; the
//! thesis lets every node act on the last count it heard, §4.5.3, which a paused or cut-off node
//! believes for ever).
//!
//! A node *asks* for places by counting itself into a round (TAG, §4.5.2): at that moment it
//! gives up what is left of its grant, because the figures it reports are what the root will
//! grant against. The grant that round's result brings lives [`GRANT_INTERVALS`] eviction
//! intervals from that moment, measured on this node's own clock. A process that was paused,
//! swapped out or cut off therefore resumes with an expired grant, and a late result cannot
//! revive it: a grant is taken only for the round this node last counted itself into.
//!
//! A round whose result never reached this node (its root died or was cut off mid-round) may
//! still have granted places to the root and to members that heard it: nobody here knows how
//! many. Such a *lost round* is held against the site until every grant it could have made has
//! expired ([`Lease::lost_rounds`]); the counts carry the list up, and the next root that
//! decides while one is live grants nothing
//! (waitingroom-distributed/README.md#4-a-lost-round-counts-as-spent).

use serde::{Deserialize, Serialize};
use waitingroom_core::{NodeId, Time};

use crate::live::InForce;
use crate::messages::{LostRound, Stamp, Summary};
use crate::patch::Mode;

/// How many eviction intervals a grant lives, counted from the moment its holder asked. Rounds
/// start every interval, so a healthy node always holds a live grant; a result slower than two
/// intervals lets it lapse (the node pauses until the next one).
pub const GRANT_INTERVALS: u64 = 3;

/// Most lost rounds a node keeps: past it, the two that expire first merge into one that names
/// no round (and so no root can settle it) and lives as long as the longer of them.
pub const LOST_KEPT: usize = 16;

/// Why a node does not let visitors out at the moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pause {
    /// It holds no live grant (it was paused or cut off, or has not counted in a round yet).
    NoGrant,
    /// The root it hears from does not hear from a majority of the voters.
    NoMajority,
    /// A round whose result was lost may still have granted places nobody knows of: the root
    /// grants nothing until those have expired.
    LostRound,
}

impl Pause {
    /// Stable label (metrics, logs, `/api/cluster`).
    pub fn as_str(self) -> &'static str {
        match self {
            Pause::NoGrant => "no_grant",
            Pause::NoMajority => "no_majority",
            Pause::LostRound => "lost_round",
        }
    }
}

/// How a visitor was let straight through at join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Through {
    /// Under the grant of this recorded round, which their pass names
    /// (waitingroom-distributed/README.md#fairness-records).
    Granted(u64),
    /// Without a place: passthrough, or no limit on the site.
    Unplaced,
}

/// This node's grant.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lease {
    /// How long a grant lives, from the moment its holder asked.
    life: Time,
    /// Longest a root takes from counting itself in to deciding, and still grants (one eviction
    /// interval): every member of a round that grants asked within this of its root.
    round_limit: Time,
    /// The round this node last counted itself into, and when (its own clock).
    asked: Option<(Stamp, Time)>,
    /// Places left in the grant.
    places: u64,
    /// When the round whose result gave the grant was decided (its `Stamp::time`, its
    /// record's `decided_at_ms`): a visitor let straight through under it names that round.
    granted_at: Time,
    /// When the latest grant expires (0: never granted). Kept when the places are given up:
    /// passes may be refreshed until then (see [`Lease::is_live`]).
    expires: Time,
    /// Rounds whose result this node has not heard (asked in, or learned of from a result),
    /// and when any grant they made has surely expired (this node's clock).
    lost: Vec<(Stamp, Time)>,
}

impl Lease {
    /// The lease of a node whose rounds start every `interval`.
    pub(crate) fn new(interval: Time) -> Lease {
        Lease {
            life: GRANT_INTERVALS.saturating_mul(interval),
            round_limit: interval,
            ..Lease::default()
        }
    }

    /// How long a grant lives.
    pub(crate) fn life(&self) -> Time {
        self.life
    }

    /// This node counts itself into round `stamp` at `now`: what is left of its grant is given
    /// up (the root grants against the figures counted now).
    ///
    /// Until its result comes the round counts as lost, for as long as any grant it makes may
    /// live: its root asked before this node did, and every other member asked before the root
    /// decided, within [`Lease::round_limit`] of the root asking (a slower round grants nothing),
    /// so every grant expires within `life + round_limit` of now, plus 1% for the rate at which
    /// two clocks may drift apart.
    pub(crate) fn ask(&mut self, stamp: Stamp, now: Time) {
        self.asked = Some((stamp, now));
        self.places = 0;
        let span = self.life.saturating_add(self.round_limit);
        self.note_lost(stamp, now.saturating_add(span.saturating_add(span / 100)));
    }

    /// When this node counted itself into round `stamp`, if that is the round it last asked in.
    pub(crate) fn asked_at(&self, stamp: Stamp) -> Option<Time> {
        self.asked.filter(|(s, _)| *s == stamp).map(|(_, at)| at)
    }

    /// Whether a root that counted itself into its round at `asked` may still grant at `now`.
    pub(crate) fn in_time(&self, asked: Time, now: Time) -> bool {
        now.saturating_sub(asked) <= self.round_limit
    }

    /// The result of round `stamp` grants `places` (None: the root has no majority). Taken only
    /// for the round this node last asked in, and living from when it asked. Returns whether
    /// it was taken.
    pub(crate) fn grant(&mut self, stamp: Stamp, places: Option<u64>) -> bool {
        self.lost.retain(|(s, _)| *s != stamp);
        match (self.asked, places) {
            (Some((asked, at)), Some(places)) if asked == stamp => {
                self.places = places;
                self.granted_at = stamp.time;
                self.expires = at.saturating_add(self.life);
                true
            }
            _ => false,
        }
    }

    /// A round's result reached this node at `now`: the places it grants `me` (taken as
    /// [`Lease::grant`] says; none when its root had no majority), and the lost rounds it
    /// tells of.
    pub(crate) fn take_result(&mut self, now: Time, me: NodeId, summary: &Summary) {
        let mine = summary.grants.as_ref().map(|grants| {
            grants
                .iter()
                .find(|(n, _)| *n == me)
                .map_or(0, |&(_, places)| places)
        });
        self.grant(summary.stamp, mine);
        self.learn_lost(now, &summary.lost);
    }

    /// Whether the latest grant has not expired at `now`. A pass is refreshed only then: a node
    /// cut off from the majority stops extending passes once its grant lapses, so the places the
    /// others count for it run out when its passes do.
    pub(crate) fn is_live(&self, now: Time) -> bool {
        now < self.expires
    }

    /// Places this node may still give out at `now`.
    pub(crate) fn places(&self, now: Time) -> u64 {
        if self.is_live(now) { self.places } else { 0 }
    }

    /// When the latest grant expires (0: never granted).
    pub(crate) fn expires(&self) -> Time {
        self.expires
    }

    /// Lost rounds a result told of (`remaining` from now): held here too, so that they
    /// outlive the root that learned of them.
    pub(crate) fn learn_lost(&mut self, now: Time, lost: &[LostRound]) {
        for l in lost.iter().take(LOST_KEPT) {
            self.note_lost(l.stamp, now.saturating_add(l.remaining_ms));
        }
    }

    /// The lost rounds live at `now` but `except` (the round being counted, which its root
    /// knows), with the time each has left.
    pub(crate) fn lost_rounds(&mut self, now: Time, except: Option<Stamp>) -> Vec<LostRound> {
        self.lost.retain(|&(_, until)| until > now);
        self.lost
            .iter()
            .filter(|(s, _)| Some(*s) != except)
            .map(|&(stamp, until)| LostRound {
                stamp,
                remaining_ms: until - now,
            })
            .collect()
    }

    /// Holds round `stamp` as lost until `until`; past [`LOST_KEPT`], the two that expire
    /// first become one that no root can settle.
    fn note_lost(&mut self, stamp: Stamp, until: Time) {
        match self.lost.iter_mut().find(|(s, _)| *s == stamp) {
            Some(k) => k.1 = k.1.max(until),
            None => self.lost.push((stamp, until)),
        }
        if self.lost.len() > LOST_KEPT {
            self.lost.sort_unstable_by_key(|&(_, until)| until);
            let (_, first) = self.lost.remove(0);
            self.lost[0] = (Stamp::NONE, self.lost[0].1.max(first));
        }
    }

    /// Takes one place to let a visitor out at `now`. Returns whether there was one.
    pub(crate) fn take(&mut self, now: Time) -> bool {
        let ok = self.places(now) > 0;
        if ok {
            self.places -= 1;
        }
        ok
    }

    /// Takes one straight-through place for a visitor joining an empty queue (`queued_here`
    /// wait here): only while the last count (`last`) let everyone in and this node's grant
    /// has a place left, and only under the grant of a recorded round (`recorded`: the round
    /// decided at a time, if this node knows its record), which their pass then names.
    /// Passthrough lets everyone through (under a live grant, unless the file sets no limit
    /// either: `InForce::unguarded`), and with no limit on the site nobody needs a place.
    pub(crate) fn take_place(
        &mut self,
        now: Time,
        (queued_here, last): (u64, Option<&Summary>),
        settings: &InForce,
        recorded: impl FnOnce(Time) -> Option<u64>,
    ) -> Option<Through> {
        let everyone_in = last.is_some_and(|s| s.queued <= s.admitted && s.grants.is_some());
        if settings.current().mode == Mode::Passthrough {
            return (settings.unguarded() || self.is_live(now)).then_some(Through::Unplaced);
        }
        if !settings.settings().admit_straight_through || queued_here > 0 || !everyone_in {
            return None;
        }
        if settings.unlimited() {
            return Some(Through::Unplaced);
        }
        let round = recorded(self.granted_at)?;
        self.take(now).then_some(Through::Granted(round))
    }

    /// Why this node lets nobody out at `now`, if it does not, with a limit on the site: the
    /// last result (`last`) came from a root without a majority or held a lost round back, or
    /// its grant has lapsed.
    pub(crate) fn pause(&self, now: Time, last: Option<&Summary>) -> Option<Pause> {
        if last.is_some_and(|s| s.grants.is_none()) {
            return Some(Pause::NoMajority);
        }
        if last.is_some_and(|s| !s.lost.is_empty()) {
            return Some(Pause::LostRound);
        }
        (!self.is_live(now)).then_some(Pause::NoGrant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::LiveSettings;
    use crate::messages::LostRound;
    use crate::testing::stamp;

    /// A grant lives from the moment its holder asked, so time spent waiting for the result
    /// (or frozen) is spent from the grant.
    #[test]
    fn a_grant_lives_from_when_its_holder_asked() {
        let mut lease = Lease::new(1_000);
        lease.ask(stamp(1_000), 1_010);
        assert!(lease.grant(stamp(1_000), Some(2)));
        assert_eq!(lease.places(1_500), 2);
        assert!(lease.take(4_009));
        assert!(!lease.is_live(4_010));
        assert!(!lease.take(4_010), "expired at ask + life");
        assert_eq!(lease.places(4_010), 0);
    }

    #[test]
    fn places_run_out() {
        let mut lease = Lease::new(1_000);
        lease.ask(stamp(1_000), 1_000);
        lease.grant(stamp(1_000), Some(1));
        assert!(lease.take(1_001));
        assert!(!lease.take(1_002));
        assert!(lease.is_live(1_002), "refreshes still allowed");
    }

    /// Asking again gives up the places left: the root grants against the new figures.
    #[test]
    fn asking_again_gives_up_what_is_left() {
        let mut lease = Lease::new(1_000);
        lease.ask(stamp(1_000), 1_000);
        lease.grant(stamp(1_000), Some(5));
        lease.ask(stamp(2_000), 2_000);
        assert_eq!(lease.places(2_001), 0);
        assert!(lease.is_live(2_001));
    }

    /// A result that arrives after the node asked in a newer round (or never asked) grants
    /// nothing; nor does a root without a majority.
    #[test]
    fn only_the_round_asked_in_grants() {
        let mut lease = Lease::new(1_000);
        assert!(!lease.grant(stamp(1_000), Some(5)));
        lease.ask(stamp(1_000), 1_000);
        lease.ask(stamp(2_000), 2_000);
        assert!(!lease.grant(stamp(1_000), Some(5)));
        assert!(!lease.grant(stamp(2_000), None));
        assert_eq!(lease.places(2_001), 0);
        assert!(!lease.is_live(2_001));
    }

    /// Passthrough lifted by the live settings over a file with a target lets visitors
    /// through only under a live grant: a node cut off from the majority never hears the
    /// operator put the limit back. With no target in the file either, nothing is guarded.
    #[test]
    fn passthrough_over_a_limit_lets_through_only_under_a_live_grant() {
        use waitingroom_core::Settings;
        let through = |file: &Settings, lease: &mut Lease, now: Time| {
            let live = LiveSettings::from_file(file, Mode::Passthrough, None);
            let settings = InForce::new(file, live);
            (lease.take_place(now, (0, None), &settings, |_| None)).is_some()
        };
        let limited = Settings {
            target_on_site: 5,
            ..Settings::default()
        };
        let mut lease = Lease::new(1_000);
        assert!(!through(&limited, &mut lease, 1_000), "never granted");
        lease.ask(stamp(1_000), 1_000);
        lease.grant(stamp(1_000), Some(0));
        assert!(through(&limited, &mut lease, 3_999), "no place needed");
        assert!(!through(&limited, &mut lease, 4_000), "the grant lapsed");
        let unlimited = Settings {
            target_on_site: Settings::UNLIMITED,
            ..Settings::default()
        };
        assert!(through(&unlimited, &mut lease, 4_000));
    }

    /// A round whose result never came is held as lost for a grant's life plus the longest a
    /// round may take, plus 1% (here 3000 + 1000 + 40 from when this node asked); once its
    /// result comes it is not lost.
    #[test]
    fn a_round_without_its_result_is_lost_until_its_grants_expire() {
        let mut lease = Lease::new(1_000);
        lease.ask(stamp(1_000), 1_010);
        let lost = LostRound {
            stamp: stamp(1_000),
            remaining_ms: 4_040,
        };
        assert_eq!(lease.lost_rounds(1_010, None), [lost]);
        assert_eq!(
            lease.lost_rounds(1_010, Some(stamp(1_000))),
            [],
            "being counted"
        );
        assert_eq!(lease.lost_rounds(5_049, None).len(), 1);
        assert_eq!(lease.lost_rounds(5_050, None), []);
        lease.ask(stamp(6_000), 6_000);
        lease.grant(stamp(6_000), Some(1));
        assert_eq!(lease.lost_rounds(6_001, None), [], "its result came");
        assert!(lease.in_time(6_000, 7_000) && !lease.in_time(6_000, 7_001));
    }

    /// Lost rounds told of are held from when they were heard; past the bound, the two that
    /// expire first become one that names no round and lives as long as the longer.
    #[test]
    fn lost_rounds_told_of_are_held_and_bounded() {
        let mut lease = Lease::new(1_000);
        let told: Vec<LostRound> = (1..=LOST_KEPT as u64 + 1)
            .map(|i| LostRound {
                stamp: stamp(i * 1_000),
                remaining_ms: i,
            })
            .collect();
        let (first, last) = told.split_at(LOST_KEPT);
        lease.learn_lost(100, first);
        lease.learn_lost(100, last);
        let held = lease.lost_rounds(100, None);
        assert_eq!(held.len(), LOST_KEPT);
        let merged = held
            .iter()
            .find(|l| l.stamp == Stamp::NONE)
            .expect("merged");
        assert_eq!(merged.remaining_ms, 2);
        assert_eq!(
            held.iter().map(|l| l.remaining_ms).max(),
            Some(LOST_KEPT as u64 + 1)
        );
    }
}
