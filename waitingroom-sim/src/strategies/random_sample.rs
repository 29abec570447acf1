//! The relaxed distributed priority queue of the thesis (Distributed Virtual Waiting Room, §7.2.2):
//! every node keeps a local queue of the visitors who joined there; each admission asks `d` random
//! nodes for their head and takes the smallest. Simple and scalable, but a visitor can wait behind
//! later arrivals for as long as their node is not sampled.

use std::collections::BTreeSet;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use waitingroom_core::Time;

use super::Discipline;

/// One local queue per node.
pub(crate) struct RandomSample {
    nodes: Vec<BTreeSet<(Time, u64, u32)>>,
    d: usize,
    queued: usize,
    nonempty: Vec<usize>,
}

impl RandomSample {
    pub(crate) fn new(nodes: usize, d: usize) -> Self {
        RandomSample {
            nodes: vec![BTreeSet::new(); nodes.max(1)],
            d: d.max(1),
            queued: 0,
            nonempty: Vec::new(),
        }
    }
}

impl Discipline for RandomSample {
    fn insert(&mut self, v: u32, join: Time, ticket: u64, rng: &mut ChaCha8Rng) {
        // The load balancer sends the visitor to a random node, where they stay.
        let node = rng.random_range(0..self.nodes.len());
        self.nodes[node].insert((join, ticket, v));
        self.queued += 1;
    }

    fn pop(&mut self, rng: &mut ChaCha8Rng) -> Option<u32> {
        self.nonempty.clear();
        self.nonempty
            .extend((0..self.nodes.len()).filter(|&i| !self.nodes[i].is_empty()));
        if self.nonempty.is_empty() {
            return None;
        }
        // Sample d distinct non-empty nodes (partial Fisher-Yates) and take the best head.
        let k = self.d.min(self.nonempty.len());
        let mut best: Option<(usize, (Time, u64, u32))> = None;
        for i in 0..k {
            let j = rng.random_range(i..self.nonempty.len());
            self.nonempty.swap(i, j);
            let node = self.nonempty[i];
            let head = *self.nodes[node].first().expect("node is non-empty");
            if best.is_none_or(|(_, b)| head < b) {
                best = Some((node, head));
            }
        }
        let (node, head) = best?;
        self.nodes[node].remove(&head);
        self.queued -= 1;
        Some(head.2)
    }

    fn is_empty(&self) -> bool {
        self.queued == 0
    }
}
