//! The nonces of the peer requests accepted lately, so a captured request cannot be sent again
//! while its timestamp is still acceptable (see [`super::auth`]).
//!
//! A request is accepted only while its signed timestamp `ts` is within `window` of the
//! receiver's clock, so a copy of it can pass that check until the clock reads `ts + window`.
//! Its nonce is kept exactly that long: until the clock has passed `ts + window` (a min-heap by
//! that time). The latest `ts` forgotten so far is remembered too, and a request stamped no
//! later than that is refused: so a clock that steps back cannot reopen the window of a nonce
//! already forgotten. (That refusal never touches an honest request while the clock does not
//! step back: a nonce is forgotten only once the clock is past `ts + window`, so the floor stays
//! more than `window` behind the clock, where the window check refuses anyway.)
//!
//! Memory is bounded: at most `capacity` nonces (about 40 bytes each: a slot in the set and one
//! in the heap). A nonce lives at most `2·window` (its `ts` is at most `window` ahead of the
//! clock). When the cache is full of nonces still within their time, a new request is refused
//! ([`Admit::Full`], answered 503 with `Retry-After`) rather than the cache grown or a live
//! nonce forgotten — forgetting one would let that request be replayed. Only authenticated
//! requests reach the cache, so only cluster members can fill it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::sync::{Mutex, PoisonError};

use waitingroom_core::Time;

/// What the cache says about a request's nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Not seen within its time: remembered from now on.
    Fresh,
    /// Seen before, and still within its time: a replay.
    Replayed,
    /// Stamped no later than a request already forgotten (the clock stepped back): it cannot
    /// be told from a replay.
    TooOld,
    /// Not seen, but the cache is full of unexpired nonces: cannot be checked now.
    Full,
}

/// Recently accepted nonces, bounded (see the module).
#[derive(Debug)]
pub struct ReplayCache {
    capacity: usize,
    window_ms: Time,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    seen: HashSet<u64>,
    /// (forget once the clock is past this, nonce), soonest first.
    expiries: BinaryHeap<Reverse<(Time, u64)>>,
    /// The latest timestamp of a forgotten nonce.
    floor: Option<Time>,
}

impl ReplayCache {
    /// A cache of at most `capacity` nonces for requests accepted within `window_ms` of the
    /// clock.
    pub fn new(capacity: usize, window_ms: Time) -> Self {
        ReplayCache {
            capacity,
            window_ms,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Checks the nonce of a request stamped `timestamp` (already found within the window of
    /// `now`), remembering it when it is fresh.
    pub fn admit(&self, nonce: u64, timestamp: Time, now: Time) -> Admit {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.forget_until(now, self.window_ms);
        if inner.seen.contains(&nonce) {
            return Admit::Replayed;
        }
        if inner.floor.is_some_and(|floor| timestamp <= floor) {
            return Admit::TooOld;
        }
        if inner.seen.len() >= self.capacity {
            return Admit::Full;
        }
        inner.seen.insert(nonce);
        let until = timestamp.saturating_add(self.window_ms);
        inner.expiries.push(Reverse((until, nonce)));
        Admit::Fresh
    }

    /// Nonces remembered now.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .seen
            .len()
    }

    /// Whether no nonce is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    /// Forgets every nonce whose request the window check refuses from `now` on.
    fn forget_until(&mut self, now: Time, window_ms: Time) {
        while let Some(&Reverse((until, nonce))) = self.expiries.peek() {
            if until >= now {
                break;
            }
            self.expiries.pop();
            self.seen.remove(&nonce);
            let timestamp = until.saturating_sub(window_ms);
            self.floor = Some(self.floor.map_or(timestamp, |f| f.max(timestamp)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nonce_is_refused_while_its_timestamp_is_acceptable_then_forgotten() {
        let c = ReplayCache::new(10, 1_000);
        assert_eq!(c.admit(1, 5_500, 5_000), Admit::Fresh);
        assert_eq!(c.admit(1, 5_500, 5_000), Admit::Replayed);
        // A copy stamped 5_500 passes the window check until 6_500.
        assert_eq!(c.admit(1, 5_500, 6_500), Admit::Replayed);
        assert_eq!(c.admit(2, 6_000, 6_501), Admit::Fresh);
        assert_eq!(c.len(), 1, "nonce 1 forgotten");
    }

    #[test]
    fn full_of_live_nonces_it_refuses_rather_than_grows_or_forgets() {
        let c = ReplayCache::new(3, 1_000);
        for n in 0..3 {
            assert_eq!(c.admit(n, 100, 100), Admit::Fresh);
        }
        assert_eq!(c.admit(9, 200, 200), Admit::Full);
        assert_eq!(
            c.admit(0, 100, 200),
            Admit::Replayed,
            "a full cache still knows its nonces"
        );
        assert_eq!(c.len(), 3);
        // Once the oldest expire there is room again.
        assert_eq!(c.admit(9, 1_101, 1_101), Admit::Fresh);
        assert_eq!(c.len(), 1);
    }

    /// The clock passes a nonce's time (it is forgotten), then steps back to where a copy of
    /// its request would pass the window check again: the copy is refused anyway.
    #[test]
    fn a_clock_stepping_back_does_not_reopen_a_forgotten_nonce() {
        let c = ReplayCache::new(10, 1_000);
        assert_eq!(c.admit(1, 10_000, 10_000), Admit::Fresh);
        assert_eq!(c.admit(2, 11_500, 11_500), Admit::Fresh);
        assert_eq!(c.len(), 1, "nonce 1 forgotten at 11_500");
        assert_eq!(c.admit(1, 10_000, 10_500), Admit::TooOld);
        // Requests stamped later than anything forgotten still pass.
        assert_eq!(c.admit(3, 10_001, 10_500), Admit::Fresh);
    }
}
