//! The round log: the admission rounds' records this node keeps and publishes
//! (`GET /api/rounds`, docs/operating.md#fairness-records). The records themselves, their claims,
//! chain and audit, are `waitingroom_core::round_records`; this is where a node keeps them, signed,
//! in memory and on disk.
//!
//! Every node learns each round that let anyone out from the round's result
//! (`Event::RoundRecorded`), signs its claims with the cluster key itself (Ed25519 is
//! deterministic, so every node gets the same record) and tells the node the record's link,
//! which the next record names as `prev` when this node is the root. The most recent ones are
//! kept in memory, in round order; `waitingroom-node audit` checks them. With `--rounds-log`
//! every record is also appended to a file (one JWS per line), read back at start: the node
//! publishes them again and, as root, goes on from the last.
//!
//! The same records give a cluster-wide fairness figure for `/metrics` ([`RoundLog::fairness`]):
//! every node holds the same signed records, so every node reports the same figure, and none
//! computes it from its own admissions alone.

use std::collections::{BTreeMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::ops::Bound;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use waitingroom_core::Time;
use waitingroom_core::round_records::{self, Cutoff, RoundRecord};

use crate::crypto::Crypto;

/// Records kept by default (a day of 1-s rounds that all let someone out is 86,400).
pub const ROUNDS_KEPT: usize = 100_000;

/// How far back the fairness figure looks.
pub const FAIRNESS_WINDOW_MS: Time = 3_600_000;

/// What the last hour's records say of the order visitors were let out in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fairness {
    /// Records decided in the window (lottery rounds included).
    pub rounds: u64,
    /// Rounds (not lotteries) whose cutoff was below an earlier round's in the window: they
    /// let out visitors queued ahead of some let out before them (re-queued visitors, or an
    /// unfair round; the audit with passes tells which).
    pub rounds_back: u64,
    /// At most this many pairs were let out against queue order in the window: for each
    /// round that went back, its admissions times the admissions of earlier rounds with a
    /// larger cutoff.
    pub inversions_bound: u64,
}

/// The claims the fairness figure needs from one record.
#[derive(Debug, Clone, Copy)]
struct Decided {
    at: Time,
    cutoff: Cutoff,
    admitted: u64,
    lottery: bool,
}

impl From<&RoundRecord> for Decided {
    fn from(r: &RoundRecord) -> Decided {
        Decided {
            at: r.decided_at_ms,
            cutoff: r.cutoff,
            admitted: r.admitted,
            lottery: r.lottery,
        }
    }
}

/// Where a node's records want filling in from a peer ([`RoundLog::sync_point`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncPoint {
    /// Ask for the records after this round (None: from the first).
    pub after: Option<u64>,
    /// The round of the first record whose predecessor is missing (None: no hole, only what
    /// may have come after the newest).
    pub hole: Option<u64>,
}

/// The records this node knows, newest last.
#[derive(Debug)]
pub struct RoundLog {
    crypto: Arc<Crypto>,
    records: Mutex<VecDeque<(u64, String)>>,
    /// The window's records, for [`RoundLog::fairness`], in arrival order.
    recent: Mutex<VecDeque<Decided>>,
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
            recent: Mutex::new(VecDeque::new()),
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
        let mut recent = VecDeque::new();
        for jws in text.lines().map(str::trim) {
            let Some(record) = claims(jws) else {
                continue;
            };
            let Some(at) = insertion_point(&records, record.round, jws) else {
                continue;
            };
            records.insert(at, (record.round, jws.to_owned()));
            if records.len() > kept {
                records.pop_front();
            }
            remember(&mut recent, Decided::from(&record));
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(RoundLog {
            crypto,
            records: Mutex::new(records),
            recent: Mutex::new(recent),
            kept,
            file: Some(Mutex::new(file)),
        })
    }

    /// The last record kept: its round and link (a node goes on from it after a restart).
    pub fn last(&self) -> Option<(u64, String)> {
        let records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        records
            .back()
            .map(|(round, jws)| (*round, round_records::link(jws)))
    }

    /// Signs and keeps `record`; returns its link. Records are kept in round order: a node that
    /// missed a round's result learns its record later, from a later round's ranges, and the
    /// audit reads the chain in the order published. A record kept already is not kept twice. A
    /// record with the number of one kept (a new root that had missed some) is kept too, after
    /// it: the audit reports the fork, which must not be hidden.
    pub fn record(&self, record: &RoundRecord) -> String {
        let jws = self.crypto.sign_record(record);
        let link = round_records::link(&jws);
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(at) = insertion_point(&records, record.round, &jws) else {
            return link;
        };
        if let Some(file) = &self.file {
            let mut file = file.lock().unwrap_or_else(PoisonError::into_inner);
            if let Err(e) = writeln!(file, "{jws}") {
                tracing::error!(error = %e, round = record.round, "rounds log: cannot append");
            }
        }
        records.insert(at, (record.round, jws));
        if records.len() > self.kept {
            records.pop_front();
        }
        drop(records);
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        remember(&mut recent, Decided::from(record));
        link
    }

    /// Keeps `jws`, a record another node published (`crate::app::records_sync`), if it is a
    /// record of this cluster (its signature checked) not kept yet: as [`RoundLog::record`]
    /// keeps one this node signed. Returns its claims when it was new here.
    pub fn keep_signed(&self, jws: &str) -> Option<RoundRecord> {
        let record = self.crypto.verify_record(jws).ok()?;
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        let at = insertion_point(&records, record.round, jws)?;
        if let Some(file) = &self.file {
            let mut file = file.lock().unwrap_or_else(PoisonError::into_inner);
            if let Err(e) = writeln!(file, "{jws}") {
                tracing::error!(error = %e, round = record.round, "rounds log: cannot append");
            }
        }
        records.insert(at, (record.round, jws.to_owned()));
        if records.len() > self.kept {
            records.pop_front();
        }
        drop(records);
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        remember(&mut recent, Decided::from(&record));
        Some(record)
    }

    /// Where this node's records want filling in from a peer: from before the first hole (a
    /// record whose `prev` is no record kept of the round before it; from the first for a log
    /// that does not start at round 0 while it has room), else after the newest kept
    /// (whatever came after it). Holes at or below `skip_below` are not asked about again (no
    /// peer had them). One pass over the records, each link hashed: the caller asks every few
    /// seconds, not per request.
    pub fn sync_point(&self, skip_below: Option<u64>) -> SyncPoint {
        let records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        let skipped = |round: u64| skip_below.is_some_and(|s| round <= s);
        let first = records.front().and_then(|(_, jws)| claims(jws));
        if let Some(first) = &first
            && (first.round > 0 || !first.prev.is_empty())
            && records.len() < self.kept
            && !skipped(first.round)
        {
            let hole = Some(first.round);
            return SyncPoint { after: None, hole };
        }
        // Links of the records of the round before the one at hand, and of the one at hand.
        let (mut before, mut current): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
        let mut current_round = None;
        for (i, (round, jws)) in records.iter().enumerate() {
            if current_round != Some(*round) {
                let adjacent = current_round == Some(round.wrapping_sub(1));
                before = std::mem::take(&mut current);
                if !adjacent {
                    before.clear();
                }
                current_round = Some(*round);
            }
            current.push(round_records::link(jws));
            let missing = i > 0 && claims(jws).is_none_or(|r| !before.contains(&r.prev));
            if missing && !skipped(*round) {
                // From before the round it follows (a fork's other side may be kept already).
                let after = round.checked_sub(2).map(|r| r.min(records[i - 1].0));
                return SyncPoint {
                    after,
                    hole: Some(*round),
                };
            }
        }
        SyncPoint {
            after: records.back().map(|(round, _)| *round),
            hole: None,
        }
    }

    /// The fairness figure of the records decided in the hour before `now`. Lottery rounds
    /// are counted but not judged: their order is drawn, not queued.
    pub fn fairness(&self, now: Time) -> Fairness {
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let since = now.saturating_sub(FAIRNESS_WINDOW_MS);
        let mut f = Fairness::default();
        // Admissions so far by round cutoff: a round that went back is checked against those
        // above its own, normally none, so this stays about linear.
        let mut by_cutoff: BTreeMap<Cutoff, u64> = BTreeMap::new();
        for d in recent.iter().filter(|d| d.at >= since) {
            f.rounds += 1;
            if d.lottery {
                continue;
            }
            let above = (Bound::Excluded(d.cutoff), Bound::Unbounded);
            let ahead: u64 = by_cutoff.range(above).map(|(_, n)| n).sum();
            if ahead > 0 {
                f.rounds_back += 1;
                f.inversions_bound = f
                    .inversions_bound
                    .saturating_add(ahead.saturating_mul(d.admitted));
            }
            *by_cutoff.entry(d.cutoff).or_default() += d.admitted;
        }
        f
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

/// Where record `jws` of `round` goes among `records` (in round order, after those of the same
/// round), or None when it is kept already. Records mostly come in order: the search starts at
/// the newest.
fn insertion_point(records: &VecDeque<(u64, String)>, round: u64, jws: &str) -> Option<usize> {
    let mut at = records.len();
    while at > 0 && records[at - 1].0 >= round {
        if records[at - 1].1 == jws {
            return None;
        }
        if records[at - 1].0 == round {
            break;
        }
        at -= 1;
    }
    // Same round: the ones before this one may hold it too.
    let same = records
        .iter()
        .take(at)
        .rev()
        .take_while(|(r, _)| *r == round);
    if same.clone().any(|(_, k)| k == jws) {
        return None;
    }
    Some(at)
}

/// Keeps `d` among the window's records: those older than the window before the newest go.
fn remember(recent: &mut VecDeque<Decided>, d: Decided) {
    let newest = recent.back().map_or(d.at, |k| k.at.max(d.at));
    recent.push_back(d);
    while recent
        .front()
        .is_some_and(|k| k.at < newest.saturating_sub(FAIRNESS_WINDOW_MS))
    {
        recent.pop_front();
    }
}

/// A record's claims, unverified (a node's own log, read back).
fn claims(jws: &str) -> Option<RoundRecord> {
    serde_json::from_slice(&payload(jws)?).ok()
}

/// A JWS's payload, decoded, unverified.
fn payload(jws: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let payload = jws.split('.').nth(1)?;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()
}

/// A number among a JWS's claims (`round` of a record, `issued_at` of a pass), unverified:
/// to order or find tokens that are checked afterwards.
pub fn claim(jws: &str, name: &str) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(&payload(jws)?).ok()?[name].as_u64()
}

#[cfg(test)]
mod tests {
    use waitingroom_core::round_records::Cutoff;
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
            through: 0,
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

    /// A record learned late (its node missed the round's result) is kept in round order, so
    /// the chain reads in order; a record learned twice is kept once.
    #[test]
    fn records_are_kept_in_round_order_and_once() {
        let log = RoundLog::new(Arc::new(Crypto::generate()), 3);
        log.record(&record(0, String::new()));
        log.record(&record(2, String::new()));
        log.record(&record(1, String::new()));
        log.record(&record(1, String::new()));
        let rounds: Vec<u64> = (log.after(None, 10).iter())
            .map(|jws| claim(jws, "round").unwrap())
            .collect();
        assert_eq!(rounds, [0, 1, 2]);
        log.record(&record(3, String::new()));
        assert_eq!(
            log.after(None, 10).len(),
            3,
            "the oldest goes past the bound"
        );
        assert_eq!(log.last().map(|(r, _)| r), Some(3));
    }

    /// A node that missed rounds (a hole in its list, or the start) asks from before the first
    /// hole, and keeps what a peer signed with the cluster key, in round order, once; a record
    /// signed with another key is not kept. Without a hole it asks after the newest.
    #[test]
    fn the_records_missed_are_asked_for_and_kept_once() {
        let crypto = Arc::new(Crypto::generate());
        let peer = RoundLog::new(crypto.clone(), 10);
        let mut prev = String::new();
        for round in 0..5 {
            prev = peer.record(&record(round, prev));
        }
        let all = peer.after(None, 10);
        let log = RoundLog::new(crypto.clone(), 10);
        let newest = |after| SyncPoint { after, hole: None };
        assert_eq!(log.sync_point(None), newest(None));
        // Rounds 0, 1 and 4 kept: 2 and 3 missed.
        for i in [0, 1, 4] {
            assert!(log.keep_signed(&all[i]).is_some());
        }
        assert!(log.keep_signed(&all[4]).is_none(), "kept once");
        let hole = log.sync_point(None);
        let want = SyncPoint {
            after: Some(1),
            hole: Some(4),
        };
        assert_eq!(hole, want);
        assert_eq!(log.sync_point(Some(4)), newest(Some(4)), "a hole left");
        let other = RoundLog::new(Arc::new(Crypto::generate()), 10);
        other.record(&record(2, String::new()));
        let forged = other.after(None, 10);
        assert!(log.keep_signed(&forged[0]).is_none(), "another key");
        for jws in peer.after(hole.after, 10) {
            log.keep_signed(&jws);
        }
        assert_eq!(log.after(None, 10), all, "in round order");
        assert_eq!(log.sync_point(None), newest(Some(4)));
        // A log that starts after round 0 asks from the first.
        let late = RoundLog::new(crypto, 10);
        assert!(late.keep_signed(&all[3]).is_some());
        let want = SyncPoint {
            after: None,
            hole: Some(3),
        };
        assert_eq!(late.sync_point(None), want);
    }

    /// The fairness figure: rounds whose cutoff went back, and at most how many pairs they let
    /// out against queue order, over the last hour; lotteries are counted, not judged.
    #[test]
    fn the_fairness_figure_counts_rounds_that_went_back() {
        let log = RoundLog::new(Arc::new(Crypto::generate()), 100);
        for round in 0..4 {
            log.record(&record(round, String::new()));
        }
        let in_order = log.fairness(5_000);
        assert_eq!(
            in_order,
            Fairness {
                rounds: 4,
                ..Fairness::default()
            }
        );
        // Round 4 lets 3 out below the cutoffs of rounds 2 and 3 (3 each).
        let back = RoundRecord {
            cutoff: record(1, String::new()).cutoff,
            ..record(4, String::new())
        };
        log.record(&back);
        let lottery = RoundRecord {
            lottery: true,
            ..back.clone()
        };
        log.record(&RoundRecord {
            round: 5,
            ..lottery
        });
        let f = log.fairness(6_000);
        assert_eq!((f.rounds, f.rounds_back, f.inversions_bound), (6, 1, 18));
        assert_eq!(
            log.fairness(6_000 + FAIRNESS_WINDOW_MS).rounds,
            0,
            "an hour on"
        );
    }
}
