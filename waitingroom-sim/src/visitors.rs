//! Simulated visitors: when they arrive, how patient they are, and where each one stands.
//!
//! Visitors are plain arrays indexed by a `u32` visitor number (numbered in arrival order), and
//! each has at most one pending event, so a million of them cost tens of megabytes and no
//! per-visitor task.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use waitingroom_core::Time;

use crate::config::{Arrival, WorkloadOptions};

/// Where a visitor stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Not arrived yet.
    Coming,
    /// Queued, checking in every refresh interval.
    Waiting,
    /// Admitted and holding a pass.
    OnSite,
    /// Gone after their visit.
    Done,
    /// Gave up waiting.
    Abandoned,
    /// The waiting room refused them (an expired ticket, for example): they lost their place.
    Refused,
    /// Admitted, but they keep checking in with their ticket instead of leaving the queue
    /// (a banked admission).
    Banking,
    /// Gave their pass back early; they will try it again.
    Released,
}

/// Every visitor of a run.
pub struct Visitors {
    /// Arrival time, ascending (visitor `i` is the `i`-th to arrive).
    pub arrival: Vec<Time>,
    /// When the visitor gives up if still waiting; `Time::MAX` for the patient ones. Empty
    /// when everyone is patient (76 MB less for ten million visitors); ask [`Self::gives_up`].
    pub give_up_at: Vec<Time>,
    /// A random ticket id, for strategies that do not issue their own.
    pub ticket: Vec<u64>,
    /// Where each visitor stands.
    pub phase: Vec<Phase>,
    /// When each admitted visitor's pass expires (valid while `now < pass_expires`).
    pub pass_expires: Vec<Time>,
    /// Visitors not yet finished (not arrived, waiting, or on the site without having given
    /// their place up yet): the run ends when this reaches 0.
    pub unfinished: u64,
}

impl Visitors {
    /// Draws the visitors of a run: arrival times from the arrival process, shifted to open at
    /// `start`, and who gives up when.
    pub fn generate(cfg: &WorkloadOptions, start: Time, rng: &mut ChaCha8Rng) -> Self {
        let n = cfg.users as usize;
        let window = cfg.window_ms;
        let mut arrival: Vec<Time> = match cfg.arrival {
            Arrival::Uniform => (0..n).map(|_| rng.random_range(0..window)).collect(),
            Arrival::Flash => {
                let burst = cfg.flash_ms.clamp(1, window);
                (0..n)
                    .map(|_| {
                        if rng.random_bool(cfg.flash_share.clamp(0.0, 1.0)) {
                            rng.random_range(0..burst)
                        } else {
                            rng.random_range(0..window)
                        }
                    })
                    .collect()
            }
            Arrival::Poisson => {
                let mean_gap = window as f64 / cfg.users.max(1) as f64;
                let mut t = 0.0f64;
                (0..n)
                    .map(|_| {
                        let u: f64 = 1.0 - rng.random::<f64>();
                        t += -u.ln() * mean_gap;
                        t as Time
                    })
                    .collect()
            }
        };
        arrival.sort_unstable();
        for a in &mut arrival {
            *a += start;
        }
        let abandon = cfg.abandon_probability;
        let give_up_at = if abandon > 0.0 {
            let patience = cfg.patience_ms as f64;
            arrival
                .iter()
                .map(|&a| {
                    if rng.random_bool(abandon.clamp(0.0, 1.0)) {
                        let u: f64 = 1.0 - rng.random::<f64>();
                        a + (-u.ln() * patience) as Time
                    } else {
                        Time::MAX
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        let ticket = (0..n).map(|_| rng.random::<u64>()).collect();
        Visitors {
            arrival,
            give_up_at,
            ticket,
            phase: vec![Phase::Coming; n],
            pass_expires: vec![0; n],
            unfinished: n as u64,
        }
    }

    /// Number of visitors.
    pub fn len(&self) -> usize {
        self.arrival.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.arrival.is_empty()
    }

    /// Whether visitor `v`, still waiting at `now`, has run out of patience.
    pub fn gives_up(&self, v: usize, now: Time) -> bool {
        self.give_up_at.get(v).is_some_and(|&at| now >= at)
    }

    /// When a visitor shows up next: at the time they were `asked` to if it is in the future,
    /// else after `refresh`; a little late either way, by up to `jitter` (uniform), as real
    /// clients and browsers are.
    pub fn next_check_in(
        now: Time,
        asked: Option<Time>,
        refresh: Time,
        jitter: Time,
        rng: &mut ChaCha8Rng,
    ) -> Time {
        let late = if jitter > 0 {
            rng.random_range(0..=jitter)
        } else {
            0
        };
        let due = asked.filter(|&t| t > now).unwrap_or(now + refresh.max(1));
        due + late
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeds::{Stream, rng};

    fn draw(cfg: &WorkloadOptions) -> Visitors {
        Visitors::generate(cfg, 1_000, &mut rng(3, Stream::Arrivals))
    }

    #[test]
    fn uniform_arrivals_are_sorted_and_inside_the_window() {
        let v = draw(&WorkloadOptions::default());
        assert_eq!(v.len(), 500);
        assert!(v.arrival.windows(2).all(|w| w[0] <= w[1]));
        assert!(v.arrival.iter().all(|&a| (1_000..101_000).contains(&a)));
        assert!(v.give_up_at.is_empty() && !v.gives_up(0, Time::MAX));
    }

    #[test]
    fn flash_crowd_front_loads_and_poisson_spreads() {
        let cfg = WorkloadOptions {
            arrival: Arrival::Flash,
            users: 10_000,
            ..WorkloadOptions::default()
        };
        let v = draw(&cfg);
        let early = v.arrival.iter().filter(|&&a| a < 6_000).count();
        assert!(early > 8_000, "{early}");
        let cfg = WorkloadOptions {
            arrival: Arrival::Poisson,
            users: 10_000,
            ..WorkloadOptions::default()
        };
        let v = draw(&cfg);
        let last = *v.arrival.last().unwrap();
        assert!((90_000..112_000).contains(&last), "{last}");
    }

    #[test]
    fn some_abandon_when_asked() {
        let cfg = WorkloadOptions {
            abandon_probability: 0.5,
            ..WorkloadOptions::default()
        };
        let v = draw(&cfg);
        let quitters = v.give_up_at.iter().filter(|&&g| g != Time::MAX).count();
        assert!((180..320).contains(&quitters), "{quitters}");
        let (quitter, at) = (v.give_up_at.iter().enumerate())
            .find(|(_, g)| **g != Time::MAX)
            .unwrap();
        assert!(!v.gives_up(quitter, at - 1) && v.gives_up(quitter, *at));
    }
}
