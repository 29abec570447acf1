//! When the cluster is disturbed: crashes, restarts, additions and partitions, at random seeded
//! times within the arrival window (as in the thesis) or at scripted times.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use waitingroom_core::Time;

use crate::config::{Disturbance, FaultOptions};

/// Every planned disturbance of a run whose arrival window opens at `start` and lasts
/// `window_ms`, in time order (ties keep plan order).
pub fn plan(
    cfg: &FaultOptions,
    start: Time,
    window_ms: Time,
    rng: &mut ChaCha8Rng,
) -> Vec<(Time, Disturbance)> {
    let window = window_ms.max(1);
    let mut out = Vec::new();
    let mut random = |what: Disturbance, n: u32, out: &mut Vec<(Time, Disturbance)>| {
        for _ in 0..n {
            out.push((start + rng.random_range(0..window), what));
        }
    };
    random(Disturbance::Crash, cfg.churn, &mut out);
    random(Disturbance::Add, cfg.churn, &mut out);
    random(Disturbance::Restart, cfg.restarts, &mut out);
    random(
        Disturbance::Partition(cfg.partition_kind),
        cfg.partitions,
        &mut out,
    );
    out.extend(cfg.script.iter().map(|s| (start + s.at, s.what)));
    out.sort_by_key(|&(t, _)| t);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Scripted;
    use crate::seeds::{Stream, rng};

    #[test]
    fn churn_gives_as_many_crashes_as_additions_inside_the_window() {
        let cfg = FaultOptions {
            churn: 5,
            script: vec![Scripted {
                at: 7,
                what: Disturbance::Restart,
            }],
            ..FaultOptions::default()
        };
        let p = plan(&cfg, 1_000, 100_000, &mut rng(1, Stream::Disturbances));
        assert_eq!(p.len(), 11);
        let crashes = p.iter().filter(|d| d.1 == Disturbance::Crash).count();
        let adds = p.iter().filter(|d| d.1 == Disturbance::Add).count();
        assert_eq!((crashes, adds), (5, 5));
        assert!(p.iter().all(|d| (1_000..101_000).contains(&d.0)));
        assert!(p.windows(2).all(|w| w[0].0 <= w[1].0));
        assert!(p.contains(&(1_007, Disturbance::Restart)));
    }
}
