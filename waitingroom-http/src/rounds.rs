//! The admission rounds' records this node keeps and publishes (`GET /api/rounds`, README
//! "Fairness records").
//!
//! Every node learns each round that let anyone out from the round's result
//! (`Event::RoundRecorded`), signs its claims with the cluster key itself (Ed25519 is
//! deterministic, so every node gets the same record) and tells the node the record's link,
//! which the next record names as `prev` when this node is the root. The most recent ones are
//! kept in memory, in round order; `waitingroom-node audit` checks them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use waitingroom_core::rounds::{self, RoundRecord};

use crate::crypto::Crypto;

/// Records kept (a day of 1-s rounds that all let someone out is 86,400).
pub const ROUNDS_KEPT: usize = 100_000;

/// The records this node knows, newest last.
#[derive(Debug)]
pub struct RoundLog {
    crypto: Arc<Crypto>,
    records: Mutex<VecDeque<(u64, String)>>,
}

impl RoundLog {
    /// An empty log signing with `crypto`'s current key.
    pub fn new(crypto: Arc<Crypto>) -> Self {
        RoundLog {
            crypto,
            records: Mutex::new(VecDeque::new()),
        }
    }

    /// Signs and keeps `record`; returns its link. A record whose number is not after the last
    /// kept (a new root that had missed some) is kept too, in arrival order: the audit reports
    /// the fork or gap, which must not be hidden.
    pub fn record(&self, record: &RoundRecord) -> String {
        let jws = self.crypto.sign_record(record);
        let link = rounds::link(&jws);
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        if records.len() >= ROUNDS_KEPT {
            records.pop_front();
        }
        records.push_back((record.round, jws));
        link
    }

    /// Up to `limit` records with a number above `after` (None: from the first), in the order
    /// they were kept.
    pub fn after(&self, after: Option<u64>, limit: usize) -> Vec<String> {
        let records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        records
            .iter()
            .filter(|(round, _)| after.is_none_or(|a| *round > a))
            .take(limit)
            .map(|(_, jws)| jws.clone())
            .collect()
    }
}
