//! The network between nodes: latency, loss, duplication, reordering and partitions.
//!
//! Decisions are drawn from the network's own random stream in the order messages are sent,
//! which the event order fixes, so a seed always yields the same deliveries.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use waitingroom_core::Time;

use crate::config::{Latency, NetworkOptions};

/// What the network did, for the report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetStats {
    /// Messages handed to the network.
    pub sent: u64,
    /// Lost at random.
    pub lost: u64,
    /// Delivered twice.
    pub duplicated: u64,
    /// Held back for reordering.
    pub reordered: u64,
    /// Dropped because a partition separated sender and receiver.
    pub cut: u64,
    /// Dropped because the receiver was down.
    pub to_dead: u64,
}

/// The network model of one run.
pub struct Network {
    options: NetworkOptions,
    rng: ChaCha8Rng,
    /// Partition side of each node slot; nodes talk only within a side.
    side: Vec<u8>,
    /// What happened.
    pub stats: NetStats,
}

impl Network {
    /// The network `options` describe, drawing from `rng`.
    pub fn new(options: &NetworkOptions, rng: ChaCha8Rng) -> Self {
        Network {
            options: options.clone(),
            rng,
            side: Vec::new(),
            stats: NetStats::default(),
        }
    }

    /// Whether slots `a` and `b` can talk now.
    pub fn connected(&self, a: usize, b: usize) -> bool {
        self.side_of(a) == self.side_of(b)
    }

    fn side_of(&self, slot: usize) -> u8 {
        self.side.get(slot).copied().unwrap_or(0)
    }

    /// Puts `slots` on the far side of a partition.
    pub fn cut_off(&mut self, slots: &[usize]) {
        for &s in slots {
            if self.side.len() <= s {
                self.side.resize(s + 1, 0);
            }
            self.side[s] = 1;
        }
    }

    /// Heals every partition.
    pub fn heal(&mut self) {
        self.side.clear();
    }

    /// Whether any partition is in force.
    pub fn partitioned(&self) -> bool {
        self.side.iter().any(|&s| s != 0)
    }

    /// The delays after which the copies of one message arrive: none if it is lost, two if it
    /// is duplicated.
    pub fn delays(&mut self) -> [Option<Time>; 2] {
        self.stats.sent += 1;
        let loss = self.options.loss_probability;
        if loss > 0.0 && self.rng.random_bool(loss) {
            self.stats.lost += 1;
            return [None, None];
        }
        let first = self.one_delay();
        let dup = self.options.duplicate_probability;
        let second = if dup > 0.0 && self.rng.random_bool(dup) {
            self.stats.duplicated += 1;
            Some(self.one_delay())
        } else {
            None
        };
        [Some(first), second]
    }

    fn one_delay(&mut self) -> Time {
        let base = match self.options.latency {
            Latency::Fixed(ms) => ms,
            Latency::Uniform { min, max } => self.rng.random_range(min..=max),
            Latency::Pareto { min, alpha, max } => {
                // Inverse transform: min / U^(1/alpha), U in (0, 1].
                let u: f64 = 1.0 - self.rng.random::<f64>();
                let x = min as f64 / u.powf(1.0 / alpha);
                (x.round() as Time).clamp(min, max)
            }
        };
        let (reorder, reorder_ms) = (self.options.reorder_probability, self.options.reorder_ms);
        if reorder > 0.0 && reorder_ms > 0 && self.rng.random_bool(reorder) {
            self.stats.reordered += 1;
            base + self.rng.random_range(1..=reorder_ms)
        } else {
            base
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeds::{Stream, rng};

    fn net(options: NetworkOptions) -> Network {
        Network::new(&options, rng(1, Stream::Network))
    }

    #[test]
    fn uniform_latency_stays_in_range() {
        let mut n = net(NetworkOptions::default());
        for _ in 0..1000 {
            let [a, b] = n.delays();
            assert!((10..=20).contains(&a.unwrap()));
            assert!(b.is_none());
        }
    }

    #[test]
    fn loss_and_duplication_happen_about_as_often_as_asked() {
        let mut n = net(NetworkOptions {
            loss_probability: 0.1,
            duplicate_probability: 0.1,
            ..NetworkOptions::default()
        });
        for _ in 0..10_000 {
            n.delays();
        }
        assert!((800..1200).contains(&n.stats.lost), "{:?}", n.stats);
        assert!((700..1100).contains(&n.stats.duplicated), "{:?}", n.stats);
    }

    #[test]
    fn pareto_is_heavy_tailed_and_capped() {
        let mut n = net(NetworkOptions {
            latency: Latency::Pareto {
                min: 5,
                alpha: 1.2,
                max: 2_000,
            },
            ..NetworkOptions::default()
        });
        let d: Vec<Time> = (0..10_000).map(|_| n.delays()[0].unwrap()).collect();
        assert!(d.iter().all(|&x| (5..=2_000).contains(&x)));
        assert!(d.iter().filter(|&&x| x > 50).count() > 100);
        assert!(d.iter().filter(|&&x| x < 10).count() > 5_000);
    }

    #[test]
    fn partitions_cut_and_heal() {
        let mut n = net(NetworkOptions::default());
        assert!(n.connected(0, 5));
        n.cut_off(&[2]);
        assert!(!n.connected(0, 2));
        assert!(n.connected(0, 1));
        assert!(n.partitioned());
        n.heal();
        assert!(n.connected(0, 2));
    }
}
