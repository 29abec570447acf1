//! The one clock the server reads. The protocol never reads a clock: every call into it gets
//! `now` from here, and so do token checks, peer signatures and the rate limiter.

use std::time::{SystemTime, UNIX_EPOCH};

use waitingroom_core::Time;

/// Unix time in milliseconds. Nodes compare these across machines (ticket expiry, signed peer
/// requests), so it is wall-clock time, not a monotonic clock.
pub fn now_ms() -> Time {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as Time)
}
