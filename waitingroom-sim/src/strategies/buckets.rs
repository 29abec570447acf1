//! Cloudflare's waiting room: visitors are grouped by the minute they arrived in (the
//! `bucketId`); the oldest bucket is let out first, and within a bucket the order is random
//! (whoever happens to refresh when places free up). Fair across minutes, a lottery within one.

use std::collections::BTreeMap;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use waitingroom_core::Time;

use super::Discipline;

/// Length of one bucket.
const BUCKET_MS: Time = 60_000;

/// Visitors by arrival minute.
#[derive(Default)]
pub(crate) struct Buckets {
    buckets: BTreeMap<Time, Vec<u32>>,
}

impl Discipline for Buckets {
    fn insert(&mut self, v: u32, join: Time, _ticket: u64, _rng: &mut ChaCha8Rng) {
        self.buckets.entry(join / BUCKET_MS).or_default().push(v);
    }

    fn pop(&mut self, rng: &mut ChaCha8Rng) -> Option<u32> {
        let mut oldest = self.buckets.first_entry()?;
        let members = oldest.get_mut();
        let v = members.swap_remove(rng.random_range(0..members.len()));
        if members.is_empty() {
            oldest.remove();
        }
        Some(v)
    }

    fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}
