//! Request latencies as the load generator and the check-in benchmark both keep them: whole
//! microseconds in a `u32` (four bytes a request, enough for 71 minutes), reported in ms.

use std::time::Instant;

/// Microseconds since `t0`.
pub fn micros_since(t0: Instant) -> u32 {
    t0.elapsed().as_micros().min(u128::from(u32::MAX)) as u32
}

/// The `p` quantile (0..=1, nearest rank) of `sorted` microseconds, in ms; 0 for none.
pub fn percentile_ms(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i]) / 1000.0
}

/// The largest of `sorted` microseconds, in ms; 0 for none.
pub fn max_ms(sorted: &[u32]) -> f64 {
    sorted.last().map_or(0.0, |&m| f64::from(m) / 1000.0)
}
