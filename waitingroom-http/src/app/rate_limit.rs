//! The per-client join limit: a token bucket per client address (see [`RateLimiter`]).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use waitingroom_core::Time;

/// A token bucket per client: it holds at most `burst` joins and refills at `rate` per second.
/// Rate 0 disables it.
///
/// Each node keeps its own buckets: behind a balancer spreading one client over N nodes, that
/// client gets up to N times the rate.
///
/// Memory is bounded: when the table grows past [`RateLimiter::MAX_CLIENTS`] every client whose
/// bucket is full again is forgotten (a full bucket is the same as no entry).
#[derive(Debug)]
pub struct RateLimiter {
    rate: u32,
    burst: u32,
    buckets: Mutex<HashMap<String, (f64, Time)>>,
}

impl RateLimiter {
    /// Most clients remembered before a sweep.
    pub const MAX_CLIENTS: usize = 100_000;

    /// A limiter allowing `rate` per second per client in bursts of up to `burst` (at least
    /// one); rate 0: unlimited.
    pub fn new(rate: u32, burst: u32) -> Self {
        RateLimiter {
            rate,
            burst: burst.max(1),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `client` may act now; takes a token when it may.
    pub fn allow(&self, client: &str, now: Time) -> bool {
        if self.rate == 0 {
            return true;
        }
        let rate = f64::from(self.rate);
        let burst = f64::from(self.burst);
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if buckets.len() >= Self::MAX_CLIENTS && !buckets.contains_key(client) {
            // A bucket untouched this long is full again: the same as no entry.
            let full_after_ms = burst / rate * 1000.0;
            buckets.retain(|_, (_, last)| (now.saturating_sub(*last) as f64) < full_after_ms);
            if buckets.len() >= Self::MAX_CLIENTS {
                // Still full of active clients: refuse newcomers rather than grow.
                return false;
            }
        }
        let (tokens, last) = buckets.entry(client.to_owned()).or_insert((burst, now));
        let elapsed = now.saturating_sub(*last) as f64 / 1000.0;
        *tokens = (*tokens + elapsed * rate).min(burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_refills() {
        let l = RateLimiter::new(2, 2);
        assert!(l.allow("a", 0));
        assert!(l.allow("a", 0));
        assert!(!l.allow("a", 0));
        assert!(l.allow("b", 0), "other clients are not affected");
        assert!(l.allow("a", 500));
        assert!(!l.allow("a", 500));
        assert!(RateLimiter::new(0, 0).allow("a", 0));
    }

    #[test]
    fn bursts_up_to_the_burst_then_the_rate() {
        let l = RateLimiter::new(20, 40);
        assert_eq!((0..100).filter(|_| l.allow("a", 0)).count(), 40);
        // One more every 50 ms; never more than the burst however long the pause.
        assert!(l.allow("a", 50));
        assert!(!l.allow("a", 50));
        assert_eq!((0..100).filter(|_| l.allow("a", 60_000)).count(), 40);
    }
}
