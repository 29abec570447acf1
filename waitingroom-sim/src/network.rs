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

    /// The region of node slot `slot` (see `--regions`).
    pub fn region_of(&self, slot: usize) -> u32 {
        (slot as u64 % u64::from(self.options.regions.max(1))) as u32
    }

    /// The delays after which the copies of one message from slot `from` to slot `to` arrive:
    /// inside a region as [`Network::delays`], between two with the inter-region latency.
    pub fn delays_between(&mut self, from: usize, to: usize) -> [Option<Time>; 2] {
        let latency = if self.region_of(from) == self.region_of(to) {
            self.options.latency
        } else {
            self.options.inter_region_latency
        };
        self.delays_with(latency)
    }

    /// The delays after which the copies of one message arrive: none if it is lost, two if it
    /// is duplicated.
    pub fn delays(&mut self) -> [Option<Time>; 2] {
        self.delays_with(self.options.latency)
    }

    fn delays_with(&mut self, latency: Latency) -> [Option<Time>; 2] {
        self.stats.sent += 1;
        let loss = self.options.loss_probability;
        if loss > 0.0 && self.rng.random_bool(loss) {
            self.stats.lost += 1;
            return [None, None];
        }
        let first = self.one_delay(latency);
        let dup = self.options.duplicate_probability;
        let second = if dup > 0.0 && self.rng.random_bool(dup) {
            self.stats.duplicated += 1;
            Some(self.one_delay(latency))
        } else {
            None
        };
        [Some(first), second]
    }

    fn one_delay(&mut self, latency: Latency) -> Time {
        let base = match latency {
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

    /// Slots take their regions in turn; a message between two regions takes the
    /// inter-region latency, one inside a region the plain latency.
    #[test]
    fn regions_take_the_inter_region_latency_between_them() {
        let mut n = net(NetworkOptions {
            latency: Latency::Fixed(5),
            regions: 3,
            inter_region_latency: Latency::Fixed(80),
            ..NetworkOptions::default()
        });
        assert_eq!(
            (0..7).map(|s| n.region_of(s)).collect::<Vec<_>>(),
            [0, 1, 2, 0, 1, 2, 0]
        );
        assert_eq!(n.delays_between(0, 3), [Some(5), None]);
        assert_eq!(n.delays_between(4, 1), [Some(5), None]);
        assert_eq!(n.delays_between(0, 1), [Some(80), None]);
        assert_eq!(n.delays_between(5, 3), [Some(80), None]);
        // One region (the default): every pair is inside it.
        let mut one = net(NetworkOptions {
            latency: Latency::Fixed(5),
            inter_region_latency: Latency::Fixed(80),
            ..NetworkOptions::default()
        });
        assert_eq!(one.delays_between(0, 1), [Some(5), None]);
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
