//! The chain of round records (waitingroom-distributed/README.md#fairness-records; not in the
//! thesis): every round a root decides to let visitors out of becomes a record (round number,
//! cutoff key, count, root, membership version) that names the link of the one before it.
//!
//! The protocol only numbers and links the records: the driver signs each one
//! (`Event::RoundRecorded`) and hands the signed link back ([`RecordChain::linked`]), and as
//! Ed25519 signatures are deterministic every node's driver gets the same link. Results carry
//! each record down the tree, so every member knows the number the next one takes and a new
//! root goes on from there. Each decided range carries its round's record too (`AdmitRange`),
//! and ranges travel with every count request, count and result: a node that missed a result
//! and lets visitors out under that round's range from a later message learns the record with
//! it, publishes it, and names it on their passes. So every round that lets anyone out is
//! published by every node that lets anyone out under it. A node remembers which round let out
//! the visitors of each recent boundary, to name it on their passes: two roots can decide a round
//! at the same time (a takeover), and a node keeps one range per boundary, so it names the
//! round of the range it let its visitors out under, not just any record of that time.

use std::collections::VecDeque;

use waitingroom_core::round_records::{Cutoff, RoundRecord};
use waitingroom_core::{NodeId, QueueKey, TicketId, Time};

use crate::messages::{AdmitRange, Stamp};

/// Records remembered to name on passes (a visitor leaves within a ticket's life of being let
/// out: 64 rounds is a minute of 1-s rounds that all let someone out; older, the pass names
/// none).
const RECORDED_KEPT: usize = 64;

/// Where this node is in the chain of round records.
#[derive(Debug, Clone, Default)]
pub(crate) struct RecordChain {
    /// The number the next round record takes (one past the last this node knows), and the
    /// last one's link once the driver has signed it
    /// (waitingroom-distributed/README.md#fairness-records). A new root goes on from here.
    chain: (u64, String),
    /// The latest records learned, by their boundary (`decided_at`), round and root: to name
    /// the round on passes, and to publish each record once.
    recorded: VecDeque<(Time, u64, NodeId)>,
    /// The latest boundaries this node let visitors out at, with the round whose range it let
    /// them out under: named on their passes before any other record of that time.
    let_out: VecDeque<(Time, u64)>,
    /// The latest records learned that granted places for joins (`through`), by boundary and
    /// round: a visitor is let straight through only under the grant of one of them.
    granting: VecDeque<(Time, u64)>,
}

impl RecordChain {
    /// The record of a round decided now that lets `admit` out (up to `max_key`, or everyone
    /// before the stamp's time): the next after the last this node knows, naming its link.
    pub(crate) fn next_record(
        &self,
        stamp: &Stamp,
        (admit, max_key): (u64, Option<QueueKey>),
        version: u64,
        lottery: bool,
    ) -> RoundRecord {
        let everyone_before = |t: Time| Cutoff {
            join_time: t.saturating_sub(1),
            id: TicketId(u64::MAX),
            node: NodeId(u64::MAX),
        };
        RoundRecord {
            round: self.chain.0,
            decided_at_ms: stamp.time,
            cutoff: max_key.map_or_else(|| everyone_before(stamp.time), Cutoff::from),
            admitted: admit,
            root: stamp.origin,
            version,
            prev: self.chain.1.clone(),
            lottery,
            through: 0,
        }
    }

    /// A round's result, or a range it decided, carried `record`. Returns whether it is new
    /// here, and so is for the driver to sign and publish; then its round is named on the
    /// passes of the visitors it let out here. A record not older than the next this node would
    /// number moves the chain on (its link unknown until the driver signs it); an older one (a
    /// result this node missed, learned from a later round's ranges) is published without
    /// moving the chain back.
    pub(crate) fn learn(&mut self, record: &RoundRecord) -> bool {
        let key = (record.decided_at_ms, record.round, record.root);
        if self.recorded.contains(&key) {
            return false;
        }
        if record.round >= self.chain.0 {
            self.chain = (record.round + 1, String::new());
        }
        if self.recorded.len() >= RECORDED_KEPT {
            self.recorded.pop_front();
        }
        self.recorded.push_back(key);
        if record.through > 0 {
            if self.granting.len() >= RECORDED_KEPT {
                self.granting.pop_front();
            }
            self.granting
                .push_back((record.decided_at_ms, record.round));
        }
        true
    }

    /// The round decided at `decided_at` whose record granted places for joins, if this node
    /// knows it: a visitor let straight through under that round's grant names it on their
    /// pass (waitingroom-distributed/README.md#fairness-records).
    pub(crate) fn round_granting_joins(&self, decided_at: Time) -> Option<u64> {
        (self.granting.iter().rev())
            .find(|(t, _)| *t == decided_at)
            .map(|&(_, round)| round)
    }

    /// Whether one of `ranges` (a count carried them up) carries a record at or past the next
    /// number this node would give: a root that took over without it must not number its own
    /// record yet (two records would share a number), nor can it link to it before its driver
    /// has signed it. It publishes it, lets nobody out this round, and goes on from it at the
    /// next.
    pub(crate) fn behind(&self, ranges: &[AdmitRange]) -> bool {
        (ranges.iter().filter_map(|r| r.record.as_ref())).any(|r| r.round >= self.chain.0)
    }

    /// Visitors at boundary `decided_at` are let out here under the range of round `round`.
    pub(crate) fn let_out_by(&mut self, decided_at: Time, round: u64) {
        // A batch let out one at a time names its round at every step.
        if self.let_out.contains(&(decided_at, round)) {
            return;
        }
        if self.let_out.len() >= RECORDED_KEPT {
            self.let_out.pop_front();
        }
        self.let_out.push_back((decided_at, round));
    }

    /// The round whose record let out a visitor who joined at `join_time` and was let out as
    /// decided at `decided_at`, if this node knows it ([`RecordChain::round_decided_at`]). A
    /// round lets out only visitors who joined before its boundary (its cutoff is below it): a
    /// visitor let straight through at the very instant of a boundary was let out by no round,
    /// and their pass names none.
    pub(crate) fn round_letting_out(&self, decided_at: Time, join_time: Time) -> Option<u64> {
        (join_time < decided_at)
            .then(|| self.round_decided_at(decided_at))
            .flatten()
    }

    /// The round whose record let out visitors decided at `decided_at` (a range's boundary, a
    /// pass's `eviction_time`), if this node knows it: the one whose range it let them out
    /// under, else the latest record of that time (deleteMin admission has no ranges).
    pub(crate) fn round_decided_at(&self, decided_at: Time) -> Option<u64> {
        let under = self.let_out.iter().rev().find(|(t, _)| *t == decided_at);
        under.map(|&(_, round)| round).or_else(|| {
            (self.recorded.iter().rev())
                .find(|(t, _, _)| *t == decided_at)
                .map(|&(_, round, _)| round)
        })
    }

    /// Goes on from record `round` (with `link`) kept before a restart, if it is later than
    /// any this node knows.
    pub(crate) fn resume(&mut self, round: u64, link: String) {
        if round + 1 > self.chain.0 {
            self.chain = (round + 1, link);
        }
    }

    /// The number the next record takes, and the last one's link (empty until signed): what a
    /// restart keeps (`node/durable.rs`).
    pub(crate) fn head(&self) -> (u64, &str) {
        (self.chain.0, &self.chain.1)
    }

    /// The latest records learned, by boundary, round and root: a restart keeps them, so the
    /// passes of visitors let out before it still name their round (`node/durable.rs`).
    pub(crate) fn recent(&self) -> Vec<(Time, u64, NodeId)> {
        self.recorded.iter().copied().collect()
    }

    /// Records an earlier life of this node learned ([`RecordChain::recent`]): known, so not
    /// published again, and named on passes.
    pub(crate) fn restore_recent(&mut self, recent: &[(Time, u64, NodeId)]) {
        for &key in recent.iter().rev().take(RECORDED_KEPT).rev() {
            if self.recorded.contains(&key) {
                continue;
            }
            if self.recorded.len() >= RECORDED_KEPT {
                self.recorded.pop_front();
            }
            self.recorded.push_back(key);
        }
    }

    /// The driver signed round `round`'s record: its `link`, for the next record's `prev`.
    pub(crate) fn linked(&mut self, round: u64, link: String) {
        if self.chain.0 == round + 1 {
            self.chain.1 = link;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::stamp;

    fn record(round: u64, decided_at_ms: Time) -> RoundRecord {
        let mut record =
            RecordChain::default().next_record(&stamp(decided_at_ms), (1, None), 2, false);
        record.round = round;
        record
    }

    /// A record names the link the driver signed for the one before it; a result's record
    /// moves the chain on (its link unknown until signed), an older one does not.
    #[test]
    fn records_are_numbered_and_linked_in_order() {
        let mut chain = RecordChain::default();
        let first = chain.next_record(&stamp(1_000), (3, None), 2, false);
        assert_eq!((first.round, first.prev.as_str()), (0, ""));
        assert_eq!(first.cutoff.join_time, 999, "everyone before the boundary");
        assert!(chain.learn(&first));
        assert!(!chain.learn(&first), "published once");
        chain.linked(0, "link-0".into());
        let second = chain.next_record(&stamp(2_000), (1, None), 2, false);
        assert_eq!((second.round, second.prev.as_str()), (1, "link-0"));
        chain.linked(5, "not the last".into());
        assert_eq!(
            chain.next_record(&stamp(2_000), (1, None), 2, false).prev,
            "link-0"
        );
        assert!(chain.learn(&record(7, 3_000)));
        assert_eq!(
            chain.next_record(&stamp(4_000), (1, None), 2, false).round,
            8
        );
        assert_eq!(
            chain.next_record(&stamp(4_000), (1, None), 2, false).prev,
            ""
        );
        assert_eq!(chain.round_decided_at(1_000), Some(0));
        assert_eq!(chain.round_decided_at(3_000), Some(7));
        assert_eq!(chain.round_decided_at(2_000), None);
        // A record missed, learned later from a range: published and named, the chain kept.
        assert!(chain.learn(&record(5, 2_500)));
        assert_eq!(chain.round_decided_at(2_500), Some(5));
        assert_eq!(
            chain.next_record(&stamp(4_000), (1, None), 2, false).round,
            8
        );
    }

    /// Two roots decided a round at the same time: the round named is the one whose range the
    /// node let its visitors out under, whichever record of that time it learned last.
    #[test]
    fn the_round_named_is_the_one_let_out_under() {
        let mut chain = RecordChain::default();
        let mut other = record(6, 7_000);
        other.root = NodeId(2);
        assert!(chain.learn(&record(5, 7_000)));
        chain.let_out_by(7_000, 5);
        assert!(chain.learn(&other));
        assert_eq!(chain.round_decided_at(7_000), Some(5));
        // Without a range (deleteMin admission), the latest record of the time.
        assert!(chain.learn(&record(8, 9_000)));
        assert_eq!(chain.round_decided_at(9_000), Some(8));
        // A visitor who joined at the boundary itself was let out by no round of that time
        // (straight through, at the instant a round was decided).
        assert_eq!(chain.round_letting_out(9_000, 8_999), Some(8));
        assert_eq!(chain.round_letting_out(9_000, 9_000), None);
    }

    /// A root that a count tells of a record it has not reached must not number its own yet;
    /// ranges without records, or with records it knows, hold nothing back.
    #[test]
    fn a_root_behind_the_records_counted_waits_a_round() {
        let range = |record: Option<RoundRecord>| AdmitRange {
            cutoff: 1_000,
            max_key: None,
            version: 2,
            decided_at: 1_000,
            record,
        };
        let mut chain = RecordChain::default();
        assert!(chain.learn(&record(3, 1_000)));
        assert!(!chain.behind(&[range(None), range(Some(record(3, 1_000)))]));
        assert!(chain.behind(&[range(Some(record(4, 1_500)))]));
        assert!(chain.learn(&record(4, 1_500)));
        assert!(!chain.behind(&[range(Some(record(4, 1_500)))]));
    }

    /// A restarted node goes on from the record it kept, unless it knows a later one.
    #[test]
    fn a_restart_resumes_from_the_record_kept() {
        let mut chain = RecordChain::default();
        chain.resume(4, "kept".into());
        let next = chain.next_record(&stamp(1_000), (1, None), 2, false);
        assert_eq!((next.round, next.prev.as_str()), (5, "kept"));
        chain.resume(2, "older".into());
        assert_eq!(
            chain.next_record(&stamp(1_000), (1, None), 2, false).prev,
            "kept"
        );
    }
}
