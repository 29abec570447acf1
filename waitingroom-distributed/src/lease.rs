//! Admission leases: a member lets visitors out only while it holds an unexpired grant of
//! places from the root, and only up to it (README, "Admission leases"; the thesis lets every
//! node act on the last count it heard, §4.5.3, which a paused or cut-off node believes for ever).
//!
//! A node *asks* for places by counting itself into a round (TAG, §4.5.2): at that moment it
//! gives up what is left of its grant, because the figures it reports are what the root will
//! grant against. The grant that round's result brings lives [`GRANT_INTERVALS`] eviction
//! intervals from that moment, measured on this node's own clock. A process that was paused,
//! swapped out or cut off therefore resumes with an expired grant, and a late result cannot
//! revive it: a grant is taken only for the round this node last counted itself into.

use serde::{Deserialize, Serialize};
use waitingroom_core::Time;

use crate::messages::Stamp;

/// How many eviction intervals a grant lives, counted from the moment its holder asked. Rounds
/// start every interval, so a healthy node always holds a live grant; a result slower than two
/// intervals lets it lapse (the node pauses until the next one).
pub const GRANT_INTERVALS: u64 = 3;

/// Why a node does not let visitors out at the moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pause {
    /// It holds no live grant (it was paused or cut off, or has not counted in a round yet).
    NoGrant,
    /// The root it hears from does not hear from a majority of the voters.
    NoMajority,
}

impl Pause {
    /// Stable label (metrics, logs, `/api/cluster`).
    pub fn as_str(self) -> &'static str {
        match self {
            Pause::NoGrant => "no_grant",
            Pause::NoMajority => "no_majority",
        }
    }
}

/// This node's grant.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lease {
    /// How long a grant lives, from the moment its holder asked.
    life: Time,
    /// The round this node last counted itself into, and when (its own clock).
    asked: Option<(Stamp, Time)>,
    /// Places left in the grant.
    places: u64,
    /// When the latest grant expires (0: never granted). Kept when the places are given up:
    /// passes may be refreshed until then (see [`Lease::is_live`]).
    expires: Time,
}

impl Lease {
    pub(crate) fn new(life: Time) -> Lease {
        Lease {
            life,
            ..Lease::default()
        }
    }

    /// How long a grant lives.
    pub(crate) fn life(&self) -> Time {
        self.life
    }

    /// This node counts itself into round `stamp` at `now`: what is left of its grant is given
    /// up (the root grants against the figures counted now).
    pub(crate) fn ask(&mut self, stamp: Stamp, now: Time) {
        self.asked = Some((stamp, now));
        self.places = 0;
    }

    /// The result of round `stamp` grants `places` (None: the root has no majority). Taken only
    /// for the round this node last asked in, and living from when it asked. Returns whether
    /// it was taken.
    pub(crate) fn grant(&mut self, stamp: Stamp, places: Option<u64>) -> bool {
        match (self.asked, places) {
            (Some((asked, at)), Some(places)) if asked == stamp => {
                self.places = places;
                self.expires = at.saturating_add(self.life);
                true
            }
            _ => false,
        }
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

    /// Takes one place to let a visitor out at `now`. Returns whether there was one.
    pub(crate) fn take(&mut self, now: Time) -> bool {
        let ok = self.places(now) > 0;
        if ok {
            self.places -= 1;
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use waitingroom_core::NodeId;

    use super::*;

    fn stamp(time: Time) -> Stamp {
        Stamp {
            time,
            origin: NodeId(1),
        }
    }

    /// A grant lives from the moment its holder asked, so time spent waiting for the result
    /// (or frozen) is spent from the grant.
    #[test]
    fn a_grant_lives_from_when_its_holder_asked() {
        let mut lease = Lease::new(3_000);
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
        let mut lease = Lease::new(3_000);
        lease.ask(stamp(1_000), 1_000);
        lease.grant(stamp(1_000), Some(1));
        assert!(lease.take(1_001));
        assert!(!lease.take(1_002));
        assert!(lease.is_live(1_002), "refreshes still allowed");
    }

    /// Asking again gives up the places left: the root grants against the new figures.
    #[test]
    fn asking_again_gives_up_what_is_left() {
        let mut lease = Lease::new(3_000);
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
        let mut lease = Lease::new(3_000);
        assert!(!lease.grant(stamp(1_000), Some(5)));
        lease.ask(stamp(1_000), 1_000);
        lease.ask(stamp(2_000), 2_000);
        assert!(!lease.grant(stamp(1_000), Some(5)));
        assert!(!lease.grant(stamp(2_000), None));
        assert_eq!(lease.places(2_001), 0);
        assert!(!lease.is_live(2_001));
    }
}
