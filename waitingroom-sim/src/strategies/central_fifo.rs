//! One perfect global queue: every eviction lets out exactly the smallest keys (join time, then
//! ticket id). No distributed waiting room can be fairer; its Kendall-Tau is 0.

use std::collections::BTreeSet;

use rand_chacha::ChaCha8Rng;
use waitingroom_core::Time;

use super::Discipline;

/// The global queue, ordered by (join time, ticket id).
#[derive(Default)]
pub(crate) struct CentralFifo {
    queue: BTreeSet<(Time, u64, u32)>,
}

impl Discipline for CentralFifo {
    fn insert(&mut self, v: u32, join: Time, ticket: u64, _rng: &mut ChaCha8Rng) {
        self.queue.insert((join, ticket, v));
    }

    fn pop(&mut self, _rng: &mut ChaCha8Rng) -> Option<u32> {
        self.queue.pop_first().map(|(_, _, v)| v)
    }

    fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}
