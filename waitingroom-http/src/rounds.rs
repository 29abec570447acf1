//! The admission rounds' records this node keeps and publishes (`GET /api/rounds`, README
//! "Fairness records").
//!
//! Every node learns each round that let anyone out from the round's result
//! (`Event::RoundRecorded`), signs its claims with the cluster key itself (Ed25519 is
//! deterministic, so every node gets the same record) and tells the node the record's link,
//! which the next record names as `prev` when this node is the root. The most recent ones are
//! kept in memory, in round order; `waitingroom-node audit` checks them. With `--rounds-log`
//! every record is also appended to a file (one JWS per line), read back at start: the node
//! publishes them again and, as root, goes on from the last.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use waitingroom_core::rounds::{self, RoundRecord};

use crate::crypto::Crypto;

/// Records kept by default (a day of 1-s rounds that all let someone out is 86,400).
pub const ROUNDS_KEPT: usize = 100_000;

/// The records this node knows, newest last.
#[derive(Debug)]
pub struct RoundLog {
    crypto: Arc<Crypto>,
    records: Mutex<VecDeque<(u64, String)>>,
    /// Most records kept (`--rounds-kept`).
    kept: usize,
    /// The `--rounds-log` file, appended to.
    file: Option<Mutex<File>>,
}

impl RoundLog {
    /// An empty log signing with `crypto`'s current key, keeping the newest `kept` records.
    pub fn new(crypto: Arc<Crypto>, kept: usize) -> Self {
        RoundLog {
            crypto,
            records: Mutex::new(VecDeque::new()),
            kept,
            file: None,
        }
    }

    /// A log that also appends to `path`, holding the records the file holds already (the
    /// newest `kept`); lines that are not records are skipped.
    pub fn with_file(crypto: Arc<Crypto>, kept: usize, path: &Path) -> std::io::Result<Self> {
        let text = match std::fs::read_to_string(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            other => other?,
        };
        let mut records = VecDeque::new();
        for jws in text.lines().map(str::trim) {
            let Some(round) = claim(jws, "round") else {
                continue;
            };
            if records.len() >= kept {
                records.pop_front();
            }
            records.push_back((round, jws.to_owned()));
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(RoundLog {
            crypto,
            records: Mutex::new(records),
            kept,
            file: Some(Mutex::new(file)),
        })
    }

    /// The last record kept: its round and link (a node goes on from it after a restart).
    pub fn last(&self) -> Option<(u64, String)> {
        let records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        records
            .back()
            .map(|(round, jws)| (*round, rounds::link(jws)))
    }

    /// Signs and keeps `record`; returns its link. A record whose number is not after the last
    /// kept (a new root that had missed some) is kept too, in arrival order: the audit reports
    /// the fork or gap, which must not be hidden.
    pub fn record(&self, record: &RoundRecord) -> String {
        let jws = self.crypto.sign_record(record);
        let link = rounds::link(&jws);
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        if records.len() >= self.kept {
            records.pop_front();
        }
        if let Some(file) = &self.file {
            let mut file = file.lock().unwrap_or_else(PoisonError::into_inner);
            if let Err(e) = writeln!(file, "{jws}") {
                tracing::error!(error = %e, round = record.round, "rounds log: cannot append");
            }
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

/// A number among a JWS's claims (`round` of a record, `issued_at` of a pass), unverified:
/// to order or find tokens that are checked afterwards.
pub fn claim(jws: &str, name: &str) -> Option<u64> {
    use base64::Engine as _;
    let payload = jws.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    serde_json::from_slice::<serde_json::Value>(&bytes).ok()?[name].as_u64()
}

#[cfg(test)]
mod tests {
    use waitingroom_core::rounds::Cutoff;
    use waitingroom_core::{NodeId, TicketId};

    use super::*;

    fn record(round: u64, prev: String) -> RoundRecord {
        RoundRecord {
            round,
            decided_at_ms: 1_000 * (round + 1),
            cutoff: Cutoff {
                join_time: round,
                id: TicketId(round),
                node: NodeId(1),
            },
            admitted: 3,
            root: NodeId(1),
            version: 2,
            prev,
            lottery: false,
        }
    }

    /// `--rounds-log`: records are appended, read back at start (lines that are not records
    /// skipped), published again, and the last is where a restarted node goes on from.
    #[test]
    fn the_rounds_log_outlives_a_restart() {
        let path = std::env::temp_dir().join(format!("wr-rounds-{}.log", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let crypto = Arc::new(Crypto::generate());
        let log = RoundLog::with_file(crypto.clone(), 10, &path).unwrap();
        let first = log.record(&record(0, String::new()));
        let second = log.record(&record(1, first));
        drop(log);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| writeln!(f, "not a record"))
            .unwrap();
        let again = RoundLog::with_file(crypto, 10, &path).unwrap();
        assert_eq!(again.after(None, 10).len(), 2);
        assert_eq!(again.after(Some(0), 10).len(), 1);
        assert_eq!(again.last(), Some((1, second)));
        let _ = std::fs::remove_file(&path);
    }
}
