//! When the node wants to be woken: one slot per kind of timer, as quinn-proto's `TimerTable`.
//!
//! The driver asks for the earliest deadline ([`TimerTable::next`], behind
//! `Node::poll_timeout`) and calls back once it has passed; the node then takes the due timers
//! one at a time ([`TimerTable::pop_due`]). Timers due at the same instant fire in the order of
//! [`Timer`]'s variants: a seed replays a run exactly only if that order never changes.

use std::collections::BTreeSet;

use waitingroom_core::Time;

/// A kind of timer, in firing order for equal deadlines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    /// An eviction interval boundary: the root starts a count (TAG), and every member checks
    /// that counts still come by (the watchdog).
    Evict,
    /// Expired tickets and passes leave the local waiting room.
    Cleanup,
    /// SWIM: probe the next member.
    Probe,
    /// SWIM: the direct probe with this nonce has had `probe_timeout_ms` to be answered; if it
    /// was not, others are asked to probe too.
    ProbeTimeout(u64),
    /// Reliable channel: resend what is unacknowledged. Armed only while something waits for
    /// an acknowledgement or the node is settling, so an idle cluster has no timer events.
    Retransmit,
    /// A joining node asks the next seed.
    JoinRetry,
    /// Ping a former member or a seed address outside the cluster, so that a healed partition
    /// merges.
    FormerProbe,
}

/// The pending deadline of every kind of timer.
#[derive(Debug, Clone, Default)]
pub(crate) struct TimerTable {
    evict: Option<Time>,
    cleanup: Option<Time>,
    probe: Option<Time>,
    /// With the nonce of the probe it belongs to.
    probe_timeout: Option<(Time, u64)>,
    retransmit: Option<Time>,
    /// A set, not a slot: a node that rejoins before the retry of its previous join has fired
    /// keeps that retry as well, and each re-arms itself until the node is a member again.
    /// One slot would drop the older one, which changes when join requests go out.
    join_retry: BTreeSet<Time>,
    former_probe: Option<Time>,
    /// The earliest of the above, kept on every change: asked after every visitor operation
    /// (`Node::poll_timeout`), where one field costs less than a look at all of them.
    earliest: Option<Time>,
}

impl TimerTable {
    /// Arms `timer` at `at`, replacing the pending deadline of its kind (join retries add up).
    pub(crate) fn set(&mut self, timer: Timer, at: Time) {
        match timer {
            Timer::Evict => self.evict = Some(at),
            Timer::Cleanup => self.cleanup = Some(at),
            Timer::Probe => self.probe = Some(at),
            Timer::ProbeTimeout(nonce) => self.probe_timeout = Some((at, nonce)),
            Timer::Retransmit => self.retransmit = Some(at),
            Timer::JoinRetry => {
                self.join_retry.insert(at);
            }
            Timer::FormerProbe => self.former_probe = Some(at),
        }
        self.earliest = self.fold();
    }

    /// Whether the retransmission timer is pending.
    pub(crate) fn retransmit_armed(&self) -> bool {
        self.retransmit.is_some()
    }

    /// When the earliest pending timer is due.
    pub(crate) fn next_at(&self) -> Option<Time> {
        self.earliest
    }

    /// The earliest pending time, folded from bare times rather than [`Self::next`]'s pairs
    /// (whose `flatten().min()` costs about four times the instructions). Lists the same slots
    /// as `next`; `next_at_is_the_time_of_next` keeps the two in step.
    fn fold(&self) -> Option<Time> {
        let earliest = |a: Option<Time>, b: Option<Time>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        [
            self.cleanup,
            self.probe,
            self.probe_timeout.map(|(t, _)| t),
            self.retransmit,
            self.join_retry.first().copied(),
            self.former_probe,
        ]
        .into_iter()
        .fold(self.evict, earliest)
    }

    /// The earliest pending timer: the first kind in [`Timer`] order among those due first.
    pub(crate) fn next(&self) -> Option<(Time, Timer)> {
        let pending = [
            self.evict.map(|t| (t, Timer::Evict)),
            self.cleanup.map(|t| (t, Timer::Cleanup)),
            self.probe.map(|t| (t, Timer::Probe)),
            self.probe_timeout.map(|(t, n)| (t, Timer::ProbeTimeout(n))),
            self.retransmit.map(|t| (t, Timer::Retransmit)),
            self.join_retry.first().map(|&t| (t, Timer::JoinRetry)),
            self.former_probe.map(|t| (t, Timer::FormerProbe)),
        ];
        pending.into_iter().flatten().min()
    }

    /// Takes the earliest timer if it is due at `now`.
    pub(crate) fn pop_due(&mut self, now: Time) -> Option<Timer> {
        let (due, timer) = self.next()?;
        if due > now {
            return None;
        }
        match timer {
            Timer::Evict => self.evict = None,
            Timer::Cleanup => self.cleanup = None,
            Timer::Probe => self.probe = None,
            Timer::ProbeTimeout(_) => self.probe_timeout = None,
            Timer::Retransmit => self.retransmit = None,
            Timer::JoinRetry => {
                self.join_retry.pop_first();
            }
            Timer::FormerProbe => self.former_probe = None,
        }
        self.earliest = self.fold();
        Some(timer)
    }

    /// Disarms every timer but the retransmission one (a stopped node still drains its links).
    pub(crate) fn keep_only_retransmit(&mut self) {
        *self = TimerTable {
            retransmit: self.retransmit,
            earliest: self.retransmit,
            ..TimerTable::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table with `armed` set, in that order.
    fn table(armed: &[(Timer, Time)]) -> TimerTable {
        let mut t = TimerTable::default();
        for &(timer, at) in armed {
            t.set(timer, at);
        }
        t
    }

    fn fire_all(t: &mut TimerTable, now: Time) -> Vec<Timer> {
        std::iter::from_fn(|| t.pop_due(now)).collect()
    }

    #[test]
    fn equal_deadlines_fire_in_kind_order() {
        let mut t = table(&[
            (Timer::FormerProbe, 100),
            (Timer::Retransmit, 100),
            (Timer::ProbeTimeout(7), 100),
            (Timer::Evict, 100),
            (Timer::Cleanup, 50),
        ]);
        assert_eq!(t.next(), Some((50, Timer::Cleanup)));
        assert_eq!(t.pop_due(49), None);
        let fired = fire_all(&mut t, 100);
        use Timer::*;
        assert_eq!(
            fired,
            [Cleanup, Evict, ProbeTimeout(7), Retransmit, FormerProbe]
        );
        assert_eq!(t.next(), None);
    }

    #[test]
    fn next_at_is_the_time_of_next() {
        use Timer::*;
        let kinds = [
            Evict,
            Cleanup,
            Probe,
            ProbeTimeout(3),
            Retransmit,
            JoinRetry,
            FormerProbe,
        ];
        assert_eq!(TimerTable::default().next_at(), None);
        // Every subset of kinds, each armed at a time of its own, earliest anywhere.
        for subset in 1u32..(1 << kinds.len()) {
            let armed: Vec<(Timer, Time)> = (0..kinds.len())
                .filter(|i| subset & (1 << i) != 0)
                .map(|i| (kinds[i], 100 + (i as Time * 37 + u64::from(subset)) % 11))
                .collect();
            let mut t = table(&armed);
            let mut stopped = t.clone();
            stopped.keep_only_retransmit();
            assert_eq!(stopped.next_at(), stopped.next().map(|(at, _)| at));
            // Also as they fire, one by one: the kept earliest follows every change.
            while t.next().is_some() {
                assert_eq!(t.next_at(), t.next().map(|(at, _)| at), "{armed:?}");
                t.pop_due(Time::MAX);
            }
            assert_eq!(t.next_at(), None, "{armed:?}");
        }
    }

    #[test]
    fn arming_again_replaces_except_join_retries() {
        let armed = [10, 20].map(|at| [(Timer::Probe, at), (Timer::JoinRetry, at)]);
        let mut t = table(armed.as_flattened());
        let fired = fire_all(&mut t, 20);
        assert_eq!(fired, [Timer::JoinRetry, Timer::Probe, Timer::JoinRetry]);
    }

    #[test]
    fn a_stopped_node_keeps_only_the_retransmission_timer() {
        let armed = [
            (Timer::Evict, 10),
            (Timer::JoinRetry, 10),
            (Timer::Retransmit, 30),
        ];
        let mut t = table(&armed);
        t.keep_only_retransmit();
        assert!(t.retransmit_armed());
        assert_eq!(fire_all(&mut t, 100), [Timer::Retransmit]);
    }
}
