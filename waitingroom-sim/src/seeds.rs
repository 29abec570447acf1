//! Independent random streams derived from the one run seed.
//!
//! Each concern (arrivals, visitor behaviour, network, disturbances, node seeds) draws from its
//! own stream, so that changing how often one of them draws does not shift the others: the four
//! strategies see exactly the same visitors arriving at exactly the same times.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// What a random stream is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Stream {
    /// Arrival times, ticket ids of baseline visitors, who abandons.
    Arrivals = 1,
    /// Check-in jitter and load-balancer choices.
    Visitors = 2,
    /// Latency, loss, duplication, reordering.
    Network = 3,
    /// Disturbance times and victims.
    Disturbances = 4,
    /// Seeds handed to the protocol nodes.
    Nodes = 5,
    /// Random choices of the baseline strategies.
    Baseline = 6,
    /// What the swarm switches on for a seed (`crate::swarm`).
    Swarm = 7,
    /// Where the simulated operator makes an action again that no round carried.
    Operator = 8,
}

/// SplitMix64: a fast bijective mixer, used to turn (seed, stream) into well-spread seeds.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The generator of one stream of one run.
pub fn rng(seed: u64, stream: Stream) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(mix(seed ^ mix(stream as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngExt;

    #[test]
    fn streams_are_distinct_and_repeatable() {
        let a: u64 = rng(7, Stream::Network).random();
        let b: u64 = rng(7, Stream::Network).random();
        let c: u64 = rng(7, Stream::Visitors).random();
        let d: u64 = rng(8, Stream::Network).random();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
    }
}
