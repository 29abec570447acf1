//! The engine's visitor table, laid out in join order.
//!
//! Every check-in looks its visitor's record up. In a hash table the records of the visitors
//! who wait (a few thousand per node in a large run) lie scattered among those of visitors who
//! already left (kept until their ticket expires), one cache line each, behind control bytes
//! that cost a line of their own: with many nodes in one process the lookup misses the cache
//! twice on nearly every check-in (docs/benchmarks.md#simulator-hot-path-changes-measured). But a
//! room lets its visitors out in the order they joined, so it keeps its own visitors' records in a
//! ring in the order their ticket ids were issued: the ones still waiting sit together at its back,
//! where the check-ins and expiries of the last seconds kept them cached, and a record is found by
//! the sequence number its ticket id carries in its low 32 bits (scrambled under the high 32, which
//! stay random), without hashing. Ids this room did not issue (visitors re-queued here after
//! their node went away, lottery draws) and ids whose slot is gone go to a hash map.
//!
//! The ring spans every id issued since the oldest record it still holds; slots of records
//! removed meanwhile (visitors who stopped checking in) stay empty until the front catches up.
//! As a room lets visitors out in join order, that oldest record is at most the longest wait
//! plus a ticket expiry old; while a queue stands still for long (paused, or before a scheduled
//! start) the empty slots of those who gave up meanwhile cost tens of bytes each until then.

use std::collections::{HashMap, VecDeque};
use std::fmt;

use crate::queue::TicketHasher;
use crate::types::TicketId;

/// The visitors' records by ticket id: a slot in a ring for each id issued here, a hash map for
/// the rest.
#[derive(Clone)]
pub(crate) struct VisitorTable<V> {
    /// Slot `i` belongs to the id with sequence number `next - ring.len() + i` (wrapping), and
    /// holds its record while one is kept there.
    ring: VecDeque<Option<(TicketId, V)>>,
    /// Sequence number of the next id issued.
    next: u32,
    /// Records of ids without a slot of their own.
    others: HashMap<TicketId, V, TicketHasher>,
}

impl<V> Default for VisitorTable<V> {
    fn default() -> Self {
        VisitorTable {
            ring: VecDeque::new(),
            next: 0,
            others: HashMap::with_hasher(TicketHasher),
        }
    }
}

impl<V: fmt::Debug> fmt::Debug for VisitorTable<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ring = self.ring.iter().flatten().map(|(id, v)| (id, v));
        f.debug_map().entries(ring).entries(&self.others).finish()
    }
}

impl<V> VisitorTable<V> {
    /// A new ticket id, its slot taken from now on: the high half of `random`, and the next
    /// sequence number scrambled under it.
    pub(crate) fn issue(&mut self, random: u64) -> TicketId {
        let high = (random >> 32) as u32;
        let id = TicketId(u64::from(high) << 32 | u64::from(scramble(self.next) ^ high));
        self.next = self.next.wrapping_add(1);
        self.ring.push_back(None);
        id
    }

    /// Where `id`'s slot is, if it still has one (the ring never grows near 2^32 slots: each
    /// takes tens of bytes).
    fn index(&self, id: TicketId) -> Option<usize> {
        let seq = unscramble(id.0 as u32 ^ (id.0 >> 32) as u32);
        let first = self.next.wrapping_sub(self.ring.len() as u32);
        let i = seq.wrapping_sub(first) as usize;
        (i < self.ring.len()).then_some(i)
    }

    /// The ring index of `id`'s record, if the ring holds it.
    fn in_ring(&self, id: TicketId) -> Option<usize> {
        let i = self.index(id)?;
        matches!(&self.ring[i], Some((held, _)) if *held == id).then_some(i)
    }

    pub(crate) fn get(&self, id: TicketId) -> Option<&V> {
        match self.in_ring(id) {
            Some(i) => self.ring[i].as_ref().map(|(_, v)| v),
            None => self.others.get(&id),
        }
    }

    pub(crate) fn get_mut(&mut self, id: TicketId) -> Option<&mut V> {
        match self.in_ring(id) {
            Some(i) => self.ring[i].as_mut().map(|(_, v)| v),
            None => self.others.get_mut(&id),
        }
    }

    /// Every record, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (TicketId, &V)> {
        let ring = self.ring.iter().flatten().map(|(id, v)| (*id, v));
        ring.chain(self.others.iter().map(|(id, v)| (*id, v)))
    }

    pub(crate) fn contains(&self, id: TicketId) -> bool {
        self.get(id).is_some()
    }

    /// Keeps `v` as `id`'s record, replacing the one kept before.
    pub(crate) fn insert(&mut self, id: TicketId, v: V) {
        if let Some(old) = self.get_mut(id) {
            *old = v;
            return;
        }
        match self.index(id) {
            Some(i) if self.ring[i].is_none() => self.ring[i] = Some((id, v)),
            _ => {
                self.others.insert(id, v);
            }
        }
    }

    /// Drops `id`'s record and returns it; empty slots at the front of the ring go with it.
    pub(crate) fn remove(&mut self, id: TicketId) -> Option<V> {
        let Some(i) = self.in_ring(id) else {
            return self.others.remove(&id);
        };
        let (_, v) = self.ring[i].take()?;
        while matches!(self.ring.front(), Some(None)) {
            self.ring.pop_front();
        }
        Some(v)
    }

    /// Asks the processor to fetch `id`'s slot into the cache (both lines it may span), without
    /// waiting for it: a caller that knows which visitor comes next overlaps that miss with
    /// its current work.
    pub(crate) fn prefetch(&self, id: TicketId) {
        let Some(i) = self.index(id) else {
            return;
        };
        let (front, back) = self.ring.as_slices();
        for i in [i, i + 1] {
            if i < front.len() {
                prefetch_index::prefetch_index(front, i);
            } else if i - front.len() < back.len() {
                prefetch_index::prefetch_index(back, i - front.len());
            }
        }
    }

    /// Number of records.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.ring.iter().flatten().count() + self.others.len()
    }
}

/// A bijection of 32-bit numbers that looks random (Chris Wellons' `lowbias32`): ids stay as
/// evenly spread as wholly random ones (the protocol spreads visitors' check-ins by ticket id
/// and breaks ties with it; mixed-chaos sweeps with plain, random and scrambled ids are compared
/// in docs/benchmarks.md#simulator-hot-path-changes-measured) and do not show how many joined.
fn scramble(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^ (x >> 16)
}

/// The inverse of [`scramble`] (its multipliers' inverses modulo 2^32).
fn unscramble(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x4302_1123);
    x ^= (x >> 15) ^ (x >> 30);
    x = x.wrapping_mul(0x1d69_e2a5);
    x ^ (x >> 16)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn scrambling_is_undone() {
        for x in [0, 1, 2, 0x8000_0000, u32::MAX]
            .into_iter()
            .chain((0..100_000).map(|i| i * 42_949))
        {
            assert_eq!(unscramble(scramble(x)), x);
        }
        assert_ne!(
            scramble(1).wrapping_sub(scramble(0)),
            1,
            "neighbours do not stay neighbours"
        );
    }

    #[test]
    fn issued_ids_keep_the_random_high_half_over_a_scrambled_count() {
        let mut records = VisitorTable::<u8>::default();
        let a = records.issue(0xabcd_ef01_2345_6789);
        let b = records.issue(0x1111_2222_ffff_ffff);
        assert_eq!(
            a,
            TicketId(0xabcd_ef01 << 32 | u64::from(scramble(0) ^ 0xabcd_ef01))
        );
        assert_eq!(
            b,
            TicketId(0x1111_2222 << 32 | u64::from(scramble(1) ^ 0x1111_2222))
        );
        assert_eq!(records.get(a), None);
        records.insert(a, 1);
        records.insert(b, 2);
        assert_eq!((records.get(a), records.get(b)), (Some(&1), Some(&2)));
        assert!(records.others.is_empty(), "issued ids live in the ring");
    }

    #[test]
    fn the_front_goes_once_its_records_are_gone() {
        let mut records = VisitorTable::<u8>::default();
        let ids: Vec<_> = (0..4).map(|_| records.issue(0)).collect();
        for &id in &ids {
            records.insert(id, 0);
        }
        records.remove(ids[1]);
        assert_eq!(records.ring.len(), 4, "a hole behind the front stays");
        records.remove(ids[0]);
        assert_eq!(records.ring.len(), 2);
        // The ids whose slots went are kept in the map if they come back.
        records.insert(ids[0], 7);
        assert_eq!(records.get(ids[0]), Some(&7));
        assert_eq!(records.others.len(), 1);
        assert_eq!(records.remove(ids[0]), Some(7));
        assert_eq!(records.len(), 2);
    }

    #[test]
    fn a_foreign_id_in_a_free_slot_does_not_hide_the_owner() {
        let mut records = VisitorTable::<u8>::default();
        let own = records.issue(0x5555_0000_0000_0000);
        // Another node's id with the same sequence number takes the free slot first.
        let foreign = foreign(0, 0x7777);
        records.insert(foreign, 1);
        records.insert(own, 2);
        assert_eq!(
            (records.get(foreign), records.get(own)),
            (Some(&1), Some(&2))
        );
        assert_eq!(records.remove(foreign), Some(1));
        assert_eq!(records.get(own), Some(&2));
        assert_eq!(records.remove(own), Some(2));
        assert_eq!(records.len(), 0);
    }

    /// An id another room issued with sequence number `seq`.
    fn foreign(seq: u32, high: u32) -> TicketId {
        TicketId(u64::from(high) << 32 | u64::from(scramble(seq) ^ high))
    }

    /// One step against the table: issue an id, insert, overwrite or remove one of the ids seen
    /// (issued or foreign), look one up.
    #[derive(Debug, Clone)]
    enum Op {
        Issue(u64),
        Insert(usize, u8),
        Foreign(u64),
        Remove(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => any::<u64>().prop_map(Op::Issue),
            4 => (any::<usize>(), any::<u8>()).prop_map(|(i, v)| Op::Insert(i, v)),
            // Foreign ids mostly collide with issued low halves, to exercise shared slots.
            1 => (0u32..8, any::<u32>()).prop_map(|(seq, high)| Op::Foreign(foreign(seq, high).0)),
            3 => any::<usize>().prop_map(Op::Remove),
        ]
    }

    proptest! {
        #[test]
        fn behaves_like_a_hash_map(ops in prop::collection::vec(op(), 1..300)) {
            let mut records = VisitorTable::<u8>::default();
            let mut model = HashMap::new();
            let mut ids = Vec::new();
            for op in ops {
                match op {
                    Op::Issue(random) => ids.push(records.issue(random)),
                    Op::Foreign(id) => ids.push(TicketId(id)),
                    Op::Insert(i, v) if !ids.is_empty() => {
                        let id = ids[i % ids.len()];
                        records.insert(id, v);
                        model.insert(id, v);
                    }
                    Op::Remove(i) if !ids.is_empty() => {
                        let id = ids[i % ids.len()];
                        prop_assert_eq!(records.remove(id), model.remove(&id));
                    }
                    _ => {}
                }
                for id in &ids {
                    prop_assert_eq!(records.get(*id), model.get(id));
                }
                prop_assert_eq!(records.len(), model.len());
            }
        }
    }
}
