//! The one clock the server reads. The protocol never reads a clock: every call into it gets
//! `now` from here, and so do token checks, peer signatures and the rate limiter.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use waitingroom_core::Time;

/// Milliseconds since the Unix epoch, read as the wall clock at the first call plus the
/// monotonic time elapsed since. Nodes compare these across machines (ticket expiry, signed
/// peer requests), so they start from wall-clock time; the protocol measures its admission
/// grants with them (waitingroom-distributed/README.md#admission-leases), so they never go
/// back and they count the time a process was stopped or swapped out, whatever the wall clock
/// does meanwhile. A wall clock stepped later (NTP) is not followed until a restart: the drift
/// of a monotonic clock is far below the protocol's margins.
pub fn now_ms() -> Time {
    static ANCHOR: OnceLock<(Instant, Time)> = OnceLock::new();
    let (start, wall) = ANCHOR.get_or_init(|| {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as Time);
        (Instant::now(), wall)
    });
    wall + start.elapsed().as_millis() as Time
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_at_the_wall_clock_and_never_goes_back() {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as Time;
        let a = now_ms();
        assert!(a.abs_diff(wall) < 60_000, "{a} vs {wall}");
        let b = now_ms();
        assert!(b >= a);
    }
}
